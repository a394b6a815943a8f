#pragma once
/// @file layer_norm_backward.hpp
/// @brief Module 4 API: the LayerNorm backward pass (the forward is in layer_norm.hpp), as
/// a ladder of steps of its own (the course tool lists it as `layer_norm_backward/<step>`).
///
/// With xhat = (x - mean) * rstd (recomputed from the forward's saved statistics) and
/// g = dy * gamma, per row r:
///
///     dx(r, c)  = rstd_r * (g(r, c) - mean_c(g(r, .)) - xhat(r, c) * mean_c(g(r, .) * xhat(r, .)))
///     dgamma[c] = sum_r dy(r, c) * xhat(r, c)
///     dbeta[c]  = sum_r dy(r, c)
///
/// dx is a per-row job (two sums over the row, then an element-wise pass); dgamma and dbeta
/// are per-COLUMN sums over all rows: the two directions of reduction are what makes this
/// op interesting. Worked example (C = 2, one row, gamma = 1): x = [0, 2] gives mean 1,
/// rstd 1 (eps = 0), xhat = [-1, 1]; dy = [1, 3]: g = [1, 3], mean(g) = 2,
/// mean(g * xhat) = 1, dx = [1 - 2 + 1, 3 - 2 - 1] = [0, 0]; dgamma = [-1, 3], dbeta = [1, 3].
///
/// ## Memory layout and dtypes
/// x, dy and dx are rows x C, row-major with their own row strides (elements), one dtype
/// (args.dtype: f32 or bf16). gamma, mean, rstd, dgamma, dbeta are fp32.
///
/// ## Contract (checked by validate_layer_norm_backward_args before any launch)
/// - rows in [0, 2^31 - 1], C in [1, 2^31 - 1], dtype f32 or bf16; ldx, lddy, lddx >= C.
/// - rows = 0: dx is empty; dgamma and dbeta are zeroed (sums over no rows) unless
///   accumulate_dparams, then nothing is written. With rows = 0, x, dy, dx, mean, rstd and
///   the workspace may be null.
/// - accumulate_dx: dx += the gradient (the GPT adds LayerNorm's dx into the residual
///   stream's gradient); else dx = the gradient. accumulate_dparams: dgamma += ...,
///   dbeta += ... (gradient accumulation over micro-batches); else they are overwritten.
/// - Pointers non-null (except as above) and aligned to their element; no vector alignment
///   is required (16-byte accesses only where every pointer and stride allows them).
/// - No output overlaps any other operand: dx is disjoint from x, dy, gamma, mean, rstd,
///   dgamma, dbeta and the workspace (in place over dy is NOT supported); dgamma and dbeta
///   are disjoint from each other and from every input.
/// - Steps partial_sums and pipelined need layer_norm_backward_workspace_bytes(step, rows, C)
///   bytes of workspace (16-byte aligned, disjoint from every other operand); atomic_params
///   none.
/// - atomic_params is nondeterministic (fp32 atomics add in arrival order: dgamma, dbeta
///   differ in the last bits from run to run); partial_sums and pipelined are bit-identical
///   across runs on one GPU (pipelined's number of partials follows the GPU's SM count).

#include "module04/layer_norm.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace course::m04 {

/// The LayerNorm backward ladder, in teaching order.
enum class LayerNormBackwardStep {
  atomic_params,  ///< warp per row, dx in one pass; dgamma, dbeta by fp32 atomicAdd (nondeterministic)
  partial_sums,   ///< per-block partial dgamma/dbeta in a workspace, reduced in a fixed order; vectorized
  pipelined,      ///< partial_sums with the column sums in shared memory and a one-wave, prefetching grid
};

