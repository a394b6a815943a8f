/// @file matmul_tc_hopper.cu
/// @brief The Hopper rungs of the tensor-core matmul ladder (module 1), C (fp32) = A * B (bf16):
///   3. wgmma                 warpgroup MMA from 128-byte-swizzled shared memory, fed by cp.async
///   4. tma_warp_specialized  TMA copies on an mbarrier ring; 1 producer + 2 consumer warpgroups
///   5. persistent            one block per SM walks the tiles: next loads overlap this epilogue
///   6. cluster_multicast     2-block clusters; each B tile read once from L2, multicast to both
///   7. pingpong              each consumer warpgroup owns a 128 x 128 tile; the two take turns on
///                            the tensor cores, one's epilogue under the other's main loop; C
///                            leaves through a staging tile by TMA stores (bf16 or fp32) or,
///                            accumulating in fp32, by TMA additions. A bf16 C without GELU
///                            and with N % 192 == 0 takes wide tiles instead: both consumers
///                            on one 128 x 192 tile, as in steps 4-6
///
/// Steps 3-6 compute the same 128 x 256 tile of C per block, as two warpgroups of 64 x 256
/// (wgmma m64n256k16: 128 fp32 accumulators per thread), over K in slabs of 64 (step 7:
/// each consumer warpgroup its own 128 x 128 tile, two m64n128k16 per k16; its B slab is
/// two of the 64-column blocks below). The
/// shared-memory tile layouts are the same in every step, the ones wgmma's 128-byte-swizzle
/// descriptors describe (and the TMA's SWIZZLE_128B writes):
///   A slab [128 m][64 k], K-major: row m is 128 bytes, 16-byte chunk c at c ^ (m % 8).
///   B slab [64 k][256 n], MN-major (B is row-major K x N): four 64-column blocks of
///     [64 k][64 n], row k 128 bytes, chunk c at c ^ (k % 8); wgmma transposes on the fly.
/// So what changes from step to step is only WHO moves the data and WHEN.
///
/// Numbers for 8192^3 on an H100/H200 SXM (132 SMs): 1.10e12 FLOPs; dense bf16 peak
/// ~990 TFLOP/s at the boost clock, cuBLAS ~650-750 under sustained load. One slab of one
/// block is 2 * 128 * 256 * 64 = 4.2 MFLOP against 48 KB of loads: at ~5 TFLOP/s per SM
/// that is ~0.85 us per slab and ~57 GB/s of L2 -> shared traffic per SM, ~7.5 TB/s over
/// the chip: L2 bandwidth, not HBM (A and B are read ~8-16x less from HBM thanks to
/// grouped tile order), is the resource the later steps economise.

#include "matmul_tc_parts.cuh"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/tile.cuh"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/tma.hpp"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

// A build for "80;90a" also compiles this file for sm_80, where every kernel body below is
// compiled out (wgmma, TMA and setmaxnreg need sm_90a) and the helpers they call are left
// unreferenced: silence that one diagnostic ("declared but never referenced") in that pass only.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

namespace course::solution::tc_parts {
namespace {

using m01::TcMatmulArgs;
using bf16 = __nv_bfloat16;
namespace cc = ::course::cuda;

// ---------------------------------------------------------------- shared by steps 3-7 ---

constexpr int kBM = 128, kBN = 256, kBK = 64;
constexpr std::uint32_t kABytes = kBM * kBK * 2;        // 16 KB: 128 rows of 128 bytes
constexpr std::uint32_t kBBlockBytes = kBK * 64 * 2;    //  8 KB: one [64 k][64 n] block of B
constexpr std::uint32_t kBBytes = kBN * kBK * 2;        // 32 KB: four blocks
constexpr std::uint32_t kStageBytes = kABytes + kBBytes;  // 48 KB per pipeline stage

/// Throws course::Unsupported unless the Hopper instructions can run here.
void require_sm90a(const char* step) {
  if (!cc::sm90a_code_available())
    throw Unsupported(step,
                      "a Hopper GPU (compute capability 9.0) and a build for sm_90a "
                      "(CMAKE_CUDA_ARCHITECTURES=90a; wgmma and setmaxnreg are not in plain sm_90)");
}

/// Split-K for a persistent grid (steps 5-7; tc_parts' split-K section says how the splits
/// add up). Only where tc_parts::split_k_allowed (a linear epilogue, fewer than 2 tiles per
/// SM: `tiles` of the block tile), each split at least kMinSplitSlabs slabs (512 of K, as
/// mma_sync's 16 slabs of 32), and only as many splits as one wave holds: `units` work
/// units per split (tiles, or cluster tiles) times the split count at most `slots`, the
/// blocks (clusters) that fit at once -- one unit per block, the condition of the
/// deadlock-freedom argument (step 5's banner). Among those counts s the cheapest in
///   (slabs per split + kFillSlabs) + (s - 1) * kAddSlabs   slab-times
/// wins, ties to fewer splits: kFillSlabs is a unit's pipeline fill and epilogue, kAddSlabs
/// one split's turn at adding into C (the splits of a tile finish together and add one after
/// another: a 64-128 KB reduction into L2 and the release/acquire hand-off, estimated at 1-2
/// us or 2-3 slab-times; not measured). dW (1152 x 384 x 16384, 256 slabs) on 132 SMs:
/// pingpong's 27 tiles of 128 x 128 take 4 splits (108 units of 64 slabs), persistent's 18
/// tiles of 128 x 256 take 7 (126 units of 37 slabs). The forward products (>= 384 tiles of
/// 128 x 128) never split, nor does any grid of more tiles than `slots`.
constexpr int kMinSplitSlabs = 8;
constexpr int kMaxSplits = 64;
constexpr int kFillSlabs = 2;
constexpr int kAddSlabs = 2;
SplitK persistent_split_k(const TcMatmulArgs& a, std::int64_t tiles, int units, int slots, int k_tiles) {
  SplitK best{1, k_tiles};
  if (!split_k_allowed(a, tiles, device_properties().multiProcessorCount) || slots < 1) return best;
  const auto cost = [&](const SplitK& p) {
    return static_cast<std::int64_t>(p.slabs + kFillSlabs) + static_cast<std::int64_t>(p.splits - 1) * kAddSlabs;
  };
  std::int64_t best_cost = cost(best);
  const int most = std::min(k_tiles / kMinSplitSlabs, kMaxSplits);
  for (int s = 2; s <= most; ++s) {
    const SplitK p = split_evenly(k_tiles, s);
    if (static_cast<std::int64_t>(units) * p.splits > slots) break;  // one wave, one unit per block
    if (cost(p) < best_cost) best = p, best_cost = cost(p);
  }
  return best;
}

/// Consumer warpgroup `wg` (0 or 1: rows 64 wg .. 64 wg + 63 of the tile) multiplies one
/// slab: four k16 steps of wgmma m64n256k16, both operands read from shared memory through
/// descriptors. K-major A: a k16 step is 32 bytes further along the 128-byte rows, groups of
/// 8 rows are 1024 bytes apart (sbo). MN-major B: a k16 step is 16 rows (2048 bytes)
/// further; lbo = 8 KB to the next 64-column block, sbo = 1024 between groups of 8 k-rows.
/// With the linear-layer layouts (matmul_tc.hpp) the roles swap: a transposed A is MN-major
/// (two [64 k][64 m] blocks, the warpgroup's 64 rows are block wg), a transposed B is
/// K-major ([256 n][64 k], rows of 128 bytes, like A's). wgmma reads either; the
/// instruction's transpose flags say which. Issued only: the caller commits and waits.
template <bool kATrans = false, bool kBTrans = false>
__device__ __forceinline__ void wgmma_slab(float (&acc)[128], std::uint32_t stage_a, std::uint32_t stage_b, int wg) {
  // @step wgmma  (the exercise writes the descriptors and the wgmma)
#pragma unroll
  for (int ks = 0; ks < kBK / 16; ++ks) {
    const std::uint64_t da = kATrans ? cc::wgmma_desc_sw128(stage_a + wg * kBBlockBytes + ks * 16 * 128, kBBlockBytes, 1024)
                                     : cc::wgmma_desc_sw128(stage_a + wg * 64 * 128 + ks * 32, 16, 1024);
    const std::uint64_t db = kBTrans ? cc::wgmma_desc_sw128(stage_b + ks * 32, 16, 1024)
                                     : cc::wgmma_desc_sw128(stage_b + ks * 16 * 128, kBBlockBytes, 1024);
    cc::wgmma_m64n256k16_bf16_f32</*kBMnMajor=*/!kBTrans, /*kAMnMajor=*/kATrans>(acc, da, db);
  }
  // @end
}

/// The epilogue with TcMatmulArgs' options (tc_parts::Epilogue), for one warp of a consumer
/// warpgroup: its 16 rows x kCols columns (256; 128 in step 7) go through a 16 x 32 fp32 patch of shared memory
/// (row stride 40 floats: the float2 writes are conflict-free), 32 columns at a time, and
/// come back four columns per lane for Epilogue::store4 (16-byte loads and stores). The
/// read-back loop stays rolled: unrolled over all 64 accumulator pairs, the options'
/// code would overflow the instruction cache (see mma_sync in matmul_tc.cu).
template <int kCols = kBN>
__device__ __forceinline__ void store_warp_rows(const float (&acc)[kCols / 2], float* patch, const Epilogue& epilogue,
                                                int row0, int n0) {
  constexpr int kLd = 40;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int c = 0; c < kCols / 32; ++c) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int j = 4 * c + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2*>(patch + (g + 8 * h) * kLd + 8 * jj + 2 * t) =
            make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
    __syncwarp();
#pragma unroll 1
    for (int i = lane; i < 16 * 8; i += 32) {
      const int r = i / 8, q = i % 8;
      epilogue.store4(row0 + warp * 16 + r, n0 + 32 * c + 4 * q, *reinterpret_cast<const float4*>(patch + r * kLd + 4 * q));
    }
    __syncwarp();
  }
}
/// Shared memory of store_warp_rows' patches: 8 consumer warps x 16 rows x 40 floats.
constexpr int kPatchBytes = 8 * 16 * 40 * 4;

/// The epilogue of one warpgroup, straight from its accumulators: warp w of the group owns
/// rows 16 w .. 16 w + 15 of its 64, and acc[4 j + 2 h], acc[4 j + 2 h + 1] is the pair of
/// columns (8 j + 2 t, + 1) of row g + 8 h (g = lane / 4, t = lane % 4). One warp store
/// writes 8 rows x 32 bytes: whole 32-byte sectors. kCols: the group's columns (256; 128 in step 7).
template <int kCols = kBN>
__device__ __forceinline__ void store_warpgroup_tile(const float (&acc)[kCols / 2], float* C, int M, int N,
                                                     std::int64_t ldc, bool vec_ok, int row0, int n0) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + warp * 16 + lane / 4 + 8 * h;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
      store_pair(C, M, N, ldc, vec_ok, row, n0 + 8 * j + 2 * (lane % 4), acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  }
}

template <int kN>
__device__ __forceinline__ void zero(float (&acc)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i] = 0.f;
}

/// Dynamic shared memory rounded up to the 1024-byte alignment of the swizzle atoms
/// (8 rows x 128 bytes); the launch asks for 1 KB extra to make room.
__device__ __forceinline__ std::uint32_t aligned_smem_base(unsigned char* raw) {
  return (cc::smem_u32(raw) + 1023u) & ~1023u;
}

// ============================================================================
// Step 3: wgmma.
// What limits mma_sync on Hopper: mma.sync is Ampere's instruction. Each warp loads its
// fragments into registers with ldmatrix before every mma (shared-memory bandwidth), and
// a warp can keep only a 64 x 64 tile of accumulators. Hopper's wgmma is issued by a
// WARPGROUP (4 warps, 128 threads) and reads A and B straight from shared memory: one
// m64n256k16 multiplies a 64 x 16 slice of A by a 16 x 256 slice of B into 64 x 256 fp32
// accumulators spread over the group (128 per thread). B is read from shared memory once
// per 64 rows instead of once per warp.
// Changes from mma_sync:
//  * Block tile 128 x 256 (was 128 x 256 of 8 warps), two warpgroups of 64 x 256.
//  * Shared memory in the 128-byte-swizzle layout (file banner); wgmma descriptors
//    (wgmma_slab) instead of ldmatrix addresses. No fragment registers at all.
//  * The same cp.async pipeline feeds it, 4 stages of 48 KB. The tensor cores read
//    shared memory through the async proxy, so each copying thread runs
//    fence.proxy.async after its copies land, before the block barrier.
//  * wgmma is asynchronous: issue slab kt, commit, then wait until at most ONE group is
//    pending (slab kt-1's is complete). So the copies of slab kt+2 may overwrite the stage
//    slab kt-2 used: two stages in flight, one being read, one draining.
// Prediction (8192^3): the tensor cores are fed from shared memory at 3x less bandwidth
// per FLOP than mma_sync, so the kernel should leave mma_sync's 0.67 of cuBLAS behind,
// ~0.75-0.85. What it still pays for: all 256 threads stop at one barrier per slab and
// issue 12 cp.async each, i.e. the math waits for the slowest warp's copies; and one
// block per SM (192 KB of stages) leaves nothing to overlap the epilogue with.
// Measured (results: hgemm_bf16/solution/wgmma/8192x8192x8192): 518.6 TFLOP/s = 0.80 of cublas_gemmex
// ============================================================================
namespace wgmma_step {
constexpr int kThreads = 256;  // two warpgroups, both copy and compute
constexpr int kStages = 4;
constexpr int kSmemBytes = kStages * static_cast<int>(kStageBytes) + 1024;

/// Per-thread cp.async copies of one slab into the 128-byte-swizzle layouts. Thread t copies
/// chunk column t % 8 of A rows t / 8 + 32 i (i < 4) and chunk column t % 32 of B rows
/// t / 32 + 8 i (i < 8): both row steps are multiples of 8, so each thread's chunks share
/// one swizzle. Chunks past M, N or K copy 0 source bytes: cp.async writes the zeros.
struct SlabCopier {
  const bf16* a;  // this thread's first A chunk of the next slab
  const bf16* b;  // ... of B
  std::int64_t a_step, b_step, b_slab;  // 32 rows of A, 8 rows of B, 64 rows of B (elements)
  std::uint32_t a_dst, b_dst;           // byte offsets inside a stage
  int a_rows, b_cols;                   // rows of A / columns of B left from this thread's first
  int a_k;                              // K minus the k of this thread's A chunk in the next slab
  int b_k;                              // K minus the k of this thread's first B row in the next slab

