#pragma once
/// @file attention_indexing.cuh
/// @brief The stride arithmetic, the block order and the fields every attention kernel's
/// parameter block shares (device code: include it from .cu files only). Module 3's
/// forward steps (solutions/module03_attention/attention_device.cuh, and through it
/// attention_tc_device.cuh), module 4's backward steps
/// (solutions/module04_training/attention_backward_device.cuh) and the exercises' given
/// code include it, so that every attention kernel of the course computes a row's address
/// in one place. (Step row_offset asks you to write that function yourself, in
/// exercises/module03_attention/attention_device.cuh: that file does not include this one,
/// and copies block_coordinates and fill_attention_params instead.)

#include "module03/attention.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::m03 {

/// Element offset of row n of head h of batch b: the one place the course computes it.
/// 64-bit: B*H*N*d exceeds 2^31 for realistic tensors (16 x 32 heads x 32768 x 128 = 2^31).
__host__ __device__ __forceinline__ std::int64_t row_offset(const AttentionStrides& s, std::int64_t b,
                                                            std::int64_t h, std::int64_t n) {
  return b * s.batch + h * s.head + n * s.seq;
}

/// Which (query tile, batch*head pair) this block computes, for a grid of
/// (num_q_tiles, batch*heads). The hardware hands out blocks roughly in linear order
/// L = blockIdx.y * gridDim.x + blockIdx.x.
///  - No mask: every block costs the same; q tile = blockIdx.x, pair = blockIdx.y, so the
///    blocks running together share one head's K and V in L2.
///  - Causal: a block's cost grows with its q tile (the last tile sees every key, the first
///    almost none). Make the q tile the SLOW index of L, counted down: the heaviest tiles of
///    ALL heads start first and the light ones fill the last wave (longest job first). Only
///    reversing the tiles within each head still leaves the heavy tiles of the last heads
///    starting late, and a heavy block that runs nearly alone at the end is slow twice over.
__device__ __forceinline__ void block_coordinates(bool causal, int& q_tile, int& bh) {
  if (!causal) {
    q_tile = static_cast<int>(blockIdx.x);
    bh = static_cast<int>(blockIdx.y);
    return;
  }
  const long long linear = static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  q_tile = static_cast<int>(gridDim.x - 1 - linear / gridDim.y);
  bh = static_cast<int>(linear % gridDim.y);
}

/// Which (key tile, batch * kv head) this block computes, for a grid of (num_kv_tiles,
/// B * H_kv). No mask: key tile = blockIdx.x, so the blocks running together share one
/// head's Q and dO in L2. Causal: the key tile is the SLOW index of the linear block
/// number, counted up: the first key tiles (seen by the most query tiles) of all heads
/// start first. Either way block (kv_tile - 1, bhk) has a lower linear number than block
/// (kv_tile, bhk): the deterministic backward's blocks wait for their left neighbour only.
__device__ __forceinline__ void kv_block_coordinates(bool causal, int& kv_tile, int& bhk) {
  if (!causal) {
    kv_tile = static_cast<int>(blockIdx.x);
    bhk = static_cast<int>(blockIdx.y);
    return;
  }
  const long long linear = static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  kv_tile = static_cast<int>(linear / gridDim.y);
  bhk = static_cast<int>(linear % gridDim.y);
}

/// The fields of a kernel parameter block that every attention step fills the same way:
/// the Q, K, V, O and lse pointers, their strides and the shape (H, H / H_kv, N_q, N_k).
/// `Params` is the step's own block (fp32 or bf16, forward or backward), `Args` its
/// argument struct; the caller sets the rest (scale, causal offset, options).
template <class Params, class Args>
inline void fill_attention_params(Params& p, const Args& a) {
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.qs = a.q_strides;
  p.ks = a.k_strides;
  p.vs = a.v_strides;
  p.os = a.o_strides;
  p.heads = static_cast<int>(a.heads);
  p.group = static_cast<int>(a.heads / a.kv_heads);
  p.seq_q = static_cast<int>(a.seq_q);
  p.seq_k = static_cast<int>(a.seq_k);
}

}  // namespace course::m03
