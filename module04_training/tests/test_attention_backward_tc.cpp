// Tests of the tensor-core (bf16) steps of the attention-backward ladder, run against
// course::solution and course::exercise (built twice; `impl` names the one under test), and
// against the planted bugs of tests/planted/attention_backward_tc_planted.cu, which the same
// checking helper must reject.
//
// Every case draws fresh random bf16 Q, K, V and dO (every batch and head different); O and
// lse come from the CPU forward in double (O rounded to bf16, lse to fp32), so the backward
// is tested on its own. dQ, dK, dV and the workspace are poisoned before each launch. Each
// gradient's max error against course::ref::attention_backward (double) must be at most 3x
// that of the plain bf16 computation (course::ref::attention_backward_bf16) plus a tiny
// floor -- FlashAttention's own rule for its backward; the gradients' padding must keep the
// poison and the rows of dQ that see no key must be exactly 0. Shapes include
// FlashAttention's awkward lengths (1, 17, 113, 203, 256, 1023, 1024), N_q != N_k in both
// directions, causal, grouped-query heads, both layouts and padded rows. Tests with "Large"
// in their name are left out of the compute-sanitizer run.
#include "attention_backward_tc_check.hpp"
#include "attention_backward_tc_planted.hpp"
#include "course/bf16.hpp"
#include "course/error.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module04/attention_backward.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

using course::AttentionLayout;
using course::StepInfo;
using course::m04::AttentionBackwardArgsBf16;
using course::m04::AttentionBackwardDType;
using course::m04::AttentionBackwardStep;
using course::testing::GpuTest;
using TcFn = course::planted::AttentionBackwardTcFn;
constexpr AttentionLayout BHND = AttentionLayout::BHND;
constexpr AttentionLayout BNHD = AttentionLayout::BNHD;

namespace tcb = course::m04::tc_backward_checks;
using tcb::Case;
using tcb::check_cases;
using tcb::make_case;
using tcb::with_kv_heads;

std::vector<StepInfo<AttentionBackwardStep>> tc_steps() {
  return course::m04::attention_backward_steps(AttentionBackwardDType::bf16);
}

/// The implementation under test, as the function pointer the checks take.
constexpr TcFn kImpl = &impl::attention_backward;

// ------------------------------------------------------------ case lists -----

/// FlashAttention's awkward lengths and N_q != N_k both ways, d = 64 and 128, causal or not,
/// layouts alternating.
std::vector<Case> length_cases() {
  std::vector<Case> cases;
  const std::int64_t pairs[][2] = {{1, 1}, {17, 17}, {113, 203}, {203, 113}, {256, 256}, {1, 129}, {130, 1}, {65, 191}};
  int n = 0;
  for (const auto& p : pairs)
    for (const std::int64_t d : {64, 128})
      for (const bool causal : {false, true})
        cases.push_back(make_case(1, 2, p[0], p[1], d, n++ % 3 == 2 ? BNHD : BHND, causal));
  return cases;
}

/// Grouped-query heads (dK, dV summed over each group), several batches, strided storage.
std::vector<Case> layout_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    cases.push_back(with_kv_heads(make_case(2, 4, 100, 150, 64, BHND, causal), 2));
    cases.push_back(with_kv_heads(make_case(1, 6, 129, 129, 128, BNHD, causal), 1));
    Case padded = make_case(2, 3, 77, 90, 64, BNHD, causal);
    padded.pad = 8;
    padded.grad_layout = BHND;
    padded.grad_pad = 16;
    cases.push_back(padded);
    Case bcast = make_case(2, 2, 70, 70, 128, BHND, causal);
    bcast.kv_batch_broadcast = true;  // K, V batch stride 0; dK, dV still per batch
    bcast.grad_layout = BNHD;
    cases.push_back(bcast);
    Case scaled = make_case(1, 2, 96, 96, 64, BHND, causal);
    scaled.scale = 0.3f;
    scaled.input_range = 2.0;
    cases.push_back(scaled);
  }
  return cases;
}

/// Many heads, so that the split steps' blocks (tc_split_dq, tc_wgmma_split_dq) walk several K/V tiles each (the other steps run
/// one block per tile on the same cases), sized by this GPU's block slots (SMs): B*H_kv =
/// 2 * floor(slots / 6) heads of 7 K/V tiles take 3 splits (3 tiles for split 0, 2 for the
/// others: the last serpentine round partial), and B*H_kv = slots heads take one split of 3
/// tiles each (S = 1: a block per head, one wave).
std::vector<Case> multi_tile_cases() {
  const std::int64_t slots = course::m04::tc_backward_block_slots();
  const std::int64_t kv_heads = std::max<std::int64_t>(1, slots / 6);
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    cases.push_back(with_kv_heads(make_case(2, 2 * kv_heads, 70, 800, 64, BHND, causal), kv_heads));
    cases.push_back(make_case(1, slots, 100, 300, 128, BNHD, causal));
  }
  return cases;
}

