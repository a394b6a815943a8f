// Tests of the linear layer's backward pass (dX = dY W^T, dW = X^T dY, db = column sums of
// dY), run against course::solution and course::exercise (built twice; `impl` names the
// one under test) for both bias-gradient steps, and against the planted bugs of
// tests/planted/linear_backward_planted.cu, which the same check must reject.
//
// Every case draws fresh random X, W, dY (seeded, seed printed), fills the padding of the
// inputs' rows with a large sentinel (a kernel that reads it is visibly wrong), poisons
// the outputs' whole storage with NaN, and compares each requested gradient with the CPU
// references (course::ref::matmul_backward in double, and a double column sum) within
// tolerance_for(); the padding of the outputs must still hold the poison afterwards.
// Tests with "Large" in their name use big shapes and are left out of the sanitizer run.
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "linear_backward_planted.hpp"
#include "module04/linear_backward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::HostTensor;
using course::m04::BiasGradStep;
using course::m04::LinearBackwardArgs;
using course::testing::GpuTest;

/// Anything with the op's signature: impl::linear_backward or a planted bug.
using LinearBackwardFn = std::function<void(BiasGradStep, const LinearBackwardArgs&)>;

/// The padding between rows of X, W and dY holds this.
constexpr float kPadSentinel = 1000.f;

/// How a case passes its row strides.
enum class Lds {
  zero,    ///< every ld = 0: "dense", resolved by the API
  dense,   ///< every ld = its row length, passed explicitly
  padded,  ///< every ld = row length + its own pad (odd pads break every vector path)
};

/// One problem: sizes, row strides, which gradients are requested.
struct Case {
  std::int64_t M = 1, K = 1, N = 1;
  Lds lds = Lds::dense;
  std::int64_t pad_x = 3, pad_w = 5, pad_dy = 1, pad_dx = 7, pad_dw = 4;  ///< used when lds == padded
  bool want_dx = true, want_dw = true, want_db = true;
  float lo = -1.f, hi = 1.f;  ///< range of dY's values

  std::int64_t ld(std::int64_t cols, std::int64_t pad) const { return lds == Lds::padded ? cols + pad : cols; }
  std::int64_t ldx() const { return ld(K, pad_x); }
  std::int64_t ldw() const { return ld(N, pad_w); }
  std::int64_t lddy() const { return ld(N, pad_dy); }
  std::int64_t lddx() const { return ld(K, pad_dx); }
  std::int64_t lddw() const { return ld(N, pad_dw); }
  std::string str() const {
    std::ostringstream os;
    os << "M=" << M << " K=" << K << " N=" << N << " lds="
       << (lds == Lds::zero ? "0 (dense)" : lds == Lds::dense ? "dense" : "padded") << " (x " << ldx() << ", w "
       << ldw() << ", dy " << lddy() << ", dx " << lddx() << ", dw " << lddw() << ")"
       << " outputs:" << (want_dx ? " dx" : "") << (want_dw ? " dw" : "") << (want_db ? " db" : "");
    return os.str();
  }
};

/// A rows x cols matrix of `values` (row-major, dense) stored with row stride ld; the
/// padding holds kPadSentinel.
std::vector<float> padded_storage(const std::vector<float>& values, std::int64_t rows, std::int64_t cols,
                                  std::int64_t ld) {
  std::vector<float> s(static_cast<std::size_t>((rows - 1) * ld + cols), kPadSentinel);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(values.begin() + r * cols, cols, s.begin() + r * ld);
  return s;
}

