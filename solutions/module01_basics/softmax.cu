/// @file softmax.cu
/// @brief Solution ladder for fp32 softmax along a dimension of a 2-D matrix (module 1).
///
/// The ladder (kSoftmaxSteps in module01/softmax.hpp):
///   1. naive_three_pass   three kernels (max, sum of exp, normalize), one thread per slice: x read 3 times
///   2. block_per_row      one block per row, block-wide reductions; each pass re-reads the row from L2
///   3. warp_per_row       one warp per row held in registers (cols <= 1024): read once, write once
///   4. online_vectorized  online max/sum in one pass, float4 loads; rows too long for the chip read twice
///   5. cluster_columns    dim = 0 read once: a thread-block cluster (sm_90) holds a strip of whole columns
///
/// Softmax is memory-bound: per element it does ~5 FLOPs (compare, subtract, exp, add,
/// multiply) on 8 bytes (read x, write y). The ceiling is therefore a copy: read the
/// matrix once, write it once. Every step below is about getting closer to that by
/// reading the input fewer times and with better access patterns.
///
/// Byte counts in the predictions are for the benchmark shape 65536 x 1024 (dim = 1):
/// 256 MiB in, 256 MiB out; the copy of those bytes is the 1.0x reference
/// (~3.0 TB/s read+write on an H100 SXM, i.e. ~180 us).
///
/// dim = 0 (normalize columns) is supported by every step. A "slice" is one row
/// (dim = 1) or one column (dim = 0); the slice-generic naive kernels cover both, and
/// the later steps use column-strip kernels for dim = 0 (see block_per_row).
/// cluster_columns is the dim = 0 step: it holds whole columns on chip across the
/// blocks of a thread-block cluster (sm_90), so x is read once.

#include "module01/softmax.hpp"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/vec.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <array>
#include <cfloat>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace course::solution {
namespace {

using m01::SoftmaxArgs;
using m01::SoftmaxStep;
namespace cc = ::course::cuda;

constexpr float kLog2e = 1.4426950408889634f;

/// exp(x) as one multiply and one MUFU.EX2 (2^x). Its error grows with |x|
/// (~|x| * 2^-24 relative); softmax only feeds it x <= 0, and the terms with large
/// |x| are the tiny ones, so the error that reaches y stays a few ulp.
__device__ __forceinline__ float fast_exp(float x) { return exp2f(x * kLog2e); }

/// Where the slices of a 2-D matrix lie: element i of slice s is at
/// base + s * slice_stride + i * elem_stride. dim = 1: slices are rows (elem_stride 1),
/// dim = 0: slices are columns (elem_stride = the row stride).
struct Slices {
  std::int64_t count;      ///< number of slices
  std::int64_t length;     ///< elements per slice
  std::int64_t x_slice, x_elem;
  std::int64_t y_slice, y_elem;
};

Slices slices_of(const SoftmaxArgs& a) {
  if (a.dim == 1) return {a.rows, a.cols, a.ldx, 1, a.ldy, 1};
  return {a.cols, a.rows, 1, a.ldx, 1, a.ldy};
}

unsigned blocks_for(std::int64_t work, int per_block, const char* step) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  require_arg(blocks <= 0x7fffffff, step, "blocks", blocks, "exceeds the grid limit 2^31 - 1");
  return static_cast<unsigned>(blocks);
}

// @step naive_three_pass  (step 1: the section's comment)
// ============================================================================
// Step 1: naive_three_pass.
// Three kernels, one thread per slice: (1) max of the slice, (2) sum of
// exp(x - max), (3) y = exp(x - max) / sum. The max and sum wait in a workspace
// between launches.
//
// Bytes: x is read three times and y written once: 4 x 256 MiB = 1 GiB, 2x the copy.
// Worse, for dim = 1 the 32 threads of a warp walk 32 *different rows*, 4 KiB apart:
// every load instruction touches 32 sectors for 128 useful bytes, and only 65536
// threads (~15 warps per SM) exist to hide the latency. For dim = 0 the same code is
// coalesced (neighbouring threads = neighbouring columns): the lesson's first surprise.
// Prediction (65536 x 1024, dim = 1): 10-30x slower than the copy; at 4096 x 32768
// only 4096 threads exist (~1 warp per SM) and it is latency-bound: >100x.
// Measured (results: softmax/solution/naive_three_pass/65536x1024): 275.8 GB/s = 0.07 of copy
// Measured (results: softmax/solution/naive_three_pass/16384x4096): 228.6 GB/s = 0.05 of copy
// Measured (results: softmax/solution/naive_three_pass/4096x32768): 57.5 GB/s = 0.01 of copy
// (dim = 1).
// ============================================================================
// @end
__global__ void naive_slice_max_kernel(const float* x, Slices sl, float* slice_max) {
  // @step naive_three_pass
  const std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= sl.count) return;
  const float* xs = x + s * sl.x_slice;
  float m = -INFINITY;
  for (std::int64_t i = 0; i < sl.length; ++i) m = fmaxf(m, xs[i * sl.x_elem]);
  slice_max[s] = m;
  // @end
}

__global__ void naive_slice_sum_kernel(const float* x, Slices sl, const float* slice_max, float* slice_sum) {
  // @step naive_three_pass
  const std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= sl.count) return;
  const float* xs = x + s * sl.x_slice;
  const float m = slice_max[s];
  // One thread adds the whole slice (up to millions of values): compensated, or a
  // 65536-long column of near-equal values sums 4e-4 off (see cc::CompensatedSum).
  cc::CompensatedSum sum;
  for (std::int64_t i = 0; i < sl.length; ++i) sum.add(expf(xs[i * sl.x_elem] - m));
  slice_sum[s] = sum.sum;
  // @end
}

__global__ void naive_normalize_kernel(const float* x, float* y, Slices sl, const float* slice_max,
                                       const float* slice_sum) {
  // @step naive_three_pass
  const std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= sl.count) return;
  const float* xs = x + s * sl.x_slice;
  float* ys = y + s * sl.y_slice;
  const float m = slice_max[s];
  const float inv = 1.f / slice_sum[s];
  // Reading x[i] before writing y[i] in the same thread keeps the in-place case correct.
  for (std::int64_t i = 0; i < sl.length; ++i) ys[i * sl.y_elem] = expf(xs[i * sl.x_elem] - m) * inv;
  // @end
}

void launch_naive_three_pass(const SoftmaxArgs& a) {
  // @step naive_three_pass
  constexpr int kThreads = 256;
  const Slices sl = slices_of(a);
  const unsigned blocks = blocks_for(sl.count, kThreads, "naive_three_pass");
  float* slice_max = a.workspace;
  float* slice_sum = a.workspace + sl.count;
  naive_slice_max_kernel<<<blocks, kThreads, 0, a.stream>>>(a.x, sl, slice_max);
  COURSE_CHECK_LAUNCH("naive_slice_max_kernel");
  naive_slice_sum_kernel<<<blocks, kThreads, 0, a.stream>>>(a.x, sl, slice_max, slice_sum);
  COURSE_CHECK_LAUNCH("naive_slice_sum_kernel");
  naive_normalize_kernel<<<blocks, kThreads, 0, a.stream>>>(a.x, a.y, sl, slice_max, slice_sum);
  COURSE_CHECK_LAUNCH("naive_normalize_kernel");
  // @end
}

