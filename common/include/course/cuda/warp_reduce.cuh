#pragma once
/// @file warp_reduce.cuh
/// @brief Warp- and block-level reductions shared by the course's kernels.
///
/// Taught in module 1's warp_shuffle step; later steps and modules reuse them instead of
/// rewriting them. Used by (solutions/, and the exercises/ file of the same name where
/// there is one):
/// - module 1: reductions.cu, softmax.cu; tests/planted/reductions_planted.cu
/// - module 3: attention_device.cuh, attention_fused.cu (solution and exercise);
///   attention_tc_device.cuh, attention_tc_phases.cuh, attention_tc_flash.cuh,
///   attention_tc_flash.cu and the exercise's attention_tc.cu; attention_tc_hopper.cuh; bench/bench_attention_tc_lib.cu
/// - module 4: adamw.cu, cross_entropy.cu, layer_norm.cu, layer_norm_backward.cu,
///   softmax_backward.cu (solution and exercise); training_ops.cu

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

/// A running sum with Kahan's compensation, for one thread that adds many values in a row.
/// A plain float sum of n values near 1 drifts by up to n * 2^-24 relative: once the sum
/// passes 2^k, every add rounds at its ulp, and values of one sign round the same way
/// (65536 values: 4e-3 worst, 4e-4 seen). `lost` carries the low bits each add dropped,
/// so the error stays near 2^-24 whatever n is. Two more adds per value: free in a
/// memory-bound loop. Needs IEEE adds (no --use_fast_math reassociation; nvcc keeps
/// their order by default, and there is no multiply to fuse).
struct CompensatedSum {
  float sum = 0.f;
  float lost = 0.f;  ///< what the last adds rounded away, with the opposite sign
  __device__ __forceinline__ void add(float v) {
    const float y = v - lost;
    const float t = sum + y;
    lost = (t - sum) - y;
    sum = t;
  }
};

/// One butterfly exchange: returns the `v` of lane (this lane ^ offset). All 32 lanes
/// must call it. For a struct of several values, overload warp_shfl_xor for it in the
/// struct's own namespace (shuffle each member); the reductions below find it there.
template <class T>
__device__ __forceinline__ T warp_shfl_xor(T v, int offset) {
  return __shfl_xor_sync(kFullWarpMask, v, offset);
}

/// Reduce `v` over each aligned group of `Width` lanes (0..Width-1, Width..2*Width-1, ...)
/// with butterfly shuffles: after log2(Width) steps every lane holds its group's result
/// (xor pattern), no shared memory needed. Width is a power of two, 2..32; all 32 lanes
/// of the warp must call it (the shuffles use the full mask), each group gets its own
/// result. Width = 16 reduces the two half-warps separately (module 3's fused kernel,
/// where 16 lanes share a row).
template <int Width = kWarpSize, class T, class Op>
__device__ __forceinline__ T warp_all_reduce(T v, Op op) {
  static_assert(Width >= 2 && Width <= kWarpSize && (Width & (Width - 1)) == 0,
                "Width must be a power of two in [2, 32]");
#pragma unroll
  for (int offset = Width / 2; offset > 0; offset /= 2) v = op(v, warp_shfl_xor(v, offset));
  return v;
}

template <int Width = kWarpSize, class T>
__device__ __forceinline__ T warp_sum(T v) { return warp_all_reduce<Width>(v, Sum{}); }
template <int Width = kWarpSize>
__device__ __forceinline__ float warp_max(float v) { return warp_all_reduce<Width>(v, Max{}); }

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
