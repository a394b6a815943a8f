#pragma once
/// @file warp_reduce.cuh
/// @brief Warp- and block-level reductions shared by the solution kernels
/// (reductions, softmax, attention). Taught in module 1's warp_shuffle step; later
/// steps and modules reuse them instead of rewriting them.

#include <cuda_runtime.h>

namespace course::cuda {

inline constexpr unsigned kFullWarpMask = 0xffffffffu;
inline constexpr int kWarpSize = 32;

/// a + b, as a functor usable in the templates below.
struct Sum {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
/// max(a, b).
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Reduce `v` over the 32 lanes of a warp with butterfly shuffles: after log2(32) = 5
/// steps every lane holds the result (xor pattern), no shared memory needed.
template <class T, class Op>
__device__ __forceinline__ T warp_all_reduce(T v, Op op) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(kFullWarpMask, v, offset));
  return v;
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) { return warp_all_reduce(v, Sum{}); }
__device__ __forceinline__ float warp_max(float v) { return warp_all_reduce(v, Max{}); }

/// Reduce `v` over the whole block; every thread gets the result.
/// Requires blockDim.x to be a multiple of 32 and all threads to call it.
/// `scratch` must hold at least 32 values (one per warp) and may be reused after return.
template <class T, class Op>
__device__ __forceinline__ T block_all_reduce(T v, Op op, T identity, T* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = warp_all_reduce(v, op);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : identity;
  return warp_all_reduce(v, op);
}

}  // namespace course::cuda
