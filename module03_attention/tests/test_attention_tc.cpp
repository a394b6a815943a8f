// Tests of the tensor-core attention steps (bf16 Q, K, V, O; fp32 lse), run against
// course::solution and course::exercise (built twice; `impl` names the one under test),
// and against the planted bugs of tests/planted/attention_tc_planted.cu, which the same
// checking helper must reject.
//
// The accuracy rule is FlashAttention's: on every case the kernel's max error against a
// double-precision reference (course::ref::attention_forward on the same bf16 inputs) must
// be at most 2x the max error of the plain same-precision computation
// (course::ref::attention_forward_bf16: fp32 scores and softmax, P rounded to bf16, O
// accumulated in fp32 and rounded to bf16), plus a tiny floor. The same rule for lse.
// Inputs are fresh random bf16 values (every batch and head different); O and lse are
// poisoned with NaN before each launch, and O's row padding must keep its poison. The
// shapes include FlashAttention's own awkward ones, (N_q, N_k) in (1,1), (113,203),
// (128,217), (108,256), (239,1), (1023,1024), (1024,1023), (2048,2048), at every head dim,
// causal and not. Tests with "Large" in their name use big shapes and are left out of the
// compute-sanitizer run.
#include "attention_tc_check.hpp"
#include "attention_tc_hopper_planted.hpp"
#include "attention_tc_planted.hpp"
#include "course/bf16.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module03/attention.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

using course::AttentionLayout;
using course::DeviceBuffer;
using course::HostTensor;
using course::StepInfo;
using course::m03::AttentionArgsBf16;
using course::m03::AttentionDType;
using course::m03::AttentionStep;
using course::m03::AttentionStrides;
using course::testing::GpuTest;
using AttnTcFn = course::planted::AttentionTcFn;
using bf16 = __nv_bfloat16;
constexpr AttentionLayout BHND = AttentionLayout::BHND;
constexpr AttentionLayout BNHD = AttentionLayout::BNHD;

std::vector<StepInfo<AttentionStep>> bf16_steps() { return course::m03::attention_steps(AttentionDType::bf16); }

using course::m03::tc_checks::Case;
using course::m03::tc_checks::check_cases;
using course::m03::tc_checks::Inputs;
using course::m03::tc_checks::make_case;
using course::m03::tc_checks::make_inputs;
using course::m03::tc_checks::run_device;

// ------------------------------------------------------------ case lists -----

constexpr std::int64_t kHeadDims[] = {32, 64, 96, 128};

/// FlashAttention's awkward (N_q, N_k) pairs below 1000, every head dim, causal and not,
/// both layouts alternating; distinct data in each of B = 2 x H = 2.
std::vector<Case> flash_shape_cases() {
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1, 1}, {113, 203}, {128, 217}, {108, 256}, {239, 1}};
  std::vector<Case> cases;
  int n = 0;
  for (const auto& [nq, nk] : shapes)
    for (const std::int64_t d : kHeadDims)
      for (const bool causal : {false, true}) cases.push_back(make_case(2, 2, nq, nk, d, (n++ % 2) ? BNHD : BHND, causal));
  return cases;
}

/// The large ones: (1023, 1024), (1024, 1023), (2048, 2048).
std::vector<Case> flash_shape_large_cases() {
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1023, 1024}, {1024, 1023}, {2048, 2048}};
  std::vector<Case> cases;
  for (const auto& [nq, nk] : shapes)
    for (const std::int64_t d : kHeadDims)
      for (const bool causal : {false, true}) cases.push_back(make_case(1, 2, nq, nk, d, d % 64 ? BNHD : BHND, causal));
  return cases;
}

/// Lengths around the tiles (64- and 128-row Q tiles, 32/64/128-key K/V tiles), 1, primes.
std::vector<Case> awkward_length_cases() {
  std::vector<Case> cases;
  for (const std::int64_t n : {2, 17, 31, 33, 63, 64, 65, 127, 129, 191, 257})
    for (const bool causal : {false, true}) cases.push_back(make_case(1, 2, n, n, n % 2 ? 64 : 128, BHND, causal));
  return cases;
}

