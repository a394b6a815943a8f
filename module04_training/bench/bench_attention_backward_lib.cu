/// @file bench_attention_backward_lib.cu
/// @brief Device code for bench_attention_backward.cpp: the elementwise step of the
/// cuBLAS-materialized library row, P = exp(S - lse) with the causal mask, in place.
/// Declared in bench_attention_backward.cpp, the only user.

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::m04::bench_lib {
namespace {

/// s[r, j] = exp(s[r, j] - lse[r]) for the keys row r's query sees, 0 for the others
/// (j > i + N_k - N_q when causal; every key of a row with lse = -inf). Row r = (b*H + h)*N_q + i.
/// A block per row (grid-stride), float4 when the rows are 16-byte aligned (N_k % 4 == 0).
template <bool kVec4>
__global__ void probabilities_kernel(float* s, const float* lse, long long rows, int seq_q, int seq_k, bool causal) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long i = r % seq_q;
    const float l = lse[r];
    long long end = causal ? std::min<long long>(std::max<long long>(i + seq_k - seq_q + 1, 0), seq_k) : seq_k;
    if (l == -INFINITY) end = 0;
    float* row = s + r * seq_k;
    if constexpr (kVec4) {
      float4* row4 = reinterpret_cast<float4*>(row);
      for (long long j4 = threadIdx.x; j4 < seq_k / 4; j4 += blockDim.x) {
        float4 x = row4[j4];
        const long long j = 4 * j4;
        x.x = j < end ? __expf(x.x - l) : 0.f;
        x.y = j + 1 < end ? __expf(x.y - l) : 0.f;
        x.z = j + 2 < end ? __expf(x.z - l) : 0.f;
        x.w = j + 3 < end ? __expf(x.w - l) : 0.f;
        row4[j4] = x;
      }
    } else {
      for (long long j = threadIdx.x; j < seq_k; j += blockDim.x) row[j] = j < end ? __expf(row[j] - l) : 0.f;
    }
  }
}

}  // namespace

void probabilities_from_lse(float* s, const float* lse, std::int64_t rows, std::int64_t seq_q, std::int64_t seq_k,
                            bool causal, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(rows, 1 << 20));
  if (seq_k % 4 == 0)
    probabilities_kernel<true><<<blocks, 256, 0, stream>>>(s, lse, rows, static_cast<int>(seq_q),
                                                           static_cast<int>(seq_k), causal);
  else
    probabilities_kernel<false><<<blocks, 256, 0, stream>>>(s, lse, rows, static_cast<int>(seq_q),
                                                            static_cast<int>(seq_k), causal);
  COURSE_CHECK_LAUNCH("probabilities_kernel");
}

}  // namespace course::m04::bench_lib
