// Tensor-core matmul benchmarks: C (fp32) = A (bf16) * B (bf16), every step (solution and
// exercise) at 8192^3, 4096^3, 2048^3 and 8192x8192x1024, beside the library row
// "hgemm_bf16/library/cublas_gemmex/<shape>": cublasGemmEx with bf16 inputs, fp32 output
// and CUBLAS_COMPUTE_32F, row-major through the operand swap (C^T = B^T * A^T in cuBLAS's
// column-major view). Counters: TFLOP/s (2*M*N*K per call) and, as the ceiling, the cuBLAS
// rate measured once per shape in this process.
#include "course/bench.hpp"
#include "course/bf16.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/timer.hpp"
#include "module01/matmul_tc.hpp"

#include <cublas_v2.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using bf16 = __nv_bfloat16;
using MatmulTcFn = void (*)(TcMatmulStep, const TcMatmulArgs&);

struct Shape {
  std::int64_t m, n, k;
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

/// The four shapes: two large cubes, a small cube and a short-K one. The large
/// shapes' operands exceed the 50 MB L2 (4096^2 bf16 A and B = 64 MiB together, C 64 MiB);
/// at 2048^3 A and B (16 MiB) stay in L2 between calls, for cuBLAS as for the course's
/// steps, and the kernel is compute-bound anyway (2 * 2048 FLOPs per loaded element), so no
/// buffer rotation is needed.
const Shape kShapes[] = {{8192, 8192, 8192}, {4096, 4096, 4096}, {2048, 2048, 2048}, {8192, 8192, 1024}};

/// Random bf16 A and B (uniform [-1, 1), never zeros: tensor cores are measurably faster
/// on zeros) and C, allocated once per shape per process.
struct Operands {
  DeviceBuffer<bf16> a, b;
  DeviceBuffer<float> c;

  explicit Operands(const Shape& s) {
    const auto seed = course::seed_for("bench_matmul_tc/" + s.name());
    a = DeviceBuffer<bf16>(course::to_bf16(course::random_vector(static_cast<std::size_t>(s.m * s.k), seed)));
    b = DeviceBuffer<bf16>(course::to_bf16(course::random_vector(static_cast<std::size_t>(s.k * s.n), seed + 1)));
    c = DeviceBuffer<float>(static_cast<std::size_t>(s.m * s.n));
  }
};

TcMatmulArgs args_for(const Shape& s) {
  Operands& op = bench::cached<Operands>(s.name(), s);
  TcMatmulArgs a;
  a.a = op.a.data();
  a.b = op.b.data();
  a.c = op.c.data();
  a.m = s.m;
  a.n = s.n;
  a.k = s.k;
  a.lda = s.k;
  a.ldb = s.n;
  a.ldc = s.n;
  return a;
}

/// Row-major C = A * B through column-major cuBLAS: C^T (N x M) = B^T (N x K) * A^T (K x M),
/// and a row-major matrix with leading dimension ld is its transpose, column-major, same ld.
void cublas_gemm(const TcMatmulArgs& a) {
  const float one = 1.f, zero = 0.f;
  bench::check_cublas(
      cublasGemmEx(bench::cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(a.n), static_cast<int>(a.m),
                   static_cast<int>(a.k), &one, a.b, CUDA_R_16BF, static_cast<int>(a.ldb), a.a, CUDA_R_16BF,
                   static_cast<int>(a.lda), &zero, a.c, CUDA_R_32F, static_cast<int>(a.ldc), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

/// cuBLAS's TFLOP/s for `s`, measured once per process: the ceiling of every row.
double cublas_tflops(const Shape& s) {
  static std::map<std::string, double> cache;
  auto it = cache.find(s.name());
  if (it != cache.end()) return it->second;
  const TcMatmulArgs a = args_for(s);
  const course::TimingStats t = course::time_kernel([&] { cublas_gemm(a); }, 3, 20);
  const double tflops = s.flops() / (t.median_ms * 1e-3) / 1e12;
  cache[s.name()] = tflops;
  return tflops;
}

/// Times `gemm` (one of our steps, or cuBLAS) on the shape's operands; the ceiling is
/// measured after the timed loop, so the warm-up directly precedes it.
void bench_gemm(benchmark::State& state, const Shape& s, const std::function<void(const TcMatmulArgs&)>& gemm) {
  bench::guard(state, [&] {
    const TcMatmulArgs a = args_for(s);
    bench::time_calls(state, [&] { return a; }, gemm);
    bench::set_flops(state, s.flops(), cublas_tflops(s));
  });
}

const bool kRegistered = [] {
  for (const Shape& s : kShapes) {
    for (const auto& info : course::m01::kTcMatmulSteps) {
      bench::add_step_rows("hgemm_bf16", info.name, s.name(), benchmark::kMillisecond, &course::solution::matmul_tc,
                           &course::exercise::matmul_tc,
                           [step = info.step, s](benchmark::State& st, MatmulTcFn fn) {
                             bench_gemm(st, s, [=](const TcMatmulArgs& a) { fn(step, a); });
                           });
    }
    bench::add_row(bench::row_name("hgemm_bf16", "library", "cublas_gemmex", s.name()), benchmark::kMillisecond,
                   [s](benchmark::State& st) { bench_gemm(st, s, cublas_gemm); });
  }
  return true;
}();

}  // namespace
