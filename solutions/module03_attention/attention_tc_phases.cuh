#pragma once
/// @file attention_tc_phases.cuh
/// @brief The given phases of the tensor-core attention kernels (attention_tc.cuh:
/// smem_softmax_kernel, steps tc_mma and tc_swizzled_pipelined; attention_tc_flash.cuh:
/// register_softmax_kernel, steps tc_register_softmax and tc_flash2), which the solution and
/// the exercise (exercises/module03_attention/attention_tc.cu) both run. The phases a learner
/// writes are not here: each side passes its own to the kernels as their `Phases` parameter,
/// under the same names and signatures -- scores_qk and accumulate_pv (tc_mma), swizzle_chunk
/// (tc_swizzled_pipelined), softmax_on_fragments and a_fragment (tc_register_softmax).
///
/// Every phase is a forceinline function template on the kernel's tile configuration (T:
/// SmemSoftmaxTile, Cfg: FlashConfig) and, where it reads the parameter block, on its type. Fragments come by reference; register arrays a loop indexes
/// are declared by the kernel and passed in, so that each kernel compiles to the code it had
/// with its phases written out (checked on the sm_90a SASS).

#include "attention_tc_device.cuh"

#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/tile.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "module03/attention_indexing.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace course::attn_tc_phases {

using bf16 = __nv_bfloat16;
using cuda::pack_bf16x2;

/// smem_softmax_kernel (steps 6-7): one warp owns 16 query rows; lane (g = lane/4, t =
/// lane%4) holds the mma fragments of S and O, and for the softmax two lanes share a row
/// (sm_row = lane/2, sm_half = lane%2).
namespace smem {

/// S to shared memory: row g gets s[j][0..1] at keys 8j+2t, row g+8 s[j][2..3].
template <class T>
__device__ __forceinline__ void store_scores(float* s_warp, const float (&s)[T::kSTiles][4], int g, int t) {
#pragma unroll
  for (int j = 0; j < T::kSTiles; ++j) {
    *reinterpret_cast<float2*>(s_warp + g * T::kLdS + 8 * j + 2 * t) = make_float2(s[j][0], s[j][1]);
    *reinterpret_cast<float2*>(s_warp + (g + 8) * T::kLdS + 8 * j + 2 * t) = make_float2(s[j][2], s[j][3]);
  }
}

/// This lane's 32 scores of row sm_row (float4 chunks 2c + sm_half), times the scale.
template <class T>
__device__ __forceinline__ void load_scaled_scores(float (&x)[32], const float* s_warp, int sm_row, int sm_half,
                                                   float scale) {
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const float4 v4 = *reinterpret_cast<const float4*>(s_warp + sm_row * T::kLdS + 4 * (2 * c + sm_half));
    x[4 * c + 0] = v4.x * scale;
    x[4 * c + 1] = v4.y * scale;
    x[4 * c + 2] = v4.z * scale;
    x[4 * c + 3] = v4.w * scale;
  }
}

/// The exponentials of the online softmax (m_ref: exp_reference of the new max), added to
/// this lane's partial row sum l and written to the P tile as bf16.
__device__ __forceinline__ void write_probabilities(bf16* p_row, const float (&x)[32], float (&pr)[4], float m_ref,
                                                    float& l, int sm_half) {
#pragma unroll
  for (int c = 0; c < 8; ++c) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      pr[e] = __expf(x[4 * c + e] - m_ref);
      l += pr[e];
    }
    *reinterpret_cast<uint2*>(p_row + 4 * (2 * c + sm_half)) = make_uint2(pack_bf16x2(pr[0], pr[1]), pack_bf16x2(pr[2], pr[3]));
  }
}

/// O *= alpha: the O fragment rows are g and g+8; their alphas live on lanes 2g and 2(g+8).
template <class T>
__device__ __forceinline__ void rescale_accumulator(float (&o)[T::kOTiles][4], float alpha, int g) {
  const float alpha_lo = __shfl_sync(0xffffffffu, alpha, 2 * g);
  const float alpha_hi = __shfl_sync(0xffffffffu, alpha, 2 * g + 16);
#pragma unroll
  for (int dt = 0; dt < T::kOTiles; ++dt) {
    o[dt][0] *= alpha_lo;
    o[dt][1] *= alpha_lo;
    o[dt][2] *= alpha_hi;
    o[dt][3] *= alpha_hi;
  }
}

