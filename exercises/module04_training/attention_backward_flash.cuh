#pragma once
/// @file attention_backward_flash.cuh
/// @brief YOUR steps flash and flash_deterministic of the attention-backward ladder (the
/// ladder: attention_backward.cu): the solution's K/V-parallel kernel, in which you write
///   flash                 the masked P^T (in flash_backward_kv_kernel), dS (ds_from_dp) and
///                         the dQ additions by atomics (write_dq_rows)
///   flash_deterministic   the dQ turn of a query tile: `KvTileOrder::wait` and `KvTileOrder::pass`
/// Read the design below first (the thread map of the register tiles: tile_row, out_col).
/// Everything outside the `// @step` regions is the solution's code, given. Set kFlashWritten
/// and kDqTurnsWritten (attention_backward_device.cuh) when a step is written.
/// Hints, one at a time: bash scripts/course.sh hint attention_backward/flash (and
/// flash_deterministic).

#include "attention_backward_device.cuh"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/turns.cuh"
#include "course/cuda/vec.cuh"
#include "course/error.hpp"
#include "module04/attention_backward.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace course::exercise::attn_bwd {
namespace {

namespace cc = course::cuda;

// ============================================================================
// Step 2: flash -- one kernel per K/V tile; P recomputed on chip; dQ by atomics.
//
// Grid: (ceil(N_k / 64), B * H_kv). A block owns 64 keys j0 .. j0+63 of one kv head:
// K_j and V_j stay in shared memory, dK_j and dV_j in registers, for the whole kernel. It
// loops over the query heads of its group (GQA: their dK/dV contributions are summed in
// registers, no atomics) and, per head, over the query tiles Q_i of 64 rows:
//
//   S^T  = K_j Q_i^T                            [64 keys x 64 queries], inner d
//   P^T  = exp2(S^T * scale*log2e - lse_i*log2e) masked entries 0; tail rows lse = +inf
//   dP^T = V_j dO_i^T                           the SAME thread map as S^T, so that
//   dS^T = P^T * (dP^T - D_i)                   is elementwise in registers
//   dK_j += dS^T Q_i        dV_j += P^T dO_i    [64 keys x d], inner 64 queries
//   dQ_i += scale * dS K_j                      [64 queries x d], inner 64 keys -> atomicAdd
//
// and finally writes scale * dK_j and dV_j through their strides. S, P, dP are never
// stored in global memory: extra memory is D (B*H*N_q floats), O(N).
//
// Register blocking (as module 3's fused forward). Threads form kGroups row groups (ty) of
// 16 lanes (tx). In a 64 x 64 score tile a thread owns kRows key rows (tile_row: groups of 4
// consecutive rows, 4*kGroups apart) and 4 query columns tx + 16 jj. Per step of 4 along d
// it loads kRows float4 of K (the 16 lanes of a half-warp read the same address: broadcast)
// and 4 float4 of Q (16 consecutive rows: conflict-free with rows padded to d + 4 floats).
// P^T and dS^T go to shared memory as P[q][key] and dS[q][key] (key contiguous, float4
// stores). dK/dV: a thread owns kRows keys x d/16 columns (u*16*kVec + tx*kVec + e) and per
// query reads 2 float4 of P (or dS) and d/16 floats of dO (or Q). dQ: kRows queries x d/16
// columns, per 4 keys kRows float4 of dS and 4 vectors of K.
//
// Pipeline per query tile (single-buffered Q and dO, 4 barriers):
//   wait Q_i | sync | cp.async dO_i | S^T GEMM | P -> smem | wait dO_i | sync | dP^T GEMM |
//   dS -> smem | sync | dK GEMM | sync | cp.async Q_{i+1} | dV GEMM | dQ GEMM + atomics
// dO_i lands during the S^T GEMM, Q_{i+1} during the dV and dQ GEMMs. A thread writes its
// P values to shared memory before the dP^T GEMM and reads them back after it (its own
// writes: no barrier needed), so P and dP^T are not both live in registers.
//
// Causal: key tile j0 is seen by queries i >= j0 - (N_k - N_q), so the loop starts at the
// query tile holding that row (tiles before it are fully masked and skipped); the mask is
// evaluated only in tiles that cross the diagonal or hold the key tail. The first key
// tiles see the most query tiles: with the mask on, blocks are numbered so that the first
// key tiles of ALL heads start first (longest job first), light ones fill the last wave.
//
// dQ atomics: per query tile a thread adds kRows x d/16 values, as float4 (float2 at
// d = 32, 96) vector atomics on sm_90 (one RED per 16 bytes), scalar atomicAdd elsewhere.
// The order of the additions depends on scheduling: dQ differs run to run in the last bits.
//
// Tile sizes: 64 keys x 64 queries for every d. d <= 64: 128 threads, kRows = 8 (micro-tiles
// 8 x 4 for S and dP, 8 x d/16 for dK, dV, dQ). d = 96, 128: 256 threads, kRows = 4 (the
// dK + dV accumulators, 2 * 64 * d floats, would need d registers per thread at 128 threads).
//
// Prediction (d = 64): 5 * 64^3 FMAs per (key tile, query tile); per thread 10240 FMAs and
// ~960 shared loads (~10.7 FMAs per load in every inner loop; ~8 FMA instructions per
// shared-memory wavefront for S^T, dP^T and dQ). Registers: ~170 live values (dK + dV 64,
// one 8x4 score tile 32 plus dP^T or dQ 32, operands 48); ptxas uses 254 (no spills), the
// rest pipelining the unrolled shared loads. Shared memory 102 KB -> 2 blocks (8 warps) per
// SM. L2 traffic: Q_i and dO_i (32 KB) per tile pair, 8.6 GB in all, mostly L2 hits (the 64
// key tiles of a head run together); dQ atomics 4.3 GB (268 M float4 REDs, ~12 G/s).
// FMA-issue bound at ~45% of peak (the forward reached 51% with 3 blocks per SM and 3
// barriers per 2 GEMMs; here 2 blocks per SM, 4 barriers per 5 GEMMs, plus the atomics):
// ~30 TFLOP/s, ~23 ms: ~1.1x the cuBLAS-materialized pipeline in O(N) instead of
// 2*B*H*N^2*4 = 8.6 GB of scratch. Causal: ~half the tile pairs, ~12.5 ms (~1.85x faster).
// d = 128: 1 block of 256 threads per SM (166 KB of shared memory, 224 registers), 4 x 4
// score micro-tiles (~5.3 FMAs per shared wavefront): ~22-25 TFLOP/s.
// Resources (ptxas, sm_90a, non-causal; flash / flash_deterministic, the same kernel plus
// the turns): d = 16: 164 / 162 registers, 54 KB, 3 blocks per SM; d = 32: 168 / 168, 70 KB,
// 3; d = 64: 254 / 254, 102 KB, 2; d = 96: 206 / 204, 134 KB, 1 (256 threads); d = 128:
// 224 / 226, 166 KB, 1. No spills.
// Measured (results: attn_bwd_f32/solution/flash/B4_H16_N4096_d64): 36.7 TFLOP/s = 1.14 of cublas_materialized
// Measured (results: attn_bwd_f32/solution/flash/B4_H16_N4096_d64_causal): 36.5 TFLOP/s = 2.27 of cublas_materialized
// Measured (results: attn_bwd_f32/solution/flash/B4_H16_N4096_d128): 34.7 TFLOP/s = 0.85 of cublas_materialized
// Met and beaten: d = 64 ~20% above ~30 TFLOP/s, 1.13x cuBLAS as predicted; causal
// 2 x 36.5 / 36.7 = 1.99x faster than non-causal (~1.85 predicted); d = 128 ~40% above
// ~22-25, though cuBLAS's GEMMs are faster still there.
//
// ============================================================================
// Step 3: flash_deterministic -- flash's kernel, with dQ_i's additions in a FIXED order.
//
// Every K/V tile j of a head adds its dQ_i += scale * dS K_j into the same rows; with
// atomics the order is whoever gets there first. Here a turn counter per (batch, head,
// query tile) -- B*H*ceil(N_q / 64) ints in the workspace, reset by launch_row_dot --
// admits the K/V tiles one at a time, in index order: block j waits until the counter of
// dQ_i reads j (course::cuda::wait_turn: thread 0 polls with acquire loads, a barrier holds
// the rest), adds its values (the same vector atomics as flash: each element once per
// block, so within a turn the order does not matter), then sets j + 1
// (course::cuda::pass_turn: a barrier, then a release store). That is tc_deterministic's
// hand-off (attention_backward_tc.cuh), with the same helper. dQ_i is then
// (((0 + c_0) + c_1) + c_2) + ... in K/V-tile order, every run; dK_j, dV_j are summed in
// registers over the group's query heads in loop order: bit-identical results.
//
// Why it cannot deadlock: block (j, head) waits only for block (j - 1, head), which
// visits the same (head, query tile) pairs in the same order (causal: it starts at the
// same query tile or an earlier one) and has a lower linear block number in both block
// orders (kv_block_coordinates), so it is running or done. Every chain starts at key tile
// 0, which never waits. A query tile no key tile visits (causal, rows that see no key)
// keeps the dQ = 0 of the preprocessing.
//
// What it costs, against flash (same five GEMMs, same bytes: the counters are 16 KB, the
// polls one 4-byte L2 load per tile pair; no recomputation, 687 instead of 962 GFLOP for
// the old query-parallel dQ pass):
//  - per tile pair, c ~ 1-2 us where flash's REDs were fire-and-forget: thread 0's poll (an
//    L2 round trip, ~0.7 us, even when the turn is already there), two barriers, and the
//    release fence, which waits for the block's 64 x d REDs to be acknowledged (~1 us); the
//    other warps stop at the next tile's barrier. One tile pair takes T ~ 19 us (flash's
//    36.6 TFLOP/s quoted above is 18.8 ms for 4096 * 64 tile pairs on 264 block slots at
//    d = 64; ~20 us at d = 128, 132 slots).
//  - the staircase: key tile j can add to dQ_i only after key tile j - 1 has, so the 64 key
//    tiles of a head end up a hand-off (~c plus the store's propagation) apart: block 63
//    finishes ~63 hand-offs after block 0. Non-causal, the 64 tiles of a head start
//    together in the first wave; later waves start staggered (slots free up in staircase
//    order), so it is paid about once. Causal, key tile j starts at query tile j and waits
//    ~one tile pair for tile j - 1 there; the light tiles then no longer fill the last wave
//    early.
// A scheduling model (blocks in launch order on 264 / 132 slots, T per tile pair, c per
// turn, 1.5-2.5 us per hand-off) gives 1.07-1.14x flash's time at d = 64 (1.10-1.15x
// causal) and ~1.03-1.08x at d = 128 (T is twice as long per hand-off); a block that waits
// lends its SM's issue slots to the other resident block at d <= 64, so the low end is
// likelier. Predicted: ~1.05-1.15x flash, ~32-35 TFLOP/s at d = 64 (target: at most 1.15x).
// Outcome (H100, m04_bench, one run, B4_H16, N = 512-8192): 1.02-1.06x flash's time at
// d = 64, 1.04-1.07x at d = 128, causal 1.05-1.12x / 1.04-1.10x (most at N = 512, where a
// head has 8 key tiles to spread the staircase over). Met. On an H200 (the results page's
// rows, one m04_bench run): 1.02-1.06x and 1.04-1.07x, causal 1.02-1.22x / 1.04-1.13x --
// missed once, at d = 64 causal N = 512 (1.22x: a block walks few query tiles, each behind
// a turn); from N = 1024 on at most 1.09x.
// ============================================================================

constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct BwdTile {
  static constexpr int kThreads = D <= 64 ? 128 : 256;
  static constexpr int kGroups = kThreads / 16;  // row groups (ty); 16 lanes (tx) each
  static constexpr int kBlock = 64;              // keys per K/V tile = queries per Q tile
  static_assert(kBlock == m04::kFlashBackwardQTile, "one dQ turn counter per query tile");
  static constexpr int kRows = kBlock / kGroups;  // rows of a 64-row tile per thread: 8 or 4
  static constexpr int kCols = kBlock / 16;       // columns of a 64-column tile per thread: 4
  static constexpr int kOutCols = D / 16;         // columns of a [64 x d] accumulator per thread
  static constexpr int kVec = kOutCols % 4 == 0 ? 4 : (kOutCols % 2 == 0 ? 2 : 1);
  static constexpr int kOutChunks = kOutCols / kVec;
  static constexpr int kLd = D + 4;       // padded row stride of the Q, K, V, dO tiles
  static constexpr int kLdX = kBlock + 4;  // padded row stride of the P and dS tiles
  static constexpr int kTileFloats = kBlock * kLd;
  static constexpr int kXFloats = kBlock * kLdX;
  /// K/V kernel: K, V, Q, dO tiles + P and dS.
  static constexpr std::size_t kKvSmemBytes = static_cast<std::size_t>(4 * kTileFloats + 2 * kXFloats) * sizeof(float);
  /// Blocks per SM (d = 64: 102 KB of shared memory -> 2); registers are capped to match.
  static constexpr int kMinBlocks = D <= 32 ? 3 : (D <= 64 ? 2 : 1);
  static_assert(kRows % 4 == 0 && kGroups * kRows == kBlock, "rows in groups of 4");
  static_assert(kOutChunks * kVec == kOutCols && kOutCols * 16 == D, "output columns split into chunks");
};

/// a[i][j] = 0 for a thread's register tile (fully unrolled: it stays in registers).
template <int kR, int kC>
__device__ __forceinline__ void zero_fill(float (&a)[kR][kC]) {
#pragma unroll
  for (int i = 0; i < kR; ++i)
#pragma unroll
    for (int j = 0; j < kC; ++j) a[i][j] = 0.f;
}

/// Row (within a 64-row tile) of a thread's ii-th row: groups of 4 consecutive rows,
/// 4 * kGroups apart (the two half-warps of a warp then read rows 4 apart: distinct banks).
template <int kGroups>
__device__ __forceinline__ int tile_row(int ty, int ii) {
  return (ii / 4) * (4 * kGroups) + ty * 4 + (ii % 4);
}

/// First of the kVec consecutive columns of chunk u of a thread's accumulator columns.
template <int kVec>
__device__ __forceinline__ int out_col(int tx, int u) {
  return u * 16 * kVec + tx * kVec;
}

__device__ __forceinline__ float component(const float4& v, int k) {
  return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w));
}

