// Random-case hardening of module 4 (label fuzz), run against course::solution and
// course::exercise like the module's tests. For every step of softmax_backward (both dims),
// linear_backward and attention_backward: 512 random cases drawn from the step's whole
// contract, in 4 parts that ctest runs in parallel, plus a few large cases (*Large*), each
// checked by the module's own helper (tests/*_check.hpp) against the CPU reference; then a
// bad-input sweep per op and step: every bad argument is rejected by name and leaves a
// healthy CUDA context. Seeds, replay and the "[fuzz]" lines: course/fuzz.hpp.
#include "attention_backward_check.hpp"
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "linear_backward_check.hpp"
#include "module04/attention_backward.hpp"
#include "module04/linear_backward.hpp"
#include "module04/softmax_backward.hpp"
#include "softmax_backward_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::AttentionLayout;
using course::DeviceBuffer;
using course::StepInfo;
using course::fuzz::draw_divisor;
using course::fuzz::draw_row_stride;
using course::fuzz::fake_address;
using course::fuzz::kCasesPerStep;
using course::fuzz::kLargeCases;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::round_up;
using course::fuzz::step_name;
using course::fuzz::step_part_name;
using course::fuzz::ValueRange;
using course::fuzz::Verdict;
using course::m04::AttentionBackwardArgs;
using course::m04::AttentionBackwardStep;
using course::m04::BiasGradStep;
using course::m04::LinearBackwardArgs;
using course::m04::SoftmaxBackwardArgs;
using course::m04::SoftmaxBackwardStep;
using course::m04::attention_checks::BHND;
using course::m04::attention_checks::BNHD;
using course::testing::GpuTest;

// ========================================================== softmax backward =====

using SmbCase = course::m04::softmax_checks::Case;

/// Slice lengths around every size the steps dispatch on (a float4, a warp, warp_per_row's
/// 1024 columns, fused_vectorized's 16384 on-chip limit), up to 40000; the other extent
/// keeps the matrix under ~2^18 elements. y is a real softmax of logits in a random range,
/// dy any range (or constant). Large: up to 2^24 elements, long and short slices.
SmbCase draw_softmax_backward(Rng& rng, int dim, bool large) {
  SmbCase c;
  c.dim = dim;
  std::int64_t length, slices;
  if (large) {
    switch (rng.uniform(0, 2)) {
      case 0:
        length = rng.uniform(2000, 8192), slices = rng.uniform(1000, 2048);
        break;
      case 1:
        length = rng.size(16385, 1 << 20), slices = rng.uniform(1, 7);
        break;
      default:
        length = rng.uniform(1, 64), slices = rng.uniform(100000, 250000);
        break;
    }
  } else {
    length = rng.size(1, 40000, {4, 32, 1024, 16384});
    slices = rng.size(1, std::max<std::int64_t>(1, (std::int64_t{1} << 18) / length), {4, 8, 32, 256});
  }
  c.rows = dim == 1 ? slices : length;
  c.cols = dim == 1 ? length : slices;
  if (rng.chance(0.25)) {  // fused_vectorized's float4 path: aligned bases, row strides multiples of 4
    c.ldy = round_up(c.cols, 4) + 4 * rng.uniform(0, 2);
    c.lddy = round_up(c.cols, 4) + 4 * rng.uniform(0, 2);
    c.lddx = round_up(c.cols, 4) + 4 * rng.uniform(0, 2);
  } else {
    c.ldy = draw_row_stride(rng, c.cols);
    c.lddy = draw_row_stride(rng, c.cols);
    c.lddx = draw_row_stride(rng, c.cols);
    c.offset = rng.chance(0.4) ? rng.uniform(1, 3) : 0;
  }
  c.in_place = rng.chance(0.15);
  c.logit_range = rng.chance(0.5) ? 4.0 : std::exp(rng.real(std::log(0.01), std::log(100.0)));
  c.constant_dy = rng.chance(0.05);
  const ValueRange dy = course::fuzz::draw_values(rng, 1e3);
  c.dy_lo = dy.lo;
  c.dy_hi = dy.hi;
  return c;
}

Verdict check_softmax_backward(SoftmaxBackwardStep step, const SmbCase& c, std::uint64_t seed) {
  const auto o = course::m04::softmax_checks::run_case(
      [](SoftmaxBackwardStep s, const SoftmaxBackwardArgs& a) { impl::softmax_backward(s, a); }, step, c, seed);
  Verdict v;
  v.add(o.cmp, "dx");
  if (o.padding_writes) v.fail(std::to_string(o.padding_writes) + " writes into the row padding of dx");
  if (!(o.worst_slice_sum_ratio <= 1.0))
    v.fail("a slice of dx sums to " + std::to_string(o.worst_slice_sum_ratio) + " x the allowed |sum| (must be ~0)");
  v.ratio = std::max(v.ratio, o.worst_slice_sum_ratio);
  return v;
}

