#pragma once
/// @file cpu_test_util.hpp
/// @brief Small helpers shared by the CPU tests of common/.

#include "course/error.hpp"
#include "course/random.hpp"
#include "course/tensor.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace course::testing {

/// A contiguous 2-D tensor from rows of values.
template <class T = double>
HostTensor<T> matrix(const std::vector<std::vector<double>>& rows) {
  const auto r = static_cast<std::int64_t>(rows.size());
  const auto c = r ? static_cast<std::int64_t>(rows[0].size()) : 0;
  HostTensor<T> t({r, c});
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) t({i, j}) = static_cast<T>(rows[i].at(j));
  return t;
}

/// Copies the logical values of `src` into `dst` (same shape, any strides).
template <class T, class U>
void copy_values(const HostTensor<T>& src, HostTensor<U>& dst) {
  ASSERT_EQ(src.shape(), dst.shape());
  src.for_each_index([&](const std::vector<std::int64_t>& idx) { dst.at(idx) = static_cast<U>(src.at(idx)); });
}

/// A double tensor of `shape` filled uniformly in [lo, hi) from `seed`.
inline HostTensor<double> random_double(const Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  HostTensor<double> t(shape);
  fill_random(t, seed, lo, hi);
  return t;
}

/// Logical values of `t`, row-major (the vector a gradient checker perturbs).
inline std::vector<double> flatten(const HostTensor<double>& t) {
  std::vector<double> v;
  t.for_each_index([&](const std::vector<std::int64_t>& i) { v.push_back(t.at(i)); });
  return v;
}
/// A copy of `like` (same shape and strides) holding the values `v`.
inline HostTensor<double> unflatten(const HostTensor<double>& like, const std::vector<double>& v) {
  HostTensor<double> t = like;
  std::size_t k = 0;
  t.for_each_index([&](const std::vector<std::int64_t>& i) { t.at(i) = v[k++]; });
  return t;
}
/// sum(W * Y) over logical indices: a scalar loss whose gradient with respect to Y is W.
inline double weighted_sum(const HostTensor<double>& w, const HostTensor<double>& y) {
  double s = 0;
  y.for_each_index([&](const std::vector<std::int64_t>& i) { s += w.at(i) * y.at(i); });
  return s;
}

}  // namespace course::testing

/// Expects `statement` to throw course::InvalidArgument whose what() contains `needle`.
#define EXPECT_INVALID_ARGUMENT(statement, needle)                                                 \
  do {                                                                                             \
    bool course_threw_ = false;                                                                    \
    try {                                                                                          \
      statement;                                                                                   \
    } catch (const ::course::InvalidArgument& course_e_) {                                         \
      course_threw_ = true;                                                                        \
      EXPECT_NE(std::string(course_e_.what()).find(needle), std::string::npos)                     \
          << "message: " << course_e_.what() << "\n  should contain: " << (needle);                \
    }                                                                                              \
    EXPECT_TRUE(course_threw_) << #statement " did not throw course::InvalidArgument";            \
  } while (0)
