/// @file attention_tc_flash.cu
/// @brief Steps 8 and 9 of the attention ladder (tensor cores, bf16): the softmax moves
/// into the mma accumulator registers, and FlashAttention-2's tile shapes.
///   8. tc_register_softmax  online softmax on the S fragments, P re-packed as the A operand of P*V
///   9. tc_flash2            the same kernel, 128-row Q tiles with 32 rows per warp
/// Steps 6 and 7 (S through shared memory) and the dispatcher are in attention_tc.cu.
///
/// Predictions are for an H200 (132 SMs, ~1.98 GHz, mma.sync bf16 ~60-70% of the 989
/// dense TFLOP/s that wgmma reaches) at the benchmark shapes B*N = 16384 tokens, H*d =
/// 2048, N = 1024 .. 16384: 4*B*H*N^2*d = 1.37e8 * N FLOPs (550 GFLOP at N = 4096,
/// ~1.7 ms at 330 TFLOP/s), against 256 MB of Q, K, V, O (~0.05 ms of HBM): compute-bound.

#include "attention_tc_device.cuh"
#include "attention_tc_phases.cuh"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"
#include "module03/attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace course::solution::attn_tc {
namespace {

// ============================================================================
// Step 8: tc_register_softmax -- S never leaves the registers.
//
// What changes from step 7 (tc_swizzled_pipelined), where each warp wrote its S tile to
// shared memory, re-read it row by row for the softmax and read P back with ldmatrix:
//  (a) The softmax runs on the mma accumulator fragments themselves. Lane l (g = l/4,
//      t = l%4) holds, for n8 tile j of S, s[j][0..1] = S[g][8j+2t, 8j+2t+1] and
//      s[j][2..3] = S[g+8][same keys]: two rows per m16 tile, and each row is spread over
//      the 4 lanes of a quad. Row max and row sum are the lane's own max/sum over its
//      elements, then 2 __shfl_xor_sync within the quad (cuda::warp_max<4>, warp_sum<4>).
//      The sum is kept per lane (all 4 rescale by the same alpha) and reduced once, at the
//      end.
//  (b) P feeds P*V from the same registers. The A operand of m16n8k16 (16 rows x 16
//      keys) is a[0] = P[g][2t,2t+1], a[1] = P[g+8][2t,2t+1], a[2] = P[g][2t+8,2t+9],
//      a[3] = P[g+8][2t+8,2t+9]: exactly the accumulators of the two n8 tiles 2kk and
//      2kk+1 of S, c[0..1] and c[2..3] of each, packed to bf16 pairs. No shuffle, no
//      shared memory; only V is read with ldmatrix.x4.trans.
//  (c) exp2 with log2(e) folded into the scale: p = 2^(s*scale*log2e - m*scale*log2e),
//      one FFMA and one MUFU.EX2 per score (cuda::ex2_approx); m stays in raw score units.
//  (d) O is staged through shared memory (the Q tile, no longer needed) and written with
//      16-byte coalesced stores; lse = (m*scale*log2e + log2 l) * ln 2.
// Tiles: 4 warps x 16 query rows (64-row Q tile), 64-key K/V tiles in a 2-stage cp.async
// ring (step 7's), Q fragments in registers, causal tiles skipped, heaviest first.
// Prediction: per warp and 64-key tile (d = 64) 64 mma against 32 ldmatrix.x4 (K and V,
// 512 B each): 256 B of shared memory per mma, 2 cycles at 128 B/clk, which caps the SM
// near 2048 FLOP/clk (~535 TFLOP/s) before the softmax's ~5 instructions per score. With
// the round trip of step 7 gone: ~220-260 TFLOP/s at d = 64, ~250-300 at d = 128.
// Registers: S 32 + O 32 / 64 + Q 16 / 32 + ~45 of addresses, statistics and copies;
// ptxas (sm_90a, non-causal / causal): d = 32: 105/110, 64: 141/147, 96: 175/182,
// 128: 205/211, no spills: 4, 3, 2, 2 blocks per SM. Shared memory: Q + 2 x (K + V)
// + 1 KB of alignment = 21, 41, 81, 81 KB.
// Measured (results: attn_bf16/solution/tc_register_softmax/{B16_H32_N1024_d64,B1_H32_N16384_d64}): 261.2 / 290.8 TFLOP/s
// Measured (results: attn_bf16/solution/tc_register_softmax/{B16_H16_N1024_d128,B1_H16_N16384_d128}): 284.8 / 324.4 TFLOP/s
// Met: in range at N = 1024, up to ~10% above the top of both ranges at longer N.
// Against step 7:
// Measured (results: attn_bf16/solution/tc_register_softmax/B4_H32_N4096_d64): 1.39 of attn_bf16/solution/tc_swizzled_pipelined/B4_H32_N4096_d64
//
// ============================================================================
// Step 9: tc_flash2 -- FlashAttention-2's tile shapes for the same kernel.
//
// What changes from step 8: only the configuration (FlashConfig below).
//  (a) 32 query rows per warp (two m16 tiles), 128-row Q tiles with 4 warps. Every K and
//      V fragment a warp loads now feeds two mma instead of one: shared-memory bytes per
//      mma halve (~128 B, 1 cycle), so ldmatrix stops competing with the tensor cores.
//  (b) 128-key K/V tiles for d <= 64 (64 for d = 96, 128): twice the work per barrier,
//      per row-max shuffle and per rescale of O.
//  (c) Q stays in shared memory for d >= 64 and is re-read with ldmatrix at every k16
//      step (a quarter of the S operand traffic): its registers pay for the larger S and
//      O accumulators (d = 128: O alone is 2 x 16 x 4 = 128 fp32 registers). At d = 128
//      each 64-key tile is two softmax steps of 32 keys (kSubN), so that S and O fit.
// Prediction: per score ~4.5 instructions (FMNMX, FFMA, MUFU, FADD, half a pack) against
// 2*d/256 mma; the MUFU pipe (16 ex2 per clk per SM) needs ~2/3 of the mma time at d = 64,
// so d = 64 is bound by exp and issue, d = 128 by the tensor cores: ~290-330 TFLOP/s at
// d = 64 and ~320-360 at d = 128, i.e. ~0.95-1.05x FlashAttention-2 (same tiles, one
// barrier per tile instead of two, heaviest-first causal order). 2 blocks (8 warps) per
// SM. Registers (ptxas, sm_90a, non-causal / causal; no spills): d = 32: 233/244,
// 64: 255/255, 96: 251/250, 128: 242/244 (64-key tiles in one softmax step spill 8-16
// bytes at d = 128, hence the two 32-key steps). Shared memory (Q + 2 stages of K and V
// + 1 KB of alignment): 41, 81, 97, 97 KB for d = 32, 64, 96, 128.
// Measured (results: attn_bf16/solution/tc_flash2/{B16_H32_N1024_d64,B4_H32_N4096_d64,B1_H32_N16384_d64}): 310.4 / 337.1 / 345.8 TFLOP/s
// Measured (results: attn_bf16/solution/tc_flash2/{B16_H16_N1024_d128,B4_H16_N4096_d128,B1_H16_N16384_d128}): 300.7 / 335.6 / 339.9 TFLOP/s
// Measured (results: attn_bf16/solution/tc_flash2/B4_H32_N4096_d64): 1.18 of attn_bf16/solution/tc_register_softmax/B4_H32_N4096_d64
// Met: d = 64 inside ~290-330 up to N = 2048 and 1-4% above beyond; d = 128 inside
// ~320-360 except N = 1024 (~4% short). Against FA2 (results page, "Tensor-core attention
// (bf16) beside FA2 and cuDNN", both timed by one script): 1.10-1.15 at d = 64, above the
// predicted 0.95-1.05; 0.98-1.00 at d = 128 non-causal, 1.04-1.08 causal. cuDNN stays
// ahead: 0.54-0.76 of its speed (0.54-0.62 at d = 128).
// ============================================================================

/// The tile configuration of the register-softmax kernel.
template <int D_, int kMTiles_, int kBlockN_, int kSubN_, int kStages_, bool kQInRegs_>
struct FlashConfig {
  static constexpr int D = D_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = kMTiles_;       ///< m16 tiles (16 query rows) per warp
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kBlockM = kWarps * kWarpRows;
  static constexpr int kBlockN = kBlockN_;       ///< keys per K/V tile
  static constexpr int kStages = kStages_;       ///< K/V tiles in the cp.async ring
  static constexpr bool kQInRegs = kQInRegs_;    ///< Q fragments loaded once into registers
  static constexpr int kMinBlocks = 2;
  using Geom = TileGeom<D, true>;
  static constexpr int kSubN = kSubN_;          ///< keys per online-softmax step (a sub-tile)
  static constexpr int kSubTiles = kBlockN / kSubN;
  static constexpr int kSTiles = kSubN / 8;      ///< n8 tiles of S per m16 tile
  static constexpr int kDSteps = D / 16;         ///< k16 steps of Q K^T = pairs of n8 tiles of O
  static constexpr int kOTiles = D / 8;          ///< n8 tiles of O per m16 tile
  static constexpr int kKeySteps = kSubN / 16;   ///< k16 steps of P V
  /// Unroll factor of the k16 loop of Q K^T (1 is only possible with Q in shared memory).
  static constexpr int kQKUnroll = kDSteps;
  static constexpr int kQBytes = kBlockM * Geom::kRowBytes;
  static constexpr int kKVBytes = kBlockN * Geom::kRowBytes;
  static constexpr int kStageBytes = 2 * kKVBytes;  ///< K tile, then V tile
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kSmemAlign;
  static_assert(kSubN % 16 == 0 && kBlockN % kSubN == 0 && kStages >= 2,
                "whole k16 steps and sub-tiles; a ring needs two stages");
};

template <int D>
using RegisterSoftmaxConfig = FlashConfig<D, 1, 64, 64, 2, true>;

template <int D>
struct Flash2ConfigFor;
template <>
struct Flash2ConfigFor<32> { using type = FlashConfig<32, 2, 128, 128, 2, true>; };
template <>
struct Flash2ConfigFor<64> { using type = FlashConfig<64, 2, 128, 128, 2, false>; };
template <>
struct Flash2ConfigFor<96> { using type = FlashConfig<96, 2, 64, 64, 2, false>; };
template <>
struct Flash2ConfigFor<128> { using type = FlashConfig<128, 2, 64, 32, 2, false>; };

// The given phases (init_accumulators, load_q_fragments, clear_scores, load_q_operand,
// accumulate_qk, write_output_and_lse) are attention_tc_phases.cuh's, shared with the
// exercise; softmax_on_fragments and a_fragment below are the exercise's step 8, same names
// and signatures, and accumulate_pv is written here around a_fragment.
using attn_tc_phases::flash::accumulate_qk;
using attn_tc_phases::flash::clear_scores;
using attn_tc_phases::flash::init_accumulators;
using attn_tc_phases::flash::load_q_fragments;
using attn_tc_phases::flash::load_q_operand;
using attn_tc_phases::flash::write_output_and_lse;

// ---- The phases of register_softmax_kernel, in the order the main loop calls them. Each
// works on one warp's fragments (kMTiles m16 tiles of query rows), takes them by reference
// and is forceinline: the kernel compiles to the code it had with the phases written out.

/// One online-softmax step on the fragments of ONE m16 tile (the exercise's step 8a, same
/// name and signature), one row (hr = 0: row g, hr = 1: row g+8) at a time: the new running
/// max over the quad, alpha = 2^(scale_log2 * (old max - new max)) applied to row_sum and
/// to the row of O, then p = 2^(s*scale_log2 - m*scale_log2), added to this lane's part of
/// the row sum and packed at once as bf16 pairs pk[j][hr] = (P[row][8j+2t], P[row][8j+2t+1]).
template <int kSTiles, int kOTiles>
__device__ __forceinline__ void softmax_on_fragments(float (&s)[kSTiles][4], float (&row_max)[2], float (&row_sum)[2],
                                                     float (&o)[kOTiles][4], std::uint32_t (&pk)[kSTiles][2],
                                                     float scale_log2) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = row_max[hr];
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hr], s[j][2 * hr + 1]));
    mx = cuda::warp_max<4>(mx);  // the quad's 4 lanes hold the row: now the new running max
    // 2^(x*c - m*c) with c = scale*log2(e). A row that has seen only masked keys keeps
    // m = -inf: subtract 0 instead, so that its p = 2^-inf = 0 (not NaN).
    const float m_scaled = mx == -INFINITY ? 0.f : mx * scale_log2;
    const float alpha = cuda::ex2_approx(row_max[hr] * scale_log2 - m_scaled);  // OLD max: rescale
    row_max[hr] = mx;
    row_sum[hr] *= alpha;
