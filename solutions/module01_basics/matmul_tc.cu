/// @file matmul_tc.cu
/// @brief Solution ladder for C = A * B on tensor cores: bf16 inputs, fp32 accumulation (module 1).
///
/// The ladder (kTcMatmulSteps in module01/matmul_tc.hpp):
///   1. wmma                  nvcuda::wmma 16x16x16 fragments; 128x128x32 block tile staged in shared memory
///   2. mma_sync              PTX mma.sync m16n8k16 + ldmatrix on XOR-swizzled shared memory, cp.async pipeline
///   3. wgmma                 (matmul_tc_hopper.cu, sm_90a) warpgroup MMA from 128-byte-swizzled shared memory
///   4. tma_warp_specialized  (matmul_tc_hopper.cu) TMA copies on an mbarrier ring; producer + 2 consumer warpgroups
///   5. persistent            (matmul_tc_hopper.cu) one block per SM walks the tiles; next loads overlap the epilogue
///   6. cluster_multicast     (matmul_tc_hopper.cu) 2-block clusters share each B tile, multicast by TMA
///   7. pingpong              (matmul_tc_hopper.cu) a 128x128 tile per consumer warpgroup; turns on the tensor cores
///
/// This file holds the first two. `wmma` uses the C++ fragment API (nvcuda::wmma), which
/// hides the register layout of the tensor-core operands; `mma_sync` drops to PTX and takes
/// control of everything wmma hides: how fragments are loaded (ldmatrix), how shared
/// memory is laid out (XOR swizzle), and how global loads overlap the math
/// (a multi-stage cp.async pipeline).
///
/// Numbers for the benchmark shape M = N = K = 8192:
///   FLOPs = 2 * M * N * K = 1.10e12. H100 SXM dense bf16 peak ~990 TFLOP/s (wgmma);
///   mma.sync, the Ampere instruction, reaches only ~60-70% of that on Hopper, so the
///   ceiling for these two steps is roughly 600-650 TFLOP/s (cuBLAS, using wgmma, ~750).
///   Compulsory traffic: A and B 128 MiB each, C 256 MiB: 0.5 GB, ~0.2 ms at 3 TB/s,
///   against ~1.7 ms of math at 650 TFLOP/s: the kernel must be compute-bound, and
///   its job is to keep the tensor cores fed from shared memory.

#include "module01/matmul_tc.hpp"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "matmul_tc_parts.cuh"
#include "course/device.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

