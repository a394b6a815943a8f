#pragma once
/// @file linear_backward_check.hpp
/// @brief The checking helper of the linear layer's backward pass, shared by the module's
/// tests (test_linear_backward.cpp) and its random-case tests (fuzz_backward.cpp).

#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module04/linear_backward.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace course::m04::linear_checks {

/// Anything with the op's signature: impl::linear_backward or a planted bug.
using LinearBackwardFn = std::function<void(BiasGradStep, const LinearBackwardArgs&)>;

/// The padding between rows of X, W and dY holds this.
constexpr float kPadSentinel = 1000.f;

/// How a case passes its row strides.
enum class Lds {
  zero,    ///< every ld = 0: "dense", resolved by the API
  dense,   ///< every ld = its row length, passed explicitly
  padded,  ///< every ld = row length + its own pad (odd pads break every vector path)
};

/// One problem: sizes, row strides, which gradients are requested.
struct Case {
  std::int64_t M = 1, K = 1, N = 1;
  Lds lds = Lds::dense;
  std::int64_t pad_x = 3, pad_w = 5, pad_dy = 1, pad_dx = 7, pad_dw = 4;  ///< used when lds == padded
  bool want_dx = true, want_dw = true, want_db = true;
  float lo = -1.f, hi = 1.f;  ///< range of dY's values
  float x_lo = -1.f, x_hi = 1.f, w_lo = -1.f, w_hi = 1.f;  ///< ranges of X's and W's values
  std::int64_t offset = 0;         ///< every matrix starts this many floats into its buffer
  bool floor_from_data = false;    ///< tolerance floor: the size of one product instead of 1 (see judge)

  std::int64_t ld(std::int64_t cols, std::int64_t pad) const { return lds == Lds::padded ? cols + pad : cols; }
  std::int64_t ldx() const { return ld(K, pad_x); }
  std::int64_t ldw() const { return ld(N, pad_w); }
  std::int64_t lddy() const { return ld(N, pad_dy); }
  std::int64_t lddx() const { return ld(K, pad_dx); }
  std::int64_t lddw() const { return ld(N, pad_dw); }
  std::string str() const {
    std::ostringstream os;
    os << "M=" << M << " K=" << K << " N=" << N << " lds="
       << (lds == Lds::zero ? "0 (dense)" : lds == Lds::dense ? "dense" : "padded") << " (x " << ldx() << ", w "
       << ldw() << ", dy " << lddy() << ", dx " << lddx() << ", dw " << lddw() << ")"
       << " outputs:" << (want_dx ? " dx" : "") << (want_dw ? " dw" : "") << (want_db ? " db" : "");
    if (offset) os << " offset=" << offset;
    if (lo != -1.f || hi != 1.f) os << " dy in [" << lo << ", " << hi << ")";
    if (x_lo != -1.f || x_hi != 1.f) os << " x in [" << x_lo << ", " << x_hi << ")";
    if (w_lo != -1.f || w_hi != 1.f) os << " w in [" << w_lo << ", " << w_hi << ")";
    return os.str();
  }
};

/// A rows x cols matrix of `values` (row-major, dense) stored with row stride ld; the
/// padding holds kPadSentinel.
inline std::vector<float> padded_storage(const std::vector<float>& values, std::int64_t rows, std::int64_t cols,
                                  std::int64_t ld) {
  std::vector<float> s(static_cast<std::size_t>((rows - 1) * ld + cols), kPadSentinel);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(values.begin() + r * cols, cols, s.begin() + r * ld);
  return s;
}

