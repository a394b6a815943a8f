// Linear-layer backward benchmarks (Y = X W + b; dX = dY W^T, dW = X^T dY, db = column
// sums of dY), fp32, at three layer shapes M x K -> N:
//   M4096K4096N4096     a square layer
//   M16384K1024N1024    16384 tokens through a 1024 -> 1024 projection
//   M16384K4096N1024    16384 tokens through an MLP's 4096 -> 1024 down projection
// Rows:
//   linear_backward/<impl>/<bias step>/<shape>  the whole backward (two GEMMs on module 2's
//                                               warp_tiled step + the bias step); TFLOP/s
//                                               count 4*M*N*K (two GEMMs of 2*M*N*K)
//   linear_backward/library/cublas/<shape>      cublasSgemm for dX and dW + cublasSgemv
//                                               (dY^T times a vector of ones) for db
//   bias_grad/<impl>/<bias step>/<shape>        db alone (dx = dw = null); GB/s count the
//                                               M*N*4 bytes of dY read + N*4 written
//   bias_grad/library/cublas_sgemv/<shape>      the same column sums as a cuBLAS gemv
// cuBLAS runs in its default math mode: true fp32 FMA, no TF32 (course::bench::cublas_handle).
// Every dY is >= 64 MB (larger than the 50 MB L2), so no input rotation is needed.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module04/linear_backward.hpp"

#include <cublas_v2.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m04::BiasGradStep;
using course::m04::LinearBackwardArgs;
using LinearBackwardFnPtr = void (*)(BiasGradStep, const LinearBackwardArgs&);

struct Shape {
  std::int64_t M, K, N;
  std::string name() const {
    return "M" + std::to_string(M) + "K" + std::to_string(K) + "N" + std::to_string(N);
  }
  double gemm_flops() const { return 4.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
  double bias_bytes() const { return 4.0 * static_cast<double>(M * N + N); }
};
const Shape kShapes[] = {{4096, 4096, 4096}, {16384, 1024, 1024}, {16384, 4096, 1024}};

/// X, W, dY (random), the three gradients and a vector of M ones (cuBLAS's gemv), dense,
/// allocated and filled once per process.
struct Buffers {
  DeviceBuffer<float> x, w, dy, dx, dw, db, ones;

