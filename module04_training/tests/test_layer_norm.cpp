// Tests of the LayerNorm ladders (forward: layer_norm_forward over kLayerNormSteps; backward:
// layer_norm_backward over kLayerNormBackwardSteps), run against course::solution and
// course::exercise (built twice; `impl` names the one under test), for fp32 and bf16.
#include "course/compare.hpp"
#include "course/testing.hpp"
#include "layer_norm_check.hpp"
#include "layer_norm_planted.hpp"
#include "module04/layer_norm.hpp"
#include "module04/layer_norm_backward.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using course::DType;
using course::m04::LayerNormArgs;
using course::m04::LayerNormBackwardArgs;
using course::m04::LayerNormBackwardStep;
using course::m04::LayerNormStep;
using course::m04::layer_norm_checks::Accepted;
using course::m04::layer_norm_checks::BackwardOutcome;
using course::m04::layer_norm_checks::Case;
using course::m04::layer_norm_checks::ForwardOutcome;
using course::m04::layer_norm_checks::run_backward;
using course::m04::layer_norm_checks::run_forward;
using course::testing::GpuTest;

/// Row widths around everything the steps dispatch on: 1, a prime, a warp (32), the
/// compile-time widths 384 / 768 / 1024 and their neighbours, the register limit (1024)
/// and past it (4099, 12288).
const std::vector<std::pair<std::int64_t, std::int64_t>> kShapes = {
    {1, 1},   {3, 7},    {5, 32},  {17, 33},  {9, 383}, {37, 384},  {20, 385},  {33, 768},
    {7, 767}, {10, 1024}, {6, 1025}, {4, 2048}, {3, 4099}, {2, 12288}, {300, 96}, {1000, 8}};

std::int64_t round_up8(std::int64_t v) { return (v + 7) / 8 * 8; }

/// The four layouts of a shape: contiguous; odd row padding (no 16-byte rows); 16-byte
/// friendly padding; the same with every matrix 1 element past a 16-byte boundary.
std::vector<Case> layouts(std::int64_t rows, std::int64_t C, DType dtype) {
  const std::int64_t ld8 = round_up8(C);
  std::vector<Case> cs(4);
  for (Case& c : cs) c.rows = rows, c.C = C, c.dtype = dtype;
  cs[1].ldx = C + 3, cs[1].ldy = C + 5, cs[1].lddy = C + 1, cs[1].lddx = C + 7;
  cs[2].ldx = ld8 + 8, cs[2].ldy = ld8 + 16, cs[2].lddy = ld8 + 24, cs[2].lddx = ld8 + 8;
  cs[3] = cs[2];
  cs[3].offset = 1;
  cs[1].row_offset = 3.0, cs[1].spread = 0.5;
  cs[2].row_offset = 0.2, cs[2].spread = 4.0;
  return cs;
}

std::string dtype_suffix(DType d) { return d == DType::bf16 ? "bf16" : "f32"; }

// =========================================================================== forward ====

using ForwardParam = std::tuple<course::StepInfo<LayerNormStep>, DType>;

class LayerNormTest : public GpuTest, public ::testing::WithParamInterface<ForwardParam> {
 protected:
  LayerNormStep step() const { return std::get<0>(GetParam()).step; }
  DType dtype() const { return std::get<1>(GetParam()); }
  ForwardOutcome run(Case c) {
    c.dtype = dtype();
    return run_forward([](LayerNormStep s, const LayerNormArgs& a) { impl::layer_norm_forward(s, a); }, step(), c,
                       seed() + static_cast<std::uint64_t>(c.rows * 7919 + c.C * 31 + c.s_x() * 3 + c.offset));
  }
};

std::string forward_name(const ::testing::TestParamInfo<ForwardParam>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + dtype_suffix(std::get<1>(info.param));
}

