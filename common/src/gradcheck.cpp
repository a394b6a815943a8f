/// @file gradcheck.cpp
/// @brief Finite-difference gradients, to test the analytic backward references.
///
/// Central differences have truncation error O(h^2) and rounding error ~eps*|f|/h;
/// in double with h = 1e-6 both are around 1e-10 for unit-size inputs, so an
/// analytic gradient that is right agrees to ~1e-9 and one that is wrong does not.

#include "course/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace course::ref {

std::vector<double> numerical_gradient(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x, double h) {
  require_arg(static_cast<bool>(f), "numerical_gradient", "f", "empty std::function", "must be callable");
  require_arg(std::isfinite(h) && h > 0.0, "numerical_gradient", "h", h, "must be finite and > 0");
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    // Divide by the step actually taken (x+h and x-h are rounded), not by 2h.
    const double xp = xi + h, xm = xi - h;
    x[i] = xp;
    const double fp = f(x);
    x[i] = xm;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (xp - xm);
  }
  return g;
}

GradCheckResult check_gradient(const std::function<double(const std::vector<double>&)>& f,
                               const std::vector<double>& x, const std::vector<double>& analytic, double h,
                               double atol, double rtol) {
  const char* fn = "check_gradient";
  require_arg(!x.empty(), fn, "x.size()", x.size(), "must be > 0 (nothing to check)");
  require_arg(analytic.size() == x.size(), fn, "analytic.size()", analytic.size(),
              ("must equal x.size() = " + std::to_string(x.size())).c_str());
  require_arg(std::isfinite(atol) && atol >= 0.0, fn, "atol", atol, "must be finite and >= 0");
  require_arg(std::isfinite(rtol) && rtol >= 0.0, fn, "rtol", rtol, "must be finite and >= 0");
  const std::vector<double> num = numerical_gradient(f, x, h);
  GradCheckResult r;
  r.ok = true;
  double worst = -1.0;  // largest err / allowed; the element reported as worst_index
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double a = analytic[i], n = num[i];
    const double err = std::fabs(a - n);
    const double allowed = atol + rtol * std::fabs(n);
    const bool finite = std::isfinite(a) && std::isfinite(n);
    const bool good = finite && err <= allowed;
    double badness = !finite ? std::numeric_limits<double>::infinity()
                             : allowed > 0.0 ? err / allowed : (err > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
    if (!good) r.ok = false;
    if (finite) {
      r.max_abs_error = std::max(r.max_abs_error, err);
      r.max_rel_error = std::max(r.max_rel_error, err / std::max(std::fabs(a) + std::fabs(n), 1e-12));
    } else {
      r.max_abs_error = r.max_rel_error = std::numeric_limits<double>::infinity();
    }
    if (badness > worst) {
      worst = badness;
      r.worst_index = static_cast<std::int64_t>(i);
    }
  }
  return r;
}

}  // namespace course::ref
