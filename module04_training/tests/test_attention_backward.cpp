// Tests of the attention-backward ladder, run against course::solution and course::exercise
// (built twice; `impl` names the one under test), and against the planted bugs of
// tests/planted/attention_backward_planted.cu, which the same checking helper must reject.
//
// Every case draws fresh random Q, K, V and dO (every batch and head different); O and lse
// come from the CPU forward pass (course::ref::attention_forward in double, rounded to
// float), so the backward pass is tested on its own, not through a GPU forward. dQ, dK, dV
// and the workspace are poisoned with NaN before each launch; the result is compared with
// course::ref::attention_backward (double accumulation) within a tolerance derived from fp32
// rounding (backward_tolerance); the padding between gradient rows must still hold the
// poison afterwards, and the rows of dQ whose query sees no key (causal, N_q > N_k) must be
// exactly 0. A step is only given the cases it supports (step_support()); unsupported
// features are rejected by validation, tested below. Tests with "Large" in their name use
// big shapes and are left out of the compute-sanitizer run.
//
// Beyond the reference: finite differences of the whole forward -> backward chain, the
// row-dot preprocessing kernel on its own, run-to-run determinism, and argument validation.
#include "attention_backward_planted.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module03/attention.hpp"
#include "module04/attention_backward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using course::AttentionLayout;
using course::DeviceBuffer;
using course::HostTensor;
using course::m03::AttentionStrides;
using course::m04::AttentionBackwardArgs;
using course::m04::AttentionBackwardStep;
using course::testing::GpuTest;
using BackwardFn = course::planted::AttentionBackwardFn;
constexpr AttentionLayout BHND = AttentionLayout::BHND;
constexpr AttentionLayout BNHD = AttentionLayout::BNHD;
constexpr AttentionBackwardStep kNaive = AttentionBackwardStep::naive;
constexpr AttentionBackwardStep kFlash = AttentionBackwardStep::flash;

// ------------------------------------------------------------------- cases -----

struct Case {
  std::int64_t B = 1, H = 1, H_kv = 1, N_q = 1, N_k = 1, d = 64;
  AttentionLayout layout = BHND;       ///< storage of Q, K, V, O, dO
  AttentionLayout grad_layout = BHND;  ///< storage of dQ, dK, dV
  std::int64_t pad = 0;                ///< extra floats after each row of the inputs (multiple of 4)
  std::int64_t grad_pad = 0;           ///< extra floats after each gradient row (must keep the poison)
  bool kv_batch_broadcast = false;     ///< K and V batch stride 0: every batch reads batch 0's K, V
  bool causal = false;
  double input_range = 1.0;  ///< Q and K uniform in [-r, r)
  float scale = 0.f;

  std::string name() const {
    std::ostringstream os;
    os << "B" << B << "_H" << H;
    if (H_kv != H) os << "_Hkv" << H_kv;
    os << "_Nq" << N_q << "_Nk" << N_k << "_d" << d << "_" << course::to_string(layout);
    if (grad_layout != layout) os << "_grad" << course::to_string(grad_layout);
    if (pad) os << "_pad" << pad;
    if (grad_pad) os << "_gradpad" << grad_pad;
    if (kv_batch_broadcast) os << "_kvbcast";
    if (causal) os << "_causal";
    if (input_range != 1.0) os << "_x" << input_range;
    if (scale != 0.f) os << "_scale" << scale;
    return os.str();
  }
};

Case make_case(std::int64_t B, std::int64_t H, std::int64_t N_q, std::int64_t N_k, std::int64_t d,
               AttentionLayout layout = BHND, bool causal = false) {
  Case c;
  c.B = B;
  c.H = H;
  c.H_kv = H;
  c.N_q = N_q;
  c.N_k = N_k;
  c.d = d;
  c.layout = layout;
  c.grad_layout = layout;
  c.causal = causal;
  return c;
}

Case with_kv_heads(Case c, std::int64_t H_kv) {
  c.H_kv = H_kv;
  return c;
}

bool supports(AttentionBackwardStep step, const Case& c) {
  const auto s = course::m04::step_support(step);
  if (c.d > s.max_head_dim) return false;
  if (c.causal && !s.causal) return false;
  if (c.H_kv != c.H && !s.grouped_query) return false;
  return true;
}

std::vector<Case> supported(AttentionBackwardStep step, const std::vector<Case>& cases) {
  std::vector<Case> out;
  for (const Case& c : cases)
    if (supports(step, c)) out.push_back(c);
  return out;
}

double effective_scale(const Case& c) {
  return c.scale != 0.f ? static_cast<double>(c.scale) : 1.0 / std::sqrt(static_cast<double>(c.d));
}

course::ref::AttentionOptions options(const Case& c) {
  course::ref::AttentionOptions opts;
  opts.scale = c.scale;
  opts.causal = c.causal;
  return opts;
}

// ------------------------------------------------------------------ inputs -----

/// A [B, H, N, d] tensor stored in `layout` with `pad` floats after each row.
HostTensor<float> make_tensor(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d, AttentionLayout layout,
                              std::int64_t pad, bool batch_broadcast = false) {
  const std::int64_t row = (layout == BHND ? d : H * d) + pad;  // seq stride
  course::Shape strides = layout == BHND ? course::Shape{H * N * row, N * row, row, 1}
                                         : course::Shape{N * row, d, row, 1};
  if (batch_broadcast) strides[0] = 0;
  return HostTensor<float>({B, H, N, d}, strides);
}

