/// @file attention_tc.cu
/// @brief The tensor-core steps of the attention ladder (bf16 Q, K, V, O; fp32
/// accumulation, softmax statistics and lse), tc_mma and tc_swizzled_pipelined, and the
/// dispatcher of all six (numbers as in kAttentionSteps, module03/attention.hpp):
///   6. tc_mma                 mma.sync m16n8k16 + ldmatrix (V via .trans); S and P through shared memory
///   7. tc_swizzled_pipelined  + XOR-swizzled tiles, 2-stage cp.async K/V ring, Q fragments in registers
///   8. tc_register_softmax    (attention_tc_flash.cu) softmax on the accumulator fragments
///   9. tc_flash2              (attention_tc_flash.cu) FlashAttention-2's tile shapes
///   10. tc_wgmma              (attention_tc_hopper.cu, sm_90a) both products on warpgroup MMA
///   11. tc_warp_specialized   (attention_tc_hopper.cu, sm_90a) TMA loads, an mbarrier K/V ring,
///                              producer and consumer warpgroups
/// Every step: any N_q, N_k (tails masked), causal (bottom-right; tiles past the
/// diagonal skipped, heaviest query tiles first), [B,H,N,d] and [B,N,H,d] strides,
/// grouped-query attention, fp32 lse; d in {32, 64, 96, 128} (tc_wgmma and
/// tc_warp_specialized: 64 and 128, on sm_90a only; elsewhere course::Unsupported).
///
/// Predictions are for an H200 (132 SMs, ~1.98 GHz, 128 B/clk of shared memory per SM;
/// mma.sync m16n8k16 bf16 = 4096 FLOPs, ~60-70% of the wgmma peak of 989 TFLOP/s) at the
/// benchmark shapes B*N = 16384 tokens, H*d = 2048, N = 1024 .. 16384 (attention_tc_flash.cu
/// has the numbers). The fp32 step fused, for comparison:
/// Measured (results: attn_f32/solution/fused/B4_H16_N4096_d64): 33.7 TFLOP/s
/// FlashAttention-2 runs ~300-350 TFLOP/s on these shapes.
///
/// The kernel of steps 6-7 is attention_tc.cuh (the exercise runs it too); this file holds
/// the steps' story, their phases (Phases below) and the dispatcher.

