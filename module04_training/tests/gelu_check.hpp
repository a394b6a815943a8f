#pragma once
/// @file gelu_check.hpp
/// @brief The checking helper of the GELU ladder, shared by test_gelu.cpp and fuzz_gelu.cpp:
/// one forward or backward call on fresh random data against course::ref::gelu_tanh /
/// gelu_tanh_backward (double), with every output element held to a bound derived from its
/// own terms, and the elements around the tensor checked untouched.

#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module04/gelu.hpp"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace course::m04::gelu_checks {

using GeluForwardFn = std::function<void(GeluStep, const GeluArgs&)>;
using GeluBackwardFn = std::function<void(GeluStep, const GeluBackwardArgs&)>;

enum class Direction { forward, backward, backward_accumulate };

struct Case {
  std::int64_t n = 1;
  GeluDType dtype = GeluDType::f32;
  Direction dir = Direction::forward;
  bool in_place = false;    ///< y = x (forward) or dx = dy (backward)
  std::int64_t offset = 0;  ///< elements between each buffer's 256-byte aligned start and the tensor
  double lo = -4.0, hi = 4.0;  ///< x uniform in [lo, hi); dy (and dx with accumulate) in [-1, 1)
  std::string str() const {
    std::ostringstream os;
    os << "n=" << n << (dtype == GeluDType::bf16 ? " bf16" : " f32")
       << (dir == Direction::forward ? " forward" : dir == Direction::backward ? " backward" : " backward+=")
       << (in_place ? " in place" : "") << (offset ? " offset=" + std::to_string(offset) : "") << " x in [" << lo
       << ", " << hi << ")";
    return os.str();
  }
};

/// Sentinel elements after the tensor (and the offset before it): must stay as written.
constexpr std::int64_t kGuard = 9;
constexpr float kSentinel = 1000.f;

