/// @file attention_backward_naive.cu
/// @brief Step 1 of the attention-backward ladder (fp32; the whole ladder: attention_backward.cu):
///   1. naive  S, P and dP materialized in an O(N^2) workspace
/// The gradients of module 3's attention by composition -- module 2's batched GEMMs (with
/// their a_transposed / b_transposed options), one small kernel that recomputes P, and this
/// module's softmax backward. The flash steps live in attention_backward_flash.cu, the
/// dispatcher in attention_backward.cu.

#include "attention_backward_device.cuh"

#include "module02/batched_gemm.hpp"
#include "module04/attention_backward.hpp"
#include "module04/softmax_backward.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace course::solution::attn_bwd {
namespace {

using m04::AttentionBackwardArgs;

// ============================================================================
// Step 1: naive -- S, P and dP materialized, five GEMMs and two element-wise passes.
//
// Per (batch b, head h), with the workspace split into two [B, H, N_q, N_k] matrices
// W1 (P) and W2 (dP, then dS in place):
//
//   W1 = scale * Q K^T        module 2 GEMM, b_transposed (K is stored N_k x d), alpha = scale
//   W1 = P = exp(W1 - lse)    recompute_p_kernel, in place: the forward's lse gives the
//                             normalized probabilities directly (no max, no sum to redo);
//                             P = 0 where the causal mask hides key j (j > i + N_k - N_q)
//                             and on rows with lse = -inf (they see no key)
//   dV = P^T dO               module 2 GEMM, a_transposed (P is stored N_q x N_k and read as
//                             its transpose: M = N_k, K = N_q); no transpose is materialized
//   W2 = dP = dO V^T          module 2 GEMM, b_transposed
//   W2 = dS = P * (dP - D)    this module's softmax backward (fused_vectorized), y = P,
//                             dy = dx = W2 (in place), one slice per row of N_k scores
//   dQ = scale * dS K         module 2 GEMM, alpha = scale
//   dK = scale * dS^T Q       module 2 GEMM, a_transposed, alpha = scale
//
// Why the softmax backward computes exactly dS: it forms D_i = sum_j P_ij dP_ij for each
// row, and sum_j P_ij (dO_i . V_j) = dO_i . (sum_j P_ij V_j) = dO_i . O_i -- the same D the
// flash steps get from the cheap row dot of dO and O. The materialized pipeline can afford
// the long form because dP is already in memory; the flash steps never have a whole row of
// dP at once, hence their separate D pass.
//
// The GEMMs use module 2's warp_tiled step (its fastest fp32 step). Grouped-query attention
// is not supported (validation rejects kv_heads != heads): a strided batched GEMM pairs
// head h of one operand with head h of the other, and dK, dV would need a sum over the
// query heads of a group on top.
//
// Cost: the workspace holds P and dP, 2*B*H*N_q*N_k floats -- O(N^2) memory. At the
// benchmark shape B*H = 64, N_q = N_k = 4096, d = 64 that is 8.6 GB (34 GB at N = 8192).
// Traffic, one matrix = B*H*N^2*4 bytes = 4.3 GB: GEMM 1 writes S (1), the recompute reads
// and writes it (2), dV reads P (1), GEMM dP writes dP (1), the softmax backward reads P
// and dP and writes dS (3), dQ and dK read dS (2): 10 matrices = 43 GB, ~9 ms at the
// H200's ~4.8 TB/s. FLOPs: five GEMMs of 2*B*H*N^2*d = 137 GFLOP each = 687 GFLOP (the
// FlashAttention convention counts 2.5 x the forward's 275 = 687 GFLOP too), ~20 ms at
// module 2's ~35 TFLOP/s; the two GEMMs with K = d = 64 (S, dP) are partly bound by writing
// their N^2 outputs. Causal masking saves nothing here: every score is still computed,
// stored and read.
// Prediction (H200, B4 H16 N4096 d64): ~25-30 ms, ~25 TFLOP/s by the convention; causal
// no faster.
// ============================================================================

constexpr auto kGemmStep = m02::BgemmStep::warp_tiled;
constexpr int kRecomputeThreads = 256;

/// P = exp(S - lse) in place for every row r = (b*H + h)*N_q + i of the [rows, N_k] matrix;
/// P = 0 where key j is hidden (causal: j > i + causal_offset) and on rows with lse = -inf.
/// A block per row (grid-stride over rows), float4 accesses when N_k % 4 == 0 and the
/// workspace is 16-byte aligned (every row start then is).
template <bool kVec4>
__global__ void __launch_bounds__(kRecomputeThreads)
    recompute_p_kernel(float* s, const float* lse, long long rows, int seq_q, int seq_k, long long causal_offset,
                       bool causal) {
  // @step naive  (the exercise writes the body)
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const float l = lse[r];
    const long long i = r % seq_q;
    long long visible = seq_k;
    if (causal) visible = std::min<long long>(seq_k, std::max<long long>(0, i + causal_offset + 1));
    if (l == -INFINITY) visible = 0;  // the row sees no key: P = 0, not exp(s + inf)
    float* row = s + r * seq_k;
    if constexpr (kVec4) {
      float4* row4 = reinterpret_cast<float4*>(row);
      for (int c4 = threadIdx.x; c4 < seq_k / 4; c4 += blockDim.x) {
        float4 x = row4[c4];
        const long long j = 4LL * c4;
        x.x = j < visible ? expf(x.x - l) : 0.f;
        x.y = j + 1 < visible ? expf(x.y - l) : 0.f;
        x.z = j + 2 < visible ? expf(x.z - l) : 0.f;
        x.w = j + 3 < visible ? expf(x.w - l) : 0.f;
        row4[c4] = x;
      }
    } else {
      for (int j = threadIdx.x; j < seq_k; j += blockDim.x) row[j] = j < visible ? expf(row[j] - l) : 0.f;
    }
  }
  // @end
}

