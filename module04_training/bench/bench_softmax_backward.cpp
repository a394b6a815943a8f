// Softmax backward benchmarks: every step (solution and exercise) at 16384 x 4096 along
// dim = 1 and dim = 0, 65536 x 1024 and 4096 x 32768, beside the ceiling row
// "softmax_backward/library/d2d_copy/<shape>": a cudaMemcpyAsync of one matrix (y -> dx).
// Neither cuBLAS nor CUB has a softmax backward, so the library column is the copy
// ceiling: the rate at which the device moves bytes at all. Every step is credited with
// the minimum traffic of the op, bytes = 3 * rows * cols * 4 (read y and dy once, write
// dx once), so its GB/s over the copy's GB/s is the fraction of the ceiling reached;
// "of_copy" is the same against the copy bandwidth measured once per process.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module04/softmax_backward.hpp"

#include <cstdint>
#include <string>
#include <tuple>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m04::SoftmaxBackwardArgs;
using course::m04::SoftmaxBackwardStep;
using SoftmaxBackwardFn = void (*)(SoftmaxBackwardStep, const SoftmaxBackwardArgs&);

struct Shape {
  std::int64_t rows, cols;
  int dim;
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + (dim == 0 ? "_dim0" : "");
  }
  std::int64_t slice_length() const { return dim == 1 ? cols : rows; }
};

/// Every matrix is >= 256 MiB (three of them per shape), far larger than the 50 MB L2, so
/// no buffer rotation is needed. 16384 x 4096 (dim 1) carries the target (>= 0.9
/// of the copy for fused_vectorized).
const Shape kShapes[] = {{16384, 4096, 1}, {16384, 4096, 0}, {65536, 1024, 1}, {4096, 32768, 1}};

/// y, dy, dx and the two_pass workspace of one shape, allocated and filled once per
/// process: y uniform in [0, 2 / slice length) (the size of a softmax's entries), dy in [-1, 1).
struct Buffers {
  DeviceBuffer<float> y, dy, dx, workspace;

  explicit Buffers(const Shape& s) {
    const std::int64_t n = s.rows * s.cols;
    const auto un = static_cast<std::size_t>(n);
    y = DeviceBuffer<float>(un);
    dy = DeviceBuffer<float>(un);
    dx = DeviceBuffer<float>(un);
    const std::uint64_t seed = course::seed_for("bench_softmax_backward/" + s.name());
    bench::fill_uniform_device(y.data(), n, seed, 0.f, 2.f / static_cast<float>(s.slice_length()));
    bench::fill_uniform_device(dy.data(), n, seed + 1, -1.f, 1.f);
    bench::fill_uniform_device(dx.data(), n, seed + 2, -1.f, 1.f);
    const std::size_t ws =
        course::m04::softmax_backward_workspace_bytes(SoftmaxBackwardStep::two_pass, s.rows, s.cols, s.dim);
    workspace = DeviceBuffer<float>(ws / sizeof(float));
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

Buffers& buffers_for(const Shape& s) { return bench::cached<Buffers>(std::tuple{s.rows, s.cols, s.dim}, s); }

/// The op's minimum traffic: read y and dy, write dx, 4 bytes each.
double bytes_moved(const Shape& s) { return 3.0 * static_cast<double>(s.rows * s.cols) * sizeof(float); }

void bench_step(benchmark::State& state, SoftmaxBackwardFn softmax_backward, SoftmaxBackwardStep step,
                const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    SoftmaxBackwardArgs a = course::m04::contiguous_softmax_backward_args(b.y.data(), b.dy.data(), b.dx.data(),
                                                                          s.rows, s.cols, s.dim);
    a.workspace = b.workspace.data();
    a.workspace_bytes = b.workspace.bytes();
    bench::time_calls(state, [&] { return a; },
                      [&](const SoftmaxBackwardArgs& args) { softmax_backward(step, args); });
    bench::set_bandwidth(state, bytes_moved(s));
  });
}

/// The ceiling: copy y to dx (read + write of one matrix, credited with exactly those bytes).
void bench_copy(benchmark::State& state, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    bench::time_calls(state, [&]() -> Buffers& { return b; }, [](Buffers& buf) {
      COURSE_CUDA_CHECK(cudaMemcpyAsync(buf.dx.data(), buf.y.data(), buf.y.bytes(), cudaMemcpyDeviceToDevice));
    });
    bench::set_bandwidth(state, 2.0 * static_cast<double>(b.y.bytes()));
  });
}

const bool kRegistered = [] {
  for (const Shape& s : kShapes) {
    for (const auto& info : course::m04::kSoftmaxBackwardSteps) {
      bench::add_step_rows("softmax_backward", info.name, s.name(), benchmark::kMicrosecond,
                           &course::solution::softmax_backward, &course::exercise::softmax_backward,
                           [step = info.step, s](benchmark::State& st, SoftmaxBackwardFn fn) {
                             bench_step(st, fn, step, s);
                           });
    }
    bench::add_row(bench::row_name("softmax_backward", "library", "d2d_copy", s.name()), benchmark::kMicrosecond,
                   [s](benchmark::State& st) { bench_copy(st, s); });
  }
  return true;
}();

}  // namespace