std::uint32_t bits_of(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

/// The host data of a case and its references (double).
struct Problem {
  Case cs;
  std::vector<float> x, w, dy;  ///< dense values
  HostTensor<double> ref_dx, ref_dw;
  std::vector<double> ref_db;
};

HostTensor<double> dense_tensor(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  HostTensor<double> t({rows, cols});
  for (std::size_t i = 0; i < v.size(); ++i) t.storage()[i] = v[i];
  return t;
}

/// db[j] = sum_i dy[i, j], in double (independent of the kernels' summation order).
std::vector<double> column_sums(const std::vector<float>& dy, std::int64_t M, std::int64_t N) {
  std::vector<double> s(static_cast<std::size_t>(N), 0.0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) s[static_cast<std::size_t>(j)] += dy[static_cast<std::size_t>(i * N + j)];
  return s;
}

Problem make_problem(const Case& cs, std::uint64_t seed) {
  Problem p;
  p.cs = cs;
  p.x = course::random_vector(static_cast<std::size_t>(cs.M * cs.K), seed);
  p.w = course::random_vector(static_cast<std::size_t>(cs.K * cs.N), seed ^ 0x9e3779b97f4a7c15ull);
  p.dy = course::random_vector(static_cast<std::size_t>(cs.M * cs.N), seed + 17, cs.lo, cs.hi);
  const auto grads = course::ref::matmul_backward(dense_tensor(p.x, cs.M, cs.K), dense_tensor(p.w, cs.K, cs.N),
                                                  dense_tensor(p.dy, cs.M, cs.N));
  p.ref_dx = grads.da;  // dY W^T
  p.ref_dw = grads.db;  // X^T dY
  p.ref_db = column_sums(p.dy, cs.M, cs.N);
  return p;
}

/// What came back from the device: each output's whole storage (empty if not requested).
struct Result {
  std::vector<float> dx, dw, db;
};

Result run_on_device(const LinearBackwardFn& fn, BiasGradStep step, const Problem& p) {
  const Case& c = p.cs;
  DeviceBuffer<float> x(padded_storage(p.x, c.M, c.K, c.ldx()));
  DeviceBuffer<float> w(padded_storage(p.w, c.K, c.N, c.ldw()));
  DeviceBuffer<float> dy(padded_storage(p.dy, c.M, c.N, c.lddy()));
  DeviceBuffer<float> dx(c.want_dx ? static_cast<std::size_t>((c.M - 1) * c.lddx() + c.K) : 0);
  DeviceBuffer<float> dw(c.want_dw ? static_cast<std::size_t>((c.K - 1) * c.lddw() + c.N) : 0);
  DeviceBuffer<float> db(c.want_db ? static_cast<std::size_t>(c.N) : 0);
  dx.poison();
  dw.poison();
  db.poison();
  LinearBackwardArgs a = course::m04::make_linear_backward_args(
      x.data(), w.data(), dy.data(), c.want_dx ? dx.data() : nullptr, c.want_dw ? dw.data() : nullptr,
      c.want_db ? db.data() : nullptr, c.M, c.K, c.N);
  if (c.lds == Lds::zero) {
    a.ldx = a.ldw = a.lddy = a.lddx = a.lddw = 0;
  } else {
    a.ldx = c.ldx();
    a.ldw = c.ldw();
    a.lddy = c.lddy();
    a.lddx = c.lddx();
    a.lddw = c.lddw();
  }
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  Result r;
  if (c.want_dx) r.dx = dx.download();
  if (c.want_dw) r.dw = dw.download();
  if (c.want_db) r.db = db.download();
  return r;
}

/// Compares one rows x cols output (storage with row stride ld) with its reference; the
/// padding must still hold the poison. Returns "" when right, else a report.
std::string judge_matrix(const char* name, const std::vector<float>& got, std::int64_t rows, std::int64_t cols,
                         std::int64_t ld, const HostTensor<double>& ref, std::int64_t reduction_length) {
  HostTensor<float> g({rows, cols}, {ld, 1});
  std::copy_n(got.begin(), g.storage().size(), g.storage().begin());
  const double scale = std::max(1.0, course::rms(ref));
  const auto cmp = course::compare(g, ref, course::tolerance_for(course::DType::f32, reduction_length, scale),
                                   {"row", "col"});
  std::ostringstream os;
  if (!cmp.ok()) os << name << ": " << cmp.report();
  std::int64_t stray = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = cols; c < ld && r * ld + c < static_cast<std::int64_t>(got.size()); ++c)
      if (bits_of(got[static_cast<std::size_t>(r * ld + c)]) != 0xFFFFFFFFu) ++stray;
  if (stray) os << (os.tellp() > 0 ? "; " : "") << name << ": " << stray << " writes into the row padding";
  return os.str();
}

