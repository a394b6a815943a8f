#pragma once
/// @file cross_entropy.hpp
/// @brief Module 4 API: fused softmax cross-entropy -- logits in, per-row loss, mean loss
/// and dlogits out in one pass over the logits -- as a ladder of steps, fp32 or bf16.
///
/// The last op of a language model's forward pass and the first of its backward pass. For
/// every row r (a token) with target t = targets[r] that is not ignore_index:
///
///     lse_r        = log sum_j exp(x_rj)              (computed as m + log sum_j exp(x_rj - m))
///     losses[r]    = lse_r - x_rt                      (-log softmax(x_r)[t])
///     loss_mean    = (1 / N) sum_r losses[r]           N = num_valid = rows with t != ignore_index
///     dlogits[r,j] = (softmax(x_r)_j - [j == t]) * dloss / N
///
/// Ignored rows (t == ignore_index) get losses[r] = 0 and dlogits[r, :] = 0 and are not
/// counted in N. Every dlogits row of a counted row sums to 0 (sum_j p_j = 1 = [t == t]).
/// The loss is never formed as log(softmax): lse - x_t has no log(0) however small p_t is.
///
/// Worked example (one row, V = 3): x = [1, 2, 3], t = 2: lse = 3.4076, loss = 0.4076,
/// p = [0.0900, 0.2447, 0.6652], dlogits = [0.0900, 0.2447, -0.3348] (dloss = 1, N = 1).
///
/// ## Why fused
/// PyTorch's F.cross_entropy + autograd runs log_softmax (reads x, writes log p), nll_loss,
/// then nll_loss_backward (a dense grad of log p, mostly zeros) and log_softmax_backward
/// (reads log p and that grad, writes dlogits): >= 5 passes over rows x V values. The fused
/// op reads the logits once and writes dlogits once (row_on_chip): 2 x rows x V x
/// sizeof(element) bytes, the least any implementation can move -- and in place
/// (dlogits == logits) it needs no second rows x V buffer at all.
///
/// ## num_valid without a host sync
/// N is known only on the device (it depends on the targets). Each call runs three kernels
/// on args.stream: (1) one block counts the targets != ignore_index into *num_valid
/// (reads 4 bytes per row); (2) the row kernel of the step reads *num_valid and scales the
/// gradient by dloss / N; (3) one block sums losses[] in a fixed order (double, a fixed
/// thread-to-row map and a fixed tree) into *loss_mean. No float atomics anywhere: the same
/// inputs give the same bits, run after run. (Alternative considered: every block counting
/// all targets itself reads rows x 4 bytes per block -- 64 KiB for each of 16384 blocks at
/// 16384 rows, as much L2 traffic as a bf16 row of 50304 logits.)
///
/// ## Memory layout
/// Row-major with row strides in elements: logit (r, j) is logits[r * ldl + j], its
/// gradient dlogits[r * lddl + j]; ldl, lddl >= vocab. Padding between rows is never read
/// or written. targets, losses: `rows` contiguous values.
///
/// ## Contract (checked by validate_cross_entropy_args before any launch)
/// - dtype: DType::f32 or DType::bf16, for both logits and dlogits (bf16: the math is fp32;
///   dlogits is rounded to bf16 once, at its store).
/// - rows in [0, 2^31 - 1]; vocab in [1, 2^31 - 1]. rows == 0 writes *num_valid = 0 and
///   *loss_mean = 0 and reads nothing (logits, targets, losses may then be null).
/// - logits, targets, losses, loss_mean, num_valid non-null (rows > 0), each aligned to its
///   element; dlogits null (forward only: losses, loss_mean and num_valid are still
///   written) or aligned to its element. No other alignment is required: the vector steps
///   use 16-byte loads only when the pointers are 16-byte aligned and the row strides keep
///   every row 16-byte aligned, and scalar loads otherwise (same answer, slower).
/// - In place: dlogits == logits with lddl == ldl is allowed for every step (a trainer
///   overwrites the logits with their gradient). Any other overlap of dlogits with logits
///   is rejected, as is any overlap between outputs or of an output with targets.
/// - targets[r] must be in [0, vocab) or equal ignore_index. The host cannot check this
///   without copying the targets back; a row whose target is neither gets losses[r] = NaN
///   and a NaN dlogits row (it counts in N, so loss_mean is NaN too), and no element
///   outside the row is ever read. PyTorch stops the process with a device-side assert.
/// - Every logit must be finite (a -inf logit, e.g. a masked vocabulary slot, is outside
///   the contract: exp(-inf - (-inf)) is NaN in the online merge).
/// - dloss finite (the GPT passes 1; a loss scale or a sum over micro-batches passes more).
///
/// ## All rows ignored (N = 0)
/// loss_mean = 0 and every dlogits row is 0 (as course::ref::cross_entropy). PyTorch
/// returns loss = NaN there (0 / 0 in nll_loss's mean) and a zero gradient; a training
/// loop that masks a whole batch is better served by 0.

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

