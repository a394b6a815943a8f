// CPU tests of the harness the GPU tests rely on: compare() must reject NaN, Inf,
// unwritten (poisoned) and perturbed elements and say where; tolerances; tensor
// layouts and bounds; and the messages of the course's exceptions.

#include "course/compare.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "course/validate.hpp"
#include "cpu_test_util.hpp"

#include <cmath>
#include <limits>
#include <ostream>
#include <string>

namespace {

using course::AttentionLayout;
using course::DType;
using course::HostTensor;
using course::Tolerance;
using course::testing::test_seed;

const std::vector<std::string> kNames{"b", "h", "i", "j"};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

class Compare : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = HostTensor<double>({2, 2, 3, 4});
    course::fill_random(ref_, test_seed());
    got_ = ref_.cast<float>();
  }
  HostTensor<double> ref_;
  HostTensor<float> got_;
  Tolerance tol_ = course::tolerance_for(DType::f32, 16);
};

TEST_F(Compare, AcceptsAnExactCopy) {
  const auto r = course::compare(got_, ref_, tol_, kNames);
  EXPECT_TRUE(r.ok()) << r.report();
  EXPECT_EQ(r.checked, 48);
  EXPECT_EQ(r.mismatches, 0);
}

TEST_F(Compare, AcceptsValuesWithinTolerance) {
  got_.for_each_index([&](const std::vector<std::int64_t>& i) {
    const double r = ref_.at(i);
    const double slack = 0.5 * (tol_.atol + tol_.rtol * std::fabs(r));
    got_.at(i) = static_cast<float>(r + ((i[3] % 2) ? slack : -slack));
  });
  const auto r = course::compare(got_, ref_, tol_, kNames);
  EXPECT_TRUE(r.ok()) << r.report();
  EXPECT_GT(r.max_abs_error, 0.0);
}

TEST_F(Compare, RejectsNaNAndSaysWhere) {
  got_({1, 0, 2, 3}) = static_cast<float>(kNaN);
  const auto r = course::compare(got_, ref_, tol_, kNames);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.non_finite, 1);
  ASSERT_EQ(r.first.size(), 1u);
  EXPECT_EQ(r.first[0].index, (std::vector<std::int64_t>{1, 0, 2, 3}));
  EXPECT_TRUE(contains(r.report(), "(b=1, h=0, i=2, j=3)")) << r.report();
  EXPECT_TRUE(contains(r.report(), "nan")) << r.report();
}

TEST_F(Compare, RejectsInf) {
  for (double bad : {kInf, -kInf}) {
    auto got = got_;
    got({0, 1, 1, 0}) = static_cast<float>(bad);
    const auto r = course::compare(got, ref_, {1e9, 1e9}, kNames);  // even a huge tolerance
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.non_finite, 1);
    EXPECT_TRUE(contains(r.report(), "(b=0, h=1, i=1, j=0)")) << r.report();
  }
}

TEST_F(Compare, RejectsAnUnwrittenPoisonedElement) {
  // What a GPU test does: poison the output with NaN, run the kernel, download.
  // A "kernel" that forgets the last element of one row leaves NaN behind.
  HostTensor<float> out(ref_.shape());
  for (float& x : out.storage()) x = std::numeric_limits<float>::quiet_NaN();
  out.for_each_index([&](const std::vector<std::int64_t>& i) {
    if (!(i[0] == 1 && i[1] == 1 && i[2] == 2 && i[3] == 3)) out.at(i) = static_cast<float>(ref_.at(i));
  });
  const auto r = course::compare(out, ref_, tol_, kNames);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_TRUE(contains(r.report(), "(b=1, h=1, i=2, j=3)")) << r.report();
}

TEST_F(Compare, RejectsASinglePerturbedElement) {
  const double r0 = ref_({1, 0, 2, 3});
  got_({1, 0, 2, 3}) = static_cast<float>(r0 + 4.0 * (tol_.atol + tol_.rtol * std::fabs(r0)) + 1e-6);
  const auto r = course::compare(got_, ref_, tol_, kNames);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_EQ(r.non_finite, 0);
  EXPECT_TRUE(contains(r.report(), "(b=1, h=0, i=2, j=3)")) << r.report();
  EXPECT_TRUE(contains(r.report(), "1 of 48")) << r.report();
  // The gtest assertion the GPU tests use fails with the same report.
  const auto assertion = course::testing::Matches(r);
  EXPECT_FALSE(static_cast<bool>(assertion));
  EXPECT_TRUE(contains(assertion.message(), "(b=1, h=0, i=2, j=3)"));
}

