/// @file linear_backward.cu
/// @brief Solution: the backward pass of a linear layer Y = X W + b (module 4, fp32).
///   dX = dY W^T       module 2's batched GEMM, step warp_tiled, b_transposed (W read as stored)
///   dW = X^T dY       module 2's batched GEMM, step warp_tiled, a_transposed (X read as stored)
///   db = colsum(dY)   the bias-gradient ladder:
///     1. column_per_thread   thread j sums column j over the M rows
///     2. block_column_strip  a block per 32-column strip, 32 warps split the rows, shared-memory combine
///
/// Predictions are for an H100 SXM (132 SMs, fp32 FMA peak ~60 TFLOP/s sustained, ~3 TB/s
/// HBM) at the benchmark shapes
///   L1 = (M = K = N = 4096)              dX, dW: 137 GFLOP each; dY is 64 MB
///   L2 = (M = 16384, K = N = 1024)       dX, dW: 34 GFLOP each;  dY is 64 MB
/// The GEMMs: module 2's warp_tiled measured 0.86-1.13 of cuBLAS on attention's shapes
/// (register_blocked 0.77-1.07), so both products use it. Prediction: dX at ~0.9 of
/// cuBLAS at L1 and L2. dW at L1 the same; at L2 its output is only 1024 x 1024 = 64
/// tiles of 128 x 128 for 132 SMs, each tile a K' = 16384-long sum: half the SMs idle,
/// ~0.4-0.5 of cuBLAS, which splits such a K across blocks (split-K: the next rung, not
/// written). The a_transposed path reads X's rows with 16-byte copies that land in shared
/// memory already in the k-major order the math wants: no slower than the plain A path.
/// The bias gradient reads dY once more (64 MB, ~21 us at 3 TB/s): tiny next to the
/// GEMMs' ~2 x 2.5 ms (L1) and ~2 x 0.6-1.5 ms (L2) -- if the kernel is not naive.

#include "module04/linear_backward.hpp"

