// Tests of the fused cross-entropy ladder, run against course::solution and
// course::exercise (built twice; `impl` names the one under test), for every step and
// both dtypes (fp32, bf16).
#include "course/bf16.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "cross_entropy_check.hpp"
#include "cross_entropy_planted.hpp"
#include "module04/cross_entropy.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::DType;
using course::m04::CrossEntropyStep;
using course::m04::FusedCrossEntropyArgs;
using course::m04::xent_checks::Accepted;
using course::m04::xent_checks::Case;
using course::m04::xent_checks::CrossEntropyFn;
using course::m04::xent_checks::Outcome;
using course::m04::xent_checks::run_case;
using course::testing::GpuTest;

using Param = std::tuple<course::StepInfo<CrossEntropyStep>, DType>;

class CrossEntropyTest : public GpuTest, public ::testing::WithParamInterface<Param> {
 protected:
  CrossEntropyStep step() const { return std::get<0>(GetParam()).step; }
  DType dtype() const { return std::get<1>(GetParam()); }
  Case make(std::int64_t rows, std::int64_t vocab) const {
    Case c;
    c.rows = rows;
    c.vocab = vocab;
    c.dtype = dtype();
    return c;
  }
  Outcome run(const Case& c, std::vector<float>* losses = nullptr, float* mean = nullptr) {
    return run_case([](CrossEntropyStep s, const FusedCrossEntropyArgs& a) { impl::cross_entropy(s, a); }, step(),
                    c,
                    seed() + static_cast<std::uint64_t>(c.rows * 7919 + c.vocab * 31 + c.stride_l() * 3 +
                                                        c.stride_d() * 5 + c.offset),
                    losses, mean);
  }
  void expect_accepted(const Case& c) {
    SCOPED_TRACE(c.str());
    Outcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + course::to_string(std::get<1>(info.param));
}

// ---- the lesson's worked example ---------------------------------------------------

TEST_P(CrossEntropyTest, WorkedExample123) {
  // x = [1, 2, 3], t = 2: loss = log(e + e^2 + e^3) - 3 = 0.40760596,
  // dlogits = softmax(x) - onehot(2) = [0.09003057, 0.24472847, -0.33475904].
  const std::vector<float> x = {1.f, 2.f, 3.f};  // exact in bf16 too
  const std::vector<std::int32_t> t = {2};
  DeviceBuffer<float> d32(x), losses(1), mean(1), d_out32(3);
  DeviceBuffer<__nv_bfloat16> d16(course::to_bf16(x)), d_out16(3);
  DeviceBuffer<std::int32_t> targets(t), n(1);
  const bool bf = dtype() == DType::bf16;
  FusedCrossEntropyArgs a = course::m04::make_cross_entropy_args(
      dtype(), bf ? static_cast<const void*>(d16.data()) : d32.data(), targets.data(), losses.data(), mean.data(),
      n.data(), bf ? static_cast<void*>(d_out16.data()) : d_out32.data(), 1, 3);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::cross_entropy(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> g = bf ? course::from_bf16(d_out16.download()) : d_out32.download();
  const auto f32 = course::tolerance_for(DType::f32, 3);
  EXPECT_MATCHES(course::compare(losses.download(), std::vector<double>{0.40760596444438030}, f32));
  EXPECT_MATCHES(course::compare(mean.download(), std::vector<double>{0.40760596444438030}, f32));
  EXPECT_EQ(n.download()[0], 1);
  EXPECT_MATCHES(course::compare(g, std::vector<double>{0.09003057317038046, 0.24472847105479764, -0.3347590442251781},
                                 course::tolerance_for(dtype(), 3)));
}

// ---- vocabularies, row counts, strides -------------------------------------------------

/// The brief's vocabularies: 1 and 2 (degenerate), 84/85 (the character GPT, +1), 1000,
/// 4097 (a block layout + 1), 50257 / 50304 (GPT-2, padded), 65536 + 3 (past the on-chip
/// limit of bf16; fp32's is 32768). Rows: 1, primes.
TEST_P(CrossEntropyTest, VocabulariesAndRowCounts) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {1, 1},   {7, 1},     {3, 2},    {1, 84},    {37, 84},  {131, 85},  {1, 1000}, {13, 1000},
      {5, 4097}, {3, 50257}, {2, 50304}, {1, 65539}, {2, 65539}, {257, 16}, {1031, 7}};
  for (const auto& [rows, vocab] : shapes) expect_accepted(make(rows, vocab));
}

