// CPU tests of the module 1 and 2 references: reductions, softmax, matmul and the
// batched GEMMs, against the lessons' worked examples and explicit definitions.

#include "course/compare.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "cpu_test_util.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace {

using course::HostTensor;
using course::Tolerance;
using course::testing::copy_values;
using course::testing::Matches;
using course::testing::matrix;
using course::testing::random_double;
using course::testing::test_seed;
namespace ref = course::ref;

constexpr Tolerance kExact{0.0, 0.0};
constexpr Tolerance kDouble{1e-13, 1e-13};

/// The textbook definition, written independently of the reference.
HostTensor<double> triple_loop_matmul(const HostTensor<double>& a, const HostTensor<double>& b) {
  HostTensor<double> c({a.dim(0), b.dim(1)});
  for (std::int64_t i = 0; i < a.dim(0); ++i)
    for (std::int64_t j = 0; j < b.dim(1); ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < a.dim(1); ++k) s += a({i, k}) * b({k, j});
      c({i, j}) = s;
    }
  return c;
}

HostTensor<double> transposed_copy(const HostTensor<double>& x) {
  HostTensor<double> t({x.dim(1), x.dim(0)});
  for (std::int64_t i = 0; i < x.dim(0); ++i)
    for (std::int64_t j = 0; j < x.dim(1); ++j) t({j, i}) = x({i, j});
  return t;
}

// ------------------------------------------------------------ reductions -----

TEST(Reductions, WorkedExamples) {
  const std::vector<float> x{3.f, 4.f};
  EXPECT_EQ(ref::l2_norm(x.data(), 2), 5.0);
  const std::vector<float> a{1.f, 2.f, 3.f}, b{4.f, 5.f, 6.f};
  EXPECT_EQ(ref::dot(a.data(), b.data(), 3), 32.0);
}

TEST(Reductions, EmptyInputIsZero) {
  EXPECT_EQ(ref::l2_norm(nullptr, 0), 0.0);
  EXPECT_EQ(ref::dot(nullptr, nullptr, 0), 0.0);
}

TEST(Reductions, RandomAgreesWithDefinition) {
  const auto x = course::random_vector(1001, test_seed());
  const auto y = course::random_vector(1001, test_seed() + 1);
  double xx = 0, xy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    xx += double(x[i]) * x[i];
    xy += double(x[i]) * y[i];
  }
  EXPECT_NEAR(ref::l2_norm(x.data(), 1001), std::sqrt(xx), 1e-12);
  EXPECT_NEAR(ref::dot(x.data(), y.data(), 1001), xy, 1e-12);
  // Accumulation is in double: a float sum of 1e6 ones-and-tiny values would drift.
  std::vector<float> big(1 << 20, 1.0f);
  big[0] = 1e-4f;
  EXPECT_NEAR(ref::dot(big.data(), big.data(), 1 << 20), (1 << 20) - 1 + 1e-8, 1e-6);
}

TEST(Reductions, BadArgumentsAreNamed) {
  const std::vector<float> x{1.f};
  EXPECT_INVALID_ARGUMENT(ref::l2_norm(x.data(), -1), "l2_norm: argument 'n' = -1");
  EXPECT_INVALID_ARGUMENT(ref::l2_norm(nullptr, 3), "argument 'x' = nullptr");
  EXPECT_INVALID_ARGUMENT(ref::dot(x.data(), nullptr, 1), "dot: argument 'y' = nullptr");
  EXPECT_INVALID_ARGUMENT(ref::dot(nullptr, x.data(), 1), "dot: argument 'x' = nullptr");
  EXPECT_INVALID_ARGUMENT(ref::dot(x.data(), x.data(), -5), "'n' = -5");
}

// --------------------------------------------------------------- softmax -----