  explicit Buffers(const Shape& s)
      : x(static_cast<std::size_t>(s.M * s.K)),
        w(static_cast<std::size_t>(s.K * s.N)),
        dy(static_cast<std::size_t>(s.M * s.N)),
        dx(static_cast<std::size_t>(s.M * s.K)),
        dw(static_cast<std::size_t>(s.K * s.N)),
        db(static_cast<std::size_t>(s.N)),
        ones(std::vector<float>(static_cast<std::size_t>(s.M), 1.f)) {
    const std::uint64_t seed = course::seed_for("bench_linear_backward/" + s.name());
    bench::fill_uniform_device(x.data(), s.M * s.K, seed, -1.f, 1.f);
    bench::fill_uniform_device(w.data(), s.K * s.N, seed + 1, -1.f, 1.f);
    bench::fill_uniform_device(dy.data(), s.M * s.N, seed + 2, -1.f, 1.f);
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  LinearBackwardArgs args(const Shape& s, bool gemms) {
    return course::m04::make_linear_backward_args(x.data(), w.data(), dy.data(), gemms ? dx.data() : nullptr,
                                                  gemms ? dw.data() : nullptr, db.data(), s.M, s.K, s.N);
  }
};

Buffers& buffers_for(const Shape& s) { return bench::cached<Buffers>(std::tuple{s.M, s.K, s.N}, s); }

/// db = dY^T 1. cuBLAS is column-major: it sees our row-major dY (M x N) as an N x M
/// matrix with leading dimension N, so db = that matrix times ones(M), no transpose.
void cublas_bias_grad(Buffers& b, const Shape& s) {
  const float one = 1.f, zero = 0.f;
  bench::check_cublas(cublasSgemv(bench::cublas_handle(), CUBLAS_OP_N, static_cast<int>(s.N), static_cast<int>(s.M),
                                  &one, b.dy.data(), static_cast<int>(s.N), b.ones.data(), 1, &zero, b.db.data(), 1),
                      "cublasSgemv (db)");
}

/// Column-major views of our row-major matrices: R (r x c) is R^T (c x r), ld = c.
///   dX^T (K x M) = W (K x N: cuBLAS sees W^T, so OP_T) * dY^T (N x M: as seen, OP_N)
///   dW^T (N x K) = dY^T (N x M: OP_N) * X (M x K: cuBLAS sees X^T, so OP_T)
void cublas_linear_backward(Buffers& b, const Shape& s) {
  const float one = 1.f, zero = 0.f;
  const int M = static_cast<int>(s.M), K = static_cast<int>(s.K), N = static_cast<int>(s.N);
  bench::check_cublas(cublasSgemm(bench::cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, K, M, N, &one, b.w.data(), N,
                                  b.dy.data(), N, &zero, b.dx.data(), K),
                      "cublasSgemm (dX)");
  bench::check_cublas(cublasSgemm(bench::cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_T, N, K, M, &one, b.dy.data(), N,
                                  b.x.data(), K, &zero, b.dw.data(), N),
                      "cublasSgemm (dW)");
  cublas_bias_grad(b, s);
}

void register_rows() {
  for (const Shape& s : kShapes) {
    for (const auto& info : course::m04::kBiasGradSteps) {
      const BiasGradStep step = info.step;
      bench::add_step_rows("linear_backward", info.name, s.name(), benchmark::kMillisecond,
                           LinearBackwardFnPtr{&course::solution::linear_backward},
                           LinearBackwardFnPtr{&course::exercise::linear_backward},
                           [step, s](benchmark::State& state, LinearBackwardFnPtr fn) {
                             bench::guard(state, [&] {
                               Buffers& b = buffers_for(s);
                               bench::time_calls(state, [&] { return b.args(s, true); },
                                                 [&](const LinearBackwardArgs& a) { fn(step, a); });
                               bench::set_flops(state, s.gemm_flops());
                             });
                           });
      bench::add_step_rows("bias_grad", info.name, s.name(), benchmark::kMicrosecond,
                           LinearBackwardFnPtr{&course::solution::linear_backward},
                           LinearBackwardFnPtr{&course::exercise::linear_backward},
                           [step, s](benchmark::State& state, LinearBackwardFnPtr fn) {
                             bench::guard(state, [&] {
                               Buffers& b = buffers_for(s);
                               bench::time_calls(state, [&] { return b.args(s, false); },
                                                 [&](const LinearBackwardArgs& a) { fn(step, a); });
                               bench::set_bandwidth(state, s.bias_bytes());
                             });
                           });
    }
    bench::add_row(bench::row_name("linear_backward", "library", "cublas", s.name()), benchmark::kMillisecond,
                   [s](benchmark::State& state) {
                     bench::guard(state, [&] {
                       Buffers& b = buffers_for(s);
                       bench::time_calls(state, [] { return 0; }, [&](int) { cublas_linear_backward(b, s); });
                       bench::set_flops(state, s.gemm_flops());
                     });
                   });
    bench::add_row(bench::row_name("bias_grad", "library", "cublas_sgemv", s.name()), benchmark::kMicrosecond,
                   [s](benchmark::State& state) {
                     bench::guard(state, [&] {
                       Buffers& b = buffers_for(s);
                       bench::time_calls(state, [] { return 0; }, [&](int) { cublas_bias_grad(b, s); });
                       bench::set_bandwidth(state, s.bias_bytes());
                     });
                   });
  }
}

[[maybe_unused]] const bool registered = (register_rows(), true);

}  // namespace
