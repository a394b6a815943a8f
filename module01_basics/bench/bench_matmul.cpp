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
#include <string>
#include <tuple>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m01::MatmulArgs;
using course::m01::MatmulStep;
using MatmulFn = void (*)(MatmulStep, const MatmulArgs&);

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
  bench::Rotation<Set> sets;

  explicit Buffers(const GemmShape& s) {
    const auto na = static_cast<std::size_t>(s.m * s.k), nb = static_cast<std::size_t>(s.k * s.n),
               nc = static_cast<std::size_t>(s.m * s.n);
    const double set_bytes = 4.0 * static_cast<double>(na + nb + nc);
    const int count = std::clamp(static_cast<int>(2.0 * bench::l2_cache_bytes() / set_bytes) + 1, 1, 16);
    const std::uint64_t seed = course::seed_for("bench_matmul/" + s.name());
    for (int i = 0; i < count; ++i) {
      Set& set = sets.add();
      set.a = DeviceBuffer<float>(course::random_vector(na, seed + 3 * i));
      set.b = DeviceBuffer<float>(course::random_vector(nb, seed + 3 * i + 1));
      set.c = DeviceBuffer<float>(course::random_vector(nc, seed + 3 * i + 2));
    }
  }
};

Buffers& buffers_for(const GemmShape& s) { return bench::cached<Buffers>(std::tuple{s.m, s.n, s.k}, s); }

MatmulArgs args_for(Buffers::Set& set, const GemmShape& s) {
  return course::m01::packed_matmul_args(set.a.data(), set.b.data(), set.c.data(), s.m, s.n, s.k);
}

void bench_step(benchmark::State& state, MatmulFn matmul, MatmulStep step, const GemmShape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    bench::time_calls(state, [&] { return args_for(b.sets.next(), s); },
                      [&](const MatmulArgs& a) { matmul(step, a); });
    bench::set_flops(state, s.flops());
  });
}

/// Row-major C = A*B as column-major C^T = B^T * A^T.
void cublas_sgemm(Buffers::Set& set, const GemmShape& s) {
  const float alpha = 1.0f, beta = 0.0f;
  bench::check_cublas(cublasSgemm(bench::cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.n),
                                  static_cast<int>(s.m), static_cast<int>(s.k), &alpha, set.b.data(),
                                  static_cast<int>(s.n), set.a.data(), static_cast<int>(s.k), &beta, set.c.data(),
                                  static_cast<int>(s.n)),
                      "cublasSgemm");
}

void bench_cublas(benchmark::State& state, const GemmShape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    bench::time_calls(state, [&]() -> Buffers::Set& { return b.sets.next(); },
                      [&](Buffers::Set& set) { cublas_sgemm(set, s); });
    bench::set_flops(state, s.flops());
  });
}

/// The naive step takes ~0.3 s at 4096^3 (~0.5 TFLOP/s): a few iterations suffice.
void limit_slow(benchmark::internal::Benchmark* b, MatmulStep step, const GemmShape& s) {
  if (step == MatmulStep::naive && s.flops() > 1e11) b->Iterations(3);
}

const bool kRegistered = [] {
  for (const GemmShape& s : kShapes) {
    for (const auto& info : course::m01::kMatmulSteps) {
      const auto [sol, ex] = bench::add_step_rows(
          "sgemm", info.name, s.name(), benchmark::kMillisecond, &course::solution::matmul,
          &course::exercise::matmul,
          [step = info.step, s](benchmark::State& st, MatmulFn fn) { bench_step(st, fn, step, s); });
      limit_slow(sol, info.step, s);
      limit_slow(ex, info.step, s);
    }
    bench::add_row(bench::row_name("sgemm", "library", "cublas_sgemm", s.name()), benchmark::kMillisecond,
                   [s](benchmark::State& st) { bench_cublas(st, s); });
  }
  return true;
}();

}  // namespace
