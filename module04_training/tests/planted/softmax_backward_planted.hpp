#pragma once
/// @file softmax_backward_planted.hpp
/// @brief Deliberately wrong softmax backward kernels. test_softmax_backward.cpp runs them
/// through the same checking helper as the real steps and asserts that it rejects every
/// one: proof that the tests can fail. Each has the op's signature; `step` is ignored.

#include "module04/softmax_backward.hpp"

namespace course::planted {

/// dx = y * dy: the D term dropped (the diagonal of the Jacobian without the rank-one
/// part -y y^T). Off by y * D per element; slices no longer sum to 0.
void softmax_backward_dropped_d(m04::SoftmaxBackwardStep step, const m04::SoftmaxBackwardArgs& args);

/// D reduced along the other dimension (and applied along it): a correct backward for
/// 1 - args.dim. Right only when the two coincide (a 1 x 1 matrix).
void softmax_backward_wrong_dim(m04::SoftmaxBackwardStep step, const m04::SoftmaxBackwardArgs& args);

/// dx = dy - D: the factor y forgotten (as if d softmax / dx were 1 - y).
void softmax_backward_missing_y_factor(m04::SoftmaxBackwardStep step, const m04::SoftmaxBackwardArgs& args);

}  // namespace course::planted
