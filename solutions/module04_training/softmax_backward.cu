/// @file softmax_backward.cu
/// @brief Solution ladder for the fp32 softmax backward pass along a dimension of a 2-D
/// matrix (module 4):  dx = y * (dy - D),  D = sum(dy * y) over each slice.
///
/// The ladder:
///   1. two_pass          kernel 1: D per slice, one thread per slice, into a workspace;
///                        kernel 2: dx element-wise. y and dy are read twice.
///   2. warp_per_row      one warp per row, y and dy held in registers (cols <= 1024):
///                        read once, write once, shuffle reduction. dim 0: column strips.
///   3. fused_vectorized  float4 loads; warp per row (cols <= 1024) or block per row
///                        (cols <= 16384) with the row in registers; longer rows keep
///                        16384 columns in registers and stream the rest twice;
///                        dim 0: float4 column strips, four rows in flight per thread.
///
/// Like the forward, the backward is memory-bound: per element 2 FLOPs for D and 2 for dx
/// on 12 bytes (read y and dy, write dx). The minimum traffic is 12 bytes per element and
/// the ceiling is a device-to-device copy moving the same bytes; the benchmark counts
/// bytes = 3 * rows * cols * 4 for every step, so its GB/s are comparable with the copy's.
///
/// dim = 0 (each column is a slice) is supported by every step: the element-wise kernel
/// of two_pass is the same for both dims, the reductions of steps 2 and 3 use column
/// strips (see "Column strips" below).

#include "module04/softmax_backward.hpp"

#include "course/cuda/vec.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::solution {
namespace {

using m04::SoftmaxBackwardArgs;
using m04::SoftmaxBackwardStep;
namespace cc = ::course::cuda;

unsigned blocks_for(std::int64_t work, std::int64_t per_block, const char* step) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  require_arg(blocks <= 0x7fffffff, step, "blocks", blocks, "exceeds the grid limit 2^31 - 1");
  return static_cast<unsigned>(blocks);
}

/// kVec consecutive floats of one row starting at column c: one float4 when kVec == 4 and
/// all four are inside the row (the caller guarantees 16-byte alignment then), else scalar
/// loads with 0 for columns >= cols (a 0 adds nothing to a dot product).
template <int kVec>
__device__ __forceinline__ void load_vec(const float* row, std::int64_t c, std::int64_t cols, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    if (c + 4 <= cols) {
      const float4 q = *reinterpret_cast<const float4*>(row + c);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      return;
    }
  }
#pragma unroll
  for (int u = 0; u < kVec; ++u) v[u] = c + u < cols ? row[c + u] : 0.f;
}

/// Store the columns c .. c + kVec - 1 that are < cols (never the row padding).
template <int kVec>
__device__ __forceinline__ void store_vec(float* row, std::int64_t c, std::int64_t cols, const float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    if (c + 4 <= cols) {
      cc::store_global4(row + c, make_float4(v[0], v[1], v[2], v[3]));  // one STG.128, not four
      return;
    }
  }
#pragma unroll
  for (int u = 0; u < kVec; ++u)
    if (c + u < cols) row[c + u] = v[u];
}