namespace course::m04 {

/// The cross-entropy ladder, in teaching order.
enum class CrossEntropyStep {
  three_pass,   ///< block per row: max, sum of exp, loss and gradient -- three reads of the row
  online,       ///< block per row: online max and sum in one read, a second read for dlogits
  row_on_chip,  ///< the row read once into registers (16-byte loads), dlogits written once
};

inline constexpr StepInfo<CrossEntropyStep> kCrossEntropySteps[] = {
    {CrossEntropyStep::three_pass, "three_pass",
     "one block per row, three passes over global memory: row max, sum of exp, loss and gradient"},
    {CrossEntropyStep::online, "online",
     "online max and sum (module 1's softmax) in one read, a second read writes dlogits"},
    {CrossEntropyStep::row_on_chip, "row_on_chip",
     "the row read once into registers with 16-byte loads (lanes, a warp or a block per row by "
     "vocab), dlogits written once; longer rows fall back to online"},
};
static_assert(steps_in_enum_order(kCrossEntropySteps), "kCrossEntropySteps must list CrossEntropyStep in order");

/// The step's name as in the table ("online"), "?" for a value outside it.
inline const char* step_name(CrossEntropyStep step) { return step_name_in(kCrossEntropySteps, step); }

/// The longest row row_on_chip keeps in registers: a 1024-thread block x 8 vectors of
/// 16 bytes per thread (32 data registers, the 64-register budget of a 1024-thread block):
/// 128 KiB, i.e. 32768 fp32 or 65536 bf16 logits. Longer rows run the online step's
/// kernel (with 16-byte loads when aligned).
inline constexpr std::int64_t kCrossEntropyOnChipBytes = 1024 * 8 * 16;
inline constexpr std::int64_t cross_entropy_on_chip_max_vocab(DType dtype) {
  return kCrossEntropyOnChipBytes / (dtype == DType::bf16 ? 2 : 4);
}

/// PyTorch's default ignore_index.
inline constexpr std::int32_t kDefaultIgnoreIndex = -100;

/// Device-side arguments of cross_entropy. All pointers are device pointers.
struct FusedCrossEntropyArgs {
  DType dtype = DType::f32;               ///< of logits and dlogits: f32 or bf16
  const void* logits = nullptr;           ///< rows x vocab (float or __nv_bfloat16), row stride ldl
  const std::int32_t* targets = nullptr;  ///< [rows]: class in [0, vocab) or ignore_index
  float* losses = nullptr;                ///< out [rows]: lse - x_t, 0 on ignored rows
  float* loss_mean = nullptr;             ///< out [1]: mean of losses over counted rows (0 if none)
  std::int32_t* num_valid = nullptr;      ///< out [1]: N, rows whose target != ignore_index
  void* dlogits = nullptr;                ///< out rows x vocab, row stride lddl, or null (forward only);
                                          ///< may equal logits (in place, lddl == ldl)
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  std::int64_t ldl = 0;   ///< elements between consecutive rows of logits (>= vocab)
  std::int64_t lddl = 0;  ///< ... of dlogits (>= vocab; ignored when dlogits is null)
  std::int32_t ignore_index = kDefaultIgnoreIndex;
  float dloss = 1.f;      ///< dL/d loss_mean: dlogits is scaled by dloss / N
  cudaStream_t stream = nullptr;
};

/// Arguments for contiguous logits and dlogits (ldl = lddl = vocab).
inline FusedCrossEntropyArgs make_cross_entropy_args(DType dtype, const void* logits, const std::int32_t* targets,
                                                     float* losses, float* loss_mean, std::int32_t* num_valid,
                                                     void* dlogits, std::int64_t rows, std::int64_t vocab,
                                                     cudaStream_t stream = nullptr) {
  FusedCrossEntropyArgs a;
  a.dtype = dtype;
  a.logits = logits;
  a.targets = targets;
  a.losses = losses;
  a.loss_mean = loss_mean;
  a.num_valid = num_valid;
  a.dlogits = dlogits;
  a.rows = rows;
  a.vocab = vocab;
  a.ldl = a.lddl = vocab;
  a.stream = stream;
  return a;
}

/// Bytes of one logit (4 for f32, 2 for bf16; 0 for a dtype the op does not take).
inline constexpr std::size_t cross_entropy_element_bytes(DType dtype) {
  return dtype == DType::f32 ? 4 : dtype == DType::bf16 ? 2 : 0;
}

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_cross_entropy_args(const FusedCrossEntropyArgs& a, CrossEntropyStep step, const char* fn) {
  using validate::ranges_intersect;
  constexpr std::int64_t kMaxExtent = 0x7fffffff;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kCrossEntropySteps)), fn, "step", s,
              "is not a CrossEntropyStep");
  require_arg(a.dtype == DType::f32 || a.dtype == DType::bf16, fn, "dtype", to_string(a.dtype),
              "must be f32 or bf16");
  require_arg(a.rows >= 0 && a.rows <= kMaxExtent, fn, "rows", a.rows, "must be in [0, 2^31 - 1]");
  require_arg(a.vocab >= 1 && a.vocab <= kMaxExtent, fn, "vocab", a.vocab, "must be in [1, 2^31 - 1]");
  // (rows - 1) * ld + vocab elements must fit in int64 bytes (the kernels' offsets).
  const std::int64_t max_ld =
      (std::numeric_limits<std::int64_t>::max() / 4 - a.vocab) / (a.rows > 1 ? a.rows - 1 : 1);
  require_arg(a.ldl >= a.vocab && a.ldl <= max_ld, fn, "ldl", a.ldl,
              "must be >= vocab (row stride of logits, in elements) and keep offsets in int64");
  if (a.dlogits != nullptr)
    require_arg(a.lddl >= a.vocab && a.lddl <= max_ld, fn, "lddl", a.lddl,
                "must be >= vocab (row stride of dlogits, in elements) and keep offsets in int64");
  require_arg(std::isfinite(a.dloss), fn, "dloss", a.dloss, "must be finite");
  require_not_null(a.loss_mean, fn, "loss_mean");
  require_not_null(a.num_valid, fn, "num_valid");
  require_aligned(a.loss_mean, alignof(float), fn, "loss_mean");
  require_aligned(a.num_valid, alignof(std::int32_t), fn, "num_valid");
  require_arg(!ranges_intersect(a.loss_mean, sizeof(float), a.num_valid, sizeof(std::int32_t)), fn, "num_valid",
              static_cast<const void*>(a.num_valid), "overlaps loss_mean");
  if (a.rows == 0) return;  // only *num_valid and *loss_mean are written

  const std::size_t es = cross_entropy_element_bytes(a.dtype);
  require_not_null(a.logits, fn, "logits");
  require_not_null(a.targets, fn, "targets");
  require_not_null(a.losses, fn, "losses");
  require_aligned(a.logits, es, fn, "logits");
  require_aligned(a.targets, alignof(std::int32_t), fn, "targets");
  require_aligned(a.losses, alignof(float), fn, "losses");
  if (a.dlogits != nullptr) require_aligned(a.dlogits, es, fn, "dlogits");

  const std::size_t logits_bytes = static_cast<std::size_t>((a.rows - 1) * a.ldl + a.vocab) * es;
  const std::size_t rows_bytes = static_cast<std::size_t>(a.rows) * 4;
  struct Range {
    const void* p;
    std::size_t bytes;
    const char* name;
  };
  // Inputs first, then outputs; every output must be disjoint from everything before it
  // (dlogits may equal logits exactly: checked first).
  Range ranges[6] = {{a.logits, logits_bytes, "logits"},       {a.targets, rows_bytes, "targets"},
                     {a.loss_mean, sizeof(float), "loss_mean"}, {a.num_valid, sizeof(std::int32_t), "num_valid"},
                     {a.losses, rows_bytes, "losses"},          {nullptr, 0, "dlogits"}};
  if (a.dlogits != nullptr) {
    const std::size_t d_bytes = static_cast<std::size_t>((a.rows - 1) * a.lddl + a.vocab) * es;
    const bool in_place = a.dlogits == a.logits && a.lddl == a.ldl;
    require_arg(in_place || !ranges_intersect(a.dlogits, d_bytes, a.logits, logits_bytes), fn, "dlogits",
                static_cast<const void*>(a.dlogits),
                "overlaps logits; only the exact in-place case (dlogits == logits and lddl == ldl) is allowed");
    ranges[5] = {a.dlogits, d_bytes, "dlogits"};
  }
  for (int i = 2; i < 6; ++i)
    for (int j = (i == 5 ? 1 : 0); j < i; ++j)  // dlogits vs logits: checked above
      require_arg(ranges[i].p == nullptr || !ranges_intersect(ranges[i].p, ranges[i].bytes, ranges[j].p, ranges[j].bytes),
                  fn, ranges[i].name, ranges[i].p, validate::msg("overlaps ", ranges[j].name));
}

}  // namespace course::m04

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// Per-row losses, their mean, the count of counted rows and (unless args.dlogits is
    /// null) dlogits, asynchronously on args.stream.
    void cross_entropy(::course::m04::CrossEntropyStep step, const ::course::m04::FusedCrossEntropyArgs& args);)
