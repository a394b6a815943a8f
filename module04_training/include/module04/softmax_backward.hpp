#pragma once
/// @file softmax_backward.hpp
/// @brief Module 4 API: the fp32 softmax backward pass along one dimension of a 2-D
/// matrix, as a ladder of steps.
///
/// Forward (module 1): y = softmax(x) for each 1-D *slice* of x. Backward: given y and
/// dy = dL/dy, the gradient dL/dx of each slice is
///
///     dx_i = y_i * (dy_i - D),      D = sum_j dy_j * y_j          (one D per slice)
///
/// The Jacobian of softmax is diag(y) - y y^T, so dx = J^T dy = y * dy - y * (y . dy):
/// the n x n Jacobian is never formed, one dot product per slice replaces it. Only y is
/// needed, not x (the forward's output is what attention keeps around as P).
///
/// ## Which slices? dim as in module 1
///   dim = 1: each ROW is a slice (attention's dS = P * (dP - D) is this, row by row);
///   dim = 0: each COLUMN is a slice.
///
/// Worked example (dim = 1, one row): y = softmax([1, 2, 3]) = [0.0900, 0.2447, 0.6652],
/// dy = [1, 0, 0]: D = 0.0900, dx = y * (dy - D) = [0.0819, -0.0220, -0.0599].
/// Every slice of dx sums to 0 (sum_i y_i dy_i - D sum_i y_i = D - D): adding a constant
/// to all logits of a slice does not change its softmax, so the gradient has no component
/// along (1, 1, ..., 1).
///
/// ## Memory layout
/// Row-major with row strides (leading dimensions) in elements: element (r, c) of y is
/// y[r * ldy + c], of dy is dy[r * lddy + c], of dx is dx[r * lddx + c]; every ld >= cols.
/// The padding between rows is never read and never written.
///
/// ## Contract (checked by validate_softmax_backward_args before any launch)
/// - rows, cols in [0, 2^31 - 1]; an empty matrix (rows == 0 or cols == 0) is a no-op,
///   and then the pointers may be null.
/// - dim is 0 or 1.
/// - y, dy, dx non-null (for a non-empty matrix) and 4-byte aligned; ldy, lddy, lddx >= cols.
/// - In place is allowed for every step as dx == dy with lddx == lddy (attention's naive
///   backward writes dS over dP this way). Any other overlap of dx with dy, and any
///   overlap of dx with y, is rejected. y and dy may overlap each other (both are read only).
/// - Step two_pass needs softmax_backward_workspace_bytes(...) bytes of workspace (the D
///   of every slice lives there between its two kernels), which must not overlap y, dy or
///   dx; the other steps need none.
/// - No alignment beyond 4 bytes is required: fused_vectorized uses float4 only when y, dy
///   and dx are 16-byte aligned and ldy, lddy, lddx are multiples of 4, and falls back to
///   scalar loads otherwise (same answer, slower).

#include "course/error.hpp"
#include "course/impl.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>