// @step two_pass
// ============================================================================
// Step 1: two_pass.
// Kernel 1, one thread per slice: D[s] = sum_i dy(s, i) * y(s, i), into the workspace.
// Kernel 2, one thread per element: dx(r, c) = y(r, c) * (dy(r, c) - D[slice of (r, c)]).
// Kernel 2 walks the matrix in row-major order for both dims (threadIdx.x = column), so
// its reads and writes are coalesced; only the index of D depends on dim.
//
// Bytes: kernel 1 reads y and dy (8 B per element), kernel 2 reads them again and writes
// dx (12 B): 20 B per element, 1.67x the minimum. Worse, kernel 1 has the access pattern
// of module 1's naive softmax: for dim = 1 the 32 threads of a warp walk 32 different
// rows (one 32-byte sector per 4 useful bytes), and only `rows` threads exist; for dim = 0
// it is coalesced but has only `cols` threads (4096 at 16384 x 4096 dim 0: ~1 warp per
// SM, latency-bound).
// Prediction: 16384 x 4096 dim 1: ~0.1-0.15 of the copy (kernel 1 dominates);
// 4096 x 32768: < 0.05 (4096 threads); dim 0 at 16384 x 4096: < 0.1 (4096 threads).
// Measured (results: softmax_backward/solution/two_pass/16384x4096): 577.1 GB/s = 0.19 of copy
// Measured (results: softmax_backward/solution/two_pass/4096x32768): 173.5 GB/s = 0.06 of copy
// Measured (results: softmax_backward/solution/two_pass/16384x4096_dim0): 375.7 GB/s = 0.13 of copy
// Met at all three.
// Accuracy: kernel 1 sums each slice in one thread. With a plain fp32 sum its error at
// 16384 x 4096 was 8x that of PyTorch's softmax backward (the course's comparison,
// scripts/compare_torch.py); the compensated sum (CompensatedSum) removes the drift of the
// running total. The kernel is latency-bound, so the extra three adds per element are free.
// ============================================================================
// @end

/// Where the slices of the matrix lie. A slice is one row (dim = 1) or one column
/// (dim = 0); element i of slice s is at  s * slice_stride + i * elem_stride.
///   dim = 1: count = rows, length = cols, slice stride = ld,  element stride = 1
///   dim = 0: count = cols, length = rows, slice stride = 1,   element stride = ld
struct Slices {
  std::int64_t count, length;
  std::int64_t y_slice, y_elem;
  std::int64_t dy_slice, dy_elem;
};

Slices slices_of(const SoftmaxBackwardArgs& a) {
  if (a.dim == 1) return {a.rows, a.cols, a.ldy, 1, a.lddy, 1};
  return {a.cols, a.rows, 1, a.ldy, 1, a.lddy};
}

__global__ void slice_dot_kernel(const float* y, const float* dy, Slices sl, float* slice_dot) {
  // @step two_pass
  const std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= sl.count) return;
  const float* ys = y + s * sl.y_slice;
  const float* dys = dy + s * sl.dy_slice;
  // One thread adds `length` products (4096 and more): a plain fp32 sum drifts by one
  // rounding of the running total per add, in the same direction, so compensate (Kahan's
  // sum, as module 1's naive softmax does).
  cc::CompensatedSum d;
  for (std::int64_t i = 0; i < sl.length; ++i) d.add(ys[i * sl.y_elem] * dys[i * sl.dy_elem]);
  slice_dot[s] = d.sum;
  // @end
}

constexpr int kElementwiseThreads = 256;
constexpr std::int64_t kMaxGridY = 65535;

/// blockIdx.x picks 256 columns, blockIdx.y a first row; the block strides over rows by
/// gridDim.y (rows may exceed the 65535 limit of gridDim.y).
__global__ void __launch_bounds__(kElementwiseThreads)
    elementwise_dx_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                          std::int64_t lddx, std::int64_t rows, std::int64_t cols, int dim, const float* slice_dot) {
  // @step two_pass
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kElementwiseThreads + threadIdx.x;
  if (c >= cols) return;
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float d = slice_dot[dim == 1 ? r : c];
    // Read dy before writing dx in the same thread: correct in place (dx == dy).
    dx[r * lddx + c] = y[r * ldy + c] * (dy[r * lddy + c] - d);
  }
  // @end
}

