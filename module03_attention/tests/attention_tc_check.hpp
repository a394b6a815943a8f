#pragma once
/// @file attention_tc_check.hpp
/// @brief The checking helper of the tensor-core (bf16) attention steps: cases, bf16 inputs,
/// device run, and FlashAttention's accuracy rule against course::ref::attention_forward and
/// the plain bf16 computation (course::ref::attention_forward_bf16). Shared by the module's
/// tests (test_attention_tc.cpp) and its random-case tests (fuzz_attention.cpp).

#include "course/attention_testing.hpp"
#include "course/bf16.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "module03/attention.hpp"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace course::m03::tc_checks {

using bf16 = __nv_bfloat16;
/// The signature of impl::attention (bf16) and of the planted tensor-core bugs.
using AttnTcFn = void (*)(AttentionStep, const AttentionArgsBf16&);
// BHND, BNHD, make_tensor, ...: the pieces every attention test shares
// (course/attention_testing.hpp).
using namespace attention_testing;

// ------------------------------------------------------------------- cases -----

/// The shape and inputs (CaseShape: pad in bf16 elements, a multiple of 8; the rule's
/// floor scales with max|V|), plus O's storage.
struct Case : attention_testing::CaseShape {
  AttentionLayout o_layout = BHND;  ///< storage of O
  std::int64_t o_pad = 0;           ///< extra elements after each row of O (must keep the poison)
  bool lse = true;                  ///< pass an lse buffer

  std::string name() const {
    std::ostringstream os;
    os << attention_testing::shape_name(*this);
    if (o_layout != layout) os << "_o" << course::to_string(o_layout);
    if (pad) os << "_pad" << pad;
    if (o_pad) os << "_opad" << o_pad;
    if (kv_batch_broadcast) os << "_kvbcast";
    if (causal) os << "_causal";
    if (!lse) os << "_nolse";
    os << attention_testing::range_name(*this);
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

// ------------------------------------------------------------------ running -----

inline AttentionStrides strides_of(const HostTensor<float>& t) {
  return attention_testing::strides_of<AttentionStrides>(t);
}

/// Q, K, V holding bf16 values (random, rounded), as floats: exactly what the kernel reads.
struct Inputs {
  HostTensor<float> q, k, v;
};

inline void round_in_place(HostTensor<float>& t) { t.storage() = course::round_to_bf16(t.storage()); }

inline Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Inputs in;
  attention_testing::make_qkv(c, seed, in.q, in.k, in.v);
  round_in_place(in.q);
  round_in_place(in.k);
  round_in_place(in.v);
  return in;
}

struct DeviceResult {
  HostTensor<float> o;     ///< in c.o_layout (+ o_pad), bf16 values widened
  std::vector<float> lse;  ///< B*H*N_q, empty when the case passes no lse
};

/// Uploads the inputs as bf16, poisons O and lse, runs `fn`, downloads. NotImplemented
/// and Unsupported propagate.
inline DeviceResult run_device(AttnTcFn fn, AttentionStep step, const Case& c, const Inputs& in) {
  DeviceBuffer<bf16> dq(course::to_bf16(in.q.storage())), dk(course::to_bf16(in.k.storage())),
      dv(course::to_bf16(in.v.storage()));
  DeviceResult r{make_tensor(c.B, c.H, c.N_q, c.d, c.o_layout, c.o_pad), {}};
  DeviceBuffer<bf16> d_o(r.o.storage().size());
  d_o.poison();
  DeviceBuffer<float> d_lse(c.lse ? static_cast<std::size_t>(c.B * c.H * c.N_q) : 0);
  d_lse.poison();

  AttentionArgsBf16 a;
  a.q = dq.data();
  a.k = dk.data();
  a.v = dv.data();
  a.o = d_o.data();
  a.lse = c.lse ? d_lse.data() : nullptr;
  attention_testing::set_shape(a, c);
  a.q_strides = strides_of(in.q);
  a.k_strides = strides_of(in.k);
  a.v_strides = strides_of(in.v);
  a.o_strides = strides_of(r.o);
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  r.o.storage() = course::from_bf16(d_o.download());
  if (c.lse) r.lse = d_lse.download();
  return r;
}

/// Max |got - ref| over the logical elements of O ([B, H, N_q, d]); NaN or Inf -> inf.
inline double max_error(const HostTensor<float>& got, const HostTensor<float>& ref) {
  double err = 0;
  for (std::int64_t b = 0; b < got.dim(0); ++b)
    for (std::int64_t h = 0; h < got.dim(1); ++h)
      for (std::int64_t i = 0; i < got.dim(2); ++i)
        for (std::int64_t c = 0; c < got.dim(3); ++c) {
          const double g = got({b, h, i, c}), w = ref({b, h, i, c});
          const double e = std::isfinite(g) ? std::fabs(g - w) : std::numeric_limits<double>::infinity();
          err = std::max(err, e);
        }
  return err;
}

/// Max |got - ref| over lse values; -inf matches only -inf (a row without keys).
inline double max_lse_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double err = 0;
  for (std::size_t n = 0; n < ref.size(); ++n) {
    const double g = got[n], w = ref[n];
    double e;
    if (std::isinf(w) && w < 0) e = (std::isinf(g) && g < 0) ? 0.0 : std::numeric_limits<double>::infinity();
    else e = std::isfinite(g) ? std::fabs(g - w) : std::numeric_limits<double>::infinity();
    err = std::max(err, e);
  }
  return err;
}