// @step block_per_row  (steps 2a and 2b: the section's comment)
// ============================================================================
// Step 2: block_per_row.
// One block of 256 threads per row. Neighbouring threads read neighbouring
// elements (coalesced), and the max and the sum become block-wide reductions
// (course::cuda::block_all_reduce of common/include/course/cuda/warp_reduce.cuh: warp
// shuffles, then one value per warp through shared memory). One kernel, no workspace; still three passes over the row
// (max, sum, normalize), but the 2nd and 3rd read a row that was just read, so
// they hit L2 (a 4 KiB row; ~132 x 8 rows in flight = 4 MiB << 50 MB of L2).
//
// Bytes from DRAM: ~read 1x + write 1x (the re-reads come from L2), so close to the
// copy if L2 bandwidth and the two barriers per row do not get in the way.
// Occupancy: 256 threads, few registers: 8 blocks (64 warps) per SM.
// Prediction (65536 x 1024, dim = 1): 60-75% of the copy; the re-reads cost L2
// bandwidth and each row pays two reduction latencies with only 4 elements per thread.
// Measured (results: softmax/solution/block_per_row/65536x1024): 2668.4 GB/s = 0.63 of copy
// Measured (results: softmax/solution/block_per_row/16384x4096): 3458.2 GB/s = 0.82 of copy
// Measured (results: softmax/solution/block_per_row/4096x32768): 1762.7 GB/s = 0.42 of copy
// Measured (results: softmax/solution/block_per_row/16384x4096_dim0): 786.6 GB/s = 0.19 of copy
//
// dim = 0 -- column strips: a block owns 32 neighbouring columns (threadIdx.x) and
// kStripRows row phases (threadIdx.y). A warp then reads 32 consecutive floats of
// one row (128 B, coalesced); each thread walks its column with stride kStripRows,
// and the kStripRows partial results of a column meet in shared memory. Same three
// passes (max, sum, normalize). warp_per_row reuses this kernel for dim = 0.
// ============================================================================
// @end
constexpr int kRowThreads = 256;

__global__ void __launch_bounds__(kRowThreads)
    block_row_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int cols) {
  __shared__ float scratch[cc::kWarpSize];
  // @step block_per_row  (step 2a)
  const float* xr = x + static_cast<std::int64_t>(blockIdx.x) * ldx;
  float* yr = y + static_cast<std::int64_t>(blockIdx.x) * ldy;

  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < cols; j += kRowThreads) m = fmaxf(m, xr[j]);
  m = cc::block_all_reduce(m, cc::Max{}, -INFINITY, scratch);

  float s = 0.f;
  for (std::int64_t j = threadIdx.x; j < cols; j += kRowThreads) s += expf(xr[j] - m);
  s = cc::block_all_reduce(s, cc::Sum{}, 0.f, scratch);

  // Every read of the row above finished before the barrier inside block_all_reduce;
  // below each thread writes only the elements it reads: in place is safe.
  const float inv = 1.f / s;
  for (std::int64_t j = threadIdx.x; j < cols; j += kRowThreads) yr[j] = expf(xr[j] - m) * inv;
  // @end
}

void launch_block_row(const SoftmaxArgs& a) {
  // @step block_per_row  (step 2a)
  block_row_softmax_kernel<<<blocks_for(a.rows, 1, "block_per_row"), kRowThreads, 0, a.stream>>>(
      a.x, a.ldx, a.y, a.ldy, static_cast<int>(a.cols));
  COURSE_CHECK_LAUNCH("block_row_softmax_kernel");
  // @end
}

constexpr int kStripCols = 32;  // = warp size: one warp reads one 128-byte row segment
constexpr int kStripRows = 16;  // row phases per block: 32 x 16 = 512 threads

// @step block_per_row  (step 2b: the strip's reduction is the learner's)
/// Combine the kStripRows partial values of each column of the strip; every thread
/// gets its column's result. All threads of the block must call it.
template <class Op>
__device__ __forceinline__ float strip_all_reduce(float v, Op op, float (*red)[kStripCols]) {
  __syncthreads();  // the previous call's readers are done with `red`
  red[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  float r = red[0][threadIdx.x];
#pragma unroll
  for (int k = 1; k < kStripRows; ++k) r = op(r, red[k][threadIdx.x]);
  return r;
}

// @end
__global__ void __launch_bounds__(kStripCols* kStripRows)
    column_strip_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int rows, int cols) {
  __shared__ float red[kStripRows][kStripCols];
  // @step block_per_row  (step 2b)
  const int c = blockIdx.x * kStripCols + threadIdx.x;
  const bool active = c < cols;  // inactive threads still join the barriers

  float m = -INFINITY;
  if (active)
    for (std::int64_t r = threadIdx.y; r < rows; r += kStripRows) m = fmaxf(m, x[r * ldx + c]);
  m = strip_all_reduce(m, cc::Max{}, red);

  // Each thread adds rows / kStripRows values (65536 for a 2^20-row column): compensated.
  cc::CompensatedSum part;
  if (active)
    for (std::int64_t r = threadIdx.y; r < rows; r += kStripRows) part.add(expf(x[r * ldx + c] - m));
  const float s = strip_all_reduce(part.sum, cc::Sum{}, red);

  if (!active) return;
  const float inv = 1.f / s;
  for (std::int64_t r = threadIdx.y; r < rows; r += kStripRows) y[r * ldy + c] = expf(x[r * ldx + c] - m) * inv;
  // @end
}

void launch_column_strip(const SoftmaxArgs& a) {
  // @step block_per_row  (step 2b)
  const dim3 block(kStripCols, kStripRows);
  column_strip_softmax_kernel<<<blocks_for(a.cols, kStripCols, "column_strip"), block, 0, a.stream>>>(
      a.x, a.ldx, a.y, a.ldy, static_cast<int>(a.rows), static_cast<int>(a.cols));
  COURSE_CHECK_LAUNCH("column_strip_softmax_kernel");
  // @end
}

void launch_block_per_row(const SoftmaxArgs& a) {
  if (a.dim == 1) launch_block_row(a);
  else launch_column_strip(a);
}