void launch_two_pass(const SoftmaxBackwardArgs& a) {
  // @step two_pass
  constexpr int kThreads = 256;
  const Slices sl = slices_of(a);
  slice_dot_kernel<<<blocks_for(sl.count, kThreads, "two_pass"), kThreads, 0, a.stream>>>(a.y, a.dy, sl,
                                                                                            a.workspace);
  COURSE_CHECK_LAUNCH("slice_dot_kernel");
  const dim3 grid(blocks_for(a.cols, kElementwiseThreads, "two_pass"),
                  static_cast<unsigned>(std::min(a.rows, kMaxGridY)));
  elementwise_dx_kernel<<<grid, kElementwiseThreads, 0, a.stream>>>(a.y, a.ldy, a.dy, a.lddy, a.dx, a.lddx, a.rows,
                                                                    a.cols, a.dim, a.workspace);
  COURSE_CHECK_LAUNCH("elementwise_dx_kernel");
  // @end
}

// @step warp_per_row  (step 2c: the column strips)
// ============================================================================
// Column strips (dim = 0), used by steps 2 (kVec = 1) and 3 (kVec = 4 when aligned).
//
// Why not a warp per column, mirroring the warp per row? Lane l of that warp would read
// element (l, c), (l + 32, c), ...: 32 different rows, ld * 4 bytes apart. Each load
// instruction then touches 32 sectors of 32 bytes for 128 useful bytes (1/8 of what the
// memory system moves is used), and the same holds for the writes. Slices along dim 0 are
// strided; a warp has to read along the row instead.
//
// So a block owns a strip of kStripCols = 32 neighbouring columns and walks down the
// rows: kStripCols / kVec threads cover one row segment of the strip (128 contiguous
// bytes: one float4 or one float per thread), and the block's other threads take other
// rows (kPhases row phases: rows p, p + kPhases, p + 2 kPhases, ...). A warp reads 1
// (kVec = 1) or 4 (kVec = 4) full 128-byte segments per load instruction.
// Pass 1: every thread accumulates the dot of its columns over its rows in registers
// (four rows per iteration: eight independent loads in flight per thread). The kPhases
// partial dots of each column meet in shared memory (the barrier also ends every read of
// pass 1 before any write: in place is safe). Pass 2 walks the rows again and writes dx,
// coalesced like the reads.
//
// Bytes: pass 2 re-reads the strip, and a strip (32 columns x all rows x 8 B) does not
// stay in L2 for tall matrices (128 strips x 4 MiB at 16384 x 4096): ~20 B of DRAM traffic
// per element for 12 counted, so at most ~0.6 of the copy. (A single pass would need a
// cross-block reduction of D per column: a workspace or a cluster; not done here.)
// ============================================================================
// @end
constexpr int kStripCols = 32;
constexpr int kStripThreads = 512;