AttentionStrides strides_of(const HostTensor<float>& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

struct Inputs {
  HostTensor<float> q, k, v, o, dout;
  std::vector<float> lse;     ///< [B, H, N_q], what the device reads (-inf for rows that see no key)
  std::vector<double> lse64;  ///< the same in double (for the tolerance)
};

/// Fresh Q, K, V, dO; O and lse from the CPU forward pass in double, rounded to float.
Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Inputs in;
  in.q = make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad);
  in.k = make_tensor(c.B, c.H_kv, c.N_k, c.d, c.layout, c.pad, c.kv_batch_broadcast);
  in.v = make_tensor(c.B, c.H_kv, c.N_k, c.d, c.layout, c.pad, c.kv_batch_broadcast);
  in.dout = make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad);
  course::fill_random(in.q, seed, -c.input_range, c.input_range);
  course::fill_random(in.k, seed + 1, -c.input_range, c.input_range);
  course::fill_random(in.v, seed + 2, -1.0, 1.0);
  course::fill_random(in.dout, seed + 3, -1.0, 1.0);
  const auto fwd = course::ref::attention_forward(in.q.cast<double>(), in.k.cast<double>(), in.v.cast<double>(),
                                                  options(c));
  in.o = make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad);
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t i = 0; i < c.N_q; ++i)
        for (std::int64_t e = 0; e < c.d; ++e) in.o({b, h, i, e}) = static_cast<float>(fwd.out({b, h, i, e}));
  in.lse64 = fwd.lse.storage();  // contiguous [B, H, N_q]
  in.lse.assign(in.lse64.begin(), in.lse64.end());
  return in;
}

course::ref::AttentionGrads<double> reference(const Case& c, const Inputs& in) {
  return course::ref::attention_backward(in.q.cast<double>(), in.k.cast<double>(), in.v.cast<double>(),
                                         in.dout.cast<double>(), options(c));
}

// ------------------------------------------------------------------ device -----

struct Grads {
  HostTensor<float> dq, dk, dv;
};

/// One problem on the device: the inputs uploaded once, the gradients and the workspace
/// poisoned before every run.
struct DeviceProblem {
  DeviceBuffer<float> q, k, v, o, dout, lse, dq, dk, dv, ws;
  Grads layout;  ///< shapes and strides of the gradients (values unused)
  AttentionBackwardArgs args;

  DeviceProblem(const Case& c, const Inputs& in, AttentionBackwardStep step)
      : q(in.q.storage()), k(in.k.storage()), v(in.v.storage()), o(in.o.storage()), dout(in.dout.storage()),
        lse(in.lse),
        layout{make_tensor(c.B, c.H, c.N_q, c.d, c.grad_layout, c.grad_pad),
               make_tensor(c.B, c.H_kv, c.N_k, c.d, c.grad_layout, c.grad_pad),
               make_tensor(c.B, c.H_kv, c.N_k, c.d, c.grad_layout, c.grad_pad)} {
    dq = DeviceBuffer<float>(layout.dq.storage().size());
    dk = DeviceBuffer<float>(layout.dk.storage().size());
    dv = DeviceBuffer<float>(layout.dv.storage().size());
    const std::size_t ws_bytes = course::m04::attention_backward_workspace_bytes(step, c.B, c.H, c.N_q, c.N_k);
    ws = DeviceBuffer<float>((ws_bytes + sizeof(float) - 1) / sizeof(float));
    AttentionBackwardArgs& a = args;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.o = o.data();
    a.dout = dout.data();
    a.lse = lse.data();
    a.dq = dq.data();
    a.dk = dk.data();
    a.dv = dv.data();
    a.batch = c.B;
    a.heads = c.H;
    a.kv_heads = c.H_kv;
    a.seq_q = c.N_q;
    a.seq_k = c.N_k;
    a.head_dim = c.d;
    a.q_strides = strides_of(in.q);
    a.k_strides = strides_of(in.k);
    a.v_strides = strides_of(in.v);
    a.o_strides = strides_of(in.o);
    a.do_strides = strides_of(in.dout);
    a.dq_strides = strides_of(layout.dq);
    a.dk_strides = strides_of(layout.dk);
    a.dv_strides = strides_of(layout.dv);
    a.scale = c.scale;
    a.causal = c.causal;
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
  }

  /// Poisons dQ, dK, dV and the workspace, runs `fn`, downloads. NotImplemented propagates.
  Grads run(BackwardFn fn, AttentionBackwardStep step) {
    dq.poison();
    dk.poison();
    dv.poison();
    ws.poison();
    fn(step, args);
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    Grads g = layout;
    g.dq.storage() = dq.download();
    g.dk.storage() = dk.download();
    g.dv.storage() = dv.download();
    return g;
  }
};

// --------------------------------------------------------------- tolerance -----

/// Largest Euclidean norm of a row (b, h, n, :).
double max_row_norm(const HostTensor<float>& t) {
  double worst = 0;
  for (std::int64_t b = 0; b < t.dim(0); ++b)
    for (std::int64_t h = 0; h < t.dim(1); ++h)
      for (std::int64_t n = 0; n < t.dim(2); ++n) {
        const float* row = t.data() + b * t.stride(0) + h * t.stride(1) + n * t.stride(2);
        double s = 0;
        for (std::int64_t e = 0; e < t.dim(3); ++e) s += static_cast<double>(row[e]) * row[e];
        worst = std::max(worst, std::sqrt(s));
      }
  return worst;
}

double max_abs(const HostTensor<float>& t) {
  double m = 0;
  for (float x : t.storage()) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

/// Rows of head (b, h) of `t` as a contiguous [N, d] double matrix.
std::vector<double> head_rows(const HostTensor<float>& t, std::int64_t b, std::int64_t h) {
  const std::int64_t N = t.dim(2), d = t.dim(3);
  std::vector<double> out(static_cast<std::size_t>(N * d));
  for (std::int64_t n = 0; n < N; ++n) {
    const float* row = t.data() + b * t.stride(0) + h * t.stride(1) + n * t.stride(2);
    for (std::int64_t e = 0; e < d; ++e) out[static_cast<std::size_t>(n * d + e)] = row[e];
  }
  return out;
}

/// max over keys j of sum_{query heads h reading j's kv head, rows i} P_ij: how many rows'
/// worth of probability one key collects (1 on average when N_q = N_k, up to N_q * H/H_kv
/// when one key wins every row). dK_j and dV_j are sums with these weights, so their
/// error budget scales with it.
double max_key_weight(const Case& c, const Inputs& in) {
  const double scale = effective_scale(c);
  const std::int64_t group = c.H / c.H_kv, off = c.N_k - c.N_q;
  double worst = 0;
  std::vector<double> colsum(static_cast<std::size_t>(c.N_k));
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t hk = 0; hk < c.H_kv; ++hk) {
      std::fill(colsum.begin(), colsum.end(), 0.0);
      const std::vector<double> K = head_rows(in.k, b, hk);
      for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const std::vector<double> Q = head_rows(in.q, b, h);
        for (std::int64_t i = 0; i < c.N_q; ++i) {
          const double lse = in.lse64[static_cast<std::size_t>((b * c.H + h) * c.N_q + i)];
          if (!std::isfinite(lse)) continue;  // sees no key
          const std::int64_t visible = c.causal ? std::clamp<std::int64_t>(i + off + 1, 0, c.N_k) : c.N_k;
          for (std::int64_t j = 0; j < visible; ++j) {
            double s = 0;
            for (std::int64_t e = 0; e < c.d; ++e) s += Q[i * c.d + e] * K[j * c.d + e];
            colsum[static_cast<std::size_t>(j)] += std::exp(scale * s - lse);
          }
        }
      }
      for (double w : colsum) worst = std::max(worst, w);
    }
  return worst;
}

