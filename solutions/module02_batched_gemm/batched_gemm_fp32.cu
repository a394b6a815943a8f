/// @file batched_gemm_fp32.cu
/// @brief The upper fp32 steps of the batched-GEMM ladder (module 2; step 1, smem_tiled,
/// is in batched_gemm.cu):
///   2. register_blocked  128x128 block tile, 8x8 outputs per thread, float4 loads, double buffering
///   3. warp_tiled        64x32 warp tiles, conflict-free fragments, 4-stage cp.async pipeline
///
/// Predictions are for an H100 SXM (132 SMs; fp32 FMA peak ~67 TFLOP/s at 1.98 GHz, ~60
/// at the clocks it sustains; HBM3 ~3.0 TB/s measured copy) at the benchmark shapes:
///   S1 = (B=8, H=16, N=1024, d=64):  Q*K^T: M=N=1024, K=64  | P*V: M=K=1024, N=64
///   S2 = (B=4, H=32, N=2048, d=128): Q*K^T: M=N=2048, K=128 | P*V: M=K=2048, N=128
/// Both products are 2*B*H*N*N*d FLOPs: 17.2 GFLOP (S1), 137 GFLOP (S2).

#include "batched_gemm_device.cuh"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/error.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::solution::bgemm {
namespace {

// ============================================================================
// @step register_blocked
// Step 2: register_blocked (fp32).
// Changes from step 1 (smem_tiled, batched_gemm.cu):
//  * Block tile 128 x 128 (128 x 64 when N <= 64, e.g. P*V with d = 64, so half the
//    block is not wasted), K slabs of 16, 256 (128) threads, each computing an 8 x 8
//    sub-tile of C held in 64 registers. Per k, a thread reads 8 values of A and 8 of
//    B from shared memory (4 float4 loads) and does 64 FMAs: 16 FMAs per shared load
//    instead of 0.5. Its rows are {4ty..4ty+3} and {BM/2 + 4ty..}, its columns
//    {4tx..4tx+3} and {BN/2 + 4tx..}: the float4 reads of a quarter-warp then cover 128
//    contiguous bytes (no bank conflicts), and C is stored as float4 rows.
//  * Both tiles are stored k-major in shared memory (As[k][m], Bs[k][n]) so those
//    reads are contiguous. A (and B when b_transposed) arrives k-contiguous from
//    global memory and is transposed on the store; a warp covers 32 consecutive rows,
//    so the transposed store is conflict-free. A stored K x M (a_transposed) arrives
//    m-contiguous, already in As's order: it takes B's loader (NContiguousTile), a
//    template choice like b_transposed's, so no transpose is materialized anywhere.
//  * float4 global loads where the matrix start is 16-byte aligned and its row stride a
//    multiple of 4; decided per block at run time (a uniform branch), element-wise
//    loads with bounds checks otherwise and at the K / M / N edges.
//  * Double buffering: the next slab is loaded into registers while the current one
//    is multiplied, then stored to the other shared buffer: one barrier per slab.
// Prediction: FMA-issue bound. ~35-45 TFLOP/s where K is long (P*V, ~80-90% of
// cuBLAS); Q*K^T at S1 has only 4 slabs per tile, so the unhidden first load and
// the 64 KB epilogue per block weigh more: ~30-38 TFLOP/s, ~80-90% of cuBLAS.
// Registers ~128/thread (2 blocks of 256 threads per SM). Pointer-array = strided
// within noise: one extra dependent load per operand per block of ~0.5 us of work.
// Q*K^T / P*V as fractions of cublasGemmStridedBatchedEx (fp32, no TF32), S1, S2, small:
// Measured (results: bgemm_{qk,pv}_f32/solution/register_blocked_strided/B8H16N1024d64): 0.99 / 0.80 of cublas_strided
// Measured (results: bgemm_{qk,pv}_f32/solution/register_blocked_strided/B4H32N2048d128): 0.83 / 0.82 of cublas_strided
// Measured (results: bgemm_{qk,pv}_f32/solution/register_blocked_strided/B64H12N128d64): 1.03 / 0.89 of cublas_strided
// The pointer-array rows land within a few percent of these (the results page has both).
// Misses the 0.85 target on P*V at S1 and S2; Q*K^T at S2 sits at the line (short of it
// in an earlier run): see module02's README.
// @end
// ============================================================================
template <int BM_, int BN_, int MinBlocks_, int BK_ = 16>
struct RbConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = 8, TN = 8;
  static constexpr int kThreadsN = BN / TN, kThreadsM = BM / TM;
  static constexpr int kThreads = kThreadsN * kThreadsM;
  static constexpr int kMinBlocks = MinBlocks_;  // resident blocks per SM we ask registers for
  static_assert(TM == 8 && TN == 8, "the split 4 + 4 row/column ownership assumes 8 x 8 per thread");
  static_assert((BM * BK / 4) % kThreads == 0 && (BN * BK / 4) % kThreads == 0, "whole float4 chunks per thread");
  static_assert(BM % 32 == 0 && BN % 32 == 0, "a warp covers 32 consecutive rows in the transposed store");
};

