/// @file batched_gemm_tensor_core.cu
/// @brief The tensor-core steps of the batched-GEMM ladder (module 2), bf16 in, fp32 out:
///   4. tensor_core  mma.sync m16n8k16 + ldmatrix on swizzled tiles, 3-stage cp.async pipeline
///   5. wgmma        Hopper warpgroup MMA reading both operands from shared memory (sm_90a build)
///
/// Predictions are for an H100 SXM at the benchmark shapes S1 = (B=8, H=16, N=1024, d=64)
/// and S2 = (B=4, H=32, N=2048, d=128) (see batched_gemm_fp32.cu). Note the bytes:
/// Q*K^T WRITES the B*H*N*N scores (512 MB fp32 at S1, 2 GiB at S2) and P*V READS them;
/// with d = 64 that is only 2*d = 128 FLOPs per 4-byte score, close to the fp32 ridge
/// point (~20 FLOP/B) and far below the bf16 one (~300 FLOP/B).

#include "batched_gemm_device.cuh"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/device.hpp"
#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::solution::bgemm {
namespace {

/// Store (row, col) and (row, col + 1) of C, masked at the N edge; one float2 store
/// when allowed (`vec2`: 8-byte aligned matrix start and even row stride).
__device__ __forceinline__ void store_pair(float* c_row, int col, int N, float v0, float v1, bool vec2) {
  if (vec2 && col + 1 < N) {
    *reinterpret_cast<float2*>(c_row + col) = make_float2(v0, v1);
    return;
  }
  if (col < N) c_row[col] = v0;
  if (col + 1 < N) c_row[col + 1] = v1;
}

// ============================================================================
// @step tensor_core
// Step 4: tensor_core (bf16 in, fp32 accumulate and out).
// Changes from step 2: the FMAs go to the tensor cores. One warp instruction,
// mma.sync.m16n8k16 (course/cuda/mma_ptx.cuh), multiplies a 16x16 bf16 tile of A by a
// 16x8 tile of op(B) into 16x8 fp32 accumulators: 4096 FLOPs per instruction, ~16x
// the fp32 FMA rate on an H100 (mma.sync, the Ampere instruction; Hopper's wgmma is
// faster still, and is what cuBLAS uses here).
//  * Block tile 128 x 128 (128 x 64 when N <= 64), 8 (4) warps as 2 x 4 (2 x 2), warp
//    tile 64 x 32 = 4 m16 x 4 n8 mma tiles, 64 fp32 accumulators per thread. K slabs
//    of 64 (four k16 steps), 128-byte rows in shared memory.
//  * Shared memory holds the tiles exactly as the fragments want them, rows of 16-byte
//    chunks with the chunk index XOR-swizzled (swizzle_chunk) so that the 8 row
//    addresses of every ldmatrix phase hit 8 different bank groups:
//      A: [BM][BK] (k contiguous), ldmatrix.x4 -> a whole 16x16 A fragment.
//      B, b_transposed (K in Q*K^T, stored N x K): [BN][BK], plain ldmatrix.x4 -> the
//         B fragments of two n8 tiles (B^T's rows ARE the "col" layout mma wants).
//      B, not transposed (V in P*V, stored K x N): [BK][BN], ldmatrix.x4.trans, which
//         transposes each 8x8 block on the way into registers.
//    Every lane's ldmatrix addresses are one precomputed offset plus compile-time
//    immediates (the swizzle key repeats every 8 rows), so the loop computes no addresses.
//  * A 3-stage cp.async pipeline: global -> shared copies of slabs kt+1, kt+2 are in
//    flight (no registers used) while the warps multiply slab kt; the copies of the next
//    slab are issued after the first k16 step's mma, while the tensor cores are busy.
//    The edges come for free: cp.async's src-size operand zero-fills the part of a
//    16-byte chunk past K, M or N. Rows that are not 16-byte aligned (odd K, odd
//    strides) take a scalar copy instead, decided per block.
//  * Epilogue straight from the accumulator registers: each warp store writes 8 rows x
//    32 bytes, whole 32-byte sectors (see the measurement below).
// Prediction: bandwidth, not math, bounds Q*K^T here. At S1 it writes 512 MB of fp32
// scores: >= ~0.18 ms at ~2.9 TB/s, i.e. <= ~95 TFLOP/s whatever the kernel; P*V
// reads 256 MB of bf16 P: <= ~180 TFLOP/s. At S2 (d = 128) the math is heavier per
// byte: ~200 (Q*K^T) and ~300+ (P*V) TFLOP/s. cuBLAS faces the same bytes but uses
// wgmma: expect ~80-100% of it where bytes bound, less where math does (P*V at S2).
// Registers ~120-128 (~160-170 for 128 x 64), 96 KB (72 KB) shared memory per block:
// 2 (3) blocks per SM.
// An ncu profile of P*V at S2 shows ~50% issue utilization and no saturated unit. The
// count behind it (step 5's comment): shared memory, ldmatrix plus cp.async, is busier
// than the tensor cores. Tried (one run each, P*V at S2): 64 x 64 warp tiles (8 warps
// per SM at ~255 registers) 0.69-0.74; BK = 32 with 4-6 stages 0.71-0.79; no gain.
// An earlier version of this step staged C through shared memory in float4 rows; as
// fractions of cublasGemmStridedBatchedEx (bf16) it reached Q*K^T 0.79, 0.72, 0.91 and
// P*V 0.97, 0.70, 0.86 (S1, S2, small) in a development run. With the direct epilogue
// below, Q*K^T / P*V:
// Measured (results: bgemm_{qk,pv}_bf16/solution/tensor_core_strided/B8H16N1024d64): 0.82 / 0.93 of cublas_strided
// Measured (results: bgemm_{qk,pv}_bf16/solution/tensor_core_strided/B4H32N2048d128): 0.76 / 0.69 of cublas_strided
// Measured (results: bgemm_{qk,pv}_bf16/solution/tensor_core_strided/B64H12N128d64): 0.79 / 0.90 of cublas_strided
// At d = 128, step 5 is the answer.
// @end
// ============================================================================
template <int BM_, int BN_, int WarpsM_, int WarpsN_, int Stages_, int MinBlocks_, int BK_>
struct TcConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kStages = Stages_;
  static constexpr int kWarpsM = WarpsM_, kWarpsN = WarpsN_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int WM = BM / kWarpsM, WN = BN / kWarpsN;
  static constexpr int kMTiles = WM / 16, kNTiles = WN / 8;
  static constexpr int kChunksK = BK / 8;  // 16-byte chunks per row of a k-contiguous tile
  static constexpr int kChunksN = BN / 8;  // ... per row of an n-contiguous B tile
  static constexpr int kStageA = BM * BK, kStageB = BN * BK;  // bf16 elements per stage
  static constexpr int kSmemBytes = kStages * (kStageA + kStageB) * static_cast<int>(sizeof(bf16));
  static constexpr int kMinBlocks = MinBlocks_;
  static_assert(WM * kWarpsM == BM && WN * kWarpsN == BN, "warps tile the block");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "a warp tile is whole 16x16 blocks (ldmatrix.x4 loads two n8 tiles)");
  static_assert(BK % 16 == 0 && kStages >= 2, "k16 steps; a pipeline needs two stages");
  static_assert(kChunksK >= 4 && kChunksN >= 8, "ldmatrix offsets assume 16-row steps keep the swizzle key");
};

