#pragma once
/// @file training_ops.hpp
/// @brief Support ops of module 4's training demo: embedding lookup and its gradient, bias
/// (+ residual) add, softmax cross-entropy with its gradient, and the Adam update.
///
/// These are NOT a ladder and have no exercise: each is a plain, memory-bound kernel (the
/// embedding gradient: a short pipeline, a counting sort then segmented sums, because the
/// GPT demo's 16384 x 384 gradient made a naive kernel slow) that the demos (demos/train.cpp,
/// demos/gpt.cpp) need around the course's real kernels (module 2's GEMMs, module 3's
/// attention, this module's backward passes). They live in their own
/// library, module04_training_ops (solutions/module04_training/training_ops.cu), which the
/// demo and both builds of tests/test_training_ops.cpp link.
///
/// Every op is deterministic: no floating-point atomics, every sum in a fixed order, so a
/// training run repeated with the same seed gives the same bits. All pointers are DEVICE
/// pointers; every call is asynchronous on `stream`. Each validates its arguments first and
/// throws course::InvalidArgument naming the argument and its value (validate_* below);
/// values only the device sees (token ids, targets) cannot be checked there, so an invalid
/// one produces NaN where it is used instead of a silent wrong number (see each op).
///
/// Row-major matrices throughout; `rows` is batch * seq for per-token tensors, and row r
/// holds token r % seq of sequence r / seq.

#include "course/error.hpp"
#include "course/validate.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>