/// Four consecutive elements (row, col..col+3) of a row-major matrix with `rows` x
/// `cols` valid elements; zeros outside. One float4 load when `vec` (16-byte aligned
/// start, row stride % 4 == 0, col % 4 == 0) and the whole chunk is inside.
__device__ __forceinline__ float4 load_chunk4(const float* p, std::int64_t ld, int row, int col, int rows, int cols,
                                              bool vec) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (row >= rows) return v;
  const float* src = p + row * ld + col;
  if (vec && col + 3 < cols) return *reinterpret_cast<const float4*>(src);
  if (col < cols) v.x = src[0];
  if (col + 1 < cols) v.y = src[1];
  if (col + 2 < cols) v.z = src[2];
  if (col + 3 < cols) v.w = src[3];
  return v;
}

/// A tile of R rows x BK columns from a k-contiguous matrix (A stored M x K, or B stored N x K),
/// stored transposed into S[BK][R]. Chunk q of the tile: row q % R, k-chunk q / R.
template <int R, int BK, int kThreads>
struct KContiguousTile {
  static constexpr int kPerThread = R * BK / 4 / kThreads;
  float4 reg[kPerThread];
  /// p: row 0 of the tile; rows: valid rows from there; k0: first k of the slab.
  __device__ __forceinline__ void load(const float* p, std::int64_t ld, int rows, int k0, int K, bool vec) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = threadIdx.x + i * kThreads;
      reg[i] = load_chunk4(p, ld, q % R, k0 + (q / R) * 4, rows, K, vec);
    }
  }
  __device__ __forceinline__ void store(float (*S)[R]) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = threadIdx.x + i * kThreads;
      const int r = q % R, k = (q / R) * 4;
      S[k + 0][r] = reg[i].x;
      S[k + 1][r] = reg[i].y;
      S[k + 2][r] = reg[i].z;
      S[k + 3][r] = reg[i].w;
    }
  }
};

/// A tile of BK rows (k) x Cn columns from an n- (or m-) contiguous matrix (B stored
/// K x N, or A stored K x M), stored as is into S[BK][Cn]. Chunk q: row q / (Cn/4),
/// column chunk q % (Cn/4).
template <int Cn, int BK, int kThreads>
struct NContiguousTile {
  static constexpr int kPerThread = Cn * BK / 4 / kThreads;
  static constexpr int kChunksPerRow = Cn / 4;
  float4 reg[kPerThread];
  /// p: column 0 of the tile (row 0 of the matrix); cols: valid columns from there.
  __device__ __forceinline__ void load(const float* p, std::int64_t ld, int cols, int k0, int K, bool vec) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = threadIdx.x + i * kThreads;
      reg[i] = load_chunk4(p, ld, k0 + q / kChunksPerRow, (q % kChunksPerRow) * 4, K, cols, vec);
    }
  }
  __device__ __forceinline__ void store(float (*S)[Cn]) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = threadIdx.x + i * kThreads;
      *reinterpret_cast<float4*>(&S[q / kChunksPerRow][(q % kChunksPerRow) * 4]) = reg[i];
    }
  }
};

/// Store (row, col..col+3) of C, masked at the N edge; one float4 store when allowed.
__device__ __forceinline__ void store_chunk4(float* c_row, int col, int N, float4 v, bool vec) {
  float* dst = c_row + col;
  if (vec && col + 3 < N) {
    *reinterpret_cast<float4*>(dst) = v;
    return;
  }
  if (col < N) dst[0] = v.x;
  if (col + 1 < N) dst[1] = v.y;
  if (col + 2 < N) dst[2] = v.z;
  if (col + 3 < N) dst[3] = v.w;
}

