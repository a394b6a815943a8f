/// @file reductions_planted.cu
/// @brief Planted bugs for the reduction tests (see reductions_planted.hpp).
/// DO NOT copy these: each kernel contains one realistic mistake on purpose.

#include "reductions_planted.hpp"

#include "course/cuda/warp_reduce.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::planted {
namespace {

using m01::ReduceArgs;

struct SquareTerm {
  const float* x;
  static constexpr bool kSqrt = true;
  __device__ float operator()(std::int64_t i) const { return x[i] * x[i]; }
  __device__ float chunk(std::int64_t i4) const {
    const float4 v = reinterpret_cast<const float4*>(x)[i4];
    return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
};
struct ProductTerm {
  const float* x;
  const float* y;
  static constexpr bool kSqrt = false;
  __device__ float operator()(std::int64_t i) const { return x[i] * y[i]; }
  __device__ float chunk(std::int64_t i4) const {
    const float4 a = reinterpret_cast<const float4*>(x)[i4];
    const float4 b = reinterpret_cast<const float4*>(y)[i4];
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
  }
};

constexpr int kThreads = 256;

// BUG: grid-stride over the n / 4 whole float4 chunks, and nothing after them:
// elements 4*(n/4) .. n-1 are never added.
template <class Term>
__global__ void dropped_tail_kernel(Term term, std::int64_t n, float* sum) {
  __shared__ float warp_totals[::course::cuda::kWarpSize];
  const std::int64_t n4 = n / 4;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  float v = 0.f;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride)
    v += term.chunk(i);
  v = ::course::cuda::block_all_reduce(v, ::course::cuda::Sum{}, 0.f, warp_totals);
  if (threadIdx.x == 0) atomicAdd(sum, v);
}

// BUG: no __syncthreads() after the store nor between the tree's levels.
template <class Term>
__global__ void missing_sync_kernel(Term term, std::int64_t n, float* sum) {
  __shared__ float partial[kThreads];
  const int t = threadIdx.x;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + t;
  partial[t] = i < n ? term(i) : 0.f;
  for (int active = kThreads / 2; active > 0; active /= 2) {
    if (t < active) partial[t] += partial[t + active];
  }
  if (t == 0) atomicAdd(sum, partial[0]);
}

// BUG: `*sum += v` from one thread of every block is a read-modify-write race
// between blocks (it needs atomicAdd).
template <class Term>
__global__ void racy_result_kernel(Term term, std::int64_t n, float* sum) {
  __shared__ float warp_totals[::course::cuda::kWarpSize];
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  float v = i < n ? term(i) : 0.f;
  v = ::course::cuda::block_all_reduce(v, ::course::cuda::Sum{}, 0.f, warp_totals);
  if (threadIdx.x == 0) *sum += v;
}

__global__ void sqrt_in_place_kernel(float* value) { *value = sqrtf(*value); }

enum class Bug { dropped_tail, missing_sync, racy_result };

template <class Term>
void run(Bug bug, Term term, const ReduceArgs& a) {
  COURSE_CUDA_CHECK(cudaMemsetAsync(a.result, 0, sizeof(float), a.stream));
  const std::int64_t per_element_blocks = (a.n + kThreads - 1) / kThreads;
  require_arg(per_element_blocks <= 0x7fffffff, "planted", "n", a.n, "is too large");
  switch (bug) {
    case Bug::dropped_tail: {
      const std::int64_t blocks = std::min<std::int64_t>((a.n / 4 + kThreads - 1) / kThreads, 1024);
      if (blocks > 0) dropped_tail_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, a.stream>>>(term, a.n, a.result);
      break;
    }
    case Bug::missing_sync:
      if (per_element_blocks > 0)
        missing_sync_kernel<<<static_cast<unsigned>(per_element_blocks), kThreads, 0, a.stream>>>(term, a.n, a.result);
      break;
    case Bug::racy_result:
      if (per_element_blocks > 0)
        racy_result_kernel<<<static_cast<unsigned>(per_element_blocks), kThreads, 0, a.stream>>>(term, a.n, a.result);
      break;
  }
  COURSE_CHECK_LAUNCH("planted reduction kernel");
  if constexpr (Term::kSqrt) {
    sqrt_in_place_kernel<<<1, 1, 0, a.stream>>>(a.result);
    COURSE_CHECK_LAUNCH("sqrt_in_place_kernel");
  }
}

void run_l2_norm(Bug bug, const ReduceArgs& a) {
  m01::validate_reduce_args(a, "planted l2_norm", /*needs_y=*/false);
  run(bug, SquareTerm{a.x}, a);
}
void run_dot(Bug bug, const ReduceArgs& a) {
  m01::validate_reduce_args(a, "planted dot", /*needs_y=*/true);
  run(bug, ProductTerm{a.x, a.y}, a);
}

}  // namespace

void dropped_tail_l2_norm(m01::ReduceStep, const ReduceArgs& a) { run_l2_norm(Bug::dropped_tail, a); }
void dropped_tail_dot(m01::ReduceStep, const ReduceArgs& a) { run_dot(Bug::dropped_tail, a); }
void missing_sync_l2_norm(m01::ReduceStep, const ReduceArgs& a) { run_l2_norm(Bug::missing_sync, a); }
void missing_sync_dot(m01::ReduceStep, const ReduceArgs& a) { run_dot(Bug::missing_sync, a); }
void racy_result_l2_norm(m01::ReduceStep, const ReduceArgs& a) { run_l2_norm(Bug::racy_result, a); }
void racy_result_dot(m01::ReduceStep, const ReduceArgs& a) { run_dot(Bug::racy_result, a); }

}  // namespace course::planted
