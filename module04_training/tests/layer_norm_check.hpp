#pragma once
/// @file layer_norm_check.hpp
/// @brief The checking helpers of the LayerNorm forward and backward, shared by the tests
/// (test_layer_norm.cpp) and the random-case tests (fuzz_layer_norm.cpp).
///
/// Inputs are fresh random data per case; for bf16 the CPU reference (course::ref, double)
/// gets the same bf16-rounded x and dy the kernel reads, so the comparison measures the
/// kernel's fp32 arithmetic and its output rounding, not the input rounding. Every element
/// has its own allowed error, from a first-order error analysis (see `Tolerances` below);
/// outputs are NaN-poisoned (or, when accumulating, pre-filled with random values) and the
/// row padding of outputs must stay untouched.

#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module04/layer_norm.hpp"
#include "module04/layer_norm_backward.hpp"

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

namespace course::m04::layer_norm_checks {

using LayerNormFn = std::function<void(LayerNormStep, const LayerNormArgs&)>;
using LayerNormBackwardFn = std::function<void(LayerNormBackwardStep, const LayerNormBackwardArgs&)>;

/// The padding between rows of the inputs holds this: a kernel that reads past C takes it
/// into a row's statistics and the whole row moves.
constexpr float kPadSentinel = 1000.f;
constexpr double kU = 5.9604644775390625e-8;  ///< fp32 unit roundoff, 2^-24

/// One test input. x(r, c) = offset_r + spread * u, u uniform in [-1, 1), offset_r uniform
/// in [-row_offset, row_offset] (or exactly mean_offset when large_mean): a non-zero mean
/// per row, so a variance that forgets to subtract the mean is caught.
struct Case {
  std::int64_t rows = 1, C = 1;
  DType dtype = DType::f32;
  std::int64_t ldx = 0, ldy = 0, lddy = 0, lddx = 0;  ///< 0: contiguous (= C)
  std::int64_t offset = 0;                            ///< elements between each buffer's start and its matrix
  double row_offset = 1.0;                            ///< |row mean| up to this
  double spread = 1.0;                                ///< half-width of the values around it
  double mean_offset = 0.0;                           ///< when != 0: every row's offset is this
  bool constant_rows = false;                         ///< every row one bf16 value: var = 0, rstd = 1/sqrt(eps)
  float eps = 1e-5f;
  bool accumulate_dx = false;
  bool accumulate_dparams = false;

  std::int64_t s_x() const { return ldx > 0 ? ldx : C; }
  std::int64_t s_y() const { return ldy > 0 ? ldy : C; }
  std::int64_t s_dy() const { return lddy > 0 ? lddy : C; }
  std::int64_t s_dx() const { return lddx > 0 ? lddx : C; }
  std::string str() const {
    std::ostringstream os;
    os << rows << "x" << C << " " << to_string(dtype) << " ldx=" << s_x() << " ldy=" << s_y() << " lddy=" << s_dy()
       << " lddx=" << s_dx() << " x = offset in [-" << row_offset << ", " << row_offset << "] + [-" << spread << ", "
       << spread << ")" << (mean_offset != 0 ? " mean_offset=" + std::to_string(mean_offset) : "")
       << (constant_rows ? " constant rows" : "") << " eps=" << eps
       << (offset ? " offset=" + std::to_string(offset) : "") << (accumulate_dx ? " accumulate_dx" : "")
       << (accumulate_dparams ? " accumulate_dparams" : "");
    return os.str();
  }
};

/// Rounds to the dtype's values (bf16: round to nearest even), in place.
inline void round_to(DType dtype, std::vector<float>& v) {
  if (dtype == DType::bf16) v = course::round_to_bf16(v);
}

/// A rows x C matrix with row stride ld, in a buffer that starts `offset` elements earlier;
/// the offset and the padding hold `pad`.
inline std::vector<float> padded(const std::vector<float>& values, std::int64_t rows, std::int64_t C, std::int64_t ld,
                                 std::int64_t offset, float pad = kPadSentinel) {
  std::vector<float> s(static_cast<std::size_t>(offset + (rows > 0 ? (rows - 1) * ld + C : 0)), pad);
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(values.begin() + r * C, C, s.begin() + offset + r * ld);
  return s;
}

/// Device storage of a float vector in the dtype (bf16 values must already be bf16-exact).
class DeviceMatrix {
 public:
  DeviceMatrix(DType dtype, const std::vector<float>& storage) : dtype_(dtype) {
    if (dtype == DType::bf16) bf_ = DeviceBuffer<__nv_bfloat16>(course::to_bf16(storage));
    else f_ = DeviceBuffer<float>(storage);
  }
  void* data() { return dtype_ == DType::bf16 ? static_cast<void*>(bf_.data()) : static_cast<void*>(f_.data()); }
  void poison() { dtype_ == DType::bf16 ? bf_.poison() : f_.poison(); }
  std::vector<float> download() const { return dtype_ == DType::bf16 ? course::from_bf16(bf_.download()) : f_.download(); }
  /// Address of element `offset` (in elements of the dtype).
  void* at(std::int64_t offset) {
    return static_cast<char*>(data()) + offset * static_cast<std::int64_t>(dtype_ == DType::bf16 ? 2 : 4);
  }

