/// @file bench_attention_lib.cu
/// @brief Device code for bench_attention.cpp: a device-side random fill (gigabytes of
/// inputs need no host generation) and the causal mask of the cuBLAS-materialized library
/// row. Declared in bench_attention.cpp, the only user.

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::m03::bench_lib {
namespace {

/// Uniform in [lo, hi) from a hash of (seed, i): splitmix64's finalizer.
__device__ float uniform(std::uint64_t seed, std::int64_t i, float lo, float hi) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return lo + (hi - lo) * (static_cast<float>(z >> 40) * 0x1p-24f);
}

__global__ void fill_kernel(float* p, std::int64_t n, std::uint64_t seed, float lo, float hi) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = uniform(seed, i, lo, hi);
}

/// s[r, j] = -inf for j > i + (N_k - N_q), row r = (b*H + h)*N_q + i.
__global__ void causal_mask_kernel(float* s, long long rows, int seq_q, int seq_k) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long i = r % seq_q;
    const long long first = std::max(0LL, i + (seq_k - seq_q) + 1);
    for (long long j = first + threadIdx.x; j < seq_k; j += blockDim.x) s[r * seq_k + j] = -INFINITY;
  }
}

}  // namespace

void fill_uniform(float* p, std::int64_t n, std::uint64_t seed, float lo, float hi) {
  if (n == 0) return;
  fill_kernel<<<1024, 256>>>(p, n, seed, lo, hi);
  COURSE_CHECK_LAUNCH("fill_kernel");
}

void causal_mask(float* s, std::int64_t rows, std::int64_t seq_q, std::int64_t seq_k, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(rows, 1 << 20));
  causal_mask_kernel<<<blocks, 256, 0, stream>>>(s, rows, static_cast<int>(seq_q), static_cast<int>(seq_k));
  COURSE_CHECK_LAUNCH("causal_mask_kernel");
}

}  // namespace course::m03::bench_lib
