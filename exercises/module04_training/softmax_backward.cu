/// @file softmax_backward.cu
/// @brief YOUR ladder for the softmax backward pass along a dimension of a 2-D matrix
/// (module 4):  dx = y * (dy - D),  D = sum(dy * y) over each slice.
///
/// Read module04_training/include/module04/softmax_backward.hpp first (the formula, what
/// dim = 0 and dim = 1 mean, the row strides ldy / lddy / lddx, in place), then fill in one
/// step at a time. Run its tests with:   ctest --preset default -L exercise -R SoftmaxBackward
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint softmax_backward/<step>`
/// (all of them: exercises/module04_training/hints/softmax_backward.md).
///
/// Every kernel must be correct when dx == dy (in place, the way attention's backward
/// writes dS over dP): read an element before you write it, from the same thread, and
/// finish every read that D needs before the reduction that produces D ends.

#include "module04/softmax_backward.hpp"

#include "course/cuda/vec.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::exercise {
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
// ----------------------------------------------------------------------------
// Step 1: two_pass -- two kernels.
//   kernel 1 (slice_dot_kernel), one thread per slice: D[s] = sum_i dy(s, i) * y(s, i),
//            written to the workspace (args.workspace: one float per slice).
//   kernel 2 (elementwise_dx_kernel), one thread per element:
//            dx(r, c) = y(r, c) * (dy(r, c) - D[slice of (r, c)]).
//
// TODO(step 1): write both kernels and launch them in order on a.stream.
// Hints, one at a time: bash scripts/course.sh hint softmax_backward/two_pass
// Then measure dim = 0 against dim = 1: kernel 1 is the same code, but which of the two
// is coalesced? And how many threads does kernel 1 have at 4096 x 32768?
// ----------------------------------------------------------------------------
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
  // TODO(step 1)
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
  // TODO(step 1)
  // @end
}

void launch_two_pass(const SoftmaxBackwardArgs& a) {
  // @step two_pass
  const Slices sl = slices_of(a);
  const dim3 elementwise_grid(blocks_for(a.cols, kElementwiseThreads, "two_pass"),
                              static_cast<unsigned>(std::min(a.rows, kMaxGridY)));
  // TODO(step 1): delete the throw; launch blocks_for(sl.count, 256, "two_pass") blocks of 256
  //               threads of slice_dot_kernel, then elementwise_grid x kElementwiseThreads of
  //               elementwise_dx_kernel, both with a.workspace as the D array.
  (void)sl;
  (void)elementwise_grid;
  throw NotImplemented("softmax_backward step two_pass", __FILE__);
  // @end
}

// @step warp_per_row  (step 2c: the column strips)
// ----------------------------------------------------------------------------
// Column strips, for dim = 0 (step 2c below; step 3 uses them too).
// TODO(step 2c): column_strip_kernel, and its launch in launch_column_strip.
//   A warp per COLUMN would read 32 different rows per load (ld * 4 bytes apart): 32
//   sectors for 128 useful bytes. Instead a block of kStripThreads = 512 threads owns a
//   strip of kStripCols = 32 neighbouring columns: threadIdx.x % 32 picks the column,
//   threadIdx.x / 32 the first row, and the block walks rows p, p + 16, p + 32, ...
//   This stub launches it with kVec = 1 only (one float per thread, steps 2 and 3).
// Hints, one at a time: bash scripts/course.sh hint softmax_backward/warp_per_row
// ----------------------------------------------------------------------------
// @end
constexpr int kStripCols = 32;
constexpr int kStripThreads = 512;

template <int kVec>
__global__ void __launch_bounds__(kStripThreads)
    column_strip_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                        std::int64_t lddx, std::int64_t rows, std::int64_t cols) {
  // @step warp_per_row  (step 2c)
  constexpr int kPhases = kStripThreads / kStripCols;  // 16 rows walked side by side (kVec = 1)
  __shared__ float partial[kPhases][kStripCols];
  // TODO(step 2c)
  // @end
}

template <int kVec>
void launch_column_strip(const SoftmaxBackwardArgs& a, const char* step) {
  // @step warp_per_row  (step 2c)
  // TODO(step 2c): delete the throw; launch blocks_for(a.cols, kStripCols, step) blocks of
  //                kStripThreads threads of column_strip_kernel<kVec>.
  throw NotImplemented("softmax_backward step warp_per_row (dim = 0: column_strip_kernel)", __FILE__);
  // @end
}

// @step warp_per_row
// ----------------------------------------------------------------------------
// Step 2: warp_per_row -- one warp per row, y and dy held in registers.
//
// TODO(step 2a): warp_row_kernel<kPerLane> (dim = 1, cols <= 32 * kPerLane <= 1024).
// Hints, one at a time: bash scripts/course.sh hint softmax_backward/warp_per_row
//
// TODO(step 2b): warp_row_stream_kernel for rows longer than 1024: the same warp, but
//   loop j = lane, lane + 32, ... < cols twice: once for D (then warp_sum), once for dx.
//
// TODO(step 2c): the column strips above, for dim = 0 (step 3 uses them too).
// ----------------------------------------------------------------------------
// @end
constexpr int kWarpsPerBlock = 8;

template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                    std::int64_t lddx, std::int64_t rows, int cols) {
  // @step warp_per_row  (step 2a)
  // TODO(step 2a)
  // @end
}

__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_stream_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                           std::int64_t lddx, std::int64_t rows, std::int64_t cols) {
  // @step warp_per_row  (step 2b)
  // TODO(step 2b)
  // @end
}

// @step warp_per_row  (the stub launches steps 2a and 2b here)
template <int kPerLane>
void launch_warp_row(const SoftmaxBackwardArgs& a) {
  // TODO(step 2a): delete the throw; launch blocks_for(a.rows, kWarpsPerBlock, "warp_per_row")
  //                blocks of kWarpsPerBlock * 32 threads of warp_row_kernel<kPerLane>.
  throw NotImplemented("softmax_backward step warp_per_row (warp_row_kernel)", __FILE__);
}

void launch_warp_row_stream(const SoftmaxBackwardArgs& a) {
  // TODO(step 2b): delete the throw; same grid as launch_warp_row, warp_row_stream_kernel.
  throw NotImplemented("softmax_backward step warp_per_row (warp_row_stream_kernel, rows > 1024)", __FILE__);
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
  launch_warp_row_stream(a);  // too long for registers
  // @end
}

// @step fused_vectorized
// ----------------------------------------------------------------------------
// Step 3: fused_vectorized -- float4 loads, a block per row holding the row on chip.
//
// TODO(step 3): fused_row_kernel<kVec>, one block of kFusedThreads = 256 threads per row
//   (dim = 1, cols <= kFusedMaxCols = 4096). Each thread keeps kFusedElems = 16 values of y
//   and 16 of dy in registers: chunk k (k < 16 / kVec) covers columns
//   j = (k * kFusedThreads + threadIdx.x) * kVec ... j + kVec - 1.
// Hints, one at a time: bash scripts/course.sh hint softmax_backward/fused_vectorized
// Compare with step 2 at 16384 x 4096: what did reading the row once buy?
// ----------------------------------------------------------------------------
constexpr int kFusedThreads = 256;
constexpr int kFusedElems = 16;
constexpr std::int64_t kFusedMaxCols = kFusedThreads * kFusedElems;  // 4096

template <int kVec>
__global__ void __launch_bounds__(kFusedThreads)
    fused_row_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                     std::int64_t lddx, int cols) {
  __shared__ float scratch[cc::kWarpSize];
  // TODO(step 3)
}
// @end

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void launch_fused_vectorized(const SoftmaxBackwardArgs& a) {
  // @step fused_vectorized
  if (a.dim == 0) return launch_column_strip<1>(a, "fused_vectorized");  // your step 2c kernel
  if (a.cols > kFusedMaxCols) return launch_warp_row_stream(a);           // your step 2b kernel
  const bool vec4 = aligned16(a.y) && aligned16(a.dy) && aligned16(a.dx) && a.ldy % 4 == 0 && a.lddy % 4 == 0 &&
                    a.lddx % 4 == 0;
  // TODO(step 3): delete the throw; launch a.rows blocks of kFusedThreads threads of
  //               fused_row_kernel<4> if vec4, else fused_row_kernel<1>.
  (void)vec4;
  throw NotImplemented("softmax_backward step fused_vectorized", __FILE__);
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

}  // namespace course::exercise
