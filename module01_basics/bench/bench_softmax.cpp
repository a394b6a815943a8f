// Softmax benchmarks: every step (solution and exercise) on the three target shapes
// along dim = 1 and two shapes along dim = 0, beside the ceiling row
// "softmax/library/d2d_copy/<shape>": a cudaMemcpyAsync of the same bytes (there is no
// cuBLAS softmax; a copy reads and writes exactly what an ideal softmax does), so the
// summary's sol/lib column is the fraction of copy speed. The dim = 0 shapes add
// "softmax/library/column_order_copy/<shape>_dim0": the same bytes moved in
// cluster_columns' order (32-column strips, bench_softmax_order.cu), the ceiling of that
// access order; the faster d2d_copy stays the reference. "column_order_read" and
// "column_order_write" move only x or only y in that order (bandwidth = the bytes they
// move; bench::mark_diagnostic keeps them out of the 'library' column): which half the
// order slows. The "_w64" rows use 64-column strips (256 bytes per row): the price of
// the 128-byte width.
#include "bench_softmax_order.hpp"

#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module01/softmax.hpp"

#include <cstdint>
#include <string>
#include <tuple>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m01::SoftmaxArgs;
using course::m01::SoftmaxStep;
using SoftmaxFn = void (*)(SoftmaxStep, const SoftmaxArgs&);

struct Shape {
  std::int64_t rows, cols;
  int dim;
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + (dim == 0 ? "_dim0" : "");
  }
};

/// The target shapes (dim = 1) and two dim = 0 shapes (cluster_columns' targets: columns
/// of 16384 rows in 16-block clusters, of 4096 rows in 4-block clusters). Each matrix is
/// >= 256 MiB, far larger than the 50 MB L2, so no buffer rotation is needed.
const Shape kShapes[] = {{65536, 1024, 1}, {16384, 4096, 1}, {4096, 32768, 1}, {16384, 4096, 0}, {4096, 32768, 0}};

/// Input, output and naive workspace of one shape, allocated once per process.
struct Buffers {
  DeviceBuffer<float> x, y, workspace;

  explicit Buffers(const Shape& s) {
    const auto n = static_cast<std::size_t>(s.rows * s.cols);
    x = DeviceBuffer<float>(course::random_vector(n, course::seed_for("bench_softmax/" + s.name()), -4.f, 4.f));
    y = DeviceBuffer<float>(n);
    const std::size_t ws = course::m01::softmax_workspace_bytes(SoftmaxStep::naive_three_pass, s.rows, s.cols, s.dim);
    workspace = DeviceBuffer<float>(ws / sizeof(float));
  }
};

Buffers& buffers_for(const Shape& s) { return bench::cached<Buffers>(std::tuple{s.rows, s.cols, s.dim}, s); }

double bytes_moved(const Shape& s) { return 2.0 * static_cast<double>(s.rows * s.cols) * sizeof(float); }

void bench_step(benchmark::State& state, SoftmaxFn softmax, SoftmaxStep step, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    SoftmaxArgs a = course::m01::contiguous_softmax_args(b.x.data(), b.y.data(), s.rows, s.cols, s.dim);
    a.workspace = b.workspace.data();
    a.workspace_bytes = b.workspace.bytes();
    bench::time_calls(state, [&] { return a; }, [&](const SoftmaxArgs& args) { softmax(step, args); });
    bench::set_bandwidth(state, bytes_moved(s));
  });
}

void bench_copy(benchmark::State& state, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    bench::time_calls(state, [&]() -> Buffers& { return b; }, [](Buffers& buf) {
      COURSE_CUDA_CHECK(cudaMemcpyAsync(buf.y.data(), buf.x.data(), buf.x.bytes(), cudaMemcpyDeviceToDevice));
    });
    bench::set_bandwidth(state, bytes_moved(s));
  });
}

using course::m01::softmax_order::ColumnOrderTraffic;

void bench_column_order(benchmark::State& state, const Shape& s, ColumnOrderTraffic traffic, int strip_cols) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    bench::time_calls(state, [&]() -> Buffers& { return b; }, [&](Buffers& buf) {
      course::m01::softmax_order::column_order_move(traffic, buf.x.data(), buf.y.data(), s.rows, s.cols, strip_cols,
                                                    nullptr);
    });
    if (traffic == ColumnOrderTraffic::copy) {
      bench::set_bandwidth(state, bytes_moved(s));
    } else {  // half the op's traffic: listed beside d2d_copy, never the reference
      bench::set_bandwidth(state, bytes_moved(s) / 2);
      bench::mark_diagnostic(state);
    }
  });
}

const bool kRegistered = [] {
  for (const Shape& s : kShapes) {
    for (const auto& info : course::m01::kSoftmaxSteps) {
      bench::add_step_rows("softmax", info.name, s.name(), benchmark::kMicrosecond, &course::solution::softmax,
                           &course::exercise::softmax, [step = info.step, s](benchmark::State& st, SoftmaxFn fn) {
                             bench_step(st, fn, step, s);
                           });
    }
    bench::add_row(bench::row_name("softmax", "library", "d2d_copy", s.name()), benchmark::kMicrosecond,
                   [s](benchmark::State& st) { bench_copy(st, s); });
    if (s.dim == 0) {
      const std::tuple<const char*, ColumnOrderTraffic, int> orders[] = {
          {"column_order_copy", ColumnOrderTraffic::copy, 32},
          {"column_order_copy_w64", ColumnOrderTraffic::copy, 64},
          {"column_order_read", ColumnOrderTraffic::read, 32},
          {"column_order_write", ColumnOrderTraffic::write, 32},
          {"column_order_write_w64", ColumnOrderTraffic::write, 64}};
      for (const auto& [name, traffic, width] : orders)
        bench::add_row(bench::row_name("softmax", "library", name, s.name()), benchmark::kMicrosecond,
                       [s, traffic = traffic, width = width](benchmark::State& st) {
                         bench_column_order(st, s, traffic, width);
                       });
    }
  }
  return true;
}();

}  // namespace
