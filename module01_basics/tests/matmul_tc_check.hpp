#pragma once
/// @file matmul_tc_check.hpp
/// @brief The checking helper of the tensor-core (bf16) matmul, shared by the module's tests
/// (test_matmul_tc.cpp) and its random-case tests (fuzz_basics.cpp).

#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "module01/matmul_tc.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace course::m01::checks::tc {

using bf16 = __nv_bfloat16;
using MatmulFn = std::function<void(const TcMatmulArgs&)>;

/// One problem: sizes and leading dimensions (0 = the smallest valid one), and the
/// interval [lo, hi) the values of A and B are drawn from.
struct Shape3 {
  std::int64_t m, n, k;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  double lo = -1.0, hi = 1.0;

  std::string str() const {
    std::ostringstream os;
    os << m << "x" << n << "x" << k << " lda=" << (lda ? lda : tc_leading_dim(k))
       << " ldb=" << (ldb ? ldb : tc_leading_dim(n)) << " ldc=" << (ldc ? ldc : n);
    if (lo != -1.0 || hi != 1.0) os << " values in [" << lo << ", " << hi << ")";
    return os.str();
  }
};

inline std::string describe(const Shape3& s, std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  std::ostringstream os;
  os << s.m << "x" << s.n << "x" << s.k << " (lda " << lda << ", ldb " << ldb << ", ldc " << ldc << ")";
  if (s.lo != -1.0 || s.hi != 1.0) os << " values in [" << s.lo << ", " << s.hi << ")";
  return os.str();
}

/// A (M x K) and B (K x N) as the kernel sees them, on the host and the device.
/// Values are uniform in [lo, hi) rounded to bf16, so the fp32 CPU reference sees
/// exactly the kernel's inputs. Row padding (lda > K, ldb > N) holds NaN: a kernel that
/// reads past the end of a row poisons its result.
struct Problem {
  Shape3 s;
  HostTensor<float> a, b;  // logical values, contiguous
  DeviceBuffer<bf16> da, db;
  DeviceBuffer<float> dc;

  Problem(Shape3 shape, std::uint64_t seed) : s(shape) {
    if (s.lda == 0) s.lda = tc_leading_dim(s.k);
    if (s.ldb == 0) s.ldb = tc_leading_dim(s.n);
    if (s.ldc == 0) s.ldc = s.n;
    a = padded_random({s.m, s.k}, s.lda, seed, s, da);
    b = padded_random({s.k, s.n}, s.ldb, seed + 0x9e3779b9u, s, db);
    dc = DeviceBuffer<float>(static_cast<std::size_t>(s.m * s.ldc));
  }

  static HostTensor<float> padded_random(const course::Shape& shape, std::int64_t ld, std::uint64_t seed,
                                         const Shape3& s, DeviceBuffer<bf16>& dev) {
    const std::int64_t rows = shape[0], cols = shape[1];
    HostTensor<float> t(shape);
    t.storage() = round_to_bf16(random_vector(static_cast<std::size_t>(rows * cols), seed,
                                              static_cast<float>(s.lo), static_cast<float>(s.hi)));
    std::vector<float> padded(static_cast<std::size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) padded[r * ld + c] = t.storage()[r * cols + c];
    dev = DeviceBuffer<bf16>(to_bf16(padded));
    return t;
  }

  TcMatmulArgs args() {
    TcMatmulArgs x;
    x.a = da.data();
    x.b = db.data();
    x.c = dc.data();
    x.m = s.m;
    x.n = s.n;
    x.k = s.k;
    x.lda = s.lda;
    x.ldb = s.ldb;
    x.ldc = s.ldc;
    return x;
  }
};

/// Outcome of one checked run: the comparison on the checked rows, and a scan of ALL of C
/// for non-finite values (NaN poison that was never overwritten, or NaN read from padding).
struct TcCheck {
  CompareResult cmp;
  std::int64_t non_finite = 0;
  std::string what;
  bool ok() const { return cmp.ok() && non_finite == 0; }
  std::string report() const {
    std::ostringstream os;
    os << what << ": " << non_finite << " non-finite elements in C; on the checked rows: " << cmp.report();
    return os.str();
  }
};

