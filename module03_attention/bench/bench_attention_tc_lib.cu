/// @file bench_attention_tc_lib.cu
/// @brief Device code for bench_attention_tc.cpp: the softmax of the cuBLAS-materialized
/// bf16 library row (bf16 scores in, bf16 P out, fp32 arithmetic, optional bottom-right
/// causal mask). Declared in bench_attention_tc.cpp, the only user.

#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::m03::bench_lib {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxChunks = 8;  // 8 x 8 bf16 per thread: rows up to 256 * 64 = 16384 keys

/// One block per row of S ([rows, seq_k] contiguous bf16), in place: P = softmax(S) with
/// the keys j > i + seq_k - seq_q hidden when causal (i = row % seq_q). The row stays in
/// registers between the max, the sum and the store (one read, one write of S).
__global__ void __launch_bounds__(kThreads) softmax_rows_kernel(__nv_bfloat16* s, int seq_q, int seq_k, bool causal) {
  __shared__ float scratch[32];
  const long long row = blockIdx.x;
  const int i = static_cast<int>(row % seq_q);
  const long long vis = causal ? static_cast<long long>(i) + seq_k - seq_q + 1 : seq_k;
  const int visible = static_cast<int>(vis < 0 ? 0 : (vis > seq_k ? seq_k : vis));
  uint4* p = reinterpret_cast<uint4*>(s + row * seq_k);
  const int chunks = seq_k / 8;
  float x[kMaxChunks][8];
  float mx = -INFINITY;
#pragma unroll
  for (int u = 0; u < kMaxChunks; ++u) {
    const int c = threadIdx.x + u * kThreads;
    if (c < chunks) {
      const uint4 w = p[c];
      const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(h2[e]);
        x[u][2 * e] = 8 * c + 2 * e < visible ? f.x : -INFINITY;
        x[u][2 * e + 1] = 8 * c + 2 * e + 1 < visible ? f.y : -INFINITY;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[u][e] = -INFINITY;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) mx = fmaxf(mx, x[u][e]);
  }
  mx = cuda::block_all_reduce(mx, cuda::Max{}, -INFINITY, scratch);
  const float m_ref = mx == -INFINITY ? 0.f : mx;  // a row that sees no key: P = 0
  float sum = 0.f;
#pragma unroll
  for (int u = 0; u < kMaxChunks; ++u)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      x[u][e] = __expf(x[u][e] - m_ref);
      sum += x[u][e];
    }
  sum = cuda::block_all_reduce(sum, cuda::Sum{}, 0.f, scratch);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int u = 0; u < kMaxChunks; ++u) {
    const int c = threadIdx.x + u * kThreads;
    if (c < chunks) {
      uint4 w;
      __nv_bfloat162* h2 = reinterpret_cast<__nv_bfloat162*>(&w);
#pragma unroll
      for (int e = 0; e < 4; ++e) h2[e] = __floats2bfloat162_rn(x[u][2 * e] * inv, x[u][2 * e + 1] * inv);
      p[c] = w;
    }
  }
}

}  // namespace

void softmax_rows_bf16(__nv_bfloat16* s, std::int64_t rows, std::int64_t seq_q, std::int64_t seq_k, bool causal,
                       cudaStream_t stream) {
  require_arg(seq_k % 8 == 0 && seq_k <= 8 * kMaxChunks * kThreads, "softmax_rows_bf16", "seq_k", seq_k,
              "must be a multiple of 8 and <= 16384 (the benchmark's rows)");
  softmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(s, static_cast<int>(seq_q),
                                                                           static_cast<int>(seq_k), causal);
  COURSE_CHECK_LAUNCH("softmax_rows_kernel");
}

}  // namespace course::m03::bench_lib
