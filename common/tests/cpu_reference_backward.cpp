// CPU tests of the backward references against central finite differences (double),
// and of the gradient checker itself.
//
// Every check uses a scalar loss L = sum(W * output) with random W, so dL/doutput = W
// and the analytic gradient is the backward reference applied to W.

#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "cpu_test_util.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace {

using course::AttentionLayout;
using course::HostTensor;
using course::testing::test_seed;
namespace ref = course::ref;
using course::testing::flatten;
using course::testing::random_double;
using course::testing::unflatten;
using course::testing::weighted_sum;

// Central differences in double with h = 1e-6 are accurate to ~1e-10 here.
constexpr double kH = 1e-6, kAtol = 1e-8, kRtol = 1e-6;


/// Checks `analytic` = dL/dx for L(x) = loss(x), printing the result on failure.
void expect_gradient(const char* what, const HostTensor<double>& x,
                     const std::function<double(const HostTensor<double>&)>& loss,
                     const HostTensor<double>& analytic) {
  ASSERT_EQ(analytic.shape(), x.shape()) << what;
  const auto r = ref::check_gradient([&](const std::vector<double>& v) { return loss(unflatten(x, v)); },
                                     flatten(x), flatten(analytic), kH, kAtol, kRtol);
  EXPECT_TRUE(r.ok) << what << ": max abs err " << r.max_abs_error << ", max rel err " << r.max_rel_error
                    << " at flat index " << r.worst_index;
  EXPECT_LT(r.max_abs_error, 1e-8) << what;
}

// ---------------------------------------------------------- gradient check -----

TEST(GradCheck, NumericalGradientOfKnownFunction) {
  // f(x) = sum x_i^3 + x_0 x_1  =>  g_i = 3 x_i^2 (+ x_1 or x_0).
  const std::vector<double> x{0.5, -1.25, 2.0};
  auto f = [](const std::vector<double>& v) { return v[0] * v[0] * v[0] + v[1] * v[1] * v[1] + v[2] * v[2] * v[2] + v[0] * v[1]; };
  const auto g = ref::numerical_gradient(f, x);
  EXPECT_NEAR(g[0], 3 * 0.25 - 1.25, 1e-8);
  EXPECT_NEAR(g[1], 3 * 1.5625 + 0.5, 1e-8);
  EXPECT_NEAR(g[2], 12.0, 1e-8);
  const auto r = ref::check_gradient(f, x, {3 * 0.25 - 1.25, 3 * 1.5625 + 0.5, 12.0});
  EXPECT_TRUE(r.ok);
  EXPECT_LT(r.max_abs_error, 1e-8);
}

TEST(GradCheck, RejectsAWrongGradientAndNamesTheElement) {
  const std::vector<double> x{0.3, -0.7, 1.1, 0.2};
  auto f = [](const std::vector<double>& v) { double s = 0; for (double e : v) s += e * e; return s; };
  std::vector<double> g{0.6, -1.4, 2.2, 0.4};
  EXPECT_TRUE(ref::check_gradient(f, x, g).ok);
  g[2] += 1e-4;  // a small but real error
  const auto r = ref::check_gradient(f, x, g);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst_index, 2);
  EXPECT_NEAR(r.max_abs_error, 1e-4, 1e-8);
  g[2] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(ref::check_gradient(f, x, g).ok);
}

TEST(GradCheck, BadArgumentsAreNamed) {
  auto f = [](const std::vector<double>& v) { return v[0]; };
  EXPECT_INVALID_ARGUMENT(ref::numerical_gradient(f, {1.0}, 0.0), "numerical_gradient: argument 'h' = 0");
  EXPECT_INVALID_ARGUMENT(ref::check_gradient(f, {1.0}, {1.0, 2.0}), "argument 'analytic.size()' = 2");
  EXPECT_INVALID_ARGUMENT(ref::check_gradient(f, {}, {}), "argument 'x.size()' = 0");
  EXPECT_INVALID_ARGUMENT(ref::check_gradient(f, {1.0}, {1.0}, 1e-6, -1.0), "argument 'atol' = -1");
  EXPECT_INVALID_ARGUMENT(ref::numerical_gradient(nullptr, {1.0}), "argument 'f'");
}

// ---------------------------------------------------------------- softmax -----

TEST(SoftmaxBackward, MatchesFiniteDifferencesBothDims) {
  const auto x = random_double({4, 6}, test_seed());
  const auto w = random_double({4, 6}, test_seed() + 1);
  for (int dim : {0, 1}) {
    const auto y = ref::softmax(x, dim);
    const auto dx = ref::softmax_backward(y, w, dim);
    expect_gradient(dim == 0 ? "softmax dim 0" : "softmax dim 1", x,
                    [&](const HostTensor<double>& xx) { return weighted_sum(w, ref::softmax(xx, dim)); }, dx);
  }
}

TEST(SoftmaxBackward, NonContiguousInputsAgree) {
  const auto x = random_double({5, 3}, test_seed());
  const auto w = random_double({5, 3}, test_seed() + 1);
  const auto y = ref::softmax(x, 1);
  HostTensor<double> yt({5, 3}, {1, 5}), wt({5, 3}, {1, 5});  // column-major copies
  course::testing::copy_values(y, yt);
  course::testing::copy_values(w, wt);
  EXPECT_MATCHES(course::compare(ref::softmax_backward(yt, wt, 1), ref::softmax_backward(y, w, 1), {0, 0}));
}

// ----------------------------------------------------------------- matmul -----

