// Tests of the fp32 matmul (SGEMM) ladder, run against course::solution and
// course::exercise (built twice; `impl` names the one under test), plus the planted
// bugs the checking helper must reject.
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "matmul_check.hpp"
#include "matmul_planted.hpp"
#include "module01/matmul.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::HostTensor;
using course::m01::MatmulArgs;
using course::m01::MatmulStep;
using course::testing::GpuTest;

using course::m01::checks::check_matmul;
using course::m01::checks::MatmulFn;
using course::m01::checks::Problem;
using course::m01::checks::random_matrix;

/// The implementation under test, as a MatmulFn.
void run_impl(MatmulStep step, const MatmulArgs& args) { impl::matmul(step, args); }

class MatmulTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<MatmulStep>> {
 protected:
  /// Check every problem; the seed differs per problem so no two share data.
  void check_all(const std::vector<Problem>& problems) {
    std::uint64_t s = seed();
    for (const Problem& p : problems) {
      SCOPED_TRACE(p.label() + "  seed " + std::to_string(s));
      COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_MATCHES(check_matmul(run_impl, GetParam().step, p, s)));
      s += 101;
    }
  }
};

std::string step_name(const ::testing::TestParamInfo<course::StepInfo<MatmulStep>>& info) {
  return info.param.name;
}

// [[1,2],[3,4]] * [[2,0],[1,3]] = [[1*2+2*1, 1*0+2*3], [3*2+4*1, 3*0+4*3]] = [[4,6],[10,12]]
TEST_P(MatmulTest, WorkedExample2x2) {
  DeviceBuffer<float> a(std::vector<float>{1, 2, 3, 4}), b(std::vector<float>{2, 0, 1, 3}), c(4);
  c.poison();
  const MatmulArgs args = course::m01::packed_matmul_args(a.data(), b.data(), c.data(), 2, 2, 2);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::matmul(GetParam().step, args));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = c.download();
  EXPECT_EQ(got, (std::vector<float>{4, 6, 10, 12}));
}

/// Degenerate shapes: a single element, a row vector, a column vector, a dot product.
TEST_P(MatmulTest, DegenerateShapes) {
  check_all({{1, 1, 1}, {1, 300, 70}, {300, 1, 70}, {1, 1, 1000}, {257, 3, 1}, {2, 2, 2}});
}

/// Sizes around every tile size of the ladder (32, 64, 128; BK = 8, 16, 32) and primes.
TEST_P(MatmulTest, AwkwardSizes) {
  check_all({{127, 131, 67},  {127, 127, 127}, {129, 129, 129}, {128, 128, 128}, {31, 33, 9},
             {63, 65, 15},    {65, 63, 17},    {33, 129, 31},   {129, 33, 33},   {97, 101, 103},
             {300, 200, 1000}, {200, 300, 7},  {5, 1000, 3},    {1000, 5, 40}});
}

/// Row strides larger than the rows: unaligned ones (scalar paths of the vectorized
/// steps) and multiples of 4 (their float4 paths, with padding to skip).
TEST_P(MatmulTest, PaddedLeadingDimensions) {
  check_all({{130, 70, 90, 93, 75, 71},    // odd strides: scalar paths
             {200, 136, 72, 80, 140, 144},  // strides % 4 == 0: float4 paths over padded rows
             {129, 131, 67, 68, 132, 136},  // float4 paths with partial vectors at the edges
             {64, 64, 64, 65, 65, 65}});
}

/// Base pointers 4 bytes past a 16-byte boundary: the vectorized steps must fall back.
TEST_P(MatmulTest, UnalignedPointers) {
  Problem p{130, 129, 70};
  p.offset = 1;
  Problem q{256, 256, 64};
  q.offset = 1;
  check_all({p, q});
}

/// alpha and beta: C = alpha*A*B + beta*C with C random.
TEST_P(MatmulTest, AlphaBeta) {
  check_all({{131, 127, 65, 0, 0, 0, 1.5f, -0.75f},
             {128, 128, 128, 0, 0, 0, -1.0f, 2.0f},
             {64, 96, 200, 0, 0, 0, 0.0f, 1.0f},     // alpha = 0: C = C
             {70, 50, 30, 73, 55, 57, 0.25f, 0.5f}}); // with padded strides
}

/// beta == 0 means C is not read: NaN in C (and Inf) must not reach the result.
TEST_P(MatmulTest, BetaZeroIgnoresNaNInC) {
  // check_matmul poisons C with NaN whenever beta == 0; add Inf here for good measure.
  const std::int64_t m = 67, n = 131, k = 45;
  const HostTensor<float> a = random_matrix(m, k, k, seed()), b = random_matrix(k, n, n, seed() + 1);
  std::vector<float> hc(static_cast<std::size_t>(m * n));
  for (std::size_t i = 0; i < hc.size(); ++i)
    hc[i] = i % 2 ? std::numeric_limits<float>::infinity() : std::nanf("");
  DeviceBuffer<float> da(a.storage()), db(b.storage()), dc(hc);
  MatmulArgs args = course::m01::packed_matmul_args(da.data(), db.data(), dc.data(), m, n, k);
  args.alpha = 2.0f;
  args.beta = 0.0f;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::matmul(GetParam().step, args));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = dc.download();
  std::int64_t non_finite = 0;
  for (float v : got) non_finite += std::isfinite(v) ? 0 : 1;
  EXPECT_EQ(non_finite, 0) << "beta == 0 must not read C (BLAS semantics)";
  check_all({{m, n, k, 0, 0, 0, 2.0f, 0.0f}});
}

