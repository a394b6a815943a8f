// Tests of the softmax ladder, run against course::solution and course::exercise
// (built twice; `impl` names the one under test), for every step and both dims.
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module01/softmax.hpp"
#include "softmax_check.hpp"
#include "softmax_planted.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::CompareResult;
using course::DeviceBuffer;
using course::HostTensor;
using course::m01::SoftmaxArgs;
using course::m01::SoftmaxStep;
using course::testing::GpuTest;
using course::m01::checks::Accepted;
using course::m01::checks::Case;
using course::m01::checks::Outcome;
using course::m01::checks::run_case;
using course::m01::checks::SoftmaxFn;

/// softmax([1, 2, 3]) by hand: e^-2, e^-1, 1 over their sum.
const std::vector<double> kSoftmax123 = {0.09003057317038046, 0.24472847105479764, 0.6652409557748219};

/// Run a tiny hand-written input (contiguous) and return y, row-major.
std::vector<float> run_small(SoftmaxStep step, const std::vector<float>& hx, std::int64_t rows, std::int64_t cols,
                             int dim) {
  DeviceBuffer<float> dx(hx), dy(hx.size());
  dy.poison();
  const std::size_t ws_bytes = course::m01::softmax_workspace_bytes(step, rows, cols, dim);
  DeviceBuffer<float> ws((ws_bytes + sizeof(float) - 1) / sizeof(float));
  SoftmaxArgs a = course::m01::contiguous_softmax_args(dx.data(), dy.data(), rows, cols, dim);
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  impl::softmax(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  return dy.download();
}

using Param = std::tuple<course::StepInfo<SoftmaxStep>, int>;

class SoftmaxTest : public GpuTest, public ::testing::WithParamInterface<Param> {
 protected:
  SoftmaxStep step() const { return std::get<0>(GetParam()).step; }
  int dim() const { return std::get<1>(GetParam()); }
  /// A 1-D example as a slice along dim(): 1 x n for dim = 1, n x 1 for dim = 0.
  std::vector<float> run_vector(const std::vector<float>& v) {
    const auto n = static_cast<std::int64_t>(v.size());
    return dim() == 1 ? run_small(step(), v, 1, n, 1) : run_small(step(), v, n, 1, 0);
  }
  Outcome run(const Case& c) {
    return run_case([](SoftmaxStep s, const SoftmaxArgs& a) { impl::softmax(s, a); }, step(), c,
                    seed() + static_cast<std::uint64_t>(c.rows * 7919 + c.cols * 31 + c.ldx * 3 + c.ldy));
  }
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<0>(info.param).name) + "_dim" + std::to_string(std::get<1>(info.param));
}

const auto kF32Tol = [](std::int64_t n) { return course::tolerance_for(course::DType::f32, n); };

// ---- the lesson's worked examples -------------------------------------------

TEST_P(SoftmaxTest, WorkedExample123) {
  std::vector<float> y;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(y = run_vector({1.f, 2.f, 3.f}));
  EXPECT_MATCHES(course::compare(y, kSoftmax123, kF32Tol(3)));  // ~[0.0900, 0.2447, 0.6652]
}

TEST_P(SoftmaxTest, LargeValuesAreStable) {
  // exp(1000) overflows fp32; subtracting the max makes this softmax([-2, -1, 0]).
  std::vector<float> big, shifted;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(big = run_vector({1000.f, 1001.f, 1002.f}));
  COURSE_SKIP_IF_NOT_IMPLEMENTED(shifted = run_vector({-2.f, -1.f, 0.f}));
  for (float v : big) EXPECT_TRUE(std::isfinite(v)) << v;
  EXPECT_MATCHES(course::compare(big, shifted, kF32Tol(3)));
  EXPECT_MATCHES(course::compare(big, kSoftmax123, kF32Tol(3)));
}

