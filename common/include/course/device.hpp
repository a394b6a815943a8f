#pragma once
/// @file device.hpp
/// @brief Device discovery and RAII device memory with upload/download.

#include "course/error.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace course {

/// Why the course's kernels cannot run here, said the same way by every test, demo,
/// benchmark and script: a plain headline first, the CUDA runtime's own words second.
struct NoGpuReason {
  /// "no NVIDIA GPU found" (also when the runtime's error sounds like a driver problem but
  /// no NVIDIA driver is loaded: a machine without a GPU), or "no usable NVIDIA GPU: ..."
  /// naming what is wrong with the one found (its driver, its compute capability).
  std::string headline;
  /// What the CUDA runtime reported, e.g. "cudaGetDeviceCount returned
  /// cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA runtime version)".
  std::string detail;

  /// The two lines every program prints: `headline` + ": " + `consequence` (when not
  /// empty), then `indent` + "(CUDA runtime: " + `detail` + ")".
  std::string text(const std::string& consequence = "", const std::string& indent = "  ") const;
};

/// nullopt when a CUDA device the course can use (sm_80 or newer) is present, else why not.
std::optional<NoGpuReason> no_gpu_reason();

/// True when a CUDA device can run kernels. When false, `why` (if given) gets
/// no_gpu_reason()->text(): the headline, then the runtime's words on a second line.
bool cuda_device_available(std::string* why = nullptr);

/// One line naming the current device: "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, driver 13.0)";
/// without one, the no-GPU headline and the runtime's words on one line.
std::string device_summary();

/// Properties of the current device (cached after the first call).
const cudaDeviceProp& device_properties();

/// A memory pool of the current device for small stream-ordered scratch allocations
/// (cudaMallocFromPoolAsync / cudaFreeAsync, e.g. a per-launch tile counter), created on
/// first use per device and kept for the process. Its release threshold is unlimited, so
/// freed memory stays mapped across synchronizations: the device's default pool gives it
/// back at every sync, and the next allocation then maps it again (tens of microseconds,
/// on the stream's timeline). A pool of its own leaves the default pool's settings alone.
cudaMemPool_t scratch_pool();

/// Owning, move-only buffer of `n` elements of T in device memory.
/// Sized in elements; upload() and download() copy whole host vectors.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n_ > 0) COURSE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)));
  }
  /// Allocate and upload `host`.
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = o.ptr_; n_ = o.n_;
      o.ptr_ = nullptr; o.n_ = 0;
    }
    return *this;
  }

  T* data() noexcept { return ptr_; }
  const T* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return n_; }
  std::size_t bytes() const noexcept { return n_ * sizeof(T); }

  /// Copy `host` into the buffer; sizes must match.
  void upload(const std::vector<T>& host) {
    require_arg(host.size() == n_, "DeviceBuffer::upload", "host.size()", host.size(),
                "must equal the buffer size");
    if (n_ > 0) COURSE_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  /// Copy the buffer back to a new host vector (synchronous).
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) COURSE_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  /// Fill every byte with 0xFF: NaN for float, double, half and bf16. Run before a
  /// kernel so an element it forgets to write fails the comparison.
  void poison() {
    if (n_ > 0) COURSE_CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes()));
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace course
