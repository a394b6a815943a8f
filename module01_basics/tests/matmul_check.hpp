#pragma once
/// @file matmul_check.hpp
/// @brief The checking helper of the fp32 matmul, shared by the module's tests
/// (test_matmul.cpp) and its random-case tests (fuzz_basics.cpp).

#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module01/matmul.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace course::m01::checks {

using MatmulFn = std::function<void(MatmulStep, const MatmulArgs&)>;

/// One GEMM problem. Leading dimensions 0 mean "packed" (lda = k, ldb = ldc = n).
/// `offset` shifts every base pointer by that many floats (1 breaks 16-byte alignment,
/// so the vectorized steps must take their scalar path). A, B and C hold values uniform
/// in [lo, hi).
struct Problem {
  std::int64_t m, n, k;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  std::int64_t offset = 0;
  double lo = -1.0, hi = 1.0;

  std::string label() const {
    std::ostringstream os;
    os << m << "x" << n << "x" << k << " lda=" << (lda ? lda : k) << " ldb=" << (ldb ? ldb : n)
       << " ldc=" << (ldc ? ldc : n) << " alpha=" << alpha << " beta=" << beta << " offset=" << offset;
    if (lo != -1.0 || hi != 1.0) os << " values in [" << lo << ", " << hi << ")";
    return os.str();
  }
  std::string str() const { return label(); }
};

/// A quiet NaN with a recognisable payload: fills the padding of every matrix, so a
/// kernel that reads padding produces NaN, and one that writes padding is caught.
inline float padding_nan() {
  const std::uint32_t bits = 0x7fc0beefu;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline bool is_padding_nan(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits == 0x7fc0beefu;
}

/// rows x cols with row stride ld: random values in [lo, hi), NaN padding.
inline HostTensor<float> random_matrix(std::int64_t rows, std::int64_t cols, std::int64_t ld, std::uint64_t seed,
                                       double lo = -1.0, double hi = 1.0) {
  HostTensor<float> t({rows, cols}, {ld, 1});
  std::fill(t.storage().begin(), t.storage().end(), padding_nan());
  fill_random(t, seed, lo, hi);
  return t;
}

/// THE checking helper, shared by the real steps and the planted bugs.
/// Runs fn(step, args) on random A and B (C random when beta != 0, NaN-poisoned when
/// beta == 0: BLAS says C is not read then), and compares C with
/// alpha * ref::matmul(A, B) + beta * C0 in double. Also checks that the padding of C
/// (columns n .. ldc-1) was not written. course::NotImplemented propagates.
///
/// Tolerance: tolerance_for(f32, K, scale), scale = max(rms(reference), v^2) where v bounds
/// the inputs (1 for the default [-1, 1)): rtol ~ sqrt(K) * eps, and an element of A*B
/// that is near 0 got there by cancellation of terms whose partial sums were ~ sqrt(K) in
/// size, so it gets the absolute error budget of a typical element (an fp32 dot product's
/// error bound is relative to sum |a_k b_k|, not to |sum a_k b_k|).
inline CompareResult check_matmul(const MatmulFn& fn, MatmulStep step, const Problem& p, std::uint64_t seed) {
  const std::int64_t lda = p.lda ? p.lda : p.k, ldb = p.ldb ? p.ldb : p.n, ldc = p.ldc ? p.ldc : p.n;
  const HostTensor<float> a = random_matrix(p.m, p.k, lda, seed, p.lo, p.hi);
  const HostTensor<float> b = random_matrix(p.k, p.n, ldb, seed + 1, p.lo, p.hi);
  const HostTensor<float> c0 = random_matrix(p.m, p.n, ldc, seed + 2, p.lo, p.hi);

  testing::OffsetBuffer<float> da(a.storage(), p.offset), db(b.storage(), p.offset);
  std::vector<float> c_init = c0.storage();
  if (p.beta == 0.0f)  // C is write-only: poison its logical elements (NaN), keep the padding sentinel
    for (std::int64_t i = 0; i < p.m; ++i)
      for (std::int64_t j = 0; j < p.n; ++j) c_init[static_cast<std::size_t>(i * ldc + j)] = std::nanf("");
  testing::OffsetBuffer<float> dc(c_init, p.offset);
  MatmulArgs args;
  args.a = da.ptr(); args.b = db.ptr(); args.c = dc.ptr();
  args.m = p.m; args.n = p.n; args.k = p.k;
  args.lda = lda; args.ldb = ldb; args.ldc = ldc;
  args.alpha = p.alpha; args.beta = p.beta;
  fn(step, args);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());

  HostTensor<float> got({p.m, p.n}, {ldc, 1});
  got.storage() = dc.download();

  HostTensor<double> want = course::ref::matmul(a.cast<double>(), b.cast<double>());
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t j = 0; j < p.n; ++j) {
      double& w = want({i, j});
      w = static_cast<double>(p.alpha) * w;
      if (p.beta != 0.0f) w += static_cast<double>(p.beta) * static_cast<double>(c0({i, j}));
    }
  const double v = std::max(std::fabs(p.lo), std::fabs(p.hi));
  const Tolerance tol = tolerance_for(DType::f32, p.k, std::max(v * v, rms(want)));
  CompareResult r = compare(got, want, tol, {"i", "j"});

  // Padding of C (columns n .. ldc-1 of every row but the last) must be untouched.
  for (std::int64_t i = 0; i + 1 < p.m; ++i)
    for (std::int64_t j = p.n; j < ldc; ++j) {
      const float x = got.storage()[static_cast<std::size_t>(i * ldc + j)];
      if (!is_padding_nan(x)) {
        ++r.mismatches;
        if (r.first.size() < 8) r.first.push_back({{i, j}, x, std::nan("")});  // "want" = untouched padding
      }
    }
  return r;
}

}  // namespace course::m01::checks