template <int kVec>
__global__ void __launch_bounds__(kStripThreads)
    column_strip_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                        std::int64_t lddx, std::int64_t rows, std::int64_t cols) {
  // @step warp_per_row  (step 2c)
  constexpr int kColThreads = kStripCols / kVec;         // threads across one row segment of the strip
  constexpr int kPhases = kStripThreads / kColThreads;  // rows walked side by side
  __shared__ float partial[kPhases][kStripCols];
  __shared__ float strip_dot[kStripCols];
  const int tx = threadIdx.x % kColThreads;
  const int ty = threadIdx.x / kColThreads;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kStripCols + tx * kVec;  // first column
  // Columns >= cols load as 0 and are never stored; every thread reaches both barriers.

  float acc[kVec] = {};
  std::int64_t r = ty;
  for (; r + 3 * kPhases < rows; r += 4 * kPhases) {
    float yv[4][kVec], gv[4][kVec];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      load_vec<kVec>(y + (r + q * kPhases) * ldy, c, cols, yv[q]);
      load_vec<kVec>(dy + (r + q * kPhases) * lddy, c, cols, gv[q]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int u = 0; u < kVec; ++u) acc[u] = fmaf(yv[q][u], gv[q][u], acc[u]);
  }
  for (; r < rows; r += kPhases) {
    float yv[kVec], gv[kVec];
    load_vec<kVec>(y + r * ldy, c, cols, yv);
    load_vec<kVec>(dy + r * lddy, c, cols, gv);
#pragma unroll
    for (int u = 0; u < kVec; ++u) acc[u] = fmaf(yv[u], gv[u], acc[u]);
  }
#pragma unroll
  for (int u = 0; u < kVec; ++u) partial[ty][tx * kVec + u] = acc[u];
  __syncthreads();
  if (threadIdx.x < kStripCols) {
    float d = 0.f;
    for (int p = 0; p < kPhases; ++p) d += partial[p][threadIdx.x];
    strip_dot[threadIdx.x] = d;
  }
  __syncthreads();
  float d[kVec];
#pragma unroll
  for (int u = 0; u < kVec; ++u) d[u] = strip_dot[tx * kVec + u];

  // Pass 2, four rows at a time: all eight loads are issued before the four stores (a
  // store could alias a later load as far as the compiler knows, so it would not hoist
  // them itself). Each thread writes only elements it has just read: in place is safe.
  r = ty;
  for (; r + 3 * kPhases < rows; r += 4 * kPhases) {
    float yv[4][kVec], gv[4][kVec];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      load_vec<kVec>(y + (r + q * kPhases) * ldy, c, cols, yv[q]);
      load_vec<kVec>(dy + (r + q * kPhases) * lddy, c, cols, gv[q]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int u = 0; u < kVec; ++u) yv[q][u] *= gv[q][u] - d[u];
      store_vec<kVec>(dx + (r + q * kPhases) * lddx, c, cols, yv[q]);
    }
  }
  for (; r < rows; r += kPhases) {
    float yv[kVec], gv[kVec];
    load_vec<kVec>(y + r * ldy, c, cols, yv);
    load_vec<kVec>(dy + r * lddy, c, cols, gv);
#pragma unroll
    for (int u = 0; u < kVec; ++u) yv[u] *= gv[u] - d[u];
    store_vec<kVec>(dx + r * lddx, c, cols, yv);
  }
  // @end
}

template <int kVec>
void launch_column_strip(const SoftmaxBackwardArgs& a, const char* step) {
  // @step warp_per_row  (step 2c)
  column_strip_kernel<kVec><<<blocks_for(a.cols, kStripCols, step), kStripThreads, 0, a.stream>>>(
      a.y, a.ldy, a.dy, a.lddy, a.dx, a.lddx, a.rows, a.cols);
  COURSE_CHECK_LAUNCH("column_strip_kernel");
  // @end
}

// @step warp_per_row
// ============================================================================
// Step 2: warp_per_row.
// One warp per row (dim = 1). Lane l loads y and dy at columns l, l + 32, l + 64, ...
// (coalesced 128-byte loads) into registers, kPerLane of each (compile-time: 1, 2, 4, 8,
// 16 or 32 -> cols <= 1024). D is a warp shuffle reduction (course::cuda::warp_sum): no
// shared memory, no barrier, no workspace, one kernel. dx is computed from the registers,
// so y and dy are read once and dx written once: the minimum 12 B per element.
// Rows longer than 1024 do not fit (64 registers of data per lane at 1024 already): the
// warp streams them twice, once for D and once for dx (20 B per element, the second read
// partly from L2).
// dim = 0 uses the column strips above with scalar loads (kVec = 1).
//
// Registers (ptxas, sm_90a): 107 per thread at kPerLane = 32 -> 2 blocks of 8 warps per
// SM, each warp with 8 KiB of loads in flight (128 KiB per SM): enough to cover DRAM latency.
// Prediction: 65536 x 1024 (registers): 0.8-0.9 of the copy (scalar loads: 4x the load
// instructions of float4); 16384 x 4096 and 4096 x 32768 (streamed, the re-read mostly
// from DRAM: thousands of warps each touching 32-256 KiB between its two reads): ~0.5-0.6;
// dim 0 at 16384 x 4096: ~0.5.
// Measured (results: softmax_backward/solution/warp_per_row/65536x1024): 2972.7 GB/s = 1.00 of copy
// Measured (results: softmax_backward/solution/warp_per_row/16384x4096): 1634.3 GB/s = 0.55 of copy
// Measured (results: softmax_backward/solution/warp_per_row/4096x32768): 1419.3 GB/s = 0.48 of copy
// Measured (results: softmax_backward/solution/warp_per_row/16384x4096_dim0): 1516.1 GB/s = 0.51 of copy
// 65536 x 1024 beat the 0.8-0.9 (scalar loads cost less than feared); 16384 x 4096 met;
// 4096 x 32768 missed by 0.1-0.2, most likely too few warps (4096, one per row) to hide
// DRAM latency on the twice-streamed rows; dim 0 slightly under ~0.5.
// ============================================================================
// @end
constexpr int kWarpsPerBlock = 8;