// @step warp_per_row  (step 3: the section's comment)
// ============================================================================
// Step 3: warp_per_row.
// One warp per row, and the row lives in registers: lane l holds elements
// l, l+32, l+64, ... (kPerLane of them; coalesced 128-byte loads). The max and the
// sum are warp shuffles only -- no shared memory, no __syncthreads -- and the
// exponentials are computed once and kept, so x is read ONCE and y written once.
// kPerLane is a compile-time constant (an array indexed by unrolled loops stays in
// registers) chosen per row length: 1, 2, 4, 8, 16 or 32 -> cols <= 1024.
// Longer rows would spill registers: they fall back to block_per_row's kernel, and
// dim = 0 uses block_per_row's column strips.
//
// Bytes: read 1x + write 1x = the copy's bytes. Registers: ~32 + ~16 per thread at
// kPerLane = 32 -> ~5 blocks of 8 warps per SM; each warp has 32 x 4 B x 32 = 4 KiB
// of loads in flight, ~160 KiB per SM -- plenty to cover DRAM latency.
// Prediction (65536 x 1024, dim = 1): 80-90% of the copy; scalar (4-byte) loads
// cost 4x the load instructions of float4, the only thing left for the next step.
// Measured (results: softmax/solution/warp_per_row/65536x1024): 3972.3 GB/s = 0.94 of copy
// Measured (results: softmax/solution/warp_per_row/16384x4096): 3432.1 GB/s = 0.81 of copy
// Measured (results: softmax/solution/warp_per_row/4096x32768): 1764.4 GB/s = 0.42 of copy
// Rows longer than 1024 use block_per_row's kernels, hence its numbers there (within noise).
// ============================================================================
// @end
constexpr int kWarpsPerBlock = 8;

template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t rows, int cols) {
  // @step warp_per_row
  const int lane = threadIdx.x % cc::kWarpSize;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / cc::kWarpSize;
  if (r >= rows) return;  // uniform per warp: the shuffles below see full warps
  const float* xr = x + r * ldx;
  float* yr = y + r * ldy;

  float v[kPerLane];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = k * cc::kWarpSize + lane;
    v[k] = j < cols ? xr[j] : -INFINITY;  // -inf pads: exp(-inf - m) = 0 below
    m = fmaxf(m, v[k]);
  }
  m = cc::warp_max(m);

  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    v[k] = fast_exp(v[k] - m);
    s += v[k];
  }
  s = cc::warp_sum(s);

  const float inv = 1.f / s;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = k * cc::kWarpSize + lane;
    if (j < cols) yr[j] = v[k] * inv;
  }
  // @end
}

template <int kPerLane>
void launch_warp_row(const SoftmaxArgs& a) {
  // @step warp_per_row
  warp_row_softmax_kernel<kPerLane><<<blocks_for(a.rows, kWarpsPerBlock, "warp_per_row"),
                                      kWarpsPerBlock * cc::kWarpSize, 0, a.stream>>>(
      a.x, a.ldx, a.y, a.ldy, a.rows, static_cast<int>(a.cols));
  COURSE_CHECK_LAUNCH("warp_row_softmax_kernel");
  // @end
}

void launch_warp_per_row(const SoftmaxArgs& a) {
  if (a.dim == 0) return launch_column_strip(a);
  if (a.cols <= 32) return launch_warp_row<1>(a);
  if (a.cols <= 64) return launch_warp_row<2>(a);
  if (a.cols <= 128) return launch_warp_row<4>(a);
  if (a.cols <= 256) return launch_warp_row<8>(a);
  if (a.cols <= 512) return launch_warp_row<16>(a);
  if (a.cols <= m01::kWarpPerRowMaxCols) return launch_warp_row<32>(a);
  launch_block_row(a);  // too long for registers
}

// @step online_vectorized  (steps 4a and 4b: the section's comment)
// ============================================================================
// Step 4: online_vectorized.
//
// (a) The online update. Softmax needs max(x) before it can sum exp(x - max): two
// passes. The online form keeps a running pair (m, s) = (max so far, sum of
// exp(x_i - m) so far) and updates both with each new x:
//
//     m_new = max(m, x)
//     s     = s * exp(m - m_new) + exp(x - m_new)   // rescale the OLD sum to the new max
//     m     = m_new                                  // ... and only THEN replace m
//
// The order matters. A tempting way to write it assigns `max_val = new_max` first
// and then `sum_exp = sum_exp * exp(max_val - new_max) + ...`: the factor is then
// exp(0) = 1, the old terms are never rescaled and the sum is too large whenever the
// max grows (tests/planted/softmax_planted.cu keeps that bug; the tests reject it).
// Two partial pairs merge the same way: m = max(m1, m2),
// s = s1 * exp(m1 - m) + s2 * exp(m2 - m). An empty pair is (-FLT_MAX, 0), not
// (-inf, 0): exp(-inf - (-inf)) would be NaN.
//
// (b) float4. With x, y 16-byte aligned and ldx, ldy multiples of 4, each thread
// moves 16 bytes per instruction (4x fewer load/store instructions than warp_per_row);
// a row's last cols % 4 elements go through scalar code (the tail). Otherwise the
// same kernels run with scalar accesses (kVec = 1).
//
// (c) Dispatch by row length (dim = 1):
//   cols <= 1024:          one warp per row, 4..32 floats per lane in registers.
//   1024 < cols <= 32768:  one block per row (128, 256, 512 or 1024 threads), 32 floats
//                          per thread in registers.
//       Both: each thread reduces its registers to one (m, s) pair, the pairs merge
//       with the online rule in ONE reduction (steps 2-3 needed two: max, then sum),
//       and y_i = exp(x_i - m_t) * (exp(m_t - m) / s) reuses the stored exponentials.
//       Bytes: read 1x + write 1x.
//   cols > 32768:          streaming, one block of 512 threads per row: pass 1 folds
//       float4 chunks into (m, s) with the online rule (one read), the block merges
//       the pairs, pass 2 re-reads x (mostly from L2) and writes y with streaming
//       stores (__stcs, evict-first, so y does not push x out of L2).
//       Bytes: read 2x + write 1x at worst.
// dim = 0: narrower column strips than block_per_row's, one online pass + one normalize pass.
//
// Prediction: >= 85% of the copy at 65536 x 1024 (warp kernel, 8 float4 per lane),
// 16384 x 4096 (128 threads x 32 floats, ~9 blocks per SM) and 4096 x 32768
// (1024 threads x 32 floats, 1 block per SM: the weakest, each SM idles on the
// block reduction between rows with nothing else resident).
// Measured (results: softmax/solution/online_vectorized/65536x1024): 4009.1 GB/s = 0.95 of copy
// Measured (results: softmax/solution/online_vectorized/16384x4096): 3967.2 GB/s = 0.94 of copy
// Measured (results: softmax/solution/online_vectorized/4096x32768): 3973.6 GB/s = 0.94 of copy
// (target 0.85); dim = 0 is not a target here (it is cluster_columns'):
// Measured (results: softmax/solution/online_vectorized/16384x4096_dim0): 1727.7 GB/s = 0.41 of copy
// ============================================================================
// @end

/// A running softmax state: the max so far and the sum of exp(x_i - m) so far.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum empty_max_sum() { return {-FLT_MAX, 0.f}; }

// @step online_vectorized  (step 4a: the online update and the merge)
/// Fold one value into the running pair (rescale the old sum BEFORE replacing m).
__device__ __forceinline__ MaxSum online_update(MaxSum a, float x) {
  const float m_new = fmaxf(a.m, x);
  a.s = a.s * fast_exp(a.m - m_new) + fast_exp(x - m_new);
  a.m = m_new;
  return a;
}

