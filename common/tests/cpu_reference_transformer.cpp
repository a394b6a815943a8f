// CPU tests of the transformer-block references (issue 27): LayerNorm, GELU (tanh),
// cross-entropy and AdamW. Each op gets a worked example done by hand (the arithmetic is
// in the comment), its invariants, central finite differences for every backward, and
// its bad arguments rejected by name.
//
// Gradient checks use a scalar loss L = sum(W * output) with random W, so dL/doutput = W
// and the analytic gradient is the backward reference applied to W.

#include "course/compare.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "cpu_test_util.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace {

using course::HostTensor;
using course::testing::matrix;
using course::testing::test_seed;
namespace ref = course::ref;
using course::testing::flatten;
using course::testing::random_double;
using course::testing::unflatten;
using course::testing::weighted_sum;

constexpr double kH = 1e-6, kAtol = 1e-8, kRtol = 1e-6;  // finite differences in double

HostTensor<double> vec(const std::vector<double>& v) {
  HostTensor<double> t({static_cast<std::int64_t>(v.size())});
  for (std::size_t i = 0; i < v.size(); ++i) t({static_cast<std::int64_t>(i)}) = v[i];
  return t;
}


/// Checks `analytic` = dL/dx for L = loss(x) by central differences.
void expect_gradient(const std::string& what, const HostTensor<double>& x,
                     const std::function<double(const HostTensor<double>&)>& loss,
                     const HostTensor<double>& analytic) {
  ASSERT_EQ(analytic.shape(), x.shape()) << what;
  const auto r = ref::check_gradient([&](const std::vector<double>& v) { return loss(unflatten(x, v)); },
                                     flatten(x), flatten(analytic), kH, kAtol, kRtol);
  EXPECT_TRUE(r.ok) << what << ": max abs err " << r.max_abs_error << ", max rel err " << r.max_rel_error
                    << " at flat index " << r.worst_index;
}

/// A copy of x stored column-major: the references must read through strides.
HostTensor<double> column_major(const HostTensor<double>& x) {
  HostTensor<double> t(x.shape(), {1, x.dim(0)});
  course::testing::copy_values(x, t);
  return t;
}

// --------------------------------------------------------------- LayerNorm -----

TEST(LayerNorm, ForwardWorkedExample) {
  // Row 0: [2 4 4 4 5 5 7 9], sum 40, mean 5; deviations [-3 -1 -1 -1 0 0 2 4],
  //   squares sum 9+1+1+1+0+0+4+16 = 32, var 32/8 = 4, rstd (eps 0) = 1/2,
  //   xhat = [-1.5 -0.5 -0.5 -0.5 0 0 1 2].
  // Row 1: [1 -1 1 -1 1 -1 1 -1], mean 0, var 1, rstd 1, xhat = x.
  // y = gamma * xhat + beta with
  //   gamma = [1 -1 2 0.5 1 1 1 3], beta = [0 1 0 0 0.5 0 0 -1]:
  //   row 0: [-1.5, 0.5+1, -1, -0.25, 0.5, 0, 1, 6-1] = [-1.5 1.5 -1 -0.25 0.5 0 1 5]
  //   row 1: [1, -(-1)+1, 2, -0.5, 1.5, -1, 1, -3-1] = [1 2 2 -0.5 1.5 -1 1 -4]
  const auto x = matrix({{2, 4, 4, 4, 5, 5, 7, 9}, {1, -1, 1, -1, 1, -1, 1, -1}});
  const auto gamma = vec({1, -1, 2, 0.5, 1, 1, 1, 3}), beta = vec({0, 1, 0, 0, 0.5, 0, 0, -1});
  const auto r = ref::layer_norm_forward(x, gamma, beta, 0.0);
  EXPECT_EQ(r.mean({0}), 5.0);
  EXPECT_EQ(r.mean({1}), 0.0);
  EXPECT_EQ(r.rstd({0}), 0.5);
  EXPECT_EQ(r.rstd({1}), 1.0);
  EXPECT_MATCHES(course::compare(r.y, matrix({{-1.5, 1.5, -1, -0.25, 0.5, 0, 1, 5}, {1, 2, 2, -0.5, 1.5, -1, 1, -4}}),
                                 {1e-15, 0}));
  // eps sits under the square root with the variance: row 0 with eps = 5 has rstd 1/sqrt(4 + 5) = 1/3.
  EXPECT_NEAR(ref::layer_norm_forward(x, gamma, beta, 5.0).rstd({0}), 1.0 / 3.0, 1e-15);
}

