/// @file gelu.cu
/// @brief Solution ladder for GELU (GPT-2's tanh approximation), forward and backward,
/// fp32 or bf16 (module 4).
///
/// The ladder:
///   1. scalar      one element per thread, grid-stride; the formula as written:
///                  x/2 (1 + tanhf(u)) and its derivative through tanhf.
///   2. vectorized  16-byte loads and stores (4 fp32 or 8 bf16 per instruction), 4 of them per
///                  thread and array in flight; x * sigmoid(2u) with one expf instead of tanhf.
///
/// Element-wise and memory-bound: the forward reads x and writes y (2 elements of traffic),
/// the backward reads x and dy and writes dx (3, 4 with accumulate). At 16384 x 1536 (the
/// GPT-2-small MLP's activation at 16 sequences of 1024 tokens) that is 201 MB (fp32
/// forward) to 302 MB (fp32 backward) -- ~70-100 us at ~3 TB/s. The arithmetic, ~20-40 FP32
/// instructions per element, is well under the ~90 an H100 can spend per fp32 element at
/// copy speed (~45 per bf16 element), so both steps should sit near the copy ceiling once
/// their loads are wide enough; what separates them is the load width and the math's
/// instruction count at bf16 (half the bytes per element, the same math).

#include "module04/gelu.hpp"

#include "course/cuda/elem16.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace course::solution {
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
// ============================================================================
// Step 1: scalar.
// One element per thread (grid-stride beyond 2^31 - 1 blocks' worth), 4-byte (fp32) or
// 2-byte (bf16) loads, the formula as written with tanhf:
//     y = 0.5 x (1 + tanh(u)),  gelu' = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx.
// This is also how PyTorch's kernel computes it (in fp32 for both dtypes).
// Accuracy: where x < -2, 1 + tanh(u) cancels (tanh(u) -> -1): its absolute error is
// ~1 ulp of 1, so y's relative error grows to ~|x| * 2^-24 / |y|, e.g. ~1e-4 at x = -5.
// Bytes: fp32 forward 8 per element, backward 12; bf16 half.
// Prediction (16384 x 1536): ~0.8-0.9 of the copy for fp32 (scalar coalesced loads are
// enough to stream at ~90% on Hopper, the tanhf's ~20 instructions hide under the memory
// time); bf16 ~0.6-0.7 (2-byte loads: 4x the load instructions per byte of fp32's 4-byte
// ones, half the bytes per element for the same math).
// Measured (results: gelu/solution/scalar/{16384x1536_f32,16384x1536_bf16}): 1680.7 / 1209.7 GB/s = 0.62 / 0.50 of d2d_copy
// ============================================================================
// @end

/// The formula as written (step 1).
struct TanhForm {
  __device__ __forceinline__ static float forward(float x) {
    // @step scalar
    const float u = kK * (x + kC * x * x * x);
    return 0.5f * x * (1.f + tanhf(u));
    // @end
  }
  __device__ __forceinline__ static float slope(float x) {
    // @step scalar
    const float u = kK * (x + kC * x * x * x);
    const float t = tanhf(u);
    const float du = kK * (1.f + 3.f * kC * x * x);
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
    // @end
  }
};

// @step vectorized
// ============================================================================
// Step 2: vectorized.
// Changes from scalar:
//  (a) 16-byte loads and stores: a float4 of fp32 or 8 bf16 per instruction, 4 of them per
//      thread and array before any math (64 B of x, 64 B of dy in flight per thread). A
//      call whose pointers are not all 16-byte aligned runs this step's math with scalar
//      loads; the last n % (16 / sizeof(T)) elements go through the same scalar code.
//  (b) The math without tanhf: (1 + tanh u) / 2 = sigmoid(2u), so
//          y = x / (1 + e),  e = expf(-2u);     gelu' = s (1 + 2 x (1 - s) du/dx),
//      s = 1 / (1 + e), 1 - s = e s. One expf (~8 instructions: range reduction + ex2)
//      instead of tanhf (~20 with its two branches), and no cancellation: y = x s keeps
//      s's relative accuracy for every x (step 1 loses ~4 digits at x = -5, see above), and
//      1 - s = e s has no 1 - (something near 1) either. expf, not __expf: __expf scales
//      its argument by log2(e) in fp32 first, an error that grows with |u|; expf stays
//      within 2 ulp. The tests hold both steps to 8 ulp of every term plus u's own
//      condition (|2u| ulp); the vectorized step's worst ratio is the smaller (the tests
//      print it).
// Bytes: as step 1. Registers: ~40 (4 x 16 B of each array + the math).
// Prediction (16384 x 1536): ~0.9-0.95 of the copy for both dtypes, forward and backward
// (the copy itself uses 16-byte accesses; the math hides under the memory time).
// Measured (results: gelu/solution/vectorized/{16384x1536_f32,16384x1536_bf16}): 2677.3 / 2303.0 GB/s = 0.99 / 0.95 of d2d_copy
// ============================================================================
// @end