/// The floors of the rule: O's errors are absolute on values <= max|V| (kOutFloor for
/// max|V| = 1, scaled with it); lse's grow with |lse| (an fp32 ulp of 300 is 3e-5) and with
/// the size of the scores' products. lse = scale * (a row's largest score) + log(sum), so it
/// carries that score's rounding error, and the tensor cores add a score's d products in
/// blocks, aligned to the block's largest term and truncated: up to about an fp32 ulp of the
/// partial sum per block of 4 (a model of the hardware; NVIDIA documents neither the order
/// nor the rounding). The CPU baseline adds in IEEE order and cannot show this, so the floor
/// bounds it: scale * d/4 * 2^-23 * max|q_i| max|k_j| (Cauchy-Schwarz bounds sum |q_c k_c|).
/// It matters only for large inputs: the fuzzer found it at |x| ~ 14 (lse ~ 325, d = 128),
/// where the lse error of tc_flash2 and the Hopper steps was 6-26x the CPU baseline's.
constexpr double kOutFloor = 1e-5;
inline double lse_floor(const std::vector<float>& lse_ref, const Inputs& in, double scale) {
  double m = 0;
  for (float x : lse_ref)
    if (std::isfinite(x)) m = std::max(m, static_cast<double>(std::fabs(x)));
  const auto largest_row_norm = [](const HostTensor<float>& t) {  // max over rows of |row|_2
    double best = 0;
    for (std::int64_t b = 0; b < t.dim(0); ++b)
      for (std::int64_t h = 0; h < t.dim(1); ++h)
        for (std::int64_t i = 0; i < t.dim(2); ++i) {
          double sum = 0;
          for (std::int64_t c = 0; c < t.dim(3); ++c) sum += static_cast<double>(t({b, h, i, c})) * t({b, h, i, c});
          best = std::max(best, sum);
        }
    return std::sqrt(best);
  };
  const double d = static_cast<double>(in.q.dim(3));
  const double products = largest_row_norm(in.q) * largest_row_norm(in.k);
  return 1e-5 + 8.0 * 0x1p-24 * m + scale * (d / 4.0) * 0x1p-23 * products;
}

/// One case checked: "" when right, else a report; and the worst ratio of an error to what
/// the rule allows (O and lse).
struct CaseCheck {
  std::string report;
  double worst_ratio = 0.0;
};

/// THE per-case check: fresh bf16 data for `c` (seeded), O and lse under FlashAttention's
/// rule (max error vs the double reference <= 2 x the plain bf16 computation's + a floor),
/// O's padding untouched. NotImplemented propagates.
inline CaseCheck check_case(AttnTcFn fn, AttentionStep step, const Case& c, std::uint64_t seed) {
  const Inputs in = make_inputs(c, seed);
  const DeviceResult got = run_device(fn, step, c, in);
  course::ref::AttentionOptions opts;
  opts.scale = c.scale;
  opts.causal = c.causal;
  const auto exact = course::ref::attention_forward(in.q, in.k, in.v, opts);  // double accumulation
  const auto plain = course::ref::attention_forward_bf16(in.q, in.k, in.v, opts);
  CaseCheck out;
  std::ostringstream report;
  const double v_max = std::max(std::fabs(c.v_lo), std::fabs(c.v_hi));
  const double err = max_error(got.o, exact.out), err_plain = max_error(plain.out, exact.out);
  const double allowed = 2.0 * err_plain + kOutFloor * v_max;
  out.worst_ratio = err / allowed;
  if (!(err <= allowed))
    report << "\n    O: max error " << err << " > 2 x " << err_plain << " (plain bf16) + " << kOutFloor * v_max;
  if (c.lse) {
    const double e = max_lse_error(got.lse, exact.lse.storage());
    const double e_plain = max_lse_error(plain.lse.storage(), exact.lse.storage());
    const double floor = lse_floor(exact.lse.storage(), in, c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d)));
    out.worst_ratio = std::max(out.worst_ratio, e / (2.0 * e_plain + floor));
    if (!(e <= 2.0 * e_plain + floor))
      report << "\n    lse: max error " << e << " > 2 x " << e_plain << " (plain bf16) + " << floor;
  }
  report << padding_report(got.o, "O");
  out.report = report.str();
  if (std::isnan(out.worst_ratio)) out.worst_ratio = INFINITY;
  return out;
}

/// THE check, shared by the real tests and the planted-bug tests: every case through
/// check_case on fresh data. NotImplemented propagates: callers wrap it in
/// COURSE_SKIP_IF_NOT_IMPLEMENTED.
/// Cases whose head dim the step does not take (the Hopper steps: 64 and 128 only) are left
/// out; the validation test checks that the step rejects them by name.
inline ::testing::AssertionResult check_cases(AttnTcFn fn, AttentionStep step, const std::vector<Case>& all_cases,
                                              std::uint64_t seed) {
  std::vector<Case> cases;
  for (const Case& c : all_cases)
    if (course::m03::step_takes_head_dim(step, c.d)) cases.push_back(c);
  return attention_testing::check_each(course::m03::step_name(step), cases, seed, [&](const Case& c, std::uint64_t s) {
    return check_case(fn, step, c, s).report;
  });
}

}  // namespace course::m03::tc_checks
