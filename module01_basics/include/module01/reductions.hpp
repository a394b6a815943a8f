#pragma once
/// @file reductions.hpp
/// @brief Module 1 API: L2 norm and dot product of fp32 vectors, as a ladder of steps.
///
/// Both are reductions: a sum over n terms (x_i^2 or x_i*y_i) that many threads
/// must combine. They share every kernel; only the per-element term differs.

#include "course/error.hpp"
#include "course/impl.hpp"
#include "course/validate.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace course::m01 {

/// The reduction ladder, in teaching order.
enum class ReduceStep {
  atomic_naive,   ///< every thread atomically adds its term to one global float
  smem_tree,      ///< per-block tree in shared memory, one atomic per block
  warp_shuffle,   ///< warp-level __shfl_down_sync, shared memory only between warps
  vectorized,     ///< float4 grid-stride loads, one partial per block, deterministic final pass
};

inline constexpr StepInfo<ReduceStep> kReduceSteps[] = {
    {ReduceStep::atomic_naive, "atomic_naive", "one atomicAdd per element into a single float"},
    {ReduceStep::smem_tree, "smem_tree", "block-wide tree reduction in shared memory, one atomic per block"},
    {ReduceStep::warp_shuffle, "warp_shuffle", "warp shuffles replace most shared-memory round trips"},
    {ReduceStep::vectorized, "vectorized",
     "float4 grid-stride loads, per-block partials, deterministic second pass"},
};
static_assert(steps_in_enum_order(kReduceSteps), "kReduceSteps must list ReduceStep in enum order");

/// The lesson's word on a step whose result may miss the fp32 tolerance by design ("" for
/// the others): the demos print it where that happens, so nobody takes it for a broken kernel.
inline const char* reduce_step_numerics(ReduceStep step) {
  return step == ReduceStep::atomic_naive
             ? "atomic_naive adds every term into ONE fp32 accumulator, and once the running sum's ulp "
               "exceeds a term, additions round away: the norm of 2^24 values loses ~1%, of 2^26 ~13%. "
               "That is the lesson (module01_basics/README.md, step 1 of the reductions), not a broken "
               "kernel; the later steps keep many partial sums and stay within the tolerance."
             : "";
}

/// Device-side arguments of l2_norm and dot. All pointers are device pointers.
struct ReduceArgs {
  const float* x = nullptr;  ///< n elements
  const float* y = nullptr;  ///< n elements (dot only; must be null for l2_norm)
  std::int64_t n = 0;        ///< may be 0 (result 0)
  float* result = nullptr;   ///< one float: the norm or the dot product (not inside x, y or workspace)
  float* workspace = nullptr;       ///< scratch for per-block partials (not overlapping x, y or result)
  std::size_t workspace_bytes = 0;  ///< at least reduce_workspace_bytes(n)
  cudaStream_t stream = nullptr;
};

/// Most blocks any reduction step launches for its partials.
inline constexpr int kMaxReduceBlocks = 1024;

/// Bytes of workspace every step accepts for a reduction of n elements.
inline std::size_t reduce_workspace_bytes(std::int64_t /*n*/) {
  return kMaxReduceBlocks * sizeof(float);
}

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_reduce_args(const ReduceArgs& a, const char* fn, bool needs_y) {
  require_arg(a.n >= 0, fn, "n", a.n, "must be >= 0");
  require_not_null(a.result, fn, "result");
  if (a.n > 0) require_not_null(a.x, fn, "x");
  if (needs_y && a.n > 0) require_not_null(a.y, fn, "y");
  if (!needs_y) require_arg(a.y == nullptr, fn, "y", a.y, "must be null for l2_norm (it reads only x)");
  require_aligned(a.x, 16, fn, "x");  // the vectorized step reads float4
  if (needs_y) require_aligned(a.y, 16, fn, "y");
  require_arg(a.workspace_bytes >= reduce_workspace_bytes(a.n) || a.n == 0, fn, "workspace_bytes",
              a.workspace_bytes, "must be >= reduce_workspace_bytes(n)");
  if (a.n == 0) return;  // nothing is read: x, y and workspace are never touched
  require_not_null(a.workspace, fn, "workspace");
  // What is written (result, the workspace's partials) must not overlap what is read:
  // the steps zero *result (and write partials) while other blocks still read x and y.
  using validate::ranges_intersect;
  const std::size_t in_bytes = static_cast<std::size_t>(a.n) * sizeof(float);
  const std::size_t ws_bytes = reduce_workspace_bytes(a.n);
  const auto* result = static_cast<const void*>(a.result);
  const auto* ws = static_cast<const void*>(a.workspace);
  require_arg(!ranges_intersect(result, sizeof(float), a.x, in_bytes), fn, "result", result,
              validate::msg("lies inside x (", a.n, " floats from ", static_cast<const void*>(a.x),
                            "): *result is written while x is read"));
  if (needs_y)
    require_arg(!ranges_intersect(result, sizeof(float), a.y, in_bytes), fn, "result", result,
                validate::msg("lies inside y (", a.n, " floats from ", static_cast<const void*>(a.y),
                              "): *result is written while y is read"));
  require_arg(!ranges_intersect(ws, ws_bytes, a.x, in_bytes), fn, "workspace", ws,
              "overlaps x: the per-block partials are written while x is read");
  if (needs_y)
    require_arg(!ranges_intersect(ws, ws_bytes, a.y, in_bytes), fn, "workspace", ws,
                "overlaps y: the per-block partials are written while y is read");
  require_arg(!ranges_intersect(ws, ws_bytes, result, sizeof(float)), fn, "workspace", ws,
              "overlaps result: they are written by different blocks");
}

}  // namespace course::m01

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// ||x||_2 into *args.result (asynchronous on args.stream).
    void l2_norm(::course::m01::ReduceStep step, const ::course::m01::ReduceArgs& args);
    /// x . y into *args.result (asynchronous on args.stream).
    void dot(::course::m01::ReduceStep step, const ::course::m01::ReduceArgs& args);)
