/// @file attention_tc_planted.cu
/// @brief Deliberately wrong tensor-core attention kernels (see attention_tc_planted.hpp).
/// One simple kernel, d = 64: 4 warps x 16 query rows, 64-key tiles in plain (unswizzled)
/// shared memory loaded synchronously, S = Q K^T and O += P V with mma.sync, the online
/// softmax on the accumulator fragments, P re-packed as the A operand, O stored straight
/// from the fragments. Only the planted line separates each bug from the correct kernel.

#include "attention_tc_planted.hpp"

#include "course/cuda/mma_ptx.cuh"
#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace course::planted {
namespace {

using bf16 = __nv_bfloat16;
using m03::AttentionArgsBf16;
using m03::AttentionStrides;

enum class TcBug { none, fragment_row_mapping, o_not_rescaled, diagonal_mask_off_by_one, v_without_trans };

constexpr int kD = 64, kRows = 64, kKeys = 64, kThreads = 128;

struct TcParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* o;
  float* lse;
  AttentionStrides qs, ks, vs, os;
  int heads, group, seq_q, seq_k, off;
  float scale_log2;
  bool causal;
};

__device__ std::int64_t offset(const AttentionStrides& s, std::int64_t b, std::int64_t h, std::int64_t n) {
  return b * s.batch + h * s.head + n * s.seq;
}

/// rows [row0, row0 + 64) of one head into tile[64][64], zeros past `valid`.
__device__ void load_tile(bf16 (*tile)[kD], const bf16* head, std::int64_t stride, int row0, int valid) {
  for (int idx = threadIdx.x; idx < kRows * kD / 8; idx += kThreads) {
    const int r = idx / (kD / 8), c = idx % (kD / 8);
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < valid) x = *reinterpret_cast<const uint4*>(head + static_cast<std::int64_t>(row0 + r) * stride + 8 * c);
    *reinterpret_cast<uint4*>(&tile[r][8 * c]) = x;
  }
}

__device__ std::uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