/// Scalar fallback of a 16-byte chunk copy, for sources that are not 16-byte aligned:
/// `n` (0..8) elements from `src`, zeros after them, one 16-byte shared store.
__device__ __forceinline__ void copy_chunk8_scalar(unsigned char* dst, const bf16* src, int n) {
  const unsigned short* s = reinterpret_cast<const unsigned short*>(src);
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const unsigned lo = 2 * j < n ? s[2 * j] : 0u;
    const unsigned hi = 2 * j + 1 < n ? s[2 * j + 1] : 0u;
    w[j] = lo | (hi << 16);
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ int clamp_count(int valid) { return valid < 0 ? 0 : (valid > 8 ? 8 : valid); }

/// Copies the K-slabs of R rows of a k-contiguous matrix (A, or B stored N x K), one
/// slab per call in order, into swizzled [R][BK] stages. Everything that does not
/// change from slab to slab -- which chunks this thread copies, where they go in a
/// stage, which rows are inside the matrix -- is computed once, in the constructor; a
/// call issues the copies and advances one slab. Thread t copies chunk column
/// t % kChunks of rows t / kChunks + i * kRowStep (four lanes read one row's 64
/// contiguous bytes); kRowStep is a multiple of 8, so all its rows share one swizzle.
/// Out-of-range chunks still issue a copy, with 0 source bytes: it writes the zeros.
template <class Cfg, int R>
struct KContiguousCopier {
  static constexpr int kChunks = Cfg::kChunksK;
  static constexpr int kRowStep = Cfg::kThreads / kChunks;
  static constexpr int kIters = R / kRowStep;
  static_assert(Cfg::kThreads % kChunks == 0 && R % kRowStep == 0 && kRowStep % 8 == 0 && kIters <= 32,
                "a thread keeps one chunk column and one swizzle");
  const bf16* cur;      // this thread's first chunk in the next slab
  std::int64_t step;    // kRowStep rows, in elements
  std::uint32_t dst;    // byte offset of the first chunk inside a stage
  std::uint32_t rows_ok = 0;  // bit i: the row of chunk i is inside the matrix
  int kleft;            // K minus the first k of this thread's chunk in the next slab

  __device__ __forceinline__ KContiguousCopier(const bf16* p, std::int64_t ld, int valid_rows, int K) {
    const int r = threadIdx.x / kChunks, ch = threadIdx.x % kChunks;
    cur = p + r * ld + ch * 8;
    step = kRowStep * ld;
    dst = 2 * (r * Cfg::BK + cuda::swizzle_chunk<kChunks>(r, ch) * 8);
#pragma unroll
    for (int i = 0; i < kIters; ++i)
      if (r + i * kRowStep < valid_rows) rows_ok |= 1u << i;
    kleft = K - ch * 8;
  }
  /// The next slab into the stage at byte offset `stage` of shared memory.
  __device__ __forceinline__ void copy_next(std::uint32_t smem, unsigned char* smem_generic, std::uint32_t stage,
                                            bool vec, const bf16* fallback) {
    const int nk = clamp_count(kleft);  // 8 except in the last slab
    if (vec) {
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int n = (rows_ok >> i) & 1u ? nk : 0;
        cuda::cp_async_16_zfill(smem + stage + dst + 2 * i * kRowStep * Cfg::BK, n > 0 ? cur + i * step : fallback,
                                2 * n);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kIters; ++i)
        copy_chunk8_scalar(smem_generic + stage + dst + 2 * i * kRowStep * Cfg::BK, cur + i * step,
                           (rows_ok >> i) & 1u ? nk : 0);
    }
    cur += Cfg::BK;
    kleft -= Cfg::BK;
  }
};

