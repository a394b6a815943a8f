// Tests of the softmax backward ladder, run against course::solution and course::exercise
// (built twice; `impl` names the one under test), for every step and both dims.
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module04/softmax_backward.hpp"
#include "softmax_backward_check.hpp"
#include "softmax_backward_planted.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using course::CompareResult;
using course::DeviceBuffer;
using course::HostTensor;
using course::m04::SoftmaxBackwardArgs;
using course::m04::SoftmaxBackwardStep;
using course::testing::GpuTest;
using course::m04::softmax_checks::Accepted;
using course::m04::softmax_checks::Case;
using course::m04::softmax_checks::Outcome;
using course::m04::softmax_checks::run_case;
using course::m04::softmax_checks::SoftmaxBackwardFn;

/// softmax([1, 2, 3]) (the header's worked example).
const std::vector<float> kY123 = {0.09003057317038046f, 0.24472847105479764f, 0.6652409557748219f};

/// Run a tiny hand-written input (contiguous) and return dx, row-major.
std::vector<float> run_small(SoftmaxBackwardStep step, const std::vector<float>& hy, const std::vector<float>& hdy,
                             std::int64_t rows, std::int64_t cols, int dim) {
  DeviceBuffer<float> d_y(hy), d_dy(hdy), d_dx(hy.size());
  d_dx.poison();
  const std::size_t ws_bytes = course::m04::softmax_backward_workspace_bytes(step, rows, cols, dim);
  DeviceBuffer<float> ws((ws_bytes + sizeof(float) - 1) / sizeof(float));
  SoftmaxBackwardArgs a =
      course::m04::contiguous_softmax_backward_args(d_y.data(), d_dy.data(), d_dx.data(), rows, cols, dim);
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  impl::softmax_backward(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  return d_dx.download();
}

using Param = std::tuple<course::StepInfo<SoftmaxBackwardStep>, int>;

class SoftmaxBackwardTest : public GpuTest, public ::testing::WithParamInterface<Param> {
 protected:
  SoftmaxBackwardStep step() const { return std::get<0>(GetParam()).step; }
  int dim() const { return std::get<1>(GetParam()); }
  /// A 1-D example as a slice along dim(): 1 x n for dim = 1, n x 1 for dim = 0.
  std::vector<float> run_vector(const std::vector<float>& y, const std::vector<float>& dy) {
    const auto n = static_cast<std::int64_t>(y.size());
    return dim() == 1 ? run_small(step(), y, dy, 1, n, 1) : run_small(step(), y, dy, n, 1, 0);
  }
  Outcome run(const Case& c) {
    return run_case([](SoftmaxBackwardStep s, const SoftmaxBackwardArgs& a) { impl::softmax_backward(s, a); },
                    step(), c,
                    seed() + static_cast<std::uint64_t>(c.rows * 7919 + c.cols * 31 + c.ldy * 3 + c.lddy * 5 +
                                                        c.lddx * 7 + c.offset));
  }
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<0>(info.param).name) + "_dim" + std::to_string(std::get<1>(info.param));
}

const auto kF32Tol = [](std::int64_t n) { return course::tolerance_for(course::DType::f32, n); };

// ---- the lesson's worked examples -------------------------------------------

TEST_P(SoftmaxBackwardTest, WorkedExample123) {
  // y = softmax([1, 2, 3]), dy = [1, 0, 0]: D = y_0, dx = [y_0 (1 - y_0), -y_1 y_0, -y_2 y_0].
  std::vector<float> dx;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(dx = run_vector(kY123, {1.f, 0.f, 0.f}));
  EXPECT_MATCHES(course::compare(dx, std::vector<double>{0.08192506906499324, -0.022033044520174298,
                                                         -0.059892024544818935},
                                 kF32Tol(3)));
  // dy = [0.5, -1, 2]: D = 1.1308.
  COURSE_SKIP_IF_NOT_IMPLEMENTED(dx = run_vector(kY123, {0.5f, -1.f, 2.f}));
  EXPECT_MATCHES(course::compare(dx, std::vector<double>{-0.05678847003696696, -0.5214597727496748,
                                                         0.5782482427866417},
                                 kF32Tol(3)));
}