/// *p += s * x[0 .. kVec): one vector atomic (RED) on sm_90, kVec scalar ones before.
template <int kVec>
__device__ __forceinline__ void atomic_add_vec(float* p, const float* x, float s) {
  // The float4 / float2 overloads of atomicAdd exist only for sm_90 and newer: before
  // that they are not even declared, so the vector branches are compiled out by the
  // preprocessor (an `if constexpr` would still look the call up).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kVec == 4) {
    atomicAdd(reinterpret_cast<float4*>(p), make_float4(x[0] * s, x[1] * s, x[2] * s, x[3] * s));
  } else if constexpr (kVec == 2) {
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(x[0] * s, x[1] * s));
  } else
#endif
  {
#pragma unroll
    for (int e = 0; e < kVec; ++e) atomicAdd(p + e, x[e] * s);
  }
}

/// cp.async rows [row0, row0 + kBlock) of one head (row stride seq_stride) into a
/// [kBlock x D] tile with row stride kLd; rows >= valid_rows are zero-filled (src-size 0).
template <int D, int kThreads>
__device__ __forceinline__ void load_tile_async(float* tile, const float* head, std::int64_t seq_stride,
                                                long long row0, long long valid_rows) {
  constexpr int kChunks = D / 4, kLd = D + 4, kRowsT = 64;
  static_assert(kRowsT * kChunks % kThreads == 0, "whole copies per thread");
#pragma unroll
  for (int it = 0; it < kRowsT * kChunks / kThreads; ++it) {
    const int idx = it * kThreads + static_cast<int>(threadIdx.x);
    const int r = idx / kChunks, c4 = idx % kChunks;
    const long long row = row0 + r;
    const bool valid = row < valid_rows;
    const float* src = valid ? head + row * seq_stride + c4 * 4 : head;
    cc::cp_async_16_zfill(cc::smem_u32(tile + r * kLd + c4 * 4), src, valid ? 16 : 0);
  }
}