struct GradTolerance {
  course::Tolerance dq, dk, dv;
};

/// fp32 error budget of the backward pass, element by element (u = 2^-24; norms are the
/// largest row norms |x|, elements the largest |x|):
///  - a recomputed score s = scale q.k carries <= 4 sqrt(d) u scale |q||k| (module 3's rule,
///    Cauchy-Schwarz for sum |q_c k_c|) + a few ulp; P = exp(s - lse) then has a relative
///    error eP <= 2 ds + 2u |lse| (lse is stored in fp32) + the exp's ulps;
///  - dP = dO.V and D = dO.O carry <= 4 sqrt(d) u |dO||V| and 4 sqrt(d) u |dO||O| (+ the
///    row sum of the naive step, sqrt(N_k) u |dP|), so dS_ij = P_ij (dP_ij - D_i) is off by
///    <= P_ij * E with E = eP (|dP| + |D|) + those;
///  - dQ_i = scale sum_j dS_ij K_j: the P_ij of a row sum to 1, error <= scale E max|K|;
///  - dK_j = scale sum_i dS_ij Q_i and dV_j = sum_i P_ij dO_i: the P_ij of a COLUMN sum to
///    W = max_key_weight(), error <= scale E max|Q| W and eP max|dO| W;
/// doubled for safety, plus the rounding of each sum itself (tolerance_for, relative to the
/// rms of the reference gradient).
GradTolerance backward_tolerance(const Case& c, const Inputs& in, const course::ref::AttentionGrads<double>& ref) {
  const double u = 0x1p-24;
  const double sd = std::sqrt(static_cast<double>(c.d));
  const double scale = effective_scale(c);
  const double nq = max_row_norm(in.q), nk = max_row_norm(in.k), nv = max_row_norm(in.v);
  const double ndo = max_row_norm(in.dout), no = max_row_norm(in.o);
  double lse_max = 0;
  for (double l : in.lse64)
    if (std::isfinite(l)) lse_max = std::max(lse_max, std::fabs(l));
  const double ds = 4.0 * sd * u * scale * nq * nk + 32.0 * u;
  const double eP = 2.0 * ds + 2.0 * u * lse_max + 8.0 * u;
  const double mdp = ndo * nv, mD = ndo * no;
  const double e_dp = 4.0 * sd * u * mdp;
  const double e_D = 4.0 * sd * u * mD + 2.0 * u * mD + 8.0 * std::sqrt(static_cast<double>(c.N_k)) * u * mdp;
  const double E = eP * (mdp + mD) + e_dp + e_D;
  const double W = max_key_weight(c, in);
  const std::int64_t group = c.H / c.H_kv;
  GradTolerance t;
  t.dq = course::tolerance_for(course::DType::f32, c.N_k, course::rms(ref.dq));
  t.dq.atol += 2.0 * scale * E * max_abs(in.k);
  t.dk = course::tolerance_for(course::DType::f32, c.N_q * group, course::rms(ref.dk));
  t.dk.atol += 2.0 * scale * E * max_abs(in.q) * W;
  t.dv = course::tolerance_for(course::DType::f32, c.N_q * group, course::rms(ref.dv));
  t.dv.atol += 2.0 * eP * max_abs(in.dout) * W;
  return t;
}

// ------------------------------------------------------------------- check -----

/// Elements of a gradient's storage that no (b, h, n, c) maps to must still be NaN (the poison).
std::int64_t padding_overwritten(const HostTensor<float>& t) {
  std::vector<char> defined(t.storage().size(), 0);
  for (std::int64_t b = 0; b < t.dim(0); ++b)
    for (std::int64_t h = 0; h < t.dim(1); ++h)
      for (std::int64_t n = 0; n < t.dim(2); ++n)
        for (std::int64_t e = 0; e < t.dim(3); ++e) defined[static_cast<std::size_t>(t.offset({b, h, n, e}))] = 1;
  std::int64_t bad = 0;
  for (std::size_t e = 0; e < defined.size(); ++e)
    if (!defined[e] && !std::isnan(t.storage()[e])) ++bad;
  return bad;
}

/// Elements of dQ in rows that see no key (causal, the first N_q - N_k rows) that are not exactly 0.
std::int64_t dead_rows_not_zero(const Case& c, const HostTensor<float>& dq) {
  const std::int64_t dead = c.causal ? std::max<std::int64_t>(0, c.N_q - c.N_k) : 0;
  std::int64_t bad = 0;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t i = 0; i < dead; ++i)
        for (std::int64_t e = 0; e < c.d; ++e) bad += dq({b, h, i, e}) == 0.f ? 0 : 1;
  return bad;
}

/// Compares one result with the reference; returns "" when it passes, else the report.
std::string compare_grads(const Case& c, const Grads& got, const course::ref::AttentionGrads<double>& ref,
                          const GradTolerance& tol) {
  std::string report;
  const auto r_dq = course::compare(got.dq, ref.dq, tol.dq, {"b", "h", "i", "c"});
  if (!r_dq.ok()) report += "\n    dQ: " + r_dq.report();
  const auto r_dk = course::compare(got.dk, ref.dk, tol.dk, {"b", "hk", "j", "c"});
  if (!r_dk.ok()) report += "\n    dK: " + r_dk.report();
  const auto r_dv = course::compare(got.dv, ref.dv, tol.dv, {"b", "hk", "j", "c"});
  if (!r_dv.ok()) report += "\n    dV: " + r_dv.report();
  for (const auto& [t, name] : {std::pair{&got.dq, "dQ"}, {&got.dk, "dK"}, {&got.dv, "dV"}})
    if (const std::int64_t bad = padding_overwritten(*t); bad > 0)
      report += "\n    " + std::to_string(bad) + " padding elements of " + name + " were overwritten";
  if (const std::int64_t bad = dead_rows_not_zero(c, got.dq); bad > 0)
    report += "\n    " + std::to_string(bad) + " elements of dQ in rows that see no key are not exactly 0";
  return report;
}

