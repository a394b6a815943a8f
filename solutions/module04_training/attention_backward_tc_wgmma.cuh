#pragma once
/// @file attention_backward_tc_wgmma.cuh
/// @brief Step tc_wgmma of the tensor-core attention backward (sm_90a; elsewhere it throws
/// course::Unsupported): tc_pipelined's work split with the five products on Hopper's
/// warpgroup MMA. Part of attention_backward_tc.cuh (which includes this file before its
/// host side, whose run_step launches the kernel below), shared like it by the solution and
/// the exercise: the three wgmma issues are `Phases` members (issue_transposed_scores,
/// issue_accumulate_keys, issue_dq; the solution's are attention_backward_tc_phases.cuh),
/// and so are probabilities and ds, the very phases of the mma.sync steps.
///
/// The ladder (module04/attention_backward.hpp): tc_mma -> tc_pipelined -> tc_deterministic
/// -> tc_split_dq -> tc_wgmma -> tc_wgmma_deterministic -> tc_wgmma_split_dq (the last three:
/// this file).
///
/// Step tc_wgmma: the five products on wgmma.
///   What limits tc_pipelined / tc_split_dq on Hopper: mma.sync is Ampere's instruction. A
///     warp loads every operand into registers with ldmatrix first: per query tile and warp
///     ~92 KB of shared memory at d = 128 (the K_w, V_w fragments once, all of Q and dO for
///     S^T, dP^T, dV, dK, dS^T and K for dQ), ~740 KB per block, against 128 B per clock per
///     SM: ~5,800 clocks for the ~1,400 the tensor cores need at wgmma's rate. Measured
///     0.90-1.12x FlashAttention-2's backward (lesson, "The tensor-core backward").
///   Changes from tc_pipelined (same grid: one block per (128-key K/V tile, kv head), the
///     group's query tiles walked in the same order; same preprocessing, workspace, fp32 dQ
///     atomics and conversion -- attention_backward_tc.cuh's):
///   (a) Two warpgroups (256 threads, as before); warpgroup wg owns keys 64 wg .. 64 wg + 63.
///       Every product is a wgmma, issued by the warpgroup, reading shared memory directly:
///         S^T  = K_wg Q^T    m64n64k16 x d/16, A = K_wg, B = Q (both K-major: d contiguous)
///         dP^T = V_wg dO^T   the same with V, dO
///         dV  += P^T dO      m64n{d}k16 x 4, A = P^T FROM REGISTERS, B = dO (MN-major)
///         dK  += dS^T Q      the same with dS^T and Q
///         dQ   = dS K        m64n64k16, A = dS read from the stored dS^T (MN-major: the
///                            descriptor's transpose bit), B = K (MN-major)
///       The accumulator of m64nN follows mma.sync's m16n8 fragment order, so each warp's
///       S^T / dP^T registers are tc_pipelined's 16 x 64 tiles exactly (the probabilities
///       and ds phases run unchanged), and P^T, dS^T packed to bf16 are the A operand of
///       dV, dK as they are (module 3's P V trick, transposed).
///   (b) Tiles in wgmma's 128-byte-swizzle layout (cuda::Sw128Geom: [rows][64] column blocks,
///       chunk c of row r at c ^ (r % 8)), filled with cp.async by all 256 threads
///       (TileCopier); each thread fences its copies into the async proxy
///       (fence.proxy.async) before the barrier, because wgmma reads through it. Q, dO, lse2
///       and D of the next query tile load under this one (2 stages, as tc_pipelined).
///   (c) dQ = dS K for the 64 x d query tile in 64 x 64 blocks over all 128 keys (so dS^T of
///       both warpgroups must be in shared memory: a block barrier): d = 128, warpgroup wg
///       takes columns 64 wg..; d = 64, warpgroup 0 takes the one block and warpgroup 1 goes
///       on to the next barrier. (Splitting d = 64's block by keys instead, both warpgroups
///       adding to every element, would put 4 addends per element and K/V-tile pair into the
///       atomics: their order, and so dQ's last bits, would change run to run even for rows
///       whose other keys are hidden -- HiddenKeysNeverReachDq compares bits. Splitting it
///       by columns needs m64n32 from half a swizzle atom, which no descriptor here reads.)
///       wgmma for dQ rather than mma.sync: the stored dS^T is [keys][queries], queries
///       contiguous, which is an MN-major A -- one bit of the instruction (module 1's
///       transposed-A GEMM reads A the same way), no ldmatrix.trans.
///   (d) Per query tile and warpgroup: S^T and dP^T issued as two groups, P^T computed as
///       soon as S^T has landed (dP^T still in flight), then dS^T; dS^T to shared memory, dV
///       and dK issued (not waited for: kWaitKeysBeforeDq), block barrier, dQ issued, wait for
///       everything, dQ's atomics. No TMA, no warp specialization, no overlap of one tile's
///       softmax with another tile's products: the next steps' subjects.
///   Registers (per thread, d = 128, the budget is 255 at one block of 256 threads per SM):
///     dK, dV 2 x 64 fp32 accumulators (64 keys x 128 per warpgroup), S^T and dP^T 2 x 32
///     while the probabilities run (192 live), then P^T, dS^T packed 2 x 16 + dQ 32 while dV,
///     dK are in flight (192); the rest is addresses and loop state. d = 64: 2 x 32 for dK,
///     dV. ptxas -v (sm_90a, CUDA of this build): 248 registers at d = 128 without the mask,
///     254 with it, 186 / 196 at d = 64; no spills, no wgmma serialization. At d = 128 that
///     took the warpgroup index through a shuffle (uniform registers for the descriptors)
///     and a running (head, tile) pair instead of divisions: 8-24 bytes of spills without.
///   Shared memory: K, V (2 x 128 x d bf16), 2 stages of Q, dO (64 x d) and lse2, D (64
///     floats), dS^T (128 x 64 bf16), 1 KB of alignment: 146 KB at d = 128, 82 KB at d = 64.
///   Prediction (H100 SXM, 132 SMs, ~990 TFLOP/s dense bf16 wgmma at the boost clock; per
///     block and query tile 5 x 2 x 128 x 64 x d FLOP = 10.5 MFLOP at d = 128, ~1.4 us of one
///     SM's share of the peak): shared-memory reads fall to ~290 KB per block and tile (K_wg,
///     V_wg, Q, dO twice, dS^T and a 64-column block of K per warpgroup: ~2.5x less than
///     tc_pipelined), no register holds a B fragment and one instruction per warpgroup
///     replaces 16-64 mma.sync. What stays serial inside a warpgroup: products -> softmax
///     (~4 instructions per score) -> products -> barrier -> dQ -> atomics, with only the
///     other warpgroup to fill the gaps, and two block barriers per tile. Expected: 1.15-1.4x
///     tc_pipelined's TFLOP/s at d = 128 (>= 1.0x FlashAttention-2 everywhere, about 0.6-0.7x
///     FlashAttention-3's backward), 1.0-1.2x at d = 64 (softmax per FLOP doubles; dQ's product
///     and atomics fall on warpgroup 0 alone).
///   Measured (results: attn_bwd_bf16/solution/tc_wgmma/B1_H16_N16384_d128): 383.0 TFLOP/s
///   Outcome (H100, m04_bench, one run): 1.36-1.48x tc_pipelined at d = 128, 1.32-1.39x at
///     d = 64; causal 1.26-1.44x. Beside PyTorch (one compare_torch.py run, H100): 1.17-1.33x
///     FlashAttention-2's backward at every shape, 0.68-0.82x cuDNN's. Causal blocks go in
///     head groups (m03::grouped_kv_block_coordinates): with every head's first key tile
///     first, the running blocks shared no Q, dO or dQ row in L2, and d = 128 causal
///     N <= 2048 ran at 0.98-0.99x tc_pipelined (0.96x FlashAttention-2 at N = 2048).
///
/// Steps tc_wgmma_deterministic and tc_wgmma_split_dq (DqOrder::turns, DqOrder::split_copies):
///   tc_wgmma's pass with dQ's additions in a fixed order, the two ways of the mma.sync ladder:
///   tc_deterministic's turn per (batch, head, query tile) around the atomics (both warpgroups
///   call the wait phase, which holds a block barrier; the kernel hands the turn on one tile
///   later, cuda::release_turn after the next tile's first products, so the release store's
///   wait for the atomics overlaps the tensor cores), or tc_split_dq's grid of (split, kv
///   head) blocks, each walking its K/V tiles and adding into its own fp32 copy.
///   Prediction: time ratios to tc_wgmma like those of tc_deterministic (1.15-1.35x) and
///     tc_split_dq (1.02-1.10x) to tc_pipelined, unless the hand-off (which does not shrink
///     with the faster tile) or the copies' HBM traffic (which no longer hides behind slower
///     products) costs more.
///   Outcome (H100, m04_bench, one run; time ratio to tc_wgmma): turns 1.18-1.22x at d = 128
///     (1.15-1.37x causal), 1.17-1.31x at d = 64 (1.25-1.37x causal) -- 1.24-1.29x and
///     1.36-1.45x in an earlier run with the release right after the adds; copies 1.44-1.51x
///     at d = 128, 1.19-1.31x at d = 64 (causal: the turn's order then was K/V-tile order).
///     Causal, the turn now adds from the last K/V tile down, the order in which the blocks
///     reach a query tile (dq_turn_rank), and runs its tiles shortest first in head groups.
///     After that change (H100, the results page's run of every step): m04_bench, turns
///     1.17-1.21x tc_wgmma's time at d = 128 (1.08-1.27x causal), 1.17-1.30x at d = 64
///     (1.08-1.16x causal); copies 1.43-1.51x at d = 128 (1.30-1.47x causal), 1.19-1.30x at
///     d = 64 (1.07-1.25x causal); compare_torch.py, the turn causal 1.06-1.16x tc_wgmma's time,
///     1.02-1.20x FlashAttention-2 (0.91-1.17x before). ncu (d = 128, N = 8192, B = 2): the
///     copies move 12.2 GB in and 8.7 GB out of HBM (L2 hits 49%) where tc_wgmma moves 0.48
///     and 0.30 GB (96%): each block sweeps its own 4 MB copy once per K/V tile, and the 128
///     live copies do not fit L2, while tc_wgmma's 64 blocks of a head add to the same rows
///     together. The turn is the better deterministic step at 17 of 20 shapes, the copies at
///     d = 64 N <= 2048 without the mask and causal N = 1024; the better of the two runs
///     0.94-1.20x FlashAttention-2's backward (lesson, section 5).
///
/// Why the block is two warpgroups and not three (FlashAttention-3 adds a producer
/// warpgroup): without the TMA every thread copies, so a third warpgroup would only be a
/// third consumer -- 192 keys per block, a K/V tile the rest of the ladder (the host's tile
/// counts, the causal block order) does not have, and 146 KB -> 200+ KB of shared memory at
/// d = 128. Two keep tc_pipelined's tiles, grid and register budget per thread.