/// acc[ii][jj] += sum_{c < D} A[tile_row(ty, ii)][c] * B[tx + 16 jj][c]: a [64 x 64]
/// product with inner dimension d of two [64 x D] tiles (row stride D + 4). A's rows are
/// broadcast within a half-warp, B's 16 rows per load are consecutive.
template <int D, int kGroups, int kRows, int kCols>
__device__ __forceinline__ void gemm_rows(float (&acc)[kRows][kCols], const float* a, const float* b, int tx,
                                          int ty) {
  constexpr int kLd = D + 4;
  // d <= 32: a rolled loop (fully unrolled, every load would be hoisted: spills at 3 blocks/SM).
  constexpr int kUnroll = D <= 32 ? 1 : 4;
#pragma unroll(kUnroll)
  for (int c = 0; c < D; c += 4) {
    float4 av[kRows], bv[kCols];
#pragma unroll
    for (int ii = 0; ii < kRows; ++ii)
      av[ii] = *reinterpret_cast<const float4*>(a + tile_row<kGroups>(ty, ii) * kLd + c);
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) bv[jj] = *reinterpret_cast<const float4*>(b + (tx + 16 * jj) * kLd + c);
#pragma unroll
    for (int ii = 0; ii < kRows; ++ii)
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj)
        acc[ii][jj] = fmaf(av[ii].w, bv[jj].w,
                           fmaf(av[ii].z, bv[jj].z, fmaf(av[ii].y, bv[jj].y, fmaf(av[ii].x, bv[jj].x, acc[ii][jj]))));
  }
}

