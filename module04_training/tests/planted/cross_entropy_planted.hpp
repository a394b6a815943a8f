#pragma once
/// @file cross_entropy_planted.hpp
/// @brief Deliberately wrong fused cross-entropy kernels. test_cross_entropy.cpp runs them
/// through the same checking helper as the real steps and asserts that it rejects every
/// one: proof that the tests can fail. Each has the op's signature; `step` is ignored.

#include "module04/cross_entropy.hpp"

namespace course::planted {

/// The planted kernels' shared body with no bug: the harness must ACCEPT it (so a
/// rejection below is the bug's, not the body's).
void cross_entropy_correct(m04::CrossEntropyStep step, const m04::FusedCrossEntropyArgs& args);

/// lse = log(sum exp(x)) without subtracting the row max: exp overflows fp32 from x = 88.7
/// (inf / inf = NaN), and underflows for very negative rows.
void cross_entropy_no_max_subtraction(m04::CrossEntropyStep step, const m04::FusedCrossEntropyArgs& args);

/// dlogits = (p - onehot) * dloss: the mean's 1 / N forgotten (the gradient of the SUM).
void cross_entropy_not_divided_by_n(m04::CrossEntropyStep step, const m04::FusedCrossEntropyArgs& args);

/// N = rows: ignored rows counted in num_valid, the mean and the gradient's scale.
void cross_entropy_ignored_counted(m04::CrossEntropyStep step, const m04::FusedCrossEntropyArgs& args);

/// dlogits = softmax * dloss / N: the one-hot subtraction at the target forgotten (rows
/// then sum to dloss / N instead of 0).
void cross_entropy_missing_one_hot(m04::CrossEntropyStep step, const m04::FusedCrossEntropyArgs& args);

}  // namespace course::planted
