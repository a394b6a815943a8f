// Tests of the batched GEMM ladder (strided and pointer-array APIs), run against
// course::solution and course::exercise (built twice; `impl` names the one under test),
// and against the planted bugs of tests/planted/batched_gemm_planted.cu, which the same
// check must reject.
//
// Every case draws fresh random data for every element of every operand (so each batch
// and head differs), poisons C with NaN, and compares the defined elements of C with
// the CPU reference (double accumulation) within tolerance_for(); elements of C's
// storage that the GEMM does not define (row padding, gaps between heads) must still
// hold the poison afterwards. Tests with "Large" in their name use big shapes and are
// left out of the compute-sanitizer run.
#include "course/bf16.hpp"
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "module02/batched_gemm.hpp"
#include "module02/batched_gemm_support.hpp"
#include "batched_gemm_check.hpp"
#include "batched_gemm_planted.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using bf16 = __nv_bfloat16;
using course::DeviceBuffer;
using course::m02::BgemmInput;
using course::m02::BgemmStep;
using course::m02::PtrArrayBatchedGemmArgs;
using course::m02::StridedBatchedGemmArgs;
using course::testing::GpuTest;

using course::m02::checks::Api;
using course::m02::checks::args_on;
using course::m02::checks::as_input;
using course::m02::checks::Case;
using course::m02::checks::check_cases;
using course::m02::checks::describe;
using course::m02::checks::Impl;
using course::m02::checks::impl_under_test;
using course::m02::checks::Layout;
using course::m02::checks::make_problem;
using course::m02::checks::Problem;
using course::m02::checks::run;
using course::m02::checks::to_string;

/// Cases on which the planted bugs stay inside the buffers (batch == heads, K <= N);
/// the real tests run them too.
std::vector<Case> shared_cases() {
  return {
      {2, 2, 33, 40, 17, true},
      {2, 2, 33, 40, 17, false, Layout::bnhd, Layout::bnhd, Layout::bnhd},
      {3, 3, 17, 29, 5, true, Layout::padded_odd, Layout::padded_odd, Layout::padded_odd},
      {2, 2, 20, 24, 24, false, Layout::padded_aligned, Layout::padded_aligned, Layout::padded_aligned, 0.5f},
  };
}

/// Awkward sizes: 1, primes, tile +- 1 (17, 127, 129, 65), several tiles and K slabs,
/// every layout, alpha != 1, a broadcast B, mixed layouts.
std::vector<Case> odd_cases() {
  std::vector<Case> c = shared_cases();
  c.push_back({1, 1, 1, 1, 1, true});
  c.push_back({1, 1, 1, 1, 1, false});
  c.push_back({2, 3, 17, 129, 127, true});
  c.push_back({2, 3, 129, 17, 127, false});
  c.push_back({1, 2, 127, 129, 17, false, Layout::padded_odd, Layout::padded_odd, Layout::padded_odd});
  c.push_back({2, 2, 129, 127, 1, true, Layout::padded_aligned, Layout::padded_aligned, Layout::padded_aligned});
  c.push_back({3, 2, 65, 64, 129, false, Layout::bnhd, Layout::bnhd, Layout::bnhd});          // P*V-like, d = 64
  c.push_back({2, 3, 130, 130, 64, true, Layout::bnhd, Layout::bnhd, Layout::contiguous, 0.125f});  // Q*K^T-like
  c.push_back({2, 4, 33, 65, 64, true, Layout::contiguous, Layout::contiguous, Layout::padded_odd, 1.0f, true});
  c.push_back({2, 2, 70, 129, 40, false, Layout::bnhd, Layout::padded_odd, Layout::padded_aligned, -2.0f});
  return c;
}

class BgemmTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<BgemmStep>> {};

std::string step_param_name(const ::testing::TestParamInfo<course::StepInfo<BgemmStep>>& info) {
  return info.param.name;
}

// ---- the lesson's worked example: B=1, H=2, N=3, d=4; exact small integers.

