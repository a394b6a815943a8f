/// @file attention_backward_planted.cu
/// @brief Deliberately wrong attention-backward kernels (see attention_backward_planted.hpp).
/// One thread per key row for dK and dV (looping over every query row of every query head
/// that reads the key), one thread per query row for dQ (looping over its visible keys),
/// d up to 128 in local arrays, P recomputed from lse for every (i, j): slow and simple, so
/// that only the planted line separates each from a correct answer.

#include "attention_backward_planted.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace course::planted {
namespace {

using m03::AttentionStrides;
using m04::AttentionBackwardArgs;

enum class Bug {
  none,
  drop_d,
  dq_race,
  dk_scale_twice,
  dk_scale_forgotten,
  causal_mask_missing,
  running_max,
  dk_swapped_strides,
};

constexpr int kMaxD = 128;
constexpr int kThreads = 128;
constexpr int kStatTile = 16;  // keys per tile of the running_max bug

__device__ std::int64_t offset(const AttentionStrides& s, std::int64_t b, std::int64_t h, std::int64_t n) {
  return b * s.batch + h * s.head + n * s.seq;
}

__device__ float dot(const float* x, const float* y, int d) {
  float s = 0.f;
  for (int c = 0; c < d; ++c) s = fmaf(x[c], y[c], s);
  return s;
}

/// Number of keys query row i sees (bottom-right aligned causal mask).
template <Bug kBug>
__device__ std::int64_t visible_keys(const AttentionBackwardArgs& a, std::int64_t i) {
  if (!a.causal || kBug == Bug::causal_mask_missing) return a.seq_k;  // BUG for causal_mask_missing
  const std::int64_t limit = i + a.seq_k - a.seq_q + 1;
  return limit < 0 ? 0 : (limit > a.seq_k ? a.seq_k : limit);
}

/// The statistic P_ij = exp(s_ij - stat) is recomputed against: the forward's lse, or for
/// the running_max bug the logsumexp of keys 0 .. (end of j's tile of 16) - 1, which is what
/// a running (max, sum) holds while that tile is processed.
template <Bug kBug>
__device__ float row_statistic(const AttentionBackwardArgs& a, float scale, const float* q_row,
                               const float* k_head, std::int64_t j, std::int64_t visible, float lse) {
  if (kBug != Bug::running_max) return lse;
  const std::int64_t tile_end = (j / kStatTile + 1) * kStatTile;
  const std::int64_t end = tile_end < visible ? tile_end : visible;
  float m = -INFINITY, l = 0.f;
  for (std::int64_t t = 0; t < end; ++t) {
    const float s = scale * dot(q_row, k_head + t * a.k_strides.seq, static_cast<int>(a.head_dim));
    const float m_new = fmaxf(m, s);
    l = l * expf(m - m_new) + expf(s - m_new);  // BUG (the caller uses this instead of lse)
    m = m_new;
  }
  return m + logf(l);
}

/// dK and dV: one thread per (b, kv head, key j).
template <Bug kBug>
__global__ void key_rows_kernel(const AttentionBackwardArgs a, float scale) {
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.batch * a.kv_heads * a.seq_k) return;
  const std::int64_t j = t % a.seq_k, bh = t / a.seq_k;
  const std::int64_t b = bh / a.kv_heads, hk = bh % a.kv_heads, group = a.heads / a.kv_heads;
  const int d = static_cast<int>(a.head_dim);
  const float* k_head = a.k + offset(a.k_strides, b, hk, 0);
  const float* k_row = k_head + j * a.k_strides.seq;
  const float* v_row = a.v + offset(a.v_strides, b, hk, j);
  const float k_scale = kBug == Bug::dk_scale_twice       ? scale * scale  // BUG for dk_scale_twice
                        : kBug == Bug::dk_scale_forgotten ? 1.f            // BUG for dk_scale_forgotten
                                                          : scale;

  float dk[kMaxD], dv[kMaxD];
  for (int c = 0; c < d; ++c) dk[c] = dv[c] = 0.f;
  for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    for (std::int64_t i = 0; i < a.seq_q; ++i) {
      const std::int64_t visible = visible_keys<kBug>(a, i);
      if (j >= visible) continue;
      const float* q_row = a.q + offset(a.q_strides, b, h, i);
      const float* do_row = a.dout + offset(a.do_strides, b, h, i);
      const float* o_row = a.o + offset(a.o_strides, b, h, i);
      const float lse = a.lse[(b * a.heads + h) * a.seq_q + i];
      const float s = scale * dot(q_row, k_row, d);
      const float p = expf(s - row_statistic<kBug>(a, scale, q_row, k_head, j, visible, lse));
      const float dp = dot(do_row, v_row, d);
      const float row_term = kBug == Bug::drop_d ? 0.f : dot(do_row, o_row, d);  // BUG for drop_d
      const float ds = p * (dp - row_term);
      for (int c = 0; c < d; ++c) {
        dv[c] = fmaf(p, do_row[c], dv[c]);
        dk[c] = fmaf(k_scale * ds, q_row[c], dk[c]);
      }
    }
  }
  const std::int64_t dk_off = kBug == Bug::dk_swapped_strides
                                  ? b * a.dk_strides.head + hk * a.dk_strides.batch + j * a.dk_strides.seq  // BUG
                                  : offset(a.dk_strides, b, hk, j);
  float* dk_row = a.dk + dk_off;
  float* dv_row = a.dv + offset(a.dv_strides, b, hk, j);
  for (int c = 0; c < d; ++c) {
    dk_row[c] = dk[c];
    dv_row[c] = dv[c];
  }
}

