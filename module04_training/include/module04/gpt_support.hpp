#pragma once
/// @file gpt_support.hpp
/// @brief Glue kernels of module 4's GPT trainer (demos/gpt.cpp) that are no ladder: dtype
/// conversions, the bias gradient of a bf16 dY (a deterministic column sum) and the batch
/// gather. Like training_ops.hpp they live in the support library module04_training_ops
/// (solutions/module04_training/gpt_support.cu), have no exercise, and validate their
/// arguments first (course::InvalidArgument naming the argument). Every op is deterministic
/// (no floating-point atomics) and asynchronous on `stream`; pointers are DEVICE pointers.

#include "course/error.hpp"
#include "module04/gpt_model.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace course::m04::gpt {

/// out[i] = bf16(in[i]) (round to nearest even), i < n. In place is not supported.
void convert_f32_to_bf16(const float* in, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream = nullptr);
/// out[i] = float(in[i]), i < n (exact).
void convert_bf16_to_f32(const __nv_bfloat16* in, float* out, std::int64_t n, cudaStream_t stream = nullptr);

/// The bias gradient of a linear layer whose dY is bf16: db[c] = sum_r dy[r * ld + c] (fp32
/// sums, overwritten). Two kernels: blocks of kBiasGradRowsPerPartial rows each write a
/// partial column sum (a thread per column, rows in order) to the workspace, then one
/// thread per column adds the partials in order: the same bits every run.
struct BiasGradBf16Args {
  const __nv_bfloat16* dy = nullptr;  ///< [rows, cols], row stride ld
  float* db = nullptr;                ///< [cols]
  std::int64_t rows = 0, cols = 0, ld = 0;
  float* workspace = nullptr;         ///< >= bias_grad_bf16_workspace_bytes(rows, cols)
  std::size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

/// Rows per partial sum of bias_grad_bf16 (16384 rows: 64 partials).
inline constexpr std::int64_t kBiasGradRowsPerPartial = 256;

inline std::int64_t bias_grad_partials(std::int64_t rows) {
  return std::max<std::int64_t>(1, (rows + kBiasGradRowsPerPartial - 1) / kBiasGradRowsPerPartial);
}
inline std::size_t bias_grad_bf16_workspace_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(bias_grad_partials(rows) * std::max<std::int64_t>(cols, 0)) * sizeof(float);
}

inline void validate_bias_grad_bf16_args(const BiasGradBf16Args& a, const char* fn = "bias_grad_bf16") {
  require_arg(a.rows >= 1 && a.rows <= 0x7fffffff, fn, "rows", a.rows, "must be in [1, 2^31 - 1]");
  require_arg(a.cols >= 1 && a.cols <= 0x7fffffff, fn, "cols", a.cols, "must be in [1, 2^31 - 1]");
  require_arg(a.ld >= a.cols, fn, "ld", a.ld, "must be >= cols");
  require_not_null(a.dy, fn, "dy");
  require_not_null(a.db, fn, "db");
  require_not_null(a.workspace, fn, "workspace");
  require_aligned(a.db, alignof(float), fn, "db");
  require_aligned(a.workspace, alignof(float), fn, "workspace");
  require_arg(a.workspace_bytes >= bias_grad_bf16_workspace_bytes(a.rows, a.cols), fn, "workspace_bytes",
              a.workspace_bytes, "must be >= bias_grad_bf16_workspace_bytes(rows, cols)");
}

/// db = column sums of dy (see BiasGradBf16Args).
void bias_grad_bf16(const BiasGradBf16Args& args);

/// One batch of the sampler gpt_batch_offset(): for b < batch, t < context,
///   ids[b * context + t]     = tokens[o_b + t]
///   targets[b * context + t] = tokens[o_b + t + 1],   o_b = gpt_batch_offset(seed, split, step, b, n, context)
/// computed on the device from the token file uploaded once (no copy per step).
struct GptBatchArgs {
  const std::uint8_t* tokens = nullptr;  ///< the token file's ids (token_bytes each, little-endian)
  std::int64_t num_tokens = 0;           ///< > context
  int token_bytes = 1;                   ///< 1 or 2
  std::uint64_t seed = 0, split = 0, step = 0;
  std::int64_t batch = 0, context = 0;
  std::int32_t* ids = nullptr;      ///< [batch * context]
  std::int32_t* targets = nullptr;  ///< [batch * context]
  cudaStream_t stream = nullptr;
};

inline void validate_gpt_batch_args(const GptBatchArgs& a, const char* fn = "gpt_make_batch") {
  require_arg(a.context >= 1, fn, "context", a.context, "must be >= 1");
  require_arg(a.num_tokens > a.context, fn, "num_tokens", a.num_tokens,
              "must be > context (one sequence and its targets)");
  require_arg(a.token_bytes == 1 || a.token_bytes == 2, fn, "token_bytes", a.token_bytes, "must be 1 or 2");
  require_arg(a.batch >= 1 && a.batch * a.context <= 0x7fffffff, fn, "batch", a.batch,
              "must be >= 1 with batch * context <= 2^31 - 1");
  require_not_null(a.tokens, fn, "tokens");
  require_not_null(a.ids, fn, "ids");
  require_not_null(a.targets, fn, "targets");
  require_aligned(a.ids, alignof(std::int32_t), fn, "ids");
  require_aligned(a.targets, alignof(std::int32_t), fn, "targets");
}

/// Fills ids and targets for one batch (see GptBatchArgs).
void gpt_make_batch(const GptBatchArgs& args);

}  // namespace course::m04::gpt
