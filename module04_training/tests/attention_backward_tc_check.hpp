#pragma once
/// @file attention_backward_tc_check.hpp
/// @brief The checking helper of the tensor-core (bf16) attention backward: bf16 inputs, the
/// device run, and FlashAttention's backward rule -- each gradient's max error against
/// course::ref::attention_backward (double) at most 3x that of the plain bf16 computation
/// (course::ref::attention_backward_bf16) plus a tiny floor. Shared by
/// test_attention_backward_tc.cpp and the planted bugs' tests.

#include "attention_backward_check.hpp"
#include "course/attention_testing.hpp"
#include "course/bf16.hpp"
#include "course/device.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "module04/attention_backward.hpp"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace course::m04::tc_backward_checks {

using bf16 = __nv_bfloat16;
/// The signature of impl::attention_backward (bf16) and of the planted bugs.
using BackwardTcFn = void (*)(AttentionBackwardStep, const AttentionBackwardArgsBf16&);
// The cases are the fp32 helper's (shape, layouts, padding in elements: a multiple of 8 here).
using attention_checks::Case;
using attention_checks::make_case;
using attention_checks::with_kv_heads;
using namespace attention_testing;

inline bool supports(AttentionBackwardStep step, const Case& c) {
  const auto s = step_support(step);
  return (c.d == 64 || c.d == 128) && (!c.causal || s.causal) && (c.H_kv == c.H || s.grouped_query);
}

inline void round_in_place(HostTensor<float>& t) { t.storage() = course::round_to_bf16(t.storage()); }

/// bf16 Q, K, V, dO (random, rounded); O from the double forward rounded to bf16 and lse from
/// it in fp32: what a bf16 forward hands its backward.
struct Inputs {
  HostTensor<float> q, k, v, o, dout;
  std::vector<float> lse;
};

inline Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Inputs in;
  make_qkv(c, seed, in.q, in.k, in.v);
  in.dout = make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad);
  course::fill_random(in.dout, seed + 3, c.do_lo, c.do_hi);
  for (HostTensor<float>* t : {&in.q, &in.k, &in.v, &in.dout}) round_in_place(*t);
  const auto fwd = course::ref::attention_forward(in.q.cast<double>(), in.k.cast<double>(), in.v.cast<double>(),
                                                  attention_checks::options(c));
  in.o = make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad);
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t i = 0; i < c.N_q; ++i)
        for (std::int64_t e = 0; e < c.d; ++e) in.o({b, h, i, e}) = static_cast<float>(fwd.out({b, h, i, e}));
  round_in_place(in.o);
  in.lse.assign(fwd.lse.storage().begin(), fwd.lse.storage().end());
  return in;
}

/// The gradients as downloaded (bf16 widened to float), in the case's gradient layout.
struct Grads {
  HostTensor<float> dq, dk, dv;
};

/// One problem on the device: inputs uploaded once as bf16; the gradients and the workspace
/// poisoned before every run.
struct DeviceProblem {
  DeviceBuffer<bf16> q, k, v, o, dout, dq, dk, dv;
  DeviceBuffer<float> lse, ws;
  Grads layout;
  AttentionBackwardArgsBf16 args;

  DeviceProblem(const Case& c, const Inputs& in, AttentionBackwardStep step)
      : q(course::to_bf16(in.q.storage())), k(course::to_bf16(in.k.storage())), v(course::to_bf16(in.v.storage())),
        o(course::to_bf16(in.o.storage())), dout(course::to_bf16(in.dout.storage())), lse(in.lse),
        layout{make_tensor(c.B, c.H, c.N_q, c.d, c.grad_layout, c.grad_pad),
               make_tensor(c.B, c.H_kv, c.N_k, c.d, c.grad_layout, c.grad_pad),
               make_tensor(c.B, c.H_kv, c.N_k, c.d, c.grad_layout, c.grad_pad)} {
    dq = DeviceBuffer<bf16>(layout.dq.storage().size());
    dk = DeviceBuffer<bf16>(layout.dk.storage().size());
    dv = DeviceBuffer<bf16>(layout.dv.storage().size());
    AttentionBackwardArgsBf16& a = args;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.o = o.data();
    a.dout = dout.data();
    a.lse = lse.data();
    a.dq = dq.data();
    a.dk = dk.data();
    a.dv = dv.data();
    set_shape(a, c);
    a.q_strides = attention_checks::strides_of(in.q);
    a.k_strides = attention_checks::strides_of(in.k);
    a.v_strides = attention_checks::strides_of(in.v);
    a.o_strides = attention_checks::strides_of(in.o);
    a.do_strides = attention_checks::strides_of(in.dout);
    a.dq_strides = attention_checks::strides_of(layout.dq);
    a.dk_strides = attention_checks::strides_of(layout.dk);
    a.dv_strides = attention_checks::strides_of(layout.dv);
    const std::size_t ws_bytes = attention_backward_workspace_bytes(step, a);
    ws = DeviceBuffer<float>((ws_bytes + sizeof(float) - 1) / sizeof(float));
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
  }

  /// Poisons the gradients and the workspace, runs `fn` on `stream`, downloads.
  Grads run(BackwardTcFn fn, AttentionBackwardStep step, cudaStream_t stream = nullptr) {
    dq.poison();
    dk.poison();
    dv.poison();
    ws.poison();
    // The poison is written on the default stream; a run on another (non-blocking) stream
    // must not start before it lands (it would overwrite the workspace's turn counters).
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    AttentionBackwardArgsBf16 a = args;
    a.stream = stream;
    fn(step, a);
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    Grads g = layout;
    g.dq.storage() = course::from_bf16(dq.download());
    g.dk.storage() = course::from_bf16(dk.download());
    g.dv.storage() = course::from_bf16(dv.download());
    return g;
  }
};

