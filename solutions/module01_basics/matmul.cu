/// @file matmul.cu
/// @brief Solution ladder for fp32 SGEMM, C = alpha * A * B + beta * C (module 1).
///
/// The ladder (kMatmulSteps in module01/matmul.hpp):
///   1. naive        one thread per output, threadIdx.x along M: strided A loads and C stores
///   2. coalesced    one thread per output, threadIdx.x along N: coalesced B loads and C stores
///   3. smem_tiled   32x32 tiles of A and B in shared memory, each reused 32 times
///   4. register_1d  each thread computes 8 outputs of one column (1-D register blocking)
///   5. register_2d  each thread computes an 8x8 block of outputs (2-D register blocking)
///   6. vectorized   float4 global and shared loads, A stored transposed in shared memory
///   7. warp_tiled   warp tiles, conflict-free fragments, a double-buffered cp.async pipeline
///
/// All matrices are row-major with leading dimensions; every kernel handles any
/// M, N, K >= 1 (partial tiles are zero-filled on load and masked on store) and
/// follows BLAS: beta == 0 means C is never read.
///
/// Numbers used in the predictions below, for the benchmark shape M = N = K = 4096:
///   FLOPs            2*M*N*K = 137.4 GFLOP
///   compulsory bytes 4*(M*K + K*N + M*N) = 201 MB (beta = 0: C is only written)
///   intensity        137.4e9 / 201e6 = 683 FLOP/byte, far right of the H100 ridge
///                    (67 TFLOP/s / 3.35 TB/s = 20 FLOP/byte): a compute-bound problem.
///   H100 SXM fp32    132 SMs * 128 FMA lanes * 2 FLOP * 1.98 GHz = 66.9 TFLOP/s peak;
///                    cuBLAS SGEMM reaches about 50 of that (clocks drop under load).
///   SM budgets       4 warp-instructions issued per clock (one per sub-partition);
///                    shared memory / L1 deliver 128 bytes (one "wavefront") per clock.
/// So the whole ladder is about one thing: feed 4 FFMA per clock per SM without
/// running out of load bandwidth (L1, shared memory) or of issue slots.
///
/// Resource usage per kernel (registers, spills) is printed by building with
/// -DCOURSE_PTXAS_VERBOSE=ON; the numbers in the comments are for sm_90, CUDA 13.0.

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/device.hpp"
#include "module01/matmul.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::solution {
namespace {

using m01::MatmulArgs;
using m01::MatmulStep;

/// alpha*acc + beta*c, reading *c only when beta != 0 (BLAS: beta == 0 means C is
/// write-only, so NaN or garbage in C never reaches the result).
__device__ __forceinline__ float blend(float acc, float alpha, float beta, const float* c) {
  return beta == 0.0f ? alpha * acc : fmaf(beta, *c, alpha * acc);
}

/// ceil(a / b) for positive sizes.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// A grid of tiles_x * tiles_y blocks; gridDim.y is limited to 65535.
dim3 tile_grid(std::int64_t tiles_x, std::int64_t tiles_y, const char* step, const char* dim_y,
               std::int64_t extent_y) {
  require_arg(tiles_y <= 65535, step, dim_y, extent_y, "needs more than 65535 blocks along gridDim.y");
  return dim3(static_cast<unsigned>(tiles_x), static_cast<unsigned>(tiles_y));
}

// @step naive  (step 1: the section's comment)
// ============================================================================
// Step 1: naive -- one thread per element of C, threadIdx.x along M.
//
// The obvious mapping from "C[row][col] = sum_p A[row][p] * B[p][col]" to threads,
// with the classic mistake: consecutive threads of a warp get consecutive ROWS.
// In one load instruction the 32 lanes then read A[row..row+31][p], 32 different
// rows lda floats apart: 32 separate 32-byte sectors to deliver 128 useful bytes.
// B[p][col] is the same address for the whole warp (a broadcast), and the final
// stores to C are again 32 scattered sectors.
// Prediction (4096^3): L1 tag lookups, not DRAM, limit it: ~33 L1 wavefronts per
// warp-FFMA against 4 FFMA issue slots per clock => ~1% of peak, ~0.5 TFLOP/s,
// ~250 ms per call (about 1% of cuBLAS). 1024 threads/block, full occupancy.
// Measured (results: sgemm/solution/naive/4096x4096x4096): 0.5 TFLOP/s = 0.01 of cublas_sgemm.
// Registers: 32, no spills.
// ============================================================================
// @end
__global__ void sgemm_naive_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                   std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                   float beta, float* __restrict__ C, std::int64_t ldc) {
  // @step naive
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // along M
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;  // along N
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int p = 0; p < K; ++p) acc = fmaf(A[row * lda + p], B[p * ldb + col], acc);
  float* c = C + row * ldc + col;
  *c = blend(acc, alpha, beta, c);
  // @end
}

void launch_naive(const MatmulArgs& a) {
  // @step naive
  const dim3 block(32, 32);
  const dim3 grid = tile_grid(ceil_div(a.m, 32), ceil_div(a.n, 32), "matmul naive", "n", a.n);
  sgemm_naive_kernel<<<grid, block, 0, a.stream>>>(static_cast<int>(a.m), static_cast<int>(a.n),
                                                   static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b,
                                                   a.ldb, a.beta, a.c, a.ldc);
  COURSE_CHECK_LAUNCH("sgemm_naive_kernel");
  // @end
}