/// Q, K, V of the lesson, [1, 2, 3, 4] contiguous.
struct WorkedExample {
  std::vector<float> q = {1, 0, 2, -1, 0, 1, -1, 2, 2, 1, 0, 1,    // head 0
                          1, 2, 0, 0,  0, 0, 1,  1, -1, 1, 1, 0};  // head 1
  std::vector<float> k = {1, 1, 0, 0, 0, 2, 1, -1, 1, 0, -1, 1,    // head 0
                          0, 1, 0, 1, 1, 0, 1, 0,  2, -1, 0, 1};   // head 1
  std::vector<float> v = {1, 0, 0, 1, 0, 1, 0, -1, 1, 1, 1, 0,     // head 0
                          2, 0, 1, 0, 0, 1, 0, 1,  1, 0, 0, 1};    // head 1
};

/// Runs Q*K^T then S*V on the device through `api` and returns {S, O}.
template <class T>
std::pair<std::vector<float>, std::vector<float>> worked_example_on_device(const Impl& impl, Api api, BgemmStep step) {
  const WorkedExample ex;
  DeviceBuffer<T> q(as_input<T>(ex.q)), k(as_input<T>(ex.k)), v(as_input<T>(ex.v)), s_in(2 * 3 * 3);
  DeviceBuffer<float> s(2 * 3 * 3), o(2 * 3 * 4);
  s.poison();
  o.poison();
  auto call = [&](const StridedBatchedGemmArgs<T>& args) {
    if (api == Api::strided) {
      if constexpr (std::is_same_v<T, float>) impl.strided_f32(step, args); else impl.strided_bf16(step, args);
    } else {
      course::m02::BatchedPtrArrays<T> arrays;
      course::m02::build_ptr_arrays(args, arrays);
      if constexpr (std::is_same_v<T, float>)
        impl.ptr_f32(step, course::m02::ptr_array_args(args, arrays));
      else
        impl.ptr_bf16(step, course::m02::ptr_array_args(args, arrays));
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    }
  };
  call(course::m02::contiguous_strided_args<T>(q.data(), k.data(), s.data(), 1, 2, 3, 3, 4, /*b_transposed=*/true));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> scores = s.download();
  s_in.upload(as_input<T>(scores));  // small integers: exact in bf16 too
  call(course::m02::contiguous_strided_args<T>(s_in.data(), v.data(), o.data(), 1, 2, 3, 4, 3, /*b_transposed=*/false));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  return {scores, o.download()};
}

TEST_P(BgemmTest, WorkedExampleIsExact) {
  const BgemmStep step = GetParam().step;
  const WorkedExample ex;
  std::vector<float> want_s(18), want_o(24);
  course::ref::batched_gemm_strided(course::m02::reference_desc(course::m02::contiguous_strided_args<float>(
                                        ex.q.data(), ex.k.data(), want_s.data(), 1, 2, 3, 3, 4, true)),
                                    ex.q.data(), ex.k.data(), want_s.data());
  course::ref::batched_gemm_strided(course::m02::reference_desc(course::m02::contiguous_strided_args<float>(
                                        want_s.data(), ex.v.data(), want_o.data(), 1, 2, 3, 4, 3, false)),
                                    want_s.data(), ex.v.data(), want_o.data());
  // The lesson's hand-computed entries: scores[h=0] row 0 = [1, 3, -2]; scores[h=1] row 2 = [1, 0, -3];
  // out[h=0] row 0 = 1*v0 + 3*v1 - 2*v2 = [-1, 1, -2, -2].
  ASSERT_EQ((std::vector<float>{want_s[0], want_s[1], want_s[2]}), (std::vector<float>{1, 3, -2}));
  ASSERT_EQ((std::vector<float>{want_s[15], want_s[16], want_s[17]}), (std::vector<float>{1, 0, -3}));
  ASSERT_EQ((std::vector<float>{want_o[0], want_o[1], want_o[2], want_o[3]}), (std::vector<float>{-1, 1, -2, -2}));

  const Impl impl = impl_under_test();
  for (const Api api : {Api::strided, Api::ptr_array}) {
    SCOPED_TRACE(to_string(api));
    std::pair<std::vector<float>, std::vector<float>> got;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(got = course::m02::step_input(step) == BgemmInput::bf16
                                             ? worked_example_on_device<bf16>(impl, api, step)
                                             : worked_example_on_device<float>(impl, api, step));
    EXPECT_EQ(got.first, want_s) << "Q*K^T";
    EXPECT_EQ(got.second, want_o) << "scores*V";
  }
}

