// Tests of the attention ladder, run against course::solution and course::exercise (built
// twice; `impl` names the one under test), and against the planted bugs of
// tests/planted/attention_planted.cu, which the same checking helper must reject.
//
// Every case draws fresh random Q, K, V (every batch and head different), poisons O and
// lse with NaN, runs the step and compares with the CPU reference (double accumulation)
// within a tolerance derived from fp32 rounding (attention_tolerance). Padding between
// O's rows must still hold the poison afterwards. A step is only given the cases it
// supports (step_support()); unsupported features are rejected by validation, tested
// below. Tests with "Large" in their name use big shapes and are left out of the
// compute-sanitizer run.
#include "attention_check.hpp"
#include "attention_planted.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module03/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

using course::AttentionLayout;
using course::DeviceBuffer;
using course::HostTensor;
using course::m03::AttentionArgs;
using course::m03::AttentionStep;
using course::m03::AttentionStrides;
using course::m03::OnlineUpdateTestArgs;
using course::testing::GpuTest;
using AttnFn = course::planted::AttentionFn;
using OnlineFn = course::planted::OnlineUpdateFn;
constexpr AttentionLayout BHND = AttentionLayout::BHND;
constexpr AttentionLayout BNHD = AttentionLayout::BNHD;

using course::m03::checks::Case;
using course::m03::checks::check_cases;
using course::m03::checks::Inputs;
using course::m03::checks::make_case;
using course::m03::checks::make_inputs;
using course::m03::checks::run_device;
using course::m03::checks::supported;
using course::m03::checks::supports;

// ------------------------------------------------------------ case lists -----

/// Lengths around the tiles (the fused kernel's 64-row Q tiles and 32/64-key K/V tiles, the
/// tiled kernel's 128 rows and 32 keys), 1, and primes.
std::vector<Case> awkward_length_cases() {
  std::vector<Case> cases;
  for (const std::int64_t n : {1, 2, 31, 32, 33, 37, 63, 64, 65, 127, 128, 129, 131})
    for (const bool causal : {false, true}) cases.push_back(make_case(1, 2, n, n, 64, BHND, causal));
  return cases;
}

std::vector<Case> head_dim_cases() {
  std::vector<Case> cases;
  for (const std::int64_t d : {16, 32, 64, 96, 128})
    for (const AttentionLayout layout : {BHND, BNHD})
      for (const bool causal : {false, true}) {
        cases.push_back(make_case(2, 3, 65, 131, d, layout, causal));
        cases.push_back(make_case(1, 2, 131, 37, d, layout, causal));
      }
  return cases;
}

/// N_q != N_k both ways: decoding (1 query), prefill against a cache, and N_q > N_k, where
/// a causal mask leaves the first N_q - N_k rows with no key (O = 0, lse = -inf).
std::vector<Case> unequal_length_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    cases.push_back(make_case(2, 2, 1, 131, 64, BHND, causal));
    cases.push_back(make_case(2, 2, 131, 1, 64, BHND, causal));
    cases.push_back(make_case(1, 3, 37, 200, 32, BNHD, causal));
    cases.push_back(make_case(1, 3, 200, 37, 32, BNHD, causal));
    cases.push_back(make_case(2, 1, 64, 129, 128, BHND, causal));
  }
  return cases;
}

std::vector<Case> layout_cases() {
  std::vector<Case> cases;
  Case c = make_case(2, 3, 45, 77, 64, BNHD, false);
  c.o_layout = BHND;  // Q, K, V as a fused QKV projection writes them; O packed
  cases.push_back(c);
  c = make_case(2, 3, 45, 77, 32, BHND, true);
  c.o_layout = BNHD;
  cases.push_back(c);
  c = make_case(2, 2, 70, 70, 64, BHND, true);
  c.pad = 4;
  c.o_pad = 8;  // padded rows everywhere; O's padding must stay untouched
  cases.push_back(c);
  c = make_case(2, 2, 33, 65, 16, BNHD, false);
  c.pad = 12;
  c.o_pad = 4;
  cases.push_back(c);
  c = make_case(3, 2, 40, 50, 64, BHND, false);
  c.kv_batch_broadcast = true;  // one K, V shared by every batch entry (batch stride 0)
  cases.push_back(c);
  c = make_case(2, 2, 33, 33, 64, BHND, false);
  c.scale = 0.3f;  // an explicit scale instead of 1/sqrt(d)
  cases.push_back(c);
  return cases;
}