/// THE check, shared by the real tests and the planted-bug tests: every case (all must be
/// supported by `step`) on fresh data, dQ, dK, dV against the reference. course::NotImplemented
/// propagates: callers wrap it in COURSE_SKIP_IF_NOT_IMPLEMENTED.
::testing::AssertionResult check_cases(BackwardFn fn, AttentionBackwardStep step, const std::vector<Case>& cases,
                                       std::uint64_t seed) {
  std::ostringstream failures;
  int failed = 0;
  for (std::size_t n = 0; n < cases.size(); ++n) {
    const Case& c = cases[n];
    const Inputs in = make_inputs(c, seed + 1009 * n);
    DeviceProblem problem(c, in, step);
    const Grads got = problem.run(fn, step);
    const auto ref = reference(c, in);
    const std::string report = compare_grads(c, got, ref, backward_tolerance(c, in, ref));
    if (!report.empty()) {
      ++failed;
      failures << "\n  " << c.name() << ":" << report;
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << course::m04::step_name(step) << ": " << failed << " of " << cases.size()
                                       << " cases failed (seed " << seed << "):" << failures.str();
}

// ------------------------------------------------------------ case lists -----

/// The sequence lengths: 1, tile-aligned (64, 128, 256), tile +- 1, primes, N_q > N_k
/// (causal: dead rows) and N_q < N_k.
std::vector<Case> length_cases() {
  std::vector<Case> cases;
  const std::int64_t pairs[][2] = {{1, 1}, {113, 203}, {128, 217}, {108, 256}, {239, 1}, {64, 64}, {65, 129}};
  int n = 0;
  for (const auto& p : pairs)
    for (const bool causal : {false, true}) cases.push_back(make_case(1, 2, p[0], p[1], 64, n++ % 3 == 2 ? BNHD : BHND, causal));
  return cases;
}

std::vector<Case> large_length_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    cases.push_back(make_case(1, 2, 1023, 1024, 64, BHND, causal));
    cases.push_back(make_case(1, 1, 1024, 1023, 128, BNHD, causal));
  }
  return cases;
}

std::vector<Case> head_dim_cases() {
  std::vector<Case> cases;
  for (const std::int64_t d : {16, 32, 64, 96, 128})
    for (const AttentionLayout layout : {BHND, BNHD})
      for (const bool causal : {false, true}) {
        cases.push_back(make_case(2, 2, 65, 129, d, layout, causal));
        cases.push_back(make_case(1, 2, 113, 37, d, layout, causal));  // causal: 76 rows see no key
      }
  return cases;
}

std::vector<Case> layout_cases() {
  std::vector<Case> cases;
  Case c = make_case(2, 3, 45, 77, 64, BNHD, false);
  c.grad_layout = BHND;  // inputs as a fused QKV projection writes them; gradients packed per head
  cases.push_back(c);
  c = make_case(2, 3, 45, 77, 32, BHND, true);
  c.grad_layout = BNHD;
  cases.push_back(c);
  c = make_case(2, 2, 70, 70, 64, BHND, true);
  c.pad = 4;
  c.grad_pad = 8;  // padded rows everywhere; the gradients' padding must stay untouched
  cases.push_back(c);
  c = make_case(2, 2, 33, 65, 16, BNHD, false);
  c.pad = 12;
  c.grad_pad = 4;
  cases.push_back(c);
  c = make_case(2, 2, 90, 40, 128, BNHD, true);
  c.grad_layout = BHND;
  c.grad_pad = 4;
  cases.push_back(c);
  c = make_case(3, 2, 40, 50, 64, BHND, false);
  c.kv_batch_broadcast = true;  // one K, V read by every batch entry (batch stride 0); dK, dV per batch
  cases.push_back(c);
  c = make_case(2, 2, 33, 33, 64, BHND, true);
  c.scale = 0.3f;  // an explicit scale instead of 1/sqrt(d)
  cases.push_back(c);
  return cases;
}

/// Many (batch, head) pairs, all with different data: a head/batch mix-up cannot hide.
std::vector<Case> batch_head_cases() {
  return {make_case(3, 5, 33, 33, 64, BHND, false), make_case(3, 5, 33, 47, 32, BNHD, true),
          make_case(8, 16, 40, 40, 64, BHND, true)};
}

/// Grouped-query (H_kv = 2: two query heads per kv head) and multi-query (H_kv = 1)
/// attention: dK and dV of a kv head are sums over its query heads.
std::vector<Case> grouped_query_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    cases.push_back(with_kv_heads(make_case(2, 4, 45, 77, 64, BHND, causal), 2));
    cases.push_back(with_kv_heads(make_case(2, 4, 45, 77, 64, BNHD, causal), 1));
    cases.push_back(with_kv_heads(make_case(1, 4, 113, 203, 32, BNHD, causal), 2));
    cases.push_back(with_kv_heads(make_case(2, 4, 100, 37, 16, BHND, causal), 1));  // dead rows when causal
    cases.push_back(with_kv_heads(make_case(1, 4, 65, 129, 128, BHND, causal), 2));
  }
  return cases;
}

/// Q and K in [-8, 8): scores in the hundreds, P close to one-hot; exp(S - lse) must still
/// be formed without overflow.
std::vector<Case> large_value_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true})
    for (const std::int64_t d : {64, 128}) {
      Case c = make_case(2, 2, 100, 100, d, BHND, causal);
      c.input_range = 8.0;
      cases.push_back(c);
    }
  Case c = with_kv_heads(make_case(1, 4, 77, 130, 64, BNHD, true), 2);
  c.input_range = 8.0;
  cases.push_back(c);
  return cases;
}

