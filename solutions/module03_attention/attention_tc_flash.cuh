#pragma once
/// @file attention_tc_flash.cuh
/// @brief The kernel of steps 8 and 9 of the attention ladder (tc_register_softmax,
/// tc_flash2): register_softmax_kernel, its tile configuration (FlashConfig) and its launch.
/// The solution (attention_tc_flash.cu) and the exercise
/// (exercises/module03_attention/attention_tc.cu) both run this very code; each brings the
/// parts that are step 8's idea as its `Phases` parameter, a struct of static forceinline
/// functions, and step 9's tile shapes as the configuration it launches with:
///   `template <int kSTiles, int kOTiles> softmax_on_fragments(s, row_max, row_sum, o, pk, scale_log2)`
///       step 8a: one online-softmax step on the accumulator fragments of one m16 tile,
///       P packed as bf16 pairs
///   `template <int kSTiles> a_fragment(pk, kk, a)`
///       step 8b: P's A operand of the P V mma for k16 step kk
///   launch_by_head_dim<Phases, ConfigOf>: ConfigOf<D> is the FlashConfig of head dim D
///       (RegisterSoftmaxConfig for step 8; step 9's choice for tc_flash2)
/// The solution's phases and configurations, and each step's story, prediction and outcome,
/// are in attention_tc_flash.cu; the given phases the kernel calls are attention_tc_phases.cuh's.

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

namespace course::solution::attn_tc::flash_step {

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

/// Step 8's tiles: 4 warps x 16 query rows, 64-key K/V tiles in a 2-stage ring, Q in registers.
template <int D>
using RegisterSoftmaxConfig = FlashConfig<D, 1, 64, 64, 2, true>;

// The given phases (init_accumulators, load_q_fragments, clear_scores, load_q_operand,
// accumulate_qk, write_output_and_lse) are attention_tc_phases.cuh's; softmax_on_fragments
// and a_fragment are the Phases parameter's, and accumulate_pv is written here around
// a_fragment.
using attn_tc_phases::flash::accumulate_qk;
using attn_tc_phases::flash::clear_scores;
using attn_tc_phases::flash::init_accumulators;
using attn_tc_phases::flash::load_q_fragments;
using attn_tc_phases::flash::load_q_operand;
using attn_tc_phases::flash::write_output_and_lse;

// ---- The phases of register_softmax_kernel, in the order the main loop calls them. Each
// works on one warp's fragments (kMTiles m16 tiles of query rows), takes them by reference
// and is forceinline: the kernel compiles to the code it had with the phases written out.

/// O += P V for the sub-tile: P's A fragments from the registers (Phases::a_fragment), V's B
/// fragments through ldmatrix .trans.
template <class Phases, class Cfg>
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
        Phases::a_fragment(pk[mi], kk, a);
        cuda::mma_m16n8k16_bf16_f32(o[mi][2 * dp], a, b0);
        cuda::mma_m16n8k16_bf16_f32(o[mi][2 * dp + 1], a, b1);
      }
    }
  }
}

/// Phases: load_kv_tile, load_q_fragments, clear_scores + load_q_operand + accumulate_qk
/// (S = Q K^T), the mask, softmax_on_fragments, accumulate_pv (with a_fragment),
/// write_output_and_lse.
template <class Phases, class Cfg, bool kCausal>
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
      for (int mi = 0; mi < kMT; ++mi)
        Phases::softmax_on_fragments(s[mi], row_max[mi], row_sum[mi], o[mi], pk[mi], p.scale_log2);

      accumulate_pv<Phases, Cfg>(o, pk, v_addr);
    }
  }

  write_output_and_lse<Cfg, kCausal>(smem, p, q0, warp_row0, g, t, o, row_max, row_sum);
}

template <class Phases, class Cfg, bool kCausal>
void launch_cfg(const TcParams& p, std::int64_t batch_heads, cudaStream_t stream) {
  constexpr auto kernel = register_softmax_kernel<Phases, Cfg, kCausal>;
  cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes);
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + Cfg::kBlockM - 1) / Cfg::kBlockM),
                  static_cast<unsigned>(batch_heads));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  COURSE_CHECK_LAUNCH("register_softmax_kernel");
}

/// Launches register_softmax_kernel with the configuration ConfigOf<head_dim>.
template <class Phases, template <int> class ConfigOf>
void launch_by_head_dim(const AttentionArgsBf16& a) {
  const TcParams p = make_tc_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cuda::dispatch_value<m03::kTcHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    using Cfg = ConfigOf<decltype(d)::value>;
    if (a.causal) launch_cfg<Phases, Cfg, true>(p, bh, a.stream);
    else launch_cfg<Phases, Cfg, false>(p, bh, a.stream);
  });
}

}  // namespace course::solution::attn_tc::flash_step
