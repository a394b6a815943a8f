/// @file batched_gemm_tensor_core.cu
/// @brief YOUR tensor-core steps of the batched GEMM (module 2), bf16 in, fp32 out:
///   tensor_core  mma.sync m16n8k16 + ldmatrix on swizzled tiles, 3-stage cp.async pipeline
///   wgmma        Hopper warpgroup MMA reading both operands from shared memory (sm_90a build)
///
/// Given: the tile configurations, the cp.async copiers that write the swizzled layouts
/// (edges zero-filled, a scalar path for unaligned rows), the pipelines, the epilogues
/// straight from the accumulators, the launches. The idea of each step is the TODO:
/// tensor_core, the ldmatrix + mma.sync inner loop; wgmma, the descriptors and the
/// wgmma issue and wait. The PTX wrappers are common/include/course/cuda/mma_ptx.cuh (each
/// comment there names its instruction and register layout); module 1's matmul_tc is the
/// same inner loop on one matrix. The solution's comments
/// (solutions/module02_batched_gemm/batched_gemm_tensor_core.cu) carry the predictions.
/// Tests:  ctest --preset default -L exercise -R 'Bgemm.*(tensor_core|wgmma)'

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

namespace course::exercise::bgemm {
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
// Step tensor_core (bf16 in, fp32 accumulate and out).
// Block tile 128 x 128 (128 x 64 when N <= 64), 8 (4) warps as 2 x 4 (2 x 2), warp tile
// 64 x 32 = kMTiles m16 x kNTiles n8 mma tiles, 64 fp32 accumulators per thread
// (acc[mi][nj][0..3], the mma "D" layout the epilogue stores). K slabs of 64 = four
// k16 steps, rows of 128 bytes, 16-byte chunk c of row r stored at chunk
// swizzle_chunk(r, c), so the 8 row addresses of every ldmatrix phase hit 8 bank groups:
//   A        [BM][BK] (k contiguous): ldmatrix_x4 -> one 16x16 A fragment;
//   B^T      (B stored N x K, the K of Q*K^T) [BN][BK]: ldmatrix_x4 -> the b fragments
//            of two n8 tiles (B^T's rows are the "col" layout mma wants);
//   B        (stored K x N, the V of P*V) [BK][BN]: ldmatrix_x4_trans, which transposes
//            each 8x8 block on the way into registers.
// TODO: a-c in the kernel and above the launch.
// Hints, one at a time: bash scripts/course.sh hint batched_gemm/tensor_core
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
  // TODO(tensor_core a): the byte offset, inside a stage, of the row this lane hands to
  //   each ldmatrix, computed once here (the loops below then add only multiples of 16
  //   rows or 16 k, which keep the swizzle key, so those offsets are compile-time):
  //     A [BM][BK], k16 step ks: row warp_m * WM + (lane & 15), chunk 2 ks + (lane >> 4),
  //       byte 2 * (row * BK + cuda::swizzle_chunk<Cfg::kChunksK>(row, chunk) * 8);
  //     B stored N x K (kTransB) [BN][BK]: ldmatrix_x4 gives the b fragments of two n8
  //       tiles; matrix i = lane / 8 is (n half i / 2, k half i % 2);
  //     B stored K x N [BK][BN]: ldmatrix_x4_trans; matrix i = lane / 8 is (k half i % 2,
  //       n chunk i / 2), per pair p of n8 tiles (chunks swizzled with Cfg::kChunksN).
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
    // TODO(tensor_core b): the addresses of slab kt's stage, kt % Cfg::kStages: A at byte
    //   smem + stage * kStageBytesA, B at smem + kOffsetB + stage * kStageBytesB.
    // @end
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      // @step tensor_core
      // TODO(tensor_core b): this k16 step of the stage: one cuda::ldmatrix_x4 per m16 tile
      //   of A, one ldmatrix_x4 (kTransB) or ldmatrix_x4_trans per pair of n8 tiles of B,
      //   then kMTiles x kNTiles cuda::mma_m16n8k16_bf16_f32 into acc[mi][nj].
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
  constexpr bool kTensorCoreWritten = false;  // TODO(tensor_core c): true once a and b are written
  if (!kTensorCoreWritten) throw NotImplemented("batched_gemm step tensor_core", __FILE__);
  // @end
  if (p.N <= 64)
    launch_tensor_core_cfg<TcConfig<128, 64, 2, 2, 3, 3, 64>>(A, B, C, p);  // 128 threads, 72 KB, <= 170 registers
  else
    launch_tensor_core_cfg<TcConfig<128, 128, 2, 4, 3, 2, 64>>(A, B, C, p);  // 256 threads, 96 KB, <= 128 registers
}

// ============================================================================
// @step wgmma
// Step wgmma (bf16 in, fp32 out; Hopper, needs an sm_90a build).
// A warpgroup (4 warps) multiplies its 64 rows of the A tile by BN columns of B with ONE
// instruction per k16 step that reads both operands straight from shared memory through
// 64-bit descriptors: no ldmatrix, no fragment registers. Two warpgroups per block: tile
// 128 x BN (BN = 128, or 64 when N <= 64), BN / 2 fp32 accumulators per thread.
// Shared memory already holds what the descriptors describe, the 128-byte swizzle: A and
// a K-major B as rows of 64 bf16 (128 bytes), 8-row atoms of 1024 bytes; an N-major B
// (V of P*V) as [64 k][64 n] blocks, which wgmma transposes on the fly (its
// template flag). A `fence.proxy.async` after each copy wait makes the cp.async writes
// visible to wgmma. Read the wgmma_desc_sw128 comment in mma_ptx.cuh before you start.
// TODO: a-c in the kernel and above the launch.
// Hints, one at a time: bash scripts/course.sh hint batched_gemm/wgmma
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
    // TODO(wgmma a): the shared-memory descriptors of this slab (stage kt % Cfg::kStages):
    //   A at smem + stage * Cfg::kStageBytesA + this warpgroup's 64 rows (wg * 64 * 128
    //   bytes), B at smem + kOffsetB + stage * Cfg::kStageBytesB; one pair per k16 step,
    //   built with cuda::wgmma_desc_sw128(address, leading byte offset, stride byte offset).
    // TODO(wgmma b): cuda::wgmma_fence(), then per k16 step one
    //   cuda::wgmma_m64n128k16_bf16_f32<!kTransB> (BN == 128) or ..._m64n64k16_... (BN == 64)
    //   into acc, then cuda::wgmma_commit() and cuda::wgmma_wait<0>() before the next slab
    //   may overwrite a stage.
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
  constexpr bool kWgmmaWritten = false;  // TODO(wgmma c): true once a and b are written
  if (!kWgmmaWritten) throw NotImplemented("batched_gemm step wgmma", __FILE__);
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

}  // namespace course::exercise::bgemm