namespace course::solution {
namespace {

using m01::TcMatmulArgs;
using m01::TcMatmulStep;
using bf16 = __nv_bfloat16;
using tc_parts::Epilogue;
using tc_parts::grid_blocks;
using tc_parts::grouped_tile;
using tc_parts::kGroupM;

// ============================================================================
// Step 1: wmma.
// The first tensor-core kernel. The block tile is the same 128x128 tiling as a
// classic shared-memory SGEMM, but the inner product is done 16x16x16 at a time by
// nvcuda::wmma::mma_sync on warp-wide fragments:
//   * 8 warps as 2 (M) x 4 (N); each warp owns a 64x32 warp tile = 4x2 accumulator
//     fragments (64 fp32 registers per thread).
//   * Per K-slab of 32: the block copies A (128x32) and B (32x128) into shared memory
//     with 16-byte vector loads (zero-filled past M, N and K), __syncthreads, then each
//     warp loads 4 A and 2 B fragments per 16-wide k-step and issues 8 wmma::mma_sync.
//   * Shared rows are padded by 8 bf16 (16 bytes): a row stride of 80 B (A) / 272 B (B)
//     puts the 8 rows a fragment load touches in 8 different bank groups.
//   * The store goes through a 16x16 per-warp scratch in shared memory, because
//     wmma::store_matrix_sync cannot mask a partial tile at the M/N edge.
// What it does NOT do: overlap loads with math. Each slab is load -> wait -> compute
// -> wait, so the tensor cores idle during every global load unless another resident
// block fills the gap.
// Prediction (8192^3): 2 blocks/SM (27 KB static smem, 96 registers, 16 warps/SM);
// global->shared traffic per block per slab 16 KB for 1 MFLOP (64 FLOP/B), fine for
// L2; but the synchronous slabs and the fragment API's fixed load order leave the
// tensor pipe mostly waiting: ~200-300 TFLOP/s, 25-40% of cuBLAS.
// Measured (results: hgemm_bf16/solution/wmma/8192x8192x8192): 102.9 TFLOP/s = 0.16 of cublas_gemmex;
// Measured (results: hgemm_bf16/solution/wmma/4096x4096x4096): 100.8 TFLOP/s = 0.16 of cublas_gemmex:
// far under the 200-300 predicted -- wmma's fragment loads from padded shared memory and
// synchronous global loads leave the tensor cores idle most of the time.
// ============================================================================
namespace wmma_cfg {
constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWM = kBM / kWarpsM;  // 64
constexpr int kWN = kBN / kWarpsN;  // 32
constexpr int kFragsM = kWM / 16;   // 4
constexpr int kFragsN = kWN / 16;   // 2
constexpr int kPad = 8;             // bf16 elements (16 bytes) of padding per shared row
constexpr int kLdsA = kBK + kPad;   // 40
constexpr int kLdsB = kBN + kPad;   // 136
}  // namespace wmma_cfg

/// Copy the 8 bf16 values src[col .. col+7] of one row into dst (16-byte aligned
/// shared memory), zero where the row is out of range or col+e >= limit.
__device__ __forceinline__ void load_chunk_zfill(bf16* dst, const bf16* base, bool row_ok,
                                                 std::int64_t row_offset, std::int64_t col,
                                                 std::int64_t limit) {
  if (row_ok && col + 8 <= limit) {
    // lda/ldb are multiples of 8 and the base is 16-byte aligned: this load is aligned.
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(base + row_offset + col);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      dst[e] = (row_ok && col + e < limit) ? base[row_offset + col + e] : __float2bfloat16(0.f);
  }
}

__global__ void __launch_bounds__(wmma_cfg::kThreads)
    matmul_tc_wmma_kernel(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C,
                          int M, int N, int K, std::int64_t lda, std::int64_t ldb, std::int64_t ldc,
                          int tiles_m, int tiles_n) {
  using namespace wmma_cfg;
  namespace wmma = nvcuda::wmma;
  // wmma::load_matrix_sync needs 32-byte aligned fragment pointers.
  __shared__ __align__(128) bf16 As[kBM][kLdsA];               // 10240 B
  __shared__ __align__(128) bf16 Bs[kBK][kLdsB];               //  8704 B
  __shared__ __align__(128) float scratch[kThreads / 32][16 * 16];  // 8192 B
  // @step wmma  (the exercise writes the kernel body)

  int tile_m, tile_n;
  grouped_tile(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * kBM;
  const int n0 = tile_n * kBN;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_m = warp / kWarpsN;
  const int warp_n = warp % kWarpsN;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragsM][kFragsN];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  for (int k0 = 0; k0 < K; k0 += kBK) {
    // A slab: kBM rows x kBK/8 chunks of 8 bf16.
    for (int id = threadIdx.x; id < kBM * (kBK / 8); id += kThreads) {
      const int r = id / (kBK / 8), c = id % (kBK / 8);
      const int gr = m0 + r;
      load_chunk_zfill(&As[r][c * 8], A, gr < M, static_cast<std::int64_t>(gr) * lda, k0 + c * 8, K);
    }
    // B slab: kBK rows x kBN/8 chunks.
    for (int id = threadIdx.x; id < kBK * (kBN / 8); id += kThreads) {
      const int r = id / (kBN / 8), c = id % (kBN / 8);
      const int gk = k0 + r;
      load_chunk_zfill(&Bs[r][c * 8], B, gk < K, static_cast<std::int64_t>(gk) * ldb, n0 + c * 8, N);
    }
    __syncthreads();  // the slab is complete

#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a_frag[kFragsM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b_frag[kFragsN];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
        wmma::load_matrix_sync(a_frag[i], &As[warp_m * kWM + i * 16][kk], kLdsA);
#pragma unroll
      for (int j = 0; j < kFragsN; ++j)
        wmma::load_matrix_sync(b_frag[j], &Bs[kk][warp_n * kWN + j * 16], kLdsB);
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
    }
    __syncthreads();  // everyone is done reading before the next slab overwrites it
  }

  // Epilogue: fragment -> per-warp scratch -> masked, coalesced global stores.
  float* my_scratch = scratch[warp];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) {
      wmma::store_matrix_sync(my_scratch, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const int row0 = m0 + warp_m * kWM + i * 16;
      const int col0 = n0 + warp_n * kWN + j * 16;
      for (int e = lane; e < 256; e += 32) {
        const int r = row0 + e / 16, c = col0 + e % 16;
        if (r < M && c < N) C[static_cast<std::int64_t>(r) * ldc + c] = my_scratch[e];
      }
      __syncwarp();  // scratch is reused by the next fragment
    }
  }
  // @end
}

void launch_wmma(const TcMatmulArgs& a) {
  // @step wmma  (the exercise writes the launch)
  using namespace wmma_cfg;
  const int tiles_m = static_cast<int>((a.m + kBM - 1) / kBM);
  const int tiles_n = static_cast<int>((a.n + kBN - 1) / kBN);
  const unsigned blocks = grid_blocks(a.m, a.n, kBM, kBN, "matmul_tc(wmma)");
  matmul_tc_wmma_kernel<<<blocks, kThreads, 0, a.stream>>>(
      a.a, a.b, a.c, static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.lda, a.ldb,
      a.ldc, tiles_m, tiles_n);
  COURSE_CHECK_LAUNCH("matmul_tc_wmma_kernel");
  // @end
}

