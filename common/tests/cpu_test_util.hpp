#pragma once
/// @file cpu_test_util.hpp
/// @brief Small helpers shared by the CPU tests of common/.

#include "course/error.hpp"
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
