#pragma once
/// @file vec.cuh
/// @brief Small fixed-width vector loads and stores of fp32 (1, 2 or 4 floats as one
/// instruction), for kernels whose per-thread column chunk is kVec floats wide.
///
/// The pointer must be aligned to kVec floats. Used by:
/// - module 1: solutions/ and exercises/ softmax.cu (cluster_columns' stores),
///   bench/bench_softmax_order.cu (the column_order_* rows)
/// - module 3: solutions/ and exercises/ attention_fused.cu (O epilogue, V reads)
/// - module 4: solutions/ and exercises/ adamw.cu and softmax_backward.cu; solutions/
///   attention_backward_flash.cu (dK, dV, dQ)
/// - common: course/cuda/elem16.cuh (its fp32 16-byte loads and stores)
///
/// The stores go through store_global4 / store_global2: one explicit st.global.v4 / .v2
/// each. A plain `*reinterpret_cast<float4*>(p) = v` is only a request: in several course
/// kernels the compiler emitted it as four 4-byte stores (SASS STG.E, no STG.E.128), for
/// instance where a float4 path and a scalar tail store the same values, and in module 3's
/// fused epilogue at D = 64. Module 1's cluster_columns wrote ~10% faster at 16384 x 4096
/// once its stores were explicit (177 vs 197 us in one run). Check with
/// `cuobjdump -sass <object> | grep STG`.

#include <cuda_runtime.h>

namespace course::cuda {

/// *p = v as ONE 16-byte store. p: global memory, 16-byte aligned. (__stwb is st.global.wb,
/// the default write-back policy, written as inline PTX, so it stays a single instruction.)
__device__ __forceinline__ void store_global4(float* p, float4 v) { __stwb(reinterpret_cast<float4*>(p), v); }

/// *p = v as ONE 8-byte store. p: global memory, 8-byte aligned.
__device__ __forceinline__ void store_global2(float* p, float2 v) { __stwb(reinterpret_cast<float2*>(p), v); }

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

/// p[0 .. kVec) = x[0 .. kVec) * s, as one vector store (kVec = 1, 2 or 4). p: global memory.
template <int kVec>
__device__ __forceinline__ void store_vec(float* p, const float* x, float s) {
  static_assert(kVec == 1 || kVec == 2 || kVec == 4, "kVec: 1, 2 or 4");
  if constexpr (kVec == 4) {
    store_global4(p, make_float4(x[0] * s, x[1] * s, x[2] * s, x[3] * s));
  } else if constexpr (kVec == 2) {
    store_global2(p, make_float2(x[0] * s, x[1] * s));
  } else {
    *p = x[0] * s;
  }
}

}  // namespace course::cuda
