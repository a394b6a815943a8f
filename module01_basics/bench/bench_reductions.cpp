// Benchmarks of the L2 norm and dot product ladders: every step of the solution and of
// the exercise, beside cuBLAS (snrm2, sdot) and CUB (DeviceReduce::TransformReduce).
// Rows: "<op>/<impl>/<step>/n=<n>"; GB/s counts the bytes READ (4n for the norm, 8n for
// the dot), so "of_copy" says how close a step gets to the device-to-device copy.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "module01/reductions.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

// Defined in bench_reductions_lib.cu (CUB needs nvcc); declared here, its only user.
namespace course::m01::reductions_lib {
std::size_t cub_l2_norm_temp_bytes(std::int64_t n);
void cub_l2_norm(const float* x, std::int64_t n, float* result, void* temp, std::size_t temp_bytes,
                 cudaStream_t stream);
std::size_t cub_dot_temp_bytes(std::int64_t n);
void cub_dot(const float* x, const float* y, std::int64_t n, float* result, void* temp, std::size_t temp_bytes,
             cudaStream_t stream);
}  // namespace course::m01::reductions_lib

namespace {

namespace lib = course::m01::reductions_lib;
namespace bench = course::bench;
using course::DeviceBuffer;
using course::m01::ReduceArgs;
using course::m01::ReduceStep;

enum class Op { l2_norm, dot };
using ReduceFn = void (*)(ReduceStep, const ReduceArgs&);

constexpr std::int64_t kSizes[] = {std::int64_t{1} << 28, std::int64_t{1} << 20};

double bytes_read(Op op, std::int64_t n) { return (op == Op::dot ? 8.0 : 4.0) * static_cast<double>(n); }

/// Random x and y of one length, in enough copies that consecutive iterations read
/// from HBM, not from the 50 MB L2 (one copy when a vector is larger than 3x L2).
struct Inputs {
  struct XY {
    explicit XY(std::int64_t len) : x(static_cast<std::size_t>(len)), y(static_cast<std::size_t>(len)) {}
    DeviceBuffer<float> x, y;
  };
  std::int64_t n;
  bench::Rotation<XY> copies;
  DeviceBuffer<float> result{1};
  DeviceBuffer<float> workspace{course::m01::kMaxReduceBlocks};

  explicit Inputs(std::int64_t len) : n(len) {
    const double bytes = 4.0 * static_cast<double>(n);
    const int count = static_cast<int>(std::clamp(3.0 * bench::l2_cache_bytes() / bytes, 1.0, 64.0));
    for (int k = 0; k < count; ++k) {
      XY& c = copies.add(n);
      bench::fill_uniform_device(c.x.data(), n, 1000 + 2 * k, -1.f, 1.f);
      bench::fill_uniform_device(c.y.data(), n, 1001 + 2 * k, -1.f, 1.f);
    }
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  /// Arguments on the next copy of the inputs.
  ReduceArgs next_args(Op op) {
    XY& c = copies.next();
    ReduceArgs a;
    a.x = c.x.data();
    a.y = op == Op::dot ? c.y.data() : nullptr;
    a.n = n;
    a.result = result.data();
    a.workspace = workspace.data();
    a.workspace_bytes = workspace.bytes();
    return a;
  }
};

using Call = std::function<void(const ReduceArgs&)>;

/// Times the call that `setup` returns (setup allocates what it needs, untimed) on
/// rotating inputs; the call must enqueue its work on the default stream.
void run_timed(benchmark::State& state, Op op, std::int64_t n, const std::function<Call()>& setup) {
  bench::guard(state, [&] {
    Inputs& in = bench::cached<Inputs>(n, n);
    bench::time_calls(state, [&] { return in.next_args(op); }, setup());
    bench::set_bandwidth(state, bytes_read(op, n));
  });
}

int as_int(std::int64_t n) {
  course::require_arg(n <= 0x7fffffff, "bench_reductions", "n", n, "does not fit cuBLAS's int");
  return static_cast<int>(n);
}

void register_rows() {
  const struct {
    Op op;
    const char* name;
    ReduceFn solution;
    ReduceFn exercise;
  } ops[] = {
      {Op::l2_norm, "l2_norm", &course::solution::l2_norm, &course::exercise::l2_norm},
      {Op::dot, "dot", &course::solution::dot, &course::exercise::dot},
  };
  for (const auto& o : ops) {
    for (const std::int64_t n : kSizes) {
      const std::string shape = "n=" + std::to_string(n);
      const Op op = o.op;
      for (const auto& [impl, fn] : {std::pair{"solution", o.solution}, std::pair{"exercise", o.exercise}}) {
        for (const auto& info : course::m01::kReduceSteps) {
          const ReduceStep step = info.step;
          const ReduceFn f = fn;
          bench::add_row(bench::row_name(o.name, impl, info.name, shape), benchmark::kMicrosecond,
                         [=](benchmark::State& state) {
            run_timed(state, op, n, [=] { return Call([=](const ReduceArgs& a) { f(step, a); }); });
          });
        }
      }
      // Library rows. The cuBLAS handle reads and writes its scalar result through a
      // DEVICE pointer: asynchronous like our kernels (the host pointer mode would
      // synchronize on every call).
      const std::string blas = op == Op::l2_norm ? "cublas_snrm2" : "cublas_sdot";
      bench::add_row(bench::row_name(o.name, "library", blas, shape), benchmark::kMicrosecond,
                     [=](benchmark::State& state) {
        run_timed(state, op, n, [=] {
          const cublasHandle_t h = bench::cublas_handle(/*device_pointer_mode=*/true);
          return Call([=](const ReduceArgs& a) {
            if (op == Op::l2_norm)
              bench::check_cublas(cublasSnrm2(h, as_int(a.n), a.x, 1, a.result), "cublasSnrm2");
            else
              bench::check_cublas(cublasSdot(h, as_int(a.n), a.x, 1, a.y, 1, a.result), "cublasSdot");
          });
        });
      });
      bench::add_row(bench::row_name(o.name, "library", "cub_reduce", shape), benchmark::kMicrosecond,
                     [=](benchmark::State& state) {
        run_timed(state, op, n, [=] {
          const std::size_t bytes = op == Op::l2_norm ? lib::cub_l2_norm_temp_bytes(n) : lib::cub_dot_temp_bytes(n);
          // Shared by the copies of the returned call; freed when the row is done.
          auto temp = std::make_shared<DeviceBuffer<unsigned char>>(std::max<std::size_t>(bytes, 1));
          return Call([=](const ReduceArgs& a) {
            if (op == Op::l2_norm)
              lib::cub_l2_norm(a.x, a.n, a.result, temp->data(), bytes, nullptr);
            else
              lib::cub_dot(a.x, a.y, a.n, a.result, temp->data(), bytes, nullptr);
          });
        });
      });
    }
  }
}

[[maybe_unused]] const bool registered = (register_rows(), true);

}  // namespace
