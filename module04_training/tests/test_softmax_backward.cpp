// Tests of the softmax backward ladder, run against course::solution and course::exercise
// (built twice; `impl` names the one under test), for every step and both dims.
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module04/softmax_backward.hpp"
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

/// Anything with the op's signature: impl::softmax_backward or a planted bug.
using SoftmaxBackwardFn = std::function<void(SoftmaxBackwardStep, const SoftmaxBackwardArgs&)>;

/// softmax([1, 2, 3]) (the header's worked example).
const std::vector<float> kY123 = {0.09003057317038046f, 0.24472847105479764f, 0.6652409557748219f};

/// The padding between rows of y and dy holds this: a kernel that reads past `cols`
/// takes it into D and every dx of that slice moves.
constexpr float kPadSentinel = 1000.f;

/// One test input: y = softmax(random logits) along dim (a real forward output), dy random
/// (or constant), all rows x cols with their own row strides.
struct Case {
  std::int64_t rows = 1, cols = 1;
  int dim = 1;
  std::int64_t ldy = 0, lddy = 0, lddx = 0;  ///< 0: contiguous (= cols)
  double logit_range = 4.0;                  ///< logits uniform in [-range, range)
  bool in_place = false;                     ///< dx = dy (then lddx = lddy)
  std::int64_t offset = 0;                   ///< elements between each buffer's start and its matrix
  bool constant_dy = false;                  ///< dy = 0.75 everywhere: dx must be ~0

  std::int64_t stride_y() const { return ldy > 0 ? ldy : cols; }
  std::int64_t stride_dy() const { return lddy > 0 ? lddy : cols; }
  std::int64_t stride_dx() const { return in_place ? stride_dy() : (lddx > 0 ? lddx : cols); }
  std::string str() const {
    std::ostringstream os;
    os << rows << "x" << cols << " dim=" << dim << " ldy=" << stride_y() << " lddy=" << stride_dy()
       << " lddx=" << stride_dx() << " logits in [-" << logit_range << ", " << logit_range << ")"
       << (offset ? " offset=" + std::to_string(offset) : "") << (in_place ? " in place (dx = dy)" : "")
       << (constant_dy ? " constant dy" : "");
    return os.str();
  }
};

struct Outcome {
  CompareResult cmp;                  ///< against course::ref::softmax_backward; includes padding writes
  std::int64_t padding_writes = 0;
  double worst_slice_sum_ratio = 0;   ///< max over slices of |sum(dx)| / allowed; <= 1 passes
  bool ok() const { return cmp.ok() && padding_writes == 0 && worst_slice_sum_ratio <= 1.0; }
};