/// Many (batch, head) pairs, all with different data: a head/batch mix-up cannot hide.
std::vector<Case> batch_head_cases() {
  return {make_case(3, 5, 33, 33, 64, BHND, false), make_case(3, 5, 33, 47, 32, BNHD, true),
          make_case(8, 16, 40, 40, 64, BHND, true)};
}

/// Q and K in [-30, 30): scores in the hundreds; exp() without subtracting the max
/// overflows (e^88.7 is fp32's limit).
std::vector<Case> large_value_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true})
    for (const std::int64_t d : {64, 128}) {
      Case c = make_case(2, 2, 100, 100, d, BHND, causal);
      c.input_range = 30.0;
      cases.push_back(c);
    }
  return cases;
}

std::vector<Case> option_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    Case c = make_case(2, 8, 45, 45, 64, BHND, causal);
    c.H_kv = 2;  // grouped-query: 4 query heads per kv head
    cases.push_back(c);
    c = make_case(2, 4, 37, 70, 32, BNHD, causal);
    c.H_kv = 1;  // multi-query
    cases.push_back(c);
    c = make_case(1, 2, 65, 65, 64, BHND, causal);
    c.rope = true;
    cases.push_back(c);
    c = make_case(1, 2, 40, 131, 128, BNHD, causal);
    c.rope = true;  // queries at positions 91..130
    cases.push_back(c);
    c = make_case(1, 4, 70, 70, 64, BHND, causal);
    c.alibi = true;
    cases.push_back(c);
    c = make_case(2, 3, 131, 37, 16, BHND, causal);
    c.alibi = true;  // N_q > N_k: negative offsets
    cases.push_back(c);
    c = make_case(2, 6, 77, 77, 96, BNHD, causal);
    c.H_kv = 3;
    c.rope = true;
    c.alibi = true;
    cases.push_back(c);
  }
  return cases;
}

/// ALiBi alone (H_kv == H, no RoPE, d <= 64): what the exercise's ALiBi step can run, so a
/// learner's ALiBi is tested even though RoPE and grouped-query attention are not exercises.
std::vector<Case> alibi_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    Case c = make_case(1, 4, 70, 70, 64, BHND, causal);
    c.alibi = true;
    cases.push_back(c);
    c = make_case(2, 3, 131, 37, 16, BNHD, causal);
    c.alibi = true;  // N_q > N_k: negative offsets
    cases.push_back(c);
  }
  return cases;
}

/// Cases on which every planted bug is wrong and still in bounds (B == H for the swap).
std::vector<Case> planted_cases() {
  return {make_case(2, 2, 37, 37, 64, BHND, true), make_case(3, 3, 20, 45, 32, BNHD, false),
          make_case(2, 2, 45, 45, 16, BNHD, true)};
}

// ------------------------------------------------------------- the ladder -----

class AttentionTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<AttentionStep>> {
 protected:
  /// Runs the supported subset of `cases`; skips (with the reason) if there is none.
  void check(const std::vector<Case>& cases, const char* what) {
    const AttentionStep step = GetParam().step;
    const std::vector<Case> mine = supported(step, cases);
    if (mine.empty()) GTEST_SKIP() << "step " << GetParam().name << " supports none of the " << what << " cases";
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(&impl::attention, step, mine, seed())));
  }
};

std::string step_name(const ::testing::TestParamInfo<course::StepInfo<AttentionStep>>& info) {
  return info.param.name;
}

/// A small example with known numbers (stored in a padded d = 16: zero columns change no
/// dot product). scale = 1, so the scores are the raw dot products.
struct Example {
  std::int64_t n, d = 16;
  bool causal;
  std::vector<float> q, k, v;  // [n, 16] each
  std::vector<std::vector<double>> want_o;  // [n][n_cols]
  std::vector<double> want_lse;
};

