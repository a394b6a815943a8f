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
#include <map>
#include <memory>
#include <string>
#include <vector>

// Defined in bench_reductions_lib.cu (CUB needs nvcc); declared here, its only user.
namespace course::m01::reductions_lib {
std::size_t cub_l2_norm_temp_bytes(std::int64_t n);
void cub_l2_norm(const float* x, std::int64_t n, float* result, void* temp, std::size_t temp_bytes,
                 cudaStream_t stream);
std::size_t cub_dot_temp_bytes(std::int64_t n);
void cub_dot(const float* x, const float* y, std::int64_t n, float* result, void* temp, std::size_t temp_bytes,
             cudaStream_t stream);
void fill_random(float* p, std::int64_t n, std::uint64_t seed, cudaStream_t stream);
}  // namespace course::m01::reductions_lib

namespace {

namespace lib = course::m01::reductions_lib;
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
  std::int64_t n;
  std::vector<DeviceBuffer<float>> xs, ys;
  DeviceBuffer<float> result{1};
  DeviceBuffer<float> workspace{course::m01::kMaxReduceBlocks};
  std::size_t next = 0;

  explicit Inputs(std::int64_t len) : n(len) {
    const double l2 = static_cast<double>(course::device_properties().l2CacheSize);
    const double bytes = 4.0 * static_cast<double>(n);
    const int copies = static_cast<int>(std::clamp(3.0 * l2 / bytes, 1.0, 64.0));
    for (int k = 0; k < copies; ++k) {
      xs.emplace_back(static_cast<std::size_t>(n));
      ys.emplace_back(static_cast<std::size_t>(n));
      lib::fill_random(xs.back().data(), n, 1000 + 2 * k, nullptr);
      lib::fill_random(ys.back().data(), n, 1001 + 2 * k, nullptr);
    }
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  /// Arguments on the next copy of the inputs.
  ReduceArgs next_args(Op op) {
    const std::size_t k = next++ % xs.size();
    ReduceArgs a;
    a.x = xs[k].data();
    a.y = op == Op::dot ? ys[k].data() : nullptr;
    a.n = n;
    a.result = result.data();
    a.workspace = workspace.data();
    a.workspace_bytes = workspace.bytes();
    return a;
  }
};

Inputs& inputs_for(std::int64_t n) {
  static std::map<std::int64_t, std::unique_ptr<Inputs>> cache;
  auto& slot = cache[n];
  if (!slot) slot = std::make_unique<Inputs>(n);
  return *slot;
}

using Call = std::function<void(const ReduceArgs&)>;

/// Times the call that `setup` returns (setup allocates what it needs, untimed) on
/// rotating inputs; the call must enqueue its work on the default stream.
void run_timed(benchmark::State& state, Op op, std::int64_t n, const std::function<Call()>& setup) {
  if (!course::bench::require_device(state)) return;
  try {
    Inputs& in = inputs_for(n);
    const Call call = setup();
    call(in.next_args(op));  // warm-up; an unwritten exercise step throws here
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto _ : state) {
      const ReduceArgs a = in.next_args(op);
      course::bench::time_iteration(state, [&] { call(a); });
    }
    course::bench::set_bandwidth(state, bytes_read(op, n));
  } catch (const course::NotImplemented& e) {
    state.SkipWithError((std::string("not implemented: ") + e.what()).c_str());
  } catch (const course::Error& e) {
    state.SkipWithError(e.what());
  }
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw course::Error(std::string(what) + " failed with cuBLAS status " + std::to_string(static_cast<int>(status)));
}

/// One cuBLAS handle for the process, on the default stream, reading and writing its
/// scalar result through a DEVICE pointer: asynchronous like our kernels (the host
/// pointer mode would synchronize on every call).
cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    check_cublas(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), "cublasSetPointerMode");
    check_cublas(cublasSetStream(h, nullptr), "cublasSetStream");
    return h;
  }();
  return handle;
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
      const std::string shape = "/n=" + std::to_string(n);
      const Op op = o.op;
      for (const auto& [impl, fn] : {std::pair{"solution", o.solution}, std::pair{"exercise", o.exercise}}) {
        for (const auto& info : course::m01::kReduceSteps) {
          const ReduceStep step = info.step;
          const ReduceFn f = fn;
          const std::string name = std::string(o.name) + "/" + impl + "/" + info.name + shape;
          benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
            run_timed(state, op, n, [=] { return Call([=](const ReduceArgs& a) { f(step, a); }); });
          })->UseManualTime()->Unit(benchmark::kMicrosecond);
        }
      }
      // Library rows.
      const std::string blas = op == Op::l2_norm ? "cublas_snrm2" : "cublas_sdot";
      benchmark::RegisterBenchmark((std::string(o.name) + "/library/" + blas + shape).c_str(),
                                   [=](benchmark::State& state) {
        run_timed(state, op, n, [=] {
          const cublasHandle_t h = cublas();
          return Call([=](const ReduceArgs& a) {
            if (op == Op::l2_norm)
              check_cublas(cublasSnrm2(h, as_int(a.n), a.x, 1, a.result), "cublasSnrm2");
            else
              check_cublas(cublasSdot(h, as_int(a.n), a.x, 1, a.y, 1, a.result), "cublasSdot");
          });
        });
      })->UseManualTime()->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark((std::string(o.name) + "/library/cub_reduce" + shape).c_str(),
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
      })->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
  }
}

[[maybe_unused]] const bool registered = (register_rows(), true);

}  // namespace