/// N_q != N_k both ways: decoding (1 query), prefill against a cache, and N_q > N_k, where a
/// causal mask leaves the first N_q - N_k rows with no key (O = 0, lse = -inf).
std::vector<Case> unequal_length_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    cases.push_back(make_case(2, 2, 1, 300, 64, BHND, causal));
    cases.push_back(make_case(2, 2, 300, 1, 128, BHND, causal));
    cases.push_back(make_case(1, 3, 37, 200, 32, BNHD, causal));
    cases.push_back(make_case(1, 3, 200, 37, 96, BNHD, causal));
    cases.push_back(make_case(2, 1, 64, 129, 128, BHND, causal));
    cases.push_back(make_case(1, 2, 130, 70, 64, BNHD, causal));
  }
  return cases;
}

std::vector<Case> layout_cases() {
  std::vector<Case> cases;
  Case c = make_case(2, 3, 45, 77, 64, BNHD, false);
  c.o_layout = BHND;  // Q, K, V as a fused QKV projection writes them; O packed
  cases.push_back(c);
  c = make_case(2, 3, 45, 77, 128, BHND, true);
  c.o_layout = BNHD;
  cases.push_back(c);
  c = make_case(2, 2, 70, 70, 64, BHND, true);
  c.pad = 8;
  c.o_pad = 16;  // padded rows everywhere; O's padding must stay untouched
  cases.push_back(c);
  c = make_case(2, 2, 33, 65, 96, BNHD, false);
  c.pad = 24;
  c.o_pad = 8;
  cases.push_back(c);
  c = make_case(3, 2, 40, 150, 64, BHND, false);
  c.kv_batch_broadcast = true;  // one K, V shared by every batch entry (batch stride 0)
  cases.push_back(c);
  c = make_case(2, 2, 33, 33, 128, BHND, false);
  c.scale = 0.3f;  // an explicit scale instead of 1/sqrt(d)
  cases.push_back(c);
  c = make_case(2, 2, 100, 140, 32, BHND, true);
  c.lse = false;  // no lse requested
  cases.push_back(c);
  return cases;
}

/// Grouped-query and multi-query attention: query head h reads kv head h / (H / H_kv).
std::vector<Case> grouped_query_cases() {
  std::vector<Case> cases;
  for (const bool causal : {false, true}) {
    Case c = make_case(2, 8, 45, 150, 64, BHND, causal);
    c.H_kv = 2;
    cases.push_back(c);
    c = make_case(2, 4, 137, 70, 128, BNHD, causal);
    c.H_kv = 1;
    cases.push_back(c);
    c = make_case(1, 6, 77, 77, 96, BNHD, causal);
    c.H_kv = 3;
    cases.push_back(c);
  }
  return cases;
}

/// Many (batch, head) pairs, all with different data: a head/batch mix-up cannot hide.
std::vector<Case> batch_head_cases() {
  return {make_case(3, 5, 33, 70, 64, BHND, false), make_case(3, 5, 70, 47, 32, BNHD, true),
          make_case(8, 16, 40, 40, 128, BHND, true)};
}

/// More query tiles than two per SM (132 on an H100 SXM): the blocks of tc_persistent walk
/// 2-4 tiles each, so its K/V ring, its Q hand-off and the consumers' turns carry across
/// tiles. Causal with N_q > N_k puts tiles without any visible key (nothing loaded, O = 0)
/// after tiles with keys in the same block's walk.
std::vector<Case> many_tile_cases() {
  return {make_case(4, 36, 129, 64, 64, BHND, false),  // 288 tiles of 1 K/V tile (the second: 1 row)
          make_case(4, 40, 129, 200, 128, BNHD, true),  // 320 tiles of 2 K/V tiles
          make_case(4, 36, 300, 100, 64, BHND, true),   // 432 tiles of 1, 1 and 0 K/V tiles
          make_case(16, 32, 65, 65, 64, BNHD, true)};   // 512 one-tile heads: ~4 tiles per block
}

/// Large-magnitude rows: Q and K in [-8, 8) (scores ~5-40: peaked softmax) and [-30, 30)
/// (scores in the hundreds: exp() without subtracting the max overflows at 88.7).
std::vector<Case> large_value_cases() {
  std::vector<Case> cases;
  for (const double range : {8.0, 30.0})
    for (const bool causal : {false, true})
      for (const std::int64_t d : {64, 128}) {
        Case c = make_case(2, 2, 100, 300, d, BHND, causal);
        c.input_range = range;
        cases.push_back(c);
      }
  return cases;
}