/// Awkward shapes and layouts, strided API.
TEST_P(BgemmTest, StridedOddShapesAndLayouts) {
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_TRUE(check_cases(impl_under_test(), Api::strided, GetParam().step, odd_cases(), seed())));
}

/// The same cases through the pointer-array API (arrays built from the strided layout).
TEST_P(BgemmTest, PtrArrayOddShapesAndLayouts) {
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_TRUE(check_cases(impl_under_test(), Api::ptr_array, GetParam().step, odd_cases(), seed())));
}

/// One kernel body for both APIs: on the same data they must agree bit for bit.
TEST_P(BgemmTest, BothApisGiveIdenticalBits) {
  const BgemmStep step = GetParam().step;
  const bool bf = course::m02::step_input(step) == BgemmInput::bf16;
  const Impl impl = impl_under_test();
  const std::vector<Case> cases = {{2, 3, 129, 130, 72, true, Layout::bnhd, Layout::bnhd, Layout::contiguous},
                                   {2, 3, 100, 64, 129, false, Layout::padded_odd, Layout::contiguous, Layout::bnhd}};
  for (std::size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(describe(cases[k]));
    const Problem p = make_problem(cases[k], seed() + k, bf, Api::strided);
    std::vector<float> s, q;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(s = run(impl, Api::strided, step, p));
    COURSE_SKIP_IF_NOT_IMPLEMENTED(q = run(impl, Api::ptr_array, step, p));
    ASSERT_EQ(s.size(), q.size());
    std::size_t differ = 0, first = 0;
    for (std::size_t i = 0; i < s.size(); ++i)
      if (std::memcmp(&s[i], &q[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0u) << "strided and pointer-array results differ in " << differ
                          << " elements, first at storage offset " << first << ": " << s[first] << " vs " << q[first];
  }
}

/// Attention's two products at a realistic size, both APIs: Q*K^T (contiguous, d = 64
/// and 128) and P*V with P like softmax output (non-negative, rows summing to ~1) and V,
/// O in the fused [B, N, H, d] layout. Random-sign P with K = 1024 would put the
/// cancellation error of near-zero outputs at the edge of the absolute tolerance.
TEST_P(BgemmTest, LargeAttentionShapes) {
  const BgemmStep step = GetParam().step;
  const Impl impl = impl_under_test();
  const std::vector<Case> cases = {
      {2, 4, 1024, 1024, 64, true, Layout::contiguous, Layout::contiguous, Layout::contiguous, 0.125f},
      {2, 4, 1024, 64, 1024, false, Layout::contiguous, Layout::bnhd, Layout::bnhd, 1.0f, false, 0.0f, 2.0f / 1024},
      {1, 2, 1000, 1000, 128, true, Layout::bnhd, Layout::bnhd, Layout::contiguous},
      {1, 2, 1000, 128, 1000, false, Layout::contiguous, Layout::bnhd, Layout::bnhd, 1.0f, false, 0.0f, 2.0f / 1000},
      {64, 12, 128, 128, 64, true},
      {64, 12, 128, 64, 128, false, Layout::contiguous, Layout::contiguous, Layout::contiguous, 1.0f, false, 0.0f,
       2.0f / 128},
  };
  for (const Api api : {Api::strided, Api::ptr_array})
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(impl, api, step, cases, seed())));
}

// ---- a_transposed: op(A) = A^T with A stored K x M (dW = X^T dY, dV = P^T dO, dK = dS^T Q).

