#pragma once
/// @file impl.hpp
/// @brief One declaration, two implementations.
///
/// An op's public header declares its functions once with COURSE_DECLARE_FOR_BOTH_IMPLS;
/// they then exist in course::solution (solutions/, complete) and course::exercise
/// (exercises/, the learner's stubs). Tests, benchmarks and demos call either one
/// through the same signature.

/// Declare `...` in both course::solution and course::exercise. Use fully qualified
/// type names inside (::course::m01::ReduceArgs).
#define COURSE_DECLARE_FOR_BOTH_IMPLS(...)  \
  namespace course::solution { __VA_ARGS__ } \
  namespace course::exercise { __VA_ARGS__ }

#include <cstddef>
#include <ostream>

namespace course {
/// Describes one rung of an op's ladder: tests, benches, demos and docs all read this.
template <class Step>
struct StepInfo {
  Step step;
  const char* name;     ///< identifier used in test and benchmark names: "warp_shuffle"
  const char* summary;  ///< one line: what this step changes
};
/// True when entry i of a step table names enumerator i of its enum, for every entry:
/// tests, benches and docs index tables by step and list them in table order, so a
/// table out of enum order, or missing a step in the middle, fails at compile time:
///     static_assert(steps_in_enum_order(kSoftmaxSteps), "kSoftmaxSteps must list SoftmaxStep in order");
/// (A step appended to the enum but not to the table is not detected.)
template <class Step, std::size_t N>
constexpr bool steps_in_enum_order(const StepInfo<Step> (&table)[N]) {
  for (std::size_t i = 0; i < N; ++i)
    if (static_cast<std::size_t>(table[i].step) != i) return false;
  return true;
}

/// True when `columns`, a table of further per-step data that only one op has (e.g.
/// m03::kAttentionStepColumns: element type, supported features), has one row per row of
/// the step table `steps`, naming the same step in the same order. With
/// steps_in_enum_order(steps), row i of both describes enumerator i: a lookup is an index.
/// (The step table itself stays a StepInfo table: the bridge and the course tool read it.)
template <class Step, std::size_t N, class Row, std::size_t M>
constexpr bool columns_match_steps(const StepInfo<Step> (&steps)[N], const Row (&columns)[M]) {
  if (N != M) return false;
  for (std::size_t i = 0; i < N; ++i)
    if (columns[i].step != steps[i].step) return false;
  return true;
}

/// The name of `step` in its table ("?" for a value the table does not list): what an
/// op's step_name() returns, e.g. step_name_in(kSoftmaxSteps, step).
template <class Step, std::size_t N>
constexpr const char* step_name_in(const StepInfo<Step> (&table)[N], Step step) {
  for (std::size_t i = 0; i < N; ++i)
    if (table[i].step == step) return table[i].name;
  return "?";
}

/// GoogleTest prints a step parameter by its name.
template <class Step>
void PrintTo(const StepInfo<Step>& info, std::ostream* os) {
  *os << info.name;
}
}  // namespace course