#include "module02/batched_gemm.hpp"

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::solution {
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
// ============================================================================
// Bias step 1: column_per_thread.
// Thread j = blockIdx.x * 128 + threadIdx.x walks down column j of dY and writes db[j].
// Across a warp the 32 threads read 32 neighbouring floats of one row: every load is one
// 128-byte line, fully used. The sum runs over rows in order: the same db on every run.
// What is wrong: there are only N threads. N = 1024 is 8 blocks of 4 warps: 8 SMs of 132
// at work, each with 4 warps whose loads wait on DRAM (~0.6-0.8 us per round trip, a few
// loads in flight per warp after unrolling).
// Prediction: ~8 SMs x ~4 warps x ~4 lines in flight x 128 B per ~0.7 us ~ 25 GB/s at
// L2 (N = 1024): ~2.5 ms for 64 MB, longer than the two GEMMs together; at L1 (N = 4096,
// 32 blocks) ~100 GB/s, ~0.6 ms. 1-3% of the copy ceiling.
// ============================================================================
// @end
constexpr int kColumnThreads = 128;

__global__ void __launch_bounds__(kColumnThreads)
    bias_grad_column_per_thread_kernel(const float* __restrict__ dy, std::int64_t lddy, int M, int N,
                                       float* __restrict__ db) {
  // @step column_per_thread
  const int j = blockIdx.x * kColumnThreads + threadIdx.x;
  if (j >= N) return;
  const float* col = dy + j;
  float sum = 0.f;
#pragma unroll 4
  for (int i = 0; i < M; ++i) sum += col[i * lddy];  // int * int64_t: 64-bit offsets
  db[j] = sum;
  // @end
}

void launch_column_per_thread(const LinearBackwardArgs& a) {
  // @step column_per_thread
  const unsigned blocks = static_cast<unsigned>((a.N + kColumnThreads - 1) / kColumnThreads);
  bias_grad_column_per_thread_kernel<<<blocks, kColumnThreads, 0, a.stream>>>(
      a.dy, a.lddy, static_cast<int>(a.M), static_cast<int>(a.N), a.db);
  COURSE_CHECK_LAUNCH("bias_grad_column_per_thread_kernel");
  // @end
}

// @step block_column_strip  (the step's constants with its text)
// ============================================================================
// Bias step 2: block_column_strip.
// Changes from step 1: 32x the threads, the same coalescing. Block b owns the strip of
// columns 32b .. 32b + 31 (lane l: column 32b + l) and has 32 warps; warp w sums rows
// w, w + 32, w + 64, ... of its strip, eight rows per round into eight independent
// accumulators (eight 128-byte loads in flight per warp instead of one dependent chain).
// Then each warp writes its 32 partial sums to shared memory and warp 0 adds the 32
// partials of each column in warp order. Every sum has a fixed order -- no atomics --
// so db is bit-identical run to run.
// Prediction: bandwidth-bound where there are enough strips. L1 (N = 4096): 128 blocks
// of 1024 threads, one per SM, 32 warps x 8 lines in flight each: ~0.8-0.9 of the copy
// ceiling, ~25 us. L2 (N = 1024): only 32 strips, so 32 SMs: ~25-35% of the copy
// ceiling, ~70 us -- still ~35x step 1, and ~5% of the GEMMs' time. Splitting the rows
// of a strip over several blocks would fill the GPU but needs a second pass to combine
// them deterministically (or atomics, which are not): the next rung, not written.
// ============================================================================
constexpr int kStripWarps = 32;
constexpr int kStripRowsInFlight = 8;
// @end
static_assert(m04::kBiasGradStripCols == 32, "a strip is one column per lane");

__global__ void __launch_bounds__(kStripWarps * 32)
    bias_grad_block_column_strip_kernel(const float* __restrict__ dy, std::int64_t lddy, int M, int N,
                                        float* __restrict__ db) {
  __shared__ float partial[kStripWarps][32];
  // @step block_column_strip
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int j = blockIdx.x * 32 + lane;
  float acc[kStripRowsInFlight];
#pragma unroll
  for (int u = 0; u < kStripRowsInFlight; ++u) acc[u] = 0.f;
  if (j < N) {
    const float* col = dy + j;
    constexpr std::int64_t kRound = kStripWarps * kStripRowsInFlight;  // rows per round of the block
    std::int64_t i = warp;                                                // row of acc[0] this round
    for (; i + (kStripRowsInFlight - 1) * kStripWarps < M; i += kRound) {
#pragma unroll
      for (int u = 0; u < kStripRowsInFlight; ++u) acc[u] += col[(i + u * kStripWarps) * lddy];
    }
#pragma unroll
    for (int u = 0; u < kStripRowsInFlight; ++u)  // the last, partial round
      if (i + u * kStripWarps < M) acc[u] += col[(i + u * kStripWarps) * lddy];
  }
  float sum = 0.f;
#pragma unroll
  for (int u = 0; u < kStripRowsInFlight; ++u) sum += acc[u];
  partial[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && j < N) {
    float total = 0.f;
#pragma unroll 8
    for (int w = 0; w < kStripWarps; ++w) total += partial[w][lane];  // fixed order: deterministic
    db[j] = total;
  }
  // @end
}

void launch_block_column_strip(const LinearBackwardArgs& a) {
  // @step block_column_strip
  const unsigned blocks = static_cast<unsigned>((a.N + 31) / 32);
  bias_grad_block_column_strip_kernel<<<blocks, kStripWarps * 32, 0, a.stream>>>(
      a.dy, a.lddy, static_cast<int>(a.M), static_cast<int>(a.N), a.db);
  COURSE_CHECK_LAUNCH("bias_grad_block_column_strip_kernel");
  // @end
}

}  // namespace

void linear_backward(m04::BiasGradStep step, const m04::LinearBackwardArgs& args) {
  m04::validate_linear_backward_args(args, step, "linear_backward");
  const LinearBackwardArgs a = m04::resolve_leading_dims(args);
  // @step column_per_thread  (the stub runs the bias step first and names the solution's GEMM)
  if (a.dx) batched_gemm_strided(kGemmStep, dx_gemm(a));
  if (a.dw) batched_gemm_strided(kGemmStep, dw_gemm(a));
  if (a.db) {
    switch (step) {
      case BiasGradStep::column_per_thread: launch_column_per_thread(a); break;
      case BiasGradStep::block_column_strip: launch_block_column_strip(a); break;
    }
  }
  // @end
}

}  // namespace course::solution