std::uint32_t bits_of(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

/// A rows x cols float matrix with row stride ld inside a buffer that starts `offset`
/// elements earlier; everything that is not an element (offset, padding) holds kPadSentinel.
std::vector<float> padded_storage(const std::vector<float>& values, std::int64_t rows, std::int64_t cols,
                                  std::int64_t ld, std::int64_t offset) {
  std::vector<float> s(static_cast<std::size_t>(offset + (rows - 1) * ld + cols), kPadSentinel);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(values.begin() + r * cols, cols, s.begin() + offset + r * ld);
  return s;
}

/// The checking helper every test (and the planted-bug test) uses: builds the input,
/// poisons dx (NaN, padding included), runs `fn`, and checks
///  - every element against the CPU reference (double) with the fp32 tolerance for a
///    reduction of the slice length (see the comment at `scale`);
///  - the row padding of dx (never written);
///  - that every slice of dx sums to ~0 (sum_i y_i (dy_i - D) = D (1 - sum_i y_i) = 0).
/// Throws course::NotImplemented through for exercise stubs.
Outcome run_case(const SoftmaxBackwardFn& fn, SoftmaxBackwardStep step, const Case& c, std::uint64_t seed) {
  const std::int64_t n = c.rows * c.cols;
  const std::int64_t ldy = c.stride_y(), lddy = c.stride_dy(), lddx = c.stride_dx();

  // y: a real softmax (double, then rounded to fp32) of fresh random logits.
  HostTensor<double> logits({c.rows, c.cols});
  {
    const auto v = course::random_vector(static_cast<std::size_t>(n), seed, static_cast<float>(-c.logit_range),
                                         static_cast<float>(c.logit_range));
    std::copy(v.begin(), v.end(), logits.storage().begin());
  }
  const HostTensor<double> y_exact = course::ref::softmax(logits, c.dim);  // contiguous
  std::vector<float> y_values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) y_values[i] = static_cast<float>(y_exact.storage()[i]);
  std::vector<float> dy_values = c.constant_dy ? std::vector<float>(static_cast<std::size_t>(n), 0.75f)
                                               : course::random_vector(static_cast<std::size_t>(n), seed ^ 0x5eedu,
                                                                       -1.f, 1.f);

  // Host views (row-major with the cases' strides) for the reference.
  HostTensor<float> y({c.rows, c.cols}, {ldy, 1}), dy({c.rows, c.cols}, {lddy, 1});
  y.storage() = padded_storage(y_values, c.rows, c.cols, ldy, 0);
  dy.storage() = padded_storage(dy_values, c.rows, c.cols, lddy, 0);

  DeviceBuffer<float> d_y(padded_storage(y_values, c.rows, c.cols, ldy, c.offset));
  DeviceBuffer<float> d_dy(padded_storage(dy_values, c.rows, c.cols, lddy, c.offset));
  DeviceBuffer<float> d_dx(c.in_place ? 0 : static_cast<std::size_t>(c.offset + (c.rows - 1) * lddx + c.cols));
  if (!c.in_place) d_dx.poison();
  const std::size_t ws_bytes = course::m04::softmax_backward_workspace_bytes(step, c.rows, c.cols, c.dim);
  DeviceBuffer<float> ws((ws_bytes + sizeof(float) - 1) / sizeof(float));
  ws.poison();

  SoftmaxBackwardArgs a;
  a.y = d_y.data() + c.offset;
  a.dy = d_dy.data() + c.offset;
  a.dx = (c.in_place ? d_dy.data() : d_dx.data()) + c.offset;
  a.rows = c.rows;
  a.cols = c.cols;
  a.ldy = ldy;
  a.lddy = lddy;
  a.lddx = lddx;
  a.dim = c.dim;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> dx_storage = c.in_place ? d_dy.download() : d_dx.download();
  dx_storage.erase(dx_storage.begin(), dx_storage.begin() + c.offset);
  HostTensor<float> dx({c.rows, c.cols}, {lddx, 1});
  dx.storage() = std::move(dx_storage);

  const HostTensor<double> ref = course::ref::softmax_backward(y.cast<double>(), dy.cast<double>(), c.dim);

  // Tolerance. dx_i = y_i (dy_i - D): the fp32 error of an element is ~2u relative from
  // its own two operations (covered by rtol * |ref|) plus y_i times the error of D, and
  // a sum's error is relative to the size of its terms: S = sum_j |y_j dy_j| of the slice.
  // So the absolute part scales with max_i y_i * S over the slices (scale below), and
  // tolerance_for gives rtol = 2u + 8 sqrt(slice length) u.
  const std::int64_t slices = c.dim == 1 ? c.rows : c.cols;
  const std::int64_t length = c.dim == 1 ? c.cols : c.rows;
  const auto at = [&](const HostTensor<float>& t, std::int64_t s, std::int64_t i) {
    return static_cast<double>(c.dim == 1 ? t.storage()[s * t.stride(0) + i] : t.storage()[i * t.stride(0) + s]);
  };
  std::vector<double> slice_terms(static_cast<std::size_t>(slices)), slice_dot(static_cast<std::size_t>(slices));
  double scale = 0.0;
  for (std::int64_t s = 0; s < slices; ++s) {
    double terms = 0.0, dot = 0.0, ymax = 0.0;
    for (std::int64_t i = 0; i < length; ++i) {
      const double yi = at(y, s, i), gi = at(dy, s, i);
      terms += std::fabs(yi * gi);
      dot += yi * gi;
      ymax = std::max(ymax, yi);
    }
    slice_terms[s] = terms;
    slice_dot[s] = dot;
    scale = std::max(scale, ymax * terms);
  }
  const course::Tolerance tol = course::tolerance_for(course::DType::f32, length, scale);

  Outcome out;
  out.cmp = course::compare(dx, ref, tol, {"i", "j"});

  // Padding (columns cols .. lddx - 1 of every row but the last) must be untouched.
  const std::uint32_t pad_bits = c.in_place ? bits_of(kPadSentinel) : 0xFFFFFFFFu;
  for (std::int64_t r = 0; r + 1 < c.rows; ++r)
    for (std::int64_t j = c.cols; j < lddx; ++j) {
      const float v = dx.storage()[static_cast<std::size_t>(r * lddx + j)];
      if (bits_of(v) == pad_bits) continue;
      ++out.padding_writes;
      ++out.cmp.mismatches;
      if (out.cmp.first.size() < 8) out.cmp.first.push_back({{r, j}, v, std::nan("")});  // j >= cols: padding
    }

  // Every slice of dx sums to ~0: the element bounds above summed over a slice give
  // |sum dx| <= rtol * (2 S + |D|) <= 3 rtol S (plus D times y's rounding, ~u).
  for (std::int64_t s = 0; s < slices; ++s) {
    double sum = 0;
    for (std::int64_t i = 0; i < length; ++i) sum += at(dx, s, i);
    const double allowed = 3.0 * tol.rtol * slice_terms[s] + 1e-7 * std::fabs(slice_dot[s]) + 1e-30;
    const double ratio = std::fabs(sum) / allowed;
    if (!(ratio <= out.worst_slice_sum_ratio)) out.worst_slice_sum_ratio = std::isnan(ratio) ? INFINITY : ratio;
  }
  return out;
}

