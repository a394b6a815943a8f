/// @file batched_gemm.cu
/// @brief Solution ladder for the batched GEMM of module 2: C[b,h] = alpha * A[b,h] * op(B[b,h]).
///
/// One kernel body per step serves BOTH APIs. Each kernel is a template over three
/// "operand addressing" policies (A, B, C) with one job: given (b, h), return the
/// first element of that matrix and its row stride.
///   StridedOperand<T>:       base + b * stride_batch + h * stride_head
///   PointerArrayOperand<T>:  ptrs[b * num_heads + h]
/// After that first line, a block of either API sees an ordinary row-major GEMM.
///
/// Grid (every step, see batched_gemm_grid): x = tile of C (tiles_m * tiles_n, up to
/// 2^31 - 1), y = head, z = batch (each <= 65535).
///
/// Predictions are for an H100 SXM (132 SMs; fp32 FMA peak ~67 TFLOP/s at 1.98 GHz, ~60
/// at the clocks it sustains; HBM3 ~3.0 TB/s measured copy) at the benchmark shapes:
///   S1 = (B=8, H=16, N=1024, d=64):  Q*K^T: M=N=1024, K=64  | P*V: M=K=1024, N=64
///   S2 = (B=4, H=32, N=2048, d=128): Q*K^T: M=N=2048, K=128 | P*V: M=K=2048, N=128
/// Both products are 2*B*H*N*N*d FLOPs: 17.2 GFLOP (S1), 137 GFLOP (S2).
/// Note the bytes: Q*K^T WRITES the B*H*N*N scores (512 MB fp32 at S1, 2 GiB at S2) and
/// P*V READS them; with d = 64 that is only 2*d = 128 FLOPs per 4-byte score, close to
/// the fp32 ridge point (~20 FLOP/B) and far below the bf16 one (~300 FLOP/B).

#include "module02/batched_gemm.hpp"

#include "course/cuda/mma_ptx.cuh"
#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::solution {

m02::BgemmGrid batched_gemm_grid(std::int64_t M, std::int64_t N, std::int64_t batch, std::int64_t num_heads,
                                 int tile_m, int tile_n) {
  const char* fn = "batched_gemm_grid";
  require_arg(tile_m >= 1, fn, "tile_m", tile_m, "must be >= 1");
  require_arg(tile_n >= 1, fn, "tile_n", tile_n, "must be >= 1");
  require_arg(M >= 1, fn, "M", M, "must be >= 1");
  require_arg(N >= 1, fn, "N", N, "must be >= 1");
  require_arg(num_heads >= 1 && num_heads <= m02::kMaxGridYZ, fn, "num_heads", num_heads,
              "must be in [1, 65535]: heads go on gridDim.y, which the hardware limits to 65535");
  require_arg(batch >= 1 && batch <= m02::kMaxGridYZ, fn, "batch", batch,
              "must be in [1, 65535]: the batch goes on gridDim.z, which the hardware limits to 65535");
  m02::BgemmGrid g;
  g.tiles_m = (M + tile_m - 1) / tile_m;
  g.tiles_n = (N + tile_n - 1) / tile_n;
  // tiles_m * tiles_n <= 2^31 - 1, written without overflowing int64 on the way.
  require_arg(g.tiles_m <= m02::kMaxGridX / g.tiles_n, fn, "M", M,
              m02::detail::msg("with N = ", N, " and ", tile_m, " x ", tile_n, " tiles needs ", g.tiles_m, " x ",
                               g.tiles_n, " blocks on gridDim.x, more than its limit 2^31 - 1")
                  .c_str());
  g.x = static_cast<unsigned>(g.tiles_m * g.tiles_n);
  g.y = static_cast<unsigned>(num_heads);
  g.z = static_cast<unsigned>(batch);
  return g;
}