TEST(LayerNorm, RowsHaveMeanZeroAndVarianceOneBeforeTheAffine) {
  // gamma = 1, beta = 0 and eps = 0 leave xhat itself. The float instantiation sits on a
  // large offset (1000): the two-pass statistics lose nothing to it.
  const std::uint64_t seed = test_seed();
  for (auto [rows, C] : {std::pair{3, 8}, {5, 37}, {2, 2}}) {
    HostTensor<float> x({rows, C});
    course::fill_random(x, seed + C, 999.0, 1001.0);
    HostTensor<float> gamma({C}), beta({C});
    for (std::int64_t c = 0; c < C; ++c) gamma({c}) = 1.f;
    const auto y = ref::layer_norm_forward(x, gamma, beta, 0.0).y;
    for (std::int64_t i = 0; i < rows; ++i) {
      double s = 0, ss = 0;
      for (std::int64_t c = 0; c < C; ++c) s += y({i, c});
      for (std::int64_t c = 0; c < C; ++c) ss += (y({i, c}) - s / C) * (y({i, c}) - s / C);
      EXPECT_NEAR(s / C, 0.0, 1e-6) << "row " << i << " of [" << rows << ", " << C << "]";
      EXPECT_NEAR(ss / C, 1.0, 1e-5) << "row " << i << " of [" << rows << ", " << C << "]";
    }
  }
}

TEST(LayerNorm, SingleColumnGivesBeta) {
  // One column: the row is its own mean, xhat = 0, and y = beta whatever x and gamma.
  const auto x = matrix({{3.5}, {-2}});
  const auto r = ref::layer_norm_forward(x, vec({7}), vec({0.25}));
  EXPECT_EQ(r.y({0, 0}), 0.25);
  EXPECT_EQ(r.y({1, 0}), 0.25);
  EXPECT_NEAR(r.rstd({0}), 1.0 / std::sqrt(1e-5), 1e-9);  // var 0: rstd = 1/sqrt(eps)
}

