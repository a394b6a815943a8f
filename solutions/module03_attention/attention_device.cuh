#pragma once
/// @file attention_device.cuh
/// @brief Device helpers shared by the attention solution's kernels (attention.cu and
/// attention_fused.cu): the online-softmax update, the kernel parameter block, RoPE and
/// ALiBi. Private to solutions/module03_attention. The stride arithmetic and the block
/// order come from module 3's public module03/attention_indexing.cuh, the cp.async
/// wrappers from course/cuda/mma_ptx.cuh, the warp reductions from
/// course/cuda/warp_reduce.cuh (common/include).

#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "module03/attention.hpp"
#include "module03/attention_blocks.cuh"
// @step row_offset  (the exercise writes its own row_offset: it includes attention_blocks.cuh only)
#include "module03/attention_indexing.cuh"
// @end

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace course::solution::attn {

using m03::AttentionArgs;
using m03::AttentionStrides;
using m03::block_coordinates;
using m03::fill_attention_params;
// @step row_offset
using m03::row_offset;
// @end

// @step online_softmax_rescale
/// The online-softmax update for one row and one new block of scores whose max is
/// `block_max`. In this order:
///     m_new = max(m, block_max)
///     alpha = exp(m - m_new)       <- uses the OLD m
///     l     = l * alpha            (the caller then adds the block's sum of exp(s - m_new))
///     m     = m_new                <- only now
/// and returns alpha, by which the caller must also scale its accumulator.
/// A row that has seen only masked scores keeps m = -inf and l = 0: then alpha = 1
/// (exp(-inf - (-inf)) would be NaN). On the first real block m = -inf gives alpha = 0.
__device__ __forceinline__ float online_softmax_rescale(float& m, float& l, float block_max) {
  const float m_new = fmaxf(m, block_max);
  const float alpha = m_new == -INFINITY ? 1.f : __expf(m - m_new);
  l *= alpha;
  m = m_new;
  return alpha;
}
// @end

/// The max to subtract in exp(s - m): m itself, or 0 while the row is still all masked
/// (every s is then -inf too, and exp(-inf - 0) = 0 instead of NaN).
__device__ __forceinline__ float exp_reference(float m) { return m == -INFINITY ? 0.f : m; }

/// Everything a kernel needs, by value (fits the 4 KB parameter space easily).
struct Params {
  const float* q;
  const float* k;
  const float* v;
  float* o;
  float* lse;  ///< may be null
  AttentionStrides qs, ks, vs, os;
  int heads;      ///< H
  int group;      ///< H / H_kv: query heads per kv head
  int seq_q;      ///< N_q
  int seq_k;      ///< N_k
  int causal_offset;  ///< N_k - N_q: query i sees key j iff j <= i + causal_offset
  float scale;
  bool rope;
  float rope_theta;
  bool alibi;
};

inline Params make_params(const AttentionArgs& a) {
  Params p{};
  fill_attention_params(p, a);
  p.causal_offset = static_cast<int>(a.seq_k - a.seq_q);  // both in [1, 2^31 - 1]: fits
  p.scale = m03::effective_scale(a);
  p.rope = a.rope;
  p.rope_theta = a.rope_theta;
  p.alibi = a.alibi;
  return p;
}

/// One past the last key any query row in [q0, q0 + rows) may see (causal), clamped to
/// [0, N_k]: the tiles at or beyond it are skipped, never loaded.
__device__ __forceinline__ int causal_kv_end(const Params& p, int q0, int rows) {
  const long long last_row = std::min(static_cast<long long>(q0) + rows, static_cast<long long>(p.seq_q)) - 1;
  const long long end = last_row + p.causal_offset + 1;
  return static_cast<int>(end < 0 ? 0 : (end > p.seq_k ? p.seq_k : end));
}

/// ALiBi slope of query head h: 2^(-8 (h + 1) / H), computed in double once per block.
__device__ __forceinline__ float alibi_slope(int h, int heads) {
  return static_cast<float>(exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(heads)));
}

// ---------------------------------------------------------------- cp.async (sm_80+) ----
// From common/include/course/cuda/mma_ptx.cuh (cp_async_16_zfill, its commit and wait).
using ::course::cuda::cp_async_commit;
using ::course::cuda::cp_async_wait;

// ---------------------------------------------------------------- RoPE ----

/// Rotates the rows of a [rows x D] tile in shared memory (row stride ld floats) in place:
/// row r is at position pos0 + r. Pairs (c, c + D/2); inv_freq[c] = theta^(-2c/D) in double.
/// The angle pos * inv_freq reaches thousands of radians: computed and reduced to
/// [-pi, pi] in double, then sincosf on the small float angle (an fp32 angle of 8192 rad
/// would already be off by ~5e-4 rad).
template <int D, int kThreads>
__device__ __forceinline__ void rope_tile(float* tile, int rows, int ld, long long pos0, const double* inv_freq) {
  constexpr int kHalf = D / 2;
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int idx = threadIdx.x; idx < rows * kHalf; idx += kThreads) {
    const int r = idx / kHalf, c = idx % kHalf;
    double angle = static_cast<double>(pos0 + r) * inv_freq[c];
    angle -= kTwoPi * rint(angle / kTwoPi);
    float sn, cs;
    sincosf(static_cast<float>(angle), &sn, &cs);
    float* row = tile + r * ld;
    const float x0 = row[c], x1 = row[c + kHalf];
    row[c] = x0 * cs - x1 * sn;
    row[c + kHalf] = x0 * sn + x1 * cs;
  }
}

/// inv_freq[c] = theta^(-2c/D) for c < D/2, written by the first D/2 threads.
template <int D>
__device__ __forceinline__ void rope_inv_freq(double* inv_freq, float theta) {
  if (threadIdx.x < D / 2) inv_freq[threadIdx.x] = pow(static_cast<double>(theta), -2.0 * threadIdx.x / D);
}

/// Launches the register-blocked kernel of steps fused and fused_options (attention_fused.cu).
void launch_fused(const AttentionArgs& a);

}  // namespace course::solution::attn