  __device__ __forceinline__ SlabCopier(const bf16* A, const bf16* B, int M, int N, int K, std::int64_t lda,
                                        std::int64_t ldb, int m0, int n0) {
    const int t = threadIdx.x;
    const int ar = t / 8, ac = t % 8, br = t / 32, bc = t % 32;
    a = A + static_cast<std::int64_t>(m0 + ar) * lda + ac * 8;
    b = B + static_cast<std::int64_t>(br) * ldb + n0 + bc * 8;
    a_step = 32 * lda;
    b_step = 8 * ldb;
    b_slab = kBK * ldb;
    a_dst = ar * 128 + ((ac ^ (ar % 8)) * 16);
    b_dst = kABytes + (bc / 8) * kBBlockBytes + br * 128 + (((bc % 8) ^ (br % 8)) * 16);
    a_rows = M - (m0 + ar);
    b_cols = N - (n0 + bc * 8);
    a_k = K - ac * 8;
    b_k = K - br;
  }
  __device__ __forceinline__ void copy_next(std::uint32_t stage, const bf16* A, const bf16* B) {
    const int a_bytes = 2 * max(0, min(a_k, 8));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool ok = i * 32 < a_rows && a_bytes > 0;
      cc::cp_async_16_zfill(stage + a_dst + i * 32 * 128, ok ? a + i * a_step : A, ok ? a_bytes : 0);
    }
    const int b_bytes = 2 * max(0, min(b_cols, 8));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool ok = i * 8 < b_k && b_bytes > 0;
      cc::cp_async_16_zfill(stage + b_dst + i * 8 * 128, ok ? b + i * b_step : B, ok ? b_bytes : 0);
    }
    a += kBK;
    b += b_slab;
    a_k -= kBK;
    b_k -= kBK;
  }
};

__global__ void __launch_bounds__(kThreads, 1)
    matmul_tc_wgmma_kernel(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C, int M,
                           int N, int K, std::int64_t lda, std::int64_t ldb, std::int64_t ldc, int tiles_m,
                           int tiles_n, bool vec_ok) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t smem = aligned_smem_base(smem_raw);
  int tile_m, tile_n;
  grouped_tile(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * kBM, n0 = tile_n * kBN;
  const int wg = threadIdx.x / 128;
  const int k_tiles = (K + kBK - 1) / kBK;
  SlabCopier copier(A, B, M, N, K, lda, ldb, m0, n0);

  // Prologue: slabs 0 .. kStages-3 in flight (commit group g = slab g, empty groups included).
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) copier.copy_next(smem + s * kStageBytes, A, B);
    cc::cp_async_commit();
  }
  float acc[128];
  zero(acc);
  for (int kt = 0; kt < k_tiles; ++kt) {
    // 1. Wait for slab kt, publish it to every warp and to the async proxy. The barrier
    //    also certifies that every warpgroup's slab kt-2 wgmmas are complete (each waited
    //    for them at the end of iteration kt-1), so that stage may be refilled.
    cc::cp_async_wait<kStages - 3>();
    cc::fence_proxy_async_smem();
    __syncthreads();
    // 2. Refill: slab kt+2 into the stage slab kt-2 used.
    const int next = kt + kStages - 2;
    if (next < k_tiles) copier.copy_next(smem + (next % kStages) * kStageBytes, A, B);
    cc::cp_async_commit();
    // 3. Math: issue slab kt; wait until only it may still run (slab kt-1 is done).
    // @step wgmma  (the exercise writes the issue and the wait)
    const std::uint32_t stage = smem + (kt % kStages) * kStageBytes;
    cc::wgmma_fence();
    wgmma_slab(acc, stage, stage + kABytes, wg);
    cc::wgmma_commit();
    cc::wgmma_wait<1>();
    // @end
  }
  // @step wgmma  (the exercise writes the last wait)
  cc::wgmma_wait<0>();
  // @end
  cc::cp_async_wait<0>();
  store_warpgroup_tile(acc, C, M, N, ldc, vec_ok, m0 + 64 * wg, n0);
#else
  (void)A, (void)B, (void)C, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)ldc, (void)tiles_m,
      (void)tiles_n, (void)vec_ok;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}
}  // namespace wgmma_step

