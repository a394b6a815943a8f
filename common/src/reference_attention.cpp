/// @file reference_attention.cpp
/// @brief CPU references of scaled dot-product attention: forward (O and the
/// logsumexp of each score row) and backward (dQ, dK, dV, recomputing P).
///
/// Conventions shared with every attention kernel of the course:
///  - tensors are indexed [B, H, N, d] with any strides (BHND or BNHD storage);
///  - scale = opts.scale, or 1/sqrt(d) when it is 0;
///  - causal masks are bottom-right aligned: query i sees key j iff j <= i + (N_k - N_q),
///    so the last query always sees every key (the decoding convention);
///  - grouped-query attention: query head h reads kv head h / (H / H_kv);
///  - a row with no visible key has O = 0, lse = -inf and contributes no gradient.
/// Accumulation is in double; each (batch, kv head) copies its K and V once into
/// contiguous double buffers so the inner loops are unit-stride.

#include "course/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

namespace course::ref {

namespace {

struct AttnDims {
  std::int64_t B = 0, H = 0, H_kv = 0, N_q = 0, N_k = 0, d = 0;
  double scale = 0.0;
  bool causal = false;
  /// Number of keys query i sees: all N_k, or min(N_k, i + N_k - N_q + 1) (<= 0: none).
  std::int64_t visible(std::int64_t i) const {
    if (!causal) return N_k;
    return std::clamp<std::int64_t>(i + (N_k - N_q) + 1, 0, N_k);
  }
  std::int64_t group() const { return H / H_kv; }
};

template <class T>
AttnDims validate(const char* fn, const HostTensor<T>& q, const HostTensor<T>& k, const HostTensor<T>& v,
                  const AttentionOptions& opts) {
  require_arg(q.rank() == 4, fn, "q.shape()", shape_string(q.shape()), "must be 4-D [B, H, N_q, d]");
  require_arg(k.rank() == 4, fn, "k.shape()", shape_string(k.shape()), "must be 4-D [B, H_kv, N_k, d]");
  require_arg(v.shape() == k.shape(), fn, "v.shape()", shape_string(v.shape()),
              ("must equal k.shape() " + shape_string(k.shape())).c_str());
  AttnDims a;
  a.B = q.dim(0);
  a.H = q.dim(1);
  a.N_q = q.dim(2);
  a.d = q.dim(3);
  a.H_kv = k.dim(1);
  a.N_k = k.dim(2);
  require_arg(k.dim(0) == a.B, fn, "k.shape()", shape_string(k.shape()),
              ("batch (dim 0) must equal q's B = " + std::to_string(a.B)).c_str());
  require_arg(a.H >= 1, fn, "H", a.H, "q must have at least one head (q.shape()[1])");
  require_arg(a.H_kv >= 1, fn, "H_kv", a.H_kv, "k and v must have at least one head (k.shape()[1])");
  require_arg(a.H % a.H_kv == 0, fn, "H_kv", a.H_kv,
              ("must divide the number of query heads H = " + std::to_string(a.H) +
               " (grouped-query attention)").c_str());
  require_arg(a.d >= 1, fn, "d", a.d, "head dimension q.shape()[3] must be >= 1");
  require_arg(k.dim(3) == a.d, fn, "k.shape()", shape_string(k.shape()),
              ("head dimension (dim 3) must equal q's d = " + std::to_string(a.d)).c_str());
  require_arg(std::isfinite(opts.scale) && opts.scale >= 0.0, fn, "opts.scale", opts.scale,
              "must be finite and >= 0 (0 selects 1/sqrt(d))");
  a.scale = opts.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(a.d)) : opts.scale;
  a.causal = opts.causal;
  return a;
}

/// Copies the [N, d] matrix of (b, h) of a [B, H, N, d] tensor into `dst` (row-major, double).
template <class T>
void gather(const HostTensor<T>& x, std::int64_t b, std::int64_t h, std::vector<double>& dst) {
  const std::int64_t N = x.dim(2), d = x.dim(3);
  dst.resize(static_cast<std::size_t>(N * d));
  const T* base = x.data() + b * x.stride(0) + h * x.stride(1);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < d; ++c) dst[n * d + c] = static_cast<double>(base[n * x.stride(2) + c * x.stride(3)]);
}

/// Probabilities of one query row: p[j] for j < visible (normalized), returns the
/// logsumexp of the scaled scores (or -inf when no key is visible).
double softmax_row(const AttnDims& a, const double* qrow, const std::vector<double>& K, std::int64_t visible,
                   std::vector<double>& p) {
  if (visible <= 0) return -std::numeric_limits<double>::infinity();
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < visible; ++j) {
    double s = 0.0;
    for (std::int64_t c = 0; c < a.d; ++c) s += qrow[c] * K[j * a.d + c];
    p[j] = a.scale * s;
    m = std::max(m, p[j]);
  }
  double l = 0.0;
  for (std::int64_t j = 0; j < visible; ++j) {
    p[j] = std::exp(p[j] - m);
    l += p[j];
  }
  for (std::int64_t j = 0; j < visible; ++j) p[j] /= l;
  return m + std::log(l);
}

}  // namespace

