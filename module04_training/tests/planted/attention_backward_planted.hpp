#pragma once
/// @file attention_backward_planted.hpp
/// @brief Deliberately wrong attention-backward kernels (realistic mistakes) that
/// test_attention_backward.cpp must reject with the very checking helper its real tests use:
/// proof that the tests can fail. Each has the signature of impl::attention_backward (the
/// step is ignored; arguments are validated as for step flash, so only the kernels are
/// wrong). The kernels are a plain backward pass -- one thread per key row computes dK and
/// dV over every query row, one thread per query row computes dQ, both recomputing P from
/// lse -- correct except for the planted line. attention_backward_simple is that pass with
/// no bug: the tests check that it PASSES, so each planted failure is the planted line's.

#include "module04/attention_backward.hpp"

namespace course::planted {

/// Signature shared with course::solution::attention_backward and the exercise's.
using AttentionBackwardFn = void (*)(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs&);

/// The plain kernels without a bug (the control).
void attention_backward_simple(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgs& args);

/// dS = P * dP: the softmax Jacobian's row term D = rowsum(dO * O) is dropped.
void attention_backward_drop_d(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgs& args);

/// dQ accumulated without atomics: a block per query row, its threads (one per key) add
/// their scale * dS_ij * K_j into ONE shared-memory dQ row with a plain `+=`. Updates are
/// lost, and compute-sanitizer racecheck reports the shared-memory hazard.
void attention_backward_dq_race(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgs& args);

/// dK = scale^2 * dS^T Q: the scale applied twice (once folded into Q, once again).
void attention_backward_dk_scale_twice(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgs& args);

/// dK = dS^T Q: the scale forgotten.
void attention_backward_dk_scale_forgotten(m04::AttentionBackwardStep step,
                                           const m04::AttentionBackwardArgs& args);

/// The causal mask is not applied in the backward pass: P = exp(S - lse) for every key,
/// including those the forward hid (and exp(s + inf) for the rows that see no key).
void attention_backward_causal_mask_missing(m04::AttentionBackwardStep step,
                                            const m04::AttentionBackwardArgs& args);

/// P recomputed against the wrong statistic: the running logsumexp of the keys up to the
/// end of the current tile of 16 keys (what an online pass holds mid-row) instead of the
/// forward's final lse. Right for the last tile of each row, too large for the others.
void attention_backward_running_max(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgs& args);

/// dK written at b * dk_strides.head + h * dk_strides.batch: head and batch strides swapped
/// (in bounds when B == H_kv; dQ and dV are addressed correctly).
void attention_backward_dk_swapped_strides(m04::AttentionBackwardStep step,
                                           const m04::AttentionBackwardArgs& args);

/// Step flash_deterministic's own kernel (solutions/module04_training/
/// attention_backward_flash.cuh) with its dQ turn passed on but never awaited: every K/V
/// tile adds its dQ share as soon as it gets there, so the gradients are as accurate as
/// flash's but their last bits change from run to run. Not in kPlantedAttentionBackward
/// (the accuracy checks cannot see it): the determinism test must (attention_backward_
/// flash_planted.cu; the step argument is ignored, the arguments are validated as for
/// flash_deterministic, whose workspace it uses).
void attention_backward_flash_turn_not_awaited(m04::AttentionBackwardStep step,
                                               const m04::AttentionBackwardArgs& args);

struct PlantedAttentionBackward {
  const char* name;  ///< gtest parameter name
  AttentionBackwardFn fn;
};

/// Every planted bug (not the control).
inline constexpr PlantedAttentionBackward kPlantedAttentionBackward[] = {
    {"drop_d", attention_backward_drop_d},
    {"dq_race", attention_backward_dq_race},
    {"dk_scale_twice", attention_backward_dk_scale_twice},
    {"dk_scale_forgotten", attention_backward_dk_scale_forgotten},
    {"causal_mask_missing", attention_backward_causal_mask_missing},
    {"running_max", attention_backward_running_max},
    {"dk_swapped_strides", attention_backward_dk_swapped_strides},
};

}  // namespace course::planted
