#pragma once
/// @file softmax_planted.hpp
/// @brief Deliberately wrong softmax kernels. test_softmax.cpp runs them through the
/// same checking helper as the real steps and asserts that it rejects every one:
/// proof that the tests can fail. Each has the op's signature; `step` is ignored.

#include "module01/softmax.hpp"

namespace course::planted {

/// exp(x) / sum(exp(x)) without subtracting the max: right for small inputs, but
/// exp(90) overflows fp32 (max ~ e^88.7) and inf / inf = NaN.
void softmax_no_max_subtraction(m01::SoftmaxStep step, const m01::SoftmaxArgs& args);

/// The online update with the max replaced BEFORE the old sum is rescaled
/// (m = m_new; s = s * exp(m - m_new) + ...): the rescale factor is exp(0) = 1 and the
/// sum is too large whenever the max grows.
void softmax_max_replaced_first(m01::SoftmaxStep step, const m01::SoftmaxArgs& args);

/// Works in groups of 4 and loops over length / 4 groups: the last length % 4
/// elements are neither counted nor written (a dropped vectorization tail).
void softmax_dropped_tail(m01::SoftmaxStep step, const m01::SoftmaxArgs& args);

/// Ignores args.dim and always normalizes rows: right for dim = 1 only.
void softmax_wrong_dim(m01::SoftmaxStep step, const m01::SoftmaxArgs& args);

/// cluster_columns' mapping for dim = 0 (a 32-column strip split down the rows between
/// the blocks of a thread-block cluster) with the DSMEM exchange skipped: each block
/// normalizes its rows by its OWN (max, sum), so a column split over C blocks sums to C.
/// Needs sm_90 (throws course::Unsupported elsewhere); dim = 1 runs a correct row kernel.
void softmax_cluster_no_exchange(m01::SoftmaxStep step, const m01::SoftmaxArgs& args);

}  // namespace course::planted
