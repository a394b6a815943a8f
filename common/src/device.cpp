#include "course/device.hpp"

#include <sstream>
#include <string>

namespace course {

bool cuda_device_available(std::string* why) {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why) *why = std::string("no usable CUDA device: cudaGetDeviceCount returned ") +
                    cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")";
    return false;
  }
  if (count == 0) {
    if (why) *why = "no usable CUDA device: the driver reports 0 devices";
    return false;
  }
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = "no usable CUDA device: its compute capability could not be read";
    return false;
  }
  if (major < 8) {  // cp.async, ldmatrix, bf16 mma.sync: every module needs sm_80+
    if (why)
      *why = "no usable CUDA device: device " + std::to_string(dev) + " is sm_" + std::to_string(major) +
             std::to_string(minor) + ", the course's kernels need sm_80 or newer";
    return false;
  }
  return true;
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

std::string device_summary() {
  std::string why;
  if (!cuda_device_available(&why)) return why;
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