TEST(LayerNorm, BackwardWorkedExample) {
  // eps = 0, gamma = [2 2 2 2], so g = dy * gamma = 2 dy and dx = rstd (g - mean(g) - xhat mean(g xhat)).
  // Row 0: x = [0 0 2 2]: mean 1, var 1, rstd 1, xhat = [-1 -1 1 1]; dy = [1 0 0 0]:
  //   g = [2 0 0 0], mean(g) = 1/2, mean(g xhat) = -2/4 = -1/2,
  //   dx = g - 1/2 + xhat/2 = [2-1/2-1/2, -1/2-1/2, -1/2+1/2, -1/2+1/2] = [1 -1 0 0].
  // Row 1: x = [1 -1 1 -1]: mean 0, rstd 1, xhat = x; dy = [0 0 0 2]:
  //   g = [0 0 0 4], mean(g) = 1, mean(g xhat) = -4/4 = -1,
  //   dx = g - 1 + xhat = [0-1+1, 0-1-1, 0-1+1, 4-1-1] = [0 -2 0 2].
  // dgamma = sum over rows of dy * xhat = [1*-1 + 0, 0, 0, 0 + 2*-1] = [-1 0 0 -2];
  // dbeta = sum over rows of dy = [1 0 0 2].
  const auto x = matrix({{0, 0, 2, 2}, {1, -1, 1, -1}});
  const auto dy = matrix({{1, 0, 0, 0}, {0, 0, 0, 2}});
  const auto gamma = vec({2, 2, 2, 2});
  const auto f = ref::layer_norm_forward(x, gamma, vec({0, 0, 0, 0}), 0.0);
  const auto g = ref::layer_norm_backward(x, gamma, f.mean, f.rstd, dy);
  EXPECT_MATCHES(course::compare(g.dx, matrix({{1, -1, 0, 0}, {0, -2, 0, 2}}), {1e-15, 0}));
  EXPECT_MATCHES(course::compare(g.dgamma, vec({-1, 0, 0, -2}), {1e-15, 0}));
  EXPECT_MATCHES(course::compare(g.dbeta, vec({1, 0, 0, 2}), {1e-15, 0}));
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  // C = 1 included (dx = 0 there: xhat is 0 whatever x); eps = 1e-5 so it enters the gradient.
  const std::uint64_t seed = test_seed();
  for (auto [rows, C] : {std::pair{3, 5}, {1, 7}, {4, 1}, {2, 16}}) {
    const std::uint64_t s = seed + 100 * rows + C;
    const auto x = random_double({rows, C}, s, -2.0, 2.0);
    const auto gamma = random_double({C}, s + 1, 0.5, 1.5), beta = random_double({C}, s + 2);
    const auto w = random_double({rows, C}, s + 3);
    const double eps = 1e-5;
    const auto f = ref::layer_norm_forward(x, gamma, beta, eps);
    const auto g = ref::layer_norm_backward(x, gamma, f.mean, f.rstd, w);
    const std::string at = " [" + std::to_string(rows) + ", " + std::to_string(C) + "]";
    expect_gradient("dx" + at, x, [&](const HostTensor<double>& xx) {
      return weighted_sum(w, ref::layer_norm_forward(xx, gamma, beta, eps).y); }, g.dx);
    expect_gradient("dgamma" + at, gamma, [&](const HostTensor<double>& gg) {
      return weighted_sum(w, ref::layer_norm_forward(x, gg, beta, eps).y); }, g.dgamma);
    expect_gradient("dbeta" + at, beta, [&](const HostTensor<double>& bb) {
      return weighted_sum(w, ref::layer_norm_forward(x, gamma, bb, eps).y); }, g.dbeta);
  }
}

TEST(LayerNorm, BackwardRowsAreOrthogonalToOnesAndXhat) {
  // y does not change when a row is shifted (x + a) or, with eps = 0, scaled (b x, b > 0), so
  // dx is orthogonal to both directions: sum_c dx = 0 and sum_c dx * xhat = 0 in every row.
  const std::uint64_t seed = test_seed();
  const auto x = random_double({4, 9}, seed);
  const auto gamma = random_double({9}, seed + 1), dy = random_double({4, 9}, seed + 2);
  const auto f = ref::layer_norm_forward(x, gamma, vec(std::vector<double>(9, 0.0)), 0.0);
  const auto g = ref::layer_norm_backward(x, gamma, f.mean, f.rstd, dy);
  for (std::int64_t i = 0; i < 4; ++i) {
    double sum = 0, dot = 0;
    for (std::int64_t c = 0; c < 9; ++c) {
      sum += g.dx({i, c});
      dot += g.dx({i, c}) * (x({i, c}) - f.mean({i})) * f.rstd({i});
    }
    EXPECT_NEAR(sum, 0.0, 1e-13) << "row " << i;
    EXPECT_NEAR(dot, 0.0, 1e-13) << "row " << i;
  }
}

TEST(LayerNorm, StridedInputsAgree) {
  const std::uint64_t seed = test_seed();
  const auto x = random_double({5, 6}, seed), dy = random_double({5, 6}, seed + 1);
  const auto gamma = random_double({6}, seed + 2), beta = random_double({6}, seed + 3);
  const auto f = ref::layer_norm_forward(x, gamma, beta);
  const auto ft = ref::layer_norm_forward(column_major(x), gamma, beta);
  EXPECT_MATCHES(course::compare(ft.y, f.y, {0, 0}));
  const auto g = ref::layer_norm_backward(x, gamma, f.mean, f.rstd, dy);
  const auto gt = ref::layer_norm_backward(column_major(x), gamma, f.mean, f.rstd, column_major(dy));
  EXPECT_MATCHES(course::compare(gt.dx, g.dx, {0, 0}));
  EXPECT_MATCHES(course::compare(gt.dgamma, g.dgamma, {0, 0}));
}

