#pragma once
/// @file reductions_planted.hpp
/// @brief Deliberately wrong L2 norms and dot products (realistic mistakes) that the
/// reduction tests must reject. Each has the signature of impl::l2_norm / impl::dot
/// (the step argument is ignored: every bug is its own kernel) and validates its
/// arguments like the real ones, so only the kernel is wrong.

#include "module01/reductions.hpp"

namespace course::planted {

/// Signature shared with course::solution::l2_norm / dot and the exercise's.
using ReduceFn = void (*)(m01::ReduceStep, const m01::ReduceArgs&);

/// float4 loop without the scalar tail: the last n % 4 elements are never read.
void dropped_tail_l2_norm(m01::ReduceStep step, const m01::ReduceArgs& args);
void dropped_tail_dot(m01::ReduceStep step, const m01::ReduceArgs& args);

/// Shared-memory tree with no __syncthreads() ("a block runs in lock-step, like a
/// warp"): warps read their neighbours' slots before (or after) they are written.
/// A race: how often it shows depends on timing, so it is planted with one element
/// per thread (thousands of blocks at the larger lengths), where it shows almost always.
void missing_sync_l2_norm(m01::ReduceStep step, const m01::ReduceArgs& args);
void missing_sync_dot(m01::ReduceStep step, const m01::ReduceArgs& args);

/// Each block adds its total with a plain `*result += total` instead of atomicAdd:
/// concurrent read-modify-writes from different blocks lose updates.
void racy_result_l2_norm(m01::ReduceStep step, const m01::ReduceArgs& args);
void racy_result_dot(m01::ReduceStep step, const m01::ReduceArgs& args);

struct PlantedReduction {
  const char* name;  ///< gtest parameter name
  ReduceFn l2_norm;
  ReduceFn dot;
};

inline constexpr PlantedReduction kPlantedReductions[] = {
    {"dropped_tail", dropped_tail_l2_norm, dropped_tail_dot},
    {"missing_sync", missing_sync_l2_norm, missing_sync_dot},
    {"racy_result", racy_result_l2_norm, racy_result_dot},
};

}  // namespace course::planted
