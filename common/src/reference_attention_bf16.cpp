/// @file reference_attention_bf16.cpp
/// @brief The plain bf16-precision attention forward and backward
/// (course::ref::attention_forward_bf16, attention_backward_bf16): the same-precision
/// baselines that FlashAttention's accuracy rule compares bf16 kernels with. Every rounding
/// step is written out: inputs to bf16, products in fp32, the mma operands (P, dS) to bf16,
/// results accumulated in fp32 and rounded to bf16 once.

#include "course/reference.hpp"

#include "course/error.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace course::ref {

namespace {

float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/// The (b, h) matrix [N, d] of a [B, H, N, d] tensor, rounded to bf16, row-major.
std::vector<float> gather_bf16(const HostTensor<float>& x, std::int64_t b, std::int64_t h) {
  const std::int64_t N = x.dim(2), d = x.dim(3);
  std::vector<float> out(static_cast<std::size_t>(N * d));
  const float* base = x.data() + b * x.stride(0) + h * x.stride(1);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < d; ++c) out[n * d + c] = round_bf16(base[n * x.stride(2) + c * x.stride(3)]);
  return out;
}

}  // namespace

AttentionResult<float> attention_forward_bf16(const HostTensor<float>& q, const HostTensor<float>& k,
                                              const HostTensor<float>& v, const AttentionOptions& opts) {
  const char* fn = "attention_forward_bf16";
  require_arg(q.rank() == 4, fn, "q.shape()", shape_string(q.shape()), "must be 4-D [B, H, N_q, d]");
  require_arg(k.rank() == 4, fn, "k.shape()", shape_string(k.shape()), "must be 4-D [B, H_kv, N_k, d]");
  require_arg(v.shape() == k.shape(), fn, "v.shape()", shape_string(v.shape()),
              ("must equal k.shape() " + shape_string(k.shape())).c_str());
  const std::int64_t B = q.dim(0), H = q.dim(1), N_q = q.dim(2), d = q.dim(3);
  const std::int64_t H_kv = k.dim(1), N_k = k.dim(2);
  require_arg(k.dim(0) == B, fn, "k.shape()", shape_string(k.shape()),
              ("batch (dim 0) must equal q's B = " + std::to_string(B)).c_str());
  require_arg(k.dim(3) == d, fn, "k.shape()", shape_string(k.shape()),
              ("head dimension (dim 3) must equal q's d = " + std::to_string(d)).c_str());
  require_arg(H >= 1 && H_kv >= 1 && H % H_kv == 0, fn, "H_kv", H_kv,
              ("must be >= 1 and divide the number of query heads H = " + std::to_string(H)).c_str());
  require_arg(std::isfinite(opts.scale) && opts.scale >= 0.0, fn, "opts.scale", opts.scale,
              "must be finite and >= 0 (0 selects 1/sqrt(d))");
  const float scale =
      opts.scale == 0.0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))) : static_cast<float>(opts.scale);
  const std::int64_t group = H / H_kv;

  AttentionResult<float> r{HostTensor<float>({B, H, N_q, d}), HostTensor<float>({B, H, N_q})};
  std::vector<float> s(static_cast<std::size_t>(N_k)), o(static_cast<std::size_t>(d));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t hk = 0; hk < H_kv; ++hk) {
      const std::vector<float> K = gather_bf16(k, b, hk), V = gather_bf16(v, b, hk);
      for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const std::vector<float> Q = gather_bf16(q, b, h);
        float* out = r.out.data() + (b * H + h) * N_q * d;
        float* lse = r.lse.data() + (b * H + h) * N_q;
        for (std::int64_t i = 0; i < N_q; ++i) {
          const std::int64_t visible = opts.causal ? std::clamp<std::int64_t>(i + (N_k - N_q) + 1, 0, N_k) : N_k;
          std::fill(o.begin(), o.end(), 0.f);
          if (visible == 0) {
            lse[i] = -std::numeric_limits<float>::infinity();
            std::copy(o.begin(), o.end(), out + i * d);
            continue;
          }
          float m = -std::numeric_limits<float>::infinity();
          for (std::int64_t j = 0; j < visible; ++j) {
            float dot = 0.f;  // fp32, in order; each bf16 x bf16 product is exact in fp32
            for (std::int64_t c = 0; c < d; ++c) dot += Q[i * d + c] * K[j * d + c];
            s[j] = dot * scale;
            m = std::max(m, s[j]);
          }
          float l = 0.f;
          for (std::int64_t j = 0; j < visible; ++j) {
            s[j] = std::exp(s[j] - m);
            l += s[j];
          }
          for (std::int64_t j = 0; j < visible; ++j) {
            const float p = round_bf16(s[j] / l);  // P in bf16, the A operand of a bf16 P*V
            for (std::int64_t c = 0; c < d; ++c) o[c] += p * V[j * d + c];
          }
          for (std::int64_t c = 0; c < d; ++c) out[i * d + c] = round_bf16(o[c]);
          lse[i] = m + std::log(l);
        }
      }
    }
  return r;
}

