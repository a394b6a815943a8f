// Tests of the L2 norm and dot product ladders, run against course::solution and
// course::exercise (built twice; `impl` names the one under test), and against the
// planted bugs of tests/planted/reductions_planted.cu, which the same checks must reject.
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "module01/reductions.hpp"
#include "reductions_check.hpp"
#include "reductions_planted.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::m01::ReduceArgs;
using course::m01::ReduceStep;
using course::testing::GpuTest;

using course::m01::checks::Op;
using course::m01::checks::ReduceFn;
using course::m01::checks::Runner;
using course::m01::checks::to_string;

/// Lengths that catch indexing bugs: shorter than a float4 and with every tail
/// (n % 4 = 1, 2, 3), around a warp and a block, primes, around one iteration of the
/// vectorized step's block (256 threads x 4 floats x 4 loads = 4096), and lengths that
/// need many blocks and several grid-stride iterations.
std::vector<std::int64_t> awkward_lengths(ReduceStep step, Op op) {
  std::vector<std::int64_t> lengths = {1,   2,   3,    4,    5,    7,     31,     32, 33,
                                       255, 256, 257,  1021, 4095, 4096,  4099,   65537, 1000003};
  // atomic_naive adds every term into ONE fp32 accumulator. For the norm all terms
  // are positive: once the running sum's ulp exceeds a term, additions round away
  // (1% error at 2^24, 13% at 2^26). That is the lesson, not a bug, so its norm is
  // checked up to ~2^20 only. (The dot's random signs keep its sum small.)
  if (!(step == ReduceStep::atomic_naive && op == Op::l2_norm)) {
    lengths.push_back((std::int64_t{1} << 22) + 3);
    lengths.push_back(std::int64_t{1} << 24);
  }
  return lengths;
}

/// THE check, shared by the real tests and the planted-bug tests: runs `fn` on fresh
/// random data at each length with check_reduction (reductions_check.hpp). Fails with
/// every failing length listed. course::NotImplemented propagates: callers wrap it in
/// COURSE_SKIP_IF_NOT_IMPLEMENTED.
::testing::AssertionResult check_at_lengths(ReduceFn fn, Op op, ReduceStep step, std::uint64_t seed,
                                            const std::vector<std::int64_t>& lengths) {
  std::ostringstream failures;
  int failed = 0;
  for (const std::int64_t n : lengths) {
    const auto hx = course::random_vector(static_cast<std::size_t>(n), seed + static_cast<std::uint64_t>(n));
    const auto hy = op == Op::dot ? course::random_vector(static_cast<std::size_t>(n), seed + 7 * static_cast<std::uint64_t>(n) + 1)
                                  : std::vector<float>{};
    const auto result = course::m01::checks::check_reduction(fn, op, step, hx, hy);
    if (!result.ok()) {
      ++failed;
      failures << "\n  n = " << n << ": " << result.report();
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << to_string(op) << ": " << failed << " of " << lengths.size()
                                       << " lengths failed (seed " << seed << "):" << failures.str();
}

class ReduceTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<ReduceStep>> {};

std::string step_name(const ::testing::TestParamInfo<course::StepInfo<ReduceStep>>& info) {
  return info.param.name;
}

TEST_P(ReduceTest, L2NormWorkedExample) {
  Runner r({3.f, 4.f});
  r.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::l2_norm(GetParam().step, r.args(false)));
  EXPECT_FLOAT_EQ(r.get(), 5.f);
}

TEST_P(ReduceTest, DotWorkedExample) {
  // [1,2,3] . [4,5,6] = 4 + 10 + 18 = 32
  Runner r({1.f, 2.f, 3.f}, {4.f, 5.f, 6.f});
  r.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::dot(GetParam().step, r.args(true)));
  EXPECT_FLOAT_EQ(r.get(), 32.f);
}