/// Max |got - ref| over the logical elements; NaN or Inf -> inf.
template <class Ref>
double max_error(const HostTensor<float>& got, const HostTensor<Ref>& ref) {
  double err = 0;
  for (std::int64_t b = 0; b < got.dim(0); ++b)
    for (std::int64_t h = 0; h < got.dim(1); ++h)
      for (std::int64_t i = 0; i < got.dim(2); ++i)
        for (std::int64_t e = 0; e < got.dim(3); ++e) {
          const double g = got({b, h, i, e}), w = static_cast<double>(ref({b, h, i, e}));
          err = std::max(err, std::isfinite(g) ? std::fabs(g - w) : std::numeric_limits<double>::infinity());
        }
  return err;
}

/// The rule's floors. Every gradient gets kFloor times the largest element of the three
/// exact gradients. dQ and dK get, besides, the fp32 rounding of a cancellation the plain
/// computation does not see: dS = P (dP - D) with dP = dO.V (an mma) and D = dO.O (the
/// preprocessing), two sums that are equal in exact arithmetic when one key takes all of a
/// row's probability (N_k = 1, or a saturated softmax) -- dQ and dK are then exactly 0, and
/// the plain computation, summing both in the same order, cancels exactly, while any kernel
/// that computes D once per row (as FlashAttention does) is left with the fp32 rounding of
/// two sums of size |dO| |V|: E = 4 sqrt(d) u (|dO| |V| + |dO| |O|) per score (row norms,
/// u = 2^-24), times scale |K| for dQ (a row's P sums to 1) and scale |Q| W for dK (W = the
/// largest probability mass one key collects, attention_checks::max_key_weight's rule).
constexpr double kFloor = 1e-5;

struct Floors {
  double dq, dk, dv;
};

inline Floors rule_floors(const Case& c, const Inputs& in, const course::ref::AttentionGrads<double>& exact) {
  double largest = 1e-3;
  for (const HostTensor<double>* e : {&exact.dq, &exact.dk, &exact.dv})
    for (double x : e->storage()) largest = std::max(largest, std::fabs(x));
  const double base = kFloor * largest;
  const double u = 0x1p-24, scale = attention_checks::effective_scale(c);
  using attention_checks::max_row_norm;
  const double ndo = max_row_norm(in.dout);
  const double E = 4.0 * std::sqrt(static_cast<double>(c.d)) * u * (ndo * max_row_norm(in.v) + ndo * max_row_norm(in.o));
  return {base + scale * E * max_abs(in.k),
          base + scale * E * max_abs(in.q) * attention_checks::max_key_weight(c, in.q, in.k, in.lse), base};
}

constexpr double kRule = 3.0;  ///< FlashAttention's backward rule: 3x the same-precision error

struct CaseCheck {
  std::string report;
  double worst_ratio = 0.0;  ///< largest error / allowed over dQ, dK, dV
};

/// Compares one result with the double and plain-bf16 references (rule above), the padding
/// of the gradients (still poisoned) and the rows that see no key (dQ exactly 0).
inline CaseCheck compare_grads(const Case& c, const Inputs& in, const Grads& got,
                               const course::ref::AttentionGrads<double>& exact,
                               const course::ref::AttentionGrads<float>& plain) {
  CaseCheck out;
  std::ostringstream report;
  const Floors floors = rule_floors(c, in, exact);
  const auto one = [&](const HostTensor<float>& g, const HostTensor<double>& e, const HostTensor<float>& p,
                       double floor, const char* name) {
    const double err = max_error(g, e), err_plain = max_error(p, e);
    const double allowed = kRule * err_plain + floor;
    out.worst_ratio = std::max(out.worst_ratio, std::isnan(err) ? INFINITY : err / allowed);
    if (!(err <= allowed))
      report << "\n    " << name << ": max error " << err << " > " << kRule << " x " << err_plain
             << " (plain bf16) + " << floor;
    report << padding_report(g, name);
  };
  one(got.dq, exact.dq, plain.dq, floors.dq, "dQ");
  one(got.dk, exact.dk, plain.dk, floors.dk, "dK");
  one(got.dv, exact.dv, plain.dv, floors.dv, "dV");
  if (const std::int64_t bad = attention_checks::dead_rows_not_zero(c, got.dq); bad > 0)
    report << "\n    " << bad << " elements of dQ in rows that see no key are not exactly 0";
  out.report = report.str();
  return out;
}

/// THE per-case check: fresh data (seeded), one run, the rule. NotImplemented propagates.
inline CaseCheck check_case(BackwardTcFn fn, AttentionBackwardStep step, const Case& c, std::uint64_t seed) {
  const Inputs in = tc_backward_checks::make_inputs(c, seed);  // (attention_checks has one too)
  DeviceProblem problem(c, in, step);
  const Grads got = problem.run(fn, step);
  const auto exact = course::ref::attention_backward(in.q.cast<double>(), in.k.cast<double>(), in.v.cast<double>(),
                                                     in.dout.cast<double>(), attention_checks::options(c));
  const auto plain = course::ref::attention_backward_bf16(in.q, in.k, in.v, in.o, in.dout, in.lse,
                                                          attention_checks::options(c));
  return tc_backward_checks::compare_grads(c, in, got, exact, plain);
}

/// THE check, shared by the real tests and the planted-bug tests.
inline ::testing::AssertionResult check_cases(BackwardTcFn fn, AttentionBackwardStep step,
                                              const std::vector<Case>& cases, std::uint64_t seed) {
  return check_each(step_name(step), cases, seed,
                    [&](const Case& c, std::uint64_t s) { return tc_backward_checks::check_case(fn, step, c, s).report; });
}

}  // namespace course::m04::tc_backward_checks
