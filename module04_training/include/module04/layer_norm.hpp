#pragma once
/// @file layer_norm.hpp
/// @brief Module 4 API: LayerNorm forward over the last dimension of a rows x C matrix, as a
/// ladder of steps. The backward ladder is in layer_norm_backward.hpp (included at the end,
/// so this one header gives both entry points).
///
/// Per row r (torch.nn.functional.layer_norm over the last dimension, biased variance):
///
///     mean_r = (1/C) sum_c x(r, c)
///     var_r  = (1/C) sum_c (x(r, c) - mean_r)^2
///     rstd_r = 1 / sqrt(var_r + eps)
///     y(r, c) = (x(r, c) - mean_r) * rstd_r * gamma[c] + beta[c]
///
/// Worked example (C = 4, gamma = 1, beta = 0, eps = 0): x = [1, 2, 3, 4]: mean 2.5,
/// var 1.25, rstd 0.8944, y = [-1.3416, -0.4472, 0.4472, 1.3416].
///
/// ## Memory layout and dtypes
/// x and y are row-major with their own row strides (in elements): x(r, c) = x[r * ldx + c],
/// y(r, c) = y[r * ldy + c]; ld >= C, the padding between rows is never read nor written.
/// x and y share one dtype, args.dtype: DType::f32 (float) or DType::bf16 (__nv_bfloat16);
/// the GPT's mixed mode keeps activations in bf16. Everything is computed in fp32 whatever
/// the dtype. gamma, beta ([C]) and the saved statistics mean, rstd ([rows]) are fp32 always.
///
/// ## Contract (checked by validate_layer_norm_args before any launch)
/// - rows in [0, 2^31 - 1] (rows = 0 is a no-op and then every pointer may be null);
///   C in [1, 2^31 - 1]; eps >= 0 and finite.
/// - dtype f32 or bf16 (f16 is rejected).
/// - x, y, gamma, beta, mean, rstd non-null and aligned to their element size; ldx, ldy >= C.
/// - No vector alignment is required: the vectorized step uses 16-byte accesses only when
///   x and y are 16-byte aligned and ldx, ldy are multiples of 16 / sizeof(element) (and
///   gamma, beta 16-byte aligned); otherwise it falls back to scalar code (same answer).
/// - Outputs must not overlap: y must not overlap x, gamma, beta, mean or rstd; mean and
///   rstd must not overlap each other, x, gamma or beta. (In place y == x is not supported.)

#include "course/compare.hpp"
#include "course/error.hpp"
#include "course/impl.hpp"
#include "course/validate.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