/// Cases on which every planted bug is wrong and still in bounds: B == H == H_kv (for the
/// swapped strides), more than 16 keys per row (for the per-tile statistic), causal ones
/// (for the missing mask) and dead rows.
std::vector<Case> planted_cases() {
  return {make_case(2, 2, 37, 37, 64, BHND, true), make_case(3, 3, 20, 45, 32, BNHD, false),
          make_case(2, 2, 45, 45, 16, BNHD, true), make_case(2, 2, 50, 30, 32, BHND, true)};
}

// ------------------------------------------------------------- the ladder -----

class AttentionBackwardTest : public GpuTest,
                              public ::testing::WithParamInterface<course::StepInfo<AttentionBackwardStep>> {
 protected:
  /// Runs the supported subset of `cases`; skips (with the reason) if there is none.
  void check(const std::vector<Case>& cases, const char* what) {
    const AttentionBackwardStep step = GetParam().step;
    const std::vector<Case> mine = supported(step, cases);
    if (mine.empty()) GTEST_SKIP() << "step " << GetParam().name << " supports none of the " << what << " cases";
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(&impl::attention_backward, step, mine, seed())));
  }
};

std::string step_name(const ::testing::TestParamInfo<course::StepInfo<AttentionBackwardStep>>& info) {
  return info.param.name;
}

TEST_P(AttentionBackwardTest, SequenceLengths) { check(length_cases(), "sequence-length"); }
TEST_P(AttentionBackwardTest, LargeSequenceLengths) { check(large_length_cases(), "large sequence-length"); }
TEST_P(AttentionBackwardTest, EveryHeadDimBothLayouts) { check(head_dim_cases(), "head-dim"); }
TEST_P(AttentionBackwardTest, StridesAndLayouts) { check(layout_cases(), "layout"); }
TEST_P(AttentionBackwardTest, DistinctBatchesAndHeads) { check(batch_head_cases(), "batch/head"); }
TEST_P(AttentionBackwardTest, GroupedQueryHeads) { check(grouped_query_cases(), "grouped-query"); }
TEST_P(AttentionBackwardTest, HugeInputValuesStayFinite) { check(large_value_cases(), "large-value"); }
TEST_P(AttentionBackwardTest, BugRevealingCasesPass) { check(planted_cases(), "planted-bug"); }

TEST_P(AttentionBackwardTest, LargeBatchHeads) {
  check({make_case(4, 16, 256, 256, 64, BHND, false), make_case(4, 16, 256, 256, 64, BNHD, true),
         with_kv_heads(make_case(2, 16, 300, 300, 128, BHND, true), 4)},
        "batch*heads = 64");
}

/// N_q = N_k = 1: P = 1, so dV = dO, and dS = 1 * (dP - D) = 0 because D = dO.O = dO.V = dP:
/// dQ and dK vanish (a softmax over one key has no gradient). In fp32, D and dP are two
/// different roundings of the same dot product, so "0" and "= dO" hold within the usual
/// tolerance, not bit for bit.
TEST_P(AttentionBackwardTest, SingleKeyGivesOnlyDv) {
  const AttentionBackwardStep step = GetParam().step;
  const Case c = make_case(2, 3, 1, 1, 32, BNHD, false);
  const Inputs in = make_inputs(c, seed());
  const GradTolerance tol = backward_tolerance(c, in, reference(c, in));
  DeviceProblem problem(c, in, step);
  Grads got;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(got = problem.run(&impl::attention_backward, step));
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t e = 0; e < c.d; ++e) {
        const double want_dv = in.dout({b, h, 0, e});
        EXPECT_NEAR(got.dv({b, h, 0, e}), want_dv, tol.dv.atol + tol.dv.rtol * std::fabs(want_dv))
            << "dV = dO at (b=" << b << ", h=" << h << ", c=" << e << ")";
        EXPECT_NEAR(got.dq({b, h, 0, e}), 0.0, tol.dq.atol) << "dQ = 0 at (b=" << b << ", h=" << h << ", c=" << e << ")";
        EXPECT_NEAR(got.dk({b, h, 0, e}), 0.0, tol.dk.atol) << "dK = 0 at (b=" << b << ", h=" << h << ", c=" << e << ")";
      }
}

// -------------------------------------------------- finite differences -----