using SmbParam = std::tuple<StepInfo<SoftmaxBackwardStep>, int, int>;  // step, dim, part

class FuzzSoftmaxBackward : public GpuTest, public ::testing::WithParamInterface<SmbParam> {
 protected:
  void run(bool large) {
    const auto& [info, dim, part_index] = GetParam();
    const SoftmaxBackwardStep step = info.step;
    const int d = dim;
    const Part part =
        make_part("softmax_backward", std::string(info.name) + "/dim" + std::to_string(dim), part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_softmax_backward(rng, d, large); },
        [&](const SmbCase& c, std::uint64_t s) { return check_softmax_backward(step, c, s); })));
  }
};

class FuzzSoftmaxBackwardLarge : public FuzzSoftmaxBackward {};

TEST_P(FuzzSoftmaxBackward, RandomCases) { run(false); }
TEST_P(FuzzSoftmaxBackwardLarge, RandomCases) { run(true); }

std::string smb_param_name(const ::testing::TestParamInfo<SmbParam>& info) {
  const auto& [step, dim, part] = info.param;
  return course::fuzz::test_name(step.name, "dim" + std::to_string(dim), part);  // "two_pass_dim0_part0"
}

COURSE_FUZZ_INSTANTIATE(FuzzSoftmaxBackward, FuzzSoftmaxBackwardLarge, smb_param_name,
                        ::testing::ValuesIn(course::m04::kSoftmaxBackwardSteps), ::testing::Values(1, 0));

class FuzzSoftmaxBackwardBadInputs : public GpuTest,
                                     public ::testing::WithParamInterface<StepInfo<SoftmaxBackwardStep>> {};

TEST_P(FuzzSoftmaxBackwardBadInputs, RejectedByNameContextHealthy) {
  const SoftmaxBackwardStep step = GetParam().step;
  constexpr std::int64_t kRows = 16, kCols = 64;
  DeviceBuffer<float> y(kRows * kCols), dy(kRows * kCols), dx(kRows * kCols), ws(4 * kRows * kCols);
  const auto good = [&] {
    SoftmaxBackwardArgs a =
        course::m04::contiguous_softmax_backward_args(y.data(), dy.data(), dx.data(), kRows, kCols, 1);
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    return a;
  };
  using A = SoftmaxBackwardArgs;
  struct Bad {
    const char* what;
    std::function<void(A&)> mutate;
    const char* needle;
    bool two_pass_only = false;
  };
  const float* y_half = reinterpret_cast<const float*>(reinterpret_cast<const char*>(y.data()) + 2);
  const std::vector<Bad> bad = {
      {"negative rows", [](A& a) { a.rows = -1; }, "'rows' = -1"},
      {"negative cols", [](A& a) { a.cols = -2; }, "'cols' = -2"},
      {"rows beyond 2^31 - 1", [](A& a) { a.rows = std::int64_t{1} << 31; }, "'rows'"},
      {"dim 2", [](A& a) { a.dim = 2; }, "'dim' = 2"},
      {"ldy < cols", [](A& a) { a.ldy = a.cols - 1; }, "'ldy'"},
      {"lddy < cols", [](A& a) { a.lddy = 1; }, "'lddy'"},
      {"lddx < cols", [](A& a) { a.lddx = 0; }, "'lddx'"},
      {"null y", [](A& a) { a.y = nullptr; }, "'y' = nullptr"},
      {"null dy", [](A& a) { a.dy = nullptr; }, "'dy' = nullptr"},
      {"null dx", [](A& a) { a.dx = nullptr; }, "'dx' = nullptr"},
      {"y misaligned by half an element", [&](A& a) { a.y = y_half; }, "'y'"},
      {"dx overlapping y", [&](A& a) { a.dx = y.data() + 64; }, "'dx'"},
      {"dx == y", [&](A& a) { a.dx = y.data(); }, "'dx'"},
      {"dx overlapping dy (not in place)", [&](A& a) { a.dx = dy.data() + 3; }, "'dx'"},
      {"dx == dy with another row stride",
       [&](A& a) {
         a.dx = dy.data();
         a.rows = 8;
         a.lddx = a.lddy + 4;
       },
       "'dx'"},
      {"workspace too small", [](A& a) { a.workspace_bytes = sizeof(float); }, "'workspace_bytes'", true},
      {"null workspace", [](A& a) { a.workspace = nullptr; }, "'workspace' = nullptr", true},
      {"workspace overlapping y", [&](A& a) { a.workspace = y.data(); }, "'workspace'", true},
      {"workspace overlapping dx", [&](A& a) { a.workspace = dx.data() + 8; }, "'workspace'", true},
  };
  for (const Bad& x : bad) {
    if (x.two_pass_only && step != SoftmaxBackwardStep::two_pass) continue;
    for (const int dim : {1, 0}) {
      SCOPED_TRACE(std::string(x.what) + ", dim " + std::to_string(dim));
      A a = good();
      a.dim = dim;
      x.mutate(a);
      COURSE_SKIP_IF_NOT_IMPLEMENTED(
          EXPECT_TRUE(course::fuzz::rejects([&] { impl::softmax_backward(step, a); }, x.needle)));
    }
  }
  A a = good();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(
      course::fuzz::rejects([&] { impl::softmax_backward(static_cast<SoftmaxBackwardStep>(99), a); }, "'step' = 99")));
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzSoftmaxBackwardBadInputs, ::testing::ValuesIn(course::m04::kSoftmaxBackwardSteps),
                         step_name<SoftmaxBackwardStep>);

