/// @file attention_planted.cu
/// @brief Deliberately wrong attention kernels (see attention_planted.hpp). One thread per
/// query row, every key visited in order, d up to 128 in a local array: slow and simple,
/// so that only the planted line separates each from a correct answer.

#include "attention_planted.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace course::planted {
namespace {

using m03::AttentionArgs;
using m03::AttentionStrides;

enum class Bug { max_replaced_first, missing_scale, causal_off_by_one, causal_leak, swapped_head_batch };

__device__ std::int64_t offset(const AttentionStrides& s, std::int64_t b, std::int64_t h, std::int64_t n) {
  return b * s.batch + h * s.head + n * s.seq;
}

template <Bug kBug>
__global__ void planted_kernel(AttentionArgs a, float scale) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t rows = a.batch * a.heads * a.seq_q;
  if (row >= rows) return;
  const std::int64_t i = row % a.seq_q, bh = row / a.seq_q;
  const std::int64_t b = bh / a.heads, h = bh % a.heads, hk = h / (a.heads / a.kv_heads);
  const int d = static_cast<int>(a.head_dim);
  const float* q = a.q + (kBug == Bug::swapped_head_batch ? b * a.q_strides.head + h * a.q_strides.batch  // BUG
                                                          : offset(a.q_strides, b, h, 0)) +
                   i * a.q_strides.seq;
  const float sc = kBug == Bug::missing_scale ? 1.f : scale;  // BUG for missing_scale
  const std::int64_t off = a.seq_k - a.seq_q;
  std::int64_t visible = a.seq_k;
  if (a.causal) {
    // BUG for causal_off_by_one: j < i + off (hides the diagonal); for causal_leak:
    // j <= i + off + 1 (row i sees one future key).
    const std::int64_t limit = kBug == Bug::causal_off_by_one ? i + off
                               : kBug == Bug::causal_leak     ? i + off + 2
                                                              : i + off + 1;
    visible = limit < 0 ? 0 : (limit > a.seq_k ? a.seq_k : limit);
  }

  float acc[128];
  for (int c = 0; c < d; ++c) acc[c] = 0.f;
  float m = -INFINITY, l = 0.f;
  if (kBug == Bug::max_replaced_first) {
    for (std::int64_t j = 0; j < visible; ++j) {
      const float* k = a.k + offset(a.k_strides, b, hk, j);
      const float* v = a.v + offset(a.v_strides, b, hk, j);
      float s = 0.f;
      for (int c = 0; c < d; ++c) s = fmaf(q[c], k[c], s);
      s *= sc;
      const float m_new = fmaxf(m, s);
      const float p = expf(s - m_new);
      const float acc_scale = expf(m - m_new);  // the accumulator uses the old max: right
      for (int c = 0; c < d; ++c) acc[c] = acc[c] * acc_scale + p * v[c];
      m = m_new;                          // BUG: replaced first ...
      l = l * expf(m - m_new) + p;        // ... so this factor is exp(0) = 1
    }
  } else {
    for (std::int64_t j = 0; j < visible; ++j) {
      const float* k = a.k + offset(a.k_strides, b, hk, j);
      float s = 0.f;
      for (int c = 0; c < d; ++c) s = fmaf(q[c], k[c], s);
      m = fmaxf(m, s * sc);
    }
    for (std::int64_t j = 0; j < visible; ++j) {
      const float* k = a.k + offset(a.k_strides, b, hk, j);
      const float* v = a.v + offset(a.v_strides, b, hk, j);
      float s = 0.f;
      for (int c = 0; c < d; ++c) s = fmaf(q[c], k[c], s);
      const float p = expf(s * sc - m);
      l += p;
      for (int c = 0; c < d; ++c) acc[c] = fmaf(p, v[c], acc[c]);
    }
  }
  float* o = a.o + offset(a.o_strides, b, h, i);
  const float inv = l > 0.f ? 1.f / l : 0.f;
  for (int c = 0; c < d; ++c) o[c] = acc[c] * inv;
  if (a.lse != nullptr) a.lse[bh * a.seq_q + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

template <Bug kBug>
void launch(const AttentionArgs& a, const char* name) {
  m03::validate_attention_args(a, m03::AttentionStep::fused, name);
  const std::int64_t rows = a.batch * a.heads * a.seq_q;
  constexpr int kThreads = 128;
  planted_kernel<kBug><<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, a.stream>>>(
      a, m03::effective_scale(a));
  COURSE_CHECK_LAUNCH(name);
}

__global__ void max_replaced_first_update_kernel(const float* scores, const float* values, int block_len, int num_blocks,
                                         float* out) {
  float m = -INFINITY, l = 0.f, acc = 0.f;
  for (int blk = 0; blk < num_blocks; ++blk) {
    const float* s = scores + static_cast<long long>(blk) * block_len;
    const float* v = values + static_cast<long long>(blk) * block_len;
    float block_max = -INFINITY;
    for (int j = 0; j < block_len; ++j) block_max = fmaxf(block_max, s[j]);
    const float m_new = fmaxf(m, block_max);
    const float m_ref = m_new == -INFINITY ? 0.f : m_new;
    float block_sum = 0.f, block_acc = 0.f;
    for (int j = 0; j < block_len; ++j) {
      const float p = expf(s[j] - m_ref);
      block_sum += p;
      block_acc = fmaf(p, v[j], block_acc);
    }
    acc = (m == -INFINITY ? 0.f : acc * expf(m - m_ref)) + block_acc;  // old max: right
    m = m_new;                                                          // BUG: replaced first ...
    l = l * expf(m - m_new) + block_sum;                                // ... factor exp(0) = 1
  }
  out[0] = m;
  out[1] = l;
  out[2] = l > 0.f ? acc / l : 0.f;
}

}  // namespace

void attention_max_replaced_first(m03::AttentionStep, const m03::AttentionArgs& args) {
  launch<Bug::max_replaced_first>(args, "attention_max_replaced_first");
}
void attention_missing_scale(m03::AttentionStep, const m03::AttentionArgs& args) {
  launch<Bug::missing_scale>(args, "attention_missing_scale");
}
void attention_causal_off_by_one(m03::AttentionStep, const m03::AttentionArgs& args) {
  launch<Bug::causal_off_by_one>(args, "attention_causal_off_by_one");
}
void attention_causal_leak(m03::AttentionStep, const m03::AttentionArgs& args) {
  launch<Bug::causal_leak>(args, "attention_causal_leak");
}
void attention_swapped_head_batch(m03::AttentionStep, const m03::AttentionArgs& args) {
  launch<Bug::swapped_head_batch>(args, "attention_swapped_head_batch");
}

void online_update_max_replaced_first(const m03::OnlineUpdateTestArgs& args) {
  m03::validate_online_update_test_args(args, "online_update_max_replaced_first");
  max_replaced_first_update_kernel<<<1, 1, 0, args.stream>>>(args.scores, args.values, args.block_len, args.num_blocks,
                                                     args.out);
  COURSE_CHECK_LAUNCH("max_replaced_first_update_kernel");
  COURSE_CUDA_CHECK(cudaStreamSynchronize(args.stream));
}

}  // namespace course::planted