namespace course::m04 {

/// The LayerNorm forward ladder, in teaching order.
enum class LayerNormStep {
  thread_per_row,  ///< one thread per row: mean, variance and y in three sweeps over global memory
  warp_per_row,    ///< one warp per row, the row in registers (C <= 1024), shuffle reductions
  vectorized,      ///< 16-byte loads/stores, compile-time C for the GPT's widths, 8 rows per block
  pipelined,       ///< a one-wave grid of warps walking the rows, the next row's loads in flight
};

inline constexpr StepInfo<LayerNormStep> kLayerNormSteps[] = {
    {LayerNormStep::thread_per_row, "thread_per_row",
     "one thread per row: mean, variance, then y, three sweeps over the row in global memory (naive)"},
    {LayerNormStep::warp_per_row, "warp_per_row",
     "one warp per row holding the row in registers: read once, mean then squared deviations by shuffles"},
    {LayerNormStep::vectorized, "vectorized",
     "16-byte loads and stores (float4 / 8 x bf16), compile-time C for 384/768/1024, gamma and beta as vectors"},
    {LayerNormStep::pipelined, "pipelined",
     "a one-wave grid whose warps walk the rows, each prefetching its next row while it reduces this one"},
};
static_assert(steps_in_enum_order(kLayerNormSteps), "kLayerNormSteps must list LayerNormStep in order");

/// The step's name as in the table ("warp_per_row"), "?" for a value outside it.
inline const char* step_name(LayerNormStep step) { return step_name_in(kLayerNormSteps, step); }

/// The row widths the vectorized steps (forward and backward) compile for, dispatched with
/// course::cuda::dispatch_value (the GPT's widths: 384 for the small model, 768 for
/// GPT-2 small, 1024 for medium). Any other C runs the generic code of the same step.
inline constexpr int kLayerNormFastWidths[] = {384, 768, 1024};

/// The longest row a warp keeps in registers (32 lanes x 32 values). Longer rows are
/// streamed from global memory (three sweeps forward, two backward), still a warp per row.
inline constexpr std::int64_t kLayerNormWarpMaxCols = 1024;

/// Device-side arguments of layer_norm_forward. All pointers are device pointers.
struct LayerNormArgs {
  DType dtype = DType::f32;      ///< of x and y: f32 or bf16
  const void* x = nullptr;       ///< rows x C, row stride ldx
  void* y = nullptr;             ///< rows x C, row stride ldy
  const float* gamma = nullptr;  ///< [C] scale
  const float* beta = nullptr;   ///< [C] shift
  float* mean = nullptr;         ///< [rows] out: the row means (saved for the backward)
  float* rstd = nullptr;         ///< [rows] out: 1 / sqrt(var + eps)
  std::int64_t rows = 0;
  std::int64_t C = 0;
  std::int64_t ldx = 0;  ///< elements between the starts of consecutive rows of x (>= C)
  std::int64_t ldy = 0;  ///< ... of y (>= C)
  float eps = 1e-5f;
  cudaStream_t stream = nullptr;
};

/// Arguments for contiguous x and y (ldx = ldy = C).
inline LayerNormArgs contiguous_layer_norm_args(DType dtype, const void* x, void* y, const float* gamma,
                                                const float* beta, float* mean, float* rstd, std::int64_t rows,
                                                std::int64_t C, cudaStream_t stream = nullptr) {
  LayerNormArgs a;
  a.dtype = dtype;
  a.x = x;
  a.y = y;
  a.gamma = gamma;
  a.beta = beta;
  a.mean = mean;
  a.rstd = rstd;
  a.rows = rows;
  a.C = C;
  a.ldx = a.ldy = C;
  a.stream = stream;
  return a;
}

namespace layer_norm_detail {

/// Bytes of one element of x / y / dy / dx.
inline std::size_t elem_bytes(DType dtype) { return dtype == DType::bf16 ? 2 : 4; }

/// Bytes from the first element of a rows x C matrix with row stride ld to one past its last.
inline std::size_t matrix_span_bytes(std::int64_t rows, std::int64_t C, std::int64_t ld, DType dtype) {
  return static_cast<std::size_t>((rows - 1) * ld + C) * elem_bytes(dtype);
}

/// One operand's byte range, for the overlap checks.
struct Range {
  const void* p;
  std::size_t bytes;
  const char* name;
};

/// Throws naming `out` unless its range is disjoint from every one of `others`.
template <std::size_t N>
void require_disjoint(const Range& out, const Range (&others)[N], const char* fn) {
  for (const Range& o : others)
    require_arg(!validate::ranges_intersect(out.p, out.bytes, o.p, o.bytes), fn, out.name, out.p,
                validate::msg("overlaps ", o.name, " (outputs must not overlap any other operand)"));
}

/// The shape, dtype and row-stride rules both directions share.
inline void validate_common(DType dtype, std::int64_t rows, std::int64_t C, const char* fn) {
  constexpr std::int64_t kMaxExtent = 0x7fffffff;
  require_arg(dtype == DType::f32 || dtype == DType::bf16, fn, "dtype", to_string(dtype),
              "must be f32 or bf16");
  require_arg(rows >= 0 && rows <= kMaxExtent, fn, "rows", rows, "must be in [0, 2^31 - 1]");
  require_arg(C >= 1 && C <= kMaxExtent, fn, "C", C, "must be in [1, 2^31 - 1]");
}

/// ld >= C and (rows - 1) * ld + C fits in int64 offsets.
inline void require_ld(std::int64_t ld, std::int64_t rows, std::int64_t C, const char* fn, const char* name) {
  validate::require_row_stride(ld, C, "C", fn, name, "the row stride, in elements");
  const std::int64_t max_ld = (std::numeric_limits<std::int64_t>::max() / 4 - C) / (rows > 1 ? rows - 1 : 1);
  require_arg(ld <= max_ld, fn, name, ld, "makes the offsets overflow int64");
}

/// Non-null and aligned to the element of `dtype`.
inline void require_matrix_ptr(const void* p, DType dtype, const char* fn, const char* name) {
  require_not_null(p, fn, name);
  require_aligned(p, elem_bytes(dtype), fn, name);
}

}  // namespace layer_norm_detail

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_layer_norm_args(const LayerNormArgs& a, LayerNormStep step, const char* fn) {
  namespace d = layer_norm_detail;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kLayerNormSteps)), fn, "step", s, "is not a LayerNormStep");
  d::validate_common(a.dtype, a.rows, a.C, fn);
  require_arg(std::isfinite(a.eps) && a.eps >= 0.f, fn, "eps", a.eps, "must be finite and >= 0");
  d::require_ld(a.ldx, a.rows, a.C, fn, "ldx");
  d::require_ld(a.ldy, a.rows, a.C, fn, "ldy");
  if (a.rows == 0) return;  // nothing is read or written
  d::require_matrix_ptr(a.x, a.dtype, fn, "x");
  d::require_matrix_ptr(a.y, a.dtype, fn, "y");
  require_not_null(a.gamma, fn, "gamma");
  require_not_null(a.beta, fn, "beta");
  require_not_null(a.mean, fn, "mean");
  require_not_null(a.rstd, fn, "rstd");
  require_aligned(a.gamma, alignof(float), fn, "gamma");
  require_aligned(a.beta, alignof(float), fn, "beta");
  require_aligned(a.mean, alignof(float), fn, "mean");
  require_aligned(a.rstd, alignof(float), fn, "rstd");

  const std::size_t params = static_cast<std::size_t>(a.C) * sizeof(float);
  const std::size_t stats = static_cast<std::size_t>(a.rows) * sizeof(float);
  const d::Range x{a.x, d::matrix_span_bytes(a.rows, a.C, a.ldx, a.dtype), "x"};
  const d::Range y{a.y, d::matrix_span_bytes(a.rows, a.C, a.ldy, a.dtype), "y"};
  const d::Range gamma{a.gamma, params, "gamma"}, beta{a.beta, params, "beta"};
  const d::Range mean{a.mean, stats, "mean"}, rstd{a.rstd, stats, "rstd"};
  d::require_disjoint(y, {x, gamma, beta, mean, rstd}, fn);
  d::require_disjoint(mean, {x, gamma, beta, rstd}, fn);
  d::require_disjoint(rstd, {x, gamma, beta}, fn);
}

}  // namespace course::m04

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// y = LayerNorm(x) * gamma + beta per row, and the row statistics mean, rstd;
    /// asynchronous on args.stream.
    void layer_norm_forward(::course::m04::LayerNormStep step, const ::course::m04::LayerNormArgs& args);)

#include "module04/layer_norm_backward.hpp"