/// dQ: one thread per (b, head, query i).
template <Bug kBug>
__global__ void query_rows_kernel(const AttentionBackwardArgs a, float scale) {
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.batch * a.heads * a.seq_q) return;
  const std::int64_t i = t % a.seq_q, bh = t / a.seq_q;
  const std::int64_t b = bh / a.heads, h = bh % a.heads, hk = h / (a.heads / a.kv_heads);
  const int d = static_cast<int>(a.head_dim);
  const float* q_row = a.q + offset(a.q_strides, b, h, i);
  const float* do_row = a.dout + offset(a.do_strides, b, h, i);
  const float* o_row = a.o + offset(a.o_strides, b, h, i);
  const float* k_head = a.k + offset(a.k_strides, b, hk, 0);
  const float* v_head = a.v + offset(a.v_strides, b, hk, 0);
  const float lse = a.lse[bh * a.seq_q + i];
  const std::int64_t visible = visible_keys<kBug>(a, i);
  const float row_term = kBug == Bug::drop_d ? 0.f : dot(do_row, o_row, d);  // BUG for drop_d

  float dq[kMaxD];
  for (int c = 0; c < d; ++c) dq[c] = 0.f;
  for (std::int64_t j = 0; j < visible; ++j) {
    const float* k_row = k_head + j * a.k_strides.seq;
    const float s = scale * dot(q_row, k_row, d);
    const float p = expf(s - row_statistic<kBug>(a, scale, q_row, k_head, j, visible, lse));
    const float ds = p * (dot(do_row, v_head + j * a.v_strides.seq, d) - row_term);
    for (int c = 0; c < d; ++c) dq[c] = fmaf(scale * ds, k_row[c], dq[c]);
  }
  float* dq_row = a.dq + offset(a.dq_strides, b, h, i);
  for (int c = 0; c < d; ++c) dq_row[c] = dq[c];
}

/// dQ with the planted race: a block per query row, thread t takes keys t, t + 128, ...
/// and adds into one shared dQ row with a plain read-modify-write.
__global__ void query_rows_race_kernel(const AttentionBackwardArgs a, float scale) {
  __shared__ float dq_tile[kMaxD];
  const std::int64_t rows = a.batch * a.heads * a.seq_q;
  const int d = static_cast<int>(a.head_dim);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t i = r % a.seq_q, bh = r / a.seq_q;
    const std::int64_t b = bh / a.heads, h = bh % a.heads, hk = h / (a.heads / a.kv_heads);
    const float* q_row = a.q + offset(a.q_strides, b, h, i);
    const float* do_row = a.dout + offset(a.do_strides, b, h, i);
    const float* o_row = a.o + offset(a.o_strides, b, h, i);
    const float lse = a.lse[bh * a.seq_q + i];
    const std::int64_t visible = visible_keys<Bug::none>(a, i);
    const float row_term = dot(do_row, o_row, d);
    __syncthreads();  // the previous row's dq_tile has been stored
    for (int c = threadIdx.x; c < d; c += blockDim.x) dq_tile[c] = 0.f;
    __syncthreads();
    for (std::int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
      const float* k_row = a.k + offset(a.k_strides, b, hk, j);
      const float p = expf(scale * dot(q_row, k_row, d) - lse);
      const float ds = p * (dot(do_row, a.v + offset(a.v_strides, b, hk, j), d) - row_term);
      for (int c = 0; c < d; ++c) dq_tile[c] += scale * ds * k_row[c];  // BUG: no atomicAdd, a race
    }
    __syncthreads();
    float* dq_row = a.dq + offset(a.dq_strides, b, h, i);
    for (int c = threadIdx.x; c < d; c += blockDim.x) dq_row[c] = dq_tile[c];
  }
}

unsigned blocks_for(std::int64_t threads) {
  return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

template <Bug kBug>
void launch(const AttentionBackwardArgs& a, const char* name) {
  m04::validate_attention_backward_args(a, m04::AttentionBackwardStep::flash, name);
  const float scale = m04::effective_scale(a);
  key_rows_kernel<kBug><<<blocks_for(a.batch * a.kv_heads * a.seq_k), kThreads, 0, a.stream>>>(a, scale);
  COURSE_CHECK_LAUNCH(name);
  if (kBug == Bug::dq_race) {
    const std::int64_t rows = a.batch * a.heads * a.seq_q;
    query_rows_race_kernel<<<static_cast<unsigned>(rows < 65535 ? rows : 65535), kThreads, 0, a.stream>>>(a, scale);
  } else {
    query_rows_kernel<kBug><<<blocks_for(a.batch * a.heads * a.seq_q), kThreads, 0, a.stream>>>(a, scale);
  }
  COURSE_CHECK_LAUNCH(name);
}

}  // namespace

void attention_backward_simple(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  launch<Bug::none>(args, "attention_backward_simple");
}
void attention_backward_drop_d(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  launch<Bug::drop_d>(args, "attention_backward_drop_d");
}
void attention_backward_dq_race(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  launch<Bug::dq_race>(args, "attention_backward_dq_race");
}
void attention_backward_dk_scale_twice(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  launch<Bug::dk_scale_twice>(args, "attention_backward_dk_scale_twice");
}
void attention_backward_dk_scale_forgotten(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  launch<Bug::dk_scale_forgotten>(args, "attention_backward_dk_scale_forgotten");
}
void attention_backward_causal_mask_missing(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  launch<Bug::causal_mask_missing>(args, "attention_backward_causal_mask_missing");
}
void attention_backward_running_max(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  launch<Bug::running_max>(args, "attention_backward_running_max");
}
void attention_backward_dk_swapped_strides(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  launch<Bug::dk_swapped_strides>(args, "attention_backward_dk_swapped_strides");
}

}  // namespace course::planted
