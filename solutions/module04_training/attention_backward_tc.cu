/// @file attention_backward_tc.cu
/// @brief The tensor-core steps of the attention-backward ladder (bf16, mma.sync):
///   4. tc_mma            S^T = K Q^T and dP^T = V dO^T on fragments per warp; P^T and dS^T
///                        reused as the A operands of dV and dK; dS^T through shared memory for dQ
///   5. tc_pipelined      + XOR-swizzled tiles and a 2-stage cp.async ring (Q, dO, lse, D);
///                        FlashAttention-2's tiles (32 x 32 per warp; 128 queries at d = 64)
///   6. tc_deterministic  + dQ added in K/V-tile order, one counter per query tile
///   7. tc_split_dq       5. with a fixed list of K/V tiles per block and its own fp32 dQ copy,
///                        the copies summed in index order: deterministic with no hand-off
///   8. tc_wgmma          (Hopper, sm_90a; elsewhere course::Unsupported) the five products on
///                        warpgroup MMA: two warpgroups of 64 keys, S^T, dP^T and dQ from
///                        128-byte-swizzled shared memory, P^T and dS^T as register A operands
///                        of dV and dK (attention_backward_tc_wgmma.cuh)
///   9. tc_wgmma_deterministic  8. with 6.'s turn per query tile around the dQ atomics
///   10. tc_wgmma_split_dq       8. with 7.'s K/V-tile lists and fp32 dQ copies
/// The kernels are attention_backward_tc.cuh (tc_wgmma's: attention_backward_tc_wgmma.cuh),
/// shared with the exercise; the solution's phases (the parts the exercise asks for) are
/// attention_backward_tc_phases.cuh; this file is the entry point.
///
/// Predictions (H100/H200, 132 SMs, mma.sync bf16 ~60-70% of the 989 dense TFLOP/s wgmma
/// reaches; B*N = 16k tokens, H*d = 2048): per query tile and warp the five products read
/// ~92 KB of shared memory at d = 128 against 5.2 M multiply-adds per block: ~7 MAC per byte,
/// which caps an SM at ~900 MAC/clk (~440 TFLOP/s) before the softmax, the atomics and the
/// barriers. Expected: tc_mma (8-way ldmatrix conflicts, no overlap of loads) ~100-150
/// TFLOP/s; tc_pipelined ~250-320 (FlashAttention-2's backward: ~290 at d = 128);
/// tc_deterministic within 15% of tc_pipelined (the turn order serializes only the adds);
/// tc_split_dq 1.00-1.09x tc_pipelined's time (attention_backward_tc.cuh, "Step tc_split_dq");
/// tc_wgmma 1.15-1.4x tc_pipelined's TFLOP/s at d = 128, 1.0-1.2x at d = 64
/// (attention_backward_tc_wgmma.cuh); its deterministic twins the time ratios of 6. and 7.
/// to 5., if the hand-off and the copies' HBM traffic stay as cheap at wgmma's speed.
/// Outcome: module04_training/README.md, "The tensor-core backward".

#include "attention_backward_tc.cuh"
#include "attention_backward_tc_phases.cuh"

#include "module04/attention_backward.hpp"

namespace course::solution {

void attention_backward(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgsBf16& args) {
  m04::validate_attention_backward_args(args, step, "attention_backward");
  attn_bwd_tc::run_step<attn_bwd_tc_phases::Phases>(step, args);
}

}  // namespace course::solution
