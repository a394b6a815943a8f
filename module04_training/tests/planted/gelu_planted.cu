/// @file gelu_planted.cu
/// @brief Deliberately wrong GELU kernels (see gelu_planted.hpp): one plain element-per-thread
/// kernel with one bug switched on per entry point.

#include "gelu_planted.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace course::planted {
namespace {

enum class Bug { wrong_constant, missing_term, ignores_accumulate, dropped_tail };

__device__ float load(const void* p, std::int64_t i, bool bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ void store(void* p, std::int64_t i, float v, bool bf16) {
  if (bf16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else static_cast<float*>(p)[i] = v;
}

template <Bug kBug>
__global__ void forward_kernel(const void* x, void* y, std::int64_t n, bool bf16) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t limit = kBug == Bug::dropped_tail ? n / 4 * 4 : n;
  if (i >= limit) return;
  const float c = kBug == Bug::wrong_constant ? 0.04715f : 0.044715f;
  const float v = load(x, i, bf16);
  store(y, i, 0.5f * v * (1.f + tanhf(0.7978845608f * (v + c * v * v * v))), bf16);
}

template <Bug kBug>
__global__ void backward_kernel(const void* x, const void* dy, void* dx, std::int64_t n, bool bf16, bool acc) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float c = kBug == Bug::wrong_constant ? 0.04715f : 0.044715f;
  const float v = load(x, i, bf16), k = 0.7978845608f;
  const float t = tanhf(k * (v + c * v * v * v));
  float slope = 0.5f * (1.f + t);
  if (kBug != Bug::missing_term) slope += 0.5f * v * (1.f - t * t) * k * (1.f + 3.f * c * v * v);
  float g = load(dy, i, bf16) * slope;
  if (acc && kBug != Bug::ignores_accumulate) g += load(dx, i, bf16);
  store(dx, i, g, bf16);
}

unsigned blocks(std::int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

template <Bug kBug>
void fwd(const m04::GeluArgs& a) {
  m04::validate_gelu_args(a, m04::GeluStep::scalar, "planted gelu_forward");
  if (a.n == 0) return;
  forward_kernel<kBug><<<blocks(a.n), 256, 0, a.stream>>>(a.x, a.y, a.n, a.dtype == m04::GeluDType::bf16);
}

template <Bug kBug>
void bwd(const m04::GeluBackwardArgs& a) {
  m04::validate_gelu_backward_args(a, m04::GeluStep::scalar, "planted gelu_backward");
  if (a.n == 0) return;
  backward_kernel<kBug><<<blocks(a.n), 256, 0, a.stream>>>(a.x, a.dy, a.dx, a.n, a.dtype == m04::GeluDType::bf16,
                                                           a.accumulate);
}

}  // namespace

void gelu_forward_wrong_constant(m04::GeluStep, const m04::GeluArgs& a) { fwd<Bug::wrong_constant>(a); }
void gelu_backward_wrong_constant(m04::GeluStep, const m04::GeluBackwardArgs& a) { bwd<Bug::wrong_constant>(a); }
void gelu_backward_missing_term(m04::GeluStep, const m04::GeluBackwardArgs& a) { bwd<Bug::missing_term>(a); }
void gelu_backward_ignores_accumulate(m04::GeluStep, const m04::GeluBackwardArgs& a) {
  bwd<Bug::ignores_accumulate>(a);
}
void gelu_forward_dropped_tail(m04::GeluStep, const m04::GeluArgs& a) { fwd<Bug::dropped_tail>(a); }

}  // namespace course::planted
