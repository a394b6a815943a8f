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
#include "linear_backward_check.hpp"
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

using course::m04::linear_checks::Case;
using course::m04::linear_checks::check_cases;
using course::m04::linear_checks::dense_tensor;
using course::m04::linear_checks::LinearBackwardFn;
using course::m04::linear_checks::Lds;
using course::m04::linear_checks::make_problem;
using course::m04::linear_checks::Problem;
using course::m04::linear_checks::Result;
using course::m04::linear_checks::run_on_device;

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
  w.upload(course::random_vector(33 * 45, seed() + 1));  // dX = dY W^T reads every element of W
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