/// The same for an n-contiguous B (stored K x N) into swizzled [BK][BN] stages. Thread
/// t copies chunk column t % kChunks of slab rows t / kChunks + i * kRowStep.
template <class Cfg>
struct NContiguousCopier {
  static constexpr int kChunks = Cfg::kChunksN;
  static constexpr int kRowStep = Cfg::kThreads / kChunks;
  static constexpr int kIters = Cfg::BK / kRowStep;
  static_assert(Cfg::kThreads % kChunks == 0 && Cfg::BK % kRowStep == 0 && kRowStep % 8 == 0,
                "a thread keeps one chunk column and one swizzle");
  const bf16* cur;           // this thread's first chunk in the next slab
  std::int64_t step, slab;   // kRowStep rows and BK rows, in elements
  std::uint32_t dst;         // byte offset of the first chunk inside a stage
  int ncols;                 // valid elements of the chunk (0..8: the N edge)
  int kleft;                 // K minus the first slab row of this thread in the next slab

  /// p: column 0 of the tile (row 0 of B); cols: valid columns from there.
  __device__ __forceinline__ NContiguousCopier(const bf16* p, std::int64_t ld, int cols, int K) {
    const int kk = threadIdx.x / kChunks, ch = threadIdx.x % kChunks;
    cur = p + kk * ld + ch * 8;
    step = kRowStep * ld;
    slab = Cfg::BK * ld;
    dst = 2 * (kk * Cfg::BN + cuda::swizzle_chunk<kChunks>(kk, ch) * 8);
    ncols = clamp_count(cols - ch * 8);
    kleft = K - kk;
  }
  __device__ __forceinline__ void copy_next(std::uint32_t smem, unsigned char* smem_generic, std::uint32_t stage,
                                            bool vec, const bf16* fallback) {
    if (vec) {
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const int n = kleft > i * kRowStep ? ncols : 0;
        cuda::cp_async_16_zfill(smem + stage + dst + 2 * i * kRowStep * Cfg::BN, n > 0 ? cur + i * step : fallback,
                                2 * n);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kIters; ++i)
        copy_chunk8_scalar(smem_generic + stage + dst + 2 * i * kRowStep * Cfg::BN, cur + i * step,
                           kleft > i * kRowStep ? ncols : 0);
    }
    cur += slab;
    kleft -= Cfg::BK;
  }
};