#include "attention_backward_tc.cuh"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/tile.cuh"
#include "course/cuda/turns.cuh"
#include "course/error.hpp"
#include "module03/attention_indexing.cuh"
#include "module04/attention_backward.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

// A build for "80;90a" also compiles this file for sm_80, where the kernel body is compiled
// out (wgmma needs sm_90a): silence "declared but never referenced" in that pass only.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

namespace course::attn_bwd_tc {
namespace {
namespace wgmma_step {

/// Step tc_wgmma's tiles. The names the shared phases read (kSTiles, kDTiles, kBlockM, D,
/// kDqMTiles, kDqTiles, kDqCols) mean what they mean in Config: a warp's S^T is 16 keys x
/// kBlockM queries as kSTiles n8 tiles, a dK / dV row block kDTiles n8 tiles, and a warp's
/// dQ block one m16 tile of kDqTiles n8 tiles, kDqCols wide.
template <int D_>
struct WgmmaConfig {
  static constexpr int D = D_;
  static constexpr int kWarpgroups = 2;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kBlockN = 64 * kWarpgroups;        ///< keys per block: 64 per warpgroup
  static constexpr int kBlockM = m04::kTcBackwardQTile;   ///< query rows per tile
  static constexpr int kSTiles = kBlockM / 8;             ///< 8: a warp's S^T = [8][4] fp32
  static constexpr int kSRegs = 4 * kSTiles;              ///< the m64n64 accumulator, 32 per thread
  static constexpr bool kMaskAsBits = false;             ///< the predicate mask (Config::kMaskAsBits)
  static constexpr int kDTiles = D / 8;
  static constexpr int kKeyRegs = 4 * kDTiles;            ///< dK or dV: the m64nD accumulator
  static constexpr int kQSteps = kBlockM / 16;            ///< k16 steps over the queries (dV, dK)
  static constexpr int kDSteps = D / 16;                  ///< k16 steps over d (S^T, dP^T)
  // dQ: 64 x 64 blocks over all kBlockN keys (change (c)), one per warpgroup while they
  // last (d = 64: warpgroup 0 only); warp w its rows 16 w .. 16 w + 15.
  static constexpr int kDqMTiles = 1;
  static constexpr int kDqCols = 64;
  static constexpr int kDqTiles = kDqCols / 8;
  static constexpr int kDqRegs = 4 * kDqTiles;
  static constexpr int kDqWarpgroups = D / kDqCols;       ///< warpgroups that compute dQ
  static constexpr int kDqKeySteps = kBlockN / 16;
  using KvGeom = cuda::Sw128Geom<D, kBlockN>;
  using QGeom = cuda::Sw128Geom<D, kBlockM>;
  static constexpr int kKVBytes = kBlockN * D * 2;
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;  ///< dS^T [128 keys][64 queries]: one column block
  static constexpr int kStatBytes = kBlockM * 4;
  static constexpr int kStages = 2;
  // Shared memory, every tile 1024-byte aligned: K, V, Q[2], dO[2], dS^T, lse2[2], D[2].
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kKVBytes;
  static constexpr int kOffQ = 2 * kKVBytes;
  static constexpr int kOffDo = kOffQ + kStages * kQBytes;
  static constexpr int kOffDs = kOffDo + kStages * kQBytes;
  static constexpr int kOffLse2 = kOffDs + kDsBytes;
  static constexpr int kOffD = kOffLse2 + kStages * kStatBytes;
  static constexpr int kSmemBytes = kOffD + kStages * kStatBytes + cuda::kSmemAlign;
  static_assert(D == 64 || D == 128, "whole 64-column swizzle blocks: d = 64 or 128");
  static_assert(kBlockN == m04::kTcBackwardKeyTile, "the host's K/V tile count uses it");
  static_assert(kBlockM == 64 && kSTiles * 4 == 32, "S^T per warpgroup is one m64n64 accumulator");
  static_assert(kQBytes % 1024 == 0 && kKVBytes % 1024 == 0 && kDsBytes % 1024 == 0, "1024-byte aligned tiles");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper block may have");
};

/// The shared-memory addresses (.shared space) of one block's tiles.
template <class W>
struct Tiles {
  std::uint32_t base;
  __device__ __forceinline__ std::uint32_t k() const { return base + W::kOffK; }
  __device__ __forceinline__ std::uint32_t v() const { return base + W::kOffV; }
  __device__ __forceinline__ std::uint32_t q(int stage) const { return base + W::kOffQ + stage * W::kQBytes; }
  __device__ __forceinline__ std::uint32_t dout(int stage) const { return base + W::kOffDo + stage * W::kQBytes; }
  __device__ __forceinline__ std::uint32_t ds() const { return base + W::kOffDs; }
  __device__ __forceinline__ std::uint32_t lse2(int stage) const { return base + W::kOffLse2 + stage * W::kStatBytes; }
  __device__ __forceinline__ std::uint32_t d(int stage) const { return base + W::kOffD + stage * W::kStatBytes; }
};

/// A warp's [kSTiles][4] accumulator tile (the shape the phases take) as the flat m64n64
/// accumulator array the wgmma wrappers take: the same registers, in the same order.
template <int kTiles>
__device__ __forceinline__ float (&flat(float (&x)[kTiles][4]))[4 * kTiles] {
  return reinterpret_cast<float(&)[4 * kTiles]>(x);
}

// ============================================================================
// The phases of one query tile, in the order the main loop calls them.

/// load_query_tile: rows q0 .. q0 + 63 of Q and dO of query head h (rows past N_q
/// zero-filled: their scores are 0 and their lse2 +inf, so P = 0) into stage `stage`, in the
/// 128-byte-swizzle layout, and the tile's lse2 and D (64 floats each, padded in the
/// workspace: 16 chunks of 16 bytes each, threads 0-31). Every thread issues its cp.async;
/// the caller commits.
template <class W>
__device__ __forceinline__ void load_query_tile(const Params& p, const Tiles<W>& t, int b, int h, int q0, int stage) {
  cuda::TileCopier<W::D, W::kBlockM, W::kThreads, true, typename W::QGeom> copy;
  copy.copy(t.q(stage), p.q + m03::row_offset(p.qs, b, h, 0), p.qs.seq, q0, p.seq_q);
  copy.copy(t.dout(stage), p.dout + m03::row_offset(p.dos, b, h, 0), p.dos.seq, q0, p.seq_q);
  const int c = static_cast<int>(threadIdx.x);
  constexpr int kHalf = W::kStatBytes / 16;
  if (c < 2 * kHalf) {
    const std::int64_t row0 = static_cast<std::int64_t>(b * p.heads + h) * p.seq_q_pad + q0;
    const float* src = (c < kHalf ? p.lse2 : p.d_row) + row0 + 4 * (c % kHalf);
    cuda::cp_async_16_zfill((c < kHalf ? t.lse2(stage) : t.d(stage)) + 16 * (c % kHalf), src, 16);
  }
}

/// scores_transposed: S^T = K_wg Q^T, this warpgroup's 64 keys against the tile's 64 queries
/// (issued, not waited for). Warp w of the group gets keys 16 w.. as tc_pipelined's [8][4].
template <class W, class Phases>
__device__ __forceinline__ void scores_transposed(float (&s)[W::kSTiles][4], const Tiles<W>& t, int stage, int wg) {
  Phases::template issue_transposed_scores<W>(flat(s), t.k(), 64 * wg, t.q(stage));
}

/// dp_transposed: dP^T = V_wg dO^T, the same product with V and dO (issued).
template <class W, class Phases>
__device__ __forceinline__ void dp_transposed(float (&dp)[W::kSTiles][4], const Tiles<W>& t, int stage, int wg) {
  Phases::template issue_transposed_scores<W>(flat(dp), t.v(), 64 * wg, t.dout(stage));
}

/// probabilities: P^T = 2^(S^T scale log2(e) - lse2), masked -- the mma.sync steps' phase on
/// the same registers.
template <class W, bool kCausal, class Phases>
__device__ __forceinline__ void probabilities(float (&s)[W::kSTiles][4], const Params& p, const TileSpot& spot,
                                              const unsigned char* smem, const Tiles<W>& t, int stage) {
  Phases::template probabilities<W, kCausal>(s, p, spot,
                                             reinterpret_cast<const float*>(smem + (t.lse2(stage) - t.base)));
}

/// ds_from_dp: dS^T = P^T * (dP^T - D), over dP^T (the mma.sync steps' phase).
template <class W, class Phases>
__device__ __forceinline__ void ds_from_dp(float (&dp)[W::kSTiles][4], const float (&pt)[W::kSTiles][4],
                                           const unsigned char* smem, const Tiles<W>& t, int stage) {
  Phases::template ds<W>(dp, pt, reinterpret_cast<const float*>(smem + (t.d(stage) - t.base)));
}

/// store_ds_transposed: this warp's dS^T (packed bf16, key rows 64 wg + 16 w + g (+8), query
/// columns 8j + 2t, +1) into the [128 keys][64 queries] tile dQ reads, in the 128-byte
/// swizzle (one 4-byte store per register; the 8 rows of a store hit 8 bank groups), then
/// fenced into the async proxy for wgmma.
template <class W>
__device__ __forceinline__ void store_ds_transposed(const std::uint32_t (&dst)[W::kSTiles][2], unsigned char* ds_tile,
                                                    int wg, int warp) {
  using G = cuda::Sw128Geom<W::kBlockM, W::kBlockN>;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < W::kSTiles; ++j)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
      *reinterpret_cast<std::uint32_t*>(ds_tile + G::offset(64 * wg + 16 * warp + g + 8 * hr, j) + 4 * t) = dst[j][hr];
  cuda::fence_proxy_async_smem();
}

/// accumulate_dv: dV_wg += P^T dO, A = P^T from registers (issued; kept in flight while the
/// block meets for dQ).
template <class W, class Phases>
__device__ __forceinline__ void accumulate_dv(float (&dv)[W::kDTiles][4], const std::uint32_t (&pt)[W::kSTiles][2],
                                              const Tiles<W>& t, int stage) {
  Phases::template issue_accumulate_keys<W>(flat(dv), pt, t.dout(stage));
}

/// accumulate_dk: dK_wg += dS^T Q, A = dS^T from registers (issued).
template <class W, class Phases>
__device__ __forceinline__ void accumulate_dk(float (&dk)[W::kDTiles][4], const std::uint32_t (&dst)[W::kSTiles][2],
                                              const Tiles<W>& t, int stage) {
  Phases::template issue_accumulate_keys<W>(flat(dk), dst, t.q(stage));
}

/// accumulate_dq: this warpgroup's 64 x 64 block of dQ_i = dS K, columns 64 wg.., over all
/// 128 keys (change (c); issued). Only warpgroups wg < W::kDqWarpgroups call it.
template <class W, class Phases>
__device__ __forceinline__ void accumulate_dq(float (&dq)[W::kDqMTiles][W::kDqTiles][4], const Tiles<W>& t, int wg) {
  Phases::template issue_dq<W>(flat(dq[0]), t.ds(), t.k(), wg);
}

// ============================================================================
// The kernel.

/// false: dV and dK stay in flight under the barrier and dQ's wgmmas (their A registers,
/// P^T and dS^T packed, live beside dQ's 32 accumulators); true: they complete before the
/// barrier (32 registers fewer while dQ runs, the barrier wait no longer hidden). Both fit
/// without spills at d = 128 (ptxas -v, sm_90a, non-causal / causal: 248 / 254 registers
/// with false, 248 / 253 with true). A switch for an A/B run on the GPU: flip it, rebuild, compare.
constexpr bool kWaitKeysBeforeDq = false;

/// How a step's blocks add dQ: fp32 atomics in whatever order they come (tc_wgmma); in
/// K/V-tile order behind a turn counter per (batch, head, query tile) (tc_wgmma_deterministic,
/// tc_deterministic's hand-off); or each block into its own copy (tc_wgmma_split_dq).
enum class DqOrder { atomic, turns, split_copies };

/// One K/V tile of kv head (b, hk): K and V loaded once, every query tile of every query head
/// of the group visited in order (head, tile), dQ added to `dq_acc` (the fp32 workspace, or
/// the block's own copy of it in tc_wgmma_split_dq), dK and dV written at the end. kStoreDq:
/// the split step's first pass over its copy, which stores dQ instead of adding it.
template <class W, bool kCausal, DqOrder kOrder, class Phases, bool kStoreDq = false>
__device__ __forceinline__ void kv_tile_pass(const Params& p, unsigned char* smem, const Tiles<W>& t, int kv_tile,
                                             int b, int hk, float* dq_acc) {
  const int kv0 = kv_tile * W::kBlockN;
  // wg through a shuffle: the compiler then knows it is the same in the whole warp and keeps
  // what derives from it (the wgmma descriptors' addresses) in uniform registers, not in the
  // per-thread ones dK and dV need (CUTLASS reads its warpgroup index the same way).
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int warp = (static_cast<int>(threadIdx.x) / 32) % 4;
  const int key0 = kv0 + 64 * wg + 16 * warp;  // this warp's first key
  const int first_tile = first_query_tile<W, kCausal>(p, kv0);
  const int tiles_per_head = first_tile < p.q_tiles ? p.q_tiles - first_tile : 0;
  const int iterations = tiles_per_head * p.group;
  // Iteration it visits query head hk * group + it / tiles_per_head, tile first_tile + it %
  // tiles_per_head; (h, q_tile) walk that order, one step per iteration (no division).
  int h = hk * p.group, q_tile = first_tile;
  const auto advance = [&](int& head, int& tile) {
    if (++tile == p.q_tiles) tile = first_tile, ++head;
  };

  // K and V of the block, once (rows past N_k zero-filled), with the first query tile.
  cuda::TileCopier<W::D, W::kBlockN, W::kThreads, true, typename W::KvGeom> kv_copy;
  kv_copy.copy(t.k(), p.k + m03::row_offset(p.ks, b, hk, 0), p.ks.seq, kv0, p.seq_k);
  kv_copy.copy(t.v(), p.v + m03::row_offset(p.vs, b, hk, 0), p.vs.seq, kv0, p.seq_k);
  if (iterations > 0) load_query_tile<W>(p, t, b, h, q_tile * W::kBlockM, 0);
  cuda::cp_async_commit();

  float dk[W::kDTiles][4], dv[W::kDTiles][4];
#pragma unroll
  for (int j = 0; j < W::kDTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.f;
  // tc_wgmma_deterministic: the turn this block still has to hand on (thread 0's release,
  // deferred past the next tile's first products; null: none).
  int* turn_to_pass = nullptr;
  int rank_to_pass = 0;  // its place in that query tile's order (dq_turn_rank)

  for (int it = 0; it < iterations; ++it) {
    const int stage = it % W::kStages;
    // Tile `it` landed (this thread: wait; the async proxy: fence; the block: barrier, which
    // also says both warpgroups are done with tile it - 1: its stage, dS^T and dQ reads).
    cuda::cp_async_wait<0>();
    cuda::fence_proxy_async_smem();
    __syncthreads();
    if (it + 1 < iterations) {
      int next_h = h, next_tile = q_tile;
      advance(next_h, next_tile);
      load_query_tile<W>(p, t, b, next_h, next_tile * W::kBlockM, (it + 1) % 2);
    }
    cuda::cp_async_commit();
    const int q0 = q_tile * W::kBlockM;
    const TileSpot spot{key0, q0, key0 + 15 >= p.seq_k || (kCausal && key0 + 15 > q0 + p.causal_offset)};

    // ---- The warpgroup's 64 keys: S^T and dP^T, then P^T and dS^T on the registers.
    float s[W::kSTiles][4], dp[W::kSTiles][4];
    cuda::wgmma_fence();  // s, dp were read by ordinary instructions in the last iteration
    scores_transposed<W, Phases>(s, t, stage, wg);
    cuda::wgmma_commit();
    dp_transposed<W, Phases>(dp, t, stage, wg);
    cuda::wgmma_commit();
    if constexpr (kOrder == DqOrder::turns) {
      // Hand on the last tile's turn now: the barrier that opened this tile ordered every
      // thread's adds before it, and the release store's wait for them (the storing warp
      // stalls until L2 has acknowledged the adds) overlaps the two products just issued.
      if (turn_to_pass != nullptr) cuda::release_turn(turn_to_pass, rank_to_pass);
      turn_to_pass = nullptr;
    }
    cuda::wgmma_wait<1>();  // S^T has landed; dP^T may still be on its way
    cuda::pin_registers(flat(s));
    probabilities<W, kCausal, Phases>(s, p, spot, smem, t, stage);
    cuda::wgmma_wait<0>();
    cuda::pin_registers(flat(dp));
    ds_from_dp<W, Phases>(dp, s, smem, t, stage);
    std::uint32_t pt[W::kSTiles][2], dst[W::kSTiles][2];
    pack_a_fragments<W>(pt, s);
    pack_a_fragments<W>(dst, dp);
    store_ds_transposed<W>(dst, smem + W::kOffDs, wg, warp);

    // ---- dV and dK from the registers, left in flight under the barrier and dQ.
    cuda::wgmma_fence();  // pt, dst written by ordinary instructions (and dk, dv zeroed once)
    accumulate_dv<W, Phases>(dv, pt, t, stage);
    accumulate_dk<W, Phases>(dk, dst, t, stage);
    cuda::wgmma_commit();
    if constexpr (kWaitKeysBeforeDq) cuda::wgmma_wait<0>();
    __syncthreads();  // dS^T of both warpgroups is in shared memory (fenced by each writer)

    // ---- dQ_i += dS K: this warpgroup's 64 x 64 block, then the fp32 atomics (one addend
    // per element and block, as tc_pipelined). The condition is the same in a whole
    // warpgroup, as wgmma requires.
    if constexpr (kOrder != DqOrder::turns) {
      if (wg < W::kDqWarpgroups) {
        float dq[W::kDqMTiles][W::kDqTiles][4];
        cuda::wgmma_fence();
        accumulate_dq<W, Phases>(dq, t, wg);
        cuda::wgmma_commit();
        cuda::wgmma_wait<0>();  // dV, dK and dQ: the stage and dS^T may be refilled after the next barrier
        float* dq_head = dq_acc + static_cast<std::int64_t>(b * p.heads + h) * p.seq_q * W::D;
        add_dq<W, kStoreDq ? DqWrite::store : DqWrite::red_add>(dq, dq_head, q0, p.seq_q, warp, wg);
      } else {
        cuda::wgmma_wait<0>();  // dV, dK
      }
    } else {
      // tc_wgmma_deterministic: the block adds at its place in the query tile's order
      // (dq_turn_rank: after kv_tile - 1, causal after kv_tile + 1; tc_deterministic's
      // counter and wait phase). The wait holds a block barrier, so every thread makes it,
      // outside the warpgroup condition; at d = 128 both warpgroups add (a compile-time
      // true, which keeps the d = 128 code as straight as above: no spills). The hand-on
      // is deferred to the next tile (turn_to_pass), or to after the loop.
      const bool adds_dq = W::kDqWarpgroups == W::kWarpgroups || wg < W::kDqWarpgroups;
      float dq[W::kDqMTiles][W::kDqTiles][4];
      if (adds_dq) {
        cuda::wgmma_fence();
        accumulate_dq<W, Phases>(dq, t, wg);
        cuda::wgmma_commit();
      }
      // The poll for the turn runs while dQ's product is on the tensor cores.
      int* turn = p.turn + static_cast<std::int64_t>(b * p.heads + h) * p.q_tiles + q_tile;
      const int rank = dq_turn_rank<kCausal>(p, kv_tile, q_tile);
      Phases::wait_dq_turn(turn, rank);
      cuda::wgmma_wait<0>();
      if (adds_dq)
        add_dq<W>(dq, dq_acc + static_cast<std::int64_t>(b * p.heads + h) * p.seq_q * W::D, q0, p.seq_q, warp, wg);
      turn_to_pass = turn;
      rank_to_pass = rank;
    }
    advance(h, q_tile);
  }
  cuda::cp_async_wait<0>();
  if constexpr (kOrder == DqOrder::turns) {
    __syncthreads();  // the last tile's adds, before its hand-on (no next tile's barrier to do it)
    if (turn_to_pass != nullptr) cuda::release_turn(turn_to_pass, rank_to_pass);
  }

  // ---- dK = scale * sum dS^T Q, dV = sum P^T dO over the group's query heads: the
  // accumulators are the warp's 16 keys x d in n8 tiles, store_rows' layout.
  store_rows<W>(dk, p.dk + m03::row_offset(p.dks, b, hk, 0), p.dks.seq, key0, p.seq_k, p.scale);
  store_rows<W>(dv, p.dv + m03::row_offset(p.dvs, b, hk, 0), p.dvs.seq, key0, p.seq_k, 1.f);
}

/// tc_wgmma and tc_wgmma_deterministic (DqOrder::atomic, turns): one block per K/V tile of
/// one kv head, grid and order as tc_pipelined's.
/// tc_wgmma_split_dq (DqOrder::split_copies): one block per (split, kv head), walking the
/// K/V tiles m04::tc_split_dq_tile deals it and adding dQ into its own copy -- tc_split_dq's
/// scheme (its banner in attention_backward_tc.cuh), on this kernel's pass. Each dQ element has one
/// owner thread in every pass (add_dq: warpgroup wg's columns 64 wg.., warp w's rows 16 w..),
/// so a copy's additions come in that thread's program order: the same bits every run.
template <class W, bool kCausal, DqOrder kOrder, class Phases>
__global__ void __launch_bounds__(W::kThreads, 1) wgmma_backward_kernel(const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = cuda::align_smem(smem_raw);
  const Tiles<W> t{cuda::smem_u32(smem)};
  if constexpr (kOrder == DqOrder::split_copies) {
    walk_split_tiles(p, [&](int kv_tile, int b, int hk, float* dq_acc, bool first) {
      if (first)
        kv_tile_pass<W, kCausal, kOrder, Phases, true>(p, smem, t, kv_tile, b, hk, dq_acc);
      else
        kv_tile_pass<W, kCausal, kOrder, Phases, false>(p, smem, t, kv_tile, b, hk, dq_acc);
    });
  } else {
    int kv_tile, bhk;
    // Causal: longest first within groups of heads; tc_wgmma_deterministic shortest first, so
    // that the block its turns wait for (dq_turn_rank: kv_tile + 1 causal, kv_tile - 1 not)
    // always has the lower linear number and has started.
    m03::grouped_kv_block_coordinates(kCausal, p.group_heads, kv_tile, bhk);
    if constexpr (kCausal && kOrder == DqOrder::turns) kv_tile = p.kv_tiles - 1 - kv_tile;
    kv_tile_pass<W, kCausal, kOrder, Phases>(p, smem, t, kv_tile, bhk / p.kv_heads, bhk % p.kv_heads, p.dq_acc);
  }
#else
  (void)p;
  __trap();  // never launched: run_step checks sm90a_code_available() first
#endif
}

/// Throws course::Unsupported unless this binary has sm_90a code for the current GPU (as
/// module 3's Hopper steps).
inline void require_sm90a(AttentionBackwardStep step) {
  if (!cuda::sm90a_code_available())
    throw Unsupported(std::string("attention_backward step ") + m04::step_name(step),
                      "a Hopper GPU (compute capability 9.0) and a build for sm_90a "
                      "(CMAKE_CUDA_ARCHITECTURES=90a; wgmma is not in plain sm_90)");
}

template <int D, bool kCausal, DqOrder kOrder, class Phases>
void launch_kernel(const Params& p, std::int64_t batch, cudaStream_t stream) {
  using W = WgmmaConfig<D>;
  constexpr bool kSplit = kOrder == DqOrder::split_copies;
  constexpr auto kernel = wgmma_backward_kernel<W, kCausal, kOrder, Phases>;
  cuda::opt_in_dynamic_smem<kernel>(W::kSmemBytes);
  if constexpr (kSplit) check_split_occupancy<kernel>(W::kSmemBytes, W::kThreads, "tc_wgmma_split_dq");
  // tc_wgmma_split_dq: one block per (split, kv head); the others: per (K/V tile, kv head).
  const dim3 grid(static_cast<unsigned>(kSplit ? p.splits : p.kv_tiles), static_cast<unsigned>(batch * p.kv_heads));
  kernel<<<grid, W::kThreads, W::kSmemBytes, stream>>>(p);
  COURSE_CHECK_LAUNCH("attention backward wgmma_backward_kernel (tc_wgmma steps)");
}

/// The main kernel of a tc_wgmma step: causal or not, dQ added as kOrder says.
template <int D, DqOrder kOrder, class Phases>
void launch(const Params& p, const AttentionBackwardArgsBf16& a) {
  if (a.causal) launch_kernel<D, true, kOrder, Phases>(p, a.batch, a.stream);
  else launch_kernel<D, false, kOrder, Phases>(p, a.batch, a.stream);
}

}  // namespace wgmma_step
}  // namespace
}  // namespace course::attn_bwd_tc
