#pragma once
/// @file attention_backward_tc_planted.hpp
/// @brief Deliberately wrong tensor-core attention backward passes (realistic mistakes) that
/// test_attention_backward_tc.cpp must reject with the very checking helper its real tests
/// use. Each runs the course's tensor-core kernels (solutions/module04_training/
/// attention_backward_tc.cuh) with the solution's phases, one of them replaced by the planted
/// mistake; the step argument picks the kernel configuration as for the real entry point.

#include "module04/attention_backward.hpp"

namespace course::planted {

/// Signature shared with course::solution::attention_backward (bf16) and the exercise's.
using AttentionBackwardTcFn = void (*)(m04::AttentionBackwardStep, const m04::AttentionBackwardArgsBf16&);

/// dS^T = P^T * dP^T: the row term D = rowsum(dO * O) is dropped.
void attention_backward_tc_drop_d(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgsBf16& args);

/// P^T recomputed with only the tail mask: keys after a query's causal diagonal leak in.
void attention_backward_tc_causal_mask_missing(m04::AttentionBackwardStep step,
                                               const m04::AttentionBackwardArgsBf16& args);

/// P^T = 2^(S^T * scale - lse2): the log2(e) of the base change is forgotten on the scores
/// (lse2 is in base 2, the scores in natural units).
void attention_backward_tc_natural_scale(m04::AttentionBackwardStep step,
                                         const m04::AttentionBackwardArgsBf16& args);

/// The dQ turn admits every block at once (wait_dq_turn returns at once): the additions of
/// the K/V tiles race again, and tc_deterministic's results vary from run to run.
void attention_backward_tc_turn_not_awaited(m04::AttentionBackwardStep step,
                                            const m04::AttentionBackwardArgsBf16& args);

}  // namespace course::planted
