#pragma once
/// @file attention_backward_check.hpp
/// @brief The checking helper of the attention backward pass (cases, inputs from the CPU
/// forward, device run, reference, the fp32 error budget, padding and dead-row checks),
/// shared by the module's tests (test_attention_backward.cpp) and its random-case tests
/// (fuzz_backward.cpp).

#include "course/attention_testing.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "module03/attention.hpp"
#include "module04/attention_backward.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace course::m04::attention_checks {

/// The signature of impl::attention_backward and of the planted bugs.
using BackwardFn = void (*)(AttentionBackwardStep, const AttentionBackwardArgs&);
// BHND, BNHD, make_tensor, max_abs, supported, ...: the pieces every attention test
// shares (course/attention_testing.hpp).
using namespace attention_testing;

// ------------------------------------------------------------------- cases -----

/// The shape and inputs (CaseShape: Q, K, V, O, dO in `layout`, pad in floats, a multiple
/// of 4), plus the gradients' storage and dO's range.
struct Case : attention_testing::CaseShape {
  AttentionLayout grad_layout = BHND;  ///< storage of dQ, dK, dV
  std::int64_t grad_pad = 0;           ///< extra floats after each gradient row (must keep the poison)
  double do_lo = -1.0, do_hi = 1.0;    ///< dO uniform in [do_lo, do_hi)

  std::string name() const {
    std::ostringstream os;
    os << attention_testing::shape_name(*this);
    if (grad_layout != layout) os << "_grad" << course::to_string(grad_layout);
    if (pad) os << "_pad" << pad;
    if (grad_pad) os << "_gradpad" << grad_pad;
    if (kv_batch_broadcast) os << "_kvbcast";
    if (causal) os << "_causal";
    os << attention_testing::range_name(*this);
    if (do_lo != -1.0 || do_hi != 1.0) os << "_do[" << do_lo << "," << do_hi << ")";
    return os.str();
  }
  std::string str() const { return name(); }
};

inline Case make_case(std::int64_t B, std::int64_t H, std::int64_t N_q, std::int64_t N_k, std::int64_t d,
               AttentionLayout layout = BHND, bool causal = false) {
  Case c = attention_testing::make_shape_case<Case>(B, H, N_q, N_k, d, layout, causal);
  c.grad_layout = layout;
  return c;
}

inline Case with_kv_heads(Case c, std::int64_t H_kv) {
  c.H_kv = H_kv;
  return c;
}

inline bool supports(AttentionBackwardStep step, const Case& c) {
  const auto s = course::m04::step_support(step);
  if (c.d > s.max_head_dim) return false;
  if (c.causal && !s.causal) return false;
  if (c.H_kv != c.H && !s.grouped_query) return false;
  return true;
}

inline double effective_scale(const Case& c) {
  return c.scale != 0.f ? static_cast<double>(c.scale) : 1.0 / std::sqrt(static_cast<double>(c.d));
}

inline course::ref::AttentionOptions options(const Case& c) {
  course::ref::AttentionOptions opts;
  opts.scale = c.scale;
  opts.causal = c.causal;
  return opts;
}

// ------------------------------------------------------------------ inputs -----

inline AttentionStrides strides_of(const HostTensor<float>& t) {
  return attention_testing::strides_of<AttentionStrides>(t);
}

struct Inputs {
  HostTensor<float> q, k, v, o, dout;
  std::vector<float> lse;     ///< [B, H, N_q], what the device reads (-inf for rows that see no key)
  std::vector<double> lse64;  ///< the same in double (for the tolerance)
};

/// Fresh Q, K, V, dO; O and lse from the CPU forward pass in double, rounded to float.
inline Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Inputs in;
  attention_testing::make_qkv(c, seed, in.q, in.k, in.v);
  in.dout = make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad);
  course::fill_random(in.dout, seed + 3, c.do_lo, c.do_hi);
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