/// Awkward shapes with A stored K x M: 1, primes, tile +- 1 (127, 129, 65, 33), exact
/// tiles, every layout (padded row strides, odd ones that force the scalar paths), alone
/// and with b_transposed, both register-blocked tile shapes (N <= 64 and N > 64).
std::vector<Case> a_transposed_cases() {
  std::vector<Case> c = {
      {1, 1, 1, 1, 1, false},
      {1, 1, 1, 1, 1, true},
      {2, 2, 33, 40, 17, false},
      {2, 2, 33, 40, 17, true, Layout::bnhd, Layout::bnhd, Layout::bnhd},
      {3, 3, 17, 29, 5, true, Layout::padded_odd, Layout::padded_odd, Layout::padded_odd},
      {2, 2, 20, 24, 24, false, Layout::padded_aligned, Layout::padded_aligned, Layout::padded_aligned, 0.5f},
      {2, 3, 17, 129, 127, true},
      {2, 3, 129, 17, 127, false},
      {1, 2, 127, 129, 17, false, Layout::padded_odd, Layout::padded_odd, Layout::padded_odd},
      {2, 2, 129, 127, 1, true, Layout::padded_aligned, Layout::padded_aligned, Layout::padded_aligned},
      {1, 1, 128, 128, 128, false},
      {1, 1, 257, 31, 7, false, Layout::padded_odd, Layout::contiguous, Layout::padded_aligned},
      {3, 2, 65, 64, 129, false, Layout::bnhd, Layout::bnhd, Layout::bnhd},  // dV = P^T dO-like, d = 64
      {2, 3, 130, 130, 64, true, Layout::bnhd, Layout::bnhd, Layout::contiguous, 0.125f},  // dK = dS^T Q-like
      {1, 1, 33, 257, 128, false, Layout::padded_aligned, Layout::padded_odd, Layout::contiguous, -2.0f},
      {2, 4, 33, 65, 64, true, Layout::contiguous, Layout::contiguous, Layout::padded_odd, 1.0f, true},
  };
  for (Case& x : c) x.trans_a = true;
  return c;
}

/// Runs `call` and returns "" when it throws InvalidArgument naming a_transposed, else a report.
template <class F>
std::string rejection_of_a_transposed(F call) {
  try {
    call();
  } catch (const course::InvalidArgument& e) {
    const std::string what = e.what();
    if (what.find("'a_transposed' = true") != std::string::npos &&
        what.find("supported by the fp32 steps") != std::string::npos)
      return "";
    return "InvalidArgument without naming a_transposed: " + what;
  }
  return "accepted a_transposed";
}

/// fp32 steps: a_transposed matches the reference on every case, both APIs, and the two
/// APIs agree bit for bit. bf16 steps: rejected by name on both APIs (device pointers,
/// nothing launched).
TEST_P(BgemmTest, ATransposedOddShapesBothApis) {
  const BgemmStep step = GetParam().step;
  const Impl impl = impl_under_test();
  if (course::m02::step_input(step) == BgemmInput::bf16) {
    const Problem p = make_problem(a_transposed_cases()[2], seed(), true, Api::strided);
    DeviceBuffer<bf16> a(as_input<bf16>(p.a)), b(as_input<bf16>(p.b));
    DeviceBuffer<float> c(static_cast<std::size_t>(p.lc.storage));
    const StridedBatchedGemmArgs<bf16> s = args_on<bf16>(p, a.data(), b.data(), c.data());
    EXPECT_EQ(rejection_of_a_transposed([&] { impl.strided_bf16(step, s); }), "") << "strided";
    course::m02::BatchedPtrArrays<bf16> arrays;
    course::m02::build_ptr_arrays(s, arrays);
    EXPECT_EQ(rejection_of_a_transposed([&] { impl.ptr_bf16(step, course::m02::ptr_array_args(s, arrays)); }), "")
        << "ptr_array";
    return;
  }
  for (const Api api : {Api::strided, Api::ptr_array})
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(impl, api, step, a_transposed_cases(), seed())));
  const Problem p = make_problem(a_transposed_cases()[8], seed() + 7, false, Api::strided);
  std::vector<float> s, q;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(s = run(impl, Api::strided, step, p));
  COURSE_SKIP_IF_NOT_IMPLEMENTED(q = run(impl, Api::ptr_array, step, p));
  EXPECT_EQ(0, std::memcmp(s.data(), q.data(), s.size() * sizeof(float))) << "strided and pointer-array differ";
}

INSTANTIATE_TEST_SUITE_P(Steps, BgemmTest, ::testing::ValuesIn(course::m02::kBgemmSteps), step_param_name);

/// The fp32 steps only: the options the bf16 steps reject.
class BgemmF32Test : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<BgemmStep>> {};

std::vector<course::StepInfo<BgemmStep>> fp32_steps() {
  std::vector<course::StepInfo<BgemmStep>> v;
  for (const auto& info : course::m02::kBgemmSteps)
    if (course::m02::step_input(info.step) == BgemmInput::f32) v.push_back(info);
  return v;
}