/// The whole chain at small shapes: O and lse from module 3's fused forward ON THE GPU, then
/// the step's backward, against central finite differences of L = sum(dO * O) with O
/// computed by course::ref::attention_forward<double> (course::ref::check_gradient). The
/// forward's fp32 rounding and the backward's both show up here; the tolerance (2e-5
/// absolute per unit of gradient, 2e-4 relative) is ~20x their size at these shapes, and
/// far below any wrong term (a dropped D, a wrong scale, a leaked mask are O(0.1)).
TEST_P(AttentionBackwardTest, FiniteDifferencesOfTheWholeChain) {
  const AttentionBackwardStep step = GetParam().step;
  struct Shape {
    std::int64_t H_kv, N_q, N_k;
  };
  std::vector<Shape> shapes = {{2, 5, 5}, {2, 9, 13}, {2, 17, 7}, {2, 16, 16}};
  if (course::m04::step_support(step).grouped_query) shapes.push_back({1, 11, 14});
  const std::int64_t B = 1, H = 2, d = 16;
  std::uint64_t s = seed();
  for (const Shape& shape : shapes)
    for (const bool causal : {false, true}) {
      const Case c = with_kv_heads(make_case(B, H, shape.N_q, shape.N_k, d, BHND, causal), shape.H_kv);
      SCOPED_TRACE(c.name());
      HostTensor<float> q = make_tensor(B, H, c.N_q, d, BHND, 0), k = make_tensor(B, c.H_kv, c.N_k, d, BHND, 0);
      HostTensor<float> v = make_tensor(B, c.H_kv, c.N_k, d, BHND, 0), dout = make_tensor(B, H, c.N_q, d, BHND, 0);
      course::fill_random(q, s++, -1.0, 1.0);
      course::fill_random(k, s++, -1.0, 1.0);
      course::fill_random(v, s++, -1.0, 1.0);
      course::fill_random(dout, s++, -1.0, 1.0);

      // Forward on the GPU (module 3's solution), with the logsumexp.
      DeviceBuffer<float> d_q(q.storage()), d_k(k.storage()), d_v(v.storage()), d_dout(dout.storage());
      DeviceBuffer<float> d_o(q.storage().size()), d_lse(static_cast<std::size_t>(B * H * c.N_q));
      auto fa = course::m03::make_attention_args(d_q.data(), d_k.data(), d_v.data(), d_o.data(), B, H, c.H_kv, c.N_q,
                                                 c.N_k, d, BHND);
      fa.lse = d_lse.data();
      fa.causal = causal;
      course::solution::attention(
          c.H_kv == H ? course::m03::AttentionStep::fused : course::m03::AttentionStep::fused_options, fa);

      // Backward of the step under test.
      DeviceBuffer<float> d_dq(q.storage().size()), d_dk(k.storage().size()), d_dv(v.storage().size());
      d_dq.poison();
      d_dk.poison();
      d_dv.poison();
      const std::size_t ws_bytes = course::m04::attention_backward_workspace_bytes(step, B, H, c.N_q, c.N_k);
      DeviceBuffer<float> ws(ws_bytes / sizeof(float));
      auto a = course::m04::make_attention_backward_args(d_q.data(), d_k.data(), d_v.data(), d_o.data(),
                                                         d_dout.data(), d_lse.data(), d_dq.data(), d_dk.data(),
                                                         d_dv.data(), B, H, c.H_kv, c.N_q, c.N_k, d, BHND);
      a.causal = causal;
      a.workspace = ws.data();
      a.workspace_bytes = ws.bytes();
      COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::attention_backward(step, a));
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> grads[3] = {d_dq.download(), d_dk.download(), d_dv.download()};

      // L(Q, K, V) = sum dO * O in double; each tensor's storage is its logical order (dense BHND).
      const HostTensor<double> q64 = q.cast<double>(), k64 = k.cast<double>(), v64 = v.cast<double>();
      const HostTensor<double> dout64 = dout.cast<double>();
      const char* names[3] = {"dQ", "dK", "dV"};
      for (int which = 0; which < 3; ++which) {
        const HostTensor<double>& base = which == 0 ? q64 : which == 1 ? k64 : v64;
        const auto loss = [&](const std::vector<double>& x) {
          HostTensor<double> qq = q64, kk = k64, vv = v64;
          (which == 0 ? qq : which == 1 ? kk : vv).storage() = x;
          const auto fwd = course::ref::attention_forward(qq, kk, vv, options(c));
          double L = 0;
          for (std::size_t e = 0; e < fwd.out.storage().size(); ++e) L += dout64.storage()[e] * fwd.out.storage()[e];
          return L;
        };
        const std::vector<double> analytic(grads[which].begin(), grads[which].end());
        double g_max = 0;
        for (double g : analytic) g_max = std::max(g_max, std::fabs(g));
        const auto r = course::ref::check_gradient(loss, base.storage(), analytic, 1e-6, 2e-5 * std::max(1.0, g_max),
                                                   2e-4);
        EXPECT_TRUE(r.ok) << names[which] << " disagrees with finite differences: max abs error " << r.max_abs_error
                          << ", worst element " << r.worst_index << " (analytic "
                          << (r.worst_index >= 0 ? analytic[static_cast<std::size_t>(r.worst_index)] : 0.0) << ")";
      }
    }
}

// ------------------------------------------------------------ determinism -----

/// Five runs on a problem with many K/V tiles (N = 1024) and, where the step has it,
/// grouped-query heads (two query heads add into each dK, dV). Every run must match the
/// reference. A step whose table entry says deterministic (naive, flash_deterministic)
/// must also give the same bits every time. Step flash adds dQ with fp32 atomics in
/// whatever order the K/V blocks finish, so its last bits MAY differ run to run: the test
/// only reports how many runs differed from the first.
void check_repeated_runs(AttentionBackwardStep step, const Case& base, std::uint64_t seed, int runs) {
  Case c = base;
  if (!course::m04::step_support(step).grouped_query) c.H_kv = c.H;
  SCOPED_TRACE(c.name());
  const Inputs in = make_inputs(c, seed);
  const auto ref = reference(c, in);
  const GradTolerance tol = backward_tolerance(c, in, ref);
  DeviceProblem problem(c, in, step);
  Grads first;
  int differing = 0;
  for (int run = 0; run < runs; ++run) {
    Grads got;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(got = problem.run(&impl::attention_backward, step));
    const std::string report = compare_grads(c, got, ref, tol);
    EXPECT_TRUE(report.empty()) << "run " << run << ":" << report;
    if (run == 0) {
      first = got;
      continue;
    }
    const auto same = [](const HostTensor<float>& x, const HostTensor<float>& y) {
      return std::memcmp(x.data(), y.data(), x.storage().size() * sizeof(float)) == 0;
    };
    const bool identical = same(got.dq, first.dq) && same(got.dk, first.dk) && same(got.dv, first.dv);
    if (!identical) ++differing;
    if (course::m04::step_support(step).deterministic) {
      EXPECT_TRUE(identical) << "run " << run << " differs from run 0 in its bits: step " << course::m04::step_name(step)
                             << " promises bit-identical results";
    }
  }
  std::cout << "[course] " << course::m04::step_name(step) << ": " << differing << " of " << runs - 1
            << " repeated runs differed from the first in some bit\n";
}

TEST_P(AttentionBackwardTest, LargeRepeatedRunsAreDeterministicWherePromised) {
  check_repeated_runs(GetParam().step, with_kv_heads(make_case(1, 4, 1024, 1024, 64, BHND, false), 2), seed(), 5);
}

TEST_P(AttentionBackwardTest, RepeatedRunsAreDeterministicWherePromised) {
  check_repeated_runs(GetParam().step, with_kv_heads(make_case(1, 4, 257, 300, 32, BNHD, true), 2), seed(), 3);
}

// ------------------------------------------------- rejected calls on device -----

