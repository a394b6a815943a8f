/// @file matmul_tc.cu
/// @brief YOUR ladder for C = A * B on tensor cores: bf16 inputs, fp32 accumulation (module 1).
///
/// Read module01_basics/README.md, "Tensor-core matmul", then fill in one step at a time.
/// Steps 1-2 (wmma, mma_sync) are in this file; the Hopper steps 3-7 (wgmma,
/// tma_warp_specialized, persistent, cluster_multicast, pingpong) in matmul_tc_hopper.cu.
/// The code outside the `// @step` ... `// @end` regions is the solution's
/// (solutions/module01_basics/matmul_tc.cu, generated from it): the tile configurations,
/// the helper structs' members, the split-K launcher and the dispatcher are given; the
/// regions -- kernel bodies, the copy and ldmatrix addressing, the launches -- are yours.
/// Run its tests with:   ctest --preset default -L exercise -R MatmulTc
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint matmul_tc/<step>`
/// (all of them: exercises/module01_basics/hints/matmul_tc.md).
///
/// Contract (module01/matmul_tc.hpp): A is M x K, B is K x N, both row-major bf16 with
/// leading dimensions lda, ldb that are multiples of 8 (so every 8-element chunk of a
/// row is one aligned 16-byte load); C is M x N row-major fp32. Any M, N, K >= 1:
/// zero-fill what lies outside the matrices when loading, mask stores at the edges.

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

namespace course::exercise {
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
  // @step wmma
  // TODO(step 1): the kernel, with the shared arrays above. Suggested shape (wmma_cfg):
  // block tile 128 x 128 x 32, 256 threads = 8 warps arranged 2 (M) x 4 (N), so each warp
  // owns a 64 x 32 piece of C = 4 x 2 accumulator fragments of 16x16.
  //   (a) This block's tile: grouped_tile(blockIdx.x, tiles_m, tiles_n, tile_m, tile_n)
  //       (matmul_tc_parts.cuh) gives its tile row and column; the origin is (m0, n0) =
  //       (tile_m * kBM, tile_n * kBN). Then the warp's position (warp_m, warp_n).
  //   (b) Declare and zero the accumulators:
  //         wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
  //   (c) Loop over K in slabs of 32. For each slab, all 256 threads copy A[m0:m0+128,
  //       k0:k0+32] into As and B[k0:k0+32, n0:n0+128] into Bs (load_chunk_zfill above
  //       does one 8-element chunk), __syncthreads(), then for kk = 0 and 16: load 4
  //       A fragments and 2 B fragments from shared memory and do the 4 x 2 mma_sync.
  //       __syncthreads() again before the next slab overwrites the tiles.
  //   (d) Store: wmma::store_matrix_sync cannot mask the M/N edges, so store each
  //       fragment into this warp's 16x16 `scratch`, then let the 32 lanes copy the
  //       in-range elements to C.
  // Hints, one at a time: bash scripts/course.sh hint matmul_tc/wmma
  (void)A, (void)B, (void)C, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)ldc, (void)tiles_m, (void)tiles_n;
  (void)As, (void)Bs, (void)scratch;
  // @end
}

void launch_wmma(const TcMatmulArgs& a) {
  // @step wmma
  // TODO(step 1): delete this line, then launch grid_blocks(a.m, a.n, kBM, kBN, ...) blocks
  //   (a 1-D grid of tiles, the order grouped_tile decodes; tiles_m = ceil(m / 128),
  //   tiles_n = ceil(n / 128)) of wmma_cfg::kThreads threads on a.stream (M, N, K are below
  //   2^30, checked by matmul_tc() below, so int arguments are safe), and call
  //   COURSE_CHECK_LAUNCH("matmul_tc_wmma_kernel") right after.
  throw NotImplemented("matmul_tc step wmma", __FILE__);
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
    // @step mma_sync
    // TODO(step 2, items 1 and 4): this thread's chunk of the tile: row threadIdx.x / kChunks,
    // chunk threadIdx.x % kChunks. Set off (element offset of that chunk in the matrix),
    // row_step, slab_step, rows_left, cols_left, and dst: the chunk's byte offset in a
    // stage -- plain layout first (row * kChunks * 8 + chunk * 8) * 2, then the swizzle
    // (swizzle_chunk<kChunks>(row, chunk) in place of chunk).
    (void)row0, (void)col0, (void)rows, (void)cols, (void)ld;
    // @end
  }

  /// Issue the copies of the current slab into the stage at byte address `stage`, then
  /// advance to the next slab. kChecked = false: the slab lies entirely inside the matrix,
  /// so every chunk is a plain 16-byte copy. kChecked = true: an edge slab; read only what
  /// is in range and zero-fill the rest (an out-of-range chunk passes a valid address, the
  /// matrix base, with 0 bytes).
  template <bool kChecked>
  __device__ __forceinline__ void copy(unsigned stage, const bf16* base) {
    // @step mma_sync
    // TODO(step 2, item 1): issue this thread's kIters copies of the slab (cp_async_16_zfill,
    // destination stage + dst + i * kRowStep * kChunks * 16): kChecked = false, plain
    // 16-byte copies; kChecked = true, only the in-range bytes (0 for rows past rows_left,
    // a valid source address anyway). Then advance off, rows_left / cols_left by a slab.
    (void)stage, (void)base;
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
    // @step mma_sync
    // TODO(step 2, items 2 and 4): the byte offsets (in a stage) of the row this lane
    // gives ldmatrix, one per k-step (plain A: row warp_m * kWM + lane % 16, k-chunk
    // 2 ks + lane / 16) or per m16 tile (A stored transposed, read with .trans); swizzled
    // as the copies write them.
    (void)warp_m, (void)lane;
    // @end
  }
  __device__ __forceinline__ void load(unsigned (&frag)[4], unsigned stage, int ks, int mt) const {
    // @step mma_sync
    // TODO(step 2, item 2): the A fragment of m16 tile mt, k-step ks: one ldmatrix_x4 (plain)
    // or ldmatrix_x4_trans (kTrans) at stage + lds[...] + the tile's or step's offset.
    (void)frag, (void)stage, (void)ks, (void)mt;
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
    // @step mma_sync
    // TODO(step 2, items 2 and 4): as ATile::init, for B: one ldmatrix_x4_trans fills the
    // fragments of two n8 tiles (plain B [BK][BN]); B stored transposed ([BN][BK]) reads
    // them with a plain ldmatrix_x4.
    (void)warp_n, (void)lane;
    // @end
  }
  __device__ __forceinline__ void load(unsigned (&r)[4], unsigned stage, int ks, int p) const {
    // @step mma_sync
    // TODO(step 2, item 2): the B fragments of n8 tiles 2p and 2p+1, k-step ks.
    (void)r, (void)stage, (void)ks, (void)p;
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
  // @step mma_sync
  // TODO(step 2), in this order (test after each, with the later items still simple).
  // Cfg (MmaConfig above) is the tile: the solution's 128 x 256 x 32, 8 warps as 2 (M) x
  // 4 (N), warp tile 64 x 64 = 4 (m16) x 8 (n8) mma tiles, 4 stages of A[128][32] +
  // B[32][256] in smem_raw (96 KB of dynamic shared memory).
  //   (1) A single-stage version: per slab, every thread copies its 16-byte chunks
  //       (TileA::Copier / TileB::Copier: TileCopier above), then cp_async_commit();
  //       cp_async_wait<0>(); __syncthreads(); compute; __syncthreads(). Use the plain
  //       row-major layout first (chunk c of row r at r * BK + c * 8).
  //   (2) Compute a k16 step: per m16 tile one ldmatrix_x4 of A, per pair of n8 tiles one
  //       ldmatrix_x4_trans of B (ATile / BTile::load), then kMTiles x kNTiles
  //       mma_m16n8k16_bf16_f32.
  //   (3) Epilogue: acc[mt][nt][0..1] are C(row, col), C(row, col+1) with row = lane/4 and
  //       col = 2*(lane%4) inside the 16x8 tile; [2..3] are 8 rows below. Store them with
  //       epilogue.store4 (four adjacent columns: stage them through shared memory) or,
  //       for a first version, plain masked stores to epilogue.c.
  //   (4) Swizzle: store chunk c of row r at chunk swizzle_chunk<chunks_per_row>(r, c), and
  //       read with the same function. Tests must still pass; ncu's shared bank-conflict
  //       counter (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld) drops to ~0.
  //   (5) Pipeline: kStages stages; prologue issues slabs 0..kStages-2 (one commit each,
  //       even when empty); per slab: cp_async_wait<kStages-2>(), __syncthreads(), issue
  //       slab kt+kStages-1 into the stage slab kt-1 used, commit, compute on slab kt.
  // The tile of C: grouped_tile<Cfg::kGroupM>(blockIdx.x, tiles_m, tiles_n, ...). Your launch
  // may use one split (gridDim.y = 1: slabs_per_split = all of K, turns = nullptr); the
  // solution's split-K is an addition to read afterwards.
  // Hints, one at a time: bash scripts/course.sh hint matmul_tc/mma_sync
  (void)smem_raw, (void)A, (void)B, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)tiles_m, (void)tiles_n;
  (void)epilogue, (void)slabs_per_split, (void)turns;
  // @end
}

template <class Cfg, bool kATrans, bool kBTrans>
void launch_mma_sync_config(const TcMatmulArgs& a) {
  // @step mma_sync
  // TODO(step 2): delete this line; call
  //   ::course::cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes) for
  //   kernel = matmul_tc_mma_sync_kernel<Cfg, kATrans, kBTrans>, launch grid_blocks(...)
  //   blocks (one per tile of C) of Cfg::kThreads threads with Cfg::kSmemBytes of dynamic
  //   shared memory on a.stream (tc_parts::Epilogue::from(a) carries C and the options),
  //   then COURSE_CHECK_LAUNCH("matmul_tc_mma_sync_kernel").
  throw NotImplemented("matmul_tc step mma_sync (launch_mma_sync_config)", __FILE__);
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
  // @step mma_sync
  // TODO(step 2): delete this line; launch_mma_sync_layout<false, false>(a) runs the plain
  // layouts. TODO(step 2b): one kernel per operand layout (a_transposed, b_transposed).
  throw NotImplemented("matmul_tc step mma_sync", __FILE__);
  // @end
}

}  // namespace

void matmul_tc(TcMatmulStep step, const TcMatmulArgs& args) {
  m01::validate_tc_matmul_args(args, "matmul_tc");
  tc_parts::require_int_sizes(args, "matmul_tc");
  // TcMatmulArgs' options (layouts, bf16 output, epilogue): wmma and wgmma compute plain
  // fp32 C = A * B and name the first option they are given; the other steps take them all.
  // @step mma_sync
  // TODO(step 2b): the options of TcMatmulArgs, in this order (the tests of each are in
  // module01_basics/tests/test_matmul_tc_options.cpp):
  //   (1) Output and epilogue: store through Epilogue::store4 (matmul_tc_parts.cuh): bias,
  //       pre_gelu, GELU, residual, accumulate into C or bf16 output (c_bf16), in the
  //       order of the header.
  //   (2) b_transposed (B stored N x K): BTile<Cfg, true> -- B's slab as [BN][BK] (like
  //       A's), fragments by plain ldmatrix_x4 instead of .trans.
  //   (3) a_transposed (A stored K x M): ATile<Cfg, true> -- A's slab as [BK][BM],
  //       fragments by ldmatrix_x4_trans. Then set kMmaSyncOptionsWritten = true.
  // Until then, calls that use them report SKIPPED.
  // Hints, one at a time: bash scripts/course.sh hint matmul_tc/mma_sync
  constexpr bool kMmaSyncOptionsWritten = false;
  if (step != TcMatmulStep::mma_sync)
    m01::require_no_options(args, std::string("matmul_tc step ") + step_name_in(m01::kTcMatmulSteps, step));
  else if (m01::uses_options(args) && !kMmaSyncOptionsWritten)
    throw NotImplemented(std::string("matmul_tc step mma_sync with TcMatmulArgs::") + m01::first_option(args) +
                             " (step 2b)",
                         __FILE__);
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

}  // namespace course::exercise
