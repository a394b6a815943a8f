#pragma once
/// @file attention_backward_device.cuh
/// @brief The launchers of the attention-backward steps, shared by the files of
/// solutions/module04_training (dispatcher: attention_backward.cu; step naive:
/// attention_backward_naive.cu; steps flash and flash_deterministic:
/// attention_backward_flash.cu, kernels in attention_backward_flash.cuh). Private to the solution. The stride arithmetic, the
/// block order and the shared parameter fields are module 3's public
/// module03/attention_indexing.cuh.

#include "module03/attention_indexing.cuh"
#include "module04/attention_backward.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::solution::attn_bwd {

using m03::AttentionStrides;

// Module 3's stride arithmetic and block order (module03/attention_indexing.cuh).
using m03::block_coordinates;
using m03::kv_block_coordinates;
using m03::row_offset;

/// Everything the flash kernels need, by value (well under the 4 KB parameter space).
struct Params {
  const float* q;
  const float* k;
  const float* v;
  const float* o;
  const float* dout;
  const float* lse;    ///< [B*H*N_q], natural log
  const float* d_row;  ///< D = rowsum(dO * O), [B*H*N_q] (the workspace)
  float* dq;
  float* dk;
  float* dv;
  AttentionStrides qs, ks, vs, os, dos, dqs, dks, dvs;
  int heads;     ///< H
  int kv_heads;  ///< H_kv
  int group;     ///< H / H_kv: query heads per kv head
  int seq_q;     ///< N_q
  int seq_k;     ///< N_k
  long long causal_offset;  ///< N_k - N_q: query i sees key j iff j <= i + causal_offset
  int* dq_turns;  ///< flash_deterministic: [B*H, q_tiles] dQ turn counters (the workspace), else null
  int q_tiles;    ///< ceil(N_q / m04::kFlashBackwardQTile): query tiles per head
  float scale;              ///< softmax scale (dQ and dK are multiplied by it)
  float scale_log2;         ///< scale * log2(e): P = exp2(s * scale_log2 - lse * log2(e))
};

inline Params make_params(const m04::AttentionBackwardArgs& a) {
  Params p{};
  m03::fill_attention_params(p, a);  // Q, K, V, O, lse, their strides, the shape
  p.dout = a.dout;
  p.d_row = a.workspace;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.dos = a.do_strides;
  p.dqs = a.dq_strides;
  p.dks = a.dk_strides;
  p.dvs = a.dv_strides;
  p.kv_heads = static_cast<int>(a.kv_heads);
  p.causal_offset = static_cast<long long>(a.seq_k) - static_cast<long long>(a.seq_q);
  p.dq_turns = nullptr;
  p.q_tiles = static_cast<int>((a.seq_q + m04::kFlashBackwardQTile - 1) / m04::kFlashBackwardQTile);
  p.scale = m04::effective_scale(a);
  p.scale_log2 = static_cast<float>(static_cast<double>(p.scale) * 1.4426950408889634073599246810019);
  return p;
}

/// Step naive: S, P and dP materialized in args.workspace (module 2 GEMMs + softmax backward).
void launch_naive(const m04::AttentionBackwardArgs& args);
// @step row_dot  (the exercise's written flag; the solution has none)
// @end
/// D[b, h, i] = dO_i . O_i into `d` ([B, H, N_q] contiguous); when `zero_dq`, also dQ = 0
/// (the flash steps accumulate dQ with atomics into a zeroed dq); when `turns` is not null,
/// also the dQ turn counters of flash_deterministic ([B*H, ceil(N_q / 64)] ints) = 0.
void launch_row_dot(const m04::AttentionBackwardArgs& args, float* d, bool zero_dq, int* turns = nullptr);
// @step flash  (the exercise's written flag)
// @end
/// Step flash: D, then the K/V-parallel kernel with dQ atomics.
void launch_flash(const m04::AttentionBackwardArgs& args);
// @step flash_deterministic  (the exercise's written flag)
// @end
/// Step flash_deterministic: D (and the turns reset), the K/V-parallel kernel with dQ added
/// in K/V-tile order.
void launch_flash_deterministic(const m04::AttentionBackwardArgs& args);

}  // namespace course::solution::attn_bwd