std::string judge(const Problem& p, const Result& r) {
  const Case& c = p.cs;
  std::string out;
  const auto add = [&](const std::string& s) {
    if (!s.empty()) out += (out.empty() ? "" : "\n    ") + s;
  };
  if (c.want_dx) add(judge_matrix("dX", r.dx, c.M, c.K, c.lddx(), p.ref_dx, c.N));
  if (c.want_dw) add(judge_matrix("dW", r.dw, c.K, c.N, c.lddw(), p.ref_dw, c.M));
  if (c.want_db) {
    HostTensor<double> ref({1, c.N});
    std::copy(p.ref_db.begin(), p.ref_db.end(), ref.storage().begin());
    add(judge_matrix("db", r.db, 1, c.N, c.N, ref, c.M));
  }
  return out;
}

/// THE check, shared by the real tests and the planted-bug tests: every case on fresh
/// random data (seed + case index). course::NotImplemented propagates (callers wrap it
/// in COURSE_SKIP_IF_NOT_IMPLEMENTED).
::testing::AssertionResult check_cases(const LinearBackwardFn& fn, BiasGradStep step, const std::vector<Case>& cases,
                                       std::uint64_t seed) {
  std::ostringstream failures;
  int failed = 0;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Problem p = make_problem(cases[k], seed + 101 * k);
    const std::string verdict = judge(p, run_on_device(fn, step, p));
    if (!verdict.empty()) {
      ++failed;
      failures << "\n  [" << cases[k].str() << "]:\n    " << verdict;
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << course::m04::step_name(step) << ": " << failed << " of " << cases.size()
                                       << " cases failed (seed " << seed << "):" << failures.str();
}

LinearBackwardFn impl_under_test() { return &impl::linear_backward; }

class LinearBackwardTest : public GpuTest,
                           public ::testing::WithParamInterface<course::StepInfo<BiasGradStep>> {};

// ---- the worked example (also in the lesson): exact small integers.

TEST_P(LinearBackwardTest, WorkedExampleIsExact) {
  // X [3, 2], W [2, 3], dY [3, 3]: dY's column sums (2, 4, 3) differ from its row sums
  // (3, 2, 4), and X dY != X^T dY, so each classic mistake changes the answer.
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<float> w = {1, 0, -1, 2, 1, 0};
  const std::vector<float> dy = {1, 0, 2, 0, 1, 1, 1, 3, 0};
  const std::vector<float> want_dx = {-1, 2, -1, 1, 1, 5};        // dY W^T, 3 x 2
  const std::vector<float> want_dw = {6, 18, 5, 8, 22, 8};        // X^T dY, 2 x 3
  const std::vector<float> want_db = {2, 4, 3};                   // column sums of dY
  const auto ref = course::ref::matmul_backward(dense_tensor(x, 3, 2), dense_tensor(w, 2, 3), dense_tensor(dy, 3, 3));
  for (std::size_t i = 0; i < want_dx.size(); ++i) ASSERT_EQ(ref.da.storage()[i], want_dx[i]) << "reference dX";
  for (std::size_t i = 0; i < want_dw.size(); ++i) ASSERT_EQ(ref.db.storage()[i], want_dw[i]) << "reference dW";

  DeviceBuffer<float> dx_(6), dw_(6), db_(3), x_(x), w_(w), dy_(dy);
  dx_.poison();
  dw_.poison();
  db_.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::linear_backward(
      GetParam().step, course::m04::make_linear_backward_args(x_.data(), w_.data(), dy_.data(), dx_.data(),
                                                              dw_.data(), db_.data(), 3, 2, 3)));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(dx_.download(), want_dx);
  EXPECT_EQ(dw_.download(), want_dw);
  EXPECT_EQ(db_.download(), want_db);
}

/// Every (M, K, N) in {1, 7, 31, 33, 128, 257}^3: 1, primes, a warp +- 1, whole and
/// partial GEMM tiles (128 +- 1 lie inside 257), strips cut by N. The cases cycle through
/// ld = 0, explicit dense ld and padded (odd) ld.
TEST_P(LinearBackwardTest, AwkwardShapes) {
  const std::int64_t sizes[] = {1, 7, 31, 33, 128, 257};
  std::vector<Case> cases;
  int i = 0;
  for (std::int64_t M : sizes)
    for (std::int64_t K : sizes)
      for (std::int64_t N : sizes) {
        Case c;
        c.M = M;
        c.K = K;
        c.N = N;
        c.lds = static_cast<Lds>(i++ % 3);
        cases.push_back(c);
      }
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(impl_under_test(), GetParam().step, cases, seed())));
}

