// Random-case hardening of module 2 (label fuzz), run against course::solution and
// course::exercise like the module's tests. For every step, through the strided API and
// the pointer-array API: 512 random cases drawn from the step's whole contract (sizes 1,
// primes, tile +- 1; contiguous, [B,N,H,d], padded and odd-padded layouts per operand;
// broadcast A and B; op(A) = A^T on the fp32 steps; bases off 16-byte alignment; alpha;
// large-magnitude and one-signed data), in 4 parts that ctest runs in parallel, plus a few
// large cases (*Large*), each checked by the module's own helper (batched_gemm_check.hpp).
// Then a bad-input sweep per step and API: every bad argument is rejected by name and
// leaves a healthy CUDA context. Seeds, replay and the "[fuzz]" lines: course/fuzz.hpp.
#include "batched_gemm_check.hpp"
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "module02/batched_gemm.hpp"
#include "module02/batched_gemm_support.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using bf16 = __nv_bfloat16;
using course::DeviceBuffer;
using course::StepInfo;
using course::fuzz::fake_address;
using course::fuzz::kCasesPerStep;
using course::fuzz::kLargeCases;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::step_name;
using course::fuzz::ValueRange;
using course::fuzz::Verdict;
using course::m02::BgemmInput;
using course::m02::BgemmStep;
using course::m02::PtrArrayBatchedGemmArgs;
using course::m02::StridedBatchedGemmArgs;
using course::m02::checks::Api;
using course::m02::checks::Case;
using course::m02::checks::Layout;
using course::testing::GpuTest;

const char* op_name(Api api) { return api == Api::strided ? "batched_gemm_strided" : "batched_gemm_ptr_array"; }

bool is_fp32(BgemmStep step) { return course::m02::step_input(step) == BgemmInput::f32; }

Layout draw_layout(Rng& rng) {
  return rng.pick({Layout::contiguous, Layout::bnhd, Layout::padded_aligned, Layout::padded_odd});
}

/// M, N, K up to ~400 around the ladder's tiles (16, 32, 64, 128), 1 and primes; batch and
/// heads up to 4 x 8 within a budget of 2^25 multiply-adds and 2^20 outputs per case (so the
/// CPU side stays quick), now and then many small matrices (up to 80 x 40: grid y and z); every
/// operand in its own layout; broadcasts; A^T on the fp32 steps; offsets; alpha; data
/// ranges. Large: attention-sized products (Q*K^T, P*V, many heads, a square GEMM).
Case draw_bgemm(Rng& rng, BgemmStep step, bool large) {
  Case c{1, 1, 1, 1, 1, rng.chance(0.5)};
  if (large) {
    switch (rng.uniform(0, 3)) {
      case 0:
        c.B = 2, c.H = rng.uniform(2, 4), c.M = c.N = rng.uniform(700, 1100), c.K = rng.pick({64, 128});
        break;
      case 1:
        c.B = 2, c.H = 4, c.M = c.K = rng.uniform(700, 1100), c.N = rng.pick({64, 128});
        break;
      case 2:
        c.B = rng.uniform(48, 64), c.H = 12, c.M = c.N = 128, c.K = 64;
        break;
      default:
        c.M = rng.uniform(700, 1100), c.N = rng.uniform(700, 1100), c.K = rng.uniform(700, 1100);
        break;
    }
  } else {
    c.M = rng.size(1, 400, {16, 32, 64, 128});
    c.N = rng.size(1, 400, {16, 32, 64, 128});
    c.K = rng.size(1, 400, {16, 32, 64, 128});
    if (rng.chance(0.05)) {
      c.M = std::min<std::int64_t>(c.M, 24), c.N = std::min<std::int64_t>(c.N, 24),
      c.K = std::min<std::int64_t>(c.K, 24);
      c.B = rng.uniform(16, 80);
      c.H = rng.uniform(8, 40);
    } else {
      const std::int64_t bh_max = std::max<std::int64_t>(
          1, std::min((std::int64_t{1} << 25) / (c.M * c.N * c.K), (std::int64_t{1} << 20) / (c.M * c.N)));
      c.B = rng.size(1, std::min<std::int64_t>(4, bh_max));
      c.H = rng.size(1, std::max<std::int64_t>(1, std::min<std::int64_t>(8, bh_max / c.B)));
    }
  }
  c.la = draw_layout(rng);
  c.lb = draw_layout(rng);
  c.lc = draw_layout(rng);
  c.trans_a = is_fp32(step) && rng.chance(0.3);
  c.alpha = rng.chance(0.6) ? 1.0f : rng.pick({0.125f, -2.0f, 0.5f, 0.0f, 3.0f});
  c.broadcast_b = rng.chance(0.15);
  c.broadcast_a = rng.chance(0.1);
  c.offset = rng.chance(0.25) ? rng.uniform(1, 3) : 0;
  const ValueRange a = course::fuzz::draw_values(rng, 1e3), b = course::fuzz::draw_values(rng, 1e3);
  c.a_lo = static_cast<float>(a.lo), c.a_hi = static_cast<float>(a.hi);
  c.b_lo = static_cast<float>(b.lo), c.b_hi = static_cast<float>(b.hi);
  c.tol_floor = a.magnitude() * b.magnitude();  // the size of one product
  return c;
}

