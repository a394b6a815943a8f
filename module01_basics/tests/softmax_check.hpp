#pragma once
/// @file softmax_check.hpp
/// @brief The checking helper of softmax, shared by the module's tests (test_softmax.cpp)
/// and its random-case tests (fuzz_basics.cpp).

#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module01/softmax.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace course::m01::checks {

/// Anything with the op's signature: impl::softmax or a planted bug.
using SoftmaxFn = std::function<void(SoftmaxStep, const SoftmaxArgs&)>;

/// The padding between rows of x holds this: a kernel that reads past `cols`
/// takes it into its max and sum and its results move.
constexpr float kPadSentinel = 1000.f;

/// One test input: a rows x cols matrix with row strides, values uniform in [lo, hi).
struct Case {
  std::int64_t rows = 1, cols = 1;
  int dim = 1;
  std::int64_t ldx = 0, ldy = 0;  ///< 0: contiguous (= cols)
  double lo = -4.0, hi = 4.0;
  bool in_place = false;          ///< y = x (then ldy = ldx)
  std::int64_t offset = 0;        ///< x and y start this many floats into their buffers (1-3: not 16-byte aligned)
  double masked = 0.0;            ///< this fraction of x is -inf (a masked score); slice element 0 never is

  std::int64_t row_stride_x() const { return ldx > 0 ? ldx : cols; }
  std::int64_t row_stride_y() const { return in_place ? row_stride_x() : (ldy > 0 ? ldy : cols); }
  std::string str() const {
    std::ostringstream os;
    os << rows << "x" << cols << " dim=" << dim << " ldx=" << row_stride_x() << " ldy=" << row_stride_y()
       << " values in [" << lo << ", " << hi << ")" << (in_place ? " in place" : "");
    if (offset) os << " offset=" << offset;
    if (masked > 0) os << " masked=" << masked;
    return os.str();
  }
};

struct Outcome {
  CompareResult cmp;            ///< against course::ref::softmax; includes padding writes
  std::int64_t padding_writes = 0;
  double worst_sum_error = 0;   ///< max over slices of |sum(y) - 1|
  HostTensor<float> y;
  bool ok() const { return cmp.ok() && padding_writes == 0 && worst_sum_error <= 1e-4; }
};

using testing::bits_of;

/// The checking helper every test (and the planted-bug test) uses: builds the input,
/// poisons y (NaN, padding included), runs `fn`, and checks values against the CPU
/// reference (double) within tolerance_for(f32, slice length), the padding (never
/// written), and that every slice sums to 1. Throws course::NotImplemented through for
/// exercise stubs.
inline Outcome run_case(const SoftmaxFn& fn, SoftmaxStep step, const Case& c, std::uint64_t seed) {
  const std::int64_t ldx = c.row_stride_x(), ldy = c.row_stride_y();
  HostTensor<float> x({c.rows, c.cols}, {ldx, 1});
  std::fill(x.storage().begin(), x.storage().end(), kPadSentinel);
  // Random values straight into storage (fill_random walks multi-indices: slow for 16M).
  auto values = random_vector(static_cast<std::size_t>(c.rows * c.cols), seed, static_cast<float>(c.lo),
                              static_cast<float>(c.hi));
  if (c.masked > 0) {
    const auto coin = random_vector(values.size(), seed ^ 0x5bd1e995u, 0.f, 1.f);
    for (std::int64_t r = 0; r < c.rows; ++r)
      for (std::int64_t j = 0; j < c.cols; ++j) {
        const bool first_of_slice = c.dim == 1 ? j == 0 : r == 0;
        const auto e = static_cast<std::size_t>(r * c.cols + j);
        if (!first_of_slice && coin[e] < c.masked) values[e] = -std::numeric_limits<float>::infinity();
      }
  }
  for (std::int64_t r = 0; r < c.rows; ++r)
    std::copy_n(values.begin() + r * c.cols, c.cols, x.storage().begin() + r * ldx);

  HostTensor<float> y({c.rows, c.cols}, {ldy, 1});
  testing::OffsetBuffer<float> dx(x.storage(), c.offset);
  float poison;  // all bits set: a NaN no kernel computes, so padding writes of NaN show too
  const std::uint32_t poison_bits = 0xFFFFFFFFu;
  std::memcpy(&poison, &poison_bits, sizeof poison);
  testing::OffsetBuffer<float> dy(std::vector<float>(c.in_place ? 0 : y.storage().size(), poison), c.offset);
  const std::size_t ws_bytes = softmax_workspace_bytes(step, c.rows, c.cols, c.dim);
  DeviceBuffer<float> ws((ws_bytes + sizeof(float) - 1) / sizeof(float));
  ws.poison();

  SoftmaxArgs a;
  a.x = dx.ptr();
  a.y = c.in_place ? dx.ptr() : dy.ptr();
  a.rows = c.rows;
  a.cols = c.cols;
  a.ldx = ldx;
  a.ldy = ldy;
  a.dim = c.dim;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  y.storage() = c.in_place ? dx.download() : dy.download();

  Outcome out;
  const HostTensor<double> ref = course::ref::softmax(x.cast<double>(), c.dim);
  const std::int64_t length = c.dim == 1 ? c.cols : c.rows;
  out.cmp = compare(y, ref, tolerance_for(DType::f32, length), {"i", "j"});

  // Padding (columns cols..ld-1 of every row but the last) must be untouched.
  out.padding_writes =
      testing::record_padding_writes(y, c.in_place ? bits_of(kPadSentinel) : poison_bits, out.cmp);

  // Every slice sums to 1.
  const std::int64_t slices = c.dim == 1 ? c.rows : c.cols;
  for (std::int64_t s = 0; s < slices; ++s) {
    double sum = 0;
    for (std::int64_t i = 0; i < length; ++i) sum += c.dim == 1 ? y({s, i}) : y({i, s});
    const double err = std::fabs(sum - 1.0);
    if (!(err <= out.worst_sum_error)) out.worst_sum_error = std::isnan(err) ? INFINITY : err;
  }
  out.y = std::move(y);
  return out;
}

inline ::testing::AssertionResult Accepted(const Outcome& o) {
  if (o.ok()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << o.cmp.report();
  if (o.padding_writes) failure << "\n  " << o.padding_writes << " writes into the row padding (j >= cols)";
  failure << "\n  worst |sum(y) - 1| over slices = " << o.worst_sum_error << " (allowed 1e-4)";
  return failure;
}

}  // namespace course::m01::checks
