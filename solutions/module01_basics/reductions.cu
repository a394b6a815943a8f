/// @file reductions.cu
/// @brief Solution ladder for the L2 norm and the dot product (module 1).
///
/// The ladder (kReduceSteps in module01/reductions.hpp):
///   1. atomic_naive  one atomicAdd per element into a single float
///   2. smem_tree     block-wide tree reduction in shared memory, one atomic per block
///   3. warp_shuffle  warp shuffles replace most shared-memory round trips
///   4. vectorized    float4 grid-stride loads, per-block partials, deterministic second pass
///
/// Both ops reduce n terms to one float; `Term` says what a term is
/// (x_i^2 for the norm, x_i*y_i for the dot product) and how the sum becomes the
/// result (sqrt for the norm), so every step is written once and serves both.
///
/// Predictions are for the benchmark shape, n = 2^28 floats on an H100 SXM
/// (1 GiB read for the norm, 2 GiB for the dot product; HBM3 peak 3.35 TB/s,
/// the device-to-device copy ceiling measured by the bench is ~2.6-3.0 TB/s).

#include "module01/reductions.hpp"

#include "course/cuda/launch.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/device.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::solution {
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
  /// Chunk i4 = elements 4*i4 .. 4*i4+3; x must be 16-byte aligned (validated).
  __device__ Chunk load4(std::int64_t i4) const { return {reinterpret_cast<const float4*>(x)[i4]}; }
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
  __device__ Chunk load4(std::int64_t i4) const {
    return {reinterpret_cast<const float4*>(x)[i4], reinterpret_cast<const float4*>(y)[i4]};
  }
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
/// A grid-stride grid: every block resident at once (per_sm x SMs), but no more
/// blocks than there are pieces of `per_block` elements (small n), nor max_blocks.
int resident_grid(int per_sm, std::int64_t per_block, std::int64_t n, std::int64_t max_blocks = 1 << 30) {
  const std::int64_t resident = static_cast<std::int64_t>(per_sm) * device_properties().multiProcessorCount;
  return static_cast<int>(std::max<std::int64_t>(1, std::min({resident, ceil_div(n, per_block), max_blocks})));
}
// @end

// @step atomic_naive
// ----------------------------------------------------------------------------
// Step 1: atomic_naive.
// One thread per element, each does atomicAdd(result, term). Correct, and the
// simplest thing that could work; but n atomics to ONE address serialize in the
// L2 slice that owns it (about one per clock for the whole GPU), so throughput is
// bounded by same-address atomic throughput, not by bandwidth.
// Prediction: ~1.5-2e9 terms/s -> ~6-8 GB/s for the norm (~0.3% of copy), ~12-16
// GB/s for the dot; ~150 ms per call at 2^28. Numerics: one fp32 accumulator that
// receives every term stagnates once the sum's ulp exceeds a term: for the norm of
// 2^24 uniform values the error is ~1%, at 2^26 ~13% (the tests check the norm up
// to 2^20 only for this step; the dot's random signs keep its sum small). The PyTorch
// comparison on the results page flags the norm for this: at 2^20 its error is ~4e4x
// torch's, whose pairwise sums do not stagnate.
// Measured (results: {l2_norm,dot}/solution/atomic_naive/n=268435456): 2.3 / 4.5 GB/s: one
// atomic per term, about 3x fewer per second than predicted; the same rate at 2^20.
// ----------------------------------------------------------------------------
template <class Term>
__global__ void reduce_atomic_naive_kernel(Term term, std::int64_t n, float* sum) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(sum, term(i));
}

template <class Term>
void launch_atomic_naive(Term term, const ReduceArgs& a) {
  constexpr int kThreads = 256;
  const std::int64_t blocks = ceil_div(a.n, kThreads);
  require_arg(blocks <= 0x7fffffff, "atomic_naive", "n", a.n, "needs more than 2^31-1 blocks");
  if (blocks == 0) return;
  reduce_atomic_naive_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, a.stream>>>(term, a.n, a.result);
  COURSE_CHECK_LAUNCH("reduce_atomic_naive_kernel");
}
// @end