/// Row strides padded by different amounts per operand, aligned (multiples of 4: vector
/// paths stay on) and odd (every vector path falls back).
TEST_P(LinearBackwardTest, PaddedLeadingDims) {
  std::vector<Case> cases;
  for (const auto& sz : std::vector<std::vector<std::int64_t>>{{33, 65, 129}, {128, 128, 64}, {257, 31, 130}}) {
    Case odd;
    odd.M = sz[0];
    odd.K = sz[1];
    odd.N = sz[2];
    odd.lds = Lds::padded;
    cases.push_back(odd);  // pads 3, 5, 1, 7, 4
    Case aligned = odd;
    aligned.pad_x = 4;
    aligned.pad_w = 8;
    aligned.pad_dy = 4;
    aligned.pad_dx = 12;
    aligned.pad_dw = 4;
    cases.push_back(aligned);
  }
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(impl_under_test(), GetParam().step, cases, seed())));
}

/// Any subset of {dx, dw, db} may be requested; the others are null and skipped.
TEST_P(LinearBackwardTest, NullOutputsAreSkipped) {
  std::vector<Case> cases;
  for (int mask = 1; mask < 8; ++mask) {
    Case c;
    c.M = 70;
    c.K = 33;
    c.N = 45;
    c.lds = mask % 2 ? Lds::padded : Lds::dense;
    c.want_dx = mask & 1;
    c.want_dw = mask & 2;
    c.want_db = mask & 4;
    cases.push_back(c);
  }
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(impl_under_test(), GetParam().step, cases, seed())));
  // The inputs a skipped gradient needs may be null too; nothing requested is a no-op.
  DeviceBuffer<float> dy(70 * 45), db(45), dx(70 * 33), w(33 * 45);
  dy.upload(course::random_vector(70 * 45, seed()));
  EXPECT_NO_THROW(impl::linear_backward(
      GetParam().step, course::m04::make_linear_backward_args(nullptr, nullptr, dy.data(), nullptr, nullptr,
                                                              db.data(), 70, 33, 45)));
  EXPECT_NO_THROW(impl::linear_backward(
      GetParam().step, course::m04::make_linear_backward_args(nullptr, w.data(), dy.data(), dx.data(), nullptr,
                                                              nullptr, 70, 33, 45)));
  EXPECT_NO_THROW(impl::linear_backward(GetParam().step, course::m04::make_linear_backward_args(
                                                             nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                             70, 33, 45)));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
}

/// Both bias steps sum in a fixed order (no atomics): every output is bit-identical run to run.
TEST_P(LinearBackwardTest, ResultsAreDeterministic) {
  Case c;
  c.M = 3000;
  c.K = 96;
  c.N = 200;
  const Problem p = make_problem(c, seed());
  Result first, second;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(first = run_on_device(impl_under_test(), GetParam().step, p));
  second = run_on_device(impl_under_test(), GetParam().step, p);
  EXPECT_EQ(0, std::memcmp(first.dx.data(), second.dx.data(), first.dx.size() * sizeof(float))) << "dX";
  EXPECT_EQ(0, std::memcmp(first.dw.data(), second.dw.data(), first.dw.size() * sizeof(float))) << "dW";
  EXPECT_EQ(0, std::memcmp(first.db.data(), second.db.data(), first.db.size() * sizeof(float))) << "db";
}

/// Realistic sizes: a layer's full backward, long columns for the bias reduction (many
/// rounds of the strip kernel's row loop; an fp32 sum of 65536 terms), and one column.
TEST_P(LinearBackwardTest, LargeShapes) {
  std::vector<Case> cases;
  Case layer;
  layer.M = 2048;
  layer.K = 512;
  layer.N = 768;
  cases.push_back(layer);
  Case padded = layer;
  padded.M = 1500;
  padded.lds = Lds::padded;
  cases.push_back(padded);
  Case tall;  // db only: dX and dW would cost the CPU reference minutes
  tall.M = 65536;
  tall.K = 1;
  tall.N = 96;
  tall.want_dx = tall.want_dw = false;
  cases.push_back(tall);
  Case one_column = tall;
  one_column.N = 1;
  one_column.lds = Lds::padded;
  cases.push_back(one_column);
  Case positive = tall;  // same-sign data: the sums grow like M, not sqrt(M)
  positive.lo = 0.f;
  cases.push_back(positive);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(impl_under_test(), GetParam().step, cases, seed())));
}

