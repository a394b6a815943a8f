#pragma once
/// @file attention_backward_tc.cuh
/// @brief The tensor-core (bf16, mma.sync) attention backward: its kernels, written once and
/// shared by the solution (attention_backward_tc.cu) and the exercise
/// (exercises/module04_training/attention_backward_tc.cu). The three phases a learner writes
/// -- P recomputed on the fragments, dS, and the ordered dQ hand-off -- are the `Phases`
/// template parameter: each file supplies its own, everything else is this header.
///
/// The ladder (steps of module04/attention_backward.hpp):
///   tc_mma            mma.sync on fragments: S^T = K Q^T and dP^T = V dO^T per warp, P^T and
///                     dS^T reused from the accumulators as A operands of dV and dK, dS^T
///                     through shared memory for dQ = dS K; plain tiles, one load stage.
///   tc_pipelined      + XOR-swizzled tiles (conflict-free ldmatrix) and a 2-stage cp.async ring
///                     for the next query tile's Q, dO, lse and D; dS^T stored by stmatrix
///                     (sm_90); FlashAttention-2's tiles: 32 x 32 per warp at d = 128, and
///                     at d = 64 a 128-query tile, 32 keys x 64 queries per warp (below).
///   tc_deterministic  + dQ added in K/V-tile order: a counter per (batch, head, query tile)
///                     admits the K/V blocks one at a time, in index order (causal: from the
///                     last K/V tile down, the order they reach the query tile, dq_turn_rank);
///                     at d = 64 the 16-key tiles, K_w and V_w held in registers (WarpRows).
///   tc_split_dq       tc_pipelined where each block owns a fixed list of K/V tiles (a split)
///                     and adds dQ into its own fp32 copy; the conversion sums the copies in
///                     index order (deterministic with no hand-off; see "Step tc_split_dq").
///   tc_wgmma          (sm_90a) the five products on warpgroup MMA, 64 keys per warpgroup, P^T
///                     and dS^T as register A operands, 128-byte-swizzled tiles: its kernel is
///                     attention_backward_tc_wgmma.cuh (included below), the rest is this file.
///   tc_wgmma_deterministic, tc_wgmma_split_dq  (sm_90a) tc_wgmma with tc_deterministic's turns
///                     or tc_split_dq's copies (the same file's kernel, DqOrder).
///
/// One block owns one K/V tile (128 keys, 16 per warp) of one kv head and walks every query
/// tile (64 rows) of every query head of its group. Per query tile, warp w (keys 16w..16w+15):
///
///     scores_transposed S^T  = K_w Q^T             16 x 64 fp32 accumulators  (A = K_w, B = Q)
///     probabilities     P^T  = 2^(S^T c - lse2)    masked keys and rows -> 0
///     scores_transposed dP^T = V_w dO^T            (A = V_w, B = dO)
///     ds                dS^T = P^T * (dP^T - D)
///     store_ds          dS^T -> shared memory      (bf16, for dQ below)
///     accumulate_keys   dV_w += P^T dO             A = P^T packed from the accumulators, B = dO (.trans)
///     accumulate_keys   dK_w += dS^T Q             A = dS^T likewise, B = Q (.trans)
///   then the whole block:
///     accumulate_dq     dQ_i += dS K               A = dS (ldmatrix.trans of dS^T), B = K (.trans)
///     add_dq            fp32 atomics into the workspace (tc_deterministic: in K/V-tile order)
/// and at the end dK = scale * dK_w and dV_w go to global memory as bf16; a last kernel turns
/// the fp32 dQ into bf16 (times scale).
///
/// The swizzled steps split the work FlashAttention-2's way (Config::kSquareTiles): warp
/// (wk, wq) = (w / 2, w % 2) computes S^T and dP^T for keys 32 wk.. x queries
/// kWarpQueries wq.. (32 at d = 128; 64 at d = 64, whose query tile is 128 rows:
/// Config::kWideQueries), writes P^T and dS^T to shared memory (stmatrix), and after a
/// barrier accumulates dV and dK for its 32 keys x columns (d/2) wq.. from the whole tile's
/// P^T, dS^T (ldmatrix, as stored). Fewer shared-memory bytes per mma than 16 keys a warp
/// (the measured A/Bs: Config, and the lesson, section 5). tc_deterministic keeps the
/// 16-key tiles at d = 64: its turns are per 64-row query tile.
///
/// Step tc_split_dq (FlashAttention-2's deterministic backward, on this kernel):
///   What limits tc_deterministic: the hand-off, not the order. Once per query tile and block
///     it costs a block barrier, a release store that waits for the block's own atomics, and
///     the next block's poll; a waiting block holds its SM (one block per SM). Measured on an
///     H100: 1.15-1.41x tc_pipelined's time (the lesson, section 5).
///   Changes: the grid is (S splits, B * H_kv). Block (s, bhk) walks the K/V tiles
///     m04::tc_split_dq_tile deals it (serpentine: s, 2S-1-s, 2S+s, ...), one after the other
///     -- per tile exactly tc_pipelined's pass (kv_tile_pass: K, V loaded, every query tile of
///     the group walked, dK and dV written, their accumulators reset) -- and adds its dQ into
///     copy s of the fp32 accumulator, [S][B*H, N_q, d], which no other block writes. Inside
///     the block each dQ element has one owner thread (add_dq: warp (wm, wn) owns rows
///     16 wm.., columns wn * kDqCols..; lane (g, t) rows g, g + 8, columns 2t, 2t + 1 of each n8
///     tile), and the same thread owns it in every pass. So the adds stay tc_pipelined's
///     8-byte red.global.add (fire and forget, no read round trip in the loop), and their
///     order is that thread's program order: same-thread writes to one address are ordered
///     by the PTX memory model (FlashAttention-2's deterministic mode relies on the same).
///     The copies are not zeroed: the block's first pass (round 0, its lowest K/V tile, whose
///     walk covers every row its later tiles reach) stores instead of adding, and the
///     conversion sums, in index order, the copies that hold the row
///     (m04::tc_split_dq_first_tile), then scales: the same bits every run.
///     dK, dV were deterministic already: one block per K/V tile, the group's query heads
///     summed in registers in a fixed loop order (kv_tile_pass, iteration order (head, tile)).
///   S (m04::tc_split_dq_plan, shared with the workspace size): the cheapest by a cost model
///     in whole waves of blocks (S * B*H_kv over SMs * 1 resident block) plus 8 bytes per dQ
///     element of each copy (tuned when the copies were zeroed and read back), at most ceil(N_k / 128) and 1 GiB of copies. At the benchmark's
///     B*N = 16384, H*d = 2048 (132 SMs): S = 1 up to N = 2048 (d = 128) or 4096 (d = 64),
///     then 2, 4, 8 at d = 128, N = 4096, 8192, 16384 (128 blocks whenever S > 1).
///   Memory: S copies of B*H*N_q*d fp32 (tc_pipelined: one): 128 MiB each at the benchmark's
///     shapes, 1 GiB at N = 16384, d = 128.
///   Predicted (time ratio to tc_pipelined, same run): the S - 1 extra copies cost 8 bytes per
///     dQ element each (zeroed, read back): 0.09-0.63 ms against 5.5-21 ms, +1-3% non-causal,
///     +3-6% causal (half the work, the same copies); 128 blocks of 16 tiles leave 4 of 132
///     SMs idle (tc_pipelined's many 1-tile blocks quantize the same way without the mask,
///     better causal): +0-3%. Expected 1.00-1.03x non-causal, 1.03-1.09x causal (target: at
///     most 1.15x). The risk the model leaves out: L2. tc_pipelined's concurrent blocks are
///     the K/V tiles of one head, adding to the same dQ rows and reading the same Q, dO; here
///     the concurrent blocks own different copies (the working set, 8 B per dQ element per
///     K/V tile, ~1.6 TB/s at 250 TFLOP/s, misses L2), and at S = 1 they share no Q, dO
///     either (another ~0.8 TB/s). If HBM saturates, up to ~1.2x.
///   Outcome (H100, m04_bench, one run; time ratio to tc_pipelined): 1.00-1.05x at d = 64 and
///     1.04-1.06x at d = 128 without the mask, 1.02-1.10x and 0.93-1.14x causal -- inside the
///     15% target everywhere, the worst at N = 16384 causal (8 copies at d = 128). In the same
///     run tc_deterministic took 1.10-1.36x: the per-split copies beat the ordered hand-off.
///   Since the integer masks of Config::kMaskAsBits (ptxas had spilled the causal mask's
///     predicates into registers at d = 128): 0.99-1.08x on an H200 (compare_torch.py, one run).
///   Since the copies are stored by each block's first pass instead of zeroed (the zeroing was
///     ~3% of the time at d = 128, N = 16384 causal in ncu): the step itself 1.00-1.05x faster
///     (A/B, H200), 0.94-1.05x tc_pipelined's time and 0.87-1.17x FlashAttention-2's backward
///     (compare_torch.py, one H200 run).
///
/// Why S^T and not S: the accumulator of an m16n8 mma holds two consecutive COLUMNS of a row
/// per register pair, and the A operand of the next mma wants two consecutive k of a row.
/// dV = P^T dO contracts over the queries, so its A operand is P^T with the queries as k:
/// computing S^T (keys as rows, queries as columns) makes P^T's accumulators exactly that A
/// operand, with no shuffle and no shared memory (the forward's P -> P V trick, transposed).
/// Only dQ = dS K contracts over the keys, against the layout: dS^T goes through shared
/// memory once and comes back through ldmatrix.trans.

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/tile.cuh"
#include "course/error.hpp"
#include "module03/attention_indexing.cuh"
#include "module04/attention_backward.hpp"