#include "attention_tc.cuh"
#include "attention_tc_device.cuh"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/error.hpp"
#include "module03/attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace course::solution {
namespace attn_tc {
namespace {

// ============================================================================
// Step 6: tc_mma -- the two GEMMs of a tile on the tensor cores.
//
// What changes from fused (fp32 FMAs): bf16 inputs, and Q K^T and P V are
// warp-wide mma.sync.m16n8k16 instructions (course/cuda/mma_ptx.cuh): a warp multiplies
// a 16x16 bf16 tile by a 16x8 one into 16x8 fp32 accumulators, 4096 FLOPs per instruction.
//  - 4 warps, each owns 16 query rows of a 64-row Q tile; K/V tiles of 64 keys.
//  - Operands reach the registers with ldmatrix.x4 (four 8x8 bf16 matrices per warp
//    instruction, already in fragment order): Q as the A operand (16 rows x 16 dims), K
//    as the B operand of S = Q K^T (K's rows are keys with dims contiguous: exactly the
//    "col" layout mma wants for B), V as the B operand of O = P V with ldmatrix.trans
//    (V's rows are keys = the k dimension of P V, so each 8x8 block must be transposed).
//  - The softmax stays what the fp32 steps do: each warp writes its 16 x 64 S tile (fp32) to
//    shared memory, two lanes per row read it back, apply scale and mask, run the online
//    update (online_softmax_rescale of attention_device.cuh) and write P as bf16; the warp
//    then reads P with ldmatrix as the A operand of P V. The O accumulators stay in the
//    mma fragments; alpha and 1/l reach them with __shfl_sync from the row's lanes.
//  - Tiles live in shared memory in their global layout (rows of 2d bytes) and are
//    loaded synchronously (16-byte loads, two barriers per tile).
// Prediction: the 8 row addresses of every ldmatrix phase start in the same bank group
// (rows of 128 or 256 bytes): 8-way conflicts, 32 shared-memory wavefronts per ldmatrix.x4
// instead of 4. Per warp and tile (d = 64): 64 mma against 36 such loads (~1150 cycles of
// the SM's shared-memory pipe), i.e. ~4.5 cycles of smem per 4096 FLOPs, a bound of
// ~58 TFLOP/s for the whole SM at either head dim, before the exposed load latency.
// Expect ~40-50 TFLOP/s: already above fused, and far from the tensor cores' ~600.
// Registers (ptxas, sm_90a, non-causal / causal): d = 64: 152/155, d = 128: 198/190
// (32: 114/117, 96: 178/182); shared memory Q, K, V + S (18 KB) + P (9 KB): 51 / 75 KB;
// 3 / 2 blocks per SM.
// Measured (results: attn_bf16/solution/tc_mma/{B16_H32_N1024_d64,B1_H32_N16384_d64}): 44.1 / 44.6 TFLOP/s
// Measured (results: attn_bf16/solution/tc_mma/{B16_H16_N1024_d128,B1_H16_N16384_d128}): 43.0 / 44.3 TFLOP/s
// Met: inside ~40-50 and above fused's fp32 (header), flat in N and d as a shared-memory
// bound should be. cuBLAS's materialized bf16 pipeline is even at N = 2048, ahead beyond:
// Measured (results: attn_bf16/solution/tc_mma/{B16_H32_N1024_d64,B4_H32_N4096_d64}): 1.74 / 0.65 of cublas_materialized
//
// ============================================================================
// Step 7: tc_swizzled_pipelined -- feed the tensor cores.
//
// What changes from tc_mma (same kernel, kTuned = true):
//  (a) Swizzled tiles. Chunk c (16 bytes) of row r is stored at chunk
//      c XOR (r mod 8) (cuda::swizzle_chunk; d = 96 rows are padded to 16 chunks): the 8
//      rows of every ldmatrix phase land in 8 different bank groups, 4 wavefronts per
//      ldmatrix.x4 instead of 32. The writer (cp.async) uses the same mapping.
//  (b) A 2-stage cp.async ring: tile t+1's K and V are copied global -> shared while tile
//      t is computed (no registers, no waiting); one barrier per tile.
//  (c) Q fragments are loaded once into registers (D/16 x 4 registers per lane).
// S and P still go through shared memory (tc_register_softmax removes that).
// Prediction: per warp-tile (d = 64) 64 mma against ~36 conflict-free ldmatrix.x4
// (~144 cycles) plus the S/P round trip (~8 KB written and read, ~130 cycles) and the
// serialized write-sync-read of each warp: ~300 cycles of smem per 64 mma, a bound near
// 230 TFLOP/s; the softmax's instructions and the round trip's latency land it at
// ~120-170 TFLOP/s (d = 64), ~150-200 (d = 128).
// Registers (ptxas, non-causal / causal): d = 64: 153/155, d = 128: 204/206 (32: 115/117,
// 96: 202/204); shared memory Q + 2 x (K + V) + S + P: 67 / 107 KB; 3 / 2 blocks per SM.
// Measured (results: attn_bf16/solution/tc_swizzled_pipelined/{B16_H32_N1024_d64,B1_H32_N16384_d64}): 192.2 / 207.7 TFLOP/s
// Measured (results: attn_bf16/solution/tc_swizzled_pipelined/{B16_H16_N1024_d128,B1_H16_N16384_d128}): 225.9 / 256.1 TFLOP/s
// Met and beaten: above both ranges, d = 64 near the ~230 smem bound; most likely the
// softmax and the round trip's latency hide behind the other resident warps better than
// estimated. Against tc_mma:
// Measured (results: attn_bf16/solution/tc_swizzled_pipelined/B4_H32_N4096_d64): 4.60 of attn_bf16/solution/tc_mma/B4_H32_N4096_d64
// ============================================================================

/// The steps' ideas, the Phases of smem_step::smem_softmax_kernel (attention_tc.cuh, the
/// kernel the exercise runs too): the exercise writes the same three functions.
struct Phases {
  /// Step 7: chunk `chunk` of row `row` goes to chunk chunk XOR (the row's index in its
  /// group of 8 128-byte lines): the course's cuda::swizzle_chunk (mma_ptx.cuh), which
  /// steps 8-9 use too.
  template <int kRowChunks>
  __device__ __forceinline__ static int swizzle_chunk(int row, int chunk) {
    return cuda::swizzle_chunk<kRowChunks>(row, chunk);
  }