/// The backward-pass products at realistic sizes, fp32 steps: dW = X^T dY (a 4096-row
/// batch reduced into a 256 x 320 weight gradient), dV = P^T dO with softmax-like P, and
/// dK = dS^T Q in the [B, N, H, d] layout.
TEST_P(BgemmF32Test, LargeATransposedShapes) {
  const BgemmStep step = GetParam().step;
  std::vector<Case> cases = {
      {1, 1, 256, 320, 4096, false},
      {2, 4, 1024, 64, 1024, false, Layout::contiguous, Layout::contiguous, Layout::bnhd, 1.0f, false, 0.0f,
       2.0f / 1024},
      {1, 2, 1000, 128, 1000, false, Layout::contiguous, Layout::bnhd, Layout::bnhd, 1.0f, false, 0.0f, 2.0f / 1000},
      {2, 4, 512, 64, 512, false, Layout::bnhd, Layout::bnhd, Layout::bnhd, 0.125f},
  };
  for (Case& x : cases) x.trans_a = true;
  for (const Api api : {Api::strided, Api::ptr_array})
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(check_cases(impl_under_test(), api, step, cases, seed())));
}

INSTANTIATE_TEST_SUITE_P(Fp32Steps, BgemmF32Test, ::testing::ValuesIn(fp32_steps()), step_param_name);

// ---- planted bugs: the same check must reject each of them (proof that it can fail).

class PlantedBgemmTest : public GpuTest, public ::testing::WithParamInterface<course::planted::PlantedBgemm> {};

TEST_P(PlantedBgemmTest, ChecksRejectIt) {
  const auto& bug = GetParam();
  Impl planted;
  planted.strided_f32 = bug.fn;
  EXPECT_FALSE(check_cases(planted, Api::strided, BgemmStep::smem_tiled, shared_cases(), seed()))
      << "planted bug '" << bug.name << "' passed the checks: they are too weak to catch it";
}

INSTANTIATE_TEST_SUITE_P(Bugs, PlantedBgemmTest, ::testing::ValuesIn(course::planted::kPlantedBgemms),
                         [](const ::testing::TestParamInfo<course::planted::PlantedBgemm>& info) {
                           return std::string(info.param.name);
                         });

// ---- the grid mapping (host only: runs without a GPU).

TEST(BgemmGridTest, TilesOnXHeadsOnYBatchOnZ) {
  course::m02::BgemmGrid g;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(g = impl::batched_gemm_grid(1000, 64, 8, 16, 128, 64));
  EXPECT_EQ(g.tiles_m, 8);  // ceil(1000 / 128)
  EXPECT_EQ(g.tiles_n, 1);
  EXPECT_EQ(g.x, 8u);
  EXPECT_EQ(g.y, 16u);
  EXPECT_EQ(g.z, 8u);
  g = impl::batched_gemm_grid(129, 130, 1, 1, 32, 32);
  EXPECT_EQ(g.tiles_m, 5);
  EXPECT_EQ(g.tiles_n, 5);
  EXPECT_EQ(g.x, 25u);
}

TEST(BgemmGridTest, TileCountMayExceed65535OnX) {
  course::m02::BgemmGrid g;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(g = impl::batched_gemm_grid(65536, 65536, 1, 1, 128, 128));
  EXPECT_EQ(g.x, 512u * 512u);
}

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

TEST(BgemmGridTest, LimitsAreNamed) {
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::batched_gemm_grid(1, 1, 1, 1, 1, 1));
  expect_invalid([] { impl::batched_gemm_grid(64, 64, 1, 65536, 32, 32); }, {"'num_heads' = 65536"});
  expect_invalid([] { impl::batched_gemm_grid(64, 64, 70000, 1, 32, 32); }, {"'batch' = 70000"});
  expect_invalid([] { impl::batched_gemm_grid(64, 64, 0, 1, 32, 32); }, {"'batch' = 0"});
  expect_invalid([] { impl::batched_gemm_grid(std::int64_t{1} << 20, std::int64_t{1} << 20, 1, 1, 16, 16); }, {"'M'"});
  expect_invalid([] { impl::batched_gemm_grid(0, 8, 1, 1, 32, 32); }, {"'M' = 0"});
  expect_invalid([] { impl::batched_gemm_grid(8, 8, 1, 1, 0, 32); }, {"'tile_m' = 0"});
}

// ---- argument validation: host-side, before any launch (no GPU needed: the pointers are
// host pointers that are never dereferenced, because every case here is invalid).

