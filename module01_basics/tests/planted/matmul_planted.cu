/// @file matmul_planted.cu
/// @brief Realistic SGEMM mistakes (see matmul_planted.hpp). Do not copy these.

#include "matmul_planted.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::planted {
namespace {

constexpr int kTile = 32;

__device__ __forceinline__ float blend(float acc, float alpha, float beta, const float* c) {
  return beta == 0.0f ? alpha * acc : fmaf(beta, *c, alpha * acc);
}

/// BUG: assumes M, N, K are multiples of kTile (no bounds checks needed "because"
/// the grid and the K loop only cover full tiles).
__global__ void dropped_edge_tile_kernel(int K, float alpha, const float* A, std::int64_t lda, const float* B,
                                         std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bs[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * kTile + ty;
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 + kTile <= K; k0 += kTile) {  // BUG: drops the last K % 32 terms
    As[ty][tx] = A[row * lda + k0 + tx];
    Bs[ty][tx] = B[static_cast<std::int64_t>(k0 + ty) * ldb + col];
    __syncthreads();
    for (int p = 0; p < kTile; ++p) acc = fmaf(As[ty][p], Bs[p][tx], acc);
    __syncthreads();
  }
  float* c = C + row * ldc + col;
  *c = blend(acc, alpha, beta, c);
}

/// BUG: no barrier between the tile stores and the reads of other threads' elements.
__global__ void missing_sync_kernel(int M, int N, int K, float alpha, const float* A, std::int64_t lda,
                                    const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bs[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * kTile + ty;
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[row * lda + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[static_cast<std::int64_t>(k0 + ty) * ldb + col] : 0.0f;
    // BUG: the __syncthreads() that belongs here is missing.
    for (int p = 0; p < kTile; ++p) acc = fmaf(As[ty][p], Bs[p][tx], acc);
    __syncthreads();
  }
  if (row < M && col < N) {
    float* c = C + row * ldc + col;
    *c = blend(acc, alpha, beta, c);
  }
}

/// BUG: A[p * lda + row] -- A's indices swapped.
__global__ void transposed_a_kernel(int M, int N, int K, float alpha, const float* A, std::int64_t lda,
                                    const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int p = 0; p < K; ++p) acc = fmaf(A[p * lda + row], B[p * ldb + col], acc);
  float* c = C + row * ldc + col;
  *c = blend(acc, alpha, beta, c);
}

/// BUG: always reads C.
__global__ void reads_c_kernel(int M, int N, int K, float alpha, const float* A, std::int64_t lda, const float* B,
                               std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int p = 0; p < K; ++p) acc = fmaf(A[row * lda + p], B[p * ldb + col], acc);
  float* c = C + row * ldc + col;
  *c = alpha * acc + beta * *c;  // BUG: 0 * NaN = NaN
}

dim3 grid_for(const m01::MatmulArgs& a) {
  return dim3(static_cast<unsigned>((a.n + kTile - 1) / kTile), static_cast<unsigned>((a.m + kTile - 1) / kTile));
}

}  // namespace

void matmul_dropped_edge_tile(m01::MatmulStep /*step*/, const m01::MatmulArgs& a) {
  m01::validate_matmul_args(a, "matmul_dropped_edge_tile");
  const dim3 grid(static_cast<unsigned>(a.n / kTile), static_cast<unsigned>(a.m / kTile));  // BUG: rounds down
  if (grid.x == 0 || grid.y == 0) return;  // "nothing to do" -- C stays unwritten
  dropped_edge_tile_kernel<<<grid, dim3(kTile, kTile), 0, a.stream>>>(static_cast<int>(a.k), a.alpha, a.a, a.lda,
                                                                      a.b, a.ldb, a.beta, a.c, a.ldc);
  COURSE_CHECK_LAUNCH("dropped_edge_tile_kernel");
}

void matmul_missing_sync(m01::MatmulStep /*step*/, const m01::MatmulArgs& a) {
  m01::validate_matmul_args(a, "matmul_missing_sync");
  missing_sync_kernel<<<grid_for(a), dim3(kTile, kTile), 0, a.stream>>>(
      static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b, a.ldb, a.beta,
      a.c, a.ldc);
  COURSE_CHECK_LAUNCH("missing_sync_kernel");
}

void matmul_transposed_a(m01::MatmulStep /*step*/, const m01::MatmulArgs& a) {
  m01::validate_matmul_args(a, "matmul_transposed_a");
  require_arg(a.m == a.k && a.n == a.k && a.lda == a.k, "matmul_transposed_a", "m", a.m,
              "this planted bug only runs on square, packed matrices (it would read out of bounds)");
  transposed_a_kernel<<<grid_for(a), dim3(kTile, kTile), 0, a.stream>>>(
      static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b, a.ldb, a.beta,
      a.c, a.ldc);
  COURSE_CHECK_LAUNCH("transposed_a_kernel");
}

void matmul_reads_c_when_beta_zero(m01::MatmulStep /*step*/, const m01::MatmulArgs& a) {
  m01::validate_matmul_args(a, "matmul_reads_c_when_beta_zero");
  reads_c_kernel<<<grid_for(a), dim3(kTile, kTile), 0, a.stream>>>(
      static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b, a.ldb, a.beta,
      a.c, a.ldc);
  COURSE_CHECK_LAUNCH("reads_c_kernel");
}

}  // namespace course::planted