TEST(LayerNorm, BadArgumentsAreNamed) {
  const HostTensor<double> x({2, 3}), c3({3}), r2({2});
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_forward(HostTensor<double>({6}), c3, c3),
                          "layer_norm_forward: argument 'x.shape()' = [6]");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_forward(HostTensor<double>({2, 0}), HostTensor<double>({0}), HostTensor<double>({0})),
                          "argument 'x.shape()' = [2, 0]: must have at least one column");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_forward(x, HostTensor<double>({2}), c3), "argument 'gamma.shape()' = [2]");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_forward(x, c3, HostTensor<double>({1, 3})), "argument 'beta.shape()' = [1, 3]");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_forward(x, c3, c3, -1e-5), "argument 'eps' = -1e-05");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_forward(x, c3, c3, std::nan("")), "argument 'eps'");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_backward(x, c3, HostTensor<double>({3}), r2, x),
                          "layer_norm_backward: argument 'mean.shape()' = [3]");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_backward(x, c3, r2, c3, x), "argument 'rstd.shape()' = [3]");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_backward(x, r2, r2, r2, x), "argument 'gamma.shape()' = [2]");
  EXPECT_INVALID_ARGUMENT(ref::layer_norm_backward(x, c3, r2, r2, HostTensor<double>({3, 2})),
                          "argument 'dy.shape()' = [3, 2]");
}

// -------------------------------------------------------------------- GELU -----

TEST(GeluTanh, WorkedExamples) {
  // x = 1: u = sqrt(2/pi) (1 + 0.044715) = 0.79788456 * 1.044715 = 0.83356197,
  //   tanh(u) = 0.68238398, gelu = (1/2)(1 + 0.68238398) = 0.84119199.
  // x = -1: u and tanh(u) change sign, gelu = (-1/2)(1 - 0.68238398) = -0.15880801.
  // x = 0: gelu = 0, and the slope is (1 + tanh 0)/2 = 1/2.
  const auto y = ref::gelu_tanh(matrix({{1, -1, 0}}));
  EXPECT_NEAR(y({0, 0}), 0.84119199, 1e-8);
  EXPECT_NEAR(y({0, 1}), -0.15880801, 1e-8);
  EXPECT_EQ(y({0, 2}), 0.0);
  EXPECT_EQ(ref::gelu_tanh_backward(matrix({{0}}), matrix({{3}}))({0, 0}), 1.5);  // 3 * 1/2
}

TEST(GeluTanh, OddPartIsTheIdentityAndTailsAreReluLike) {
  // gelu(x) - gelu(-x) = x/2 (1 + t) + x/2 (1 - t) = x exactly, t being odd in x.
  // Far out, tanh saturates: gelu(x) -> x for x >> 0 and -> 0 for x << 0.
  const std::uint64_t seed = test_seed();
  const auto x = random_double({4, 7}, seed, -5.0, 5.0);
  HostTensor<double> minus_x(x.shape());
  x.for_each_index([&](const std::vector<std::int64_t>& i) { minus_x.at(i) = -x.at(i); });
  const auto a = ref::gelu_tanh(x), b = ref::gelu_tanh(minus_x);
  x.for_each_index([&](const std::vector<std::int64_t>& i) { EXPECT_NEAR(a.at(i) - b.at(i), x.at(i), 1e-14); });
  const auto tails = ref::gelu_tanh(matrix({{10, -10}}));
  EXPECT_NEAR(tails({0, 0}), 10.0, 1e-12);
  EXPECT_NEAR(tails({0, 1}), 0.0, 1e-12);
}