// ============================================================================
// Steps 4-6: one warp-specialized kernel, three configurations.
//
// Step 4, tma_warp_specialized. What limits step 3: every thread both copies and
// computes, and everyone meets at a barrier per slab -- the math waits for the slowest
// copy issue. Changes:
//  * The TMA (tensor memory accelerator) copies a whole 2-D box -- the A slab (128 rows x
//    128 bytes) in one instruction, B in four 64 x 64 boxes -- and writes it swizzled, the
//    layout wgmma reads. One thread issues a stage's 5 copies. Edges are free: the TMA
//    zero-fills whatever lies outside the matrix (the tensor map knows its shape).
//  * Warp specialization: warpgroup 0 is the PRODUCER (one thread issues copies), warpgroups
//    1-2 are CONSUMERS (wgmma + epilogue). They meet only at two barriers per stage:
//      full[s]:  the producer arrives with expect_tx(48 KB); the TMA counts the bytes down;
//                consumers wait on it (phase parity flips each time the ring wraps).
//      empty[s]: each consumer warpgroup arrives once its wgmmas on stage s are complete;
//                the producer waits on it before refilling s.
//    No __syncthreads in the loop: the producer runs up to 4 stages ahead.
//  * setmaxnreg: the producer needs ~40 registers, the consumers ~170 (128 accumulators).
//    The block starts with 168 each (384 threads, 1 block/SM); the producer gives back
//    (dec 40) and the consumers take (inc 232): 128*40 + 256*232 <= 64 K registers.
// Prediction: the tensor cores no longer wait for copy issue: ~0.85-0.9 of cuBLAS at
// 8192^3. Left on the table: the epilogue (256 MB of fp32 C at 8192^2, ~5% of the time)
// runs while no loads are in flight, and a new block pays the pipeline fill.
// Measured (results: hgemm_bf16/solution/tma_warp_specialized/8192x8192x8192): 660.6 TFLOP/s = 1.02 of cublas_gemmex
//
// Step 5, persistent. Changes: the grid is one block per SM, and each block walks the tile
// schedule (grouped order, 16 tile-rows per group) with a stride of the grid size. The
// ring of stages and its phases carry over from tile to tile, so while the consumers store
// tile i the producer is already loading tile i+1's first four slabs.
// Prediction: hides the epilogue and the per-block fill: +3-6% over step 4.
// Tried, no gain in one run: consumers keeping one slab's wgmmas in flight (wait_group 1,
// releasing the previous stage) instead of draining each slab (wait_group 0): with two
// consumer warpgroups, one issues while the other drains, and the tensor cores stay fed.
// Measured (results: hgemm_bf16/solution/persistent/8192x8192x8192): 587.3 TFLOP/s = 0.91 of cublas_gemmex
// Outcome: no gain over step 4 -- level with it in two earlier runs (1.66 vs 1.65 ms), 0.84-0.91
// in results runs (5% spread over its repetitions, the noisiest row). The epilogue it hides
// is ~2% of a tile at K = 8192; what it cannot hide is the tensor cores idling while the
// consumers store (both consumer warpgroups store at once: a ping-pong schedule, one
// warpgroup storing while the other computes, would be the next step).
//
// Step 6, cluster_multicast. Changes: blocks run in clusters of 2 that compute vertically
// adjacent tiles (rows m and m+1, same columns), so they need the same B slabs. Each block
// loads half of B (two of the four 64-column boxes) with `.multicast::cluster`: one read of
// L2, written into both blocks' shared memory, completing on both blocks' full barriers.
// So a stage may be refilled only when BOTH blocks' consumers are done with it: every
// consumer arrives on the empty barrier of every block in the cluster (mapa + remote
// arrive), and empty barriers count 2 x 2 arrivals. Per block, L2 -> SM traffic drops
// from 48 to 32 KB per slab.
// Prediction: L2 bandwidth (~7.5 TB/s needed at full rate, see the banner) stops being the
// limit: +5-10%, to ~0.95-1.0 of cuBLAS.
// A lesson from the first version: its remote arrive was `mbarrier.arrive.release.cluster`,
// and the step ran at 0.67 of step 5's speed (2.46 vs 1.66 ms at 8192^3 in one run). A release at
// cluster scope orders all of the thread's earlier memory accesses for the whole cluster:
// a fence, twice per slab, on the critical path of both consumers. What the arrive has to
// say -- "my wgmma reads of this stage are complete" -- was already established by
// wgmma.wait_group, so the default arrive (release at CTA scope) is enough; with it the
// step runs level with steps 4-5 (1.68 vs 1.68 ms in another run).
// Measured (results: hgemm_bf16/solution/cluster_multicast/8192x8192x8192): 650.2 TFLOP/s = 1.01 of cublas_gemmex
// Measured (results: hgemm_bf16/solution/cluster_multicast/{4096x4096x4096,2048x2048x2048,8192x8192x1024}): 0.98 / 0.93 / 0.95 of cublas_gemmex
// Targets (>= 0.95 at 4096^3 and 8192^3, >= 0.85 at 2048^3 and 8192x8192x1024): met.
//
// Options for a linear layer (matmul_tc.hpp), steps 4-6: the operand layouts change the
// producer's TMA boxes (a transposed A: two [64 k][64 m] boxes, read MN-major through
// wgmma's transpose flag for A; a transposed B: two [128 n][64 k] boxes, read K-major) and
// the consumers' descriptors (wgmma_slab); the epilogue goes through a 16 x 32 patch of
// shared memory per consumer warp (store_warp_rows: 20 KB beside the 192 KB of stages) and
// tc_parts::Epilogue::store4, as in mma_sync. Step 3 (wgmma) keeps the plain store.
//
// Split-K, steps 5-7 (the persistent grids; step 4 keeps one block per tile). What limits
// them on dW = dY^T X (1152 x 384 x 16384): 18 tiles of 128 x 256 (27 of 128 x 128 in step
// 7) for 132 SMs -- 86% of the GPU idles however fast a tile runs. The cure is mma_sync's
// deterministic split-K (tc_parts, split-K section), under the same conditions
// (split_k_allowed: fp32 C, no GELU, fewer than 2 tiles per SM); only the count differs
// (persistent_split_k: a grid of one block per SM runs in waves, so the model counts them).
// Changes:
//  * The schedule walks work units, (tile, split) pairs, numbered u = split * ctiles + ctile,
//    with the same static walk u = b, b + G, ... (G blocks or clusters). Producer and
//    consumers load and compute the unit's slab range [kt_begin, kt_end) through the same
//    ring; the last split is shorter when the slabs do not divide evenly.
//  * The epilogue: split 0 stores (or accumulates) as before; a split s > 0 waits until its
//    tile's turn counter reads s (one thread acquires; a named barrier of the threads that
//    store the tile follows), adds its partial product into C (Epilogue::later_split: C +=
//    v, no bias or residual), and every split, after a second named barrier, releases s + 1.
//    The sums are made in the order 0, 1, 2, ...: the same bits on every run.
//  * One wave: the launcher splits only as far as every unit gets a block (cluster) of its
//    own (persistent_split_k: ctiles * splits <= the blocks that fit at once), so unit u
//    runs on block u. Why waiting for a turn then cannot deadlock: split s of a tile (unit
//    u) waits only for split s - 1 (unit u - ctiles), which runs on a block of LOWER index
//    -- mma_sync's argument. Blocks (clusters) start in index order, a block only after every
//    lower one has; so the lowest unfinished unit's block is running, its slabs land (the
//    ring is its own), and its predecessor, lower still, has finished: it finishes, and by
//    induction every unit does. Nothing needs the whole grid resident at once: a kernel
//    holding SMs (a second split product on another stream included) only delays the
//    blocks not yet started. In a cluster both blocks take the same unit (the same slabs,
//    multicast to both); their two tiles have a counter each.
//    Why not several units per block: with u = split * ctiles + ctile walked u = b, b + G,
//    ..., block b's second unit (b + G) waits for unit b + G - ctiles, on block b + G - ctiles
//    > b when b < ctiles. Every block resident at once would make that safe, but two split
//    products on two streams can each hold part of the GPU while waiting for blocks of
//    their own that cannot start. Adding in the order of the owning blocks instead (safe:
//    every wait goes to a lower block) makes a first-wave unit wait for a last-wave one;
//    a CPU model of the waits put that at 1.5-2x the time of the waves themselves. So a
//    grid with more tiles than SMs does not split (the cost model had predicted ~10% there).
// Prediction (linear_bf16 dW 1152x384x16384, H100): persistent from 0.25 to ~0.7 of cuBLAS
// (7 splits: 126 units of 37 slabs on 132 SMs, 25% of each 128 x 256 tile wasted on N = 384;
// seven serialized adds of a 128 KB tile cost ~20%); cluster_multicast similar (7 splits of
// 37 slabs, 63 cluster units of 9 cluster tiles, where 63 clusters fit); pingpong from 0.47 to ~0.8-0.9 (below). The forward products
// and the square hgemm shapes have enough tiles: no split, unchanged.
// Outcome (H100, one m01_bench run, fraction of cublas_gemmex in that run): dW persistent 0.57 (was
// 0.25), cluster_multicast 0.59 -- below the ~0.7 predicted: the serialized adds of 7 splits
// cost more than the model's 20%.
// ============================================================================
namespace ws {
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kStages = 4;
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
/// Stages, the 2 x kStages barriers (8 bytes each), the epilogue's patches, and the 1 KB
/// alignment slack.
constexpr int kBarrierBytes = 2 * kStages * 8;
constexpr int kSmemBytes = kStages * static_cast<int>(kStageBytes) + kBarrierBytes + kPatchBytes + 1024;
/// Tile-rows per group of the tile order (L2 reuse between the blocks running together).
constexpr int kGroupRows = 16;
/// Named barrier of the 256 consumer threads around a split-K turn (0 is __syncthreads').
constexpr int kSplitBarrier = 1;

/// The tile schedule of every step 4-7 block. Tiles are grouped into "cluster tiles" of
/// kCluster vertically adjacent tiles; cluster c of G takes cluster tiles c, c + G, ...,
/// in grouped order; its block of rank r computes tile row kCluster * ctile_m + r.
/// Without persistence the grid has one cluster per cluster tile: one trip each.
/// With split-K (persistent steps only, tc_parts' split-K section) the walk is over work
/// units, (cluster tile, split) pairs numbered u = split * ctiles + ctile: all of split 0,
/// then all of split 1, ... A unit covers slabs [kt_begin, kt_end) of K. Without split-K
/// (splits = 1, per_split = k_tiles) a unit is a cluster tile and its whole K.
template <int kCluster>
struct TileSchedule {
  int next, stride, total, ctiles_m, tiles_n;
  int ctiles, k_tiles, per_split;            // units per split; slabs of K; slabs per split
  int split = 0, kt_begin = 0, kt_end = 0;   // the unit last taken: its split and slab range
  int tile = 0;                              // ... and its tile's split-K turn counter
  __device__ __forceinline__ TileSchedule(int tiles_m, int tiles_n_, int k_tiles_, int splits, int per_split_) {
    next = static_cast<int>(blockIdx.x) / kCluster;
    // @step persistent  (the exercise writes the stride)
    stride = static_cast<int>(gridDim.x) / kCluster;
    // @end
    ctiles_m = (tiles_m + kCluster - 1) / kCluster;
    tiles_n = tiles_n_;
    ctiles = ctiles_m * tiles_n;
    total = ctiles * splits;
    k_tiles = k_tiles_;
    per_split = per_split_;
  }
  /// The next unit of this block (false when the schedule is done): its tile, and in the
  /// members split, kt_begin, kt_end and tile, its share of K and its turn counter.
  __device__ __forceinline__ bool take(int& tile_m, int& tile_n) {
    if (next >= total) return false;
    split = next / ctiles;
    const int ctile = next - split * ctiles;
    int ctile_m;
    grouped_tile<kGroupRows / kCluster>(ctile, ctiles_m, tiles_n, ctile_m, tile_n);
    const int rank = static_cast<int>(cc::cluster_ctarank());
    tile_m = ctile_m * kCluster + rank;
    tile = ctile * kCluster + rank;
    kt_begin = split * per_split;
    kt_end = min(k_tiles, kt_begin + per_split);
    // @step persistent  (the exercise walks the schedule)
    next += stride;
    // @end
    return true;
  }
  /// Slabs of the unit last taken (k_tiles without split-K; the last split may have fewer).
  __device__ __forceinline__ int slabs() const { return kt_end - kt_begin; }
};

/// A position in the ring of stages: index and the parity of the current pass.
struct RingPosition {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

/// kATrans / kBTrans: the operand layouts of TcMatmulArgs (a_transposed, b_transposed):
/// they change the TMA boxes the producer loads and the descriptors the consumers pass.
template <int kCluster, bool kATrans = false, bool kBTrans = false>
__global__ void __launch_bounds__(kThreads, 1)
    matmul_tc_ws_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                        const Epilogue epilogue, int K, int tiles_m, int tiles_n, int splits, int per_split,
                        int* __restrict__ turns) {
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 blocks");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t smem = aligned_smem_base(smem_raw);
  const std::uint32_t full_bar = smem + kStages * kStageBytes;  // full[s] at full_bar + 8 s
  const std::uint32_t empty_bar = full_bar + kStages * 8;      // empty[s] at empty_bar + 8 s
  const int wg = threadIdx.x / 128;
  const int k_tiles = (K + kBK - 1) / kBK;

  // Setup: one thread initialises the barriers; the fence publishes them to the TMA and to
  // the other block of the cluster, the (cluster) barrier to every thread.
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      cc::mbarrier_init(full_bar + 8 * s, 1);                // the producer's arrive (+ bytes)
      // @step cluster_multicast  (the exercise writes the arrival count)
      cc::mbarrier_init(empty_bar + 8 * s, 2 * kCluster);  // each consumer of each block
      // @end
    }
    cc::fence_barrier_init();
    cc::tma_prefetch_descriptor(&tmap_a);
    cc::tma_prefetch_descriptor(&tmap_b);
  }
  // @step cluster_multicast  (the exercise writes the cluster-wide barrier)
  if constexpr (kCluster > 1)
    cc::cluster_sync();
  else
    __syncthreads();
  // @end

  TileSchedule<kCluster> schedule(tiles_m, tiles_n, k_tiles, splits, per_split);
  RingPosition ring;
  int tile_m, tile_n;
  if (wg == 0) {
    // ---- Producer: one thread issues every copy; the other 127 only lower their registers.
    // @step tma_warp_specialized  (the exercise gives registers back)
    cc::setmaxnreg_dec<kProducerRegisters>();
    // @end
    if (threadIdx.x == 0) {
      const std::uint32_t rank = cc::cluster_ctarank();
      // @step persistent  (the exercise walks every tile)
      while (schedule.take(tile_m, tile_n)) {
      // @end
        for (int kt = schedule.kt_begin; kt < schedule.kt_end; ++kt, ring.advance()) {  // this unit's slabs
          const std::uint32_t full = full_bar + 8 * ring.stage;
          const std::uint32_t stage_a = smem + ring.stage * kStageBytes;
          const std::uint32_t stage_b = stage_a + kABytes;
          // @step tma_warp_specialized  (the exercise writes the producer's hand-off and copies)
          cc::mbarrier_wait(empty_bar + 8 * ring.stage, ring.phase ^ 1u);  // stage free (in every block)
          cc::mbarrier_arrive_expect_tx(full, kStageBytes);  // 48 KB will land here, whoever sends them
          // A: one [128 m][64 k] box, or (stored K x M) two [64 k][64 m] boxes.
          if constexpr (!kATrans) {
            cc::tma_load_2d(stage_a, &tmap_a, full, kt * kBK, tile_m * kBM);
          } else {
            cc::tma_load_2d(stage_a, &tmap_a, full, tile_m * kBM, kt * kBK);
            cc::tma_load_2d(stage_a + kBBlockBytes, &tmap_a, full, tile_m * kBM + 64, kt * kBK);
          }
          // B: four [64 k][64 n] boxes, or (stored N x K) two [128 n][64 k] boxes; in a
          // cluster each block loads its share and multicasts it to both.
          constexpr int kBoxes = kBTrans ? 2 : kBN / 64;
          constexpr std::uint32_t kBoxBytes = kBBytes / kBoxes;
#pragma unroll
          for (int j = 0; j < kBoxes; ++j) {
            const int x = kBTrans ? kt * kBK : tile_n * kBN + 64 * j;    // inner coordinate
            const int y = kBTrans ? tile_n * kBN + 128 * j : kt * kBK;   // row coordinate
            if constexpr (kCluster == 1)
              cc::tma_load_2d(stage_b + j * kBoxBytes, &tmap_b, full, x, y);
            else if (j % kCluster == static_cast<int>(rank))  // my share of B, for both blocks
              cc::tma_load_2d_multicast(stage_b + j * kBoxBytes, &tmap_b, full, x, y,
                                        static_cast<std::uint16_t>((1u << kCluster) - 1));
          }
          // @end
        }
      }
    }
  } else {
    // ---- Consumers: warpgroup 1 computes rows 0-63 of the tile, warpgroup 2 rows 64-127.
    // @step tma_warp_specialized  (the exercise takes registers)
    cc::setmaxnreg_inc<kConsumerRegisters>();
    // @end
    const int cw = wg - 1;
    float* patch = reinterpret_cast<float*>(smem_raw + (smem - cc::smem_u32(smem_raw)) + kStages * kStageBytes +
                                            kBarrierBytes) +
                   (threadIdx.x / 32 - 4) * 16 * 40;  // this consumer warp's patch (store_warp_rows)
    float acc[128];
    // Release a stage: one arrival per warpgroup, on the empty barrier of every block that
    // the producers of this cluster may refill it for.
    auto release = [&](int stage) {
      // @step tma_warp_specialized  (the exercise writes the release)
      if (threadIdx.x % 128 == 0) {
        if constexpr (kCluster == 1) {
          cc::mbarrier_arrive(empty_bar + 8 * stage);
        } else {
#pragma unroll
          for (int r = 0; r < kCluster; ++r) cc::mbarrier_arrive_cluster(empty_bar + 8 * stage, r);
        }
      }
      // @end
    };
    // @step persistent  (the exercise walks every tile)
    while (schedule.take(tile_m, tile_n)) {
    // @end
      zero(acc);
      for (int kt = schedule.kt_begin; kt < schedule.kt_end; ++kt, ring.advance()) {
        // @step tma_warp_specialized  (the exercise writes the consumers' wait and math)
        cc::mbarrier_wait(full_bar + 8 * ring.stage, ring.phase);  // the stage's 48 KB have landed
        const std::uint32_t stage_a = smem + ring.stage * kStageBytes;
        cc::wgmma_fence();
        wgmma_slab<kATrans, kBTrans>(acc, stage_a, stage_a + kABytes, cw);
        cc::wgmma_commit();
        cc::wgmma_wait<0>();
        // @end
        release(ring.stage);
      }
      // Plain fp32 C: straight from the registers, the store steps 4-6 were measured with
      // (the patch round trip cost up to ~15% at K = 1024 in one H100 run); with options:
      // through the patch and Epilogue::store4. A later split of K (persistent steps) waits
      // for its tile's turn and adds its partial product; every split passes the turn on.
      const int row0 = tile_m * kBM + 64 * cw, n0 = tile_n * kBN;
      if (schedule.split > 0) {
        if (threadIdx.x == 128) wait_split_turn(turns, schedule.tile, schedule.split);
        cc::named_barrier_sync(kSplitBarrier, 256);  // both consumers read C after the acquire
        store_warp_rows(acc, patch, epilogue.later_split(), row0, n0);
      } else if (epilogue.plain) {
        store_warpgroup_tile(acc, epilogue.c, epilogue.m, epilogue.n, epilogue.ldc, epilogue.pairs_ok, row0, n0);
      } else {
        store_warp_rows(acc, patch, epilogue, row0, n0);
      }
      if (splits > 1) {
        cc::named_barrier_sync(kSplitBarrier, 256);  // every store of the tile, then the release
        if (threadIdx.x == 128) pass_split_turn(turns, schedule.tile, schedule.split);
      }
    }
  }
  // A block must not exit while its cluster peer may still arrive on its barriers.
  // @step cluster_multicast  (the exercise keeps the block alive for its peer)
  if constexpr (kCluster > 1) cc::cluster_sync();
  // @end
#else
  (void)tmap_a, (void)tmap_b, (void)epilogue, (void)K, (void)tiles_m, (void)tiles_n, (void)splits, (void)per_split,
      (void)turns;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

/// Launches the warp-specialized kernel: non-persistent (one cluster per cluster tile) or
/// persistent (as many clusters as fit on the GPU at once, at most one per cluster tile).
template <int kCluster, bool kATrans, bool kBTrans>
void launch_ws_layout(const TcMatmulArgs& a, bool persistent, const char* step) {
  const int tiles_m = static_cast<int>((a.m + kBM - 1) / kBM);
  const int tiles_n = static_cast<int>((a.n + kBN - 1) / kBN);
  const int ctiles = static_cast<int>(grid_blocks((a.m + kCluster - 1) / kCluster, a.n, kBM, kBN, step));
  // The tensor maps of the stored operands: A is M x K (K x M transposed), B is K x N
  // (N x K transposed); the boxes are what the producer loads per stage (see the kernel).
  const CUtensorMap map_a = kATrans ? make_tma_map_bf16_2d(a.a, a.k, a.m, a.lda, kBK, 64, TmaSwizzle::bytes128)
                                    : make_tma_map_bf16_2d(a.a, a.m, a.k, a.lda, kBM, kBK, TmaSwizzle::bytes128);
  const CUtensorMap map_b = kBTrans ? make_tma_map_bf16_2d(a.b, a.n, a.k, a.ldb, 128, kBK, TmaSwizzle::bytes128)
                                    : make_tma_map_bf16_2d(a.b, a.k, a.n, a.ldb, kBK, 64, TmaSwizzle::bytes128);
  constexpr auto kernel = matmul_tc_ws_kernel<kCluster, kATrans, kBTrans>;
  cc::opt_in_dynamic_smem<kernel>(ws::kSmemBytes);

  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kCluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.blockDim = dim3(ws::kThreads);
  config.dynamicSmemBytes = ws::kSmemBytes;
  config.stream = a.stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  int clusters = ctiles;
  if (persistent) {
    // @step persistent  (the exercise sizes the persistent grid)
    config.gridDim = dim3(ctiles * kCluster);
    int fit = 0;
    COURSE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit, kernel, &config));
    require_arg(fit >= 1, step, "clusters that fit", fit, "must be >= 1 (not enough shared memory per SM?)");
    clusters = std::min(ctiles, fit);
    // @end
  }
  // Split-K (persistent only; persistent_split_k): few tiles and a long K make more work
  // units than cluster tiles, and the grid grows to as many clusters as fit at once (still
  // a persistent grid; step 5's banner says why the turns need nothing more of it).
  const int k_tiles = static_cast<int>((a.k + kBK - 1) / kBK);
  SplitK plan{1, k_tiles};
  int* turns = nullptr;
  const std::int64_t tiles = static_cast<std::int64_t>(tiles_m) * tiles_n;
  if (persistent && split_k_allowed(a, tiles, device_properties().multiProcessorCount)) {
    config.gridDim = dim3(ctiles * kCluster);
    int fit = 0;
    COURSE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit, kernel, &config));
    plan = persistent_split_k(a, tiles, ctiles, fit, k_tiles);
    if (plan.splits > 1) {
      clusters = std::min(ctiles * plan.splits, fit);
      // This launch's own counters, one per tile (a cluster tile has kCluster), in stream
      // order (tc_parts::zeroed_turns), freed after the launch.
      turns = zeroed_turns(ctiles * kCluster, a.stream);
    }
  }
  config.gridDim = dim3(clusters * kCluster);
  const cudaError_t launched = cudaLaunchKernelEx(&config, kernel, map_a, map_b, Epilogue::from(a),
                                                  static_cast<int>(a.k), tiles_m, tiles_n, plan.splits, plan.slabs, turns);
  free_turns(turns, a.stream);  // also when the launch failed
  COURSE_CUDA_CHECK(launched);
  COURSE_CHECK_LAUNCH("matmul_tc_ws_kernel");
}