TEST(Softmax, WorkedExample) {
  const auto y = ref::softmax(matrix({{1, 2, 3}}), 1);
  EXPECT_NEAR(y({0, 0}), 0.0900, 1e-4);
  EXPECT_NEAR(y({0, 1}), 0.2447, 1e-4);
  EXPECT_NEAR(y({0, 2}), 0.6652, 1e-4);
  // The same values as a column, normalized along dim 0.
  const auto yc = ref::softmax(matrix({{1}, {2}, {3}}), 0);
  for (std::int64_t j = 0; j < 3; ++j) EXPECT_DOUBLE_EQ(yc({j, 0}), y({0, j}));
}

TEST(Softmax, LargeInputsAreFiniteAndShiftInvariant) {
  for (int dim : {0, 1}) {
    auto big = matrix<float>({{1000, 1001, 1002}});
    auto small = matrix<float>({{-2, -1, 0}});
    if (dim == 0) {  // the same values as a column
      big = matrix<float>({{1000}, {1001}, {1002}});
      small = matrix<float>({{-2}, {-1}, {0}});
    }
    const auto yb = ref::softmax(big, dim), ys = ref::softmax(small, dim);
    for (float v : yb.storage()) EXPECT_TRUE(std::isfinite(v));
    EXPECT_MATCHES(course::compare(yb, ys, kExact));
  }
}

TEST(Softmax, BothDimsOfWorkedMatrix) {
  const auto x = matrix({{1, 2, 3}, {4, 5, 6}});
  const auto rows = ref::softmax(x, 1);
  const double r[3] = {0.0900, 0.2447, 0.6652};
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 3; ++j) EXPECT_NEAR(rows({i, j}), r[j], 1e-4) << i << "," << j;
  // Each column is softmax([x, x + 3]) = [1/(1+e^3), e^3/(1+e^3)] = [0.0474, 0.9526].
  const auto cols = ref::softmax(x, 0);
  for (std::int64_t j = 0; j < 3; ++j) {
    EXPECT_NEAR(cols({0, j}), 0.0474, 1e-4);
    EXPECT_NEAR(cols({1, j}), 0.9526, 1e-4);
    EXPECT_NEAR(cols({0, j}), 1.0 / (1.0 + std::exp(3.0)), 1e-15);
  }
}

TEST(Softmax, RandomSlicesSumToOneAndAgreeWithDefinition) {
  const auto x = random_double({7, 13}, test_seed());
  for (int dim : {0, 1}) {
    const auto y = ref::softmax(x, dim);
    HostTensor<double> want(x.shape());
    const std::int64_t outer = x.dim(1 - dim), len = x.dim(dim);
    for (std::int64_t o = 0; o < outer; ++o) {
      auto at = [&](const HostTensor<double>& t, std::int64_t k) -> double {
        return dim == 1 ? t({o, k}) : t({k, o});
      };
      double sum = 0, total = 0;
      for (std::int64_t k = 0; k < len; ++k) sum += std::exp(at(x, k));  // inputs are in [-1, 1)
      for (std::int64_t k = 0; k < len; ++k) {
        (dim == 1 ? want({o, k}) : want({k, o})) = std::exp(at(x, k)) / sum;
        total += at(y, k);
      }
      EXPECT_NEAR(total, 1.0, 1e-14);
    }
    EXPECT_MATCHES(course::compare(y, want, kDouble));
  }
}

TEST(Softmax, NonContiguousInput) {
  // x^T stored column-major: the same bytes as x, viewed transposed. softmax(x^T, 0)
  // must be the transpose of softmax(x, 1).
  const auto x = random_double({4, 6}, test_seed());
  HostTensor<double> xt({6, 4}, {1, 6});
  xt.storage() = x.storage();
  const auto y = ref::softmax(x, 1);
  const auto yt = ref::softmax(xt, 0);
  EXPECT_MATCHES(course::compare(yt, transposed_copy(y), kExact));
  // Padded rows.
  HostTensor<double> padded({4, 6}, {9, 1});
  copy_values(x, padded);
  EXPECT_MATCHES(course::compare(ref::softmax(padded, 1), y, kExact));
  EXPECT_MATCHES(course::compare(ref::softmax(padded, 0), ref::softmax(x, 0), kExact));
}

