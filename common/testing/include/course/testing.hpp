#pragma once
/// @file testing.hpp
/// @brief GoogleTest glue: the GPU fixture, the exercise-stub skip, and comparison assertions.
///
/// Every GPU test source is compiled twice (see course_add_gpu_test): once with
/// COURSE_IMPL=solution and once with COURSE_IMPL=exercise. Tests call `impl::fn(...)`,
/// which resolves to course::solution::fn or course::exercise::fn.

#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace course::solution {}
namespace course::exercise {}
#ifdef COURSE_IMPL
namespace impl = ::course::COURSE_IMPL;
#endif

namespace course::testing {

/// Fixture for tests that launch kernels: skips (not fails) when no CUDA device is
/// usable, with the course's no-GPU wording (course::NoGpuReason): "no NVIDIA GPU found:
/// this GPU test skips", then the CUDA runtime's words on a second line. Also exposes a
/// per-test seed.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  /// Seed for this test ($COURSE_SEED or a hash of the test's full name); logged once.
  std::uint64_t seed() const { return seed_; }

 private:
  std::uint64_t seed_ = 0;
};

/// Device copy of a host vector placed `offset` elements into its allocation, so a test
/// can hand a kernel a pointer that is aligned to its element but not to 16 bytes.
template <class T>
class OffsetBuffer {
 public:
  OffsetBuffer(const std::vector<T>& host, std::int64_t offset)
      : buf_(host.size() + static_cast<std::size_t>(offset)), offset_(offset), n_(host.size()) {
    if (n_ > 0)
      COURSE_CUDA_CHECK(cudaMemcpy(ptr(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* ptr() { return buf_.data() + offset_; }
  std::size_t size() const { return n_; }
  /// The n_ elements from ptr() on (synchronous).
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0)
      COURSE_CUDA_CHECK(cudaMemcpy(host.data(), buf_.data() + offset_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  DeviceBuffer<T> buf_;
  std::int64_t offset_;
  std::size_t n_;
};

/// gtest assertion: passes when `r.ok()`, else prints r.report().
::testing::AssertionResult Matches(const CompareResult& r);

/// Seed for a test without the fixture (CPU tests).
std::uint64_t test_seed();

}  // namespace course::testing

/// Run `statement`; if it throws course::NotImplemented (an exercise stub not written
/// yet), mark the test SKIPPED with the message naming the file to edit.
#define COURSE_SKIP_IF_NOT_IMPLEMENTED(statement)                         \
  do {                                                                    \
    try {                                                                 \
      statement;                                                          \
    } catch (const ::course::NotImplemented& course_not_implemented_) {   \
      GTEST_SKIP() << course_not_implemented_.what();                     \
    } catch (const ::course::Unsupported& course_unsupported_) {          \
      GTEST_SKIP() << course_unsupported_.what();                         \
    }                                                                     \
  } while (0)

/// EXPECT that a CompareResult has no mismatches (prints the report otherwise).
#define EXPECT_MATCHES(compare_result) EXPECT_TRUE(::course::testing::Matches(compare_result))
#define ASSERT_MATCHES(compare_result) ASSERT_TRUE(::course::testing::Matches(compare_result))