/// Cases on which every planted bug is wrong (d = 64: the planted kernels' head dim).
std::vector<Case> planted_cases() {
  return {make_case(2, 2, 113, 203, 64, BHND, true), make_case(2, 2, 128, 217, 64, BNHD, false),
          make_case(1, 2, 108, 256, 64, BHND, true)};
}

// ------------------------------------------------------------- the ladder -----

class AttentionTcTest : public GpuTest, public ::testing::WithParamInterface<StepInfo<AttentionStep>> {
 protected:
  void check(const std::vector<Case>& cases) {
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(&impl::attention, GetParam().step, cases, seed())));
  }
};

std::string step_name(const ::testing::TestParamInfo<StepInfo<AttentionStep>>& info) { return info.param.name; }

/// "The cat sat" of the fp32 tests in d = 32 (64 for the Hopper steps; zero columns change no
/// dot product), scale 1:
/// q = [1,0], [0,2], [1,1]; k = v = [1,0], [0,1], [1,1]. Scores [1,0,1], [0,2,2], [1,1,2].
/// O is bf16: P and O each rounded to 8 significant bits, so within 2 x 2^-8 (< 1e-2).
TEST_P(AttentionTcTest, WorkedExampleThreeTokens) {
  const std::int64_t n = 3, d = course::m03::step_support(GetParam().step).hopper ? 64 : 32;
  std::vector<float> q(n * d, 0.f), k(n * d, 0.f), v(n * d, 0.f);
  const float qs[3][2] = {{1, 0}, {0, 2}, {1, 1}}, ks[3][2] = {{1, 0}, {0, 1}, {1, 1}};
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < 2; ++c) {
      q[i * d + c] = qs[i][c];
      k[i * d + c] = ks[i][c];
      v[i * d + c] = ks[i][c];
    }
  DeviceBuffer<bf16> dq(course::to_bf16(q)), dk(course::to_bf16(k)), dv(course::to_bf16(v)), d_o(n * d);
  DeviceBuffer<float> d_lse(n);
  d_o.poison();
  d_lse.poison();
  AttentionArgsBf16 a = course::m03::make_attention_args_bf16(dq.data(), dk.data(), dv.data(), d_o.data(), 1, 1, 1,
                                                              n, n, d, BHND);
  a.scale = 1.f;
  a.lse = d_lse.data();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::attention(GetParam().step, a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> o = course::from_bf16(d_o.download()), l = d_lse.download();
  const double want_o[3][2] = {{0.8446376, 0.5776812}, {0.5316895, 0.9366211}, {0.7880584, 0.7880584}};
  const double want_lse[3] = {1.8619948, 2.7586237, 2.5514447};
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < d; ++c) {
      const double want = c < 2 ? want_o[i][c] : 0.0;
      EXPECT_NEAR(o[i * d + c], want, 1e-2) << "O[" << i << "][" << c << "]";
    }
    EXPECT_NEAR(l[i], want_lse[i], 1e-5) << "lse[" << i << "]";
  }
}

TEST_P(AttentionTcTest, FlashAttentionShapesEveryHeadDim) { check(flash_shape_cases()); }
TEST_P(AttentionTcTest, AwkwardLengths) { check(awkward_length_cases()); }
TEST_P(AttentionTcTest, UnequalQueryAndKeyLengths) { check(unequal_length_cases()); }
TEST_P(AttentionTcTest, StridesAndLayouts) { check(layout_cases()); }
TEST_P(AttentionTcTest, GroupedQueryAttention) { check(grouped_query_cases()); }
TEST_P(AttentionTcTest, DistinctBatchesAndHeads) { check(batch_head_cases()); }
TEST_P(AttentionTcTest, LargeMagnitudeRows) { check(large_value_cases()); }
TEST_P(AttentionTcTest, ManyQueryTilesPerSm) { check(many_tile_cases()); }
TEST_P(AttentionTcTest, BugRevealingCasesPass) { check(planted_cases()); }