TEST(GeluTanh, BackwardMatchesFiniteDifferences) {
  // A 3-D tensor with permuted strides: the references are elementwise over any layout.
  const std::uint64_t seed = test_seed();
  HostTensor<double> x({2, 3, 4}, {1, 8, 2});
  course::fill_random(x, seed, -4.0, 4.0);
  const auto w = random_double({2, 3, 4}, seed + 1);
  expect_gradient("gelu dx", x, [&](const HostTensor<double>& xx) { return weighted_sum(w, ref::gelu_tanh(xx)); },
                  ref::gelu_tanh_backward(x, w));
}

TEST(GeluTanh, FloatAgreesWithDouble) {
  const std::uint64_t seed = test_seed();
  const auto x = random_double({3, 50}, seed, -6.0, 6.0), dy = random_double({3, 50}, seed + 1);
  const auto xf = x.cast<float>(), dyf = dy.cast<float>();
  EXPECT_MATCHES(course::compare(ref::gelu_tanh(xf), ref::gelu_tanh(xf.cast<double>()), {1e-6, 1e-6}));
  EXPECT_MATCHES(course::compare(ref::gelu_tanh_backward(xf, dyf),
                                 ref::gelu_tanh_backward(xf.cast<double>(), dyf.cast<double>()), {1e-6, 1e-6}));
}

TEST(GeluTanh, BadArgumentsAreNamed) {
  EXPECT_INVALID_ARGUMENT(ref::gelu_tanh_backward(HostTensor<double>({2, 3}), HostTensor<double>({3, 2})),
                          "gelu_tanh_backward: argument 'dy.shape()' = [3, 2]");
}

// ----------------------------------------------------------- cross-entropy -----

TEST(CrossEntropy, WorkedExample) {
  // Row 0: logits [ln 1, ln 2, ln 5]: exp gives [1 2 5], sum 8, p = [1/8 2/8 5/8];
  //   target 2: loss = -ln(5/8) = ln 1.6 = 0.47000363.
  // Row 1: logits [1 1 1]: p = [1/3 1/3 1/3]; target 0: loss = ln 3 = 1.09861229.
  // Row 2: target -100 = ignore_index: no loss, zero gradient, not counted.
  // Mean over the N = 2 counted rows: (ln 1.6 + ln 3) / 2 = ln(4.8) / 2 = 0.78430796.
  // dlogits = (p - onehot) / 2:  row 0 [1/16, 1/8, -3/16],  row 1 [-1/3, 1/6, 1/6],  row 2 0.
  const auto logits = matrix({{0, std::log(2.0), std::log(5.0)}, {1, 1, 1}, {3, -2, 0.5}});
  const auto r = ref::cross_entropy(logits, {2, 0, -100});
  EXPECT_EQ(r.counted, 2);
  EXPECT_NEAR(r.loss, std::log(4.8) / 2, 1e-15);
  EXPECT_NEAR(r.loss, 0.78430796, 1e-8);
  EXPECT_NEAR(r.row_loss[0], std::log(1.6), 1e-15);
  EXPECT_NEAR(r.row_loss[1], std::log(3.0), 1e-15);
  EXPECT_EQ(r.row_loss[2], 0.0);
  EXPECT_MATCHES(course::compare(
      r.dlogits, matrix({{1.0 / 16, 1.0 / 8, -3.0 / 16}, {-1.0 / 3, 1.0 / 6, 1.0 / 6}, {0, 0, 0}}), {1e-15, 0}));
}