void run_example(AttentionStep step, const Example& ex) {
  DeviceBuffer<float> dq(ex.q), dk(ex.k), dv(ex.v), d_o(ex.q.size()), d_lse(static_cast<std::size_t>(ex.n));
  d_o.poison();
  d_lse.poison();
  DeviceBuffer<float> ws(course::m03::attention_workspace_bytes(step, 1, 1, ex.n, ex.n) / sizeof(float));
  AttentionArgs a = course::m03::make_attention_args(dq.data(), dk.data(), dv.data(), d_o.data(), 1, 1, 1, ex.n, ex.n,
                                                     ex.d, BHND);
  a.scale = 1.f;
  a.causal = ex.causal;
  const bool lse = course::m03::step_support(step).lse;
  if (lse) a.lse = d_lse.data();
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::attention(step, a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> o = d_o.download(), l = d_lse.download();
  for (std::int64_t i = 0; i < ex.n; ++i) {
    for (std::int64_t c = 0; c < ex.d; ++c) {
      const double want = c < static_cast<std::int64_t>(ex.want_o[i].size()) ? ex.want_o[i][c] : 0.0;
      EXPECT_NEAR(o[i * ex.d + c], want, 2e-6) << "O[" << i << "][" << c << "]";
    }
    if (lse) {
      EXPECT_NEAR(l[i], ex.want_lse[i], 2e-6) << "lse[" << i << "]";
    }
  }
}

std::vector<float> padded(const std::vector<std::vector<float>>& rows, std::int64_t d) {
  std::vector<float> out(rows.size() * d, 0.f);
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0; c < rows[r].size(); ++c) out[r * d + c] = rows[r][c];
  return out;
}

/// "The cat sat": q = [1,0], [0,2], [1,1]; k = [1,0], [0,1], [1,1]; v = [1,0], [0,1], [1,1].
/// Scores: [1,0,1], [0,2,2], [1,1,2]; weights e.g. softmax([1,1,2]) = [0.2119, 0.2119, 0.5761].
TEST_P(AttentionTest, WorkedExampleThreeTokens) {
  if (!supports(GetParam().step, make_case(1, 1, 3, 3, 16)))
    GTEST_SKIP() << "step " << GetParam().name << " does not support the worked example's shape";
  Example ex{3, 16, false, padded({{1, 0}, {0, 2}, {1, 1}}, 16), padded({{1, 0}, {0, 1}, {1, 1}}, 16),
             padded({{1, 0}, {0, 1}, {1, 1}}, 16),
             {{0.8446376, 0.5776812}, {0.5316895, 0.9366211}, {0.7880584, 0.7880584}},
             {1.8619948, 2.7586237, 2.5514447}};
  run_example(GetParam().step, ex);
}

/// Four tokens whose scores are [1, 2, 3, 4] in every row, causal, V = identity: O's rows
/// are the masked softmax weights [1], [0.2689, 0.7311], [0.0900, 0.2447, 0.6652],
/// [0.0321, 0.0871, 0.2369, 0.6439].
TEST_P(AttentionTest, WorkedExampleCausalMask) {
  if (!supports(GetParam().step, make_case(1, 1, 4, 4, 16, BHND, true)))
    GTEST_SKIP() << "step " << GetParam().name << " has no causal mask";
  Example ex{4, 16, true, padded({{1}, {1}, {1}, {1}}, 16), padded({{1}, {2}, {3}, {4}}, 16),
             padded({{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}, 16),
             {{1.0}, {0.2689414, 0.7310586}, {0.0900306, 0.2447285, 0.6652410},
              {0.0320586, 0.0871443, 0.2368828, 0.6439143}},
             {1.0, 2.3132617, 3.4076060, 4.4401897}};
  run_example(GetParam().step, ex);
}

TEST_P(AttentionTest, AwkwardLengths) { check(awkward_length_cases(), "awkward-length"); }
TEST_P(AttentionTest, EveryHeadDimBothLayouts) { check(head_dim_cases(), "head-dim"); }
TEST_P(AttentionTest, UnequalQueryAndKeyLengths) { check(unequal_length_cases(), "N_q != N_k"); }
TEST_P(AttentionTest, StridesAndLayouts) { check(layout_cases(), "layout"); }
TEST_P(AttentionTest, DistinctBatchesAndHeads) { check(batch_head_cases(), "batch/head"); }
TEST_P(AttentionTest, HugeInputValuesStayFinite) { check(large_value_cases(), "large-value"); }
TEST_P(AttentionTest, PositionalOptionsAndGroupedQuery) { check(option_cases(), "RoPE/ALiBi/GQA"); }
TEST_P(AttentionTest, AlibiOnly) { check(alibi_cases(), "ALiBi-only"); }
TEST_P(AttentionTest, BugRevealingCasesPass) { check(planted_cases(), "planted-bug"); }

/// Long sequences: many K/V tiles per block, many query tiles, 64-bit offsets exercised.
TEST_P(AttentionTest, LargeSequence) {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    cases.push_back(make_case(1, 1, 2048, 2048, 64, BHND, causal));
    cases.push_back(make_case(1, 1, 1500, 2048, 128, BNHD, causal));
  }
  check(cases, "large-sequence");
}