/// Fold four values: one rescale of the old sum per chunk instead of per element.
__device__ __forceinline__ MaxSum online_update4(MaxSum a, float4 q) {
  const float m_new = fmaxf(fmaxf(a.m, fmaxf(q.x, q.y)), fmaxf(q.z, q.w));
  a.s = a.s * fast_exp(a.m - m_new) + (fast_exp(q.x - m_new) + fast_exp(q.y - m_new)) +
        (fast_exp(q.z - m_new) + fast_exp(q.w - m_new));
  a.m = m_new;
  return a;
}

/// Merge two partial pairs (the online rule for two sums).
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * fast_exp(a.m - m) + b.s * fast_exp(b.m - m)};
}
// @end

/// merge() as a functor, and the shuffle of a pair: with them the common warp and block
/// reductions (course/cuda/warp_reduce.cuh) combine MaxSum pairs like plain floats.
struct Merge {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const { return merge(a, b); }
};
__device__ __forceinline__ MaxSum warp_shfl_xor(MaxSum v, int offset) {
  return {cc::warp_shfl_xor(v.m, offset), cc::warp_shfl_xor(v.s, offset)};
}

/// Warp-wide merge; every lane gets the result.
__device__ __forceinline__ MaxSum warp_merge(MaxSum v) { return cc::warp_all_reduce(v, Merge{}); }

/// Block-wide merge; every thread gets the result. blockDim.x % 32 == 0, 1-D block.
__device__ __forceinline__ MaxSum block_merge(MaxSum v, MaxSum* scratch /* >= 32 */) {
  return cc::block_all_reduce(v, Merge{}, empty_max_sum(), scratch);
}

// @step online_vectorized  (step 4b: the kernels)
/// The kElems values of one thread in registers; kVec consecutive floats per chunk,
/// chunk c of thread t covers elements [(c * kThreads + t) * kVec, ... + kVec).
template <int kThreads, int kElems, int kVec>
struct RowRegisters {
  static constexpr int kChunks = kElems / kVec;
  static_assert(kElems % kVec == 0, "kElems must be a multiple of kVec");
  float v[kElems];

  __device__ __forceinline__ static int first(int c, int t) { return (c * kThreads + t) * kVec; }

  __device__ __forceinline__ void load(const float* xr, int t, int cols) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int j = first(c, t);
      if constexpr (kVec == 4) {
        if (j + 4 <= cols) {
          const float4 q = *reinterpret_cast<const float4*>(xr + j);
          v[4 * c + 0] = q.x; v[4 * c + 1] = q.y; v[4 * c + 2] = q.z; v[4 * c + 3] = q.w;
        } else {
#pragma unroll
          for (int u = 0; u < 4; ++u) v[4 * c + u] = j + u < cols ? xr[j + u] : -INFINITY;  // tail
        }
      } else {
        v[c] = j < cols ? xr[j] : -INFINITY;
      }
    }
  }

  __device__ __forceinline__ void store(float* yr, int t, int cols, float scale) const {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int j = first(c, t);
      if constexpr (kVec == 4) {
        if (j + 4 <= cols) {
          *reinterpret_cast<float4*>(yr + j) =
              make_float4(v[4 * c] * scale, v[4 * c + 1] * scale, v[4 * c + 2] * scale, v[4 * c + 3] * scale);
        } else {
#pragma unroll
          for (int u = 0; u < 4; ++u)
            if (j + u < cols) yr[j + u] = v[4 * c + u] * scale;  // tail
        }
      } else {
        if (j < cols) yr[j] = v[c] * scale;
      }
    }
  }

  /// Replace the values by exp(v - m_t), m_t their own max; return (m_t, sum).
  __device__ __forceinline__ MaxSum exponentiate() {
    float m = -FLT_MAX;  // an all-padding thread keeps (-FLT_MAX, 0): merges cleanly
#pragma unroll
    for (int k = 0; k < kElems; ++k) m = fmaxf(m, v[k]);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kElems; ++k) {
      v[k] = fast_exp(v[k] - m);  // padding: exp(-inf) = 0
      s += v[k];
    }
    return {m, s};
  }
};

constexpr int kOnlineRowsPerBlock = 8;  // warp-per-row variant: 8 rows (warps) per block

/// kRowThreads == 32: one warp per row, kOnlineRowsPerBlock rows per block, shuffles only.
/// kRowThreads >= 128: one block per row.
template <int kRowThreads, int kElems, int kVec>
__global__ void __launch_bounds__(kRowThreads == cc::kWarpSize ? kOnlineRowsPerBlock * cc::kWarpSize : kRowThreads)
    online_registers_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t rows, int cols) {
  constexpr bool kWarpRow = kRowThreads == cc::kWarpSize;
  int t;
  std::int64_t r;
  if constexpr (kWarpRow) {
    t = threadIdx.x % cc::kWarpSize;
    r = static_cast<std::int64_t>(blockIdx.x) * kOnlineRowsPerBlock + threadIdx.x / cc::kWarpSize;
    if (r >= rows) return;  // uniform per warp
  } else {
    t = threadIdx.x;
    r = blockIdx.x;
  }
  const float* xr = x + r * ldx;
  float* yr = y + r * ldy;

  RowRegisters<kRowThreads, kElems, kVec> row;
  row.load(xr, t, cols);
  const MaxSum mine = row.exponentiate();
  MaxSum all;
  if constexpr (kWarpRow) {
    all = warp_merge(mine);
  } else {
    __shared__ MaxSum scratch[cc::kWarpSize];
    all = block_merge(mine, scratch);
  }
  // y_i = exp(x_i - m_t) * exp(m_t - m) / s: one scale factor per thread.
  row.store(yr, t, cols, fast_exp(mine.m - all.m) / all.s);
}

constexpr int kStreamThreads = 512;

template <int kVec>
__global__ void __launch_bounds__(kStreamThreads)
    online_stream_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int cols) {
  __shared__ MaxSum scratch[cc::kWarpSize];
  const float* xr = x + static_cast<std::int64_t>(blockIdx.x) * ldx;
  float* yr = y + static_cast<std::int64_t>(blockIdx.x) * ldy;
  constexpr int kStep = kStreamThreads * kVec;

  MaxSum acc = empty_max_sum();
  for (std::int64_t j = threadIdx.x * kVec; j < cols; j += kStep) {
    if (kVec == 4 && j + 4 <= cols) {
      acc = online_update4(acc, *reinterpret_cast<const float4*>(xr + j));
    } else {
      for (int u = 0; u < kVec && j + u < cols; ++u) acc = online_update(acc, xr[j + u]);
    }
  }
  const MaxSum all = block_merge(acc, scratch);  // its barriers order every read above before the writes below

  const float inv = 1.f / all.s;
  for (std::int64_t j = threadIdx.x * kVec; j < cols; j += kStep) {
    if (kVec == 4 && j + 4 <= cols) {
      const float4 q = *reinterpret_cast<const float4*>(xr + j);
      __stcs(reinterpret_cast<float4*>(yr + j),
             make_float4(fast_exp(q.x - all.m) * inv, fast_exp(q.y - all.m) * inv, fast_exp(q.z - all.m) * inv,
                         fast_exp(q.w - all.m) * inv));
    } else {
      for (int u = 0; u < kVec && j + u < cols; ++u) __stcs(yr + j + u, fast_exp(xr[j + u] - all.m) * inv);
    }
  }
}

