/// @file attention_backward.cu
/// @brief The attention-backward ladder (fp32): the dispatcher and the preprocessing kernel
/// every flash step starts with. The steps live in their own files:
///
///   1. naive                (attention_backward_naive.cu) S, P, dP materialized in an O(N^2)
///                           workspace; module 2's batched GEMMs and the softmax backward.
///   2. flash                (attention_backward_flash.cu) D, then one kernel per K/V tile:
///                           P recomputed from lse on chip, dK/dV in registers, dQ by atomics.
///   3. flash_deterministic  (attention_backward_flash.cu) flash with dQ's additions in
///                           K/V-tile order, one tile at a time behind a turn counter per
///                           query tile; bit-identical runs.
///   4. tc_mma               (attention_backward_tc.cu, bf16) the five products on mma.sync fragments
///   5. tc_pipelined         (attention_backward_tc.cu) + XOR-swizzled tiles, a 2-stage cp.async ring
///   6. tc_deterministic     (attention_backward_tc.cu) + dQ added in K/V-tile order: bit-identical
///   7. tc_split_dq          (attention_backward_tc.cu) one fp32 dQ copy per split, summed in order
///   8. tc_wgmma             (attention_backward_tc.cu, sm_90a) the five products on warpgroup MMA
///   9. tc_wgmma_deterministic  (sm_90a) 8. with 6.'s ordered dQ hand-off
///   10. tc_wgmma_split_dq    (sm_90a) 8. with 7.'s per-split dQ copies
/// The bf16 steps, tc_mma to tc_wgmma_split_dq, have their own entry point in
/// attention_backward_tc.cu.
///
/// The preprocessing (here): D_i = sum_c dO_ic O_ic, the row term of the softmax Jacobian
/// (sum_j P_ij dP_ij = sum_j P_ij dO_i . V_j = dO_i . O_i), one dot product of length d per
/// query row instead of one of length N_k -- and, for the flash steps, dQ = 0 in the same
/// pass (flash_deterministic: its turn counters = 0 too). Memory-bound: it reads dO and O
/// once (2 * B*H*N_q*d floats), writes D (and dQ).

#include "attention_backward_device.cuh"

#include "module04/attention_backward.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::solution {
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
  // @step row_dot  (the exercise writes the body)
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int sub = lane / lanes, lane_in_row = lane % lanes;
  const long long rows_per_warp = 32 / lanes;
  const long long warp = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const long long num_warps = static_cast<long long>(gridDim.x) * blockDim.x / 32;
  // base is the same for the whole warp, so every lane reaches the shuffles.
  for (long long base = warp * rows_per_warp; base < rows; base += num_warps * rows_per_warp) {
    const long long r = base + sub;
    float acc = 0.f;
    if (r < rows) {
      const long long bh = r / seq_q, i = r % seq_q, b = bh / heads, h = bh % heads;
      const float4* x = reinterpret_cast<const float4*>(dout + row_offset(dos, b, h, i));
      const float4* y = reinterpret_cast<const float4*>(o + row_offset(os, b, h, i));
      float4* z = reinterpret_cast<float4*>(dq + row_offset(dqs, b, h, i));
      for (int c = lane_in_row; c < chunks; c += lanes) {
        const float4 u = x[c], w = y[c];
        acc = fmaf(u.x, w.x, fmaf(u.y, w.y, fmaf(u.z, w.z, fmaf(u.w, w.w, acc))));
        if (zero_dq) z[c] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
      if (turns != nullptr && lane_in_row == 0 && i % m04::kFlashBackwardQTile == 0)
        turns[bh * q_tiles + i / m04::kFlashBackwardQTile] = 0;
    }
    for (int offset = lanes / 2; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (r < rows && lane_in_row == 0) d_out[r] = acc;
  }
  // @end
}

}  // namespace

void launch_row_dot(const m04::AttentionBackwardArgs& a, float* d, bool zero_dq, int* turns) {
  // @step row_dot  (the exercise's kRowDotWritten test)
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

}  // namespace course::solution