/// Invalid calls on real device buffers throw before any launch, and leave the CUDA context
/// healthy: no sticky error, and a valid call right after still gives the right answer.
TEST_P(AttentionBackwardTest, RejectedCallsLeaveTheContextHealthy) {
  const AttentionBackwardStep step = GetParam().step;
  const Case c = make_case(1, 2, 33, 40, 32, BHND, true);
  const Inputs in = make_inputs(c, seed());
  DeviceProblem problem(c, in, step);
  const auto expect_invalid = [&](AttentionBackwardArgs bad, const char* what) {
    EXPECT_THROW(impl::attention_backward(step, bad), course::InvalidArgument) << what;
  };
  AttentionBackwardArgs bad = problem.args;
  bad.dq = nullptr;
  expect_invalid(bad, "dq = nullptr");
  bad = problem.args;
  bad.q = problem.args.q + 1;
  expect_invalid(bad, "q misaligned");
  bad = problem.args;
  bad.workspace_bytes = 4;
  expect_invalid(bad, "workspace too small");
  bad = problem.args;
  bad.dk = problem.dv.data();
  expect_invalid(bad, "dk == dv");
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(&impl::attention_backward, step, {c}, seed())));
}

INSTANTIATE_TEST_SUITE_P(Steps, AttentionBackwardTest,
                         ::testing::ValuesIn(course::m04::kAttentionBackwardSteps), step_name);

// ---------------------------------------------------------------- row dot -----

class AttentionBackwardRowDotTest : public GpuTest {};

/// The preprocessing kernel alone: D[b, h, i] = dO_i . O_i, against the CPU in double.
TEST_F(AttentionBackwardRowDotTest, MatchesTheCpuRowDot) {
  Case padded = make_case(2, 3, 77, 50, 16, BHND, false);
  padded.pad = 8;
  const std::vector<Case> cases = {make_case(2, 3, 77, 77, 64, BNHD, false), padded,
                                   make_case(1, 1, 1, 1, 128, BHND, false), make_case(3, 2, 130, 17, 96, BNHD, true)};
  std::uint64_t s = seed();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name());
    const Inputs in = make_inputs(c, s += 17);
    DeviceProblem problem(c, in, kFlash);
    DeviceBuffer<float> d(static_cast<std::size_t>(c.B * c.H * c.N_q));
    d.poison();
    COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::attention_backward_row_dot(problem.args, d.data()));
    const std::vector<float> got = d.download();
    std::vector<double> want;
    for (std::int64_t b = 0; b < c.B; ++b)
      for (std::int64_t h = 0; h < c.H; ++h)
        for (std::int64_t i = 0; i < c.N_q; ++i) {
          double sum = 0;
          for (std::int64_t e = 0; e < c.d; ++e)
            sum += static_cast<double>(in.dout({b, h, i, e})) * static_cast<double>(in.o({b, h, i, e}));
          want.push_back(sum);
        }
    double sq = 0;
    for (double w : want) sq += w * w;
    course::Tolerance tol =
        course::tolerance_for(course::DType::f32, c.d, std::sqrt(sq / static_cast<double>(want.size())));
    tol.atol += 4.0 * std::sqrt(static_cast<double>(c.d)) * 0x1p-24 * max_row_norm(in.dout) * max_row_norm(in.o);
    EXPECT_MATCHES(course::compare(got, want, tol));
  }
}

// ----------------------------------------------------------- planted bugs -----

class PlantedAttentionBackwardTest
    : public GpuTest,
      public ::testing::WithParamInterface<course::planted::PlantedAttentionBackward> {};

TEST_P(PlantedAttentionBackwardTest, ChecksRejectIt) {
  const auto& bug = GetParam();
  EXPECT_FALSE(check_cases(bug.fn, kFlash, planted_cases(), seed()))
      << "planted bug '" << bug.name << "' passed the checks: they are too weak to catch it";
}

INSTANTIATE_TEST_SUITE_P(Bugs, PlantedAttentionBackwardTest,
                         ::testing::ValuesIn(course::planted::kPlantedAttentionBackward),
                         [](const ::testing::TestParamInfo<course::planted::PlantedAttentionBackward>& info) {
                           return std::string(info.param.name);
                         });

class PlantedAttentionBackwardControl : public GpuTest {};

/// The planted kernels without their bug pass the same checks: each planted failure is its
/// planted line's, not the simple kernels'.
TEST_F(PlantedAttentionBackwardControl, SimpleKernelsWithoutABugPass) {
  EXPECT_TRUE(check_cases(course::planted::attention_backward_simple, kFlash, planted_cases(), seed()));
}

// ----------------------------------------- host-side checks (no GPU needed) -----

TEST(AttentionBackwardWorkspaceTest, NaiveNeedsPAndDpFlashNeedsD) {
  using course::m04::attention_backward_workspace_bytes;
  EXPECT_EQ(attention_backward_workspace_bytes(kNaive, 4, 16, 4096, 2048),
            std::size_t{2} * 4 * 16 * 4096 * 2048 * sizeof(float));
  EXPECT_EQ(attention_backward_workspace_bytes(kFlash, 4, 16, 4096, 2048), std::size_t{4} * 16 * 4096 * sizeof(float));
  EXPECT_EQ(attention_backward_workspace_bytes(AttentionBackwardStep::flash_deterministic, 4, 16, 4096, 2048),
            std::size_t{4} * 16 * 4096 * sizeof(float));
}

/// Valid host-side arguments (never dereferenced: validation throws first), broken one at a
/// time. Every array has 16 floats of slack, so a pointer moved by one float stays clear of
/// its neighbours.
struct HostArgs {
  static constexpr std::size_t kElems = 2 * 2 * 8 * 64 + 16;
  alignas(16) float q[kElems];
  alignas(16) float k[kElems];
  alignas(16) float v[kElems];
  alignas(16) float o[kElems];
  alignas(16) float dout[kElems];
  alignas(16) float dq[kElems];
  alignas(16) float dk[kElems];
  alignas(16) float dv[kElems];
  alignas(16) float lse[2 * 2 * 8 + 16];
  alignas(16) float ws[2 * 2 * 2 * 8 * 8 + 16];  // naive: P and dP
  AttentionBackwardArgs args() {
    AttentionBackwardArgs a = course::m04::make_attention_backward_args(q, k, v, o, dout, lse, dq, dk, dv, 2, 2, 2, 8,
                                                                       8, 64, BHND);
    a.workspace = ws;
    a.workspace_bytes = sizeof ws;
    return a;
  }
};

template <class T>
T* shifted_bytes(T* p, std::ptrdiff_t bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(p) + bytes);
}