inline float round_to(GeluDType d, float v) {
  return d == GeluDType::bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

inline std::vector<unsigned char> to_bytes(const std::vector<float>& v, GeluDType d) {
  std::vector<unsigned char> b(v.size() * gelu_element_bytes(d));
  if (d == GeluDType::f32) {
    std::memcpy(b.data(), v.data(), b.size());
  } else {
    for (std::size_t i = 0; i < v.size(); ++i) {
      const __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

inline std::vector<float> from_bytes(const std::vector<unsigned char>& b, GeluDType d) {
  std::vector<float> v(b.size() / gelu_element_bytes(d));
  if (d == GeluDType::f32) {
    std::memcpy(v.data(), b.data(), b.size());
  } else {
    for (std::size_t i = 0; i < v.size(); ++i) {
      __nv_bfloat16 h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      v[i] = __bfloat162float(h);
    }
  }
  return v;
}

struct Outcome {
  CompareResult cmp;
  std::int64_t guard_writes = 0;
  bool ok() const { return cmp.ok() && guard_writes == 0; }
};

/// Runs one call (fwd or bwd as c.dir says) and checks it. Throws NotImplemented through.
inline Outcome run_case(const GeluForwardFn& fwd, const GeluBackwardFn& bwd, GeluStep step, const Case& c,
                        std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(c.n);
  const auto span = static_cast<std::size_t>(c.offset + c.n + kGuard);
  const auto pad = [&](const std::vector<float>& v) {
    std::vector<float> s(span, kSentinel);
    std::copy(v.begin(), v.end(), s.begin() + c.offset);
    return s;
  };
  std::vector<float> x = course::random_vector(n, seed, static_cast<float>(c.lo), static_cast<float>(c.hi));
  std::vector<float> dy = course::random_vector(n, seed ^ 0x9e37u, -1.f, 1.f);
  std::vector<float> dx0 = course::random_vector(n, seed ^ 0x7f4au, -1.f, 1.f);
  for (auto* v : {&x, &dy, &dx0})
    for (float& e : *v) e = round_to(c.dtype, e);  // the values the kernel sees
  const bool backward = c.dir != Direction::forward, acc = c.dir == Direction::backward_accumulate;
  if (backward && c.in_place) dx0 = dy;  // dx == dy: the "old dx" is dy

  const std::size_t eb = gelu_element_bytes(c.dtype);
  DeviceBuffer<unsigned char> dX(to_bytes(pad(x), c.dtype)), dDY(to_bytes(pad(dy), c.dtype));
  std::vector<float> out_init = pad(acc ? dx0 : std::vector<float>(n, std::nanf("")));
  DeviceBuffer<unsigned char> dOut(to_bytes(out_init, c.dtype));
  unsigned char* out_ptr = dOut.data();
  if (c.in_place) out_ptr = backward ? dDY.data() : dX.data();

  if (!backward) {
    GeluArgs a;
    a.x = dX.data() + c.offset * eb;
    a.y = out_ptr + c.offset * eb;
    a.n = c.n;
    a.dtype = c.dtype;
    fwd(step, a);
  } else {
    GeluBackwardArgs a;
    a.x = dX.data() + c.offset * eb;
    a.dy = dDY.data() + c.offset * eb;
    a.dx = out_ptr + c.offset * eb;
    a.n = c.n;
    a.dtype = c.dtype;
    a.accumulate = acc;
    bwd(step, a);
  }
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> raw(span * eb);
  COURSE_CUDA_CHECK(cudaMemcpy(raw.data(), out_ptr, raw.size(), cudaMemcpyDeviceToHost));
  const std::vector<float> all = from_bytes(raw, c.dtype);

  // The reference, in double, from the rounded inputs.
  HostTensor<double> xt({std::max<std::int64_t>(c.n, 1)}), dyt({std::max<std::int64_t>(c.n, 1)});
  for (std::size_t i = 0; i < n; ++i) xt.storage()[i] = x[i], dyt.storage()[i] = dy[i];
  const HostTensor<double> ref = backward ? course::ref::gelu_tanh_backward(xt, dyt) : course::ref::gelu_tanh(xt);

  // Bounds: 8 fp32 ulps of every term an element is made of, times u's own condition
  // (exp(-2u) / tanh(u) amplify u's relative error by ~|2u|), plus the cancellation of
  // 1 + tanh(u) (step 1's form: ~1 ulp of 1, times |x|/2); bf16 adds one rounding of the result.
  const double u32 = std::ldexp(1.0, -24), u16 = std::ldexp(1.0, -8);
  const double k = m04::kGeluSqrt2OverPi, cc = m04::kGeluCubic;
  Outcome out;
  std::vector<float> got(all.begin() + c.offset, all.begin() + c.offset + c.n);
  std::vector<double> want(n), bound(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double xi = x[i], ui = k * (xi + cc * xi * xi * xi), t = std::tanh(ui);
    const double du = k * (1 + 3 * cc * xi * xi);
    double r = ref.storage()[i], b;
    if (!backward) {
      b = 8 * u32 * (std::fabs(r) * (1 + 2 * std::fabs(ui)) + std::fabs(xi));
    } else {
      const double terms = 0.5 * (1 + t) + std::fabs(0.5 * xi * (1 - t * t) * du);
      b = 8 * u32 * std::fabs(dy[i]) * (terms * (1 + 2 * std::fabs(ui)) + 1 + std::fabs(xi) * du);
      if (acc) {
        r += dx0[i];
        b += 2 * u32 * (std::fabs(dx0[i]) + std::fabs(r));
      }
    }
    if (c.dtype == GeluDType::bf16) b = u16 * std::fabs(r) + 2 * b;
    want[i] = r;
    bound[i] = b + 1e-38;
  }
  CompareResult& res = out.cmp;
  res.dim_names = {"i"};
  for (std::size_t i = 0; i < n; ++i) {
    ++res.checked;
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double ratio = std::isfinite(got[i]) ? err / bound[i] : INFINITY;
    if (!std::isfinite(got[i])) ++res.non_finite;
    res.max_abs_error = std::max(res.max_abs_error, std::isfinite(err) ? err : INFINITY);
    if (!(ratio <= res.worst_ratio)) res.worst_ratio = std::isnan(ratio) ? INFINITY : ratio;
    if (!(ratio <= 1.0)) {
      ++res.mismatches;
      if (res.first.size() < 8) res.first.push_back({{static_cast<std::int64_t>(i)}, got[i], want[i]});
    }
  }
  if (n == 0) res.checked = 1;  // nothing to compare: only the guards
  // The guards before and after the tensor (the sentinel, rounded to the dtype).
  for (std::int64_t i = 0; i < c.offset; ++i) out.guard_writes += all[static_cast<std::size_t>(i)] != kSentinel;
  for (std::size_t i = static_cast<std::size_t>(c.offset + c.n); i < all.size(); ++i)
    out.guard_writes += all[i] != kSentinel;
  return out;
}

inline ::testing::AssertionResult Accepted(const Outcome& o) {
  if (o.ok()) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure() << o.cmp.report();
  if (o.guard_writes) f << "\n  " << o.guard_writes << " writes outside the tensor";
  return f;
}

}  // namespace course::m04::gelu_checks
