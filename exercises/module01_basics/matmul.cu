/// @file matmul.cu
/// @brief YOUR ladder for fp32 SGEMM, C = alpha * A * B + beta * C (module 1).
///
/// Read module01_basics/README.md, "Matrix multiply", then fill in one step at a time.
/// Run its tests with:   ctest --preset default -L exercise -R MatmulTest
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint matmul/<step>`
/// (all of them: exercises/module01_basics/hints/matmul.md).
/// Compare with the solution and cuBLAS:  ./build/module01_basics/m01_bench --benchmark_filter=sgemm
///
/// Conventions for every step (the tests check all of them):
///  * A is M x K, B is K x N, C is M x N, all row-major: element (r, c) of A is
///    A[r * lda + c]. lda, ldb, ldc may be larger than the row length (padding).
///  * Any M, N, K >= 1: guard every global load and store; never assume a multiple
///    of the tile size. Tiles that stick out of a matrix are filled with zeros.
///  * BLAS semantics: when beta == 0, C is NOT read (it may hold NaN). Use blend().
///  * Accumulate in float; the tests allow for rounding that grows like sqrt(K).

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/device.hpp"
#include "module01/matmul.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::exercise {
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
// ----------------------------------------------------------------------------
// Step 1: naive -- one thread per element of C, threadIdx.x along M.
//
// TODO(step 1): thread (threadIdx.x, threadIdx.y) of block (blockIdx.x, blockIdx.y)
//               computes C[row][col] with row along x (M) and col along y (N):
//               acc = sum over p of A[row][p] * B[p][col]; then C[row][col] = blend(...).
// Hints, one at a time: bash scripts/course.sh hint matmul/naive
// (Yes, x along M is the "wrong" choice: step 2 is about why. Write it this way first
//  and measure it.)
// ----------------------------------------------------------------------------
// @end
__global__ void sgemm_naive_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                   std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                   float beta, float* __restrict__ C, std::int64_t ldc) {
  // @step naive
  // TODO(step 1)
  // @end
}

void launch_naive(const MatmulArgs& a) {
  // @step naive
  // TODO(step 1): delete the throw; launch 32 x 32 threads per block and enough blocks to
  //               cover M along x and N along y (tile_grid(ceil_div(a.m, 32), ceil_div(a.n, 32),
  //               "matmul naive", "n", a.n)), on a.stream; then COURSE_CHECK_LAUNCH.
  throw NotImplemented("matmul step naive", __FILE__);
  // @end
}

// @step coalesced  (step 2: the section's comment)
// ----------------------------------------------------------------------------
// Step 2: coalesced -- same work per thread, threadIdx.x along N.
//
// TODO(step 2): the same kernel with the roles of x and y swapped, so the 32 lanes of
//               a warp compute 32 consecutive columns of one row.
// Hints, one at a time: bash scripts/course.sh hint matmul/coalesced
// ----------------------------------------------------------------------------
// @end
__global__ void sgemm_coalesced_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                       std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                       float beta, float* __restrict__ C, std::int64_t ldc) {
  // @step coalesced
  // TODO(step 2)
  // @end
}

void launch_coalesced(const MatmulArgs& a) {
  // @step coalesced
  // TODO(step 2): delete the throw and launch (32 x 32 threads per block).
  throw NotImplemented("matmul step coalesced", __FILE__);
  // @end
}

// @step smem_tiled  (step 3: the section's comment)
// ----------------------------------------------------------------------------
// Step 3: smem_tiled -- 32x32 tiles of A and B in shared memory.
//
// TODO(step 3): walk K in steps of 32. In each step every thread (ty, tx) loads ONE
//               element of the A tile (row, k0 + tx) and ONE of the B tile (k0 + ty, col)
//               into shared memory, the block waits, then each thread accumulates 32
//               products from shared memory, and the block waits again.
// Hints, one at a time: bash scripts/course.sh hint matmul/smem_tiled
// ----------------------------------------------------------------------------
// @end
constexpr int kSmemTile = 32;

__global__ void sgemm_smem_tiled_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                        std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                        float beta, float* __restrict__ C, std::int64_t ldc) {
  __shared__ float As[kSmemTile][kSmemTile];
  __shared__ float Bs[kSmemTile][kSmemTile];
  // @step smem_tiled
  // TODO(step 3)
  // @end
}

void launch_smem_tiled(const MatmulArgs& a) {
  // @step smem_tiled
  // TODO(step 3): delete the throw and launch: kSmemTile x kSmemTile threads, x along N.
  throw NotImplemented("matmul step smem_tiled", __FILE__);
  // @end
}

// @step register_1d  (step 4: the section's comment)
// ----------------------------------------------------------------------------
// Step 4: register_1d -- each thread computes TM = 8 outputs of one column.
//
// Block tile BM x BN = 64 x 64, BK = 8, so BM * BN / TM = 512 threads, and each
// thread loads exactly one element of the 64x8 A tile and one of the 8x64 B tile.
// TODO(step 4): thread_col = tid % BN, thread_row = tid / BN. For every k-tile: load
//               the tiles (zeros outside), barrier, then for p in 0..BK-1 read
//               b = Bs[p][thread_col] ONCE and do acc[i] += As[thread_row * TM + i][p] * b
//               for i in 0..TM-1; barrier. Finally store the TM outputs that are in range.
// Hints, one at a time: bash scripts/course.sh hint matmul/register_1d
// ----------------------------------------------------------------------------
// @end
template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__(BM * BN / TM)
    sgemm_register_1d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                             std::int64_t lda, const float* __restrict__ B, std::int64_t ldb, float beta,
                             float* __restrict__ C, std::int64_t ldc) {
  // @step register_1d  (the solution's thread count check)
  // @end
  __shared__ float As[BM * BK];  // [BM][BK]
  __shared__ float Bs[BK * BN];  // [BK][BN]

  // @step register_1d
  // TODO(step 4)
  // @end
}

void launch_register_1d(const MatmulArgs& a) {
  constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
  // @step register_1d
  // TODO(step 4): delete the throw and launch BM * BN / TM threads per block, one block
  //               per 64x64 tile of C (x along N, y along M).
  throw NotImplemented("matmul step register_1d", __FILE__);
  // @end
}

// @step register_2d  (step 5: the section's comment)
// ----------------------------------------------------------------------------
// Step 5: register_2d -- each thread computes a TM x TN = 8x8 block of outputs.
//
// Block tile 128 x 128, BK = 8, 256 threads; each thread loads 4 elements of each tile.
// TODO(step 5): per k-tile: load the tiles (4 elements each per thread), barrier; for
//               p in 0..BK-1 copy the thread's 8 values of column p of As into reg_m[8]
//               and its 8 values of row p of Bs into reg_n[8], then do the 8x8 outer
//               product acc[i][j] += reg_m[i] * reg_n[j]; barrier. Store 64 outputs.
// Hints, one at a time: bash scripts/course.sh hint matmul/register_2d
// ----------------------------------------------------------------------------
// @end
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(BM * BN / (TM * TN))
    sgemm_register_2d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                             std::int64_t lda, const float* __restrict__ B, std::int64_t ldb, float beta,
                             float* __restrict__ C, std::int64_t ldc) {
  // @step register_2d  (the solution's load strides)
  // @end
  __shared__ float As[BM * BK];  // [BM][BK]
  __shared__ float Bs[BK * BN];  // [BK][BN]

  // @step register_2d
  // TODO(step 5)
  // @end
}

void launch_register_2d(const MatmulArgs& a) {
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  // @step register_2d
  // TODO(step 5): delete the throw and launch BM * BN / (TM * TN) threads per block.
  throw NotImplemented("matmul step register_2d", __FILE__);
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
// TODO(step 6): your load4<kVec> goes here (step 6 below says what it does; store4 below
//               is given: it writes 4 columns of C, masked at the edge).

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
// ----------------------------------------------------------------------------
// Step 6: vectorized -- float4 loads, A transposed in shared memory.
//
// Same tiles as step 5. Three changes:
//  (a) each thread loads its share of the A tile and of the B tile as ONE float4 each;
//  (b) A is stored transposed, As[k][m] with a padded row of BM + 4 floats, so the 8
//      A values a thread needs for one k are contiguous;
//  (c) fragments are read from shared memory as float4, and C is written as float4.
// float4 accesses must be 16-byte aligned: the launch picks kVec = true only when
// m01::matmul_float4_ok(args); kVec = false must still work (scalar loads).
// TODO(step 6): write load4<kVec> (4 elements of a row, zeros out of range), then the
//               kernel, then the launch that picks the instantiation.
// Hints, one at a time: bash scripts/course.sh hint matmul/vectorized
// ----------------------------------------------------------------------------
// @end
// @step vectorized  (step 6: the kernel)
// @end
void launch_vectorized(const MatmulArgs& a) {
  // @step vectorized  (step 6: the launch)
  // TODO(step 6): write sgemm_vectorized_kernel<..., bool kVec> above, then launch it.
  throw NotImplemented("matmul step vectorized", __FILE__);
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
// ----------------------------------------------------------------------------
// Step 7: warp_tiled -- warp tiles with conflict-free fragments, fed by a cp.async
// pipeline (module01_basics/README.md, "Step 7").
//
// Still 8 x 8 outputs per thread, now organised in three levels (128x128 config):
//   block tile 128 x 128 = 2 x 4 warps, each owning a WM x WN = 64 x 32 warp tile;
//   warp tile   64 x 32  = 2 x 2 sub-tiles of 32 x 16;
//   sub-tile    32 x 16  = 8 lanes (along M) x 4 lanes (along N), 4 x 4 outputs each.
// Given below: the configuration, the cp.async copies of A (transposed, As[stage][k][m])
// and B (Bs[stage][k][n]) with zero-filled edges, the STAGES-deep pipeline, the store
// and the launch. The idea of the step is yours:
// TODO(step 7a): m_frag, n_frag -- the first row and column of this thread's outputs in
//                the block tile, from its warp (warp_m, warp_n) and its lane inside the
//                warp (Cfg::kLanesM x Cfg::kLanesN lanes, 4 x 4 outputs each).
// TODO(step 7b): the fragment loop: for every p of the stage, read this thread's 8 A
//                values and 8 B values (as float4: rows m_frag.., m_frag + WM/2..;
//                columns n_frag.., n_frag + WN/2..) and do the 8 x 8 outer product into
//                acc[i][j]. acc's row i is tile row m_frag + (i / 4) * (WM / 2) + i % 4,
//                its column j is n_frag + (j / 4) * (WN / 2) + j % 4 (the store's order).
// TODO(step 7c): set kWarpTiledWritten (above launch_warp_tiled) to true.
// Hints, one at a time: bash scripts/course.sh hint matmul/warp_tiled
// ----------------------------------------------------------------------------
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
  // TODO(step 7a): the first row and column of this thread's outputs in the block tile.
  int m_frag = 0, n_frag = 0;
  (void)warp_m, (void)warp_n, (void)lane;  // TODO(step 7a): delete once they are used
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
    // TODO(step 7b): the fragment loop over p = 0 .. BK-1 on As[stage][p][...] and
    //                Bs[stage][p][...], accumulating into acc.
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
// TODO(step 7c): set to true once steps 7a and 7b are written.
constexpr bool kWarpTiledWritten = false;

// @end
void launch_warp_tiled(const MatmulArgs& a) {
  // @step warp_tiled  (step 7c)
  if (!kWarpTiledWritten) throw NotImplemented("matmul step warp_tiled", __FILE__);
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

}  // namespace course::exercise