template <class Cfg, bool kTransB, class OpA, class OpB, class OpC>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    bgemm_tensor_core_kernel(OpA A, OpB B, OpC C, int M, int N, int K, float alpha, int tiles_n) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // Byte offsets in shared memory: kStages A stages [BM][BK], then kStages B stages
  // ([BN][BK] or [BK][BN]). PTX takes 32-bit shared addresses: smem + offset.
  const std::uint32_t smem = cuda::smem_u32(smem_raw);
  constexpr std::uint32_t kStageBytesA = 2 * Cfg::kStageA, kStageBytesB = 2 * Cfg::kStageB;
  constexpr std::uint32_t kOffsetB = Cfg::kStages * kStageBytesA;

  const int tile_m = blockIdx.x / tiles_n, tile_n = blockIdx.x % tiles_n;
  const int h = blockIdx.y, b = blockIdx.z;
  const bf16* a = A.matrix(b, h);
  const bf16* bm = B.matrix(b, h);
  float* c = C.matrix(b, h);
  const std::int64_t lda = A.ld, ldb = B.ld, ldc = C.ld;
  const int m0 = tile_m * Cfg::BM, n0 = tile_n * Cfg::BN;

  // cp.async needs 16-byte aligned sources: matrix start aligned, row stride % 8 == 0.
  const bool vec_a = aligned16(a) && lda % 8 == 0;
  const bool vec_b = aligned16(bm) && ldb % 8 == 0;

  const bf16* a_tile = a + m0 * lda;
  const bf16* b_tile = kTransB ? bm + n0 * ldb : bm + n0;
  const int rows_a = M - m0, cols_b = N - n0;

  KContiguousCopier<Cfg, Cfg::BM> copy_a(a_tile, lda, rows_a, K);
  using BCopier = std::conditional_t<kTransB, KContiguousCopier<Cfg, Cfg::BN>, NContiguousCopier<Cfg>>;
  BCopier copy_b(b_tile, ldb, cols_b, K);
  // Copies the next slab (they are issued strictly in order) into `stage`.
  auto load_next_slab = [&](int stage) {
    copy_a.copy_next(smem, smem_raw, stage * kStageBytesA, vec_a, a);
    copy_b.copy_next(smem, smem_raw, kOffsetB + stage * kStageBytesB, vec_b, bm);
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;

  constexpr int kKSteps = Cfg::BK / 16;  // k16 steps per slab
  // @step tensor_core
  // Byte offsets, inside a stage, of the row this lane hands to each ldmatrix. The mi, p
  // and ks loops only add multiples of 16 rows (A, B^T) or 16 k (B), which leave the
  // swizzle key unchanged, so one offset per ks (A, B^T) or per p (B) serves every
  // fragment and the rest is a compile-time immediate.
  std::uint32_t a_off[kKSteps], bt_off[kKSteps];
  std::uint32_t bn_off[Cfg::kNTiles / 2];
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    // A: lanes 0-15 rows 0-15 at k 0-7, lanes 16-31 the same rows at k 8-15.
    const int ra = warp_m * Cfg::WM + (lane & 15);
    a_off[ks] = 2 * (ra * Cfg::BK + cuda::swizzle_chunk<Cfg::kChunksK>(ra, ks * 2 + (lane >> 4)) * 8);
    // B^T (rows of B are n): matrix i = lane/8 is (n half i/2, k half i%2), so r4 =
    // {b0, b1} of n8 tile 2p, then of 2p+1.
    const int rn = warp_n * Cfg::WN + ((lane >> 4) << 3) + (lane & 7);
    bt_off[ks] = 2 * (rn * Cfg::BK + cuda::swizzle_chunk<Cfg::kChunksK>(rn, ks * 2 + ((lane >> 3) & 1)) * 8);
  }
#pragma unroll
  for (int p = 0; p < Cfg::kNTiles / 2; ++p) {
    // B stored k-major: matrix i = lane/8 is (k half i%2, n chunk i/2); .trans gives the "col" layout.
    const int rk = (((lane >> 3) & 1) << 3) + (lane & 7);
    const int ch = (warp_n * Cfg::WN + p * 16) / 8 + (lane >> 4);
    bn_off[p] = 2 * (rk * Cfg::BN + cuda::swizzle_chunk<Cfg::kChunksN>(rk, ch) * 8);
  }
  // @end

  float acc[Cfg::kMTiles][Cfg::kNTiles][4];
#pragma unroll
  for (int i = 0; i < Cfg::kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  const int k_tiles = (K + Cfg::BK - 1) / Cfg::BK;
  // Prologue: slabs 0 .. kStages-2 in flight. One group per slab, committed even when
  // empty, so that "group g holds slab g" and the wait count below stay exact.
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < k_tiles) load_next_slab(s);
    cuda::cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    // Slab kt has landed (at most kStages-2 newer groups pending) for this thread;
    // the barrier extends that to the whole block, and also guarantees every warp has
    // finished slab kt-1, whose stage the load below overwrites.
    cuda::cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    const int next = kt + Cfg::kStages - 1;

    // @step tensor_core
    const std::uint32_t sa = smem + (kt % Cfg::kStages) * kStageBytesA;
    const std::uint32_t sb = smem + kOffsetB + (kt % Cfg::kStages) * kStageBytesB;
    // @end
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      // @step tensor_core
      std::uint32_t af[Cfg::kMTiles][4];
      std::uint32_t bfr[Cfg::kNTiles][2];
#pragma unroll
      for (int mi = 0; mi < Cfg::kMTiles; ++mi) cuda::ldmatrix_x4(af[mi], sa + a_off[ks] + 2 * mi * 16 * Cfg::BK);