TEST_P(SoftmaxBackwardTest, SingleElementGivesZero) {
  // A slice of length 1: y = 1, so D = dy and dx = 1 * (dy - dy) = 0 exactly.
  std::vector<float> dx;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(dx = run_vector({1.f}, {0.3125f}));
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_EQ(dx[0], 0.f);
}

// ---- random data, awkward shapes, strides --------------------------------------

/// The size classes the steps dispatch on: warp (32), float4 (4), register capacities
/// (1024 for a warp, 2048 .. 16384 for a block) and the streamed tail beyond 16384,
/// plus primes, a tall-narrow and a square matrix.
const std::vector<std::pair<std::int64_t, std::int64_t>> kShapes = {
    {1, 1},   {1, 7},    {1, 1000},  {7, 33},    {33, 7},     {3, 129},     {128, 1024}, {37, 1025},
    {9, 2049}, {3, 5000}, {2, 16384}, {3, 16385}, {2, 40001}, {4096, 4},   {1000, 1000}, {20000, 3}};

std::int64_t round_up4(std::int64_t v) { return (v + 3) / 4 * 4; }

TEST_P(SoftmaxBackwardTest, RandomShapesAndStrides) {
  for (const auto& [rows, cols] : kShapes) {
    // contiguous; odd padding (no float4 possible); float4-friendly padding with a
    // cols % 4 tail; the same padding with every matrix starting 4 bytes past a 16-byte
    // boundary (float4 impossible through the pointers). Each layout has its own logit range.
    const std::int64_t ld4 = round_up4(cols);
    Case cases[4];
    cases[0] = {rows, cols, dim(), 0, 0, 0, 4.0};
    cases[1] = {rows, cols, dim(), cols + 3, cols + 5, cols + 1, 10.0};
    cases[2] = {rows, cols, dim(), ld4 + 4, ld4 + 8, ld4 + 12, 2.0};
    cases[3] = {rows, cols, dim(), ld4 + 4, ld4 + 8, ld4 + 12, 6.0};
    cases[3].offset = 1;
    for (const Case& c : cases) {
      SCOPED_TRACE(c.str());
      Outcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
  }
}

TEST_P(SoftmaxBackwardTest, InPlaceDxEqualsDy) {
  // Attention's naive backward computes dS = P * (dP - D) over dP: dx == dy, same ld.
  for (const auto& [rows, cols] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{7, 33}, {33, 7}, {129, 255}, {37, 1025}, {3, 5000},
                                                          {3, 16385}, {2, 40001}}) {
    for (std::int64_t ld : {cols, round_up4(cols) + 4}) {
      Case c{rows, cols, dim(), ld + 4, ld, ld, 4.0, /*in_place=*/true};
      SCOPED_TRACE(c.str());
      Outcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
  }
}

TEST_P(SoftmaxBackwardTest, ConstantDyGivesZeroGradient) {
  // dy = c everywhere: D = c sum(y) = c, dx = y (c - c) = 0 up to rounding. Adding a
  // constant to every logit of a slice does not change its softmax.
  for (const auto& [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{{7, 33}, {37, 1025}, {3, 5000}}) {
    Case c{rows, cols, dim(), 0, 0, 0, 4.0};
    c.constant_dy = true;
    SCOPED_TRACE(c.str());
    Outcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
}

TEST_P(SoftmaxBackwardTest, LargeShape) {
  // The benchmark's row length at a smaller height, and attention's typical P.
  for (const Case& c : {Case{2048, 4096, dim(), 0, 0, 0, 8.0}, Case{4096, 1024, dim(), 0, 0, 0, 8.0}}) {
    SCOPED_TRACE(c.str());
    Outcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, SoftmaxBackwardTest,
                         ::testing::Combine(::testing::ValuesIn(course::m04::kSoftmaxBackwardSteps),
                                            ::testing::Values(1, 0)),
                         param_name);

// ---- planted bugs: the checking helper must reject each -------------------------

class SoftmaxBackwardPlantedTest : public GpuTest {
 protected:
  void expect_rejected(const SoftmaxBackwardFn& bug, const Case& c) {
    SCOPED_TRACE(c.str());
    const Outcome o = run_case(bug, SoftmaxBackwardStep::fused_vectorized, c, seed());
    EXPECT_FALSE(o.ok()) << "the planted bug passed the checks; they cannot catch it";
  }
};

TEST_F(SoftmaxBackwardPlantedTest, DroppedDTermIsRejected) {
  expect_rejected(course::planted::softmax_backward_dropped_d, {7, 33, 1, 0, 0, 0, 4.0});
  expect_rejected(course::planted::softmax_backward_dropped_d, {129, 255, 0, 0, 0, 0, 4.0});
}

TEST_F(SoftmaxBackwardPlantedTest, WrongDimIsRejected) {
  expect_rejected(course::planted::softmax_backward_wrong_dim, {7, 33, 1, 0, 0, 0, 4.0});
  expect_rejected(course::planted::softmax_backward_wrong_dim, {33, 7, 0, 0, 0, 0, 4.0});
}

TEST_F(SoftmaxBackwardPlantedTest, MissingYFactorIsRejected) {
  expect_rejected(course::planted::softmax_backward_missing_y_factor, {7, 33, 1, 0, 0, 0, 4.0});
  expect_rejected(course::planted::softmax_backward_missing_y_factor, {129, 255, 0, 0, 0, 0, 4.0});
}

// ---- argument validation: host-side, before any launch (no GPU needed) -----------

/// Fake "device" storage: validation only looks at the addresses.
alignas(16) float g_fake[8192];

/// 16 x 64 contiguous matrices: y at 0, dy at 2048, dx at 4096; a workspace at 6144.
SoftmaxBackwardArgs good_args() {
  SoftmaxBackwardArgs a = course::m04::contiguous_softmax_backward_args(g_fake, g_fake + 2048, g_fake + 4096, 16, 64, 1);
  a.workspace = g_fake + 6144;
  a.workspace_bytes = course::m04::softmax_backward_workspace_bytes(SoftmaxBackwardStep::two_pass, 16, 64, 1);
  return a;
}

void expect_named(const SoftmaxBackwardArgs& a, const std::string& needle,
                  SoftmaxBackwardStep step = SoftmaxBackwardStep::fused_vectorized) {
  course::testing::expect_invalid_argument([&] { impl::softmax_backward(step, a); }, needle);
}

/// The call the bad-argument tables make: the default step of expect_named.
void call_default_step(const SoftmaxBackwardArgs& a) {
  impl::softmax_backward(SoftmaxBackwardStep::fused_vectorized, a);
}

TEST(SoftmaxBackwardArgsTest, BadShapesAreNamed) {
  course::testing::expect_each_rejected<SoftmaxBackwardArgs>(good_args, call_default_step, {
      {[](SoftmaxBackwardArgs& a) { a.rows = -1; }, "'rows' = -1"},
      {[](SoftmaxBackwardArgs& a) { a.cols = -2; }, "'cols' = -2"},
      {[](SoftmaxBackwardArgs& a) { a.rows = std::int64_t{1} << 31; }, "'rows' = 2147483648"},
      {[](SoftmaxBackwardArgs& a) { a.dim = 2; }, "'dim' = 2"},
      {[](SoftmaxBackwardArgs& a) { a.ldy = a.cols - 1; }, "'ldy' = 63"},
      {[](SoftmaxBackwardArgs& a) { a.lddy = 0; }, "'lddy' = 0"},
      {[](SoftmaxBackwardArgs& a) { a.lddx = 10; }, "'lddx' = 10"},
  });
  expect_named(good_args(), "'step' = 17", static_cast<SoftmaxBackwardStep>(17));
}

TEST(SoftmaxBackwardArgsTest, BadPointersAreNamed) {
  course::testing::expect_each_rejected<SoftmaxBackwardArgs>(good_args, call_default_step, {
      {[](SoftmaxBackwardArgs& a) { a.y = nullptr; }, "'y' = nullptr"},
      {[](SoftmaxBackwardArgs& a) { a.dy = nullptr; }, "'dy' = nullptr"},
      {[](SoftmaxBackwardArgs& a) { a.dx = nullptr; }, "'dx' = nullptr"},
      {[](SoftmaxBackwardArgs& a) {
         a.dy = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.dy) + 2);
       },
       "'dy'"},
      {[](SoftmaxBackwardArgs& a) { a.dx = reinterpret_cast<float*>(reinterpret_cast<char*>(a.dx) + 1); }, "'dx'"},
  });
}

TEST(SoftmaxBackwardArgsTest, OverlapsAreNamed) {
  course::testing::expect_each_rejected<SoftmaxBackwardArgs>(good_args, call_default_step, {
      {[](SoftmaxBackwardArgs& a) { a.dx = const_cast<float*>(a.y); }, "overlaps y"},  // dx == y: not in place
      {[](SoftmaxBackwardArgs& a) { a.dx = g_fake + 100; }, "overlaps y"},  // inside y
      {[](SoftmaxBackwardArgs& a) { a.dx = g_fake + 2048 + 64; }, "overlaps dy"},  // dy shifted by a row
      {[](SoftmaxBackwardArgs& a) {
         a.dx = const_cast<float*>(a.dy);
         a.lddx = a.lddy + 4;
       },
       "overlaps dy"},  // same start, different stride
  });
  {
    auto a = good_args();
    a.workspace = g_fake + 4096 + 10;  // inside dx
    expect_named(a, "overlaps dx", SoftmaxBackwardStep::two_pass);
  }
}

TEST(SoftmaxBackwardArgsTest, InPlaceAndAliasedInputsAreAccepted) {
  // Validation only (host pointers must not reach a launch).
  auto a = good_args();
  a.dx = const_cast<float*>(a.dy);  // dx == dy, lddx == lddy
  for (const auto& s : course::m04::kSoftmaxBackwardSteps)
    EXPECT_NO_THROW(course::m04::validate_softmax_backward_args(a, s.step, "test")) << s.name;
  a = good_args();
  a.dy = a.y;  // both inputs the same matrix: read only, harmless
  EXPECT_NO_THROW(course::m04::validate_softmax_backward_args(a, SoftmaxBackwardStep::fused_vectorized, "test"));
}

TEST(SoftmaxBackwardArgsTest, TwoPassNeedsItsWorkspace) {
  auto a = good_args();
  a.workspace_bytes = 0;
  expect_named(a, "'workspace_bytes' = 0", SoftmaxBackwardStep::two_pass);
  a = good_args();
  EXPECT_EQ(a.workspace_bytes, 16u * sizeof(float));  // one D per row
  a.workspace = nullptr;
  expect_named(a, "'workspace' = nullptr", SoftmaxBackwardStep::two_pass);
  EXPECT_EQ(course::m04::softmax_backward_workspace_bytes(SoftmaxBackwardStep::two_pass, 16, 64, 0),
            64u * sizeof(float));  // one D per column
  EXPECT_EQ(course::m04::softmax_backward_workspace_bytes(SoftmaxBackwardStep::fused_vectorized, 16, 64, 1), 0u);
}

TEST(SoftmaxBackwardArgsTest, EmptyMatrixIsANoOp) {
  // Nothing to read or write: no pointer is needed and nothing is launched.
  for (const auto& s : course::m04::kSoftmaxBackwardSteps) {
    SoftmaxBackwardArgs a;
    a.rows = 0;
    a.cols = 5;
    a.ldy = a.lddy = a.lddx = 5;
    EXPECT_NO_THROW(impl::softmax_backward(s.step, a)) << s.name;
    a.rows = 3;
    a.cols = 0;
    a.ldy = a.lddy = a.lddx = 0;
    EXPECT_NO_THROW(impl::softmax_backward(s.step, a)) << s.name;
  }
}

TEST(SoftmaxBackwardArgsTest, StepTableNamesEveryStep) {
  EXPECT_STREQ(course::m04::step_name(SoftmaxBackwardStep::two_pass), "two_pass");
  EXPECT_STREQ(course::m04::step_name(SoftmaxBackwardStep::warp_per_row), "warp_per_row");
  EXPECT_STREQ(course::m04::step_name(SoftmaxBackwardStep::fused_vectorized), "fused_vectorized");
  EXPECT_STREQ(course::m04::step_name(static_cast<SoftmaxBackwardStep>(9)), "?");
}

}  // namespace
