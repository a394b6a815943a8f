// m02_attention_gemms: attention's two batched GEMMs.
//  1. The lesson's worked example (B=1, H=2, N=3, d=4): scores = Q*K^T, then scores*V,
//     for every step and both APIs, printed beside the CPU reference.
//  2. Naive attention built from them: S = Q*K^T / sqrt(d), P = softmax(S) row by row
//     (module 1's softmax), O = P*V, compared with course::ref::attention_forward, with
//     the time of each GEMM.
//
//   m02_attention_gemms                                  B=2, H=8, N=512, d=64
//   m02_attention_gemms --batch 4 --heads 16 --seq 1024 --dim 128 --seed 7
#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/demo.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/timer.hpp"
#include "module02/batched_gemm.hpp"
#include "module02/batched_gemm_support.hpp"
#include "module01/softmax.hpp"

#include <CLI/CLI.hpp>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

namespace {

using bf16 = __nv_bfloat16;
using course::DeviceBuffer;
using course::HostTensor;
using course::m02::BgemmInput;
using course::m02::BgemmStep;
using course::m02::StridedBatchedGemmArgs;

/// One implementation's four entry points.
struct Impl {
  const char* name;
  std::function<void(BgemmStep, const StridedBatchedGemmArgs<float>&)> strided_f32;
  std::function<void(BgemmStep, const StridedBatchedGemmArgs<bf16>&)> strided_bf16;
  std::function<void(BgemmStep, const course::m02::PtrArrayBatchedGemmArgs<float>&)> ptr_f32;
  std::function<void(BgemmStep, const course::m02::PtrArrayBatchedGemmArgs<bf16>&)> ptr_bf16;
};

template <class NS>
Impl make_impl(const char* name) {
  return {name, [](BgemmStep s, const StridedBatchedGemmArgs<float>& a) { NS::strided(s, a); },
          [](BgemmStep s, const StridedBatchedGemmArgs<bf16>& a) { NS::strided(s, a); },
          [](BgemmStep s, const course::m02::PtrArrayBatchedGemmArgs<float>& a) { NS::ptr(s, a); },
          [](BgemmStep s, const course::m02::PtrArrayBatchedGemmArgs<bf16>& a) { NS::ptr(s, a); }};
}
struct SolutionNS {
  template <class A>
  static void strided(BgemmStep s, const A& a) { course::solution::batched_gemm_strided(s, a); }
  template <class A>
  static void ptr(BgemmStep s, const A& a) { course::solution::batched_gemm_ptr_array(s, a); }
};
struct ExerciseNS {
  template <class A>
  static void strided(BgemmStep s, const A& a) { course::exercise::batched_gemm_strided(s, a); }
  template <class A>
  static void ptr(BgemmStep s, const A& a) { course::exercise::batched_gemm_ptr_array(s, a); }
};

enum class Api { strided, ptr_array };
const char* to_string(Api a) { return a == Api::strided ? "strided" : "ptr_array"; }

/// Runs one batched GEMM given as strided arguments, through `api` (for the pointer
/// array, the arrays are built from the strided layout first; that cost is not timed).
/// Returns the median time in ms of `runs` calls (0 runs: one untimed call).
template <class T>
double run_gemm(const Impl& impl, Api api, BgemmStep step, const StridedBatchedGemmArgs<T>& s, int runs) {
  std::function<void()> call;
  course::m02::BatchedPtrArrays<T> arrays;
  if (api == Api::strided) {
    call = [&] {
      if constexpr (std::is_same_v<T, float>) impl.strided_f32(step, s); else impl.strided_bf16(step, s);
    };
  } else {
    course::m02::build_ptr_arrays(s, arrays);
    const auto p = course::m02::ptr_array_args(s, arrays);
    call = [&impl, step, p] {
      if constexpr (std::is_same_v<T, float>) impl.ptr_f32(step, p); else impl.ptr_bf16(step, p);
    };
  }
  if (runs == 0) {
    call();
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    return 0.0;
  }
  return course::time_kernel(call, 2, runs).median_ms;
}

template <class T>
std::vector<T> as_input(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>) return x; else return course::to_bf16(x);
}

