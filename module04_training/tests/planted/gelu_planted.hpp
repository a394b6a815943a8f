#pragma once
/// @file gelu_planted.hpp
/// @brief Deliberately wrong GELU kernels. test_gelu.cpp runs them through the same checking
/// helper as the real steps and asserts that it rejects every one. Each has the op's
/// signature; `step` is ignored (fp32 and bf16 both supported).

#include "module04/gelu.hpp"

namespace course::planted {

/// The cubic coefficient mistyped: 0.04715 instead of 0.044715 (~5% off inside tanh).
void gelu_forward_wrong_constant(m04::GeluStep step, const m04::GeluArgs& args);
void gelu_backward_wrong_constant(m04::GeluStep step, const m04::GeluBackwardArgs& args);

/// The derivative without its second term: gelu' = (1 + tanh u) / 2 only (the x/2 (1 - t^2)
/// du/dx of the product rule dropped).
void gelu_backward_missing_term(m04::GeluStep step, const m04::GeluBackwardArgs& args);

/// accumulate ignored: dx overwritten instead of added to.
void gelu_backward_ignores_accumulate(m04::GeluStep step, const m04::GeluBackwardArgs& args);

/// The vectorized kernel's tail dropped: the last n % 4 elements never written.
void gelu_forward_dropped_tail(m04::GeluStep step, const m04::GeluArgs& args);

}  // namespace course::planted
