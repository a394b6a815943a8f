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
#include "attention_backward_check.hpp"
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

using course::m04::attention_checks::backward_tolerance;
using course::m04::attention_checks::Case;
using course::m04::attention_checks::check_cases;
using course::m04::attention_checks::compare_grads;
using course::m04::attention_checks::DeviceProblem;
using course::m04::attention_checks::Grads;
using course::m04::attention_checks::GradTolerance;
using course::m04::attention_checks::Inputs;
using course::m04::attention_checks::make_case;
using course::m04::attention_checks::make_inputs;
using course::m04::attention_checks::make_tensor;
using course::m04::attention_checks::max_row_norm;
using course::m04::attention_checks::options;
using course::m04::attention_checks::reference;
using course::m04::attention_checks::supported;
using course::m04::attention_checks::supports;
using course::m04::attention_checks::with_kv_heads;

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
                         ::testing::ValuesIn(course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::f32)), step_name);

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

/// Step flash_deterministic's own kernel with its dQ turn never awaited (the planted bug of
/// attention_backward_flash_planted.cu): the K/V tiles' additions race again, and the
/// repeated runs that promise identical bits must see the difference. 32 K/V tiles add to
/// every query tile of each of the 4 heads. The real step passes the same check above
/// (RepeatedRunsAreDeterministicWherePromised): a failure here is the skipped wait's.
/// "Large": 21 runs at N = 2048, left out of the compute-sanitizer run.
class PlantedAttentionBackwardTurnTest : public GpuTest {};

TEST_F(PlantedAttentionBackwardTurnTest, LargeUnawaitedTurnBreaksDeterminism) {
  constexpr AttentionBackwardStep kStep = AttentionBackwardStep::flash_deterministic;
  const Case c = make_case(1, 4, 2048, 2048, 64, BHND, false);
  const Inputs in = make_inputs(c, seed());
  DeviceProblem problem(c, in, kStep);
  const Grads first = problem.run(&course::planted::attention_backward_flash_turn_not_awaited, kStep);
  int differing = 0;
  for (int r = 0; r < 20 && differing == 0; ++r) {
    const Grads again = problem.run(&course::planted::attention_backward_flash_turn_not_awaited, kStep);
    differing += std::memcmp(first.dq.data(), again.dq.data(), first.dq.storage().size() * sizeof(float)) != 0;
  }
  EXPECT_GT(differing, 0) << "an unordered dQ gave identical bits 21 times";
}

// ----------------------------------------- host-side checks (no GPU needed) -----

TEST(AttentionBackwardWorkspaceTest, NaiveNeedsPAndDpFlashNeedsD) {
  using course::m04::attention_backward_workspace_bytes;
  EXPECT_EQ(attention_backward_workspace_bytes(kNaive, 4, 16, 4096, 2048),
            std::size_t{2} * 4 * 16 * 4096 * 2048 * sizeof(float));
  EXPECT_EQ(attention_backward_workspace_bytes(kFlash, 4, 16, 4096, 2048), std::size_t{4} * 16 * 4096 * sizeof(float));
  // flash_deterministic: D, then one turn counter per (batch, head, query tile of 64 rows).
  EXPECT_EQ(attention_backward_workspace_bytes(AttentionBackwardStep::flash_deterministic, 4, 16, 4096, 2048),
            std::size_t{4} * 16 * 4096 * sizeof(float) + std::size_t{4} * 16 * 64 * sizeof(int));
  // N_q = 65: D takes 4 * 65 * 4 = 1040 bytes (16-byte aligned already), then 4 * 2 counters.
  EXPECT_EQ(course::m04::flash_backward_turns_offset(2, 2, 65), std::size_t{1040});
  EXPECT_EQ(attention_backward_workspace_bytes(AttentionBackwardStep::flash_deterministic, 2, 2, 65, 7),
            std::size_t{1040} + 4 * 2 * sizeof(int));
  // N_q = 1: 4 floats of D (16 bytes), then B*H = 4 counters.
  EXPECT_EQ(course::m04::flash_backward_turns_offset(1, 3, 1), std::size_t{16});
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
  for (const auto& info : course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::f32)) {
    if (!applies(info.step)) continue;
    SCOPED_TRACE(info.name);
    auto h = std::make_unique<HostArgs>();
    AttentionBackwardArgs a = h->args();
    mutate(a, *h);
    course::testing::expect_invalid_argument([&] { impl::attention_backward(info.step, a); }, needles);
  }
}
template <class Mutate>
void expect_rejected(Mutate mutate, const std::vector<std::string>& needles) {
  expect_rejected(mutate, needles, [](AttentionBackwardStep) { return true; });
}

TEST(AttentionBackwardArgsTest, ValidArgumentsPassValidation) {
  for (const auto& info : course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::f32)) {
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