TEST_P(LayerNormTest, WorkedExample) {
  // x = [1, 2, 3, 4], gamma = 1, beta = 0, eps = 0: mean 2.5, rstd 1/sqrt(1.25).
  course::DeviceBuffer<float> x(std::vector<float>{1.f, 2.f, 3.f, 4.f}), y(4), g(std::vector<float>(4, 1.f)),
      b(std::vector<float>(4, 0.f)), mean(1), rstd(1);
  if (dtype() == DType::bf16) GTEST_SKIP() << "the fp32 instance covers the worked example";
  LayerNormArgs a = course::m04::contiguous_layer_norm_args(DType::f32, x.data(), y.data(), g.data(), b.data(),
                                                            mean.data(), rstd.data(), 1, 4);
  a.eps = 0.f;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::layer_norm_forward(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const double r = 1.0 / std::sqrt(1.25);
  EXPECT_MATCHES(course::compare(y.download(), std::vector<double>{-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r},
                                 course::Tolerance{1e-6, 1e-6}));
  EXPECT_MATCHES(course::compare(mean.download(), std::vector<double>{2.5}, course::Tolerance{1e-7, 1e-7}));
  EXPECT_MATCHES(course::compare(rstd.download(), std::vector<double>{r}, course::Tolerance{1e-7, 1e-6}));
}

TEST_P(LayerNormTest, RandomShapesAndStrides) {
  for (const auto& [rows, C] : kShapes)
    for (const Case& c : layouts(rows, C, dtype())) {
      SCOPED_TRACE(c.str());
      ForwardOutcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));  // y, and the saved mean and rstd
    }
}