std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }

TEST_P(CrossEntropyTest, PaddedStridesAndMisalignedBases) {
  for (const auto& [rows, vocab] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {37, 84}, {11, 85}, {5, 1000}, {3, 4097}, {2, 50304}}) {
    // odd padding (no vector path); 16-byte friendly padding (84 -> 88: the bench's stride);
    // the same with every matrix 1 element past a 16-byte boundary; different ldl and lddl.
    Case c = make(rows, vocab);
    c.ldl = vocab + 3, c.lddl = vocab + 5;
    expect_accepted(c);
    c.ldl = c.lddl = round_up(vocab, 8);
    expect_accepted(c);
    c.offset = 1;
    expect_accepted(c);
    c.offset = 0;
    c.ldl = round_up(vocab, 8) + 8, c.lddl = round_up(vocab, 8) + 16;
    expect_accepted(c);
  }
}

TEST_P(CrossEntropyTest, IgnoredRows) {
  for (const auto& [rows, vocab] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {64, 84}, {29, 1000}, {7, 50304}}) {
    Case c = make(rows, vocab);
    c.ignore_share = 0.3;  // some
    expect_accepted(c);
    c.ignore_share = 1.0;  // all: loss_mean 0 (PyTorch: NaN), dlogits 0
    expect_accepted(c);
    c.ignore_share = 0.5;
    c.ignore_index = 3;  // an ignore_index inside [0, vocab): that class is ignored
    expect_accepted(c);
  }
}

TEST_P(CrossEntropyTest, AllIgnoredGivesZeroMeanNotNaN) {
  Case c = make(16, 84);
  c.ignore_share = 1.0;
  std::vector<float> losses;
  float mean = -1.f;
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c, &losses, &mean));
  EXPECT_TRUE(Accepted(o));
  EXPECT_EQ(mean, 0.f);
  EXPECT_EQ(o.num_valid, 0);
}

TEST_P(CrossEntropyTest, InPlace) {
  for (const auto& [rows, vocab] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {37, 84}, {33, 85}, {9, 1000}, {3, 4097}, {2, 50304}, {2, 65539}}) {
    Case c = make(rows, vocab);
    c.in_place = true;
    c.ignore_share = 0.2;
    expect_accepted(c);
    c.ldl = round_up(vocab, 8) + 8;
    expect_accepted(c);
  }
}

TEST_P(CrossEntropyTest, ForwardOnly) {
  for (const auto& [rows, vocab] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {37, 84}, {5, 4097}, {2, 50304}, {1, 65539}}) {
    Case c = make(rows, vocab);
    c.forward_only = true;
    c.ignore_share = 0.2;
    expect_accepted(c);
  }
}

TEST_P(CrossEntropyTest, ExtremeLogits) {
  // A 1e4 spread (exp(x) overflows fp32 from x = 88.7: only max subtraction survives it),
  // a large common offset (logits in [1e4 - 5, 1e4 + 5)), and a sharp softmax.
  for (const auto& [rows, vocab] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {37, 84}, {5, 1000}, {2, 50304}}) {
    Case c = make(rows, vocab);
    c.spread = 1e4;
    expect_accepted(c);
    c.spread = 5;
    c.center = 1e4;
    expect_accepted(c);
    c.spread = 60;
    c.center = -30;
    expect_accepted(c);
  }
}

