#pragma once
/// @file gelu.cuh
/// @brief GELU in GPT-2's tanh approximation, on the device: the one home of its device
/// formula. Used by module 1's tensor-core matmul epilogue (solutions/module01_basics/
/// matmul_tc_parts.cuh: the GELU option of TcMatmulArgs, which the GPT trainer's fused
/// linear layers run; gelu_tanh_approx in matmul_tc_hopper.cu's staged epilogue). Module 4's GELU ladder (gelu.cu) writes its own forms of the formula,
/// from the same two constants stated in module04/gelu.hpp.
///
///     gelu(x)  = x/2 * (1 + tanh(u)),    u = sqrt(2/pi) * (x + 0.044715 x^3)
///     gelu'(x) = (1 + tanh(u))/2 + x/2 * (1 - tanh(u)^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2)
///
/// The CPU reference is course::ref::gelu_tanh (common/src/reference_transformer.cpp); module
/// 4's GELU ladder (module04/gelu.hpp) states the same two constants for its host code.

namespace course::cuda {

inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

/// gelu(x), tanh approximation (torch.nn.functional.gelu(x, approximate="tanh")).
__device__ __forceinline__ float gelu_tanh(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}

/// gelu_tanh with the SFU's tanh (`tanh.approx.f32`, relative error ~2^-11): one
/// instruction instead of tanhf's ~20, for outputs rounded to bf16 (a relative step of
/// 2^-8), which that error leaves all but unchanged. Module 1's staged pingpong epilogue,
/// whose unrolled GELU of 128 values per thread would otherwise outgrow the instruction cache.
__device__ __forceinline__ float gelu_tanh_approx(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  float t;
#if defined(__CUDA_ARCH__)
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
#else
  t = tanhf(u);
#endif
  return 0.5f * x * (1.f + t);
}

/// d gelu / dx at x.
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = tanhf(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
}

}  // namespace course::cuda