/// Valid host-side strided arguments (contiguous B=2, H=3, M=5, N=6, K=4), to break one at a time.
struct HostStrided {
  alignas(16) float a[2 * 3 * 5 * 4] = {};
  alignas(16) float b[2 * 3 * 6 * 4] = {};
  alignas(16) float c[2 * 3 * 5 * 6] = {};
  StridedBatchedGemmArgs<float> args() {
    return course::m02::contiguous_strided_args<float>(a, b, c, 2, 3, 5, 6, 4, /*b_transposed=*/true);
  }
  /// The six matrices' pointers into a, b, c (what a pointer-array call reads).
  std::vector<const float*> a_ptrs() const { return every(a, 20); }
  std::vector<const float*> b_ptrs() const { return every(b, 24); }
  std::vector<float*> c_ptrs() { return every(c, 30); }

 private:
  template <class T>
  static std::vector<T*> every(T* base, int step) {
    std::vector<T*> p;
    for (int i = 0; i < 6; ++i) p.push_back(base + i * step);
    return p;
  }
};

/// The pointer-array arguments of HostStrided's shape (B = 2, H = 3, M = 5, N = 6, K = 4,
/// B stored N x K, dense leading dimensions), pointer arrays not set.
template <class T>
PtrArrayBatchedGemmArgs<T> ptr_array_shape() {
  PtrArrayBatchedGemmArgs<T> p;
  p.M = 5;
  p.N = 6;
  p.K = 4;
  p.batch = 2;
  p.num_heads = 3;
  p.lda = 4;
  p.ldb = 4;
  p.ldc = 6;
  p.b_transposed = true;
  return p;
}

/// Calls impl::batched_gemm_strided with `s` for every fp32 step.
void strided_all_f32_steps(const StridedBatchedGemmArgs<float>& s) {
  for (const auto& info : course::m02::kBgemmSteps)
    if (course::m02::step_input(info.step) == BgemmInput::f32) impl::batched_gemm_strided(info.step, s);
}

TEST(BgemmArgsTest, ValidLayoutsAreAccepted) {
  HostStrided h;
  EXPECT_NO_THROW(course::m02::validate_strided_layout(h.args(), "test"));
  // [B, N, H, d] output (row stride H*N, head stride N): interleaved but not aliased.
  auto s = h.args();
  s.stride_c_row = 3 * 6;
  s.stride_c_head = 6;
  s.stride_c_batch = 5 * 3 * 6;
  EXPECT_NO_THROW(course::m02::validate_strided_layout(s, "test"));
  s = h.args();
  s.stride_b_head = 0;  // broadcast input: allowed
  EXPECT_NO_THROW(course::m02::validate_strided_layout(s, "test"));
}

TEST(BgemmArgsTest, ZeroSizesAreNamed) {
  HostStrided h;
  expect_invalid([&] { auto s = h.args(); s.M = 0; strided_all_f32_steps(s); }, {"'M' = 0"});
  expect_invalid([&] { auto s = h.args(); s.N = 0; strided_all_f32_steps(s); }, {"'N' = 0"});
  expect_invalid([&] { auto s = h.args(); s.K = 0; strided_all_f32_steps(s); }, {"'K' = 0"});
  expect_invalid([&] { auto s = h.args(); s.batch = 0; strided_all_f32_steps(s); }, {"'batch' = 0"});
  expect_invalid([&] { auto s = h.args(); s.num_heads = 0; strided_all_f32_steps(s); }, {"'num_heads' = 0"});
}

TEST(BgemmArgsTest, GridLimitsAreNamed) {
  HostStrided h;
  expect_invalid([&] { auto s = h.args(); s.num_heads = 65536; strided_all_f32_steps(s); },
                 {"'num_heads' = 65536", "gridDim.y"});
  expect_invalid([&] { auto s = h.args(); s.batch = 65536; strided_all_f32_steps(s); }, {"'batch' = 65536", "gridDim.z"});
}

TEST(BgemmArgsTest, NullPointersAreNamed) {
  HostStrided h;
  expect_invalid([&] { auto s = h.args(); s.a = nullptr; strided_all_f32_steps(s); }, {"'a' = nullptr"});
  expect_invalid([&] { auto s = h.args(); s.b = nullptr; strided_all_f32_steps(s); }, {"'b' = nullptr"});
  expect_invalid([&] { auto s = h.args(); s.c = nullptr; strided_all_f32_steps(s); }, {"'c' = nullptr"});
}