TEST(Softmax, BadArgumentsAreNamed) {
  const auto x = matrix({{1, 2, 3}});
  try {
    ref::softmax(x, 2);
    ADD_FAILURE() << "softmax(dim=2) did not throw";
  } catch (const course::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "softmax: argument 'dim' = 2: must be 0 or 1");
  }
  EXPECT_INVALID_ARGUMENT(ref::softmax(x, -1), "'dim' = -1");
  EXPECT_INVALID_ARGUMENT(ref::softmax(HostTensor<double>({2, 3, 4}), 1), "argument 'x.shape()' = [2, 3, 4]");
  EXPECT_INVALID_ARGUMENT(ref::softmax_backward(x, matrix({{1, 2}}), 1), "argument 'dy.shape()' = [1, 2]");
  EXPECT_INVALID_ARGUMENT(ref::softmax_backward(x, x, 3), "softmax_backward: argument 'dim' = 3");
}

// ---------------------------------------------------------------- matmul -----

TEST(Matmul, WorkedExample) {
  const auto c = ref::matmul(matrix({{1, 2}, {3, 4}}), matrix({{2, 0}, {1, 3}}));
  EXPECT_MATCHES(course::compare(c, matrix({{4, 6}, {10, 12}}), kExact));
  const auto cf = ref::matmul(matrix<float>({{1, 2}, {3, 4}}), matrix<float>({{2, 0}, {1, 3}}));
  EXPECT_MATCHES(course::compare(cf, matrix<float>({{4, 6}, {10, 12}}), kExact));
}

TEST(Matmul, TransposesAgreeWithTransposedCopies) {
  const auto a = random_double({5, 3}, test_seed());
  const auto b = random_double({3, 7}, test_seed() + 1);
  const auto at = transposed_copy(a), bt = transposed_copy(b);
  const auto want = triple_loop_matmul(a, b);
  EXPECT_MATCHES(course::compare(ref::matmul(a, b), want, kDouble));
  EXPECT_MATCHES(course::compare(ref::matmul(at, b, true, false), want, kDouble));
  EXPECT_MATCHES(course::compare(ref::matmul(a, bt, false, true), want, kDouble));
  EXPECT_MATCHES(course::compare(ref::matmul(at, bt, true, true), want, kDouble));
}

TEST(Matmul, OddShapes) {
  for (auto [M, K, N] : {std::tuple{1, 1, 1}, {1, 17, 1}, {13, 1, 11}, {7, 13, 5}, {31, 2, 3}}) {
    const auto a = random_double({M, K}, test_seed() + M);
    const auto b = random_double({K, N}, test_seed() + N);
    EXPECT_MATCHES(course::compare(ref::matmul(a, b), triple_loop_matmul(a, b), kDouble))
        << M << "x" << K << "x" << N;
  }
  // Empty inner dimension: C is all zeros, of the right shape.
  const auto c = ref::matmul(HostTensor<double>({3, 0}), HostTensor<double>({0, 2}));
  ASSERT_EQ(c.shape(), (course::Shape{3, 2}));
  for (double v : c.storage()) EXPECT_EQ(v, 0.0);
}

TEST(Matmul, StridedInputs) {
  const auto a = random_double({5, 3}, test_seed());
  const auto b = random_double({3, 4}, test_seed() + 1);
  const auto want = ref::matmul(a, b);
  HostTensor<double> a_padded({5, 3}, {8, 1});  // padded rows
  HostTensor<double> a_colmajor({5, 3}, {1, 5});
  HostTensor<double> b_padded({3, 4}, {11, 2});  // padded rows, every other column
  copy_values(a, a_padded);
  copy_values(a, a_colmajor);
  copy_values(b, b_padded);
  EXPECT_MATCHES(course::compare(ref::matmul(a_padded, b_padded), want, kExact));
  EXPECT_MATCHES(course::compare(ref::matmul(a_colmajor, b_padded), want, kExact));
  const auto c = ref::matmul(a_colmajor, b);
  EXPECT_EQ(c.strides(), course::contiguous_strides(c.shape())) << "results are contiguous";
}