namespace course::m04 {

/// Largest element count / extent the kernels index with 32-bit ints.
inline constexpr std::int64_t kMaxTrainingExtent = std::numeric_limits<std::int32_t>::max();

// ----------------------------------------------------------------------------------------
// Embedding

/// out[r, c] = token_table[ids[r], c] + position_table[r % seq, c]   (r < batch*seq, c < dim)
/// An id outside [0, vocab) gives a row of NaN (device values cannot be checked on the host).
struct EmbeddingArgs {
  const std::int32_t* ids = nullptr;     ///< [batch*seq] token ids
  const float* token_table = nullptr;    ///< [vocab, dim]
  const float* position_table = nullptr; ///< [seq, dim], or null: no positional term
  float* out = nullptr;                  ///< [batch*seq, dim]
  std::int64_t batch = 0, seq = 0, vocab = 0, dim = 0;
  cudaStream_t stream = nullptr;
};

/// The gradients of embedding_forward, overwritten (not accumulated into):
///   token_grad[v, c]    = sum over rows r with ids[r] == v of dout[r, c]
///   position_grad[i, c] = sum over b of dout[b*seq + i, c]
/// Rows with an id outside [0, vocab) add to no token (but to their position). Either
/// gradient may be null (not computed), not both.
///
/// Deterministic: the token sums run over each id's rows in ascending row order, in fixed
/// segments of kEmbeddingSegmentRows sorted rows whose partial sums are added in ascending
/// order (so a frequent id is split across many warps, yet the bits never change); a
/// position's sum runs over b ascending. How (solutions/module04_training/training_ops.cu):
/// a stable counting sort of the rows by id (per-tile histograms, one scan, a scatter),
/// then a warp per (segment of the sorted rows, 128 columns), then one combine pass.
/// The sort and the partial sums live in `workspace` (needed only when token_grad is set).
struct EmbeddingBackwardArgs {
  const std::int32_t* ids = nullptr;  ///< [batch*seq]
  const float* dout = nullptr;        ///< [batch*seq, dim], dL/d(out)
  float* token_grad = nullptr;        ///< [vocab, dim] or null
  float* position_grad = nullptr;     ///< [seq, dim] or null
  std::int64_t batch = 0, seq = 0, vocab = 0, dim = 0;
  /// >= embedding_backward_workspace_bytes(batch, seq, vocab, dim), 16-byte aligned, when
  /// token_grad is set (ignored, may be null, when only position_grad is computed).
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

/// Rows of the sorted order one warp sums per column strip in embedding_backward (an id with
/// more rows is split into partial sums at multiples of this in the sorted order).
inline constexpr std::int64_t kEmbeddingSegmentRows = 64;

namespace detail {

/// Tiles of embedding_backward's counting sort (one warp counts a tile of rows): one per
/// 256 rows, but at most max(2^16, 16 vocab) / vocab, so that the [vocab, tiles] count
/// table stays small, and below 2^31 entries. Non-decreasing in rows (a workspace sized for
/// the most rows serves fewer).
inline std::int64_t embedding_sort_max_tiles(std::int64_t rows, std::int64_t vocab) {
  const std::int64_t budget = std::max<std::int64_t>(std::int64_t{1} << 16, 16 * vocab);
  const std::int64_t tiles = std::min((rows + 255) / 256, std::max<std::int64_t>(1, budget / vocab));
  return std::max<std::int64_t>(1, std::min(tiles, kMaxTrainingExtent / vocab));
}

/// Byte offsets of the parts of embedding_backward's workspace (each 256-byte aligned).
struct EmbeddingBackwardWorkspaceLayout {
  std::size_t counts = 0;   ///< int32 [vocab * tiles]: per-tile counts, then their exclusive scan
  std::size_t starts = 0;   ///< int32 [vocab + 1]: first sorted position of each id; [vocab] = valid rows
  std::size_t ranks = 0;    ///< int32 [rows]: a row's rank among its id's rows in its tile
  std::size_t sorted_rows = 0, sorted_ids = 0;  ///< int32 [rows] each: the rows in (id, row) order
  std::size_t partials = 0; ///< float [2 * segments, dim]: sums of the ids split across segments
  std::size_t total = 0;
  std::int64_t tile_rows = 0, tiles = 0, segments = 0;  ///< rows per sort tile, sort tiles, segments
};

inline EmbeddingBackwardWorkspaceLayout embedding_backward_workspace_layout(std::int64_t rows, std::int64_t vocab,
                                                                            std::int64_t dim) {
  EmbeddingBackwardWorkspaceLayout l;
  const std::int64_t max_tiles = embedding_sort_max_tiles(rows, vocab);
  l.tile_rows = ((rows + max_tiles - 1) / max_tiles + 31) / 32 * 32;  // a multiple of 32
  l.tiles = (rows + l.tile_rows - 1) / l.tile_rows;                    // <= max_tiles
  l.segments = (rows + kEmbeddingSegmentRows - 1) / kEmbeddingSegmentRows;
  const auto part = [&l](std::size_t bytes) {
    const std::size_t at = l.total;
    l.total += (bytes + 255) / 256 * 256;
    return at;
  };
  const auto n = [](std::int64_t count, std::size_t size) { return static_cast<std::size_t>(count) * size; };
  l.counts = part(n(vocab * max_tiles, sizeof(std::int32_t)));
  l.starts = part(n(vocab + 1, sizeof(std::int32_t)));
  l.ranks = part(n(rows, sizeof(std::int32_t)));
  l.sorted_rows = part(n(rows, sizeof(std::int32_t)));
  l.sorted_ids = part(n(rows, sizeof(std::int32_t)));
  l.partials = part(n(2 * l.segments, sizeof(float)) * static_cast<std::size_t>(dim));
  return l;
}

}  // namespace detail

/// Scratch of embedding_backward() when it computes token_grad (0 for shapes out of range).
inline std::size_t embedding_backward_workspace_bytes(std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                                                      std::int64_t dim) {
  if (batch <= 0 || seq <= 0 || vocab <= 0 || dim <= 0 || batch > kMaxTrainingExtent / seq) return 0;
  return detail::embedding_backward_workspace_layout(batch * seq, vocab, dim).total;
}

// ----------------------------------------------------------------------------------------
// Bias and residual

/// y[r, c] += bias[c] + residual[r, c], in place on y (the output of a GEMM, which has no
/// bias term). bias or residual may be null (that term is skipped), not both.
struct BiasAddArgs {
  float* y = nullptr;               ///< [rows, cols], row stride ldy
  const float* bias = nullptr;      ///< [cols] or null
  const float* residual = nullptr;  ///< [rows, cols], row stride ldr, or null; must not overlap y
  std::int64_t rows = 0, cols = 0;
  std::int64_t ldy = 0;  ///< 0 selects cols
  std::int64_t ldr = 0;  ///< 0 selects cols
  cudaStream_t stream = nullptr;
};

// ----------------------------------------------------------------------------------------
// Softmax cross-entropy

/// For every row r with targets[r] != -1 (the "counted" rows, count C):
///   p[r, :]      = softmax(logits[r, :])
///   loss         = (1/C) * sum_r ( logsumexp(logits[r, :]) - logits[r, targets[r]] )
///   dlogits[r,:] = (p[r, :] - onehot(targets[r])) / C      (dL/dlogits of that mean loss)
///   correct      = #{ r : argmax_j logits[r, j] == targets[r] }   (ties: the lowest j)
/// Rows with target -1 are ignored: dlogits 0, no loss, not counted. A target outside
/// [-1, classes) makes that row's loss and gradient NaN. With C = 0: loss 0, dlogits 0.
/// Three small kernels: count the targets (one block), a warp per row, then one block that
/// sums the per-row losses in a fixed order (workspace: cross_entropy_workspace_bytes()).
struct CrossEntropyArgs {
  const float* logits = nullptr;        ///< [rows, classes], row stride ld
  const std::int32_t* targets = nullptr;  ///< [rows], class index or -1 (ignored)
  float* dlogits = nullptr;             ///< [rows, classes], row stride ld, or null (loss only); must not overlap logits
  float* loss = nullptr;                ///< one float: the mean loss over counted rows
  std::int32_t* correct = nullptr;      ///< one int: counted rows predicted right, or null
  std::int32_t* counted = nullptr;      ///< one int: C, or null
  std::int64_t rows = 0, classes = 0;
  std::int64_t ld = 0;                  ///< 0 selects classes
  void* workspace = nullptr;            ///< >= cross_entropy_workspace_bytes(rows)
  std::size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

/// Scratch of cross_entropy(): per-row loss and verdict, plus the count.
inline std::size_t cross_entropy_workspace_bytes(std::int64_t rows) {
  if (rows <= 0) return 0;
  return static_cast<std::size_t>(rows) * (sizeof(float) + sizeof(std::int32_t)) + 16;
}

// ----------------------------------------------------------------------------------------
// Adam

/// One Adam step (Kingma & Ba), bias-corrected, fp32 moments, elementwise over n values:
///   m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
///   p = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
/// t = step, counted from 1. The bias corrections are computed on the host in double.
struct AdamArgs {
  float* params = nullptr;       ///< [n], updated in place
  const float* grads = nullptr;  ///< [n]; must not overlap params, m or v
  float* m = nullptr;            ///< [n] first moment, start at 0
  float* v = nullptr;            ///< [n] second moment, start at 0
  std::int64_t n = 0;
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  std::int64_t step = 0;  ///< t >= 1
  cudaStream_t stream = nullptr;
};

// ----------------------------------------------------------------------------------------
// Validation (run by every op before any launch)

namespace detail {

inline bool byte_ranges_intersect(const void* p, std::size_t bytes_p, const void* q, std::size_t bytes_q) {
  if (p == nullptr || q == nullptr || bytes_p == 0 || bytes_q == 0) return false;
  const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(q);
  return a < b + bytes_q && b < a + bytes_p;
}

inline void require_extent(std::int64_t value, const char* fn, const char* name) {
  require_arg(value >= 1 && value <= kMaxTrainingExtent, fn, name, value, "must be in [1, 2^31 - 1]");
}

/// rows * cols (or a leading dimension times rows) must stay below 2^31: the kernels index
/// elements with 32-bit ints.
inline void require_elements(std::int64_t rows, std::int64_t ld, const char* fn, const char* name) {
  require_arg(rows <= kMaxTrainingExtent / ld, fn, name, rows * ld,
              "(elements spanned) must be <= 2^31 - 1: the kernels index with 32-bit ints");
}

}  // namespace detail

inline void validate_embedding_args(const EmbeddingArgs& a, const char* fn = "embedding_forward") {
  detail::require_extent(a.batch, fn, "batch");
  detail::require_extent(a.seq, fn, "seq");
  detail::require_extent(a.vocab, fn, "vocab");
  detail::require_extent(a.dim, fn, "dim");
  detail::require_elements(a.batch * a.seq, a.dim, fn, "batch * seq * dim");
  detail::require_elements(a.vocab, a.dim, fn, "vocab * dim");
  require_not_null(a.ids, fn, "ids");
  require_not_null(a.token_table, fn, "token_table");
  require_not_null(a.out, fn, "out");
  require_aligned(a.ids, alignof(std::int32_t), fn, "ids");
  require_aligned(a.token_table, alignof(float), fn, "token_table");
  require_aligned(a.position_table, alignof(float), fn, "position_table");
  require_aligned(a.out, alignof(float), fn, "out");
  const std::size_t out_bytes = static_cast<std::size_t>(a.batch * a.seq * a.dim) * sizeof(float);
  require_arg(!detail::byte_ranges_intersect(a.out, out_bytes, a.token_table,
                                             static_cast<std::size_t>(a.vocab * a.dim) * sizeof(float)),
              fn, "out", static_cast<const void*>(a.out), "overlaps token_table");
  require_arg(!detail::byte_ranges_intersect(a.out, out_bytes, a.position_table,
                                             static_cast<std::size_t>(a.seq * a.dim) * sizeof(float)),
              fn, "out", static_cast<const void*>(a.out), "overlaps position_table");
  require_arg(!detail::byte_ranges_intersect(a.out, out_bytes, a.ids,
                                             static_cast<std::size_t>(a.batch * a.seq) * sizeof(std::int32_t)),
              fn, "out", static_cast<const void*>(a.out), "overlaps ids");
}

inline void validate_embedding_backward_args(const EmbeddingBackwardArgs& a, const char* fn = "embedding_backward") {
  detail::require_extent(a.batch, fn, "batch");
  detail::require_extent(a.seq, fn, "seq");
  detail::require_extent(a.vocab, fn, "vocab");
  detail::require_extent(a.dim, fn, "dim");
  detail::require_elements(a.batch * a.seq, a.dim, fn, "batch * seq * dim");
  detail::require_elements(a.vocab, a.dim, fn, "vocab * dim");
  require_not_null(a.ids, fn, "ids");
  require_not_null(a.dout, fn, "dout");
  require_arg(a.token_grad != nullptr || a.position_grad != nullptr, fn, "token_grad",
              static_cast<const void*>(a.token_grad), "and position_grad are both null: nothing to compute");
  require_aligned(a.ids, alignof(std::int32_t), fn, "ids");
  require_aligned(a.dout, alignof(float), fn, "dout");
  require_aligned(a.token_grad, alignof(float), fn, "token_grad");
  require_aligned(a.position_grad, alignof(float), fn, "position_grad");
  const std::size_t dout_bytes = static_cast<std::size_t>(a.batch * a.seq * a.dim) * sizeof(float);
  const std::size_t ids_bytes = static_cast<std::size_t>(a.batch * a.seq) * sizeof(std::int32_t);
  const std::size_t tok_bytes = static_cast<std::size_t>(a.vocab * a.dim) * sizeof(float);
  const std::size_t pos_bytes = static_cast<std::size_t>(a.seq * a.dim) * sizeof(float);
  struct Range {
    const void* p;
    std::size_t bytes;
    const char* name;
  };
  for (const Range& out : {Range{a.token_grad, tok_bytes, "token_grad"}, Range{a.position_grad, pos_bytes, "position_grad"}})
    for (const Range& in : {Range{a.dout, dout_bytes, "dout"}, Range{a.ids, ids_bytes, "ids"}})
      require_arg(!detail::byte_ranges_intersect(out.p, out.bytes, in.p, in.bytes), fn, out.name, out.p,
                  validate::msg("overlaps ", in.name));
  require_arg(!detail::byte_ranges_intersect(a.token_grad, tok_bytes, a.position_grad, pos_bytes), fn,
              "position_grad", static_cast<const void*>(a.position_grad), "overlaps token_grad");
  if (a.token_grad == nullptr) return;  // the workspace serves the token gradient only
  require_not_null(a.workspace, fn, "workspace");
  require_aligned(a.workspace, 16, fn, "workspace");
  const std::size_t need = embedding_backward_workspace_bytes(a.batch, a.seq, a.vocab, a.dim);
  require_arg(a.workspace_bytes >= need, fn, "workspace_bytes", a.workspace_bytes,
              validate::msg("must be >= embedding_backward_workspace_bytes(batch, seq, vocab, dim) = ", need));
  for (const Range& other : {Range{a.dout, dout_bytes, "dout"}, Range{a.ids, ids_bytes, "ids"},
                             Range{a.token_grad, tok_bytes, "token_grad"}, Range{a.position_grad, pos_bytes, "position_grad"}})
    require_arg(!detail::byte_ranges_intersect(a.workspace, need, other.p, other.bytes), fn, "workspace",
                a.workspace, validate::msg("overlaps ", other.name));
}

inline void validate_bias_add_args(const BiasAddArgs& a, const char* fn = "bias_add") {
  detail::require_extent(a.rows, fn, "rows");
  detail::require_extent(a.cols, fn, "cols");
  const std::int64_t ldy = a.ldy != 0 ? a.ldy : a.cols, ldr = a.ldr != 0 ? a.ldr : a.cols;
  require_arg(ldy >= a.cols, fn, "ldy", a.ldy, "must be 0 (= cols) or >= cols");
  require_arg(ldr >= a.cols, fn, "ldr", a.ldr, "must be 0 (= cols) or >= cols");
  detail::require_elements(a.rows, ldy, fn, "rows * ldy");
  detail::require_elements(a.rows, ldr, fn, "rows * ldr");
  require_not_null(a.y, fn, "y");
  require_arg(a.bias != nullptr || a.residual != nullptr, fn, "bias", static_cast<const void*>(a.bias),
              "and residual are both null: nothing to add");
  require_aligned(a.y, alignof(float), fn, "y");
  require_aligned(a.bias, alignof(float), fn, "bias");
  require_aligned(a.residual, alignof(float), fn, "residual");
  const std::size_t y_bytes = static_cast<std::size_t>((a.rows - 1) * ldy + a.cols) * sizeof(float);
  const std::size_t r_bytes = static_cast<std::size_t>((a.rows - 1) * ldr + a.cols) * sizeof(float);
  require_arg(!detail::byte_ranges_intersect(a.y, y_bytes, a.residual, r_bytes), fn, "residual",
              static_cast<const void*>(a.residual), "overlaps y (y is updated in place)");
  require_arg(!detail::byte_ranges_intersect(a.y, y_bytes, a.bias, static_cast<std::size_t>(a.cols) * sizeof(float)),
              fn, "bias", static_cast<const void*>(a.bias), "overlaps y (y is updated in place)");
}

inline void validate_cross_entropy_args(const CrossEntropyArgs& a, const char* fn = "cross_entropy") {
  detail::require_extent(a.rows, fn, "rows");
  detail::require_extent(a.classes, fn, "classes");
  const std::int64_t ld = a.ld != 0 ? a.ld : a.classes;
  require_arg(ld >= a.classes, fn, "ld", a.ld, "must be 0 (= classes) or >= classes");
  detail::require_elements(a.rows, ld, fn, "rows * ld");
  require_not_null(a.logits, fn, "logits");
  require_not_null(a.targets, fn, "targets");
  require_not_null(a.loss, fn, "loss");
  require_not_null(a.workspace, fn, "workspace");
  require_aligned(a.logits, alignof(float), fn, "logits");
  require_aligned(a.targets, alignof(std::int32_t), fn, "targets");
  require_aligned(a.dlogits, alignof(float), fn, "dlogits");
  require_aligned(a.loss, alignof(float), fn, "loss");
  require_aligned(a.correct, alignof(std::int32_t), fn, "correct");
  require_aligned(a.counted, alignof(std::int32_t), fn, "counted");
  require_aligned(a.workspace, 16, fn, "workspace");
  const std::size_t need = cross_entropy_workspace_bytes(a.rows);
  require_arg(a.workspace_bytes >= need, fn, "workspace_bytes", a.workspace_bytes,
              "must be >= cross_entropy_workspace_bytes(rows)");
  const std::size_t m_bytes = static_cast<std::size_t>((a.rows - 1) * ld + a.classes) * sizeof(float);
  require_arg(!detail::byte_ranges_intersect(a.dlogits, m_bytes, a.logits, m_bytes), fn, "dlogits",
              static_cast<const void*>(a.dlogits), "overlaps logits");
  struct Range {
    const void* p;
    std::size_t bytes;
    const char* name;
  };
  const Range ranges[] = {{a.logits, m_bytes, "logits"},
                          {a.targets, static_cast<std::size_t>(a.rows) * sizeof(std::int32_t), "targets"},
                          {a.dlogits, m_bytes, "dlogits"},
                          {a.loss, sizeof(float), "loss"},
                          {a.correct, sizeof(std::int32_t), "correct"},
                          {a.counted, sizeof(std::int32_t), "counted"},
                          {a.workspace, need, "workspace"}};
  // Outputs (dlogits onwards) must not overlap anything else.
  for (std::size_t i = 2; i < std::size(ranges); ++i)
    for (std::size_t j = 0; j < std::size(ranges); ++j)
      if (j != i && !(i == 2 && j == 0))  // dlogits vs logits is reported above
        require_arg(!detail::byte_ranges_intersect(ranges[i].p, ranges[i].bytes, ranges[j].p, ranges[j].bytes), fn,
                    ranges[i].name, ranges[i].p, validate::msg("overlaps ", ranges[j].name));
}

inline void validate_adam_args(const AdamArgs& a, const char* fn = "adam_update") {
  detail::require_extent(a.n, fn, "n");
  require_not_null(a.params, fn, "params");
  require_not_null(a.grads, fn, "grads");
  require_not_null(a.m, fn, "m");
  require_not_null(a.v, fn, "v");
  require_aligned(a.params, alignof(float), fn, "params");
  require_aligned(a.grads, alignof(float), fn, "grads");
  require_aligned(a.m, alignof(float), fn, "m");
  require_aligned(a.v, alignof(float), fn, "v");
  require_arg(std::isfinite(a.lr) && a.lr > 0.f, fn, "lr", a.lr, "must be finite and > 0");
  require_arg(a.beta1 >= 0.f && a.beta1 < 1.f, fn, "beta1", a.beta1, "must be in [0, 1)");
  require_arg(a.beta2 >= 0.f && a.beta2 < 1.f, fn, "beta2", a.beta2, "must be in [0, 1)");
  require_arg(std::isfinite(a.eps) && a.eps > 0.f, fn, "eps", a.eps, "must be finite and > 0");
  require_arg(a.step >= 1, fn, "step", a.step, "must be >= 1 (Adam counts steps from 1: the bias correction divides by 1 - beta^t)");
  const std::size_t bytes = static_cast<std::size_t>(a.n) * sizeof(float);
  const void* ptrs[] = {a.params, a.grads, a.m, a.v};
  const char* names[] = {"params", "grads", "m", "v"};
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j)
      require_arg(!detail::byte_ranges_intersect(ptrs[i], bytes, ptrs[j], bytes), fn, names[j], ptrs[j],
                  validate::msg("overlaps ", names[i]));
}

// ----------------------------------------------------------------------------------------
// The ops (solutions/module04_training/training_ops.cu, library module04_training_ops)

/// Embedding lookup plus positional embedding (see EmbeddingArgs).
void embedding_forward(const EmbeddingArgs& args);
/// Gradients of the token and position tables (see EmbeddingBackwardArgs).
void embedding_backward(const EmbeddingBackwardArgs& args);
/// y += bias (+ residual), in place (see BiasAddArgs).
void bias_add(const BiasAddArgs& args);
/// Mean softmax cross-entropy, its gradient and the correct count (see CrossEntropyArgs).
void cross_entropy(const CrossEntropyArgs& args);
/// One bias-corrected Adam step (see AdamArgs).
void adam_update(const AdamArgs& args);

}  // namespace course::m04
