#pragma once
/// @file vec.cuh
/// @brief Small fixed-width vector loads and stores of fp32 (1, 2 or 4 floats as one
/// instruction), for kernels whose per-thread column chunk is kVec floats wide: module 3's
/// fused attention (O epilogue, V reads) and module 4's flash backward (dK, dV, dQ).
/// The pointer must be aligned to kVec floats.

#include <cuda_runtime.h>

namespace course::cuda {

/// out[0 .. kVec) = p[0 .. kVec), as one vector load (kVec = 1, 2 or 4).
template <int kVec>
__device__ __forceinline__ void load_vec(const float* p, float (&out)[kVec]) {
  static_assert(kVec == 1 || kVec == 2 || kVec == 4, "kVec: 1, 2 or 4");
  if constexpr (kVec == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    out[0] = x.x; out[1] = x.y; out[2] = x.z; out[3] = x.w;
  } else if constexpr (kVec == 2) {
    const float2 x = *reinterpret_cast<const float2*>(p);
    out[0] = x.x; out[1] = x.y;
  } else {
    out[0] = *p;
  }
}

/// p[0 .. kVec) = x[0 .. kVec) * s, as one vector store (kVec = 1, 2 or 4).
template <int kVec>
__device__ __forceinline__ void store_vec(float* p, const float* x, float s) {
  static_assert(kVec == 1 || kVec == 2 || kVec == 4, "kVec: 1, 2 or 4");
  if constexpr (kVec == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(x[0] * s, x[1] * s, x[2] * s, x[3] * s);
  } else if constexpr (kVec == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(x[0] * s, x[1] * s);
  } else {
    *p = x[0] * s;
  }
}

}  // namespace course::cuda
