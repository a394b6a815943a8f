#pragma once
/// @file adamw.hpp
/// @brief Module 4 API: one AdamW step over ALL parameters of a model (a list of fp32
/// tensors), with global gradient-norm clipping and an optional bf16 copy of each updated
/// tensor, as a ladder of steps.
///
/// ## The update (torch.optim.AdamW, decoupled weight decay, its fused kernel's order)
/// For every element of every tensor, with t = args.t >= 1 and s the clip scale:
///
///     g  = s * grad                                  (torch.nn.utils.clip_grad_norm_ scales
///                                                     the grads in place first; here on the fly)
///     p  = p - (lr * weight_decay) * p               (only tensors with decay = true)
///     m  = beta1 * m + (1 - beta1) * g
///     v  = beta2 * v + (1 - beta2) * g * g
///     denom = sqrt(v) / sqrt(1 - beta2^t) + eps
///     p  = p - (lr / (1 - beta1^t)) * m / denom
///     bf16 = round_to_nearest_even(p)                (only tensors with a bf16 copy)
///
/// This is the order of PyTorch's fused AdamW (aten/src/ATen/native/cuda/fused_adam_utils.cuh,
/// ADAM_MODE::ADAMW): decay of the OLD p first, then the moments, then the step with the
/// bias corrections folded into step_size = lr / (1 - beta1^t) and sqrt(1 - beta2^t). The
/// constants are computed on the host in double and rounded to fp32 once; the kernels do
/// every per-element operation in fp32 (torch's fused kernel evaluates some of them in
/// double before rounding: the results agree to a few ulp, not bit for bit).
///
/// ## Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_)
///     norm = sqrt(sum over all tensors i, all elements j of grad_ij^2)
///     s    = min(1, max_norm / (norm + 1e-6))        if max_norm > 0, else s = 1
/// The norm is computed on the device and never leaves it: the update kernels read s from
/// device memory (no host synchronization). args.grad_norm (optional) receives the norm,
/// for the trainer to print. A NaN or Inf gradient makes the norm, s and every update NaN,
/// as in PyTorch (clip_grad_norm_ with error_if_nonfinite = False).
///
/// ## The tensor list
/// args.tensors is a HOST array of args.num_tensors descriptors whose pointers are DEVICE
/// pointers. Each tensor is n contiguous fp32 elements of params (the fp32 master weights),
/// grads, m and v, plus an optional bf16 copy of params (the mixed-precision model's GEMMs
/// read it). Tensors may be any size >= 0 (0: skipped) and may start anywhere 4-byte aligned
/// (sub-buffers of one allocation at any element offset): a tensor whose params, grads, m, v
/// are all 16-byte aligned (and its bf16 copy 8-byte aligned) takes multi_tensor's float4
/// path, any other one that step's scalar path (same answer, slower).
///
/// ## Contract (checked by validate_adamw_args before any launch)
/// - num_tensors >= 0 (0: nothing to update; grad_norm, if given, is set to 0); tensors
///   non-null when num_tensors > 0; every n in [0, 2^40].
/// - params, grads, m, v non-null and 4-byte aligned for every tensor with n > 0; bf16 null
///   or 2-byte aligned.
/// - No two of the ranges written or read (params, grads, m, v, bf16 of every tensor, the
///   workspace, grad_norm) overlap: not within a tensor, not across tensors.
/// - t >= 1; lr and weight_decay finite and >= 0; beta1, beta2 in [0, 1); eps finite > 0;
///   max_norm finite (<= 0 disables clipping).
/// - workspace: >= adamw_workspace_bytes(step, tensors, num_tensors) bytes, 16-byte aligned
///   (the steps keep the clip scale, the per-tensor norms or the device tensor table there).
///   One workspace serves one call at a time (calls on one stream may share it).

#include "course/error.hpp"
#include "course/impl.hpp"
#include "course/validate.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