// @step coalesced  (step 2: the section's comment)
// ============================================================================
// Step 2: coalesced -- same work per thread, threadIdx.x along N.
//
// Swapping which index threadIdx.x walks is the whole change. A warp now shares
// one row: A[row][p] is a broadcast (one address), B[p][col..col+31] is 128
// contiguous bytes (one fully used line), and the stores to C are coalesced.
// Prediction (4096^3): 2 L1 wavefronts per warp-FFMA (one for A, one for B) caps
// it at 1/8 of FFMA peak (~8 TFLOP/s); latency and L1 misses leave ~4-6 TFLOP/s,
// ~25-35 ms, 8-12x the naive step. Bytes from L2 barely change: the L1 absorbed
// most of the naive step's re-reads -- the win is in L1 transactions.
// Measured (results: sgemm/solution/coalesced/4096x4096x4096): 6.4 TFLOP/s = 0.13 of cublas_sgemm.
// Registers: 32.
// ============================================================================
// @end
__global__ void sgemm_coalesced_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                       std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                       float beta, float* __restrict__ C, std::int64_t ldc) {
  // @step coalesced
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // along N
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;  // along M
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int p = 0; p < K; ++p) acc = fmaf(A[row * lda + p], B[p * ldb + col], acc);
  float* c = C + row * ldc + col;
  *c = blend(acc, alpha, beta, c);
  // @end
}

void launch_coalesced(const MatmulArgs& a) {
  // @step coalesced
  const dim3 block(32, 32);
  const dim3 grid = tile_grid(ceil_div(a.n, 32), ceil_div(a.m, 32), "matmul coalesced", "m", a.m);
  sgemm_coalesced_kernel<<<grid, block, 0, a.stream>>>(static_cast<int>(a.m), static_cast<int>(a.n),
                                                       static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b,
                                                       a.ldb, a.beta, a.c, a.ldc);
  COURSE_CHECK_LAUNCH("sgemm_coalesced_kernel");
  // @end
}

// @step smem_tiled  (step 3: the section's comment)
// ============================================================================
// Step 3: smem_tiled -- 32x32 tiles of A and B staged in shared memory.
//
// Each block (32x32 threads, one per output) walks K in steps of 32: all threads
// load one element of the A tile and one of the B tile (coalesced), barrier,
// then each does 32 FMAs from shared memory, barrier. Every global element is
// fetched once per block instead of once per thread: global/L2 traffic drops 32x,
// to 2*4*M*N*K/32 = 17 GB at 4096^3 (8 FLOP per byte), which L2 serves easily.
// Shared memory is now the bottleneck: As[ty][p] is a broadcast and Bs[p][tx] is
// conflict-free, but that is still ~2 shared loads per FFMA.
// Prediction (4096^3): ~1.5x the coalesced step, ~7-9 TFLOP/s (~15% of cuBLAS).
// 8 KB shared memory per block; 2 blocks of 1024 threads per SM (full occupancy).
// Zero-filled tiles past M, N, K keep the inner loop free of bounds checks.
// Measured (results: sgemm/solution/smem_tiled/4096x4096x4096): 8.5 TFLOP/s = 0.17 of cublas_sgemm.
// Registers: 31, 8 KB smem.
// ============================================================================
// @end
constexpr int kSmemTile = 32;

__global__ void sgemm_smem_tiled_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                        std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                        float beta, float* __restrict__ C, std::int64_t ldc) {
  __shared__ float As[kSmemTile][kSmemTile];
  __shared__ float Bs[kSmemTile][kSmemTile];
  // @step smem_tiled
  const int tx = threadIdx.x;  // column in the tile (along N)
  const int ty = threadIdx.y;  // row in the tile (along M)
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.y) * kSmemTile + ty;
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kSmemTile + tx;

  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kSmemTile) {
    // Thread (ty, tx) loads A[row][k0+tx] and B[k0+ty][col]; zeros outside the matrices.
    As[ty][tx] = (row < M && k0 + tx < K) ? A[row * lda + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[static_cast<std::int64_t>(k0 + ty) * ldb + col] : 0.0f;
    __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
    for (int p = 0; p < kSmemTile; ++p) acc = fmaf(As[ty][p], Bs[p][tx], acc);
    __syncthreads();  // everyone is done reading before the next iteration overwrites them
  }
  if (row < M && col < N) {
    float* c = C + row * ldc + col;
    *c = blend(acc, alpha, beta, c);
  }
  // @end
}

void launch_smem_tiled(const MatmulArgs& a) {
  // @step smem_tiled
  const dim3 block(kSmemTile, kSmemTile);
  const dim3 grid =
      tile_grid(ceil_div(a.n, kSmemTile), ceil_div(a.m, kSmemTile), "matmul smem_tiled", "m", a.m);
  sgemm_smem_tiled_kernel<<<grid, block, 0, a.stream>>>(static_cast<int>(a.m), static_cast<int>(a.n),
                                                        static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b,
                                                        a.ldb, a.beta, a.c, a.ldc);
  COURSE_CHECK_LAUNCH("sgemm_smem_tiled_kernel");
  // @end
}

