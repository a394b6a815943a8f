/// @file attention_backward.cu
/// @brief YOUR attention-backward ladder (module 4), fp32: the dispatcher and step row_dot,
/// the preprocessing both flash steps start with.
///
/// Read module04_training/README.md (the lesson: the softmax Jacobian, why D = rowsum(dO * O)
/// replaces it, the chain through attention) and include/module04/attention_backward.hpp
/// (the formulas, strides, the causal convention, grouped-query heads) first. Then, in order:
///   0. row_dot               (this file) row_dot_kernel: D_i = dO_i . O_i for every query row;
///                            for the flash steps also dQ = 0 and the dQ turn counters = 0
///   1. naive                 (attention_backward_naive.cu) recompute_p_kernel and the pipeline
///                            of GEMMs and softmax backward
///   2. flash                 (attention_backward_flash.cuh) the per-tile math of the K/V-parallel
///                            kernel: the masked P^T, dS, the dQ additions by atomics
///   3. flash_deterministic   (attention_backward_flash.cuh) dQ added in a fixed order: the K/V
///                            tiles take turns per query tile (`KvTileOrder::wait` and `KvTileOrder::pass`)
/// (Steps 1-3 are kAttentionBackwardSteps of module04/attention_backward.hpp.) Your files are
/// the solution's (solutions/module04_training/, the same names): the code outside the
/// `// @step` ... `// @end` regions -- launches, the flash kernel's loads and GEMMs -- is the
/// solution's, given; the regions are yours. The written flags are in
/// attention_backward_device.cuh.
/// Run the tests with:   ctest --preset default -L exercise -R AttentionBackward
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint attention_backward/<step>`
/// (all of them: exercises/module04_training/hints/attention_backward.md).

#include "attention_backward_device.cuh"

#include "module04/attention_backward.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::exercise {
namespace attn_bwd {
namespace {

/// D[r] = dO_r . O_r for rows r = (b*H + h)*N_q + i, and dQ row r = 0 when zero_dq; the
/// first row of each query tile of 64 resets that tile's turn counter when `turns` is set.
/// A group of `lanes` lanes (4, 8, 16 or 32: the power of two >= d/4, at most 32) handles one
/// row with float4 loads, so a warp covers 32 / lanes rows at once; the partial dot products
/// are summed with xor shuffles inside the group. Any strides (rows start 16-byte aligned).
__global__ void row_dot_kernel(const float* __restrict__ dout, AttentionStrides dos, const float* __restrict__ o,
                               AttentionStrides os, float* __restrict__ dq, AttentionStrides dqs,
                               float* __restrict__ d_out, int* __restrict__ turns, int q_tiles, int heads,
                               int seq_q, long long rows, int chunks, int lanes, bool zero_dq) {
  // @step row_dot
  // TODO(row_dot): D[r] = dO_r . O_r into d_out[r] for the rows r < rows, r = (b*H + h)*N_q + i:
  // bh = r / seq_q, i = r % seq_q, b = bh / heads, h = bh % heads. The rows of dO and O are at
  // dout + row_offset(dos, b, h, i) and o + row_offset(os, b, h, i), 4 * chunks floats long and
  // 16-byte aligned (float4 loads are allowed). When zero_dq, also set dQ's row (at
  // dq + row_offset(dqs, b, h, i)) to 0: both flash steps add into dQ. When turns is not null
  // (flash_deterministic), the first row of each query tile (i % m04::kFlashBackwardQTile == 0)
  // also resets its tile's turn counter: turns[bh * q_tiles + i / m04::kFlashBackwardQTile] = 0.
  // One thread per row (a grid-stride loop over r) is enough; `lanes` is the solution's
  // choice (a group of lanes per row, float4 loads, a shuffle reduction): ignore it at first.
  // Then set kRowDotWritten (attention_backward_device.cuh) to true.
  // Hints, one at a time: bash scripts/course.sh hint attention_backward/row_dot
  (void)dout, (void)dos, (void)o, (void)os, (void)dq, (void)dqs, (void)d_out, (void)turns;
  (void)q_tiles, (void)heads, (void)seq_q, (void)rows, (void)chunks, (void)lanes, (void)zero_dq;
  // @end
}

}  // namespace

void launch_row_dot(const m04::AttentionBackwardArgs& a, float* d, bool zero_dq, int* turns) {
  // @step row_dot
  if (!kRowDotWritten) throw NotImplemented("attention_backward: row_dot_kernel (step row_dot, the preprocessing)", __FILE__);
  // @end
  const int chunks = static_cast<int>(a.head_dim / 4);
  int lanes = 4;
  while (lanes < chunks && lanes < 32) lanes *= 2;
  const long long rows = a.batch * a.heads * a.seq_q;
  constexpr int kThreads = 256;
  const long long rows_per_block = (kThreads / 32) * (32 / lanes);
  const long long blocks = std::min<long long>((rows + rows_per_block - 1) / rows_per_block, 1LL << 20);
  row_dot_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, a.stream>>>(
      a.dout, a.do_strides, a.o, a.o_strides, a.dq, a.dq_strides, d, turns,
      static_cast<int>((a.seq_q + m04::kFlashBackwardQTile - 1) / m04::kFlashBackwardQTile), static_cast<int>(a.heads),
      static_cast<int>(a.seq_q), rows, chunks, lanes, zero_dq);
  COURSE_CHECK_LAUNCH("row_dot_kernel");
}

}  // namespace attn_bwd

void attention_backward(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgs& args) {
  m04::validate_attention_backward_args(args, step, "attention_backward");
  switch (step) {
    case m04::AttentionBackwardStep::naive: return attn_bwd::launch_naive(args);
    case m04::AttentionBackwardStep::flash: return attn_bwd::launch_flash(args);
    case m04::AttentionBackwardStep::flash_deterministic: return attn_bwd::launch_flash_deterministic(args);
    default: return;  // the tensor-core steps take AttentionBackwardArgsBf16 (validation rejected them)
  }
}

void attention_backward_row_dot(const m04::AttentionBackwardArgs& args, float* d) {
  constexpr const char* kFn = "attention_backward_row_dot";
  m04::validate_attention_backward_args(args, m04::AttentionBackwardStep::flash, kFn);
  require_not_null(d, kFn, "d");
  require_aligned(d, alignof(float), kFn, "d");
  attn_bwd::launch_row_dot(args, d, false);
  COURSE_CUDA_CHECK(cudaStreamSynchronize(args.stream));
}

}  // namespace course::exercise
