/// @file gelu.cu
/// @brief YOUR ladder for GELU (GPT-2's tanh approximation), forward and backward, fp32 or
/// bf16 (module 4).
///
/// Read module04_training/include/module04/gelu.hpp first (the formula, its derivative, the
/// sigmoid form, in place), then fill in one step at a time. Run its tests with:
///   ctest --preset default -L exercise -R Gelu
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint gelu/<step>`
/// (all of them: exercises/module04_training/hints/gelu.md).

#include "module04/gelu.hpp"

#include "course/cuda/elem16.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace course::exercise {
namespace {

using m04::GeluArgs;
using m04::GeluBackwardArgs;
using m04::GeluDType;
using m04::GeluStep;

constexpr float kK = static_cast<float>(m04::kGeluSqrt2OverPi);
constexpr float kC = static_cast<float>(m04::kGeluCubic);
constexpr int kThreads = 256;

// Element conversions (fp32 arithmetic on fp32 or bf16 data): course/cuda/elem16.cuh.
using ::course::cuda::from_float;
using ::course::cuda::to_float;

// @step scalar
// ----------------------------------------------------------------------------
// Step 1: scalar -- one element per thread, the formula as written.
//   (a) TanhForm::forward and TanhForm::slope: gelu(x) and gelu'(x) with tanhf (gelu.hpp).
//   (b) elementwise_forward_kernel / elementwise_backward_kernel: a grid-stride loop, one
//       element per thread per iteration, through Math:: (step 2 reuses these kernels
//       with its own Math for unaligned pointers). Convert with to_f / from_float<T>.
//   (c) forward_for / backward_for: the launches of step 1.
// Hints, one at a time: bash scripts/course.sh hint gelu/scalar
// ----------------------------------------------------------------------------
// @end

/// The formula as written (step 1).
struct TanhForm {
  __device__ __forceinline__ static float forward(float x) {
    // @step scalar
    // TODO(step 1a): 0.5 x (1 + tanhf(u)), u = kK (x + kC x^3)
    (void)x;
    return 0.f;
    // @end
  }
  __device__ __forceinline__ static float slope(float x) {
    // @step scalar
    // TODO(step 1a): gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx, du/dx = kK (1 + 3 kC x^2)
    (void)x;
    return 0.f;
    // @end
  }
};

// @step vectorized
// ----------------------------------------------------------------------------
// Step 2: vectorized -- 16-byte loads, and the math without tanhf.
//   (a) SigmoidForm::forward / slope: (1 + tanh u) / 2 = sigmoid(2u) = 1 / (1 + exp(-2u)):
//       y = x / (1 + e), gelu' = s (1 + 2 x (1 - s) du/dx), e = expf(-2u), s = 1 / (1 + e),
//       1 - s = e s (mind e = inf).
//   (b) vector_forward_kernel / vector_backward_kernel: each thread loads kUnroll Pack<T>
//       (16 bytes) of every array before any math, then computes and stores them; the last
//       n % Pack<T>::kN elements, one per thread, at the end.
//   (c) launch_vector_forward / launch_vector_backward: unaligned pointers take
//       launch_elementwise_*<T, SigmoidForm>; else the kernel over the packs.
// Hints, one at a time: bash scripts/course.sh hint gelu/vectorized
// ----------------------------------------------------------------------------
// @end

/// x * sigmoid(2u) (step 2).
struct SigmoidForm {
  __device__ __forceinline__ static float forward(float x) {
    // @step vectorized
    // TODO(step 2a)
    (void)x;
    return 0.f;
    // @end
  }
  __device__ __forceinline__ static float slope(float x) {
    // @step vectorized
    // TODO(step 2a)
    (void)x;
    return 0.f;
    // @end
  }
};

unsigned grid_for(std::int64_t work, std::int64_t per_block) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 0x7fffffff));
}

/// One element per thread, grid-stride: step 1 (TanhForm), and step 2's path for
/// unaligned pointers (SigmoidForm).
template <class T, class Math>
__global__ void __launch_bounds__(kThreads) elementwise_forward_kernel(const T* x, T* y, std::int64_t n) {
  // @step scalar
  // TODO(step 1b)
  (void)x, (void)y, (void)n;
  // @end
}

template <class T, class Math>
__global__ void __launch_bounds__(kThreads)
    elementwise_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n, bool accumulate) {
  // @step scalar
  // TODO(step 1b): dy is read before dx is written (in place: dx == dy); with accumulate
  // add the old dx before the one rounding.
  (void)x, (void)dy, (void)dx, (void)n, (void)accumulate;
  // @end
}

template <class T, class Math>
void launch_elementwise_forward(const GeluArgs& a) {
  elementwise_forward_kernel<T, Math><<<grid_for(a.n, kThreads), kThreads, 0, a.stream>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n);
  COURSE_CHECK_LAUNCH("elementwise_forward_kernel");
}

template <class T, class Math>
void launch_elementwise_backward(const GeluBackwardArgs& a) {
  elementwise_backward_kernel<T, Math><<<grid_for(a.n, kThreads), kThreads, 0, a.stream>>>(
      static_cast<const T*>(a.x), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.n, a.accumulate);
  COURSE_CHECK_LAUNCH("elementwise_backward_kernel");
}

/// 16 bytes of T: what one vector load or store moves.
template <class T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / sizeof(T);
  T e[kN];
};

constexpr int kUnroll = 4;  // 16-byte packs per thread and array

template <class T>
__global__ void __launch_bounds__(kThreads) vector_forward_kernel(const T* x, T* y, std::int64_t n) {
  // @step vectorized
  // TODO(step 2b)
  (void)x, (void)y, (void)n;
  // @end
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    vector_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n, bool accumulate) {
  // @step vectorized
  // TODO(step 2b)
  (void)x, (void)dy, (void)dx, (void)n, (void)accumulate;
  // @end
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class T>
void launch_vector_forward(const GeluArgs& a) {
  // @step vectorized  (the launch)
  // TODO(step 2c): delete the throw; dispatch on alignment, launch
  // grid_for(a.n / Pack<T>::kN, kThreads * kUnroll) blocks of kThreads.
  (void)a;
  throw NotImplemented("gelu_forward step vectorized", __FILE__);
  // @end
}

template <class T>
void launch_vector_backward(const GeluBackwardArgs& a) {
  // @step vectorized  (the launch)
  // TODO(step 2c)
  (void)a;
  throw NotImplemented("gelu_backward step vectorized", __FILE__);
  // @end
}

template <class T>
void forward_for(GeluStep step, const GeluArgs& a) {
  // @step scalar  (the launch)
  // TODO(step 1c): launch_elementwise_forward<T, TanhForm>(a) for the scalar step.
  if (step == GeluStep::scalar) throw NotImplemented("gelu_forward step scalar", __FILE__);
  // @end
  launch_vector_forward<T>(a);
}

template <class T>
void backward_for(GeluStep step, const GeluBackwardArgs& a) {
  // @step scalar  (the launch)
  // TODO(step 1c): launch_elementwise_backward<T, TanhForm>(a) for the scalar step.
  if (step == GeluStep::scalar) throw NotImplemented("gelu_backward step scalar", __FILE__);
  // @end
  launch_vector_backward<T>(a);
}

}  // namespace

void gelu_forward(GeluStep step, const GeluArgs& args) {
  m04::validate_gelu_args(args, step, "gelu_forward");
  if (args.n == 0) return;
  if (args.dtype == GeluDType::bf16) return forward_for<__nv_bfloat16>(step, args);
  forward_for<float>(step, args);
}

void gelu_backward(GeluStep step, const GeluBackwardArgs& args) {
  m04::validate_gelu_backward_args(args, step, "gelu_backward");
  if (args.n == 0) return;
  if (args.dtype == GeluDType::bf16) return backward_for<__nv_bfloat16>(step, args);
  backward_for<float>(step, args);
}

}  // namespace course::exercise
