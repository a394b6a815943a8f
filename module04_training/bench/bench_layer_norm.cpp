// LayerNorm benchmarks, forward and backward: every step (solution and exercise) at the GPT's
// shapes, rows = 16384 tokens x C = 384 and 768, fp32 and bf16, beside the ceiling rows
// "layer_norm/library/d2d_copy/<shape>" and "layer_norm_backward/library/d2d_copy/<shape>":
// a cudaMemcpyAsync of the same bytes (forward: x -> y, read 1 + write 1 matrix; backward:
// read 2 + write 1, copied as 1.5 matrices each way). Neither cuBLAS nor CUB has a LayerNorm;
// PyTorch's F.layer_norm is compared by scripts/compare_torch.py. Every step is credited with
// the op's minimum traffic (forward 2, backward 3 matrices of rows * C elements; the
// statistics and parameters, < 1%, are not counted), so GB/s over the copy's GB/s is the
// fraction of the ceiling reached.
//
// A matrix is 12-50 MB, of the order of the 50 MB L2: every row rotates over kCopies sets
// of buffers (>= 4 x the L2 in all), so each call reads from DRAM as in a training step.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module04/layer_norm.hpp"
#include "module04/layer_norm_backward.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::DType;
using course::m04::LayerNormArgs;
using course::m04::LayerNormBackwardArgs;
using course::m04::LayerNormBackwardStep;
using course::m04::LayerNormStep;
using ForwardFn = void (*)(LayerNormStep, const LayerNormArgs&);
using BackwardFn = void (*)(LayerNormBackwardStep, const LayerNormBackwardArgs&);

struct Shape {
  std::int64_t rows, C;
  DType dtype;
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(C) + (dtype == DType::bf16 ? "_bf16" : "_f32");
  }
  std::size_t elem() const { return dtype == DType::bf16 ? 2 : 4; }
  std::size_t matrix_bytes() const { return static_cast<std::size_t>(rows * C) * elem(); }
};

const Shape kShapes[] = {{16384, 384, DType::bf16}, {16384, 768, DType::bf16}, {16384, 384, DType::f32},
                         {16384, 768, DType::f32}};
constexpr int kCopies = 6;  // sets of buffers rotated through (6 x 3 x 12-50 MB)

/// kCopies sets of x, y (forward out), dy, dx (backward), plus gamma, beta, the statistics,
/// dgamma, dbeta and the partial_sums workspace: filled once per process.
struct Buffers {
  std::vector<DeviceBuffer<unsigned char>> x, y, dy, dx;
  DeviceBuffer<float> gamma, beta, mean, rstd, dgamma, dbeta, workspace;

  explicit Buffers(const Shape& s) {
    const std::int64_t n = s.rows * s.C;
    const std::uint64_t seed = course::seed_for("bench_layer_norm/" + s.name());
    const auto fill = [&](DeviceBuffer<unsigned char>& b, std::uint64_t sd) {
      b = DeviceBuffer<unsigned char>(s.matrix_bytes());
      if (s.dtype == DType::bf16)
        bench::fill_uniform_device(reinterpret_cast<__nv_bfloat16*>(b.data()), n, sd, -2.f, 2.f);
      else bench::fill_uniform_device(reinterpret_cast<float*>(b.data()), n, sd, -2.f, 2.f);
    };
    for (int k = 0; k < kCopies; ++k) {
      x.emplace_back(), y.emplace_back(), dy.emplace_back(), dx.emplace_back();
      fill(x.back(), seed + 4 * k), fill(y.back(), seed + 4 * k + 1), fill(dy.back(), seed + 4 * k + 2);
      fill(dx.back(), seed + 4 * k + 3);
    }
    const auto C = static_cast<std::size_t>(s.C);
    gamma = DeviceBuffer<float>(C), beta = DeviceBuffer<float>(C), dgamma = DeviceBuffer<float>(C),
    dbeta = DeviceBuffer<float>(C);
    bench::fill_uniform_device(gamma.data(), s.C, seed + 100, 0.5f, 1.5f);
    bench::fill_uniform_device(beta.data(), s.C, seed + 101, -0.5f, 0.5f);
    mean = DeviceBuffer<float>(static_cast<std::size_t>(s.rows));
    rstd = DeviceBuffer<float>(static_cast<std::size_t>(s.rows));
    bench::fill_uniform_device(mean.data(), s.rows, seed + 102, -0.1f, 0.1f);
    bench::fill_uniform_device(rstd.data(), s.rows, seed + 103, 0.5f, 1.5f);
    const std::size_t ws =
        course::m04::layer_norm_backward_workspace_bytes(LayerNormBackwardStep::partial_sums, s.rows, s.C);
    workspace = DeviceBuffer<float>(ws / sizeof(float));
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

Buffers& buffers_for(const Shape& s) {
  return bench::cached<Buffers>(std::tuple{s.rows, s.C, static_cast<int>(s.dtype)}, s);
}

void bench_forward(benchmark::State& state, ForwardFn fn, LayerNormStep step, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    int k = 0;
    bench::time_calls(
        state,
        [&] {
          k = (k + 1) % kCopies;
          return course::m04::contiguous_layer_norm_args(s.dtype, b.x[k].data(), b.y[k].data(), b.gamma.data(),
                                                         b.beta.data(), b.mean.data(), b.rstd.data(), s.rows, s.C);
        },
        [&](const LayerNormArgs& a) { fn(step, a); });
    bench::set_bandwidth(state, 2.0 * static_cast<double>(s.matrix_bytes()));
  });
}