template <class Cfg, bool kTransA, bool kTransB, class OpA, class OpB, class OpC>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    bgemm_register_blocked_kernel(OpA A, OpB B, OpC C, int M, int N, int K, float alpha, int tiles_n) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, kThreads = Cfg::kThreads;
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];

  const int tile_m = blockIdx.x / tiles_n, tile_n = blockIdx.x % tiles_n;
  const int h = blockIdx.y, b = blockIdx.z;
  const float* a = A.matrix(b, h);
  const float* bm = B.matrix(b, h);
  float* c = C.matrix(b, h);
  const std::int64_t lda = A.ld, ldb = B.ld, ldc = C.ld;
  const int m0 = tile_m * BM, n0 = tile_n * BN;

  // Vector paths, decided once per block (uniform: no divergence).
  const bool vec_a = aligned16(a) && lda % 4 == 0;
  const bool vec_b = aligned16(bm) && ldb % 4 == 0;
  const bool vec_c = aligned16(c) && ldc % 4 == 0;

  const float* a_tile = kTransA ? a + m0 : a + m0 * lda;    // column m0 (K x M) or row m0 (M x K)
  const float* b_tile = kTransB ? bm + n0 * ldb : bm + n0;  // row n0 (N x K) or column n0 (K x N)
  const int rows_a = M - m0, cols_b = N - n0;

  using ATile = std::conditional_t<kTransA, NContiguousTile<BM, BK, kThreads>, KContiguousTile<BM, BK, kThreads>>;
  ATile load_a;
  using BTile = std::conditional_t<kTransB, KContiguousTile<BN, BK, kThreads>, NContiguousTile<BN, BK, kThreads>>;
  BTile load_b;

  const int tx = threadIdx.x % Cfg::kThreadsN, ty = threadIdx.x / Cfg::kThreadsN;
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  const int k_tiles = (K + BK - 1) / BK;
  load_a.load(a_tile, lda, rows_a, 0, K, vec_a);
  load_b.load(b_tile, ldb, cols_b, 0, K, vec_b);
  load_a.store(As[0]);
  load_b.store(Bs[0]);
  __syncthreads();

  for (int kt = 0; kt < k_tiles; ++kt) {
    // @step register_blocked
    const int cur = kt & 1;
    const bool has_next = kt + 1 < k_tiles;
    if (has_next) {  // global loads in flight while we multiply
      load_a.load(a_tile, lda, rows_a, (kt + 1) * BK, K, vec_a);
      load_b.load(b_tile, ldb, cols_b, (kt + 1) * BK, K, vec_b);
    }
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][BM / 2 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][BN / 2 + tx * 4]);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (has_next) {
      // The other buffer was last read in iteration kt-1, before the barrier that
      // ended it: safe to overwrite. The barrier below publishes it for kt+1.
      load_a.store(As[cur ^ 1]);
      load_b.store(Bs[cur ^ 1]);
    }
    __syncthreads();
    // @end
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = m0 + (i < 4 ? ty * 4 + i : BM / 2 + ty * 4 + (i - 4));
    if (row >= M) continue;
    float* c_row = c + row * ldc;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col = n0 + half * (BN / 2) + tx * 4;
      const float4 v = make_float4(alpha * acc[i][half * 4 + 0], alpha * acc[i][half * 4 + 1],
                                   alpha * acc[i][half * 4 + 2], alpha * acc[i][half * 4 + 3]);
      store_chunk4(c_row, col, N, v, vec_c);
    }
  }
}

template <class Cfg, class OpA, class OpB, class OpC>
void launch_register_blocked_cfg(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  const m02::BgemmGrid g = batched_gemm_grid(p.M, p.N, p.batch, p.heads, Cfg::BM, Cfg::BN);
  const int tiles_n = static_cast<int>(g.tiles_n);
  with_transposes(p, [&](auto trans_a, auto trans_b) {
    bgemm_register_blocked_kernel<Cfg, decltype(trans_a)::value, decltype(trans_b)::value>
        <<<to_dim3(g), Cfg::kThreads, 0, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha, tiles_n);
  });
  COURSE_CHECK_LAUNCH("bgemm_register_blocked_kernel");
}

