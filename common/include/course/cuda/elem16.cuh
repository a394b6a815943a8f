#pragma once
/// @file elem16.cuh
/// @brief Element and 16-byte vector access for kernels that read fp32 or bf16 activations
/// (one template over the element type T = float or __nv_bfloat16) and compute in fp32.
/// Used by: module 4's layer_norm.cu, layer_norm_backward.cu, gelu.cu and cross_entropy.cu
/// (solutions and exercises).
///
///   to_float / from_float<T>   one element, widened to / rounded from fp32 (bf16: nearest even)
///   Vec16<T>::kN               elements in 16 bytes: 4 floats or 8 bf16
///   load16 / store16           kN consecutive elements as ONE 16-byte load / store
///                              (LDG.128 / STG.128; the pointer must be 16-byte aligned)
///   load16_params              kN consecutive fp32 parameters (gamma, beta): 1 or 2 float4

#include "course/cuda/vec.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return __float2bfloat16_rn(v);
}

template <class T>
struct Vec16 {
  static constexpr int kN = 16 / static_cast<int>(sizeof(T));
};

/// v[0 .. kN) = p[0 .. kN) as fp32, one 16-byte load. p: 16-byte aligned.
template <class T>
__device__ __forceinline__ void load16(const T* p, float (&v)[Vec16<T>::kN]) {
  const uint4 q = *reinterpret_cast<const uint4*>(p);
  if constexpr (std::is_same_v<T, float>) {
    v[0] = __uint_as_float(q.x), v[1] = __uint_as_float(q.y), v[2] = __uint_as_float(q.z),
    v[3] = __uint_as_float(q.w);
  } else {
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // a bf16 is the high half of the fp32 with the same bits
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
}

/// p[0 .. kN) = v rounded to T, one 16-byte store. p: global memory, 16-byte aligned.
template <class T>
__device__ __forceinline__ void store16(T* p, const float (&v)[Vec16<T>::kN]) {
  if constexpr (std::is_same_v<T, float>) {
    store_global4(p, make_float4(v[0], v[1], v[2], v[3]));
  } else {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);  // .x = low half
      w[i] = *reinterpret_cast<const unsigned*>(&h);
    }
    __stwb(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
}

/// v[0 .. kN) = p[0 .. kN) for fp32 parameters: kN / 4 float4 loads. p: 16-byte aligned.
template <int kN>
__device__ __forceinline__ void load16_params(const float* p, float (&v)[kN]) {
  static_assert(kN % 4 == 0, "kN: 4 or 8");
#pragma unroll
  for (int i = 0; i < kN / 4; ++i) {
    const float4 q = reinterpret_cast<const float4*>(p)[i];
    v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
  }
}

/// True if p is 16-byte aligned.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace course::cuda