// @step register_1d  (step 4: the section's comment)
// ============================================================================
// Step 4: register_1d -- each thread computes TM = 8 outputs of one column.
//
// Block tile 64x64, K step BK = 8, 512 threads. Per k, a thread reads ONE value
// of B from shared memory into a register and reuses it for its 8 rows; the A
// values are warp-wide broadcasts (a warp shares its 8 rows) that the compiler
// fetches as float4 along p. Shared loads per FFMA fall from ~2 to ~1.1, and
// global traffic halves again (64-wide tiles: 2*4*M*N*K/64 = 8.6 GB at 4096^3).
// Prediction (4096^3): ~2x smem_tiled, ~15 TFLOP/s (~30% of cuBLAS), ~9 ms.
// Occupancy: 512 threads, 4 KB shared memory; registers permitting 2-4 blocks/SM.
// Measured (results: sgemm/solution/register_1d/4096x4096x4096): 15.6 TFLOP/s = 0.31 of cublas_sgemm.
// Registers: 51 (so 2 blocks, 32 warps per SM), 4 KB smem.
// ============================================================================
// @end
template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__(BM * BN / TM)
    sgemm_register_1d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                             std::int64_t lda, const float* __restrict__ B, std::int64_t ldb, float beta,
                             float* __restrict__ C, std::int64_t ldc) {
  // @step register_1d  (the solution's thread count check)
  constexpr int kThreads = BM * BN / TM;
  static_assert(BM * BK == kThreads && BK * BN == kThreads, "one A and one B element per thread per tile");
  // @end
  __shared__ float As[BM * BK];  // [BM][BK]
  __shared__ float Bs[BK * BN];  // [BK][BN]

  // @step register_1d
  const int tid = threadIdx.x;
  const int thread_col = tid % BN;  // this thread's output column in the tile
  const int thread_row = tid / BN;  // this thread's group of TM rows
  const int a_row = tid / BK, a_col = tid % BK;  // element of the A tile it loads
  const int b_row = tid / BN, b_col = tid % BN;  // element of the B tile it loads
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * BN;

  float acc[TM] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    const std::int64_t ar = row0 + a_row;
    const std::int64_t bc = col0 + b_col;
    As[a_row * BK + a_col] = (ar < M && k0 + a_col < K) ? A[ar * lda + k0 + a_col] : 0.0f;
    Bs[b_row * BN + b_col] = (k0 + b_row < K && bc < N) ? B[static_cast<std::int64_t>(k0 + b_row) * ldb + bc] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int p = 0; p < BK; ++p) {
      const float b = Bs[p * BN + thread_col];  // one register, reused TM times
#pragma unroll
      for (int i = 0; i < TM; ++i) acc[i] = fmaf(As[(thread_row * TM + i) * BK + p], b, acc[i]);
    }
    __syncthreads();
  }
  const std::int64_t col = col0 + thread_col;
  if (col >= N) return;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const std::int64_t row = row0 + thread_row * TM + i;
    if (row < M) {
      float* c = C + row * ldc + col;
      *c = blend(acc[i], alpha, beta, c);
    }
  }
  // @end
}

void launch_register_1d(const MatmulArgs& a) {
  constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
  // @step register_1d
  const dim3 grid = tile_grid(ceil_div(a.n, BN), ceil_div(a.m, BM), "matmul register_1d", "m", a.m);
  sgemm_register_1d_kernel<BM, BN, BK, TM><<<grid, BM * BN / TM, 0, a.stream>>>(
      static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b, a.ldb,
      a.beta, a.c, a.ldc);
  COURSE_CHECK_LAUNCH("sgemm_register_1d_kernel");
  // @end
}