// @step smem_tree
// ----------------------------------------------------------------------------
// Step 2: smem_tree.
// Changes from atomic_naive: a grid of only as many blocks as fit on the GPU at once
// (8 x 256 threads per SM -> ~1056 blocks on an H100); each thread first sums its
// own terms in a register (grid-stride loop, stride = all threads of the grid),
// then the block combines its 256 sums in shared memory with a tree:
//   active = 128, 64, ..., 1: thread t < active adds partial[t + active] to partial[t].
// "Sequential addressing": the active threads and the values they read are
// contiguous, so a warp touches 32 consecutive words = 32 different banks (no
// conflicts) and whole warps drop out at once (no divergence until active < 32).
// Every level ends with __syncthreads(): the next level reads what other warps
// just wrote. Then ONE atomicAdd per block: ~1000 atomics instead of 2^28.
// Bytes: each input byte read once, as in every step. The per-block tree runs once
// per block (8 barriers), which is negligible next to the loop; what limits this
// step is memory parallelism: scalar 4-byte loads, 2048 threads/SM -> ~8 KB in
// flight per SM where HBM3 wants ~16 KB (Little's law: 3 TB/s x ~700 ns / 132 SMs)
// unless the compiler unrolls the loop and hoists loads.
// Prediction: 50-85% of copy (~1.5-2.5 TB/s), ~0.5 ms per norm at 2^28.
// Measured (results: l2_norm/solution/smem_tree/n=268435456): 2965.5 GB/s = 1.00 of copy;
// Measured (results: dot/solution/smem_tree/n=268435456): 2927.5 GB/s = 0.98 of copy:
// above the prediction (a read-only stream beats copy's mix of reads and writes).
// ----------------------------------------------------------------------------
template <class Term, int kThreads>
__global__ void __launch_bounds__(kThreads) reduce_smem_tree_kernel(Term term, std::int64_t n, float* sum) {
  static_assert((kThreads & (kThreads - 1)) == 0, "the tree halves: kThreads must be a power of two");
  __shared__ float partial[kThreads];
  const int t = threadIdx.x;

  float v = 0.f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + t; i < n; i += stride) v += term(i);
  partial[t] = v;
  __syncthreads();  // every thread's sum is in shared memory before anyone reads a neighbour's

  for (int active = kThreads / 2; active > 0; active /= 2) {
    if (t < active) partial[t] += partial[t + active];
    __syncthreads();  // outside the if: every thread of the block must reach it
  }
  if (t == 0) atomicAdd(sum, partial[0]);
}

template <class Term>
void launch_smem_tree(Term term, const ReduceArgs& a) {
  constexpr int kThreads = 256;
  static const int per_sm = blocks_per_sm(reduce_smem_tree_kernel<Term, kThreads>, kThreads);
  if (a.n == 0) return;
  const int blocks = resident_grid(per_sm, kThreads, a.n);
  reduce_smem_tree_kernel<Term, kThreads><<<blocks, kThreads, 0, a.stream>>>(term, a.n, a.result);
  COURSE_CHECK_LAUNCH("reduce_smem_tree_kernel");
}
// @end

