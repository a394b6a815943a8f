/// @file layer_norm_planted.cu
/// @brief Deliberately wrong LayerNorm kernels (see layer_norm_planted.hpp). Each is a
/// realistic mistake in an otherwise working one-thread-per-row (forward, dx) or
/// one-thread-per-column (dgamma, dbeta) kernel, so only the planted bug separates it from
/// a correct answer.

#include "layer_norm_planted.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::planted {
namespace {

using m04::LayerNormArgs;
using m04::LayerNormBackwardArgs;

__device__ __forceinline__ float f32(float v) { return v; }
__device__ __forceinline__ float f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_f32(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return __float2bfloat16_rn(v);
}

enum class Bug { variance_without_mean, rstd_without_eps, dgamma_without_xhat, dx_without_projection };

template <class T, Bug kBug>
__global__ void forward_kernel(LayerNormArgs a) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.rows) return;
  const T* x = static_cast<const T*>(a.x) + r * a.ldx;
  T* y = static_cast<T*>(a.y) + r * a.ldy;
  float s = 0.f, s2 = 0.f;
  for (std::int64_t c = 0; c < a.C; ++c) s += f32(x[c]);
  const float mu = s / a.C;
  for (std::int64_t c = 0; c < a.C; ++c) {
    const float d = kBug == Bug::variance_without_mean ? f32(x[c]) : f32(x[c]) - mu;  // BUG (1): E[x^2]
    s2 += d * d;
  }
  const float var = s2 / a.C;
  const float rs = kBug == Bug::rstd_without_eps ? rsqrtf(var) : rsqrtf(var + a.eps);  // BUG (2): no eps
  for (std::int64_t c = 0; c < a.C; ++c) y[c] = from_f32<T>((f32(x[c]) - mu) * rs * a.gamma[c] + a.beta[c]);
  a.mean[r] = mu;
  a.rstd[r] = rs;
}

/// One thread per COLUMN for dgamma, dbeta (deterministic, no atomics), one per ROW for dx.
template <class T, Bug kBug>
__global__ void backward_params_kernel(LayerNormBackwardArgs a) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.C) return;
  float dg = 0.f, db = 0.f;
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const float d = f32(static_cast<const T*>(a.dy)[r * a.lddy + c]);
    const float xh = (f32(static_cast<const T*>(a.x)[r * a.ldx + c]) - a.mean[r]) * a.rstd[r];
    dg += kBug == Bug::dgamma_without_xhat ? d : d * xh;  // BUG (3): no xhat
    db += d;
  }
  a.dgamma[c] = a.accumulate_dparams ? a.dgamma[c] + dg : dg;
  a.dbeta[c] = a.accumulate_dparams ? a.dbeta[c] + db : db;
}

template <class T, Bug kBug>
__global__ void backward_dx_kernel(LayerNormBackwardArgs a) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.rows) return;
  const T* x = static_cast<const T*>(a.x) + r * a.ldx;
  const T* dy = static_cast<const T*>(a.dy) + r * a.lddy;
  T* dx = static_cast<T*>(a.dx) + r * a.lddx;
  const float mu = a.mean[r], rs = a.rstd[r];
  float sg = 0.f, sgx = 0.f;
  for (std::int64_t c = 0; c < a.C; ++c) {
    const float g = f32(dy[c]) * a.gamma[c];
    sg += g;
    sgx += g * (f32(x[c]) - mu) * rs;
  }
  const float mg = sg / a.C, mgx = kBug == Bug::dx_without_projection ? 0.f : sgx / a.C;  // BUG (4)
  for (std::int64_t c = 0; c < a.C; ++c) {
    float v = rs * (f32(dy[c]) * a.gamma[c] - mg - (f32(x[c]) - mu) * rs * mgx);
    if (a.accumulate_dx) v += f32(dx[c]);
    dx[c] = from_f32<T>(v);
  }
}

unsigned blocks(std::int64_t n) { return static_cast<unsigned>((n + 127) / 128); }

template <Bug kBug>
void forward(const LayerNormArgs& a, const char* name) {
  m04::validate_layer_norm_args(a, m04::LayerNormStep::thread_per_row, name);
  if (a.rows == 0) return;
  if (a.dtype == DType::bf16) forward_kernel<__nv_bfloat16, kBug><<<blocks(a.rows), 128, 0, a.stream>>>(a);
  else forward_kernel<float, kBug><<<blocks(a.rows), 128, 0, a.stream>>>(a);
  COURSE_CHECK_LAUNCH(name);
}

template <Bug kBug>
void backward(const LayerNormBackwardArgs& a, const char* name) {
  m04::validate_layer_norm_backward_args(a, m04::LayerNormBackwardStep::atomic_params, name);
  if (a.rows == 0) return;
  if (a.dtype == DType::bf16) {
    backward_params_kernel<__nv_bfloat16, kBug><<<blocks(a.C), 128, 0, a.stream>>>(a);
    backward_dx_kernel<__nv_bfloat16, kBug><<<blocks(a.rows), 128, 0, a.stream>>>(a);
  } else {
    backward_params_kernel<float, kBug><<<blocks(a.C), 128, 0, a.stream>>>(a);
    backward_dx_kernel<float, kBug><<<blocks(a.rows), 128, 0, a.stream>>>(a);
  }
  COURSE_CHECK_LAUNCH(name);
}

}  // namespace

void layer_norm_variance_without_mean(m04::LayerNormStep, const m04::LayerNormArgs& args) {
  forward<Bug::variance_without_mean>(args, "layer_norm_variance_without_mean");
}

void layer_norm_rstd_without_eps(m04::LayerNormStep, const m04::LayerNormArgs& args) {
  forward<Bug::rstd_without_eps>(args, "layer_norm_rstd_without_eps");
}

void layer_norm_backward_dgamma_without_xhat(m04::LayerNormBackwardStep, const m04::LayerNormBackwardArgs& args) {
  backward<Bug::dgamma_without_xhat>(args, "layer_norm_backward_dgamma_without_xhat");
}

void layer_norm_backward_dx_without_projection(m04::LayerNormBackwardStep, const m04::LayerNormBackwardArgs& args) {
  backward<Bug::dx_without_projection>(args, "layer_norm_backward_dx_without_projection");
}

}  // namespace course::planted
