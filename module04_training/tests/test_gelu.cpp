// Tests of the GELU ladder (tanh approximation), run against course::solution and
// course::exercise (built twice; `impl` names the one under test), for every step and both
// dtypes: the lesson's worked values, awkward sizes and offsets, forward, backward and
// backward with accumulate, in place, large magnitudes, planted bugs, bad arguments.
#include "course/testing.hpp"
#include "gelu_check.hpp"
#include "gelu_planted.hpp"
#include "module04/gelu.hpp"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::m04::GeluArgs;
using course::m04::GeluBackwardArgs;
using course::m04::GeluDType;
using course::m04::GeluStep;
using course::m04::gelu_checks::Accepted;
using course::m04::gelu_checks::Case;
using course::m04::gelu_checks::Direction;
using course::m04::gelu_checks::Outcome;
using course::testing::GpuTest;

using Param = std::tuple<course::StepInfo<GeluStep>, GeluDType>;

class GeluTest : public GpuTest, public ::testing::WithParamInterface<Param> {
 protected:
  GeluStep step() const { return std::get<0>(GetParam()).step; }
  GeluDType dtype() const { return std::get<1>(GetParam()); }
  Outcome run(Case c) {
    c.dtype = dtype();
    return course::m04::gelu_checks::run_case([](GeluStep s, const GeluArgs& a) { impl::gelu_forward(s, a); },
                                              [](GeluStep s, const GeluBackwardArgs& a) { impl::gelu_backward(s, a); },
                                              step(), c, seed() + static_cast<std::uint64_t>(c.n * 31 + c.offset));
  }
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<0>(info.param).name) + (std::get<1>(info.param) == GeluDType::bf16 ? "_bf16" : "_f32");
}

TEST_P(GeluTest, WorkedValues) {
  // gelu(0) = 0, gelu(1) = 0.841192, gelu(-1) = -0.158808, gelu(2) = 1.954598, gelu(-3) = -0.003637;
  // gelu'(0) = 0.5, gelu'(1) = 1.082964, gelu'(-1) = -0.082964 (gelu'(x) + gelu'(-x) = 1),
  // gelu'(2) = 1.086099, gelu'(-3) = -0.011584.
  if (dtype() != GeluDType::f32) GTEST_SKIP() << "the worked values are checked in fp32";
  const std::vector<float> x = {0.f, 1.f, -1.f, 2.f, -3.f};
  DeviceBuffer<float> dx_in(x), y(5), g(std::vector<float>(5, 1.f)), dx(5);
  GeluArgs a;
  a.x = dx_in.data(), a.y = y.data(), a.n = 5;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::gelu_forward(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_MATCHES(course::compare(y.download(),
                                 std::vector<double>{0.0, 0.8411919906082768, -0.15880800939172324, 1.9545976940871754,
                                                     -0.0036373920817729943},
                                 {1e-6, 1e-5}));
  GeluBackwardArgs b;
  b.x = dx_in.data(), b.dy = g.data(), b.dx = dx.data(), b.n = 5;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::gelu_backward(step(), b));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto d = dx.download();
  EXPECT_NEAR(d[0], 0.5, 1e-6);
  EXPECT_NEAR(d[1], 1.0829640838457826, 1e-5);
  EXPECT_NEAR(d[1] + d[2], 1.0, 1e-6);
  EXPECT_NEAR(d[3], 1.0860992566236183, 1e-5);
  EXPECT_NEAR(d[4], -0.011584166630969516, 1e-6);
}

const std::vector<std::int64_t> kSizes = {1, 3, 4, 7, 8, 9, 31, 1023, 1024, 1025, 4097, 8192 + 5, 100003};

TEST_P(GeluTest, AwkwardSizesAndOffsets) {
  for (std::int64_t n : kSizes)
    for (Direction dir : {Direction::forward, Direction::backward, Direction::backward_accumulate})
      for (std::int64_t offset : {0, 1, 3}) {
        Case c;
        c.n = n, c.dir = dir, c.offset = offset;
        SCOPED_TRACE(c.str());
        Outcome o;
        COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
        EXPECT_TRUE(Accepted(o));
      }
}