/// FlashAttention's large awkward shapes: many K/V tiles per block, many query tiles.
TEST_P(AttentionTcTest, LargeFlashAttentionShapes) { check(flash_shape_large_cases()); }

TEST_P(AttentionTcTest, LargeBatchHeads) {
  Case c = make_case(4, 16, 512, 512, 128, BNHD, true);
  c.H_kv = 4;
  check({make_case(4, 16, 256, 256, 64, BHND, false), c});
}

/// Launches on concurrent streams share nothing (no step may keep state between launches,
/// such as a tile counter of a dynamic schedule). Two non-blocking streams run the same
/// problem into two outputs, three launches each, interleaved; both must equal one run on the
/// default stream bit for bit (shared state would hand tiles of one launch to the other: rows
/// left poisoned).
TEST_P(AttentionTcTest, ConcurrentStreamsGiveTheSameResult) {
  const AttentionStep step = GetParam().step;
  const Case c = make_case(4, 36, 300, 100, 64, BHND, true);  // 432 tiles of 1, 1 and 0 K/V tiles
  const Inputs in = make_inputs(c, seed());
  const HostTensor<float> o_shape = course::attention_testing::make_tensor(c.B, c.H, c.N_q, c.d, c.o_layout, c.o_pad);
  DeviceBuffer<bf16> dq(course::to_bf16(in.q.storage())), dk(course::to_bf16(in.k.storage())),
      dv(course::to_bf16(in.v.storage()));
  std::vector<DeviceBuffer<bf16>> d_o;
  for (int i = 0; i < 3; ++i) {
    d_o.emplace_back(o_shape.storage().size());
    d_o.back().poison();
  }
  AttentionArgsBf16 a;
  a.q = dq.data();
  a.k = dk.data();
  a.v = dv.data();
  a.o = d_o[0].data();
  course::attention_testing::set_shape(a, c);
  a.q_strides = course::m03::tc_checks::strides_of(in.q);
  a.k_strides = course::m03::tc_checks::strides_of(in.k);
  a.v_strides = course::m03::tc_checks::strides_of(in.v);
  a.o_strides = course::m03::tc_checks::strides_of(o_shape);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::attention(step, a));  // d_o[0]: the default stream, alone
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t streams[2] = {nullptr, nullptr};
  for (cudaStream_t& st : streams) ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 2; ++i) {
      a.o = d_o[1 + i].data();
      a.stream = streams[i];
      impl::attention(step, a);
    }
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  for (cudaStream_t st : streams) cudaStreamDestroy(st);
  const std::vector<bf16> want = d_o[0].download();
  for (int i = 0; i < 2; ++i) {
    const std::vector<bf16> got = d_o[1 + i].download();
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(bf16)), 0)
        << "O on stream " << i << " differs from the default stream's";
  }
}

/// Causality, exactly: change K and V at every key a row may not see (j > i0 + N_k - N_q)
/// and rerun (course::attention_testing::rows_that_saw_hidden_keys). Returns the rows
/// 0..i0 whose output changed by even one bit; `changed_later` counts the rows after i0
/// that changed (they should).
std::int64_t rows_that_saw_hidden_keys(AttnTcFn fn, AttentionStep step, const Case& c, std::int64_t i0,
                                       std::uint64_t seed, std::int64_t* changed_later) {
  return course::attention_testing::rows_that_saw_hidden_keys(
      c, make_inputs(c, seed + static_cast<std::uint64_t>(i0)), i0,
      [&](const Inputs& in) { return run_device(fn, step, c, in).o; },
      [](std::int64_t b, std::int64_t j, std::int64_t e) {
        return course::round_to_bf16({100.f * std::cos(static_cast<float>(j + 3 * e + 7 * b))})[0];
      },
      changed_later);
}

std::vector<Case> causality_cases() {
  return {make_case(2, 2, 200, 200, 64, BHND, true), make_case(1, 3, 40, 300, 128, BNHD, true),
          make_case(1, 2, 150, 90, 32, BHND, true)};
}

