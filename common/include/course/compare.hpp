#pragma once
/// @file compare.hpp
/// @brief Comparing a result with a reference: atol + rtol*|ref|, NaN/Inf never pass,
/// and a report of the first mismatches with their multi-index.

#include "course/tensor.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace course {

enum class DType { f32, bf16, f16 };
const char* to_string(DType dtype);

/// |got - ref| <= atol + rtol * |ref|, element-wise.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};

/// Tolerance for a result computed in `dtype` whose elements each accumulate
/// `reduction_length` products (1 for element-wise ops). Rounding error of a sum of
/// k terms grows like sqrt(k) * eps for random-sign data; we allow a safety factor.
///
/// `result_scale` is the typical magnitude of the result (e.g. rms() of the
/// reference). A sum's rounding error is relative to the size of its terms, not of
/// its value: an element that cancels to ~0 still carries the error of a typical
/// element, so atol = rtol * result_scale.
Tolerance tolerance_for(DType dtype, std::int64_t reduction_length = 1, double result_scale = 1.0);

/// Root mean square of a tensor's logical elements (0 for an empty tensor).
template <class T>
double rms(const HostTensor<T>& t);

struct Mismatch {
  std::vector<std::int64_t> index;  ///< multi-index into the logical shape
  double got = 0.0;
  double ref = 0.0;
};

struct CompareResult {
  std::int64_t checked = 0;       ///< elements compared
  std::int64_t mismatches = 0;    ///< outside tolerance (NaN/Inf included)
  std::int64_t non_finite = 0;    ///< NaN or Inf in `got` (where ref is finite)
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;     ///< |got-ref| / max(|ref|, tiny)
  /// Largest |got-ref| / (atol + rtol*|ref|) over the elements: <= 1 passes, and how far
  /// below 1 it stays says how much of the error budget a kernel uses (inf for NaN/Inf).
  double worst_ratio = 0.0;
  std::vector<Mismatch> first;    ///< up to `max_report` mismatches, in order
  std::vector<std::string> dim_names;  ///< optional names of the indices, e.g. {"b","h","i","j"}

  bool ok() const noexcept { return mismatches == 0 && checked > 0; }
  /// Human report: counts, max errors, and "at (b=0, h=1, i=2, j=7): got nan, want 0.25".
  std::string report() const;
};

/// Compare `got` with `ref` element-wise over their (equal) logical shapes.
/// Strides may differ: elements are matched by multi-index.
template <class T, class R>
CompareResult compare(const HostTensor<T>& got, const HostTensor<R>& ref, Tolerance tol,
                      std::vector<std::string> dim_names = {}, int max_report = 8);

/// Compare flat vectors (1-D).
CompareResult compare(const std::vector<float>& got, const std::vector<double>& ref, Tolerance tol,
                      int max_report = 8);
CompareResult compare(const std::vector<float>& got, const std::vector<float>& ref, Tolerance tol,
                      int max_report = 8);

/// Compare scalars (a reduction's result).
CompareResult compare_scalar(double got, double ref, Tolerance tol);

}  // namespace course