#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace course::attn_bwd_tc {
// Internal linkage: the solution's and the exercise's translation units each get their own
// copy of these kernels (one test binary links both, and kernels defined in two objects of
// one program would register the same symbol twice).
namespace {

using bf16 = __nv_bfloat16;
using m03::AttentionStrides;
using m04::AttentionBackwardArgsBf16;
using m04::AttentionBackwardStep;

/// log2(e): e^x = 2^(x * log2(e)).
constexpr float kLog2e = 1.4426950408889634f;

/// Everything the kernels need, by value.
struct Params {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  const bf16* o;
  const bf16* dout;
  const float* lse;  ///< [B*H, N_q], natural log (-inf: the row sees no key)
  bf16* dq;
  bf16* dk;
  bf16* dv;
  float* lse2;    ///< workspace [B*H, N_q_pad]: lse * log2(e), +inf for padding and dead rows
  float* d_row;   ///< workspace [B*H, N_q_pad]: D = rowsum(dO * O), 0 for padding
  float* dq_acc;  ///< workspace [splits][B*H, N_q, d] fp32
  int* turn;      ///< workspace [B*H, q_tiles]: the K/V tile whose turn it is to add to dQ
  std::int64_t dq_split_stride;  ///< B*H*N_q*d: floats from one dQ copy to the next
  int splits;     ///< dQ copies: the split steps' S (m04::tc_split_dq_plan), else 1
  int kv_tiles;   ///< ceil(N_k / kBlockN)
  int group_heads;  ///< causal block order: kv heads per group (m03::grouped_kv_block_coordinates)
  AttentionStrides qs, ks, vs, os, dos, dqs, dks, dvs;
  int heads, kv_heads, group, seq_q, seq_k, seq_q_pad, q_tiles;
  int causal_offset;  ///< N_k - N_q: query i sees key j iff j <= i + causal_offset
  float scale;        ///< softmax scale (dQ and dK are multiplied by it)
  float scale_log2;   ///< scale * log2(e)
};

inline Params make_params(AttentionBackwardStep step, const AttentionBackwardArgsBf16& a) {
  const std::int64_t splits = m04::splits_dq(step) ? m04::tc_split_dq_plan(a) : 1;
  const m04::TcBackwardWorkspace w = m04::tc_backward_workspace(step, a.batch, a.heads, a.seq_q, a.head_dim, splits);
  auto* ws = reinterpret_cast<unsigned char*>(a.workspace);
  Params p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.dout = a.dout;
  p.lse = a.lse;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.lse2 = reinterpret_cast<float*>(ws + w.lse2);
  p.d_row = reinterpret_cast<float*>(ws + w.d);
  p.dq_acc = reinterpret_cast<float*>(ws + w.dq);
  p.turn = m04::orders_dq(step) ? reinterpret_cast<int*>(ws + w.sem) : nullptr;
  p.qs = a.q_strides;
  p.ks = a.k_strides;
  p.vs = a.v_strides;
  p.os = a.o_strides;
  p.dos = a.do_strides;
  p.dqs = a.dq_strides;
  p.dks = a.dk_strides;
  p.dvs = a.dv_strides;
  p.heads = static_cast<int>(a.heads);
  p.kv_heads = static_cast<int>(a.kv_heads);
  p.group = static_cast<int>(a.heads / a.kv_heads);
  p.seq_q = static_cast<int>(a.seq_q);
  p.seq_k = static_cast<int>(a.seq_k);
  p.q_tiles = static_cast<int>((a.seq_q + m04::kTcBackwardQTile - 1) / m04::kTcBackwardQTile);
  p.seq_q_pad = static_cast<int>(m04::tc_backward_padded_rows(a.seq_q));
  p.causal_offset = static_cast<int>(a.seq_k - a.seq_q);
  p.dq_split_stride = a.batch * a.heads * a.seq_q * a.head_dim;
  p.splits = static_cast<int>(splits);
  p.kv_tiles = static_cast<int>((a.seq_k + m04::kTcBackwardKeyTile - 1) / m04::kTcBackwardKeyTile);
  // Causal: groups of heads holding about two waves of blocks, their key tiles longest first
  // (module 3's forward does the same with its query tiles); the turn steps run them
  // shortest first (m04::tc_dq_turn_place says why).
  p.group_heads = m03::causal_group_heads(p.kv_tiles, a.batch * a.kv_heads, m04::tc_backward_block_slots());
  p.scale = m04::effective_scale(a);
  p.scale_log2 = p.scale * kLog2e;
  return p;
}

/// The tile configuration of one step.
template <int D_, bool kSwizzle_, int kStages_, bool kOrderedDq_, bool kSplitDq_ = false>
struct Config {
  static constexpr int D = D_;
  static constexpr bool kSwizzle = kSwizzle_;  ///< XOR-swizzled shared-memory rows
  static constexpr int kStages = kStages_;     ///< query tiles in flight (1: load, wait, compute)
  static constexpr bool kOrderedDq = kOrderedDq_;  ///< dQ added in K/V-tile order
  static constexpr bool kSplitDq = kSplitDq_;  ///< a list of K/V tiles per block, its own dQ copy
  /// P^T and dS^T go to shared memory by stmatrix (sm_90; the swizzled steps): one
  /// instruction per 16 x 16 tile instead of four 4-byte stores per lane. Measured on an H100
  /// (tc_pipelined, one run, time ratio): 1.02-1.05x faster at d = 64 (the lesson, section 5).
  static constexpr bool kStoreMatrix = kSwizzle_;
  /// P^T's mask (Phases::probabilities) as integer AND masks instead of a predicate per
  /// element: the split steps. In tc_split_dq's kernel at d = 128, causal, ptxas computed the
  /// 32 mask predicates of a warp's S^T early and held them across the products as bits of
  /// registers (P2R, two LOP3 to pack each, one to unpack): ncu on an H200 (N = 16384), 18.5%
  /// more instructions than tc_pipelined's kernel for the same tiles, 7.7% more time. With the
  /// integer masks (an H200 A/B, time ratio): tc_split_dq 1.04-1.05x faster at d = 128 causal,
  /// 1.00-1.01x elsewhere; tc_pipelined 0.99x at d = 128 causal, so it keeps the predicates
  /// (the lesson, section 5).
  static constexpr bool kMaskAsBits = kSplitDq_;
  /// FlashAttention-2's warp tiles (kSquareTiles; the swizzled steps but tc_deterministic at
  /// d = 64): S^T and dP^T per warp 32 keys x kWarpQueries, P^T and dS^T through shared
  /// memory, dV and dK per warp 32 keys x D/2, dQ 32 queries x D/4 (d = 128) or D/2. At
  /// d = 128, 32 x 32: with stmatrix stores 1.02-1.10x faster than the 16-key tiles (plain
  /// stores: 0.87-0.91x causal, where ptxas spilled). At d = 64 with the 64-row query tile,
  /// 0.86-0.97x of the 16-key tiles with stmatrix -- too few mma per byte of shared memory to
  /// win back; hence the 128-row tile below. (Chosen at compile time, because the host sizes
  /// shared memory from it: device code for GPUs before sm_90, which has no stmatrix, gets
  /// these tiles with plain stores, slower. The course measures on sm_90.)
  ///
  /// FlashAttention-2's query tile at d = 64 (tc_pipelined, tc_split_dq): 128 rows, two of
  /// the host's 64-row tiles (kTileSpan), on the square warp tiles, 32 keys x 64 queries per
  /// warp. Shared-memory bytes per 128 queries and 128 keys: 768 KB -> 672 KB (FlashAttention-
  /// 2's count); S^T and dP^T take 64 accumulators each. Measured on an H100 (one binary,
  /// both tilings on the same tensors): 1.02-1.04x faster than the 16-key tiles with K_w and
  /// V_w in registers, 1.03-1.06x for tc_split_dq (the lesson, section 5). Not for the turn
  /// steps: their counters and their order are per 64-row tile.
  static constexpr bool kWideQueries = kSwizzle_ && D_ == 64 && !kOrderedDq_;
  static constexpr bool kSquareTiles = kSwizzle_ && (D_ == 128 || kWideQueries);
  /// The 16-key tiles of the swizzled steps (tc_deterministic at d = 64) keep the A fragments
  /// of the warp's 16 rows of K and V in registers for the whole K/V tile (WarpRows): 32
  /// registers for 8 ldmatrix.x4 fewer per warp and query tile, 8% fewer shared-memory bytes
  /// per mma. Measured on an H100 (tc_pipelined before the 128-query tiles, one process, the
  /// same tensors): 1.03-1.05x faster, causal too (the lesson, section 5). The square tiles
  /// would need 64 registers per operand.
  static constexpr bool kKvInRegisters = kSwizzle_ && !kSquareTiles;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 16 * kWarps;  ///< keys per block: 16 per warp
  static constexpr int kBlockM = (kWideQueries ? 2 : 1) * m04::kTcBackwardQTile;  ///< query rows per tile
  static constexpr int kTileSpan = kBlockM / m04::kTcBackwardQTile;  ///< host query tiles per tile
  static constexpr int kSTiles = kBlockM / 8;  ///< n8 accumulator tiles of S^T per warp (queries)
  static constexpr int kDSteps = D / 16;       ///< k16 steps over d (S^T, dP^T)
  static constexpr int kDTiles = D / 8;        ///< n8 tiles of a dK / dV row block
  static constexpr int kQSteps = kBlockM / 16;  ///< k16 steps over the queries (dV, dK)
  static constexpr int kKeySteps = kBlockN / 16;  ///< k16 steps over the keys (dQ)
  // dQ = dS K: a kBlockM x d tile over 8 warps, 4 along the queries (16 rows) x 2 along d;
  // with the square tiles 32 rows per warp (every K fragment feeding two mma): 2 x 4 warps
  // at d = 128, 4 x 2 with the 128-row tiles of d = 64. (With the
  // 16-key tiles, 32 rows per warp gave a 4-8% lower ratio to FlashAttention-2 on an H100:
  // d = 128 then spills, and d = 64 loses too.)
  static constexpr int kDqMTiles = kSquareTiles ? 2 : 1;
  static constexpr int kDqWarpsM = kBlockM / (16 * kDqMTiles);
  static constexpr int kDqWarpsN = kWarps / kDqWarpsM;
  static constexpr int kDqCols = D / kDqWarpsN;
  static constexpr int kDqTiles = kDqCols / 8;
  using Geom = cuda::TileGeom<D, kSwizzle>;          ///< K, V, Q, dO: [rows][D]
  using DsGeom = cuda::TileGeom<kBlockM, kSwizzle>;  ///< dS^T: [kBlockN keys][kBlockM queries]
  static constexpr int kKVBytes = kBlockN * Geom::kRowBytes;
  static constexpr int kQBytes = kBlockM * Geom::kRowBytes;
  static constexpr int kStatBytes = kBlockM * 4;  ///< lse2 or D of one tile
  static constexpr int kStageBytes = 2 * kQBytes + 2 * kStatBytes;  ///< Q, dO, lse2, D
  static constexpr int kDsBytes = kBlockN * DsGeom::kRowBytes;
  // Square tiles: P^T next to dS^T, same shape.
  static constexpr int kSmemBytes =
      2 * kKVBytes + kStages * kStageBytes + (kSquareTiles ? 2 : 1) * kDsBytes + cuda::kSmemAlign;
  // The square tiles' warp grid: 4 x 2 warps over (keys, queries) for S^T and dP^T and over
  // (keys, d) for dV and dK.
  static constexpr int kKeyWarps = 4;
  static constexpr int kWarpKeys = kSquareTiles ? kBlockN / kKeyWarps : 16;  ///< keys per warp
  static constexpr int kWarpQueries = kBlockM / 2;          ///< square: queries per warp
  static constexpr int kKeyMTiles = kWarpKeys / 16;         ///< m16 tiles of a warp's keys
  static constexpr int kKeyDTiles = kSquareTiles ? D / 16 : D / 8;  ///< n8 tiles of its dK / dV columns
  /// A warp's dK or dV accumulators: kKeyMTiles m16 tiles of keys x kKeyDTiles n8 tiles of d.
  using KeyAcc = float[kKeyMTiles][kKeyDTiles][4];
  /// What the shared phases see of a square warp tile's half (16 keys x kWarpQueries).
  struct Half {
    static constexpr int kSTiles = kWarpQueries / 8;
    static constexpr bool kMaskAsBits = Config::kMaskAsBits;
  };
  static_assert(kDqWarpsM * kDqWarpsN == kWarps && kDqCols % 16 == 0, "dQ warp grid");
  static_assert(kStages == 1 || kStages == 2, "one stage, or a 2-stage ring");
  static_assert(kBlockN == m04::kTcBackwardKeyTile, "the host's K/V tile count (tc_split_dq's plan) uses it");
  static_assert(!(kOrderedDq && kSplitDq), "one way of ordering dQ");
  static_assert(kTileSpan == 1 || !kOrderedDq, "the turns are per host query tile");
};

/// Where one query tile's operands sit in shared memory (byte addresses, .shared space).
struct StageAddr {
  std::uint32_t q, dout, lse2, d;
};
template <class Cfg>
__device__ __forceinline__ StageAddr stage_addr(std::uint32_t s_stages, int stage) {
  const std::uint32_t base = s_stages + stage * Cfg::kStageBytes;
  return {base, base + Cfg::kQBytes, base + 2 * Cfg::kQBytes, base + 2 * Cfg::kQBytes + Cfg::kStatBytes};
}

/// The accumulator tile of one warp: 16 keys x kBlockM queries, kSTiles n8 tiles of 4 fp32.
/// Element e of tile j: key row g + 8*(e/2), query column 8j + 2t + e%2 (g = lane/4, t = lane%4).
template <class Cfg>
using KeyQueryTile = float[Cfg::kSTiles][4];

/// What the probabilities phase needs to know about its warp's tile.
struct TileSpot {
  int key0;    ///< first of the 16 keys the phase sees (kv0 + 16 w; square tiles: each half of the warp's 32)
  int query0;  ///< first query the phase sees (the tile's; square tiles: the warp's first)
  bool needs_mask;  ///< some (key, query) of the tile is hidden: tail keys or the causal diagonal
};

// ============================================================================
// The phases every step shares.

/// The A operand of S^T = X_w Y^T: the warp's 16 rows of X (K or V, [kBlockN][D] in shared
/// memory), one ldmatrix.x4 per k16 step (rows lane%16, chunk lane/16 of the step). With
/// Config::kKvInRegisters, loaded once per K/V tile (hold) and kept in registers; else read
/// again for every query tile.
template <class Cfg>
struct WarpRows {
  static constexpr bool kHeld = Cfg::kKvInRegisters;
  std::uint32_t s_x;
  int warp;
  std::uint32_t held[kHeld ? Cfg::kDSteps : 1][4];

