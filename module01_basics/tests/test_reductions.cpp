// Tests of the L2 norm and dot product ladders, run against course::solution and
// course::exercise (built twice; `impl` names the one under test).
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "module01/reductions.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::m01::ReduceArgs;
using course::m01::ReduceStep;
using course::testing::GpuTest;

/// Runs one reduction on the device and returns its result. The result slot is
/// poisoned (NaN) first, so a step that never writes it fails.
struct Runner {
  DeviceBuffer<float> x, y, result{1}, workspace;
  explicit Runner(const std::vector<float>& hx, const std::vector<float>& hy = {})
      : x(hx), y(hy), workspace(course::m01::reduce_workspace_bytes(static_cast<std::int64_t>(hx.size())) / sizeof(float)) {}

  ReduceArgs args(bool with_y) {
    ReduceArgs a;
    a.x = x.data();
    a.y = with_y ? y.data() : nullptr;
    a.n = static_cast<std::int64_t>(x.size());
    a.result = result.data();
    a.workspace = workspace.data();
    a.workspace_bytes = workspace.bytes();
    return a;
  }
  float get() {
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    return result.download()[0];
  }
};

class ReduceTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<ReduceStep>> {};

std::string step_name(const ::testing::TestParamInfo<course::StepInfo<ReduceStep>>& info) {
  return info.param.name;
}

TEST_P(ReduceTest, L2NormWorkedExample) {
  Runner r({3.f, 4.f});
  r.result.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::l2_norm(GetParam().step, r.args(false)));
  EXPECT_FLOAT_EQ(r.get(), 5.f);
}

TEST_P(ReduceTest, DotWorkedExample) {
  // [1,2,3] . [4,5,6] = 4 + 10 + 18 = 32
  Runner r({1.f, 2.f, 3.f}, {4.f, 5.f, 6.f});
  r.result.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::dot(GetParam().step, r.args(true)));
  EXPECT_FLOAT_EQ(r.get(), 32.f);
}

TEST_P(ReduceTest, EmptyVectorGivesZero) {
  Runner r(std::vector<float>{}, std::vector<float>{});
  r.result.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::l2_norm(GetParam().step, r.args(false)));
  EXPECT_EQ(r.get(), 0.f);
  r.result.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::dot(GetParam().step, r.args(true)));
  EXPECT_EQ(r.get(), 0.f);
}

/// Random data at awkward lengths: 1, around a block, around a float4 tail, primes, large.
TEST_P(ReduceTest, RandomAwkwardLengths) {
  for (std::int64_t n : {1, 2, 3, 5, 31, 255, 256, 257, 1021, 4099, 65537, 1000003, 1 << 24}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto hx = course::random_vector(n, seed() + n);
    const auto hy = course::random_vector(n, seed() + 7 * n);
    Runner r(hx, hy);
    const auto tol = course::tolerance_for(course::DType::f32, n);

    r.result.poison();
    COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::l2_norm(GetParam().step, r.args(false)));
    EXPECT_MATCHES(course::compare_scalar(r.get(), course::ref::l2_norm(hx.data(), n), tol));

    r.result.poison();
    COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::dot(GetParam().step, r.args(true)));
    EXPECT_MATCHES(course::compare_scalar(r.get(), course::ref::dot(hx.data(), hy.data(), n), tol));
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, ReduceTest, ::testing::ValuesIn(course::m01::kReduceSteps), step_name);

// ---- argument validation: the same for every step, checked on the host before any launch.

TEST(ReduceArgsTest, NullResultIsNamed) {
  ReduceArgs a;
  a.n = 0;
  try {
    impl::l2_norm(ReduceStep::atomic_naive, a);
    FAIL() << "expected InvalidArgument";
  } catch (const course::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'result'"), std::string::npos) << e.what();
  }
}

TEST(ReduceArgsTest, NegativeLengthIsNamed) {
  float dummy = 0;
  ReduceArgs a;
  a.n = -3;
  a.result = &dummy;
  try {
    impl::dot(ReduceStep::atomic_naive, a);
    FAIL() << "expected InvalidArgument";
  } catch (const course::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'n' = -3"), std::string::npos) << e.what();
  }
}

TEST(ReduceArgsTest, NullInputIsNamed) {
  float dummy[4] = {};
  ReduceArgs a;
  a.n = 10;
  a.result = dummy;
  a.workspace = dummy;
  a.workspace_bytes = course::m01::reduce_workspace_bytes(10);
  EXPECT_THROW(impl::l2_norm(ReduceStep::atomic_naive, a), course::InvalidArgument);
}

}  // namespace