template <class OpA, class OpB, class OpC>
void launch_register_blocked(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  // @step register_blocked (the exercise's "written" flag; nothing here)
  // @end
  if (p.N <= 64)
    launch_register_blocked_cfg<RbConfig<128, 64, 3>>(A, B, C, p);  // 128 threads, <= 170 registers
  else
    launch_register_blocked_cfg<RbConfig<128, 128, 2>>(A, B, C, p);  // 256 threads, <= 128 registers
}

// ============================================================================
// @step warp_tiled
// Step 3: warp_tiled (fp32) -- module 1's fastest SGEMM design, batched.
// Changes from step 2 (the same 8 x 8 outputs per thread, organised differently):
//  * Warp tiles. The block tile is cut into WM x WN = 64 x 32 warp tiles; inside one,
//    8 x 4 lanes own 4 x 4 outputs in each of 2 x 2 sub-tiles of 32 x 16. For one k,
//    the A float4s a warp reads are 8 distinct, 128 contiguous bytes and the B float4s
//    4 distinct, 64 bytes: every LDS.128 is a single conflict-free wavefront, 4
//    wavefronts per 64 FFMAs (step 2's 4 + 4 split rows spread each read over more).
//  * cp.async instead of registers: global -> shared copies run STAGES - 1 slabs ahead
//    of the math without holding registers (step 2 kept the next slab in 16 registers,
//    which is what capped it at 128 registers with little slack). Operands whose rows
//    are k-contiguous (A, and B stored N x K for Q*K^T) are copied one 4-byte element
//    per cp.async so they land transposed, As[k][m]; the pitch BM + 4 spreads the 4
//    rows x 8 k a warp copies over 32 banks. B stored K x N (P*V) is copied as 16-byte
//    vectors when its start and row stride allow it (decided per block); so is A stored
//    K x M (a_transposed, dV = P^T dO): it takes B's copier, a template choice.
//  * BK = 16 slabs, 4 stages deep; edges are zero-filled by the copies themselves
//    (src-size 0), so the math never tests bounds.
// Prediction: FFMA-issue bound like module 1's warp_tiled (0.90 of cuBLAS at 4096^3):
// ~0.85-0.95 of cuBLAS on P*V (long K) at both shapes. Q*K^T has K = 64 / 128, only
// 2 / 4 slabs per tile, so prologue and epilogue weigh more: ~0.85-0.95 at d = 128,
// about step 2 (already ~cuBLAS) at d = 64. Registers <= 128 (2 blocks of 256 threads,
// or 4 of 128 for the BN = 64 tile), 39-68 KB of shared memory per block.
// Tuning (H200, one run each, fraction of cuBLAS): BK = 32 with 2 stages (module 1's
// choice) gave P*V 0.83 at S2; BK = 16 with 4 stages 0.86 (a barrier per 16 k, but more
// slabs in flight); 3-6 stages, 32 x 64 warp tiles or 64 x 128 block tiles all landed
// at 0.86-0.87. For N <= 64 (P*V, d = 64): a 128 x 64 tile, 3 stages, `.L2::256B`
// prefetch on the copies: 1.01 vs 0.85 without (P's rows are streamed exactly once).
// Q*K^T / P*V as fractions of cublasGemmStridedBatchedEx (fp32, no TF32), S1, S2, small:
// Measured (results: bgemm_{qk,pv}_f32/solution/warp_tiled_strided/B8H16N1024d64): 1.09 / 1.09 of cublas_strided
// Measured (results: bgemm_{qk,pv}_f32/solution/warp_tiled_strided/B4H32N2048d128): 0.96 / 0.91 of cublas_strided
// Measured (results: bgemm_{qk,pv}_f32/solution/warp_tiled_strided/B64H12N128d64): 1.08 / 0.91 of cublas_strided
// @end
// ============================================================================
template <int BM_, int BN_, int BK_, int WM_, int WN_, int Stages_, int L2Prefetch_ = 0>
struct WtConfig {
  static constexpr int kL2Prefetch = L2Prefetch_;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, kStages = Stages_;
  static constexpr int kWarpsM = BM / WM, kWarpsN = BN / WN;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kLanesN = WN / 8;  // lanes along N inside a warp (each owns 2 x 4 columns)
  static constexpr int kPitchA = BM + 4, kPitchB = BN + 4;  // padded rows of the k-major tiles
  static constexpr int kStageA = BK * kPitchA, kStageB = BK * kPitchB;  // floats per stage
  static constexpr int kSmemBytes = kStages * (kStageA + kStageB) * static_cast<int>(sizeof(float));
  static constexpr int kMinBlocks = 512 / kThreads;  // 16 warps per SM: <= 128 registers
  static_assert((WM / 8) * kLanesN == 32, "a warp tile holds exactly 32 lanes of 8 x 8 outputs");
  static_assert(BM % WM == 0 && BN % WN == 0 && BK % 8 == 0 && kStages >= 2, "whole warp tiles, k in groups of 8");
  static_assert(BM % (kThreads / 8) == 0 && BN % (kThreads / 8) == 0, "k-contiguous copies: whole row groups");
  static_assert((BK * BN / 4) % kThreads == 0 && kThreads % BN == 0, "n-contiguous copies: whole chunks");
  static_assert((BK * BM / 4) % kThreads == 0 && kThreads % BM == 0, "m-contiguous copies (A^T): whole chunks");
};

