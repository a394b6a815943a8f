#pragma once
/// @file adamw_check.hpp
/// @brief The checking helper of the AdamW ladder, shared by test_adamw.cpp and
/// fuzz_adamw.cpp: builds a tensor list inside shared buffers (tensors at any element
/// offset, sentinels between them), runs several consecutive steps and checks each one
/// against course::ref::adamw_step (double) from the state the device had before it.

#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "module04/adamw.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace course::m04::adamw_checks {

/// Anything with the op's signature: impl::adamw or a planted bug.
using AdamWFn = std::function<void(AdamWStep, const AdamWArgs&)>;

/// Between tensors (and before the first) every buffer holds this: a kernel that runs past
/// a tensor's end changes it.
constexpr float kSentinel = 1000.f;

/// One tensor of a case. Offsets are in elements past a 16-byte boundary (0-3; for bf16,
/// past an 8-byte boundary): anything but 0 keeps that tensor off the float4 path.
struct TensorSpec {
  std::int64_t n = 1;
  bool decay = true;
  bool bf16 = false;
  int offset = 0;   ///< params, m, v
  int goffset = 0;  ///< grads
  int boffset = 0;  ///< bf16 copy
};

struct Case {
  std::vector<TensorSpec> tensors;
  int steps = 2;          ///< consecutive steps t0, t0 + 1, ...
  std::int64_t t0 = 1;    ///< 1: m = v = 0 at the start (a first step); else random moments
  float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.1f;
  float max_norm = 0.f;   ///< > 0: clipping (the tests pick it below the norm to make it bite)
  bool report_norm = true;  ///< pass grad_norm (else null)
  double g_lo = -1.0, g_hi = 1.0;  ///< grads uniform in [g_lo, g_hi)

  std::int64_t elements() const {
    std::int64_t s = 0;
    for (const auto& t : tensors) s += t.n;
    return s;
  }
  std::string str() const {
    std::ostringstream os;
    os << tensors.size() << " tensors (";
    for (std::size_t i = 0; i < tensors.size() && i < 8; ++i) {
      const auto& t = tensors[i];
      os << (i ? " " : "") << t.n << (t.decay ? "d" : "") << (t.bf16 ? "b" : "");
      if (t.offset || t.goffset || t.boffset) os << "@" << t.offset << "/" << t.goffset << "/" << t.boffset;
    }
    if (tensors.size() > 8) os << " ...";
    os << "), " << elements() << " elements, t=" << t0 << ".." << t0 + steps - 1 << " lr=" << lr
       << " betas=(" << beta1 << "," << beta2 << ") eps=" << eps << " wd=" << weight_decay << " max_norm=" << max_norm
       << (report_norm ? "" : " (norm not reported)") << " grads in [" << g_lo << ", " << g_hi << ")";
    return os.str();
  }
};

struct Outcome {
  CompareResult params, m, v, norm;
  std::int64_t bf16_mismatches = 0;  ///< bf16 copy != round(params)
  std::int64_t guard_writes = 0;     ///< sentinels changed, or grads changed
  int failed_step = -1;              ///< index of the first failing step (-1: none)
  bool ok() const {
    return failed_step < 0;
  }
  std::string report() const {
    std::ostringstream os;
    os << "step " << failed_step << ":\n  params: " << params.report() << "\n  m: " << m.report()
       << "\n  v: " << v.report() << "\n  norm: " << norm.report();
    if (bf16_mismatches) os << "\n  " << bf16_mismatches << " bf16 copies differ from round(params)";
    if (guard_writes) os << "\n  " << guard_writes << " writes outside the tensors (or into grads)";
    return os.str();
  }
  double worst_ratio() const {
    return std::max({params.worst_ratio, m.worst_ratio, v.worst_ratio, norm.worst_ratio});
  }
};

/// Where each tensor starts in the shared buffers (one per array kind).
struct Layout {
  std::vector<std::int64_t> p, g, b;  ///< params/m/v share p's offsets; grads g; bf16 b
  std::int64_t p_size = 0, g_size = 0, b_size = 0;
};

inline Layout layout_of(const Case& c) {
  Layout l;
  std::int64_t pp = 0, pg = 0, pb = 0;
  const auto place = [](std::int64_t& pos, int off, std::int64_t n) {
    const std::int64_t start = (pos + 1 + 3) / 4 * 4 + off;  // >= 1 sentinel, then the offset
    pos = start + n;
    return start;
  };
  for (const auto& t : c.tensors) {
    l.p.push_back(place(pp, t.offset, t.n));
    l.g.push_back(place(pg, t.goffset, t.n));
    l.b.push_back(place(pb, t.boffset, t.n));
  }
  l.p_size = pp + 1, l.g_size = pg + 1, l.b_size = pb + 1;
  return l;
}