/// x * sigmoid(2u) (step 2).
struct SigmoidForm {
  __device__ __forceinline__ static float forward(float x) {
    // @step vectorized
    const float u = kK * (x + kC * x * x * x);
    return x / (1.f + expf(-2.f * u));
    // @end
  }
  __device__ __forceinline__ static float slope(float x) {
    // @step vectorized
    const float u = kK * (x + kC * x * x * x);
    const float e = expf(-2.f * u);
    const float s = 1.f / (1.f + e);
    const float one_minus_s = e < INFINITY ? e * s : 1.f;  // e = inf: s = 0, 1 - s = 1
    const float du = kK * (1.f + 3.f * kC * x * x);
    return s * (1.f + 2.f * x * one_minus_s * du);
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
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    y[i] = from_float<T>(Math::forward(to_float(x[i])));
  // @end
}

template <class T, class Math>
__global__ void __launch_bounds__(kThreads)
    elementwise_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n, bool accumulate) {
  // @step scalar
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    float g = to_float(dy[i]) * Math::slope(to_float(x[i]));  // dy read before dx is written: in place is safe
    if (accumulate) g += to_float(dx[i]);
    dx[i] = from_float<T>(g);
  }
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
  constexpr int kN = Pack<T>::kN;
  const std::int64_t packs = n / kN;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  const auto* xp = reinterpret_cast<const Pack<T>*>(x);
  auto* yp = reinterpret_cast<Pack<T>*>(y);
  Pack<T> v[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const std::int64_t k = first + u * kThreads;
    if (k < packs) v[u] = xp[k];
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const std::int64_t k = first + u * kThreads;
    if (k >= packs) continue;
#pragma unroll
    for (int j = 0; j < kN; ++j) v[u].e[j] = from_float<T>(SigmoidForm::forward(to_float(v[u].e[j])));
    yp[k] = v[u];
  }
  // The last n % kN elements: the first threads of the grid, one each.
  const std::int64_t tail = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (tail < n - packs * kN) {
    const std::int64_t i = packs * kN + tail;
    y[i] = from_float<T>(SigmoidForm::forward(to_float(x[i])));
  }
  // @end
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    vector_backward_kernel(const T* x, const T* dy, T* dx, std::int64_t n, bool accumulate) {
  // @step vectorized
  constexpr int kN = Pack<T>::kN;
  const std::int64_t packs = n / kN;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  const auto* xp = reinterpret_cast<const Pack<T>*>(x);
  const auto* gp = reinterpret_cast<const Pack<T>*>(dy);
  auto* dp = reinterpret_cast<Pack<T>*>(dx);
  Pack<T> xv[kUnroll], gv[kUnroll], dv[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const std::int64_t k = first + u * kThreads;
    if (k < packs) {
      xv[u] = xp[k];
      gv[u] = gp[k];
      if (accumulate) dv[u] = dp[k];
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const std::int64_t k = first + u * kThreads;
    if (k >= packs) continue;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      float g = to_float(gv[u].e[j]) * SigmoidForm::slope(to_float(xv[u].e[j]));
      if (accumulate) g += to_float(dv[u].e[j]);
      gv[u].e[j] = from_float<T>(g);
    }
    dp[k] = gv[u];
  }
  const std::int64_t tail = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (tail < n - packs * kN) {
    const std::int64_t i = packs * kN + tail;
    float g = to_float(dy[i]) * SigmoidForm::slope(to_float(x[i]));
    if (accumulate) g += to_float(dx[i]);
    dx[i] = from_float<T>(g);
  }
  // @end
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class T>
void launch_vector_forward(const GeluArgs& a) {
  // @step vectorized  (the launch)
  if (!aligned16(a.x) || !aligned16(a.y)) return launch_elementwise_forward<T, SigmoidForm>(a);
  const std::int64_t packs = a.n / Pack<T>::kN;
  vector_forward_kernel<T><<<grid_for(packs, kThreads * kUnroll), kThreads, 0, a.stream>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n);
  COURSE_CHECK_LAUNCH("vector_forward_kernel");
  // @end
}

template <class T>
void launch_vector_backward(const GeluBackwardArgs& a) {
  // @step vectorized  (the launch)
  if (!aligned16(a.x) || !aligned16(a.dy) || !aligned16(a.dx)) return launch_elementwise_backward<T, SigmoidForm>(a);
  const std::int64_t packs = a.n / Pack<T>::kN;
  vector_backward_kernel<T><<<grid_for(packs, kThreads * kUnroll), kThreads, 0, a.stream>>>(
      static_cast<const T*>(a.x), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.n, a.accumulate);
  COURSE_CHECK_LAUNCH("vector_backward_kernel");
  // @end
}

template <class T>
void forward_for(GeluStep step, const GeluArgs& a) {
  // @step scalar  (the launch)
  if (step == GeluStep::scalar) return launch_elementwise_forward<T, TanhForm>(a);
  // @end
  launch_vector_forward<T>(a);
}

template <class T>
void backward_for(GeluStep step, const GeluBackwardArgs& a) {
  // @step scalar  (the launch)
  if (step == GeluStep::scalar) return launch_elementwise_backward<T, TanhForm>(a);
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

}  // namespace course::solution
