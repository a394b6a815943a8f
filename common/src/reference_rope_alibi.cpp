/// @file reference_rope_alibi.cpp
/// @brief CPU references of module 3's positional options: rotary position embedding
/// (RoPE, rotate-half pairing), ALiBi slopes, and attention forward with either.
///
/// Same conventions as reference_attention.cpp: tensors indexed [B, H, N, d] with any
/// strides; causal masks bottom-right aligned (query i sees key j iff j <= i + N_k - N_q);
/// query head h reads kv head h / (H / H_kv); a row with no visible key has O = 0 and
/// lse = -inf. Positions follow the mask's alignment: key j is at position j, query i at
/// position i + N_k - N_q. Everything accumulates in double.

#include "course/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace course::ref {

template <class T>
HostTensor<T> apply_rope(const HostTensor<T>& x, double theta, std::int64_t position_offset) {
  const char* fn = "apply_rope";
  require_arg(x.rank() == 4, fn, "x.shape()", shape_string(x.shape()), "must be 4-D [B, H, N, d]");
  const std::int64_t B = x.dim(0), H = x.dim(1), N = x.dim(2), d = x.dim(3);
  require_arg(d >= 2 && d % 2 == 0, fn, "d", d, "head dimension x.shape()[3] must be even and >= 2");
  require_arg(std::isfinite(theta) && theta > 1.0, fn, "theta", theta, "must be finite and > 1");
  HostTensor<T> out({B, H, N, d});
  const std::int64_t half = d / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t c = 0; c < half; ++c)
    inv_freq[static_cast<std::size_t>(c)] = std::pow(theta, -2.0 * static_cast<double>(c) / static_cast<double>(d));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t n = 0; n < N; ++n) {
        const double pos = static_cast<double>(n + position_offset);
        const T* in = x.data() + b * x.stride(0) + h * x.stride(1) + n * x.stride(2);
        T* o = out.data() + ((b * H + h) * N + n) * d;
        for (std::int64_t c = 0; c < half; ++c) {
          const double angle = pos * inv_freq[static_cast<std::size_t>(c)];
          const double cs = std::cos(angle), sn = std::sin(angle);
          const double x0 = static_cast<double>(in[c * x.stride(3)]);
          const double x1 = static_cast<double>(in[(c + half) * x.stride(3)]);
          o[c] = static_cast<T>(x0 * cs - x1 * sn);
          o[c + half] = static_cast<T>(x0 * sn + x1 * cs);
        }
      }
  return out;
}

double alibi_slope(std::int64_t h, std::int64_t H) {
  require_arg(H >= 1, "alibi_slope", "H", H, "must be >= 1");
  require_arg(h >= 0 && h < H, "alibi_slope", "h", h, ("must lie in [0, H = " + std::to_string(H) + ")").c_str());
  return std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(H));
}

template <class T>
AttentionResult<T> attention_forward_positional(const HostTensor<T>& q, const HostTensor<T>& k,
                                                const HostTensor<T>& v, const AttentionOptions& opts,
                                                const PositionalOptions& pos) {
  const char* fn = "attention_forward_positional";
  require_arg(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, fn, "q.shape()", shape_string(q.shape()),
              "q, k and v must be 4-D [B, H, N, d]");
  require_arg(v.shape() == k.shape(), fn, "v.shape()", shape_string(v.shape()),
              ("must equal k.shape() " + shape_string(k.shape())).c_str());
  const std::int64_t B = q.dim(0), H = q.dim(1), Nq = q.dim(2), d = q.dim(3);
  const std::int64_t Hkv = k.dim(1), Nk = k.dim(2);
  require_arg(k.dim(0) == B, fn, "k.shape()", shape_string(k.shape()), "batch must equal q's");
  require_arg(k.dim(3) == d, fn, "k.shape()", shape_string(k.shape()), "head dimension must equal q's");
  require_arg(H >= 1 && Hkv >= 1 && H % Hkv == 0, fn, "H_kv", Hkv,
              ("must be >= 1 and divide H = " + std::to_string(H)).c_str());
  require_arg(std::isfinite(opts.scale) && opts.scale >= 0.0, fn, "opts.scale", opts.scale,
              "must be finite and >= 0 (0 selects 1/sqrt(d))");
  const double scale = opts.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d)) : opts.scale;
  const std::int64_t offset = Nk - Nq;  // query i sits at position i + offset
  const std::int64_t group = H / Hkv;

  // Rotate (or just gather) into contiguous double tensors.
  const HostTensor<double> qd = pos.rope ? apply_rope(q.template cast<double>(), pos.rope_theta, offset)
                                         : q.template cast<double>().contiguous();
  const HostTensor<double> kd = pos.rope ? apply_rope(k.template cast<double>(), pos.rope_theta, 0)
                                         : k.template cast<double>().contiguous();
  const HostTensor<double> vd = v.template cast<double>().contiguous();

  AttentionResult<T> r{HostTensor<T>({B, H, Nq, d}), HostTensor<T>({B, H, Nq})};
  std::vector<double> s(static_cast<std::size_t>(Nk)), o(static_cast<std::size_t>(d));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t hk = h / group;
      const double slope = pos.alibi ? alibi_slope(h, H) : 0.0;
      const double* K = kd.data() + (b * Hkv + hk) * Nk * d;
      const double* V = vd.data() + (b * Hkv + hk) * Nk * d;
      for (std::int64_t i = 0; i < Nq; ++i) {
        const double* qi = qd.data() + ((b * H + h) * Nq + i) * d;
        const std::int64_t visible = opts.causal ? std::clamp<std::int64_t>(i + offset + 1, 0, Nk) : Nk;
        T* out = r.out.data() + ((b * H + h) * Nq + i) * d;
        T* lse = r.lse.data() + (b * H + h) * Nq + i;
        std::fill(o.begin(), o.end(), 0.0);
        if (visible == 0) {
          for (std::int64_t c = 0; c < d; ++c) out[c] = T(0);
          *lse = static_cast<T>(-std::numeric_limits<double>::infinity());
          continue;
        }
        double m = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < visible; ++j) {
          double dot = 0.0;
          for (std::int64_t c = 0; c < d; ++c) dot += qi[c] * K[j * d + c];
          s[static_cast<std::size_t>(j)] = scale * dot + slope * static_cast<double>(j - (i + offset));
          m = std::max(m, s[static_cast<std::size_t>(j)]);
        }
        double l = 0.0;
        for (std::int64_t j = 0; j < visible; ++j) {
          const double p = std::exp(s[static_cast<std::size_t>(j)] - m);
          l += p;
          for (std::int64_t c = 0; c < d; ++c) o[static_cast<std::size_t>(c)] += p * V[j * d + c];
        }
        for (std::int64_t c = 0; c < d; ++c) out[c] = static_cast<T>(o[static_cast<std::size_t>(c)] / l);
        *lse = static_cast<T>(m + std::log(l));
      }
    }
  return r;
}

#define COURSE_INSTANTIATE_POSITIONAL(T)                                                                   \
  template HostTensor<T> apply_rope(const HostTensor<T>&, double, std::int64_t);                          \
  template AttentionResult<T> attention_forward_positional(const HostTensor<T>&, const HostTensor<T>&,     \
                                                           const HostTensor<T>&, const AttentionOptions&, \
                                                           const PositionalOptions&);
COURSE_INSTANTIATE_POSITIONAL(float)
COURSE_INSTANTIATE_POSITIONAL(double)
#undef COURSE_INSTANTIATE_POSITIONAL

}  // namespace course::ref