// =========================================================== linear backward =====

using LinCase = course::m04::linear_checks::Case;
using course::m04::linear_checks::Lds;

/// M, K, N up to ~300 around the GEMM tiles (8, 32, 64, 128) and the bias strip (32), 1 and
/// primes; row strides 0 (dense), explicit dense or padded by 1..9 per operand; any subset
/// of the gradients; bases off 16-byte alignment; data ranges per operand. Large: a batch
/// of up to 4096 tokens into a 256..512-wide layer.
LinCase draw_linear_backward(Rng& rng, bool large) {
  LinCase c;
  if (large) {
    c.M = rng.uniform(2048, 4096), c.K = rng.uniform(256, 512), c.N = rng.uniform(256, 512);
  } else {
    c.M = rng.size(1, 300, {8, 32, 64, 128});
    c.K = rng.size(1, 300, {8, 32, 64, 128});
    c.N = rng.size(1, 300, {8, 32, 64, 128});
  }
  c.lds = rng.pick({Lds::zero, Lds::dense, Lds::padded, Lds::padded});
  c.pad_x = rng.uniform(1, 9), c.pad_w = rng.uniform(1, 9), c.pad_dy = rng.uniform(1, 9);
  c.pad_dx = rng.uniform(1, 9), c.pad_dw = rng.uniform(1, 9);
  if (rng.chance(0.3)) {
    c.want_dx = rng.chance(0.5), c.want_dw = rng.chance(0.5), c.want_db = rng.chance(0.5);  // any subset, even none
  }
  c.offset = rng.chance(0.25) ? rng.uniform(1, 3) : 0;
  const ValueRange x = course::fuzz::draw_values(rng, 1e3), w = course::fuzz::draw_values(rng, 1e3),
                   dy = course::fuzz::draw_values(rng, 1e3);
  c.x_lo = static_cast<float>(x.lo), c.x_hi = static_cast<float>(x.hi);
  c.w_lo = static_cast<float>(w.lo), c.w_hi = static_cast<float>(w.hi);
  c.lo = static_cast<float>(dy.lo), c.hi = static_cast<float>(dy.hi);
  c.floor_from_data = true;
  return c;
}

Verdict check_linear_backward(BiasGradStep step, const LinCase& c, std::uint64_t seed) {
  const auto p = course::m04::linear_checks::make_problem(c, seed);
  const auto r = course::m04::linear_checks::run_on_device(&impl::linear_backward, step, p);
  Verdict v;
  const std::string failure = course::m04::linear_checks::judge(p, r, &v.ratio);
  if (!failure.empty()) v.fail(failure);
  return v;
}

using LinParam = std::tuple<StepInfo<BiasGradStep>, int>;

class FuzzLinearBackward : public GpuTest, public ::testing::WithParamInterface<LinParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const BiasGradStep step = info.step;
    const Part part = make_part("linear_backward", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_linear_backward(rng, large); },
        [&](const LinCase& c, std::uint64_t s) { return check_linear_backward(step, c, s); })));
  }
};

class FuzzLinearBackwardLarge : public FuzzLinearBackward {};

