#include "course/device.hpp"

#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

namespace course {

namespace {

/// True when an NVIDIA kernel driver is loaded (Linux: /proc/driver/nvidia/version). It
/// tells "this machine has no NVIDIA GPU" from "its driver is older than the runtime"
/// when the runtime answers cudaErrorInsufficientDriver, which it does in both cases.
bool nvidia_driver_loaded() { return static_cast<bool>(std::ifstream("/proc/driver/nvidia/version")); }

std::string runtime_error_text(const char* call, cudaError_t code) {
  return std::string(call) + " returned " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")";
}

}  // namespace

std::string NoGpuReason::text(const std::string& consequence, const std::string& indent) const {
  return headline + (consequence.empty() ? "" : ": " + consequence) + "\n" + indent + "(CUDA runtime: " + detail + ")";
}

std::optional<NoGpuReason> no_gpu_reason() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    const bool old_driver = code == cudaErrorInsufficientDriver && nvidia_driver_loaded();
    return NoGpuReason{old_driver ? "no usable NVIDIA GPU: its driver is older than this CUDA runtime needs "
                                    "(update the NVIDIA driver)"
                                  : "no NVIDIA GPU found",
                       runtime_error_text("cudaGetDeviceCount", code)};
  }
  if (count == 0) return NoGpuReason{"no NVIDIA GPU found", "cudaGetDeviceCount found 0 devices"};
  int dev = 0, major = 0, minor = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return NoGpuReason{"no usable NVIDIA GPU: its compute capability could not be read",
                       runtime_error_text("cudaDeviceGetAttribute", err)};
  }
  if (major < 8)  // cp.async, ldmatrix, bf16 mma.sync: every module needs sm_80+
    return NoGpuReason{"no usable NVIDIA GPU: device " + std::to_string(dev) + " is sm_" + std::to_string(major) +
                           std::to_string(minor) + "; the course's kernels need sm_80 (Ampere) or newer",
                       "compute capability " + std::to_string(major) + "." + std::to_string(minor)};
  return std::nullopt;
}

bool cuda_device_available(std::string* why) {
  const std::optional<NoGpuReason> reason = no_gpu_reason();
  if (reason && why) *why = reason->text();
  return !reason;
}

const cudaDeviceProp& device_properties() {
  static const cudaDeviceProp props = [] {
    int dev = 0;
    COURSE_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp p{};
    COURSE_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    return p;
  }();
  return props;
}

cudaMemPool_t scratch_pool() {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;  // one per device, never destroyed
  int dev = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = pools.find(dev); it != pools.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool = nullptr;
  COURSE_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
  COURSE_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  pools.emplace(dev, pool);
  return pool;
}

std::string device_summary() {
  if (const std::optional<NoGpuReason> reason = no_gpu_reason())
    return reason->headline + " (CUDA runtime: " + reason->detail + ")";
  const cudaDeviceProp& p = device_properties();
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::ostringstream os;
  os << p.name << " (sm_" << p.major << p.minor << ", " << p.multiProcessorCount << " SMs, "
     << (p.totalGlobalMem >> 20) << " MiB, L2 " << (p.l2CacheSize >> 20) << " MiB, driver "
     << driver / 1000 << "." << (driver % 1000) / 10 << ", runtime " << runtime / 1000 << "."
     << (runtime % 1000) / 10 << ")";
  return os.str();
}

}  // namespace course