INSTANTIATE_TEST_SUITE_P(Steps, LinearBackwardTest, ::testing::ValuesIn(course::m04::kBiasGradSteps),
                         [](const ::testing::TestParamInfo<course::StepInfo<BiasGradStep>>& info) {
                           return std::string(info.param.name);
                         });

// ---- planted bugs: the same check must reject each of them (proof that it can fail).

/// Square problems (the planted index orders stay in bounds there), dense and padded.
std::vector<Case> planted_cases() {
  std::vector<Case> cases;
  for (const std::int64_t n : {7, 33, 64}) {
    Case c;
    c.M = c.K = c.N = n;
    c.lds = n == 33 ? Lds::padded : Lds::dense;
    cases.push_back(c);
  }
  return cases;
}

class PlantedLinearBackwardTest : public GpuTest,
                                  public ::testing::WithParamInterface<course::planted::PlantedLinearBackward> {};

TEST_P(PlantedLinearBackwardTest, ChecksRejectIt) {
  const auto& bug = GetParam();
  EXPECT_FALSE(check_cases(bug.fn, BiasGradStep::block_column_strip, planted_cases(), seed()))
      << "planted bug '" << bug.name << "' passed the checks: they are too weak to catch it";
}

INSTANTIATE_TEST_SUITE_P(Bugs, PlantedLinearBackwardTest,
                         ::testing::ValuesIn(course::planted::kPlantedLinearBackwards),
                         [](const ::testing::TestParamInfo<course::planted::PlantedLinearBackward>& info) {
                           return std::string(info.param.name);
                         });

// ---- argument validation: host-side, before any launch (no GPU needed: the pointers are
// host pointers that are never dereferenced, because every call here is invalid).

