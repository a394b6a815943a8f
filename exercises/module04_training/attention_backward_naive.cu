/// @file attention_backward_naive.cu
/// @brief YOUR step naive of the attention-backward ladder (fp32; the ladder and the order of
/// the steps: attention_backward.cu): S, P and dP materialized in an O(N^2) workspace, by
/// composition -- module 2's batched GEMMs (solution), one small kernel that recomputes P,
/// and this module's softmax backward (solution). Read the pipeline in the comment below,
/// then write recompute_p_kernel and launch_naive.
/// Hints, one at a time: bash scripts/course.sh hint attention_backward/naive

#include "attention_backward_device.cuh"

#include "module02/batched_gemm.hpp"
#include "module04/attention_backward.hpp"
#include "module04/softmax_backward.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace course::exercise::attn_bwd {
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
  // @step naive
  // TODO(naive): P = exp(S - lse) in place for every row r < rows of the [rows, seq_k] matrix
  // s (row r starts at s + r * seq_k; its query is i = r % seq_q, its lse is lse[r]). P = 0
  // where key j is hidden (causal and j > i + causal_offset) and on rows with lse = -inf
  // (exp(s - (-inf)) would be inf). One block per row (a grid-stride loop over r), its
  // threads over j; kVec4 says float4 accesses are allowed: use them, or not.
  (void)s, (void)lse, (void)rows, (void)seq_q, (void)seq_k, (void)causal_offset, (void)causal;
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
  // @step naive
  // TODO(naive): delete the throw, then launch the pipeline of the comment above, all on
  // a.stream (in order: no synchronization needed). The workspace holds W1 = a.workspace
  // and W2 = W1 + B*H*N_q*N_k, two [B, H, N_q, N_k] tensors with the "strides"
  // m03::AttentionStrides{H*N_q*N_k, N_q*N_k, N_k}. gemm(a, M, N, K) and set_a / set_b /
  // set_c fill in one batched GEMM; set b_transposed, a_transposed and alpha yourself, then
  // course::solution::batched_gemm_strided(kGemmStep, g). recompute_p_kernel<kVec4> with
  // kRecomputeThreads threads and a block per row (at most 1 << 20 blocks: it loops), then
  // COURSE_CHECK_LAUNCH. dS: course::solution::softmax_backward(
  // m04::SoftmaxBackwardStep::fused_vectorized, m04::contiguous_softmax_backward_args(...)).
  (void)a;
  throw NotImplemented("attention_backward step naive", __FILE__);
  // @end
}

}  // namespace course::exercise::attn_bwd