void print_matrix(const char* title, const float* m, int rows, int cols, int ld) {
  std::printf("      %s\n", title);
  for (int r = 0; r < rows; ++r) {
    std::printf("        [");
    for (int c = 0; c < cols; ++c) std::printf(" %6.2f", static_cast<double>(m[r * ld + c]));
    std::printf(" ]\n");
  }
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    m = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(m, d);
  }
  return m;
}

// ---------------------------------------------------------------- worked example --

/// The lesson's example: B = 1, H = 2, N = 3, d = 4, contiguous [B, H, N, d].
struct Example {
  std::vector<float> q = {1, 0, 2, -1, 0, 1, -1, 2, 2, 1, 0, 1, 1, 2, 0, 0, 0, 0, 1, 1, -1, 1, 1, 0};
  std::vector<float> k = {1, 1, 0, 0, 0, 2, 1, -1, 1, 0, -1, 1, 0, 1, 0, 1, 1, 0, 1, 0, 2, -1, 0, 1};
  std::vector<float> v = {1, 0, 0, 1, 0, 1, 0, -1, 1, 1, 1, 0, 2, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 1};
  std::vector<float> s = std::vector<float>(18), o = std::vector<float>(24);  // references
  Example() {
    auto d1 = course::m02::contiguous_strided_args<float>(q.data(), k.data(), s.data(), 1, 2, 3, 3, 4, true);
    course::ref::batched_gemm_strided(course::m02::reference_desc(d1), q.data(), k.data(), s.data());
    auto d2 = course::m02::contiguous_strided_args<float>(s.data(), v.data(), o.data(), 1, 2, 3, 4, 3, false);
    course::ref::batched_gemm_strided(course::m02::reference_desc(d2), s.data(), v.data(), o.data());
  }
};

void print_example_reference(const Example& ex) {
  std::printf("Worked example: B = 1, H = 2, N = 3, d = 4 (contiguous [B, H, N, d])\n");
  for (int h = 0; h < 2; ++h) {
    std::printf("  head %d\n", h);
    print_matrix("Q", ex.q.data() + h * 12, 3, 4, 4);
    print_matrix("K", ex.k.data() + h * 12, 3, 4, 4);
    print_matrix("V", ex.v.data() + h * 12, 3, 4, 4);
    print_matrix("scores = Q K^T (CPU reference)", ex.s.data() + h * 9, 3, 3, 3);
    print_matrix("scores V       (CPU reference)", ex.o.data() + h * 12, 3, 4, 4);
  }
}

template <class T>
void example_on_device(const Impl& impl, Api api, BgemmStep step, const Example& ex) {
  DeviceBuffer<T> q(as_input<T>(ex.q)), k(as_input<T>(ex.k)), v(as_input<T>(ex.v)), s_in(18);
  DeviceBuffer<float> s(18), o(24);
  s.poison();
  o.poison();
  run_gemm<T>(impl, api, step,
              course::m02::contiguous_strided_args<T>(q.data(), k.data(), s.data(), 1, 2, 3, 3, 4, true), 0);
  const std::vector<float> scores = s.download();
  s_in.upload(as_input<T>(scores));
  run_gemm<T>(impl, api, step,
              course::m02::contiguous_strided_args<T>(s_in.data(), v.data(), o.data(), 1, 2, 3, 4, 3, false), 0);
  const std::vector<float> out = o.download();
  std::printf("  %-8s %-16s %-9s  scores head 1 row 2 = [%g %g %g]  max|err| scores %.3g, out %.3g\n", impl.name,
              course::m02::step_name(step), to_string(api), scores[15], scores[16], scores[17],
              max_abs_diff(scores, ex.s), max_abs_diff(out, ex.o));
}

// ---------------------------------------------------------------- attention -------

/// P = softmax(S) along each row of the [rows x cols] matrix S (device buffers).
void row_softmax(const float* s, float* p, std::int64_t rows, std::int64_t cols) {
  course::solution::softmax(course::m01::SoftmaxStep::online_vectorized,
                            course::m01::contiguous_softmax_args(s, p, rows, cols, /*dim=*/1));
}

struct AttentionProblem {
  std::int64_t B, H, N, d;
  HostTensor<float> q, k, v;  // contiguous [B, H, N, d]
  HostTensor<float> ref_f32, ref_bf16;  // O of the CPU reference on the fp32 / bf16-rounded inputs

