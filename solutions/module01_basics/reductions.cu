/// @file reductions.cu
/// @brief Solution ladder for the L2 norm and the dot product (module 1).
///
/// Both ops reduce n terms to one float; `Term` says what a term is
/// (x_i^2 for the norm, x_i*y_i for the dot product), so every step is written once.

#include "module01/reductions.hpp"

#include <cuda_runtime.h>

namespace course::solution {
namespace {

using m01::ReduceArgs;
using m01::ReduceStep;

/// x_i^2: the L2 norm's term.
struct SquareTerm {
  const float* x;
  __device__ float operator()(std::int64_t i) const { return x[i] * x[i]; }
};
/// x_i*y_i: the dot product's term.
struct ProductTerm {
  const float* x;
  const float* y;
  __device__ float operator()(std::int64_t i) const { return x[i] * y[i]; }
};

// ----------------------------------------------------------------------------
// Step 1: atomic_naive.
// One thread per element, each does atomicAdd(result, term). Correct, and the
// simplest thing that could work; but n atomics to ONE address serialize in the
// L2 cache's atomic unit, so throughput is bounded by atomic throughput on a single
// address (a few per clock for the whole GPU), not by bandwidth.
// Prediction: >100x slower than the copy bandwidth for large n.
// ----------------------------------------------------------------------------
template <class Term>
__global__ void reduce_atomic_naive_kernel(Term term, std::int64_t n, float* sum) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(sum, term(i));
}

template <class Term>
void launch_atomic_naive(Term term, const ReduceArgs& a) {
  constexpr int kThreads = 256;
  const std::int64_t blocks = (a.n + kThreads - 1) / kThreads;
  require_arg(blocks <= 0x7fffffff, "atomic_naive", "n", a.n, "needs more than 2^31-1 blocks");
  if (blocks == 0) return;
  reduce_atomic_naive_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, a.stream>>>(term, a.n, a.result);
  COURSE_CHECK_LAUNCH("reduce_atomic_naive_kernel");
}

/// result = sqrt(result): turns the sum of squares into the norm.
__global__ void sqrt_in_place_kernel(float* value) { *value = sqrtf(*value); }

template <class Term>
void reduce(ReduceStep step, Term term, const ReduceArgs& a) {
  // Every step accumulates into *result, so it starts at zero.
  COURSE_CUDA_CHECK(cudaMemsetAsync(a.result, 0, sizeof(float), a.stream));
  switch (step) {
    case ReduceStep::atomic_naive: launch_atomic_naive(term, a); return;
    default: break;
  }
  require_arg(false, "reduce", "step", static_cast<int>(step), "is not a ReduceStep");
}

}  // namespace

void l2_norm(ReduceStep step, const ReduceArgs& args) {
  m01::validate_reduce_args(args, "l2_norm", /*needs_y=*/false);
  reduce(step, SquareTerm{args.x}, args);
  sqrt_in_place_kernel<<<1, 1, 0, args.stream>>>(args.result);
  COURSE_CHECK_LAUNCH("sqrt_in_place_kernel");
}

void dot(ReduceStep step, const ReduceArgs& args) {
  m01::validate_reduce_args(args, "dot", /*needs_y=*/true);
  reduce(step, ProductTerm{args.x, args.y}, args);
}

}  // namespace course::solution
