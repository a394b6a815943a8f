#pragma once
/// @file linear_backward_planted.hpp
/// @brief Deliberately wrong linear-layer backward passes (realistic mistakes) that
/// test_linear_backward.cpp must reject with the same check it runs on the real steps:
/// proof that the tests can fail. Each has the signature of impl::linear_backward (the
/// step is ignored: every bug is its own naive kernel), validates its arguments like the
/// real ones, and computes the other two gradients correctly, so only one thing is wrong.
///
/// The wrong index orders are only in bounds for square problems (M == K == N): they
/// throw InvalidArgument otherwise, and the checks run them on square problems only, so
/// that a planted bug fails the comparison instead of reading outside a buffer.

#include "module04/linear_backward.hpp"

namespace course::planted {

/// Signature shared with course::solution::linear_backward.
using LinearBackwardFnPtr = void (*)(m04::BiasGradStep, const m04::LinearBackwardArgs&);

/// db[j] = sum of ROW j of dY (summed along rows instead of down columns).
void linear_backward_db_row_sums(m04::BiasGradStep step, const m04::LinearBackwardArgs& args);

/// dW = X dY: X used as stored, the transpose of dW = X^T dY forgotten.
void linear_backward_dw_without_transpose(m04::BiasGradStep step, const m04::LinearBackwardArgs& args);

/// dX = dY W: W used as stored (read as if it were N x K), the transpose of dX = dY W^T
/// forgotten.
void linear_backward_dx_without_transpose(m04::BiasGradStep step, const m04::LinearBackwardArgs& args);

struct PlantedLinearBackward {
  const char* name;  ///< gtest parameter name
  LinearBackwardFnPtr fn;
};

inline constexpr PlantedLinearBackward kPlantedLinearBackwards[] = {
    {"db_row_sums", linear_backward_db_row_sums},
    {"dw_without_transpose", linear_backward_dw_without_transpose},
    {"dx_without_transpose", linear_backward_dx_without_transpose},
};

}  // namespace course::planted