/// Element-wise check with one bound per element: |got - ref| <= bound[i].
inline void check_bounded(CompareResult& r, const std::vector<float>& got, const std::vector<double>& ref,
                          const std::vector<double>& bound, std::int64_t tensor, std::int64_t first_index) {
  for (std::size_t j = 0; j < got.size(); ++j) {
    ++r.checked;
    const double err = std::fabs(static_cast<double>(got[j]) - ref[j]);
    const double ratio = std::isfinite(got[j]) ? err / bound[j] : INFINITY;
    if (!std::isfinite(got[j])) ++r.non_finite;
    r.max_abs_error = std::max(r.max_abs_error, std::isfinite(err) ? err : INFINITY);
    if (!(ratio <= r.worst_ratio)) r.worst_ratio = std::isnan(ratio) ? INFINITY : ratio;
    if (!(ratio <= 1.0)) {
      ++r.mismatches;
      if (r.first.size() < 8)
        r.first.push_back({{tensor, first_index + static_cast<std::int64_t>(j)}, got[j], ref[j]});
    }
  }
  r.dim_names = {"tensor", "i"};
}

/// Runs the case: poisons the workspace and grad_norm, runs c.steps steps with fresh grads
/// each, and checks after each:
///  - the norm (if reported) against the double norm of the grads (fp32 reduction tolerance);
///  - params, m, v against course::ref::adamw_step in double from the device's state before
///    the step, grads scaled by the clip scale computed from the device's norm as the kernel
///    does (or from the double norm when the norm is not reported), each element within a
///    bound derived from its own magnitudes (8 ulp of every term it is made of, plus the
///    error the norm's rounding can put into the clip scale);
///  - the bf16 copy bit-equal to round-to-nearest-even of the device's new params;
///  - the sentinels between tensors, and the grads, unchanged.
/// Throws course::NotImplemented through for exercise stubs.
inline Outcome run_case(const AdamWFn& fn, AdamWStep step, const Case& c, std::uint64_t seed) {
  const Layout l = layout_of(c);
  const std::size_t T = c.tensors.size();
  const double g_mag = std::max(std::fabs(c.g_lo), std::fabs(c.g_hi));

  // Host state (the sentinels everywhere first).
  std::vector<float> hp(static_cast<std::size_t>(l.p_size), kSentinel), hm = hp, hv = hp;
  std::vector<float> hg(static_cast<std::size_t>(l.g_size), kSentinel);
  const __nv_bfloat16 bsent = __float2bfloat16(kSentinel);
  std::vector<__nv_bfloat16> hb(static_cast<std::size_t>(l.b_size), bsent);
  for (std::size_t i = 0; i < T; ++i) {
    const auto n = static_cast<std::size_t>(c.tensors[i].n);
    const auto p0 = course::random_vector(n, seed + 11 * i + 1, -1.f, 1.f);
    std::copy(p0.begin(), p0.end(), hp.begin() + l.p[i]);
    if (c.t0 > 1) {  // mid-training moments: m any sign, v >= 0
      const auto m0 = course::random_vector(n, seed + 11 * i + 2, static_cast<float>(-g_mag), static_cast<float>(g_mag));
      const auto v0 = course::random_vector(n, seed + 11 * i + 3, 0.f, static_cast<float>(g_mag * g_mag));
      std::copy(m0.begin(), m0.end(), hm.begin() + l.p[i]);
      std::copy(v0.begin(), v0.end(), hv.begin() + l.p[i]);
    } else {
      std::fill_n(hm.begin() + l.p[i], n, 0.f);
      std::fill_n(hv.begin() + l.p[i], n, 0.f);
    }
  }
  DeviceBuffer<float> dp(hp), dm(hm), dv(hv), dg(hg.size());
  DeviceBuffer<__nv_bfloat16> db(hb.size());
  COURSE_CUDA_CHECK(cudaMemcpy(db.data(), hb.data(), hb.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  std::vector<AdamWTensor> list(T);
  for (std::size_t i = 0; i < T; ++i) {
    const auto& s = c.tensors[i];
    list[i] = {dp.data() + l.p[i], dg.data() + l.g[i], dm.data() + l.p[i], dv.data() + l.p[i],
               s.bf16 ? db.data() + l.b[i] : nullptr, s.n, s.decay};
  }
  const std::size_t ws_bytes = adamw_workspace_bytes(step, list.data(), static_cast<std::int64_t>(T));
  DeviceBuffer<float> ws((ws_bytes + 3) / 4 + 4), norm_buf(1);
  ws.poison();
  norm_buf.poison();

  AdamWArgs a;
  a.tensors = list.data();
  a.num_tensors = static_cast<std::int64_t>(T);
  a.lr = c.lr, a.beta1 = c.beta1, a.beta2 = c.beta2, a.eps = c.eps, a.weight_decay = c.weight_decay;
  a.max_norm = c.max_norm;
  a.grad_norm = c.report_norm ? norm_buf.data() : nullptr;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();

  const double u = std::ldexp(1.0, -24);
  constexpr double K = 8.0;  // ulps allowed per term
  Outcome out;
  for (int k = 0; k < c.steps; ++k) {
    // Fresh grads every step.
    for (std::size_t i = 0; i < T; ++i) {
      const auto g = course::random_vector(static_cast<std::size_t>(c.tensors[i].n), seed + 1000003 * (k + 1) + 7 * i,
                                           static_cast<float>(c.g_lo), static_cast<float>(c.g_hi));
      std::copy(g.begin(), g.end(), hg.begin() + l.g[i]);
    }
    COURSE_CUDA_CHECK(cudaMemcpy(dg.data(), hg.data(), hg.size() * sizeof(float), cudaMemcpyHostToDevice));
    a.t = c.t0 + k;
    fn(step, a);
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> np = dp.download(), nm = dm.download(), nv = dv.download(), ng = dg.download();
    std::vector<__nv_bfloat16> nb(hb.size());
    COURSE_CUDA_CHECK(cudaMemcpy(nb.data(), db.data(), nb.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));

    // The norm.
    double sum_sq = 0.0;
    std::int64_t total = 0;
    for (std::size_t i = 0; i < T; ++i)
      for (std::int64_t j = 0; j < c.tensors[i].n; ++j) {
        const double g = hg[static_cast<std::size_t>(l.g[i] + j)];
        sum_sq += g * g;
        ++total;
      }
    const double norm_ref = std::sqrt(sum_sq);
    const Tolerance norm_tol = tolerance_for(DType::f32, std::max<std::int64_t>(total, 1));
    float norm_dev = static_cast<float>(norm_ref);
    if (c.report_norm) {
      norm_dev = norm_buf.download()[0];
      out.norm = compare_scalar(norm_dev, norm_ref, {norm_tol.rtol * norm_ref + 1e-30, norm_tol.rtol});
    } else {
      out.norm = compare_scalar(0.0, 0.0, {1.0, 0.0});  // not reported: nothing to compare
    }
    // The clip scale, as the kernel computes it (fp32, from the norm).
    float scale = 1.f;
    double scale_err = 2 * u;
    if (c.max_norm > 0.f) {
      const float clip = c.max_norm / (norm_dev + 1e-6f);
      scale = clip >= 1.f ? 1.f : clip;
      if (!c.report_norm) scale_err = 2 * u + 2 * norm_tol.rtol;
    }

    out.params = CompareResult{}, out.m = CompareResult{}, out.v = CompareResult{};
    const double t = static_cast<double>(a.t);
    const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), t);
    const double bc2s = std::sqrt(1.0 - std::pow(static_cast<double>(c.beta2), t));
    const double step_size = c.lr / bc1;
    const double b1 = c.beta1, b2 = c.beta2;
    for (std::size_t i = 0; i < T; ++i) {
      const auto n = static_cast<std::size_t>(c.tensors[i].n);
      const auto P = static_cast<std::size_t>(l.p[i]), G = static_cast<std::size_t>(l.g[i]);
      std::vector<double> p(n), g(n), m(n), v(n);
      for (std::size_t j = 0; j < n; ++j) {
        p[j] = hp[P + j], m[j] = hm[P + j], v[j] = hv[P + j];
        g[j] = static_cast<double>(hg[G + j]) * static_cast<double>(scale);
      }
      const std::vector<double> p_old = p, m_old = m, v_old = v;
      const double wd = c.tensors[i].decay ? static_cast<double>(c.weight_decay) : 0.0;
      course::ref::adamw_step(p, g, m, v, a.t, static_cast<double>(c.lr), b1, b2, static_cast<double>(c.eps), wd);
      std::vector<double> bp(n), bm(n), bv(n);
      for (std::size_t j = 0; j < n; ++j) {
        const double ag = std::fabs(g[j]);
        const double A = b1 * std::fabs(m_old[j]) + (1 - b1) * ag;
        const double B = b2 * v_old[j] + (1 - b2) * ag * ag;
        bm[j] = K * u * A + scale_err * (1 - b1) * ag + 1e-38;
        bv[j] = K * u * B + 2 * scale_err * (1 - b2) * ag * ag + 1e-38;
        const double sv = std::sqrt(v[j]);
        const double den = sv / bc2s + c.eps;
        const double dsqrt = std::min(sv > 0 ? bv[j] / (2 * sv) : INFINITY, std::sqrt(bv[j]));
        const double dden = dsqrt / bc2s + K * u * den;
        bp[j] = K * u * std::fabs(p_old[j]) * (1 + c.lr * wd) +
                step_size * (bm[j] / den + std::fabs(m[j]) * dden / (den * den) + K * u * std::fabs(m[j]) / den) +
                1e-38;
      }
      const auto slice = [&](const std::vector<float>& x) {
        return std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(P), x.begin() + static_cast<std::ptrdiff_t>(P + n));
      };
      check_bounded(out.params, slice(np), p, bp, static_cast<std::int64_t>(i), 0);
      check_bounded(out.m, slice(nm), m, bm, static_cast<std::int64_t>(i), 0);
      check_bounded(out.v, slice(nv), v, bv, static_cast<std::int64_t>(i), 0);
      if (c.tensors[i].bf16) {
        const auto B = static_cast<std::size_t>(l.b[i]);
        for (std::size_t j = 0; j < n; ++j) {
          const __nv_bfloat16 want = __float2bfloat16_rn(np[P + j]);
          if (std::memcmp(&want, &nb[B + j], sizeof want) != 0) ++out.bf16_mismatches;
        }
      }
    }
    // Sentinels (every position outside the tensors) and the grads (read only).
    std::vector<char> in_p(np.size(), 0), in_b(nb.size(), 0);
    for (std::size_t i = 0; i < T; ++i) {
      std::fill_n(in_p.begin() + l.p[i], c.tensors[i].n, 1);
      if (c.tensors[i].bf16) std::fill_n(in_b.begin() + l.b[i], c.tensors[i].n, 1);
    }
    for (std::size_t j = 0; j < np.size(); ++j)
      if (!in_p[j]) out.guard_writes += (np[j] != kSentinel) + (nm[j] != kSentinel) + (nv[j] != kSentinel);
    for (std::size_t j = 0; j < nb.size(); ++j)
      if (!in_b[j] && std::memcmp(&nb[j], &bsent, sizeof bsent) != 0) ++out.guard_writes;
    for (std::size_t j = 0; j < ng.size(); ++j)
      if (testing::bits_of(ng[j]) != testing::bits_of(hg[j])) ++out.guard_writes;

    const bool step_ok = (total == 0 || (out.params.ok() && out.m.ok() && out.v.ok())) &&
                         (!c.report_norm || out.norm.ok()) && out.bf16_mismatches == 0 && out.guard_writes == 0;
    if (!step_ok) {
      out.failed_step = k;
      return out;
    }
    hp = np, hm = nm, hv = nv;  // the next step starts from the device's state
  }
  return out;
}