namespace course::m04 {

/// The AdamW ladder, in teaching order.
enum class AdamWStep {
  per_tensor,    ///< one scalar launch per tensor; norm = module 1's l2_norm per tensor, combined
  multi_tensor,  ///< one launch over the whole list (device table, chunks), float4, bf16 in the same pass
};

inline constexpr StepInfo<AdamWStep> kAdamWSteps[] = {
    {AdamWStep::per_tensor, "per_tensor",
     "one scalar launch per tensor; the norm is module 1's l2_norm per tensor, combined in a fixed order"},
    {AdamWStep::multi_tensor, "multi_tensor",
     "one launch over all tensors (device table + chunk map), float4, bf16 copy in the same pass"},
};
static_assert(steps_in_enum_order(kAdamWSteps), "kAdamWSteps must list AdamWStep in enum order");

/// The step's name as in the table ("per_tensor"), "?" for a value outside it.
inline const char* step_name(AdamWStep step) { return step_name_in(kAdamWSteps, step); }

/// One parameter tensor. All pointers are DEVICE pointers.
struct AdamWTensor {
  float* params = nullptr;             ///< [n] fp32 master weights, updated in place
  const float* grads = nullptr;        ///< [n] dL/dparams (read only; the clip is applied on the fly)
  float* m = nullptr;                  ///< [n] first moment (start at 0)
  float* v = nullptr;                  ///< [n] second moment (start at 0)
  __nv_bfloat16* bf16 = nullptr;       ///< [n] bf16 copy of the updated params, or null (none)
  std::int64_t n = 0;                  ///< elements (0: the tensor is skipped)
  bool decay = true;                   ///< weight decay on this tensor (matrices yes; LayerNorm, biases no)
};

/// Arguments of adamw(). Defaults are torch.optim.AdamW's (lr aside).
struct AdamWArgs {
  const AdamWTensor* tensors = nullptr;  ///< HOST array of num_tensors descriptors
  std::int64_t num_tensors = 0;
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  std::int64_t t = 0;             ///< the step number, >= 1: the bias corrections are 1 - beta^t
  float max_norm = 0.f;           ///< > 0: clip the global gradient norm to it; <= 0: no clipping
  float* grad_norm = nullptr;     ///< device float, or null: receives the global gradient norm (before clipping)
  void* workspace = nullptr;      ///< >= adamw_workspace_bytes(step, tensors, num_tensors), 16-byte aligned
  std::size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

/// The largest tensor (elements).
inline constexpr std::int64_t kAdamWMaxElements = std::int64_t{1} << 40;
/// multi_tensor: elements per chunk (one block each). 16384 floats = 64 KiB of each array.
inline constexpr std::int64_t kAdamWChunk = 16384;
/// Threads of a multi_tensor block (kAdamWChunk / 4 / kAdamWThreads = 16 float4 per thread).
inline constexpr int kAdamWThreads = 256;

namespace adamw_detail {

/// One row of multi_tensor's device table (lives in the workspace).
struct TableEntry {
  float* params;
  const float* grads;
  float* m;
  float* v;
  __nv_bfloat16* bf16;
  std::int64_t n;
  std::int32_t decay;  ///< 1: apply weight decay
  std::int32_t vec4;   ///< 1: params, grads, m, v 16-byte aligned and bf16 null or 8-byte aligned
};

inline std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }

/// Bytes of the two scalars every step keeps at the start of the workspace: the norm and
/// the clip scale (16 bytes, so what follows stays 16-byte aligned).
inline constexpr std::size_t kScalarBytes = 16;
/// per_tensor: module 1's l2_norm workspace (m01::kMaxReduceBlocks floats).
inline constexpr std::size_t kL2NormWorkspaceBytes = 1024 * sizeof(float);

inline std::int64_t chunks_of(std::int64_t n) { return (n + kAdamWChunk - 1) / kAdamWChunk; }

}  // namespace adamw_detail

/// Workspace bytes `step` needs for this tensor list:
///   per_tensor:   16 (norm, scale) + 4 per tensor (its norm) + 4 per tensor (the squares of
///                 its unaligned head) + 4 KiB (module 1's l2_norm)
///   multi_tensor: 16 + 56 per tensor (device table) + 8 per tensor + 8 (chunk map: the
///                 first chunk of every tensor) + 4 per chunk of 16384 elements (partial sums)
inline std::size_t adamw_workspace_bytes(AdamWStep step, const AdamWTensor* tensors, std::int64_t num_tensors) {
  namespace d = adamw_detail;
  if (num_tensors <= 0 || tensors == nullptr) return d::kScalarBytes;
  const auto t = static_cast<std::size_t>(num_tensors);
  if (step == AdamWStep::per_tensor)
    return d::kScalarBytes + 2 * d::round16(t * sizeof(float)) + d::kL2NormWorkspaceBytes;
  std::int64_t chunks = 0;
  for (std::int64_t i = 0; i < num_tensors; ++i) chunks += d::chunks_of(std::max<std::int64_t>(tensors[i].n, 0));
  return d::kScalarBytes + d::round16(t * sizeof(d::TableEntry)) + d::round16((t + 1) * sizeof(std::int64_t)) +
         d::round16(static_cast<std::size_t>(chunks) * sizeof(float));
}

/// Bytes one element costs each step (the benchmark credits them): read params, grads, m,
/// v (16), write params, m, v (12), + 2 with a bf16 copy, + 4 when the norm is computed
/// (grads read a second time, before the update: the norm must be known first).
inline double adamw_bytes_per_element(bool bf16_copy, bool norm) {
  return 28.0 + (bf16_copy ? 2.0 : 0.0) + (norm ? 4.0 : 0.0);
}

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_adamw_args(const AdamWArgs& a, AdamWStep step, const char* fn) {
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kAdamWSteps)), fn, "step", s, "is not an AdamWStep");
  require_arg(a.num_tensors >= 0 && a.num_tensors <= (std::int64_t{1} << 24), fn, "num_tensors", a.num_tensors,
              "must be in [0, 2^24]");
  require_arg(a.t >= 1, fn, "t", a.t,
              "must be >= 1 (AdamW counts steps from 1: the bias correction divides by 1 - beta^t)");
  require_arg(std::isfinite(a.lr) && a.lr >= 0.f, fn, "lr", a.lr, "must be finite and >= 0");
  require_arg(a.beta1 >= 0.f && a.beta1 < 1.f, fn, "beta1", a.beta1, "must be in [0, 1)");
  require_arg(a.beta2 >= 0.f && a.beta2 < 1.f, fn, "beta2", a.beta2, "must be in [0, 1)");
  require_arg(std::isfinite(a.eps) && a.eps > 0.f, fn, "eps", a.eps, "must be finite and > 0");
  require_arg(std::isfinite(a.weight_decay) && a.weight_decay >= 0.f, fn, "weight_decay", a.weight_decay,
              "must be finite and >= 0");
  require_arg(std::isfinite(a.max_norm), fn, "max_norm", a.max_norm, "must be finite (<= 0 disables clipping)");
  if (a.num_tensors > 0) require_not_null(a.tensors, fn, "tensors");
  require_aligned(a.grad_norm, alignof(float), fn, "grad_norm");

  // Every range read or written, for the overlap check below.
  struct Range {
    std::uintptr_t lo, hi;
    std::int64_t tensor;  // -1: not a tensor's
    const char* what;
  };
  std::vector<Range> ranges;
  ranges.reserve(static_cast<std::size_t>(a.num_tensors) * 5 + 2);
  const auto add = [&](const void* p, std::size_t bytes, std::int64_t i, const char* what) {
    if (p == nullptr || bytes == 0) return;
    const auto lo = reinterpret_cast<std::uintptr_t>(p);
    ranges.push_back({lo, lo + bytes, i, what});
  };
  const auto name = [](std::int64_t i, const char* field) {  // printed only if a check fails
    return validate::msg("tensors[", i, "].", field);
  };
  for (std::int64_t i = 0; i < a.num_tensors; ++i) {
    const AdamWTensor& t = a.tensors[i];
    require_arg(t.n >= 0 && t.n <= kAdamWMaxElements, fn, name(i, "n"), t.n, "must be in [0, 2^40]");
    if (t.n == 0) continue;
    require_not_null(t.params, fn, name(i, "params"));
    require_not_null(t.grads, fn, name(i, "grads"));
    require_not_null(t.m, fn, name(i, "m"));
    require_not_null(t.v, fn, name(i, "v"));
    require_aligned(t.params, alignof(float), fn, name(i, "params"));
    require_aligned(t.grads, alignof(float), fn, name(i, "grads"));
    require_aligned(t.m, alignof(float), fn, name(i, "m"));
    require_aligned(t.v, alignof(float), fn, name(i, "v"));
    require_aligned(t.bf16, alignof(__nv_bfloat16), fn, name(i, "bf16"));
    const std::size_t f32 = static_cast<std::size_t>(t.n) * sizeof(float);
    add(t.params, f32, i, "params");
    add(t.grads, f32, i, "grads");
    add(t.m, f32, i, "m");
    add(t.v, f32, i, "v");
    add(t.bf16, static_cast<std::size_t>(t.n) * sizeof(__nv_bfloat16), i, "bf16");
  }

  const std::size_t need = adamw_workspace_bytes(step, a.tensors, a.num_tensors);
  require_arg(a.workspace_bytes >= need, fn, "workspace_bytes", a.workspace_bytes,
              validate::msg("must be >= adamw_workspace_bytes(step, tensors, num_tensors) = ", need));
  require_not_null(a.workspace, fn, "workspace");
  require_aligned(a.workspace, 16, fn, "workspace");
  add(a.workspace, need, -1, "workspace");
  add(a.grad_norm, sizeof(float), -1, "grad_norm");

  // Sorted by start, two ranges overlap only if some pair of neighbours does (the range
  // right after the earlier one starts inside it too): O(R log R), not R^2 pairs.
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) { return x.lo < y.lo; });
  for (std::size_t k = 1; k < ranges.size(); ++k) {
    const Range &x = ranges[k - 1], &y = ranges[k];
    if (y.lo < x.hi) {
      const auto range_name = [&](const Range& r) { return r.tensor < 0 ? r.what : name(r.tensor, r.what).str(); };
      require_arg(false, fn, range_name(y), reinterpret_cast<const void*>(y.lo),
                  validate::msg("overlaps ", range_name(x), " (every buffer of every tensor must be distinct)"));
    }
  }
}

}  // namespace course::m04

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// One AdamW step over every tensor of args.tensors (with global-norm clipping when
    /// args.max_norm > 0), asynchronous on args.stream.
    void adamw(::course::m04::AdamWStep step, const ::course::m04::AdamWArgs& args);)