/// One kernel per operand layout; the epilogue options are runtime flags of Epilogue.
template <int kCluster>
void launch_ws(const TcMatmulArgs& a, bool persistent, const char* step) {
  require_sm90a(step);
  if (!a.a_transposed && !a.b_transposed) launch_ws_layout<kCluster, false, false>(a, persistent, step);
  else if (!a.a_transposed) launch_ws_layout<kCluster, false, true>(a, persistent, step);
  else if (!a.b_transposed) launch_ws_layout<kCluster, true, false>(a, persistent, step);
  else launch_ws_layout<kCluster, true, true>(a, persistent, step);
}
}  // namespace ws

// ============================================================================
// Step 7: pingpong -- each consumer warpgroup owns a tile; they take turns on the tensor cores.
//
// What limits steps 5-6 at the GPT's linear shapes (M = 16384, K = 384 or 1152-1536): a
// tile's main loop is short (6 slabs at K = 384, ~1.7 us), and its epilogue (128 x 256
// outputs, with bias, GELU, residual, bf16 rounding) takes a large fraction of that. Both
// consumers compute the SAME tile, so both store at once and the tensor cores idle while
// they do; the producer can only prefetch the next tile's first 4 slabs. And N = 384 or
// 1152 is not a multiple of 256: 25% / 11% of each tile row is computed for nothing.
// (Where steps 4-6 stand beside cuBLAS at these shapes: docs/results.md, linear_bf16.)
//
// Changes from step 5 (persistent):
//  * Each consumer warpgroup owns its own 128 x 128 output tile: per k16, two wgmma
//    m64n128k16 (rows 0-63 into acc[0], rows 64-127 into acc[1], the same B descriptor): still
//    128 fp32 accumulators per thread. N = 384 and 1152 are multiples of 128: no waste.
//  * The block's tiles (the persistent schedule, grouped order, now over 128 x 128 tiles)
//    are dealt alternately: tile t of the block's walk to consumer t % 2.
//  * One ring of kStages = 6 stages (5 since the staged epilogue, below) of 32 KB (A [128 m][64 k] + B [64 k][128 n]). The
//    producer loads every tile's slabs in walk order, exactly as before; a consumer waits
//    only for its own tiles' slabs and SKIPS the other's: after a tile of the other
//    consumer it advances its ring position by k_tiles at once (Ring::skip: stage +=
//    k_tiles mod kStages, phase flipped once per wrap). Both consumers thus agree with the
//    producer on which stage and phase holds slab i of the walk, and each stage's empty
//    barrier counts ONE arrival (the consumer of that slab).
//  * Turns (module 3's tc_pingpong): an ordered pair of named barriers, kTurnBarrier + c
//    for consumer c. The consumer of tile t (t >= 1) waits for its turn (bar.sync, 256
//    threads), issues its whole main loop, and, if the block has a tile t + 1, passes the
//    turn (bar.arrive on the other's barrier) right after issuing its last slab; then it
//    drains its wgmmas and runs its epilogue WHILE the other consumer runs its main loop.
//    Each pass is matched by exactly one wait (tile 0 needs none, the last tile gives none),
//    so no barrier is left half-arrived at exit.
//  * Why the single ring's parities are safe: a parity wait cannot tell phase p from phase
//    p - 2, so no consumer may wait on a stage more than one pass ahead of the slab it
//    holds. The turns guarantee it: the consumer of tile t starts waiting only after the
//    consumer of tile t - 1 has waited for (so seen land) every slab of tile t - 1, and by
//    induction every slab before its own has landed. Without the turns consumer B could
//    reach tile t + 1's first slab while tile t's (same stage, one pass earlier) had not
//    landed yet, and its wait would return at once.
//  * Only one consumer issues at a time, so draining every slab (wait_group 0, steps 4-6)
//    would leave the tensor cores idle between slabs: a consumer keeps one slab in flight
//    (wait_group 1) and releases the stage of the slab before.
// The epilogue was steps 4-6's (store_warp_rows, tc_parts::Epilogue: every option; a bf16 C
// now takes the staged epilogue, below), and the tensor maps are theirs (the B box for a transposed B is already [128 n][64 k]; a plain B
// is two [64 k][64 n] boxes instead of four).
// Prediction (linear_bf16, speed / cuBLAS on an H100: cuBLAS time over this step's time):
//   fwd 16384x1152x384 ~0.85 (0.75-0.95); fc+GELU 16384x1536x384 ~0.8 (0.7-0.9);
//   proj+residual 16384x384x1536 ~0.9 (0.8-1.0); dX 16384x384x1152 ~0.9 (0.8-1.0);
//   dW 1152x384x16384 ~0.4: only 27 tiles of 128 x 128 for 132 SMs, one consumer busy per
//   block -- K = 16384 wants split-K, which this step did not do at first (below).
//   At 8192^3 (hgemm_bf16): level with step 5 (~0.85-0.95), perhaps a little below: a
//   128 x 128 tile loads 32 KB per 2.1 MFLOP slab against 48 KB per 4.2 MFLOP, ~37% more
//   L2 -> shared traffic per FLOP (~10 TB/s over the chip at full rate), which is what
//   step 6's multicast had taken away.
// Outcome (H100, m01_bench, one run; persistent in brackets): fwd 0.58 (0.55), fc+GELU 0.47
//   (0.45), proj+residual 0.55 (0.47), dX 0.85 (0.67), dW 0.47 (0.25) of cuBLAS: the fastest
//   step at every linear shape, far below the prediction on the forward products. ncu, fwd:
//   tensor pipe busy 26% against cuBLAS's 61%, same DRAM bytes; with K = 384 a tile is six
//   slabs, ~1.5 us of wgmma, and the turn hand-off and ring refill cost about as much.
//   cuBLAS uses 192 x 192 tiles in 2-block clusters there. At 8192^3: 0.78 of cuBLAS
//   (tma_warp_specialized 1.00, cluster_multicast 0.95). Lesson: module01_basics/README.md.
// Split-K (steps 5-7, see the steps 4-6 banner): the block's walk is over (tile, split)
// units, dealt to the consumers alternately as tiles were (with split-K one unit per
// block, so consumer 0 alone; the general walk is kept, and stays right for any unit
// lengths); a unit's slabs are its split's range, so consecutive units may differ in length (the last split is shorter when the
// slabs do not divide evenly), and Ring::skip advances by the skipped unit's own count
// (TileSchedule::slabs(), which every consumer computes from the same unit number). The
// parity argument above does not depend on the counts: it needs only that the producer and
// both consumers agree on where slab i of the walk lives (they do: the same units in the
// same order, each's slab count from its number), and that the consumer of unit t starts
// waiting after the consumer of unit t - 1 has seen all its slabs land (the turns, as
// before). A consumer waits for its tile's split turn only in its epilogue, after passing
// the tensor-core turn and releasing its last stage, so the other consumer and the producer
// never wait on it for the unit it holds; the split turn's own barrier is the consumer's
// 128 threads (kSplitBarrier + cw = 3 or 4; 1 and 2 are the tensor-core turns, 0
// __syncthreads'). dW on 132 SMs: 4 splits of 64 slabs, 108 units, one per block.
// Prediction: dW from 0.47 to ~0.8-0.9 of cuBLAS (108 of 132 SMs busy, each on 4096 of K,
// plus three serialized adds of a 128 x 128 tile); the other products unchanged.
// Outcome (H100, one m01_bench run): dW 0.81 of cublas_gemmex (was 0.47), inside the
// prediction; dX 0.89, the forward products 0.48-0.83 as before the split.
// The staged epilogue (bf16 C). Measured first (H100, fwd 16384x1152x384, globaltimer
// stamps of two blocks' consumers): a consumer's main loop took 4.0 us, its epilogue 8-10 us
// (7.6 us even as plain fp32 stores from registers), so the other consumer's main loop hid
// under less than half of it. ncu: 17.8 M instructions against cuBLAS's 3.2 M, ~3.9 k per
// warp per tile, issued by one warp per scheduler, each waiting on the one before
// (store_warp_rows re-tests every option per value in a rolled loop). Changes:
//  * staged_pass (since split into add_bias, apply_gelu and stage_tile: "The epilogue in
//    phases" below): the accumulator pairs plus bias (then GELU, then the residual) rounded to
//    bf16 straight into a 32 KB staging tile per consumer, in the 128-byte-swizzle layout,
//    unrolled, the options template flags: ~5 instructions per pair.
//  * store_staged_tile: fence.proxy.async, the consumer's barrier, and two TMA stores
//    (tma_store_2d, [128 rows][64 columns] boxes) that run on while the consumer takes its
//    next turn; the staging tile is reused once they have read it (bulk_wait_group_read).
//  * A residual in place (C += ...) comes in by a TMA load of C's tile into the staging
//    tile, issued when the consumer's turn begins, completing on its residual barrier.
//  * GELU as x / (1 + e^(-2u)) with the SFU's exponential (gelu_tanh_fast): 128 inlined
//    tanhf would outgrow the instruction cache. (The SFU's tanh in (1 + tanh(u)) x / 2, tried
//    first, passed the tests' absolute bounds but was ~1% off in relative terms for x < -2:
//    1 + tanh(u) cancels there. Review caught it.)
//  * The ring drops from 6 to 5 stages to make room (5 x 32 + 2 x 32 KB).
//  Only for a bf16 C that TMA can store (staged_epilogue_applies); everything else keeps the
//  older epilogue (an fp32 C, accumulate, split-K, a residual that is not C itself, pre_gelu
//  beside a residual, pointers not 16-byte aligned, N % 8 != 0). The first fuzz run failed 9
//  of 512 cases, all with N % 8 != 0 in a padded C whose ldc is a multiple of 8 (the checker
//  poisons the padding): a probe then showed the TMA store writing each row on to the next
//  16-byte boundary past N (N = 7 or 127: one element more, N = 100: four), so N % 8 == 0 is
//  required; 515 of 515 pass.
// Prediction: the epilogue from ~9 to ~1-2 us, under the other's 4 us main loop, so a tile
//   every ~4 us instead of ~6.5: fwd, proj+residual and dX to ~0.85-0.95 of cuBLAS; fc+GELU
//   less (a second pass and store for pre_gelu); dW unchanged (fp32, accumulate).
// Outcome (H100, one m01_bench run, of cublas_gemmex; before in brackets): fwd 0.78 (0.60),
//   fc+GELU 0.58 (0.47), proj+residual 0.88 (0.56), dX 0.97 (0.83), dW 0.75 (path unchanged; 0.74-0.90 over runs);
//   with the sigmoid-form GELU (results page): 0.82, 0.54, 0.90, 0.97, 0.74.
//   Stamps after: epilogue 3.4-4.6 us for fwd (not 1-2: the bias loads and the wait for the
//   TMA's read are in it), 6.5-7.5 us for fc+GELU (two passes, two stores), the main loop
//   still 4.0 us, and its last slab completes 30 ns after it is issued: the six slabs wait
//   on their data, 32 KiB per 0.66 us, ~50 GB/s per SM. A 128 x 128 tile moves 192 KB of
//   L2 -> shared traffic at K = 384; cuBLAS's 192 x 192 tiles in 2-block clusters moved 163 MB
//   to this kernel's 233 MB (ncu, before the change; the loads are the same). Tried and not
//   kept: B multicast across 2-block clusters (step 6's scheme), a quarter less L2 traffic,
//   correct (tests, fuzz, sanitizers) but no faster (fwd 0.80, fc+GELU 0.51, proj+residual
//   0.88, dX 0.95, dW 0.65 of cuBLAS in its run): the slabs do not wait on bandwidth; latency
//   is what is left (five stages in flight at ~50 GB/s would be ~3.3 us a round trip; not measured).
// The epilogue in phases. The stamps above left the bias loads inside the epilogue (the 16
// column pairs' __ldg, L1 misses on each line's first use in a tile, with one consumer warp
// per scheduler and nothing else to hide them), and with pre_gelu the GELU math queued
// behind the first store's read. Changes:
//  * the bias row: thread i loads column n0 + i when the tile's turn begins (the load in
//    flight during the main loop), writes it to its consumer's 512-byte row of shared memory
//    after it, one barrier; add_bias reads float2 pairs from there (1 KB more shared memory).
//  * phases: add_bias, then (pre_gelu) stage and store the pre-activation, apply_gelu in
//    place while those stores read the staging tile, wait, stage and store the output.
//    stage_tile only rounds (and adds the residual).
// Prediction: a smaller step than the staged epilogue's: the fwd epilogue 3.4-4.6 -> ~3 us,
//   fc+GELU 6.5-7.5 -> ~5 us (bias loads ~0.5-1 us, the wait ~1 us): fwd ~0.9, fc+GELU
//   ~0.65 of cuBLAS; proj+residual (long K: its epilogue was already hidden) and dX (no
//   bias) unchanged.
// Outcome (H100; three A/B m01_bench runs against the kernel before, time ratios): fwd
//   0.71-0.73, fc+GELU 0.67-0.68, GELU without pre_gelu 0.83-0.84, proj+residual 0.96-0.98,
//   dX 0.99-1.01, dW unchanged -- far more than predicted for fwd: the bias loads were most
//   of the epilogue's excess. Of cuBLAS (its own results run): fwd 1.13, fc+GELU 0.78, GELU
//   only 0.91, proj+residual 0.92, dX 0.99, dW 0.72.
// An fp32 C through TMA (staged_f32_epilogue). dW (fp32, accumulated, 4 splits of K) still
// added each split's partial tile with store_warp_rows' atomics, four adds one after another
// per tile. Now the tile leaves in two 64-column halves through the staging tile, each
// stored or (accumulate, later splits) added at L2 by cp.reduce.async.bulk.tensor .add; the
// turn is taken before the first copy and handed on after bulk_wait_group (proxy fences on
// both sides), so the splits still add in order and dW is the same bits on every run.
// Prediction: each add from several us to ~1, dW ~55 -> ~47-50 us (0.9-0.97 of PyTorch's
//   addmm); plain fp32 GEMMs a little faster.
// Outcome (H100, two A/B m01_bench runs, time ratios): dW 0.81-0.89, hgemm 4096^3
//   0.92-0.93, 8192x8192x1024 0.84-0.85, 8192^3 0.98-0.99; beside PyTorch dW 0.95.
// Left: dX at ~0.85 of PyTorch. ncu: 226 MB L2 -> SM in 29.9 us (7.6 TB/s) against cuBLAS's
// 189 MB in 24.6 us (192 x 128 tiles, 2-block clusters): the same rate, 17% fewer bytes.
// Tried, correct, not kept (H100 A/B time ratios): a 6-stage ring with a 16 KB staging tile
// (dX 0.99-1.04: not latency); 128 x 192 consumer tiles (8192^3 0.86, but dX 1.04-1.14 and
// the GELU products ~1.55: 192 accumulators spill the epilogue even at 240 registers).
// Wide tiles. The bytes were not it either: 192 x 128 consumer tiles (three m64n128k16 a
// k16, 192 accumulators, a 4 x 40 KB ring, the bf16 epilogue in two 64-column passes; no
// spills once only that epilogue was compiled beside them) moved cuBLAS's 189 MB and took
// 29.6 us against 29.5 (ncu; A/B dX 0.94-1.04). Both tile shapes ran the main loop at ~3.8
// TFLOP/s per SM, in proportion to FLOPs, not bytes. The cooperative steps reach ~5 at
// 8192^3 (tma_warp_specialized 660 TFLOP/s, this step 561), and cuBLAS's dX kernel is
// cooperative ("coop" in its name). So for a bf16 C without GELU and N a multiple of 192
// (the GPT's 384, 1152, 1536) the step switches to steps 4-6's schedule with this step's
// staged epilogue (namespace wide): both consumers on one 128 x 192 tile, 64 rows each, one
// wgmma m64n192k16 a k16 (96 accumulators), a 4 x 40 KB ring whose stages both release, a
// 24 KB staging tile per consumer stored as three [64][64] boxes. Its epilogue is no longer
// hidden under another main loop, which is why GELU (two passes) stays on pingpong.
// Prediction: dX's main loop at the cooperative steps' ~5 TFLOP/s per SM less ~1 us of
//   exposed epilogues: 29.5 -> ~26-27 us, ~0.95 of PyTorch; fwd about level (K = 384: the
//   epilogue is a larger share); the GELU products slower (hence the rule).
// Outcome (H100; two A/B m01_bench runs against pingpong, time ratios, GELU products still
//   wide in that build): dX 0.92-0.93, dX fc 0.93-0.95, dX proj 0.91-0.96, proj+residual
//   0.89-0.94, fwd 0.99-1.04, GELU products 1.03-1.07; ncu dX 26.2 us (pingpong 29.5,
//   cuBLAS 24.6). Beside PyTorch (compare_torch.py, one H100 run of the final kernel): dX
//   0.89 and dX fc 0.89 (were 0.85, 0.84: still below 0.9), dX proj 1.05, proj+residual
//   1.08, fwd 1.06. Tried, not kept: B multicast across 2-block clusters on top, as cuBLAS's
//   kernel does (1x2): dX 28.6 us under ncu, 1.02-1.12 of the time without it (why was not
//   measured; each stage then waits for the slowest of four consumers in two blocks).
// Where dX's last 10% went: the L2's state, not the kernel. Under torch.profiler in one process
//   (H100), the wide kernel ran dX in 0.997 of cuBLAS's kernel time after a 256 MiB read, but
//   0.87 after a 256 MiB zero -- the flush compare_torch.py and triton's do_bench use, which
//   leaves the L2 full of dirty lines (under ncu, whose replay does not keep that state: 0.95).
//   A's misses then evict dirty lines, whose write-backs share the HBM with A's 39 MB of
//   reads (inferred, not counted: ncu saw only 2.6 MB written). Loading A evict-first
//   (createpolicy; A's rows are read by the two blocks of their tile row when N = 384, running
//   side by side) lets A's lines replace each other instead. Prediction: dX kernel time after
//   the zero back near the clean-L2 time.
// Outcome (H100, one run): after the zero, dX kernel-only 0.87 -> 0.95 of cuBLAS's, dX fc
//   0.87 -> 0.94; unchanged after a read (0.997). compare_torch.py: dX 0.96, dX fc 0.96 of
//   PyTorch (0.88 before, same timer). With evict-first on every wide launch, dX proj
//   (N = 1536: eight blocks a tile row) fell to 0.95 and fwd qkv (six) to 0.98 (1.01-1.06
//   in the runs without): a line can go before the last of them reads it. So N > 384 keeps
//   the normal policy (dX proj 1.07, fwd qkv 1.07 in the final run).
// Tried, correct, not kept: two accumulator sets per consumer (240 registers, no spills),
//   the next tile's first slab issued before this tile's epilogue so the tensor cores work
//   under it. ncu dX 27.6 us against 26.0 without; m01_bench A/B ratios 0.97-1.06 (noise).
//   ptxas serialized every wgmma (C7518) until the epilogue sat inside both branches of
//   "is there a next tile", not after them.
// ============================================================================
namespace pingpong {
constexpr int kTN = 128;                                       // a consumer's tile: 128 x 128
constexpr std::uint32_t kBTileBytes = kBK * kTN * 2;           // 16 KB: two [64 k][64 n] blocks
constexpr std::uint32_t kStageBytes = kABytes + kBTileBytes;   // 32 KB per stage
constexpr int kStages = 5;
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
constexpr std::uint32_t kStagingBytes = kBM * kTN * 2;  // 32 KB: a consumer's 128 x 128 tile in bf16
constexpr int kBarrierBytes = 2 * kStages * 8 + 2 * 8;  // full and empty per stage, a residual barrier per consumer
constexpr int kBiasRowBytes = kTN * 4;                  // a consumer's 128 bias values (staged epilogue)
/// Stages, then each consumer's staging tile (which store_warp_rows' patches reuse when the
/// epilogue is not staged), then the barriers, each consumer's bias row, and the 1 KB
/// alignment slack.
constexpr int kSmemBytes = kStages * static_cast<int>(kStageBytes) + 2 * static_cast<int>(kStagingBytes) +
                           kBarrierBytes + 2 * kBiasRowBytes + 1024;
static_assert(kPatchBytes <= 2 * static_cast<int>(kStagingBytes), "the patches live in the staging tiles");
static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper block may have");
/// Named barriers: kTurnBarrier + c is consumer c's turn (0 is __syncthreads'), kSplitBarrier
/// + c gathers consumer c's 128 threads around a split-K turn, kStagingBarrier + c around
/// its staging tile.
constexpr int kTurnBarrier = 1;
constexpr int kSplitBarrier = 3;
constexpr int kStagingBarrier = 5;

/// A position in a ring of kRingStages stages, shared by the producer's walk and each
/// consumer's view of it.
template <int kRingStages>
struct Ring {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kRingStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
  /// n advances at once: past the slabs of a tile of the other consumer.
  __device__ __forceinline__ void skip(int n) {
    // @step pingpong  (the exercise writes the skip)
    const int s = stage + n;
    stage = s % kRingStages;
    phase ^= static_cast<std::uint32_t>(s / kRingStages) & 1u;
    // @end
  }
};

/// One slab of a consumer's 128 x 128 tile: per k16 step, two wgmma m64n128k16 with the same
/// B descriptor, rows 0-63 into acc[0] and rows 64-127 into acc[1]. Descriptors as in
/// wgmma_slab, with the half h of the tile in place of the warpgroup. Issued only.
/// first: the tile's first slab, whose first k16 step overwrites the accumulators
/// (wgmma's scale-d = 0) instead of adding. No zeroing with ordinary instructions: those
/// can make ptxas serialize the wgmmas (C7515; the first build of this step's stub did).
template <bool kATrans, bool kBTrans>
__device__ __forceinline__ void wgmma_slab_128(float (&acc)[2][64], std::uint32_t stage_a, std::uint32_t stage_b,
                                               bool first) {
#pragma unroll
  for (int ks = 0; ks < kBK / 16; ++ks) {
    const std::uint64_t db = kBTrans ? cc::wgmma_desc_sw128(stage_b + ks * 32, 16, 1024)
                                     : cc::wgmma_desc_sw128(stage_b + ks * 16 * 128, kBBlockBytes, 1024);
    const std::uint64_t da0 = kATrans ? cc::wgmma_desc_sw128(stage_a + ks * 16 * 128, kBBlockBytes, 1024)
                                      : cc::wgmma_desc_sw128(stage_a + ks * 32, 16, 1024);
    const std::uint64_t da1 = kATrans ? cc::wgmma_desc_sw128(stage_a + kBBlockBytes + ks * 16 * 128, kBBlockBytes, 1024)
                                      : cc::wgmma_desc_sw128(stage_a + 64 * 128 + ks * 32, 16, 1024);
    const int accumulate = (first && ks == 0) ? 0 : 1;
    cc::wgmma_m64n128k16_bf16_f32</*kBMnMajor=*/!kBTrans, /*kAMnMajor=*/kATrans>(acc[0], da0, db, accumulate);
    cc::wgmma_m64n128k16_bf16_f32</*kBMnMajor=*/!kBTrans, /*kAMnMajor=*/kATrans>(acc[1], da1, db, accumulate);
  }
}

/// Waits until the tensor cores are consumer cw's: the other consumer's 128 threads have
/// arrived (pass_turn) and cw's 128 sync -- 256 in all.
__device__ __forceinline__ void wait_turn(int cw) {
  // @step pingpong  (the exercise writes the wait)
  cc::named_barrier_sync(kTurnBarrier + cw, 256);
  // @end
}

/// Hands the tensor cores to the other consumer, right after issuing (its wgmmas queue
/// behind ours): counted on its barrier without waiting.
__device__ __forceinline__ void pass_turn(int cw) {
  // @step pingpong  (the exercise writes the pass)
  cc::named_barrier_arrive(kTurnBarrier + (1 - cw), 256);
  // @end
}

/// Where a staged kernel's shared memory goes (pingpong's and the wide tiles'): the ring's
/// kRingStages stages of kRingStageBytes, each consumer's staging tile (kStagingTileBytes), the
/// full and empty barrier of each stage, a residual barrier per consumer, each consumer's bias
/// row. The stores of store_warp_rows' patches, when the epilogue is not staged, reuse the
/// staging tiles.
template <int kRingStages, std::uint32_t kRingStageBytes, std::uint32_t kStagingTileBytes>
struct StagedSmem {
  std::uint32_t smem;           // stage s at smem + s * kRingStageBytes
  std::uint32_t staging0;       // consumer c's staging tile at staging0 + c * kStagingTileBytes
  std::uint32_t full_bar;       // full[s] at full_bar + 8 s
  std::uint32_t empty_bar;      // empty[s] at empty_bar + 8 s
  std::uint32_t residual_bar0;  // consumer c's at residual_bar0 + 8 c
  std::uint32_t bias_row0;      // consumer c's bias row at bias_row0 + c * its bytes
  __device__ __forceinline__ explicit StagedSmem(unsigned char* raw)
      : smem(aligned_smem_base(raw)),
        staging0(smem + kRingStages * kRingStageBytes),
        full_bar(staging0 + 2 * kStagingTileBytes),
        empty_bar(full_bar + kRingStages * 8),
        residual_bar0(empty_bar + kRingStages * 8),
        bias_row0(residual_bar0 + 2 * 8) {}
  /// Thread 0, before the block's __syncthreads: the barriers -- full ones for the producer's
  /// arrive (+ bytes), empty ones for `releasers` consumer arrivals, the residual ones for a
  /// consumer's first thread (+ its tile of C) -- and the prefetch of A's and B's tensor maps.
  __device__ __forceinline__ void init(int releasers, const CUtensorMap* tmap_a, const CUtensorMap* tmap_b) const {
    for (int s = 0; s < kRingStages; ++s) {
      cc::mbarrier_init(full_bar + 8 * s, 1);
      cc::mbarrier_init(empty_bar + 8 * s, releasers);
    }
    cc::mbarrier_init(residual_bar0, 1);
    cc::mbarrier_init(residual_bar0 + 8, 1);
    cc::fence_barrier_init();
    cc::tma_prefetch_descriptor(tmap_a);
    cc::tma_prefetch_descriptor(tmap_b);
  }
};

/// A consumer's staging tile: [128 rows][128 columns] of bf16 as two [128][64] blocks of
/// 128-byte rows, 16-byte chunk q of row r at q ^ (r % 8) -- the layout SWIZZLE_128B TMA
/// copies read (stores) and write (loads). A warp's step of stage_tile (rows g and g + 8,
/// the 4-byte pair t of chunk j for g = 0..7) lands on 8 different chunks: no bank conflicts.
/// (The wide tiles below stage [64 rows][192 columns], three such blocks.)
using StagingGeom = cc::Sw128Geom<kTN, kBM>;

/// The walk of a consumer's accumulator pairs that the staging passes share: calls
/// f(row, j, lo, hi) for the thread's pairs of columns (8 j + 2 t, + 1) with j in [kJ0, kJ1),
/// in rows 64 b + 16 warp + g + 8 h of the tile: acc[b] holds the wgmma fragments of row
/// block b (the layout of store_warpgroup_tile, kN / 4 column groups of 8).
template <int kJ0, int kJ1, int kRB, int kN, typename F>
__device__ __forceinline__ void for_each_pair(const float (&acc)[kRB][kN], F&& f) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int g = lane / 4;
#pragma unroll
  for (int j = kJ0; j < kJ1; ++j) {
#pragma unroll
    for (int b = 0; b < kRB; ++b) {
#pragma unroll
      for (int h = 0; h < 2; ++h) f(64 * b + 16 * warp + g + 8 * h, j, acc[b][4 * j + 2 * h], acc[b][4 * j + 2 * h + 1]);
    }
  }
}