inline std::uint32_t bits_of(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

/// The host data of a case and its references (double).
struct Problem {
  Case cs;
  std::vector<float> x, w, dy;  ///< dense values
  HostTensor<double> ref_dx, ref_dw;
  std::vector<double> ref_db;
};

inline HostTensor<double> dense_tensor(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  HostTensor<double> t({rows, cols});
  for (std::size_t i = 0; i < v.size(); ++i) t.storage()[i] = v[i];
  return t;
}

/// db[j] = sum_i dy[i, j], in double (independent of the kernels' summation order).
inline std::vector<double> column_sums(const std::vector<float>& dy, std::int64_t M, std::int64_t N) {
  std::vector<double> s(static_cast<std::size_t>(N), 0.0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) s[static_cast<std::size_t>(j)] += dy[static_cast<std::size_t>(i * N + j)];
  return s;
}

inline Problem make_problem(const Case& cs, std::uint64_t seed) {
  Problem p;
  p.cs = cs;
  p.x = course::random_vector(static_cast<std::size_t>(cs.M * cs.K), seed, cs.x_lo, cs.x_hi);
  p.w = course::random_vector(static_cast<std::size_t>(cs.K * cs.N), seed ^ 0x9e3779b97f4a7c15ull, cs.w_lo, cs.w_hi);
  p.dy = course::random_vector(static_cast<std::size_t>(cs.M * cs.N), seed + 17, cs.lo, cs.hi);
  const auto grads = course::ref::matmul_backward(dense_tensor(p.x, cs.M, cs.K), dense_tensor(p.w, cs.K, cs.N),
                                                  dense_tensor(p.dy, cs.M, cs.N));
  p.ref_dx = grads.da;  // dY W^T
  p.ref_dw = grads.db;  // X^T dY
  p.ref_db = column_sums(p.dy, cs.M, cs.N);
  return p;
}

/// What came back from the device: each output's whole storage (empty if not requested).
struct Result {
  std::vector<float> dx, dw, db;
};

inline Result run_on_device(const LinearBackwardFn& fn, BiasGradStep step, const Problem& p) {
  const Case& c = p.cs;
  using testing::OffsetBuffer;
  float poison;  // all bits set, as DeviceBuffer::poison() writes: judge_matrix looks for these bits
  const std::uint32_t poison_bits = 0xFFFFFFFFu;
  std::memcpy(&poison, &poison_bits, sizeof poison);
  const auto poisoned = [&](bool wanted, std::int64_t elems) {
    return std::vector<float>(wanted ? static_cast<std::size_t>(elems) : 0, poison);
  };
  OffsetBuffer<float> x(padded_storage(p.x, c.M, c.K, c.ldx()), c.offset);
  OffsetBuffer<float> w(padded_storage(p.w, c.K, c.N, c.ldw()), c.offset);
  OffsetBuffer<float> dy(padded_storage(p.dy, c.M, c.N, c.lddy()), c.offset);
  OffsetBuffer<float> dx(poisoned(c.want_dx, (c.M - 1) * c.lddx() + c.K), c.offset);
  OffsetBuffer<float> dw(poisoned(c.want_dw, (c.K - 1) * c.lddw() + c.N), c.offset);
  OffsetBuffer<float> db(poisoned(c.want_db, c.N), c.offset);
  LinearBackwardArgs a = course::m04::make_linear_backward_args(
      x.ptr(), w.ptr(), dy.ptr(), c.want_dx ? dx.ptr() : nullptr, c.want_dw ? dw.ptr() : nullptr,
      c.want_db ? db.ptr() : nullptr, c.M, c.K, c.N);
  if (c.lds == Lds::zero) {
    a.ldx = a.ldw = a.lddy = a.lddx = a.lddw = 0;
  } else {
    a.ldx = c.ldx();
    a.ldw = c.ldw();
    a.lddy = c.lddy();
    a.lddx = c.lddx();
    a.lddw = c.lddw();
  }
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  Result r;
  if (c.want_dx) r.dx = dx.download();
  if (c.want_dw) r.dw = dw.download();
  if (c.want_db) r.db = db.download();
  return r;
}

/// Compares one rows x cols output (storage with row stride ld) with its reference; the
/// padding must still hold the poison. Returns "" when right, else a report. The
/// tolerance's result scale is rms(ref), at least `floor`; `worst` (if given) takes the
/// largest error-to-bound ratio seen.
inline std::string judge_matrix(const char* name, const std::vector<float>& got, std::int64_t rows,
                                std::int64_t cols, std::int64_t ld, const HostTensor<double>& ref,
                                std::int64_t reduction_length, double floor = 1.0, double* worst = nullptr) {
  HostTensor<float> g({rows, cols}, {ld, 1});
  std::copy_n(got.begin(), g.storage().size(), g.storage().begin());
  const double scale = std::max(floor, course::rms(ref));
  const auto cmp = course::compare(g, ref, course::tolerance_for(course::DType::f32, reduction_length, scale),
                                   {"row", "col"});
  if (worst != nullptr) *worst = std::max(*worst, cmp.worst_ratio);
  std::ostringstream os;
  if (!cmp.ok()) os << name << ": " << cmp.report();
  std::int64_t stray = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = cols; c < ld && r * ld + c < static_cast<std::int64_t>(got.size()); ++c)
      if (bits_of(got[static_cast<std::size_t>(r * ld + c)]) != 0xFFFFFFFFu) ++stray;
  if (stray) os << (os.tellp() > 0 ? "; " : "") << name << ": " << stray << " writes into the row padding";
  return os.str();
}

