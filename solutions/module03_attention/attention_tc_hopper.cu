/// @file attention_tc_hopper.cu
/// @brief The Hopper steps of the attention ladder (sm_90a; elsewhere course::Unsupported):
///   10. tc_wgmma             both products on warpgroup MMA: S = Q K^T with Q and K read from
///                            shared memory, O += P V with P straight from registers
///   11. tc_warp_specialized  Q, K, V loaded by the TMA, K/V into a ring of stages guarded by
///                            mbarriers; a producer warpgroup, two consumer warpgroups, setmaxnreg
///   12. tc_pingpong          the two consumers take turns on the tensor cores (named
///                            barriers): one's softmax runs under the other's GEMMs
///   13. tc_overlap           a consumer's softmax of tile j starts once S_j has landed,
///                            under its own P_{j-1} V_{j-1} (two commit groups, O rescaled after)
///   14. tc_persistent        one block per SM takes its next query tile from a counter,
///                            in step 13's order; the producer loads its Q and K/V under this one
/// The kernels are attention_tc_hopper.cuh (shared with the exercise), the solution's phases
/// attention_tc_hopper_phases.cuh; this file is the entry point. Each step's doc comment,
/// prediction and outcome: attention_tc_hopper.cuh.

#include "attention_tc_device.cuh"
#include "attention_tc_hopper.cuh"
#include "attention_tc_hopper_phases.cuh"

namespace course::solution::attn_tc {

void launch_tc_wgmma(const AttentionArgsBf16& a) {
  attn_tc_hopper::run_step<attn_tc_hopper_phases::Phases>(m03::AttentionStep::tc_wgmma, a);
}

void launch_tc_warp_specialized(const AttentionArgsBf16& a) {
  attn_tc_hopper::run_step<attn_tc_hopper_phases::Phases>(m03::AttentionStep::tc_warp_specialized, a);
}

void launch_tc_pingpong(const AttentionArgsBf16& a) {
  attn_tc_hopper::run_step<attn_tc_hopper_phases::Phases>(m03::AttentionStep::tc_pingpong, a);
}

void launch_tc_overlap(const AttentionArgsBf16& a) {
  attn_tc_hopper::run_step<attn_tc_hopper_phases::Phases>(m03::AttentionStep::tc_overlap, a);
}

void launch_tc_persistent(const AttentionArgsBf16& a) {
  attn_tc_hopper::run_step<attn_tc_hopper_phases::Phases>(m03::AttentionStep::tc_persistent, a);
}

}  // namespace course::solution::attn_tc