namespace {

using bf16 = __nv_bfloat16;
using m02::BgemmStep;

// ============================================================================
// Operand addressing: the only place the two APIs differ.
// ============================================================================

/// Matrix (b, h) of a strided operand: base + b*stride_batch + h*stride_head.
/// T is `const float`, `const bf16` (inputs) or `float` (C).
template <class T>
struct StridedOperand {
  T* base;
  std::int64_t stride_batch, stride_head, ld;
  __device__ __forceinline__ T* matrix(int b, int h) const {
    return base + b * stride_batch + h * stride_head;  // 64-bit: int * int64_t
  }
};

/// Matrix (b, h) of a pointer-array operand: one dependent global load, ptrs[b*H + h].
template <class T>
struct PointerArrayOperand {
  T* const* ptrs;
  std::int64_t ld;
  int num_heads;
  __device__ __forceinline__ T* matrix(int b, int h) const {
    return ptrs[static_cast<std::int64_t>(b) * num_heads + h];
  }
};

/// What every launch needs besides the operands.
struct Problem {
  int M, N, K, batch, heads;
  float alpha;
  bool trans_b;
  cudaStream_t stream;
};

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

dim3 to_dim3(const m02::BgemmGrid& g) { return dim3(g.x, g.y, g.z); }

/// A kernel may use more than 48 KB of dynamic shared memory only after opting in
/// (once per kernel; the attribute then stays set). Returns the kernel for the launch.
template <auto kKernel>
auto allow_dynamic_smem(int bytes) {
  static const bool opted_in = [bytes] {
    if (bytes > 48 * 1024)
      COURSE_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return true;
  }();
  (void)opted_in;
  return kKernel;
}

// ============================================================================
// Step 1: smem_tiled (fp32).
// A block of 32 x 32 threads computes a 32 x 32 tile of C, one output per thread. For
// each 32-wide slab of K it copies the A tile (32 x 32) and the op(B) tile (32 x 32)
// into shared memory, one element per thread, then every thread reads a row of As and
// a column of Bs. Each element loaded from global memory is reused 32 times.
// b_transposed (a template flag, so no branch in the loop): B is stored N x K, so the
// coalesced read walks k; the thread stores it transposed, Bs[k][n], and the extra
// column of padding (33 floats per row) makes that transposed store conflict-free.
// Edges: out-of-range elements load as 0, out-of-range outputs are not stored.
// Prediction: the inner loop issues 2 shared loads (As[ty][k] is a broadcast, Bs[k][tx]
// a full wavefront) per FMA, and an SM serves ~1 wavefront per clock while it could
// issue 4 warp-FMAs: shared-memory bound at ~1/8 of the FMA peak, ~6-8 TFLOP/s,
// ~15% of cuBLAS at S1 and S2, for both products and both APIs.
// Development run (H200): 7-9 TFLOP/s, 17-29% of cuBLAS.
// Measured (H200, docs/results.md): 7.3-8.7 TFLOP/s = 0.17-0.29 of cuBLAS, both products.
// ============================================================================
constexpr int kSmemTile = 32;

template <bool kTransB, class OpA, class OpB, class OpC>
__global__ void __launch_bounds__(kSmemTile * kSmemTile)
    bgemm_smem_tiled_kernel(OpA A, OpB B, OpC C, int M, int N, int K, float alpha, int tiles_n) {
  constexpr int T = kSmemTile;
  __shared__ float As[T][T];      // As[row][k]
  __shared__ float Bs[T][T + 1];  // Bs[k][col]; +1: conflict-free transposed store

  const int tile_m = blockIdx.x / tiles_n, tile_n = blockIdx.x % tiles_n;
  const int h = blockIdx.y, b = blockIdx.z;
  const float* a = A.matrix(b, h);
  const float* bm = B.matrix(b, h);
  float* c = C.matrix(b, h);
  const std::int64_t lda = A.ld, ldb = B.ld, ldc = C.ld;

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = tile_m * T + ty, col = tile_n * T + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += T) {
    As[ty][tx] = (row < M && k0 + tx < K) ? a[row * lda + k0 + tx] : 0.f;
    if constexpr (kTransB) {
      const int n = tile_n * T + ty;  // coalesced along k: consecutive tx read consecutive k
      Bs[tx][ty] = (n < N && k0 + tx < K) ? bm[n * ldb + k0 + tx] : 0.f;
    } else {
      Bs[ty][tx] = (k0 + ty < K && col < N) ? bm[(k0 + ty) * ldb + col] : 0.f;
    }
    __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
    for (int k = 0; k < T; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
    __syncthreads();  // everyone is done reading before the next slab overwrites them
  }
  if (row < M && col < N) c[row * ldc + col] = alpha * acc;
}

template <class OpA, class OpB, class OpC>
void launch_smem_tiled(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  const m02::BgemmGrid g = batched_gemm_grid(p.M, p.N, p.batch, p.heads, kSmemTile, kSmemTile);
  const dim3 block(kSmemTile, kSmemTile);
  const int tiles_n = static_cast<int>(g.tiles_n);
  if (p.trans_b)
    bgemm_smem_tiled_kernel<true><<<to_dim3(g), block, 0, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha, tiles_n);
  else
    bgemm_smem_tiled_kernel<false><<<to_dim3(g), block, 0, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha, tiles_n);
  COURSE_CHECK_LAUNCH("bgemm_smem_tiled_kernel");
}

