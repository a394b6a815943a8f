// Softmax benchmarks: every step (solution and exercise) on the three target shapes
// along dim = 1 and one shape along dim = 0, beside the ceiling row
// "softmax/library/d2d_copy/<shape>": a cudaMemcpyAsync of the same bytes (there is no
// cuBLAS softmax; a copy reads and writes exactly what an ideal softmax does), so the
// summary's sol/lib column is the fraction of copy speed.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module01/softmax.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace {

using course::DeviceBuffer;
using course::m01::SoftmaxArgs;
using course::m01::SoftmaxStep;

struct Shape {
  std::int64_t rows, cols;
  int dim;
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + (dim == 0 ? "_dim0" : "");
  }
};

/// The target shapes (dim = 1) and one dim = 0 shape. Each matrix is >= 256 MiB, far
/// larger than the 50 MB L2, so no buffer rotation is needed.
const Shape kShapes[] = {{65536, 1024, 1}, {16384, 4096, 1}, {4096, 32768, 1}, {16384, 4096, 0}};

/// Input, output and naive workspace of one shape, allocated once per process.
struct Buffers {
  DeviceBuffer<float> x, y, workspace;
};

Buffers& buffers_for(const Shape& s) {
  static std::map<std::tuple<std::int64_t, std::int64_t, int>, std::unique_ptr<Buffers>> cache;
  auto& slot = cache[{s.rows, s.cols, s.dim}];
  if (!slot) {
    const auto n = static_cast<std::size_t>(s.rows * s.cols);
    slot = std::make_unique<Buffers>();
    slot->x = DeviceBuffer<float>(course::random_vector(n, course::seed_for("bench_softmax/" + s.name()), -4.f, 4.f));
    slot->y = DeviceBuffer<float>(n);
    const std::size_t ws = course::m01::softmax_workspace_bytes(SoftmaxStep::naive_three_pass, s.rows, s.cols, s.dim);
    slot->workspace = DeviceBuffer<float>(ws / sizeof(float));
  }
  return *slot;
}

double bytes_moved(const Shape& s) { return 2.0 * static_cast<double>(s.rows * s.cols) * sizeof(float); }

template <class Fn>
void bench_step(benchmark::State& state, Fn softmax, SoftmaxStep step, Shape s) {
  if (!course::bench::require_device(state)) return;
  Buffers& b = buffers_for(s);
  SoftmaxArgs a = course::m01::contiguous_softmax_args(b.x.data(), b.y.data(), s.rows, s.cols, s.dim);
  a.workspace = b.workspace.data();
  a.workspace_bytes = b.workspace.bytes();
  try {
    softmax(step, a);  // warm-up, and the NotImplemented check for exercise stubs
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const course::NotImplemented& e) {
    state.SkipWithError((std::string("not implemented: ") + e.what()).c_str());
    return;
  }
  for (auto _ : state) course::bench::time_iteration(state, [&] { softmax(step, a); });
  course::bench::set_bandwidth(state, bytes_moved(s));
}

void bench_copy(benchmark::State& state, Shape s) {
  if (!course::bench::require_device(state)) return;
  Buffers& b = buffers_for(s);
  for (auto _ : state)
    course::bench::time_iteration(state, [&] {
      COURSE_CUDA_CHECK(cudaMemcpyAsync(b.y.data(), b.x.data(), b.x.bytes(), cudaMemcpyDeviceToDevice));
    });
  course::bench::set_bandwidth(state, bytes_moved(s));
}

const bool kRegistered = [] {
  for (const Shape& s : kShapes) {
    for (const auto& info : course::m01::kSoftmaxSteps) {
      benchmark::RegisterBenchmark(
          ("softmax/solution/" + std::string(info.name) + "/" + s.name()).c_str(),
          [step = info.step, s](benchmark::State& st) {
            bench_step(st, [](SoftmaxStep k, const SoftmaxArgs& a) { course::solution::softmax(k, a); }, step, s);
          })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(
          ("softmax/exercise/" + std::string(info.name) + "/" + s.name()).c_str(),
          [step = info.step, s](benchmark::State& st) {
            bench_step(st, [](SoftmaxStep k, const SoftmaxArgs& a) { course::exercise::softmax(k, a); }, step, s);
          })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(("softmax/library/d2d_copy/" + s.name()).c_str(),
                                 [s](benchmark::State& st) { bench_copy(st, s); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