#pragma unroll
      for (int p = 0; p < Cfg::kNTiles / 2; ++p) {
        std::uint32_t r4[4];
        if constexpr (kTransB)
          cuda::ldmatrix_x4(r4, sb + bt_off[ks] + 2 * p * 16 * Cfg::BK);
        else
          cuda::ldmatrix_x4_trans(r4, sb + bn_off[p] + 2 * ks * 16 * Cfg::BN);
        bfr[2 * p][0] = r4[0];
        bfr[2 * p][1] = r4[1];
        bfr[2 * p + 1][0] = r4[2];
        bfr[2 * p + 1][1] = r4[3];
      }
#pragma unroll
      for (int mi = 0; mi < Cfg::kMTiles; ++mi)
#pragma unroll
        for (int nj = 0; nj < Cfg::kNTiles; ++nj) cuda::mma_m16n8k16_bf16_f32(acc[mi][nj], af[mi], bfr[nj]);
      // @end
      if (ks == 0) {
        // Issue the copies of slab kt+kStages-1 (into the stage slab kt-1 used: every
        // warp is past it, by the barrier above) only now, while the tensor cores work
        // through the mma just issued, instead of before them.
        if (next < k_tiles) load_next_slab(next % Cfg::kStages);
        cuda::cp_async_commit();
      }
    }
  }
  cuda::cp_async_wait<0>();  // only empty groups can remain; leave nothing in flight
  // Epilogue straight from the fragments: lane (g, t) writes columns 2t, 2t+1 of rows g
  // and g + 8 of each mma tile; one warp store covers 8 rows x 32 bytes, i.e. whole
  // 32-byte sectors, so nothing is gained by staging C through shared memory first (a
  // staged version, rows of float4, measured 2-7% slower on Q*K^T: an extra barrier and
  // 68 KB of shared memory for the same DRAM traffic).
  const bool vec2 = (reinterpret_cast<std::uintptr_t>(c) & 7u) == 0 && ldc % 2 == 0;
#pragma unroll
  for (int mi = 0; mi < Cfg::kMTiles; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = m0 + warp_m * Cfg::WM + mi * 16 + (lane >> 2) + half * 8;
      if (r >= M) continue;
      float* c_row = c + r * ldc;
#pragma unroll
      for (int nj = 0; nj < Cfg::kNTiles; ++nj) {
        const int col = n0 + warp_n * Cfg::WN + nj * 8 + (lane & 3) * 2;
        store_pair(c_row, col, N, alpha * acc[mi][nj][2 * half], alpha * acc[mi][nj][2 * half + 1], vec2);
      }
    }
}

template <class Cfg, bool kTransB, class OpA, class OpB, class OpC>
void launch_tensor_core_kernel(const OpA& A, const OpB& B, const OpC& C, const Problem& p, const m02::BgemmGrid& g) {
  constexpr auto kernel = bgemm_tensor_core_kernel<Cfg, kTransB, OpA, OpB, OpC>;
  cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes);
  kernel<<<to_dim3(g), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha,
                                                                   static_cast<int>(g.tiles_n));
  COURSE_CHECK_LAUNCH("bgemm_tensor_core_kernel");
}

template <class Cfg, class OpA, class OpB, class OpC>
void launch_tensor_core_cfg(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  const m02::BgemmGrid g = batched_gemm_grid(p.M, p.N, p.batch, p.heads, Cfg::BM, Cfg::BN);
  if (p.trans_b)
    launch_tensor_core_kernel<Cfg, true>(A, B, C, p, g);
  else
    launch_tensor_core_kernel<Cfg, false>(A, B, C, p, g);
}

template <class OpA, class OpB, class OpC>
void launch_tensor_core(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  // @step tensor_core
  // @end
  if (p.N <= 64)
    launch_tensor_core_cfg<TcConfig<128, 64, 2, 2, 3, 3, 64>>(A, B, C, p);  // 128 threads, 72 KB, <= 170 registers
  else
    launch_tensor_core_cfg<TcConfig<128, 128, 2, 4, 3, 2, 64>>(A, B, C, p);  // 256 threads, 96 KB, <= 128 registers
}

