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
///   load16_raw / unpack16      load16 in two halves: the 16 bytes as loaded (4 registers,
///                              e.g. a prefetched row), then widened to kN floats
///   WarpRow16<T, kC>           a row of kC elements as one warp's 16-byte vectors
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

/// The 16 bytes at p as they are in memory (kN elements still packed), one 16-byte load:
/// a row prefetched into registers costs 4 registers per 16 bytes, bf16 or fp32, until
/// unpack16 widens it. p: 16-byte aligned.
template <class T>
__device__ __forceinline__ uint4 load16_raw(const T* p) {
  return *reinterpret_cast<const uint4*>(p);
}

/// v[0 .. kN) = the kN elements packed in q (as load16_raw read them), as fp32.
template <class T>
__device__ __forceinline__ void unpack16(const uint4& q, float (&v)[Vec16<T>::kN]) {
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

/// v[0 .. kN) = p[0 .. kN) as fp32, one 16-byte load. p: 16-byte aligned.
template <class T>
__device__ __forceinline__ void load16(const T* p, float (&v)[Vec16<T>::kN]) {
  unpack16<T>(load16_raw(p), v);
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

/// A row of kC elements (kC % kN == 0) read by one warp in 16-byte vectors: vector
/// v = k * 32 + lane (k < kChunks) holds elements v * kN .. v * kN + kN - 1, so each load
/// instruction of the warp reads 512 contiguous bytes. Module 4's pipelined LayerNorm steps
/// keep a prefetched row as kChunks raw uint4 per lane (load) and widen it later (unpack16).
template <class T, int kC>
struct WarpRow16 {
  static constexpr int kN = Vec16<T>::kN;
  static constexpr int kVecs = kC / kN;                 // 16-byte vectors per row
  static constexpr int kChunks = (kVecs + 31) / 32;     // vectors per lane
  static_assert(kC % kN == 0, "a row must be a whole number of 16-byte vectors");
  /// Is chunk k of `lane` inside the row? (Always, where 32 divides kVecs: the test folds away.)
  static __device__ __forceinline__ bool inside(int k, int lane) { return k * 32 + lane < kVecs; }
  /// First element of chunk k of `lane`.
  static __device__ __forceinline__ int column(int k, int lane) { return (k * 32 + lane) * kN; }
  /// The lane's 16-byte loads of one row (starting at `row`), raw.
  static __device__ __forceinline__ void load(const T* row, int lane, uint4 (&raw)[kChunks]) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k)
      if (inside(k, lane)) raw[k] = load16_raw(row + column(k, lane));
  }
};

/// True if p is 16-byte aligned.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace course::cuda