/// Every requested gradient against its reference. The tolerance floor is 1 (unit-size
/// products), or with floor_from_data the size of one product of the case's data: dX sums
/// dY*W, dW sums X*dY, db sums dY.
inline std::string judge(const Problem& p, const Result& r, double* worst = nullptr) {
  const Case& c = p.cs;
  const auto bound = [](float lo, float hi) { return std::max(std::fabs(static_cast<double>(lo)), std::fabs(static_cast<double>(hi))); };
  const double vx = bound(c.x_lo, c.x_hi), vw = bound(c.w_lo, c.w_hi), vdy = bound(c.lo, c.hi);
  const double floor_dx = c.floor_from_data ? vdy * vw : 1.0, floor_dw = c.floor_from_data ? vx * vdy : 1.0,
               floor_db = c.floor_from_data ? vdy : 1.0;
  std::string out;
  const auto add = [&](const std::string& s) {
    if (!s.empty()) out += (out.empty() ? "" : "\n    ") + s;
  };
  if (c.want_dx) add(judge_matrix("dX", r.dx, c.M, c.K, c.lddx(), p.ref_dx, c.N, floor_dx, worst));
  if (c.want_dw) add(judge_matrix("dW", r.dw, c.K, c.N, c.lddw(), p.ref_dw, c.M, floor_dw, worst));
  if (c.want_db) {
    HostTensor<double> ref({1, c.N});
    std::copy(p.ref_db.begin(), p.ref_db.end(), ref.storage().begin());
    add(judge_matrix("db", r.db, 1, c.N, c.N, ref, c.M, floor_db, worst));
  }
  return out;
}

/// THE check, shared by the real tests and the planted-bug tests: every case on fresh
/// random data (seed + case index). course::NotImplemented propagates (callers wrap it
/// in COURSE_SKIP_IF_NOT_IMPLEMENTED).
inline ::testing::AssertionResult check_cases(const LinearBackwardFn& fn, BiasGradStep step, const std::vector<Case>& cases,
                                       std::uint64_t seed) {
  std::ostringstream failures;
  int failed = 0;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Problem p = make_problem(cases[k], seed + 101 * k);
    const std::string verdict = judge(p, run_on_device(fn, step, p));
    if (!verdict.empty()) {
      ++failed;
      failures << "\n  [" << cases[k].str() << "]:\n    " << verdict;
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << course::m04::step_name(step) << ": " << failed << " of " << cases.size()
                                       << " cases failed (seed " << seed << "):" << failures.str();
}

}  // namespace course::m04::linear_checks
