#pragma once
/// @file attention_tc_device.cuh
/// @brief Device helpers shared by the tensor-core attention steps (the kernels of
/// attention_tc.cuh, attention_tc_flash.cuh and attention_tc_hopper.cuh): the kernel parameter block, the shared-memory tile geometry
/// (plain or XOR-swizzled rows of 16-byte chunks), the cp.async tile copier, the causal
/// key range and the bf16 packing of fragments. Private to solutions/module03_attention.
/// The PTX wrappers (cp.async, ldmatrix, mma.sync, ex2, swizzle_chunk) come from
/// course/cuda/mma_ptx.cuh, the quad reductions from course/cuda/warp_reduce.cuh, the
/// stride arithmetic and the block order from module 3's public
/// module03/attention_indexing.cuh.

#include "attention_device.cuh"

#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/tile.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"
#include "module03/attention.hpp"
#include "module03/attention_indexing.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace course::solution::attn_tc {

using bf16 = __nv_bfloat16;
using m03::AttentionArgsBf16;
using m03::AttentionStrides;
using m03::block_coordinates;
using m03::causal_group_heads;
using m03::grouped_tile_coordinates;
using m03::row_offset;

/// log2(e): e^x = 2^(x * log2(e)).
constexpr float kLog2e = 1.4426950408889634f;

/// Everything a tensor-core kernel needs, by value.
struct TcParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* o;
  float* lse;  ///< may be null
  AttentionStrides qs, ks, vs, os;
  int heads;          ///< H
  int group;          ///< H / H_kv
  int seq_q;          ///< N_q
  int seq_k;          ///< N_k
  int causal_offset;  ///< N_k - N_q: query i sees key j iff j <= i + causal_offset
  float scale;        ///< softmax scale (natural units)
  float scale_log2;   ///< scale * log2(e): exp(scale * x) = 2^(scale_log2 * x)
};

inline TcParams make_tc_params(const AttentionArgsBf16& a) {
  TcParams p{};
  m03::fill_attention_params(p, a);
  p.causal_offset = static_cast<int>(a.seq_k - a.seq_q);
  p.scale = m03::effective_scale(a);
  p.scale_log2 = p.scale * kLog2e;
  return p;
}

/// One past the last key any query row in [q0, q0 + rows) may see when causal, clamped
/// to [0, N_k]; N_k otherwise. Tiles at or beyond it are never loaded.
template <bool kCausal>
__device__ __forceinline__ int kv_end(const TcParams& p, int q0, int rows) {
  if (!kCausal) return p.seq_k;
  const long long last_row = min(static_cast<long long>(q0) + rows, static_cast<long long>(p.seq_q)) - 1;
  const long long end = last_row + p.causal_offset + 1;
  return static_cast<int>(end < 0 ? 0 : (end > p.seq_k ? p.seq_k : end));
}

/// Does the key tile [kv0, kv0 + kBlockN) need a per-score mask for the query rows
/// [q0, q0 + rows)? Only the tail tile (keys past N_k) and, when causal, the tiles that
/// reach past the FIRST row's last visible key q0 + causal_offset.
template <bool kCausal, int kBlockN>
__device__ __forceinline__ bool tile_needs_mask(const TcParams& p, int q0, int kv0) {
  const long long last_key = static_cast<long long>(kv0) + kBlockN - 1;
  return last_key >= p.seq_k || (kCausal && last_key > static_cast<long long>(q0) + p.causal_offset);
}

/// Is key `key` hidden from query row `row` (tail or causal)?
template <bool kCausal>
__device__ __forceinline__ bool key_hidden(const TcParams& p, int row, int key) {
  return key >= p.seq_k || (kCausal && static_cast<long long>(key) > static_cast<long long>(row) + p.causal_offset);
}

// The bf16 packing, the tile geometry (plain or swizzled rows of 16-byte chunks), the
// cp.async tile copier and the aligned dynamic shared-memory base are course/cuda/tile.cuh's (shared with module 4's
// tensor-core backward).
using cuda::align_smem;
using cuda::kSmemAlign;
using cuda::pack_bf16x2;
using cuda::pow2_ceil;
using cuda::TileCopier;
using cuda::TileGeom;