/// acc[ii][col] += sum_{r < 64} X[r][tile_row(ty, ii)] * Y[r][col]: X is a [64 x 64] tile
/// stored with the thread's rows contiguous (row stride kLdX: P or dS as [query][key], or
/// dS^T as [key][query]), Y a [64 x D] tile (row stride D + 4). Per r: kRows / 4 float4 of
/// X (broadcast) and kOutChunks vectors of Y.
template <int D, int kGroups, int kRows, int kVec, int kLdX>
__device__ __forceinline__ void gemm_acc_xt(float (&acc)[kRows][D / 16], const float* x, const float* y, int tx,
                                            int ty) {
  constexpr int kLd = D + 4, kOutChunks = D / 16 / kVec;
#pragma unroll 4
  for (int r = 0; r < 64; ++r) {
    float xv[kRows];
#pragma unroll
    for (int g = 0; g < kRows / 4; ++g) {
      const float4 t = *reinterpret_cast<const float4*>(x + r * kLdX + g * 4 * kGroups + ty * 4);
      xv[4 * g] = t.x;
      xv[4 * g + 1] = t.y;
      xv[4 * g + 2] = t.z;
      xv[4 * g + 3] = t.w;
    }
#pragma unroll
    for (int u = 0; u < kOutChunks; ++u) {
      float yv[kVec];
      cc::load_vec<kVec>(y + r * kLd + out_col<kVec>(tx, u), yv);
#pragma unroll
      for (int ii = 0; ii < kRows; ++ii)
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[ii][u * kVec + e] = fmaf(xv[ii], yv[e], acc[ii][u * kVec + e]);
    }
  }
}