// ============================================================================
// Step 2: register_blocked (fp32).
// Changes from step 1:
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
//    so the transposed store is conflict-free.
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
// Development run (H200, not the reference GPU), % of cublasGemmStridedBatchedEx (fp32,
// no TF32): Q*K^T 100% (S1), 83% (S2), 107% (B64H12N128d64); P*V 76% (S1), 78% (S2),
// 90%. Pointer-array within 3% of strided everywhere.
// Measured (H200, docs/results.md, fraction of cublasGemmStridedBatchedEx fp32): Q*K^T
// 0.99 (B8H16N1024d64), 0.83 (B4H32N2048d128), 1.06 (B64H12N128d64); P*V 0.75, 0.78, 0.92.
// Misses the 0.85 target on P*V and on Q*K^T at d = 128: see module02's README.
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

/// A tile of R rows x BK columns from a k-contiguous matrix (A, or B^T-stored B),
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

/// A tile of BK rows (k) x Cn columns from an n-contiguous matrix (B stored K x N),
/// stored as is into S[BK][Cn]. Chunk q: row q / (Cn/4), column chunk q % (Cn/4).
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

template <class Cfg, bool kTransB, class OpA, class OpB, class OpC>
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

  const float* a_tile = a + m0 * lda;                       // row m0 of A
  const float* b_tile = kTransB ? bm + n0 * ldb : bm + n0;  // row n0 (N x K) or column n0 (K x N)
  const int rows_a = M - m0, cols_b = N - n0;

  KContiguousTile<BM, BK, kThreads> load_a;
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
  if (p.trans_b)
    bgemm_register_blocked_kernel<Cfg, true>
        <<<to_dim3(g), Cfg::kThreads, 0, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha, tiles_n);
  else
    bgemm_register_blocked_kernel<Cfg, false>
        <<<to_dim3(g), Cfg::kThreads, 0, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha, tiles_n);
  COURSE_CHECK_LAUNCH("bgemm_register_blocked_kernel");
}

template <class OpA, class OpB, class OpC>
void launch_register_blocked(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  if (p.N <= 64)
    launch_register_blocked_cfg<RbConfig<128, 64, 3>>(A, B, C, p);  // 128 threads, <= 170 registers
  else
    launch_register_blocked_cfg<RbConfig<128, 128, 2>>(A, B, C, p);  // 256 threads, <= 128 registers
}

// ============================================================================
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
//    vectors when its start and row stride allow it (decided per block).
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
// Measured (H200, bench, docs/results.md, fraction of cublasGemmStridedBatchedEx fp32):
// Q*K^T 1.10 (S1), 0.95 (S2), 1.13 (B64H12N128d64); P*V 1.04, 0.86, 1.02 (0.87 at S2
// in the run before). Step 2 in the same run: 1.00, 0.83, 1.07; 0.77, 0.80, 0.93.
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

/// Copies slabs of an n-contiguous operand (B stored K x N, P*V's V) into stages
/// S[k][n] of pitch BN + 4. Vector path: 16-byte copies, thread t owns columns
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

template <class Cfg, bool kTransB, class OpA, class OpB, class OpC>
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
  const bool vec_b = aligned16(bm + (kTransB ? 0 : n0)) && ldb % 4 == 0;
  const bool vec_c = aligned16(c) && ldc % 4 == 0;

  KMajorCopierF32<BM, BK, Cfg::kThreads, Cfg::kL2Prefetch> copy_a(a + m0 * lda, lda, M - m0, false);
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
  const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;
  const int m_frag = warp_m * WM + (lane / Cfg::kLanesN) * 4;  // first of this thread's rows in the tile
  const int n_frag = warp_n * WN + (lane % Cfg::kLanesN) * 4;  // first of its columns
  const float* As = smem_f32;
  const float* Bs = smem_f32 + kStages * Cfg::kStageA;

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
  auto kernel = p.trans_b ? allow_dynamic_smem<bgemm_warp_tiled_kernel<Cfg, true, OpA, OpB, OpC>>(Cfg::kSmemBytes)
                          : allow_dynamic_smem<bgemm_warp_tiled_kernel<Cfg, false, OpA, OpB, OpC>>(Cfg::kSmemBytes);
  kernel<<<to_dim3(g), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha,
                                                                   static_cast<int>(g.tiles_n));
  COURSE_CHECK_LAUNCH("bgemm_warp_tiled_kernel");
}

template <class OpA, class OpB, class OpC>
void launch_warp_tiled(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  if (p.N <= 64)
    launch_warp_tiled_cfg<WtConfig<128, 64, 16, 64, 32, 3, 256>>(A, B, C, p);  // 128 threads, 39 KB: 4 blocks/SM
  else
    launch_warp_tiled_cfg<WtConfig<128, 128, 16, 64, 32, 4>>(A, B, C, p);  // 256 threads, 68 KB: 2 blocks/SM
}