 private:
  DType dtype_;
  DeviceBuffer<float> f_;
  DeviceBuffer<__nv_bfloat16> bf_;
};

/// Compares got with ref element by element, element i allowed |got - ref| <= allowed[i];
/// NaN and Inf never pass. `index` gives the multi-index of element i for the report.
inline CompareResult check_elements(const std::vector<double>& got, const std::vector<double>& ref,
                                    const std::vector<double>& allowed,
                                    const std::function<std::vector<std::int64_t>(std::size_t)>& index,
                                    std::vector<std::string> dim_names) {
  CompareResult out;
  out.dim_names = std::move(dim_names);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ++out.checked;
    const double err = std::fabs(got[i] - ref[i]);
    const bool finite = std::isfinite(got[i]);
    if (!finite && std::isfinite(ref[i])) ++out.non_finite;
    const double ratio = finite ? err / std::max(allowed[i], 1e-300) : INFINITY;
    if (finite) {
      out.max_abs_error = std::max(out.max_abs_error, err);
      out.max_rel_error = std::max(out.max_rel_error, err / std::max(std::fabs(ref[i]), 1e-30));
    }
    out.worst_ratio = std::max(out.worst_ratio, ratio);
    if (!(ratio <= 1.0)) {
      ++out.mismatches;
      if (out.first.size() < 8) out.first.push_back({index(i), got[i], ref[i]});
    }
  }
  return out;
}

/// Counts writes into the padding / offset of an output: every element of `after` that is
/// not a matrix element must still have the bits it had in `before`.
inline std::int64_t padding_writes(const std::vector<float>& before, const std::vector<float>& after,
                                   std::int64_t rows, std::int64_t C, std::int64_t ld, std::int64_t offset,
                                   CompareResult& cmp) {
  std::int64_t writes = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const auto e = static_cast<std::int64_t>(i) - offset;
    if (e >= 0 && e % ld < C && e / ld < rows) continue;  // a matrix element
    if (testing::bits_of(after[i]) == testing::bits_of(before[i])) continue;
    ++writes;
    ++cmp.mismatches;
    if (cmp.first.size() < 8) cmp.first.push_back({{e / ld, e % ld}, after[i], std::nan("")});
  }
  return writes;
}

/// The output rounding of the dtype, relative (bf16: 2^-8, one bit above the half-ulp).
inline double out_rtol(DType dtype) { return dtype == DType::bf16 ? 1.0 / 256 : 4 * kU; }

/// The random inputs of a case: x (rounded to the dtype), gamma, beta (fp32).
struct Inputs {
  std::vector<float> x, gamma, beta;
};