/// Streams consecutive [kRows][D] tiles of one head (K or V: tile 0, 1, 2, ... in order)
/// global -> shared with cp.async, with the thread mapping of TileCopier. Its state is
/// this thread's source pointer in the next tile, the 64-bit step between passes and the
/// rows left: after the kPasses of one tile the pointer already sits on the next tile,
/// so a stream keeps 5 registers live through the main loop and computes no addresses.
template <int D, int kRows, int kThreads>
struct TileStream {
  using Geom = TileGeom<D, true>;
  static constexpr int kChunks = Geom::kChunks;
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kPasses = (kRows + kRowStep - 1) / kRowStep;
  static constexpr bool kAllActive = kRowStep * kChunks == kThreads;  // d = 96: 8 of 128 threads idle
  const bf16* src;       ///< this thread's chunk in the first row it copies of the next tile
  std::int64_t stride;   ///< seq stride in elements
  std::uint32_t dst;     ///< byte offset of that chunk inside a tile
  int rows_left;         ///< tensor rows from that row on (<= 0: past the end)
  bool active;           ///< the thread copies anything (always, unless d = 96)

  /// `head`: row 0 of the head; `rows`: rows in the tensor (N_k).
  __device__ __forceinline__ TileStream(const bf16* head, std::int64_t seq_stride, int rows) {
    const int row = threadIdx.x / kChunks, chunk = threadIdx.x % kChunks;
    src = head + static_cast<std::int64_t>(row) * seq_stride + 8 * chunk;
    stride = seq_stride;
    dst = Geom::offset(row, chunk);
    rows_left = rows - row;
    active = kAllActive || row < kRowStep;
  }
  /// Issue the copies of the next tile into the tile at `smem_tile` (no commit); rows past
  /// the tensor are zero-filled (`any` is some valid global address: nothing is read).
  __device__ __forceinline__ void copy_next(std::uint32_t smem_tile, const void* any) {
    if (active) {
      const int row = static_cast<int>(threadIdx.x) / kChunks;
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        if (kRows % kRowStep == 0 || row + i * kRowStep < kRows) {  // d = 96: a partial last pass
          const bool valid = i * kRowStep < rows_left;
          std::uint32_t off;
          if constexpr (kRowStep % 8 == 0)  // the swizzle key repeats every 8 rows
            off = dst + i * kRowStep * Geom::kRowBytes;
          else
            off = Geom::offset(row + i * kRowStep, static_cast<int>(threadIdx.x) % kChunks);
          cuda::cp_async_16_zfill(smem_tile + off, valid ? static_cast<const void*>(src) : any, valid ? 16 : 0);
        }
        src += kRowStep * stride;
      }
      if constexpr (kRows % kRowStep != 0) src += (kRows - kPasses * kRowStep) * stride;  // back to the next tile
    }
    rows_left -= kRows;
  }
};

/// Copies the first `valid_rows` rows of a [kRows][D] bf16 tile from shared memory to
/// global rows row0.. of one head of O (16-byte loads and stores, coalesced along rows).
template <int D, int kRows, int kThreads, bool kSwizzle>
__device__ __forceinline__ void store_tile(const unsigned char* smem_tile, bf16* head, std::int64_t seq_stride,
                                           int row0, int valid_rows) {
  using Geom = TileGeom<D, kSwizzle>;
  constexpr int kChunks = Geom::kChunks;
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    if (r >= valid_rows) break;  // idx grows with r: nothing further is valid either
    const uint4 x = *reinterpret_cast<const uint4*>(smem_tile + Geom::offset(r, c));
    *reinterpret_cast<uint4*>(head + (static_cast<std::int64_t>(row0) + r) * seq_stride + 8 * c) = x;
  }
}

// Launchers (one per step), defined next to their kernels.
void launch_tc_mma(const AttentionArgsBf16& a);                 // attention_tc.cu
void launch_tc_swizzled_pipelined(const AttentionArgsBf16& a);  // attention_tc.cu
void launch_tc_register_softmax(const AttentionArgsBf16& a);    // attention_tc_flash.cu
void launch_tc_flash2(const AttentionArgsBf16& a);              // attention_tc_flash.cu
void launch_tc_wgmma(const AttentionArgsBf16& a);               // attention_tc_hopper.cu
void launch_tc_warp_specialized(const AttentionArgsBf16& a);    // attention_tc_hopper.cu
void launch_tc_pingpong(const AttentionArgsBf16& a);            // attention_tc_hopper.cu
void launch_tc_overlap(const AttentionArgsBf16& a);             // attention_tc_hopper.cu
void launch_tc_persistent(const AttentionArgsBf16& a);          // attention_tc_hopper.cu

}  // namespace course::solution::attn_tc