Verdict check_bgemm(Api api, BgemmStep step, const Case& c, std::uint64_t seed) {
  const auto p = course::m02::checks::make_problem(c, seed, !is_fp32(step), api);
  const std::vector<float> got = course::m02::checks::run(course::m02::checks::impl_under_test(), api, step, p);
  Verdict v;
  const std::string failure =
      course::m02::checks::judge(p, step, got, api == Api::strided ? p.ref_strided : p.ref_ptr, &v.ratio);
  if (!failure.empty()) v.fail("C: " + failure);
  return v;
}

using BgemmParam = std::tuple<StepInfo<BgemmStep>, Api, int>;

class FuzzBgemm : public GpuTest, public ::testing::WithParamInterface<BgemmParam> {
 protected:
  void run(bool large) {
    const auto& [info, api, part_index] = GetParam();
    const BgemmStep step = info.step;
    const Api a = api;
    const Part part = make_part(op_name(api), info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_bgemm(rng, step, large); },
        [&](const Case& c, std::uint64_t s) { return check_bgemm(a, step, c, s); })));
  }
};

class FuzzBgemmLarge : public FuzzBgemm {};

TEST_P(FuzzBgemm, RandomCases) { run(false); }
TEST_P(FuzzBgemmLarge, RandomCases) { run(true); }

std::string bgemm_param_name(const ::testing::TestParamInfo<BgemmParam>& info) {
  const auto& [step, api, part] = info.param;
  return course::fuzz::test_name(step.name, course::m02::checks::to_string(api), part);  // "smem_tiled_strided_part0"
}

COURSE_FUZZ_INSTANTIATE(FuzzBgemm, FuzzBgemmLarge, bgemm_param_name, ::testing::ValuesIn(course::m02::kBgemmSteps),
                        ::testing::Values(Api::strided, Api::ptr_array));

// ------------------------------------------------------------------ bad inputs -----

/// One bad strided argument: a name for the trace, the change, and what the message must name.
template <class T>
struct BadStrided {
  const char* what;
  std::function<void(StridedBatchedGemmArgs<T>&)> mutate;
  const char* needle;
};

template <class T>
const T* half_element_off(const T* p) {
  return reinterpret_cast<const T*>(reinterpret_cast<const char*>(p) + sizeof(T) / 2);
}