void bench_backward(benchmark::State& state, BackwardFn fn, LayerNormBackwardStep step, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    int k = 0;
    bench::time_calls(
        state,
        [&] {
          k = (k + 1) % kCopies;
          LayerNormBackwardArgs a = course::m04::contiguous_layer_norm_backward_args(
              s.dtype, b.x[k].data(), b.dy[k].data(), b.dx[k].data(), b.gamma.data(), b.mean.data(), b.rstd.data(),
              b.dgamma.data(), b.dbeta.data(), s.rows, s.C);
          a.workspace = b.workspace.data();
          a.workspace_bytes = b.workspace.bytes();
          return a;
        },
        [&](const LayerNormBackwardArgs& a) { fn(step, a); });
    bench::set_bandwidth(state, 3.0 * static_cast<double>(s.matrix_bytes()));
  });
}

/// The ceiling: a device-to-device copy moving `matrices` matrices of traffic (half read,
/// half written): forward 2 (x -> y), backward 3 (1.5 matrices of x, dy -> dx, y).
void bench_copy(benchmark::State& state, const Shape& s, double matrices) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    const auto bytes = static_cast<std::size_t>(matrices / 2 * static_cast<double>(s.matrix_bytes()));
    int k = 0;
    bench::time_calls(state, [&] { return k = (k + 1) % kCopies; }, [&](int i) {
      const std::size_t first = std::min(bytes, s.matrix_bytes());
      COURSE_CUDA_CHECK(cudaMemcpyAsync(b.y[i].data(), b.x[i].data(), first, cudaMemcpyDeviceToDevice));
      if (bytes > first)
        COURSE_CUDA_CHECK(cudaMemcpyAsync(b.dx[i].data(), b.dy[i].data(), bytes - first, cudaMemcpyDeviceToDevice));
    });
    bench::set_bandwidth(state, 2.0 * static_cast<double>(bytes));
  });
}

const bool kRegistered = [] {
  for (const Shape& s : kShapes) {
    for (const auto& info : course::m04::kLayerNormSteps)
      bench::add_step_rows("layer_norm", info.name, s.name(), benchmark::kMicrosecond,
                           &course::solution::layer_norm_forward, &course::exercise::layer_norm_forward,
                           [step = info.step, s](benchmark::State& st, ForwardFn fn) { bench_forward(st, fn, step, s); });
    bench::add_row(bench::row_name("layer_norm", "library", "d2d_copy", s.name()), benchmark::kMicrosecond,
                   [s](benchmark::State& st) { bench_copy(st, s, 2.0); });
    for (const auto& info : course::m04::kLayerNormBackwardSteps)
      bench::add_step_rows("layer_norm_backward", info.name, s.name(), benchmark::kMicrosecond,
                           &course::solution::layer_norm_backward, &course::exercise::layer_norm_backward,
                           [step = info.step, s](benchmark::State& st, BackwardFn fn) {
                             bench_backward(st, fn, step, s);
                           });
    bench::add_row(bench::row_name("layer_norm_backward", "library", "d2d_copy", s.name()), benchmark::kMicrosecond,
                   [s](benchmark::State& st) { bench_copy(st, s, 3.0); });
  }
  return true;
}();

}  // namespace
