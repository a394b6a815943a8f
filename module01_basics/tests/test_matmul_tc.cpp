// Tests of the tensor-core matmul ladder (bf16 inputs, fp32 accumulation), run against
// course::solution and course::exercise (built twice; `impl` names the one under test).
#include "course/bf16.hpp"
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "matmul_tc_check.hpp"
#include "matmul_tc_planted.hpp"
#include "module01/matmul_tc.hpp"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::HostTensor;
using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using course::m01::tc_leading_dim;
using course::testing::GpuTest;
using bf16 = __nv_bfloat16;
using course::m01::checks::tc::MatmulFn;
using course::m01::checks::tc::Passes;
using course::m01::checks::tc::Problem;
using course::m01::checks::tc::run_and_check;
using course::m01::checks::tc::Shape3;
using course::m01::checks::tc::TcCheck;

class MatmulTcTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<TcMatmulStep>> {
 protected:
  MatmulFn step_fn() const {
    const TcMatmulStep step = GetParam().step;
    return [step](const TcMatmulArgs& a) { impl::matmul_tc(step, a); };
  }
};

std::string step_name(const ::testing::TestParamInfo<course::StepInfo<TcMatmulStep>>& info) {
  return info.param.name;
}

/// The lesson's worked example, exact in bf16 and fp32:
/// [[1,2],[3,4]] * [[2,0],[1,3]] = [[1*2+2*1, 1*0+2*3], [3*2+4*1, 3*0+4*3]] = [[4,6],[10,12]].
TEST_P(MatmulTcTest, WorkedExample2x2) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows padded to lda = ldb = 8 (the alignment contract), padding NaN.
  std::vector<float> a(16, nan), b(16, nan);
  a[0] = 1, a[1] = 2, a[8] = 3, a[9] = 4;
  b[0] = 2, b[1] = 0, b[8] = 1, b[9] = 3;
  DeviceBuffer<bf16> da(course::to_bf16(a)), db(course::to_bf16(b));
  DeviceBuffer<float> dc(4);
  dc.poison();
  TcMatmulArgs args;
  args.a = da.data();
  args.b = db.data();
  args.c = dc.data();
  args.m = args.n = args.k = 2;
  args.lda = args.ldb = 8;
  args.ldc = 2;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::matmul_tc(GetParam().step, args));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(dc.download(), (std::vector<float>{4.f, 6.f, 10.f, 12.f}));
}

/// Tile-aligned, awkward (1, primes, tile +- 1) and large shapes; padded leading
/// dimensions where K or N is not a multiple of 8, plus explicitly padded ones.
TEST_P(MatmulTcTest, RandomShapes) {
  const std::vector<Shape3> shapes = {
      {1, 1, 1},
      {16, 8, 16},
      {127, 129, 65},               // lda 72, ldb 136: every edge of every tile is partial
      {127, 129, 65, 96, 160, 131}, // extra padding, odd ldc (scalar stores)
      {64, 256, 32},                // exactly one block tile of some steps
      {129, 257, 33},               // one tile + 1 in every dimension
      {200, 300, 1000},
      {1024, 1024, 1024},
      {2048, 512, 4096},
  };
  for (const auto& s : shapes) {
    const auto seed_s = seed() + static_cast<std::uint64_t>(s.m * 1000003 + s.n * 1009 + s.k + s.lda);
    TcCheck r;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(r = run_and_check(s, seed_s, step_fn()));
    SCOPED_TRACE(r.what);
    EXPECT_TRUE(Passes(r));
  }
}

