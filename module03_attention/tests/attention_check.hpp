#pragma once
/// @file attention_check.hpp
/// @brief The checking helper of attention (cases, inputs, device run, CPU reference, the
/// fp32 error budget), shared by the module's tests (test_attention.cpp) and its
/// random-case tests (fuzz_attention.cpp).

#include "course/attention_testing.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "module03/attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace course::m03::checks {

/// The signature of impl::attention (fp32) and of the planted bugs.
using AttnFn = void (*)(AttentionStep, const AttentionArgs&);
// BHND, BNHD, make_tensor, max_abs, supported, ...: the pieces every attention test
// shares (course/attention_testing.hpp).
using namespace attention_testing;

// ------------------------------------------------------------------- cases -----

/// The shape and inputs (CaseShape: pad in floats, a multiple of 4), plus O's storage and
/// the forward's options.
struct Case : attention_testing::CaseShape {
  AttentionLayout o_layout = BHND;  ///< storage of O
  std::int64_t o_pad = 0;           ///< extra floats after each row of O (must keep the poison)
  bool rope = false, alibi = false;
  bool no_lse = false;  ///< pass lse = nullptr even where the step could write it

  std::string name() const {
    std::ostringstream os;
    os << attention_testing::shape_name(*this);
    if (o_layout != layout) os << "_o" << course::to_string(o_layout);
    if (pad) os << "_pad" << pad;
    if (o_pad) os << "_opad" << o_pad;
    if (kv_batch_broadcast) os << "_kvbcast";
    if (causal) os << "_causal";
    if (rope) os << "_rope";
    if (alibi) os << "_alibi";
    os << attention_testing::range_name(*this);
    if (no_lse) os << "_nolse";
    return os.str();
  }
  std::string str() const { return name(); }
};

inline Case make_case(std::int64_t B, std::int64_t H, std::int64_t N_q, std::int64_t N_k, std::int64_t d,
               AttentionLayout layout = BHND, bool causal = false) {
  Case c = attention_testing::make_shape_case<Case>(B, H, N_q, N_k, d, layout, causal);
  c.o_layout = layout;
  return c;
}

inline bool supports(AttentionStep step, const Case& c) {
  const auto s = course::m03::step_support(step);
  if (c.d > s.max_head_dim) return false;
  if (c.causal && !s.causal) return false;
  if ((c.rope || c.alibi || c.H_kv != c.H) && !s.options) return false;
  return true;
}

// ------------------------------------------------------------------ running -----

inline AttentionStrides strides_of(const HostTensor<float>& t) {
  return attention_testing::strides_of<AttentionStrides>(t);
}

struct Inputs {
  HostTensor<float> q, k, v;
};

inline Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Inputs in;
  attention_testing::make_qkv(c, seed, in.q, in.k, in.v);
  return in;
}

struct DeviceResult {
  HostTensor<float> o;     ///< in c.o_layout (+ o_pad), as downloaded
  std::vector<float> lse;  ///< B*H*N_q, empty if the step writes none
};

/// Uploads the inputs, poisons O and lse, runs `fn`, downloads. NotImplemented propagates.
inline DeviceResult run_device(AttnFn fn, AttentionStep step, const Case& c, const Inputs& in) {
  DeviceBuffer<float> dq(in.q.storage()), dk(in.k.storage()), dv(in.v.storage());
  DeviceResult r{make_tensor(c.B, c.H, c.N_q, c.d, c.o_layout, c.o_pad), {}};
  DeviceBuffer<float> d_o(r.o.storage().size());
  d_o.poison();
  const bool want_lse = course::m03::step_support(step).lse && !c.no_lse;
  DeviceBuffer<float> d_lse(want_lse ? static_cast<std::size_t>(c.B * c.H * c.N_q) : 0);
  d_lse.poison();
  DeviceBuffer<float> ws(course::m03::attention_workspace_bytes(step, c.B, c.H, c.N_q, c.N_k) / sizeof(float));
  ws.poison();

  AttentionArgs a;
  a.q = dq.data();
  a.k = dk.data();
  a.v = dv.data();
  a.o = d_o.data();
  a.lse = want_lse ? d_lse.data() : nullptr;
  attention_testing::set_shape(a, c);
  a.q_strides = strides_of(in.q);
  a.k_strides = strides_of(in.k);
  a.v_strides = strides_of(in.v);
  a.o_strides = strides_of(r.o);
  a.rope = c.rope;
  a.alibi = c.alibi;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  r.o.storage() = d_o.download();
  if (want_lse) r.lse = d_lse.download();
  return r;
}