/// Epilogue phase 1: the bias pair of each of the thread's columns added to its accumulators
/// (fragment layout as in for_each_pair), from the consumer's row of bias values in shared
/// memory (skipped without a bias). The row was loaded when the tile's turn began, so the
/// global load's latency hid under the main loop.
template <int kRB, int kN>
__device__ __forceinline__ void add_bias(float (&acc)[kRB][kN], const float* bias_row) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < kN / 4; ++j) {
    const float2 v = *reinterpret_cast<const float2*>(bias_row + 8 * j + 2 * t);
#pragma unroll
    for (int b = 0; b < kRB; ++b) {
#pragma unroll
      for (int h = 0; h < 2; ++h) acc[b][4 * j + 2 * h] += v.x, acc[b][4 * j + 2 * h + 1] += v.y;
    }
  }
}

/// Epilogue phase 3: GELU on every accumulator, in place (the sigmoid form, gelu_tanh_fast).
template <int kRB, int kN>
__device__ __forceinline__ void apply_gelu(float (&acc)[kRB][kN]) {
#pragma unroll
  for (int b = 0; b < kRB; ++b) {
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[b][i] = cc::gelu_tanh_fast(acc[b][i]);
  }
}

/// Epilogue phases 2 and 5: every accumulator pair (plus, with kResidual, the residual pair
/// the consumer's TMA load put in its place) rounded to bf16 and written to the staging tile
/// (geometry Geom). Unrolled over the pairs: ~3 instructions per pair.
template <bool kResidual, typename Geom, int kRB, int kN>
__device__ __forceinline__ void stage_tile(const float (&acc)[kRB][kN], unsigned char* staging) {
  const int t = threadIdx.x % 4;
  for_each_pair<0, kN / 4>(acc, [&](int r, int j, float v0, float v1) {
    std::uint32_t* pair = reinterpret_cast<std::uint32_t*>(staging + Geom::offset(r, j) + 4 * t);
    if constexpr (kResidual) {
      const float2 res = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(pair));
      v0 += res.x, v1 += res.y;
    }
    *pair = cc::pack_bf16x2(v0, v1);
  });
}

