/// @file attention_tc_flash.cu
/// @brief Steps 8 and 9 of the attention ladder (tensor cores, bf16): the softmax moves
/// into the mma accumulator registers, and FlashAttention-2's tile shapes.
///   8. tc_register_softmax  online softmax on the S fragments, P re-packed as the A operand of P*V
///   9. tc_flash2            the same kernel, 128-row Q tiles with 32 rows per warp
/// Steps 6 and 7 (S through shared memory) and the dispatcher are in attention_tc.cu.
/// The kernel is attention_tc_flash.cuh (the exercise runs it too); this file holds the
/// steps' story, step 8's phases (Phases below) and step 9's tile shapes (Flash2ConfigFor).
///
/// Predictions are for an H200 (132 SMs, ~1.98 GHz, mma.sync bf16 ~60-70% of the 989
/// dense TFLOP/s that wgmma reaches) at the benchmark shapes B*N = 16384 tokens, H*d =
/// 2048, N = 1024 .. 16384: 4*B*H*N^2*d = 1.37e8 * N FLOPs (550 GFLOP at N = 4096,
/// ~1.7 ms at 330 TFLOP/s), against 256 MB of Q, K, V, O (~0.05 ms of HBM): compute-bound.

#include "attention_tc_device.cuh"
#include "attention_tc_flash.cuh"

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

using flash_step::FlashConfig;
using flash_step::RegisterSoftmaxConfig;

/// Step 9's tiles (the exercise's Flash2Choice), per head dim.
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

template <int D>
using Flash2Config = typename Flash2ConfigFor<D>::type;

/// Step 8's ideas, the Phases of flash_step::register_softmax_kernel (attention_tc_flash.cuh,
/// the kernel the exercise runs too): the exercise writes the same two functions.
struct Phases {
  /// One online-softmax step on the fragments of ONE m16 tile (the exercise's step 8a, same
  /// name and signature), one row (hr = 0: row g, hr = 1: row g+8) at a time: the new running
  /// max over the quad, alpha = 2^(scale_log2 * (old max - new max)) applied to row_sum and
  /// to the row of O, then p = 2^(s*scale_log2 - m*scale_log2), added to this lane's part of
  /// the row sum and packed at once as bf16 pairs pk[j][hr] = (P[row][8j+2t], P[row][8j+2t+1]).
  template <int kSTiles, int kOTiles>
  __device__ __forceinline__ static void softmax_on_fragments(float (&s)[kSTiles][4], float (&row_max)[2],
                                                              float (&row_sum)[2], float (&o)[kOTiles][4],
                                                              std::uint32_t (&pk)[kSTiles][2], float scale_log2) {
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
  __device__ __forceinline__ static void a_fragment(const std::uint32_t (&pk)[kSTiles][2], int kk,
                                                    std::uint32_t (&a)[4]) {
    a[0] = pk[2 * kk][0];
    a[1] = pk[2 * kk][1];
    a[2] = pk[2 * kk + 1][0];
    a[3] = pk[2 * kk + 1][1];
  }
};

}  // namespace

void launch_tc_register_softmax(const AttentionArgsBf16& a) {
  flash_step::launch_by_head_dim<Phases, RegisterSoftmaxConfig>(a);
}
void launch_tc_flash2(const AttentionArgsBf16& a) { flash_step::launch_by_head_dim<Phases, Flash2Config>(a); }

}  // namespace course::solution::attn_tc