#pragma unroll
    for (int dt = 0; dt < kOTiles; ++dt) {
      o[dt][2 * hr] *= alpha;
      o[dt][2 * hr + 1] *= alpha;
    }
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
      const float p0 = cuda::ex2_approx(fmaf(s[j][2 * hr], scale_log2, -m_scaled));
      const float p1 = cuda::ex2_approx(fmaf(s[j][2 * hr + 1], scale_log2, -m_scaled));
      sum += p0 + p1;
      pk[j][hr] = pack_bf16x2(p0, p1);  // P as bf16 at once: half the registers of S
    }
    row_sum[hr] += sum;  // this lane's part of the row sum (reduced over the quad at the end)
  }
}

/// The A operand of the P V mma for k16 step kk (keys 16kk .. 16kk+15) of one m16 tile (the
/// exercise's step 8b, same name and signature):
///   a[0] = P[g][2t, 2t+1]   = pk[2kk][row g]      a[1] = P[g+8][2t, 2t+1]   = pk[2kk][row g+8]
///   a[2] = P[g][2t+8, 2t+9] = pk[2kk+1][row g]    a[3] = P[g+8][2t+8, 2t+9] = pk[2kk+1][row g+8]
/// i.e. the accumulators of S's n8 tiles 2kk and 2kk+1, as they are.
template <int kSTiles>
__device__ __forceinline__ void a_fragment(const std::uint32_t (&pk)[kSTiles][2], int kk, std::uint32_t (&a)[4]) {
  a[0] = pk[2 * kk][0];
  a[1] = pk[2 * kk][1];
  a[2] = pk[2 * kk + 1][0];
  a[3] = pk[2 * kk + 1][1];
}