TEST(BgemmArgsTest, NegativeAndShortStridesAreNamed) {
  HostStrided h;
  expect_invalid([&] { auto s = h.args(); s.stride_b_head = -24; strided_all_f32_steps(s); }, {"'stride_b_head' = -24"});
  expect_invalid([&] { auto s = h.args(); s.stride_a_row = 3; strided_all_f32_steps(s); }, {"'stride_a_row' = 3", "K = 4"});
  // b_transposed: B is N x K, so its rows hold K = 4 elements.
  expect_invalid([&] { auto s = h.args(); s.stride_b_row = 3; strided_all_f32_steps(s); }, {"'stride_b_row' = 3"});
}

TEST(BgemmArgsTest, OverlappingCIsNamed) {
  HostStrided h;
  // Rows overlap.
  expect_invalid([&] { auto s = h.args(); s.stride_c_row = 5; strided_all_f32_steps(s); }, {"'stride_c_row' = 5"});
  // Every head writes the same matrix.
  expect_invalid([&] { auto s = h.args(); s.stride_c_head = 0; strided_all_f32_steps(s); },
                 {"'stride_c_head' = 0", "share an address"});
  // Heads overlap by one row.
  expect_invalid([&] { auto s = h.args(); s.stride_c_head = 4 * 6; strided_all_f32_steps(s); }, {"'stride_c_head' = 24"});
  // Batch 1 lands on head 1 of batch 0.
  expect_invalid([&] { auto s = h.args(); s.stride_c_batch = 30; strided_all_f32_steps(s); }, {"'stride_c_batch' = 30"});
}

TEST(BgemmArgsTest, InPlaceIsRejected) {
  HostStrided h;
  expect_invalid([&] { auto s = h.args(); s.c = h.a; strided_all_f32_steps(s); }, {"'c'", "intersects A"});
}

TEST(BgemmArgsTest, MisalignedElementPointerIsNamed) {
  HostStrided h;
  const float* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(h.a) + 2);
  expect_invalid([&] { auto s = h.args(); s.a = odd; strided_all_f32_steps(s); }, {"'a'", "aligned to 4 bytes"});
}

TEST(BgemmArgsTest, ATransposedRowStrideAndSpanAreChecked) {
  HostStrided h;  // contiguous B=2, H=3, M=5, N=6, K=4: A^T is 4 x 5 per head, 20 elements as before
  auto t = h.args();
  t.a_transposed = true;
  t.stride_a_row = 5;  // a row of the stored A (K x M) holds M = 5 elements
  EXPECT_NO_THROW(course::m02::validate_strided_layout(t, "test"));
  expect_invalid([&] { auto s = t; s.stride_a_row = 4; strided_all_f32_steps(s); },
                 {"'stride_a_row' = 4", "M = 5", "a_transposed"});
  // A's span is K rows of stride_a_row when transposed (20 elements for one 4 x 5 A), not
  // M rows (24 with the same row stride): a C right after it is accepted, and only then.
  auto one = t;
  one.batch = 1;
  one.num_heads = 1;
  one.c = h.a + 20;
  EXPECT_NO_THROW(course::m02::validate_strided_layout(one, "test"));
  one.a_transposed = false;  // now A is 5 x 4 with row stride 5: its last element is a[23]
  expect_invalid([&] { course::m02::validate_strided_layout(one, "test"); }, {"'c'", "intersects A"});
  PtrArrayBatchedGemmArgs<float> p = ptr_array_shape<float>();
  p.a_transposed = true;
  const auto a = h.a_ptrs(), b = h.b_ptrs();
  const auto c = h.c_ptrs();
  expect_invalid([&] { course::m02::validate_ptr_array_contents(p, a, b, c, "test"); }, {"'lda' = 4", "M = 5"});
  p.lda = 5;
  EXPECT_NO_THROW(course::m02::validate_ptr_array_contents(p, a, b, c, "test"));
}