TEST(CrossEntropy, GradientRowsSumToZeroAndSoftmaxSumsToOne) {
  // dlogits = (p - onehot) / N: a row sums to (1 - 1) / N = 0, and N * dlogits + onehot
  // recovers the softmax, which sums to 1 with every entry in (0, 1).
  const std::uint64_t seed = test_seed();
  const std::int64_t rows = 6, V = 84;
  const auto logits = random_double({rows, V}, seed, -8.0, 8.0);
  const std::vector<std::int32_t> targets{0, 83, -100, 41, 7, -100};
  const auto r = ref::cross_entropy(logits, targets);
  ASSERT_EQ(r.counted, 4);
  for (std::int64_t i = 0; i < rows; ++i) {
    double grad_sum = 0, p_sum = 0;
    for (std::int64_t j = 0; j < V; ++j) {
      grad_sum += r.dlogits({i, j});
      if (targets[i] == -100) {
        EXPECT_EQ(r.dlogits({i, j}), 0.0) << "ignored row " << i;
        continue;
      }
      const double p = r.counted * r.dlogits({i, j}) + (j == targets[i] ? 1.0 : 0.0);
      EXPECT_GT(p, 0.0);
      EXPECT_LT(p, 1.0);
      p_sum += p;
    }
    EXPECT_NEAR(grad_sum, 0.0, 1e-15) << "row " << i;
    if (targets[i] != -100) {
      EXPECT_NEAR(p_sum, 1.0, 1e-13) << "row " << i;
    }
  }
}

TEST(CrossEntropy, ShiftInvariantAndStableForHugeLogits) {
  // Adding a constant to a row changes neither p nor the loss; the max subtraction keeps
  // logits near 1e4 finite (exp(1e4) alone would overflow).
  const std::uint64_t seed = test_seed();
  const auto logits = random_double({3, 10}, seed);
  HostTensor<double> shifted = logits;
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = 0; j < 10; ++j) shifted({i, j}) += 1e4 * (i + 1);
  const std::vector<std::int32_t> t{4, 9, 0};
  const auto a = ref::cross_entropy(logits, t), b = ref::cross_entropy(shifted, t);
  EXPECT_NEAR(b.loss, a.loss, 1e-11);
  EXPECT_MATCHES(course::compare(b.dlogits, a.dlogits, {1e-12, 0}));
}

TEST(CrossEntropy, MatchesFiniteDifferences) {
  const std::uint64_t seed = test_seed();
  for (auto [rows, V] : {std::pair{4, 5}, {1, 1}, {3, 17}}) {
    const auto logits = column_major(random_double({rows, V}, seed + V, -3.0, 3.0));
    std::vector<std::int32_t> targets;
    for (std::int64_t i = 0; i < rows; ++i)
      targets.push_back(i == 1 ? -100 : static_cast<std::int32_t>((7 * i + 3) % V));  // row 1 ignored
    const auto r = ref::cross_entropy(logits, targets);
    expect_gradient("dlogits [" + std::to_string(rows) + ", " + std::to_string(V) + "]", logits,
                    [&](const HostTensor<double>& z) { return ref::cross_entropy(z, targets).loss; }, r.dlogits);
  }
}

TEST(CrossEntropy, IgnoreIndexCases) {
  const std::uint64_t seed = test_seed();
  const auto logits = random_double({3, 4}, seed);
  // Every row ignored: nothing to average, loss 0 and dlogits 0 (PyTorch gives NaN here).
  const auto none = ref::cross_entropy(logits, {-100, -100, -100});
  EXPECT_EQ(none.counted, 0);
  EXPECT_EQ(none.loss, 0.0);
  for (double g : none.dlogits.storage()) EXPECT_EQ(g, 0.0);
  // No rows at all: the same.
  const auto empty = ref::cross_entropy(HostTensor<double>({0, 4}), {});
  EXPECT_EQ(empty.counted, 0);
  EXPECT_EQ(empty.loss, 0.0);
  // A custom ignore_index (-1, module 4's training convention), and one inside [0, V)
  // (PyTorch allows it: that class is never a target). -100 is then an out-of-range target.
  const auto a = ref::cross_entropy(logits, {1, -1, 3}, -1);
  const auto b = ref::cross_entropy(logits, {1, 2, 3}, 2);
  EXPECT_EQ(a.counted, 2);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_MATCHES(course::compare(a.dlogits, b.dlogits, {0, 0}));
  EXPECT_EQ(a.loss, (a.row_loss[0] + a.row_loss[2]) / 2);
  EXPECT_INVALID_ARGUMENT(ref::cross_entropy(logits, {1, -100, 3}, -1), "argument 'targets[1]' = -100");
}