TEST_P(AttentionTest, LargeBatchHeads) {
  check({make_case(4, 16, 256, 256, 64, BHND, false), make_case(4, 16, 256, 256, 64, BNHD, true)}, "batch*heads = 64");
}

TEST_P(AttentionTest, LargeOptions) {
  Case c = make_case(1, 8, 1024, 1024, 64, BHND, true);
  c.H_kv = 2;
  c.rope = true;
  c.alibi = true;
  check({c}, "large RoPE/ALiBi/GQA");
}

/// Causality, exactly: change K and V at every key a row may not see (j > i0 + N_k - N_q)
/// and rerun (course::attention_testing::rows_that_saw_hidden_keys). Returns the rows
/// 0..i0 whose output changed by even one bit; `changed_later` counts the rows after i0
/// that changed (they should). NotImplemented propagates.
std::int64_t rows_that_saw_hidden_keys(AttnFn fn, AttentionStep step, const Case& c, std::int64_t i0,
                                       std::uint64_t seed, std::int64_t* changed_later) {
  return course::attention_testing::rows_that_saw_hidden_keys(
      c, make_inputs(c, seed + static_cast<std::uint64_t>(i0)), i0,
      [&](const Inputs& in) { return run_device(fn, step, c, in).o; },
      [](std::int64_t b, std::int64_t j, std::int64_t e) {
        return 1000.f * std::cos(static_cast<float>(j + 3 * e + 7 * b));  // huge scores if leaked
      },
      changed_later);
}

std::vector<Case> causality_cases() {
  return {make_case(2, 2, 100, 100, 64, BHND, true), make_case(1, 3, 40, 100, 32, BNHD, true),
          make_case(1, 2, 100, 60, 64, BHND, true)};
}

TEST_P(AttentionTest, CausalMaskHidesFutureKeysBitForBit) {
  const AttentionStep step = GetParam().step;
  const std::vector<Case> cases = supported(step, causality_cases());
  if (cases.empty()) GTEST_SKIP() << "step " << GetParam().name << " has no causal mask";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name());
    course::attention_testing::expect_causal(c, {0, c.N_q / 3, c.N_q - 2}, [&](std::int64_t i0, std::int64_t* later) {
      return rows_that_saw_hidden_keys(&impl::attention, step, c, i0, seed(), later);
    });
    if (IsSkipped()) return;
  }
}

// The fp32 steps (the bf16 tensor-core steps are tested in test_attention_tc.cpp).
INSTANTIATE_TEST_SUITE_P(Steps, AttentionTest,
                         ::testing::ValuesIn(course::m03::attention_steps(course::m03::AttentionDType::f32)), step_name);

// ----------------------------------------------------------- planted bugs -----

class PlantedAttentionCausality : public GpuTest {};

class PlantedAttentionTest : public GpuTest,
                             public ::testing::WithParamInterface<course::planted::PlantedAttention> {};

TEST_P(PlantedAttentionTest, ChecksRejectIt) {
  const auto& bug = GetParam();
  EXPECT_FALSE(check_cases(bug.fn, AttentionStep::fused, planted_cases(), seed()))
      << "planted bug '" << bug.name << "' passed the checks: they are too weak to catch it";
}

/// The bit-for-bit causality test can fail: a mask one key too wide is caught.
TEST_F(PlantedAttentionCausality, LeakIsCaughtBitForBit) {
  std::int64_t leaked = 0, changed_later = 0;
  for (const Case& c : causality_cases())
    leaked += rows_that_saw_hidden_keys(course::planted::attention_causal_leak, AttentionStep::fused, c,
                                        c.N_q / 3, seed(), &changed_later);
  EXPECT_GT(leaked, 0) << "a causal mask that lets every row see one future key passed the causality test";
}

