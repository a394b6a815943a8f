#include "course/reference.hpp"
#include <cmath>
namespace course::ref {
double l2_norm(const float* x, std::int64_t n) {
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return std::sqrt(s);
}
double dot(const float* x, const float* y, std::int64_t n) {
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += double(x[i]) * y[i];
  return s;
}
}