// ============================================================================
// Step 2: mma_sync.
// Everything wmma decided for us, decided by hand. The PTX wrappers it introduces
// (cp.async, ldmatrix, mma.sync, swizzle_chunk) live in common/include/course/cuda/
// mma_ptx.cuh, where each one documents its instruction; modules 2 and 3 reuse them.
//   * Instruction: PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, one warp
//     computing a 16x8 fp32 tile from a 16x16 A fragment (4 registers) and a 16x8 B
//     fragment (2 registers). The register layout is documented in the PTX ISA, so the
//     epilogue stores straight from registers (no shared-memory round trip).
//   * Fragment loads: ldmatrix.x4 fills four 8x8 b16 matrices in one instruction (a
//     whole A fragment, or the B fragments of two n8 tiles). B is row-major K x N,
//     i.e. its 8x8 blocks are stored transposed w.r.t. the "col" operand mma wants:
//     ldmatrix .trans transposes them on the way into registers. Fragments are double
//     buffered: k-step ks+1 is loaded while the mma of k-step ks run.
//   * Shared-memory layout: rows of 16-byte chunks, the chunk index XORed with the row
//     (swizzle_chunk). The 8 row addresses one 8x8 ldmatrix phase reads then fall in 8
//     different 16-byte bank groups: conflict-free without padding.
//   * Pipeline: kStages shared-memory stages filled by cp.async.cg (global -> shared,
//     bypassing registers and L1). While the warps compute on slab kt, the copies of
//     slabs kt+1 .. kt+kStages-1 are in flight; cp.async.wait_group + __syncthreads
//     hand a slab from the copy engine to the math, one barrier per slab.
//   * Edges: out-of-range chunks use cp.async's src-size operand (bytes past it are
//     written as zeros). Only edge slabs pay for that: interior blocks run the steady
//     state with plain, unpredicated copies (a compile-time variant of the loop).
//   * Tiles: block 128x256x32, 8 warps as 2 (M) x 4 (N), warp tile 64x64 =
//     4 (m16) x 8 (n8) mma tiles = 128 fp32 accumulators per thread. A warp issues
//     4 + 4 ldmatrix.x4 and 32 mma per k16 step.
//   * Options (matmul_tc.hpp): a stored-transposed operand changes which dimension of
//     its shared-memory tile is contiguous (A^T: [BK][BM], B^T: [BN][BK]) and so whether
//     its fragments come from plain ldmatrix or .trans (ATile, BTile); one kernel per
//     layout. The epilogue (bias, GELU, residual, bf16 or fp32 output, accumulate) runs
//     on values staged through shared memory, four columns per lane (Epilogue::store4).
//     On the development H100 the plain product kept its ratio to cuBLAS (0.69 at 8192^3,
//     0.66 at 8192x8192x1024); a first version that applied the options straight from the
//     64 register pairs, fully unrolled, fell to 0.47 and 0.20: its ~10 k instructions of
//     epilogue overflowed the instruction cache.
// Shared memory per stage: A 128x32x2 = 8 KB + B 32x256x2 = 16 KB = 24 KB;
// 4 stages = 96 KB (dynamic: opted in by course::cuda::opt_in_dynamic_smem).
// Occupancy: ~250 registers x 256 threads -> 1 block (8 warps, 2 per scheduler) per SM.
// Latency is hidden by the pipeline and by instruction-level parallelism (32
// independent mma per k-step), not by more warps.
// Prediction (8192^3): L2->shared traffic 24 KB per 2 MFLOP slab (85 FLOP/B), shared
// memory ~35% busy with ldmatrix; 2048 tiles = 15.5 waves over 132 SMs (~3% tail).
// mma.sync's own ceiling on Hopper is ~65% of the wgmma peak; this kernel should reach
// 80-85% of that: ~500-550 TFLOP/s, 65-70% of cuBLAS (which uses wgmma + TMA).
// Measured (results: hgemm_bf16/solution/mma_sync/8192x8192x8192): 454.3 TFLOP/s = 0.70 of cublas_gemmex;
// Measured (results: hgemm_bf16/solution/mma_sync/4096x4096x4096): 421.5 TFLOP/s = 0.67 of cublas_gemmex.
// Development runs ranged 0.64-0.71 (the card clocks down as it heats; cuBLAS reached
// 767-790 TFLOP/s when cool). Limit: a loop of nothing but mma.sync.m16n8k16 peaks at
// ~628 TFLOP/s on the H200, so this kernel is at ~0.7 of the instruction's ceiling; cuBLAS
// uses Hopper's wgmma (sm_90a), as the wgmma step and those after it do (matmul_tc_hopper.cu).
// ============================================================================
template <int BM, int BN, int BK, int WarpsM, int WarpsN, int Stages, int MinBlocks = 1, int GroupM = kGroupM>
struct MmaConfig {
  static constexpr int kBM = BM, kBN = BN, kBK = BK, kStages = Stages, kGroupM = GroupM;
  static constexpr int kMinBlocks = MinBlocks;  // resident blocks per SM the registers must allow
  static constexpr int kWarpsM = WarpsM, kWarpsN = WarpsN;
  static constexpr int kThreads = 32 * WarpsM * WarpsN;
  static constexpr int kWM = BM / WarpsM;       // warp tile rows
  static constexpr int kWN = BN / WarpsN;       // warp tile cols
  static constexpr int kMTiles = kWM / 16;      // m16 mma tiles per warp
  static constexpr int kNTiles = kWN / 8;       // n8 mma tiles per warp
  static constexpr int kKSteps = BK / 16;       // k16 steps per slab
  static constexpr int kStageA = BM * BK;       // bf16 elements of one A stage
  static constexpr int kStageB = BK * BN;
  static constexpr int kSmemBytes = Stages * (kStageA + kStageB) * static_cast<int>(sizeof(bf16));
  // How each thread copies its chunks of a slab: TileCopier (per operand and layout).
  static_assert(kWM * kWarpsM == BM && kWN * kWarpsN == BN, "warps must tile the block tile");
  static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(BK % 16 == 0 && BK / 8 >= 2, "BK must be a multiple of 16");
  static_assert(Stages >= 2, "a pipeline needs at least two stages");
  static_assert(kWarpsM * kWarpsN * 16 * (kWN + 8) * 4 <= kSmemBytes, "the epilogue's patches reuse the stages");
  static_assert(kKSteps % 2 == 0, "fragment buffers alternate: an even number of k-steps per slab");
};
using MmaCfg = MmaConfig<128, 256, 32, 2, 4, 4>;
/// The tile for products whose 128 x 256 grid would leave SMs idle (a linear layer's
/// N = 384 is 1.5 such tiles; dW = dY^T X is a 1152 x 384 output): 128 x 128 computed by
/// 4 warps with the same 64 x 64 warp tile (so the same ~250 registers, no spills), two
/// blocks per SM -- one block's prologue and epilogue overlap the other's main loop, which
/// matters when K is only 12 slabs long. (8 warps of 32 x 64 at two blocks per SM would
/// have to fit in 128 registers and spilled.)
using MmaCfgNarrow = MmaConfig<128, 128, 32, 2, 2, 4, /*MinBlocks=*/2>;