TEST(Matmul, BadShapesNameTheShapes) {
  const HostTensor<double> a({2, 3}), b({4, 5});
  EXPECT_INVALID_ARGUMENT(ref::matmul(a, b), "matmul: argument 'b.shape()' = [4, 5]");
  EXPECT_INVALID_ARGUMENT(ref::matmul(a, b), "a.shape() = [2, 3]");
  EXPECT_INVALID_ARGUMENT(ref::matmul(a, b, true, false), "trans_a = true");
  EXPECT_INVALID_ARGUMENT(ref::matmul(HostTensor<double>({2, 3, 1}), b), "argument 'a.shape()' = [2, 3, 1]");
  EXPECT_INVALID_ARGUMENT(ref::matmul(a, HostTensor<double>({3})), "argument 'b.shape()' = [3]");
  EXPECT_NO_THROW(ref::matmul(a, HostTensor<double>({3, 5})));
}

// ---------------------------------------------------------- batched GEMM -----

struct BatchedCase {
  bool b_transposed;
  bool padded;
  float alpha;
  bool a_transposed = false;  ///< A stored K x M (op(A) = A^T)
};
/// gtest prints parameters in test names: keep them readable.
void PrintTo(const BatchedCase& c, std::ostream* os) {
  *os << (c.a_transposed ? "A^T, " : "") << (c.b_transposed ? "B^T" : "B") << (c.padded ? ", padded" : ", contiguous")
      << ", alpha=" << c.alpha;
}

class BatchedGemm : public ::testing::TestWithParam<BatchedCase> {};