TEST_P(FuzzLinearBackward, RandomCases) { run(false); }
TEST_P(FuzzLinearBackwardLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzLinearBackward, FuzzLinearBackwardLarge, step_part_name<BiasGradStep>,
                        ::testing::ValuesIn(course::m04::kBiasGradSteps));

class FuzzLinearBackwardBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<BiasGradStep>> {};

TEST_P(FuzzLinearBackwardBadInputs, RejectedByNameContextHealthy) {
  const BiasGradStep step = GetParam().step;
  // Valid: M = 16, K = 8, N = 12, dense, every gradient requested.
  DeviceBuffer<float> x(16 * 8), w(8 * 12), dy(16 * 12), dx(16 * 8), dw(8 * 12), db(12);
  const auto good = [&] {
    return course::m04::make_linear_backward_args(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), 16, 8,
                                                  12);
  };
  using A = LinearBackwardArgs;
  struct Bad {
    const char* what;
    std::function<void(A&)> mutate;
    const char* needle;
  };
  const float* x_half = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x.data()) + 2);
  const std::vector<Bad> bad = {
      {"M = 0", [](A& a) { a.M = 0; }, "'M' = 0"},
      {"negative K", [](A& a) { a.K = -1; }, "'K' = -1"},
      {"N = 0", [](A& a) { a.N = 0; }, "'N' = 0"},
      {"M beyond 2^31 - 1", [](A& a) { a.M = std::int64_t{1} << 31; }, "'M'"},
      {"negative ldx", [](A& a) { a.ldx = -8; }, "'ldx' = -8"},
      {"ldw < N", [](A& a) { a.ldw = 11; }, "'ldw' = 11"},
      {"lddy < N", [](A& a) { a.lddy = 5; }, "'lddy' = 5"},
      {"lddx < K", [](A& a) { a.lddx = 7; }, "'lddx' = 7"},
      {"lddw < N", [](A& a) { a.lddw = 1; }, "'lddw' = 1"},
      {"null dy", [](A& a) { a.dy = nullptr; }, "'dy'"},
      {"null w with dx requested", [](A& a) { a.w = nullptr; }, "'w'"},
      {"null x with dw requested", [](A& a) { a.x = nullptr; }, "'x'"},
      {"x misaligned by half an element", [&](A& a) { a.x = x_half; }, "'x'"},
      {"dx overlapping x", [&](A& a) { a.dx = x.data() + 4; }, "'dx'"},
      {"dw overlapping dy", [&](A& a) { a.dw = dy.data(); }, "'dw'"},
      {"db overlapping w", [&](A& a) { a.db = w.data() + 90; }, "'db'"},
      {"dw overlapping dx", [&](A& a) { a.dw = dx.data() + 8; }, "'dw'"},
      {"db overlapping dw", [&](A& a) { a.db = dw.data() + 3; }, "'db'"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    A a = good();
    b.mutate(a);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        EXPECT_TRUE(course::fuzz::rejects([&] { impl::linear_backward(step, a); }, b.needle)));
  }
  A a = good();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(
      course::fuzz::rejects([&] { impl::linear_backward(static_cast<BiasGradStep>(99), a); }, "'step' = 99")));
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzLinearBackwardBadInputs, ::testing::ValuesIn(course::m04::kBiasGradSteps),
                         step_name<BiasGradStep>);

// ======================================================== attention backward =====

using AbCase = course::m04::attention_checks::Case;