TEST(CrossEntropy, FloatAgreesWithDouble) {
  const std::uint64_t seed = test_seed();
  const auto logits = random_double({5, 300}, seed, -10.0, 10.0);
  const std::vector<std::int32_t> t{299, 0, -100, 150, 3};
  const auto f = ref::cross_entropy(logits.cast<float>(), t);
  const auto d = ref::cross_entropy(logits.cast<float>().cast<double>(), t);
  EXPECT_NEAR(f.loss, d.loss, 1e-12);  // the loss is a double in both
  EXPECT_MATCHES(course::compare(f.dlogits, d.dlogits, {1e-9, 1e-6}));
}

TEST(CrossEntropy, BadArgumentsAreNamed) {
  const HostTensor<double> z({3, 4});
  EXPECT_INVALID_ARGUMENT(ref::cross_entropy(HostTensor<double>({12}), {0}), "cross_entropy: argument 'logits.shape()' = [12]");
  EXPECT_INVALID_ARGUMENT(ref::cross_entropy(HostTensor<double>({3, 0}), {0, 0, 0}),
                          "argument 'logits.shape()' = [3, 0]: must have at least one class");
  EXPECT_INVALID_ARGUMENT(ref::cross_entropy(z, {0, 1}), "argument 'targets.size()' = 2");
  EXPECT_INVALID_ARGUMENT(ref::cross_entropy(z, {0, 4, 1}), "argument 'targets[1]' = 4: must be in [0, 4)");
  EXPECT_INVALID_ARGUMENT(ref::cross_entropy(z, {0, 1, -1}), "argument 'targets[2]' = -1");
}

// ------------------------------------------------------------------- AdamW -----

TEST(AdamW, WorkedExampleTwoSteps) {
  // lr 0.1, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.1; p = 1, m = v = 0.
  // Step 1, g = 0.5:
  //   decay   p = 1 * (1 - 0.1 * 0.1) = 0.99
  //   moments m = 0.1 * 0.5 = 0.05,  v = 0.001 * 0.25 = 0.00025
  //   bias    mhat = 0.05 / (1 - 0.9) = 0.5,  vhat = 0.00025 / (1 - 0.999) = 0.25, sqrt 0.5
  //   update  p = 0.99 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.99 - 0.099999998 = 0.890000002
  //   (decaying after the update instead would give (1 - 0.1) * 0.99 = 0.891.)
  // Step 2, g = -0.5:
  //   decay   p = 0.890000002 * 0.99 = 0.88110000198
  //   moments m = 0.9 * 0.05 - 0.05 = -0.005,  v = 0.999 * 0.00025 + 0.00025 = 0.00049975
  //   bias    mhat = -0.005 / (1 - 0.81) = -0.0263157895,  vhat = 0.00049975 / (1 - 0.998001) = 0.25
  //   update  p = 0.88110000198 + 0.1 * 0.0263157895 / (0.5 + 1e-8) = 0.88636315977
  std::vector<double> p{1.0}, m{0.0}, v{0.0};
  ref::adamw_step(p, {0.5}, m, v, 1, 0.1, 0.9, 0.999, 1e-8, 0.1);
  EXPECT_NEAR(p[0], 0.890000002, 1e-15);
  EXPECT_NEAR(m[0], 0.05, 1e-16);
  EXPECT_NEAR(v[0], 0.00025, 1e-18);
  ref::adamw_step(p, {-0.5}, m, v, 2, 0.1, 0.9, 0.999, 1e-8, 0.1);
  EXPECT_NEAR(m[0], -0.005, 1e-16);
  EXPECT_NEAR(v[0], 0.00049975, 1e-18);
  EXPECT_NEAR(p[0], 0.88636315977, 1e-11);
}

