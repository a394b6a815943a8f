// Random-case hardening of the LayerNorm ladders (label fuzz), run against course::solution
// and course::exercise like the module's tests. For every step of layer_norm_forward and of
// layer_norm_backward: 512 random cases (4 parts that ctest runs in parallel) drawn from
// the whole contract -- any C (around 1, the warp, the compile-time widths, the register
// limit), padded strides, misaligned starts, fp32 and bf16, large-mean and constant rows,
// eps, both accumulate flags -- plus a few large cases (*Large*), each checked by
// layer_norm_check.hpp against the CPU reference. Seeds, replay and the "[fuzz]" lines:
// course/fuzz.hpp.
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "layer_norm_check.hpp"
#include "module04/layer_norm.hpp"
#include "module04/layer_norm_backward.hpp"

#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>

namespace {

using course::DType;
using course::StepInfo;
using course::fuzz::kCasesPerStep;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::step_part_name;
using course::fuzz::Verdict;
using course::m04::LayerNormArgs;
using course::m04::LayerNormBackwardArgs;
using course::m04::LayerNormBackwardStep;
using course::m04::LayerNormStep;
using course::m04::layer_norm_checks::Case;
using course::testing::GpuTest;

/// One random case. Small: C up to 13000, rows keeping rows * C under ~2^18. Large: the
/// GPT's widths at thousands of rows, or a few very long rows.
Case draw_case(Rng& rng, bool large) {
  Case c;
  c.dtype = rng.chance(0.5) ? DType::bf16 : DType::f32;
  if (large) {
    if (rng.chance(0.5)) {
      c.C = rng.pick({384, 768, 1024});
      c.rows = rng.uniform(4000, 16384);
    } else {
      c.C = rng.size(5000, 1 << 17);
      c.rows = rng.uniform(1, 8);
    }
  } else {
    c.C = rng.size(1, 13000, {8, 32, 384, 768, 1024});
    if (rng.chance(0.3)) c.C = rng.pick({384, 768, 1024});
    c.rows = rng.size(1, std::max<std::int64_t>(1, std::min<std::int64_t>(3000, (1 << 18) / c.C)));
  }
  const auto stride = [&](std::int64_t C) {
    switch (rng.uniform(0, 3)) {
      case 0: return std::int64_t{0};                           // contiguous
      case 1: return C + rng.uniform(1, 9);                     // any padding
      default: return course::fuzz::round_up(C, 8) + 8 * rng.uniform(0, 3);  // 16-byte rows
    }
  };
  c.ldx = stride(c.C), c.ldy = stride(c.C), c.lddy = stride(c.C), c.lddx = stride(c.C);
  if (rng.chance(0.15)) c.offset = rng.uniform(1, 3);
  c.row_offset = rng.pick({0.0, 0.5, 3.0, 20.0});
  c.spread = rng.pick({0.01, 0.3, 1.0, 4.0});
  if (rng.chance(0.08)) c.mean_offset = rng.pick({-1000.0, 1000.0}), c.spread = 0.017;
  if (rng.chance(0.04)) c.constant_rows = true;
  c.eps = rng.pick({1e-5f, 1e-6f, 1e-3f});
  c.accumulate_dx = rng.chance(0.3);
  c.accumulate_dparams = rng.chance(0.3);
  return c;
}

// =========================================================================== forward ====

Verdict check_forward(LayerNormStep step, const Case& c, std::uint64_t seed) {
  const auto o = course::m04::layer_norm_checks::run_forward(
      [](LayerNormStep s, const LayerNormArgs& a) { impl::layer_norm_forward(s, a); }, step, c, seed);
  Verdict v;
  v.add(o.y, "y");
  v.add(o.mean, "mean");
  v.add(o.rstd, "rstd");
  if (o.padding_writes) v.fail(std::to_string(o.padding_writes) + " writes outside the matrix y");
  return v;
}

using ForwardParam = std::tuple<StepInfo<LayerNormStep>, int>;  // step, part

class FuzzLayerNorm : public GpuTest, public ::testing::WithParamInterface<ForwardParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const LayerNormStep step = info.step;
    const Part part = make_part("layer_norm", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_case(rng, large); },
        [&](const Case& c, std::uint64_t s) { return check_forward(step, c, s); })));
  }
};
class FuzzLayerNormLarge : public FuzzLayerNorm {};