namespace course::m04 {

/// The softmax backward ladder, in teaching order.
enum class SoftmaxBackwardStep {
  two_pass,          ///< kernel 1: D per slice (a thread per slice); kernel 2: dx element-wise
  warp_per_row,      ///< one warp per row, y and dy in registers, shuffle reduction (cols <= 1024)
  fused_vectorized,  ///< float4, dispatch by cols: warp or block per row, read once; dim 0 strips
};

inline constexpr StepInfo<SoftmaxBackwardStep> kSoftmaxBackwardSteps[] = {
    {SoftmaxBackwardStep::two_pass, "two_pass",
     "D = sum(dy * y) per slice (one thread each) into a workspace, then dx element-wise: y, dy read twice"},
    {SoftmaxBackwardStep::warp_per_row, "warp_per_row",
     "one warp per row holding y and dy in registers: read once, write once, shuffles only"},
    {SoftmaxBackwardStep::fused_vectorized, "fused_vectorized",
     "float4 loads; warp or block per row by length, rows up to 16384 read once; dim 0 in column strips"},
};

/// The step's name as in the table ("two_pass"), "?" for a value outside it.
inline const char* step_name(SoftmaxBackwardStep step) {
  for (const auto& info : kSoftmaxBackwardSteps)
    if (info.step == step) return info.name;
  return "?";
}

/// The longest row warp_per_row keeps in registers (32 lanes x 32 values of y and of dy).
/// Longer rows are read twice (once for D, once for dx), still one warp per row.
inline constexpr std::int64_t kSoftmaxBackwardWarpMaxCols = 1024;
/// The longest row fused_vectorized keeps on chip: a 1024-thread block x 16 values of y
/// and 16 of dy in registers (the 64-register limit of a 1024-thread block). Longer rows
/// keep their first 16384 columns in registers and stream the rest twice.
inline constexpr std::int64_t kSoftmaxBackwardOnChipMaxCols = 16384;

/// Device-side arguments of softmax_backward. All pointers are device pointers.
struct SoftmaxBackwardArgs {
  const float* y = nullptr;   ///< the forward's output softmax(x), rows x cols, row stride ldy
  const float* dy = nullptr;  ///< dL/dy, rows x cols, row stride lddy
  float* dx = nullptr;        ///< dL/dx, rows x cols, row stride lddx (may equal dy: in place)
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ldy = 0;   ///< elements between the starts of consecutive rows of y (>= cols)
  std::int64_t lddy = 0;  ///< ... of dy (>= cols)
  std::int64_t lddx = 0;  ///< ... of dx (>= cols)
  int dim = 1;            ///< 1: each row is a slice; 0: each column is a slice
  float* workspace = nullptr;       ///< scratch, only for two_pass
  std::size_t workspace_bytes = 0;  ///< >= softmax_backward_workspace_bytes(step, rows, cols, dim)
  cudaStream_t stream = nullptr;
};

/// Arguments for contiguous y, dy and dx (every ld = cols) and no workspace.
inline SoftmaxBackwardArgs contiguous_softmax_backward_args(const float* y, const float* dy, float* dx,
                                                            std::int64_t rows, std::int64_t cols, int dim,
                                                            cudaStream_t stream = nullptr) {
  SoftmaxBackwardArgs a;
  a.y = y;
  a.dy = dy;
  a.dx = dx;
  a.rows = rows;
  a.cols = cols;
  a.ldy = a.lddy = a.lddx = cols;
  a.dim = dim;
  a.stream = stream;
  return a;
}

/// Number of independent slices: rows for dim = 1, cols for dim = 0.
inline std::int64_t softmax_backward_num_slices(std::int64_t rows, std::int64_t cols, int dim) {
  return dim == 1 ? rows : cols;
}

/// Workspace bytes `step` needs: one float (D) per slice for two_pass, else 0.
inline std::size_t softmax_backward_workspace_bytes(SoftmaxBackwardStep step, std::int64_t rows, std::int64_t cols,
                                                    int dim) {
  if (step != SoftmaxBackwardStep::two_pass || rows <= 0 || cols <= 0) return 0;
  return static_cast<std::size_t>(softmax_backward_num_slices(rows, cols, dim)) * sizeof(float);
}

namespace softmax_backward_detail {

/// Bytes from the first element of a rows x cols matrix with row stride ld to one past its last.
inline std::size_t matrix_span_bytes(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return static_cast<std::size_t>((rows - 1) * ld + cols) * sizeof(float);
}

inline bool ranges_intersect(const void* p, std::size_t bytes_p, const void* q, std::size_t bytes_q) {
  const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(q);
  return a < b + bytes_q && b < a + bytes_p;
}

}  // namespace softmax_backward_detail

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_softmax_backward_args(const SoftmaxBackwardArgs& a, SoftmaxBackwardStep step, const char* fn) {
  namespace d = softmax_backward_detail;
  constexpr std::int64_t kMaxExtent = 0x7fffffff;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kSoftmaxBackwardSteps)), fn, "step", s,
              "is not a SoftmaxBackwardStep");
  require_arg(a.rows >= 0 && a.rows <= kMaxExtent, fn, "rows", a.rows, "must be in [0, 2^31 - 1]");
  require_arg(a.cols >= 0 && a.cols <= kMaxExtent, fn, "cols", a.cols, "must be in [0, 2^31 - 1]");
  require_arg(a.dim == 0 || a.dim == 1, fn, "dim", a.dim, "must be 0 (each column) or 1 (each row)");
  // (rows - 1) * ld + cols must fit in int64 (the kernels' offsets).
  const std::int64_t max_ld = (std::numeric_limits<std::int64_t>::max() / 4 - a.cols) / (a.rows > 1 ? a.rows - 1 : 1);
  const auto ld_ok = [&](std::int64_t ld) { return ld >= a.cols && ld <= max_ld; };
  require_arg(ld_ok(a.ldy), fn, "ldy", a.ldy, "must be >= cols (row stride of y, in elements) and keep offsets in int64");
  require_arg(ld_ok(a.lddy), fn, "lddy", a.lddy,
              "must be >= cols (row stride of dy, in elements) and keep offsets in int64");
  require_arg(ld_ok(a.lddx), fn, "lddx", a.lddx,
              "must be >= cols (row stride of dx, in elements) and keep offsets in int64");
  if (a.rows == 0 || a.cols == 0) return;  // empty: nothing is read or written
  require_not_null(a.y, fn, "y");
  require_not_null(a.dy, fn, "dy");
  require_not_null(a.dx, fn, "dx");
  require_aligned(a.y, alignof(float), fn, "y");
  require_aligned(a.dy, alignof(float), fn, "dy");
  require_aligned(a.dx, alignof(float), fn, "dx");

  const std::size_t y_bytes = d::matrix_span_bytes(a.rows, a.cols, a.ldy);
  const std::size_t dy_bytes = d::matrix_span_bytes(a.rows, a.cols, a.lddy);
  const std::size_t dx_bytes = d::matrix_span_bytes(a.rows, a.cols, a.lddx);
  require_arg(!d::ranges_intersect(a.dx, dx_bytes, a.y, y_bytes), fn, "dx", static_cast<const void*>(a.dx),
              "overlaps y; dx may only alias dy, exactly (dx == dy and lddx == lddy)");
  const bool in_place = static_cast<const void*>(a.dx) == static_cast<const void*>(a.dy) && a.lddx == a.lddy;
  require_arg(in_place || !d::ranges_intersect(a.dx, dx_bytes, a.dy, dy_bytes), fn, "dx",
              static_cast<const void*>(a.dx),
              "overlaps dy; only the exact in-place case (dx == dy and lddx == lddy) is allowed");

  const std::size_t need = softmax_backward_workspace_bytes(step, a.rows, a.cols, a.dim);
  if (need > 0) {
    require_arg(a.workspace_bytes >= need, fn, "workspace_bytes", a.workspace_bytes,
                "must be >= softmax_backward_workspace_bytes(step, rows, cols, dim) (two_pass keeps the D of "
                "every slice there)");
    require_not_null(a.workspace, fn, "workspace");
    require_aligned(a.workspace, alignof(float), fn, "workspace");
    const struct {
      const void* p;
      std::size_t bytes;
      const char* why;
    } others[] = {{a.y, y_bytes, "overlaps y"}, {a.dy, dy_bytes, "overlaps dy"}, {a.dx, dx_bytes, "overlaps dx"}};
    for (const auto& o : others)
      require_arg(!d::ranges_intersect(a.workspace, need, o.p, o.bytes), fn, "workspace",
                  static_cast<const void*>(a.workspace), o.why);
  }
}

}  // namespace course::m04

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// dx = y * (dy - sum(dy * y) along args.dim), asynchronous on args.stream.
    void softmax_backward(::course::m04::SoftmaxBackwardStep step, const ::course::m04::SoftmaxBackwardArgs& args);)