template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                    std::int64_t lddx, std::int64_t rows, int cols) {
  // @step warp_per_row  (step 2a)
  const int lane = threadIdx.x % cc::kWarpSize;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / cc::kWarpSize;
  if (r >= rows) return;  // uniform per warp: the shuffles below see full warps
  const float* yr = y + r * ldy;
  const float* dyr = dy + r * lddy;
  float* dxr = dx + r * lddx;

  float yv[kPerLane], gv[kPerLane];
  float d = 0.f;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = k * cc::kWarpSize + lane;
    yv[k] = j < cols ? yr[j] : 0.f;
    gv[k] = j < cols ? dyr[j] : 0.f;
    d = fmaf(yv[k], gv[k], d);
  }
  d = cc::warp_sum(d);  // every lane's loads are done before it joins the shuffles: in place is safe
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int j = k * cc::kWarpSize + lane;
    if (j < cols) dxr[j] = yv[k] * (gv[k] - d);
  }
  // @end
}

__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_stream_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                           std::int64_t lddx, std::int64_t rows, std::int64_t cols) {
  // @step warp_per_row  (step 2b)
  const int lane = threadIdx.x % cc::kWarpSize;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / cc::kWarpSize;
  if (r >= rows) return;
  const float* yr = y + r * ldy;
  const float* dyr = dy + r * lddy;
  float* dxr = dx + r * lddx;

  float d = 0.f;
#pragma unroll 4
  for (std::int64_t j = lane; j < cols; j += cc::kWarpSize) d = fmaf(yr[j], dyr[j], d);
  d = cc::warp_sum(d);
  for (std::int64_t j = lane; j < cols; j += cc::kWarpSize) dxr[j] = yr[j] * (dyr[j] - d);
  // @end
}

// @step warp_per_row  (the stub launches steps 2a and 2b here)
template <int kPerLane>
void launch_warp_row(const SoftmaxBackwardArgs& a) {
  warp_row_kernel<kPerLane><<<blocks_for(a.rows, kWarpsPerBlock, "warp_per_row"), kWarpsPerBlock * cc::kWarpSize, 0,
                              a.stream>>>(a.y, a.ldy, a.dy, a.lddy, a.dx, a.lddx, a.rows, static_cast<int>(a.cols));
  COURSE_CHECK_LAUNCH("warp_row_kernel");
}
// @end

void launch_warp_per_row(const SoftmaxBackwardArgs& a) {
  if (a.dim == 0) return launch_column_strip<1>(a, "warp_per_row");
  if (a.cols <= 32) return launch_warp_row<1>(a);
  if (a.cols <= 64) return launch_warp_row<2>(a);
  if (a.cols <= 128) return launch_warp_row<4>(a);
  if (a.cols <= 256) return launch_warp_row<8>(a);
  if (a.cols <= 512) return launch_warp_row<16>(a);
  if (a.cols <= m04::kSoftmaxBackwardWarpMaxCols) return launch_warp_row<32>(a);
  // @step warp_per_row  (step 2b)
  warp_row_stream_kernel<<<blocks_for(a.rows, kWarpsPerBlock, "warp_per_row"), kWarpsPerBlock * cc::kWarpSize, 0,
                           a.stream>>>(a.y, a.ldy, a.dy, a.lddy, a.dx, a.lddx, a.rows, a.cols);
  COURSE_CHECK_LAUNCH("warp_row_stream_kernel");
  // @end
}