TEST(AdamW, FirstStepMovesByAboutLrAgainstTheGradient) {
  // With m = v = 0 the bias correction makes mhat = g and vhat = g^2 on step 1, so
  // the update is lr * g / (|g| + eps): about lr * sign(g), whatever the gradient's size.
  const std::uint64_t seed = test_seed();
  const std::size_t n = 200;
  const double lr = 3e-4, eps = 1e-8;
  auto p = course::random_vector(n, seed), g = course::random_vector(n, seed + 1, -10.f, 10.f);
  std::vector<double> pd(p.begin(), p.end()), gd(g.begin(), g.end()), m(n, 0.0), v(n, 0.0);
  for (auto& x : gd) x = std::fabs(x) < 1e-3 ? 1e-3 : x;  // keep |g| >> eps
  const std::vector<double> before = pd;
  ref::adamw_step(pd, gd, m, v, 1, lr, 0.9, 0.999, eps, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double moved = pd[i] - before[i];
    EXPECT_NEAR(moved, -lr * (gd[i] > 0 ? 1.0 : -1.0), lr * eps / std::fabs(gd[i]) + 1e-15) << "element " << i;
  }
}

TEST(AdamW, DecayIsDecoupledFromTheGradient) {
  // g = 0 leaves m = v = 0 and the Adam update 0 / (0 + eps) = 0: only the decay acts,
  // p * (1 - lr * wd), the same factor for every weight, large or small.
  std::vector<double> p{3.0, -0.002, 50.0}, m(3, 0.0), v(3, 0.0);
  ref::adamw_step(p, std::vector<double>(3, 0.0), m, v, 1, 0.01, 0.9, 0.999, 1e-8, 0.5);
  EXPECT_NEAR(p[0], 3.0 * 0.995, 1e-15);
  EXPECT_NEAR(p[1], -0.002 * 0.995, 1e-18);
  EXPECT_NEAR(p[2], 50.0 * 0.995, 1e-13);
  EXPECT_EQ(m, std::vector<double>(3, 0.0));
  EXPECT_EQ(v, std::vector<double>(3, 0.0));
}

TEST(AdamW, FloatFollowsDoubleOverManySteps) {
  const std::uint64_t seed = test_seed();
  const std::size_t n = 64;
  auto pf = course::random_vector(n, seed);
  std::vector<float> mf(n, 0.f), vf(n, 0.f);
  std::vector<double> pd(pf.begin(), pf.end()), md(n, 0.0), vd(n, 0.0);
  for (std::int64_t t = 1; t <= 20; ++t) {
    const auto gf = course::random_vector(n, seed + 10 * t);
    ref::adamw_step(pf, gf, mf, vf, t, 1e-3, 0.9, 0.95, 1e-8, 0.1);
    ref::adamw_step(pd, std::vector<double>(gf.begin(), gf.end()), md, vd, t, 1e-3, 0.9, 0.95, 1e-8, 0.1);
  }
  EXPECT_MATCHES(course::compare(pf, pd, {1e-6, 1e-6}));
}

TEST(AdamW, BadArgumentsAreNamed) {
  std::vector<double> p(3, 1.0), m(3, 0.0), v(3, 0.0), short_v(2, 0.0);
  const std::vector<double> g(3, 0.1);
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, {0.1, 0.2}, m, v, 1), "adamw_step: argument 'grads.size()' = 2");
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, g, short_v, v, 1), "argument 'm.size()' = 2");
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, g, m, short_v, 1), "argument 'v.size()' = 2");
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, g, m, v, 0), "argument 'step' = 0");
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, g, m, v, 1, -1e-3), "argument 'lr' = -0.001");
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, g, m, v, 1, 1e-3, 1.0), "argument 'beta1' = 1");
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, g, m, v, 1, 1e-3, 0.9, -0.1), "argument 'beta2' = -0.1");
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, g, m, v, 1, 1e-3, 0.9, 0.999, 0.0), "argument 'eps' = 0");
  EXPECT_INVALID_ARGUMENT(ref::adamw_step(p, g, m, v, 1, 1e-3, 0.9, 0.999, 1e-8, -0.01),
                          "argument 'weight_decay' = -0.01");
  EXPECT_EQ(p, std::vector<double>(3, 1.0));  // a rejected call changes nothing
}

}  // namespace
