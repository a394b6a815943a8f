#pragma once
/// @file batched_gemm_device.cuh
/// @brief What YOUR batched-GEMM kernels share (module 2): the operand addressing
/// policies (exercises 2a and 3a), the launch-side helpers (given) and the entry points
/// of the step files.
///
/// Files of your batched GEMM:
///   batched_gemm.cu              exercises 1-3: the grid, step smem_tiled, the pointer-array API
///   batched_gemm_device.cuh      this file: StridedOperand::matrix (2a), PointerArrayOperand::matrix (3a)
///   batched_gemm_fp32.cu         steps register_blocked and warp_tiled (fp32)
///   batched_gemm_tensor_core.cu  steps tensor_core and wgmma (bf16 in, fp32 out)
/// Every kernel is a template over three operand policies (A, B, C) and serves both
/// APIs: `op.matrix(b, h)` is the first element of matrix (b, h), `op.ld` its row stride.

#include "module02/batched_gemm.hpp"

#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::exercise::bgemm {

using bf16 = __nv_bfloat16;
using m02::BgemmStep;

// ----------------------------------------------------------------------------
// Operand addressing: the ONLY code that differs between the two APIs. The kernel
// asks `op.matrix(b, h)` for the first element of matrix (b, h) and reads `op.ld`
// for its row stride; it never needs to know which API it serves.
// ----------------------------------------------------------------------------

/// Matrix (b, h) of a strided operand.
/// TODO(exercise 2a): return the address of element (0, 0) of matrix (b, h).
/// Hints, one at a time: `bash scripts/course.sh hint batched_gemm/smem_tiled`
template <class T>
struct StridedOperand {
  T* base;
  std::int64_t stride_batch, stride_head, ld;
  __device__ __forceinline__ T* matrix(int b, int h) const {
    (void)b, (void)h;
    return base;  // TODO(exercise 2a)
  }
};

/// Matrix (b, h) of a pointer-array operand: entry b * num_heads + h of `ptrs`.
/// TODO(exercise 3a): return that entry.
template <class T>
struct PointerArrayOperand {
  T* const* ptrs;
  std::int64_t ld;
  int num_heads;
  __device__ __forceinline__ T* matrix(int b, int h) const {
    (void)b, (void)h;
    return ptrs[0];  // TODO(exercise 3a)
  }
};

// ----------------------------------------------------------------------------
// Launch-side helpers. (Given.)
// ----------------------------------------------------------------------------

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

/// Turns the run-time flags into compile-time ones: calls
/// f(std::bool_constant<trans_a>{}, std::bool_constant<trans_b>{}); inside f,
/// the member `value` of decltype(trans_a) is a constant usable as a template argument.
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

// ----------------------------------------------------------------------------
// The step files' entry points, each defined (and instantiated for both operand sets)
// in its file. A step you have not written throws NotImplemented naming its file.
// ----------------------------------------------------------------------------

/// Steps register_blocked and warp_tiled (batched_gemm_fp32.cu).
template <class OpA, class OpB, class OpC>
void run_fp32_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p);

/// Steps tensor_core and wgmma (batched_gemm_tensor_core.cu).
template <class OpA, class OpB, class OpC>
void run_bf16_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p);

/// Both operand sets a step file is instantiated for, for element type T of A and B.
#define COURSE_EXERCISE_BGEMM_INSTANTIATE(fn, T)                                                        \
  template void fn(BgemmStep, const StridedOperand<const T>&, const StridedOperand<const T>&,           \
                   const StridedOperand<float>&, const Problem&);                                      \
  template void fn(BgemmStep, const PointerArrayOperand<const T>&, const PointerArrayOperand<const T>&, \
                   const PointerArrayOperand<float>&, const Problem&);

}  // namespace course::exercise::bgemm
