#pragma once
/// @file bench.hpp
/// @brief Google Benchmark helpers: event timing, throughput counters, measured ceilings,
/// the course summary table (step | solution | yours | library | yours/solution), and the
/// plumbing every module's benchmark shares: row registration, the guarded warm-up +
/// timed loop, rotating inputs, a device-side random fill and the cuBLAS handle.
///
/// Benchmark names follow `op/impl/step/shape`, impl being solution, exercise or
/// library (e.g. "l2_norm/solution/warp_shuffle/n=268435456",
/// "l2_norm/library/cub_reduce/n=268435456"). The summary reporter groups rows by
/// op and shape and prints one line per step.
///
/// A typical row (module 1's sgemm):
///
///     add_step_rows("sgemm", info.name, s.name(), benchmark::kMillisecond,
///                   &course::solution::matmul, &course::exercise::matmul,
///                   [step = info.step, s](benchmark::State& state, MatmulFn matmul) {
///                     guard(state, [&] {
///                       Buffers& b = cached<Buffers>(std::tuple{s.m, s.n, s.k}, s);
///                       time_calls(state, [&] { return args_for(b.sets.next(), s); },
///                                  [&](const MatmulArgs& a) { matmul(step, a); });
///                       set_flops(state, s.flops());
///                     });
///                   });

#include "course/device.hpp"
#include "course/error.hpp"

#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace course::bench {

// ---- timing and counters -------------------------------------------------------------

/// Time one iteration of `fn` (work enqueued on `stream`) with CUDA events and report
/// it as manual time. Use with ->UseManualTime(). The first call of a benchmark
/// should be a warm-up (Google Benchmark's own warm-up or an explicit call).
void time_iteration(benchmark::State& state, const std::function<void()>& fn,
                    cudaStream_t stream = nullptr);

/// Set bytes_per_second-style counters: "GB/s" = bytes / time, and "of_copy" =
/// that rate over the device-to-device copy bandwidth measured in this process.
void set_bandwidth(benchmark::State& state, double bytes_moved);
/// "TFLOP/s" = flops / time, and "of_ceiling" = over `ceiling_tflops` (if > 0),
/// typically the library's rate measured in the same run.
void set_flops(benchmark::State& state, double flops, double ceiling_tflops = 0.0);
/// "diagnostic" = 1: this library row measures PART of what the op must do (e.g. only its
/// reads, to split a ceiling into its halves). The summary and the results page list it
/// but never pick it as the reference 'library' column, however fast it is.
void mark_diagnostic(benchmark::State& state);
/// "mem_MB": the device memory one call needs (inputs, outputs, workspace), in MB: shows
/// a step's O(N) or O(N^2) footprint beside its speed.
void set_device_memory(benchmark::State& state, std::size_t bytes);

/// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), measured once
/// per process on a 1 GiB buffer: the memory ceiling the course's counters refer to.
double measured_copy_bandwidth_gbs();

/// Skip the benchmark with a message if no device is usable; returns false then.
bool require_device(benchmark::State& state);

// ---- registering rows ----------------------------------------------------------------

/// "<op>/<impl>/<step>/<shape>": the name of every row (the summary table parses it).
std::string row_name(const std::string& op, const std::string& impl, const std::string& step,
                     const std::string& shape);

/// Registers one row measured with time_iteration (manual time), reported in `unit`.
benchmark::internal::Benchmark* add_row(const std::string& name, benchmark::TimeUnit unit,
                                        std::function<void(benchmark::State&)> fn);

/// Registers the solution's row, then the exercise's row, of one step:
/// "<op>/solution/<step>/<shape>" runs body(state, solution), "<op>/exercise/..." runs
/// body(state, exercise). Returns both rows, e.g. to limit their iterations.
template <class Fn, class Body>
std::pair<benchmark::internal::Benchmark*, benchmark::internal::Benchmark*> add_step_rows(
    const std::string& op, const std::string& step, const std::string& shape, benchmark::TimeUnit unit,
    Fn solution, Fn exercise, Body body) {
  auto* sol = add_row(row_name(op, "solution", step, shape), unit,
                      [=](benchmark::State& state) { body(state, solution); });
  auto* ex = add_row(row_name(op, "exercise", step, shape), unit,
                     [=](benchmark::State& state) { body(state, exercise); });
  return {sol, ex};
}

// ---- running a row -------------------------------------------------------------------

/// The body of a row, guarded: skips the row when no device is usable, otherwise runs
/// `body` and turns the course's exceptions into a skipped row: course::NotImplemented
/// (an exercise step not written yet) as "not implemented: <what>", any other
/// course::Error (a CUDA or cuBLAS failure, a bad argument) as its message. Returns true
/// when `body` ran to its end.
bool guard(benchmark::State& state, const std::function<void()>& body);

/// Warm up with one call, then time one call per iteration (time_iteration). `next()`
/// gives each call's arguments, untimed (e.g. the next copy of rotating inputs);
/// `call(args)` enqueues the work on the default stream. An exercise step that is not
/// written yet throws course::NotImplemented from the warm-up, before anything is timed.
/// Run it inside guard().
template <class Next, class Call>
void time_calls(benchmark::State& state, Next&& next, Call&& call) {
  call(next());  // warm-up: module loading, cuBLAS heuristics, first touch
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto _ : state) {
    auto&& args = next();
    time_iteration(state, [&] { call(args); });
  }
}

