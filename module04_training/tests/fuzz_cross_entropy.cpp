// Random-case hardening of the fused cross-entropy (label fuzz), run against
// course::solution and course::exercise like the module's tests. For every step and both
// dtypes: 512 random cases drawn from the whole contract, in 4 parts that ctest runs in
// parallel, plus a few large cases (*Large*), each checked by tests/cross_entropy_check.hpp
// against the CPU reference; then a bad-input sweep per step: every bad argument is
// rejected by name and leaves a healthy CUDA context. Seeds, replay and the "[fuzz]"
// lines: course/fuzz.hpp.
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "cross_entropy_check.hpp"
#include "module04/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::DType;
using course::StepInfo;
using course::fuzz::fake_address;
using course::fuzz::kCasesPerStep;
using course::fuzz::kLargeCases;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::round_up;
using course::fuzz::Verdict;
using course::m04::CrossEntropyStep;
using course::m04::FusedCrossEntropyArgs;
using course::testing::GpuTest;
using XentCase = course::m04::xent_checks::Case;

/// Vocabularies around every size the steps dispatch on (a pack of 4 or 8, the lane
/// layouts' 16..256 packs, the block layouts up to 8192 packs, the on-chip limits 32768
/// and 65536) up to 70000; rows keep the matrix under ~2^18 logits. Large: the bench's
/// 16384 x 84 class of batch, or a few rows of a GPT-2-sized vocabulary.
XentCase draw_cross_entropy(Rng& rng, DType dtype, bool large) {
  XentCase c;
  c.dtype = dtype;
  if (large) {
    if (rng.chance(0.5)) {
      c.vocab = rng.pick({std::int64_t{84}, std::int64_t{85}, std::int64_t{1000}});
      c.rows = rng.uniform(4096, 16384);
    } else {
      c.vocab = rng.pick({std::int64_t{50257}, std::int64_t{50304}, std::int64_t{65539}});
      c.rows = rng.uniform(8, 48);
    }
  } else {
    c.vocab = rng.size(1, 70000, {4, 8, 32, 128, 1024, 8192, 32768, 65536});
    c.rows = rng.size(1, std::max<std::int64_t>(1, (std::int64_t{1} << 18) / c.vocab), {8, 32, 64, 256});
  }
  if (rng.chance(0.3)) {  // the 16-byte path: aligned bases, row strides multiples of 8 elements
    c.ldl = round_up(c.vocab, 8) + 8 * rng.uniform(0, 2);
    c.lddl = round_up(c.vocab, 8) + 8 * rng.uniform(0, 2);
  } else {
    c.ldl = course::fuzz::draw_row_stride(rng, c.vocab);
    c.lddl = course::fuzz::draw_row_stride(rng, c.vocab);
    c.offset = rng.chance(0.4) ? rng.uniform(1, 3) : 0;
  }
  c.in_place = rng.chance(0.15);
  c.forward_only = !c.in_place && rng.chance(0.1);
  c.spread = rng.chance(0.5) ? 4.0 : std::exp(rng.real(std::log(0.01), std::log(1e4)));
  if (rng.chance(0.15)) c.center = rng.pick({-1.0, 1.0}) * std::exp(rng.real(0.0, std::log(1e4)));
  const std::int64_t ignore_kind = rng.uniform(0, 9);
  c.ignore_share = ignore_kind < 3 ? 0.0 : ignore_kind < 8 ? rng.real(0.0, 0.5) : ignore_kind == 8 ? 1.0 : 0.9;
  if (rng.chance(0.1)) c.ignore_index = static_cast<std::int32_t>(rng.uniform(0, c.vocab - 1));
  if (rng.chance(0.05)) c.bad_rows = rng.uniform(1, 3);
  if (rng.chance(0.2)) c.dloss = static_cast<float>(rng.real(-4.0, 4.0));
  return c;
}