template <TcBug kBug>
__global__ void __launch_bounds__(kThreads) planted_tc_kernel(const TcParams p) {
  __shared__ __align__(16) bf16 q_s[kRows][kD];
  __shared__ __align__(16) bf16 k_s[kKeys][kD];
  __shared__ __align__(16) bf16 v_s[kKeys][kD];
  const int bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
  const int q0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  load_tile(q_s, p.q + offset(p.qs, b, h, 0), p.qs.seq, q0, p.seq_q);

  float o[kD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  long long end = p.seq_k;
  if (p.causal) {
    const long long last = (q0 + kRows < p.seq_q ? q0 + kRows : p.seq_q) - 1;
    end = last + p.off + 1 < 0 ? 0 : (last + p.off + 1 > p.seq_k ? p.seq_k : last + p.off + 1);
  }
  for (int kv0 = 0; kv0 < end; kv0 += kKeys) {
    __syncthreads();
    load_tile(k_s, p.k + offset(p.ks, b, hk, 0), p.ks.seq, kv0, p.seq_k);
    load_tile(v_s, p.v + offset(p.vs, b, hk, 0), p.vs.seq, kv0, p.seq_k);
    __syncthreads();

    float s[kKeys / 8][4] = {};
    for (int ks = 0; ks < kD / 16; ++ks) {
      std::uint32_t a[4];
      cuda::ldmatrix_x4(a, cuda::smem_u32(&q_s[warp * 16 + (lane & 15)][16 * ks + 8 * (lane >> 4)]));
      for (int np = 0; np < kKeys / 16; ++np) {
        std::uint32_t kb[4];
        cuda::ldmatrix_x4(kb, cuda::smem_u32(&k_s[16 * np + (lane & 7) + 8 * (lane >> 4)][16 * ks + 8 * ((lane >> 3) & 1)]));
        const std::uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        cuda::mma_m16n8k16_bf16_f32(s[2 * np], a, b0);
        cuda::mma_m16n8k16_bf16_f32(s[2 * np + 1], a, b1);
      }
    }
    for (int j = 0; j < kKeys / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        const long long row = q0 + warp * 16 + g + 8 * (e >> 1), key = kv0 + 8 * j + 2 * t + (e & 1);
        bool hidden = key >= p.seq_k;
        if (p.causal) {
          if (kBug == TcBug::diagonal_mask_off_by_one) hidden = hidden || key >= row + p.off;  // BUG: hides j == i + off
          else hidden = hidden || key > row + p.off;
        }
        if (hidden) s[j][e] = -INFINITY;
      }
    std::uint32_t pk[kKeys / 8][2];
    for (int hr = 0; hr < 2; ++hr) {
      float mx = m[hr];
      for (int j = 0; j < kKeys / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * hr], s[j][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_scaled = mx == -INFINITY ? 0.f : mx * p.scale_log2;
      const float alpha = exp2f(m[hr] * p.scale_log2 - m_scaled);
      m[hr] = mx;
      l[hr] *= alpha;
      if (kBug != TcBug::o_not_rescaled)  // BUG for o_not_rescaled: O keeps the old scale
        for (int dt = 0; dt < kD / 8; ++dt) {
          o[dt][2 * hr] *= alpha;
          o[dt][2 * hr + 1] *= alpha;
        }
      for (int j = 0; j < kKeys / 8; ++j) {
        const float p0 = exp2f(s[j][2 * hr] * p.scale_log2 - m_scaled);
        const float p1 = exp2f(s[j][2 * hr + 1] * p.scale_log2 - m_scaled);
        l[hr] += p0 + p1;
        pk[j][hr] = pack(p0, p1);
      }
    }
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      std::uint32_t a[4];
      if (kBug == TcBug::fragment_row_mapping) {  // BUG: row g's keys 8-15 in row g+8's slot
        a[0] = pk[2 * kk][0];
        a[1] = pk[2 * kk + 1][0];
        a[2] = pk[2 * kk][1];
        a[3] = pk[2 * kk + 1][1];
      } else {
        a[0] = pk[2 * kk][0];
        a[1] = pk[2 * kk][1];
        a[2] = pk[2 * kk + 1][0];
        a[3] = pk[2 * kk + 1][1];
      }
      for (int dp = 0; dp < kD / 16; ++dp) {
        std::uint32_t vb[4];
        const std::uint32_t addr =
            cuda::smem_u32(&v_s[16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1)][16 * dp + 8 * (lane >> 4)]);
        if (kBug == TcBug::v_without_trans) cuda::ldmatrix_x4(vb, addr);  // BUG: V needs .trans
        else cuda::ldmatrix_x4_trans(vb, addr);
        const std::uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        cuda::mma_m16n8k16_bf16_f32(o[2 * dp], a, b0);
        cuda::mma_m16n8k16_bf16_f32(o[2 * dp + 1], a, b1);
      }
    }
  }

  for (int hr = 0; hr < 2; ++hr) {
    float sum = l[hr] + __shfl_xor_sync(0xffffffffu, l[hr], 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int i = q0 + warp * 16 + g + 8 * hr;
    if (i >= p.seq_q) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    bf16* row = p.o + offset(p.os, b, h, i);
    for (int dt = 0; dt < kD / 8; ++dt)
      *reinterpret_cast<std::uint32_t*>(row + 8 * dt + 2 * t) = pack(o[dt][2 * hr] * inv, o[dt][2 * hr + 1] * inv);
    if (p.lse != nullptr && t == 0)
      p.lse[static_cast<long long>(bh) * p.seq_q + i] =
          sum > 0.f ? (m[hr] * p.scale_log2 + log2f(sum)) * 0.6931471805599453f : -INFINITY;
  }
}

template <TcBug kBug>
void launch(const AttentionArgsBf16& a, const char* name) {
  m03::validate_attention_args(a, m03::AttentionStep::tc_register_softmax, name);
  require_arg(a.head_dim == kD, name, "head_dim", a.head_dim, "must be 64 for the planted tensor-core kernels");
  TcParams p{a.q, a.k, a.v, a.o, a.lse, a.q_strides, a.k_strides, a.v_strides, a.o_strides,
             static_cast<int>(a.heads), static_cast<int>(a.heads / a.kv_heads), static_cast<int>(a.seq_q),
             static_cast<int>(a.seq_k), static_cast<int>(a.seq_k - a.seq_q),
             m03::effective_scale(a) * 1.4426950408889634f, a.causal};
  const dim3 grid(static_cast<unsigned>((a.seq_q + kRows - 1) / kRows), static_cast<unsigned>(a.batch * a.heads));
  planted_tc_kernel<kBug><<<grid, kThreads, 0, a.stream>>>(p);
  COURSE_CHECK_LAUNCH(name);
}

}  // namespace

void attention_tc_reference_kernel(m03::AttentionStep, const m03::AttentionArgsBf16& a) {
  launch<TcBug::none>(a, "attention_tc_reference_kernel");
}
void attention_tc_fragment_row_mapping(m03::AttentionStep, const m03::AttentionArgsBf16& a) {
  launch<TcBug::fragment_row_mapping>(a, "attention_tc_fragment_row_mapping");
}
void attention_tc_o_not_rescaled(m03::AttentionStep, const m03::AttentionArgsBf16& a) {
  launch<TcBug::o_not_rescaled>(a, "attention_tc_o_not_rescaled");
}
void attention_tc_diagonal_mask_off_by_one(m03::AttentionStep, const m03::AttentionArgsBf16& a) {
  launch<TcBug::diagonal_mask_off_by_one>(a, "attention_tc_diagonal_mask_off_by_one");
}
void attention_tc_v_without_trans(m03::AttentionStep, const m03::AttentionArgsBf16& a) {
  launch<TcBug::v_without_trans>(a, "attention_tc_v_without_trans");
}

}  // namespace course::planted
