#pragma once
/// @file attention_blocks.cuh
/// @brief Which tile a block of an attention kernel computes, and the fields every
/// attention parameter block fills the same way (device code: include it from .cu files
/// only). Part of module03/attention_indexing.cuh, which includes it; on its own for the
/// exercise of step row_offset (exercises/module03_attention/attention_device.cuh), which
/// writes its own row_offset and so must not see module 3's.

#include "module03/attention.hpp"
#include "module03/block_order.hpp"

#include <cuda_runtime.h>

namespace course::m03 {

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
///    But the blocks running together then all belong to different heads and share no K/V
///    in L2: grouped_tile_coordinates (the Hopper steps) keeps longest first within groups
///    of heads instead.
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

/// The Hopper steps' order (steps 11-14): work tile `linear` of q_tiles x batch_heads as
/// (query tile, batch*head pair). No mask: as block_coordinates. Causal: block_coordinates'
/// longest-first order over ALL heads gives every running block a different head, so no two
/// of them share a K/V tile in L2 (ncu, H100, N = 1024, d = 128: 667 MB read from DRAM,
/// exactly Q once plus every block's K/V prefix: the kernel is bound by HBM, not by the
/// tensor cores). Here the heads go in groups of `group_heads`; inside a group the query
/// tile is the slow index, counted down (longest first within the group), so the blocks
/// running together are the tiles of a few heads and read the same K/V prefixes.
/// causal_group_heads picks the group size.
__device__ __forceinline__ void grouped_tile_coordinates(bool causal, long long linear, int q_tiles, int batch_heads,
                                                         int group_heads, int& q_tile, int& bh) {
  if (!causal) {
    q_tile = static_cast<int>(linear % q_tiles);
    bh = static_cast<int>(linear / q_tiles);
    return;
  }
  const GroupedTile g = grouped_causal_tile(linear, q_tiles, batch_heads, group_heads);
  q_tile = q_tiles - 1 - g.rank;  // rank 0: the last query tile, which sees the most keys
  bh = g.head;
}

/// Which (key tile, batch * kv head) this block computes, for a grid of (num_kv_tiles,
/// B * H_kv), with the heads in groups of `group_heads` (the backward's order). No mask:
/// key tile = blockIdx.x, so the blocks running together share one head's Q and dO in L2.
/// Causal: inside a group the key tile is the SLOW index of the linear block number, counted
/// up: the first key tiles (seen by the most query tiles) start first, longest first within
/// the group, and the blocks running together are the key tiles of a few heads, which read
/// the same Q, dO and dQ rows. group_heads = B * H_kv (kv_block_coordinates) puts every
/// head in one group: all heads' first key tiles first, every running block on a different
/// head, none of them sharing a byte in L2 (the tensor-core steps pass
/// causal_group_heads(key tiles, ...) instead). Either way block (kv_tile - 1, bhk) has a
/// lower linear number than block (kv_tile, bhk): the fp32 deterministic backward's blocks
/// wait for their left neighbour only. (Module 4's tensor-core turn steps run the key tiles
/// the other way round, and add in that order too: module04/attention_backward.hpp,
/// tc_dq_turn_place.)
__device__ __forceinline__ void grouped_kv_block_coordinates(bool causal, int group_heads, int& kv_tile, int& bhk) {
  if (!causal) {
    kv_tile = static_cast<int>(blockIdx.x);
    bhk = static_cast<int>(blockIdx.y);
    return;
  }
  const long long linear = static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  const GroupedTile g =
      grouped_causal_tile(linear, static_cast<int>(gridDim.x), static_cast<int>(gridDim.y), group_heads);
  kv_tile = g.rank;  // rank 0: key tile 0, which the most query tiles see
  bhk = g.head;
}

/// grouped_kv_block_coordinates with every head in one group (the fp32 flash backward).
__device__ __forceinline__ void kv_block_coordinates(bool causal, int& kv_tile, int& bhk) {
  grouped_kv_block_coordinates(causal, static_cast<int>(gridDim.y), kv_tile, bhk);
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