/// A strided batched GEMM over (batch, head) with one matrix per (b, h) per operand.
m02::StridedBatchedGemmArgs<float> gemm(const AttentionBackwardArgs& a, std::int64_t M, std::int64_t N,
                                        std::int64_t K) {
  m02::StridedBatchedGemmArgs<float> g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.batch = a.batch;
  g.num_heads = a.heads;
  g.stream = a.stream;
  return g;
}
void set_a(m02::StridedBatchedGemmArgs<float>& g, const float* p, const m03::AttentionStrides& s) {
  g.a = p;
  g.stride_a_batch = s.batch;
  g.stride_a_head = s.head;
  g.stride_a_row = s.seq;
}
void set_b(m02::StridedBatchedGemmArgs<float>& g, const float* p, const m03::AttentionStrides& s) {
  g.b = p;
  g.stride_b_batch = s.batch;
  g.stride_b_head = s.head;
  g.stride_b_row = s.seq;
}
void set_c(m02::StridedBatchedGemmArgs<float>& g, float* p, const m03::AttentionStrides& s) {
  g.c = p;
  g.stride_c_batch = s.batch;
  g.stride_c_head = s.head;
  g.stride_c_row = s.seq;
}

}  // namespace

void launch_naive(const AttentionBackwardArgs& a) {
  // @step naive  (the exercise writes the pipeline)
  const std::int64_t B = a.batch, H = a.heads, Nq = a.seq_q, Nk = a.seq_k, d = a.head_dim;
  const float scale = m04::effective_scale(a);
  const long long rows = B * H * Nq;
  // The two [B, H, N_q, N_k] matrices of the workspace, as "strides" of a [B, H, N_q, N_k] tensor.
  const m03::AttentionStrides ws{H * Nq * Nk, Nq * Nk, Nk};
  float* p = a.workspace;
  float* dp = a.workspace + rows * Nk;

  // S = scale * Q K^T  (M = N_q, N = N_k, K = d) into W1.
  auto qk = gemm(a, Nq, Nk, d);
  set_a(qk, a.q, a.q_strides);
  set_b(qk, a.k, a.k_strides);
  set_c(qk, p, ws);
  qk.b_transposed = true;
  qk.alpha = scale;
  course::solution::batched_gemm_strided(kGemmStep, qk);

  // P = exp(S - lse), masked, in place.
  const unsigned blocks = static_cast<unsigned>(std::max(1LL, std::min(rows, 1LL << 20)));
  const bool vec4 = Nk % 4 == 0 && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  if (vec4)
    recompute_p_kernel<true><<<blocks, kRecomputeThreads, 0, a.stream>>>(p, a.lse, rows, static_cast<int>(Nq),
                                                                         static_cast<int>(Nk), Nk - Nq, a.causal);
  else
    recompute_p_kernel<false><<<blocks, kRecomputeThreads, 0, a.stream>>>(p, a.lse, rows, static_cast<int>(Nq),
                                                                          static_cast<int>(Nk), Nk - Nq, a.causal);
  COURSE_CHECK_LAUNCH("recompute_p_kernel");

  // dV = P^T dO  (M = N_k, N = d, K = N_q); P is stored N_q x N_k = K x M.
  auto pv = gemm(a, Nk, d, Nq);
  set_a(pv, p, ws);
  pv.a_transposed = true;
  set_b(pv, a.dout, a.do_strides);
  set_c(pv, a.dv, a.dv_strides);
  course::solution::batched_gemm_strided(kGemmStep, pv);

  // dP = dO V^T  (M = N_q, N = N_k, K = d) into W2.
  auto dov = gemm(a, Nq, Nk, d);
  set_a(dov, a.dout, a.do_strides);
  set_b(dov, a.v, a.v_strides);
  set_c(dov, dp, ws);
  dov.b_transposed = true;
  course::solution::batched_gemm_strided(kGemmStep, dov);

  // dS = P * (dP - rowsum(P * dP)), in place over dP.
  const m04::SoftmaxBackwardArgs sb = m04::contiguous_softmax_backward_args(p, dp, dp, rows, Nk, /*dim=*/1, a.stream);
  course::solution::softmax_backward(m04::SoftmaxBackwardStep::fused_vectorized, sb);

  // dQ = scale * dS K  (M = N_q, N = d, K = N_k).
  auto dsk = gemm(a, Nq, d, Nk);
  set_a(dsk, dp, ws);
  set_b(dsk, a.k, a.k_strides);
  set_c(dsk, a.dq, a.dq_strides);
  dsk.alpha = scale;
  course::solution::batched_gemm_strided(kGemmStep, dsk);

  // dK = scale * dS^T Q  (M = N_k, N = d, K = N_q); dS is stored N_q x N_k = K x M.
  auto dsq = gemm(a, Nk, d, Nq);
  set_a(dsq, dp, ws);
  dsq.a_transposed = true;
  set_b(dsq, a.q, a.q_strides);
  set_c(dsq, a.dk, a.dk_strides);
  dsq.alpha = scale;
  course::solution::batched_gemm_strided(kGemmStep, dsq);
  // @end
}

}  // namespace course::solution::attn_bwd
