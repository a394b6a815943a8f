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

#include <ostream>

namespace course {
/// Describes one rung of an op's ladder: tests, benches, demos and docs all read this.
template <class Step>
struct StepInfo {
  Step step;
  const char* name;     ///< identifier used in test and benchmark names: "warp_shuffle"
  const char* summary;  ///< one line: what this step changes
};
/// GoogleTest prints a step parameter by its name.
template <class Step>
void PrintTo(const StepInfo<Step>& info, std::ostream* os) {
  *os << info.name;
}
}  // namespace course