// @step register_2d  (step 5: the section's comment)
// ============================================================================
// Step 5: register_2d -- each thread computes a TM x TN = 8x8 block of outputs.
//
// Block tile 128x128, BK = 8, 256 threads. Per k, a thread loads 8 A values and
// 8 B values into registers and does their 64-term outer product: 16 shared loads
// for 64 FFMAs (0.25 per FFMA, down from ~1.1), and each A/B element fetched from
// global memory serves 128 outputs (4.3 GB at 4096^3, 32 FLOP per byte).
// Each thread loads 4 elements of each tile (scalar, coalesced along rows).
// Left for the next step: A is read with stride BK (scalar loads, 2-way bank
// conflicts between the two thread rows of a warp) and global loads are 4 bytes.
// Prediction (4096^3): ~2x register_1d, ~30 TFLOP/s (~60% of cuBLAS), ~4.5 ms.
// Occupancy: 64 accumulators push registers to ~100-128 per thread: 2 blocks
// (16 warps) per SM, 8 KB shared memory per block.
// Measured (results: sgemm/solution/register_2d/4096x4096x4096): 28.1 TFLOP/s = 0.55 of cublas_sgemm;
// at 1024^3 only 64 blocks of 128x128 for 132 SMs (see warp_tiled):
// Measured (results: sgemm/solution/register_2d/1024x1024x1024): 9.5 TFLOP/s.
// Registers: 126, no spills.
// ============================================================================
// @end
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(BM * BN / (TM * TN))
    sgemm_register_2d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                             std::int64_t lda, const float* __restrict__ B, std::int64_t ldb, float beta,
                             float* __restrict__ C, std::int64_t ldc) {
  // @step register_2d  (the solution's load strides)
  constexpr int kThreads = BM * BN / (TM * TN);
  static_assert(kThreads % BK == 0 && kThreads % BN == 0, "tile loads must divide evenly");
  constexpr int kARowStride = kThreads / BK;  // rows of the A tile loaded per pass
  constexpr int kBRowStride = kThreads / BN;  // rows of the B tile loaded per pass
  // @end
  __shared__ float As[BM * BK];  // [BM][BK]
  __shared__ float Bs[BK * BN];  // [BK][BN]

  // @step register_2d
  const int tid = threadIdx.x;
  const int thread_col = tid % (BN / TN);
  const int thread_row = tid / (BN / TN);
  const int a_row = tid / BK, a_col = tid % BK;
  const int b_row = tid / BN, b_col = tid % BN;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * BN;

  float acc[TM][TN] = {};
  float reg_m[TM], reg_n[TN];
  for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int r = 0; r < BM; r += kARowStride) {
      const std::int64_t gr = row0 + a_row + r;
      As[(a_row + r) * BK + a_col] = (gr < M && k0 + a_col < K) ? A[gr * lda + k0 + a_col] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < BK; r += kBRowStride) {
      const int gk = k0 + b_row + r;
      const std::int64_t gc = col0 + b_col;
      Bs[(b_row + r) * BN + b_col] = (gk < K && gc < N) ? B[static_cast<std::int64_t>(gk) * ldb + gc] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < BK; ++p) {
#pragma unroll
      for (int i = 0; i < TM; ++i) reg_m[i] = As[(thread_row * TM + i) * BK + p];
#pragma unroll
      for (int j = 0; j < TN; ++j) reg_n[j] = Bs[p * BN + thread_col * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(reg_m[i], reg_n[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const std::int64_t row = row0 + thread_row * TM + i;
    if (row >= M) break;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const std::int64_t col = col0 + thread_col * TN + j;
      if (col < N) {
        float* c = C + row * ldc + col;
        *c = blend(acc[i][j], alpha, beta, c);
      }
    }
  }
  // @end
}

void launch_register_2d(const MatmulArgs& a) {
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  // @step register_2d
  const dim3 grid = tile_grid(ceil_div(a.n, BN), ceil_div(a.m, BM), "matmul register_2d", "m", a.m);
  sgemm_register_2d_kernel<BM, BN, BK, TM, TN><<<grid, BM * BN / (TM * TN), 0, a.stream>>>(
      static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b, a.ldb,
      a.beta, a.c, a.ldc);
  COURSE_CHECK_LAUNCH("sgemm_register_2d_kernel");
  // @end
}

// ----------------------------------------------------------------------------
// float4 helpers for vectorized and warp_tiled. kVec selects the 16-byte path; it is true only
// when the host checked that A, B, C are 16-byte aligned and lda, ldb, ldc are
// multiples of 4 (m01::matmul_float4_ok), so every row starts 16-byte aligned and
// a vector at a column that is a multiple of 4 is aligned too. Near the right edge
// (fewer than 4 columns left) and on the scalar instantiation, elements are
// loaded one by one with bounds checks.
// ----------------------------------------------------------------------------

// @step vectorized  (step 6: load4)
/// Elements row[col .. col+3] of a row with `ncols` valid columns; zeros where out of
/// range, all zeros when !row_ok.
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* row, int col, int ncols, bool row_ok) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (!row_ok) return v;
  if (kVec && col + 3 < ncols) return *reinterpret_cast<const float4*>(row + col);
  if (col + 0 < ncols) v.x = row[col + 0];
  if (col + 1 < ncols) v.y = row[col + 1];
  if (col + 2 < ncols) v.z = row[col + 2];
  if (col + 3 < ncols) v.w = row[col + 3];
  return v;
}