/// Copies slabs of a k-contiguous operand (R rows, row stride ld, k along the row) into
/// k-major stages S[k][r] of pitch R + 4, one element per cp.async. Thread t copies k
/// offsets t % 8 + 8g of rows t / 8 + j * (threads / 8): a warp reads 4 rows x 32
/// contiguous bytes per copy instruction. Per-row source pointers and byte counts
/// (4, or 0 past the last valid row) are computed once; copy_next advances one slab.
template <int R, int BK, int kThreads, int kL2Prefetch>
struct KMajorCopierF32 {
  static constexpr int kRowStep = kThreads / 8, kRows = R / kRowStep, kGroups = BK / 8;
  static constexpr int kPitch = R + 4;
  const float* src[kRows];
  int bytes[kRows];
  int k_first;  // k of this thread's first element in the next slab
  std::uint32_t dst;

  /// p: row 0 of the tile; valid_rows: rows of the matrix from there (>= 1). The last
  /// argument (vector path allowed) keeps the signature of NMajorCopierF32: unused.
  __device__ __forceinline__ KMajorCopierF32(const float* p, std::int64_t ld, int valid_rows, bool) {
    const int r0 = threadIdx.x / 8;
    k_first = threadIdx.x % 8;
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int r = r0 + j * kRowStep;
      bytes[j] = r < valid_rows ? 4 : 0;
      src[j] = p + (r < valid_rows ? r : 0) * ld + k_first;  // a clamped row: never read when bytes = 0
    }
    dst = 4 * (k_first * kPitch + r0);
  }
  /// `stage`: byte address of the stage; check_k: the slab reaches past K.
  __device__ __forceinline__ void copy_next(std::uint32_t stage, int K, bool check_k) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const bool k_ok = !check_k || k_first + 8 * g < K;
#pragma unroll
      for (int j = 0; j < kRows; ++j)
        cuda::cp_async_4_zfill<kL2Prefetch>(stage + dst + 4 * (8 * g * kPitch + j * kRowStep), src[j] + 8 * g,
                               k_ok ? bytes[j] : 0);
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) src[j] += BK;
    k_first += BK;
  }
};

/// Copies slabs of an n-contiguous operand (B stored K x N, P*V's V; or A stored K x M,
/// with BN = BM) into stages S[k][n] of pitch BN + 4. Vector path: 16-byte copies, thread t owns columns
/// 4 (t % (BN/4)) .. + 3 of rows t / (BN/4) + i * step; a chunk cut by the N edge goes
/// as 4-byte pieces (a short 16-byte copy would still be a 16-byte read). Scalar path
/// (start or row stride not 16-byte aligned): one element per copy.
template <int BN, int BK, int kThreads, int kL2Prefetch>
struct NMajorCopierF32 {
  static constexpr int kPitch = BN + 4;
  static constexpr int kVecPer = BK * BN / 4 / kThreads, kVecRowStep = kThreads / (BN / 4);
  static constexpr int kScalarPer = BK * BN / kThreads, kScalarRowStep = kThreads / BN;
  const float* src;  // this thread's first element in the next slab
  std::int64_t ld;
  int row, col, valid_cols;  // valid_cols: columns of the matrix from `col` on
  int k_first;
  bool vec;