/// acc[ii][col] += sum_{r < 64} X[tile_row(ty, ii)][r] * Y[r][col]: X a [64 x 64] tile with
/// r contiguous (dS as [query][key], row stride kLdX), Y a [64 x D] tile. Per 4 r: kRows
/// float4 of X (broadcast) and 4 * kOutChunks vectors of Y.
template <int D, int kGroups, int kRows, int kVec, int kLdX>
__device__ __forceinline__ void gemm_acc_x(float (&acc)[kRows][D / 16], const float* x, const float* y, int tx,
                                           int ty) {
  constexpr int kLd = D + 4, kOutChunks = D / 16 / kVec;
#pragma unroll 2
  for (int r = 0; r < 64; r += 4) {
    float4 xv[kRows];
#pragma unroll
    for (int ii = 0; ii < kRows; ++ii)
      xv[ii] = *reinterpret_cast<const float4*>(x + tile_row<kGroups>(ty, ii) * kLdX + r);
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int u = 0; u < kOutChunks; ++u) {
        float yv[kVec];
        cc::load_vec<kVec>(y + (r + k) * kLd + out_col<kVec>(tx, u), yv);
#pragma unroll
        for (int ii = 0; ii < kRows; ++ii)
#pragma unroll
          for (int e = 0; e < kVec; ++e)
            acc[ii][u * kVec + e] = fmaf(component(xv[ii], k), yv[e], acc[ii][u * kVec + e]);
      }
  }
}

/// X[tx + 16 jj][tile_row(ty, ii)] = v[ii][jj]: a thread's [kRows x kCols] register tile
/// stored transposed, its rows contiguous (one float4 per 4 rows).
template <int kGroups, int kRows, int kCols, int kLdX>
__device__ __forceinline__ void store_transposed(float* x, const float (&v)[kRows][kCols], int tx, int ty) {
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj)
#pragma unroll
    for (int g = 0; g < kRows / 4; ++g)
      *reinterpret_cast<float4*>(x + (tx + 16 * jj) * kLdX + g * 4 * kGroups + ty * 4) =
          make_float4(v[4 * g][jj], v[4 * g + 1][jj], v[4 * g + 2][jj], v[4 * g + 3][jj]);
}

/// The inverse of store_transposed (a thread reading back its own values: no barrier).
template <int kGroups, int kRows, int kCols, int kLdX>
__device__ __forceinline__ void load_transposed(const float* x, float (&v)[kRows][kCols], int tx, int ty) {
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj)
#pragma unroll
    for (int g = 0; g < kRows / 4; ++g) {
      const float4 t = *reinterpret_cast<const float4*>(x + (tx + 16 * jj) * kLdX + g * 4 * kGroups + ty * 4);
      v[4 * g][jj] = t.x;
      v[4 * g + 1][jj] = t.y;
      v[4 * g + 2][jj] = t.z;
      v[4 * g + 3][jj] = t.w;
    }
}

/// lse * log2(e) and D of query row q of head pair bh; rows past N_q and rows that see no
/// key (lse = -inf) get +inf, so that P = exp2(s * scale_log2 - inf) = 0 without a NaN.
__device__ __forceinline__ void row_stats(const Params& p, long long bh, long long q, float& lse_log2, float& d) {
  if (q < p.seq_q) {
    const long long idx = bh * p.seq_q + q;
    const float l = __ldg(p.lse + idx);
    lse_log2 = l == -INFINITY ? INFINITY : l * kLog2e;
    d = __ldg(p.d_row + idx);
  } else {
    lse_log2 = INFINITY;
    d = 0.f;
  }
}