/// Strided API with T inputs (the type `step` reads): every bad argument named, context healthy.
template <class T>
void sweep_strided(BgemmStep step) {
  // Valid: contiguous B=2, H=3, M=5, N=6, K=4, A*B^T, device buffers with room to spare.
  DeviceBuffer<T> a(2 * 3 * 5 * 4 + 64), b(2 * 3 * 6 * 4 + 64);
  DeviceBuffer<float> c(2 * 3 * 5 * 6 + 64);
  const auto good = [&] {
    return course::m02::contiguous_strided_args<T>(a.data(), b.data(), c.data(), 2, 3, 5, 6, 4, /*b_transposed=*/true);
  };
  const std::int64_t too_big = std::int64_t{1} << 31;
  using S = StridedBatchedGemmArgs<T>;
  const std::vector<BadStrided<T>> bad = {
      {"M = 0", [](S& s) { s.M = 0; }, "'M' = 0"},
      {"N = 0", [](S& s) { s.N = 0; }, "'N' = 0"},
      {"negative K", [](S& s) { s.K = -1; }, "'K' = -1"},
      {"batch = 0", [](S& s) { s.batch = 0; }, "'batch' = 0"},
      {"num_heads = 0", [](S& s) { s.num_heads = 0; }, "'num_heads' = 0"},
      {"M beyond 2^31 - 1", [&](S& s) { s.M = too_big; }, "'M'"},
      {"batch beyond gridDim.z", [](S& s) { s.batch = 65536; }, "'batch' = 65536"},
      {"num_heads beyond gridDim.y", [](S& s) { s.num_heads = 65536; }, "'num_heads' = 65536"},
      {"null a", [](S& s) { s.a = nullptr; }, "'a' = nullptr"},
      {"null b", [](S& s) { s.b = nullptr; }, "'b' = nullptr"},
      {"null c", [](S& s) { s.c = nullptr; }, "'c' = nullptr"},
      {"a misaligned by half an element", [&](S& s) { s.a = half_element_off(a.data()); }, "'a'"},
      {"c misaligned by half an element", [&](S& s) { s.c = const_cast<float*>(half_element_off<float>(c.data())); },
       "'c'"},
      {"negative head stride", [](S& s) { s.stride_b_head = -24; }, "'stride_b_head' = -24"},
      {"A row stride < K", [](S& s) { s.stride_a_row = 3; }, "'stride_a_row' = 3"},
      {"C row stride < N", [](S& s) { s.stride_c_row = 5; }, "'stride_c_row' = 5"},
      {"C heads on top of each other", [](S& s) { s.stride_c_head = 0; }, "'stride_c_head' = 0"},
      {"C batches overlapping", [](S& s) { s.stride_c_batch = 30; }, "'stride_c_batch' = 30"},
      {"C overlapping A (in place)", [&](S& s) { s.c = reinterpret_cast<float*>(a.data()); }, "'c'"},
      {"C overlapping B", [&](S& s) { s.c = reinterpret_cast<float*>(b.data() + 8); }, "'c'"},
  };
  for (const auto& x : bad) {
    SCOPED_TRACE(x.what);
    S s = good();
    x.mutate(s);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        EXPECT_TRUE(course::fuzz::rejects([&] { impl::batched_gemm_strided(step, s); }, x.needle)));
  }
  S s = good();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(
      course::fuzz::rejects([&] { impl::batched_gemm_strided(static_cast<BgemmStep>(99), s); }, "'step' = 99")));
  if constexpr (std::is_same_v<T, bf16>) {
    s.a_transposed = true;  // an fp32-step option
    s.stride_a_row = 5;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        EXPECT_TRUE(course::fuzz::rejects([&] { impl::batched_gemm_strided(step, s); }, "'a_transposed' = true")));
  }
  // The other input type than the step reads: named as the step.
  using Other = std::conditional_t<std::is_same_v<T, float>, bf16, float>;
  DeviceBuffer<Other> oa(a.size()), ob(b.size());
  const auto o = course::m02::contiguous_strided_args<Other>(oa.data(), ob.data(), c.data(), 2, 3, 5, 6, 4, true);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_TRUE(course::fuzz::rejects([&] { impl::batched_gemm_strided(step, o); }, "'step'")));
}

/// Pointer-array API with T inputs: every bad argument named, context healthy.
template <class T>
void sweep_ptr_array(BgemmStep step) {
  DeviceBuffer<T> a(2 * 3 * 5 * 4), b(2 * 3 * 6 * 4);
  DeviceBuffer<float> c(2 * 3 * 5 * 6);
  const auto s = course::m02::contiguous_strided_args<T>(a.data(), b.data(), c.data(), 2, 3, 5, 6, 4, true);
  course::m02::BatchedPtrArrays<T> arrays;
  course::m02::build_ptr_arrays(s, arrays);
  using P = PtrArrayBatchedGemmArgs<T>;
  const auto good = [&] { return course::m02::ptr_array_args(s, arrays); };
  struct Bad {
    const char* what;
    std::function<void(P&)> mutate;
    const char* needle;
  };
  const std::vector<Bad> bad = {
      {"K = 0", [](P& p) { p.K = 0; }, "'K' = 0"},
      {"negative N", [](P& p) { p.N = -6; }, "'N' = -6"},
      {"batch beyond gridDim.z", [](P& p) { p.batch = 70000; }, "'batch' = 70000"},
      {"num_heads beyond gridDim.y", [](P& p) { p.num_heads = 65536; }, "'num_heads' = 65536"},
      {"null a_ptrs", [](P& p) { p.a_ptrs = nullptr; }, "'a_ptrs' = nullptr"},
      {"null b_ptrs", [](P& p) { p.b_ptrs = nullptr; }, "'b_ptrs' = nullptr"},
      {"null c_ptrs", [](P& p) { p.c_ptrs = nullptr; }, "'c_ptrs' = nullptr"},
      {"lda < K", [](P& p) { p.lda = 3; }, "'lda' = 3"},
      {"ldb < K (B^T)", [](P& p) { p.ldb = 2; }, "'ldb' = 2"},
      {"ldc < N", [](P& p) { p.ldc = 5; }, "'ldc' = 5"},
      {"a_ptrs misaligned",
       [&](P& p) { p.a_ptrs = reinterpret_cast<const T* const*>(reinterpret_cast<const char*>(arrays.a.data()) + 4); },
       "'a_ptrs'"},
      {"pointer arrays in host memory", [&](P& p) { p.a_ptrs = arrays.host_a.data(); }, "'a_ptrs'"},
  };
  for (const Bad& x : bad) {
    SCOPED_TRACE(x.what);
    P p = good();
    x.mutate(p);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        EXPECT_TRUE(course::fuzz::rejects([&] { impl::batched_gemm_ptr_array(step, p); }, x.needle)));
  }
  if constexpr (std::is_same_v<T, bf16>) {
    P p = good();
    p.a_transposed = true;
    p.lda = 5;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        EXPECT_TRUE(course::fuzz::rejects([&] { impl::batched_gemm_ptr_array(step, p); }, "'a_transposed' = true")));
  }
}

class FuzzBgemmBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<BgemmStep>> {};

TEST_P(FuzzBgemmBadInputs, StridedRejectedByNameContextHealthy) {
  if (is_fp32(GetParam().step))
    sweep_strided<float>(GetParam().step);
  else
    sweep_strided<bf16>(GetParam().step);
}

TEST_P(FuzzBgemmBadInputs, PtrArrayRejectedByNameContextHealthy) {
  if (is_fp32(GetParam().step))
    sweep_ptr_array<float>(GetParam().step);
  else
    sweep_ptr_array<bf16>(GetParam().step);
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzBgemmBadInputs, ::testing::ValuesIn(course::m02::kBgemmSteps),
                         step_name<BgemmStep>);

// ======================================= the generator itself (CPU only) =====
// Every drawn case must pass the API's own validation (both APIs: the strided layout and
// the host copies of the pointer arrays built from it), and every feature must occur.

template <class T>
void validate_drawn(const Case& c, BgemmStep step) {
  const auto p = course::m02::checks::layout_problem(c);
  const auto s = course::m02::checks::args_on<T>(p, fake_address<T>(1, c.offset), fake_address<T>(2, c.offset),
                                                 fake_address<float>(3, c.offset));
  course::m02::validate_strided_args(s, step, "fuzz");
  PtrArrayBatchedGemmArgs<T> q;  // checked through host copies of its arrays: nothing is uploaded
  q.M = s.M, q.N = s.N, q.K = s.K, q.batch = s.batch, q.num_heads = s.num_heads;
  q.lda = s.stride_a_row, q.ldb = s.stride_b_row, q.ldc = s.stride_c_row;
  q.a_transposed = s.a_transposed, q.b_transposed = s.b_transposed;
  std::vector<const T*> a, b;
  std::vector<float*> cs;
  for (std::int64_t bi = 0; bi < s.batch; ++bi)
    for (std::int64_t h = 0; h < s.num_heads; ++h) {
      a.push_back(s.a + bi * s.stride_a_batch + h * s.stride_a_head);
      b.push_back(s.b + bi * s.stride_b_batch + h * s.stride_b_head);
      cs.push_back(s.c + bi * s.stride_c_batch + h * s.stride_c_head);
    }
  course::m02::validate_ptr_array_contents(q, a, b, cs, "fuzz");
}

TEST(FuzzGenerators, BgemmCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  for (const auto& info : course::m02::kBgemmSteps) {
    course::fuzz::Coverage cov(std::string("batched_gemm/") + info.name);
    for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
      Rng rng(course::fuzz::case_seed(seed, i));
      const Case c = draw_bgemm(rng, info.step, i >= kCasesPerStep);
      if (is_fp32(info.step))
        EXPECT_NO_THROW(validate_drawn<float>(c, info.step)) << c.str();
      else
        EXPECT_NO_THROW(validate_drawn<bf16>(c, info.step)) << c.str();
      cov.next_case();
      cov.count("a dim = 1", c.M == 1 || c.N == 1 || c.K == 1);
      cov.count("prime M", course::fuzz::is_prime(c.M));
      cov.count("K=k*tile+-1", c.K % 16 != 0 && course::fuzz::near_tile(c.K, {16, 32, 64, 128}));
      cov.count("B*H>=128", c.B * c.H >= 128);
      cov.count("bnhd A", c.la == Layout::bnhd);
      cov.count("odd-padded C", c.lc == Layout::padded_odd);
      cov.count("A*B^T", c.trans_b);
      if (is_fp32(info.step)) cov.count("A^T", c.trans_a);
      cov.count("broadcast A", c.broadcast_a);
      cov.count("broadcast B", c.broadcast_b);
      cov.count("offset", c.offset != 0);
      cov.count("alpha!=1", c.alpha != 1.0f);
      cov.count("one-signed A", c.a_lo >= 0 || c.a_hi <= 0);
      cov.count("|B|>=100", std::max(std::fabs(c.b_lo), std::fabs(c.b_hi)) >= 100);
    }
    std::cout << cov.str() << "\n";
    EXPECT_TRUE(cov.all_hit());
  }
}

}  // namespace