  __device__ __forceinline__ WarpRows(std::uint32_t tile, int w) : s_x(tile), warp(w) {}
  __device__ __forceinline__ std::uint32_t address(int ks) const {
    const int lane = threadIdx.x % 32;
    return s_x + Cfg::Geom::offset(16 * warp + (lane & 15), 2 * ks + (lane >> 4));
  }
  /// Loads the fragments, once X has landed in shared memory (nothing unless kHeld).
  __device__ __forceinline__ void hold() {
    if constexpr (kHeld) {
#pragma unroll
      for (int ks = 0; ks < Cfg::kDSteps; ++ks) cuda::ldmatrix_x4(held[ks], address(ks));
    }
  }
  /// The A fragment of k16 step ks.
  __device__ __forceinline__ void fragment(std::uint32_t (&a)[4], int ks) const {
    if constexpr (kHeld) {
#pragma unroll
      for (int e = 0; e < 4; ++e) a[e] = held[ks][e];
    } else {
      cuda::ldmatrix_x4(a, address(ks));
    }
  }
};

/// S^T (or dP^T) = X_w Y^T for the warp's 16 rows of X (K or V: WarpRows) against the
/// tile's kBlockM rows of Y (Q or dO, shared memory): acc[j] is the n8 tile of queries
/// 8j..8j+7. B: one ldmatrix.x4 covers two n8 tiles of Y (rows lane%8 + 8 (lane/16), chunk
/// (lane/8)%2).
template <class Cfg>
__device__ __forceinline__ void scores_transposed(float (&acc)[Cfg::kSTiles][4], const WarpRows<Cfg>& x,
                                                  std::uint32_t s_y) {
  using G = typename Cfg::Geom;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  const int b_row = (lane & 7) + 8 * (lane >> 4);
#pragma unroll
  for (int ks = 0; ks < Cfg::kDSteps; ++ks) {
    std::uint32_t a[4];
    x.fragment(a, ks);
#pragma unroll
    for (int np = 0; np < Cfg::kSTiles / 2; ++np) {
      std::uint32_t b[4];
      cuda::ldmatrix_x4(b, s_y + G::offset(16 * np + b_row, 2 * ks + ((lane >> 3) & 1)));
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      cuda::mma_m16n8k16_bf16_f32(acc[2 * np], a, b0);
      cuda::mma_m16n8k16_bf16_f32(acc[2 * np + 1], a, b1);
    }
  }
}

/// The A fragments of a key x query accumulator tile, packed to bf16: pk[j][0] holds key row
/// g, queries 8j+2t, 8j+2t+1; pk[j][1] the same queries of key row g+8. For the k16 step kk
/// over the queries, {pk[2kk][0], pk[2kk][1], pk[2kk+1][0], pk[2kk+1][1]} is the m16n8k16 A
/// operand as it is (see mma_m16n8k16_bf16_f32).
template <class Cfg>
__device__ __forceinline__ void pack_a_fragments(std::uint32_t (&pk)[Cfg::kSTiles][2],
                                                 const float (&acc)[Cfg::kSTiles][4]) {
#pragma unroll
  for (int j = 0; j < Cfg::kSTiles; ++j) {
    pk[j][0] = cuda::pack_bf16x2(acc[j][0], acc[j][1]);
    pk[j][1] = cuda::pack_bf16x2(acc[j][2], acc[j][3]);
  }
}

/// acc (the warp's 16 keys x D) += A (16 keys x kBlockM queries, packed) * Y (Q or dO,
/// [kBlockM][D] in shared memory): Y is k x n with n contiguous, so its B fragments come
/// through ldmatrix.trans (rows lane%8 + 8 ((lane/8)%2), chunk lane/16 of the k16 pair).
template <class Cfg>
__device__ __forceinline__ void accumulate_keys(float (&acc)[Cfg::kDTiles][4],
                                                const std::uint32_t (&pk)[Cfg::kSTiles][2], std::uint32_t s_y) {
  using G = typename Cfg::Geom;
  const int lane = threadIdx.x % 32;
  const int row = (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
  for (int kk = 0; kk < Cfg::kQSteps; ++kk) {
    const std::uint32_t a[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
#pragma unroll
    for (int dp = 0; dp < Cfg::kDSteps; ++dp) {
      std::uint32_t b[4];
      cuda::ldmatrix_x4_trans(b, s_y + G::offset(16 * kk + row, 2 * dp + (lane >> 4)));
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      cuda::mma_m16n8k16_bf16_f32(acc[2 * dp], a, b0);
      cuda::mma_m16n8k16_bf16_f32(acc[2 * dp + 1], a, b1);
    }
  }
}

/// dS^T (packed A fragments of the warp's 16 keys) -> the [kBlockN][kBlockM] tile in shared
/// memory: key row 16w + g (+8), queries 8j + 2t, 8j + 2t + 1. With stmatrix one instruction
/// per 16 keys x 16 queries (matrix m = lane / 8: keys 8 (m % 2).., queries 8 (j + m / 2)..,
/// lane l addressing row l % 8); else one 4-byte store per register.
template <class Cfg>
__device__ __forceinline__ void store_ds(std::uint32_t (&pk)[Cfg::kSTiles][2], unsigned char* s_ds, int warp) {
  using G = typename Cfg::DsGeom;
  const int lane = threadIdx.x % 32;
  if constexpr (Cfg::kStoreMatrix && cuda::kHasStmatrix) {
    const int m = lane >> 3;
    const std::uint32_t base = cuda::smem_u32(s_ds);
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; j += 2)
      cuda::stmatrix_x4(base + G::offset(16 * warp + 8 * (m & 1) + (lane & 7), j + (m >> 1)), pk[j][0], pk[j][1],
                        pk[j + 1][0], pk[j + 1][1]);
  } else {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        *reinterpret_cast<std::uint32_t*>(s_ds + G::offset(16 * warp + g + 8 * hr, j) + 4 * t) = pk[j][hr];
  }
}

/// This warp's part of dQ_i = dS K: rows 32 wm .. 32 wm + 31 of the query tile (two m16
/// tiles), columns wn * kDqCols .. A = dS (queries x keys): ldmatrix.trans of the stored
/// dS^T, matrix m = lane/8 being queries 8 (m%2).. and keys 8 (m/2)..; B = K (keys x d, d
/// contiguous) through ldmatrix.trans, each fragment used by both m16 tiles.
template <class Cfg>
__device__ __forceinline__ void accumulate_dq(float (&acc)[Cfg::kDqMTiles][Cfg::kDqTiles][4], std::uint32_t s_ds,
                                              std::uint32_t s_k, int wm, int wn) {
  using G = typename Cfg::Geom;
  using DG = typename Cfg::DsGeom;
  const int lane = threadIdx.x % 32;
  const int m = lane >> 3, r = lane & 7;
  const int b_row = r + 8 * ((lane >> 3) & 1);
#pragma unroll
  for (int mi = 0; mi < Cfg::kDqMTiles; ++mi)
#pragma unroll
    for (int dt = 0; dt < Cfg::kDqTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][dt][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk) {
    std::uint32_t a[Cfg::kDqMTiles][4];
#pragma unroll
    for (int mi = 0; mi < Cfg::kDqMTiles; ++mi)
      cuda::ldmatrix_x4_trans(a[mi], s_ds + DG::offset(16 * kk + 8 * (m >> 1) + r,
                                                       2 * (Cfg::kDqMTiles * wm + mi) + (m & 1)));
#pragma unroll
    for (int dp = 0; dp < Cfg::kDqTiles / 2; ++dp) {
      std::uint32_t b[4];
      cuda::ldmatrix_x4_trans(b, s_k + G::offset(16 * kk + b_row, wn * Cfg::kDqCols / 8 + 2 * dp + (lane >> 4)));
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < Cfg::kDqMTiles; ++mi) {
        cuda::mma_m16n8k16_bf16_f32(acc[mi][2 * dp], a[mi], b0);
        cuda::mma_m16n8k16_bf16_f32(acc[mi][2 * dp + 1], a[mi], b1);
      }
    }
  }
}

// ---- The square warp tiles (Config::kSquareTiles): warp (wk, wq) = (warp / 2, warp % 2).

/// S^T (or dP^T) for the warp's 32 keys (rows x_row0.. of X = K or V) against kWarpQueries
/// queries (rows y_row0.. of Y = Q or dO): acc[mi][j] is keys x_row0 + 16 mi.., queries
/// y_row0 + 8 j... Per k16 step two ldmatrix.x4 of X and kWarpQueries / 16 of Y feed
/// kWarpQueries / 2 mma: 256 bytes of shared memory per mma at 32 queries, 192 at 64
/// (scores_transposed: 320, or 256 with X held in registers).
template <class Cfg>
__device__ __forceinline__ void scores_transposed_square(float (&acc)[2][Cfg::Half::kSTiles][4], std::uint32_t s_x,
                                                         int x_row0, std::uint32_t s_y, int y_row0) {
  using G = typename Cfg::Geom;
  constexpr int kN = Cfg::Half::kSTiles;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int j = 0; j < kN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][j][e] = 0.f;
  const int b_row = (lane & 7) + 8 * (lane >> 4);
#pragma unroll
  for (int ks = 0; ks < Cfg::kDSteps; ++ks) {
    std::uint32_t a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      cuda::ldmatrix_x4(a[mi], s_x + G::offset(x_row0 + 16 * mi + (lane & 15), 2 * ks + (lane >> 4)));
#pragma unroll
    for (int np = 0; np < kN / 2; ++np) {
      std::uint32_t b[4];
      cuda::ldmatrix_x4(b, s_y + G::offset(y_row0 + 16 * np + b_row, 2 * ks + ((lane >> 3) & 1)));
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        cuda::mma_m16n8k16_bf16_f32(acc[mi][2 * np], a[mi], b0);
        cuda::mma_m16n8k16_bf16_f32(acc[mi][2 * np + 1], a[mi], b1);
      }
    }
  }
}