TEST(BgemmArgsTest, ATransposedIsRejectedByBf16Steps) {
  HostStrided h;
  alignas(16) bf16 a[120] = {}, b[144] = {};
  auto s = course::m02::contiguous_strided_args<bf16>(a, b, h.c, 2, 3, 5, 6, 4, true);
  s.a_transposed = true;
  s.stride_a_row = 5;
  for (const auto& info : course::m02::kBgemmSteps) {
    if (course::m02::step_input(info.step) != BgemmInput::bf16) continue;
    expect_invalid([&] { impl::batched_gemm_strided(info.step, s); },
                   {"'a_transposed' = true", "supported by the fp32 steps", info.name});
    PtrArrayBatchedGemmArgs<bf16> p = ptr_array_shape<bf16>();  // host arrays: the option is named before the arrays are looked at
    const bf16* ap[6] = {};
    float* cp[6] = {};
    p.a_ptrs = ap;
    p.b_ptrs = ap;
    p.c_ptrs = cp;
    p.lda = 5;
    p.a_transposed = true;
    expect_invalid([&] { impl::batched_gemm_ptr_array(info.step, p); }, {"'a_transposed' = true", info.name});
  }
}

TEST(BgemmArgsTest, StepAndInputTypeMustMatch) {
  HostStrided h;
  expect_invalid([&] { impl::batched_gemm_strided(BgemmStep::tensor_core, h.args()); }, {"'step' = tensor_core"});
  alignas(16) bf16 a[120] = {}, b[144] = {};
  auto s = course::m02::contiguous_strided_args<bf16>(a, b, h.c, 2, 3, 5, 6, 4, true);
  expect_invalid([&] { impl::batched_gemm_strided(BgemmStep::smem_tiled, s); }, {"'step' = smem_tiled", "float"});
}

TEST(BgemmArgsTest, PtrArrayArgumentsAreNamed) {
  HostStrided h;
  const float* ap[6] = {};
  float* cp[6] = {};
  PtrArrayBatchedGemmArgs<float> p = ptr_array_shape<float>();
  p.a_ptrs = ap;
  p.b_ptrs = ap;
  p.c_ptrs = cp;
  const auto call = [](const PtrArrayBatchedGemmArgs<float>& q) {
    impl::batched_gemm_ptr_array(BgemmStep::register_blocked, q);
  };
  expect_invalid([&] { auto q = p; q.a_ptrs = nullptr; call(q); }, {"'a_ptrs' = nullptr"});
  expect_invalid([&] { auto q = p; q.lda = 3; call(q); }, {"'lda' = 3"});
  expect_invalid([&] { auto q = p; q.ldc = 5; call(q); }, {"'ldc' = 5"});
  expect_invalid([&] { auto q = p; q.K = 0; call(q); }, {"'K' = 0"});
  // Arrays of pointers on the host (the natural mistake) are named, not launched on.
  expect_invalid([&] { call(p); }, {"'a_ptrs'"});
  (void)h;
}

TEST(BgemmArgsTest, PtrArrayContentsAreChecked) {
  HostStrided h;
  const PtrArrayBatchedGemmArgs<float> p = ptr_array_shape<float>();
  const auto a = h.a_ptrs(), b = h.b_ptrs();
  const auto c = h.c_ptrs();
  EXPECT_NO_THROW(course::m02::validate_ptr_array_contents(p, a, b, c, "test"));
  // Interleaved heads ([B, N, H, d]-style, ldc = 3*6) do not share elements: accepted.
  {
    auto q = p;
    q.batch = 1;
    q.ldc = 18;
    std::vector<float*> ci = {h.c, h.c + 6, h.c + 12};
    std::vector<const float*> a3(a.begin(), a.begin() + 3), b3(b.begin(), b.begin() + 3);
    EXPECT_NO_THROW(course::m02::validate_ptr_array_contents(q, a3, b3, ci, "test"));
  }
  expect_invalid([&] { auto bb = b; bb[3] = nullptr; course::m02::validate_ptr_array_contents(p, a, bb, c, "test"); },
                 {"'b_ptrs[3]' = nullptr"});
  expect_invalid([&] { auto cc = c; cc[4] = cc[1] + 7; course::m02::validate_ptr_array_contents(p, a, b, cc, "test"); },
                 {"c_ptrs[", "must not overlap"});
  expect_invalid([&] { auto cc = c; cc.pop_back(); course::m02::validate_ptr_array_contents(p, a, b, cc, "test"); },
                 {"'c_ptrs.size()' = 5"});
}

}  // namespace
