#pragma once
/// @file softmax_backward_check.hpp
/// @brief The checking helper of the softmax backward, shared by the module's tests
/// (test_softmax_backward.cpp) and its random-case tests (fuzz_backward.cpp).

#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module04/softmax_backward.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace course::m04::softmax_checks {

/// Anything with the op's signature: impl::softmax_backward or a planted bug.
using SoftmaxBackwardFn = std::function<void(SoftmaxBackwardStep, const SoftmaxBackwardArgs&)>;

/// The padding between rows of y and dy holds this: a kernel that reads past `cols`
/// takes it into D and every dx of that slice moves.
constexpr float kPadSentinel = 1000.f;

/// One test input: y = softmax(random logits) along dim (a real forward output), dy random
/// (or constant), all rows x cols with their own row strides.
struct Case {
  std::int64_t rows = 1, cols = 1;
  int dim = 1;
  std::int64_t ldy = 0, lddy = 0, lddx = 0;  ///< 0: contiguous (= cols)
  double logit_range = 4.0;                  ///< logits uniform in [-range, range)
  bool in_place = false;                     ///< dx = dy (then lddx = lddy)
  std::int64_t offset = 0;                   ///< elements between each buffer's start and its matrix
  bool constant_dy = false;                  ///< dy = 0.75 everywhere: dx must be ~0
  double dy_lo = -1.0, dy_hi = 1.0;          ///< dy uniform in [dy_lo, dy_hi) (unless constant)

  std::int64_t stride_y() const { return ldy > 0 ? ldy : cols; }
  std::int64_t stride_dy() const { return lddy > 0 ? lddy : cols; }
  std::int64_t stride_dx() const { return in_place ? stride_dy() : (lddx > 0 ? lddx : cols); }
  std::string str() const {
    std::ostringstream os;
    os << rows << "x" << cols << " dim=" << dim << " ldy=" << stride_y() << " lddy=" << stride_dy()
       << " lddx=" << stride_dx() << " logits in [-" << logit_range << ", " << logit_range << ")"
       << (offset ? " offset=" + std::to_string(offset) : "") << (in_place ? " in place (dx = dy)" : "")
       << (constant_dy ? " constant dy" : "");
    if (dy_lo != -1.0 || dy_hi != 1.0) os << " dy in [" << dy_lo << ", " << dy_hi << ")";
    return os.str();
  }
};

struct Outcome {
  CompareResult cmp;                  ///< against course::ref::softmax_backward; includes padding writes
  std::int64_t padding_writes = 0;
  double worst_slice_sum_ratio = 0;   ///< max over slices of |sum(dx)| / allowed; <= 1 passes
  bool ok() const { return cmp.ok() && padding_writes == 0 && worst_slice_sum_ratio <= 1.0; }
};

using testing::bits_of;

/// A rows x cols float matrix with row stride ld inside a buffer that starts `offset`
/// elements earlier; everything that is not an element (offset, padding) holds kPadSentinel.
inline std::vector<float> padded_storage(const std::vector<float>& values, std::int64_t rows, std::int64_t cols,
                                  std::int64_t ld, std::int64_t offset) {
  std::vector<float> s(static_cast<std::size_t>(offset + (rows - 1) * ld + cols), kPadSentinel);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(values.begin() + r * cols, cols, s.begin() + offset + r * ld);
  return s;
}