/// scale * dq added into the dQ rows q0 + tile_row(ty, ii) of head h of batch b (rows past
/// N_q skipped) with vector atomics: every key tile adds into the same rows (flash: in any
/// order; flash_deterministic: one key tile at a time, in its turn).
template <int kGroups, int kVec, int kRows, int kOutCols>
__device__ __forceinline__ void write_dq_rows(const Params& p, const float (&dq)[kRows][kOutCols], long long q0, int b,
                                              int h, int tx, int ty) {
  // @step flash
  // TODO(flash): dQ_i += scale * dS K_j for the thread's rows: dq[ii][u * kVec + e] is the
  // product for query q = q0 + tile_row<kGroups>(ty, ii) (skip q >= p.seq_q) and column
  // out_col<kVec>(tx, u) + e (u < kOutCols / kVec, e < kVec) of head h of batch b; dQ's row
  // starts at p.dq + row_offset(p.dqs, b, h, q). Every key tile adds into the same rows:
  // atomics (atomic_add_vec<kVec> adds kVec values times a scale at once).
  (void)p, (void)dq, (void)q0, (void)b, (void)h, (void)tx, (void)ty;
  // @end
}

// ---- The phases of the kernel below, besides the GEMM (gemm_rows, gemm_acc_xt,
// gemm_acc_x), transposed-store and dQ helpers above. Each takes the thread's micro-tiles by
// reference and is forceinline: the kernel compiles to the code it had with the phases
// written out (checked on the sm_90a SASS). The masked exponential (P^T) stays in the
// kernel: moved into a function, its need_mask test compiles to other branches in the
// causal instantiations.

/// The forward's statistics of the thread's kCols query columns q0 + tx + 16 jj: lse (log2
/// units) and D (global loads, used after the GEMMs).
template <int kCols>
__device__ __forceinline__ void load_column_stats(const Params& p, long long bh, long long q0, int tx,
                                                  float (&lse_log2)[kCols], float (&d_row)[kCols]) {
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj) row_stats(p, bh, q0 + tx + 16 * jj, lse_log2[jj], d_row[jj]);
}

/// dP^T -> dS^T in place: dS^T = P^T * (dP^T - D), elementwise (same thread map).
template <int kRows, int kCols>
__device__ __forceinline__ void ds_from_dp(float (&dp)[kRows][kCols], const float (&pt)[kRows][kCols],
                                           const float (&d_row)[kCols]) {
  // @step flash
  // TODO(flash): dS^T = P^T * (dP^T - D), written over dp. dp[ii][jj] and pt[ii][jj] belong to
  // key row tile_row(ty, ii) and query column tx + 16 jj of the tile; d_row[jj] is that
  // query's D.
  (void)dp, (void)pt, (void)d_row;
  // @end
}

/// Epilogue of the K/V kernel: dK = scale * (dS^T Q summed), dV (rows past N_k not stored).
template <int kGroups, int kVec, int kRows, int kOutCols>
__device__ __forceinline__ void write_dk_dv(const Params& p, const float (&dk)[kRows][kOutCols],
                                            const float (&dv)[kRows][kOutCols], long long j0, int b, int hk,
                                            int tx, int ty) {
#pragma unroll
  for (int ii = 0; ii < kRows; ++ii) {
    const long long j = j0 + tile_row<kGroups>(ty, ii);
    if (j < p.seq_k) {
      float* dk_row = p.dk + row_offset(p.dks, b, hk, j);
      float* dv_row = p.dv + row_offset(p.dvs, b, hk, j);
#pragma unroll
      for (int u = 0; u < kOutCols / kVec; ++u) {
        cc::store_vec<kVec>(dk_row + out_col<kVec>(tx, u), &dk[ii][u * kVec], p.scale);
        cc::store_vec<kVec>(dv_row + out_col<kVec>(tx, u), &dv[ii][u * kVec], 1.f);
      }
    }
  }
}

// ---------------------------------------------------------------- K/V-parallel kernel ----

// The block order (kv_block_coordinates) is module 3's attention_indexing.cuh.

/// How the K/V tiles' dQ additions are ordered (the kernel's `Turns` parameter).
/// AnyOrder (step flash): no turns, the atomics land in whatever order the blocks reach them.
struct AnyOrder {
  static constexpr bool kOrdered = false;
  __device__ __forceinline__ static void wait(int*, int) {}
  __device__ __forceinline__ static void pass(int*, int) {}
};

/// KvTileOrder (step flash_deterministic): K/V tile j adds to dQ_i when the counter of
/// (b, h, i) reads j, then hands the turn to j + 1 (course/cuda/turns.cuh, the helper of
/// tc_deterministic too). The planted bugs derive from it and replace wait or pass.
struct KvTileOrder {
  static constexpr bool kOrdered = true;
  __device__ __forceinline__ static void wait(int* turn, int kv_tile) {
    // @step flash_deterministic
    // TODO(flash_deterministic): return, in every thread of the block, once *turn == kv_tile:
    // one thread polls *turn (acquire), then every thread waits at a barrier.
    (void)turn, (void)kv_tile;
    // @end
  }
  __device__ __forceinline__ static void pass(int* turn, int kv_tile) {
    // @step flash_deterministic
    // TODO(flash_deterministic): once every thread of the block has issued its dQ additions
    // (a barrier), one thread sets *turn = kv_tile + 1 (release), handing the turn on.
    (void)turn, (void)kv_tile;
    // @end
  }
};