/// dim = 0: column strips as in block_per_row, with two changes. (1) One online pass replaces
/// the max and sum passes, four rows at a time (online_update4: four independent loads
/// in flight per thread, one rescale per four values). (2) Narrower strips: 8 columns
/// (one 32-byte sector per row) x 64 row phases, so a 4096-column matrix gets 512 blocks
/// instead of 128 -- block_per_row's strips leave most SMs idle on wide-but-few-strip shapes.
/// A warp covers 4 rows x 8 columns: four full sectors per load instruction.
constexpr int kOnlineStripCols = 8;
constexpr int kOnlineStripRows = 64;

__global__ void __launch_bounds__(kOnlineStripCols* kOnlineStripRows)
    online_column_strip_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int rows, int cols) {
  constexpr int P = kOnlineStripRows;
  __shared__ MaxSum red[P][kOnlineStripCols];
  const int tx = threadIdx.x % kOnlineStripCols;  // column in the strip
  const int ty = threadIdx.x / kOnlineStripCols;  // row phase
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kOnlineStripCols + tx;
  const bool active = c < cols;

  MaxSum acc = empty_max_sum();
  if (active) {
    std::int64_t r = ty;
    for (; r + 3 * P < rows; r += 4 * P)
      acc = online_update4(acc, make_float4(x[r * ldx + c], x[(r + P) * ldx + c], x[(r + 2 * P) * ldx + c],
                                            x[(r + 3 * P) * ldx + c]));
    for (; r < rows; r += P) acc = online_update(acc, x[r * ldx + c]);
  }
  red[ty][tx] = acc;
  __syncthreads();  // also orders every read above before the writes below (in place)
  MaxSum all = red[0][tx];
  for (int k = 1; k < P; ++k) all = merge(all, red[k][tx]);

  if (!active) return;
  const float inv = 1.f / all.s;
  for (std::int64_t r = ty; r < rows; r += P) y[r * ldy + c] = fast_exp(x[r * ldx + c] - all.m) * inv;
}

template <int kRowThreads, int kElems, int kVec>
void launch_online_registers(const SoftmaxArgs& a) {
  constexpr bool kWarpRow = kRowThreads == cc::kWarpSize;
  constexpr int kBlock = kWarpRow ? kOnlineRowsPerBlock * cc::kWarpSize : kRowThreads;
  const unsigned blocks = blocks_for(a.rows, kWarpRow ? kOnlineRowsPerBlock : 1, "online_vectorized");
  online_registers_kernel<kRowThreads, kElems, kVec>
      <<<blocks, kBlock, 0, a.stream>>>(a.x, a.ldx, a.y, a.ldy, a.rows, static_cast<int>(a.cols));
  COURSE_CHECK_LAUNCH("online_registers_kernel");
}

template <int kVec>
void launch_online_rows(const SoftmaxArgs& a) {
  const std::int64_t n = a.cols;
  if (n <= 128) return launch_online_registers<32, 4, kVec>(a);
  if (n <= 256) return launch_online_registers<32, 8, kVec>(a);
  if (n <= 512) return launch_online_registers<32, 16, kVec>(a);
  if (n <= 1024) return launch_online_registers<32, 32, kVec>(a);
  if (n <= 4096) return launch_online_registers<128, 32, kVec>(a);
  if (n <= 8192) return launch_online_registers<256, 32, kVec>(a);
  if (n <= 16384) return launch_online_registers<512, 32, kVec>(a);
  if (n <= m01::kOnChipMaxCols) return launch_online_registers<1024, 32, kVec>(a);
  online_stream_kernel<kVec><<<blocks_for(a.rows, 1, "online_vectorized"), kStreamThreads, 0, a.stream>>>(
      a.x, a.ldx, a.y, a.ldy, static_cast<int>(a.cols));
  COURSE_CHECK_LAUNCH("online_stream_kernel");
}
// @end

/// float4 loads and stores are legal: x and y 16-byte aligned, row strides multiples of 4.
bool float4_ok(const SoftmaxArgs& a) {
  return reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(a.y) % 16 == 0 &&
         a.ldx % 4 == 0 && a.ldy % 4 == 0;
}

void launch_online_vectorized(const SoftmaxArgs& a) {
  // @step online_vectorized  (step 4b: the launch)
  if (a.dim == 0) {
    online_column_strip_kernel<<<blocks_for(a.cols, kOnlineStripCols, "online_vectorized"),
                                 kOnlineStripCols * kOnlineStripRows, 0, a.stream>>>(
        a.x, a.ldx, a.y, a.ldy, static_cast<int>(a.rows), static_cast<int>(a.cols));
    COURSE_CHECK_LAUNCH("online_column_strip_kernel");
    return;
  }
  if (float4_ok(a)) launch_online_rows<4>(a);
  else launch_online_rows<1>(a);
  // @end
}