TEST_F(Compare, ReportsOnlyTheFirstMismatches) {
  for (float& x : got_.storage()) x += 1.0f;
  const auto r = course::compare(got_, ref_, tol_, kNames, 3);
  EXPECT_EQ(r.mismatches, 48);
  EXPECT_EQ(r.first.size(), 3u);
  EXPECT_TRUE(contains(r.report(), "(b=0, h=0, i=0, j=0)"));
  EXPECT_TRUE(contains(r.report(), "..."));
}

TEST(CompareMisc, InfiniteReferenceMustBeMatchedExactly) {
  // A fully masked row's logsumexp is -inf: only -inf passes.
  HostTensor<double> ref({3});
  ref({0}) = -kInf;
  ref({1}) = 0.5;
  ref({2}) = -kInf;
  HostTensor<float> got({3});
  got({0}) = -std::numeric_limits<float>::infinity();
  got({1}) = 0.5f;
  got({2}) = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(course::compare(got, ref, {1e-6, 1e-6}).ok());
  got({2}) = -1e30f;
  EXPECT_FALSE(course::compare(got, ref, {1e-6, 1e-6}).ok());
  got({2}) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(course::compare(got, ref, {1e-6, 1e-6}).ok());
}

TEST(CompareMisc, EmptyComparisonIsNotASuccess) {
  const HostTensor<float> got({0, 3});
  const HostTensor<double> ref({0, 3});
  EXPECT_FALSE(course::compare(got, ref, {1, 1}).ok());
}

TEST(CompareMisc, MatchesByLogicalIndexAcrossLayouts) {
  auto bhnd = HostTensor<double>::attention(2, 3, 4, 5, AttentionLayout::BHND);
  course::fill_random(bhnd, test_seed());
  auto bnhd = HostTensor<float>::attention(2, 3, 4, 5, AttentionLayout::BNHD);
  course::testing::copy_values(bhnd, bnhd);
  EXPECT_TRUE(course::compare(bnhd, bhnd, {1e-7, 1e-7}).ok());
  // Raw storage differs: comparing storage would be wrong.
  EXPECT_NE(bnhd.storage()[5], static_cast<float>(bhnd.storage()[5]));
}

TEST(CompareMisc, ShapeMismatchThrows) {
  EXPECT_INVALID_ARGUMENT(course::compare(HostTensor<float>({2, 3}), HostTensor<double>({3, 2}), {0, 0}),
                          "compare: argument 'got.shape()' = [2, 3]");
  EXPECT_INVALID_ARGUMENT(course::compare(std::vector<float>(3), std::vector<double>(4), {0, 0}),
                          "argument 'got.size()' = 3");
}

TEST(CompareMisc, FlatAndScalar) {
  const std::vector<float> got{1.f, 2.f, 3.f};
  std::vector<double> ref{1.0, 2.0, 3.0};
  EXPECT_TRUE(course::compare(got, ref, {1e-7, 1e-7}).ok());
  ref[1] = 2.1;
  const auto r = course::compare(got, ref, {1e-7, 1e-7});
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.report(), "(i=1)")) << r.report();
  EXPECT_TRUE(course::compare_scalar(5.0, 5.0 + 1e-9, {1e-8, 0}).ok());
  EXPECT_FALSE(course::compare_scalar(5.1, 5.0, {1e-8, 1e-8}).ok());
  EXPECT_FALSE(course::compare_scalar(kNaN, 5.0, {1e9, 1e9}).ok());
}

TEST(CompareMisc, WorstRatioIsErrorOverBound) {
  // |err| / (atol + rtol*|ref|): 0.5 / (1 + 0.5*2) = 0.25 for the worst element.
  const auto r = course::compare(std::vector<float>{2.5f, 1.f}, std::vector<double>{2.0, 1.0}, {1.0, 0.5});
  EXPECT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r.worst_ratio, 0.25);
  EXPECT_TRUE(std::isinf(course::compare_scalar(kNaN, 5.0, {1, 1}).worst_ratio));
  EXPECT_DOUBLE_EQ(course::compare_scalar(5.0, 5.0, {0, 0}).worst_ratio, 0.0);
}

// ------------------------------------------------------------- tolerance -----