// @step fused_vectorized
// ============================================================================
// Step 3: fused_vectorized.
//
// (a) float4. With y, dy, dx 16-byte aligned and ldy, lddy, lddx multiples of 4, each
// thread moves 16 bytes per load or store instruction (4x fewer instructions than step 2);
// the last cols % 4 elements of a row go through scalar code (the tail). Otherwise the
// same kernels run with scalar accesses (kVec = 1).
//
// (b) Dispatch by row length (dim = 1), every row read once while it fits on chip:
//   cols <= 1024:          one warp per row (8 rows per block), 4..32 values of y and of
//                          dy per lane in registers, D by shuffles only.
//   1024 < cols <= 16384:  one block per row (128, 256, 512 or 1024 threads), 16 values of
//                          y and 16 of dy per thread in registers (32 data registers: a
//                          1024-thread block may use 64 registers per thread), D by a
//                          block reduction (course::cuda::block_all_reduce).
//   cols > 16384:          a 1024-thread block per row keeps columns [0, 16384) in
//                          registers as above and streams the rest twice: pass 1 adds its
//                          products to D, pass 2 re-reads it backwards (the chunks read
//                          last are the likeliest still in L2; with one such block per SM,
//                          132 tails of 128 KiB at 32768 columns fit in the 50 MB L2) with
//                          evict-first loads and stores (__ldcs / __stcs).
//   Bytes: 12 per element while cols <= 16384; beyond, the tail's second read mostly
//   from L2.
// (c) dim = 0: the column strips with float4 (a warp covers 4 rows x 32 columns: four
//   full 128-byte segments per load instruction), four rows in flight per thread.
//
// Registers (ptxas, sm_90a): 48-55 for the block kernels (the 1024-thread ones 52-64, no
// spills), 80 for the warp kernel at 1024 columns.
// Prediction: >= 0.9 of the copy at 16384 x 4096 (256 threads x (16 + 16) values, 48
// registers: 5 blocks per SM, 160 KiB of loads in flight per SM) and 65536 x 1024 (warp per
// row, 8 + 8 float4 per lane, 3 blocks of 8 warps per SM); ~0.8-0.9 at 4096 x 32768 (one
// 1024-thread block per SM, half the row re-read from L2, the SM idle while a row's
// reduction drains); dim 0 at 16384 x 4096: ~0.55-0.6 (the strip's second read comes from
// DRAM, see Column strips).
// Measured (results: softmax_backward/solution/fused_vectorized/16384x4096): 2981.2 GB/s = 1.01 of copy
// Measured (results: softmax_backward/solution/fused_vectorized/65536x1024): 2981.6 GB/s = 1.01 of copy
// Measured (results: softmax_backward/solution/fused_vectorized/4096x32768): 3011.2 GB/s = 1.02 of copy
// Measured (results: softmax_backward/solution/fused_vectorized/16384x4096_dim0): 1715.2 GB/s = 0.58 of copy
// Met at all four; 4096 x 32768 even beat its ~0.8-0.9 (the tail's re-read from L2 and
// the per-row reduction cost less than estimated).
// ============================================================================

/// The values of y and dy one thread keeps for its row: chunk k covers columns
/// [(k * kThreads + t) * kVec, ... + kVec), kElems / kVec chunks.
template <int kThreads, int kElems, int kVec>
struct RowPair {
  static_assert(kElems % kVec == 0, "kElems must be a multiple of kVec");
  static constexpr int kChunks = kElems / kVec;
  float y[kChunks][kVec];
  float g[kChunks][kVec];

  __device__ __forceinline__ static std::int64_t first(int k, int t) {
    return static_cast<std::int64_t>(k * kThreads + t) * kVec;
  }