/// Hands a written staging tile (geometry Geom) to the TMA: every writer's fence, the
/// consumer's barrier, then its first thread stores the tile's 64-column blocks at (row0,
/// n0 + 64 b) of `tmap` and commits.
template <typename Geom>
__device__ __forceinline__ void store_staged_tile(const CUtensorMap* tmap, std::uint32_t staging, int cw, int row0,
                                                  int n0) {
  cc::fence_proxy_async_smem();
  cc::named_barrier_sync(kStagingBarrier + cw, 128);
  if (threadIdx.x % 128 == 0) {
#pragma unroll
    for (int b = 0; b < Geom::kChunks / 8; ++b) cc::tma_store_2d(tmap, staging + b * Geom::kBlockBytes, n0 + 64 * b, row0);
    cc::bulk_commit_group();
  }
}

/// Waits (the consumer's first thread, then its barrier) until the last TMA stores from the
/// staging tile have read it.
__device__ __forceinline__ void wait_staging_free(int cw) {
  if (threadIdx.x % 128 == 0) cc::bulk_wait_group_read<0>();
  cc::named_barrier_sync(kStagingBarrier + cw, 128);
}

/// The staged epilogue of a consumer's tile (bf16 C; staged_epilogue_applies says when), in
/// the order that keeps the consumer busy while its TMA stores read the staging tile:
///   1. add_bias                     the bias row, in place
///   2. pre_gelu (when asked)        staged once the last stores have read the tile, stored
///   3. apply_gelu                   in place, while the pre_gelu stores read the tile
///   4. wait                         the staging tile free (or, with a residual, C's old tile
///                                   in it: the TMA load issued when the tile's turn began)
///   5. the output                   staged (plus the residual) and stored by TMA, which runs
///                                   on while the consumer takes its next turn
template <bool kGelu, bool kResidual, typename Geom, int kRB, int kN>
__device__ __forceinline__ void staged_epilogue(float (&acc)[kRB][kN], const Epilogue& epilogue,
                                                const float* bias_row, const CUtensorMap* tmap_c,
                                                const CUtensorMap* tmap_pre, unsigned char* staging_ptr,
                                                std::uint32_t staging, std::uint32_t residual_bar,
                                                std::uint32_t parity, int cw, int row0, int n0) {
  if (epilogue.bias != nullptr) add_bias(acc, bias_row);
  if (kGelu && epilogue.pre_gelu != nullptr) {
    wait_staging_free(cw);
    stage_tile<false, Geom>(acc, staging_ptr);
    store_staged_tile<Geom>(tmap_pre, staging, cw, row0, n0);
  }
  if constexpr (kGelu) apply_gelu(acc);
  if (kResidual) cc::mbarrier_wait(residual_bar, parity);
  else wait_staging_free(cw);
  stage_tile<kResidual, Geom>(acc, staging_ptr);
  store_staged_tile<Geom>(tmap_c, staging, cw, row0, n0);
}

/// Which epilogue a launch takes (launch_layout): store_warp_rows and friends, the staged
/// bf16 epilogue above, or the staged fp32 one below.
enum StagedEpilogue : int { kNotStaged = 0, kStagedBf16 = 1, kStagedF32 = 2 };

/// fp32 C, phase 1 of each half: the accumulators of columns 64 kHalf .. 64 kHalf + 63 into
/// the consumer's staging tile as two [128 rows][32 columns] boxes of 128-byte rows, 16-byte
/// chunk q of row r at q ^ (r % 8) (what the TMA's SWIZZLE_128B reads). A warp's float2
/// writes (rows g, two chunks each) fall on every chunk position twice: 2 wavefronts for
/// 256 bytes, the least there can be.
template <int kHalf>
__device__ __forceinline__ void stage_f32_half(const float (&acc)[2][64], unsigned char* staging) {
  const int t = threadIdx.x % 4;
  for_each_pair<8 * kHalf, 8 * kHalf + 8>(acc, [&](int r, int j, float v0, float v1) {
    const int box = (j % 8) / 4, chunk = 2 * (j % 4) + t / 2;
    *reinterpret_cast<float2*>(staging + box * (kBM * 128) + r * 128 + ((chunk ^ (r % 8)) * 16) + (t % 2) * 8) =
        make_float2(v0, v1);
  });
}

/// fp32 C, phase 2 of each half: the first thread's TMA copies of the two boxes to (row0,
/// n0 + 64 half) -- stores, or with `add` additions (C += tile) -- in one bulk group.
__device__ __forceinline__ void copy_f32_half(const CUtensorMap* tmap, std::uint32_t staging, int row0, int n0,
                                              int half, bool add) {
#pragma unroll
  for (int box = 0; box < 2; ++box) {
    const int x = n0 + 64 * half + 32 * box;
    if (add) cc::tma_reduce_add_2d(tmap, staging + box * (kBM * 128), x, row0);
    else cc::tma_store_2d(tmap, staging + box * (kBM * 128), x, row0);
  }
  cc::bulk_commit_group();
}

/// The staged epilogue of an fp32 C (staged_f32_applies: no option but accumulate): the tile
/// in two halves of 64 columns through the consumer's 32 KB staging tile, each half staged,
/// then copied by TMA -- stored, or added (accumulate, or a later split of K) atomically at
/// L2 by cp.reduce.async.bulk, ~1 us for the tile where store_warp_rows' atomics took
/// several. With split-K (`ordered`) the splits of a tile still add in split order, so the
/// sums are the same bits on every run: the first thread takes the tile's turn before the
/// first copy and hands it on once both halves' writes are done (bulk_wait_group), with a
/// proxy fence on each side (the turn is a generic-proxy flag, the copies async-proxy writes).
__device__ __forceinline__ void staged_f32_epilogue(const float (&acc)[2][64], const CUtensorMap* tmap_c,
                                                    unsigned char* staging_ptr,
                                                    std::uint32_t staging, int cw, int row0, int n0, bool add,
                                                    bool ordered, int* turns, int tile, int split) {
  const bool leader = threadIdx.x % 128 == 0;
  wait_staging_free(cw);
  stage_f32_half<0>(acc, staging_ptr);
  cc::fence_proxy_async_smem();
  cc::named_barrier_sync(kStagingBarrier + cw, 128);
  if (leader) {
    if (ordered) {
      wait_split_turn(turns, tile, split);
      cc::fence_proxy_async_global();
    }
    copy_f32_half(tmap_c, staging, row0, n0, 0, add);
  }
  wait_staging_free(cw);
  stage_f32_half<1>(acc, staging_ptr);
  cc::fence_proxy_async_smem();
  cc::named_barrier_sync(kStagingBarrier + cw, 128);
  if (leader) {
    copy_f32_half(tmap_c, staging, row0, n0, 1, add);
    if (ordered) {
      cc::bulk_wait_group<0>();
      cc::fence_proxy_async_global();
      pass_split_turn(turns, tile, split);
    }
  }
}

