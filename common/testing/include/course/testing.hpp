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

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
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

/// The bit pattern of a float (to tell one NaN from another: poison from a computed NaN).
inline std::uint32_t bits_of(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

/// The row padding of a rows x cols output with row stride ld (t's stride(0)) -- columns
/// cols .. ld - 1 of every row but the last -- must still hold `pad_bits` (the poison, or
/// the input's sentinel when the output overwrote its input). Every element that does
/// not is added to `cmp` as a mismatch (the first 8 listed at (r, j), j >= cols, wanted
/// NaN); returns how many.
inline std::int64_t record_padding_writes(const HostTensor<float>& t, std::uint32_t pad_bits, CompareResult& cmp) {
  const std::int64_t rows = t.dim(0), cols = t.dim(1), ld = t.stride(0);
  std::int64_t writes = 0;
  for (std::int64_t r = 0; r + 1 < rows; ++r)
    for (std::int64_t j = cols; j < ld; ++j) {
      const float v = t.storage()[static_cast<std::size_t>(r * ld + j)];
      if (bits_of(v) == pad_bits) continue;
      ++writes;
      ++cmp.mismatches;
      if (cmp.first.size() < 8) cmp.first.push_back({{r, j}, v, std::nan("")});  // j >= cols: padding
    }
  return writes;
}

/// Runs `call`, which must throw course::InvalidArgument whose message contains every
/// string of `needles` (the argument's name and value as the message quotes them:
/// "'rows' = -1"). Other exceptions propagate.
template <class Call>
void expect_invalid_argument(Call&& call, const std::vector<std::string>& needles) {
  try {
    call();
    ADD_FAILURE() << "expected InvalidArgument mentioning " << needles.front();
  } catch (const InvalidArgument& e) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "'" << needle << "' not in: " << e.what();
  }
}
template <class Call>
void expect_invalid_argument(Call&& call, const std::string& needle) {
  expect_invalid_argument(std::forward<Call>(call), std::vector<std::string>{needle});
}

/// One case of a bad-argument test: how it spoils valid arguments, and the text the
/// rejection must contain.
template <class Args>
struct BadArgument {
  std::function<void(Args&)> spoil;
  std::string needle;
};

/// For each case: fresh valid arguments from `good()`, spoiled by the case; `call(args)`
/// must throw InvalidArgument whose message contains the case's needle.
template <class Args, class Good, class Call>
void expect_each_rejected(Good good, Call call, const std::vector<BadArgument<Args>>& cases) {
  for (const BadArgument<Args>& c : cases) {
    SCOPED_TRACE(c.needle);
    Args a = good();
    c.spoil(a);
    expect_invalid_argument([&] { call(a); }, c.needle);
  }
}

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