TEST_P(BatchedGemm, StridedPtrArrayAndPerMatrixAgree) {
  const auto [b_transposed, padded, alpha, a_transposed] = GetParam();
  const std::int64_t B = 2, H = 3, M = 5, N = 7, K = 4;
  ref::BatchedGemmDesc d = ref::contiguous_batched_gemm(B, H, M, N, K, b_transposed, a_transposed);
  d.alpha = alpha;
  const std::int64_t a_rows = a_transposed ? K : M, a_cols = a_transposed ? M : K;
  const std::int64_t b_rows = b_transposed ? N : K, b_cols = b_transposed ? K : N;
  if (padded) {  // row strides wider than the rows, gaps between heads and batches
    d.stride_a_row = a_cols + 3;
    d.stride_a_head = a_rows * d.stride_a_row + 5;
    d.stride_a_batch = H * d.stride_a_head + 2;
    d.stride_b_row = b_cols + 1;
    d.stride_b_head = b_rows * d.stride_b_row + 4;
    d.stride_b_batch = H * d.stride_b_head + 1;
    d.stride_c_row = N + 2;
    d.stride_c_head = M * d.stride_c_row + 3;
    d.stride_c_batch = H * d.stride_c_head + 7;
  }
  const auto a = course::random_vector(static_cast<std::size_t>(B * d.stride_a_batch), test_seed());
  const auto b = course::random_vector(static_cast<std::size_t>(B * d.stride_b_batch), test_seed() + 1);
  const float sentinel = 12345.f;
  std::vector<float> c_strided(static_cast<std::size_t>(B * d.stride_c_batch), sentinel);
  std::vector<float> c_ptr = c_strided;
  ref::batched_gemm_strided(d, a.data(), b.data(), c_strided.data());

  std::vector<const float*> pa, pb;
  std::vector<float*> pc;
  for (std::int64_t bi = 0; bi < B; ++bi)
    for (std::int64_t h = 0; h < H; ++h) {
      pa.push_back(a.data() + bi * d.stride_a_batch + h * d.stride_a_head);
      pb.push_back(b.data() + bi * d.stride_b_batch + h * d.stride_b_head);
      pc.push_back(c_ptr.data() + bi * d.stride_c_batch + h * d.stride_c_head);
    }
  ref::batched_gemm_ptr_array(d, pa.data(), d.stride_a_row, pb.data(), d.stride_b_row, pc.data(), d.stride_c_row);
  EXPECT_EQ(c_strided, c_ptr) << "strided and pointer-array references differ";

  std::vector<bool> written(c_strided.size(), false);
  for (std::int64_t bi = 0; bi < B; ++bi)
    for (std::int64_t h = 0; h < H; ++h) {
      // This (b, h) as 2-D tensors viewed through the row strides, then 2-D matmul.
      HostTensor<float> am({a_rows, a_cols}, {d.stride_a_row, 1}), bm({b_rows, b_cols}, {d.stride_b_row, 1});
      const float* a0 = a.data() + bi * d.stride_a_batch + h * d.stride_a_head;
      const float* b0 = b.data() + bi * d.stride_b_batch + h * d.stride_b_head;
      std::copy(a0, a0 + am.storage().size(), am.storage().begin());
      std::copy(b0, b0 + bm.storage().size(), bm.storage().begin());
      const auto want = ref::matmul(am.cast<double>(), bm.cast<double>(), a_transposed, b_transposed);
      HostTensor<float> got({M, N});
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n) {
          const std::int64_t off = bi * d.stride_c_batch + h * d.stride_c_head + m * d.stride_c_row + n;
          got({m, n}) = c_strided[off];
          written[off] = true;
        }
      HostTensor<double> scaled = want;
      for (double& v : scaled.storage()) v *= alpha;
      EXPECT_MATCHES(course::compare(got, scaled, {1e-6, 1e-6}, {"m", "n"})) << "b=" << bi << " h=" << h;
    }
  for (std::size_t i = 0; i < written.size(); ++i)
    if (!written[i]) {
      ASSERT_EQ(c_strided[i], sentinel) << "padding element " << i << " was overwritten";
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, BatchedGemm,
                         ::testing::Values(BatchedCase{false, false, 1.0f}, BatchedCase{true, false, 1.0f},
                                           BatchedCase{false, true, 1.0f}, BatchedCase{true, true, 0.5f},
                                           BatchedCase{false, false, 1.0f, true}, BatchedCase{true, false, 1.0f, true},
                                           BatchedCase{false, true, 1.0f, true}, BatchedCase{true, true, 0.5f, true}),
                         [](const auto& info) {
                           return std::string(info.param.a_transposed ? "AT_" : "") +
                                  (info.param.b_transposed ? "BT" : "BN") +
                                  (info.param.padded ? "_padded" : "_contiguous") +
                                  (info.param.alpha != 1.0f ? "_alpha" : "");
                         });

TEST(BatchedGemmDesc, ContiguousStrides) {
  const auto d = ref::contiguous_batched_gemm(2, 3, 5, 7, 4, true);
  EXPECT_EQ(d.stride_a_row, 4);
  EXPECT_EQ(d.stride_a_head, 20);
  EXPECT_EQ(d.stride_a_batch, 60);
  EXPECT_EQ(d.stride_b_row, 4);  // B is N x K
  EXPECT_EQ(d.stride_b_head, 28);
  EXPECT_EQ(d.stride_b_batch, 84);
  EXPECT_EQ(d.stride_c_row, 7);
  EXPECT_EQ(d.stride_c_head, 35);
  EXPECT_EQ(d.stride_c_batch, 105);
  EXPECT_EQ(ref::contiguous_batched_gemm(2, 3, 5, 7, 4, false).stride_b_row, 7);  // B is K x N
  const auto t = ref::contiguous_batched_gemm(2, 3, 5, 7, 4, false, /*a_transposed=*/true);
  EXPECT_TRUE(t.a_transposed);
  EXPECT_EQ(t.stride_a_row, 5);  // A is K x M
  EXPECT_EQ(t.stride_a_head, 20);
  EXPECT_EQ(t.stride_a_batch, 60);
}