/// Epilogue straight from the fragments: O = acc / l as bf16 pairs, lse = m + ln l.
template <class T, class Params>
__device__ __forceinline__ void write_output_and_lse(const Params& p, const float (&o)[T::kOTiles][4], float m,
                                                     float l, int b, int h, int bh, int q0, int warp_row0, int g,
                                                     int t, int sm_half, int sm_i) {
  const float l_row = l + __shfl_xor_sync(0xffffffffu, l, 1);  // both halves of row sm_row
  const float l_lo = __shfl_sync(0xffffffffu, l_row, 2 * g), l_hi = __shfl_sync(0xffffffffu, l_row, 2 * g + 16);
  const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
  const int i_lo = q0 + warp_row0 + g, i_hi = i_lo + 8;
  bf16* o_head = p.o + m03::row_offset(p.os, b, h, 0);
#pragma unroll
  for (int dt = 0; dt < T::kOTiles; ++dt) {
    if (i_lo < p.seq_q)
      *reinterpret_cast<std::uint32_t*>(o_head + static_cast<std::int64_t>(i_lo) * p.os.seq + 8 * dt + 2 * t) =
          pack_bf16x2(o[dt][0] * inv_lo, o[dt][1] * inv_lo);
    if (i_hi < p.seq_q)
      *reinterpret_cast<std::uint32_t*>(o_head + static_cast<std::int64_t>(i_hi) * p.os.seq + 8 * dt + 2 * t) =
          pack_bf16x2(o[dt][2] * inv_hi, o[dt][3] * inv_hi);
  }
  if (p.lse != nullptr && sm_half == 0 && sm_i < p.seq_q)
    p.lse[static_cast<long long>(bh) * p.seq_q + sm_i] = l_row > 0.f ? m + logf(l_row) : -INFINITY;
}

}  // namespace smem

/// register_softmax_kernel (steps 8-9): one warp owns kMTiles m16 tiles of query rows; the
/// softmax runs on the accumulator fragments.
namespace flash {

/// O = 0, running max = -inf, running sum = 0.
template <class Cfg>
__device__ __forceinline__ void init_accumulators(float (&o)[Cfg::kMTiles][Cfg::kOTiles][4],
                                                  float (&row_max)[Cfg::kMTiles][2],
                                                  float (&row_sum)[Cfg::kMTiles][2]) {
#pragma unroll
  for (int mi = 0; mi < Cfg::kMTiles; ++mi) {
#pragma unroll
    for (int dt = 0; dt < Cfg::kOTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mi][dt][e] = 0.f;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      row_max[mi][hr] = -INFINITY;
      row_sum[mi][hr] = 0.f;
    }
  }
}

/// Q's A fragments of the warp's rows, once, into registers (configurations with kQInRegs).
template <class Cfg>
__device__ __forceinline__ void load_q_fragments(std::uint32_t (&qf)[Cfg::kMTiles][Cfg::kDSteps][4],
                                                 std::uint32_t q_lane) {
#pragma unroll
  for (int mi = 0; mi < Cfg::kMTiles; ++mi)
#pragma unroll
    for (int ks = 0; ks < Cfg::kDSteps; ++ks)
      cuda::ldmatrix_x4(qf[mi][ks], (q_lane ^ (32 * ks)) + mi * 16 * Cfg::Geom::kRowBytes);
}

/// S = 0 before the k16 steps of Q K^T.
template <class Cfg>
__device__ __forceinline__ void clear_scores(float (&s)[Cfg::kMTiles][Cfg::kSTiles][4]) {
#pragma unroll
  for (int mi = 0; mi < Cfg::kMTiles; ++mi)
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mi][j][e] = 0.f;
}

