#pragma once
/// @file batched_gemm_device.cuh
/// @brief What the batched-GEMM kernels share: the operand addressing policies, the
/// launch-side helpers, and the entry points of the two kernel files. Private to
/// solutions/module02_batched_gemm.
///
/// Files of this solution:
///   batched_gemm.cu              the launch grid, step 1 (smem_tiled), the dispatcher (both APIs)
///   batched_gemm_fp32.cu         steps 2-3: register_blocked, warp_tiled (fp32)
///   batched_gemm_tensor_core.cu  steps 4-5: tensor_core (mma.sync), wgmma (Hopper), bf16 in
///
/// One kernel body per step serves BOTH APIs. Each kernel is a template over three
/// "operand addressing" policies (A, B, C) with one job: given (b, h), return the
/// first element of that matrix and its row stride.
///   StridedOperand<T>:       base + b * stride_batch + h * stride_head
///   PointerArrayOperand<T>:  ptrs[b * num_heads + h]
/// After that first line, a block of either API sees an ordinary row-major GEMM.

#include "module02/batched_gemm.hpp"

#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::solution::bgemm {

using bf16 = __nv_bfloat16;
using m02::BgemmStep;

// ============================================================================
// Operand addressing: the ONLY code that differs between the two APIs. The kernel
// asks `op.matrix(b, h)` for the first element of matrix (b, h) and reads `op.ld`
// for its row stride; it never needs to know which API it serves.
// ============================================================================
/// Matrix (b, h) of a strided operand: base, three strides (batch, head, row).
/// T is `const float`, `const bf16` (inputs) or `float` (C).
template <class T>
struct StridedOperand {
  T* base;
  std::int64_t stride_batch, stride_head, ld;
  __device__ __forceinline__ T* matrix(int b, int h) const {
    // @step smem_tiled
    return base + b * stride_batch + h * stride_head;  // 64-bit: int * int64_t
    // @end
  }
};

/// Matrix (b, h) of a pointer-array operand: entry b * num_heads + h of `ptrs`.
template <class T>
struct PointerArrayOperand {
  T* const* ptrs;
  std::int64_t ld;
  int num_heads;
  __device__ __forceinline__ T* matrix(int b, int h) const {
    // @step smem_tiled (exercise 3a)
    return ptrs[static_cast<std::int64_t>(b) * num_heads + h];  // one dependent global load
    // @end
  }
};

/// What every launch needs besides the operands.
struct Problem {
  int M, N, K, batch, heads;
  float alpha;
  bool trans_b;  ///< B stored N x K
  bool trans_a;  ///< A stored K x M (fp32 steps only)
  cudaStream_t stream;
};

/// True when `p` is 16-byte aligned (a float4 / 16-byte cp.async may start there).
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

inline dim3 to_dim3(const m02::BgemmGrid& g) { return dim3(g.x, g.y, g.z); }

/// Turns the run-time operand flags into compile-time ones: calls
/// f(std::bool_constant<trans_a>{}, std::bool_constant<trans_b>{}), so each kernel is a
/// template over its flags and its inner loop holds no branch on them.
template <class F>
void with_transposes(const Problem& p, F&& f) {
  if (p.trans_a) {
    if (p.trans_b)
      f(std::true_type{}, std::true_type{});
    else
      f(std::true_type{}, std::false_type{});
  } else {
    if (p.trans_b)
      f(std::false_type{}, std::true_type{});
    else
      f(std::false_type{}, std::false_type{});
  }
}

// ============================================================================
// The kernel files' entry points. Each is defined (and explicitly instantiated for the
// strided and the pointer-array operand sets) in its file; `step` must be one of that
// file's steps, anything else throws InvalidArgument.
// ============================================================================

/// The fp32 steps of batched_gemm_fp32.cu: register_blocked, warp_tiled (smem_tiled is in
/// batched_gemm.cu).
template <class OpA, class OpB, class OpC>
void run_fp32_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p);

/// The bf16 steps (batched_gemm_tensor_core.cu): tensor_core, wgmma.
template <class OpA, class OpB, class OpC>
void run_bf16_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p);

/// Both operand sets a step is instantiated for, for element type T of A and B.
#define COURSE_BGEMM_INSTANTIATE(fn, T)                                                                      \
  template void fn(BgemmStep, const StridedOperand<const T>&, const StridedOperand<const T>&,                \
                   const StridedOperand<float>&, const Problem&);                                           \
  template void fn(BgemmStep, const PointerArrayOperand<const T>&, const PointerArrayOperand<const T>&,      \
                   const PointerArrayOperand<float>&, const Problem&);

}  // namespace course::solution::bgemm