// @step warp_shuffle
// ----------------------------------------------------------------------------
// Step 3: warp_shuffle.
// Changes from smem_tree: the block's combine uses register shuffles instead of a
// shared-memory tree. This is what common/include/course/cuda/warp_reduce.cuh
// provides (every later kernel of the course reuses it):
//  - warp_sum(v): __shfl_xor_sync(mask, v, offset) hands each lane the register v
//    of lane (lane ^ offset); adding it for offset = 16, 8, 4, 2, 1 is a butterfly:
//    after 5 steps EVERY lane holds the warp's total. No shared memory, no barrier:
//    the 32 lanes exchange registers within one instruction (the full mask says all
//    32 take part; they must all be converged there).
//  - block_all_reduce(v, op, identity, scratch): each warp reduces with shuffles,
//    lane 0 of warp w writes scratch[w], __syncthreads(), then every warp reads the
//    (at most 32) warp totals and shuffles once more. 2 barriers instead of 9, and
//    10 shuffles instead of 8 shared-memory rounds. (Its first __syncthreads protects
//    `scratch` from a previous call still reading it.)
// Bytes, grid and loop are those of smem_tree, so this isolates the combine.
// Prediction: the combine ran once per block and was already < 1% of the time, so
// ~ the same as smem_tree at 2^28 (within noise); it matters where block reductions
// are short and many: small n here, one per row in softmax and attention.
// Measured (results: l2_norm/solution/warp_shuffle/n=268435456): 2938.4 GB/s = 0.99 of copy, as
// smem_tree; at 2^20 also within noise of smem_tree:
// Measured (results: l2_norm/solution/{smem_tree,warp_shuffle}/n=1048576): 294.1 / 299.9 GB/s.
// ----------------------------------------------------------------------------
template <class Term, int kThreads>
__global__ void __launch_bounds__(kThreads) reduce_warp_shuffle_kernel(Term term, std::int64_t n, float* sum) {
  static_assert(kThreads % ::course::cuda::kWarpSize == 0, "block_all_reduce needs whole warps");
  __shared__ float warp_totals[::course::cuda::kWarpSize];

  float v = 0.f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    v += term(i);
  v = ::course::cuda::block_all_reduce(v, ::course::cuda::Sum{}, 0.f, warp_totals);
  if (threadIdx.x == 0) atomicAdd(sum, v);
}

template <class Term>
void launch_warp_shuffle(Term term, const ReduceArgs& a) {
  constexpr int kThreads = 256;
  static const int per_sm = blocks_per_sm(reduce_warp_shuffle_kernel<Term, kThreads>, kThreads);
  if (a.n == 0) return;
  const int blocks = resident_grid(per_sm, kThreads, a.n);
  reduce_warp_shuffle_kernel<Term, kThreads><<<blocks, kThreads, 0, a.stream>>>(term, a.n, a.result);
  COURSE_CHECK_LAUNCH("reduce_warp_shuffle_kernel");
}
// @end

