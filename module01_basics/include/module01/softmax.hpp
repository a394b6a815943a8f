#pragma once
/// @file softmax.hpp
/// @brief Module 1 API: fp32 softmax of a 2-D matrix along one dimension, as a ladder of steps.
///
/// softmax(v)_i = exp(v_i - max(v)) / sum_j exp(v_j - max(v)) for each 1-D *slice* v.
/// Subtracting the max changes nothing mathematically (it cancels) but keeps every
/// exp() argument <= 0, so [1000, 1001, 1002] gives the same finite answer as [-2, -1, 0].
///
/// ## Which slices? dim names the index that varies inside one slice
///
///     x = [[1, 2, 3],
///          [4, 5, 6]]          rows = 2, cols = 3
///
///   dim = 1 ("along the last axis", what attention uses): each ROW is a slice,
///           every row of y sums to 1:
///       y = [[0.0900, 0.2447, 0.6652],
///            [0.0900, 0.2447, 0.6652]]     (softmax only sees differences: 4,5,6 ~ 1,2,3)
///   dim = 0: each COLUMN is a slice, every column of y sums to 1:
///       y = [[0.0474, 0.0474, 0.0474],
///            [0.9526, 0.9526, 0.9526]]     (each column is [a, a+3]: 1/(1+e^3), e^3/(1+e^3))
///
/// Mnemonic: `dim` is the index you sum over to get 1 (as in PyTorch's softmax(x, dim)).
///
/// ## Memory layout
/// Row-major with a row stride (leading dimension) in elements: element (r, c) of x
/// is x[r * ldx + c], of y is y[r * ldy + c]; ldx, ldy >= cols (padding allowed and
/// never written). The padding between rows is left untouched.
///
/// ## Contract (checked by validate_softmax_args before any launch)
/// - rows, cols >= 0 and < 2^31; an empty matrix (rows == 0 or cols == 0) is a no-op,
///   and then the pointers may be null.
/// - dim is 0 or 1.
/// - x, y non-null (for a non-empty matrix) and 4-byte aligned; ldx, ldy >= cols.
/// - In place is allowed: y == x with ldy == ldx. Any other overlap of the address
///   ranges of x and y is rejected (a kernel would read values it already overwrote).
/// - Step naive_three_pass needs a workspace of softmax_workspace_bytes(...) bytes
///   (per-slice max and sum live between its three kernels); the other steps need none.
/// - No alignment beyond 4 bytes is required: the vectorized step uses float4 only when
///   x and y are 16-byte aligned and ldx, ldy are multiples of 4, and falls back to
///   scalar loads otherwise (same answer, slower).

#include "course/error.hpp"
#include "course/impl.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace course::m01 {

/// The softmax ladder, in teaching order.
enum class SoftmaxStep {
  naive_three_pass,   ///< three kernels (max, sum, normalize), one thread per slice
  block_per_row,      ///< one block per row, block reductions, row re-read from L2 each pass
  warp_per_row,       ///< one warp per row held in registers, shuffles only (cols <= 1024)
  online_vectorized,  ///< online (max, sum) in one pass, float4 loads, dispatch by cols
  cluster_columns,    ///< dim 0 read once: a thread-block cluster holds whole columns on chip
};

inline constexpr StepInfo<SoftmaxStep> kSoftmaxSteps[] = {
    {SoftmaxStep::naive_three_pass, "naive_three_pass",
     "three kernels (max, sum of exp, normalize), one thread per slice: input read 3x"},
    {SoftmaxStep::block_per_row, "block_per_row",
     "one block per row, block-wide reductions; each pass re-reads the row (from L2)"},
    {SoftmaxStep::warp_per_row, "warp_per_row",
     "one warp per row kept in registers: read once, write once, shuffles only"},
    {SoftmaxStep::online_vectorized, "online_vectorized",
     "online max/sum update, float4 loads; rows that fit on chip read once, longer ones twice"},
    {SoftmaxStep::cluster_columns, "cluster_columns",
     "dim 0 read once: a thread-block cluster holds a strip of whole columns in shared memory and "
     "merges (max, sum) through distributed shared memory; dim 1 as online_vectorized"},
};
static_assert(steps_in_enum_order(kSoftmaxSteps), "kSoftmaxSteps must list SoftmaxStep in enum order");

/// The longest row warp_per_row keeps in registers (32 lanes x 32 floats). Longer
/// rows fall back to block_per_row's kernel.
inline constexpr std::int64_t kWarpPerRowMaxCols = 1024;
/// The longest row online_vectorized keeps on chip (a 1024-thread block x 32 floats in
/// registers = 128 KiB). Longer rows stream: one online pass + one normalize pass.
inline constexpr std::int64_t kOnChipMaxCols = 32768;

/// cluster_columns (dim = 0): a strip of kClusterStripCols columns (one 128-byte segment
/// per row) is split down the rows between the C blocks of a thread-block cluster, up to
/// kClusterMaxBlockRows rows per block (its first 256 rows in registers, the rest, up to
/// 96 KiB, in shared memory: two blocks per SM). Taller columns fall back to
/// online_vectorized's two-pass column strips.
inline constexpr int kClusterStripCols = 32;
inline constexpr std::int64_t kClusterMaxBlockRows = 1024;
inline constexpr int kClusterMaxBlocks = 16;
/// The tallest column cluster_columns holds on chip: 16 blocks x 1024 rows.
inline constexpr std::int64_t kClusterMaxRows = kClusterMaxBlocks * kClusterMaxBlockRows;