TEST_P(ReduceTest, EmptyVectorGivesZero) {
  Runner r(std::vector<float>{}, std::vector<float>{});
  r.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::l2_norm(GetParam().step, r.args(false)));
  EXPECT_EQ(r.get(), 0.f);
  r.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::dot(GetParam().step, r.args(true)));
  EXPECT_EQ(r.get(), 0.f);
}

/// Random data at awkward lengths: 1, around a block, around a float4 tail, primes, large.
TEST_P(ReduceTest, RandomAwkwardLengths) {
  const ReduceStep step = GetParam().step;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_TRUE(check_at_lengths(&impl::l2_norm, Op::l2_norm, step, seed(), awkward_lengths(step, Op::l2_norm))));
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_TRUE(check_at_lengths(&impl::dot, Op::dot, step, seed() + 1, awkward_lengths(step, Op::dot))));
}

/// 2^26 elements (256 MiB per vector): 64-bit indexing, many grid-stride iterations.
TEST_P(ReduceTest, LargeLength) {
  const ReduceStep step = GetParam().step;
  const std::vector<std::int64_t> large = {std::int64_t{1} << 26};
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_at_lengths(&impl::dot, Op::dot, step, seed(), large)));
  if (step == ReduceStep::atomic_naive)
    GTEST_SKIP() << "l2_norm at 2^26 is not checked for atomic_naive: its single fp32 accumulator "
                    "stagnates (~13% error), see awkward_lengths()";
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_at_lengths(&impl::l2_norm, Op::l2_norm, step, seed() + 1, large)));
}

INSTANTIATE_TEST_SUITE_P(Steps, ReduceTest, ::testing::ValuesIn(course::m01::kReduceSteps), step_name);

// ---- determinism: the vectorized step sums its partials in a fixed order, no float atomics.

class ReduceDeterminismTest : public GpuTest {};

TEST_F(ReduceDeterminismTest, VectorizedIsBitIdenticalRunToRun) {
  for (const std::int64_t n : {std::int64_t{1000003}, (std::int64_t{1} << 22) + 3}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto hx = course::random_vector(static_cast<std::size_t>(n), seed() + static_cast<std::uint64_t>(n));
    const auto hy = course::random_vector(static_cast<std::size_t>(n), seed() + 3 * static_cast<std::uint64_t>(n));
    Runner r(hx, hy);
    for (const Op op : {Op::l2_norm, Op::dot}) {
      std::uint32_t bits[2] = {};
      for (std::uint32_t& b : bits) {
        r.poison();  // workspace too: the result must not depend on what it held
        COURSE_SKIP_IF_NOT_IMPLEMENTED(op == Op::dot ? impl::dot(ReduceStep::vectorized, r.args(true))
                                                     : impl::l2_norm(ReduceStep::vectorized, r.args(false)));
        const float v = r.get();
        ASSERT_TRUE(std::isfinite(v)) << to_string(op);
        std::memcpy(&b, &v, sizeof b);
      }
      EXPECT_EQ(bits[0], bits[1]) << to_string(op) << ": two runs on the same data differ in their bits";
    }
  }
}

// ---- planted bugs: the same check must reject each of them (proof that it can fail).

class PlantedReduceTest : public GpuTest, public ::testing::WithParamInterface<course::planted::PlantedReduction> {};

TEST_P(PlantedReduceTest, ChecksRejectIt) {
  const auto& bug = GetParam();
  const ReduceStep unused = ReduceStep::vectorized;  // planted bugs ignore the step
  EXPECT_FALSE(check_at_lengths(bug.l2_norm, Op::l2_norm, unused, seed(), awkward_lengths(unused, Op::l2_norm)))
      << "planted bug '" << bug.name << "' (l2_norm) passed the checks: they are too weak to catch it";
  EXPECT_FALSE(check_at_lengths(bug.dot, Op::dot, unused, seed() + 1, awkward_lengths(unused, Op::dot)))
      << "planted bug '" << bug.name << "' (dot) passed the checks: they are too weak to catch it";
}