// ============================================================================
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
// Development run (H200, not the reference GPU), % of cublasGemmStridedBatchedEx:
// Q*K^T 79% (S1), 71% (S2), 88% (B64H12N128d64); P*V 96% (S1), 68% (S2), 86%.
// An ncu profile of P*V at S2 shows ~50% issue utilization and no saturated unit. The
// count behind it (step 5's comment): shared memory, ldmatrix plus cp.async, is busier
// than the tensor cores. Tried (one run each, P*V at S2): 64 x 64 warp tiles (8 warps
// per SM at ~255 registers) 0.69-0.74; BK = 32 with 4-6 stages 0.71-0.79; no gain.
// Measured with a staged epilogue (C through shared memory in float4 rows, an earlier
// version of this step), fraction of cublasGemmStridedBatchedEx bf16: Q*K^T 0.79, 0.72,
// 0.91; P*V 0.97, 0.70, 0.86. With the direct epilogue below (H200, bench,
// docs/results.md): Q*K^T 0.84, 0.76, 0.95; P*V 0.97, 0.68, 0.89. At d = 128, step 5
// is the answer.
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

  // Byte offsets, inside a stage, of the row this lane hands to each ldmatrix. The mi, p
  // and ks loops only add multiples of 16 rows (A, B^T) or 16 k (B), which leave the
  // swizzle key unchanged, so one offset per ks (A, B^T) or per p (B) serves every
  // fragment and the rest is a compile-time immediate.
  constexpr int kKSteps = Cfg::BK / 16;
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

    const std::uint32_t sa = smem + (kt % Cfg::kStages) * kStageBytesA;
    const std::uint32_t sb = smem + kOffsetB + (kt % Cfg::kStages) * kStageBytesB;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
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
  auto kernel = allow_dynamic_smem<bgemm_tensor_core_kernel<Cfg, kTransB, OpA, OpB, OpC>>(Cfg::kSmemBytes);
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
  if (p.N <= 64)
    launch_tensor_core_cfg<TcConfig<128, 64, 2, 2, 3, 3, 64>>(A, B, C, p);  // 128 threads, 72 KB, <= 170 registers
  else
    launch_tensor_core_cfg<TcConfig<128, 128, 2, 4, 3, 2, 64>>(A, B, C, p);  // 256 threads, 96 KB, <= 128 registers
}

// ============================================================================
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
// Measured (H200, bench, docs/results.md, fraction of cublasGemmStridedBatchedEx bf16):
// P*V 1.03 (S1), 0.83 (S2; step 4: 0.68), 0.94 (B64H12N128d64); Q*K^T 0.82, 0.80, 0.95
// (the run before: P*V 0.84 and Q*K^T 0.78 at S2, so S2 sits at the 0.80 line). In a short
// standalone timing loop P*V at S2 reached 0.94-0.96 and Q*K^T 0.80-0.83; the bench
// keeps each row running for 0.2 s, and our kernels lose more to the hot GPU than
// cuBLAS does. Q*K^T at S2 writes 2 GiB of fp32 scores: cuBLAS stores them at ~3.4 TB/s,
// this kernel at ~2.7. Tried and dropped (0.78-0.83, no gain): 2-8 tiles per block as
// one pipelined stream of slabs (one tile's stores overlapping the next one's loads),
// 2 or 4 stages, `.L2::256B` prefetch. What is left is the store path: cuBLAS hands
// its C tile to the TMA engine (cp.async.bulk) -- the next rung, not written.
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
  __trap();  // never launched: the host checks wgmma_available() first
#endif
}