// ============================================================================
// @step wgmma
// Step 5: wgmma (bf16 in, fp32 out; Hopper, needs an sm_90a build).
// What limits step 4 at d = 128 is shared memory, not the tensor cores: with 64 x 32
// warp tiles every mma.sync needs its operands loaded into registers by ldmatrix first,
// 6 ldmatrix.x4 (3 KB) per 16 mma per warp, plus the cp.async writes: ~510 clocks of
// shared-memory traffic against ~435 of mma per k16 round of the SM (16 warps). Bigger
// warp tiles would halve the ldmatrix bytes but need ~230 registers, i.e. half the warps.
// Changes from step 4:
//  * wgmma.mma_async: a warpgroup (4 warps) multiplies a 64 x BN tile of A by BN
//    columns of B with ONE instruction that reads both operands straight from shared
//    memory through descriptors. No ldmatrix, no fragment registers; B is read once per
//    warpgroup instead of once per warp. Two warpgroups: block tile 128 x BN, BN = 128
//    (64 when N <= 64: P*V with d = 64), 64 (32) fp32 accumulators per thread.
//  * Shared-memory layout = what the descriptors describe, the 128-byte swizzle: A and
//    K-major B (K of Q*K^T) as rows of 64 bf16 (128 bytes) with 16-byte chunk c of row r
//    at c ^ (r % 8) -- the layout step 4 already used, so its copier is reused; V (P*V,
//    MN-major: n contiguous) as 64-column blocks of [64 k][64 n] rows, swizzled the same
//    way, and wgmma transposes it on the fly (imm-trans-b). Stages 1024-byte aligned.
//  * The cp.async pipeline of step 4 feeds it; a `fence.proxy.async` after each copy
//    wait makes the copies (generic proxy) visible to wgmma (async proxy).
//  * Each slab: fence, 4 wgmma (k16 each), commit, wait -- the wait before the next slab
//    keeps the stage reuse rule of step 4; the other resident block overlaps it.
// Prediction: shared-memory traffic per k16 round drops from ~510 to ~250 clocks, below
// the tensor-core time, so P*V at d = 128 should move from ~0.78 of cuBLAS toward the
// DRAM bound (~0.9); Q*K^T stays bound by writing C (~0.85, as step 4 with its direct
// epilogue). 97 KB of shared memory, <= 128 registers: 2 blocks (16 warps) per SM.
// Q*K^T / P*V as fractions of cublasGemmStridedBatchedEx (bf16), S1, S2, small:
// Measured (results: bgemm_{qk,pv}_bf16/solution/wgmma_strided/B8H16N1024d64): 0.80 / 1.01 of cublas_strided
// Measured (results: bgemm_{qk,pv}_bf16/solution/wgmma_strided/B4H32N2048d128): 0.79 / 0.79 of cublas_strided
// Measured (results: bgemm_{qk,pv}_bf16/solution/wgmma_strided/B64H12N128d64): 0.80 / 0.95 of cublas_strided
// P*V at S2 gains most over step 4 (its numbers above): the shared-memory limit is gone.
// An earlier run had P*V 0.84 and Q*K^T 0.78 at S2: S2 sits at the 0.80 line. In a short
// standalone timing loop P*V at S2 reached 0.94-0.96 and Q*K^T 0.80-0.83; the bench
// keeps each row running far longer (0.2 s by default; the results page's run used
// 0.05 s per row, 3 repetitions), and our kernels lose more to the hot GPU than
// cuBLAS does. Q*K^T at S2 writes 2 GiB of fp32 scores: cuBLAS stores them at ~3.4 TB/s,
// this kernel at ~2.7. Tried and dropped (0.78-0.83, no gain): 2-8 tiles per block as
// one pipelined stream of slabs (one tile's stores overlapping the next one's loads),
// 2 or 4 stages, `.L2::256B` prefetch. What is left is the store path: cuBLAS hands
// its C tile to the TMA engine (cp.async.bulk) -- the next rung, not written.
// @end
// ============================================================================
template <int BN_, int Stages_>
struct WgConfig {
  static constexpr int BM = 128, BN = BN_, BK = 64, kStages = Stages_;
  static constexpr int kThreads = 256;     // two warpgroups, 64 rows of the tile each
  static constexpr int kChunksK = BK / 8;  // 8 chunks of 16 bytes: 128-byte rows
  static constexpr int kChunksN = BN / 8;
  static constexpr std::uint32_t kStageBytesA = BM * BK * 2, kStageBytesB = BN * BK * 2;
  static constexpr int kSmemBytes = kStages * static_cast<int>(kStageBytesA + kStageBytesB) + 1024;  // + alignment
  static constexpr int kMinBlocks = 2;
  static_assert(BN == 64 || BN == 128, "wgmma m64n64k16 or m64n128k16");
};

/// Copies slabs of an n-contiguous B (stored K x N) into the MN-major 128-byte-swizzle
/// layout: BN/64 blocks of [BK][64] bf16 (128-byte rows, one per k), chunk c of row k at
/// c ^ (k % 8). Thread t copies chunk column t % kChunks of slab rows t / kChunks +
/// i * kRowStep; kRowStep is a multiple of 8, so every row it copies shares one swizzle.
template <class Cfg>
struct MnMajorSw128Copier {
  static constexpr int kChunks = Cfg::kChunksN;
  static constexpr int kRowStep = Cfg::kThreads / kChunks;
  static constexpr int kIters = Cfg::BK / kRowStep;
  static constexpr std::uint32_t kBlockBytes = Cfg::BK * 128;  // one 64-column block
  static_assert(Cfg::kThreads % kChunks == 0 && Cfg::BK % kRowStep == 0 && kRowStep % 8 == 0,
                "a thread keeps one chunk column and one swizzle");
  const bf16* cur;
  std::int64_t step, slab;
  std::uint32_t dst;
  int ncols, kleft;