TEST_P(GeluTest, InPlace) {
  for (Direction dir : {Direction::forward, Direction::backward, Direction::backward_accumulate})
    for (std::int64_t n : {std::int64_t{5}, std::int64_t{4096}, std::int64_t{70001}}) {
      Case c;
      c.n = n, c.dir = dir, c.in_place = true;
      SCOPED_TRACE(c.str());
      Outcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
}

TEST_P(GeluTest, LargeAndTinyMagnitudes) {
  // Saturation (tanh -> +-1, exp(-2u) -> inf or 0), the far negative tail (y -> 0 from below),
  // and |x| << 1 (y ~ x / 2).
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{{-20, 20}, {-1000, 1000}, {-12, -3}, {-1e-4, 1e-4}})
    for (Direction dir : {Direction::forward, Direction::backward}) {
      Case c;
      c.n = 20000, c.dir = dir, c.lo = lo, c.hi = hi;
      SCOPED_TRACE(c.str());
      Outcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
}

TEST_P(GeluTest, MlpActivationShape) {
  // One GPT MLP activation: 256 tokens x 1536.
  for (Direction dir : {Direction::forward, Direction::backward_accumulate}) {
    Case c;
    c.n = 256 * 1536, c.dir = dir;
    SCOPED_TRACE(c.str());
    Outcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
}

TEST_P(GeluTest, EmptyIsANoOp) {
  GeluArgs a;
  a.dtype = dtype();
  EXPECT_NO_THROW(impl::gelu_forward(step(), a));
  GeluBackwardArgs b;
  b.dtype = dtype();
  EXPECT_NO_THROW(impl::gelu_backward(step(), b));
}

INSTANTIATE_TEST_SUITE_P(Steps, GeluTest,
                         ::testing::Combine(::testing::ValuesIn(course::m04::kGeluSteps),
                                            ::testing::Values(GeluDType::f32, GeluDType::bf16)),
                         param_name);

// ---- planted bugs ---------------------------------------------------------------------

class GeluPlantedTest : public GpuTest {
 protected:
  void expect_rejected(const course::m04::gelu_checks::GeluForwardFn& f,
                       const course::m04::gelu_checks::GeluBackwardFn& b, Case c) {
    SCOPED_TRACE(c.str());
    const Outcome o = course::m04::gelu_checks::run_case(f, b, GeluStep::scalar, c, seed());
    EXPECT_FALSE(o.ok()) << "the planted bug passed the checks; they cannot catch it";
  }
};

const auto kNoForward = [](GeluStep, const GeluArgs&) {};
const auto kNoBackward = [](GeluStep, const GeluBackwardArgs&) {};

TEST_F(GeluPlantedTest, WrongConstantIsRejected) {
  Case c;
  c.n = 4097;
  expect_rejected(course::planted::gelu_forward_wrong_constant, kNoBackward, c);
  c.dir = Direction::backward;
  expect_rejected(kNoForward, course::planted::gelu_backward_wrong_constant, c);
}

TEST_F(GeluPlantedTest, MissingDerivativeTermIsRejected) {
  Case c;
  c.n = 4097, c.dir = Direction::backward;
  expect_rejected(kNoForward, course::planted::gelu_backward_missing_term, c);
  c.dtype = GeluDType::bf16;
  expect_rejected(kNoForward, course::planted::gelu_backward_missing_term, c);
}

TEST_F(GeluPlantedTest, IgnoredAccumulateIsRejected) {
  Case c;
  c.n = 1000, c.dir = Direction::backward_accumulate;
  expect_rejected(kNoForward, course::planted::gelu_backward_ignores_accumulate, c);
}

TEST_F(GeluPlantedTest, DroppedTailIsRejected) {
  Case c;
  c.n = 4099;
  expect_rejected(course::planted::gelu_forward_dropped_tail, kNoBackward, c);
}

// ---- argument validation (host-side, no GPU needed) ------------------------------------

alignas(16) float g_fake[4096];

GeluArgs good_forward() {
  GeluArgs a;
  a.x = g_fake, a.y = g_fake + 1024, a.n = 1000;
  return a;
}
GeluBackwardArgs good_backward() {
  GeluBackwardArgs a;
  a.x = g_fake, a.dy = g_fake + 1024, a.dx = g_fake + 2048, a.n = 1000;
  return a;
}

TEST(GeluArgsTest, ForwardBadArgumentsAreNamed) {
  course::testing::expect_each_rejected<GeluArgs>(
      good_forward, [](const GeluArgs& a) { impl::gelu_forward(GeluStep::vectorized, a); },
      {
          {[](GeluArgs& a) { a.n = -1; }, "'n' = -1"},
          {[](GeluArgs& a) { a.n = (std::int64_t{1} << 40) + 1; }, "'n' = 1099511627777"},
          {[](GeluArgs& a) { a.x = nullptr; }, "'x' = nullptr"},
          {[](GeluArgs& a) { a.y = nullptr; }, "'y' = nullptr"},
          {[](GeluArgs& a) { a.y = reinterpret_cast<char*>(g_fake + 1024) + 2; }, "'y'"},
          {[](GeluArgs& a) { a.y = g_fake + 500; }, "overlaps x"},
          {[](GeluArgs& a) { a.dtype = static_cast<GeluDType>(5); }, "'dtype' = 5"},
      });
  course::testing::expect_invalid_argument(
      [] { impl::gelu_forward(static_cast<GeluStep>(9), good_forward()); }, "'step' = 9");
  // bf16 needs only 2-byte alignment.
  GeluArgs a = good_forward();
  a.dtype = GeluDType::bf16;
  a.y = reinterpret_cast<char*>(g_fake + 1024) + 2;
  EXPECT_NO_THROW(course::m04::validate_gelu_args(a, GeluStep::vectorized, "test"));
  a.y = const_cast<void*>(a.x);  // in place
  EXPECT_NO_THROW(course::m04::validate_gelu_args(a, GeluStep::vectorized, "test"));
}

TEST(GeluArgsTest, BackwardBadArgumentsAreNamed) {
  course::testing::expect_each_rejected<GeluBackwardArgs>(
      good_backward, [](const GeluBackwardArgs& a) { impl::gelu_backward(GeluStep::scalar, a); },
      {
          {[](GeluBackwardArgs& a) { a.n = -7; }, "'n' = -7"},
          {[](GeluBackwardArgs& a) { a.x = nullptr; }, "'x' = nullptr"},
          {[](GeluBackwardArgs& a) { a.dy = nullptr; }, "'dy' = nullptr"},
          {[](GeluBackwardArgs& a) { a.dx = nullptr; }, "'dx' = nullptr"},
          {[](GeluBackwardArgs& a) { a.dx = const_cast<void*>(a.x); }, "overlaps x"},
          {[](GeluBackwardArgs& a) { a.dx = g_fake + 100; }, "overlaps x"},
          {[](GeluBackwardArgs& a) { a.dx = g_fake + 1024 + 3; }, "overlaps dy"},
          {[](GeluBackwardArgs& a) { a.dy = reinterpret_cast<char*>(g_fake + 1024) + 1; }, "'dy'"},
      });
  GeluBackwardArgs a = good_backward();
  a.dx = const_cast<void*>(a.dy);  // in place, with or without accumulate
  EXPECT_NO_THROW(course::m04::validate_gelu_backward_args(a, GeluStep::scalar, "test"));
  a.accumulate = true;
  EXPECT_NO_THROW(course::m04::validate_gelu_backward_args(a, GeluStep::vectorized, "test"));
}

TEST(GeluArgsTest, StepTableNamesEveryStep) {
  EXPECT_STREQ(course::m04::step_name(GeluStep::scalar), "scalar");
  EXPECT_STREQ(course::m04::step_name(GeluStep::vectorized), "vectorized");
  EXPECT_STREQ(course::m04::step_name(static_cast<GeluStep>(4)), "?");
}

}  // namespace