TEST_P(AttentionTcTest, CausalMaskHidesFutureKeysBitForBit) {
  const AttentionStep step = GetParam().step;
  for (const Case& c : causality_cases()) {
    if (!course::m03::step_takes_head_dim(step, c.d)) continue;
    SCOPED_TRACE(c.name());
    course::attention_testing::expect_causal(c, {c.N_q / 3, c.N_q / 2 + 7, c.N_q - 2},
                                             [&](std::int64_t i0, std::int64_t* later) {
                                               return rows_that_saw_hidden_keys(&impl::attention, step, c, i0,
                                                                                seed(), later);
                                             });
    if (IsSkipped()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, AttentionTcTest, ::testing::ValuesIn(bf16_steps()), step_name);

// ----------------------------------------------------------- planted bugs -----

class PlantedAttentionTcTest : public GpuTest,
                               public ::testing::WithParamInterface<course::planted::PlantedAttentionTc> {};

TEST_P(PlantedAttentionTcTest, ChecksRejectIt) {
  const auto& bug = GetParam();
  EXPECT_FALSE(check_cases(bug.fn, AttentionStep::tc_register_softmax, planted_cases(), seed()))
      << "planted bug '" << bug.name << "' passed the checks: they are too weak to catch it";
}

/// The planted kernel without a bug passes the same checks: the rejections above are the
/// bugs', not the kernel's.
class PlantedAttentionTcBaseline : public GpuTest {};
TEST_F(PlantedAttentionTcBaseline, KernelWithoutBugPasses) {
  EXPECT_TRUE(check_cases(course::planted::attention_tc_reference_kernel, AttentionStep::tc_register_softmax,
                          planted_cases(), seed()));
}

INSTANTIATE_TEST_SUITE_P(Bugs, PlantedAttentionTcTest, ::testing::ValuesIn(course::planted::kPlantedAttentionTc),
                         [](const ::testing::TestParamInfo<course::planted::PlantedAttentionTc>& info) {
                           return std::string(info.param.name);
                         });

/// The Hopper steps' planted phases (attention_tc_hopper_planted.hpp): SKIPPED where the
/// Hopper steps are Unsupported.
class PlantedAttentionHopperTest : public GpuTest,
                                   public ::testing::WithParamInterface<course::planted::PlantedAttentionHopper> {};

TEST_P(PlantedAttentionHopperTest, ChecksRejectIt) {
  const auto& bug = GetParam();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_FALSE(check_cases(bug.fn, AttentionStep::tc_warp_specialized, planted_cases(), seed()))
      << "planted bug '" << bug.name << "' passed the checks: they are too weak to catch it");
}

INSTANTIATE_TEST_SUITE_P(HopperBugs, PlantedAttentionHopperTest,
                         ::testing::ValuesIn(course::planted::kPlantedAttentionHopper),
                         [](const ::testing::TestParamInfo<course::planted::PlantedAttentionHopper>& info) {
                           return std::string(info.param.name);
                         });

// ----------------------------------------- host-side checks (no GPU needed) -----

TEST(AttentionTcSteps, DtypeSplitsTheLadder) {
  for (const auto& info : course::m03::kAttentionSteps) {
    const bool tc = std::string(info.name).rfind("tc_", 0) == 0;
    EXPECT_EQ(course::m03::step_dtype(info.step) == AttentionDType::bf16, tc) << info.name;
  }
  EXPECT_EQ(bf16_steps().size(), std::size(course::m03::kAttentionSteps) - 5);  // five fp32 steps
}

TEST(AttentionTcSteps, HopperStepsTakeHeadDims64And128) {
  for (const auto& info : bf16_steps())
    for (const std::int64_t d : {32, 64, 96, 128})
      EXPECT_EQ(course::m03::step_takes_head_dim(info.step, d),
                !course::m03::step_support(info.step).hopper || d == 64 || d == 128)
          << info.name << " d = " << d;
}

/// Valid host-side arguments (never dereferenced: validation throws first), broken one at a time.
struct HostArgs {
  alignas(16) bf16 q[2 * 2 * 8 * 64];
  alignas(16) bf16 k[2 * 2 * 8 * 64];
  alignas(16) bf16 v[2 * 2 * 8 * 64];
  alignas(16) bf16 o[2 * 2 * 8 * 64];
  alignas(16) float lse[2 * 2 * 8];
  AttentionArgsBf16 args() {
    AttentionArgsBf16 a = course::m03::make_attention_args_bf16(q, k, v, o, 2, 2, 2, 8, 8, 64, BHND);
    a.lse = lse;
    return a;
  }
};

/// Calls impl::attention for every bf16 step with `mutate`d arguments; expects
/// InvalidArgument whose message contains `needle`.
template <class Mutate>
void expect_rejected(Mutate mutate, const std::string& needle) {
  for (const auto& info : bf16_steps()) {
    SCOPED_TRACE(info.name);
    HostArgs h;
    AttentionArgsBf16 a = h.args();
    mutate(a, h);
    course::testing::expect_invalid_argument([&] { impl::attention(info.step, a); }, needle);
  }
}

TEST(AttentionTcArgsTest, ValidArgumentsPassValidation) {
  for (const auto& info : bf16_steps()) {
    HostArgs h;
    EXPECT_NO_THROW(course::m03::validate_attention_args(h.args(), info.step, "test")) << info.name;
  }
}

TEST(AttentionTcArgsTest, StepOfTheOtherDtypeIsRejected) {
  HostArgs h;
  for (const auto& info : course::m03::attention_steps(AttentionDType::f32)) {
    SCOPED_TRACE(info.name);
    try {
      impl::attention(info.step, h.args());
      ADD_FAILURE() << "an fp32 step accepted bf16 arguments";
    } catch (const course::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'step'"), std::string::npos) << e.what();
    }
  }
}

TEST(AttentionTcArgsTest, SizesAreNamed) {
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.seq_q = 0; }, "'seq_q' = 0");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.seq_k = -1; }, "'seq_k' = -1");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.batch = 0; }, "'batch' = 0");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.heads = 2; a.kv_heads = 3; }, "'kv_heads' = 3");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.batch = 256; a.heads = 256; a.kv_heads = 256; }, "65535");
}