  /// Load columns < limit (0 beyond); return this thread's part of D.
  __device__ __forceinline__ float load(const float* yr, const float* dyr, int t, std::int64_t limit) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      load_vec<kVec>(yr, first(k, t), limit, y[k]);
      load_vec<kVec>(dyr, first(k, t), limit, g[k]);
    }
    float d = 0.f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k)
#pragma unroll
      for (int u = 0; u < kVec; ++u) d = fmaf(y[k][u], g[k][u], d);
    return d;
  }

  /// dx = y * (dy - D) for columns < limit.
  __device__ __forceinline__ void store(float* dxr, int t, std::int64_t limit, float d) {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
#pragma unroll
      for (int u = 0; u < kVec; ++u) y[k][u] *= g[k][u] - d;
      store_vec<kVec>(dxr, first(k, t), limit, y[k]);
    }
  }
};

constexpr int kFusedRowsPerBlock = 8;  // warp-per-row variant: 8 rows (warps) per block

/// kRowThreads == 32: one warp per row, kFusedRowsPerBlock rows per block, shuffles only.
/// kRowThreads >= 128: one block per row. kStreamTail: columns >= kRowThreads * kElems are
/// streamed twice (only instantiated with kRowThreads = 1024).
template <int kRowThreads, int kElems, int kVec, bool kStreamTail>
__global__ void __launch_bounds__(kRowThreads == cc::kWarpSize ? kFusedRowsPerBlock * cc::kWarpSize : kRowThreads)
    fused_row_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                     std::int64_t lddx, std::int64_t rows, std::int64_t cols) {
  constexpr bool kWarpRow = kRowThreads == cc::kWarpSize;
  constexpr std::int64_t kOnChip = static_cast<std::int64_t>(kRowThreads) * kElems;
  int t;
  std::int64_t r;
  if constexpr (kWarpRow) {
    t = threadIdx.x % cc::kWarpSize;
    r = static_cast<std::int64_t>(blockIdx.x) * kFusedRowsPerBlock + threadIdx.x / cc::kWarpSize;
    if (r >= rows) return;  // uniform per warp
  } else {
    t = threadIdx.x;
    r = blockIdx.x;
  }
  const float* yr = y + r * ldy;
  const float* dyr = dy + r * lddy;
  float* dxr = dx + r * lddx;
  const std::int64_t held = kStreamTail ? kOnChip : cols;  // columns [0, held) live in registers

  RowPair<kRowThreads, kElems, kVec> row;
  float d = row.load(yr, dyr, t, held);
  constexpr std::int64_t kStride = static_cast<std::int64_t>(kRowThreads) * kVec;
  if constexpr (kStreamTail) {
#pragma unroll 4
    for (std::int64_t j = kOnChip + t * kVec; j < cols; j += kStride) {
      float yv[kVec], gv[kVec];
      load_vec<kVec>(yr, j, cols, yv);
      load_vec<kVec>(dyr, j, cols, gv);
#pragma unroll
      for (int u = 0; u < kVec; ++u) d = fmaf(yv[u], gv[u], d);
    }
  }
  if constexpr (kWarpRow) {
    d = cc::warp_sum(d);
  } else {
    __shared__ float scratch[cc::kWarpSize];
    d = cc::block_all_reduce(d, cc::Sum{}, 0.f, scratch);  // its barriers end every read above (in place)
  }
  row.store(dxr, t, held, d);

  if constexpr (kStreamTail) {
    const std::int64_t start = kOnChip + t * kVec;
    if (start < cols) {
      for (std::int64_t j = start + (cols - 1 - start) / kStride * kStride; j >= start; j -= kStride) {
        float yv[kVec], gv[kVec];
        if (kVec == 4 && j + 4 <= cols) {
          const float4 qy = __ldcs(reinterpret_cast<const float4*>(yr + j));
          const float4 qg = __ldcs(reinterpret_cast<const float4*>(dyr + j));
          __stcs(reinterpret_cast<float4*>(dxr + j),
                 make_float4(qy.x * (qg.x - d), qy.y * (qg.y - d), qy.z * (qg.z - d), qy.w * (qg.w - d)));
        } else {
          load_vec<kVec>(yr, j, cols, yv);
          load_vec<kVec>(dyr, j, cols, gv);
#pragma unroll
          for (int u = 0; u < kVec; ++u) yv[u] *= gv[u] - d;
          store_vec<kVec>(dxr, j, cols, yv);
        }
      }
    }
  }
}

