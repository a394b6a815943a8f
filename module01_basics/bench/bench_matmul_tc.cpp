// Tensor-core matmul benchmarks: C (fp32) = A (bf16) * B (bf16), every step (solution and
// exercise) at 8192^3 and 4096^3, beside the library row
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
#include <map>
#include <memory>
#include <sstream>
#include <string>

namespace {

using course::DeviceBuffer;
using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using bf16 = __nv_bfloat16;

struct Shape {
  std::int64_t m, n, k;
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

/// Both shapes' operands exceed the 50 MB L2 (4096^2 bf16 A and B = 64 MiB together, C
/// 64 MiB), so no buffer rotation is needed.
const Shape kShapes[] = {{8192, 8192, 8192}, {4096, 4096, 4096}};

/// Random bf16 A and B (uniform [-1, 1), never zeros: tensor cores are measurably faster
/// on zeros) and C, allocated once per shape per process.
struct Operands {
  DeviceBuffer<bf16> a, b;
  DeviceBuffer<float> c;
};

Operands& operands_for(const Shape& s) {
  static std::map<std::string, std::unique_ptr<Operands>> cache;
  auto& slot = cache[s.name()];
  if (!slot) {
    slot = std::make_unique<Operands>();
    const auto seed = course::seed_for("bench_matmul_tc/" + s.name());
    slot->a = DeviceBuffer<bf16>(course::to_bf16(course::random_vector(static_cast<std::size_t>(s.m * s.k), seed)));
    slot->b = DeviceBuffer<bf16>(course::to_bf16(course::random_vector(static_cast<std::size_t>(s.k * s.n), seed + 1)));
    slot->c = DeviceBuffer<float>(static_cast<std::size_t>(s.m * s.n));
  }
  return *slot;
}

TcMatmulArgs args_for(const Shape& s, Operands& op) {
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

cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw course::Error("cublasCreate failed");
    return h;
  }();
  return handle;
}

/// Row-major C = A * B through column-major cuBLAS: C^T (N x M) = B^T (N x K) * A^T (K x M),
/// and a row-major matrix with leading dimension ld is its transpose, column-major, same ld.
void cublas_gemm(const TcMatmulArgs& a) {
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t st = cublasGemmEx(
      cublas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(a.n), static_cast<int>(a.m), static_cast<int>(a.k), &one,
      a.b, CUDA_R_16BF, static_cast<int>(a.ldb), a.a, CUDA_R_16BF, static_cast<int>(a.lda), &zero, a.c, CUDA_R_32F,
      static_cast<int>(a.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) {
    std::ostringstream os;
    os << "cublasGemmEx failed with status " << static_cast<int>(st);
    throw course::Error(os.str());
  }
}

/// cuBLAS's TFLOP/s for `s`, measured once per process: the ceiling of every row.
double cublas_tflops(const Shape& s) {
  static std::map<std::string, double> cache;
  auto it = cache.find(s.name());
  if (it != cache.end()) return it->second;
  Operands& op = operands_for(s);
  const TcMatmulArgs a = args_for(s, op);
  const course::TimingStats t = course::time_kernel([&] { cublas_gemm(a); }, 3, 20);
  const double tflops = s.flops() / (t.median_ms * 1e-3) / 1e12;
  cache[s.name()] = tflops;
  return tflops;
}

using MatmulTcFn = void (*)(TcMatmulStep, const TcMatmulArgs&);

void bench_step(benchmark::State& state, MatmulTcFn fn, TcMatmulStep step, Shape s) {
  if (!course::bench::require_device(state)) return;
  Operands& op = operands_for(s);
  const TcMatmulArgs a = args_for(s, op);
  try {
    fn(step, a);  // warm-up, and the NotImplemented check for exercise stubs
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const course::NotImplemented& e) {
    state.SkipWithError((std::string("not implemented: ") + e.what()).c_str());
    return;
  }
  const double ceiling = cublas_tflops(s);
  for (auto _ : state) course::bench::time_iteration(state, [&] { fn(step, a); });
  course::bench::set_flops(state, s.flops(), ceiling);
}

void bench_cublas(benchmark::State& state, Shape s) {
  if (!course::bench::require_device(state)) return;
  Operands& op = operands_for(s);
  const TcMatmulArgs a = args_for(s, op);
  cublas_gemm(a);  // warm-up (heuristics, workspace)
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const double ceiling = cublas_tflops(s);
  for (auto _ : state) course::bench::time_iteration(state, [&] { cublas_gemm(a); });
  course::bench::set_flops(state, s.flops(), ceiling);
}

const bool kRegistered = [] {
  for (const Shape& s : kShapes) {
    for (const auto& info : course::m01::kTcMatmulSteps) {
      benchmark::RegisterBenchmark(("hgemm_bf16/solution/" + std::string(info.name) + "/" + s.name()).c_str(),
                                   [step = info.step, s](benchmark::State& st) {
                                     bench_step(st, &course::solution::matmul_tc, step, s);
                                   })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("hgemm_bf16/exercise/" + std::string(info.name) + "/" + s.name()).c_str(),
                                   [step = info.step, s](benchmark::State& st) {
                                     bench_step(st, &course::exercise::matmul_tc, step, s);
                                   })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark(("hgemm_bf16/library/cublas_gemmex/" + s.name()).c_str(),
                                 [s](benchmark::State& st) { bench_cublas(st, s); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