inline ::testing::AssertionResult Accepted(const Outcome& o) {
  if (o.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << o.report();
}

/// The GPT's parameter list (the next rung's model): per layer ln1 g/b, qkv W + b, proj W + b,
/// ln2 g/b, fc W + b, fc_proj W + b; then token and position embeddings and the final
/// LayerNorm. Matrices (and embeddings) decay, gains and biases do not.
inline std::vector<TensorSpec> gpt_tensors(int layers, std::int64_t d, std::int64_t vocab, std::int64_t context,
                                           bool bf16) {
  std::vector<TensorSpec> t;
  const auto add = [&](std::int64_t n, bool decay) {
    TensorSpec s;
    s.n = n, s.decay = decay, s.bf16 = bf16;
    t.push_back(s);
  };
  for (int i = 0; i < layers; ++i) {
    add(d, false), add(d, false);                // ln1 g, b
    add(3 * d * d, true), add(3 * d, false);     // qkv
    add(d * d, true), add(d, false);             // proj
    add(d, false), add(d, false);                // ln2 g, b
    add(4 * d * d, true), add(4 * d, false);     // fc
    add(4 * d * d, true), add(d, false);         // fc_proj
  }
  add(vocab * d, true), add(context * d, true);  // token, position embeddings
  add(d, false), add(d, false);                  // final LayerNorm
  return t;
}

}  // namespace course::m04::adamw_checks