  /// q, k, v as a step reading T sees them.
  template <class T>
  HostTensor<float> as_seen(const HostTensor<float>& x) const {
    HostTensor<float> y = x;
    if constexpr (std::is_same_v<T, bf16>) y.storage() = course::round_to_bf16(y.storage());
    return y;
  }
  template <class T>
  const HostTensor<float>& reference() {
    HostTensor<float>& r = std::is_same_v<T, bf16> ? ref_bf16 : ref_f32;
    if (r.rank() == 0) r = course::ref::attention_forward(as_seen<T>(q), as_seen<T>(k), as_seen<T>(v)).out;
    return r;
  }
};

template <class T>
void attention_on_device(const Impl& impl, Api api, BgemmStep step, AttentionProblem& pr) {
  const std::int64_t B = pr.B, H = pr.H, N = pr.N, d = pr.d;
  const bool bf = std::is_same_v<T, bf16>;
  // The bf16 step sees bf16-rounded inputs: its reference is computed on those.
  const HostTensor<float>& ref = pr.reference<T>();
  DeviceBuffer<T> dq(as_input<T>(pr.q.storage())), dk(as_input<T>(pr.k.storage())), dv(as_input<T>(pr.v.storage()));
  DeviceBuffer<float> s(static_cast<std::size_t>(B * H * N * N)), p(s.size()), o(static_cast<std::size_t>(B * H * N * d));
  DeviceBuffer<T> p_in(bf ? s.size() : 0);
  s.poison();
  o.poison();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto qk = course::m02::contiguous_strided_args<T>(dq.data(), dk.data(), s.data(), B, H, N, N, d, true, scale);
  const double t_qk = run_gemm<T>(impl, api, step, qk, 10);
  row_softmax(s.data(), p.data(), B * H * N, N);
  const T* p_ptr;
  if constexpr (std::is_same_v<T, bf16>) {
    // bf16 P for the tensor-core P*V (a fused kernel would convert in the softmax).
    p_in.upload(course::to_bf16(p.download()));
    p_ptr = p_in.data();
  } else {
    p_ptr = p.data();
  }
  const auto pv = course::m02::contiguous_strided_args<T>(p_ptr, dv.data(), o.data(), B, H, N, d, N, false);
  const double t_pv = run_gemm<T>(impl, api, step, pv, 10);

  HostTensor<float> got({B, H, N, d});
  got.storage() = o.download();
  const auto dtype = bf ? course::DType::bf16 : course::DType::f32;
  const auto cmp = course::compare(got, ref, course::tolerance_for(dtype, N), {"b", "h", "i", "j"});
  const double flops = 2.0 * static_cast<double>(B * H) * static_cast<double>(N) * static_cast<double>(N) * d;
  std::printf("  %-8s %-16s %-9s  Q*K^T %8.3f ms (%6.1f TFLOP/s)  P*V %8.3f ms (%6.1f TFLOP/s)  O: max|err| %.2e %s\n",
              impl.name, course::m02::step_name(step), to_string(api), t_qk, flops / (t_qk * 1e-3) / 1e12, t_pv,
              flops / (t_pv * 1e-3) / 1e12, cmp.max_abs_error, cmp.ok() ? "ok" : "MISMATCH");
  if (!cmp.ok()) std::printf("%s\n", cmp.report().c_str());
}