  __device__ __forceinline__ MnMajorSw128Copier(const bf16* p, std::int64_t ld, int cols, int K) {
    const int kk = threadIdx.x / kChunks, ch = threadIdx.x % kChunks;
    cur = p + kk * ld + ch * 8;
    step = kRowStep * ld;
    slab = Cfg::BK * ld;
    dst = (ch / 8) * kBlockBytes + kk * 128 + (((ch % 8) ^ (kk & 7)) * 16);
    ncols = clamp_count(cols - ch * 8);
    kleft = K - kk;
  }
  __device__ __forceinline__ void copy_next(std::uint32_t smem, unsigned char* smem_generic, std::uint32_t stage,
                                            bool vec, const bf16* fallback) {
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int n = kleft > i * kRowStep ? ncols : 0;
      const std::uint32_t off = stage + dst + i * kRowStep * 128;
      if (vec)
        cuda::cp_async_16_zfill(smem + off, n > 0 ? cur + i * step : fallback, 2 * n);
      else
        copy_chunk8_scalar(smem_generic + off, cur + i * step, n);
    }
    cur += slab;
    kleft -= Cfg::BK;
  }
};

template <class Cfg, bool kTransB, class OpA, class OpB, class OpC>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    bgemm_wgmma_kernel(OpA A, OpB B, OpC C, int M, int N, int K, float alpha, int tiles_n) {
  // What the 128-byte swizzle layouts below assume (checked in every compilation pass,
  // also those for GPUs without wgmma, where the body is compiled out).
  static_assert(Cfg::kChunksK == 8, "K-major rows of 8 16-byte chunks: one 128-byte swizzle row per m or n");
  static_assert(Cfg::kChunksN % 8 == 0, "an N-major B is copied as 64-column blocks of 8 chunks");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // The swizzle atoms (8 rows x 128 bytes) must be 1024-byte aligned: round the base up.
  const std::uint32_t raw = cuda::smem_u32(smem_raw);
  const std::uint32_t smem = (raw + 1023u) & ~1023u;
  unsigned char* smem_generic = smem_raw + (smem - raw);
  constexpr std::uint32_t kOffsetB = Cfg::kStages * Cfg::kStageBytesA;

  const int h = blockIdx.y, b = blockIdx.z;
  const bf16* a = A.matrix(b, h);
  const bf16* bm = B.matrix(b, h);
  float* c = C.matrix(b, h);
  const std::int64_t lda = A.ld, ldb = B.ld, ldc = C.ld;
  const bool vec_a = aligned16(a) && lda % 8 == 0;
  const bool vec_b = aligned16(bm) && ldb % 8 == 0;

  const int tile_m = blockIdx.x / tiles_n, tile_n = blockIdx.x % tiles_n;
  const int m0 = tile_m * Cfg::BM, n0 = tile_n * Cfg::BN;
  KContiguousCopier<Cfg, Cfg::BM> copy_a(a + m0 * lda, lda, M - m0, K);
  using BCopier = std::conditional_t<kTransB, KContiguousCopier<Cfg, Cfg::BN>, MnMajorSw128Copier<Cfg>>;
  BCopier copy_b(kTransB ? bm + n0 * ldb : bm + n0, ldb, N - n0, K);
  auto load_next_slab = [&](int stage) {
    copy_a.copy_next(smem, smem_generic, stage * Cfg::kStageBytesA, vec_a, a);
    copy_b.copy_next(smem, smem_generic, kOffsetB + stage * Cfg::kStageBytesB, vec_b, bm);
  };

  const int wg = threadIdx.x / 128;  // warpgroup: rows 64 wg .. 64 wg + 63 of the tile
  float acc[Cfg::BN / 2];
#pragma unroll
  for (int i = 0; i < Cfg::BN / 2; ++i) acc[i] = 0.f;

  const int k_tiles = (K + Cfg::BK - 1) / Cfg::BK;
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < k_tiles) load_next_slab(s);
    cuda::cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cuda::cp_async_wait<Cfg::kStages - 2>();
    cuda::fence_proxy_async_smem();  // my copies -> visible to the async proxy (wgmma) ...
    __syncthreads();                 // ... everyone's; and slab kt-1's wgmmas are all complete
    const int next = kt + Cfg::kStages - 1;
    if (next < k_tiles) load_next_slab(next % Cfg::kStages);
    cuda::cp_async_commit();

    // @step wgmma
    const std::uint32_t sa = smem + (kt % Cfg::kStages) * Cfg::kStageBytesA + wg * 64 * 128;
    const std::uint32_t sb = smem + kOffsetB + (kt % Cfg::kStages) * Cfg::kStageBytesB;
    cuda::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Cfg::BK / 16; ++ks) {
      // K-major tiles: a k16 step is 32 bytes further along the 128-byte rows.
      const std::uint64_t da = cuda::wgmma_desc_sw128(sa + ks * 32, 16, 1024);
      std::uint64_t db;
      if constexpr (kTransB)
        db = cuda::wgmma_desc_sw128(sb + ks * 32, 16, 1024);
      else  // MN-major: a k16 step is 16 rows of 128 bytes further; lbo = next 64 columns
        db = cuda::wgmma_desc_sw128(sb + ks * 16 * 128, MnMajorSw128Copier<Cfg>::kBlockBytes, 1024);
      if constexpr (Cfg::BN == 128)
        cuda::wgmma_m64n128k16_bf16_f32<!kTransB>(acc, da, db);
      else
        cuda::wgmma_m64n64k16_bf16_f32<!kTransB>(acc, da, db);
    }
    cuda::wgmma_commit();
    cuda::wgmma_wait<0>();
    // @end
  }
  cuda::cp_async_wait<0>();

  // Epilogue straight from the accumulators (per warp of the group, the layout of
  // mma.sync's fragments): one warp store covers 8 rows x 32 bytes, whole sectors.
  const int lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x / 32) % 4;
  const bool vec2 = (reinterpret_cast<std::uintptr_t>(c) & 7u) == 0 && ldc % 2 == 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = m0 + wg * 64 + warp_in_wg * 16 + (lane >> 2) + half * 8;
    if (r >= M) continue;
    float* c_row = c + r * ldc;