inline course::ref::AttentionResult<float> reference(const Case& c, const Inputs& in) {
  course::ref::AttentionOptions opts;
  opts.scale = c.scale;
  opts.causal = c.causal;
  if (!c.rope && !c.alibi) return course::ref::attention_forward(in.q, in.k, in.v, opts);
  course::ref::PositionalOptions pos;
  pos.rope = c.rope;
  pos.alibi = c.alibi;
  return course::ref::attention_forward_positional(in.q, in.k, in.v, opts, pos);
}

struct AttnTolerance {
  course::Tolerance out, lse;
};

/// fp32 error budget of attention. One scaled score s = scale * sum_c q_c k_c carries a
/// rounding error of about sqrt(d) * u * scale * sum_c |q_c k_c| <= sqrt(d) u scale d max|q| max|k|
/// (u = 2^-24; factor 4 for safety); __expf adds ~2 ulp; RoPE and ALiBi add the rounding of
/// the rotated values and of the bias. A softmax whose inputs move by <= ds moves every
/// weight by a factor within e^(+-2 ds), so O (a weighted mean of V rows) moves by
/// <= ~2 ds max|v|, and lse by <= ds. On top: the PV sum's own rounding (tolerance_for).
inline AttnTolerance attention_tolerance(const Case& c, const Inputs& in, const course::ref::AttentionResult<float>& ref) {
  const double u = 0x1p-24;
  const double d = static_cast<double>(c.d);
  const double scale = c.scale != 0.f ? c.scale : 1.0 / std::sqrt(d);
  const double mq = max_abs(in.q), mk = max_abs(in.k), mv = max_abs(in.v);
  double ds = 4.0 * std::sqrt(d) * u * scale * d * mq * mk + 32.0 * u;
  if (c.rope) ds += 8.0 * u * scale * d * mq * mk;
  if (c.alibi) ds += 4.0 * u * static_cast<double>(std::max(c.N_q, c.N_k));
  AttnTolerance t;
  t.out = course::tolerance_for(course::DType::f32, c.N_k, course::rms(ref.out));
  t.out.atol += 2.0 * ds * mv;
  t.lse.atol = 2.0 * ds + 64.0 * u;
  t.lse.rtol = 4.0 * u;
  return t;
}

/// One case checked: "" when right, else a report; and the worst error-to-bound ratio of O and lse.
struct CaseCheck {
  std::string report;
  double worst_ratio = 0.0;
};

/// THE per-case check: fresh data for `c` (seeded), O and lse against the reference within
/// attention_tolerance, and O's padding untouched. course::NotImplemented propagates.
inline CaseCheck check_case(AttnFn fn, AttentionStep step, const Case& c, std::uint64_t seed) {
  const Inputs in = make_inputs(c, seed);
  const DeviceResult got = run_device(fn, step, c, in);
  const auto ref = reference(c, in);
  const AttnTolerance tol = attention_tolerance(c, in, ref);
  CaseCheck out;
  const auto r_o = course::compare(got.o, ref.out, tol.out, {"b", "h", "i", "c"});
  out.worst_ratio = r_o.worst_ratio;
  if (!r_o.ok()) out.report += "\n    O: " + r_o.report();
  if (!got.lse.empty()) {
    HostTensor<float> lse({c.B, c.H, c.N_q});
    lse.storage() = got.lse;
    const auto r_l = course::compare(lse, ref.lse, tol.lse, {"b", "h", "i"});
    out.worst_ratio = std::max(out.worst_ratio, r_l.worst_ratio);
    if (!r_l.ok()) out.report += "\n    lse: " + r_l.report();
  }
  out.report += padding_report(got.o, "O");
  return out;
}

/// THE check, shared by the real tests and the planted-bug tests: every case (all must be
/// supported by `step`) through check_case, on fresh data. course::NotImplemented
/// propagates: callers wrap it in COURSE_SKIP_IF_NOT_IMPLEMENTED.
inline ::testing::AssertionResult check_cases(AttnFn fn, AttentionStep step, const std::vector<Case>& cases,
                                              std::uint64_t seed) {
  return attention_testing::check_each(course::m03::step_name(step), cases, seed, [&](const Case& c, std::uint64_t s) {
    return check_case(fn, step, c, s).report;
  });
}

}  // namespace course::m03::checks