INSTANTIATE_TEST_SUITE_P(Bugs, PlantedAttentionTest, ::testing::ValuesIn(course::planted::kPlantedAttention),
                         [](const ::testing::TestParamInfo<course::planted::PlantedAttention>& info) {
                           return std::string(info.param.name);
                         });

// ------------------------------------------------- the online update alone -----

struct OnlineCase {
  const char* name;
  int block_len;
  std::vector<float> scores;  // num_blocks * block_len
  std::vector<float> values;
};

/// m, l (relative to the final m) and o = sum p v / l in double.
std::vector<double> online_reference(const OnlineCase& c) {
  double m = -std::numeric_limits<double>::infinity();
  for (float s : c.scores) m = std::max(m, static_cast<double>(s));
  if (m == -std::numeric_limits<double>::infinity()) return {m, 0.0, 0.0};
  double l = 0, acc = 0;
  for (std::size_t j = 0; j < c.scores.size(); ++j) {
    const double p = std::exp(static_cast<double>(c.scores[j]) - m);
    l += p;
    acc += p * c.values[j];
  }
  return {m, l, acc / l};
}

/// THE online-update check (real and planted): m exact, l and o within 1e-5 relative.
::testing::AssertionResult check_online(OnlineFn fn, const std::vector<OnlineCase>& cases) {
  std::ostringstream failures;
  int failed = 0;
  for (const OnlineCase& c : cases) {
    DeviceBuffer<float> s(c.scores), v(c.values), out(3);
    out.poison();
    OnlineUpdateTestArgs a;
    a.scores = s.data();
    a.values = v.data();
    a.block_len = c.block_len;
    a.num_blocks = static_cast<int>(c.scores.size()) / c.block_len;
    a.out = out.data();
    fn(a);
    const std::vector<float> got = out.download();
    const std::vector<double> want = online_reference(c);
    const bool m_ok = static_cast<double>(got[0]) == want[0];
    const bool l_ok = std::fabs(got[1] - want[1]) <= 1e-5 * std::max(1.0, want[1]);
    const bool o_ok = std::fabs(got[2] - want[2]) <= 1e-5;
    if (!(m_ok && l_ok && o_ok)) {
      ++failed;
      failures << "\n  " << c.name << ": got (m, l, o) = (" << got[0] << ", " << got[1] << ", " << got[2]
               << "), want (" << want[0] << ", " << want[1] << ", " << want[2] << ")";
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failed << " of " << cases.size() << " cases failed:" << failures.str();
}

std::vector<OnlineCase> online_cases(std::uint64_t seed) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<OnlineCase> cases = {
      // The lesson's example: blocks [0] then [10]. m = 10, l = 1 + e^-10, o = (e^-10 * 1 + 2) / l.
      {"blocks_0_then_10", 1, {0.f, 10.f}, {1.f, 2.f}},
      {"max_grows_every_block", 3, {0, 1, 2, 3, 4, 5, 6, 7, 8}, {1, -1, 2, -2, 3, -3, 4, -4, 5}},
      {"max_shrinks", 2, {9, 8, 3, 1, -5, -6}, {1, 2, 3, 4, 5, 6}},
      {"masked_block_first", 2, {-inf, -inf, 1.f, 2.f}, {100.f, 100.f, 1.f, -1.f}},
      {"masked_block_between", 2, {1.f, 3.f, -inf, -inf, 2.f, 0.f}, {1.f, 2.f, 50.f, 50.f, 3.f, 4.f}},
      {"all_masked", 2, {-inf, -inf, -inf, -inf}, {1.f, 2.f, 3.f, 4.f}},
  };
  OnlineCase r{"random_13_blocks_of_7", 7, course::random_vector(91, seed, -10.f, 10.f),
               course::random_vector(91, seed + 1, -1.f, 1.f)};
  cases.push_back(r);
  return cases;
}

class OnlineUpdateTest : public GpuTest {};

TEST_F(OnlineUpdateTest, MatchesTheTwoPassSoftmax) {
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_online(&impl::online_softmax_update_test, online_cases(seed()))));
}