inline ::testing::AssertionResult Passes(const TcCheck& r) {
  if (r.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.report();
}

/// The rows of C compared with the reference. Small problems: all. Large ones (the CPU
/// reference would take seconds): the first and last row and one random row in every
/// band of 64 rows, so every block tile-row of every step is sampled.
inline std::vector<std::int64_t> rows_to_check(const Shape3& s, std::uint64_t seed) {
  std::vector<std::int64_t> rows;
  if (s.m * s.n * s.k <= (std::int64_t{1} << 27)) {
    for (std::int64_t r = 0; r < s.m; ++r) rows.push_back(r);
    return rows;
  }
  std::set<std::int64_t> picked{0, s.m - 1};
  std::mt19937_64 gen(seed);
  for (std::int64_t band = 0; band < s.m; band += 64) {
    const std::int64_t size = std::min<std::int64_t>(64, s.m - band);
    picked.insert(band + static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(size)));
  }
  rows.assign(picked.begin(), picked.end());
  return rows;
}

/// Tolerance for C = A*B with exact bf16 inputs and fp32 accumulation over K terms.
/// tolerance_for(f32, K, v^2) scales its atol for sums of products of size v^2 (v bounds
/// the inputs; 1 for [-1, 1)); here the partial sums of uniform products grow like
/// sqrt(K) v^2 / 3 and the fp32 rounding error (and the tensor cores' truncating
/// accumulation) scales with the partial sums, not with a final value that happens to
/// cancel to ~0. So atol is widened by sqrt(K). A real bug (a lost product, a wrong
/// element) errs by ~0.1-1 v^2, orders of magnitude above this.
inline Tolerance tc_tolerance(std::int64_t k, double value_bound = 1.0) {
  Tolerance tol = tolerance_for(DType::f32, k, value_bound * value_bound);
  tol.atol *= std::sqrt(static_cast<double>(k));
  return tol;
}

/// The checking helper every test uses (and the planted-bug tests feed wrong kernels):
/// poison C, run, compare with course::ref::matmul on the rows above, scan all of C.
inline TcCheck run_and_check(const Shape3& shape, std::uint64_t seed, const MatmulFn& run) {
  Problem p(shape, seed);
  TcCheck out;
  out.what = describe(p.s, p.s.lda, p.s.ldb, p.s.ldc);
  p.dc.poison();
  run(p.args());
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> c = p.dc.download();

  for (std::int64_t r = 0; r < p.s.m; ++r)
    for (std::int64_t j = 0; j < p.s.n; ++j)
      if (!std::isfinite(c[static_cast<std::size_t>(r * p.s.ldc + j)])) ++out.non_finite;

  const auto rows = rows_to_check(p.s, seed);
  const auto R = static_cast<std::int64_t>(rows.size());
  HostTensor<float> a_rows({R, p.s.k}), got({R, p.s.n});
  for (std::int64_t i = 0; i < R; ++i) {
    for (std::int64_t kk = 0; kk < p.s.k; ++kk) a_rows({i, kk}) = p.a({rows[i], kk});
    for (std::int64_t j = 0; j < p.s.n; ++j) got({i, j}) = c[static_cast<std::size_t>(rows[i] * p.s.ldc + j)];
  }
  const HostTensor<float> want = course::ref::matmul(a_rows, p.b);
  const double v = std::max(std::fabs(shape.lo), std::fabs(shape.hi));
  out.cmp = compare(got, want, tc_tolerance(p.s.k, v), {"i", "j"});
  for (auto& m : out.cmp.first) m.index[0] = rows[static_cast<std::size_t>(m.index[0])];  // report real rows
  return out;
}

}  // namespace course::m01::checks::tc