Verdict check_cross_entropy(CrossEntropyStep step, const XentCase& c, std::uint64_t seed) {
  const auto o = course::m04::xent_checks::run_case(
      [](CrossEntropyStep s, const FusedCrossEntropyArgs& a) { impl::cross_entropy(s, a); }, step, c, seed);
  Verdict v;
  v.add(o.losses, "losses");
  v.add(o.mean, "loss_mean");
  if (o.dlogits.checked > 0) v.add(o.dlogits, "dlogits");
  if (o.padding_writes) v.fail(std::to_string(o.padding_writes) + " writes into the row padding of dlogits");
  if (o.num_valid != o.want_num_valid)
    v.fail("num_valid = " + std::to_string(o.num_valid) + ", want " + std::to_string(o.want_num_valid));
  if (!(o.worst_row_sum_ratio <= 1.0))
    v.fail("a counted row of dlogits sums to " + std::to_string(o.worst_row_sum_ratio) + " x the allowed |sum|");
  if (!o.other.empty()) v.fail(o.other);
  v.ratio = std::max(v.ratio, o.worst_row_sum_ratio);
  return v;
}

using XentParam = std::tuple<StepInfo<CrossEntropyStep>, DType, int>;  // step, dtype, part

class FuzzCrossEntropy : public GpuTest, public ::testing::WithParamInterface<XentParam> {
 protected:
  void run(bool large) {
    const auto& [info, dtype, part_index] = GetParam();
    const CrossEntropyStep step = info.step;
    const DType dt = dtype;
    const Part part = make_part("cross_entropy", std::string(info.name) + "/" + course::to_string(dtype), part_index,
                                large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_cross_entropy(rng, dt, large); },
        [&](const XentCase& c, std::uint64_t s) { return check_cross_entropy(step, c, s); })));
  }
};

class FuzzCrossEntropyLarge : public FuzzCrossEntropy {};

TEST_P(FuzzCrossEntropy, RandomCases) { run(false); }
TEST_P(FuzzCrossEntropyLarge, RandomCases) { run(true); }

std::string xent_param_name(const ::testing::TestParamInfo<XentParam>& info) {
  const auto& [step, dtype, part] = info.param;
  return course::fuzz::test_name(step.name, course::to_string(dtype), part);  // "online_bf16_part0"
}

COURSE_FUZZ_INSTANTIATE(FuzzCrossEntropy, FuzzCrossEntropyLarge, xent_param_name,
                        ::testing::ValuesIn(course::m04::kCrossEntropySteps),
                        ::testing::Values(DType::f32, DType::bf16));

class FuzzCrossEntropyBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<CrossEntropyStep>> {};

TEST_P(FuzzCrossEntropyBadInputs, RejectedByNameContextHealthy) {
  const CrossEntropyStep step = GetParam().step;
  constexpr std::int64_t kRows = 16, kVocab = 84;
  DeviceBuffer<float> x(kRows * kVocab), d(kRows * kVocab), losses(kRows), mean(1);
  DeviceBuffer<std::int32_t> t(std::vector<std::int32_t>(kRows, 3)), n(1);
  const auto good = [&] {
    return course::m04::make_cross_entropy_args(DType::f32, x.data(), t.data(), losses.data(), mean.data(), n.data(),
                                                d.data(), kRows, kVocab);
  };
  using A = FusedCrossEntropyArgs;
  struct Bad {
    const char* what;
    std::function<void(A&)> mutate;
    const char* needle;
  };
  const float* x_half = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x.data()) + 2);
  const std::vector<Bad> bad = {
      {"negative rows", [](A& a) { a.rows = -1; }, "'rows' = -1"},
      {"vocab 0", [](A& a) { a.vocab = 0; }, "'vocab' = 0"},
      {"ldl < vocab", [](A& a) { a.ldl = a.vocab - 1; }, "'ldl'"},
      {"lddl < vocab", [](A& a) { a.lddl = 1; }, "'lddl'"},
      {"fp16", [](A& a) { a.dtype = DType::f16; }, "'dtype'"},
      {"NaN dloss", [](A& a) { a.dloss = NAN; }, "'dloss'"},
      {"null logits", [](A& a) { a.logits = nullptr; }, "'logits' = nullptr"},
      {"null targets", [](A& a) { a.targets = nullptr; }, "'targets' = nullptr"},
      {"null losses", [](A& a) { a.losses = nullptr; }, "'losses' = nullptr"},
      {"null loss_mean", [](A& a) { a.loss_mean = nullptr; }, "'loss_mean' = nullptr"},
      {"null num_valid", [](A& a) { a.num_valid = nullptr; }, "'num_valid' = nullptr"},
      {"logits misaligned by half an element", [&](A& a) { a.logits = x_half; }, "'logits'"},
      {"dlogits inside logits", [&](A& a) { a.dlogits = x.data() + 84; }, "'dlogits'"},
      {"dlogits == logits with another stride",
       [&](A& a) {
         a.dlogits = x.data();
         a.rows = 8;
         a.lddl = a.ldl + 4;
       },
       "'dlogits'"},
      {"losses inside dlogits", [&](A& a) { a.losses = d.data() + 5; }, "'dlogits'"},
      {"loss_mean inside logits", [&](A& a) { a.loss_mean = x.data() + 7; }, "'loss_mean'"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    A a = good();
    b.mutate(a);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::cross_entropy(step, a); }, b.needle)));
  }
  A a = good();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(
      course::fuzz::rejects([&] { impl::cross_entropy(static_cast<CrossEntropyStep>(99), a); }, "'step' = 99")));
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzCrossEntropyBadInputs, ::testing::ValuesIn(course::m04::kCrossEntropySteps),
                         course::fuzz::step_name<CrossEntropyStep>);