template <bool kATrans, bool kBTrans>
__global__ void __launch_bounds__(kThreads, 1)
    matmul_tc_pingpong_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                              const __grid_constant__ CUtensorMap tmap_c, const __grid_constant__ CUtensorMap tmap_pre,
                              const Epilogue epilogue, int staged, int K, int tiles_m, int tiles_n, int splits,
                              int per_split, int* __restrict__ turns) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const StagedSmem<kStages, kStageBytes, kStagingBytes> at(smem_raw);  // staging tiles of 32 KB, bias rows of 512 B
  const std::uint32_t smem = at.smem, staging0 = at.staging0, full_bar = at.full_bar, empty_bar = at.empty_bar,
                      residual_bar0 = at.residual_bar0, bias_row0 = at.bias_row0;
  const int wg = threadIdx.x / 128;
  const int k_tiles = (K + kBK - 1) / kBK;
  if (threadIdx.x == 0) at.init(/*releasers=*/1, &tmap_a, &tmap_b);  // the one consumer of the slab
  __syncthreads();

  // Over 128 x 128 tiles (tiles_n counts them), or (split-K) over (tile, split) units.
  ws::TileSchedule<1> schedule(tiles_m, tiles_n, k_tiles, splits, per_split);
  Ring<kStages> ring;
  int tile_m, tile_n;
  if (wg == 0) {
    // ---- Producer: every slab of every unit of the walk, in order, whichever consumer's.
    cc::setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == 0) {
      while (schedule.take(tile_m, tile_n)) {
        for (int kt = schedule.kt_begin; kt < schedule.kt_end; ++kt, ring.advance()) {
          const std::uint32_t full = full_bar + 8 * ring.stage;
          const std::uint32_t stage_a = smem + ring.stage * kStageBytes;
          const std::uint32_t stage_b = stage_a + kABytes;
          cc::mbarrier_wait(empty_bar + 8 * ring.stage, ring.phase ^ 1u);  // stage free
          cc::mbarrier_arrive_expect_tx(full, kStageBytes);                // 32 KB will land here
          if constexpr (!kATrans) {
            cc::tma_load_2d(stage_a, &tmap_a, full, kt * kBK, tile_m * kBM);
          } else {
            cc::tma_load_2d(stage_a, &tmap_a, full, tile_m * kBM, kt * kBK);
            cc::tma_load_2d(stage_a + kBBlockBytes, &tmap_a, full, tile_m * kBM + 64, kt * kBK);
          }
          // B: two [64 k][64 n] boxes, or (stored N x K) one [128 n][64 k] box.
          if constexpr (!kBTrans) {
            cc::tma_load_2d(stage_b, &tmap_b, full, tile_n * kTN, kt * kBK);
            cc::tma_load_2d(stage_b + kBBlockBytes, &tmap_b, full, tile_n * kTN + 64, kt * kBK);
          } else {
            cc::tma_load_2d(stage_b, &tmap_b, full, kt * kBK, tile_n * kTN);
          }
        }
      }
    }
  } else {
    // ---- Consumers: consumer cw computes tiles cw, cw + 2, ... of the block's walk.
    cc::setmaxnreg_inc<kConsumerRegisters>();
    const int cw = wg - 1;
    const std::uint32_t staging = staging0 + cw * kStagingBytes, residual_bar = residual_bar0 + 8 * cw;
    unsigned char* staging_ptr = smem_raw + (staging - cc::smem_u32(smem_raw));
    float* bias_row = reinterpret_cast<float*>(smem_raw + (bias_row0 + cw * kBiasRowBytes - cc::smem_u32(smem_raw)));
    float* patch = reinterpret_cast<float*>(smem_raw + (staging0 - cc::smem_u32(smem_raw))) +
                   (threadIdx.x / 32 - 4) * 16 * 40;  // this consumer warp's patch (store_warp_rows)
    const auto release = [&](int stage) {
      if (threadIdx.x % 128 == 0) cc::mbarrier_arrive(empty_bar + 8 * stage);
    };
    float acc[2][64];
    std::uint32_t own = 0;  // tiles this consumer has computed: the residual barrier's phase
    for (int t = 0; schedule.take(tile_m, tile_n); ++t) {
      // @step pingpong  (the exercise deals the tiles and takes turns)
      if (t % 2 != cw) {
        ring.skip(schedule.slabs());  // the other consumer's unit: its slabs pass this consumer by
        continue;
      }
      if (t > 0) wait_turn(cw);  // the consumer of tile t - 1 has issued its main loop
      // @end
      const int row0 = tile_m * kBM, n0 = tile_n * kTN;
      // Staged: thread i's bias value of the tile's column n0 + i, loaded now and written to
      // the bias row after the main loop, so that the load's latency hides under it.
      float bias_value = 0.f;
      if (staged == kStagedBf16 && epilogue.bias != nullptr && n0 + threadIdx.x % 128 < epilogue.n)
        bias_value = __ldg(epilogue.bias + n0 + threadIdx.x % 128);
      // Staged with a residual: C's tile comes into the staging tile (once the last tile's
      // stores have read it) while the main loop runs.
      if (staged == kStagedBf16 && epilogue.residual != nullptr && threadIdx.x % 128 == 0) {
        cc::bulk_wait_group_read<0>();
        cc::mbarrier_arrive_expect_tx(residual_bar, kStagingBytes);
        cc::tma_load_2d(staging, &tmap_c, residual_bar, n0, row0);
        cc::tma_load_2d(staging + kBM * 128, &tmap_c, residual_bar, n0 + 64, row0);
      }
      int held = 0;  // the stage of the slab still in flight
      for (int kt = schedule.kt_begin; kt < schedule.kt_end; ++kt, ring.advance()) {
        const bool first = kt == schedule.kt_begin;
        cc::mbarrier_wait(full_bar + 8 * ring.stage, ring.phase);  // the stage's 32 KB have landed
        const std::uint32_t stage_a = smem + ring.stage * kStageBytes;
        cc::wgmma_fence();
        wgmma_slab_128<kATrans, kBTrans>(acc, stage_a, stage_a + kABytes, first);
        cc::wgmma_commit();
        cc::wgmma_wait<1>();            // slab kt - 1 is complete ...
        if (!first) release(held);      // ... so its stage may be refilled
        held = ring.stage;
      }
      // @step pingpong  (the exercise passes the turn)
      // The block's tile t + 1 exists (schedule.next is its walk index): hand it the tensor
      // cores; its main loop runs under our epilogue.
      if (schedule.next < schedule.total) pass_turn(cw);
      // @end
      cc::wgmma_wait<0>();
      release(held);
      // The epilogue. Every sync on kStagingBarrier + cw must be reached by all 128 threads of
      // the consumer: the conditions below are the same for all of them.
      if (staged == kStagedBf16) {
        // The bias row of this tile (every thread of the consumer has added the last tile's:
        // they all met at its store_staged_tile), visible to all 128 after the barrier.
        if (epilogue.bias != nullptr) {
          bias_row[threadIdx.x % 128] = bias_value;
          cc::named_barrier_sync(kStagingBarrier + cw, 128);
        }
        const std::uint32_t parity = own & 1u;
        const auto finish = [&](auto gelu, auto residual) {
          staged_epilogue<decltype(gelu)::value, decltype(residual)::value, StagingGeom>(
              acc, epilogue, bias_row, &tmap_c, &tmap_pre, staging_ptr, staging, residual_bar, parity, cw, row0, n0);
        };
        using yes = std::true_type;
        using no = std::false_type;
        if (epilogue.residual != nullptr) epilogue.gelu ? finish(yes{}, yes{}) : finish(no{}, yes{});
        else epilogue.gelu ? finish(yes{}, no{}) : finish(no{}, no{});
      } else if (staged == kStagedF32) {  // takes its split-K turn itself
        staged_f32_epilogue(acc, &tmap_c, staging_ptr, staging, cw, row0, n0,
                            epilogue.accumulate || schedule.split > 0, splits > 1, turns, schedule.tile, schedule.split);
      } else if (schedule.split > 0) {
        // A later split of K waits for its tile's turn (its 128 threads, not the other
        // consumer's: that one may be in its main loop) and adds its partial product.
        if (threadIdx.x % 128 == 0) wait_split_turn(turns, schedule.tile, schedule.split);
        cc::named_barrier_sync(kSplitBarrier + cw, 128);
        const Epilogue later = epilogue.later_split();
        store_warp_rows<kTN>(acc[0], patch, later, row0, n0);
        store_warp_rows<kTN>(acc[1], patch, later, row0 + 64, n0);
      } else if (epilogue.plain) {
        store_warpgroup_tile<kTN>(acc[0], epilogue.c, epilogue.m, epilogue.n, epilogue.ldc, epilogue.pairs_ok, row0, n0);
        store_warpgroup_tile<kTN>(acc[1], epilogue.c, epilogue.m, epilogue.n, epilogue.ldc, epilogue.pairs_ok, row0 + 64,
                                  n0);
      } else {
        store_warp_rows<kTN>(acc[0], patch, epilogue, row0, n0);
        store_warp_rows<kTN>(acc[1], patch, epilogue, row0 + 64, n0);
      }
      if (splits > 1 && staged != kStagedF32) {  // every store of the tile by this consumer, then the release
        cc::named_barrier_sync(kSplitBarrier + cw, 128);
        if (threadIdx.x % 128 == 0) pass_split_turn(turns, schedule.tile, schedule.split);
      }
      ++own;
    }
    if (threadIdx.x % 128 == 0) cc::bulk_wait_group<0>();  // the last TMA stores are done before the block ends
  }
#else
  (void)tmap_a, (void)tmap_b, (void)tmap_c, (void)tmap_pre, (void)epilogue, (void)staged, (void)K, (void)tiles_m,
      (void)tiles_n, (void)splits, (void)per_split, (void)turns;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

/// Whether a launch takes the staged epilogue: a bf16 C (so no accumulate and no split-K,
/// which want fp32) that TMA can store -- 16-byte aligned, rows a multiple of 16 bytes apart,
/// and N a multiple of 8 (the fuzz test caught TMA stores writing the rest of a row's last
/// 16-byte chunk, past N, into the padding of a wider C) --
/// with pre_gelu likewise (it has C's leading dimension), and a residual only in place
/// (C += ...: the residual is C's own tile, loaded through C's map into the staging tile, so
/// not beside pre_gelu, whose pass would overwrite it). Anything else takes
/// store_warp_rows, as steps 4-6 do.
bool staged_epilogue_applies(const TcMatmulArgs& a) {
  const auto aligned16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const m01::TcEpilogue& e = a.epilogue;
  return a.c_bf16 != nullptr && !e.accumulate && aligned16(a.c_bf16) && a.ldc % 8 == 0 && a.n % 8 == 0 &&
         (e.pre_gelu == nullptr || (aligned16(e.pre_gelu) && e.residual == nullptr)) &&
         (e.residual == nullptr || (e.residual == a.c_bf16 && e.ldr == a.ldc));
}

/// Whether an fp32 C takes the staged fp32 epilogue: no option but accumulate (so split-K
/// products too), and C as TMA can store it -- 16-byte aligned, rows a multiple of 16 bytes
/// apart, N % 4 == 0 (whole 16-byte chunks per row, as for the bf16 C above).
bool staged_f32_applies(const TcMatmulArgs& a) {
  const m01::TcEpilogue& e = a.epilogue;
  return a.c != nullptr && reinterpret_cast<std::uintptr_t>(a.c) % 16 == 0 && a.ldc % 4 == 0 && a.n % 4 == 0 &&
         e.bias == nullptr && !e.gelu && e.pre_gelu == nullptr && e.residual == nullptr;
}

/// Launches the ping-pong kernel, one block per SM (at most one per work unit: a tile, or
/// with split-K a (tile, split) pair).
template <bool kATrans, bool kBTrans>
void launch_layout(const TcMatmulArgs& a, const char* step) {
  const int tiles_m = static_cast<int>((a.m + kBM - 1) / kBM);
  const int tiles_n = static_cast<int>((a.n + kTN - 1) / kTN);
  const int tiles = static_cast<int>(grid_blocks(a.m, a.n, kBM, kTN, step));
  // The boxes of steps 4-6: A as there; B [64 k][64 n] (two per stage) or [128 n][64 k] (one).
  const CUtensorMap map_a = kATrans ? make_tma_map_bf16_2d(a.a, a.k, a.m, a.lda, kBK, 64, TmaSwizzle::bytes128)
                                    : make_tma_map_bf16_2d(a.a, a.m, a.k, a.lda, kBM, kBK, TmaSwizzle::bytes128);
  const CUtensorMap map_b = kBTrans ? make_tma_map_bf16_2d(a.b, a.n, a.k, a.ldb, kTN, kBK, TmaSwizzle::bytes128)
                                    : make_tma_map_bf16_2d(a.b, a.k, a.n, a.ldb, kBK, 64, TmaSwizzle::bytes128);
  constexpr auto kernel = matmul_tc_pingpong_kernel<kATrans, kBTrans>;
  cc::opt_in_dynamic_smem<kernel>(kSmemBytes);
  int device = 0, sms = 0, per_sm = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmemBytes));
  require_arg(per_sm >= 1, step, "blocks per SM", per_sm, "must be >= 1 (not enough shared memory per SM?)");
  // Split-K (persistent_split_k): more work units than tiles, still at most as many blocks
  // as fit at once (a persistent grid).
  const int k_tiles = static_cast<int>((a.k + kBK - 1) / kBK);
  const SplitK plan = persistent_split_k(a, tiles, tiles, sms * per_sm, k_tiles);
  const int blocks = std::min(tiles * plan.splits, sms * per_sm);
  // This launch's own turn counters (stream order: tc_parts::zeroed_turns), freed after it.
  int* turns = plan.splits > 1 ? zeroed_turns(tiles, a.stream) : nullptr;
  // The staged epilogues' maps: a bf16 C (and pre_gelu) in [128 rows][64 columns] boxes, the
  // staging tile's two halves; an fp32 C in [128][32] boxes, two per half. Unused (zeros)
  // when the epilogue is not staged.
  const StagedEpilogue staged = plan.splits == 1 && staged_epilogue_applies(a) ? kStagedBf16
                                : staged_f32_applies(a)                         ? kStagedF32
                                                                                : kNotStaged;
  CUtensorMap map_c{}, map_pre{};
  if (staged == kStagedBf16) {
    map_c = make_tma_map_bf16_2d(a.c_bf16, a.m, a.n, a.ldc, kBM, 64, TmaSwizzle::bytes128);
    if (a.epilogue.pre_gelu != nullptr)
      map_pre = make_tma_map_bf16_2d(a.epilogue.pre_gelu, a.m, a.n, a.ldc, kBM, 64, TmaSwizzle::bytes128);
  } else if (staged == kStagedF32) {
    map_c = make_tma_map_f32_2d(a.c, a.m, a.n, a.ldc, kBM, 32, TmaSwizzle::bytes128);
  }
  kernel<<<blocks, kThreads, kSmemBytes, a.stream>>>(map_a, map_b, map_c, map_pre, Epilogue::from(a),
                                                      static_cast<int>(staged), static_cast<int>(a.k), tiles_m, tiles_n,
                                                      plan.splits, plan.slabs, turns);
  free_turns(turns, a.stream);
  COURSE_CHECK_LAUNCH("matmul_tc_pingpong_kernel");
}