// @step cluster_columns  (step 5: the section's comment)
// ============================================================================
// Step 5: cluster_columns.
// dim = 1 runs online_vectorized's kernels unchanged (they reach ~0.95 of the copy).
// This step is about dim = 0, where online_vectorized's column strips reach only ~0.4:
// a column is a slice that cannot fit one block's registers (16384 rows x 4 B = 64 KiB
// for ONE column), so x is read twice (online pass, then normalize) and 8-column
// strips read 32-byte pieces of rows. A copy reads once: softmax along columns reaches
// copy speed only if every column is held on chip between its reduction and its writes.
//
// The mapping. A strip of W = 32 neighbouring columns is owned by one thread-block
// cluster of C blocks (sm_90: blocks of a cluster run at the same time on one GPC and
// can read each other's shared memory, "distributed shared memory", DSMEM). Block b of
// the cluster owns rows [b * R, min((b + 1) * R, rows)) of the strip, R = ceil(rows / C);
// R <= 1024 rows x 32 floats = up to 128 KiB of x per block: 256 rows in registers, the
// rest (up to 96 KiB) in shared memory. Phases of cluster_columns_kernel:
//   1. load:     the block reads its R x 32 sub-strip ONCE, every load in flight before
//                the first wait. Thread (tx, ty) owns chunk tx (4 columns) of rows ty,
//                ty + 64, ...: its first 4 chunks (the block's first 256 rows) go to
//                registers (held[], plain float4 loads), the rest to shared memory by
//                cp.async (16 bytes when x allows float4, else 4). A warp reads 4 rows x
//                128 B: whole lines, coalesced. Columns >= cols are not read.
//   2. partial:  each thread folds its own elements into one online (max, sum) pair per
//                column (online_update4 over 4 rows at a time), group by group as its
//                cp.async groups land, then its held chunks. Shuffles and a small shared
//                array merge the block's pairs: partial[32].
//   3. exchange: cluster barrier; then each block reads the C partial[] arrays of the
//                cluster through DSMEM and merges them in rank order, so every block
//                gets bit-identical (max, sum) per column; then it arrives on the
//                cluster barrier again and waits on it only before exiting: its partial[]
//                must outlive the peers' reads, but its writes need not wait for them.
//   4. write:    y = exp(x - max) * (1 / sum) from shared memory and registers, float4
//                stores when y allows them.
//
// Why registers hold a quarter of the rows: a block is gang-scheduled with its cluster
// and does nothing useful between its loads and the cluster barrier, so the SM needs a
// SECOND block (of another cluster) whose loads or stores fill that wait. The register
// file (256 KiB per SM) is larger than shared memory (228 KiB): 1024 rows as 256 held
// rows (16 registers a thread) + 96 KiB of shared memory fit two blocks per SM (64
// registers a thread, __launch_bounds__(512, 2)), where 128 KiB of shared memory fit one.
//
// Cluster size: the smallest power of two C with R <= 1024 rows: C = 16 at 16384 rows,
// C = 4 at 4096 (m01::cluster_columns_blocks()). C = 16 is a non-portable cluster size
// (needs cudaFuncAttributeNonPortableClusterSizeAllowed). Columns taller than 16 x 1024
// rows, a GPU below compute capability 9.0, a build without sm_90 code, or a cluster the
// GPU cannot schedule (cudaOccupancyMaxActiveClusters = 0) fall back to
// online_vectorized's two-pass column strips: same answer, its speed.
//
// In place (y == x) stays correct: a block writes y only at the elements of x it loaded
// itself (registers or its own shared memory), after its own loads completed (each
// thread consumes its loads in phase 2, and the cluster barrier of phase 3 follows).
// Other blocks of the cluster read only its partial[], never its part of x; other
// clusters own other columns. Row padding is neither read nor written.
//
// Why W = 32: a row segment of 32 floats is one 128-byte line, so every access is a full
// line and a warp's load is 4 whole lines. A narrower strip reads partial lines, as
// online_vectorized's 8-column strips do. W = 64 would write faster (256-byte pieces), but
// at 16384 rows its blocks need 256 KiB each: one block per SM, and every cluster barrier
// then stalls the SM (0.36-0.46 of the copy in a scratch run).
//
// The ceiling of this access order. A single-read column softmax holds whole columns
// before writing any of them, so at any moment it moves 128-byte pieces of thousands of
// rows where a copy streams whole rows. The bench row softmax/library/column_order_copy
// moves the same bytes in this order and computes nothing; column_order_read and
// column_order_write split it and put the loss on the writes. The module 1 README ("Why
// dim 0 needs a different mapping") quotes those rows, the variants that did not move
// them, and this step's history.
//
// Prediction. Bytes: x read once + y written once = the copy's bytes (a strip's
// statistics cross DSMEM: C x 32 pairs x 8 B per block, nothing). Per element: 2.25
// exp (fold + write) on 16/clk/SM of MUFU and 2 shared-memory accesses for 3/4 of the
// elements: ~2.5 us of SM time per block (128 KiB of x), against ~8 us of DRAM time at
// a fair share of the bandwidth. Bound by the access order (0.80 of copy) and by each
// block's idle wait for the slowest block of its cluster, half hidden by the second block
// per SM: 0.70-0.75 of copy at both shapes.
//
// Target, restated: 0.9 of column_order_copy, the copy in this step's own access order.
// The first target, 0.9 of the plain copy, is withdrawn: the order alone stays near 0.8
// of d2d_copy. Met at both shapes (16384 x 4096 / 4096 x 32768):
// Measured (results: softmax/solution/cluster_columns/{16384x4096_dim0,4096x32768_dim0}): 3048.5 / 3278.6 GB/s = 0.90 / 0.97 of column_order_copy, 0.72 / 0.77 of copy
// Measured (results: softmax/library/column_order_copy/{16384x4096_dim0,4096x32768_dim0}): 3386.6 / 3391.6 GB/s = 0.83 / 0.81 of d2d_copy
// Against the two-pass strips it replaces:
// Measured (results: softmax/solution/cluster_columns/{16384x4096_dim0,4096x32768_dim0}): 1.76 / 2.18 of softmax/solution/online_vectorized/{16384x4096_dim0,4096x32768_dim0}
// What is left inside this mapping is the cluster-barrier wait of 16-block clusters (16384
// rows); the step is not tuned further.
// ============================================================================
// @end
namespace cg = ::cooperative_groups;

constexpr int kClusterCols = m01::kClusterStripCols;           // W = 32: one 128-byte line per row
constexpr int kClusterThreads = 512;
constexpr int kClusterChunks = kClusterCols / 4;                // 8 float4 chunks per row of the strip
constexpr int kClusterPhases = kClusterThreads / kClusterChunks;  // 64 row phases
constexpr int kClusterWarps = kClusterThreads / cc::kWarpSize;  // 16
constexpr int kClusterBatch = 4;  // chunks per online_update4 and per cp.async group
/// A thread's first kClusterHeldChunks chunks (rows ty, ty + 64, ty + 128, ty + 192) stay in
/// registers; only the rest go through shared memory.
constexpr int kClusterHeldChunks = 4;
constexpr int kClusterHeldRows = kClusterHeldChunks * kClusterPhases;  // 256 rows of a block
constexpr int kClusterMaxChunks = static_cast<int>(m01::kClusterMaxBlockRows) / kClusterPhases;  // 16
constexpr int kClusterMaxGroups = (kClusterMaxChunks - kClusterHeldChunks) / kClusterBatch;     // 3
/// Dynamic shared memory of a block of `block_rows` rows: the rows past the held ones.
constexpr std::size_t cluster_smem_bytes(std::int64_t block_rows) {
  return static_cast<std::size_t>(block_rows > kClusterHeldRows ? block_rows - kClusterHeldRows : 0) * kClusterCols *
         sizeof(float);
}
constexpr int kClusterMaxSmemBytes = static_cast<int>(cluster_smem_bytes(m01::kClusterMaxBlockRows));  // 96 KiB
static_assert(m01::kClusterMaxBlockRows % kClusterPhases == 0 &&
                  (kClusterMaxChunks - kClusterHeldChunks) % kClusterBatch == 0,
              "a full block's shared chunks form whole cp.async groups");
static_assert(kClusterWarps * cc::kWarpSize == kClusterThreads && kClusterPhases % (cc::kWarpSize / kClusterChunks) == 0,
              "whole warps, each covering whole rows of the strip");
static_assert(kClusterMaxGroups == 3, "cp_async_wait_pending has one case per pending count 0..2");
static_assert(kClusterWarps >= m01::kClusterMaxBlocks && kClusterThreads == m01::kClusterMaxBlocks * kClusterCols,
              "phase 3: one thread per (block, column) pair, gathered into pairs[16][32]");

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // used only by the sm_90 kernel body below
/// Wait until at most `pending` of this thread's cp.async groups are in flight
/// (cp.async.wait_group takes an immediate: one case per possible count).
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 0: cc::cp_async_wait<0>(); break;
    case 1: cc::cp_async_wait<1>(); break;
    default: cc::cp_async_wait<kClusterMaxGroups - 1>(); break;
  }
}
#endif