// @step vectorized
// ----------------------------------------------------------------------------
// Step 4: vectorized.
// Changes from warp_shuffle:
//  - 16-byte loads: x (and y) are read as float4 (aligned: validated), 4x fewer load
//    instructions for the same bytes. The n % 4 elements after the last whole
//    float4 (0-3 of them) are added by the first n % 4 threads of the grid.
//  - More loads in flight: each loop iteration issues kUnroll = 4 independent float4
//    loads per thread (all loads first, then the arithmetic, into 4 separate
//    accumulators so no add waits on another): 64 B per thread, 128 B for the dot,
//    ~100 KB+ in flight per SM, far above the ~16 KB Little's law asks for.
//  - No float atomics: block b writes its partial to workspace[b]; the grid has
//    at most kMaxReduceBlocks blocks (7 per SM on an H100: 924), sized by occupancy so
//    every block is resident. A second kernel (one block) sums the partials in a fixed
//    order and writes *result = finish(total) (sqrt folded in for the norm), so
//    *result needs no zeroing and the result is bit-identical run to run (on the same
//    GPU: the grid, hence the summation order, depends on the SM count).
//  - On Hopper the second kernel is launched "early" (programmatic dependent launch):
//    it waits on the GPU for the first instead of the stream's usual launch gap.
// Bytes: n*4 (norm) or 2*n*4 (dot) read once + ~4 KB of partials written and read.
// Prediction: >= 90% of copy, on par with CUB DeviceReduce (same design), ~0.35 ms
// per norm at 2^28. The second pass would cost one ~2-3 us launch gap (~1% at 2^28,
// what separates us from CUB, which also runs two kernels); the early launch hides
// most of it. At 2^20 (4 MB, ~1.5 us of traffic) launch latency dominates every step.
// Measured (results: l2_norm/solution/vectorized/n=268435456): 3023.4 GB/s = 1.02 of copy, 1.01 of cub_reduce;
// Measured (results: dot/solution/vectorized/n=268435456): 3060.9 GB/s = 1.01 of cub_reduce.
// At 2^20, where launch gaps weigh most, against CUB's two plain launches:
// Measured (results: l2_norm/solution/vectorized/n=1048576): 400.7 GB/s = 1.28 of cub_reduce.
// Without the early launch (a development run) it was on par with CUB.
// ----------------------------------------------------------------------------
template <class Term, int kThreads, int kUnroll>
__global__ void __launch_bounds__(kThreads)
    reduce_vectorized_partials_kernel(Term term, std::int64_t n, float* partials) {
  __shared__ float warp_totals[::course::cuda::kWarpSize];
  const std::int64_t n4 = n / 4;  // whole float4 chunks
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  const std::int64_t thread = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;

  float acc[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) acc[u] = 0.f;

  // Main loop: kUnroll chunks per thread, one grid-stride apart (each load is one
  // coalesced 512-byte warp access), all in bounds.
  std::int64_t i = thread;
  for (; i + (kUnroll - 1) * stride < n4; i += kUnroll * stride) {
    typename Term::Chunk chunk[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) chunk[u] = term.load4(i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc[u] += Term::sum4(chunk[u]);
  }
  // Fewer than kUnroll chunks left for this thread.
  for (; i < n4; i += stride) acc[0] += Term::sum4(term.load4(i));
  // Scalar tail: elements 4*n4 .. n-1, one per thread of the first n % 4 threads.
  if (4 * n4 + thread < n) acc[0] += term(4 * n4 + thread);

  float v = acc[0];
#pragma unroll
  for (int u = 1; u < kUnroll; ++u) v += acc[u];
  v = ::course::cuda::block_all_reduce(v, ::course::cuda::Sum{}, 0.f, warp_totals);
  if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

/// Second pass: one block sums `count` partials in a fixed order and writes the result.
template <class Term, int kThreads>
__global__ void __launch_bounds__(kThreads)
    reduce_vectorized_final_kernel(const float* partials, int count, float* result) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched early (see launch_vectorized): wait here, before touching global memory,
  // until the partials kernel has finished and its writes are visible.
  cudaGridDependencySynchronize();
#endif
  __shared__ float warp_totals[::course::cuda::kWarpSize];
  float v = 0.f;
  for (int i = threadIdx.x; i < count; i += kThreads) v += partials[i];
  v = ::course::cuda::block_all_reduce(v, ::course::cuda::Sum{}, 0.f, warp_totals);
  if (threadIdx.x == 0) *result = Term::finish(v);
}

template <class Term>
void launch_vectorized(Term term, const ReduceArgs& a) {
  constexpr int kThreads = 256;
  constexpr int kUnroll = 4;
  constexpr int kFinalThreads = 256;
  const auto partials_kernel = reduce_vectorized_partials_kernel<Term, kThreads, kUnroll>;
  constexpr auto final_kernel = reduce_vectorized_final_kernel<Term, kFinalThreads>;
  static const int per_sm = blocks_per_sm(partials_kernel, kThreads);

  int blocks = 0;  // n == 0: no partials; the final pass still writes finish(0) = 0
  if (a.n > 0) {
    // Whole waves only: the same number of blocks on every SM, at most kMaxReduceBlocks.
    const int sms = device_properties().multiProcessorCount;
    const int per_sm_capped = std::max(1, std::min(per_sm, m01::kMaxReduceBlocks / sms));
    blocks = resident_grid(per_sm_capped, kThreads * 4 * kUnroll, a.n, m01::kMaxReduceBlocks);
    partials_kernel<<<blocks, kThreads, 0, a.stream>>>(term, a.n, a.workspace);
    COURSE_CHECK_LAUNCH("reduce_vectorized_partials_kernel");
  }
  // The final pass, with "programmatic dependent launch" on Hopper: the GPU may start
  // it before the partials kernel ends (it waits inside, see above), which hides the
  // 2-3 us gap between two dependent launches. Elsewhere: an ordinary launch.
  ::course::cuda::launch_early<final_kernel>(dim3(1), dim3(kFinalThreads), 0, a.stream,
                                             static_cast<const float*>(a.workspace), blocks, a.result);
  COURSE_CHECK_LAUNCH("reduce_vectorized_final_kernel");
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

}  // namespace course::solution