inline constexpr StepInfo<LayerNormBackwardStep> kLayerNormBackwardSteps[] = {
    {LayerNormBackwardStep::atomic_params, "atomic_params",
     "a warp per row computes dx and adds dy * xhat and dy into dgamma, dbeta with fp32 atomics (nondeterministic)"},
    {LayerNormBackwardStep::partial_sums, "partial_sums",
     "16-byte loads; each block sums its rows' dgamma, dbeta in registers into a partial, a second kernel "
     "adds the partials in a fixed order (deterministic)"},
    {LayerNormBackwardStep::pipelined, "pipelined",
     "partial_sums with each warp's column sums in shared memory (two blocks per SM) and a one-wave grid whose "
     "warps prefetch their next row"},
};
static_assert(steps_in_enum_order(kLayerNormBackwardSteps),
              "kLayerNormBackwardSteps must list LayerNormBackwardStep in order");

/// The step's name as in the table ("partial_sums"), "?" for a value outside it.
inline const char* step_name(LayerNormBackwardStep step) { return step_name_in(kLayerNormBackwardSteps, step); }

/// Rows (warps) per block of the backward kernels.
inline constexpr int kLayerNormBackwardRowsPerBlock = 8;
/// The most blocks partial_sums launches (each writes one partial of 2 x C floats): 256
/// blocks of 8 warps keep ~16 warps per SM busy on an H100, and at C = 768 the partials
/// are 1.5 MiB, ~4% of the bf16 traffic of 16384 rows.
inline constexpr std::int64_t kLayerNormMaxPartials = 256;

/// Number of partials (blocks) partial_sums uses for `rows` rows.
inline std::int64_t layer_norm_backward_partials(std::int64_t rows) {
  return std::min<std::int64_t>((rows + kLayerNormBackwardRowsPerBlock - 1) / kLayerNormBackwardRowsPerBlock,
                                kLayerNormMaxPartials);
}

/// Workspace bytes `step` needs: partial_sums and pipelined keep partials x 2 x C floats
/// (each block's dgamma and dbeta contributions; pipelined may use fewer); atomic_params none.
inline std::size_t layer_norm_backward_workspace_bytes(LayerNormBackwardStep step, std::int64_t rows,
                                                       std::int64_t C) {
  if (step == LayerNormBackwardStep::atomic_params || rows <= 0 || C <= 0) return 0;
  return static_cast<std::size_t>(layer_norm_backward_partials(rows)) * 2 * static_cast<std::size_t>(C) *
         sizeof(float);
}

/// Device-side arguments of layer_norm_backward. All pointers are device pointers.
struct LayerNormBackwardArgs {
  DType dtype = DType::f32;      ///< of x, dy and dx: f32 or bf16
  const void* x = nullptr;       ///< the forward's input, rows x C, row stride ldx
  const void* dy = nullptr;      ///< dL/dy, rows x C, row stride lddy
  void* dx = nullptr;            ///< dL/dx, rows x C, row stride lddx (= or +=, accumulate_dx)
  const float* gamma = nullptr;  ///< [C]
  const float* mean = nullptr;   ///< [rows], from layer_norm_forward
  const float* rstd = nullptr;   ///< [rows], from layer_norm_forward
  float* dgamma = nullptr;       ///< [C] out (= or +=, accumulate_dparams)
  float* dbeta = nullptr;        ///< [C] out (= or +=, accumulate_dparams)
  std::int64_t rows = 0;
  std::int64_t C = 0;
  std::int64_t ldx = 0;   ///< row stride of x (>= C)
  std::int64_t lddy = 0;  ///< ... of dy (>= C)
  std::int64_t lddx = 0;  ///< ... of dx (>= C)
  bool accumulate_dx = false;
  bool accumulate_dparams = false;
  void* workspace = nullptr;        ///< scratch, only for partial_sums
  std::size_t workspace_bytes = 0;  ///< >= layer_norm_backward_workspace_bytes(step, rows, C)
  cudaStream_t stream = nullptr;
};