// ---------------------------------------------------------------------------------------
// Wide tiles: both consumers on one 128 x 192 tile (the schedule of steps 4-6, with this
// step's staged epilogue). See the step's banner ("Wide tiles") for why and when.
namespace wide {
constexpr int kTN = 192;                                      // the block's tile: 128 x 192
constexpr std::uint32_t kBTileBytes = kBK * kTN * 2;          // 24 KB: three [64 k][64 n] blocks
constexpr std::uint32_t kStageBytes = kABytes + kBTileBytes;  // 40 KB per stage
constexpr int kStages = 4;
constexpr std::uint32_t kStagingBytes = 64 * kTN * 2;         // 24 KB: a consumer's 64 rows in bf16
constexpr int kBiasRowBytes = kTN * 4;                        // a consumer's 192 bias values
constexpr int kBarrierBytes = 2 * kStages * 8 + 2 * 8;        // full and empty per stage, a residual barrier per consumer
constexpr int kSmemBytes = kStages * static_cast<int>(kStageBytes) + 2 * static_cast<int>(kStagingBytes) +
                           kBarrierBytes + 2 * kBiasRowBytes + 1024;
static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper block may have");
/// A consumer's staging tile: its 64 rows by 192 columns, three [64][64] blocks of 128-byte
/// rows (the swizzle of StagingGeom).
using Geom = cc::Sw128Geom<kTN, 64>;

/// One slab of consumer cw's rows 64 cw .. 64 cw + 63 of the block's tile: per k16 step one
/// wgmma m64n192k16, A's rows as in wgmma_slab (warpgroup cw), B's three 64-column blocks
/// (or 192 K-major rows) in one descriptor. Issued only; `first` as in wgmma_slab_128.
template <bool kATrans, bool kBTrans>
__device__ __forceinline__ void wgmma_slab_wide(float (&acc)[1][96], std::uint32_t stage_a, std::uint32_t stage_b,
                                                int cw, bool first) {
#pragma unroll
  for (int ks = 0; ks < kBK / 16; ++ks) {
    const std::uint64_t da = kATrans ? cc::wgmma_desc_sw128(stage_a + cw * kBBlockBytes + ks * 16 * 128, kBBlockBytes, 1024)
                                     : cc::wgmma_desc_sw128(stage_a + cw * 64 * 128 + ks * 32, 16, 1024);
    const std::uint64_t db = kBTrans ? cc::wgmma_desc_sw128(stage_b + ks * 32, 16, 1024)
                                     : cc::wgmma_desc_sw128(stage_b + ks * 16 * 128, kBBlockBytes, 1024);
    cc::wgmma_m64n192k16_bf16_f32</*kBMnMajor=*/!kBTrans, /*kAMnMajor=*/kATrans>(acc[0], da, db,
                                                                               (first && ks == 0) ? 0 : 1);
  }
}

/// The wide-tile kernel: one producer warpgroup as in pingpong, two consumers that both
/// compute every tile of the block's walk (64 rows each) and release each stage together
/// (empty barriers count 2), then run the staged bf16 epilogue (no GELU) on their rows.
template <bool kATrans, bool kBTrans>
__global__ void __launch_bounds__(kThreads, 1)
    matmul_tc_wide_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                          const __grid_constant__ CUtensorMap tmap_c, const Epilogue epilogue, int K, int tiles_m,
                          int tiles_n) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const StagedSmem<kStages, kStageBytes, kStagingBytes> at(smem_raw);  // staging tiles of 24 KB, bias rows of 768 B
  const std::uint32_t smem = at.smem, staging0 = at.staging0, full_bar = at.full_bar, empty_bar = at.empty_bar,
                      residual_bar0 = at.residual_bar0, bias_row0 = at.bias_row0;
  const int wg = threadIdx.x / 128;
  const int k_tiles = (K + kBK - 1) / kBK;
  if (threadIdx.x == 0) at.init(/*releasers=*/2, &tmap_a, &tmap_b);  // both consumers release every stage
  __syncthreads();

  ws::TileSchedule<1> schedule(tiles_m, tiles_n, k_tiles, 1, k_tiles);
  Ring<kStages> ring;
  int tile_m, tile_n;
  if (wg == 0) {
    // ---- Producer: every slab of every tile, in order.
    cc::setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == 0) {
      // A's rows are read by the tiles_n blocks of their tile row, then never again. With two
      // (N = 384) those run side by side, and A is loaded evict-first (l2_policy_evict_first):
      // its lines make room for each other, not for lines still dirty from earlier kernels.
      // With more, a line may go before the last of them reads it: the normal policy.
      const std::uint64_t a_policy = tiles_n <= 2 ? cc::l2_policy_evict_first() : cc::l2_policy_evict_normal();
      while (schedule.take(tile_m, tile_n)) {
        for (int kt = 0; kt < k_tiles; ++kt, ring.advance()) {
          const std::uint32_t full = full_bar + 8 * ring.stage;
          const std::uint32_t stage_a = smem + ring.stage * kStageBytes;
          const std::uint32_t stage_b = stage_a + kABytes;
          cc::mbarrier_wait(empty_bar + 8 * ring.stage, ring.phase ^ 1u);  // stage free
          cc::mbarrier_arrive_expect_tx(full, kStageBytes);                // 40 KB will land here
          if constexpr (!kATrans) {
            cc::tma_load_2d_hinted(stage_a, &tmap_a, full, kt * kBK, tile_m * kBM, a_policy);
          } else {
            cc::tma_load_2d_hinted(stage_a, &tmap_a, full, tile_m * kBM, kt * kBK, a_policy);
            cc::tma_load_2d_hinted(stage_a + kBBlockBytes, &tmap_a, full, tile_m * kBM + 64, kt * kBK, a_policy);
          }
          // B: three [64 k][64 n] boxes, or (stored N x K) one [192 n][64 k] box.
          if constexpr (!kBTrans) {
#pragma unroll
            for (int b = 0; b < 3; ++b)
              cc::tma_load_2d(stage_b + b * kBBlockBytes, &tmap_b, full, tile_n * kTN + 64 * b, kt * kBK);
          } else {
            cc::tma_load_2d(stage_b, &tmap_b, full, kt * kBK, tile_n * kTN);
          }
        }
      }
    }
  } else {
    // ---- Consumers: consumer cw computes rows 64 cw .. 64 cw + 63 of every tile.
    cc::setmaxnreg_inc<kConsumerRegisters>();
    const int cw = wg - 1;
    const std::uint32_t staging = staging0 + cw * kStagingBytes, residual_bar = residual_bar0 + 8 * cw;
    unsigned char* staging_ptr = smem_raw + (staging - cc::smem_u32(smem_raw));
    float* bias_row = reinterpret_cast<float*>(smem_raw + (bias_row0 + cw * kBiasRowBytes - cc::smem_u32(smem_raw)));
    const int i = threadIdx.x % 128;
    float acc[1][96];
    std::uint32_t own = 0;  // tiles computed: the residual barrier's phase
    while (schedule.take(tile_m, tile_n)) {
      const int row0 = tile_m * kBM + 64 * cw, n0 = tile_n * kTN;
      // Bias columns n0 + i and (i < 64) n0 + 128 + i, loaded now, written to the row after
      // the main loop; C's rows (residual) loaded into the staging tile meanwhile.
      float bias_lo = 0.f, bias_hi = 0.f;
      if (epilogue.bias != nullptr) {
        if (n0 + i < epilogue.n) bias_lo = __ldg(epilogue.bias + n0 + i);
        if (i < 64 && n0 + 128 + i < epilogue.n) bias_hi = __ldg(epilogue.bias + n0 + 128 + i);
      }
      if (epilogue.residual != nullptr && i == 0) {
        cc::bulk_wait_group_read<0>();
        cc::mbarrier_arrive_expect_tx(residual_bar, kStagingBytes);
#pragma unroll
        for (int b = 0; b < 3; ++b)
          cc::tma_load_2d(staging + b * Geom::kBlockBytes, &tmap_c, residual_bar, n0 + 64 * b, row0);
      }
      int held = 0;  // the stage of the slab still in flight
      for (int kt = 0; kt < k_tiles; ++kt, ring.advance()) {
        cc::mbarrier_wait(full_bar + 8 * ring.stage, ring.phase);  // the stage's 40 KB have landed
        const std::uint32_t stage_a = smem + ring.stage * kStageBytes;
        cc::wgmma_fence();
        wgmma_slab_wide<kATrans, kBTrans>(acc, stage_a, stage_a + kABytes, cw, kt == 0);
        cc::wgmma_commit();
        cc::wgmma_wait<1>();  // slab kt - 1 is complete, so its stage may be refilled
        if (kt > 0 && i == 0) cc::mbarrier_arrive(empty_bar + 8 * held);
        held = ring.stage;
      }
      cc::wgmma_wait<0>();
      if (i == 0) cc::mbarrier_arrive(empty_bar + 8 * held);  // every consumer releases every stage,
                                                               // even one whose rows are all past M
      if (epilogue.bias != nullptr) {  // every thread added the last tile's row before its stores
        bias_row[i] = bias_lo;
        if (i < 64) bias_row[128 + i] = bias_hi;
        cc::named_barrier_sync(kStagingBarrier + cw, 128);
      }
      // No GELU here (wide::applies): the residual, in place, is the only template choice.
      const std::uint32_t parity = own & 1u;
      if (epilogue.residual != nullptr)
        staged_epilogue<false, true, Geom>(acc, epilogue, bias_row, &tmap_c, nullptr, staging_ptr, staging,
                                           residual_bar, parity, cw, row0, n0);
      else
        staged_epilogue<false, false, Geom>(acc, epilogue, bias_row, &tmap_c, nullptr, staging_ptr, staging,
                                            residual_bar, parity, cw, row0, n0);
      ++own;
    }
    if (i == 0) cc::bulk_wait_group<0>();  // the last TMA stores are done before the block ends
  }
#else
  (void)tmap_a, (void)tmap_b, (void)tmap_c, (void)epilogue, (void)K, (void)tiles_m, (void)tiles_n;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

/// Whether a launch takes wide tiles: the staged bf16 epilogue without GELU (whose longer
/// epilogue pingpong hides and this schedule does not), and N a multiple of 192.
bool applies(const TcMatmulArgs& a) { return staged_epilogue_applies(a) && !a.epilogue.gelu && a.n % kTN == 0; }

/// Launches the wide-tile kernel, one block per SM (at most one per tile).
template <bool kATrans, bool kBTrans>
void launch_layout(const TcMatmulArgs& a, const char* step) {
  const int tiles_m = static_cast<int>((a.m + kBM - 1) / kBM);
  const int tiles_n = static_cast<int>((a.n + kTN - 1) / kTN);
  const int tiles = static_cast<int>(grid_blocks(a.m, a.n, kBM, kTN, step));
  const CUtensorMap map_a = kATrans ? make_tma_map_bf16_2d(a.a, a.k, a.m, a.lda, kBK, 64, TmaSwizzle::bytes128)
                                    : make_tma_map_bf16_2d(a.a, a.m, a.k, a.lda, kBM, kBK, TmaSwizzle::bytes128);
  const CUtensorMap map_b = kBTrans ? make_tma_map_bf16_2d(a.b, a.n, a.k, a.ldb, kTN, kBK, TmaSwizzle::bytes128)
                                    : make_tma_map_bf16_2d(a.b, a.k, a.n, a.ldb, kBK, 64, TmaSwizzle::bytes128);
  // C in [64 rows][64 columns] boxes: a consumer's rows, one block of its staging tile.
  const CUtensorMap map_c = make_tma_map_bf16_2d(a.c_bf16, a.m, a.n, a.ldc, 64, 64, TmaSwizzle::bytes128);
  constexpr auto kernel = matmul_tc_wide_kernel<kATrans, kBTrans>;
  cc::opt_in_dynamic_smem<kernel>(kSmemBytes);
  const int sms = device_properties().multiProcessorCount;
  kernel<<<std::min(tiles, sms), kThreads, kSmemBytes, a.stream>>>(map_a, map_b, map_c, Epilogue::from(a),
                                                                   static_cast<int>(a.k), tiles_m, tiles_n);
  COURSE_CHECK_LAUNCH("matmul_tc_wide_kernel");
}
}  // namespace wide

/// One kernel per operand layout, as launch_ws; wide tiles where they apply.
void launch(const TcMatmulArgs& a, const char* step) {
  require_sm90a(step);
  const bool w = wide::applies(a);
  if (!a.a_transposed && !a.b_transposed) w ? wide::launch_layout<false, false>(a, step) : launch_layout<false, false>(a, step);
  else if (!a.a_transposed) w ? wide::launch_layout<false, true>(a, step) : launch_layout<false, true>(a, step);
  else if (!a.b_transposed) w ? wide::launch_layout<true, false>(a, step) : launch_layout<true, false>(a, step);
  else w ? wide::launch_layout<true, true>(a, step) : launch_layout<true, true>(a, step);
}
}  // namespace pingpong

// @step wgmma  (the exercise's written flags, one per step; the solution has none)
// @end
// @step tma_warp_specialized
// @end
// @step persistent
// @end
// @step cluster_multicast
// @end
// @step pingpong
// @end

}  // namespace

void launch_wgmma(const TcMatmulArgs& a) {
  // @step wgmma  (the exercise's kWgmmaWritten test)
  // @end
  constexpr const char* step = "matmul_tc(wgmma)";
  require_sm90a(step);
  const int tiles_m = static_cast<int>((a.m + kBM - 1) / kBM);
  const int tiles_n = static_cast<int>((a.n + kBN - 1) / kBN);
  const unsigned tiles = grid_blocks(a.m, a.n, kBM, kBN, step);
  cc::opt_in_dynamic_smem<wgmma_step::matmul_tc_wgmma_kernel>(wgmma_step::kSmemBytes);
  wgmma_step::matmul_tc_wgmma_kernel<<<tiles, wgmma_step::kThreads, wgmma_step::kSmemBytes, a.stream>>>(
      a.a, a.b, a.c, static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.lda, a.ldb, a.ldc,
      tiles_m, tiles_n, vec2_store_ok(a));
  COURSE_CHECK_LAUNCH("matmul_tc_wgmma_kernel");
}

void launch_tma_warp_specialized(const TcMatmulArgs& a) {
  // @step tma_warp_specialized  (the exercise's written tests)
  // @end
  ws::launch_ws<1>(a, /*persistent=*/false, "matmul_tc(tma_warp_specialized)");
}

void launch_persistent(const TcMatmulArgs& a) {
  // @step persistent  (the exercise's written tests)
  // @end
  ws::launch_ws<1>(a, /*persistent=*/true, "matmul_tc(persistent)");
}

void launch_cluster_multicast(const TcMatmulArgs& a) {
  // @step cluster_multicast  (the exercise's written tests)
  // @end
  ws::launch_ws<2>(a, /*persistent=*/true, "matmul_tc(cluster_multicast)");
}

void launch_pingpong(const TcMatmulArgs& a) {
  // @step pingpong  (the exercise's written tests)
  // @end
  pingpong::launch(a, "matmul_tc(pingpong)");
}

}  // namespace course::solution::tc_parts
