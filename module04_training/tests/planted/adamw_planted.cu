/// @file adamw_planted.cu
/// @brief Deliberately wrong AdamW steps (see adamw_planted.hpp): one plain implementation
/// (a block per tensor sums the squares into the workspace's first float, tensor after
/// tensor; one thread per element updates), with one bug switched on per entry point.

#include "adamw_planted.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace course::planted {
namespace {

using m04::AdamWArgs;

enum class Bug { no_bias_correction, decay_on_m, clip_ignored, decay_ignores_flag, stale_bf16, norm_without_sqrt };

/// One block adds the squares of x to *acc (launches on one stream run in order).
__global__ void add_squares_kernel(const float* x, std::int64_t n, float* acc) {
  __shared__ float part[256];
  float s = 0.f;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i] * x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int k = 0; k < 256; ++k) t += part[k];
    *acc += t;
  }
}

__global__ void finish_kernel(float* ws, float max_norm, float* norm_out, bool sqrt_it) {
  const float norm = sqrt_it ? sqrtf(ws[0]) : ws[0];
  if (norm_out != nullptr) *norm_out = norm;
  const float clip = max_norm / (norm + 1e-6f);
  ws[1] = max_norm > 0.f ? (clip >= 1.f ? 1.f : clip) : 1.f;
}

struct Consts {
  float lr_wd, beta1, beta2, step_size, bias2_sqrt, eps;
};

template <Bug kBug>
__global__ void update_kernel(float* p, const float* g, float* m, float* v, __nv_bfloat16* bf16, std::int64_t n,
                              Consts c, bool decay, const float* ws) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float scale = kBug == Bug::clip_ignored ? 1.f : ws[1];
  const float gi = g[i] * scale;
  float pi = p[i], mi = m[i], vi = v[i];
  const float p_old = pi;
  const bool d = kBug == Bug::decay_ignores_flag ? true : decay;
  if (d && kBug != Bug::decay_on_m) pi -= c.lr_wd * pi;
  if (d && kBug == Bug::decay_on_m) mi -= c.lr_wd * mi;
  mi = c.beta1 * mi + (1.f - c.beta1) * gi;
  vi = c.beta2 * vi + (1.f - c.beta2) * gi * gi;
  if (kBug == Bug::no_bias_correction) {
    pi -= (c.step_size * mi) / (sqrtf(vi) + c.eps);  // step_size = lr here
  } else {
    pi -= (c.step_size * mi) / (sqrtf(vi) / c.bias2_sqrt + c.eps);
  }
  p[i] = pi, m[i] = mi, v[i] = vi;
  if (bf16 != nullptr) bf16[i] = __float2bfloat16_rn(kBug == Bug::stale_bf16 ? p_old : pi);
}

template <Bug kBug>
void run(const AdamWArgs& a) {
  m04::validate_adamw_args(a, m04::AdamWStep::per_tensor, "planted adamw");
  float* ws = static_cast<float*>(a.workspace);
  cudaMemsetAsync(ws, 0, sizeof(float), a.stream);
  for (std::int64_t i = 0; i < a.num_tensors; ++i)
    if (a.tensors[i].n > 0) add_squares_kernel<<<1, 256, 0, a.stream>>>(a.tensors[i].grads, a.tensors[i].n, ws);
  finish_kernel<<<1, 1, 0, a.stream>>>(ws, a.max_norm, a.grad_norm, kBug != Bug::norm_without_sqrt);
  const double t = static_cast<double>(a.t);
  Consts c;
  c.lr_wd = a.lr * a.weight_decay;
  c.beta1 = a.beta1, c.beta2 = a.beta2, c.eps = a.eps;
  c.step_size = kBug == Bug::no_bias_correction ? a.lr : static_cast<float>(a.lr / (1.0 - std::pow(a.beta1, t)));
  c.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(a.beta2, t)));
  for (std::int64_t i = 0; i < a.num_tensors; ++i) {
    const m04::AdamWTensor& x = a.tensors[i];
    if (x.n == 0) continue;
    update_kernel<kBug><<<static_cast<unsigned>((x.n + 255) / 256), 256, 0, a.stream>>>(x.params, x.grads, x.m, x.v,
                                                                                         x.bf16, x.n, c, x.decay, ws);
  }
}

}  // namespace

void adamw_no_bias_correction(m04::AdamWStep, const AdamWArgs& a) { run<Bug::no_bias_correction>(a); }
void adamw_decay_on_m(m04::AdamWStep, const AdamWArgs& a) { run<Bug::decay_on_m>(a); }
void adamw_clip_ignored(m04::AdamWStep, const AdamWArgs& a) { run<Bug::clip_ignored>(a); }
void adamw_decay_ignores_flag(m04::AdamWStep, const AdamWArgs& a) { run<Bug::decay_ignores_flag>(a); }
void adamw_stale_bf16(m04::AdamWStep, const AdamWArgs& a) { run<Bug::stale_bf16>(a); }
void adamw_norm_without_sqrt(m04::AdamWStep, const AdamWArgs& a) { run<Bug::norm_without_sqrt>(a); }

}  // namespace course::planted