// From common/include/course/cuda/mma_ptx.cuh (see the mma_sync banner above).
using ::course::cuda::cp_async_16_zfill;
using ::course::cuda::cp_async_commit;
using ::course::cuda::cp_async_wait;
using ::course::cuda::ldmatrix_x4;
using ::course::cuda::ldmatrix_x4_trans;
using ::course::cuda::mma_m16n8k16_bf16_f32;
using ::course::cuda::smem_u32;
using ::course::cuda::swizzle_chunk;

/// Per-thread state of the global -> shared copies of ONE operand. A slab of an operand
/// is a tile of kRows rows x kChunks 16-byte chunks of a row-major matrix: A[BM][BK] and
/// B[BK][BN] in the plain layouts, A^T's [BK][BM] and B^T's [BN][BK] when an operand is
/// stored transposed (a_transposed, b_transposed). The K dimension runs along the tile's
/// rows (kKAlongRows) or along its chunks. A thread always copies the same chunk column,
/// in kIters rows kRowStep apart, so all addressing is set up once and each slab only
/// advances one offset; predicates are evaluated only on edge slabs.
template <int kRows, int kChunks, int kThreads, int kBK, bool kKAlongRows>
struct TileCopier {
  static constexpr int kIters = kRows * kChunks / kThreads;
  static constexpr int kRowStep = kThreads / kChunks;
  static_assert(kRows * kChunks % kThreads == 0 && kThreads % kChunks == 0, "whole chunks per thread");
  static_assert(kRowStep % 8 == 0, "the swizzle pattern repeats every 8 rows");

  std::int64_t off = 0;        // element offset of this thread's first chunk of the current slab
  std::int64_t row_step = 0;   // ld * kRowStep
  std::int64_t slab_step = 0;  // ld * kBK (K along rows) or kBK (K along the chunks)
  unsigned dst = 0;            // byte offset of this thread's first chunk in a stage (swizzled)
  int rows_left = 0;           // matrix rows from this thread's first row on
  int cols_left = 0;           // matrix columns from this thread's first column on

  /// The tile's first element is (row0, col0) of a rows x cols matrix with row stride ld.
  __device__ __forceinline__ void init(int row0, int col0, int rows, int cols, std::int64_t ld) {
    // @step mma_sync  (the exercise writes the copy addressing)
    const int row = threadIdx.x / kChunks, chunk = threadIdx.x % kChunks;
    off = static_cast<std::int64_t>(row0 + row) * ld + col0 + chunk * 8;
    row_step = ld * kRowStep;
    slab_step = kKAlongRows ? ld * kBK : kBK;
    dst = (row * kChunks * 8 + swizzle_chunk<kChunks>(row, chunk) * 8) * 2;
    rows_left = rows - (row0 + row);
    cols_left = cols - (col0 + chunk * 8);
    // @end
  }

  /// Issue the copies of the current slab into the stage at byte address `stage`, then
  /// advance to the next slab. kChecked = false: the slab lies entirely inside the matrix,
  /// so every chunk is a plain 16-byte copy. kChecked = true: an edge slab; read only what
  /// is in range and zero-fill the rest (an out-of-range chunk passes a valid address, the
  /// matrix base, with 0 bytes).
  template <bool kChecked>
  __device__ __forceinline__ void copy(unsigned stage, const bf16* base) {
    // @step mma_sync  (the exercise writes the copies)
    constexpr unsigned kDstStep = kRowStep * kChunks * 16;
    if constexpr (!kChecked) {
#pragma unroll
      for (int i = 0; i < kIters; ++i) cp_async_16_zfill(stage + dst + i * kDstStep, base + off + i * row_step, 16);
    } else {
      const int bytes = max(0, min(cols_left, 8)) * 2;  // valid bytes of this thread's chunk
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const bool ok = i * kRowStep < rows_left && bytes > 0;
        cp_async_16_zfill(stage + dst + i * kDstStep, ok ? base + off + i * row_step : base, ok ? bytes : 0);
      }
    }
    off += slab_step;
    if constexpr (kKAlongRows) rows_left -= kBK;
    else cols_left -= kBK;
    // @end
  }
};

