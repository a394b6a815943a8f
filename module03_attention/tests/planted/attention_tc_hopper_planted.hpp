#pragma once
/// @file attention_tc_hopper_planted.hpp
/// @brief Deliberately wrong phases of the Hopper attention steps that test_attention_tc.cpp
/// must reject with the checking helper its real tests use. Each runs the solution's
/// tc_warp_specialized kernels (solutions/module03_attention/attention_tc_hopper.cuh) with
/// the solution's phases except one (attention_tc_hopper_phases.cuh). On a GPU or build
/// without sm_90a they throw course::Unsupported, as the real steps do.
///
/// Not planted: a missing or wrong-parity mbarrier wait and a stage released before its
/// P V completed. Their failure is a race with the TMA (wrong only when the copy loses),
/// which no test can catch on every run, and a block that exits with copies in flight may
/// leave the context broken for the tests after it. Nor step 13's two commit groups in the
/// wrong order (P V before S, so that wgmma_wait<1> waits for P V): tried, and the checks
/// passed it -- the compiler still orders the softmax's reads of S after the wgmmas that
/// write them, so the mistake costs the overlap, not the result. The benchmark shows it.

#include "module03/attention.hpp"

namespace course::planted {

/// Signature shared with course::solution::attention for bf16 tensors.
using AttentionHopperFn = void (*)(m03::AttentionStep, const m03::AttentionArgsBf16&);

/// The K descriptor of S = Q K^T with sbo = 512 instead of 1024 bytes between 8-row groups:
/// every second group of 8 keys is read from the wrong rows.
void attention_hopper_descriptor_stride(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

/// P's register A fragment as {P[g][k0], P[g][k8], P[g+8][k0], P[g+8][k8]}: rows g and g+8
/// swap their later keys (the fragment order of the wgmma register operand).
void attention_hopper_p_fragment_order(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

/// V read K-major (no transpose flag) in P V: each 8x8 core matrix arrives transposed.
void attention_hopper_v_not_transposed(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

struct PlantedAttentionHopper {
  const char* name;  ///< gtest parameter name
  AttentionHopperFn fn;
};

inline constexpr PlantedAttentionHopper kPlantedAttentionHopper[] = {
    {"descriptor_stride", attention_hopper_descriptor_stride},
    {"p_fragment_order", attention_hopper_p_fragment_order},
    {"v_not_transposed", attention_hopper_v_not_transposed},
};

}  // namespace course::planted
