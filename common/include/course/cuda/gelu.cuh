#pragma once
/// @file gelu.cuh
/// @brief GELU in GPT-2's tanh approximation, on the device: the one home of its device
/// formula. Used by module 1's tensor-core matmul epilogue (solutions/module01_basics/
/// matmul_tc_parts.cuh: the GELU option of TcMatmulArgs, which the GPT trainer's fused
/// linear layers run; gelu_tanh_fast in matmul_tc_hopper.cu's staged epilogue). Module 4's GELU ladder (gelu.cu) writes its own forms of the formula,
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

/// gelu_tanh in the form x / (1 + e^(-2u)) -- the same function, since (1 + tanh(u)) / 2 is
/// the logistic sigmoid of 2u -- with the SFU's exponential and a fast division: a few
/// instructions instead of tanhf's ~20, and no cancellation where x < 0 (there 1 + tanh(u)
/// loses digits: the SFU's tanh.approx in that form was off by ~1% at x in [-4, -2)). Relative
/// error a few fp32 ulps (ex2.approx, rcp.approx); large negative x gives -0. Module 1's staged
/// pingpong epilogue, whose unrolled GELU of 128 values per thread would otherwise outgrow the
/// instruction cache.
__device__ __forceinline__ float gelu_tanh_fast(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return __fdividef(x, 1.f + __expf(-2.f * u));
}

/// d gelu / dx at x.
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = tanhf(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
}

}  // namespace course::cuda
