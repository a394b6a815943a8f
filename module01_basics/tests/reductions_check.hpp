#pragma once
/// @file reductions_check.hpp
/// @brief The checking helper of the L2 norm and dot product, shared by the module's tests
/// (test_reductions.cpp) and its random-case tests (fuzz_basics.cpp).

#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/reference.hpp"
#include "module01/reductions.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace course::m01::checks {

/// The signature of impl::l2_norm, impl::dot and the planted bugs.
using ReduceFn = void (*)(ReduceStep, const ReduceArgs&);

enum class Op { l2_norm, dot };
inline const char* to_string(Op op) { return op == Op::l2_norm ? "l2_norm" : "dot"; }

/// Runs one reduction on the device and returns its result. The result slot (and the
/// workspace) can be poisoned (NaN) first, so a step that never writes it fails.
struct Runner {
  DeviceBuffer<float> x, y, result{1}, workspace;
  explicit Runner(const std::vector<float>& hx, const std::vector<float>& hy = {})
      : x(hx), y(hy), workspace(reduce_workspace_bytes(static_cast<std::int64_t>(hx.size())) / sizeof(float)) {}

  ReduceArgs args(bool with_y) {
    ReduceArgs a;
    a.x = x.data();
    a.y = with_y ? y.data() : nullptr;
    a.n = static_cast<std::int64_t>(x.size());
    a.result = result.data();
    a.workspace = workspace.data();
    a.workspace_bytes = workspace.bytes();
    return a;
  }
  void poison() {
    result.poison();
    workspace.poison();
  }
  float get() {
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    return result.download()[0];
  }
};

/// Tolerance of a reduction of n terms: tolerance_for(f32, n, term_scale). `term_scale` is
/// the size of the partial sums when the terms have random signs, sqrt(sum_i term_i^2):
/// a dot product that cancels to ~0 still carries the rounding error of those partial sums.
/// The module's tests, on data in [-1, 1), pass 1; 0 leaves only the relative budget (an
/// L2 norm: all terms positive, no cancellation).
inline Tolerance reduction_tolerance(std::int64_t n, double term_scale = 1.0) {
  return tolerance_for(DType::f32, std::max<std::int64_t>(n, 1), term_scale);
}

/// sqrt(sum (x_i y_i)^2): the term_scale of a dot product.
inline double dot_term_scale(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double t = static_cast<double>(x[i]) * static_cast<double>(y[i]);
    s += t * t;
  }
  return std::sqrt(s);
}

/// THE per-input check: runs `fn` on hx (and hy for the dot) with the result and the
/// workspace poisoned, and compares with the CPU reference (double accumulation) within
/// reduction_tolerance(n, term_scale). course::NotImplemented propagates.
inline CompareResult check_reduction(ReduceFn fn, Op op, ReduceStep step, const std::vector<float>& hx,
                                     const std::vector<float>& hy, double term_scale = 1.0) {
  const auto n = static_cast<std::int64_t>(hx.size());
  Runner r(hx, op == Op::dot ? hy : std::vector<float>{});
  r.poison();
  fn(step, r.args(op == Op::dot));
  const float got = r.get();
  const double want = op == Op::dot ? ref::dot(hx.data(), hy.data(), n) : ref::l2_norm(hx.data(), n);
  return compare_scalar(got, want, reduction_tolerance(n, term_scale));
}

}  // namespace course::m01::checks