/// Phase 1 for one 4-column chunk of one row kept in shared memory: global row `src` ->
/// shared `dst`. Columns >= cols are not read; their slots get 0 (their statistics are never used).
template <bool kVec>
__device__ __forceinline__ void load_strip_chunk(float4* dst, const float* src, std::int64_t c0, int cols) {
  if (kVec && c0 + 4 <= cols) {
    cc::cp_async_16_zfill(cc::smem_u32(dst), src + c0, 16);
    return;
  }
  float* d = reinterpret_cast<float*>(dst);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    if (c0 + u < cols) cc::cp_async_4_zfill(cc::smem_u32(d + u), src + c0 + u, 4);
    else d[u] = 0.f;
  }
}

/// Phase 1 for one chunk held in registers: a plain load (not the read-only path: y may be x).
template <bool kVec>
__device__ __forceinline__ float4 load_held_chunk(const float* src, std::int64_t c0, int cols) {
  if (kVec && c0 + 4 <= cols) return *reinterpret_cast<const float4*>(src + c0);
  float e[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) e[u] = c0 + u < cols ? src[c0 + u] : 0.f;
  return make_float4(e[0], e[1], e[2], e[3]);
}

// @step cluster_columns  (step 5c: the store of phase 4)
/// Phase 4 for one chunk: row `dst` of y, columns c0..c0+3 that are < cols.
template <bool kVec>
__device__ __forceinline__ void store_strip_chunk(float* dst, std::int64_t c0, int cols, float4 v) {
  if (kVec && c0 + 4 <= cols) {
    cc::store_global4(dst + c0, v);  // explicit: a float4 assignment here became 4 scalar stores
    return;
  }
  const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int u = 0; u < 4; ++u)
    if (c0 + u < cols) dst[c0 + u] = e[u];
}

// @end
/// Thread t handles chunk column tx = t % 8 (columns 4 tx .. 4 tx + 3 of the strip) of
/// rows ty, ty + 64, ty + 128, ... (ty = t / 8) of its block's rows, in every phase: it
/// reads back only what it loaded itself, so phases 1-2 need no block barrier. Its
/// chunks 0-3 live in registers (held[]), chunks 4.. in shared memory (slot(k)).
template <bool kVec>
__global__ void __launch_bounds__(kClusterThreads, 2)
    cluster_columns_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int rows, int cols,
                           int block_rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ float4 strip[];                      // [block_rows - 256][8]: this block's x past the held rows
  __shared__ MaxSum pairs[kClusterWarps][kClusterCols];  // phase 2: per warp; phase 3: per block of the cluster
  __shared__ MaxSum partial[kClusterCols];               // the block's pairs: read by the whole cluster
  __shared__ float2 column[kClusterCols];                // (max, 1 / sum) of each column
  const cg::cluster_group cluster = cg::this_cluster();
  const int blocks = static_cast<int>(cluster.num_blocks());  // C; the cluster is blocks [k C, (k + 1) C)
  const int rank = static_cast<int>(cluster.block_rank());
  const int tx = threadIdx.x % kClusterChunks;
  const int ty = threadIdx.x / kClusterChunks;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x / blocks) * kClusterCols + 4 * tx;
  const int row0 = rank * block_rows;
  const int my_rows = max(0, min(block_rows, rows - row0));
  const int iters = ty < my_rows ? (my_rows - 1 - ty) / kClusterPhases + 1 : 0;  // this thread's chunks
  const int groups = (max(iters - kClusterHeldChunks, 0) + kClusterBatch - 1) / kClusterBatch;
  auto slot = [&](int k) { return strip + (ty + (k - kClusterHeldChunks) * kClusterPhases) * kClusterChunks + tx; };
  auto row_of = [&](int k) { return static_cast<std::int64_t>(row0) + ty + k * kClusterPhases; };

  // ---- 1. load: every copy in flight. Shared chunks by cp.async, one group per
  // kClusterBatch chunks; then the held chunks by plain loads into registers.
  for (int g = 0; g < groups; ++g) {
    const int k0 = kClusterHeldChunks + g * kClusterBatch;
    for (int k = k0; k < min(iters, k0 + kClusterBatch); ++k)
      load_strip_chunk<kVec>(slot(k), x + row_of(k) * ldx, c0, cols);
    cc::cp_async_commit();
  }
  float4 held[kClusterHeldChunks];
#pragma unroll
  for (int k = 0; k < kClusterHeldChunks; ++k)
    held[k] = k < iters ? load_held_chunk<kVec>(x + row_of(k) * ldx, c0, cols) : make_float4(0.f, 0.f, 0.f, 0.f);

  // @step cluster_columns  (steps 5a, 5b, 5c: phases 2-4)
  // ---- 2. partial: fold each cp.async group as it lands, then the held chunks; then
  // the block's pair per column.
  MaxSum acc[4] = {empty_max_sum(), empty_max_sum(), empty_max_sum(), empty_max_sum()};
  auto fold4 = [&](float4 q0, float4 q1, float4 q2, float4 q3) {
    acc[0] = online_update4(acc[0], make_float4(q0.x, q1.x, q2.x, q3.x));
    acc[1] = online_update4(acc[1], make_float4(q0.y, q1.y, q2.y, q3.y));
    acc[2] = online_update4(acc[2], make_float4(q0.z, q1.z, q2.z, q3.z));
    acc[3] = online_update4(acc[3], make_float4(q0.w, q1.w, q2.w, q3.w));
  };
  auto fold1 = [&](float4 q) {
    acc[0] = online_update(acc[0], q.x);
    acc[1] = online_update(acc[1], q.y);
    acc[2] = online_update(acc[2], q.z);
    acc[3] = online_update(acc[3], q.w);
  };
  for (int g = 0; g < groups; ++g) {
    cp_async_wait_pending(groups - 1 - g);
    const int k0 = kClusterHeldChunks + g * kClusterBatch;
    if (k0 + kClusterBatch <= iters) {
      fold4(*slot(k0), *slot(k0 + 1), *slot(k0 + 2), *slot(k0 + 3));
    } else {
      for (int k = k0; k < iters; ++k) fold1(*slot(k));
    }
  }
  if (iters >= kClusterHeldChunks) {
    fold4(held[0], held[1], held[2], held[3]);
  } else {
#pragma unroll
    for (int k = 0; k < kClusterHeldChunks; ++k)
      if (k < iters) fold1(held[k]);
  }
  // A warp holds 4 row phases of all 8 chunks: lanes l, l ^ 8, l ^ 16, l ^ 24 share a chunk.
#pragma unroll
  for (int offset = kClusterChunks; offset < cc::kWarpSize; offset *= 2)
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[u] = merge(acc[u], warp_shfl_xor(acc[u], offset));
  const int warp = threadIdx.x / cc::kWarpSize;
  if (threadIdx.x % cc::kWarpSize < kClusterChunks)