TEST(MatmulBackward, MatchesFiniteDifferences) {
  for (auto [M, K, N] : {std::tuple{4, 3, 5}, {1, 7, 2}, {6, 1, 3}}) {
    const auto a = random_double({M, K}, test_seed() + M);
    const auto b = random_double({K, N}, test_seed() + 10 + N);
    const auto w = random_double({M, N}, test_seed() + 20);
    const auto g = ref::matmul_backward(a, b, w);
    expect_gradient("matmul dA", a, [&](const HostTensor<double>& aa) { return weighted_sum(w, ref::matmul(aa, b)); },
                    g.da);
    expect_gradient("matmul dB", b, [&](const HostTensor<double>& bb) { return weighted_sum(w, ref::matmul(a, bb)); },
                    g.db);
  }
}

TEST(MatmulBackward, BadShapesAreNamed) {
  const HostTensor<double> a({2, 3}), b({3, 4});
  EXPECT_INVALID_ARGUMENT(ref::matmul_backward(a, b, HostTensor<double>({2, 5})), "argument 'dc.shape()' = [2, 5]");
  EXPECT_INVALID_ARGUMENT(ref::matmul_backward(a, HostTensor<double>({4, 4}), HostTensor<double>({2, 4})),
                          "matmul_backward: argument 'b.shape()' = [4, 4]");
  EXPECT_INVALID_ARGUMENT(ref::matmul_backward(HostTensor<double>({2}), b, HostTensor<double>({2, 4})),
                          "argument 'a.shape()' = [2]");
}

// -------------------------------------------------------------- attention -----

struct BwdCase {
  const char* name;
  std::int64_t B, H, Hkv, Nq, Nk, d;
  bool causal;
  double scale;
};
/// gtest prints parameters in test names: keep them readable.
void PrintTo(const BwdCase& c, std::ostream* os) { *os << c.name; }

class AttentionBackward : public ::testing::TestWithParam<BwdCase> {};

TEST_P(AttentionBackward, MatchesFiniteDifferences) {
  const BwdCase c = GetParam();
  auto make = [&](std::int64_t H, std::int64_t N, std::uint64_t s, AttentionLayout layout) {
    auto t = HostTensor<double>::attention(c.B, H, N, c.d, layout);
    course::fill_random(t, test_seed() + s, -1.5, 1.5);
    return t;
  };
  const auto q = make(c.H, c.Nq, 0, AttentionLayout::BNHD);  // strided inputs on purpose
  const auto k = make(c.Hkv, c.Nk, 1, AttentionLayout::BHND);
  const auto v = make(c.Hkv, c.Nk, 2, AttentionLayout::BNHD);
  const auto w = make(c.H, c.Nq, 3, AttentionLayout::BHND);
  ref::AttentionOptions opts;
  opts.causal = c.causal;
  opts.scale = c.scale;
  const auto g = ref::attention_backward(q, k, v, w, opts);
  EXPECT_EQ(g.dq.shape(), q.shape());
  EXPECT_EQ(g.dk.shape(), k.shape());
  EXPECT_EQ(g.dv.shape(), v.shape());
  expect_gradient("dQ", q, [&](const HostTensor<double>& x) { return weighted_sum(w, ref::attention_forward(x, k, v, opts).out); }, g.dq);
  expect_gradient("dK", k, [&](const HostTensor<double>& x) { return weighted_sum(w, ref::attention_forward(q, x, v, opts).out); }, g.dk);
  expect_gradient("dV", v, [&](const HostTensor<double>& x) { return weighted_sum(w, ref::attention_forward(q, k, x, opts).out); }, g.dv);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionBackward,
    ::testing::Values(BwdCase{"plain", 2, 2, 2, 4, 5, 3, false, 0.0},
                      BwdCase{"causal_square", 1, 2, 2, 5, 5, 3, true, 0.0},
                      BwdCase{"causal_NqLtNk", 2, 1, 1, 3, 6, 4, true, 0.0},
                      BwdCase{"causal_NqGtNk_masked_rows", 1, 2, 2, 6, 4, 3, true, 0.0},
                      BwdCase{"gqa", 2, 4, 2, 3, 5, 3, false, 0.0},
                      BwdCase{"gqa_causal_scale", 1, 6, 2, 4, 4, 2, true, 0.8},
                      BwdCase{"mqa", 1, 3, 1, 4, 3, 5, false, 0.0}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(AttentionBackwardArgs, FullyMaskedRowsGetZeroGradient) {
  auto q = HostTensor<double>::attention(1, 1, 4, 3, AttentionLayout::BHND);
  auto k = HostTensor<double>::attention(1, 1, 2, 3, AttentionLayout::BHND);
  course::fill_random(q, test_seed());
  course::fill_random(k, test_seed() + 1);
  ref::AttentionOptions opts;
  opts.causal = true;  // rows 0 and 1 see no key
  const auto g = ref::attention_backward(q, k, k, q, opts);
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t c = 0; c < 3; ++c) EXPECT_EQ(g.dq({0, 0, i, c}), 0.0);
  for (double x : g.dq.storage()) EXPECT_TRUE(std::isfinite(x));
}

TEST(AttentionBackwardArgs, BadArgumentsAreNamed) {
  const HostTensor<double> q({1, 4, 3, 2}), k({1, 2, 5, 2}), k3({1, 3, 5, 2});
  EXPECT_INVALID_ARGUMENT(ref::attention_backward(q, k, k, HostTensor<double>({1, 4, 3, 3})),
                          "attention_backward: argument 'dout.shape()' = [1, 4, 3, 3]");
  EXPECT_INVALID_ARGUMENT(ref::attention_backward(q, k3, k3, q), "attention_backward: argument 'H_kv' = 3");
  EXPECT_INVALID_ARGUMENT(ref::attention_backward(q, k, k3, q), "argument 'v.shape()' = [1, 3, 5, 2]");
}

}  // namespace