TEST_P(FuzzLayerNorm, RandomCases) { run(false); }
TEST_P(FuzzLayerNormLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzLayerNorm, FuzzLayerNormLarge, step_part_name<LayerNormStep>,
                        ::testing::ValuesIn(course::m04::kLayerNormSteps));

// ========================================================================== backward ====

Verdict check_backward(LayerNormBackwardStep step, const Case& c, std::uint64_t seed) {
  const auto o = course::m04::layer_norm_checks::run_backward(
      [](LayerNormBackwardStep s, const LayerNormBackwardArgs& a) { impl::layer_norm_backward(s, a); }, step, c,
      seed);
  Verdict v;
  v.add(o.dx, "dx");
  v.add(o.dgamma, "dgamma");
  v.add(o.dbeta, "dbeta");
  if (o.padding_writes) v.fail(std::to_string(o.padding_writes) + " writes outside the matrix dx");
  return v;
}

using BackwardParam = std::tuple<StepInfo<LayerNormBackwardStep>, int>;

class FuzzLayerNormBackward : public GpuTest, public ::testing::WithParamInterface<BackwardParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const LayerNormBackwardStep step = info.step;
    const Part part = make_part("layer_norm_backward", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_case(rng, large); },
        [&](const Case& c, std::uint64_t s) { return check_backward(step, c, s); })));
  }
};
class FuzzLayerNormBackwardLarge : public FuzzLayerNormBackward {};

TEST_P(FuzzLayerNormBackward, RandomCases) { run(false); }
TEST_P(FuzzLayerNormBackwardLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzLayerNormBackward, FuzzLayerNormBackwardLarge, step_part_name<LayerNormBackwardStep>,
                        ::testing::ValuesIn(course::m04::kLayerNormBackwardSteps));

// ============================================ the generator covers the contract (CPU) ====

TEST(FuzzGenerators, LayerNormCasesAreValidAndCoverTheContract) {
  course::fuzz::Coverage cov("layer_norm");
  Rng rng(course::fuzz::case_seed(course::testing::test_seed(), 0));
  for (int i = 0; i < kCasesPerStep; ++i) {
    const Case c = draw_case(rng, false);
    // The arguments the helpers build pass validation (fake, disjoint addresses).
    LayerNormBackwardArgs a;
    a.dtype = c.dtype, a.rows = c.rows, a.C = c.C, a.ldx = c.s_x(), a.lddy = c.s_dy(), a.lddx = c.s_dx();
    a.x = course::fuzz::fake_address<float>(1), a.dy = course::fuzz::fake_address<float>(2);
    a.dx = course::fuzz::fake_address<float>(3), a.gamma = course::fuzz::fake_address<float>(4);
    a.mean = course::fuzz::fake_address<float>(5), a.rstd = course::fuzz::fake_address<float>(6);
    a.dgamma = course::fuzz::fake_address<float>(7), a.dbeta = course::fuzz::fake_address<float>(8);
    a.workspace = course::fuzz::fake_address<float>(9);
    a.workspace_bytes = course::m04::layer_norm_backward_workspace_bytes(LayerNormBackwardStep::partial_sums, c.rows, c.C);
    EXPECT_NO_THROW(course::m04::validate_layer_norm_backward_args(a, LayerNormBackwardStep::partial_sums, "fuzz"))
        << c.str();
    cov.next_case();
    cov.count("C=1", c.C == 1);
    cov.count("prime C", course::fuzz::is_prime(c.C));
    cov.count("compile-time C", c.C == 384 || c.C == 768 || c.C == 1024);
    cov.count("C>1024", c.C > 1024);
    cov.count("bf16", c.dtype == DType::bf16);
    cov.count("padded rows", c.ldx > c.C);
    cov.count("misaligned start", c.offset > 0);
    cov.count("large mean", c.mean_offset != 0);
    cov.count("constant rows", c.constant_rows);
    cov.count("accumulate_dx", c.accumulate_dx);
    cov.count("accumulate_dparams", c.accumulate_dparams);
  }
  std::cout << cov.str() << "\n";
  EXPECT_TRUE(cov.all_hit());
}

}  // namespace