/// Every element of C is written (C is NaN-poisoned before the call), also when C is
/// a sub-matrix of a wider buffer: the columns between n and ldc must stay untouched.
TEST_P(MatmulTcTest, WritesExactlyC) {
  Problem p({70, 50, 40, 0, 0, 53}, seed());
  std::vector<float> sentinel(p.dc.size(), -7.f);
  p.dc.upload(sentinel);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::matmul_tc(GetParam().step, p.args()));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto c = p.dc.download();
  for (std::int64_t r = 0; r < p.s.m; ++r) {
    for (std::int64_t j = p.s.n; j < p.s.ldc; ++j)
      ASSERT_EQ(c[static_cast<std::size_t>(r * p.s.ldc + j)], -7.f) << "wrote C(" << r << ", " << j << ") past n";
    for (std::int64_t j = 0; j < p.s.n; ++j)
      ASSERT_NE(c[static_cast<std::size_t>(r * p.s.ldc + j)], -7.f) << "never wrote C(" << r << ", " << j << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, MatmulTcTest, ::testing::ValuesIn(course::m01::kTcMatmulSteps), step_name);

// ---- argument validation: the same for every step, checked on the host before any launch
// (fake, never-dereferenced device addresses are fine: nothing is launched).

TcMatmulArgs valid_fake_args() {
  TcMatmulArgs a;
  a.a = reinterpret_cast<const bf16*>(std::uintptr_t{0x10000});
  a.b = reinterpret_cast<const bf16*>(std::uintptr_t{0x20000});
  a.c = reinterpret_cast<float*>(std::uintptr_t{0x30000});
  a.m = a.n = a.k = 16;
  a.lda = a.ldb = a.ldc = 16;
  return a;
}

void expect_rejected(const TcMatmulArgs& a, const std::string& needle) {
  for (const auto& info : course::m01::kTcMatmulSteps) {
    try {
      impl::matmul_tc(info.step, a);
      ADD_FAILURE() << info.name << ": expected InvalidArgument mentioning " << needle;
    } catch (const course::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << info.name << ": " << e.what();
    }
  }
}

TEST(MatmulTcArgsTest, MisalignedLeadingDimensionIsNamed) {
  auto a = valid_fake_args();
  a.k = 65;
  a.lda = 65;  // not a multiple of 8: 16-byte copies of its rows would be misaligned
  expect_rejected(a, "'lda' = 65");
  a = valid_fake_args();
  a.n = a.ldc = 129;
  a.ldb = 129;
  expect_rejected(a, "'ldb' = 129");
}

TEST(MatmulTcArgsTest, TooSmallLeadingDimensionIsNamed) {
  auto a = valid_fake_args();
  a.lda = 8;  // < k = 16
  expect_rejected(a, "'lda' = 8");
  a = valid_fake_args();
  a.ldc = 15;  // < n = 16
  expect_rejected(a, "'ldc' = 15");
}

TEST(MatmulTcArgsTest, EmptyOrNegativeSizesAreNamed) {
  auto a = valid_fake_args();
  a.m = 0;
  expect_rejected(a, "'m' = 0");
  a = valid_fake_args();
  a.k = -4;
  expect_rejected(a, "'k' = -4");
}

TEST(MatmulTcArgsTest, NullAndMisalignedPointersAreNamed) {
  auto a = valid_fake_args();
  a.b = nullptr;
  expect_rejected(a, "'b' = nullptr");
  a = valid_fake_args();
  a.a = reinterpret_cast<const bf16*>(std::uintptr_t{0x10008});  // 8-byte aligned only
  expect_rejected(a, "'a'");
}

TEST(MatmulTcArgsTest, OutputOverlappingAnInputIsRejected) {
  auto a = valid_fake_args();
  a.c = reinterpret_cast<float*>(std::uintptr_t{0x10100});  // inside A's 16 x 16 bf16
  expect_rejected(a, "must not overlap a");
}

// ---- planted bugs: the checking helper above must reject every one of them.

struct PlantedCase {
  const char* name;
  course::planted::TcMatmulFn fn;
  Shape3 shape;  // where the bug shows: K not a multiple of 32, M not a multiple of 64
};

class MatmulTcPlantedTest : public GpuTest {};