/// The warp's 32 x kWarpQueries accumulator tile (P^T or dS^T) -> a [kBlockN keys][kBlockM queries]
/// bf16 tile in shared memory: keys key0 + 16 mi + g (+8), queries query0 + 8 j + 2t, +1. With
/// stmatrix one instruction per 16 keys x 16 queries (as store_ds), the registers packed in
/// accumulator order; else one 4-byte store per pair.
template <class Cfg>
__device__ __forceinline__ void store_key_query_tile(const float (&acc)[2][Cfg::Half::kSTiles][4],
                                                     unsigned char* tile, int key0, int query0) {
  using G = typename Cfg::DsGeom;
  const int lane = threadIdx.x % 32;
  if constexpr (Cfg::kStoreMatrix && cuda::kHasStmatrix) {
    const int m = lane >> 3;
    const std::uint32_t base = cuda::smem_u32(tile);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int j = 0; j < Cfg::Half::kSTiles; j += 2)
        cuda::stmatrix_x4(base + G::offset(key0 + 16 * mi + 8 * (m & 1) + (lane & 7), query0 / 8 + j + (m >> 1)),
                          cuda::pack_bf16x2(acc[mi][j][0], acc[mi][j][1]),
                          cuda::pack_bf16x2(acc[mi][j][2], acc[mi][j][3]),
                          cuda::pack_bf16x2(acc[mi][j + 1][0], acc[mi][j + 1][1]),
                          cuda::pack_bf16x2(acc[mi][j + 1][2], acc[mi][j + 1][3]));
  } else {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int j = 0; j < Cfg::Half::kSTiles; ++j)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
          *reinterpret_cast<std::uint32_t*>(tile + G::offset(key0 + 16 * mi + g + 8 * hr, query0 / 8 + j) + 4 * t) =
              cuda::pack_bf16x2(acc[mi][j][2 * hr], acc[mi][j][2 * hr + 1]);
  }
}

