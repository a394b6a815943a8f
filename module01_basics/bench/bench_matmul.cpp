// SGEMM benchmarks: every step of the fp32 matmul ladder (solution and exercise) on
// three shapes, beside the library row "sgemm/library/cublas_sgemm/<shape>".
//
// cuBLAS is column-major; our matrices are row-major. A row-major M x N matrix is
// the column-major N x M matrix of its transpose, so C = A*B is computed as
// C^T = B^T * A^T: cublasSgemm(N, N, n, m, k, alpha, B, ldb, A, lda, beta, C, ldc).
// The handle uses CUBLAS_DEFAULT_MATH: cublasSgemm then computes in true fp32 (no
// TF32 tensor cores, which would need CUBLAS_TF32_TENSOR_OP_MATH), the same
// arithmetic as the course's kernels, so the comparison is fair.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module01/matmul.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::m01::MatmulArgs;
using course::m01::MatmulStep;

struct GemmShape {
  std::int64_t m, n, k;
  std::string name() const { return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k); }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

const GemmShape kShapes[] = {{4096, 4096, 4096}, {1024, 1024, 1024}, {4096, 4096, 1024}};

/// Sets of (A, B, C) for one shape: enough of them that one pass over all sets
/// exceeds twice the L2 cache, so every timed call reads its inputs from HBM.
struct Buffers {
  struct Set {
    DeviceBuffer<float> a, b, c;
  };
  std::vector<Set> sets;
  std::size_t next = 0;
  Set& rotate() {
    Set& s = sets[next];
    next = (next + 1) % sets.size();
    return s;
  }
};

Buffers& buffers_for(const GemmShape& s) {
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::unique_ptr<Buffers>> cache;
  auto& slot = cache[{s.m, s.n, s.k}];
  if (!slot) {
    slot = std::make_unique<Buffers>();
    const auto na = static_cast<std::size_t>(s.m * s.k), nb = static_cast<std::size_t>(s.k * s.n),
               nc = static_cast<std::size_t>(s.m * s.n);
    const double set_bytes = 4.0 * static_cast<double>(na + nb + nc);
    const double l2 = static_cast<double>(course::device_properties().l2CacheSize);
    const int count = std::clamp(static_cast<int>(2.0 * l2 / set_bytes) + 1, 1, 16);
    const std::uint64_t seed = course::seed_for("bench_matmul/" + s.name());
    for (int i = 0; i < count; ++i) {
      Buffers::Set set;
      set.a = DeviceBuffer<float>(course::random_vector(na, seed + 3 * i));
      set.b = DeviceBuffer<float>(course::random_vector(nb, seed + 3 * i + 1));
      set.c = DeviceBuffer<float>(course::random_vector(nc, seed + 3 * i + 2));
      slot->sets.push_back(std::move(set));
    }
  }
  return *slot;
}

MatmulArgs args_for(Buffers::Set& set, const GemmShape& s) {
  return course::m01::packed_matmul_args(set.a.data(), set.b.data(), set.c.data(), s.m, s.n, s.k);
}

template <class Fn>
void bench_step(benchmark::State& state, Fn matmul, MatmulStep step, GemmShape s) {
  if (!course::bench::require_device(state)) return;
  Buffers& b = buffers_for(s);
  try {
    matmul(step, args_for(b.rotate(), s));  // warm-up, and the NotImplemented check for stubs
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const course::NotImplemented& e) {
    state.SkipWithError((std::string("not implemented: ") + e.what()).c_str());
    return;
  }
  for (auto _ : state) {
    const MatmulArgs a = args_for(b.rotate(), s);
    course::bench::time_iteration(state, [&] { matmul(step, a); });
  }
  course::bench::set_flops(state, s.flops());
}

cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw course::Error("cublasCreate failed");
    if (cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)  // fp32, no TF32
      throw course::Error("cublasSetMathMode failed");
    return h;
  }();
  return handle;
}

void bench_cublas(benchmark::State& state, GemmShape s) {
  if (!course::bench::require_device(state)) return;
  Buffers& b = buffers_for(s);
  const float alpha = 1.0f, beta = 0.0f;
  auto sgemm = [&](Buffers::Set& set) {
    // Row-major C = A*B as column-major C^T = B^T * A^T.
    const cublasStatus_t st = cublasSgemm(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.n),
                                          static_cast<int>(s.m), static_cast<int>(s.k), &alpha, set.b.data(),
                                          static_cast<int>(s.n), set.a.data(), static_cast<int>(s.k), &beta,
                                          set.c.data(), static_cast<int>(s.n));
    if (st != CUBLAS_STATUS_SUCCESS) throw course::Error("cublasSgemm failed: status " + std::to_string(st));
  };
  sgemm(b.rotate());  // warm-up (handle creation, kernel selection)
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto _ : state) {
    Buffers::Set& set = b.rotate();
    course::bench::time_iteration(state, [&] { sgemm(set); });
  }
  course::bench::set_flops(state, s.flops());
}

/// The naive step takes ~0.3 s at 4096^3 (~0.5 TFLOP/s): a few iterations suffice.
void limit_slow(benchmark::internal::Benchmark* b, MatmulStep step, const GemmShape& s) {
  if (step == MatmulStep::naive && s.flops() > 1e11) b->Iterations(3);
}

const bool kRegistered = [] {
  for (const GemmShape& s : kShapes) {
    for (const auto& info : course::m01::kMatmulSteps) {
      auto* sol = benchmark::RegisterBenchmark(
          ("sgemm/solution/" + std::string(info.name) + "/" + s.name()).c_str(),
          [step = info.step, s](benchmark::State& st) {
            bench_step(st, [](MatmulStep k, const MatmulArgs& a) { course::solution::matmul(k, a); }, step, s);
          });
      sol->UseManualTime()->Unit(benchmark::kMillisecond);
      limit_slow(sol, info.step, s);
      auto* ex = benchmark::RegisterBenchmark(
          ("sgemm/exercise/" + std::string(info.name) + "/" + s.name()).c_str(),
          [step = info.step, s](benchmark::State& st) {
            bench_step(st, [](MatmulStep k, const MatmulArgs& a) { course::exercise::matmul(k, a); }, step, s);
          });
      ex->UseManualTime()->Unit(benchmark::kMillisecond);
      limit_slow(ex, info.step, s);
    }
    benchmark::RegisterBenchmark(("sgemm/library/cublas_sgemm/" + s.name()).c_str(),
                                 [s](benchmark::State& st) { bench_cublas(st, s); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