/// The checking helper every test (and the planted-bug test) uses: builds the input,
/// poisons dx (NaN, padding included), runs `fn`, and checks
///  - every element against the CPU reference (double) with the fp32 tolerance for a
///    reduction of the slice length (see the comment at `scale`);
///  - the row padding of dx (never written);
///  - that every slice of dx sums to ~0 (sum_i y_i (dy_i - D) = D (1 - sum_i y_i) = 0).
/// Throws course::NotImplemented through for exercise stubs.
inline Outcome run_case(const SoftmaxBackwardFn& fn, SoftmaxBackwardStep step, const Case& c, std::uint64_t seed) {
  const std::int64_t n = c.rows * c.cols;
  const std::int64_t ldy = c.stride_y(), lddy = c.stride_dy(), lddx = c.stride_dx();

  // y: a real softmax (double, then rounded to fp32) of fresh random logits.
  HostTensor<double> logits({c.rows, c.cols});
  {
    const auto v = course::random_vector(static_cast<std::size_t>(n), seed, static_cast<float>(-c.logit_range),
                                         static_cast<float>(c.logit_range));
    std::copy(v.begin(), v.end(), logits.storage().begin());
  }
  const HostTensor<double> y_exact = course::ref::softmax(logits, c.dim);  // contiguous
  std::vector<float> y_values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) y_values[i] = static_cast<float>(y_exact.storage()[i]);
  std::vector<float> dy_values = c.constant_dy ? std::vector<float>(static_cast<std::size_t>(n), 0.75f)
                                               : course::random_vector(static_cast<std::size_t>(n), seed ^ 0x5eedu,
                                                                       static_cast<float>(c.dy_lo),
                                                                       static_cast<float>(c.dy_hi));

  // Host views (row-major with the cases' strides) for the reference.
  HostTensor<float> y({c.rows, c.cols}, {ldy, 1}), dy({c.rows, c.cols}, {lddy, 1});
  y.storage() = padded_storage(y_values, c.rows, c.cols, ldy, 0);
  dy.storage() = padded_storage(dy_values, c.rows, c.cols, lddy, 0);

  DeviceBuffer<float> d_y(padded_storage(y_values, c.rows, c.cols, ldy, c.offset));
  DeviceBuffer<float> d_dy(padded_storage(dy_values, c.rows, c.cols, lddy, c.offset));
  DeviceBuffer<float> d_dx(c.in_place ? 0 : static_cast<std::size_t>(c.offset + (c.rows - 1) * lddx + c.cols));
  if (!c.in_place) d_dx.poison();
  const std::size_t ws_bytes = course::m04::softmax_backward_workspace_bytes(step, c.rows, c.cols, c.dim);
  DeviceBuffer<float> ws((ws_bytes + sizeof(float) - 1) / sizeof(float));
  ws.poison();

  SoftmaxBackwardArgs a;
  a.y = d_y.data() + c.offset;
  a.dy = d_dy.data() + c.offset;
  a.dx = (c.in_place ? d_dy.data() : d_dx.data()) + c.offset;
  a.rows = c.rows;
  a.cols = c.cols;
  a.ldy = ldy;
  a.lddy = lddy;
  a.lddx = lddx;
  a.dim = c.dim;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> dx_storage = c.in_place ? d_dy.download() : d_dx.download();
  dx_storage.erase(dx_storage.begin(), dx_storage.begin() + c.offset);
  HostTensor<float> dx({c.rows, c.cols}, {lddx, 1});
  dx.storage() = std::move(dx_storage);

  const HostTensor<double> ref = course::ref::softmax_backward(y.cast<double>(), dy.cast<double>(), c.dim);

  // Tolerance. dx_i = y_i (dy_i - D): the fp32 error of an element is ~2u relative from
  // its own two operations (covered by rtol * |ref|) plus y_i times the error of D, and
  // a sum's error is relative to the size of its terms: S = sum_j |y_j dy_j| of the slice.
  // So the absolute part scales with max_i y_i * S over the slices (scale below), and
  // tolerance_for gives rtol = 2u + 8 sqrt(slice length) u.
  const std::int64_t slices = c.dim == 1 ? c.rows : c.cols;
  const std::int64_t length = c.dim == 1 ? c.cols : c.rows;
  const auto at = [&](const HostTensor<float>& t, std::int64_t s, std::int64_t i) {
    return static_cast<double>(c.dim == 1 ? t.storage()[s * t.stride(0) + i] : t.storage()[i * t.stride(0) + s]);
  };
  std::vector<double> slice_terms(static_cast<std::size_t>(slices)), slice_dot(static_cast<std::size_t>(slices));
  double scale = 0.0;
  for (std::int64_t s = 0; s < slices; ++s) {
    double terms = 0.0, dot = 0.0, ymax = 0.0;
    for (std::int64_t i = 0; i < length; ++i) {
      const double yi = at(y, s, i), gi = at(dy, s, i);
      terms += std::fabs(yi * gi);
      dot += yi * gi;
      ymax = std::max(ymax, yi);
    }
    slice_terms[s] = terms;
    slice_dot[s] = dot;
    scale = std::max(scale, ymax * terms);
  }
  const course::Tolerance tol = course::tolerance_for(course::DType::f32, length, scale);

  Outcome out;
  out.cmp = course::compare(dx, ref, tol, {"i", "j"});

  // Padding (columns cols .. lddx - 1 of every row but the last) must be untouched.
  out.padding_writes = testing::record_padding_writes(dx, c.in_place ? bits_of(kPadSentinel) : 0xFFFFFFFFu, out.cmp);

  // Every slice of dx sums to ~0: the element bounds above summed over a slice give
  // |sum dx| <= rtol * (2 S + |D|) <= 3 rtol S (plus D times y's rounding, ~u).
  for (std::int64_t s = 0; s < slices; ++s) {
    double sum = 0;
    for (std::int64_t i = 0; i < length; ++i) sum += at(dx, s, i);
    const double allowed = 3.0 * tol.rtol * slice_terms[s] + 1e-7 * std::fabs(slice_dot[s]) + 1e-30;
    const double ratio = std::fabs(sum) / allowed;
    if (!(ratio <= out.worst_slice_sum_ratio)) out.worst_slice_sum_ratio = std::isnan(ratio) ? INFINITY : ratio;
  }
  return out;
}

inline ::testing::AssertionResult Accepted(const Outcome& o) {
  if (o.ok()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << o.cmp.report();
  if (o.padding_writes) failure << "\n  " << o.padding_writes << " writes into the row padding (j >= cols)";
  failure << "\n  worst |sum(dx)| over slices = " << o.worst_slice_sum_ratio << " x the allowed (must be <= 1)";
  return failure;
}

}  // namespace course::m04::softmax_checks