#pragma unroll
    for (int u = 0; u < 4; ++u) pairs[warp][4 * tx + u] = acc[u];
  __syncthreads();
  const int col = threadIdx.x;  // the threads t < 32 work per column below
  if (col < kClusterCols) {
    MaxSum p = pairs[0][col];
    for (int w = 1; w < kClusterWarps; ++w) p = merge(p, pairs[w][col]);
    partial[col] = p;
  }

  // ---- 3. exchange: every block's partial[] is written (and this block's pairs[] read)
  // before anyone goes on. Then thread (b, c) = (t / 32, t % 32) fetches pair c of block b:
  // all C x 32 remote reads in flight at once (one DSMEM latency, not C in a row) ...
  cluster.sync();
  {
    const int b = threadIdx.x / kClusterCols, c = threadIdx.x % kClusterCols;
    if (b < blocks) pairs[b][c] = *cluster.map_shared_rank(&partial[c], b);
  }
  __syncthreads();
  if (col < kClusterCols) {  // ... and the merge runs in rank order from local copies
    MaxSum all = pairs[0][col];
    for (int b = 1; b < blocks; ++b) all = merge(all, pairs[b][col]);
    column[col] = make_float2(all.m, 1.f / all.s);
  }
  __syncthreads();  // column[] is ready; every DSMEM read of this block finished before the barrier above ...
  auto arrived = cluster.barrier_arrive();  // ... which is what this arrival tells the peers

  // ---- 4. write y: the shared chunks, then the held ones.
  const float2 s0 = column[4 * tx], s1 = column[4 * tx + 1], s2 = column[4 * tx + 2], s3 = column[4 * tx + 3];
  auto normalized = [&](float4 q) {
    return make_float4(fast_exp(q.x - s0.x) * s0.y, fast_exp(q.y - s1.x) * s1.y, fast_exp(q.z - s2.x) * s2.y,
                       fast_exp(q.w - s3.x) * s3.y);
  };
#pragma unroll 4
  for (int k = kClusterHeldChunks; k < iters; ++k)
    store_strip_chunk<kVec>(y + row_of(k) * ldy, c0, cols, normalized(*slot(k)));
#pragma unroll
  for (int k = 0; k < kClusterHeldChunks; ++k)
    if (k < iters) store_strip_chunk<kVec>(y + row_of(k) * ldy, c0, cols, normalized(held[k]));
  cluster.barrier_wait(std::move(arrived));  // no block exits while a peer may still read its partial[]
  // @end
#else
  (void)x, (void)ldx, (void)y, (void)ldy, (void)rows, (void)cols, (void)block_rows;
  __trap();  // never launched: the host checks cluster_columns_fits() first
#endif
}

/// The launch configuration of cluster_columns_kernel: `grid` blocks in clusters of `blocks`.
cudaLaunchConfig_t cluster_launch_config(unsigned grid, int blocks, std::size_t smem_bytes, cudaStream_t stream,
                                         cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(blocks);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kClusterThreads);
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

/// True when cluster_columns_kernel<kVec> can run clusters of `blocks` blocks (1..16) on
/// the current GPU: compute capability >= 9.0, the kernel compiled for sm_90+ (a
/// compute_80 build JIT-compiled on Hopper holds only the __trap), and at least one
/// such cluster of full blocks (96 KiB of dynamic shared memory each) fits the GPU
/// (cudaOccupancyMaxActiveClusters). Opts the kernel into those 96 KiB and, for 16, the
/// non-portable size.
/// Cached per device.
template <bool kVec>
bool cluster_columns_fits(int blocks) {
  static std::mutex mutex;
  static std::vector<std::pair<int, std::array<bool, 5>>> known;  // device -> fits, per log2(blocks)
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  int log2_blocks = 0;
  while ((1 << log2_blocks) < blocks) ++log2_blocks;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [d, fits] : known)
    if (d == device) return fits[log2_blocks];

  std::array<bool, 5> fits{};
  int major = 0;
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaFuncAttributes attr{};
  COURSE_CUDA_CHECK(cudaFuncGetAttributes(&attr, cluster_columns_kernel<kVec>));
  if (major >= 9 && attr.ptxVersion >= 90) {
    constexpr auto kernel = cluster_columns_kernel<kVec>;
    cc::opt_in_dynamic_smem<kernel>(kClusterMaxSmemBytes);
    // Refused (an error, not a crash) where the GPU has no non-portable sizes: then 16 does not fit.
    const bool nonportable = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    (void)cudaGetLastError();
    for (int i = 0; i < 5; ++i) {
      const int c = 1 << i;
      if (c > 8 && !nonportable) break;
      cudaLaunchAttribute cluster{};
      const cudaLaunchConfig_t cfg = cluster_launch_config(static_cast<unsigned>(c), c, kClusterMaxSmemBytes, nullptr, &cluster);
      int active = 0;
      fits[i] = cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) == cudaSuccess && active > 0;
      (void)cudaGetLastError();  // a refused query must not surface at the next launch check
    }
  }
  known.emplace_back(device, fits);
  return fits[log2_blocks];
}

template <bool kVec>
void launch_cluster_columns_kernel(const SoftmaxArgs& a, int blocks) {
  const std::int64_t block_rows = (a.rows + blocks - 1) / blocks;
  const std::int64_t strips = (a.cols + kClusterCols - 1) / kClusterCols;
  cudaLaunchAttribute cluster{};
  const cudaLaunchConfig_t cfg = cluster_launch_config(blocks_for(strips * blocks, 1, "cluster_columns"), blocks,
                                                       cluster_smem_bytes(block_rows), a.stream, &cluster);
  COURSE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_columns_kernel<kVec>, a.x, a.ldx, a.y, a.ldy,
                                       static_cast<int>(a.rows), static_cast<int>(a.cols),
                                       static_cast<int>(block_rows)));
  COURSE_CHECK_LAUNCH("cluster_columns_kernel");
}

void launch_cluster_columns(const SoftmaxArgs& a) {
  if (a.dim == 1) return launch_online_vectorized(a);
  // @step cluster_columns  (the stub's NotImplemented until phases 2-4 are written)
  // @end
  const int blocks = m01::cluster_columns_blocks(a.rows);  // 0: columns too tall to hold
  const bool vec4 = float4_ok(a);
  if (blocks > 0 && vec4 && cluster_columns_fits<true>(blocks))
    return launch_cluster_columns_kernel<true>(a, blocks);
  if (blocks > 0 && !vec4 && cluster_columns_fits<false>(blocks))
    return launch_cluster_columns_kernel<false>(a, blocks);
  launch_online_vectorized(a);  // the fallback: two-pass column strips
}

}  // namespace

void softmax(SoftmaxStep step, const SoftmaxArgs& args) {
  m01::validate_softmax_args(args, step, "softmax");
  if (args.rows == 0 || args.cols == 0) return;  // empty: nothing to do
  switch (step) {
    case SoftmaxStep::naive_three_pass: return launch_naive_three_pass(args);
    case SoftmaxStep::block_per_row: return launch_block_per_row(args);
    case SoftmaxStep::warp_per_row: return launch_warp_per_row(args);
    case SoftmaxStep::online_vectorized: return launch_online_vectorized(args);
    case SoftmaxStep::cluster_columns: return launch_cluster_columns(args);
  }
  require_arg(false, "softmax", "step", static_cast<int>(step), "is not a SoftmaxStep");
}

}  // namespace course::solution