  __device__ __forceinline__ NMajorCopierF32(const float* p, std::int64_t ld_, int cols, bool vec_) : ld(ld_), vec(vec_) {
    row = vec ? threadIdx.x / (BN / 4) : threadIdx.x / BN;
    col = vec ? (threadIdx.x % (BN / 4)) * 4 : threadIdx.x % BN;
    valid_cols = cols - col;
    src = p + row * ld + col;
    k_first = row;
  }
  __device__ __forceinline__ void copy_next(std::uint32_t stage, int K, bool check_k) {
    if (vec) {
#pragma unroll
      for (int i = 0; i < kVecPer; ++i) {
        const bool k_ok = !check_k || k_first + i * kVecRowStep < K;
        const float* s = src + i * kVecRowStep * ld;
        const std::uint32_t d = stage + 4 * ((row + i * kVecRowStep) * kPitch + col);
        if (valid_cols >= 4 || valid_cols <= 0) {
          cuda::cp_async_16_zfill<kL2Prefetch>(d, s, k_ok && valid_cols >= 4 ? 16 : 0);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) cuda::cp_async_4_zfill(d + 4 * q, s + q, k_ok && q < valid_cols ? 4 : 0);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kScalarPer; ++i) {
        const bool k_ok = !check_k || k_first + i * kScalarRowStep < K;
        cuda::cp_async_4_zfill(stage + 4 * ((row + i * kScalarRowStep) * kPitch + col),
                               src + i * kScalarRowStep * ld, k_ok && valid_cols > 0 ? 4 : 0);
      }
    }
    src += BK * ld;
    k_first += BK;
  }
};

template <class Cfg, bool kTransA, bool kTransB, class OpA, class OpB, class OpC>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    bgemm_warp_tiled_kernel(OpA A, OpB B, OpC C, int M, int N, int K, float alpha, int tiles_n) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, WM = Cfg::WM, WN = Cfg::WN, kStages = Cfg::kStages;
  extern __shared__ __align__(16) float smem_f32[];  // kStages A stages, then kStages B stages
  const std::uint32_t smem = cuda::smem_u32(smem_f32);
  constexpr std::uint32_t kStageBytesA = 4 * Cfg::kStageA, kStageBytesB = 4 * Cfg::kStageB;
  constexpr std::uint32_t kOffsetB = kStages * kStageBytesA;

  const int tile_m = blockIdx.x / tiles_n, tile_n = blockIdx.x % tiles_n;
  const int h = blockIdx.y, b = blockIdx.z;
  const float* a = A.matrix(b, h);
  const float* bm = B.matrix(b, h);
  float* c = C.matrix(b, h);
  const std::int64_t lda = A.ld, ldb = B.ld, ldc = C.ld;
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const bool vec_a = kTransA && aligned16(a + m0) && lda % 4 == 0;  // only the m-contiguous copier has a vector path
  const bool vec_b = aligned16(bm + (kTransB ? 0 : n0)) && ldb % 4 == 0;
  const bool vec_c = aligned16(c) && ldc % 4 == 0;

  // A stored M x K: rows k-contiguous, copied transposed. A stored K x M (a_transposed):
  // m-contiguous rows of the slab are already As[k][m]'s rows, B's copier fits as is.
  using ACopier = std::conditional_t<kTransA, NMajorCopierF32<BM, BK, Cfg::kThreads, Cfg::kL2Prefetch>,
                                     KMajorCopierF32<BM, BK, Cfg::kThreads, Cfg::kL2Prefetch>>;
  ACopier copy_a(kTransA ? a + m0 : a + m0 * lda, lda, M - m0, vec_a);
  using BCopier = std::conditional_t<kTransB, KMajorCopierF32<BN, BK, Cfg::kThreads, Cfg::kL2Prefetch>,
                                     NMajorCopierF32<BN, BK, Cfg::kThreads, Cfg::kL2Prefetch>>;
  BCopier copy_b(kTransB ? bm + n0 * ldb : bm + n0, ldb, N - n0, vec_b);
  const int full_slabs = K / BK;  // slabs that need no k check
  auto load_slab = [&](int slab, int stage) {
    const bool check_k = slab >= full_slabs;
    copy_a.copy_next(smem + stage * kStageBytesA, K, check_k);
    copy_b.copy_next(smem + kOffsetB + stage * kStageBytesB, K, check_k);
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;  // this warp's place in the block tile
  // @step warp_tiled
  const int m_frag = warp_m * WM + (lane / Cfg::kLanesN) * 4;  // first of this thread's rows in the tile
  const int n_frag = warp_n * WN + (lane % Cfg::kLanesN) * 4;  // first of its columns
  const float* As = smem_f32;
  const float* Bs = smem_f32 + kStages * Cfg::kStageA;
  // @end

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

  const int k_tiles = (K + BK - 1) / BK;
  // Prologue: slabs 0 .. kStages-2 in flight, one commit group each (empty ones too,
  // so that "group t complete" always means "slab t landed").
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_slab(s, s);
    cuda::cp_async_commit();
  }
  int stage = 0;
  for (int kt = 0; kt < k_tiles; ++kt) {
    cuda::cp_async_wait<kStages - 2>();  // this thread's copies of slab kt landed ...
    __syncthreads();                     // ... everyone's too; and everyone is done with slab kt-1
    const int next = kt + kStages - 1;   // refill the stage slab kt-1 used
    if (next < k_tiles) load_slab(next, stage == 0 ? kStages - 1 : stage - 1);
    cuda::cp_async_commit();
    // @step warp_tiled
    const float* as = As + stage * Cfg::kStageA;
    const float* bs = Bs + stage * Cfg::kStageB;
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float av[8], bv[8];
      *reinterpret_cast<float4*>(&av[0]) = *reinterpret_cast<const float4*>(&as[k * Cfg::kPitchA + m_frag]);
      *reinterpret_cast<float4*>(&av[4]) = *reinterpret_cast<const float4*>(&as[k * Cfg::kPitchA + m_frag + WM / 2]);
      *reinterpret_cast<float4*>(&bv[0]) = *reinterpret_cast<const float4*>(&bs[k * Cfg::kPitchB + n_frag]);
      *reinterpret_cast<float4*>(&bv[4]) = *reinterpret_cast<const float4*>(&bs[k * Cfg::kPitchB + n_frag + WN / 2]);
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    // @end
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
  cuda::cp_async_wait<0>();  // only empty groups remain; leave nothing in flight at exit

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = m0 + m_frag + (i / 4) * (WM / 2) + (i % 4);
    if (r >= M) continue;
    float* c_row = c + r * ldc;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const float4 v = make_float4(alpha * acc[i][4 * s], alpha * acc[i][4 * s + 1], alpha * acc[i][4 * s + 2],
                                   alpha * acc[i][4 * s + 3]);
      store_chunk4(c_row, n0 + n_frag + s * (WN / 2), N, v, vec_c);
    }
  }
}