INSTANTIATE_TEST_SUITE_P(Bugs, PlantedReduceTest, ::testing::ValuesIn(course::planted::kPlantedReductions),
                         [](const ::testing::TestParamInfo<course::planted::PlantedReduction>& info) {
                           return std::string(info.param.name);
                         });

// ---- argument validation: the same for every step, checked on the host before any
// launch (these tests need no GPU: the pointers are host pointers that are never read).

/// Calls `fn` for every step and expects InvalidArgument whose message contains `needle`.
template <class Fn>
void expect_rejected_by_every_step(Fn fn, const std::string& needle) {
  for (const auto& info : course::m01::kReduceSteps) {
    SCOPED_TRACE(info.name);
    course::testing::expect_invalid_argument([&] { fn(info.step); }, needle);
  }
}

/// Valid host-side arguments for n = 8 (x, y 16-byte aligned), to be broken one at a time.
struct HostArgs {
  alignas(16) float x[12] = {};
  alignas(16) float y[12] = {};
  float result = 0;
  float workspace[course::m01::kMaxReduceBlocks] = {};
  ReduceArgs args(bool with_y) {
    ReduceArgs a;
    a.x = x;
    a.y = with_y ? y : nullptr;
    a.n = 8;
    a.result = &result;
    a.workspace = workspace;
    a.workspace_bytes = sizeof workspace;
    return a;
  }
};

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

TEST(ReduceArgsTest, MisalignedInputIsNamed) {
  HostArgs h;
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(false);
    a.x = h.x + 1;  // 4-byte aligned only: float4 loads would fault
    impl::l2_norm(s, a);
  }, "'x'");
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(true);
    a.x = h.x + 1;
    impl::dot(s, a);
  }, "aligned to 16 bytes");
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(true);
    a.y = h.y + 2;
    impl::dot(s, a);
  }, "'y'");
}

TEST(ReduceArgsTest, DotWithoutYIsNamed) {
  HostArgs h;
  expect_rejected_by_every_step([&](ReduceStep s) { impl::dot(s, h.args(false)); }, "'y' = nullptr");
}

TEST(ReduceArgsTest, L2NormWithYIsNamed) {
  HostArgs h;
  expect_rejected_by_every_step([&](ReduceStep s) { impl::l2_norm(s, h.args(true)); }, "'y'");
}

TEST(ReduceArgsTest, WorkspaceTooSmallIsNamed) {
  HostArgs h;
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(false);
    a.workspace_bytes = course::m01::reduce_workspace_bytes(a.n) - sizeof(float);
    impl::l2_norm(s, a);
  }, "'workspace_bytes'");
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(true);
    a.workspace = nullptr;
    impl::dot(s, a);
  }, "'workspace'");
}

TEST(ReduceArgsTest, ResultInsideAnInputIsNamed) {
  // Every step writes *result while blocks still read x and y (the atomic steps zero it
  // first): a result that lies inside an input is a race, rejected by name.
  HostArgs h;
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(false);
    a.result = h.x + 3;
    impl::l2_norm(s, a);
  }, "'result'");
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(true);
    a.result = h.x + 7;  // the last element of x (n = 8)
    impl::dot(s, a);
  }, "lies inside x");
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(true);
    a.result = h.y;
    impl::dot(s, a);
  }, "lies inside y");
  // Just past the end of x is outside it.
  ReduceArgs a = h.args(false);
  a.result = h.x + 8;
  EXPECT_NO_THROW(course::m01::validate_reduce_args(a, "test", false));
}

TEST(ReduceArgsTest, WorkspaceOverlappingAnOperandIsNamed) {
  HostArgs h;
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(true);
    a.workspace = h.x;
    impl::dot(s, a);
  }, "'workspace'");
  expect_rejected_by_every_step([&](ReduceStep s) {
    ReduceArgs a = h.args(false);
    a.workspace = &h.result;
    impl::l2_norm(s, a);
  }, "overlaps result");
}

}  // namespace
