#pragma once
/// @file block_order.hpp
/// @brief The causal block order of the attention kernels as plain arithmetic on a block's
/// linear number, for host and device: module 3's Hopper forward steps and module 4's
/// tensor-core backward steps take their tiles through it (attention_blocks.cuh wraps it
/// with blockIdx), and a CPU test (module03_attention/tests/cpu_block_order.cpp) checks it.
///
/// Causal attention makes tiles unequal: a forward block's query tile sees more keys the
/// later it is, a backward block's key tile more queries the earlier it is. Longest first
/// evens out the last wave, but taken over ALL heads it gives every running block a
/// different head, and the blocks then share nothing in L2. So the heads go in groups of
/// `group_heads` (causal_group_heads), and inside a group the tile's rank (0: longest) is
/// the SLOW index of the linear number: the blocks running together are the tiles of a few
/// heads and read the same K/V (forward) or Q, dO and dQ rows (backward).

#include <cuda_runtime.h>

namespace course::m03 {

/// A block's work in a grouped order: `rank` among its head's tiles (0 first) and `head`
/// (the batch * head pair).
struct GroupedTile {
  int rank;
  int head;
};

/// Block `linear` of `tiles` x `batch_heads` work tiles, heads in groups of `group_heads`
/// (the last group may be smaller), rank the slow index inside a group. Every (rank, head)
/// comes out exactly once, and (rank - 1, head) always has the lower linear number.
__host__ __device__ inline GroupedTile grouped_causal_tile(long long linear, int tiles, int batch_heads,
                                                           int group_heads) {
  const long long per_group = static_cast<long long>(group_heads) * tiles;
  const int group = static_cast<int>(linear / per_group);
  const int first = group * group_heads;
  const int size = group_heads < batch_heads - first ? group_heads : batch_heads - first;
  const int r = static_cast<int>(linear - group * per_group);
  return {r / size, first + r % size};
}

/// Heads per group: enough that a group holds about two waves of blocks (2 x
/// `concurrent_blocks` tiles), so that the last group's longest tile starts early and the
/// tail is short tiles, as in longest first; but no more, so that the rows the running blocks
/// share stay few (forward, three heads at N = 16384, d = 128: 24 MB of K/V prefixes in the
/// 50 MB L2).
inline int causal_group_heads(long long tiles, long long batch_heads, long long concurrent_blocks) {
  const long long g = (2 * concurrent_blocks + tiles - 1) / tiles;
  return static_cast<int>(g < 1 ? 1 : (g > batch_heads ? batch_heads : g));
}

}  // namespace course::m03