/// Everything step_support(step) allows: N_q, N_k up to ~200 around the tiles (32, 64, 128),
/// equal a third of the time; batch and heads within 2^22 multiply-adds per case (the CPU
/// forward, backward and error budget stay quick); every head dim; BHND/BNHD for the inputs
/// and, separately, the gradients; padded rows; K/V broadcast over the batch; causal;
/// grouped-query; an explicit scale; large-magnitude and one-signed data. Large: long
/// sequences, many heads, decoding.
AbCase draw_attention_backward(Rng& rng, AttentionBackwardStep step, bool large) {
  const auto sup = course::m04::step_support(step);
  AbCase c;
  std::vector<std::int64_t> dims;
  for (const int d : course::m03::kHeadDims)
    if (d <= sup.max_head_dim) dims.push_back(d);
  c.d = rng.pick(dims);
  if (large) {
    switch (rng.uniform(0, 2)) {
      case 0:
        c.N_q = rng.uniform(800, 1100), c.N_k = rng.uniform(800, 1100), c.d = std::min<std::int64_t>(c.d, 64);
        break;
      case 1:
        c.B = 2, c.H = 8, c.N_q = c.N_k = rng.uniform(150, 256);
        break;
      default:
        c.N_q = rng.uniform(1, 64), c.N_k = rng.uniform(2000, 4000), c.H = 2;
        break;
    }
  } else if (rng.chance(0.04)) {
    c.B = rng.uniform(16, 40), c.H = rng.uniform(16, 40);
    c.N_q = rng.size(1, 12), c.N_k = rng.size(1, 12);
    c.d = std::min<std::int64_t>(c.d, 32);
  } else {
    c.N_q = rng.size(1, 200, {32, 64, 128});
    c.N_k = rng.chance(0.33) ? c.N_q : rng.size(1, 200, {32, 64, 128});
    const std::int64_t per_pair = c.N_q * c.N_k * c.d, rows = std::max(c.N_q, c.N_k) * c.d;
    const std::int64_t pairs =
        std::max<std::int64_t>(1, std::min((std::int64_t{1} << 22) / per_pair, (std::int64_t{1} << 18) / rows));
    c.B = rng.size(1, std::min<std::int64_t>(3, pairs));
    c.H = rng.size(1, std::max<std::int64_t>(1, std::min<std::int64_t>(8, pairs / c.B)));
    if (sup.grouped_query && rng.chance(0.3) && c.B * c.H < 4 && per_pair <= (std::int64_t{1} << 20)) {
      c.B = 1;  // enough heads for a group size strictly between 1 and H
      c.H = rng.pick({4, 6, 8});
    }
  }
  c.H_kv = sup.grouped_query && rng.chance(0.5) ? draw_divisor(rng, c.H) : c.H;
  c.layout = rng.pick({BHND, BNHD});
  c.grad_layout = rng.chance(0.5) ? c.layout : rng.pick({BHND, BNHD});
  c.pad = rng.chance(0.3) ? 4 * rng.uniform(1, 4) : 0;
  c.grad_pad = rng.chance(0.25) ? 4 * rng.uniform(1, 3) : 0;
  c.kv_batch_broadcast = c.B > 1 && rng.chance(0.1);
  c.causal = sup.causal && rng.chance(0.5);
  c.input_range = rng.chance(0.5) ? 1.0 : std::exp(rng.real(std::log(0.05), std::log(20.0)));
  const ValueRange v = course::fuzz::draw_values(rng, 100.0), dout = course::fuzz::draw_values(rng, 100.0);
  c.v_lo = v.lo, c.v_hi = v.hi;
  c.do_lo = dout.lo, c.do_hi = dout.hi;
  c.scale = rng.chance(0.8) ? 0.f : static_cast<float>(rng.real(0.05, 1.0));
  return c;
}

using AbParam = std::tuple<StepInfo<AttentionBackwardStep>, int>;

class FuzzAttentionBackward : public GpuTest, public ::testing::WithParamInterface<AbParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const AttentionBackwardStep step = info.step;
    const Part part = make_part("attention_backward", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_attention_backward(rng, step, large); },
        [&](const AbCase& c, std::uint64_t s) {
          Verdict v;
          const std::string failure =
              course::m04::attention_checks::check_case(&impl::attention_backward, step, c, s, &v.ratio);
          if (!failure.empty()) v.fail(failure);
          return v;
        })));
  }
};

class FuzzAttentionBackwardLarge : public FuzzAttentionBackward {};

TEST_P(FuzzAttentionBackward, RandomCases) { run(false); }
TEST_P(FuzzAttentionBackwardLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzAttentionBackward, FuzzAttentionBackwardLarge, step_part_name<AttentionBackwardStep>,
                        ::testing::ValuesIn(course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::f32)));

class FuzzAttentionBackwardBadInputs : public GpuTest,
                                       public ::testing::WithParamInterface<StepInfo<AttentionBackwardStep>> {};