TEST_F(MatmulTcPlantedTest, CheckerRejectsEveryPlantedBug) {
  const PlantedCase cases[] = {
      {"dropped_k_tail", course::planted::dropped_k_tail_matmul_tc, {127, 129, 65}},
      {"b_not_transposed", course::planted::b_not_transposed_matmul_tc, {127, 129, 65}},
      {"dropped_m_edge", course::planted::dropped_m_edge_matmul_tc, {127, 129, 65}},
  };
  for (const auto& pc : cases) {
    SCOPED_TRACE(pc.name);
    const auto r = run_and_check(pc.shape, seed(), [&](const TcMatmulArgs& a) { pc.fn(TcMatmulStep::wmma, a); });
    EXPECT_FALSE(r.ok()) << pc.name << " was not caught";
  }
}

/// The planted kernel is correct apart from its bug: on a shape where none of the bugs
/// shows (M a multiple of 64, K of 32, only the .trans bug remains visible), the first
/// and third pass. This proves the rejections above come from the bugs, not from a
/// broken planted kernel.
TEST_F(MatmulTcPlantedTest, PlantedKernelIsOtherwiseCorrect) {
  const Shape3 s{128, 72, 64};
  const auto k_tail = run_and_check(s, seed(), [](const TcMatmulArgs& a) {
    course::planted::dropped_k_tail_matmul_tc(TcMatmulStep::wmma, a);
  });
  EXPECT_TRUE(Passes(k_tail));
  const auto m_edge = run_and_check(s, seed(), [](const TcMatmulArgs& a) {
    course::planted::dropped_m_edge_matmul_tc(TcMatmulStep::wmma, a);
  });
  EXPECT_TRUE(Passes(m_edge));
}

/// The Hopper descriptor bugs (a cut-down copy of the wgmma step's kernel; sm_90a only,
/// elsewhere the test skips). Both are wrong on every shape with K > 16: an awkward one and
/// a tile-aligned one with several slabs.
TEST_F(MatmulTcPlantedTest, CheckerRejectsPlantedWgmmaDescriptorBugs) {
  const PlantedCase cases[] = {
      {"wgmma_b_lbo_sbo_swapped", course::planted::wgmma_b_lbo_sbo_swapped_matmul_tc, {127, 129, 65}},
      {"wgmma_b_lbo_sbo_swapped", course::planted::wgmma_b_lbo_sbo_swapped_matmul_tc, {256, 256, 256}},
      {"wgmma_a_k_step_16_bytes", course::planted::wgmma_a_k_step_16_bytes_matmul_tc, {127, 129, 65}},
      {"wgmma_a_k_step_16_bytes", course::planted::wgmma_a_k_step_16_bytes_matmul_tc, {256, 256, 256}},
  };
  for (const auto& pc : cases) {
    SCOPED_TRACE(std::string(pc.name) + " on " + pc.shape.str());
    TcCheck r;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        r = run_and_check(pc.shape, seed(), [&](const TcMatmulArgs& a) { pc.fn(TcMatmulStep::wgmma, a); }));
    EXPECT_FALSE(r.ok()) << pc.name << " was not caught";
  }
}

/// The same wgmma kernel without a bug passes on the shapes above (and on a partial
/// K-slab with a partial M tile): the rejections come from the descriptors alone.
TEST_F(MatmulTcPlantedTest, PlantedWgmmaKernelIsOtherwiseCorrect) {
  for (const Shape3& s : {Shape3{127, 129, 65}, Shape3{256, 256, 256}, Shape3{130, 40, 8}}) {
    SCOPED_TRACE(s.str());
    TcCheck r;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(r = run_and_check(s, seed(), [](const TcMatmulArgs& a) {
      course::planted::wgmma_copy_matmul_tc(TcMatmulStep::wgmma, a);
    }));
    EXPECT_TRUE(Passes(r));
  }
  // Where neither bug shows (K <= 8, N <= 64), the bugged copies pass too.
  const Shape3 hidden{130, 40, 8};
  for (const auto fn : {course::planted::wgmma_b_lbo_sbo_swapped_matmul_tc,
                        course::planted::wgmma_a_k_step_16_bytes_matmul_tc}) {
    TcCheck r;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        r = run_and_check(hidden, seed(), [fn](const TcMatmulArgs& a) { fn(TcMatmulStep::wgmma, a); }));
    EXPECT_TRUE(Passes(r));
  }
}

}  // namespace
