#pragma once
/// @file timer.hpp
/// @brief CUDA-event timing: warm up, run many times, take the median.

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

namespace course {

/// A pair of CUDA events around a region of a stream.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start(cudaStream_t stream = nullptr);
  void stop(cudaStream_t stream = nullptr);
  /// Milliseconds between start and stop (synchronizes on the stop event).
  float elapsed_ms() const;

 private:
  cudaEvent_t start_{};
  cudaEvent_t stop_{};
};

struct TimingStats {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  int runs = 0;
};

/// Run `fn` `warmup` times, then time each of `runs` calls with events; returns the median.
/// `fn` must enqueue its work on `stream`.
TimingStats time_kernel(const std::function<void()>& fn, int warmup = 3, int runs = 20,
                        cudaStream_t stream = nullptr);

/// Overwrite a buffer larger than L2, so the next timed run reads from HBM.
void flush_l2(cudaStream_t stream = nullptr);

}  // namespace course
