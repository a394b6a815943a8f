// Benchmarks of the batched GEMM ladder: both products of attention (Q*K^T and P*V), fp32
// and bf16, at three attention shapes, every step through both APIs (step names
// "<step>_strided" and "<step>_ptr"), solution beside exercise, and cuBLAS:
//   cublas_strided   = cublasGemmStridedBatchedEx
//   cublas_ptr_array = cublasGemmBatchedEx
// fp32 rows use CUBLAS_COMPUTE_32F with the default math mode: no TF32, true fp32 FMA
// (what our fp32 steps do). bf16 rows: bf16 A and B, fp32 accumulation and fp32 C.
// Rows "bgemm_ptr_build/solution/..." time building and uploading the pointer arrays
// (course::m02::build_ptr_arrays), host wall-clock.
//
// Row names: "bgemm_<qk|pv>_<f32|bf16>/<impl>/<step>/B<b>H<h>N<n>d<d>"; TFLOP/s counts
// 2*B*H*M*N*K FLOPs.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "module02/batched_gemm.hpp"
#include "module02/batched_gemm_support.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>

namespace {

namespace bench = course::bench;
using bf16 = __nv_bfloat16;
using course::DeviceBuffer;
using course::m02::BatchedPtrArrays;
using course::m02::BgemmInput;
using course::m02::BgemmStep;
using course::m02::PtrArrayBatchedGemmArgs;
using course::m02::StridedBatchedGemmArgs;

struct AttnShape {
  std::int64_t B, H, N, d;
  std::string name() const {
    return "B" + std::to_string(B) + "H" + std::to_string(H) + "N" + std::to_string(N) + "d" + std::to_string(d);
  }
};
const AttnShape kShapes[] = {{8, 16, 1024, 64}, {4, 32, 2048, 128}, {64, 12, 128, 64}};

enum class Product { qk, pv };

/// The GEMM of one product: Q*K^T is M = N = seq, K = d, B stored N x K (transposed);
/// P*V is M = K = seq, N = d, B stored K x N.
struct Dims {
  std::int64_t M, N, K;
  bool trans_b;
};
Dims dims_of(Product p, const AttnShape& s) {
  return p == Product::qk ? Dims{s.N, s.N, s.d, true} : Dims{s.N, s.d, s.N, false};
}
double flops_of(Product p, const AttnShape& s) {
  const Dims d = dims_of(p, s);
  return 2.0 * static_cast<double>(s.B * s.H) * static_cast<double>(d.M) * static_cast<double>(d.N) *
         static_cast<double>(d.K);
}

/// Random A, B and a C for one (product, type, shape), contiguous [B, H, rows, cols], in
/// enough copies that consecutive iterations do not find their inputs in L2, with the
/// pointer arrays of every copy built once (untimed).
template <class T>
struct Operands {
  struct Copy {
    DeviceBuffer<T> a, b;
    DeviceBuffer<float> c;
    StridedBatchedGemmArgs<T> strided;
    BatchedPtrArrays<T> arrays;
    PtrArrayBatchedGemmArgs<T> ptr;
  };
  bench::Rotation<Copy> copies;