/// The shared-memory tile of A (kTrans: stored K x M) or B (kTrans: stored N x K) and how
/// its mma fragments come out of it. Plain A [BM][BK] and transposed B [BN][BK] are
/// K-contiguous: their 8x8 blocks are already in the orientation mma.sync wants (A "row",
/// B "col"), so a plain ldmatrix fills the fragment. Plain B [BK][BN] and transposed A
/// [BK][BM] are M/N-contiguous: ldmatrix .trans transposes each 8x8 block on the way.
template <class Cfg, bool kTrans>
struct ATile {
  static constexpr int kRows = kTrans ? Cfg::kBK : Cfg::kBM;
  static constexpr int kChunks = (kTrans ? Cfg::kBM : Cfg::kBK) / 8;
  using Copier = TileCopier<kRows, kChunks, Cfg::kThreads, Cfg::kBK, kTrans>;
  unsigned lds[kTrans ? Cfg::kMTiles : Cfg::kKSteps];  // ldmatrix byte offsets (see init)

  /// Lane l supplies the address of row l % 8 of 8x8 matrix l / 8; registers 0-3 of the
  /// fragment are (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  __device__ __forceinline__ void init(int warp_m, int lane) {
    // @step mma_sync  (the exercise writes the ldmatrix addresses)
    const int q = lane / 8;
    if constexpr (!kTrans) {  // row m = lane % 16, k-chunk 2 ks + lane / 16; tile mt adds 16 rows
      const int row = warp_m * Cfg::kWM + lane % 16;
#pragma unroll
      for (int ks = 0; ks < Cfg::kKSteps; ++ks)
        lds[ks] = (row * Cfg::kBK + swizzle_chunk<kChunks>(row, 2 * ks + lane / 16) * 8) * 2;
    } else {  // k row (q / 2) * 8 + lane % 8, m-chunk of tile mt + q % 2; step ks adds 16 k rows
      const int krow = (q / 2) * 8 + lane % 8;
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
        const int chunk = (warp_m * Cfg::kWM + mt * 16) / 8 + q % 2;
        lds[mt] = (krow * Cfg::kBM + swizzle_chunk<kChunks>(krow, chunk) * 8) * 2;
      }
    }
    // @end
  }
  __device__ __forceinline__ void load(unsigned (&frag)[4], unsigned stage, int ks, int mt) const {
    // @step mma_sync  (the exercise writes the fragment load)
    if constexpr (!kTrans) ldmatrix_x4(frag, stage + lds[ks] + mt * 16 * Cfg::kBK * 2);
    else ldmatrix_x4_trans(frag, stage + lds[mt] + ks * 16 * Cfg::kBM * 2);
    // @end
  }
};

template <class Cfg, bool kTrans>
struct BTile {
  static constexpr int kRows = kTrans ? Cfg::kBN : Cfg::kBK;
  static constexpr int kChunks = (kTrans ? Cfg::kBK : Cfg::kBN) / 8;
  using Copier = TileCopier<kRows, kChunks, Cfg::kThreads, Cfg::kBK, !kTrans>;
  unsigned lds[kTrans ? Cfg::kKSteps : Cfg::kNTiles / 2];

  /// One ldmatrix_x4 fills two n8 tiles: registers (b0b1, b2b3) of tile 2p, then of 2p+1.
  __device__ __forceinline__ void init(int warp_n, int lane) {
    // @step mma_sync  (the exercise writes the ldmatrix addresses)
    const int q = lane / 8;
    if constexpr (!kTrans) {  // k row lane % 16, n-chunk 2 p + lane / 16; step ks adds 16 k rows
      const int krow = lane % 16;
#pragma unroll
      for (int p = 0; p < Cfg::kNTiles / 2; ++p) {
        const int chunk = warp_n * (Cfg::kWN / 8) + 2 * p + lane / 16;
        lds[p] = (krow * Cfg::kBN + swizzle_chunk<kChunks>(krow, chunk) * 8) * 2;
      }
    } else {  // n row (q / 2) * 8 + lane % 8, k-chunk 2 ks + q % 2; pair p adds 16 n rows
      const int nrow = warp_n * Cfg::kWN + (q / 2) * 8 + lane % 8;
#pragma unroll
      for (int ks = 0; ks < Cfg::kKSteps; ++ks)
        lds[ks] = (nrow * Cfg::kBK + swizzle_chunk<kChunks>(nrow, 2 * ks + q % 2) * 8) * 2;
    }
    // @end
  }
  __device__ __forceinline__ void load(unsigned (&r)[4], unsigned stage, int ks, int p) const {
    // @step mma_sync  (the exercise writes the fragment load)
    if constexpr (!kTrans) ldmatrix_x4_trans(r, stage + lds[p] + ks * 16 * Cfg::kBN * 2);
    else ldmatrix_x4(r, stage + lds[ks] + p * 16 * Cfg::kBK * 2);
    // @end
  }
};