template <int kRowThreads, int kElems, int kVec, bool kStreamTail = false>
void launch_fused_row(const SoftmaxBackwardArgs& a) {
  constexpr bool kWarpRow = kRowThreads == cc::kWarpSize;
  constexpr int kBlock = kWarpRow ? kFusedRowsPerBlock * cc::kWarpSize : kRowThreads;
  const unsigned blocks = blocks_for(a.rows, kWarpRow ? kFusedRowsPerBlock : 1, "fused_vectorized");
  fused_row_kernel<kRowThreads, kElems, kVec, kStreamTail>
      <<<blocks, kBlock, 0, a.stream>>>(a.y, a.ldy, a.dy, a.lddy, a.dx, a.lddx, a.rows, a.cols);
  COURSE_CHECK_LAUNCH("fused_row_kernel");
}

template <int kVec>
void launch_fused_rows(const SoftmaxBackwardArgs& a) {
  static_assert(1024 * 16 == m04::kSoftmaxBackwardOnChipMaxCols, "the on-chip limit is 1024 threads x 16 values");
  const std::int64_t n = a.cols;
  if (n <= 128) return launch_fused_row<32, 4, kVec>(a);
  if (n <= 256) return launch_fused_row<32, 8, kVec>(a);
  if (n <= 512) return launch_fused_row<32, 16, kVec>(a);
  if (n <= m04::kSoftmaxBackwardWarpMaxCols) return launch_fused_row<32, 32, kVec>(a);
  if (n <= 2048) return launch_fused_row<128, 16, kVec>(a);
  if (n <= 4096) return launch_fused_row<256, 16, kVec>(a);
  if (n <= 8192) return launch_fused_row<512, 16, kVec>(a);
  if (n <= m04::kSoftmaxBackwardOnChipMaxCols) return launch_fused_row<1024, 16, kVec>(a);
  launch_fused_row<1024, 16, kVec, true>(a);
}
// @end

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void launch_fused_vectorized(const SoftmaxBackwardArgs& a) {
  // @step fused_vectorized
  const bool vec4 = aligned16(a.y) && aligned16(a.dy) && aligned16(a.dx) && a.ldy % 4 == 0 && a.lddy % 4 == 0 &&
                    a.lddx % 4 == 0;
  if (a.dim == 0) {
    if (vec4) launch_column_strip<4>(a, "fused_vectorized");
    else launch_column_strip<1>(a, "fused_vectorized");
    return;
  }
  if (vec4) launch_fused_rows<4>(a);
  else launch_fused_rows<1>(a);
  // @end
}

}  // namespace

void softmax_backward(SoftmaxBackwardStep step, const SoftmaxBackwardArgs& args) {
  m04::validate_softmax_backward_args(args, step, "softmax_backward");
  if (args.rows == 0 || args.cols == 0) return;  // empty: nothing to do
  switch (step) {
    case SoftmaxBackwardStep::two_pass: return launch_two_pass(args);
    case SoftmaxBackwardStep::warp_per_row: return launch_warp_per_row(args);
    case SoftmaxBackwardStep::fused_vectorized: return launch_fused_vectorized(args);
  }
  require_arg(false, "softmax_backward", "step", static_cast<int>(step), "is not a SoftmaxBackwardStep");
}

}  // namespace course::solution
