#include "course/compare.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace course {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}

Tolerance tolerance_for(DType dtype, std::int64_t reduction_length, double result_scale) {
  require_arg(reduction_length >= 1, "tolerance_for", "reduction_length", reduction_length, "must be >= 1");
  require_arg(result_scale >= 0.0 && std::isfinite(result_scale), "tolerance_for", "result_scale", result_scale,
              "must be finite and >= 0");
  // Unit roundoff of the *accumulation* (fp32 everywhere in the course) and of the
  // stored result (the output dtype). Random-sign sums grow like sqrt(k) * u; the
  // factor 8 covers reordering (trees, atomics, split accumulators).
  const double u_acc = 0x1p-24;  // fp32
  const double u_out = dtype == DType::f32 ? 0x1p-24 : dtype == DType::f16 ? 0x1p-11 : 0x1p-8;
  const double k = static_cast<double>(reduction_length);
  Tolerance t;
  t.rtol = 2.0 * u_out + 8.0 * std::sqrt(k) * u_acc;
  t.atol = t.rtol * std::max(result_scale, 1e-30);  // elements near zero (cancellation)
  if (dtype != DType::f32) t.atol = std::max(t.atol, 4.0 * u_out);
  return t;
}

template <class T>
double rms(const HostTensor<T>& t) {
  const std::int64_t n = t.numel();
  if (n == 0) return 0.0;
  double sum_sq = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(t.at(t.unravel(i)));
    sum_sq += v * v;
  }
  return std::sqrt(sum_sq / static_cast<double>(n));
}
template double rms(const HostTensor<float>&);
template double rms(const HostTensor<double>&);

namespace {

std::string format_index(const std::vector<std::int64_t>& idx, const std::vector<std::string>& names) {
  std::ostringstream os;
  os << "(";
  for (std::size_t k = 0; k < idx.size(); ++k) {
    if (k) os << ", ";
    if (k < names.size()) os << names[k] << "=";
    os << idx[k];
  }
  os << ")";
  return os.str();
}

/// Accumulates one element's comparison into `r`.
void check_element(CompareResult& r, const std::vector<std::int64_t>& idx, double got, double ref, Tolerance tol,
                   int max_report) {
  ++r.checked;
  const double err = std::fabs(got - ref);
  bool bad;
  if (!std::isfinite(ref)) {
    // A reference may legitimately be -inf (a fully masked logsumexp): demand the same.
    bad = !(got == ref);
    if (bad) r.worst_ratio = INFINITY;
  } else if (!std::isfinite(got)) {
    ++r.non_finite;
    bad = true;
    r.worst_ratio = INFINITY;
  } else {
    const double bound = tol.atol + tol.rtol * std::fabs(ref);
    bad = !(err <= bound);
    r.worst_ratio = std::max(r.worst_ratio, bound > 0 ? err / bound : (err > 0 ? INFINITY : 0.0));
    r.max_abs_error = std::max(r.max_abs_error, err);
    r.max_rel_error = std::max(r.max_rel_error, err / std::max(std::fabs(ref), 1e-30));
  }
  if (bad) {
    ++r.mismatches;
    if (static_cast<int>(r.first.size()) < max_report) r.first.push_back({idx, got, ref});
  }
}

}  // namespace

std::string CompareResult::report() const {
  std::ostringstream os;
  os.precision(7);
  if (checked == 0) {
    os << "nothing was compared (empty tensors)";
    return os.str();
  }
  os << mismatches << " of " << checked << " elements outside tolerance";
  if (non_finite) os << " (" << non_finite << " NaN/Inf)";
  os << "; max |err| = " << max_abs_error << ", max rel err = " << max_rel_error
     << ", worst |err|/bound = " << worst_ratio;
  for (const auto& m : first)
    os << "\n  at " << format_index(m.index, dim_names) << ": got " << m.got << ", want " << m.ref
       << " (|err| = " << std::fabs(m.got - m.ref) << ")";
  if (mismatches > static_cast<std::int64_t>(first.size())) os << "\n  ...";
  return os.str();
}

template <class T, class R>
CompareResult compare(const HostTensor<T>& got, const HostTensor<R>& ref, Tolerance tol,
                      std::vector<std::string> dim_names, int max_report) {
  require_arg(got.shape() == ref.shape(), "compare", "got.shape()", shape_string(got.shape()),
              ("must equal ref.shape() " + shape_string(ref.shape())).c_str());
  CompareResult r;
  r.dim_names = std::move(dim_names);
  const std::int64_t n = got.numel();
  if (n == 0) return r;
  // Walk the multi-index like an odometer, updating both storage offsets
  // incrementally (no allocation per element: outputs can have 10^8 elements).
  const int rank = got.rank();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(rank), 0);
  std::int64_t og = 0, orf = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got.data()[og]);
    const double e = static_cast<double>(ref.data()[orf]);
    check_element(r, idx, g, e, tol, max_report);
    for (int k = rank - 1; k >= 0; --k) {
      og += got.stride(k);
      orf += ref.stride(k);
      if (++idx[static_cast<std::size_t>(k)] < got.dim(k)) break;
      og -= got.stride(k) * got.dim(k);
      orf -= ref.stride(k) * ref.dim(k);
      idx[static_cast<std::size_t>(k)] = 0;
    }
  }
  return r;
}

template CompareResult compare(const HostTensor<float>&, const HostTensor<float>&, Tolerance,
                               std::vector<std::string>, int);
template CompareResult compare(const HostTensor<float>&, const HostTensor<double>&, Tolerance,
                               std::vector<std::string>, int);
template CompareResult compare(const HostTensor<double>&, const HostTensor<double>&, Tolerance,
                               std::vector<std::string>, int);

namespace {
template <class R>
CompareResult compare_flat(const std::vector<float>& got, const std::vector<R>& ref, Tolerance tol,
                           int max_report) {
  require_arg(got.size() == ref.size(), "compare", "got.size()", got.size(), "must equal ref.size()");
  CompareResult r;
  r.dim_names = {"i"};
  for (std::size_t i = 0; i < got.size(); ++i)
    check_element(r, {static_cast<std::int64_t>(i)}, got[i], static_cast<double>(ref[i]), tol, max_report);
  return r;
}
}  // namespace

CompareResult compare(const std::vector<float>& got, const std::vector<double>& ref, Tolerance tol,
                      int max_report) {
  return compare_flat(got, ref, tol, max_report);
}
CompareResult compare(const std::vector<float>& got, const std::vector<float>& ref, Tolerance tol,
                      int max_report) {
  return compare_flat(got, ref, tol, max_report);
}

CompareResult compare_scalar(double got, double ref, Tolerance tol) {
  CompareResult r;
  check_element(r, {}, got, ref, tol, 1);
  return r;
}

}  // namespace course