/// acc (the warp's 32 keys x D/2 columns col0..) += A Y: A = P^T or dS^T, the block's
/// [kBlockN][kBlockM] tile in shared memory (keys key0.., ldmatrix as stored: the queries are
/// k and contiguous); Y = dO or Q ([kBlockM][D], ldmatrix.trans as accumulate_keys). Per k16
/// step 2 + D/32 ldmatrix.x4 feed D/8 mma: 192 bytes per mma at d = 128 (accumulate_keys: 256).
template <class Cfg>
__device__ __forceinline__ void accumulate_keys_square(typename Cfg::KeyAcc& acc, std::uint32_t s_a, int key0,
                                                       std::uint32_t s_y, int col0) {
  using G = typename Cfg::Geom;
  using AG = typename Cfg::DsGeom;
  const int lane = threadIdx.x % 32;
  const int row = (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
  for (int kk = 0; kk < Cfg::kQSteps; ++kk) {
    std::uint32_t a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      cuda::ldmatrix_x4(a[mi], s_a + AG::offset(key0 + 16 * mi + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
    for (int dp = 0; dp < Cfg::kKeyDTiles / 2; ++dp) {
      std::uint32_t b[4];
      cuda::ldmatrix_x4_trans(b, s_y + G::offset(16 * kk + row, col0 / 8 + 2 * dp + (lane >> 4)));
      const std::uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        cuda::mma_m16n8k16_bf16_f32(acc[mi][2 * dp], a[mi], b0);
        cuda::mma_m16n8k16_bf16_f32(acc[mi][2 * dp + 1], a[mi], b1);
      }
    }
  }
}

/// How add_dq writes a warp's dQ fragments: red_add, the 8-byte red.global.add (fire and
/// forget); plain_add, a load, an add and a store (a copy only this thread writes); store, a
/// plain store (the split steps' first pass over their own copy: no zeroing beforehand).
enum class DqWrite { red_add, plain_add, store };

/// tc_split_dq's adds into its own copy: false, the 8-byte red.global.add of the other steps
/// (fire and forget; one writer thread per element, so its program order fixes the sum);
/// true, a plain load, add and store per pair (the same order, the same bits -- except where
/// a partial sum is subnormal: the f32 atomic add flushes those to zero, the plain add keeps
/// them; a read round trip per query tile, and at d = 128 without the mask ptxas spills 20
/// bytes, where the red version spills none). A switch for an A/B run on the GPU: flip it,
/// rebuild, compare.
constexpr bool kSplitDqPlainAdds = false;

/// Adds this warp's dQ fragments to the fp32 accumulator (rows past N_q dropped): two
/// consecutive floats per register pair, one 8-byte atomic add where the GPU has it (or as
/// kWrite says: a load, an add and a store, or a store, for a copy only this thread writes).
template <class Cfg, DqWrite kWrite = DqWrite::red_add>
__device__ __forceinline__ void add_dq(const float (&acc)[Cfg::kDqMTiles][Cfg::kDqTiles][4], float* dq_head, int q0,
                                       int seq_q, int wm, int wn) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < Cfg::kDqMTiles; ++mi)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = q0 + 16 * (Cfg::kDqMTiles * wm + mi) + g + 8 * hr;
      if (row >= seq_q) continue;
      float* dst = dq_head + static_cast<std::int64_t>(row) * Cfg::D + wn * Cfg::kDqCols + 2 * t;
#pragma unroll
      for (int dt = 0; dt < Cfg::kDqTiles; ++dt) {
        if constexpr (kWrite == DqWrite::store) {
          *reinterpret_cast<float2*>(dst + 8 * dt) = make_float2(acc[mi][dt][2 * hr], acc[mi][dt][2 * hr + 1]);
        } else if constexpr (kWrite == DqWrite::plain_add) {
          auto* pair = reinterpret_cast<float2*>(dst + 8 * dt);
          const float2 old = *pair;
          *pair = make_float2(old.x + acc[mi][dt][2 * hr], old.y + acc[mi][dt][2 * hr + 1]);
        } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          atomicAdd(reinterpret_cast<float2*>(dst + 8 * dt), make_float2(acc[mi][dt][2 * hr], acc[mi][dt][2 * hr + 1]));
#else
          atomicAdd(dst + 8 * dt, acc[mi][dt][2 * hr]);
          atomicAdd(dst + 8 * dt + 1, acc[mi][dt][2 * hr + 1]);
#endif
        }
      }
    }
}

/// Writes 16 rows of dK or dV (times `mul`) as bf16 pairs, kTiles n8 tiles from column col0;
/// rows past N_k dropped.
template <class Cfg, int kTiles = Cfg::kDTiles>
__device__ __forceinline__ void store_rows(const float (&acc)[kTiles][4], bf16* head, std::int64_t seq_stride,
                                           int key0, int seq_k, float mul, int col0 = 0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = key0 + g + 8 * hr;
    if (row >= seq_k) continue;
    bf16* dst = head + static_cast<std::int64_t>(row) * seq_stride + col0 + 2 * t;
#pragma unroll
    for (int dt = 0; dt < kTiles; ++dt)
      *reinterpret_cast<std::uint32_t*>(dst + 8 * dt) =
          cuda::pack_bf16x2(acc[dt][2 * hr] * mul, acc[dt][2 * hr + 1] * mul);
  }
}

/// First query tile a key tile [kv0, kv0 + kBlockN) needs (m04::tc_first_query_tile).
template <class Cfg, bool kCausal>
__device__ __forceinline__ int first_query_tile(const Params& p, int kv0) {
  static_assert(Cfg::kBlockM % m04::kTcBackwardQTile == 0 && Cfg::kBlockM <= m04::kTcBackwardRowPad,
                "whole host query tiles, inside the workspace's padding");
  return m04::tc_first_query_tile(kCausal, kv0, p.causal_offset);
}