// @end
/// row[col .. col+3] = alpha * acc + beta * row[...], for the columns < ncols.
template <bool kVec>
__device__ __forceinline__ void store4(float* row, int col, int ncols, float4 acc, float alpha, float beta) {
  if (kVec && col + 3 < ncols) {
    float4* p = reinterpret_cast<float4*>(row + col);
    float4 out = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
    if (beta != 0.0f) {
      const float4 old = *p;
      out.x = fmaf(beta, old.x, out.x);
      out.y = fmaf(beta, old.y, out.y);
      out.z = fmaf(beta, old.z, out.z);
      out.w = fmaf(beta, old.w, out.w);
    }
    *p = out;
    return;
  }
  const float v[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (col + q < ncols) row[col + q] = blend(v[q], alpha, beta, row + col + q);
}

// @step vectorized  (step 6: the section's comment)
// ============================================================================
// Step 6: vectorized -- float4 global loads, A transposed in shared memory,
// float4 shared loads.
//
// Same 128x128x8 tiles and 8x8 outputs per thread as register_2d. Changes:
//  * global: each thread loads its A and B share as ONE float4 each (LDG.128)
//    instead of 4 scalar loads: 4x fewer load instructions and address updates.
//  * A is stored TRANSPOSED, As[k][m] (padded by 4 floats per row so the
//    transposing stores do not conflict), so a thread's 8 A values for one k are
//    contiguous: 2 LDS.128 instead of 8 LDS.32, and no bank conflicts.
//  * B fragments are read as 2 LDS.128 too; C is written with float4 stores.
// Per k and warp: 4 LDS.128 (~10 wavefronts: B's 16 distinct float4s 32 bytes
// apart still conflict 2-way; warp_tiled fixes that) for 64 FFMAs.
// Prediction (4096^3): ~1.2-1.3x register_2d, ~35-40 TFLOP/s (~70-80% of cuBLAS).
// Occupancy as register_2d: 2 blocks (16 warps) per SM, 8.2 KB shared memory.
// Measured (results: sgemm/solution/vectorized/4096x4096x4096): 34.6 TFLOP/s = 0.68 of cublas_sgemm.
// Registers: 110 (float4 path) / 117 (scalar path), no spills, 8.3 KB smem.
// ============================================================================
// @end
// @step vectorized  (step 6: the kernel)
template <int BM, int BN, int BK, int TM, int TN, bool kVec>
__global__ void __launch_bounds__(BM * BN / (TM * TN))
    sgemm_vectorized_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                            std::int64_t lda, const float* __restrict__ B, std::int64_t ldb, float beta,
                            float* __restrict__ C, std::int64_t ldc) {
  constexpr int kThreads = BM * BN / (TM * TN);
  constexpr int kAPitch = BM + 4;  // padded row of the transposed A tile (keeps 16-byte alignment)
  static_assert(BM * BK / 4 == kThreads && BK * BN / 4 == kThreads, "one float4 of A and of B per thread");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "fragments are read as float4");
  __shared__ __align__(16) float As[BK * kAPitch];  // [BK][BM + 4]: A transposed
  __shared__ __align__(16) float Bs[BK * BN];       // [BK][BN]

  const int tid = threadIdx.x;
  const int thread_col = tid % (BN / TN);
  const int thread_row = tid / (BN / TN);
  const int a_row = tid / (BK / 4), a_k = (tid % (BK / 4)) * 4;  // this thread's float4 of the A tile
  const int b_row = tid / (BN / 4), b_col = (tid % (BN / 4)) * 4;  // and of the B tile
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * BN;
  const bool a_row_ok = row0 + a_row < M;
  const float* a_src = A + (a_row_ok ? row0 + a_row : 0) * lda;  // row of A this thread loads from
  const bool b_col_ok = col0 + b_col < N;
  const int b_cols = N - static_cast<int>(col0);  // valid columns from col0 on

  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    const float4 av = load4<kVec>(a_src, k0 + a_k, K, a_row_ok);
    const float4 bv = load4<kVec>(B + static_cast<std::int64_t>(k0 + b_row) * ldb + col0, b_col, b_cols,
                                  b_col_ok && k0 + b_row < K);
    As[(a_k + 0) * kAPitch + a_row] = av.x;  // transpose while storing
    As[(a_k + 1) * kAPitch + a_row] = av.y;
    As[(a_k + 2) * kAPitch + a_row] = av.z;
    As[(a_k + 3) * kAPitch + a_row] = av.w;
    *reinterpret_cast<float4*>(&Bs[b_row * BN + b_col]) = bv;
    __syncthreads();
#pragma unroll
    for (int p = 0; p < BK; ++p) {
      float reg_m[TM], reg_n[TN];
#pragma unroll
      for (int i = 0; i < TM; i += 4)
        *reinterpret_cast<float4*>(&reg_m[i]) =
            *reinterpret_cast<const float4*>(&As[p * kAPitch + thread_row * TM + i]);
#pragma unroll
      for (int j = 0; j < TN; j += 4)
        *reinterpret_cast<float4*>(&reg_n[j]) =
            *reinterpret_cast<const float4*>(&Bs[p * BN + thread_col * TN + j]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(reg_m[i], reg_n[j], acc[i][j]);
    }
    __syncthreads();
  }
  const int c_cols = N - static_cast<int>(col0);
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const std::int64_t row = row0 + thread_row * TM + i;
    if (row >= M) break;
    float* c_row = C + row * ldc + col0;
#pragma unroll
    for (int j = 0; j < TN; j += 4)
      store4<kVec>(c_row, thread_col * TN + j, c_cols,
                   make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]), alpha, beta);
  }
}

// @end
void launch_vectorized(const MatmulArgs& a) {
  // @step vectorized  (step 6: the launch)
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  const dim3 grid = tile_grid(ceil_div(a.n, BN), ceil_div(a.m, BM), "matmul vectorized", "m", a.m);
  const int threads = BM * BN / (TM * TN);
  const auto kernel = m01::matmul_float4_ok(a) ? sgemm_vectorized_kernel<BM, BN, BK, TM, TN, true>
                                               : sgemm_vectorized_kernel<BM, BN, BK, TM, TN, false>;
  kernel<<<grid, threads, 0, a.stream>>>(static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k),
                                         a.alpha, a.a, a.lda, a.b, a.ldb, a.beta, a.c, a.ldc);
  COURSE_CHECK_LAUNCH("sgemm_vectorized_kernel");
  // @end
}

// cp.async for warp_tiled (sm_80+), from common/include/course/cuda/mma_ptx.cuh. It copies
// global -> shared memory without passing through registers; the copies of a "group"
// are waited for with cp.async.wait_group. `src_bytes` < the copy size zero-fills the
// rest of the destination, which is how the edges of the matrices become zeros; with
// src_bytes == 0 nothing is read (we still pass a valid address). The source goes in as
// a generic address (SrcAddress::generic), the form this step was measured with.
using ::course::cuda::cp_async_commit;
using ::course::cuda::cp_async_wait;
constexpr auto kGenericSrc = ::course::cuda::SrcAddress::generic;