::testing::AssertionResult Accepted(const Outcome& o) {
  if (o.ok()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << o.cmp.report();
  if (o.padding_writes) failure << "\n  " << o.padding_writes << " writes into the row padding (j >= cols)";
  failure << "\n  worst |sum(dx)| over slices = " << o.worst_slice_sum_ratio << " x the allowed (must be <= 1)";
  return failure;
}

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
  try {
    impl::softmax_backward(step, a);
    ADD_FAILURE() << "expected InvalidArgument mentioning " << needle;
  } catch (const course::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SoftmaxBackwardArgsTest, BadShapesAreNamed) {
  auto a = good_args();
  a.rows = -1;
  expect_named(a, "'rows' = -1");
  a = good_args();
  a.cols = -2;
  expect_named(a, "'cols' = -2");
  a = good_args();
  a.rows = std::int64_t{1} << 31;
  expect_named(a, "'rows' = 2147483648");
  a = good_args();
  a.dim = 2;
  expect_named(a, "'dim' = 2");
  a = good_args();
  a.ldy = a.cols - 1;
  expect_named(a, "'ldy' = 63");
  a = good_args();
  a.lddy = 0;
  expect_named(a, "'lddy' = 0");
  a = good_args();
  a.lddx = 10;
  expect_named(a, "'lddx' = 10");
  a = good_args();
  expect_named(a, "'step' = 17", static_cast<SoftmaxBackwardStep>(17));
}

TEST(SoftmaxBackwardArgsTest, BadPointersAreNamed) {
  auto a = good_args();
  a.y = nullptr;
  expect_named(a, "'y' = nullptr");
  a = good_args();
  a.dy = nullptr;
  expect_named(a, "'dy' = nullptr");
  a = good_args();
  a.dx = nullptr;
  expect_named(a, "'dx' = nullptr");
  a = good_args();
  a.dy = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.dy) + 2);
  expect_named(a, "'dy'");
  a = good_args();
  a.dx = reinterpret_cast<float*>(reinterpret_cast<char*>(a.dx) + 1);
  expect_named(a, "'dx'");
}

TEST(SoftmaxBackwardArgsTest, OverlapsAreNamed) {
  auto a = good_args();
  a.dx = const_cast<float*>(a.y);  // dx == y: not the allowed in-place case
  expect_named(a, "overlaps y");
  a = good_args();
  a.dx = g_fake + 100;  // inside y
  expect_named(a, "overlaps y");
  a = good_args();
  a.dx = g_fake + 2048 + 64;  // dy shifted by a row
  expect_named(a, "overlaps dy");
  a = good_args();
  a.dx = const_cast<float*>(a.dy);  // same start, different stride
  a.lddx = a.lddy + 4;
  expect_named(a, "overlaps dy");
  a = good_args();
  a.workspace = g_fake + 4096 + 10;  // inside dx
  expect_named(a, "overlaps dx", SoftmaxBackwardStep::two_pass);
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