template <class T>
AttentionResult<T> attention_forward(const HostTensor<T>& q, const HostTensor<T>& k, const HostTensor<T>& v,
                                     const AttentionOptions& opts) {
  const AttnDims a = validate("attention_forward", q, k, v, opts);
  AttentionResult<T> r{HostTensor<T>({a.B, a.H, a.N_q, a.d}), HostTensor<T>({a.B, a.H, a.N_q})};
  std::vector<double> K, V, Q, p(static_cast<std::size_t>(a.N_k)), o(static_cast<std::size_t>(a.d));
  for (std::int64_t b = 0; b < a.B; ++b) {
    for (std::int64_t hk = 0; hk < a.H_kv; ++hk) {
      gather(k, b, hk, K);
      gather(v, b, hk, V);
      for (std::int64_t h = hk * a.group(); h < (hk + 1) * a.group(); ++h) {
        gather(q, b, h, Q);
        T* out = r.out.data() + (b * a.H + h) * a.N_q * a.d;
        T* lse = r.lse.data() + (b * a.H + h) * a.N_q;
        for (std::int64_t i = 0; i < a.N_q; ++i) {
          const std::int64_t vis = a.visible(i);
          lse[i] = static_cast<T>(softmax_row(a, &Q[i * a.d], K, vis, p));
          std::fill(o.begin(), o.end(), 0.0);
          for (std::int64_t j = 0; j < vis; ++j)
            for (std::int64_t c = 0; c < a.d; ++c) o[c] += p[j] * V[j * a.d + c];
          for (std::int64_t c = 0; c < a.d; ++c) out[i * a.d + c] = static_cast<T>(o[c]);
        }
      }
    }
  }
  return r;
}

template <class T>
AttentionGrads<T> attention_backward(const HostTensor<T>& q, const HostTensor<T>& k, const HostTensor<T>& v,
                                     const HostTensor<T>& dout, const AttentionOptions& opts) {
  const char* fn = "attention_backward";
  const AttnDims a = validate(fn, q, k, v, opts);
  require_arg(dout.shape() == q.shape(), fn, "dout.shape()", shape_string(dout.shape()),
              ("must equal q.shape() " + shape_string(q.shape())).c_str());
  AttentionGrads<T> g{HostTensor<T>({a.B, a.H, a.N_q, a.d}), HostTensor<T>({a.B, a.H_kv, a.N_k, a.d}),
                      HostTensor<T>({a.B, a.H_kv, a.N_k, a.d})};
  const std::size_t nk = static_cast<std::size_t>(a.N_k), dd = static_cast<std::size_t>(a.d);
  std::vector<double> K, V, Q, dO, p(nk), dp(nk), dq(dd), dK(nk * dd), dV(nk * dd);
  for (std::int64_t b = 0; b < a.B; ++b) {
    for (std::int64_t hk = 0; hk < a.H_kv; ++hk) {
      gather(k, b, hk, K);
      gather(v, b, hk, V);
      std::fill(dK.begin(), dK.end(), 0.0);
      std::fill(dV.begin(), dV.end(), 0.0);
      for (std::int64_t h = hk * a.group(); h < (hk + 1) * a.group(); ++h) {
        gather(q, b, h, Q);
        gather(dout, b, h, dO);
        T* dq_out = g.dq.data() + (b * a.H + h) * a.N_q * a.d;
        for (std::int64_t i = 0; i < a.N_q; ++i) {
          const std::int64_t vis = a.visible(i);
          const double* qi = &Q[i * a.d];
          const double* doi = &dO[i * a.d];
          softmax_row(a, qi, K, vis, p);
          // dP_ij = dO_i . V_j;  dS_ij = P_ij (dP_ij - D_i) with D_i = sum_j P_ij dP_ij (= dO_i . O_i).
          double D = 0.0;
          for (std::int64_t j = 0; j < vis; ++j) {
            double s = 0.0;
            for (std::int64_t c = 0; c < a.d; ++c) s += doi[c] * V[j * a.d + c];
            dp[j] = s;
            D += p[j] * s;
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (std::int64_t j = 0; j < vis; ++j) {
            const double ds = p[j] * (dp[j] - D) * a.scale;  // S = scale * Q K^T
            for (std::int64_t c = 0; c < a.d; ++c) {
              dq[c] += ds * K[j * a.d + c];
              dK[j * a.d + c] += ds * qi[c];
              dV[j * a.d + c] += p[j] * doi[c];
            }
          }
          for (std::int64_t c = 0; c < a.d; ++c) dq_out[i * a.d + c] = static_cast<T>(dq[c]);
        }
      }
      T* dk_out = g.dk.data() + (b * a.H_kv + hk) * a.N_k * a.d;
      T* dv_out = g.dv.data() + (b * a.H_kv + hk) * a.N_k * a.d;
      for (std::size_t e = 0; e < nk * dd; ++e) {
        dk_out[e] = static_cast<T>(dK[e]);
        dv_out[e] = static_cast<T>(dV[e]);
      }
    }
  }
  return g;
}

#define COURSE_INSTANTIATE_ATTENTION(T)                                                                   \
  template AttentionResult<T> attention_forward(const HostTensor<T>&, const HostTensor<T>&,               \
                                                const HostTensor<T>&, const AttentionOptions&);           \
  template AttentionGrads<T> attention_backward(const HostTensor<T>&, const HostTensor<T>&,               \
                                                const HostTensor<T>&, const HostTensor<T>&,               \
                                                const AttentionOptions&);
COURSE_INSTANTIATE_ATTENTION(float)
COURSE_INSTANTIATE_ATTENTION(double)
#undef COURSE_INSTANTIATE_ATTENTION

}  // namespace course::ref