TEST_F(OnlineUpdateTest, BlocksZeroThenTenByHand) {
  DeviceBuffer<float> s(std::vector<float>{0.f, 10.f}), v(std::vector<float>{1.f, 2.f}), out(3);
  out.poison();
  OnlineUpdateTestArgs a;
  a.scores = s.data();
  a.values = v.data();
  a.block_len = 1;
  a.num_blocks = 2;
  a.out = out.data();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::online_softmax_update_test(a));
  const std::vector<float> got = out.download();
  EXPECT_EQ(got[0], 10.f);
  EXPECT_NEAR(got[1], 1.0 + std::exp(-10.0), 1e-6) << "replacing the max before rescaling l gives l = 2 here";
  EXPECT_NEAR(got[2], (std::exp(-10.0) + 2.0) / (1.0 + std::exp(-10.0)), 1e-6);
}

TEST_F(OnlineUpdateTest, PlantedMaxReplacedFirstIsRejected) {
  EXPECT_FALSE(check_online(&course::planted::online_update_max_replaced_first, online_cases(seed())))
      << "the max-replaced-first update order passed the online-update checks";
}

// ----------------------------------------- host-side checks (no GPU needed) -----

TEST(AttentionOffsetTest, BothLayouts) {
  const std::int64_t H = 3, N = 5, d = 16;
  for (const AttentionLayout layout : {BHND, BNHD}) {
    const AttentionStrides s = course::m03::attention_strides(layout, H, N, d);
    const HostTensor<float> t = HostTensor<float>::attention(2, H, N, d, layout);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t n = 0; n < N; ++n) {
          std::int64_t got = 0;
          COURSE_SKIP_IF_NOT_IMPLEMENTED(got = impl::attention_row_offset(s, b, h, n));
          EXPECT_EQ(got, t.offset({b, h, n, 0})) << course::to_string(layout) << " (b=" << b << ", h=" << h << ", n=" << n << ")";
        }
  }
  // 64-bit: an offset beyond 2^31.
  const AttentionStrides big{std::int64_t{1} << 30, std::int64_t{1} << 20, 128};
  std::int64_t got = 0;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(got = impl::attention_row_offset(big, 3, 5, 7));
  EXPECT_EQ(got, 3 * (std::int64_t{1} << 30) + 5 * (std::int64_t{1} << 20) + 7 * 128);
}

TEST(AttentionWorkspaceTest, OnlyNaiveNeedsQuadraticScratch) {
  EXPECT_EQ(course::m03::attention_workspace_bytes(AttentionStep::naive, 4, 16, 4096, 4096),
            std::size_t{4} * 16 * 4096 * 4096 * sizeof(float));
  for (const auto& info : course::m03::kAttentionSteps)
    if (info.step != AttentionStep::naive) {
      EXPECT_EQ(course::m03::attention_workspace_bytes(info.step, 4, 16, 4096, 4096), 0u) << info.name;
    }
}

/// Valid host-side arguments (never dereferenced: validation throws first), broken one at a time.
struct HostArgs {
  alignas(16) float q[2 * 2 * 8 * 64];
  alignas(16) float k[2 * 2 * 8 * 64];
  alignas(16) float v[2 * 2 * 8 * 64];
  alignas(16) float o[2 * 2 * 8 * 64];
  alignas(16) float lse[2 * 2 * 8];
  alignas(16) float ws[2 * 2 * 8 * 8];
  AttentionArgs args(AttentionStep step) {
    AttentionArgs a = course::m03::make_attention_args(q, k, v, o, 2, 2, 2, 8, 8, 64, BHND);
    if (course::m03::step_support(step).lse) a.lse = lse;
    a.workspace = ws;
    a.workspace_bytes = sizeof ws;
    return a;
  }
};

/// Calls impl::attention for every step with `mutate`d arguments; expects InvalidArgument
/// whose message contains `needle` (steps for which `applies` is false are skipped).
template <class Mutate, class Applies>
void expect_rejected(Mutate mutate, const std::string& needle, Applies applies) {
  for (const auto& info : course::m03::attention_steps(course::m03::AttentionDType::f32)) {
    if (!applies(info.step)) continue;
    SCOPED_TRACE(info.name);
    HostArgs h;
    AttentionArgs a = h.args(info.step);
    mutate(a, h);
    course::testing::expect_invalid_argument([&] { impl::attention(info.step, a); }, needle);
  }
}
template <class Mutate>
void expect_rejected(Mutate mutate, const std::string& needle) {
  expect_rejected(mutate, needle, [](AttentionStep) { return true; });
}

