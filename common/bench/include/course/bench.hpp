#pragma once
/// @file bench.hpp
/// @brief Google Benchmark helpers: event timing, throughput counters, measured ceilings,
/// and the course summary table (step | solution | yours | library | yours/solution).
///
/// Benchmark names follow `op/impl/step/shape`, impl being solution, exercise or
/// library (e.g. "l2_norm/solution/warp_shuffle/n=268435456",
/// "l2_norm/library/cub_reduce/n=268435456"). The summary reporter groups rows by
/// op and shape and prints one line per step.

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace course::bench {

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

/// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), measured once
/// per process on a 1 GiB buffer: the memory ceiling the course's counters refer to.
double measured_copy_bandwidth_gbs();

/// Skip the benchmark with a message if no device is usable; returns false then.
bool require_device(benchmark::State& state);

/// Run the benchmarks with the course's summary table printed after the usual
/// console output. Call from main() instead of benchmark::RunSpecifiedBenchmarks().
int run_with_summary(int argc, char** argv);

}  // namespace course::bench

/// main() for a course benchmark binary.
#define COURSE_BENCHMARK_MAIN()                                         \
  int main(int argc, char** argv) { return ::course::bench::run_with_summary(argc, argv); }
