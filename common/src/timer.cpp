#include "course/timer.hpp"

#include "course/device.hpp"
#include "course/error.hpp"

#include <algorithm>

namespace course {

EventTimer::EventTimer() {
  COURSE_CUDA_CHECK(cudaEventCreate(&start_));
  COURSE_CUDA_CHECK(cudaEventCreate(&stop_));
}
EventTimer::~EventTimer() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}
void EventTimer::start(cudaStream_t stream) { COURSE_CUDA_CHECK(cudaEventRecord(start_, stream)); }
void EventTimer::stop(cudaStream_t stream) { COURSE_CUDA_CHECK(cudaEventRecord(stop_, stream)); }
float EventTimer::elapsed_ms() const {
  COURSE_CUDA_CHECK(cudaEventSynchronize(stop_));
  float ms = 0.f;
  COURSE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

TimingStats time_kernel(const std::function<void()>& fn, int warmup, int runs, cudaStream_t stream) {
  require_arg(runs >= 1, "time_kernel", "runs", runs, "must be >= 1");
  for (int i = 0; i < warmup; ++i) fn();
  COURSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  EventTimer timer;
  std::vector<double> ms(static_cast<std::size_t>(runs));
  for (int i = 0; i < runs; ++i) {
    timer.start(stream);
    fn();
    timer.stop(stream);
    ms[static_cast<std::size_t>(i)] = timer.elapsed_ms();
  }
  std::sort(ms.begin(), ms.end());
  TimingStats s;
  s.runs = runs;
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  s.median_ms = ms[ms.size() / 2];
  return s;
}

void flush_l2(cudaStream_t stream) {
  static DeviceBuffer<unsigned char> scratch;
  const std::size_t want = 2 * static_cast<std::size_t>(std::max(device_properties().l2CacheSize, 1 << 20));
  if (scratch.size() < want) scratch = DeviceBuffer<unsigned char>(want);
  COURSE_CUDA_CHECK(cudaMemsetAsync(scratch.data(), 0x5A, scratch.size(), stream));
}

}  // namespace course