TEST(AttentionArgsTest, ValidArgumentsPassValidation) {
  for (const auto& info : course::m03::attention_steps(course::m03::AttentionDType::f32)) {
    HostArgs h;
    EXPECT_NO_THROW(course::m03::validate_attention_args(h.args(info.step), info.step, "test")) << info.name;
  }
}

TEST(AttentionArgsTest, SizesAreNamed) {
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.seq_q = 0; }, "'seq_q' = 0");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.seq_k = -1; }, "'seq_k' = -1");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.batch = 0; }, "'batch' = 0");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.heads = 0; }, "'heads' = 0");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.kv_heads = 0; }, "'kv_heads' = 0");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.batch = 256; a.heads = 256; a.kv_heads = 256; }, "65535");
}

TEST(AttentionArgsTest, HeadDimIsNamed) {
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.head_dim = 48; }, "'head_dim' = 48");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.head_dim = 128; a.q_strides.seq = a.k_strides.seq = a.v_strides.seq = a.o_strides.seq = 128; },
                  "'head_dim' = 128", [](AttentionStep s) { return course::m03::step_support(s).max_head_dim < 128; });
}

TEST(AttentionArgsTest, NullPointersAreNamed) {
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.q = nullptr; }, "'q' = nullptr");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.k = nullptr; }, "'k' = nullptr");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.v = nullptr; }, "'v' = nullptr");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.o = nullptr; }, "'o' = nullptr");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.workspace = nullptr; }, "'workspace' = nullptr",
                  [](AttentionStep s) { return s == AttentionStep::naive; });
}

TEST(AttentionArgsTest, GroupedHeadsMustDivide) {
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.heads = 2; a.kv_heads = 3; }, "'kv_heads' = 3");
  // kv_heads < heads (valid GQA) needs step fused_options.
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.kv_heads = 1; }, "fused_options",
                  [](AttentionStep s) { return s != AttentionStep::fused_options; });
}

TEST(AttentionArgsTest, OutputOverlappingAnInputIsRejected) {
  expect_rejected([](AttentionArgs& a, HostArgs& h) { a.o = h.q; }, "overlaps q");
  expect_rejected([](AttentionArgs& a, HostArgs& h) { a.o = h.v + 64; }, "overlaps v");
  expect_rejected([](AttentionArgs& a, HostArgs& h) { a.lse = h.o; }, "overlaps o",
                  [](AttentionStep s) { return course::m03::step_support(s).lse; });
}

TEST(AttentionArgsTest, BadStridesAreNamed) {
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.q_strides.seq = 66; }, "'q_strides.seq' = 66");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.k_strides.seq = 32; }, "'k_strides.seq' = 32");
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.v_strides.head = -4; }, "'v_strides.head' = -4");
  // O's heads on top of each other.
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.o_strides.head = 0; }, "'o_strides.head' = 0");
}

TEST(AttentionArgsTest, FeaturesAStepLacksAreRejected) {
  using course::m03::step_support;
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.causal = true; }, "'causal'",
                  [](AttentionStep s) { return !step_support(s).causal; });
  expect_rejected([](AttentionArgs& a, HostArgs& h) { a.lse = h.lse; }, "'lse'",
                  [](AttentionStep s) { return !step_support(s).lse; });
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.rope = true; }, "'rope'",
                  [](AttentionStep s) { return !step_support(s).options; });
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.alibi = true; }, "'alibi'",
                  [](AttentionStep s) { return !step_support(s).options; });
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.rope = true; a.rope_theta = 0.5f; }, "'rope_theta'",
                  [](AttentionStep s) { return step_support(s).options; });
}

TEST(AttentionArgsTest, NaiveNeedsItsWorkspace) {
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.workspace_bytes = 16; }, "'workspace_bytes' = 16",
                  [](AttentionStep s) { return s == AttentionStep::naive; });
  expect_rejected([](AttentionArgs& a, HostArgs& h) { a.workspace = h.o; }, "'workspace'",
                  [](AttentionStep s) { return s == AttentionStep::naive; });
}

TEST(AttentionArgsTest, NegativeScaleIsNamed) {
  expect_rejected([](AttentionArgs& a, HostArgs&) { a.scale = -1.f; }, "'scale' = -1");
}

}  // namespace