/// Arguments for contiguous x, dy, dx (every ld = C), no accumulation, no workspace.
inline LayerNormBackwardArgs contiguous_layer_norm_backward_args(DType dtype, const void* x, const void* dy, void* dx,
                                                                 const float* gamma, const float* mean,
                                                                 const float* rstd, float* dgamma, float* dbeta,
                                                                 std::int64_t rows, std::int64_t C,
                                                                 cudaStream_t stream = nullptr) {
  LayerNormBackwardArgs a;
  a.dtype = dtype;
  a.x = x;
  a.dy = dy;
  a.dx = dx;
  a.gamma = gamma;
  a.mean = mean;
  a.rstd = rstd;
  a.dgamma = dgamma;
  a.dbeta = dbeta;
  a.rows = rows;
  a.C = C;
  a.ldx = a.lddy = a.lddx = C;
  a.stream = stream;
  return a;
}

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_layer_norm_backward_args(const LayerNormBackwardArgs& a, LayerNormBackwardStep step,
                                              const char* fn) {
  namespace d = layer_norm_detail;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kLayerNormBackwardSteps)), fn, "step", s,
              "is not a LayerNormBackwardStep");
  d::validate_common(a.dtype, a.rows, a.C, fn);
  d::require_ld(a.ldx, a.rows, a.C, fn, "ldx");
  d::require_ld(a.lddy, a.rows, a.C, fn, "lddy");
  d::require_ld(a.lddx, a.rows, a.C, fn, "lddx");
  require_not_null(a.dgamma, fn, "dgamma");
  require_not_null(a.dbeta, fn, "dbeta");
  require_aligned(a.dgamma, alignof(float), fn, "dgamma");
  require_aligned(a.dbeta, alignof(float), fn, "dbeta");
  const std::size_t params = static_cast<std::size_t>(a.C) * sizeof(float);
  const d::Range dgamma{a.dgamma, params, "dgamma"}, dbeta{a.dbeta, params, "dbeta"};
  if (a.rows == 0) {
    d::require_disjoint(dgamma, {dbeta}, fn);
    return;
  }
  d::require_matrix_ptr(a.x, a.dtype, fn, "x");
  d::require_matrix_ptr(a.dy, a.dtype, fn, "dy");
  d::require_matrix_ptr(a.dx, a.dtype, fn, "dx");
  require_not_null(a.gamma, fn, "gamma");
  require_not_null(a.mean, fn, "mean");
  require_not_null(a.rstd, fn, "rstd");
  require_aligned(a.gamma, alignof(float), fn, "gamma");
  require_aligned(a.mean, alignof(float), fn, "mean");
  require_aligned(a.rstd, alignof(float), fn, "rstd");

  const std::size_t stats = static_cast<std::size_t>(a.rows) * sizeof(float);
  const d::Range x{a.x, d::matrix_span_bytes(a.rows, a.C, a.ldx, a.dtype), "x"};
  const d::Range dy{a.dy, d::matrix_span_bytes(a.rows, a.C, a.lddy, a.dtype), "dy"};
  const d::Range dx{a.dx, d::matrix_span_bytes(a.rows, a.C, a.lddx, a.dtype), "dx"};
  const d::Range gamma{a.gamma, params, "gamma"};
  const d::Range mean{a.mean, stats, "mean"}, rstd{a.rstd, stats, "rstd"};
  d::require_disjoint(dx, {x, dy, gamma, mean, rstd, dgamma, dbeta}, fn);
  d::require_disjoint(dgamma, {x, dy, gamma, mean, rstd, dbeta}, fn);
  d::require_disjoint(dbeta, {x, dy, gamma, mean, rstd}, fn);

  const std::size_t need = layer_norm_backward_workspace_bytes(step, a.rows, a.C);
  if (need > 0) {
    require_arg(a.workspace_bytes >= need, fn, "workspace_bytes", a.workspace_bytes,
                "must be >= layer_norm_backward_workspace_bytes(step, rows, C) (partial_sums keeps each block's "
                "dgamma, dbeta partial there)");
    require_not_null(a.workspace, fn, "workspace");
    require_aligned(a.workspace, 16, fn, "workspace");
    d::require_disjoint(d::Range{a.workspace, need, "workspace"}, {x, dy, dx, gamma, mean, rstd, dgamma, dbeta}, fn);
  }
}

}  // namespace course::m04

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// dx (= or +=), dgamma and dbeta (= or +=) of LayerNorm, asynchronous on args.stream.
    void layer_norm_backward(::course::m04::LayerNormBackwardStep step,
                             const ::course::m04::LayerNormBackwardArgs& args);)