/// cp.async of one float (4 bytes, .ca) or one float4 (16 bytes, .cg) into shared memory.
__device__ __forceinline__ void cp_async_4(float* smem_dst, const float* gmem_src, int src_bytes) {
  ::course::cuda::cp_async_4_zfill<0, kGenericSrc>(::course::cuda::smem_u32(smem_dst), gmem_src, src_bytes);
}
__device__ __forceinline__ void cp_async_16(float* smem_dst, const float* gmem_src, int src_bytes) {
  ::course::cuda::cp_async_16_zfill<0, kGenericSrc>(::course::cuda::smem_u32(smem_dst), gmem_src, src_bytes);
}

// @step warp_tiled  (step 7: the section's comment)
// ============================================================================
// Step 7: warp_tiled -- warp tiles with conflict-free fragments, fed by a
// cp.async pipeline (double-buffered) with 32-deep K tiles.
//
// Still 8x8 outputs per thread, now organised in three levels (4096^3 config):
//   block tile 128 x 128  = 2 x 4 warps, each owning a WM x WN = 64 x 32 warp tile;
//   warp tile   64 x 32   = 2 x 2 sub-tiles of 32 x 16;
//   sub-tile    32 x 16   = 8 lanes (along M) x 4 lanes (along N), 4 x 4 outputs each.
// So a thread's outputs are 4 rows at lane_m*4 and 4 more 32 rows further, by 4
// columns at lane_n*4 and 4 more 16 columns further.
//
// What changes from vectorized:
//  * Fragments: for one k, the 8 distinct A float4s a warp reads are 128
//    contiguous bytes, the 4 distinct B float4s 64: each LDS.128 is a single
//    conflict-free wavefront. 4 wavefronts per 64 FFMAs (vectorized: ~10).
//  * Loads: cp.async copies the tiles straight into shared memory -- no registers
//    hold data in flight (staging vectorized's float4s in registers would push this
//    kernel past 128 registers and spill) -- STAGES - 1 tiles ahead of the math.
//    A is copied element by element (4-byte cp.async) so it lands transposed;
//    with the row pitch BM + 4, the 4 rows x 8 k a warp copies hit 32 banks.
//    B is copied as 16-byte vectors. Tiles and copies past the matrix edges are
//    zero-filled by the copy itself (cp.async's src-size operand).
//  * BK = 32: one barrier per 32 k instead of per 8, and the per-tile bookkeeping
//    (copy addresses, predicates: hoisted out of all but a final partial tile)
//    spread over 2048 FFMAs per thread.
// The inner loop is 64 FFMA + 4 LDS.128 per k; the whole K loop ~90% FFMA by
// instruction count, so the FFMA issue rate is the limit, as for cuBLAS.
// Prediction (4096^3): ~44-46 TFLOP/s, ~88-92% of cuBLAS SGEMM (~50), ~3 ms.
// Occupancy: <= 128 registers (__launch_bounds__(256, 2)), 66.5 KB of dynamic
// shared memory per block: 2 blocks = 16 warps per SM.
// When 128x128 tiles would leave SMs idle (1024^3: 64 tiles for 132 SMs), the
// launch switches to 64x128 tiles (BK = 16, 4 stages, 4 blocks of 4 warps per SM).
// Measured (results: sgemm/solution/warp_tiled/4096x4096x4096): 45.8 TFLOP/s = 0.90 of cublas_sgemm;
// Measured (results: sgemm/solution/warp_tiled/1024x1024x1024): 29.7 TFLOP/s = 0.98 of cublas_sgemm (64x128 tiles);
// Measured (results: sgemm/solution/warp_tiled/4096x4096x1024): 44.9 TFLOP/s = 0.91 of cublas_sgemm.
// Registers: 128 (128x128 tiles, 125 on the scalar path) and 128 (64x128), no spills, on sm_90.
// ============================================================================
// @end
template <int BM, int BN, int BK, int WM, int WN, int STAGES>
struct WarpTiledConfig {
  static constexpr int kWarpsM = BM / WM, kWarpsN = BN / WN;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kLanesM = WM / 8, kLanesN = WN / 8;  // lanes along M and N inside a warp
  static constexpr int kAPitch = BM + 4;                    // padded row of the transposed A tile
  static_assert(kLanesM * kLanesN == 32, "a warp tile must hold exactly 32 lanes of 8x8 outputs");
  static_assert(BM % WM == 0 && BN % WN == 0 && BK % 8 == 0 && (BM * BK) % kThreads == 0 &&
                    (BK * BN) % (4 * kThreads) == 0 && kThreads % BN == 0,
                "tiles must divide evenly among the threads");
  static_assert(STAGES >= 2, "a pipeline needs at least two stages");
  /// Blocks per SM we ask the compiler to fit: 16 warps, which caps registers at 128.
  static constexpr int kMinBlocks = 512 / kThreads;
  static constexpr int kAStageFloats = BK * kAPitch, kBStageFloats = BK * BN;
  /// Dynamic shared memory of one block: STAGES tiles of A (transposed, padded) and B.
  static constexpr int kSmemBytes = STAGES * (kAStageFloats + kBStageFloats) * 4;
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool kVec>
__global__ void __launch_bounds__(WarpTiledConfig<BM, BN, BK, WM, WN, STAGES>::kThreads,
                                  WarpTiledConfig<BM, BN, BK, WM, WN, STAGES>::kMinBlocks)
    sgemm_warp_tiled_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                            std::int64_t lda, const float* __restrict__ B, std::int64_t ldb, float beta,
                            float* __restrict__ C, std::int64_t ldc) {
  using Cfg = WarpTiledConfig<BM, BN, BK, WM, WN, STAGES>;
  constexpr int kThreads = Cfg::kThreads, kAPitch = Cfg::kAPitch;
  // More than 48 KB, so dynamic: As[stage][k][m] (A transposed), then Bs[stage][k][n].
  extern __shared__ __align__(16) float smem[];
  auto As = reinterpret_cast<float(*)[BK][kAPitch]>(smem);
  auto Bs = reinterpret_cast<float(*)[BK][BN]>(smem + STAGES * Cfg::kAStageFloats);

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;
  // @step warp_tiled  (step 7a: m_frag, n_frag)
  const int lane_m = lane / Cfg::kLanesN, lane_n = lane % Cfg::kLanesN;
  const int m_frag = warp_m * WM + lane_m * 4;  // first row of this thread's outputs in the tile
  const int n_frag = warp_n * WN + lane_n * 4;  // first column
  // @end

  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * BM;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * BN;
  const int a_rows = M - static_cast<int>(row0);  // valid rows of A and C from row0 on
  const int b_cols = N - static_cast<int>(col0);  // valid columns of B and C from col0 on

  // A: this thread copies elements (a_row + j * kARowStep, a_k + g * 8) of every A tile,
  // j < kARows, g < kAKGroups: a warp covers 4 rows x 8 consecutive k per copy, 4 full
  // 32-byte sectors, landing in 32 distinct banks thanks to the pitch BM + 4.
  constexpr int kAKGroups = BK / 8, kARowStep = kThreads / 8, kARows = BM / kARowStep;
  const int a_row = tid / 8, a_k = tid % 8;
  // B, float4 path: float4s (b_row + i * kBVecRowStep, b_col .. b_col+3), i < kBVecPer.
  constexpr int kBVecPer = BK * BN / 4 / kThreads, kBVecRowStep = kThreads / (BN / 4);
  const int b_row = tid / (BN / 4), b_col = (tid % (BN / 4)) * 4;
  // B, scalar path: elements (bs_row + i * kBScalarRowStep, bs_col), i < kBScalarPer.
  constexpr int kBScalarPer = BK * BN / kThreads, kBScalarRowStep = kThreads / BN;
  const int bs_row = tid / BN, bs_col = tid % BN;

  // Source pointers, advanced by one tile per issue, and the bytes each copy reads:
  // 0 outside the matrix, so the copy only zero-fills (and reads nothing: the address
  // of a zero-byte copy is never dereferenced, rows past M are clamped anyway).
  const float* a_src[kARows];
  int a_bytes[kARows];
#pragma unroll
  for (int j = 0; j < kARows; ++j) {
    const int r = a_row + j * kARowStep;
    a_bytes[j] = r < a_rows ? 4 : 0;
    a_src[j] = A + (row0 + (r < a_rows ? r : 0)) * lda + a_k;
  }
  // Each float4 of B is whole (16 bytes), absent (0) or, in the last block column when
  // N % 4 != 0, partial: then it is copied as 4-byte pieces (a 16-byte copy with a
  // short src-size would still be treated as a 16-byte read past the row's end).
  const int b_vec_cols = b_cols - b_col;  // valid columns from b_col on (may be <= 0)
  const bool b_partial = kVec && b_vec_cols > 0 && b_vec_cols < 4;
  const int b_bytes = kVec ? (b_vec_cols >= 4 ? 16 : 0) : (bs_col < b_cols ? 4 : 0);
  const float* b_src = B + static_cast<std::int64_t>(kVec ? b_row : bs_row) * ldb + col0 + (kVec ? b_col : bs_col);
  const std::int64_t b_tile_step = static_cast<std::int64_t>(BK) * ldb;

  // Issue the copies of the next K-tile (first k = k0) into pipeline stage `stage`.
  // check_k is false for the full tiles, true only for a final partial one.
  auto issue_tile = [&](int k0, int stage, bool check_k) {
#pragma unroll
    for (int j = 0; j < kARows; ++j)
#pragma unroll
      for (int g = 0; g < kAKGroups; ++g) {
        const int kk = a_k + g * 8;
        const int bytes = check_k && k0 + kk >= K ? 0 : a_bytes[j];
        cp_async_4(&As[stage][kk][a_row + j * kARowStep], a_src[j] + g * 8, bytes);
      }
    if constexpr (kVec) {
#pragma unroll
      for (int i = 0; i < kBVecPer; ++i) {
        const int r = b_row + i * kBVecRowStep;
        const bool k_ok = !check_k || k0 + r < K;
        const float* src = b_src + static_cast<std::int64_t>(i * kBVecRowStep) * ldb;
        if (!b_partial) {
          cp_async_16(&Bs[stage][r][b_col], src, k_ok ? b_bytes : 0);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) cp_async_4(&Bs[stage][r][b_col + q], src + q, k_ok && q < b_vec_cols ? 4 : 0);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kBScalarPer; ++i) {
        const int r = bs_row + i * kBScalarRowStep;
        const int bytes = check_k && k0 + r >= K ? 0 : b_bytes;
        cp_async_4(&Bs[stage][r][bs_col], b_src + static_cast<std::int64_t>(i * kBScalarRowStep) * ldb, bytes);
      }
    }
#pragma unroll
    for (int j = 0; j < kARows; ++j) a_src[j] += BK;
    b_src += b_tile_step;
  };
  const int full_tiles = K / BK;  // tiles with no k past K: no per-copy k check
  auto issue = [&](int tile, int stage) {
    if (tile < full_tiles)
      issue_tile(tile * BK, stage, false);
    else
      issue_tile(tile * BK, stage, true);
  };

  float acc[8][8] = {};  // rows: 2 sub-tiles x 4; columns: 2 sub-tiles x 4
  const int num_tiles = (K + BK - 1) / BK;
  // Prologue: tiles 0 .. STAGES-2 in flight. Every iteration commits exactly one
  // group (possibly empty), so "group t is complete" always means "tile t landed".
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < num_tiles) issue(s, s);
    cp_async_commit();
  }
  int stage = 0;  // stage holding tile t
  for (int t = 0; t < num_tiles; ++t) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of tile t have landed ...
    __syncthreads();              // ... and everyone's; and everyone finished tile t-1
    // Refill the stage tile t-1 used (free now) with tile t + STAGES - 1.
    const int next = t + STAGES - 1;
    if (next < num_tiles) issue(next, stage == 0 ? STAGES - 1 : stage - 1);
    cp_async_commit();
    // @step warp_tiled  (step 7b: the fragment loop)