TEST_P(CrossEntropyTest, DlossScalesTheGradient) {
  Case c = make(45, 1000);
  c.dloss = 0.375f;
  expect_accepted(c);
  c.dloss = -2.5f;
  expect_accepted(c);
}

TEST_P(CrossEntropyTest, OutOfRangeTargetsGiveNaNRows) {
  // targets vocab, -1, INT_MAX and -INT_MAX: that row's loss and dlogits are NaN, loss_mean
  // NaN, every other row exact; nothing outside the logits is read (compute-sanitizer).
  for (const auto& [rows, vocab] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {37, 84}, {9, 1000}, {3, 50304}}) {
    Case c = make(rows, vocab);
    c.bad_rows = std::min<std::int64_t>(rows, 4);
    expect_accepted(c);
    c.ignore_share = 0.3;
    c.bad_rows = 1;
    expect_accepted(c);
  }
}

TEST_P(CrossEntropyTest, LossMeanIsDeterministic) {
  // Same inputs, same bits: the per-row losses and their fixed-order mean.
  Case c = make(4099, 1000);
  c.ignore_share = 0.1;
  std::vector<float> l1, l2;
  float m1 = 0.f, m2 = 0.f;
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c, &l1, &m1));
  EXPECT_TRUE(Accepted(o));
  for (int i = 0; i < 3; ++i) {
    run(c, &l2, &m2);
    EXPECT_EQ(course::testing::bits_of(m1), course::testing::bits_of(m2)) << "run " << i;
    EXPECT_EQ(std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)), 0) << "run " << i;
  }
}

TEST_P(CrossEntropyTest, LargeBatch) {
  // The bench's character GPT row count at a smaller vocabulary, and the GPT-2 vocabulary.
  expect_accepted(make(16384, 84));
  Case c = make(64, 50304);
  c.ignore_share = 0.05;
  expect_accepted(c);
}