TEST(AttentionTcArgsTest, HeadDimIsNamed) {
  for (const std::int64_t d : {16, 48, 80, 256})
    expect_rejected(
        [d](AttentionArgsBf16& a, HostArgs&) {
          a.head_dim = d;
          a.q_strides.seq = a.k_strides.seq = a.v_strides.seq = a.o_strides.seq = 256;
        },
        "'head_dim' = " + std::to_string(d));
}

TEST(AttentionTcArgsTest, HopperHeadDimIsNamed) {
  for (const auto& info : bf16_steps()) {
    if (!course::m03::step_support(info.step).hopper) continue;
    for (const std::int64_t d : {32, 96}) {
      SCOPED_TRACE(std::string(info.name) + " d = " + std::to_string(d));
      HostArgs h;
      AttentionArgsBf16 a = h.args();
      a.head_dim = d;
      a.q_strides.seq = a.k_strides.seq = a.v_strides.seq = a.o_strides.seq = 128;
      course::testing::expect_invalid_argument([&] { impl::attention(info.step, a); },
                                               "'head_dim' = " + std::to_string(d));
    }
  }
}

TEST(AttentionTcArgsTest, PointersAreNamed) {
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.q = nullptr; }, "'q' = nullptr");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.o = nullptr; }, "'o' = nullptr");
  expect_rejected([](AttentionArgsBf16& a, HostArgs& h) { a.k = h.k + 4; }, "'k'");  // 8-byte aligned only
  expect_rejected([](AttentionArgsBf16& a, HostArgs& h) { a.o = h.q; }, "overlaps q");
  expect_rejected([](AttentionArgsBf16& a, HostArgs& h) { a.lse = reinterpret_cast<float*>(h.o); }, "overlaps o");
}

TEST(AttentionTcArgsTest, StridesAreNamed) {
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.q_strides.seq = 68; }, "'q_strides.seq' = 68");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.k_strides.seq = 32; }, "'k_strides.seq' = 32");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.v_strides.head = -8; }, "'v_strides.head' = -8");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.o_strides.batch = 4; }, "'o_strides.batch' = 4");
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.o_strides.head = 0; }, "'o_strides.head' = 0");
}

TEST(AttentionTcArgsTest, NegativeScaleIsNamed) {
  expect_rejected([](AttentionArgsBf16& a, HostArgs&) { a.scale = -1.f; }, "'scale' = -1");
}

}  // namespace