/// Phases: load_tile_async (K_j, V_j, then Q_i and dO_i in turn), load_column_stats,
/// gemm_rows (S^T, dP^T), the masked P^T, store_transposed / load_transposed, ds_from_dp,
/// gemm_acc_xt (dK, dV), gemm_acc_x + write_dq_rows (dQ atomics; with Turns::kOrdered,
/// between Turns::wait and Turns::pass on the query tile's counter), write_dk_dv.
template <int D, bool kCausal, class Turns>
__global__ void __launch_bounds__(BwdTile<D>::kThreads, BwdTile<D>::kMinBlocks)
    flash_backward_kv_kernel(const Params p) {
  using T = BwdTile<D>;
  constexpr int kThreads = T::kThreads, kGroups = T::kGroups, kRows = T::kRows, kCols = T::kCols;
  constexpr int kOutCols = T::kOutCols, kVec = T::kVec, kLdX = T::kLdX;
  constexpr int kBlock = T::kBlock;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* k_tile = reinterpret_cast<float*>(smem_raw);
  float* v_tile = k_tile + T::kTileFloats;
  float* q_tile = v_tile + T::kTileFloats;
  float* do_tile = q_tile + T::kTileFloats;
  float* p_tile = do_tile + T::kTileFloats;  // P as [query][key]
  float* ds_tile = p_tile + T::kXFloats;      // dS as [query][key]

  const int tx = static_cast<int>(threadIdx.x % 16), ty = static_cast<int>(threadIdx.x / 16);
  int kv_tile, bhk;
  kv_block_coordinates(kCausal, kv_tile, bhk);
  const int b = bhk / p.kv_heads, hk = bhk % p.kv_heads;
  const long long j0 = static_cast<long long>(kv_tile) * kBlock;
  const long long off = p.causal_offset;
  const bool kv_tail = j0 + kBlock > p.seq_k;

  // Query tiles this key tile meets: causal, the first is the one holding query j0 - off.
  const int num_q_tiles = (p.seq_q + kBlock - 1) / kBlock;
  int first_q_tile = 0;
  if (kCausal) {
    const long long first_q = j0 - off;
    first_q_tile = first_q <= 0 ? 0 : static_cast<int>(first_q / kBlock);
    if (first_q_tile > num_q_tiles) first_q_tile = num_q_tiles;
  }
  const int tiles_per_head = num_q_tiles - first_q_tile;
  const int total = tiles_per_head * p.group;

  float dk[kRows][kOutCols], dv[kRows][kOutCols];
  zero_fill(dk);
  zero_fill(dv);

  if (total > 0) {
    auto q_head = [&](int h) { return p.q + row_offset(p.qs, b, h, 0); };
    auto do_head = [&](int h) { return p.dout + row_offset(p.dos, b, h, 0); };

    // Prologue: K_j, V_j and the first Q tile, one group.
    load_tile_async<D, kThreads>(k_tile, p.k + row_offset(p.ks, b, hk, 0), p.ks.seq, j0, p.seq_k);
    load_tile_async<D, kThreads>(v_tile, p.v + row_offset(p.vs, b, hk, 0), p.vs.seq, j0, p.seq_k);
    load_tile_async<D, kThreads>(q_tile, q_head(hk * p.group), p.qs.seq,
                                 static_cast<long long>(first_q_tile) * kBlock, p.seq_q);
    cc::cp_async_commit();

    for (int t = 0; t < total; ++t) {
      const int h = hk * p.group + t / tiles_per_head;
      const long long q0 = static_cast<long long>(first_q_tile + t % tiles_per_head) * kBlock;
      const long long bh = static_cast<long long>(b) * p.heads + h;

      // The statistics of the thread's 4 query columns (global loads, used after the GEMMs).
      float lse_log2[kCols], d_row[kCols];
      load_column_stats(p, bh, q0, tx, lse_log2, d_row);

      cc::cp_async_wait<0>();  // Q_i (and, first time, K_j, V_j) has landed ...
      __syncthreads();         // ... for every thread; the previous tile's readers are done
      load_tile_async<D, kThreads>(do_tile, do_head(h), p.dos.seq, q0, p.seq_q);
      cc::cp_async_commit();

      // ---- S^T = K_j Q_i^T, then P^T (masked only in diagonal / tail tiles) -> P[q][key].
      float s[kRows][kCols];
      zero_fill(s);
      gemm_rows<D, kGroups, kRows, kCols>(s, k_tile, q_tile, tx, ty);
      const bool need_mask = kv_tail || (kCausal && j0 + kBlock - 1 > q0 + off);
      // @step flash
      // TODO(flash): P^T = exp(scale * S^T - lse) in place. s[ii][jj] is S^T = k_j . q_i for key
      // j = j0 + tile_row<kGroups>(ty, ii) and query i = q0 + tx + 16 * jj; lse_log2[jj] is that
      // query's lse * log2(e) (+inf for rows past N_q and rows that see no key) and
      // p.scale_log2 = scale * log2(e): P = 2^(s * scale_log2 - lse_log2). Keys past N_k, and
      // when kCausal keys after the query's diagonal (j > i + off), must give exactly 0; only
      // tiles with need_mask hold such keys.
      (void)need_mask;
      // @end
      store_transposed<kGroups, kRows, kCols, kLdX>(p_tile, s, tx, ty);

      cc::cp_async_wait<0>();  // dO_i has landed
      __syncthreads();

      // ---- dP^T = V_j dO_i^T (same thread map), dS^T = P^T * (dP^T - D) -> dS[q][key].
      float dp[kRows][kCols];
      zero_fill(dp);
      gemm_rows<D, kGroups, kRows, kCols>(dp, v_tile, do_tile, tx, ty);
      load_transposed<kGroups, kRows, kCols, kLdX>(p_tile, s, tx, ty);  // this thread's own P
      ds_from_dp(dp, s, d_row);
      store_transposed<kGroups, kRows, kCols, kLdX>(ds_tile, dp, tx, ty);
      __syncthreads();  // P and dS complete

      // ---- dK_j += dS^T Q_i.
      gemm_acc_xt<D, kGroups, kRows, kVec, kLdX>(dk, ds_tile, q_tile, tx, ty);
      __syncthreads();  // q_tile is free: prefetch the next query tile
      if (t + 1 < total) {
        const int h_next = hk * p.group + (t + 1) / tiles_per_head;
        const long long q0_next = static_cast<long long>(first_q_tile + (t + 1) % tiles_per_head) * kBlock;
        load_tile_async<D, kThreads>(q_tile, q_head(h_next), p.qs.seq, q0_next, p.seq_q);
      }
      cc::cp_async_commit();  // (possibly empty) group Q_{i+1}

      // ---- dV_j += P^T dO_i.
      gemm_acc_xt<D, kGroups, kRows, kVec, kLdX>(dv, p_tile, do_tile, tx, ty);

      // ---- dQ_i += scale * dS K_j, added to global memory (ordered: in this tile's turn).
      float dq[kRows][kOutCols];
      zero_fill(dq);
      gemm_acc_x<D, kGroups, kRows, kVec, kLdX>(dq, ds_tile, k_tile, tx, ty);
      if constexpr (Turns::kOrdered) {
        int* turn = p.dq_turns + bh * p.q_tiles + first_q_tile + t % tiles_per_head;
        Turns::wait(turn, kv_tile);
        write_dq_rows<kGroups, kVec>(p, dq, q0, b, h, tx, ty);
        Turns::pass(turn, kv_tile);
      } else {
        write_dq_rows<kGroups, kVec>(p, dq, q0, b, h, tx, ty);
      }
    }
    cc::cp_async_wait<0>();
  }

  write_dk_dv<kGroups, kVec>(p, dk, dv, j0, b, hk, tx, ty);
}