/// The turn steps' place of K/V tile `kv_tile` in the order of query tile `q_tile`'s dQ
/// additions (m04::tc_dq_turn_place: K/V tile order without the mask; causal, from the last
/// K/V tile that reaches q_tile down to 0, the order in which the blocks arrive there).
template <bool kCausal>
__device__ __forceinline__ int dq_turn_rank(const Params& p, int kv_tile, int q_tile) {
  return m04::tc_dq_turn_place(kCausal, kv_tile, q_tile, p.kv_tiles, p.causal_offset);
}

// ============================================================================
// The kernels.

/// One block's work on one K/V tile of kv head hk of batch b: K and V loaded once, every
/// query tile of every query head of the group visited in order (head, tile), dQ added to
/// `dq_acc` ([B*H, N_q, d] fp32), dK and dV written. The smem pointers are the kernel's.
/// kStoreDq: the split steps' first pass over their copy, which stores dQ instead of adding it.
template <class Cfg, bool kCausal, class Phases, bool kStoreDq = false>
__device__ __forceinline__ void kv_tile_pass(const Params& p, unsigned char* smem, int kv_tile, int b, int hk,
                                             float* dq_acc) {
  const std::uint32_t s_k = cuda::smem_u32(smem);
  const std::uint32_t s_v = s_k + Cfg::kKVBytes;
  const std::uint32_t s_stages = s_v + Cfg::kKVBytes;
  unsigned char* const ds_tile = smem + 2 * Cfg::kKVBytes + Cfg::kStages * Cfg::kStageBytes;
  const std::uint32_t s_ds = cuda::smem_u32(ds_tile);

  const int kv0 = kv_tile * Cfg::kBlockN;
  const int warp = threadIdx.x / 32;
  const int first_tile = first_query_tile<Cfg, kCausal>(p, kv0);
  // Tile `it` of a head starts at host tile first_tile + kTileSpan * it (a 128-row tile may
  // start at an odd one and reach past N_q: the workspace pads for it).
  const int tiles_per_head = m04::tc_walk_tiles(first_tile, p.q_tiles, Cfg::kTileSpan);
  const int iterations = tiles_per_head * p.group;

  // K and V of the block, once (part of the first cp.async group).
  cuda::TileCopier<Cfg::D, Cfg::kBlockN, Cfg::kThreads, Cfg::kSwizzle> kv_copy;
  kv_copy.copy(s_k, p.k + m03::row_offset(p.ks, b, hk, 0), p.ks.seq, kv0, p.seq_k);
  kv_copy.copy(s_v, p.v + m03::row_offset(p.vs, b, hk, 0), p.vs.seq, kv0, p.seq_k);

  // Iteration it visits query head hk * group + it / tiles_per_head, host tile first_tile +
  // kTileSpan * (it % tiles_per_head). The loop carries that position and steps it once per
  // iteration instead of dividing: the division sat between the barrier and the first mma of
  // every warp (an H200 A/B: tc_pipelined 1.02-1.06x at d = 64, see the lesson, section 5).
  const int last_tile = first_tile + Cfg::kTileSpan * (tiles_per_head - 1);
  const auto step_walk = [&](int& h, int& tile) { m04::tc_walk_step(h, tile, first_tile, last_tile, Cfg::kTileSpan); };
  const auto load_query_tile = [&](int h, int tile, int stage) {
    const int q0 = tile * m04::kTcBackwardQTile;
    const StageAddr st = stage_addr<Cfg>(s_stages, stage);
    cuda::TileCopier<Cfg::D, Cfg::kBlockM, Cfg::kThreads, Cfg::kSwizzle> copy;
    copy.copy(st.q, p.q + m03::row_offset(p.qs, b, h, 0), p.qs.seq, q0, p.seq_q);
    copy.copy(st.dout, p.dout + m03::row_offset(p.dos, b, h, 0), p.dos.seq, q0, p.seq_q);
    // lse2 and D: kBlockM floats each = kBlockM / 4 chunks of 16 bytes, padded in the workspace.
    const int c = threadIdx.x;
    if (c < 2 * Cfg::kStatBytes / 16) {
      const std::int64_t row0 = static_cast<std::int64_t>(b * p.heads + h) * p.seq_q_pad + q0;
      const int half = Cfg::kStatBytes / 16;
      const float* src = (c < half ? p.lse2 : p.d_row) + row0 + 4 * (c % half);
      cuda::cp_async_16_zfill((c < half ? st.lse2 : st.d) + 16 * (c % half), src, 16);
    }
  };

  // Square tiles: warp (wk, wq) = (warp / 2, warp % 2) owns keys 32 wk.. of S^T, dP^T, dK, dV,
  // queries kWarpQueries wq.. of S^T and dP^T, and columns (D/2) wq.. of dK and dV.
  const int wk = warp / 2, wq = warp % 2;
  const int warp_key0 = Cfg::kSquareTiles ? 32 * wk : 16 * warp;  // within the K/V tile
  typename Cfg::KeyAcc dk, dv;
#pragma unroll
  for (int mi = 0; mi < Cfg::kKeyMTiles; ++mi)
#pragma unroll
    for (int dt = 0; dt < Cfg::kKeyDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[mi][dt][e] = dv[mi][dt][e] = 0.f;

  // The 16-key tiles: the warp's rows of K and V as A operands (held in registers from
  // iteration 0 on where Config::kKvInRegisters says so).
  WarpRows<Cfg> k_rows(s_k, warp), v_rows(s_v, warp);

  if (iterations > 0) load_query_tile(hk * p.group, first_tile, 0);
  cuda::cp_async_commit();

  int walk_h = hk * p.group, walk_tile = first_tile;  // iteration it's (head, tile)
  for (int it = 0; it < iterations; ++it) {
    const int stage = it % Cfg::kStages;
    const int h = walk_h, tile = walk_tile;
    int next_h = walk_h, next_tile = walk_tile;
    step_walk(next_h, next_tile);
    // ---- Tile `it` has landed for the block; with two stages, the next one starts now
    // (its stage was last read in iteration it - 1, which every warp has finished).
    cuda::cp_async_wait<0>();
    __syncthreads();
    if constexpr (Cfg::kStages == 2) {
      if (it + 1 < iterations) load_query_tile(next_h, next_tile, (it + 1) % 2);
      cuda::cp_async_commit();
    }
    if (it == 0) {  // K and V landed with tile 0
      k_rows.hold();
      v_rows.hold();
    }
    const StageAddr st = stage_addr<Cfg>(s_stages, stage);
    const int q0 = tile * m04::kTcBackwardQTile;
    const auto* lse2 = reinterpret_cast<const float*>(smem + (st.lse2 - s_k));
    const auto* d_row = reinterpret_cast<const float*>(smem + (st.d - s_k));
    const auto spot_of = [&](int key0, int query0) {  // the keys key0..key0+15 against query0..
      return TileSpot{key0, query0, key0 + 15 >= p.seq_k || (kCausal && key0 + 15 > query0 + p.causal_offset)};
    };

    if constexpr (Cfg::kSquareTiles) {
      // ---- Per warp: P^T and dS^T of its 32 keys x 32 queries, both to shared memory.
      const int query0 = Cfg::kWarpQueries * wq;
      unsigned char* const pt_tile = ds_tile + Cfg::kDsBytes;  // P^T beside dS^T
      const std::uint32_t s_pt = s_ds + Cfg::kDsBytes;
      float s[2][Cfg::Half::kSTiles][4], dp[2][Cfg::Half::kSTiles][4];
      scores_transposed_square<Cfg>(s, s_k, warp_key0, st.q, query0);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        Phases::template probabilities<typename Cfg::Half, kCausal>(
            s[mi], p, spot_of(kv0 + warp_key0 + 16 * mi, q0 + query0), lse2 + query0);
      store_key_query_tile<Cfg>(s, pt_tile, warp_key0, query0);
      scores_transposed_square<Cfg>(dp, s_v, warp_key0, st.dout, query0);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) Phases::template ds<typename Cfg::Half>(dp[mi], s[mi], d_row + query0);
      store_key_query_tile<Cfg>(dp, ds_tile, warp_key0, query0);
      __syncthreads();  // P^T and dS^T of the whole tile are in shared memory

      // ---- Per warp: dV and dK for its 32 keys x D/2 columns.
      accumulate_keys_square<Cfg>(dv, s_pt, warp_key0, st.dout, Cfg::D / 2 * wq);
      accumulate_keys_square<Cfg>(dk, s_ds, warp_key0, st.q, Cfg::D / 2 * wq);
    } else {
      // ---- Per warp: P^T and dS^T for its 16 keys, then dV and dK from the same registers.
      const int key0 = kv0 + 16 * warp;
      const TileSpot spot{key0, q0,
                          key0 + 15 >= p.seq_k || (kCausal && key0 + 15 > q0 + p.causal_offset)};
      float s[Cfg::kSTiles][4], dp[Cfg::kSTiles][4];
      scores_transposed<Cfg>(s, k_rows, st.q);
      Phases::template probabilities<Cfg, kCausal>(s, p, spot, reinterpret_cast<const float*>(smem + (st.lse2 - s_k)));
      scores_transposed<Cfg>(dp, v_rows, st.dout);
      Phases::template ds<Cfg>(dp, s, reinterpret_cast<const float*>(smem + (st.d - s_k)));
      std::uint32_t pt[Cfg::kSTiles][2], dst[Cfg::kSTiles][2];
      pack_a_fragments<Cfg>(pt, s);
      pack_a_fragments<Cfg>(dst, dp);
      store_ds<Cfg>(dst, ds_tile, warp);
      accumulate_keys<Cfg>(dv[0], pt, st.dout);
      accumulate_keys<Cfg>(dk[0], dst, st.q);
      __syncthreads();  // dS^T of all 128 keys is in shared memory
    }

    // ---- The block: dQ_i += dS K, added to the fp32 workspace.
    const int wm = warp % Cfg::kDqWarpsM, wn = warp / Cfg::kDqWarpsM;
    float dq[Cfg::kDqMTiles][Cfg::kDqTiles][4];
    accumulate_dq<Cfg>(dq, s_ds, s_k, wm, wn);
    float* dq_head = dq_acc + static_cast<std::int64_t>(b * p.heads + h) * p.seq_q * Cfg::D;
    if constexpr (Cfg::kOrderedDq) {
      int* turn = p.turn + static_cast<std::int64_t>(b * p.heads + h) * p.q_tiles + tile;
      const int rank = dq_turn_rank<kCausal>(p, kv_tile, tile);
      Phases::wait_dq_turn(turn, rank);
      add_dq<Cfg>(dq, dq_head, q0, p.seq_q, wm, wn);
      Phases::pass_dq_turn(turn, rank);
    } else {
      constexpr DqWrite kWrite = kStoreDq                                  ? DqWrite::store
                                 : Cfg::kSplitDq && kSplitDqPlainAdds ? DqWrite::plain_add
                                                                      : DqWrite::red_add;
      add_dq<Cfg, kWrite>(dq, dq_head, q0, p.seq_q, wm, wn);
    }
    if constexpr (Cfg::kStages == 1) {  // one stage: refill it once every warp is done with it
      __syncthreads();
      if (it + 1 < iterations) load_query_tile(next_h, next_tile, 0);
      cuda::cp_async_commit();
    }
    walk_h = next_h, walk_tile = next_tile;
  }
  cuda::cp_async_wait<0>();

  // ---- dK = scale * sum dS^T Q, dV = sum P^T dO, summed over the group's query heads.
  if constexpr (Cfg::kSquareTiles) {
#pragma unroll
    for (int mi = 0; mi < Cfg::kKeyMTiles; ++mi) {
      const int key0 = kv0 + warp_key0 + 16 * mi, col0 = Cfg::D / 2 * wq;
      store_rows<Cfg, Cfg::kKeyDTiles>(dk[mi], p.dk + m03::row_offset(p.dks, b, hk, 0), p.dks.seq, key0, p.seq_k,
                                       p.scale, col0);
      store_rows<Cfg, Cfg::kKeyDTiles>(dv[mi], p.dv + m03::row_offset(p.dvs, b, hk, 0), p.dvs.seq, key0, p.seq_k,
                                       1.f, col0);
    }
  } else {
    const int key0 = kv0 + 16 * warp;
    store_rows<Cfg>(dk[0], p.dk + m03::row_offset(p.dks, b, hk, 0), p.dks.seq, key0, p.seq_k, p.scale);
    store_rows<Cfg>(dv[0], p.dv + m03::row_offset(p.dvs, b, hk, 0), p.dvs.seq, key0, p.seq_k, 1.f);
  }
}