AttentionGrads<float> attention_backward_bf16(const HostTensor<float>& q, const HostTensor<float>& k,
                                              const HostTensor<float>& v, const HostTensor<float>& o,
                                              const HostTensor<float>& dout, const std::vector<float>& lse,
                                              const AttentionOptions& opts) {
  const char* fn = "attention_backward_bf16";
  require_arg(q.rank() == 4 && k.rank() == 4, fn, "q.shape()", shape_string(q.shape()),
              "q and k must be 4-D [B, H, N, d]");
  require_arg(v.shape() == k.shape(), fn, "v.shape()", shape_string(v.shape()),
              ("must equal k.shape() " + shape_string(k.shape())).c_str());
  require_arg(o.shape() == q.shape() && dout.shape() == q.shape(), fn, "o.shape()", shape_string(o.shape()),
              ("o and dout must have q's shape " + shape_string(q.shape())).c_str());
  const std::int64_t B = q.dim(0), H = q.dim(1), N_q = q.dim(2), d = q.dim(3);
  const std::int64_t H_kv = k.dim(1), N_k = k.dim(2);
  require_arg(k.dim(0) == B && k.dim(3) == d, fn, "k.shape()", shape_string(k.shape()),
              "must have q's batch and head dimension");
  require_arg(H >= 1 && H_kv >= 1 && H % H_kv == 0, fn, "H_kv", H_kv, "must be >= 1 and divide H");
  require_arg(static_cast<std::int64_t>(lse.size()) == B * H * N_q, fn, "lse.size()", lse.size(),
              "must be B * H * N_q");
  const float scale =
      opts.scale == 0.0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))) : static_cast<float>(opts.scale);
  const std::int64_t group = H / H_kv;

  AttentionGrads<float> r{HostTensor<float>({B, H, N_q, d}), HostTensor<float>({B, H_kv, N_k, d}),
                          HostTensor<float>({B, H_kv, N_k, d})};
  std::vector<float> dk(static_cast<std::size_t>(N_k * d)), dv(static_cast<std::size_t>(N_k * d));
  std::vector<float> dq(static_cast<std::size_t>(d));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t hk = 0; hk < H_kv; ++hk) {
      const std::vector<float> K = gather_bf16(k, b, hk), V = gather_bf16(v, b, hk);
      std::fill(dk.begin(), dk.end(), 0.f);
      std::fill(dv.begin(), dv.end(), 0.f);
      for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        const std::vector<float> Q = gather_bf16(q, b, h), O = gather_bf16(o, b, h), dO = gather_bf16(dout, b, h);
        float* dq_out = r.dq.data() + (b * H + h) * N_q * d;
        for (std::int64_t i = 0; i < N_q; ++i) {
          std::fill(dq.begin(), dq.end(), 0.f);
          const float l = lse[static_cast<std::size_t>((b * H + h) * N_q + i)];
          const std::int64_t visible =
              l == -std::numeric_limits<float>::infinity()
                  ? 0
                  : (opts.causal ? std::clamp<std::int64_t>(i + (N_k - N_q) + 1, 0, N_k) : N_k);
          float D = 0.f;
          for (std::int64_t c = 0; c < d; ++c) D += dO[i * d + c] * O[i * d + c];
          for (std::int64_t j = 0; j < visible; ++j) {
            float s = 0.f, dp = 0.f;
            for (std::int64_t c = 0; c < d; ++c) {
              s += Q[i * d + c] * K[j * d + c];
              dp += dO[i * d + c] * V[j * d + c];
            }
            const float p = std::exp(s * scale - l);
            const float p16 = round_bf16(p), ds16 = round_bf16(p * (dp - D));
            for (std::int64_t c = 0; c < d; ++c) {
              dv[j * d + c] += p16 * dO[i * d + c];
              dk[j * d + c] += ds16 * Q[i * d + c];
              dq[c] += ds16 * K[j * d + c];
            }
          }
          for (std::int64_t c = 0; c < d; ++c) dq_out[i * d + c] = round_bf16(scale * dq[c]);
        }
      }
      float* dk_out = r.dk.data() + (b * H_kv + hk) * N_k * d;
      float* dv_out = r.dv.data() + (b * H_kv + hk) * N_k * d;
      for (std::int64_t e = 0; e < N_k * d; ++e) {
        dk_out[e] = round_bf16(scale * dk[e]);
        dv_out[e] = round_bf16(dv[e]);
      }
    }
  return r;
}

}  // namespace course::ref