TEST_P(FuzzAttentionBackwardBadInputs, RejectedByNameContextHealthy) {
  const AttentionBackwardStep step = GetParam().step;
  const auto sup = course::m04::step_support(step);
  // Valid: B = 2, H = H_kv = 2, N_q = N_k = 8, d = 64, BHND; device buffers.
  constexpr std::int64_t kElems = 2 * 2 * 8 * 64;
  DeviceBuffer<float> q(kElems), k(kElems), v(kElems), o(kElems), dout(kElems), lse(2 * 2 * 8), dq(kElems), dk(kElems),
      dv(kElems);
  DeviceBuffer<float> ws(course::m04::attention_backward_workspace_bytes(step, 2, 2, 8, 8) / sizeof(float) + 64);
  const auto good = [&] {
    AttentionBackwardArgs a =
        course::m04::make_attention_backward_args(q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(),
                                                  dq.data(), dk.data(), dv.data(), 2, 2, 2, 8, 8, 64, BHND);
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    return a;
  };
  using A = AttentionBackwardArgs;
  struct Bad {
    const char* what;
    std::function<void(A&)> mutate;
    const char* needle;
    bool applies = true;
  };
  const std::vector<Bad> bad = {
      {"seq_q = 0", [](A& a) { a.seq_q = 0; }, "'seq_q' = 0"},
      {"negative seq_k", [](A& a) { a.seq_k = -3; }, "'seq_k' = -3"},
      {"seq_k beyond 2^31 - 1", [](A& a) { a.seq_k = std::int64_t{1} << 31; }, "'seq_k'"},
      {"batch = 0", [](A& a) { a.batch = 0; }, "'batch' = 0"},
      {"heads = 0", [](A& a) { a.heads = 0; }, "'heads' = 0"},
      {"kv_heads not dividing heads",
       [](A& a) {
         a.heads = 2;
         a.kv_heads = 3;
       },
       "'kv_heads' = 3"},
      {"batch * heads beyond blockIdx.y",
       [](A& a) {
         a.batch = 300;
         a.heads = a.kv_heads = 300;
       },
       "'batch' = 300"},
      {"head_dim 48 (no kernel for it)", [](A& a) { a.head_dim = 48; }, "'head_dim' = 48"},
      {"head_dim 256", [](A& a) { a.head_dim = 256; }, "'head_dim' = 256"},
      {"null q", [](A& a) { a.q = nullptr; }, "'q' = nullptr"},
      {"null o", [](A& a) { a.o = nullptr; }, "'o' = nullptr"},
      {"null dout", [](A& a) { a.dout = nullptr; }, "'dout' = nullptr"},
      {"null lse", [](A& a) { a.lse = nullptr; }, "'lse' = nullptr"},
      {"null dk", [](A& a) { a.dk = nullptr; }, "'dk' = nullptr"},
      {"k misaligned by one element",
       [&](A& a) {
         a.k = k.data() + 1;
         a.seq_k = 7;
       },
       "'k'"},
      {"dq misaligned by one element",
       [&](A& a) {
         a.dq = dq.data() + 1;
         a.seq_q = 7;
       },
       "'dq'"},
      {"lse misaligned by half an element",
       [&](A& a) { a.lse = reinterpret_cast<const float*>(reinterpret_cast<const char*>(lse.data()) + 2); }, "'lse'"},
      {"row stride not a multiple of 4", [](A& a) { a.do_strides.seq = 66; }, "'do_strides.seq' = 66"},
      {"row stride below head_dim", [](A& a) { a.v_strides.seq = 32; }, "'v_strides.seq' = 32"},
      {"negative batch stride", [](A& a) { a.q_strides.batch = -4; }, "'q_strides.batch' = -4"},
      {"dK heads on top of each other", [](A& a) { a.dk_strides.head = 0; }, "'dk_strides.head' = 0"},
      {"dq overlapping q", [&](A& a) { a.dq = const_cast<float*>(q.data()); }, "'dq'"},
      {"dv overlapping lse", [&](A& a) { a.dv = lse.data(); }, "'dv'"},
      {"dk overlapping dq", [&](A& a) { a.dk = dq.data() + 64; }, "'dk'"},
      {"negative scale", [](A& a) { a.scale = -0.5f; }, "'scale' = -0.5"},
      {"infinite scale", [](A& a) { a.scale = std::numeric_limits<float>::infinity(); }, "'scale'"},
      {"causal on a step without a mask", [](A& a) { a.causal = true; }, "'causal'", !sup.causal},
      {"grouped-query on a step without it", [](A& a) { a.kv_heads = 1; }, "'kv_heads' = 1", !sup.grouped_query},
      {"workspace too small", [](A& a) { a.workspace_bytes = 8; }, "'workspace_bytes' = 8"},
      {"null workspace", [](A& a) { a.workspace = nullptr; }, "'workspace' = nullptr"},
      {"workspace overlapping dq", [&](A& a) { a.workspace = dq.data(); }, "'workspace'"},
      {"workspace overlapping o", [&](A& a) { a.workspace = const_cast<float*>(o.data()) + 16; }, "'workspace'"},
  };
  for (const Bad& x : bad) {
    if (!x.applies) continue;
    SCOPED_TRACE(x.what);
    A a = good();
    x.mutate(a);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        EXPECT_TRUE(course::fuzz::rejects([&] { impl::attention_backward(step, a); }, x.needle)));
  }
  A a = good();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects(
      [&] { impl::attention_backward(static_cast<AttentionBackwardStep>(99), a); }, "'step' = 99")));
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzAttentionBackwardBadInputs,
                         ::testing::ValuesIn(course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::f32)),
                         step_name<AttentionBackwardStep>);

