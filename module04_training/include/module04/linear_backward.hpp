#pragma once
/// @file linear_backward.hpp
/// @brief Module 4 API: the backward pass of a linear layer, Y = X W + b (fp32).
///
/// Forward:  Y [M, N] = X [M, K] W [K, N] + b [N]   (b broadcast to every row of Y).
/// Backward, given dY = dL/dY [M, N]:
///
///     dX [M, K] = dY W^T        (each input row's gradient mixes the N output gradients)
///     dW [K, N] = X^T dY        (summed over the M rows of the batch)
///     db [N]    = sum_i dY[i, :] (the column sums of dY: b was added to every row)
///
/// Worked example (M = 3, K = 2, N = 3):
///     X = [[1, 2], [3, 4], [5, 6]],  W = [[1, 0, -1], [2, 1, 0]],  dY = [[1, 0, 2], [0, 1, 1], [1, 3, 0]]
///     dX = [[-1, 2], [-1, 1], [1, 5]],  dW = [[6, 18, 5], [8, 22, 8]],  db = [2, 4, 3]
/// (dY's row sums are [3, 2, 4]; X dY, the product without the transpose, is not even
/// defined here -- on a square problem it is, and it is wrong.)
///
/// ## No transpose is ever materialized
/// Both products run on module 2's strided batched GEMM (batch = heads = 1, step
/// warp_tiled, fp32) with its operand options:
///     dX: A = dY (M x N),   B = W stored K x N used as W^T  (b_transposed), M' = M, N' = K, K' = N
///     dW: A = X stored M x K used as X^T (a_transposed),    B = dY (M x N),   M' = K, N' = N, K' = M
/// The kernels read W and X through their row strides in the transposed order; W^T and
/// X^T never exist in memory.
///
/// ## The bias gradient: a column reduction, a two-step ladder
/// db[j] = sum_i dY[i, j]: every column of dY is reduced over M rows. Rows are contiguous
/// in memory, so threads that own neighbouring columns read neighbouring addresses.
///   column_per_thread   thread j loops over the M rows of column j: coalesced across a
///                       warp, but only N threads of work (N = 1024 is 8 blocks).
///   block_column_strip  a block owns a strip of 32 columns; its 32 warps split the rows
///                       (warp w sums rows w, w + 32, ...), and the 32 partial sums of a
///                       column are added in shared memory in a fixed order. 32x the
///                       threads of step 1, still deterministic: no atomics.
/// Both steps give the same db on every run (a fixed summation order).
///
/// ## Memory layout
/// Row-major, row strides (leading dimensions) in ELEMENTS: element (i, k) of X is
/// x[i * ldx + k]; W is K x N (ldw), dY is M x N (lddy), dX is M x K (lddx), dW is K x N
/// (lddw); db is N contiguous floats. An ld of 0 means dense (the row length).
///
/// ## Contract (validate_linear_backward_args, run by both implementations before any
/// launch; each violation throws course::InvalidArgument naming the argument and value)
/// - M, K, N in [1, 2^31 - 1].
/// - dx, dw, db may each be null: that gradient is skipped (all three null: nothing to do).
///   A requested gradient needs its inputs: dy always, w for dx, x for dw.
/// - Every pointer 4-byte aligned; every ld either 0 (dense) or >= its row length
///   (ldx, lddx >= K; ldw, lddw, lddy >= N), and offsets must fit in int64.
/// - No output overlaps an input (x, w, dy) or another output.

#include "course/error.hpp"
#include "course/impl.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