/// The split count the split steps take for case c on this device, and its K/V tiles.
std::pair<std::int64_t, std::int64_t> split_plan(const Case& c) {
  AttentionBackwardArgsBf16 a;
  tcb::set_shape(a, c);
  return {course::m04::tc_split_dq_plan(a), (c.N_k + course::m04::kTcBackwardKeyTile - 1) / course::m04::kTcBackwardKeyTile};
}

// ------------------------------------------------------------------ tests -----

class AttentionBackwardTcTest : public GpuTest, public ::testing::WithParamInterface<StepInfo<AttentionBackwardStep>> {
};

TEST_P(AttentionBackwardTcTest, AwkwardLengthsMatchTheReference) {
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(kImpl, GetParam().step, length_cases(), seed())));
}

TEST_P(AttentionBackwardTcTest, GroupedQueryLayoutsAndStridesMatchTheReference) {
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(kImpl, GetParam().step, layout_cases(), seed())));
}

TEST_P(AttentionBackwardTcTest, MultiTileBlocksMatchTheReference) {
  const std::vector<Case> cases = multi_tile_cases();
  if (course::m04::splits_dq(GetParam().step)) {
    // The case this test exists for: fewer splits than K/V tiles, so a block walks several.
    const auto [splits, kv_tiles] = split_plan(cases[0]);
    EXPECT_GT(splits, 1);
    EXPECT_LT(splits, kv_tiles);
    EXPECT_EQ(split_plan(cases[1]).first, 1);
    std::printf("[ info ] %s: %lld splits of %lld K/V tiles, then 1 of %lld\n", GetParam().name, static_cast<long long>(splits),
                static_cast<long long>(kv_tiles), static_cast<long long>(split_plan(cases[1]).second));
  }
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(kImpl, GetParam().step, cases, seed())));
}

TEST_P(AttentionBackwardTcTest, LargeSequencesMatchTheReference) {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    cases.push_back(make_case(1, 2, 1024, 1024, 128, BHND, causal));
    cases.push_back(make_case(1, 2, 1023, 1024, 64, BNHD, causal));
  }
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(kImpl, GetParam().step, cases, seed())));
}

/// Causality, bit for bit: keys a query row may not see change nothing of that row's dQ.
TEST_P(AttentionBackwardTcTest, HiddenKeysNeverReachDq) {
  const AttentionBackwardStep step = GetParam().step;
  const Case c = make_case(1, 2, 150, 200, 64, BHND, true);
  const tcb::Inputs in = tcb::make_inputs(c, seed());
  const auto run = [&](const tcb::Inputs& x) {
    tcb::DeviceProblem problem(c, x, step);
    return problem.run(kImpl, step).dq;
  };
  course::attention_testing::expect_causal(c, {0, 40, 120}, [&](std::int64_t i0, std::int64_t* changed_later) {
    return course::attention_testing::rows_that_saw_hidden_keys(
        c, in, i0, run, [](std::int64_t, std::int64_t j, std::int64_t e) { return 0.25f * ((j + e) % 7 - 3); },
        changed_later);
  });
}

/// The deterministic steps (tc_deterministic, tc_split_dq and their tc_wgmma twins): bit-identical
/// gradients over 20 runs and on another stream. The third case gives the split steps' blocks
/// several K/V tiles (the others: one tile per split).
TEST_P(AttentionBackwardTcTest, DeterministicStepIsBitIdentical) {
  const AttentionBackwardStep step = GetParam().step;
  if (!course::m04::step_support(step).deterministic) GTEST_SKIP() << GetParam().name << " adds dQ with atomics";
  const std::vector<Case> cases = {with_kv_heads(make_case(1, 4, 700, 900, 64, BHND, false), 2),
                                   with_kv_heads(make_case(1, 4, 700, 900, 64, BHND, true), 2),
                                   with_kv_heads(make_case(2, 40, 200, 1000, 64, BHND, true), 20)};
  for (const Case& c : cases) {
    const bool causal = c.causal;
    const tcb::Inputs in = tcb::make_inputs(c, seed());
    tcb::DeviceProblem problem(c, in, step);
    tcb::Grads first;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(first = problem.run(kImpl, step));
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    int differing = 0;
    for (int r = 0; r < 20; ++r) {
      const tcb::Grads again = problem.run(kImpl, step, r % 2 == 1 ? stream : nullptr);
      for (const auto& [x, y] : {std::pair{&first.dq, &again.dq}, {&first.dk, &again.dk}, {&first.dv, &again.dv}})
        differing += std::memcmp(x->storage().data(), y->storage().data(), x->storage().size() * sizeof(float)) != 0;
    }
    cudaStreamDestroy(stream);
    EXPECT_EQ(differing, 0) << "gradients differed from the first run's (causal " << causal << ", B*H_kv "
                            << c.B * c.H_kv << ")";
  }
}