inline Inputs make_inputs(const Case& c, std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(c.rows * c.C);
  Inputs in;
  const auto u = course::random_vector(n, seed, -1.f, 1.f);
  const auto offs = course::random_vector(static_cast<std::size_t>(c.rows), seed ^ 0x0ff5e7u,
                                          static_cast<float>(-c.row_offset), static_cast<float>(c.row_offset));
  in.x.resize(n);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    double off = c.mean_offset != 0 ? c.mean_offset : offs[r];
    // A constant row's value has 8 significant bits (a bf16): its running sums are exact in
    // fp32 (C < 2^16), so the mean is the value to one rounding, as for any summation order.
    if (c.constant_rows) off = course::round_to_bf16({static_cast<float>(off)})[0];
    for (std::int64_t j = 0; j < c.C; ++j)
      in.x[r * c.C + j] = static_cast<float>(off + (c.constant_rows ? 0.0 : c.spread * u[r * c.C + j]));
  }
  round_to(c.dtype, in.x);
  in.gamma = course::random_vector(static_cast<std::size_t>(c.C), seed ^ 0x9a33au, -1.5f, 1.5f);
  in.beta = course::random_vector(static_cast<std::size_t>(c.C), seed ^ 0xbe7au, -1.f, 1.f);
  return in;
}

/// x as a double tensor [rows, C] (contiguous) for the reference.
inline HostTensor<double> as_tensor(const std::vector<float>& v, std::int64_t rows, std::int64_t C) {
  HostTensor<double> t({rows, C});
  std::copy(v.begin(), v.end(), t.storage().begin());
  return t;
}
inline HostTensor<double> as_tensor(const std::vector<float>& v) {
  HostTensor<double> t({static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.storage().begin());
  return t;
}

/// The error budget of a row's statistics (fp32 arithmetic on its values):
///   mean: a sum of C values, each as large as xmax = max |x|: 2 sqrt(C) u xmax (the random
///         walk of the rounding errors, with room for the naive step's sequential sum: its
///         running total grows to C * xmax);
///   rstd (relative): the sum of squared deviations, 8 sqrt(C) u, plus (mean error * rstd)^2,
///         the variance a wrong mean adds: sum (x - m')^2 = sum (x - m)^2 + C (m - m')^2.
/// A row of mean 1e3 and std 1e-2 has xmax = 1e3: the mean carries ~1e-3 of rounding in
/// fp32 (it cannot be stored closer than 3e-5), so y there is only good to a fraction of its
/// std; rstd stays accurate with the two-pass variance and is off by orders of magnitude
/// with E[x^2] - mean^2.
struct RowBudget {
  double mean = 0, rstd_rel = 0;
};

inline RowBudget row_budget(const std::vector<float>& x, std::int64_t r, std::int64_t C, double rstd) {
  double xmax = 0;
  for (std::int64_t j = 0; j < C; ++j) xmax = std::max(xmax, std::fabs(static_cast<double>(x[r * C + j])));
  RowBudget b;
  const double sq = std::sqrt(static_cast<double>(C));
  b.mean = 2 * sq * kU * xmax + 1e-30;
  const double shift = b.mean * (std::isfinite(rstd) ? rstd : 0.0);
  b.rstd_rel = 8 * sq * kU + 4 * kU + shift * shift;
  return b;
}

// ============================================================================ forward =====

struct ForwardOutcome {
  CompareResult y, mean, rstd;
  std::int64_t padding_writes = 0;
  bool ok() const { return y.ok() && mean.ok() && rstd.ok() && padding_writes == 0; }
};

inline ForwardOutcome run_forward(const LayerNormFn& fn, LayerNormStep step, const Case& c, std::uint64_t seed) {
  const Inputs in = make_inputs(c, seed);
  const std::int64_t ldx = c.s_x(), ldy = c.s_y();
  DeviceMatrix d_x(c.dtype, padded(in.x, c.rows, c.C, ldx, c.offset));
  DeviceMatrix d_y(c.dtype, padded(std::vector<float>(static_cast<std::size_t>(c.rows * c.C)), c.rows, c.C, ldy,
                                   c.offset));
  d_y.poison();
  DeviceBuffer<float> d_gamma(in.gamma), d_beta(in.beta), d_mean(static_cast<std::size_t>(c.rows)),
      d_rstd(static_cast<std::size_t>(c.rows));
  d_mean.poison();
  d_rstd.poison();
  const std::vector<float> poison_y = d_y.download();

  LayerNormArgs a;
  a.dtype = c.dtype;
  a.x = d_x.at(c.offset);
  a.y = d_y.at(c.offset);
  a.gamma = d_gamma.data();
  a.beta = d_beta.data();
  a.mean = d_mean.data();
  a.rstd = d_rstd.data();
  a.rows = c.rows;
  a.C = c.C;
  a.ldx = ldx;
  a.ldy = ldy;
  a.eps = c.eps;
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y_all = d_y.download();
  const std::vector<float> mean = d_mean.download(), rstd = d_rstd.download();

  const auto ref = course::ref::layer_norm_forward(as_tensor(in.x, c.rows, c.C), as_tensor(in.gamma),
                                                   as_tensor(in.beta), static_cast<double>(c.eps));
  const auto n = static_cast<std::size_t>(c.rows * c.C);
  std::vector<double> got_y(n), ref_y(n), allow_y(n), got_m, ref_m, allow_m, got_s, ref_s, allow_s;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const double mu = ref.mean.storage()[r], rs = ref.rstd.storage()[r];
    const RowBudget b = row_budget(in.x, r, c.C, rs);
    got_m.push_back(mean[r]), ref_m.push_back(mu), allow_m.push_back(b.mean);
    got_s.push_back(rstd[r]), ref_s.push_back(rs), allow_s.push_back(b.rstd_rel * rs);
    for (std::int64_t j = 0; j < c.C; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * c.C + j);
      const double xh = (in.x[i] - mu) * rs, g = std::fabs(static_cast<double>(in.gamma[j]));
      got_y[i] = y_all[static_cast<std::size_t>(c.offset + r * ldy + j)];
      ref_y[i] = ref.y.storage()[i];
      allow_y[i] = g * (rs * b.mean + std::fabs(xh) * (b.rstd_rel + 4 * kU)) + out_rtol(c.dtype) * std::fabs(ref_y[i]) +
                   4 * kU * (g * std::fabs(xh) + std::fabs(in.beta[j])) + 1e-30;
    }
  }
  const auto rc = [&](std::size_t i) {
    return std::vector<std::int64_t>{static_cast<std::int64_t>(i) / c.C, static_cast<std::int64_t>(i) % c.C};
  };
  const auto row = [](std::size_t i) { return std::vector<std::int64_t>{static_cast<std::int64_t>(i)}; };
  ForwardOutcome o;
  o.y = check_elements(got_y, ref_y, allow_y, rc, {"r", "c"});
  o.mean = check_elements(got_m, ref_m, allow_m, row, {"r"});
  o.rstd = check_elements(got_s, ref_s, allow_s, row, {"r"});
  if (c.rows > 0) o.padding_writes = padding_writes(poison_y, y_all, c.rows, c.C, ldy, c.offset, o.y);
  if (c.rows == 0) o.y.checked = o.mean.checked = o.rstd.checked = 1;  // nothing to compare: ok
  return o;
}

