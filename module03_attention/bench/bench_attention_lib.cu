/// @file bench_attention_lib.cu
/// @brief Device code for bench_attention.cpp: the causal mask of the cuBLAS-materialized
/// library row. Declared in bench_attention.cpp, the only user.

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::m03::bench_lib {
namespace {

/// s[r, j] = -inf for j > i + (N_k - N_q), row r = (b*H + h)*N_q + i.
__global__ void causal_mask_kernel(float* s, long long rows, int seq_q, int seq_k) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long i = r % seq_q;
    const long long first = std::max(0LL, i + (seq_k - seq_q) + 1);
    for (long long j = first + threadIdx.x; j < seq_k; j += blockDim.x) s[r * seq_k + j] = -INFINITY;
  }
}

}  // namespace

void causal_mask(float* s, std::int64_t rows, std::int64_t seq_q, std::int64_t seq_k, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(rows, 1 << 20));
  causal_mask_kernel<<<blocks, 256, 0, stream>>>(s, rows, static_cast<int>(seq_q), static_cast<int>(seq_k));
  COURSE_CHECK_LAUNCH("causal_mask_kernel");
}

}  // namespace course::m03::bench_lib