// ---- inputs --------------------------------------------------------------------------

/// The T for `key`, built as T(args...) on first use and kept for the process: a
/// benchmark's inputs are allocated and filled once, then shared by every row of that
/// shape. One cache per (T, Key).
template <class T, class Key, class... Args>
T& cached(const Key& key, Args&&... args) {
  static std::map<Key, std::unique_ptr<T>> cache;
  auto& slot = cache[key];
  if (!slot) slot = std::make_unique<T>(std::forward<Args>(args)...);
  return *slot;
}

/// Copies of one benchmark's inputs, handed out in turn: consecutive iterations then read
/// different memory, so inputs smaller than the L2 (50 MB on an H100) come from HBM as
/// they would in a model, not from the previous iteration's cache lines. Copies are built
/// in place and never move (pointers into them stay valid).
template <class T>
class Rotation {
 public:
  template <class... Args>
  T& add(Args&&... args) {
    copies_.push_back(std::make_unique<T>(std::forward<Args>(args)...));
    return *copies_.back();
  }
  /// The next copy, round robin.
  T& next() { return *copies_[next_++ % copies_.size()]; }
  std::size_t size() const { return copies_.size(); }

 private:
  std::vector<std::unique_ptr<T>> copies_;
  std::size_t next_ = 0;
};

/// The device's L2 cache size in bytes (for choosing how many copies to rotate).
double l2_cache_bytes();

/// How many copies of inputs of `bytes` each to rotate so that an iteration does not find
/// its inputs in L2 from the previous one: enough to span 200 MB (4x a 50 MB L2), 1 to 8.
int rotation_copies(double bytes);

/// Scratch for the rows that materialize O(N^2) intermediates (attention's scores, the
/// backward's P and dP): one buffer of T per process, grown on demand -- the old one
/// freed first -- and only if `headroom` bytes of device memory stay free. Otherwise
/// nullptr, and `why` says "<what> need <n> MiB, only <m> MiB free".
template <class T>
T* scratch(std::size_t bytes, const char* what, std::string* why, std::size_t headroom = std::size_t{512} << 20) {
  static DeviceBuffer<T> ws;
  if (ws.bytes() >= bytes) return ws.data();
  ws = DeviceBuffer<T>();  // free the old one first
  std::size_t free_b = 0, total_b = 0;
  COURSE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (bytes + headroom > free_b) {
    *why = std::string(what) + " need " + std::to_string(bytes >> 20) + " MiB, only " + std::to_string(free_b >> 20) +
           " MiB free";
    return nullptr;
  }
  ws = DeviceBuffer<T>(bytes / sizeof(T));
  return ws.data();
}

/// "B4_H16_N4096_d64_causal": the shape part of an attention row's name ("_causal" only
/// when causal).
std::string attention_shape(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d, bool causal);

/// Fills p[0, n) on the device, asynchronously on `stream`, with values uniform in
/// [lo, hi): 24 random bits from a hash of (seed, i) (splitmix64's finalizer). Gigabytes
/// of random inputs (never zeros: the hardware is faster on zeros) without generating
/// them on the host; the same (seed, i) always gives the same value.
void fill_uniform_device(float* p, std::int64_t n, std::uint64_t seed, float lo, float hi,
                         cudaStream_t stream = nullptr);
/// The same values rounded to the nearest bf16.
void fill_uniform_device(__nv_bfloat16* p, std::int64_t n, std::uint64_t seed, float lo, float hi,
                         cudaStream_t stream = nullptr);

// ---- cuBLAS ---------------------------------------------------------------------------

/// Throws course::Error("<what> failed with cuBLAS status <n>") unless `status` is success.
void check_cublas(cublasStatus_t status, const char* what);

/// The process's cuBLAS handle, created on first use, on the default stream and in
/// CUBLAS_DEFAULT_MATH: fp32 GEMMs then compute in true fp32 (no TF32, which would need
/// CUBLAS_TF32_TENSOR_OP_MATH or CUBLAS_COMPUTE_32F_FAST_TF32), the arithmetic of the
/// course's fp32 kernels. Scalars (alpha, beta, a result) go through host pointers; with
/// `device_pointer_mode` (a second handle) through DEVICE pointers, so that a call
/// returning a scalar (snrm2, sdot) stays asynchronous like our kernels instead of
/// synchronizing on every call.
cublasHandle_t cublas_handle(bool device_pointer_mode = false);

// ---- main ------------------------------------------------------------------------------

/// Run the benchmarks with the course's summary table printed after the usual
/// console output. Call from main() instead of benchmark::RunSpecifiedBenchmarks().
int run_with_summary(int argc, char** argv);

}  // namespace course::bench

/// main() for a course benchmark binary.
#define COURSE_BENCHMARK_MAIN()                                         \
  int main(int argc, char** argv) { return ::course::bench::run_with_summary(argc, argv); }