/// Split-K (blockIdx.y = split s of gridDim.y, each `slabs_per_split` slabs of K): split 0
/// applies the whole epilogue, split s > 0 adds its partial product into C afterwards, in
/// the order s = 1, 2, ... (`turns`: one counter per tile of C, zero at launch; split s waits
/// until its tile's counter reads s, then passes s + 1). The order is fixed, so C is the same
/// bit for bit on every run. The launcher splits only linear epilogues (fp32 C, no GELU).
template <class Cfg, bool kATrans, bool kBTrans>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    matmul_tc_mma_sync_kernel(const bf16* __restrict__ A, const bf16* __restrict__ B, int M, int N, int K,
                              std::int64_t lda, std::int64_t ldb, int tiles_m, int tiles_n, Epilogue epilogue,
                              int slabs_per_split, int* __restrict__ turns) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // @step mma_sync  (the exercise writes the kernel body)
  // Stages: kStages x A[BM][BK], then kStages x B[BK][BN], addressed in bytes.
  const unsigned smem_a = smem_u32(smem_raw);
  const unsigned smem_b = smem_a + Cfg::kStages * Cfg::kStageA * 2;
  constexpr unsigned kStageBytesA = Cfg::kStageA * 2;
  constexpr unsigned kStageBytesB = Cfg::kStageB * 2;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_m = warp / Cfg::kWarpsN;
  const int warp_n = warp % Cfg::kWarpsN;
  const int split = static_cast<int>(blockIdx.y);
  const int k_begin = split * slabs_per_split * Cfg::kBK;  // this split's first K index
  const int k_tiles = min(slabs_per_split, (K - k_begin + Cfg::kBK - 1) / Cfg::kBK);
  int tile_m, tile_n;
  grouped_tile<Cfg::kGroupM>(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * Cfg::kBM;
  const int n0 = tile_n * Cfg::kBN;

  // Prologue: start the copies of the first kStages-1 slabs. A group is committed even
  // when empty, so "commit group g holds slab g" stays true for every wait below.
  using TileA = ATile<Cfg, kATrans>;
  using TileB = BTile<Cfg, kBTrans>;
  typename TileA::Copier copy_a;
  typename TileB::Copier copy_b;
  // Stored shapes: A is M x K (K x M transposed), B is K x N (N x K transposed).
  if constexpr (!kATrans) copy_a.init(m0, k_begin, M, K, lda);
  else copy_a.init(k_begin, m0, K, M, lda);
  if constexpr (!kBTrans) copy_b.init(k_begin, n0, K, N, ldb);
  else copy_b.init(n0, k_begin, N, K, ldb);
  const bool interior = m0 + Cfg::kBM <= M && n0 + Cfg::kBN <= N;  // the whole block tile lies inside C
  auto copy_slab = [&](int stage, auto checked) {
    constexpr bool kChecked = decltype(checked)::value;
    copy_a.template copy<kChecked>(smem_a + stage * kStageBytesA, A);
    copy_b.template copy<kChecked>(smem_b + stage * kStageBytesB, B);
  };
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < k_tiles) copy_slab(s, std::true_type{});
    cp_async_commit();
  }

  // Per-thread byte offsets of the ldmatrix row addresses inside a stage (ATile, BTile).
  TileA tile_a;
  TileB tile_b;
  tile_a.init(warp_m, lane);
  tile_b.init(warp_n, lane);

  float acc[Cfg::kMTiles][Cfg::kNTiles][4];
  unsigned a_frag[2][Cfg::kMTiles][4];
  unsigned b_frag[2][Cfg::kNTiles][2];
  // Fragments of k-step ks of the stage at (sA, sB) into register buffer `buf`.
  auto load_fragments = [&](unsigned sA, unsigned sB, int ks, int buf) {
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt) tile_a.load(a_frag[buf][mt], sA, ks, mt);
#pragma unroll
    for (int p = 0; p < Cfg::kNTiles / 2; ++p) {
      unsigned r[4];
      tile_b.load(r, sB, ks, p);
      b_frag[buf][2 * p][0] = r[0];
      b_frag[buf][2 * p][1] = r[1];
      b_frag[buf][2 * p + 1][0] = r[2];
      b_frag[buf][2 * p + 1][1] = r[3];
    }
  };