inline course::ref::AttentionGrads<double> reference(const Case& c, const Inputs& in) {
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
    attention_testing::set_shape(a, c);
    a.q_strides = strides_of(in.q);
    a.k_strides = strides_of(in.k);
    a.v_strides = strides_of(in.v);
    a.o_strides = strides_of(in.o);
    a.do_strides = strides_of(in.dout);
    a.dq_strides = strides_of(layout.dq);
    a.dk_strides = strides_of(layout.dk);
    a.dv_strides = strides_of(layout.dv);
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
inline double max_row_norm(const HostTensor<float>& t) {
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

/// Rows of head (b, h) of `t` as a contiguous [N, d] double matrix.
inline std::vector<double> head_rows(const HostTensor<float>& t, std::int64_t b, std::int64_t h) {
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
/// error budget scales with it. `lse` is [B, H, N_q] (double or float; -inf: no key).
template <class CaseT, class Lse>
double max_key_weight(const CaseT& c, const HostTensor<float>& q, const HostTensor<float>& k, const Lse& lse) {
  const double scale = c.scale != 0.f ? static_cast<double>(c.scale) : 1.0 / std::sqrt(static_cast<double>(c.d));
  const std::int64_t group = c.H / c.H_kv, off = c.N_k - c.N_q;
  double worst = 0;
  std::vector<double> colsum(static_cast<std::size_t>(c.N_k));
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t hk = 0; hk < c.H_kv; ++hk) {
      std::fill(colsum.begin(), colsum.end(), 0.0);
      const std::vector<double> K = head_rows(k, b, hk);
      for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const std::vector<double> Q = head_rows(q, b, h);
        for (std::int64_t i = 0; i < c.N_q; ++i) {
          const double l = static_cast<double>(lse[static_cast<std::size_t>((b * c.H + h) * c.N_q + i)]);
          if (!std::isfinite(l)) continue;  // sees no key
          const std::int64_t visible = c.causal ? std::clamp<std::int64_t>(i + off + 1, 0, c.N_k) : c.N_k;
          for (std::int64_t j = 0; j < visible; ++j) {
            double s = 0;
            for (std::int64_t e = 0; e < c.d; ++e) s += Q[i * c.d + e] * K[j * c.d + e];
            colsum[static_cast<std::size_t>(j)] += std::exp(scale * s - l);
          }
        }
      }
      for (double w : colsum) worst = std::max(worst, w);
    }
  return worst;
}
inline double max_key_weight(const Case& c, const Inputs& in) { return max_key_weight(c, in.q, in.k, in.lse64); }

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
inline GradTolerance backward_tolerance(const Case& c, const Inputs& in, const course::ref::AttentionGrads<double>& ref) {
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

/// Elements of dQ in rows that see no key (causal, the first N_q - N_k rows) that are not exactly 0.
inline std::int64_t dead_rows_not_zero(const Case& c, const HostTensor<float>& dq) {
  const std::int64_t dead = c.causal ? std::max<std::int64_t>(0, c.N_q - c.N_k) : 0;
  std::int64_t bad = 0;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t i = 0; i < dead; ++i)
        for (std::int64_t e = 0; e < c.d; ++e) bad += dq({b, h, i, e}) == 0.f ? 0 : 1;
  return bad;
}

/// Compares one result with the reference; returns "" when it passes, else the report.
/// `worst` (if given) takes the largest error-to-bound ratio of dQ, dK and dV.
inline std::string compare_grads(const Case& c, const Grads& got, const course::ref::AttentionGrads<double>& ref,
                                 const GradTolerance& tol, double* worst = nullptr) {
  std::string report;
  const auto r_dq = course::compare(got.dq, ref.dq, tol.dq, {"b", "h", "i", "c"});
  if (!r_dq.ok()) report += "\n    dQ: " + r_dq.report();
  const auto r_dk = course::compare(got.dk, ref.dk, tol.dk, {"b", "hk", "j", "c"});
  if (!r_dk.ok()) report += "\n    dK: " + r_dk.report();
  const auto r_dv = course::compare(got.dv, ref.dv, tol.dv, {"b", "hk", "j", "c"});
  if (!r_dv.ok()) report += "\n    dV: " + r_dv.report();
  if (worst != nullptr) *worst = std::max({r_dq.worst_ratio, r_dk.worst_ratio, r_dv.worst_ratio});
  for (const auto& [t, name] : {std::pair{&got.dq, "dQ"}, {&got.dk, "dK"}, {&got.dv, "dV"}})
    report += padding_report(*t, name);
  if (const std::int64_t bad = dead_rows_not_zero(c, got.dq); bad > 0)
    report += "\n    " + std::to_string(bad) + " elements of dQ in rows that see no key are not exactly 0";
  return report;
}

/// THE per-case check: fresh data for `c` (seeded), dQ, dK, dV against the reference
/// within backward_tolerance, padding and dead rows. Returns "" when right, else the
/// report; `worst` takes the largest error-to-bound ratio. NotImplemented propagates.
inline std::string check_case(BackwardFn fn, AttentionBackwardStep step, const Case& c, std::uint64_t seed,
                              double* worst = nullptr) {
  const Inputs in = make_inputs(c, seed);
  DeviceProblem problem(c, in, step);
  const Grads got = problem.run(fn, step);
  const auto ref = reference(c, in);
  return compare_grads(c, got, ref, backward_tolerance(c, in, ref), worst);
}

/// THE check, shared by the real tests and the planted-bug tests: every case (all must be
/// supported by `step`) through check_case on fresh data. course::NotImplemented
/// propagates: callers wrap it in COURSE_SKIP_IF_NOT_IMPLEMENTED.
inline ::testing::AssertionResult check_cases(BackwardFn fn, AttentionBackwardStep step,
                                              const std::vector<Case>& cases, std::uint64_t seed) {
  return attention_testing::check_each(course::m04::step_name(step), cases, seed, [&](const Case& c, std::uint64_t s) {
    return check_case(fn, step, c, s);
  });
}

}  // namespace course::m04::attention_checks
