#pragma once
/// @file attention_device.cuh
/// @brief YOUR device helpers of the attention ladder (module 3), shared by attention.cu
/// and attention_fused.cu: step row_offset (0) and step online_softmax_rescale (2a) are
/// written here.
///
/// Files of your fp32 attention (start with attention.cu's banner: the steps in order):
///   attention.cu           steps naive (1), tiled_online (2b), causal (3), fused_options (5), the dispatcher
///   attention_device.cuh   this file: row_offset (0), online_softmax_rescale (2a); the given Params,
///                          make_params, causal_kv_end, RoPE and ALiBi helpers
///   attention_fused.cu     step fused (4): the loops of the register-blocked kernel

#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "module03/attention.hpp"
#include "module03/attention_blocks.cuh"
// @step row_offset  (module03/attention_indexing.cuh has the answer to row_offset: not included here)
// @end

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace course::exercise::attn {

using m03::AttentionArgs;
using m03::AttentionStrides;
using m03::block_coordinates;
using m03::fill_attention_params;
// @step row_offset
/// This file, named by the NotImplemented of steps row_offset and online_softmax_rescale.
constexpr const char* kDeviceFile = __FILE__;

// ----------------------------------------------------------------------------
// Step 0: the stride arithmetic.
// Element (b, h, n, c) of a tensor with strides s lives at  b*s.batch + h*s.head + n*s.seq + c.
// TODO(step 0): return the offset of row n of head h of batch b (the c = 0 element).
// Hints, one at a time: bash scripts/course.sh hint attention/row_offset
// Until written it returns -1, which attention_row_offset() reports as NotImplemented.
// ----------------------------------------------------------------------------
__host__ __device__ __forceinline__ std::int64_t row_offset(const AttentionStrides& s, std::int64_t b, std::int64_t h,
                                                            std::int64_t n) {
  // TODO(step 0)
  (void)s;
  (void)b;
  (void)h;
  (void)n;
  return -1;
}
// @end

// @step online_softmax_rescale
// ----------------------------------------------------------------------------
// Step 2a: the online-softmax update of ONE row for one new block of scores whose max is
// block_max. (m, l) is the running max and running sum of exp(s - m); the caller scales
// its accumulator by the returned factor alpha, then adds exp(s_j - m) (new m) to l and
// exp(s_j - m) * v_j to the accumulator.
// TODO(step 2a): update m and l, return alpha.
// Hints, one at a time: bash scripts/course.sh hint attention/online_softmax_rescale
// ----------------------------------------------------------------------------
// TODO(step 2a): set to true once online_softmax_rescale is written.
constexpr bool kOnlineUpdateWritten = false;

__device__ __forceinline__ float online_softmax_rescale(float& m, float& l, float block_max) {
  // TODO(step 2a)
  (void)m;
  (void)l;
  (void)block_max;
  return 1.f;
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

}  // namespace course::exercise::attn
