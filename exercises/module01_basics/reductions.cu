/// @file reductions.cu
/// @brief YOUR ladder for the L2 norm and the dot product (module 1).
///
/// Read module01_basics/README.md, "Reductions", then fill in one step at a time.
/// Run its tests with:   ctest --preset default -L exercise -R Reduce
/// and compare with the solution and the library:
///                       ./build/module01_basics/m01_bench --benchmark_filter='l2_norm/.*/n=268435456'
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint reductions/<step>`
/// (all of them: exercises/module01_basics/hints/reductions.md).
///
/// The kernels are written once for both ops: `term(i)` is x_i^2 (norm) or x_i*y_i
/// (dot), and `Term::finish(sum)` turns the sum into the result (sqrt for the norm).

#include "module01/reductions.hpp"

#include "course/cuda/launch.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/device.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::exercise {
namespace {

using m01::ReduceArgs;
using m01::ReduceStep;

/// x_i^2: the L2 norm's term; the result is sqrt(sum). (No scaling against overflow:
/// |x_i| > ~1e19 overflows fp32 squares, which cuBLAS's snrm2 guards against.)
struct SquareTerm {
  const float* x;
  /// Four consecutive elements, loaded as one 16-byte chunk (vectorized step).
  struct Chunk {
    float4 x;
  };
  static constexpr bool kHasFinish = true;

  __device__ float operator()(std::int64_t i) const { return x[i] * x[i]; }
  // @step vectorized  (step 4a: load4)
  // TODO(step 4): load elements 4*i4 .. 4*i4+3 of x with ONE 16-byte load.
  __device__ Chunk load4(std::int64_t /*i4*/) const { return {}; }
  // @end
  /// The four terms of a chunk, added.
  __device__ static float sum4(const Chunk& c) {
    return c.x.x * c.x.x + c.x.y * c.x.y + c.x.z * c.x.z + c.x.w * c.x.w;
  }
  __device__ static float finish(float sum) { return sqrtf(sum); }
};

/// x_i*y_i: the dot product's term; the result is the sum itself.
struct ProductTerm {
  const float* x;
  const float* y;
  struct Chunk {
    float4 x, y;
  };
  static constexpr bool kHasFinish = false;

  __device__ float operator()(std::int64_t i) const { return x[i] * y[i]; }
  // @step vectorized  (step 4a: load4)
  // TODO(step 4): same as SquareTerm::load4, for x and for y.
  __device__ Chunk load4(std::int64_t /*i4*/) const { return {}; }
  // @end
  __device__ static float sum4(const Chunk& c) {
    return c.x.x * c.y.x + c.x.y * c.y.y + c.x.z * c.y.z + c.x.w * c.y.w;
  }
  __device__ static float finish(float sum) { return sum; }
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// Blocks of `threads` threads that one SM holds at once for `kernel` (occupancy).
/// Callers cache it in a function-local static: it is a host query we keep out of
/// the timed path (one device per process assumed).
template <class Kernel>
int blocks_per_sm(Kernel kernel, int threads) {
  int per_sm = 0;
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return std::max(per_sm, 1);
}

// @step smem_tree  (the grid of steps 2-4)
/// Streaming multiprocessors of the current GPU. (Given.)
int num_sms() { return device_properties().multiProcessorCount; }
// @end

// @step atomic_naive
// ----------------------------------------------------------------------------
// Step 1: atomic_naive -- one thread per element, each adds its term to *sum.
//
// TODO(step 1): compute this thread's global index i (use 64-bit arithmetic: n can
//               exceed 2^31), and if i < n add term(i) to *sum atomically.
// Hints, one at a time: bash scripts/course.sh hint reductions/atomic_naive
// ----------------------------------------------------------------------------
template <class Term>
__global__ void reduce_atomic_naive_kernel(Term term, std::int64_t n, float* sum) {
  // TODO(step 1)
}

template <class Term>
void launch_atomic_naive(Term term, const ReduceArgs& a) {
  // TODO(step 1): delete this line, then pick a block size (256 is a good start) and
  //               launch ceil_div(a.n, threads) blocks on a.stream (ceil_div is given, above).
  throw NotImplemented("reduction step atomic_naive", __FILE__);
}
// @end

// @step smem_tree
// ----------------------------------------------------------------------------
// Step 2: smem_tree -- few blocks, each sums many terms, one atomicAdd per block.
//
// TODO(step 2a): each thread sums its terms in a register with a grid-stride loop:
//                start at its global index, step by the number of threads in the grid.
// TODO(step 2b): store that sum in shared memory and combine the kThreads values with
//                a tree: at each level, the lower half of the active threads adds the
//                upper half's value to its own; halve and repeat until one remains.
// TODO(step 2c): thread 0 adds the block's total to *sum atomically.
// Hints, one at a time: bash scripts/course.sh hint reductions/smem_tree
// ----------------------------------------------------------------------------
template <class Term, int kThreads>
__global__ void reduce_smem_tree_kernel(Term term, std::int64_t n, float* sum) {
  __shared__ float partial[kThreads];
  // TODO(step 2)
}

template <class Term>
void launch_smem_tree(Term term, const ReduceArgs& a) {
  constexpr int kThreads = 256;
  // TODO(step 2d): delete the throw; launch as many blocks as fit on the GPU at once
  //                (blocks_per_sm(reduce_smem_tree_kernel<Term, kThreads>, kThreads) * num_sms()),
  //                but no more than ceil_div(a.n, kThreads), and nothing when n == 0.
  throw NotImplemented("reduction step smem_tree", __FILE__);
}
// @end

// @step warp_shuffle
// ----------------------------------------------------------------------------
// Step 3: warp_shuffle -- the block's combine with register shuffles.
//
// TODO(step 3a): write warp_reduce_sum: add up `v` over the 32 lanes of a warp with
//                __shfl_down_sync (or __shfl_xor_sync), no shared memory.
// TODO(step 3b): in the kernel, keep step 2's grid-stride loop; reduce each warp with
//                warp_reduce_sum, let lane 0 of each warp store its total in warp_totals,
//                wait for the block, let warp 0 reduce the (kThreads / 32) totals, and
//                have thread 0 do the one atomicAdd.
// Hints, one at a time: bash scripts/course.sh hint reductions/warp_shuffle
// ----------------------------------------------------------------------------
__device__ __forceinline__ float warp_reduce_sum(float v) {
  // TODO(step 3a)
  return v;
}

template <class Term, int kThreads>
__global__ void reduce_warp_shuffle_kernel(Term term, std::int64_t n, float* sum) {
  __shared__ float warp_totals[32];
  // TODO(step 3b)
}

template <class Term>
void launch_warp_shuffle(Term term, const ReduceArgs& a) {
  // TODO(step 3c): delete the throw; launch like step 2 (same grid, so the benchmark
  //                compares only the combine).
  throw NotImplemented("reduction step warp_shuffle", __FILE__);
}
// @end

// @step vectorized
// ----------------------------------------------------------------------------
// Step 4: vectorized -- float4 loads, several in flight, per-block partials and a
//                       deterministic second pass (no float atomics).
//
// TODO(step 4a): write SquareTerm::load4 and ProductTerm::load4 (top of the file).
// TODO(step 4b): partials kernel. n4 = n / 4 whole float4 chunks. Grid-stride over
//                chunks, kUnroll chunks per thread per iteration, each into its own
//                accumulator; then the chunks left over; then the 0-3 tail elements
//                4*n4 .. n-1 (one each for the first n % 4 threads of the grid, via term(i)).
//                Reduce the block (step 3) and write the block's sum to partials[blockIdx.x].
// TODO(step 4c): final kernel, one block: sum partials[0 .. count-1] in a fixed order,
//                write *result = Term::finish(total).
// Hints, one at a time: bash scripts/course.sh hint reductions/vectorized
// Going further (optional): the solution launches the final kernel with "programmatic
// dependent launch" on Hopper to hide the gap between the two launches (~1% at 2^28);
// read launch_vectorized in solutions/ once yours passes.
// ----------------------------------------------------------------------------
template <class Term, int kThreads, int kUnroll>
__global__ void reduce_vectorized_partials_kernel(Term term, std::int64_t n, float* partials) {
  __shared__ float warp_totals[32];
  // TODO(step 4b)
}

template <class Term, int kThreads>
__global__ void reduce_vectorized_final_kernel(const float* partials, int count, float* result) {
  __shared__ float warp_totals[32];
  // TODO(step 4c)
}

template <class Term>
void launch_vectorized(Term term, const ReduceArgs& a) {
  // TODO(step 4d): delete the throw. For n > 0 launch the partials kernel (256 threads,
  //                kUnroll = 4) on at most m01::kMaxReduceBlocks blocks: as many as fit at
  //                once, but no more than ceil_div(a.n, 256 * 4 * kUnroll); the partials go to
  //                a.workspace. Then ALWAYS launch the final kernel (1 block) with the number
  //                of partials (0 when n == 0, which makes *result = finish(0) = 0).
  throw NotImplemented("reduction step vectorized", __FILE__);
}
// @end

// ----------------------------------------------------------------------------
// Dispatch.
// ----------------------------------------------------------------------------

/// result = finish(result): sqrt for the norm, after the atomic steps' sum.
template <class Term>
__global__ void finish_in_place_kernel(float* value) { *value = Term::finish(*value); }

/// atomic_naive, smem_tree and warp_shuffle atomically add into *result: it starts at zero, and the norm's sqrt
/// is a separate one-thread kernel once every atomic has landed (same stream).
template <class Term, class Launch>
void accumulate_atomically(Launch launch, Term term, const ReduceArgs& a) {
  COURSE_CUDA_CHECK(cudaMemsetAsync(a.result, 0, sizeof(float), a.stream));
  launch(term, a);
  if constexpr (Term::kHasFinish) {
    finish_in_place_kernel<Term><<<1, 1, 0, a.stream>>>(a.result);
    COURSE_CHECK_LAUNCH("finish_in_place_kernel");
  }
}

template <class Term>
void reduce(ReduceStep step, Term term, const ReduceArgs& a) {
  switch (step) {
    case ReduceStep::atomic_naive: accumulate_atomically(launch_atomic_naive<Term>, term, a); return;
    case ReduceStep::smem_tree: accumulate_atomically(launch_smem_tree<Term>, term, a); return;
    case ReduceStep::warp_shuffle: accumulate_atomically(launch_warp_shuffle<Term>, term, a); return;
    case ReduceStep::vectorized: launch_vectorized(term, a); return;  // writes *result itself
  }
  require_arg(false, "reduce", "step", static_cast<int>(step), "is not a ReduceStep");
}

}  // namespace

void l2_norm(ReduceStep step, const ReduceArgs& args) {
  m01::validate_reduce_args(args, "l2_norm", /*needs_y=*/false);
  reduce(step, SquareTerm{args.x}, args);
}

void dot(ReduceStep step, const ReduceArgs& args) {
  m01::validate_reduce_args(args, "dot", /*needs_y=*/true);
  reduce(step, ProductTerm{args.x, args.y}, args);
}

}  // namespace course::exercise