namespace course::m04 {

/// The bias-gradient ladder, in teaching order.
enum class BiasGradStep {
  column_per_thread,   ///< thread j sums column j over all M rows: N threads in total
  block_column_strip,  ///< a block per 32-column strip, its warps split the rows, shared-memory combine
};

inline constexpr StepInfo<BiasGradStep> kBiasGradSteps[] = {
    {BiasGradStep::column_per_thread, "column_per_thread",
     "db[j] = sum over rows of dY[:, j], one thread per column: coalesced, but only N threads"},
    {BiasGradStep::block_column_strip, "block_column_strip",
     "a block per 32-column strip, 32 warps split the rows, partials combined in shared memory (no atomics)"},
};

namespace linear_backward_detail {
/// True when entry i of kBiasGradSteps describes BiasGradStep(i), for every i.
constexpr bool steps_in_enum_order() {
  for (std::size_t i = 0; i < std::size(kBiasGradSteps); ++i)
    if (static_cast<std::size_t>(kBiasGradSteps[i].step) != i) return false;
  return true;
}
}  // namespace linear_backward_detail
static_assert(linear_backward_detail::steps_in_enum_order(), "kBiasGradSteps must list BiasGradStep in order");

/// The step's name as in the table ("column_per_thread"), "?" for a value outside it.
inline const char* step_name(BiasGradStep step) {
  for (const auto& info : kBiasGradSteps)
    if (info.step == step) return info.name;
  return "?";
}

/// Columns of dY one block of block_column_strip reduces (one per lane of a warp).
inline constexpr int kBiasGradStripCols = 32;

/// Device-side arguments of linear_backward. All pointers are device pointers.
struct LinearBackwardArgs {
  const float* x = nullptr;   ///< X, M x K, row stride ldx (read for dw)
  const float* w = nullptr;   ///< W, K x N, row stride ldw (read for dx)
  const float* dy = nullptr;  ///< dL/dY, M x N, row stride lddy
  float* dx = nullptr;        ///< dL/dX, M x K, row stride lddx; null: not computed
  float* dw = nullptr;        ///< dL/dW, K x N, row stride lddw; null: not computed
  float* db = nullptr;        ///< dL/db, N contiguous; null: not computed
  std::int64_t M = 0;         ///< rows of X and dY (the batch of tokens)
  std::int64_t K = 0;         ///< input features
  std::int64_t N = 0;         ///< output features
  std::int64_t ldx = 0, ldw = 0, lddy = 0, lddx = 0, lddw = 0;  ///< row strides; 0 = dense
  cudaStream_t stream = nullptr;
};

/// Arguments for dense row-major X, W, dY, dX, dW (every ld = its row length).
inline LinearBackwardArgs make_linear_backward_args(const float* x, const float* w, const float* dy, float* dx,
                                                    float* dw, float* db, std::int64_t M, std::int64_t K,
                                                    std::int64_t N, cudaStream_t stream = nullptr) {
  LinearBackwardArgs a;
  a.x = x;
  a.w = w;
  a.dy = dy;
  a.dx = dx;
  a.dw = dw;
  a.db = db;
  a.M = M;
  a.K = K;
  a.N = N;
  a.ldx = K;
  a.ldw = N;
  a.lddy = N;
  a.lddx = K;
  a.lddw = N;
  a.stream = stream;
  return a;
}

/// The row strides with 0 replaced by the dense value (what the kernels use).
inline LinearBackwardArgs resolve_leading_dims(LinearBackwardArgs a) {
  if (a.ldx == 0) a.ldx = a.K;
  if (a.ldw == 0) a.ldw = a.N;
  if (a.lddy == 0) a.lddy = a.N;
  if (a.lddx == 0) a.lddx = a.K;
  if (a.lddw == 0) a.lddw = a.N;
  return a;
}

namespace linear_backward_detail {

/// Bytes from the first element of a rows x cols matrix with row stride ld to one past its last.
inline std::size_t matrix_span_bytes(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return static_cast<std::size_t>((rows - 1) * ld + cols) * sizeof(float);
}

inline bool ranges_intersect(const void* p, std::size_t bytes_p, const void* q, std::size_t bytes_q) {
  const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(q);
  return a < b + bytes_q && b < a + bytes_p;
}

/// One matrix of the call: its name, where it is and how many bytes it spans.
struct Operand {
  const char* name;
  const void* p;
  std::size_t bytes;
};

}  // namespace linear_backward_detail

/// The validation both implementations run before any launch. Throws
/// course::InvalidArgument naming the argument and its value.
inline void validate_linear_backward_args(const LinearBackwardArgs& args, BiasGradStep step, const char* fn) {
  namespace d = linear_backward_detail;
  constexpr std::int64_t kMaxExtent = 0x7fffffff;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kBiasGradSteps)), fn, "step", s, "is not a BiasGradStep");
  require_arg(args.M >= 1 && args.M <= kMaxExtent, fn, "M", args.M, "must be in [1, 2^31 - 1] (rows of X and dY)");
  require_arg(args.K >= 1 && args.K <= kMaxExtent, fn, "K", args.K,
              "must be in [1, 2^31 - 1] (columns of X, rows of W)");
  require_arg(args.N >= 1 && args.N <= kMaxExtent, fn, "N", args.N,
              "must be in [1, 2^31 - 1] (columns of W and dY)");
  const LinearBackwardArgs a = resolve_leading_dims(args);
  // (rows - 1) * ld + cols must fit in int64 bytes.
  const auto ld_ok = [](std::int64_t ld, std::int64_t rows, std::int64_t cols) {
    return ld >= cols && ld <= (std::numeric_limits<std::int64_t>::max() / 4 - cols) / (rows > 1 ? rows - 1 : 1);
  };
  const struct {
    const char* name;
    std::int64_t given, resolved, rows, cols;
    const char* what;
  } lds[] = {{"ldx", args.ldx, a.ldx, a.M, a.K, "must be 0 (dense) or >= K (row stride of X, M x K)"},
             {"ldw", args.ldw, a.ldw, a.K, a.N, "must be 0 (dense) or >= N (row stride of W, K x N)"},
             {"lddy", args.lddy, a.lddy, a.M, a.N, "must be 0 (dense) or >= N (row stride of dY, M x N)"},
             {"lddx", args.lddx, a.lddx, a.M, a.K, "must be 0 (dense) or >= K (row stride of dX, M x K)"},
             {"lddw", args.lddw, a.lddw, a.K, a.N, "must be 0 (dense) or >= N (row stride of dW, K x N)"}};
  for (const auto& l : lds)
    require_arg(l.given >= 0 && ld_ok(l.resolved, l.rows, l.cols), fn, l.name, l.given, l.what);
  if (!a.dx && !a.dw && !a.db) return;  // no gradient requested: nothing is read or written

  require_arg(a.dy != nullptr, fn, "dy", a.dy, "must not be null: every gradient is computed from dY");
  if (a.dx) require_arg(a.w != nullptr, fn, "w", a.w, "must not be null when dx is requested (dX = dY W^T)");
  if (a.dw) require_arg(a.x != nullptr, fn, "x", a.x, "must not be null when dw is requested (dW = X^T dY)");
  const struct {
    const char* name;
    const void* p;
  } pointers[] = {{"x", a.x}, {"w", a.w}, {"dy", a.dy}, {"dx", a.dx}, {"dw", a.dw}, {"db", a.db}};
  for (const auto& p : pointers)
    if (p.p) require_aligned(static_cast<const float*>(p.p), alignof(float), fn, p.name);

  // Outputs must not overlap inputs or each other (ranges: conservative for padded rows).
  const d::Operand inputs[] = {{"x", a.x, a.x ? d::matrix_span_bytes(a.M, a.K, a.ldx) : 0},
                               {"w", a.w, a.w ? d::matrix_span_bytes(a.K, a.N, a.ldw) : 0},
                               {"dy", a.dy, d::matrix_span_bytes(a.M, a.N, a.lddy)}};
  const d::Operand outputs[] = {{"dx", a.dx, a.dx ? d::matrix_span_bytes(a.M, a.K, a.lddx) : 0},
                                {"dw", a.dw, a.dw ? d::matrix_span_bytes(a.K, a.N, a.lddw) : 0},
                                {"db", a.db, a.db ? static_cast<std::size_t>(a.N) * sizeof(float) : 0}};
  for (std::size_t o = 0; o < std::size(outputs); ++o) {
    const d::Operand& out = outputs[o];
    if (!out.p) continue;
    for (const d::Operand& in : inputs)
      if (in.p && d::ranges_intersect(out.p, out.bytes, in.p, in.bytes))
        require_arg(false, fn, out.name, out.p,
                    (std::string("overlaps ") + in.name + ": outputs must not overlap inputs").c_str());
    for (std::size_t q = o + 1; q < std::size(outputs); ++q)
      if (outputs[q].p && d::ranges_intersect(out.p, out.bytes, outputs[q].p, outputs[q].bytes))
        require_arg(false, fn, outputs[q].name, outputs[q].p,
                    (std::string("overlaps ") + out.name + ": the gradients must not overlap each other").c_str());
  }
}

}  // namespace course::m04

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// dX = dY W^T, dW = X^T dY, db = column sums of dY (each skipped when its pointer is
    /// null); `step` picks the bias-gradient kernel. Asynchronous on args.stream.
    void linear_backward(::course::m04::BiasGradStep step, const ::course::m04::LinearBackwardArgs& args);)