  /// S = Q K^T for the warp's 16 rows and the tile's 64 keys: 8 accumulator tiles of 16 x 8.
  /// The A fragments come from qf (kTuned) or with ldmatrix from the Q tile; `a` is scratch.
  template <class T, bool kTuned, class QFrags>
  __device__ __forceinline__ static void scores_qk(float (&s)[T::kSTiles][4], std::uint32_t (&a)[4],
                                                   const QFrags& qf, std::uint32_t s_q, std::uint32_t s_k, int q_row,
                                                   int q_c, int k_row, int k_c) {
    using Geom = typename T::Geom;
#pragma unroll
    for (int j = 0; j < T::kSTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < T::kDSteps; ++ks) {
      if constexpr (kTuned) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = qf[ks][r];
      } else {
        cuda::ldmatrix_x4(a, s_q + Geom::offset(q_row, 2 * ks + q_c));
      }
#pragma unroll
      for (int np = 0; np < T::kSTiles / 2; ++np) {
        std::uint32_t kb[4];
        cuda::ldmatrix_x4(kb, s_k + Geom::offset(16 * np + k_row, 2 * ks + k_c));
        const std::uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        cuda::mma_m16n8k16_bf16_f32(s[2 * np], a, b0);
        cuda::mma_m16n8k16_bf16_f32(s[2 * np + 1], a, b1);
      }
    }
  }

  /// O += P V: P (16 rows x 16 keys per k16 step, ldmatrix from the P tile) as the A operand,
  /// V's B fragments through ldmatrix .trans; `a` is scratch.
  template <class T>
  __device__ __forceinline__ static void accumulate_pv(float (&o)[T::kOTiles][4], std::uint32_t (&a)[4],
                                                       std::uint32_t s_p, std::uint32_t s_v, int warp_row0, int lane,
                                                       int v_row, int v_c) {
    using Geom = typename T::Geom;
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
      cuda::ldmatrix_x4(a, s_p + 2 * ((warp_row0 + (lane & 15)) * T::kLdP + 16 * kk + 8 * (lane >> 4)));
#pragma unroll
      for (int dp = 0; dp < T::kDSteps; ++dp) {
        std::uint32_t vb[4];
        cuda::ldmatrix_x4_trans(vb, s_v + Geom::offset(16 * kk + v_row, 2 * dp + v_c));
        const std::uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        cuda::mma_m16n8k16_bf16_f32(o[2 * dp], a, b0);
        cuda::mma_m16n8k16_bf16_f32(o[2 * dp + 1], a, b1);
      }
    }
  }
};

}  // namespace

void launch_tc_mma(const AttentionArgsBf16& a) { smem_step::launch_smem_softmax<Phases, false>(a); }
void launch_tc_swizzled_pipelined(const AttentionArgsBf16& a) { smem_step::launch_smem_softmax<Phases, true>(a); }

}  // namespace attn_tc

void attention(m03::AttentionStep step, const m03::AttentionArgsBf16& args) {
  m03::validate_attention_args(args, step, "attention");
  switch (step) {
    case m03::AttentionStep::tc_mma: return attn_tc::launch_tc_mma(args);
    case m03::AttentionStep::tc_swizzled_pipelined: return attn_tc::launch_tc_swizzled_pipelined(args);
    case m03::AttentionStep::tc_register_softmax: return attn_tc::launch_tc_register_softmax(args);
    case m03::AttentionStep::tc_flash2: return attn_tc::launch_tc_flash2(args);
    case m03::AttentionStep::tc_wgmma: return attn_tc::launch_tc_wgmma(args);
    case m03::AttentionStep::tc_warp_specialized: return attn_tc::launch_tc_warp_specialized(args);
    case m03::AttentionStep::tc_pingpong: return attn_tc::launch_tc_pingpong(args);
    case m03::AttentionStep::tc_overlap: return attn_tc::launch_tc_overlap(args);
    case m03::AttentionStep::tc_persistent: return attn_tc::launch_tc_persistent(args);
    default: break;  // fp32 steps: validate_attention_args rejected them
  }
}

}  // namespace course::solution