TEST_P(CrossEntropyTest, ZeroRowsWritesZeroMean) {
  DeviceBuffer<float> mean(1);
  DeviceBuffer<std::int32_t> n(1);
  mean.poison();
  n.poison();
  FusedCrossEntropyArgs a =
      course::m04::make_cross_entropy_args(dtype(), nullptr, nullptr, nullptr, mean.data(), n.data(), nullptr, 0, 84);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::cross_entropy(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(mean.download()[0], 0.f);
  EXPECT_EQ(n.download()[0], 0);
}

INSTANTIATE_TEST_SUITE_P(Steps, CrossEntropyTest,
                         ::testing::Combine(::testing::ValuesIn(course::m04::kCrossEntropySteps),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         param_name);

// ---- planted bugs: the checking helper must reject each -----------------------------

class CrossEntropyPlantedTest : public GpuTest {
 protected:
  void expect_rejected(const CrossEntropyFn& bug, Case c) {
    for (DType dt : {DType::f32, DType::bf16}) {
      c.dtype = dt;
      SCOPED_TRACE(c.str());
      const Outcome o = run_case(bug, CrossEntropyStep::row_on_chip, c, seed());
      EXPECT_FALSE(o.ok()) << "the planted bug passed the checks; they cannot catch it";
    }
  }
  static Case make(std::int64_t rows, std::int64_t vocab) {
    Case c;
    c.rows = rows;
    c.vocab = vocab;
    return c;
  }
};

TEST_F(CrossEntropyPlantedTest, TheHarnessAcceptsTheCorrectPlantedKernel) {
  // The planted kernels share one body with the bug switched off: it must pass, so each
  // rejection below is the bug's doing.
  Case c = make(37, 84);
  c.ignore_share = 0.3;
  c.spread = 1e4;
  for (DType dt : {DType::f32, DType::bf16}) {
    c.dtype = dt;
    SCOPED_TRACE(c.str());
    EXPECT_TRUE(Accepted(run_case(course::planted::cross_entropy_correct, CrossEntropyStep::row_on_chip, c, seed())));
  }
}

TEST_F(CrossEntropyPlantedTest, NoMaxSubtractionIsRejected) {
  Case c = make(37, 84);
  c.spread = 200;  // exp(200) overflows fp32
  expect_rejected(course::planted::cross_entropy_no_max_subtraction, c);
}

TEST_F(CrossEntropyPlantedTest, GradientNotDividedByNumValidIsRejected) {
  expect_rejected(course::planted::cross_entropy_not_divided_by_n, make(37, 84));
}

TEST_F(CrossEntropyPlantedTest, IgnoredRowsCountedIsRejected) {
  Case c = make(37, 84);
  c.ignore_share = 0.3;
  expect_rejected(course::planted::cross_entropy_ignored_counted, c);
}

TEST_F(CrossEntropyPlantedTest, MissingOneHotIsRejected) {
  expect_rejected(course::planted::cross_entropy_missing_one_hot, make(37, 84));
}

// ---- argument validation: host-side, before any launch (no GPU needed) ------------------

/// Fake "device" storage: validation only looks at the addresses.
alignas(16) float g_fake[16384];

/// 16 x 64 fp32 logits at 0, dlogits at 2048, targets at 4096, losses at 4160, mean at
/// 4200, num_valid at 4204.
FusedCrossEntropyArgs good_args() {
  return course::m04::make_cross_entropy_args(DType::f32, g_fake, reinterpret_cast<const std::int32_t*>(g_fake + 4096),
                                              g_fake + 4160, g_fake + 4200,
                                              reinterpret_cast<std::int32_t*>(g_fake + 4204), g_fake + 2048, 16, 64);
}

void call_default_step(const FusedCrossEntropyArgs& a) { impl::cross_entropy(CrossEntropyStep::row_on_chip, a); }

template <class T>
T* shifted(T* p, std::ptrdiff_t bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(p) + bytes);
}

TEST(CrossEntropyArgsTest, BadShapesAreNamed) {
  using A = FusedCrossEntropyArgs;
  course::testing::expect_each_rejected<A>(good_args, call_default_step, {
      {[](A& a) { a.rows = -1; }, "'rows' = -1"},
      {[](A& a) { a.rows = std::int64_t{1} << 31; }, "'rows' = 2147483648"},
      {[](A& a) { a.vocab = 0; }, "'vocab' = 0"},
      {[](A& a) { a.vocab = -5; }, "'vocab' = -5"},
      {[](A& a) { a.ldl = 63; }, "'ldl' = 63"},
      {[](A& a) { a.lddl = 10; }, "'lddl' = 10"},
      {[](A& a) { a.dtype = DType::f16; }, "'dtype'"},
      {[](A& a) { a.dloss = NAN; }, "'dloss'"},
      {[](A& a) { a.dloss = INFINITY; }, "'dloss'"},
  });
  course::testing::expect_invalid_argument(
      [] { impl::cross_entropy(static_cast<CrossEntropyStep>(17), good_args()); }, "'step' = 17");
}

TEST(CrossEntropyArgsTest, BadPointersAreNamed) {
  using A = FusedCrossEntropyArgs;
  course::testing::expect_each_rejected<A>(good_args, call_default_step, {
      {[](A& a) { a.logits = nullptr; }, "'logits' = nullptr"},
      {[](A& a) { a.targets = nullptr; }, "'targets' = nullptr"},
      {[](A& a) { a.losses = nullptr; }, "'losses' = nullptr"},
      {[](A& a) { a.loss_mean = nullptr; }, "'loss_mean' = nullptr"},
      {[](A& a) { a.num_valid = nullptr; }, "'num_valid' = nullptr"},
      {[](A& a) { a.logits = shifted(a.logits, 2); }, "'logits'"},
      {[](A& a) { a.dlogits = shifted(a.dlogits, 1); }, "'dlogits'"},
      {[](A& a) { a.targets = shifted(a.targets, 2); }, "'targets'"},
      {[](A& a) { a.losses = shifted(a.losses, 1); }, "'losses'"},
      {[](A& a) {
         a.dtype = DType::bf16;
         a.logits = shifted(a.logits, 1);
       },
       "'logits'"},
  });
}

TEST(CrossEntropyArgsTest, OverlapsAreNamed) {
  using A = FusedCrossEntropyArgs;
  course::testing::expect_each_rejected<A>(good_args, call_default_step, {
      {[](A& a) { a.dlogits = g_fake + 100; }, "overlaps logits"},                 // inside the logits
      {[](A& a) { a.dlogits = g_fake + 64; }, "overlaps logits"},                  // shifted by a row
      {[](A& a) { a.dlogits = g_fake, a.lddl = 68; }, "overlaps logits"},          // same start, other stride
      {[](A& a) { a.losses = g_fake + 10; }, "overlaps logits"},
      {[](A& a) { a.losses = g_fake + 2048 + 5; }, "overlaps losses"},  // reported on dlogits
      {[](A& a) { a.loss_mean = g_fake + 4096 + 3; }, "overlaps targets"},
      {[](A& a) { a.loss_mean = g_fake + 4160 + 3; }, "overlaps loss_mean"},  // reported on losses
      {[](A& a) { a.num_valid = reinterpret_cast<std::int32_t*>(a.loss_mean); }, "overlaps loss_mean"},
      {[](A& a) { a.dlogits = g_fake + 4096 - 64 * 16 + 8; }, "overlaps targets"},
  });
}

TEST(CrossEntropyArgsTest, InPlaceAndForwardOnlyAreAccepted) {
  auto a = good_args();
  a.dlogits = const_cast<void*>(a.logits);  // in place, lddl == ldl
  for (const auto& s : course::m04::kCrossEntropySteps)
    EXPECT_NO_THROW(course::m04::validate_cross_entropy_args(a, s.step, "test")) << s.name;
  a = good_args();
  a.dlogits = nullptr;
  a.lddl = 0;  // not used without dlogits
  EXPECT_NO_THROW(course::m04::validate_cross_entropy_args(a, CrossEntropyStep::online, "test"));
  a = good_args();
  a.dtype = DType::bf16;  // 2-byte elements: an address 2 bytes off 4 is aligned
  a.logits = shifted(a.logits, 2);
  a.dlogits = shifted(a.dlogits, 2);
  EXPECT_NO_THROW(course::m04::validate_cross_entropy_args(a, CrossEntropyStep::row_on_chip, "test"));
}

TEST(CrossEntropyArgsTest, ZeroRowsNeedsOnlyTheScalars) {
  FusedCrossEntropyArgs a;
  a.vocab = 84;
  a.ldl = 84;
  a.loss_mean = g_fake;
  a.num_valid = reinterpret_cast<std::int32_t*>(g_fake + 1);
  EXPECT_NO_THROW(course::m04::validate_cross_entropy_args(a, CrossEntropyStep::online, "test"));
  a.loss_mean = nullptr;
  course::testing::expect_invalid_argument([&] { call_default_step(a); }, "'loss_mean' = nullptr");
}

TEST(CrossEntropyArgsTest, StepTableNamesEveryStep) {
  EXPECT_STREQ(course::m04::step_name(CrossEntropyStep::three_pass), "three_pass");
  EXPECT_STREQ(course::m04::step_name(CrossEntropyStep::online), "online");
  EXPECT_STREQ(course::m04::step_name(CrossEntropyStep::row_on_chip), "row_on_chip");
  EXPECT_STREQ(course::m04::step_name(static_cast<CrossEntropyStep>(9)), "?");
  EXPECT_EQ(course::m04::cross_entropy_on_chip_max_vocab(DType::f32), 32768);
  EXPECT_EQ(course::m04::cross_entropy_on_chip_max_vocab(DType::bf16), 65536);
}

}  // namespace