/// The split steps' walk (tc_split_dq, tc_wgmma_split_dq): block (split, bhk) of a (S, B * H_kv)
/// grid takes the K/V tiles m04::tc_split_dq_tile deals it, in rounds, and calls
/// pass(kv_tile, b, hk, dq_copy, first) for each with its own fp32 dQ copy; first (round 0):
/// the pass stores its dQ, because the copy is not zeroed (m04::tc_split_dq_first_tile).
template <class Pass>
__device__ __forceinline__ void walk_split_tiles(const Params& p, Pass&& pass) {
  const int split = static_cast<int>(blockIdx.x), bhk = static_cast<int>(blockIdx.y);
  float* const dq_acc = p.dq_acc + split * p.dq_split_stride;
  for (int round = 0;; ++round) {
    const auto kv_tile = static_cast<int>(m04::tc_split_dq_tile(split, round, p.splits));
    if (kv_tile >= p.kv_tiles) break;  // later rounds start at (round + 1) * S > kv_tile
    // Every warp is done with the last tile's K, V, stages and dS^T before they are refilled.
    if (round > 0) __syncthreads();
    pass(kv_tile, bhk / p.kv_heads, bhk % p.kv_heads, dq_acc, round == 0);
  }
}

/// The main kernel, one block per K/V tile of one kv head (tc_mma, tc_pipelined,
/// tc_deterministic: grid (key tiles, B * H_kv), order m03::grouped_kv_block_coordinates) or per split
/// (tc_split_dq: grid (S, B * H_kv), block (s, bhk) walks the K/V tiles m04::tc_split_dq_tile
/// deals it, in rounds, with its own dQ copy s).
template <class Cfg, bool kCausal, class Phases>
__global__ void __launch_bounds__(Cfg::kThreads, 1) backward_kernel(const Params p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = cuda::align_smem(smem_raw);
  if constexpr (Cfg::kSplitDq) {
    walk_split_tiles(p, [&](int kv_tile, int b, int hk, float* dq_acc, bool first) {
      if (first)
        kv_tile_pass<Cfg, kCausal, Phases, true>(p, smem, kv_tile, b, hk, dq_acc);
      else
        kv_tile_pass<Cfg, kCausal, Phases, false>(p, smem, kv_tile, b, hk, dq_acc);
    });
  } else {
    int kv_tile, bhk;
    m03::grouped_kv_block_coordinates(kCausal, p.group_heads, kv_tile, bhk);  // causal: longest first per group
    // tc_deterministic, causal: shortest first, so that each block's predecessor in its
    // query tiles' dQ order (dq_turn_rank: the next K/V tile) started before it.
    if constexpr (kCausal && Cfg::kOrderedDq) kv_tile = p.kv_tiles - 1 - kv_tile;
    kv_tile_pass<Cfg, kCausal, Phases>(p, smem, kv_tile, bhk / p.kv_heads, bhk % p.kv_heads, p.dq_acc);
  }
}