/// Calls impl::attention_backward for every step with `mutate`d arguments; expects
/// InvalidArgument whose message contains every string of `needles` (steps for which
/// `applies` is false are skipped).
template <class Mutate, class Applies>
void expect_rejected(Mutate mutate, const std::vector<std::string>& needles, Applies applies) {
  for (const auto& info : course::m04::kAttentionBackwardSteps) {
    if (!applies(info.step)) continue;
    SCOPED_TRACE(info.name);
    auto h = std::make_unique<HostArgs>();
    AttentionBackwardArgs a = h->args();
    mutate(a, *h);
    try {
      impl::attention_backward(info.step, a);
      ADD_FAILURE() << "expected InvalidArgument mentioning " << needles.front();
    } catch (const course::InvalidArgument& e) {
      for (const std::string& needle : needles)
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "'" << needle << "' not in: " << e.what();
    }
  }
}
template <class Mutate>
void expect_rejected(Mutate mutate, const std::vector<std::string>& needles) {
  expect_rejected(mutate, needles, [](AttentionBackwardStep) { return true; });
}

TEST(AttentionBackwardArgsTest, ValidArgumentsPassValidation) {
  for (const auto& info : course::m04::kAttentionBackwardSteps) {
    auto h = std::make_unique<HostArgs>();
    EXPECT_NO_THROW(course::m04::validate_attention_backward_args(h->args(), info.step, "test")) << info.name;
    AttentionBackwardArgs a = h->args();
    a.kv_heads = 1;  // multi-query: the steps with grouped-query support take it
    if (course::m04::step_support(info.step).grouped_query) {
      EXPECT_NO_THROW(course::m04::validate_attention_backward_args(a, info.step, "test")) << info.name;
    }
    a = h->args();
    a.causal = true;
    a.scale = 0.5f;
    EXPECT_NO_THROW(course::m04::validate_attention_backward_args(a, info.step, "test")) << info.name;
  }
}

TEST(AttentionBackwardArgsTest, SizesAreNamed) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.batch = 0; }, {"'batch' = 0"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.heads = -2; }, {"'heads' = -2"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.kv_heads = 0; }, {"'kv_heads' = 0"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.seq_q = 0; }, {"'seq_q' = 0"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.seq_k = -1; }, {"'seq_k' = -1"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.batch = 256; a.heads = 256; a.kv_heads = 256; },
                  {"65535"});
}

TEST(AttentionBackwardArgsTest, HeadDimIsNamed) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.head_dim = 48; }, {"'head_dim' = 48"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.head_dim = 0; }, {"'head_dim' = 0"});
}

TEST(AttentionBackwardArgsTest, GroupedHeadsMustDivideAndNaiveHasNone) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.heads = 2; a.kv_heads = 3; }, {"'kv_heads' = 3"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.kv_heads = 1; }, {"'kv_heads' = 1"},
                  [](AttentionBackwardStep s) { return !course::m04::step_support(s).grouped_query; });
}

TEST(AttentionBackwardArgsTest, NullPointersAreNamed) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.q = nullptr; }, {"'q' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.k = nullptr; }, {"'k' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.v = nullptr; }, {"'v' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.o = nullptr; }, {"'o' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.dout = nullptr; }, {"'dout' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.lse = nullptr; }, {"'lse' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.dq = nullptr; }, {"'dq' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.dk = nullptr; }, {"'dk' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.dv = nullptr; }, {"'dv' = nullptr"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.workspace = nullptr; }, {"'workspace' = nullptr"});
}

TEST(AttentionBackwardArgsTest, MisalignedPointersAreNamed) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.q = h.q + 1; }, {"'q'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.k = h.k + 1; }, {"'k'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.v = h.v + 1; }, {"'v'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.o = h.o + 1; }, {"'o'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dout = h.dout + 1; }, {"'dout'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dq = h.dq + 1; }, {"'dq'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dk = h.dk + 1; }, {"'dk'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dv = h.dv + 1; }, {"'dv'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.lse = shifted_bytes(h.lse, 2); }, {"'lse'", "align"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.workspace = shifted_bytes(h.ws, 2); },
                  {"'workspace'", "align"});
}

TEST(AttentionBackwardArgsTest, BadStridesAreNamed) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.q_strides.seq = 66; }, {"'q_strides.seq' = 66"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.k_strides.seq = 32; }, {"'k_strides.seq' = 32"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.v_strides.head = -4; }, {"'v_strides.head' = -4"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.o_strides.batch = 2; }, {"'o_strides.batch' = 2"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.do_strides.seq = 60; }, {"do_strides.seq' = 60"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.dq_strides.seq = 62; }, {"'dq_strides.seq' = 62"});
  // Gradient heads on top of each other: two elements written to one address.
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.dq_strides.head = 0; }, {"'dq_strides.head' = 0"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.dk_strides.batch = 0; }, {"'dk_strides.batch' = 0"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.dv_strides.head = 64; }, {"'dv_strides.head' = 64"});
}

TEST(AttentionBackwardArgsTest, OverlappingGradientsAreRejected) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dq = h.q; }, {"'dq'", "overlaps q"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dq = h.o + 64; }, {"'dq'", "overlaps o"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dv = h.dout; }, {"'dv'", "overlaps dout"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dk = h.lse; }, {"'dk'", "overlaps lse"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dk = h.dv; }, {"overlaps"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.dq = h.dk + 128; }, {"overlaps"});
}

TEST(AttentionBackwardArgsTest, WorkspaceTooSmallOrOverlapping) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.workspace_bytes = 16; }, {"'workspace_bytes' = 16"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.workspace = h.dq; }, {"'workspace'", "overlaps"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs& h) { a.workspace = h.k + 32; }, {"'workspace'", "overlaps"});
}

TEST(AttentionBackwardArgsTest, ScaleAndStepAreNamed) {
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.scale = -1.f; }, {"'scale' = -1"});
  expect_rejected([](AttentionBackwardArgs& a, HostArgs&) { a.scale = std::numeric_limits<float>::infinity(); },
                  {"'scale'"});
  auto h = std::make_unique<HostArgs>();
  try {
    impl::attention_backward(static_cast<AttentionBackwardStep>(7), h->args());
    ADD_FAILURE() << "step 7 was accepted";
  } catch (const course::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'step'"), std::string::npos) << e.what();
  }
}

}  // namespace