/// The cluster size C cluster_columns uses for `rows` rows (dim = 0): the smallest power
/// of two with ceil(rows / C) <= kClusterMaxBlockRows; 0 when even kClusterMaxBlocks
/// blocks cannot hold a column (the fallback). Whether the GPU can run the cluster is
/// checked at launch.
inline int cluster_columns_blocks(std::int64_t rows) {
  if (rows > kClusterMaxRows) return 0;
  int c = 1;
  while ((rows + c - 1) / c > kClusterMaxBlockRows) c *= 2;
  return c;
}

/// Device-side arguments of softmax. All pointers are device pointers.
struct SoftmaxArgs {
  const float* x = nullptr;  ///< input, rows x cols, row stride ldx
  float* y = nullptr;        ///< output, rows x cols, row stride ldy (may equal x: in place)
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ldx = 0;      ///< elements between the starts of consecutive rows of x (>= cols)
  std::int64_t ldy = 0;      ///< elements between the starts of consecutive rows of y (>= cols)
  int dim = 1;               ///< 1: normalize each row; 0: normalize each column
  float* workspace = nullptr;       ///< scratch, only for naive_three_pass (must not overlap x or y)
  std::size_t workspace_bytes = 0;  ///< >= softmax_workspace_bytes(step, rows, cols, dim)
  cudaStream_t stream = nullptr;
};

/// Arguments for contiguous x and y (ldx = ldy = cols) and no workspace.
inline SoftmaxArgs contiguous_softmax_args(const float* x, float* y, std::int64_t rows, std::int64_t cols,
                                           int dim, cudaStream_t stream = nullptr) {
  SoftmaxArgs a;
  a.x = x;
  a.y = y;
  a.rows = rows;
  a.cols = cols;
  a.ldx = cols;
  a.ldy = cols;
  a.dim = dim;
  a.stream = stream;
  return a;
}

/// Number of independent slices: rows for dim = 1, cols for dim = 0.
inline std::int64_t softmax_num_slices(std::int64_t rows, std::int64_t cols, int dim) {
  return dim == 1 ? rows : cols;
}

/// Workspace bytes `step` needs: 2 floats (max, sum) per slice for naive_three_pass, else 0.
inline std::size_t softmax_workspace_bytes(SoftmaxStep step, std::int64_t rows, std::int64_t cols, int dim) {
  if (step != SoftmaxStep::naive_three_pass || rows <= 0 || cols <= 0) return 0;
  return 2 * static_cast<std::size_t>(softmax_num_slices(rows, cols, dim)) * sizeof(float);
}

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_softmax_args(const SoftmaxArgs& a, SoftmaxStep step, const char* fn) {
  constexpr std::int64_t kMaxExtent = 0x7fffffff;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(sizeof(kSoftmaxSteps) / sizeof(kSoftmaxSteps[0])), fn, "step", s,
              "is not a SoftmaxStep");
  require_arg(a.rows >= 0 && a.rows <= kMaxExtent, fn, "rows", a.rows, "must be in [0, 2^31 - 1]");
  require_arg(a.cols >= 0 && a.cols <= kMaxExtent, fn, "cols", a.cols, "must be in [0, 2^31 - 1]");
  require_arg(a.dim == 0 || a.dim == 1, fn, "dim", a.dim, "must be 0 (each column) or 1 (each row)");
  require_arg(a.ldx >= a.cols, fn, "ldx", a.ldx, "must be >= cols (row stride of x, in elements)");
  require_arg(a.ldy >= a.cols, fn, "ldy", a.ldy, "must be >= cols (row stride of y, in elements)");
  if (a.rows == 0 || a.cols == 0) return;  // empty: nothing is read or written
  require_not_null(a.x, fn, "x");
  require_not_null(a.y, fn, "y");
  require_aligned(a.x, alignof(float), fn, "x");
  require_aligned(a.y, alignof(float), fn, "y");
  // Address ranges [first element, last element] of x and y, in bytes.
  const auto x0 = reinterpret_cast<std::uintptr_t>(a.x);
  const auto y0 = reinterpret_cast<std::uintptr_t>(a.y);
  const auto x1 = x0 + static_cast<std::uintptr_t>((a.rows - 1) * a.ldx + a.cols) * sizeof(float);
  const auto y1 = y0 + static_cast<std::uintptr_t>((a.rows - 1) * a.ldy + a.cols) * sizeof(float);
  const bool in_place = x0 == y0 && a.ldx == a.ldy;
  require_arg(in_place || x1 <= y0 || y1 <= x0, fn, "y", static_cast<const void*>(a.y),
              "overlaps x; only the exact in-place case (y == x and ldy == ldx) is allowed");
  const std::size_t need = softmax_workspace_bytes(step, a.rows, a.cols, a.dim);
  if (need > 0) {
    require_arg(a.workspace_bytes >= need, fn, "workspace_bytes", a.workspace_bytes,
                "must be >= softmax_workspace_bytes(step, rows, cols, dim) (naive_three_pass keeps "
                "the max and sum of every slice there)");
    require_not_null(a.workspace, fn, "workspace");
    require_aligned(a.workspace, alignof(float), fn, "workspace");
    // The slice statistics are written while x is still read (and y written): no overlap.
    const auto w0 = reinterpret_cast<std::uintptr_t>(a.workspace);
    const auto w1 = w0 + need;
    const auto* ws = static_cast<const void*>(a.workspace);
    require_arg(w1 <= x0 || x1 <= w0, fn, "workspace", ws,
                "overlaps x: naive_three_pass writes the max and sum of every slice there while x is read");
    require_arg(w1 <= y0 || y1 <= w0, fn, "workspace", ws,
                "overlaps y: naive_three_pass writes the max and sum of every slice there while y is written");
  }
}

}  // namespace course::m01

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// y = softmax(x) along args.dim (asynchronous on args.stream).
    void softmax(::course::m01::SoftmaxStep step, const ::course::m01::SoftmaxArgs& args);)