#pragma unroll
  for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  // Slab 0 (commit group 0) has landed once at most kStages-2 groups are in flight;
  // the barrier makes every thread's copies visible to every warp.
  cp_async_wait<Cfg::kStages - 2>();
  __syncthreads();
  int read_stage = 0;                  // stage the warps compute on
  int write_stage = Cfg::kStages - 1;  // stage the next copies fill
  unsigned sA = smem_a, sB = smem_b;
  load_fragments(sA, sB, 0, 0);

  // The main loop over slabs [kt_begin, kt_end); `checked` (std::true_type or
  // std::false_type) selects the copy variant at compile time, so the steady state
  // carries no predicates at all (a runtime `if` would be if-converted by the
  // compiler, and the predicated-off edge code would still cost issue slots).
  auto run_slabs = [&](int kt_begin, int kt_end, auto checked) {
    constexpr bool kChecked = decltype(checked)::value;
    for (int kt = kt_begin; kt < kt_end; ++kt) {
#pragma unroll
      for (int ks = 0; ks < Cfg::kKSteps; ++ks) {
        // 1. Fragments for the next k-step: from this stage, or (last step) from the
        //    next stage, which the barrier at ks == kKSteps-2 has already published.
        if (ks + 1 < Cfg::kKSteps) {
          load_fragments(sA, sB, ks + 1, (ks + 1) % 2);
        } else if (kt + 1 < k_tiles) {
          load_fragments(sA, sB, 0, 0);
        }
        // 2. Once per slab: refill the stage freed by slab kt-1 with slab
        //    kt+kStages-1. Every warp finished reading it before the last barrier.
        if (ks == 0) {
          const int next = kt + Cfg::kStages - 1;
          if (next < k_tiles) copy_slab(write_stage, std::integral_constant<bool, kChecked>{});
          cp_async_commit();
          write_stage = write_stage + 1 == Cfg::kStages ? 0 : write_stage + 1;
        }
        // 3. Before the last k-step's fragments are fetched from the next stage: wait
        //    for slab kt+1 (its group and all older ones done) and publish it. This
        //    also certifies that every warp fetched its last fragments of this stage.
        if (ks == Cfg::kKSteps - 2) {
          cp_async_wait<Cfg::kStages - 2>();
          __syncthreads();
          read_stage = read_stage + 1 == Cfg::kStages ? 0 : read_stage + 1;
          sA = smem_a + read_stage * kStageBytesA;
          sB = smem_b + read_stage * kStageBytesB;
        }
        // 4. The math of this k-step: kMTiles x kNTiles independent mma.
#pragma unroll
        for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < Cfg::kNTiles; ++nt)
            mma_m16n8k16_bf16_f32(acc[mt][nt], a_frag[ks % 2][mt], b_frag[ks % 2][nt]);
      }
    }
  };
  if (interior) {
    // Unchecked while the slab being copied (kt + kStages-1) is a full K slab.
    const int steady_end = min(k_tiles, max(0, (K - k_begin) / Cfg::kBK - (Cfg::kStages - 1)));
    run_slabs(0, steady_end, std::false_type{});
    run_slabs(steady_end, k_tiles, std::true_type{});
  } else {
    run_slabs(0, k_tiles, std::true_type{});
  }

  // Epilogue through shared memory, one m16 slice of the warp tile at a time: the
  // accumulators go to the warp's own [16][kWN + 8] fp32 patch (c0,c1 at (lane/4,
  // 2*(lane%4) + {0,1}) of each 16x8 tile, c2,c3 eight rows below; the 8-float pad makes
  // the float2 writes conflict-free), then the warp reads it back four columns per lane
  // and Epilogue::store4 applies bias, GELU, residual and the output dtype with 16-byte
  // loads and stores (2 full rows of 64 columns per warp instruction). The read-back loop
  // stays rolled: one copy of the epilogue code per slice instead of one per register pair.
  constexpr int kPatchLd = Cfg::kWN + 8;
  cp_async_wait<0>();  // no copy may outlive the block (the trailing groups are empty)
  __syncthreads();     // every warp is done with the pipeline stages: their memory is reused
  float* patch = reinterpret_cast<float*>(smem_raw) + warp * 16 * kPatchLd;
  const int tile = static_cast<int>(blockIdx.x);
  if (split > 0) {  // wait for the splits before this one, then add to what they left in C
    if (threadIdx.x == 0) tc_parts::wait_split_turn(turns, tile, split);
    __syncthreads();
    epilogue = epilogue.later_split();  // C += partial; bias and residual were applied by split 0
  }
#pragma unroll
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
#pragma unroll
    for (int nt = 0; nt < Cfg::kNTiles; ++nt) {
      float* at = patch + (lane / 4) * kPatchLd + nt * 8 + (lane % 4) * 2;
      *reinterpret_cast<float2*>(at) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<float2*>(at + 8 * kPatchLd) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
    }
    __syncwarp();
    constexpr int kQuadsPerRow = Cfg::kWN / 4;
#pragma unroll 1
    for (int i = lane; i < 16 * kQuadsPerRow; i += 32) {
      const int r = i / kQuadsPerRow, q = i % kQuadsPerRow;
      const float4 v = *reinterpret_cast<const float4*>(patch + r * kPatchLd + q * 4);
      epilogue.store4(m0 + warp_m * Cfg::kWM + mt * 16 + r, n0 + warp_n * Cfg::kWN + q * 4, v);
    }
    __syncwarp();  // the patch is rewritten by the next slice
  }
  if (gridDim.y > 1) {  // pass the tile to the next split: every store of this block first
    __syncthreads();
    if (threadIdx.x == 0) tc_parts::pass_split_turn(turns, tile, split);
  }
  // @end
}