template <class Cfg, class OpA, class OpB, class OpC>
void launch_warp_tiled_cfg(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  const m02::BgemmGrid g = batched_gemm_grid(p.M, p.N, p.batch, p.heads, Cfg::BM, Cfg::BN);
  with_transposes(p, [&](auto trans_a, auto trans_b) {
    constexpr auto kernel =
        bgemm_warp_tiled_kernel<Cfg, decltype(trans_a)::value, decltype(trans_b)::value, OpA, OpB, OpC>;
    // The driver's carveout keeps a larger L1 for the 4-byte cp.async copies (.ca, through L1).
    cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes, cuda::Carveout::driver_default);
    kernel<<<to_dim3(g), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha,
                                                                     static_cast<int>(g.tiles_n));
  });
  COURSE_CHECK_LAUNCH("bgemm_warp_tiled_kernel");
}

template <class OpA, class OpB, class OpC>
void launch_warp_tiled(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  // @step warp_tiled (the exercise's "written" flag; nothing here)
  // @end
  if (p.N <= 64)
    launch_warp_tiled_cfg<WtConfig<128, 64, 16, 64, 32, 3, 256>>(A, B, C, p);  // 128 threads, 39 KB: 4 blocks/SM
  else
    launch_warp_tiled_cfg<WtConfig<128, 128, 16, 64, 32, 4>>(A, B, C, p);  // 256 threads, 68 KB: 2 blocks/SM
}

}  // namespace

template <class OpA, class OpB, class OpC>
void run_fp32_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  switch (step) {
    case BgemmStep::register_blocked: launch_register_blocked(A, B, C, p); return;
    case BgemmStep::warp_tiled: launch_warp_tiled(A, B, C, p); return;
    default: break;
  }
  // validate_step_input() already rejected this; keep the function total anyway.
  require_arg(false, "batched_gemm", "step", static_cast<int>(step), "has no kernel for this input type");
}

COURSE_BGEMM_INSTANTIATE(run_fp32_step, float)

}  // namespace course::solution::bgemm