/// Bad inputs are rejected by name before any launch.
TEST_P(AttentionBackwardTcTest, BadArgumentsAreRejected) {
  const AttentionBackwardStep step = GetParam().step;
  const Case c = make_case(1, 2, 64, 64, 64, BHND, false);
  const tcb::Inputs in = tcb::make_inputs(c, seed());
  tcb::DeviceProblem problem(c, in, step);
  const auto expect_invalid = [&](const AttentionBackwardArgsBf16& a, const std::vector<std::string>& needles) {
    course::testing::expect_invalid_argument([&] { impl::attention_backward(step, a); }, needles);
  };
  AttentionBackwardArgsBf16 bad = problem.args;
  bad.head_dim = 96;
  expect_invalid(bad, {"head_dim", "96"});
  bad = problem.args;
  bad.q_strides.seq = 68;
  expect_invalid(bad, {"q_strides.seq", "68"});
  bad = problem.args;
  bad.dq = problem.q.data() + 8;
  expect_invalid(bad, {"dq", "overlaps q"});
  bad = problem.args;
  bad.dk = problem.dv.data();
  expect_invalid(bad, {"dk", "overlaps 'dv'"});
  bad = problem.args;
  bad.workspace_bytes = 16;
  expect_invalid(bad, {"workspace_bytes"});
  bad = problem.args;
  bad.lse = nullptr;
  expect_invalid(bad, {"lse", "null"});
  bad = problem.args;
  bad.kv_heads = 3;
  expect_invalid(bad, {"kv_heads", "3"});
}

INSTANTIATE_TEST_SUITE_P(Steps, AttentionBackwardTcTest, ::testing::ValuesIn(tc_steps()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(AttentionBackwardTcArgsTest, StepsOfTheOtherDtypeAreRejected) {
  AttentionBackwardArgsBf16 a;
  course::testing::expect_invalid_argument(
      [&] { course::m04::validate_attention_backward_args(a, AttentionBackwardStep::flash, "test"); },
      {"step", "flash", "AttentionBackwardArgs&"});
  course::m04::AttentionBackwardArgs f;
  course::testing::expect_invalid_argument(
      [&] { course::m04::validate_attention_backward_args(f, AttentionBackwardStep::tc_pipelined, "test"); },
      {"step", "tc_pipelined", "AttentionBackwardArgsBf16&"});
}

// ---------------------------------------------------------------- planted bugs -----

class PlantedAttentionBackwardTcTest : public GpuTest {};

/// The cases every planted bug must fail: causal and not, tails, grouped-query heads.
std::vector<Case> planted_cases() {
  return {make_case(1, 2, 113, 203, 64, BHND, false), make_case(1, 2, 203, 113, 128, BNHD, true),
          with_kv_heads(make_case(1, 4, 90, 90, 64, BHND, true), 2)};
}

TEST_F(PlantedAttentionBackwardTcTest, MistakesInThePhasesAreRejected) {
  const std::pair<TcFn, const char*> bugs[] = {
      {&course::planted::attention_backward_tc_drop_d, "drop_d"},
      {&course::planted::attention_backward_tc_causal_mask_missing, "causal_mask_missing"},
      {&course::planted::attention_backward_tc_natural_scale, "natural_scale"},
  };
  for (const auto& [fn, name] : bugs)
    for (const auto& info : tc_steps()) {
      try {
        EXPECT_FALSE(check_cases(fn, info.step, planted_cases(), seed())) << name << " passed as " << info.name;
      } catch (const course::Unsupported& e) {  // tc_wgmma off Hopper / without sm_90a code
        std::printf("[ skip ] %s as %s: %s\n", name, info.name, e.what());
      }
    }
}

TEST_F(PlantedAttentionBackwardTcTest, AnUnawaitedTurnBreaksDeterminism) {
  const Case c = make_case(1, 2, 2048, 2048, 64, BHND, false);  // 16 K/V blocks add to every query tile
  const tcb::Inputs in = tcb::make_inputs(c, seed());
  for (const AttentionBackwardStep step :
       {AttentionBackwardStep::tc_deterministic, AttentionBackwardStep::tc_wgmma_deterministic}) {
    tcb::DeviceProblem problem(c, in, step);
    tcb::Grads first;
    try {
      first = problem.run(&course::planted::attention_backward_tc_turn_not_awaited, step);
    } catch (const course::Unsupported& e) {  // tc_wgmma_deterministic off Hopper / without sm_90a code
      std::printf("[ skip ] %s: %s\n", course::m04::step_name(step), e.what());
      continue;
    }
    int differing = 0;
    for (int r = 0; r < 20 && differing == 0; ++r) {
      const tcb::Grads again = problem.run(&course::planted::attention_backward_tc_turn_not_awaited, step);
      differing += std::memcmp(first.dq.storage().data(), again.dq.storage().data(),
                               first.dq.storage().size() * sizeof(float)) != 0;
    }
    EXPECT_GT(differing, 0) << "an unordered dQ gave identical bits 21 times in " << course::m04::step_name(step);
  }
}

}  // namespace
