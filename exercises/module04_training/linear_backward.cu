/// @file linear_backward.cu
/// @brief YOUR backward pass of a linear layer Y = X W + b (module 4, fp32):
///   dX = dY W^T, dW = X^T dY (given: module 2's GEMM does them), db = column sums of dY
///   (the exercise: two bias-gradient kernels).
///
/// Read module04_training/include/module04/linear_backward.hpp first (the shapes, why no
/// transpose is ever materialized, the row strides). Run the tests with:
///     ctest --preset default -L exercise -R LinearBackward
/// A bias step you have not written throws NotImplemented and its tests show SKIPPED; the
/// tests that request no db (dx and dw only) already pass with the given GEMM calls.
/// Hints, one at a time: `bash scripts/course.sh hint linear_backward/<step>`
/// (all of them: exercises/module04_training/hints/linear_backward.md).

#include "module04/linear_backward.hpp"

#include "module02/batched_gemm.hpp"

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::exercise {
namespace {

using m04::BiasGradStep;
using m04::LinearBackwardArgs;

// ============================================================================
// The two products (given): module 2's strided batched GEMM with batch = heads = 1, its
// operand options reading W and X in transposed order where they lie. Work out the
// mapping once on paper: C (M' x N') = op(A) (M' x K') * op(B) (K' x N').
// ============================================================================

/// Module 2's fastest fp32 step, for both products.
constexpr m02::BgemmStep kGemmStep = m02::BgemmStep::warp_tiled;

/// dX [M, K] = dY [M, N] * W^T: M' = M, N' = K, K' = N; A = dY, B = W stored K x N = N' x K'
/// -> b_transposed.
m02::StridedBatchedGemmArgs<float> dx_gemm(const LinearBackwardArgs& a) {
  m02::StridedBatchedGemmArgs<float> g;
  g.a = a.dy;
  g.stride_a_row = a.lddy;
  g.b = a.w;
  g.stride_b_row = a.ldw;
  g.b_transposed = true;
  g.c = a.dx;
  g.stride_c_row = a.lddx;
  g.M = a.M;
  g.N = a.K;
  g.K = a.N;
  g.stream = a.stream;
  return g;
}

/// dW [K, N] = X^T * dY [M, N]: M' = K, N' = N, K' = M; A = X stored M x K = K' x M'
/// -> a_transposed, B = dY.
m02::StridedBatchedGemmArgs<float> dw_gemm(const LinearBackwardArgs& a) {
  m02::StridedBatchedGemmArgs<float> g;
  g.a = a.x;
  g.stride_a_row = a.ldx;
  g.a_transposed = true;
  g.b = a.dy;
  g.stride_b_row = a.lddy;
  g.c = a.dw;
  g.stride_c_row = a.lddw;
  g.M = a.K;
  g.N = a.N;
  g.K = a.M;
  g.stream = a.stream;
  return g;
}

// @step column_per_thread
// ----------------------------------------------------------------------------
// Step 1: column_per_thread.
// db[j] = sum over i < M of dY[i * lddy + j]: thread j of the grid owns column j.
// TODO(step 1): write the kernel, then delete the throw in launch_column_per_thread and
//   launch ceil(N / kColumnThreads) blocks of kColumnThreads threads on a.stream.
// Hints, one at a time: bash scripts/course.sh hint linear_backward/column_per_thread
// Then run the benchmark: how many threads does this step have at N = 1024, and how
// many SMs can they occupy?
// ----------------------------------------------------------------------------
// @end
constexpr int kColumnThreads = 128;

__global__ void __launch_bounds__(kColumnThreads)
    bias_grad_column_per_thread_kernel(const float* __restrict__ dy, std::int64_t lddy, int M, int N,
                                       float* __restrict__ db) {
  // @step column_per_thread
  // TODO(step 1)
  // @end
}

void launch_column_per_thread(const LinearBackwardArgs& a) {
  // @step column_per_thread
  // TODO(step 1): delete the throw and launch the kernel.
  (void)a;
  throw NotImplemented("linear_backward bias step column_per_thread", __FILE__);
  // @end
}

// @step block_column_strip  (the step's constants with its text)
// ----------------------------------------------------------------------------
// Step 2: block_column_strip.
// A block of kStripWarps warps owns the strip of 32 columns 32 * blockIdx.x + lane. Warp
// w sums rows w, w + kStripWarps, w + 2 * kStripWarps, ... of its lane's column; the
// kStripWarps partial sums of each column then meet in shared memory and one warp adds
// them. No atomics: db must be bit-identical from run to run.
// TODO(step 2): write the kernel, then delete the throw in launch_block_column_strip and
//   launch ceil(N / 32) blocks of kStripWarps * 32 threads on a.stream.
// Hints, one at a time: bash scripts/course.sh hint linear_backward/block_column_strip
// ----------------------------------------------------------------------------
constexpr int kStripWarps = 32;
// @end
static_assert(m04::kBiasGradStripCols == 32, "a strip is one column per lane");

__global__ void __launch_bounds__(kStripWarps * 32)
    bias_grad_block_column_strip_kernel(const float* __restrict__ dy, std::int64_t lddy, int M, int N,
                                        float* __restrict__ db) {
  __shared__ float partial[kStripWarps][32];
  // @step block_column_strip
  // TODO(step 2)
  // @end
}

void launch_block_column_strip(const LinearBackwardArgs& a) {
  // @step block_column_strip
  // TODO(step 2): delete the throw and launch the kernel.
  (void)a;
  throw NotImplemented("linear_backward bias step block_column_strip", __FILE__);
  // @end
}

}  // namespace

void linear_backward(m04::BiasGradStep step, const m04::LinearBackwardArgs& args) {
  m04::validate_linear_backward_args(args, step, "linear_backward");
  const LinearBackwardArgs a = m04::resolve_leading_dims(args);
  // @step column_per_thread  (the stub runs the bias step first and names the solution's GEMM)
  // The bias step first: an unwritten one throws before any GEMM is enqueued. The GEMM is
  // module 2's solution, named with its namespace (here batched_gemm_strided would be yours).
  if (a.db) {
    switch (step) {
      case BiasGradStep::column_per_thread: launch_column_per_thread(a); break;
      case BiasGradStep::block_column_strip: launch_block_column_strip(a); break;
    }
  }
  if (a.dx) ::course::solution::batched_gemm_strided(kGemmStep, dx_gemm(a));
  if (a.dw) ::course::solution::batched_gemm_strided(kGemmStep, dw_gemm(a));
  // @end
}

}  // namespace course::exercise