TEST_P(SoftmaxTest, Matrix2x3AlongDim) {
  // x = [[1,2,3],[4,5,6]]. dim = 1: each row -> softmax([1,2,3]).
  // dim = 0: each column [a, a+3] -> [1/(1+e^3), e^3/(1+e^3)] = [0.0474, 0.9526].
  std::vector<float> y;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(y = run_small(step(), {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, 2, 3, dim()));
  const double lo = 1.0 / (1.0 + std::exp(3.0)), hi = 1.0 - lo;
  const std::vector<double> want =
      dim() == 1 ? std::vector<double>{kSoftmax123[0], kSoftmax123[1], kSoftmax123[2], kSoftmax123[0], kSoftmax123[1],
                                       kSoftmax123[2]}
                 : std::vector<double>{lo, lo, lo, hi, hi, hi};
  EXPECT_MATCHES(course::compare(y, want, kF32Tol(dim() == 1 ? 3 : 2)));
}

TEST_P(SoftmaxTest, MaskedEntriesGetZero) {
  // -inf is how attention masks a score: it must come out as exactly 0.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> y;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(y = run_vector({-inf, 0.f, -inf, 0.f, -inf}));
  EXPECT_MATCHES(course::compare(y, std::vector<double>{0, 0.5, 0, 0.5, 0}, kF32Tol(5)));
}

// ---- random data, awkward shapes, strides --------------------------------------

/// Every size class the steps dispatch on, around warp (32), float4 (4) and register
/// capacities (1024, 4096, ..., 32768), plus primes and a square.
const std::vector<std::pair<std::int64_t, std::int64_t>> kShapes = {
    {1, 1},  {1, 7},  {3, 33},   {129, 255}, {17, 500},  {1000, 1000}, {7, 1025},
    {2, 4097}, {3, 9000}, {2, 32768}, {5, 32769}};

std::int64_t round_up4(std::int64_t v) { return (v + 3) / 4 * 4; }

TEST_P(SoftmaxTest, RandomShapesAndStrides) {
  for (const auto& [rows, cols] : kShapes) {
    // contiguous; odd padding (no float4 possible); float4-friendly padding with a
    // cols % 4 tail. Each layout also gets its own value range (large ones included).
    const Case cases[] = {
        {rows, cols, dim(), 0, 0, -4.0, 4.0},
        {rows, cols, dim(), cols + 3, cols + 5, -30.0, 30.0},
        {rows, cols, dim(), round_up4(cols) + 4, round_up4(cols) + 8, 80.0, 120.0},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(c.str());
      Outcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
  }
}

TEST_P(SoftmaxTest, InPlace) {
  for (const auto& [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 33}, {129, 255}, {7, 1025}, {5, 32769}}) {
    for (std::int64_t ld : {cols, round_up4(cols) + 4}) {
      Case c{rows, cols, dim(), ld, ld, -4.0, 4.0, /*in_place=*/true};
      SCOPED_TRACE(c.str());
      Outcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
  }
}

TEST_P(SoftmaxTest, LargeShape) {
  const Case c{4096, 4096, dim(), 0, 0, -8.0, 8.0};
  SCOPED_TRACE(c.str());
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
  EXPECT_TRUE(Accepted(o));
}

INSTANTIATE_TEST_SUITE_P(Steps, SoftmaxTest,
                         ::testing::Combine(::testing::ValuesIn(course::m01::kSoftmaxSteps), ::testing::Values(1, 0)),
                         param_name);

// ---- dim = 0: tall columns around cluster_columns' cluster sizes ------------------

class SoftmaxColumnsTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<SoftmaxStep>> {
 protected:
  Outcome run(const Case& c) {
    return run_case([](SoftmaxStep s, const SoftmaxArgs& a) { impl::softmax(s, a); }, GetParam().step, c,
                    seed() + static_cast<std::uint64_t>(c.rows * 7919 + c.cols * 31 + c.ldx * 3 + c.ldy + c.offset));
  }
};

/// One dim = 0 layout for `rows` rows; cluster_columns takes the float4 path (16-byte
/// cp.async, float4 stores) when x and y are 16-byte aligned and ldx, ldy % 4 == 0.
Case column_layout(int which, std::int64_t rows) {
  switch (which) {
    case 0: return {rows, 70, 0, 0, 0, -4.0, 4.0};  // ldx = 70: scalar path; last strip 6 columns wide
    case 1: {  // float4 path, whole strips, padded rows, masked entries
      Case c{rows, 64, 0, 68, 72, -30.0, 30.0};
      c.masked = 0.3;
      return c;
    }
    case 2: return {rows, 13, 0, 16, 20, 80.0, 120.0};                       // one strip narrower than 32
    case 3: return {rows, 45, 0, 48, 48, -8.0, 8.0, /*in_place=*/true};      // in place, float4 path
    default: {  // ld % 4 == 0 but x and y 4 bytes past a 16-byte boundary: scalar path
      Case c{rows, 40, 0, 44, 44, -4.0, 4.0};
      c.offset = 1;
      return c;
    }
  }
}

TEST_P(SoftmaxColumnsTest, TallColumnsAroundClusterSizes) {
  // Rows at the edges of every cluster size C = 1, 2, 4, 8, 16 (up to 1024 rows per block),
  // around the 256 rows a block holds in registers, and the fallback beyond 16384. 2t - 1
  // and top - 1 make clusters of full 1024-row blocks whose last block is one row short.
  const std::int64_t t = course::m01::kClusterMaxBlockRows, top = course::m01::kClusterMaxRows;
  const std::int64_t all_rows[] = {1,         255,   256,   257,       t - 1,     t,     t + 1,   2 * t - 1, 2 * t,
                                   2 * t + 1, 4 * t, 4 * t + 1, 8 * t + 1, 12345, top - 1, top,   top + 1};
  int i = 0;
  for (const std::int64_t rows : all_rows) {
    for (const int which : {i % 5, (i + 2) % 5}) {
      const Case c = column_layout(which, rows);
      SCOPED_TRACE(c.str() + ", cluster of " + std::to_string(course::m01::cluster_columns_blocks(rows)) +
                   " blocks (0: fallback)");
      Outcome o;
      COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
      EXPECT_TRUE(Accepted(o));
    }
    ++i;
  }
}

TEST_P(SoftmaxColumnsTest, ManyStripsOfTallestColumns) {
  // 16-block clusters of 1024-row blocks (128 KiB each), more clusters than fit at once.
  const Case c{course::m01::kClusterMaxRows, 300, 0, 0, 0, -8.0, 8.0};
  SCOPED_TRACE(c.str());
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
  EXPECT_TRUE(Accepted(o));
}

INSTANTIATE_TEST_SUITE_P(Steps, SoftmaxColumnsTest, ::testing::ValuesIn(course::m01::kSoftmaxSteps),
                         [](const ::testing::TestParamInfo<course::StepInfo<SoftmaxStep>>& info) {
                           return std::string(info.param.name);
                         });

// ---- planted bugs: the checking helper must reject each -------------------------

class SoftmaxPlantedTest : public GpuTest {
 protected:
  void expect_rejected(const SoftmaxFn& bug, const Case& c) {
    SCOPED_TRACE(c.str());
    const Outcome o = run_case(bug, SoftmaxStep::block_per_row, c, seed());
    EXPECT_FALSE(o.ok()) << "the planted bug passed the checks; they cannot catch it";
  }
};

TEST_F(SoftmaxPlantedTest, NoMaxSubtractionIsRejected) {
  expect_rejected(course::planted::softmax_no_max_subtraction, {3, 33, 1, 0, 0, 80.0, 120.0});
}

TEST_F(SoftmaxPlantedTest, MaxReplacedFirstIsRejected) {
  expect_rejected(course::planted::softmax_max_replaced_first, {129, 255, 1, 0, 0, -4.0, 4.0});
}

TEST_F(SoftmaxPlantedTest, DroppedTailIsRejected) {
  expect_rejected(course::planted::softmax_dropped_tail, {3, 33, 1, 40, 44, -4.0, 4.0});
}

TEST_F(SoftmaxPlantedTest, WrongDimIsRejected) {
  expect_rejected(course::planted::softmax_wrong_dim, {3, 33, 0, 0, 0, -4.0, 4.0});
}

TEST_F(SoftmaxPlantedTest, ClusterWithoutExchangeIsRejected) {
  // 2000 rows: a cluster of 4 blocks per strip; each normalizes only its 500 rows.
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      expect_rejected(course::planted::softmax_cluster_no_exchange, {2000, 70, 0, 0, 0, -4.0, 4.0}));
}

// ---- argument validation: host-side, before any launch (no GPU needed) -----------

/// Fake "device" storage: validation only looks at the addresses.
alignas(16) float g_fake[4096];

SoftmaxArgs good_args() {
  SoftmaxArgs a = course::m01::contiguous_softmax_args(g_fake, g_fake + 2048, 16, 64, 1);
  return a;
}

void expect_named(const SoftmaxArgs& a, const std::string& needle, SoftmaxStep step = SoftmaxStep::block_per_row) {
  course::testing::expect_invalid_argument([&] { impl::softmax(step, a); }, needle);
}

/// The call the bad-argument tables make: the default step of expect_named.
void call_default_step(const SoftmaxArgs& a) { impl::softmax(SoftmaxStep::block_per_row, a); }

TEST(SoftmaxArgsTest, BadShapesAreNamed) {
  course::testing::expect_each_rejected<SoftmaxArgs>(good_args, call_default_step, {
      {[](SoftmaxArgs& a) { a.rows = -1; }, "'rows' = -1"},
      {[](SoftmaxArgs& a) { a.cols = -2; }, "'cols' = -2"},
      {[](SoftmaxArgs& a) { a.dim = 2; }, "'dim' = 2"},
      {[](SoftmaxArgs& a) { a.ldx = a.cols - 1; }, "'ldx' = 63"},
      {[](SoftmaxArgs& a) { a.ldy = 0; }, "'ldy' = 0"},
  });
  expect_named(good_args(), "'step' = 17", static_cast<SoftmaxStep>(17));
}

TEST(SoftmaxArgsTest, BadPointersAreNamed) {
  course::testing::expect_each_rejected<SoftmaxArgs>(good_args, call_default_step, {
      {[](SoftmaxArgs& a) { a.x = nullptr; }, "'x' = nullptr"},
      {[](SoftmaxArgs& a) { a.y = nullptr; }, "'y' = nullptr"},
      {[](SoftmaxArgs& a) { a.x = reinterpret_cast<const float*>(reinterpret_cast<const char*>(g_fake) + 2); },
       "'x'"},
      {[](SoftmaxArgs& a) { a.y = g_fake + 100; }, "overlaps x"},  // inside x's range
      {[](SoftmaxArgs& a) {
         a.y = const_cast<float*>(a.x);
         a.ldy = a.ldx + 4;
       },
       "overlaps x"},  // same start, different stride: not the in-place case
  });
}

TEST(SoftmaxArgsTest, NaiveNeedsItsWorkspace) {
  auto a = good_args();
  expect_named(a, "'workspace_bytes' = 0", SoftmaxStep::naive_three_pass);
  a.workspace_bytes = course::m01::softmax_workspace_bytes(SoftmaxStep::naive_three_pass, a.rows, a.cols, a.dim);
  EXPECT_EQ(a.workspace_bytes, 2u * 16u * sizeof(float));  // max and sum per row
  expect_named(a, "'workspace' = nullptr", SoftmaxStep::naive_three_pass);
}

TEST(SoftmaxArgsTest, NaiveWorkspaceOverlappingXOrYIsNamed) {
  // naive_three_pass writes each slice's max and sum into the workspace between reading x
  // and writing y: a workspace inside either would corrupt the result.
  auto a = good_args();  // x = g_fake[0, 1024), y = g_fake[2048, 3072)
  a.workspace_bytes = course::m01::softmax_workspace_bytes(SoftmaxStep::naive_three_pass, a.rows, a.cols, a.dim);
  a.workspace = g_fake + 1000;  // its last 24 floats lie inside x
  expect_named(a, "overlaps x", SoftmaxStep::naive_three_pass);
  a.workspace = g_fake + 3072 - 1;  // its first float is y's last
  expect_named(a, "overlaps y", SoftmaxStep::naive_three_pass);
  a.workspace = g_fake + 1024;  // right after x: disjoint from both
  EXPECT_NO_THROW(course::m01::validate_softmax_args(a, SoftmaxStep::naive_three_pass, "test"));
  // Steps without a workspace ignore the field.
  a.workspace = g_fake;
  EXPECT_NO_THROW(course::m01::validate_softmax_args(a, SoftmaxStep::block_per_row, "test"));
}

TEST(SoftmaxArgsTest, ClusterSizeFollowsRows) {
  using course::m01::cluster_columns_blocks;
  const std::pair<std::int64_t, int> expected[] = {{1, 1},     {1024, 1},  {1025, 2},  {2048, 2},   {2049, 4},
                                                   {4096, 4},  {4097, 8},  {8192, 8},  {8193, 16},  {16384, 16},
                                                   {16385, 0}, {1 << 20, 0}};
  for (const auto& [rows, blocks] : expected) EXPECT_EQ(cluster_columns_blocks(rows), blocks) << rows << " rows";
  // Every block's rows fit kClusterMaxBlockRows, and C is the smallest power of two
  // that achieves it.
  for (std::int64_t rows = 1; rows <= course::m01::kClusterMaxRows; rows += 97) {
    const int c = cluster_columns_blocks(rows);
    ASSERT_GT(c, 0) << rows;
    EXPECT_LE((rows + c - 1) / c, course::m01::kClusterMaxBlockRows) << rows;
    if (c > 1) {
      EXPECT_GT((rows + c / 2 - 1) / (c / 2), course::m01::kClusterMaxBlockRows) << rows;
    }
  }
}

TEST(SoftmaxArgsTest, EmptyMatrixIsANoOp) {
  // Nothing to read or write: no pointer is needed and nothing is launched.
  for (const auto& s : course::m01::kSoftmaxSteps) {
    SoftmaxArgs a;
    a.rows = 0;
    a.cols = 5;
    a.ldx = a.ldy = 5;
    EXPECT_NO_THROW(impl::softmax(s.step, a)) << s.name;
    a.rows = 3;
    a.cols = 0;
    a.ldx = a.ldy = 0;
    EXPECT_NO_THROW(impl::softmax(s.step, a)) << s.name;
  }
}

}  // namespace