TEST_P(LayerNormTest, LargeMeanRows) {
  // Mean 1e3, std ~1e-2: E[x^2] - mean^2 cancels 10 digits; the two-pass variance does not.
  for (std::int64_t C : {384, 768, 1000, 4099}) {
    Case c;
    c.rows = 19, c.C = C, c.mean_offset = 1000.0, c.spread = 0.017;
    SCOPED_TRACE(c.str());
    ForwardOutcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
}

TEST_P(LayerNormTest, ConstantRowsUseEps) {
  // var = 0: rstd = 1 / sqrt(eps), y = beta exactly up to rounding.
  for (std::int64_t C : {7, 768, 1025}) {
    Case c;
    c.rows = 5, c.C = C, c.constant_rows = true, c.eps = 1e-3f;
    SCOPED_TRACE(c.str());
    ForwardOutcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
}

TEST_P(LayerNormTest, GptShapes) {
  // 12289 rows: more than pipelined's one-wave grid has warps, so its warps walk several
  // rows each (the prefetched row and the last row of an uneven share).
  for (std::int64_t rows : {2048, 12289}) {
    for (std::int64_t C : {384, 768}) {
      Case c;
      c.rows = rows, c.C = C;
      SCOPED_TRACE(c.str());
      ForwardOutcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
  }
}

TEST_P(LayerNormTest, ZeroRowsIsANoOp) {
  LayerNormArgs a;
  a.dtype = dtype();
  a.rows = 0, a.C = 5, a.ldx = a.ldy = 5;  // every pointer null: nothing may be touched
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::layer_norm_forward(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
}

INSTANTIATE_TEST_SUITE_P(Steps, LayerNormTest,
                         ::testing::Combine(::testing::ValuesIn(course::m04::kLayerNormSteps),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         forward_name);

// ========================================================================== backward ====

using BackwardParam = std::tuple<course::StepInfo<LayerNormBackwardStep>, DType>;

class LayerNormBackwardTest : public GpuTest, public ::testing::WithParamInterface<BackwardParam> {
 protected:
  LayerNormBackwardStep step() const { return std::get<0>(GetParam()).step; }
  DType dtype() const { return std::get<1>(GetParam()); }
  BackwardOutcome run(Case c, std::uint64_t extra = 0) {
    c.dtype = dtype();
    return run_backward(
        [](LayerNormBackwardStep s, const LayerNormBackwardArgs& a) { impl::layer_norm_backward(s, a); }, step(), c,
        seed() + extra + static_cast<std::uint64_t>(c.rows * 7919 + c.C * 31 + c.s_x() * 3 + c.offset));
  }
};

std::string backward_name(const ::testing::TestParamInfo<BackwardParam>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + dtype_suffix(std::get<1>(info.param));
}

TEST_P(LayerNormBackwardTest, WorkedExample) {
  // The header's example: x = [0, 2], rstd 1, dy = [1, 3]: dx = 0, dgamma = [-1, 3], dbeta = [1, 3].
  Case c;  // through the helper: mean/rstd from the reference (eps 1e-5 moves rstd by 5e-6)
  c.rows = 1, c.C = 2;
  BackwardOutcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
  EXPECT_TRUE(Accepted(o));
}

TEST_P(LayerNormBackwardTest, RandomShapesAndStrides) {
  for (const auto& [rows, C] : kShapes)
    for (const Case& c : layouts(rows, C, dtype())) {
      SCOPED_TRACE(c.str());
      BackwardOutcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
}

TEST_P(LayerNormBackwardTest, AccumulateFlags) {
  // Outputs pre-filled with random values: dx += (the residual stream's gradient), dgamma,
  // dbeta += (gradient accumulation); each flag alone and both.
  for (const auto& [rows, C] : std::vector<std::pair<std::int64_t, std::int64_t>>{{33, 768}, {9, 383}, {5, 4099}})
    for (int flags = 1; flags <= 3; ++flags) {
      Case c;
      c.rows = rows, c.C = C, c.accumulate_dx = flags & 1, c.accumulate_dparams = flags & 2;
      SCOPED_TRACE(c.str());
      BackwardOutcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
}

TEST_P(LayerNormBackwardTest, LargeMeanRows) {
  for (std::int64_t C : {384, 768, 4099}) {
    Case c;
    c.rows = 19, c.C = C, c.mean_offset = 1000.0, c.spread = 0.017;
    SCOPED_TRACE(c.str());
    BackwardOutcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
}

TEST_P(LayerNormBackwardTest, GptShapes) {
  // More rows than partial_sums has blocks (256 x 8 = 2048): several rows per warp.
  for (std::int64_t C : {384, 768}) {
    Case c;
    c.rows = 4100, c.C = C;
    SCOPED_TRACE(c.str());
    BackwardOutcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
}

TEST_P(LayerNormBackwardTest, ZeroRowsZeroesTheParameterGradients) {
  course::DeviceBuffer<float> dg(std::vector<float>(5, 7.f)), db(std::vector<float>(5, 7.f));
  LayerNormBackwardArgs a;
  a.dtype = dtype();
  a.rows = 0, a.C = 5, a.ldx = a.lddy = a.lddx = 5;
  a.dgamma = dg.data(), a.dbeta = db.data();
  a.accumulate_dparams = true;  // a sum over no rows adds nothing
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::layer_norm_backward(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(dg.download(), std::vector<float>(5, 7.f));
  EXPECT_EQ(db.download(), std::vector<float>(5, 7.f));
  a.accumulate_dparams = false;  // = a sum over no rows: 0
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::layer_norm_backward(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(dg.download(), std::vector<float>(5, 0.f));
  EXPECT_EQ(db.download(), std::vector<float>(5, 0.f));
}

TEST_P(LayerNormBackwardTest, PartialSumsAreBitIdenticalAcrossRuns) {
  if (step() == LayerNormBackwardStep::atomic_params) GTEST_SKIP() << "atomic_params promises no determinism";
  for (const auto& [rows, C] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{4100, 768}, {12289, 384}, {3000, 383}, {40, 4099}}) {
    Case c;
    c.rows = rows, c.C = C;
    SCOPED_TRACE(c.str());
    BackwardOutcome first, second;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(first = run(c));
    second = run(c);  // same seed: same inputs
    EXPECT_TRUE(Accepted(first));
    ASSERT_EQ(first.dgamma_values.size(), second.dgamma_values.size());
    EXPECT_EQ(0, std::memcmp(first.dgamma_values.data(), second.dgamma_values.data(),
                             first.dgamma_values.size() * sizeof(float)))
        << "dgamma differs between two runs on the same inputs";
    EXPECT_EQ(0, std::memcmp(first.dbeta_values.data(), second.dbeta_values.data(),
                             first.dbeta_values.size() * sizeof(float)))
        << "dbeta differs between two runs on the same inputs";
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, LayerNormBackwardTest,
                         ::testing::Combine(::testing::ValuesIn(course::m04::kLayerNormBackwardSteps),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         backward_name);

// ================================================ planted bugs: the helpers reject each ====

class LayerNormPlantedTest : public GpuTest {
 protected:
  void expect_rejected(const course::m04::layer_norm_checks::LayerNormFn& bug, Case c) {
    SCOPED_TRACE(c.str());
    const ForwardOutcome o = run_forward(bug, LayerNormStep::thread_per_row, c, seed());
    EXPECT_FALSE(o.ok()) << "the planted bug passed the checks; they cannot catch it";
  }
  void expect_rejected(const course::m04::layer_norm_checks::LayerNormBackwardFn& bug, Case c) {
    SCOPED_TRACE(c.str());
    const BackwardOutcome o = run_backward(bug, LayerNormBackwardStep::atomic_params, c, seed());
    EXPECT_FALSE(o.ok()) << "the planted bug passed the checks; they cannot catch it";
  }
};

Case planted_case(std::int64_t rows, std::int64_t C, DType dtype) {
  Case c;
  c.rows = rows, c.C = C, c.dtype = dtype;
  return c;
}

TEST_F(LayerNormPlantedTest, VarianceWithoutMeanIsRejected) {
  expect_rejected(course::planted::layer_norm_variance_without_mean, planted_case(17, 768, DType::f32));
  expect_rejected(course::planted::layer_norm_variance_without_mean, planted_case(9, 383, DType::bf16));
}

TEST_F(LayerNormPlantedTest, RstdWithoutEpsIsRejected) {
  // Rows of std ~1e-2 around 0: var ~1e-4, so eps = 1e-5 moves rstd by ~5%.
  Case c = planted_case(17, 768, DType::f32);
  c.row_offset = 0.0, c.spread = 0.017;
  expect_rejected(course::planted::layer_norm_rstd_without_eps, c);
  c.dtype = DType::bf16;
  expect_rejected(course::planted::layer_norm_rstd_without_eps, c);
}

TEST_F(LayerNormPlantedTest, DgammaWithoutXhatIsRejected) {
  expect_rejected(course::planted::layer_norm_backward_dgamma_without_xhat, planted_case(33, 768, DType::f32));
  expect_rejected(course::planted::layer_norm_backward_dgamma_without_xhat, planted_case(9, 383, DType::bf16));
}

TEST_F(LayerNormPlantedTest, DxWithoutProjectionIsRejected) {
  expect_rejected(course::planted::layer_norm_backward_dx_without_projection, planted_case(33, 768, DType::f32));
  expect_rejected(course::planted::layer_norm_backward_dx_without_projection, planted_case(9, 383, DType::bf16));
}

// ======================================== argument validation: host-side, no GPU needed ====

/// Fake "device" storage: validation only looks at the addresses.
alignas(16) float g_fake[16384];

/// 16 x 64 fp32: x at 0, y at 1024, gamma 2048, beta 2112, mean 2176, rstd 2192.
LayerNormArgs good_forward() {
  return course::m04::contiguous_layer_norm_args(DType::f32, g_fake, g_fake + 1024, g_fake + 2048, g_fake + 2112,
                                                 g_fake + 2176, g_fake + 2192, 16, 64);
}

/// 16 x 64 fp32: x 0, dy 1024, dx 2048, gamma 3072, mean 3136, rstd 3152, dgamma 3168,
/// dbeta 3232, workspace 4096.
LayerNormBackwardArgs good_backward() {
  LayerNormBackwardArgs a = course::m04::contiguous_layer_norm_backward_args(
      DType::f32, g_fake, g_fake + 1024, g_fake + 2048, g_fake + 3072, g_fake + 3136, g_fake + 3152, g_fake + 3168,
      g_fake + 3232, 16, 64);
  a.workspace = g_fake + 4096;
  a.workspace_bytes = course::m04::layer_norm_backward_workspace_bytes(LayerNormBackwardStep::partial_sums, 16, 64);
  return a;
}

void call_forward(const LayerNormArgs& a) { impl::layer_norm_forward(LayerNormStep::vectorized, a); }
void call_backward(const LayerNormBackwardArgs& a) { impl::layer_norm_backward(LayerNormBackwardStep::partial_sums, a); }

TEST(LayerNormArgsTest, BadForwardArgumentsAreNamed) {
  course::testing::expect_each_rejected<LayerNormArgs>(good_forward, call_forward, {
      {[](LayerNormArgs& a) { a.rows = -1; }, "'rows' = -1"},
      {[](LayerNormArgs& a) { a.C = 0; }, "'C' = 0"},
      {[](LayerNormArgs& a) { a.dtype = DType::f16; }, "'dtype'"},
      {[](LayerNormArgs& a) { a.ldx = 63; }, "'ldx' = 63"},
      {[](LayerNormArgs& a) { a.ldy = 1; }, "'ldy' = 1"},
      {[](LayerNormArgs& a) { a.eps = -1.f; }, "'eps' = -1"},
      {[](LayerNormArgs& a) { a.x = nullptr; }, "'x' = nullptr"},
      {[](LayerNormArgs& a) { a.y = nullptr; }, "'y' = nullptr"},
      {[](LayerNormArgs& a) { a.gamma = nullptr; }, "'gamma' = nullptr"},
      {[](LayerNormArgs& a) { a.beta = nullptr; }, "'beta' = nullptr"},
      {[](LayerNormArgs& a) { a.mean = nullptr; }, "'mean' = nullptr"},
      {[](LayerNormArgs& a) { a.rstd = nullptr; }, "'rstd' = nullptr"},
      {[](LayerNormArgs& a) { a.x = reinterpret_cast<const char*>(a.x) + 2; }, "'x'"},
      {[](LayerNormArgs& a) { a.y = g_fake + 1000; }, "overlaps x"},
      {[](LayerNormArgs& a) { a.y = const_cast<void*>(a.x); }, "overlaps x"},  // in place: not supported
      {[](LayerNormArgs& a) { a.mean = g_fake + 2192; }, "overlaps rstd"},
      {[](LayerNormArgs& a) { a.rstd = g_fake + 2050; }, "overlaps gamma"},
  });
  course::testing::expect_invalid_argument(
      [] { impl::layer_norm_forward(static_cast<LayerNormStep>(9), good_forward()); }, "'step' = 9");
}

TEST(LayerNormArgsTest, BadBackwardArgumentsAreNamed) {
  course::testing::expect_each_rejected<LayerNormBackwardArgs>(good_backward, call_backward, {
      {[](LayerNormBackwardArgs& a) { a.rows = -3; }, "'rows' = -3"},
      {[](LayerNormBackwardArgs& a) { a.C = -1; }, "'C' = -1"},
      {[](LayerNormBackwardArgs& a) { a.lddy = 10; }, "'lddy' = 10"},
      {[](LayerNormBackwardArgs& a) { a.lddx = 0; }, "'lddx' = 0"},
      {[](LayerNormBackwardArgs& a) { a.dy = nullptr; }, "'dy' = nullptr"},
      {[](LayerNormBackwardArgs& a) { a.dgamma = nullptr; }, "'dgamma' = nullptr"},
      {[](LayerNormBackwardArgs& a) { a.rstd = nullptr; }, "'rstd' = nullptr"},
      {[](LayerNormBackwardArgs& a) { a.dx = const_cast<void*>(a.dy); }, "overlaps dy"},  // in place: not supported
      {[](LayerNormBackwardArgs& a) { a.dx = g_fake + 100; }, "overlaps x"},
      {[](LayerNormBackwardArgs& a) { a.dx = g_fake + 3100; }, "overlaps gamma"},
      {[](LayerNormBackwardArgs& a) { a.dbeta = g_fake + 3200; }, "overlaps dbeta"},  // dgamma's range
      {[](LayerNormBackwardArgs& a) { a.workspace_bytes = 4; }, "'workspace_bytes' = 4"},
      {[](LayerNormBackwardArgs& a) { a.workspace = nullptr; }, "'workspace' = nullptr"},
      {[](LayerNormBackwardArgs& a) { a.workspace = g_fake + 4097; }, "'workspace'"},  // not 16-byte aligned
      {[](LayerNormBackwardArgs& a) { a.workspace = g_fake + 2100; }, "overlaps dx"},
  });
}

TEST(LayerNormArgsTest, WorkspaceSize) {
  using course::m04::layer_norm_backward_workspace_bytes;
  EXPECT_EQ(layer_norm_backward_workspace_bytes(LayerNormBackwardStep::atomic_params, 16384, 768), 0u);
  EXPECT_EQ(layer_norm_backward_workspace_bytes(LayerNormBackwardStep::partial_sums, 0, 768), 0u);
  EXPECT_EQ(layer_norm_backward_workspace_bytes(LayerNormBackwardStep::partial_sums, 16, 64), 2u * 2 * 64 * 4);
  EXPECT_EQ(layer_norm_backward_workspace_bytes(LayerNormBackwardStep::partial_sums, 16384, 768),
            256u * 2 * 768 * 4);  // capped at kLayerNormMaxPartials blocks
  EXPECT_EQ(layer_norm_backward_workspace_bytes(LayerNormBackwardStep::pipelined, 16384, 768),
            layer_norm_backward_workspace_bytes(LayerNormBackwardStep::partial_sums, 16384, 768));
  // atomic_params needs none: a null workspace is fine.
  auto a = good_backward();
  a.workspace = nullptr, a.workspace_bytes = 0;
  EXPECT_NO_THROW(
      course::m04::validate_layer_norm_backward_args(a, LayerNormBackwardStep::atomic_params, "test"));
}

TEST(LayerNormArgsTest, StepTablesNameEveryStep) {
  EXPECT_STREQ(course::m04::step_name(LayerNormStep::thread_per_row), "thread_per_row");
  EXPECT_STREQ(course::m04::step_name(LayerNormStep::vectorized), "vectorized");
  EXPECT_STREQ(course::m04::step_name(LayerNormBackwardStep::atomic_params), "atomic_params");
  EXPECT_STREQ(course::m04::step_name(LayerNormBackwardStep::partial_sums), "partial_sums");
  EXPECT_STREQ(course::m04::step_name(LayerNormStep::pipelined), "pipelined");
  EXPECT_STREQ(course::m04::step_name(LayerNormBackwardStep::pipelined), "pipelined");
  EXPECT_STREQ(course::m04::step_name(static_cast<LayerNormStep>(7)), "?");
}

}  // namespace