#pragma unroll
    for (int j = 0; j < Cfg::BN / 8; ++j) {
      const int col = n0 + j * 8 + (lane & 3) * 2;
      store_pair(c_row, col, N, alpha * acc[4 * j + 2 * half], alpha * acc[4 * j + 2 * half + 1], vec2);
    }
  }
#else
  (void)A, (void)B, (void)C, (void)M, (void)N, (void)K, (void)alpha, (void)tiles_n;
  __trap();  // never launched: the host checks cuda::sm90a_code_available() first
#endif
}

template <class Cfg, class OpA, class OpB, class OpC>
void launch_wgmma_cfg(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  const m02::BgemmGrid g = batched_gemm_grid(p.M, p.N, p.batch, p.heads, Cfg::BM, Cfg::BN);
  const auto launch = [&](auto trans_b) {
    constexpr auto kernel = bgemm_wgmma_kernel<Cfg, decltype(trans_b)::value, OpA, OpB, OpC>;
    cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes);
    kernel<<<to_dim3(g), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha,
                                                                     static_cast<int>(g.tiles_n));
  };
  if (p.trans_b) launch(std::true_type{});
  else launch(std::false_type{});
  COURSE_CHECK_LAUNCH("bgemm_wgmma_kernel");
}

template <class OpA, class OpB, class OpC>
void launch_wgmma(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  // @step wgmma
  // @end
  if (!cuda::sm90a_code_available())
    throw Unsupported("batched_gemm step wgmma",
                      "a Hopper GPU (compute capability 9.0) and a build for sm_90a "
                      "(CMAKE_CUDA_ARCHITECTURES=90a; wgmma is not in plain sm_90)");
  if (p.N <= 64)
    launch_wgmma_cfg<WgConfig<64, 3>>(A, B, C, p);  // 3 x 24 KB stages; ~108 registers: 2 blocks per SM
  else
    launch_wgmma_cfg<WgConfig<128, 3>>(A, B, C, p);  // 3 x 32 KB stages: 2 blocks per SM
}

}  // namespace

template <class OpA, class OpB, class OpC>
void run_bf16_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  // validate_step_options() already rejected this: these kernels read A stored M x K only.
  require_arg(!p.trans_a, "batched_gemm", "a_transposed", p.trans_a, "is supported by the fp32 steps only");
  switch (step) {
    case BgemmStep::tensor_core: launch_tensor_core(A, B, C, p); return;
    case BgemmStep::wgmma: launch_wgmma(A, B, C, p); return;
    default: break;
  }
  // validate_step_input() already rejected this; keep the function total anyway.
  require_arg(false, "batched_gemm", "step", static_cast<int>(step), "has no kernel for this input type");
}

COURSE_BGEMM_INSTANTIATE(run_bf16_step, bf16)

}  // namespace course::solution::bgemm
