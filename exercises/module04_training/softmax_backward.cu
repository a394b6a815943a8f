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

#include "course/cuda/warp_reduce.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace course::exercise {
namespace {

using m04::SoftmaxBackwardArgs;
using m04::SoftmaxBackwardStep;
namespace cc = ::course::cuda;

/// Where the slices of the matrix lie (given). A slice is one row (dim = 1) or one
/// column (dim = 0); element i of slice s is at  s * slice_stride + i * elem_stride.
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

unsigned grid_size(std::int64_t work, std::int64_t per_block) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  require_arg(blocks <= 0x7fffffff, "softmax_backward", "blocks", blocks, "exceeds the grid limit 2^31 - 1");
  return static_cast<unsigned>(blocks);
}

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
__global__ void slice_dot_kernel(const float* y, const float* dy, Slices sl, float* slice_dot) {
  // TODO(step 1)
}

constexpr int kElementwiseThreads = 256;

__global__ void __launch_bounds__(kElementwiseThreads)
    elementwise_dx_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                          std::int64_t lddx, std::int64_t rows, std::int64_t cols, int dim, const float* slice_dot) {
  // TODO(step 1)
}

void launch_two_pass(const SoftmaxBackwardArgs& a) {
  const Slices sl = slices_of(a);
  const dim3 elementwise_grid(grid_size(a.cols, kElementwiseThreads),
                              static_cast<unsigned>(std::min<std::int64_t>(a.rows, 65535)));
  // TODO(step 1): delete the throw; launch grid_size(sl.count, 256) blocks of 256 threads of
  //               slice_dot_kernel, then elementwise_grid x kElementwiseThreads of
  //               elementwise_dx_kernel, both with a.workspace as the D array.
  (void)sl;
  (void)elementwise_grid;
  throw NotImplemented("softmax_backward step two_pass", __FILE__);
}

// ----------------------------------------------------------------------------
// Step 2: warp_per_row -- one warp per row, y and dy held in registers.
//
// TODO(step 2a): warp_row_kernel<kPerLane> (dim = 1, cols <= 32 * kPerLane <= 1024).
// Hints, one at a time: bash scripts/course.sh hint softmax_backward/warp_per_row
//
// TODO(step 2b): warp_row_stream_kernel for rows longer than 1024: the same warp, but
//   loop j = lane, lane + 32, ... < cols twice: once for D (then warp_sum), once for dx.
//
// TODO(step 2c): column_strip_kernel for dim = 0 (step 3 uses it too).
//   A warp per COLUMN would read 32 different rows per load (ld * 4 bytes apart): 32
//   sectors for 128 useful bytes. Instead a block of kStripThreads = 512 threads owns a
//   strip of kStripCols = 32 neighbouring columns: threadIdx.x % 32 picks the column,
//   threadIdx.x / 32 the first row, and the block walks rows p, p + 16, p + 32, ...
// ----------------------------------------------------------------------------
constexpr int kWarpsPerBlock = 8;
constexpr int kStripCols = 32;
constexpr int kStripThreads = 512;

template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                    std::int64_t lddx, std::int64_t rows, int cols) {
  // TODO(step 2a)
}

__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_stream_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                           std::int64_t lddx, std::int64_t rows, std::int64_t cols) {
  // TODO(step 2b)
}

__global__ void __launch_bounds__(kStripThreads)
    column_strip_kernel(const float* y, std::int64_t ldy, const float* dy, std::int64_t lddy, float* dx,
                        std::int64_t lddx, std::int64_t rows, std::int64_t cols) {
  constexpr int kPhases = kStripThreads / kStripCols;  // 16 rows walked side by side
  __shared__ float partial[kPhases][kStripCols];
  // TODO(step 2c)
}

template <int kPerLane>
void launch_warp_row(const SoftmaxBackwardArgs& a) {
  // TODO(step 2a): delete the throw; launch grid_size(a.rows, kWarpsPerBlock) blocks of
  //                kWarpsPerBlock * 32 threads of warp_row_kernel<kPerLane>.
  throw NotImplemented("softmax_backward step warp_per_row (warp_row_kernel)", __FILE__);
}

void launch_warp_row_stream(const SoftmaxBackwardArgs& a) {
  // TODO(step 2b): delete the throw; same grid as launch_warp_row, warp_row_stream_kernel.
  throw NotImplemented("softmax_backward step warp_per_row (warp_row_stream_kernel, rows > 1024)", __FILE__);
}

void launch_column_strip(const SoftmaxBackwardArgs& a) {
  // TODO(step 2c): delete the throw; launch grid_size(a.cols, kStripCols) blocks of
  //                kStripThreads threads of column_strip_kernel.
  throw NotImplemented("softmax_backward step warp_per_row (dim = 0: column_strip_kernel)", __FILE__);
}

void launch_warp_per_row(const SoftmaxBackwardArgs& a) {
  if (a.dim == 0) return launch_column_strip(a);
  if (a.cols <= 32) return launch_warp_row<1>(a);
  if (a.cols <= 64) return launch_warp_row<2>(a);
  if (a.cols <= 128) return launch_warp_row<4>(a);
  if (a.cols <= 256) return launch_warp_row<8>(a);
  if (a.cols <= 512) return launch_warp_row<16>(a);
  if (a.cols <= m04::kSoftmaxBackwardWarpMaxCols) return launch_warp_row<32>(a);
  launch_warp_row_stream(a);  // too long for registers
}

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

void launch_fused_vectorized(const SoftmaxBackwardArgs& a) {
  if (a.dim == 0) return launch_column_strip(a);                 // your step 2c kernel
  if (a.cols > kFusedMaxCols) return launch_warp_row_stream(a);  // your step 2b kernel
  const bool vec4 = reinterpret_cast<std::uintptr_t>(a.y) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(a.dy) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(a.dx) % 16 == 0 && a.ldy % 4 == 0 && a.lddy % 4 == 0 &&
                    a.lddx % 4 == 0;
  // TODO(step 3): delete the throw; launch a.rows blocks of kFusedThreads threads of
  //               fused_row_kernel<4> if vec4, else fused_row_kernel<1>.
  (void)vec4;
  throw NotImplemented("softmax_backward step fused_vectorized", __FILE__);
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
  throw NotImplemented(std::string("softmax_backward step ") + std::to_string(static_cast<int>(step)), __FILE__);
}

}  // namespace course::exercise