TEST(Tolerance, GrowsWithReductionLengthAndDtype) {
  double prev = 0;
  for (std::int64_t k : {1, 16, 256, 4096, 1 << 20}) {
    const auto t = course::tolerance_for(DType::f32, k);
    EXPECT_GT(t.rtol, prev) << "k=" << k;
    EXPECT_GT(t.atol, 0.0);
    prev = t.rtol;
  }
  EXPECT_GT(course::tolerance_for(DType::bf16, 64).rtol, course::tolerance_for(DType::f16, 64).rtol);
  EXPECT_GT(course::tolerance_for(DType::f16, 64).rtol, course::tolerance_for(DType::f32, 64).rtol);
  // Loose enough for honest float rounding, tight enough to catch an error of 1e-3.
  const auto t = course::tolerance_for(DType::f32, 1024);
  EXPECT_LT(t.rtol, 1e-4);
  EXPECT_GT(t.rtol, 1e-7);
  EXPECT_INVALID_ARGUMENT(course::tolerance_for(DType::f32, 0), "argument 'reduction_length' = 0");
}

// ---------------------------------------------------------------- tensors -----

TEST(HostTensorTest, AttentionLayoutsHaveTheRightStrides) {
  const std::int64_t B = 2, H = 3, N = 5, d = 4;
  const auto bhnd = HostTensor<float>::attention(B, H, N, d, AttentionLayout::BHND);
  const auto bnhd = HostTensor<float>::attention(B, H, N, d, AttentionLayout::BNHD);
  EXPECT_EQ(bhnd.shape(), (course::Shape{B, H, N, d}));
  EXPECT_EQ(bnhd.shape(), (course::Shape{B, H, N, d}));
  EXPECT_EQ(bhnd.strides(), (course::Shape{H * N * d, N * d, d, 1}));
  EXPECT_EQ(bnhd.strides(), (course::Shape{N * H * d, d, H * d, 1}));
  EXPECT_EQ(bnhd.storage().size(), static_cast<std::size_t>(B * H * N * d));
  EXPECT_EQ(bnhd.offset({1, 2, 3, 1}), 1 * N * H * d + 3 * H * d + 2 * d + 1);
  EXPECT_EQ(bhnd.offset({1, 2, 3, 1}), 1 * H * N * d + 2 * N * d + 3 * d + 1);
  EXPECT_STREQ(course::to_string(AttentionLayout::BNHD), "BNHD");
  EXPECT_INVALID_ARGUMENT(HostTensor<float>::attention(1, 0, 2, 2, AttentionLayout::BHND), "argument 'H' = 0");
}

TEST(HostTensorTest, OffsetIsBoundsChecked) {
  const HostTensor<float> t({2, 3});
  EXPECT_INVALID_ARGUMENT(t.offset({0, 3}), "HostTensor::offset: argument 'index' = 3");
  EXPECT_INVALID_ARGUMENT(t.offset({-1, 0}), "argument 'index' = -1");
  EXPECT_INVALID_ARGUMENT(t.offset({0, 3}), "[2, 3]");
  EXPECT_INVALID_ARGUMENT(t.offset({0}), "argument 'index rank' = 1");
}

TEST(HostTensorTest, PaddedStridesAndContiguousCopy) {
  HostTensor<double> t({3, 4}, {7, 1});
  EXPECT_EQ(t.storage().size(), 2u * 7u + 4u);
  course::fill_random(t, test_seed());
  const auto c = t.contiguous();
  EXPECT_EQ(c.strides(), (course::Shape{4, 1}));
  t.for_each_index([&](const std::vector<std::int64_t>& i) { EXPECT_EQ(c.at(i), t.at(i)); });
  EXPECT_EQ(t.unravel(7), (std::vector<std::int64_t>{1, 3}));
  EXPECT_INVALID_ARGUMENT(HostTensor<float>({2, -1}), "argument 'shape' = [2, -1]");
  EXPECT_INVALID_ARGUMENT(HostTensor<float>({2, 3}, {1}), "argument 'strides.size()' = 1");
}

TEST(HostTensorTest, RandomFillDiffersAcrossBatchesAndHeads) {
  auto t = HostTensor<float>::attention(2, 2, 3, 4, AttentionLayout::BNHD);
  course::fill_random(t, test_seed());
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t c = 0; c < 4; ++c) {
      EXPECT_NE(t({0, 0, i, c}), t({1, 0, i, c}));
      EXPECT_NE(t({0, 0, i, c}), t({0, 1, i, c}));
    }
}