/// O += P V for the sub-tile: P's A fragments from the registers (a_fragment), V's B
/// fragments through ldmatrix .trans.
template <class Cfg>
__device__ __forceinline__ void accumulate_pv(float (&o)[Cfg::kMTiles][Cfg::kOTiles][4],
                                              const std::uint32_t (&pk)[Cfg::kMTiles][Cfg::kSTiles][2],
                                              std::uint32_t v_addr) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk) {
#pragma unroll
    for (int dp = 0; dp < Cfg::kDSteps; ++dp) {
      std::uint32_t vb[4];
      cuda::ldmatrix_x4_trans(vb, (v_addr ^ (32 * dp)) + 16 * kk * Cfg::Geom::kRowBytes);
      const std::uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
      for (int mi = 0; mi < Cfg::kMTiles; ++mi) {
        std::uint32_t a[4];
        a_fragment(pk[mi], kk, a);
        cuda::mma_m16n8k16_bf16_f32(o[mi][2 * dp], a, b0);
        cuda::mma_m16n8k16_bf16_f32(o[mi][2 * dp + 1], a, b1);
      }
    }
  }
}

/// Phases: load_kv_tile, load_q_fragments, clear_scores + load_q_operand + accumulate_qk
/// (S = Q K^T), the mask, softmax_on_fragments, accumulate_pv (with a_fragment),
/// write_output_and_lse.
template <class Cfg, bool kCausal>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) register_softmax_kernel(const TcParams p) {
  constexpr int kMT = Cfg::kMTiles, kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kRB = Cfg::Geom::kRowBytes;
  constexpr int kRowChunks = Cfg::Geom::kRowChunks;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);                   // see kSmemAlign
  const std::uint32_t s_q = cuda::smem_u32(smem);               // [kBlockM][D] Q, at the end O
  const std::uint32_t s_kv = s_q + Cfg::kQBytes;                // kStages x ([kBlockN][D] K, [kBlockN][D] V)

  int q_tile, bh;
  block_coordinates(kCausal, q_tile, bh);  // causal: the heaviest Q tiles of all heads first
  const int q0 = q_tile * kBM;
  const bf16* k_head;
  const bf16* v_head;
  {
    const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
    k_head = p.k + row_offset(p.ks, b, hk, 0);
    v_head = p.v + row_offset(p.vs, b, hk, 0);
    TileCopier<Cfg::D, kBM, Cfg::kThreads, true>().copy(s_q, p.q + row_offset(p.qs, b, h, 0), p.qs.seq, q0, p.seq_q);
  }
  const int num_tiles = (kv_end<kCausal>(p, q0, kBM) + kBN - 1) / kBN;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * Cfg::kWarpRows;  // first row of this warp in the Q tile

  TileStream<Cfg::D, kBN, Cfg::kThreads> k_stream(k_head, p.ks.seq, p.seq_k), v_stream(v_head, p.vs.seq, p.seq_k);
  // Phase load_kv_tile: the cp.async copies of K/V tile `tile` into its stage of the ring (no
  // commit). Tiles are loaded in order 0, 1, 2, ...: the streams walk K and V one tile per call.
  // (A lambda, not a function of its own: as a function the ring index arithmetic compiles
  // differently.)
  auto load_kv_tile = [&](int tile) {
    const std::uint32_t stage = s_kv + (tile % Cfg::kStages) * Cfg::kStageBytes;
    k_stream.copy_next(stage, p.k);
    v_stream.copy_next(stage + Cfg::kKVBytes, p.v);
  };

  // Prologue: group 0 = Q (issued above) + K/V tile 0, then tiles 1 .. kStages-2; one
  // group per tile, committed even when empty, so "group i holds tile i" and the wait
  // count stay exact.
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < num_tiles) load_kv_tile(s);
    cuda::cp_async_commit();
  }

  // ldmatrix row addresses. Lane l supplies row l%8 of matrix l/8. Within a tile the rows
  // only move by multiples of 16 (which keep the swizzle key) and the chunk only by even
  // constants 2*step, so chunk 2*step + c of a row lives at physical chunk
  // (2*step) XOR swizzle_chunk(row, c). With the tile base a multiple of the row length,
  // the physical chunk is exactly address bits 4.., so each operand needs ONE lane
  // address (step 0 of row block 0): step `st` is  addr ^ (32 * st), and the row block
  // an immediate offset that ldmatrix folds in. No per-step address registers.
  //   Q (A, row-major 16x16): row l%16 of the m16 tile, chunk c = l/16.
  //   K (B of S = Q K^T, two n8 tiles per x4): key l%8 + 8*(l/16), chunk c = (l/8)%2.
  //   V (B of O = P V via .trans, two n8 tiles per x4): key l%8 + 8*((l/8)%2), chunk c = l/16.
  const int q_row = warp_row0 + (lane & 15);
  const int k_row = (lane & 7) + 8 * (lane >> 4);
  const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1);
  const std::uint32_t q_lane = s_q + q_row * kRB + 16 * cuda::swizzle_chunk<kRowChunks>(q_row, lane >> 4);
  const std::uint32_t k_lane = k_row * kRB + 16 * cuda::swizzle_chunk<kRowChunks>(k_row, (lane >> 3) & 1);
  const std::uint32_t v_lane = v_row * kRB + 16 * cuda::swizzle_chunk<kRowChunks>(v_row, lane >> 4);

  float o[kMT][Cfg::kOTiles][4];
  float row_max[kMT][2], row_sum[kMT][2];  // [m16 tile][row g / row g+8]; max in raw score units
  init_accumulators<Cfg>(o, row_max, row_sum);
  std::uint32_t qf[Cfg::kQInRegs ? kMT : 1][Cfg::kQInRegs ? Cfg::kDSteps : 1][4];

  for (int tile = 0; tile < num_tiles; ++tile) {
    // Tile `tile` (and Q) landed for this thread; the barrier makes it so for the block
    // and also guarantees every warp is done with tile-1, whose stage is refilled next.
    cuda::cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    if (tile + Cfg::kStages - 1 < num_tiles) load_kv_tile(tile + Cfg::kStages - 1);
    cuda::cp_async_commit();

    if constexpr (Cfg::kQInRegs) {
      if (tile == 0) load_q_fragments<Cfg>(qf, q_lane);
    }
    const std::uint32_t k_tile = s_kv + (tile % Cfg::kStages) * Cfg::kStageBytes + k_lane;
    const std::uint32_t v_tile = k_tile - k_lane + Cfg::kKVBytes + v_lane;

    // The tile's keys in sub-tiles of kSubN, each a full online-softmax step (d = 128:
    // two of 32 keys, so that S and O fit the registers together; elsewhere one).
#pragma unroll 1
    for (int sub = 0; sub < Cfg::kSubTiles; ++sub) {
      const int kv0 = tile * kBN + sub * Cfg::kSubN;
      const std::uint32_t k_addr = k_tile + sub * Cfg::kSubN * kRB;
      const std::uint32_t v_addr = v_tile + sub * Cfg::kSubN * kRB;
      // Keys no row of this warp may see (past its last row's diagonal, or past N_k):
      // they would add nothing (alpha = 1, p = 0), so the warp skips them. Warp-uniform;
      // it happens in the diagonal tiles when a tile is narrower than the Q tile.
      if (kv0 >= p.seq_k || (kCausal && static_cast<long long>(kv0) > static_cast<long long>(q0) + warp_row0 +
                                                                          Cfg::kWarpRows - 1 + p.causal_offset))
        continue;

      // ---- S = Q K^T, one k16 step at a time. The k16 steps are unrolled (kQKUnroll): ptxas
      // may then issue the next steps' ldmatrix early. When a configuration runs out of
      // registers, kQKUnroll = 1 (Q in shared memory) keeps those loads out of the
      // accumulators' way. (This loop stays here: moved into a function with its pragma, it
      // compiles to a different instruction order.)
      float s[kMT][Cfg::kSTiles][4];
      clear_scores<Cfg>(s);
#pragma unroll(Cfg::kQKUnroll)
      for (int ks = 0; ks < Cfg::kDSteps; ++ks) {
        std::uint32_t a[kMT][4];
        load_q_operand<Cfg>(a, qf, q_lane, ks);
        accumulate_qk<Cfg>(s, a, k_addr, ks);
      }

      // ---- Mask: only the tail tile and, when causal, tiles reaching past this warp's
      // first row's diagonal. Element e of n8 tile j: row g + 8*(e/2), key 8j + 2t + e%2.
      if (tile_needs_mask<kCausal, Cfg::kSubN>(p, q0 + warp_row0, kv0)) {
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
          for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = q0 + warp_row0 + 16 * mi + g + 8 * (e >> 1);
              const int key = kv0 + 8 * j + 2 * t + (e & 1);
              if (key_hidden<kCausal>(p, row, key)) s[mi][j][e] = -INFINITY;
            }
      }

      std::uint32_t pk[kMT][Cfg::kSTiles][2];  // P as bf16 pairs, the A operand of P V
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi) softmax_on_fragments(s[mi], row_max[mi], row_sum[mi], o[mi], pk[mi], p.scale_log2);

      accumulate_pv<Cfg>(o, pk, v_addr);
    }
  }

  write_output_and_lse<Cfg, kCausal>(smem, p, q0, warp_row0, g, t, o, row_max, row_sum);
}

template <class Cfg, bool kCausal>
void launch_cfg(const TcParams& p, std::int64_t batch_heads, cudaStream_t stream) {
  constexpr auto kernel = register_softmax_kernel<Cfg, kCausal>;
  cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes);
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + Cfg::kBlockM - 1) / Cfg::kBlockM),
                  static_cast<unsigned>(batch_heads));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  COURSE_CHECK_LAUNCH("register_softmax_kernel");
}

template <template <int> class ConfigOf>
void launch_by_head_dim(const AttentionArgsBf16& a) {
  const TcParams p = make_tc_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cuda::dispatch_value<m03::kTcHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    using Cfg = ConfigOf<decltype(d)::value>;
    if (a.causal) launch_cfg<Cfg, true>(p, bh, a.stream);
    else launch_cfg<Cfg, false>(p, bh, a.stream);
  });
}

template <int D>
using Flash2Config = typename Flash2ConfigFor<D>::type;

}  // namespace

void launch_tc_register_softmax(const AttentionArgsBf16& a) { launch_by_head_dim<RegisterSoftmaxConfig>(a); }
void launch_tc_flash2(const AttentionArgsBf16& a) { launch_by_head_dim<Flash2Config>(a); }

}  // namespace course::solution::attn_tc