/// Calls `f` and expects InvalidArgument whose message contains every one of `needles`.
template <class F>
void expect_invalid(F f, std::initializer_list<const char*> needles) {
  try {
    f();
    ADD_FAILURE() << "expected course::InvalidArgument";
  } catch (const course::NotImplemented&) {
    throw;
  } catch (const course::InvalidArgument& e) {
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

/// Valid host-side arguments (M = 5, K = 4, N = 6, dense), to break one at a time.
struct HostArgs {
  alignas(16) float x[5 * 4] = {};
  alignas(16) float w[4 * 6] = {};
  alignas(16) float dy[5 * 6] = {};
  alignas(16) float dx[5 * 4] = {};
  alignas(16) float dw[4 * 6] = {};
  alignas(16) float db[6] = {};
  LinearBackwardArgs args() { return course::m04::make_linear_backward_args(x, w, dy, dx, dw, db, 5, 4, 6); }
};

/// Calls impl::linear_backward with `a` for every step.
void all_steps(const LinearBackwardArgs& a) {
  for (const auto& info : course::m04::kBiasGradSteps) impl::linear_backward(info.step, a);
}

TEST(LinearBackwardArgsTest, ValidArgumentsAreAccepted) {
  HostArgs h;
  EXPECT_NO_THROW(course::m04::validate_linear_backward_args(h.args(), BiasGradStep::column_per_thread, "test"));
  auto a = h.args();
  a.ldx = a.ldw = a.lddy = a.lddx = a.lddw = 0;  // 0 = dense
  EXPECT_NO_THROW(course::m04::validate_linear_backward_args(a, BiasGradStep::block_column_strip, "test"));
  a = h.args();
  a.dx = a.dw = nullptr;
  a.x = a.w = nullptr;  // only db: X and W are not needed
  EXPECT_NO_THROW(course::m04::validate_linear_backward_args(a, BiasGradStep::block_column_strip, "test"));
  const auto r = course::m04::resolve_leading_dims(
      course::m04::make_linear_backward_args(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 5, 4, 6));
  EXPECT_EQ(r.ldx, 4);
  EXPECT_EQ(r.ldw, 6);
  EXPECT_EQ(r.lddy, 6);
  EXPECT_EQ(r.lddx, 4);
  EXPECT_EQ(r.lddw, 6);
}

TEST(LinearBackwardArgsTest, BadSizesAreNamed) {
  HostArgs h;
  expect_invalid([&] { auto a = h.args(); a.M = 0; all_steps(a); }, {"'M' = 0"});
  expect_invalid([&] { auto a = h.args(); a.K = -1; all_steps(a); }, {"'K' = -1"});
  expect_invalid([&] { auto a = h.args(); a.N = std::int64_t{1} << 31; all_steps(a); }, {"'N' = 2147483648"});
  expect_invalid([&] { impl::linear_backward(static_cast<BiasGradStep>(7), h.args()); }, {"'step' = 7"});
}

TEST(LinearBackwardArgsTest, NullPointersOfRequestedGradientsAreNamed) {
  HostArgs h;
  expect_invalid([&] { auto a = h.args(); a.dy = nullptr; all_steps(a); }, {"'dy' = nullptr"});
  expect_invalid([&] { auto a = h.args(); a.dy = nullptr; a.dx = a.dw = nullptr; all_steps(a); }, {"'dy' = nullptr"});
  expect_invalid([&] { auto a = h.args(); a.w = nullptr; all_steps(a); }, {"'w' = nullptr", "dx"});
  expect_invalid([&] { auto a = h.args(); a.x = nullptr; all_steps(a); }, {"'x' = nullptr", "dw"});
}

TEST(LinearBackwardArgsTest, ShortOrNegativeLeadingDimsAreNamed) {
  HostArgs h;
  expect_invalid([&] { auto a = h.args(); a.ldx = 3; all_steps(a); }, {"'ldx' = 3", ">= K"});
  expect_invalid([&] { auto a = h.args(); a.ldw = 5; all_steps(a); }, {"'ldw' = 5", ">= N"});
  expect_invalid([&] { auto a = h.args(); a.lddy = 5; all_steps(a); }, {"'lddy' = 5"});
  expect_invalid([&] { auto a = h.args(); a.lddx = 3; all_steps(a); }, {"'lddx' = 3"});
  expect_invalid([&] { auto a = h.args(); a.lddw = 1; all_steps(a); }, {"'lddw' = 1"});
  expect_invalid([&] { auto a = h.args(); a.lddy = -6; all_steps(a); }, {"'lddy' = -6"});
}

TEST(LinearBackwardArgsTest, MisalignedPointerIsNamed) {
  HostArgs h;
  float* odd = reinterpret_cast<float*>(reinterpret_cast<char*>(h.db) + 2);
  expect_invalid([&] { auto a = h.args(); a.db = odd; all_steps(a); }, {"'db'", "aligned to 4 bytes"});
}

TEST(LinearBackwardArgsTest, OverlapsAreNamed) {
  HostArgs h;
  // Outputs over inputs.
  expect_invalid([&] { auto a = h.args(); a.dx = h.x; all_steps(a); }, {"'dx'", "overlaps x"});
  expect_invalid([&] { auto a = h.args(); a.dw = h.w + 3; all_steps(a); }, {"'dw'", "overlaps w"});
  expect_invalid([&] { auto a = h.args(); a.db = h.dy + 24; all_steps(a); }, {"'db'", "overlaps dy"});
  // Outputs over each other: db inside dW, dW starting inside dX.
  expect_invalid([&] { auto a = h.args(); a.db = h.dw + 10; all_steps(a); }, {"'db'", "overlaps dw"});
  expect_invalid([&] { auto a = h.args(); a.dw = h.dx + 19; all_steps(a); }, {"'dw'", "overlaps dx"});
  // Only requested outputs count: with dx skipped, db may live in the memory dx would use.
  auto a = h.args();
  a.dx = nullptr;
  a.db = h.dx;
  EXPECT_NO_THROW(course::m04::validate_linear_backward_args(a, BiasGradStep::column_per_thread, "test"));
}

}  // namespace