inline ::testing::AssertionResult Accepted(const ForwardOutcome& o) {
  if (o.ok()) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure();
  f << "y: " << o.y.report() << "\n  mean: " << o.mean.report() << "\n  rstd: " << o.rstd.report();
  if (o.padding_writes) f << "\n  " << o.padding_writes << " writes outside the matrix (row padding or offset)";
  return f;
}

// =========================================================================== backward =====

struct BackwardOutcome {
  CompareResult dx, dgamma, dbeta;
  std::int64_t padding_writes = 0;
  std::vector<float> dgamma_values, dbeta_values;  ///< as written (determinism checks)
  bool ok() const { return dx.ok() && dgamma.ok() && dbeta.ok() && padding_writes == 0; }
};

/// Runs the backward on fresh inputs: mean and rstd from the double reference rounded to
/// fp32 (what the forward saves), given to the kernel and to the reference alike; dy
/// uniform in [-1, 1) rounded to the dtype; with accumulate_* the outputs start from random
/// values (dx rounded to the dtype) that the reference adds to.
inline BackwardOutcome run_backward(const LayerNormBackwardFn& fn, LayerNormBackwardStep step, const Case& c,
                                    std::uint64_t seed) {
  const Inputs in = make_inputs(c, seed);
  const std::int64_t ldx = c.s_x(), lddy = c.s_dy(), lddx = c.s_dx();
  const auto n = static_cast<std::size_t>(c.rows * c.C);
  const auto C = static_cast<std::size_t>(c.C);
  std::vector<float> dy = course::random_vector(n, seed ^ 0xd1u, -1.f, 1.f);
  round_to(c.dtype, dy);
  std::vector<float> dx0 = course::random_vector(n, seed ^ 0xd2u, -1.f, 1.f);
  round_to(c.dtype, dx0);
  const std::vector<float> dg0 = course::random_vector(C, seed ^ 0xd3u, -2.f, 2.f);
  const std::vector<float> db0 = course::random_vector(C, seed ^ 0xd4u, -2.f, 2.f);

  std::vector<float> mean(static_cast<std::size_t>(c.rows)), rstd(static_cast<std::size_t>(c.rows));
  if (c.rows > 0) {
    const auto fwd = course::ref::layer_norm_forward(as_tensor(in.x, c.rows, c.C), as_tensor(in.gamma),
                                                     as_tensor(in.beta), static_cast<double>(c.eps));
    for (std::int64_t r = 0; r < c.rows; ++r) {
      mean[r] = static_cast<float>(fwd.mean.storage()[r]);
      rstd[r] = static_cast<float>(fwd.rstd.storage()[r]);
    }
  }

  DeviceMatrix d_x(c.dtype, padded(in.x, c.rows, c.C, ldx, c.offset));
  DeviceMatrix d_dy(c.dtype, padded(dy, c.rows, c.C, lddy, c.offset));
  // dx: the random start values (accumulate) or NaN; its padding NaN in both cases.
  DeviceMatrix d_dx(c.dtype, padded(dx0, c.rows, c.C, lddx, c.offset, std::nanf("")));
  if (!c.accumulate_dx) d_dx.poison();
  const std::vector<float> dx_before = d_dx.download();
  DeviceBuffer<float> d_gamma(in.gamma), d_mean(mean), d_rstd(rstd), d_dgamma(dg0), d_dbeta(db0);
  if (!c.accumulate_dparams) {
    d_dgamma.poison();
    d_dbeta.poison();
  }
  const std::size_t ws_bytes = layer_norm_backward_workspace_bytes(step, c.rows, c.C);
  DeviceBuffer<float> ws((ws_bytes + sizeof(float) - 1) / sizeof(float));
  ws.poison();

  LayerNormBackwardArgs a;
  a.dtype = c.dtype;
  a.x = d_x.at(c.offset);
  a.dy = d_dy.at(c.offset);
  a.dx = d_dx.at(c.offset);
  a.gamma = d_gamma.data();
  a.mean = d_mean.data();
  a.rstd = d_rstd.data();
  a.dgamma = d_dgamma.data();
  a.dbeta = d_dbeta.data();
  a.rows = c.rows;
  a.C = c.C;
  a.ldx = ldx;
  a.lddy = lddy;
  a.lddx = lddx;
  a.accumulate_dx = c.accumulate_dx;
  a.accumulate_dparams = c.accumulate_dparams;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> dx_all = d_dx.download();

  BackwardOutcome o;
  o.dgamma_values = d_dgamma.download();
  o.dbeta_values = d_dbeta.download();

  // The reference on the same (rounded) values, then the accumulation.
  std::vector<double> ref_dx(n, 0.0), ref_dg(C, 0.0), ref_db(C, 0.0);
  if (c.rows > 0) {
    HostTensor<double> t_mean({c.rows}), t_rstd({c.rows});
    std::copy(mean.begin(), mean.end(), t_mean.storage().begin());
    std::copy(rstd.begin(), rstd.end(), t_rstd.storage().begin());
    const auto g = course::ref::layer_norm_backward(as_tensor(in.x, c.rows, c.C), as_tensor(in.gamma), t_mean, t_rstd,
                                                    as_tensor(dy, c.rows, c.C));
    ref_dx = g.dx.storage();
    ref_dg = g.dgamma.storage();
    ref_db = g.dbeta.storage();
  }

  // Allowed errors (u = 2^-24). Per row, with g = dy * gamma and xhat computed to ~2u:
  //   mean(g), mean(g * xhat): sums of C terms, 8 sqrt(C) u times their largest term;
  //   dx = rstd (g - mean(g) - xhat mean(g xhat)): rstd times those errors (the second
  //   times |xhat|), plus 4u of each of its three terms, plus the output rounding.
  // Per column: dgamma, dbeta sum `rows` terms in any order (atomics): 4 sqrt(rows) u
  // times the sum of their magnitudes, plus the xhat errors of dgamma's terms.
  const double sq_c = std::sqrt(static_cast<double>(c.C)), sq_r = std::sqrt(static_cast<double>(c.rows));
  std::vector<double> got_dx(n), allow_dx(n);
  std::vector<double> abs_dg(C, 0.0), abs_db(C, 0.0);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    const double rs = rstd[r];
    double gmax = 0, gxmax = 0, mg = 0, mgx = 0;
    for (std::int64_t j = 0; j < c.C; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * c.C + j);
      const double xh = (in.x[i] - static_cast<double>(mean[r])) * rs;
      const double g = dy[i] * static_cast<double>(in.gamma[j]);
      gmax = std::max(gmax, std::fabs(g));
      gxmax = std::max(gxmax, std::fabs(g * xh));
      mg += g / c.C;
      mgx += g * xh / c.C;
      abs_dg[j] += std::fabs(dy[i] * xh);
      abs_db[j] += std::fabs(dy[i]);
    }
    const double e_mg = 8 * sq_c * kU * gmax, e_mgx = 8 * sq_c * kU * (gxmax + gmax);
    for (std::int64_t j = 0; j < c.C; ++j) {
      const std::size_t i = static_cast<std::size_t>(r * c.C + j);
      const double xh = (in.x[i] - static_cast<double>(mean[r])) * rs;
      const double g = dy[i] * static_cast<double>(in.gamma[j]);
      double ref = ref_dx[i];
      if (c.accumulate_dx) ref += dx0[i];
      ref_dx[i] = ref;
      got_dx[i] = dx_all[static_cast<std::size_t>(c.offset + r * lddx + j)];
      allow_dx[i] = rs * (e_mg + std::fabs(xh) * e_mgx + 4 * kU * (std::fabs(g) + std::fabs(mg) + std::fabs(xh * mgx)) +
                          2 * kU * std::fabs(xh * mgx)) +
                    out_rtol(c.dtype) * std::fabs(ref) + (c.accumulate_dx ? 2 * kU * std::fabs(dx0[i]) : 0.0) + 1e-30;
    }
  }
  std::vector<double> got_dg(C), got_db(C), allow_dg(C), allow_db(C);
  for (std::size_t j = 0; j < C; ++j) {
    if (c.accumulate_dparams) ref_dg[j] += dg0[j], ref_db[j] += db0[j];
    got_dg[j] = o.dgamma_values[j];
    got_db[j] = o.dbeta_values[j];
    const double acc = c.accumulate_dparams ? 1.0 : 0.0;
    allow_dg[j] = (4 * sq_r * kU + 4 * kU) * abs_dg[j] + acc * 2 * kU * std::fabs(dg0[j]) + 1e-30;
    allow_db[j] = (4 * sq_r * kU + 4 * kU) * abs_db[j] + acc * 2 * kU * std::fabs(db0[j]) + 1e-30;
  }
  const auto rc = [&](std::size_t i) {
    return std::vector<std::int64_t>{static_cast<std::int64_t>(i) / c.C, static_cast<std::int64_t>(i) % c.C};
  };
  const auto col = [](std::size_t i) { return std::vector<std::int64_t>{static_cast<std::int64_t>(i)}; };
  o.dx = check_elements(got_dx, ref_dx, allow_dx, rc, {"r", "c"});
  o.dgamma = check_elements(got_dg, ref_dg, allow_dg, col, {"c"});
  o.dbeta = check_elements(got_db, ref_db, allow_db, col, {"c"});
  if (c.rows > 0) o.padding_writes = padding_writes(dx_before, dx_all, c.rows, c.C, lddx, c.offset, o.dx);
  else o.dx.checked = 1;  // no dx: nothing to compare
  return o;
}

inline ::testing::AssertionResult Accepted(const BackwardOutcome& o) {
  if (o.ok()) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure();
  f << "dx: " << o.dx.report() << "\n  dgamma: " << o.dgamma.report() << "\n  dbeta: " << o.dbeta.report();
  if (o.padding_writes) f << "\n  " << o.padding_writes << " writes outside the matrix dx (row padding or offset)";
  return f;
}

}  // namespace course::m04::layer_norm_checks