// ----------------------------------------------------------------- errors -----

TEST(Errors, RequireArgNamesTheArgumentAndValue) {
  try {
    course::require_arg(false, "softmax", "dim", 2, "must be 0 or 1");
    ADD_FAILURE() << "did not throw";
  } catch (const course::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "softmax: argument 'dim' = 2: must be 0 or 1");
  }
  EXPECT_NO_THROW(course::require_arg(true, "f", "x", 1, "never"));
  const float* null = nullptr;
  EXPECT_INVALID_ARGUMENT(course::require_not_null(null, "l2_norm", "x"), "l2_norm: argument 'x' = nullptr: must not be null");
  alignas(16) float buf[8] = {};
  EXPECT_INVALID_ARGUMENT(course::require_aligned(buf + 1, 16, "f", "p"), "must be aligned to 16 bytes");
  EXPECT_NO_THROW(course::require_aligned(buf, 16, "f", "p"));
  EXPECT_INVALID_ARGUMENT(course::require_arg(false, "f", "flag", true, "must be false"), "'flag' = true");
  // Every course exception is a course::Error (one catch for all of them).
  EXPECT_THROW(course::require_arg(false, "f", "x", 1, "bad"), course::Error);
}

/// A piece of a message that counts how often it is printed.
struct CountedPiece {
  int* prints;
  friend std::ostream& operator<<(std::ostream& os, const CountedPiece& p) {
    ++*p.prints;
    return os << "piece";
  }
};

TEST(Errors, MessagesAreFormattedOnlyWhenACheckFails) {
  // Validation runs before every launch: a passing check must not build its text.
  int prints = 0;
  const CountedPiece piece{&prints};
  course::require_arg(true, "f", course::validate::msg("name ", piece), 1, course::validate::msg("rule ", piece));
  course::require_not_null(&prints, "f", course::validate::msg("ptr ", piece));
  course::require_aligned(&prints, alignof(int), "f", course::validate::msg("ptr ", piece));
  EXPECT_EQ(prints, 0);
  // A failing one prints every piece, name and rule, into the message.
  EXPECT_INVALID_ARGUMENT(course::require_arg(false, "f", course::validate::msg("tensors[", 3, "].n"), 7,
                                              course::validate::msg("must be < ", 4, " (", piece, ")")),
                          "f: argument 'tensors[3].n' = 7: must be < 4 (piece)");
  EXPECT_EQ(prints, 1);
  // A checked char pointer is an address, never read as text; a bool piece reads true.
  alignas(16) char text[16] = "not an address";
  EXPECT_INVALID_ARGUMENT(course::require_aligned(text + 1, 16, "f", "p"), "'p' = 0x");
  EXPECT_INVALID_ARGUMENT(course::require_arg(false, "f", "x", 1, course::validate::msg("flag ", true)), "flag true");
  // A const char* value is text, not an address.
  EXPECT_INVALID_ARGUMENT(course::require_arg(false, "f", "step", static_cast<const char*>("warp_per_row"), "bad"),
                          "'step' = warp_per_row: bad");
  // A Msg kept beyond its statement holds copies of its pieces.
  const auto kept = course::validate::msg("step ", std::string("tc_wgmma"), " of ", 2);
  EXPECT_EQ(kept.str(), "step tc_wgmma of 2");
}

TEST(Errors, NotImplementedNamesTheFile) {
  const course::NotImplemented e("softmax step online", "exercises/module01_basics/softmax.cu");
  EXPECT_TRUE(contains(e.what(), "exercises/module01_basics/softmax.cu")) << e.what();
  EXPECT_TRUE(contains(e.what(), "softmax step online")) << e.what();
  EXPECT_EQ(e.file(), "exercises/module01_basics/softmax.cu");
}

TEST(Errors, CudaErrorCarriesTheCall) {
  try {
    COURSE_CUDA_CHECK(cudaErrorInvalidValue);
    ADD_FAILURE() << "did not throw";
  } catch (const course::CudaError& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidValue);
    EXPECT_TRUE(contains(e.what(), "cudaErrorInvalidValue")) << e.what();
    EXPECT_TRUE(contains(e.what(), "cpu_harness.cpp")) << e.what();
  }
}

}  // namespace