// ===================================== the generators themselves (CPU only) =====
// Every drawn case must pass the op's own validation (addresses only, never dereferenced),
// and every feature of the contract must occur.

TEST(FuzzGenerators, SoftmaxBackwardCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  for (const auto& info : course::m04::kSoftmaxBackwardSteps)
    for (const int dim : {1, 0}) {
      course::fuzz::Coverage cov(std::string("softmax_backward/") + info.name + "/dim" + std::to_string(dim));
      for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
        Rng rng(course::fuzz::case_seed(seed, i));
        const SmbCase c = draw_softmax_backward(rng, dim, i >= kCasesPerStep);
        SoftmaxBackwardArgs a;
        a.y = fake_address<float>(1, c.offset);
        a.dy = fake_address<float>(2, c.offset);
        a.dx = c.in_place ? fake_address<float>(2, c.offset) : fake_address<float>(3, c.offset);
        a.rows = c.rows, a.cols = c.cols, a.dim = c.dim;
        a.ldy = c.stride_y(), a.lddy = c.stride_dy(), a.lddx = c.stride_dx();
        a.workspace = fake_address<float>(4);
        a.workspace_bytes = course::m04::softmax_backward_workspace_bytes(info.step, c.rows, c.cols, c.dim);
        EXPECT_NO_THROW(course::m04::validate_softmax_backward_args(a, info.step, "fuzz")) << c.str();
        const std::int64_t length = dim == 1 ? c.cols : c.rows;
        cov.next_case();
        cov.count("length 1", length == 1);
        cov.count("prime length", course::fuzz::is_prime(length));
        cov.count("length=k*tile+-1",
                  length > 1 && length % 4 != 0 && course::fuzz::near_tile(length, {32, 1024, 16384}));
        cov.count("length>1024", length > 1024);
        cov.count("length>16384", length > 16384);
        cov.count("padded rows", a.ldy > c.cols || a.lddy > c.cols || a.lddx > c.cols);
        cov.count("float4 path", c.offset == 0 && a.ldy % 4 == 0 && a.lddy % 4 == 0 && a.lddx % 4 == 0);
        cov.count("in place", c.in_place);
        cov.count("misaligned base", c.offset != 0);
        cov.count("constant dy", c.constant_dy);
        cov.count("sharp softmax (logits >= 20)", c.logit_range >= 20);
        cov.count("one-signed dy", !c.constant_dy && (c.dy_lo >= 0 || c.dy_hi <= 0));
        cov.count("|dy|>=100", std::max(std::fabs(c.dy_lo), std::fabs(c.dy_hi)) >= 100);
      }
      std::cout << cov.str() << "\n";
      EXPECT_TRUE(cov.all_hit());
    }
}

TEST(FuzzGenerators, LinearBackwardCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  course::fuzz::Coverage cov("linear_backward");
  for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
    Rng rng(course::fuzz::case_seed(seed, i));
    const LinCase c = draw_linear_backward(rng, i >= kCasesPerStep);
    LinearBackwardArgs a = course::m04::make_linear_backward_args(
        fake_address<float>(1, c.offset), fake_address<float>(2, c.offset), fake_address<float>(3, c.offset),
        c.want_dx ? fake_address<float>(4, c.offset) : nullptr, c.want_dw ? fake_address<float>(5, c.offset) : nullptr,
        c.want_db ? fake_address<float>(6, c.offset) : nullptr, c.M, c.K, c.N);
    if (c.lds == Lds::zero) {
      a.ldx = a.ldw = a.lddy = a.lddx = a.lddw = 0;
    } else {
      a.ldx = c.ldx(), a.ldw = c.ldw(), a.lddy = c.lddy(), a.lddx = c.lddx(), a.lddw = c.lddw();
    }
    EXPECT_NO_THROW(course::m04::validate_linear_backward_args(a, BiasGradStep::column_per_thread, "fuzz")) << c.str();
    cov.next_case();
    cov.count("a dim = 1", c.M == 1 || c.K == 1 || c.N == 1);
    cov.count("prime N", course::fuzz::is_prime(c.N));
    cov.count("N=k*32+-1", c.N % 32 != 0 && course::fuzz::near_tile(c.N, {32}));
    cov.count("lds 0", c.lds == Lds::zero);
    cov.count("padded lds", c.lds == Lds::padded);
    cov.count("not all gradients", !(c.want_dx && c.want_dw && c.want_db));
    cov.count("no gradient", !c.want_dx && !c.want_dw && !c.want_db);
    cov.count("misaligned base", c.offset != 0);
    cov.count("one-signed dy", c.lo >= 0 || c.hi <= 0);
    cov.count("|x|>=100", std::max(std::fabs(c.x_lo), std::fabs(c.x_hi)) >= 100);
  }
  std::cout << cov.str() << "\n";
  EXPECT_TRUE(cov.all_hit());
}