  Operands(Product prod, const AttnShape& s) {
    const Dims d = dims_of(prod, s);
    const std::int64_t count = s.B * s.H;
    const std::int64_t na = count * d.M * d.K, nb = count * d.N * d.K, nc = count * d.M * d.N;
    const double bytes = static_cast<double>(sizeof(T) * (na + nb) + sizeof(float) * nc);
    const int n_copies = static_cast<int>(std::clamp(2.0 * bench::l2_cache_bytes() / bytes + 1.0, 1.0, 4.0));
    for (int k = 0; k < n_copies; ++k) {
      Copy& cp = copies.add();
      cp.a = DeviceBuffer<T>(static_cast<std::size_t>(na));
      cp.b = DeviceBuffer<T>(static_cast<std::size_t>(nb));
      cp.c = DeviceBuffer<float>(static_cast<std::size_t>(nc));
      bench::fill_uniform_device(cp.a.data(), na, 1000 + 3 * k, -1.f, 1.f);
      bench::fill_uniform_device(cp.b.data(), nb, 1001 + 3 * k, -1.f, 1.f);
      bench::fill_uniform_device(cp.c.data(), nc, 1002 + 3 * k, -1.f, 1.f);
      cp.strided = course::m02::contiguous_strided_args<T>(cp.a.data(), cp.b.data(), cp.c.data(), s.B, s.H, d.M,
                                                           d.N, d.K, d.trans_b);
      course::m02::build_ptr_arrays(cp.strided, cp.arrays);
      cp.ptr = course::m02::ptr_array_args(cp.strided, cp.arrays);
    }
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

/// One Operands per (product, type, shape), kept for the process (the largest set is
/// ~2.3 GB; all of them fit an 80 GB GPU).
template <class T>
Operands<T>& operands_for(Product p, const AttnShape& s) {
  return bench::cached<Operands<T>>(std::tuple{static_cast<int>(p), s.B, s.H, s.N, s.d}, p, s);
}

/// Times `call` on rotating copies; it must enqueue its work on the default stream.
template <class T>
void run_timed(benchmark::State& state, Product prod, const AttnShape& shape,
               const std::function<void(typename Operands<T>::Copy&)>& call) {
  bench::guard(state, [&] {
    Operands<T>& ops = operands_for<T>(prod, shape);
    bench::time_calls(state, [&]() -> typename Operands<T>::Copy& { return ops.copies.next(); }, call);
    bench::set_flops(state, flops_of(prod, shape));
  });
}

template <class T>
constexpr cudaDataType_t cuda_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

/// cuBLAS is column-major: it reads our row-major C (M x N) as C^T (N x M), so we ask for
/// C^T = op(B)^T * A^T, with m = N, n = M. Its first operand is our B: stored N x K
/// (b_transposed) cuBLAS sees the K x N matrix B^T and must transpose it back
/// (CUBLAS_OP_T); stored K x N it sees N x K = op(B)^T as is (CUBLAS_OP_N). Its second
/// operand is our A, which it sees as A^T (K x M): CUBLAS_OP_N.
template <class T>
void cublas_strided(const StridedBatchedGemmArgs<T>& s) {
  const float alpha = s.alpha, beta = 0.f;
  bench::check_cublas(
      cublasGemmStridedBatchedEx(bench::cublas_handle(), s.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                                 static_cast<int>(s.N), static_cast<int>(s.M), static_cast<int>(s.K), &alpha, s.b,
                                 cuda_type<T>(), static_cast<int>(s.stride_b_row), s.stride_b_head, s.a,
                                 cuda_type<T>(), static_cast<int>(s.stride_a_row), s.stride_a_head, &beta, s.c,
                                 CUDA_R_32F, static_cast<int>(s.stride_c_row), s.stride_c_head,
                                 static_cast<int>(s.batch * s.num_heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx");
}

template <class T>
void cublas_ptr_array(const PtrArrayBatchedGemmArgs<T>& p) {
  const float alpha = p.alpha, beta = 0.f;
  bench::check_cublas(
      cublasGemmBatchedEx(bench::cublas_handle(), p.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                          static_cast<int>(p.N), static_cast<int>(p.M), static_cast<int>(p.K), &alpha,
                          reinterpret_cast<const void* const*>(p.b_ptrs), cuda_type<T>(), static_cast<int>(p.ldb),
                          reinterpret_cast<const void* const*>(p.a_ptrs), cuda_type<T>(), static_cast<int>(p.lda),
                          &beta, reinterpret_cast<void* const*>(p.c_ptrs), CUDA_R_32F, static_cast<int>(p.ldc),
                          static_cast<int>(p.batch * p.num_heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmBatchedEx");
}

template <class T>
using StridedFn = void (*)(BgemmStep, const StridedBatchedGemmArgs<T>&);
template <class T>
using PtrFn = void (*)(BgemmStep, const PtrArrayBatchedGemmArgs<T>&);

template <class T>
void register_gemm_rows(Product prod, const char* op_name) {
  using Copy = typename Operands<T>::Copy;
  constexpr BgemmInput input = std::is_same_v<T, float> ? BgemmInput::f32 : BgemmInput::bf16;
  const struct {
    const char* impl;
    StridedFn<T> strided;
    PtrFn<T> ptr;
  } impls[] = {
      {"solution", &course::solution::batched_gemm_strided, &course::solution::batched_gemm_ptr_array},
      {"exercise", &course::exercise::batched_gemm_strided, &course::exercise::batched_gemm_ptr_array},
  };
  // Registers "<op_name>/<impl>/<step>/<shape>" timing `call` on rotating copies.
  auto add = [&](const char* impl, const std::string& step, const AttnShape& shape,
                 std::function<void(Copy&)> call) {
    bench::add_row(bench::row_name(op_name, impl, step, shape.name()), benchmark::kMicrosecond,
                   [=](benchmark::State& state) { run_timed<T>(state, prod, shape, call); });
  };
  for (const AttnShape& shape : kShapes) {
    for (const auto& im : impls) {
      for (const auto& info : course::m02::kBgemmSteps) {
        if (course::m02::step_input(info.step) != input) continue;
        const BgemmStep step = info.step;
        const StridedFn<T> sf = im.strided;
        const PtrFn<T> pf = im.ptr;
        add(im.impl, std::string(info.name) + "_strided", shape, [=](Copy& cp) { sf(step, cp.strided); });
        add(im.impl, std::string(info.name) + "_ptr", shape, [=](Copy& cp) { pf(step, cp.ptr); });
      }
    }
    add("library", "cublas_strided", shape, [](Copy& cp) { cublas_strided(cp.strided); });
    add("library", "cublas_ptr_array", shape, [](Copy& cp) { cublas_ptr_array(cp.ptr); });
  }
}

/// The set-up cost of the pointer-array API: build batch*num_heads pointers per operand
/// on the host, check them, upload them (three synchronous copies). "reuse" keeps the
/// device arrays between calls; "alloc" builds a fresh BatchedPtrArrays (cudaMalloc and
/// cudaFree each time). Host wall-clock, since most of the cost is on the host.
void register_ptr_build_rows() {
  for (const AttnShape& shape : kShapes) {
    for (const bool reuse : {true, false}) {
      const char* step = reuse ? "host_build_upload" : "host_build_alloc_upload";
      bench::add_row(bench::row_name("bgemm_ptr_build", "solution", step, shape.name()), benchmark::kMicrosecond,
                     [=](benchmark::State& state) {
        bench::guard(state, [&] {
          auto& cp = operands_for<float>(Product::qk, shape).copies.next();
          BatchedPtrArrays<float> kept;
          course::m02::build_ptr_arrays(cp.strided, kept);  // warm-up
          for (auto _ : state) {
            const auto t0 = std::chrono::steady_clock::now();
            if (reuse) {
              course::m02::build_ptr_arrays(cp.strided, kept);
            } else {
              BatchedPtrArrays<float> fresh;
              course::m02::build_ptr_arrays(cp.strided, fresh);
            }  // (fresh's cudaFree is inside the timed region: it is part of the cost)
            const auto t1 = std::chrono::steady_clock::now();
            state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
          }
          state.counters["pointers"] = static_cast<double>(3 * shape.B * shape.H);
        });
      });
    }
  }
}

void register_rows() {
  register_gemm_rows<float>(Product::qk, "bgemm_qk_f32");
  register_gemm_rows<float>(Product::pv, "bgemm_pv_f32");
  register_gemm_rows<bf16>(Product::qk, "bgemm_qk_bf16");
  register_gemm_rows<bf16>(Product::pv, "bgemm_pv_bf16");
  register_ptr_build_rows();
}

[[maybe_unused]] const bool registered = (register_rows(), true);

}  // namespace