// > 48 KB of dynamic shared memory must be opted into; the largest carveout lets
// kMinBlocks blocks fit on an SM (course/cuda/launch.cuh).
template <int D, bool kCausal, class Turns>
void launch_kv(const Params& p, std::int64_t batch, cudaStream_t stream) {
  using T = BwdTile<D>;
  constexpr auto kernel = flash_backward_kv_kernel<D, kCausal, Turns>;
  cc::opt_in_dynamic_smem<kernel>(static_cast<int>(T::kKvSmemBytes));
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_k) + T::kBlock - 1) / T::kBlock),
                  static_cast<unsigned>(batch * p.kv_heads));
  kernel<<<grid, T::kThreads, T::kKvSmemBytes, stream>>>(p);
  COURSE_CHECK_LAUNCH("flash_backward_kv_kernel");
}

/// The K/V kernel of a flash step for args.head_dim and args.causal. The caller has run the
/// preprocessing (D; dQ = 0; for ordered Turns, the counters at p.dq_turns reset to 0).
template <class Turns>
void launch_flash_kernel(const Params& p, const m04::AttentionBackwardArgs& a) {
  cc::dispatch_value<m03::kHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    if (a.causal) launch_kv<decltype(d)::value, true, Turns>(p, a.batch, a.stream);
    else launch_kv<decltype(d)::value, false, Turns>(p, a.batch, a.stream);
  });
}

}  // namespace
}  // namespace course::exercise::attn_bwd