#pragma unroll
    for (int p = 0; p < BK; ++p) {
      float am[8], bn[8];
      *reinterpret_cast<float4*>(&am[0]) = *reinterpret_cast<const float4*>(&As[stage][p][m_frag]);
      *reinterpret_cast<float4*>(&am[4]) = *reinterpret_cast<const float4*>(&As[stage][p][m_frag + WM / 2]);
      *reinterpret_cast<float4*>(&bn[0]) = *reinterpret_cast<const float4*>(&Bs[stage][p][n_frag]);
      *reinterpret_cast<float4*>(&bn[4]) = *reinterpret_cast<const float4*>(&Bs[stage][p][n_frag + WN / 2]);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(am[i], bn[j], acc[i][j]);
    }
    // @end
    stage = stage == STAGES - 1 ? 0 : stage + 1;
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = m_frag + (i / 4) * (WM / 2) + (i % 4);
    if (r >= a_rows) continue;
    float* c_row = C + (row0 + r) * ldc + col0;
#pragma unroll
    for (int s = 0; s < 2; ++s)
      store4<kVec>(c_row, n_frag + s * (WN / 2), b_cols,
                   make_float4(acc[i][4 * s], acc[i][4 * s + 1], acc[i][4 * s + 2], acc[i][4 * s + 3]), alpha,
                   beta);
  }
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
void launch_warp_tiled_config(const MatmulArgs& a) {
  using Cfg = WarpTiledConfig<BM, BN, BK, WM, WN, STAGES>;
  const dim3 grid = tile_grid(ceil_div(a.n, BN), ceil_div(a.m, BM), "matmul warp_tiled", "m", a.m);
  // (The float4 path really needs only B and C aligned -- A is copied element by
  // element -- but one predicate for both vectorized steps keeps the rule simple.)
  const auto launch = [&](auto vec) {
    constexpr auto kernel = sgemm_warp_tiled_kernel<BM, BN, BK, WM, WN, STAGES, decltype(vec)::value>;
    // More than 48 KB of dynamic shared memory: opted in once per kernel and device. The
    // driver's carveout leaves a larger L1 for A's 4-byte cp.async copies (.ca, through L1).
    ::course::cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes, ::course::cuda::Carveout::driver_default);
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, a.stream>>>(static_cast<int>(a.m), static_cast<int>(a.n),
                                                               static_cast<int>(a.k), a.alpha, a.a, a.lda, a.b,
                                                               a.ldb, a.beta, a.c, a.ldc);
  };
  if (m01::matmul_float4_ok(a)) launch(std::true_type{});
  else launch(std::false_type{});
  COURSE_CHECK_LAUNCH("sgemm_warp_tiled_kernel");
}