TEST(FuzzGenerators, AttentionBackwardCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  using course::m04::attention_checks::make_tensor;
  using course::m04::attention_checks::strides_of;
  for (const auto& info : course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::f32)) {
    const auto sup = course::m04::step_support(info.step);
    course::fuzz::Coverage cov(std::string("attention_backward/") + info.name);
    for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
      Rng rng(course::fuzz::case_seed(seed, i));
      const AbCase c = draw_attention_backward(rng, info.step, i >= kCasesPerStep);
      // The strides the checking helper gives the kernel (make_tensor, as in DeviceProblem).
      AttentionBackwardArgs a = course::m04::make_attention_backward_args(
          fake_address<float>(1), fake_address<float>(2), fake_address<float>(3), fake_address<float>(4),
          fake_address<float>(5), fake_address<float>(6), fake_address<float>(7), fake_address<float>(8),
          fake_address<float>(9), c.B, c.H, c.H_kv, c.N_q, c.N_k, c.d, c.layout);
      a.q_strides = a.o_strides = a.do_strides = strides_of(make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad));
      a.k_strides = a.v_strides =
          strides_of(make_tensor(c.B, c.H_kv, c.N_k, c.d, c.layout, c.pad, c.kv_batch_broadcast));
      a.dq_strides = strides_of(make_tensor(c.B, c.H, c.N_q, c.d, c.grad_layout, c.grad_pad));
      a.dk_strides = a.dv_strides = strides_of(make_tensor(c.B, c.H_kv, c.N_k, c.d, c.grad_layout, c.grad_pad));
      a.scale = c.scale;
      a.causal = c.causal;
      a.workspace = fake_address<float>(10);
      a.workspace_bytes = course::m04::attention_backward_workspace_bytes(info.step, a);
      EXPECT_NO_THROW(course::m04::validate_attention_backward_args(a, info.step, "fuzz")) << c.str();
      EXPECT_TRUE(course::m04::attention_checks::supports(info.step, c)) << c.str();
      cov.next_case();
      cov.count("N=1", c.N_q == 1 || c.N_k == 1);
      cov.count("prime N_k", course::fuzz::is_prime(c.N_k));
      cov.count("N_k=k*tile+-1", c.N_k % 32 != 0 && course::fuzz::near_tile(c.N_k, {32, 64, 128}));
      cov.count("N_q>N_k", c.N_q > c.N_k);
      cov.count("N_q<N_k", c.N_q < c.N_k);
      cov.count("B*H>=256", c.B * c.H >= 256);
      cov.count("d=16", c.d == 16);
      cov.count("d=128", c.d == 128);
      cov.count("BNHD", c.layout == BNHD);
      cov.count("gradient layout differs", c.grad_layout != c.layout);
      cov.count("padded rows", c.pad > 0);
      cov.count("padded gradients", c.grad_pad > 0);
      cov.count("kv batch broadcast", c.kv_batch_broadcast);
      cov.count("|q|>=10", c.input_range >= 10);
      cov.count("one-signed dO", c.do_lo >= 0 || c.do_hi <= 0);
      cov.count("explicit scale", c.scale != 0.f);
      if (sup.causal) cov.count("causal", c.causal);
      if (sup.causal) cov.count("causal, N_q>N_k", c.causal && c.N_q > c.N_k);
      if (sup.grouped_query) {
        cov.count("grouped-query", c.H_kv < c.H && c.H_kv > 1);
        cov.count("multi-query", c.H_kv == 1 && c.H > 1);
      }
    }
    std::cout << cov.str() << "\n";
    EXPECT_TRUE(cov.all_hit());
  }
}

}  // namespace
