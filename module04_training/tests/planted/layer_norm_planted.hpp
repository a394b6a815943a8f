#pragma once
/// @file layer_norm_planted.hpp
/// @brief Deliberately wrong LayerNorm kernels, forward and backward. test_layer_norm.cpp runs
/// them through the same checking helpers as the real steps and asserts that they reject
/// every one: proof that the tests can fail. Each has the op's signature; `step` is ignored.
/// fp32 and bf16 both work (the bugs are in the arithmetic, not the loads).

#include "module04/layer_norm.hpp"
#include "module04/layer_norm_backward.hpp"

namespace course::planted {

/// var = E[x^2]: the mean's square never subtracted (rstd too small wherever mean != 0).
void layer_norm_variance_without_mean(m04::LayerNormStep step, const m04::LayerNormArgs& args);

/// rstd = 1 / sqrt(var): eps forgotten. Off by eps / (2 var) relative: visible on rows of
/// small variance (std 1e-2: 5%), invisible on rows of variance ~1 (5e-6).
void layer_norm_rstd_without_eps(m04::LayerNormStep step, const m04::LayerNormArgs& args);

/// dgamma = sum dy: the xhat factor dropped (that is dbeta's formula).
void layer_norm_backward_dgamma_without_xhat(m04::LayerNormBackwardStep step, const m04::LayerNormBackwardArgs& args);

/// dx = rstd * (g - mean(g)): the projection term - xhat * mean(g * xhat) dropped.
void layer_norm_backward_dx_without_projection(m04::LayerNormBackwardStep step,
                                               const m04::LayerNormBackwardArgs& args);

}  // namespace course::planted