TEST_P(MatmulTest, Large) { check_all({{1024, 2048, 512}}); }

INSTANTIATE_TEST_SUITE_P(Steps, MatmulTest, ::testing::ValuesIn(course::m01::kMatmulSteps), step_name);

// ---- planted bugs: the checking helper must reject each one.

class MatmulPlantedTest : public GpuTest {};

TEST_F(MatmulPlantedTest, DroppedEdgeTileIsRejected) {
  const auto r = check_matmul(course::planted::matmul_dropped_edge_tile, MatmulStep::smem_tiled, {127, 131, 67}, seed());
  EXPECT_FALSE(r.ok()) << "the edge tiles were never written, yet the check passed";
  // Even with M, N multiples of 32 the dropped K tail must show.
  const auto r2 = check_matmul(course::planted::matmul_dropped_edge_tile, MatmulStep::smem_tiled, {64, 64, 70}, seed());
  EXPECT_FALSE(r2.ok()) << "the last K % 32 terms were dropped, yet the check passed";
}

TEST_F(MatmulPlantedTest, MissingSyncIsRejected) {
  // A race: wrong on practically every run at this size, but try a few times so a
  // lucky schedule cannot make the test flaky.
  bool rejected = false;
  for (int attempt = 0; attempt < 3 && !rejected; ++attempt)
    rejected = !check_matmul(course::planted::matmul_missing_sync, MatmulStep::smem_tiled, {512, 512, 512},
                             seed() + attempt)
                    .ok();
  EXPECT_TRUE(rejected) << "a kernel reading shared memory before the barrier passed 3 times";
}

TEST_F(MatmulPlantedTest, TransposedAIsRejected) {
  const auto r = check_matmul(course::planted::matmul_transposed_a, MatmulStep::naive, {96, 96, 96}, seed());
  EXPECT_FALSE(r.ok()) << "A^T * B passed as A * B";
}

TEST_F(MatmulPlantedTest, ReadingCWhenBetaIsZeroIsRejected) {
  const auto r = check_matmul(course::planted::matmul_reads_c_when_beta_zero, MatmulStep::coalesced, {65, 70, 33}, seed());
  EXPECT_FALSE(r.ok()) << "NaN from an unread C leaked into the result, yet the check passed";
  EXPECT_GT(r.non_finite, 0);
}

// ---- argument validation: the same for every step, checked on the host before any
// launch (no GPU needed: the pointers are never dereferenced).

/// Expects impl::matmul(step, args) to throw InvalidArgument whose message contains `needle`.
void expect_invalid(const MatmulArgs& args, const std::string& needle) {
  for (const auto& info : course::m01::kMatmulSteps) {
    try {
      impl::matmul(info.step, args);
      ADD_FAILURE() << info.name << ": expected InvalidArgument mentioning " << needle;
    } catch (const course::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << info.name << ": " << e.what();
    }
  }
}

struct HostMatrices {
  std::vector<float> a = std::vector<float>(64 * 64), b = std::vector<float>(64 * 64), c = std::vector<float>(64 * 64);
  MatmulArgs args(std::int64_t m = 8, std::int64_t n = 8, std::int64_t k = 8) {
    return course::m01::packed_matmul_args(a.data(), b.data(), c.data(), m, n, k);
  }
};

TEST(MatmulArgsTest, NonPositiveSizesAreNamed) {
  HostMatrices h;
  expect_invalid(h.args(0, 8, 8), "'m' = 0");
  expect_invalid(h.args(8, -1, 8), "'n' = -1");
  MatmulArgs a = h.args(8, 8, 8);
  a.k = 0;
  expect_invalid(a, "'k' = 0");
}

TEST(MatmulArgsTest, NullPointersAreNamed) {
  HostMatrices h;
  MatmulArgs a = h.args();
  a.a = nullptr;
  expect_invalid(a, "'a' = nullptr");
  a = h.args();
  a.b = nullptr;
  expect_invalid(a, "'b' = nullptr");
  a = h.args();
  a.c = nullptr;
  expect_invalid(a, "'c' = nullptr");
}

TEST(MatmulArgsTest, SmallLeadingDimensionsAreNamed) {
  HostMatrices h;
  MatmulArgs a = h.args(8, 8, 8);
  a.lda = 7;
  expect_invalid(a, "'lda' = 7");
  a = h.args(8, 8, 8);
  a.ldb = 4;
  expect_invalid(a, "'ldb' = 4");
  a = h.args(8, 8, 8);
  a.ldc = 0;
  expect_invalid(a, "'ldc' = 0");
}

TEST(MatmulArgsTest, OutputOverlappingAnInputIsRejected) {
  HostMatrices h;
  MatmulArgs a = h.args(8, 8, 8);
  a.c = h.a.data() + 60;  // C's first row lies inside A (A spans 64 floats)
  expect_invalid(a, "must not overlap A");
  a = h.args(8, 8, 8);
  a.c = h.b.data();  // C == B
  expect_invalid(a, "must not overlap B");
}

TEST(MatmulArgsTest, MisalignedFloatPointerIsRejected) {
  HostMatrices h;
  MatmulArgs a = h.args();
  a.a = reinterpret_cast<const float*>(reinterpret_cast<const char*>(h.a.data()) + 2);
  expect_invalid(a, "'a'");
}

}  // namespace