/// Preprocessing, one group of D/8 lanes per padded query row r = (b*H + h) * N_q_pad + i:
/// D = dO_i . O_i (fp32 over bf16 pairs), lse2 = lse * log2(e) (+inf for padding and for rows
/// that see no key), the row's fp32 dQ accumulator zeroed (not for the split steps, whose
/// first pass stores: m04::tc_split_dq_first_tile), and the turn counter of its query tile
/// reset. Memory-bound: reads dO and O once.
template <int D, bool kSplits>
__global__ void preprocess_kernel(const Params p, long long rows) {
  constexpr int kLanes = D / 8;  // 16 bytes of dO and of O per lane
  const long long r = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int lane = threadIdx.x % kLanes;
  const bool live = r < rows;
  const long long bh = live ? r / p.seq_q_pad : 0;
  const int i = live ? static_cast<int>(r % p.seq_q_pad) : 0;
  const bool real = live && i < p.seq_q;
  float acc = 0.f;
  if (real) {
    const int b = static_cast<int>(bh / p.heads), h = static_cast<int>(bh % p.heads);
    const uint4 x = *reinterpret_cast<const uint4*>(p.dout + m03::row_offset(p.dos, b, h, i) + 8 * lane);
    const uint4 y = *reinterpret_cast<const uint4*>(p.o + m03::row_offset(p.os, b, h, i) + 8 * lane);
    const auto* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
    const auto* yp = reinterpret_cast<const __nv_bfloat162*>(&y);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 u = __bfloat1622float2(xp[e]), w = __bfloat1622float2(yp[e]);
      acc = fmaf(u.x, w.x, fmaf(u.y, w.y, acc));
    }
    if constexpr (!kSplits) {  // the split steps' copies are stored, not zeroed and added to
      float4* z = reinterpret_cast<float4*>(p.dq_acc + (bh * p.seq_q + i) * D + 8 * lane);
      z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (live && lane == 0) {
    const float lse = real ? p.lse[bh * p.seq_q + i] : -INFINITY;
    p.lse2[r] = lse == -INFINITY ? INFINITY : lse * kLog2e;
    p.d_row[r] = acc;
    if (p.turn != nullptr && i % m04::kTcBackwardQTile == 0 && i < p.q_tiles * m04::kTcBackwardQTile)
      p.turn[bh * p.q_tiles + i / m04::kTcBackwardQTile] = 0;
  }
}

/// dQ = scale * (fp32 accumulator) as bf16, 8 elements per thread, any dQ strides. With
/// p.splits copies (the split steps) the accumulator is the sum of those that hold the row
/// (m04::tc_split_dq_first_tile: copies 0, 1, ... while they do; none: the row sees no key,
/// dQ = 0), taken in index order: the same bits on every run (kSplits as in
/// preprocess_kernel; kCausal, the mask, for the copies' first tiles).
template <int D, bool kSplits, bool kCausal = false>
__global__ void convert_dq_kernel(const Params p, long long chunks) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  constexpr int kPerRow = D / 8;
  const long long row = c / kPerRow;  // (b*H + h) * N_q + i
  const int col = static_cast<int>(c % kPerRow) * 8;
  const long long bh = row / p.seq_q;
  const int i = static_cast<int>(row % p.seq_q);
  const int tile = i / m04::kTcBackwardQTile;
  const auto holds = [&](int split) { return m04::tc_split_dq_first_tile(kCausal, split, p.causal_offset) <= tile; };
  const float4* src = reinterpret_cast<const float4*>(p.dq_acc + row * D + col);
  float4 x = make_float4(0.f, 0.f, 0.f, 0.f), y = x;
  if (!kSplits || holds(0)) x = src[0], y = src[1];
  for (int split = 1; kSplits && split < p.splits && holds(split); ++split) {
    const float4* more = reinterpret_cast<const float4*>(p.dq_acc + split * p.dq_split_stride + row * D + col);
    const float4 u = more[0], w = more[1];
    x = make_float4(x.x + u.x, x.y + u.y, x.z + u.z, x.w + u.w);
    y = make_float4(y.x + w.x, y.y + w.y, y.z + w.z, y.w + w.w);
  }
  uint4 out;
  out.x = cuda::pack_bf16x2(x.x * p.scale, x.y * p.scale);
  out.y = cuda::pack_bf16x2(x.z * p.scale, x.w * p.scale);
  out.z = cuda::pack_bf16x2(y.x * p.scale, y.y * p.scale);
  out.w = cuda::pack_bf16x2(y.z * p.scale, y.w * p.scale);
  const int b = static_cast<int>(bh / p.heads), h = static_cast<int>(bh % p.heads);
  *reinterpret_cast<uint4*>(p.dq + m03::row_offset(p.dqs, b, h, i) + col) = out;
}

// ============================================================================
// Host code the kernels of both files launch with.

/// The split steps' plan assumed m04::kTcBackwardBlocksPerSm resident blocks per SM; says so
/// (throws, on every call) if the kernel fits more (the plan would leave block slots empty:
/// slower, still correct), and remembers a device that passed. Fewer cannot happen: a kernel
/// that fits no block fails to launch.
template <auto kKernel>
void check_split_occupancy(int smem_bytes, int threads, const char* step) {
  static std::atomic<int> checked[64] = {};
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  const bool cached = device >= 0 && device < 64;
  if (cached && checked[device].load() != 0) return;
  int blocks = 0;
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kKernel, threads, smem_bytes));
  if (blocks > m04::kTcBackwardBlocksPerSm)
    throw Error(std::string("attention_backward ") + step + ": the kernel fits " + std::to_string(blocks) +
                " blocks per SM on device " + std::to_string(device) + ", the split plan assumes " +
                std::to_string(m04::kTcBackwardBlocksPerSm) + " (m04::kTcBackwardBlocksPerSm)");
  if (cached) checked[device].store(1);  // only a device that passed: a failing one throws every time
}

// ============================================================================
// Step tc_wgmma's kernel (sm_90a): its own file, on the phases, preprocessing and dQ
// conversion above; run_step below launches it.
}  // namespace
}  // namespace course::attn_bwd_tc

#include "attention_backward_tc_wgmma.cuh"

namespace course::attn_bwd_tc {
namespace {

// ============================================================================
// The host side: the three kernels of one step.

template <class Cfg, bool kCausal, class Phases>
void launch_main(const Params& p, std::int64_t batch, cudaStream_t stream) {
  constexpr auto kernel = backward_kernel<Cfg, kCausal, Phases>;
  cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes);
  if constexpr (Cfg::kSplitDq) check_split_occupancy<kernel>(Cfg::kSmemBytes, Cfg::kThreads, "tc_split_dq");
  // tc_split_dq: one block per (split, kv head), the splits of a head side by side (they walk
  // the same Q and dO); else one block per (K/V tile, kv head).
  const dim3 grid(static_cast<unsigned>(Cfg::kSplitDq ? p.splits : p.kv_tiles),
                  static_cast<unsigned>(batch * p.kv_heads));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  COURSE_CHECK_LAUNCH("attention backward_kernel (tensor cores)");
}

/// Runs one tensor-core step: preprocess, the main kernel, the dQ conversion. `Phases` is
/// the solution's or the exercise's (see the file comment).
template <class Phases>
void run_step(AttentionBackwardStep step, const AttentionBackwardArgsBf16& a) {
  if (m04::step_support(step).hopper) wgmma_step::require_sm90a(step);  // before any launch
  const Params p = make_params(step, a);
  cuda::dispatch_value<m04::kTcBackwardHeadDims>(a.head_dim, "head_dim", [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    constexpr int kThreads = 256;
    const long long rows = static_cast<long long>(a.batch) * a.heads * p.seq_q_pad;
    const long long pre_threads = rows * (D / 8);
    const bool splits = m04::splits_dq(step);
    const auto preprocess = splits ? preprocess_kernel<D, true> : preprocess_kernel<D, false>;
    preprocess<<<static_cast<unsigned>((pre_threads + kThreads - 1) / kThreads), kThreads, 0, a.stream>>>(
        p, rows);
    COURSE_CHECK_LAUNCH("attention backward preprocess_kernel");
    const auto main = [&](auto cfg) {
      using Cfg = decltype(cfg);
      if (a.causal) launch_main<Cfg, true, Phases>(p, a.batch, a.stream);
      else launch_main<Cfg, false, Phases>(p, a.batch, a.stream);
    };
    switch (step) {
      case AttentionBackwardStep::tc_mma: main(Config<D, false, 1, false>{}); break;
      case AttentionBackwardStep::tc_pipelined: main(Config<D, true, 2, false>{}); break;
      case AttentionBackwardStep::tc_deterministic: main(Config<D, true, 2, true>{}); break;
      case AttentionBackwardStep::tc_split_dq: main(Config<D, true, 2, false, true>{}); break;
      case AttentionBackwardStep::tc_wgmma: wgmma_step::launch<D, wgmma_step::DqOrder::atomic, Phases>(p, a); break;
      case AttentionBackwardStep::tc_wgmma_deterministic:
        wgmma_step::launch<D, wgmma_step::DqOrder::turns, Phases>(p, a);
        break;
      case AttentionBackwardStep::tc_wgmma_split_dq:
        wgmma_step::launch<D, wgmma_step::DqOrder::split_copies, Phases>(p, a);
        break;
      default: throw Error(std::string("attention_backward: step ") + m04::step_name(step) + " is not a tensor-core step");
    }
    const long long chunks = static_cast<long long>(a.batch) * a.heads * a.seq_q * (D / 8);
    const auto convert = !splits ? convert_dq_kernel<D, false>
                         : a.causal ? convert_dq_kernel<D, true, true>
                                    : convert_dq_kernel<D, true, false>;
    convert<<<static_cast<unsigned>((chunks + kThreads - 1) / kThreads), kThreads, 0, a.stream>>>(
        p, chunks);
    COURSE_CHECK_LAUNCH("attention backward convert_dq_kernel");
  });
}

}  // namespace
}  // namespace course::attn_bwd_tc