/// Calls `f`; a stub that is not written yet prints one line instead.
template <class F>
void guarded(const Impl& impl, BgemmStep step, Api api, F f) {
  try {
    f();
  } catch (const course::NotImplemented& e) {
    std::printf("  %-8s %-16s %-9s  not implemented yet (%s)\n", impl.name, course::m02::step_name(step),
                to_string(api), e.file().c_str());
  } catch (const course::Unsupported& e) {
    std::printf("  %-8s %-16s %-9s  %s\n", impl.name, course::m02::step_name(step), to_string(api), e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"m02_attention_gemms: attention's two batched GEMMs (Q*K^T and P*V), every step, both APIs"};
  std::int64_t batch = 2, heads = 8, seq = 512, dim = 64;
  std::uint64_t seed = 0;
  bool with_exercise = true;
  app.add_option("--batch,-b", batch, "batch size B")->check(CLI::Range(1, 65535));
  app.add_option("--heads", heads, "number of heads H")->check(CLI::Range(1, 65535));
  app.add_option("--seq,-n", seq, "sequence length N")->check(CLI::Range(1, 16384));
  app.add_option("--dim,-d", dim, "head dimension d")->check(CLI::Range(1, 1024));
  app.add_option("--seed", seed, "random seed (default: course::seed_for(\"m02_attention_gemms\"))");
  app.add_flag("!--no-exercise", with_exercise, "skip your (exercise) implementation");
  CLI11_PARSE(app, argc, argv);
  if (seed == 0) seed = course::seed_for("m02_attention_gemms");

  try {
    const Example ex;
    print_example_reference(ex);

    const std::int64_t ref_cost = batch * heads * seq * seq * dim;
    AttentionProblem pr{batch, heads, seq, dim, HostTensor<float>({batch, heads, seq, dim}),
                        HostTensor<float>({batch, heads, seq, dim}), HostTensor<float>({batch, heads, seq, dim}), {}, {}};
    course::fill_random(pr.q, seed, -1.0, 1.0);
    course::fill_random(pr.k, seed + 1, -1.0, 1.0);
    course::fill_random(pr.v, seed + 2, -1.0, 1.0);

    if (const auto why = course::demo::no_device_reason()) {
      std::printf("\n%s\n", why->c_str());
      if (ref_cost > (std::int64_t{1} << 30)) {
        std::printf("(attention reference skipped: B*H*N*N*d = %lld is slow on one CPU core; pass smaller sizes)\n",
                    static_cast<long long>(ref_cost));
        return 0;
      }
      const HostTensor<float>& ref = pr.reference<float>();
      std::printf("\nNaive attention, CPU reference, B=%lld H=%lld N=%lld d=%lld (seed %llu): O[0, 0, 0, :4] =",
                  static_cast<long long>(batch), static_cast<long long>(heads), static_cast<long long>(seq),
                  static_cast<long long>(dim), static_cast<unsigned long long>(seed));
      for (std::int64_t j = 0; j < std::min<std::int64_t>(4, dim); ++j)
        std::printf(" %.5f", static_cast<double>(ref({0, 0, 0, j})));
      std::printf("\n");
      return 0;
    }
    std::printf("\nDevice: %s\n", course::device_summary().c_str());

    std::vector<Impl> impls = {make_impl<SolutionNS>("solution")};
    if (with_exercise) impls.push_back(make_impl<ExerciseNS>("exercise"));

    std::printf("\nWorked example on the GPU (every step, both APIs):\n");
    for (const Impl& impl : impls)
      for (const auto& info : course::m02::kBgemmSteps)
        for (const Api api : {Api::strided, Api::ptr_array})
          guarded(impl, info.step, api, [&] {
            if (course::m02::step_input(info.step) == BgemmInput::bf16)
              example_on_device<bf16>(impl, api, info.step, ex);
            else
              example_on_device<float>(impl, api, info.step, ex);
          });

    std::printf("\nNaive attention O = softmax(Q K^T / sqrt(d)) V from two batched GEMMs, B=%lld H=%lld N=%lld d=%lld"
                " (seed %llu)\n",
                static_cast<long long>(batch), static_cast<long long>(heads), static_cast<long long>(seq),
                static_cast<long long>(dim), static_cast<unsigned long long>(seed));
    std::printf("softmax: module 1's solution (online_vectorized); reference: course::ref::attention_forward\n");
    if (ref_cost > (std::int64_t{1} << 33))
      std::printf("(the CPU reference of this size takes a while)\n");
    for (const Impl& impl : impls)
      for (const auto& info : course::m02::kBgemmSteps)
        for (const Api api : {Api::strided, Api::ptr_array})
          guarded(impl, info.step, api, [&] {
            if (course::m02::step_input(info.step) == BgemmInput::bf16)
              attention_on_device<bf16>(impl, api, info.step, pr);
            else
              attention_on_device<float>(impl, api, info.step, pr);
          });
  } catch (const course::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