/// The A operands (Q, 16 rows x 16 dims per m16 tile) of k16 step ks of S = Q K^T: from the
/// registers (kQInRegs) or with ldmatrix from the Q tile.
template <class Cfg, class QFrags>
__device__ __forceinline__ void load_q_operand(std::uint32_t (&a)[Cfg::kMTiles][4], const QFrags& qf,
                                               std::uint32_t q_lane, int ks) {
#pragma unroll
  for (int mi = 0; mi < Cfg::kMTiles; ++mi) {
    if constexpr (Cfg::kQInRegs) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[mi][r] = qf[mi][ks][r];
    } else {
      cuda::ldmatrix_x4(a[mi], (q_lane ^ (32 * ks)) + mi * 16 * Cfg::Geom::kRowBytes);
    }
  }
}

/// S += Q K^T over k16 step ks: kMTiles x kSTiles accumulator tiles of 16 x 8; each
/// ldmatrix.x4 of K gives the B operands of two n8 tiles, each used by every m16 tile.
template <class Cfg>
__device__ __forceinline__ void accumulate_qk(float (&s)[Cfg::kMTiles][Cfg::kSTiles][4],
                                              const std::uint32_t (&a)[Cfg::kMTiles][4], std::uint32_t k_addr, int ks) {
#pragma unroll
  for (int np = 0; np < Cfg::kSTiles / 2; ++np) {
    std::uint32_t kb[4];
    cuda::ldmatrix_x4(kb, (k_addr ^ (32 * ks)) + 16 * np * Cfg::Geom::kRowBytes);
    const std::uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
#pragma unroll
    for (int mi = 0; mi < Cfg::kMTiles; ++mi) {
      cuda::mma_m16n8k16_bf16_f32(s[mi][2 * np], a[mi], b0);
      cuda::mma_m16n8k16_bf16_f32(s[mi][2 * np + 1], a[mi], b1);
    }
  }
}

/// Epilogue: O = acc / l as bf16 through shared memory (the Q tile, free once every warp is
/// done) and out with 16-byte coalesced stores; lse = (m*scale*log2e + log2 l) * ln 2.
template <class Cfg, bool kCausal, class Params>
__device__ __forceinline__ void write_output_and_lse(unsigned char* smem, const Params& p, int q0, int warp_row0,
                                                     int g, int t, const float (&o)[Cfg::kMTiles][Cfg::kOTiles][4],
                                                     const float (&row_max)[Cfg::kMTiles][2],
                                                     const float (&row_sum)[Cfg::kMTiles][2]) {
  constexpr int kBM = Cfg::kBlockM;
  cuda::cp_async_wait<0>();
  __syncthreads();  // every warp is done with Q, K and V
  int q_tile, bh;
  m03::block_coordinates(kCausal, q_tile, bh);  // recomputed here: fewer registers live through the loop
  constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
  for (int mi = 0; mi < Cfg::kMTiles; ++mi)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float l = cuda::warp_sum<4>(row_sum[mi][hr]);
      const float inv = l > 0.f ? 1.f / l : 0.f;  // a row that sees no key: O = 0
      const int r = warp_row0 + 16 * mi + g + 8 * hr;
#pragma unroll
      for (int dt = 0; dt < Cfg::kOTiles; ++dt) {
        const std::uint32_t packed = pack_bf16x2(o[mi][dt][2 * hr] * inv, o[mi][dt][2 * hr + 1] * inv);
        *reinterpret_cast<std::uint32_t*>(smem + Cfg::Geom::offset(r, dt) + 4 * t) = packed;
      }
      if (p.lse != nullptr && t == 0 && q0 + r < p.seq_q)
        p.lse[static_cast<long long>(bh) * p.seq_q + q0 + r] =
            l > 0.f ? (row_max[mi][hr] * p.scale_log2 + __log2f(l)) * kLn2 : -INFINITY;
    }
  __syncthreads();
  bf16* o_head = p.o + m03::row_offset(p.os, bh / p.heads, bh % p.heads, 0);
  solution::attn_tc::store_tile<Cfg::D, kBM, Cfg::kThreads, true>(smem, o_head, p.os.seq, q0, min(kBM, p.seq_q - q0));
}

}  // namespace flash

}  // namespace course::attn_tc_phases