// @step warp_tiled  (step 7c: the stub's "written" flag)
// @end
void launch_warp_tiled(const MatmulArgs& a) {
  // @step warp_tiled  (step 7c)
  // @end
  // Wave quantization: 128x128 tiles of a 1024x1024 C are only 64 blocks for 132
  // SMs -- half the GPU idles. When the big tiles cannot give every SM a block, use
  // 64x128 tiles (4 warps, 4 blocks per SM): twice the blocks, same per-thread work.
  const std::int64_t big_tiles = ceil_div(a.m, 128) * ceil_div(a.n, 128);
  if (big_tiles >= device_properties().multiProcessorCount)
    launch_warp_tiled_config<128, 128, 32, 64, 32, 2>(a);  // 66.5 KB shared memory per block
  else
    launch_warp_tiled_config<64, 128, 16, 32, 64, 4>(a);   // 50 KB shared memory per block
}

}  // namespace

void matmul(MatmulStep step, const MatmulArgs& args) {
  m01::validate_matmul_args(args, "matmul");
  switch (step) {
    case MatmulStep::naive: launch_naive(args); return;
    case MatmulStep::coalesced: launch_coalesced(args); return;
    case MatmulStep::smem_tiled: launch_smem_tiled(args); return;
    case MatmulStep::register_1d: launch_register_1d(args); return;
    case MatmulStep::register_2d: launch_register_2d(args); return;
    case MatmulStep::vectorized: launch_vectorized(args); return;
    case MatmulStep::warp_tiled: launch_warp_tiled(args); return;
  }
  require_arg(false, "matmul", "step", static_cast<int>(step), "is not a MatmulStep");
}

}  // namespace course::solution
