/// @file fill.cu
/// @brief course::bench::fill_uniform_device: random benchmark inputs generated on the
/// device, so gigabytes of them cost milliseconds rather than host generation and upload.

#include "course/bench.hpp"
#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace course::bench {
namespace {

/// Uniform in [lo, hi) from a hash of (seed, i): splitmix64's finalizer, 24 random bits.
__device__ float uniform(std::uint64_t seed, std::int64_t i, float lo, float hi) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return lo + (hi - lo) * (static_cast<float>(z >> 40) * 0x1p-24f);
}

/// A grid-stride loop: any n with a fixed grid.
template <class T>
__global__ void fill_uniform_kernel(T* p, std::int64_t n, std::uint64_t seed, float lo, float hi) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = static_cast<T>(uniform(seed, i, lo, hi));
}

template <class T>
void fill(T* p, std::int64_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n == 0) return;
  fill_uniform_kernel<<<1024, 256, 0, stream>>>(p, n, seed, lo, hi);
  COURSE_CHECK_LAUNCH("fill_uniform_kernel");
}

}  // namespace

void fill_uniform_device(float* p, std::int64_t n, std::uint64_t seed, float lo, float hi, cudaStream_t stream) {
  fill(p, n, seed, lo, hi, stream);
}

void fill_uniform_device(__nv_bfloat16* p, std::int64_t n, std::uint64_t seed, float lo, float hi,
                         cudaStream_t stream) {
  fill(p, n, seed, lo, hi, stream);
}

}  // namespace course::bench