/// op(A) = A^T on the lesson-sized example dW = X^T dY: X is 3 x 2 (M = 2 columns of X
/// become the rows of the result), dY is 3 x 2; every entry is worked out by hand.
TEST(BatchedGemmDesc, ATransposedWorkedExample) {
  const std::vector<float> x = {1, 2,    // X row 0
                                3, 4,    // X row 1
                                5, 6};   // X row 2
  const std::vector<float> dy = {1, 0,   // dY row 0
                                 0, 1,   // dY row 1
                                 1, 1};  // dY row 2
  // X^T dY = [[1*1 + 3*0 + 5*1, 1*0 + 3*1 + 5*1], [2*1 + 4*0 + 6*1, 2*0 + 4*1 + 6*1]] = [[6, 8], [8, 10]]
  const auto d = ref::contiguous_batched_gemm(1, 1, /*M=*/2, /*N=*/2, /*K=*/3, false, /*a_transposed=*/true);
  std::vector<float> dw(4, -1.f);
  ref::batched_gemm_strided(d, x.data(), dy.data(), dw.data());
  EXPECT_EQ(dw, (std::vector<float>{6, 8, 8, 10}));
  // The same through the pointer-array reference, with padded rows of X (lda = 3 > M = 2).
  const std::vector<float> xp = {1, 2, 99, 3, 4, 99, 5, 6, 99};
  const float* pa[1] = {xp.data()};
  const float* pb[1] = {dy.data()};
  std::vector<float> dw2(4, -1.f);
  float* pc[1] = {dw2.data()};
  ref::batched_gemm_ptr_array<float>(d, pa, 3, pb, 2, pc, 2);
  EXPECT_EQ(dw2, dw);
  // lda must cover a row of the STORED A, i.e. M when transposed.
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_ptr_array<float>(d, pa, 1, pb, 2, pc, 2), "argument 'lda' = 1");
}

TEST(BatchedGemmDesc, BadArgumentsAreNamed) {
  std::vector<float> buf(1000, 1.f);
  float* p = buf.data();
  auto d = ref::contiguous_batched_gemm(1, 2, 3, 4, 5, false);
  EXPECT_INVALID_ARGUMENT(ref::contiguous_batched_gemm(1, 1, -1, 2, 2, false), "argument 'd.M' = -1");
  auto bad = d;
  bad.K = -3;
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_strided<float>(bad, p, p, p), "batched_gemm_strided: argument 'd.K' = -3");
  bad = d;
  bad.stride_c_row = 2;
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_strided<float>(bad, p, p, p), "argument 'd.stride_c_row' = 2");
  bad = d;
  bad.stride_a_head = -1;
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_strided<float>(bad, p, p, p), "'d.stride_a_head' = -1");
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_strided<float>(d, p, p, nullptr), "argument 'c' = nullptr");
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_strided<float>(d, nullptr, p, p), "argument 'a' = nullptr");
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_strided<float>(d, p, nullptr, p), "argument 'b' = nullptr");

  const float* pa[2] = {p, nullptr};
  const float* pb[2] = {p, p};
  float* pc[2] = {p + 500, p + 600};
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_ptr_array<float>(d, pa, 5, pb, 4, pc, 4),
                          "batched_gemm_ptr_array: argument 'a[1]' = nullptr");
  pa[1] = p;
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_ptr_array<float>(d, pa, 4, pb, 4, pc, 4), "argument 'lda' = 4");
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_ptr_array<float>(d, pa, 5, pb, 3, pc, 4), "argument 'ldb' = 3");
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_ptr_array<float>(d, pa, 5, pb, 4, pc, 1), "argument 'ldc' = 1");
  EXPECT_INVALID_ARGUMENT(ref::batched_gemm_ptr_array<float>(d, pa, 5, pb, 4, nullptr, 4), "argument 'c' = nullptr");
  EXPECT_NO_THROW(ref::batched_gemm_ptr_array<float>(d, pa, 5, pb, 4, pc, 4));
}

}  // namespace