// ===================================== the generator itself (CPU only) =====
// Every drawn case must pass the op's own validation (addresses only, never dereferenced),
// and every feature of the contract must occur.

TEST(FuzzGenerators, CrossEntropyCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    course::fuzz::Coverage cov(std::string("cross_entropy/") + course::to_string(dtype));
    const std::int64_t on_chip = course::m04::cross_entropy_on_chip_max_vocab(dtype);
    for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
      Rng rng(course::fuzz::case_seed(seed, i));
      const XentCase c = draw_cross_entropy(rng, dtype, i >= kCasesPerStep);
      const std::size_t es = dtype == DType::bf16 ? 2 : 4;
      FusedCrossEntropyArgs a;
      a.dtype = dtype;
      a.logits = fake_address<char>(1, c.offset * static_cast<std::int64_t>(es));
      a.dlogits = c.forward_only ? nullptr
                  : c.in_place   ? const_cast<void*>(a.logits)
                                 : static_cast<void*>(fake_address<char>(2, c.offset * static_cast<std::int64_t>(es)));
      a.targets = fake_address<std::int32_t>(3);
      a.losses = fake_address<float>(4);
      a.loss_mean = fake_address<float>(5);
      a.num_valid = fake_address<std::int32_t>(6);
      a.rows = c.rows, a.vocab = c.vocab, a.ldl = c.stride_l(), a.lddl = c.stride_d();
      a.ignore_index = c.ignore_index, a.dloss = c.dloss;
      EXPECT_NO_THROW(course::m04::validate_cross_entropy_args(a, CrossEntropyStep::row_on_chip, "fuzz")) << c.str();
      cov.next_case();
      cov.count("vocab 1", c.vocab == 1);
      cov.count("prime vocab", course::fuzz::is_prime(c.vocab));
      cov.count("vocab=k*tile+-1", c.vocab > 1 && c.vocab % 8 != 0 && course::fuzz::near_tile(c.vocab, {32, 1024}));
      cov.count("vocab>1024", c.vocab > 1024);
      cov.count("vocab>on-chip limit", c.vocab > on_chip);
      cov.count("rows 1", c.rows == 1);
      cov.count("padded rows", c.stride_l() > c.vocab || c.stride_d() > c.vocab);
      cov.count("16-byte path", c.offset == 0 && c.stride_l() % 8 == 0 && (c.forward_only || c.stride_d() % 8 == 0));
      cov.count("misaligned base", c.offset != 0);
      cov.count("in place", c.in_place);
      cov.count("forward only", c.forward_only);
      cov.count("some ignored", c.ignore_share > 0 && c.ignore_share < 1);
      cov.count("all ignored", c.ignore_share == 1.0);
      cov.count("ignore_index in [0, vocab)", c.ignore_index >= 0);
      cov.count("out-of-range targets", c.bad_rows > 0);
      cov.count("|logits|>=1000", std::fabs(c.center) + c.spread >= 1000);
      cov.count("dloss != 1", c.dloss != 1.f);
    }
    std::cout << cov.str() << "\n";
    EXPECT_TRUE(cov.all_hit());
  }
}

}  // namespace