/// Reports whether this binary carries sm_90a code for the current device: a one-off
/// probe kernel (compiled for every target) says which target the driver picked.
__global__ void wgmma_probe_kernel(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

bool wgmma_available() {
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  static int cached_device = -1;
  static bool cached = false;
  if (device == cached_device) return cached;
  int major = 0, minor = 0;
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  bool ok = false;
  if (major == 9 && minor == 0) {
    DeviceBuffer<int> flag(1);
    wgmma_probe_kernel<<<1, 1>>>(flag.data());
    if (cudaGetLastError() == cudaSuccess) {  // no sm_90 code at all: "no kernel image"
      int host = 0;
      COURSE_CUDA_CHECK(cudaMemcpy(&host, flag.data(), sizeof(int), cudaMemcpyDeviceToHost));
      ok = host == 1;
    }
  }
  cached_device = device;
  cached = ok;
  return ok;
}

template <class Cfg, class OpA, class OpB, class OpC>
void launch_wgmma_cfg(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  const m02::BgemmGrid g = batched_gemm_grid(p.M, p.N, p.batch, p.heads, Cfg::BM, Cfg::BN);
  auto kernel = p.trans_b ? allow_dynamic_smem<bgemm_wgmma_kernel<Cfg, true, OpA, OpB, OpC>>(Cfg::kSmemBytes)
                          : allow_dynamic_smem<bgemm_wgmma_kernel<Cfg, false, OpA, OpB, OpC>>(Cfg::kSmemBytes);
  kernel<<<to_dim3(g), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(A, B, C, p.M, p.N, p.K, p.alpha,
                                                                   static_cast<int>(g.tiles_n));
  COURSE_CHECK_LAUNCH("bgemm_wgmma_kernel");
}

template <class OpA, class OpB, class OpC>
void launch_wgmma(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  if (!wgmma_available())
    throw Unsupported("batched_gemm step wgmma",
                      "a Hopper GPU (compute capability 9.0) and a build for sm_90a "
                      "(CMAKE_CUDA_ARCHITECTURES=90a; wgmma is not in plain sm_90)");
  if (p.N <= 64)
    launch_wgmma_cfg<WgConfig<64, 3>>(A, B, C, p);  // 3 x 24 KB stages; ~108 registers: 2 blocks per SM
  else
    launch_wgmma_cfg<WgConfig<128, 3>>(A, B, C, p);  // 3 x 32 KB stages: 2 blocks per SM
}

// ============================================================================
// Dispatch: one switch for both APIs.
// ============================================================================
template <class T, class OpA, class OpB, class OpC>
void run_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  if constexpr (std::is_same_v<T, float>) {
    switch (step) {
      case BgemmStep::smem_tiled: launch_smem_tiled(A, B, C, p); return;
      case BgemmStep::register_blocked: launch_register_blocked(A, B, C, p); return;
      case BgemmStep::warp_tiled: launch_warp_tiled(A, B, C, p); return;
      default: break;
    }
  } else {
    if (step == BgemmStep::tensor_core) {
      launch_tensor_core(A, B, C, p);
      return;
    }
    if (step == BgemmStep::wgmma) {
      launch_wgmma(A, B, C, p);
      return;
    }
  }
  // validate_step_input() already rejected this; keep the function total anyway.
  require_arg(false, "batched_gemm", "step", static_cast<int>(step), "has no kernel for this input type");
}

template <class Args>
Problem problem_of(const Args& s) {
  return Problem{static_cast<int>(s.M), static_cast<int>(s.N), static_cast<int>(s.K), static_cast<int>(s.batch),
                 static_cast<int>(s.num_heads), s.alpha, s.b_transposed, s.stream};
}

template <class T>
void strided(BgemmStep step, const m02::StridedBatchedGemmArgs<T>& s) {
  m02::validate_strided_args(s, step, "batched_gemm_strided");
  run_step<T>(step, StridedOperand<const T>{s.a, s.stride_a_batch, s.stride_a_head, s.stride_a_row},
              StridedOperand<const T>{s.b, s.stride_b_batch, s.stride_b_head, s.stride_b_row},
              StridedOperand<float>{s.c, s.stride_c_batch, s.stride_c_head, s.stride_c_row}, problem_of(s));
}

template <class T>
void ptr_array(BgemmStep step, const m02::PtrArrayBatchedGemmArgs<T>& p) {
  m02::validate_ptr_array_args(p, step, "batched_gemm_ptr_array");
  const int heads = static_cast<int>(p.num_heads);
  run_step<T>(step, PointerArrayOperand<const T>{p.a_ptrs, p.lda, heads},
              PointerArrayOperand<const T>{p.b_ptrs, p.ldb, heads}, PointerArrayOperand<float>{p.c_ptrs, p.ldc, heads},
              problem_of(p));
}

}  // namespace

void batched_gemm_strided(m02::BgemmStep step, const m02::StridedBatchedGemmArgs<float>& args) {
  strided(step, args);
}
void batched_gemm_strided(m02::BgemmStep step, const m02::StridedBatchedGemmArgs<__nv_bfloat16>& args) {
  strided(step, args);
}
void batched_gemm_ptr_array(m02::BgemmStep step, const m02::PtrArrayBatchedGemmArgs<float>& args) {
  ptr_array(step, args);
}
void batched_gemm_ptr_array(m02::BgemmStep step, const m02::PtrArrayBatchedGemmArgs<__nv_bfloat16>& args) {
  ptr_array(step, args);
}

}  // namespace course::solution