template <class Cfg, bool kATrans, bool kBTrans>
void launch_mma_sync_config(const TcMatmulArgs& a) {
  // @step mma_sync  (the exercise writes the launch)
  const int tiles_m = static_cast<int>((a.m + Cfg::kBM - 1) / Cfg::kBM);
  const int tiles_n = static_cast<int>((a.n + Cfg::kBN - 1) / Cfg::kBN);
  const unsigned tiles = grid_blocks(a.m, a.n, Cfg::kBM, Cfg::kBN, "matmul_tc(mma_sync)");
  // Split K (tc_parts::split_k_allowed: a linear epilogue, and tiles that cannot fill the
  // GPU twice over) into enough splits to fill it twice, each keeping at least kMinSlabs
  // slabs (the pipeline must reach its steady state).
  constexpr int kMinSlabs = 16;
  const int k_tiles = static_cast<int>((a.k + Cfg::kBK - 1) / Cfg::kBK);
  const int sms = device_properties().multiProcessorCount;
  int splits = 1;
  if (tc_parts::split_k_allowed(a, tiles, sms))
    splits = std::max(1, std::min((2 * sms + static_cast<int>(tiles) - 1) / static_cast<int>(tiles), k_tiles / kMinSlabs));
  const tc_parts::SplitK plan = tc_parts::split_evenly(k_tiles, splits);  // no empty split
  splits = plan.splits;
  const int per_split = plan.slabs;
  constexpr auto kernel = matmul_tc_mma_sync_kernel<Cfg, kATrans, kBTrans>;
  ::course::cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes);  // more than the 48 KB default
  // This launch's own turn counters (stream order: see tc_parts::zeroed_turns), freed after it.
  int* turns = splits > 1 ? tc_parts::zeroed_turns(static_cast<int>(tiles), a.stream) : nullptr;
  kernel<<<dim3(tiles, static_cast<unsigned>(splits)), Cfg::kThreads, Cfg::kSmemBytes, a.stream>>>(
      a.a, a.b, static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.lda, a.ldb, tiles_m, tiles_n,
      tc_parts::Epilogue::from(a), per_split, turns);
  tc_parts::free_turns(turns, a.stream);
  COURSE_CHECK_LAUNCH("matmul_tc_mma_sync_kernel");
  // @end
}

/// The tile: 128 x 256 when that grid fills the GPU twice and K is long enough for the
/// pipeline's fill and the epilogue to be a small share of a tile's time (K >= 1024: 32
/// slabs); else 128 x 128 with two blocks per SM (MmaCfgNarrow), which overlap one block's
/// fill and epilogue with the other's main loop.
template <bool kATrans, bool kBTrans>
void launch_mma_sync_layout(const TcMatmulArgs& a) {
  const std::int64_t wide_tiles = ((a.m + MmaCfg::kBM - 1) / MmaCfg::kBM) * ((a.n + MmaCfg::kBN - 1) / MmaCfg::kBN);
  if (wide_tiles >= 2 * device_properties().multiProcessorCount && a.k >= 1024)
    launch_mma_sync_config<MmaCfg, kATrans, kBTrans>(a);
  else
    launch_mma_sync_config<MmaCfgNarrow, kATrans, kBTrans>(a);
}

/// One kernel per operand layout (the layouts change the tile shapes and ldmatrix forms at
/// compile time); the epilogue options are runtime flags of tc_parts::Epilogue.
void launch_mma_sync(const TcMatmulArgs& a) {
  // @step mma_sync  (the exercise writes the layout dispatch)
  if (!a.a_transposed && !a.b_transposed) launch_mma_sync_layout<false, false>(a);
  else if (!a.a_transposed) launch_mma_sync_layout<false, true>(a);
  else if (!a.b_transposed) launch_mma_sync_layout<true, false>(a);
  else launch_mma_sync_layout<true, true>(a);
  // @end
}

}  // namespace

void matmul_tc(TcMatmulStep step, const TcMatmulArgs& args) {
  m01::validate_tc_matmul_args(args, "matmul_tc");
  tc_parts::require_int_sizes(args, "matmul_tc");
  // TcMatmulArgs' options (layouts, bf16 output, epilogue): wmma and wgmma compute plain
  // fp32 C = A * B and name the first option they are given; the other steps take them all.
  // @step mma_sync  (the exercise: which steps take the options so far)
  if (step == TcMatmulStep::wmma || step == TcMatmulStep::wgmma)
    m01::require_no_options(args, std::string("matmul_tc step ") + step_name_in(m01::kTcMatmulSteps, step));
  // @end
  switch (step) {
    case TcMatmulStep::wmma: launch_wmma(args); return;
    case TcMatmulStep::mma_sync: launch_mma_sync(args); return;
    case TcMatmulStep::wgmma: tc_parts::launch_wgmma(args); return;
    case TcMatmulStep::tma_warp_specialized: tc_parts::launch_tma_warp_specialized(args); return;
    case TcMatmulStep::persistent: tc_parts::launch_persistent(args); return;
    case TcMatmulStep::cluster_multicast: tc_parts::launch_cluster_multicast(args); return;
    case TcMatmulStep::pingpong: tc_parts::launch_pingpong(args); return;
  }
  require_arg(false, "matmul_tc", "step", static_cast<int>(step), "is not a TcMatmulStep");
}

}  // namespace course::solution
