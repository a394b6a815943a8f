/// @file reductions.cu
/// @brief YOUR ladder for the L2 norm and the dot product (module 1).
///
/// Read module01_basics/README.md, "Reductions", then fill in one step at a time.
/// Run its tests with:   ctest --preset default -L exercise -R Reduce
/// A step you have not written throws NotImplemented and its tests show SKIPPED.

#include "module01/reductions.hpp"

#include <cuda_runtime.h>

namespace course::exercise {
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
// Step 1: atomic_naive -- one thread per element, each adds its term to *sum.
//
// TODO(step 1): compute this thread's global index i (use 64-bit arithmetic: n can
//               exceed 2^31), and if i < n add term(i) to *sum atomically.
// Hint 1: blockIdx.x * blockDim.x + threadIdx.x, cast to std::int64_t first.
// Hint 2: a plain `*sum += ...` is a data race; look up atomicAdd(float*, float).
// ----------------------------------------------------------------------------
template <class Term>
__global__ void reduce_atomic_naive_kernel(Term term, std::int64_t n, float* sum) {
  // TODO(step 1)
}

template <class Term>
void launch_atomic_naive(Term term, const ReduceArgs& a) {
  // TODO(step 1): delete this line, then pick a block size (256 is a good start) and
  //               launch ceil(n / threads) blocks on a.stream.
  // Hint 3: skip the launch when n == 0 (a grid of 0 blocks is an error), and call
  //         COURSE_CHECK_LAUNCH("reduce_atomic_naive_kernel") right after the launch.
  throw NotImplemented("reduction step atomic_naive", __FILE__);
}

/// result = sqrt(result): turns the sum of squares into the norm. (Given.)
__global__ void sqrt_in_place_kernel(float* value) { *value = sqrtf(*value); }

template <class Term>
void reduce(ReduceStep step, Term term, const ReduceArgs& a) {
  COURSE_CUDA_CHECK(cudaMemsetAsync(a.result, 0, sizeof(float), a.stream));
  switch (step) {
    case ReduceStep::atomic_naive: launch_atomic_naive(term, a); return;
    default: break;
  }
  throw NotImplemented(std::string("reduction step ") + m01::kReduceSteps[static_cast<int>(step)].name, __FILE__);
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

}  // namespace course::exercise
