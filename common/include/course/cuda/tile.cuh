#pragma once
/// @file tile.cuh
/// @brief Shared-memory tiles of bf16 rows for the mma.sync kernels: the packing of two
/// floats into one fragment register, the byte offset of a 16-byte chunk in a plain or
/// XOR-swizzled tile, the aligned base of dynamic shared memory, and a cp.async copier of
/// whole tiles.
/// Used by module 3's mma.sync attention steps (solutions: attention_tc_device.cuh,
/// attention_tc_phases.cuh, attention_tc.cuh, attention_tc_flash.cuh, which its exercise
/// attention_tc.cu includes) and module 4's tensor-core
/// attention backward (attention_backward_tc.cuh, which its exercise includes; Sw128Geom:
/// attention_backward_tc_wgmma.cuh).

#include "course/cuda/mma_ptx.cuh"

#include <cuda_bf16.h>

#include <cstdint>

namespace course::cuda {

/// Two floats as one register of two bf16 (round to nearest even), `lo` in the low half:
/// the packing of every mma.sync A/B fragment register.
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

/// Smallest power of two >= x (x >= 1).
constexpr int pow2_ceil(int x) { return x <= 1 ? 1 : 2 * pow2_ceil((x + 1) / 2); }

/// Geometry of a [rows][D] bf16 tile in shared memory, as rows of 16-byte chunks (8 bf16).
///   kSwizzle = false: row r, chunk c at byte r * 2D + 16c, the global layout as is.
///     With 2D a multiple of 128 bytes, the 8 rows an ldmatrix phase reads all start in
///     the same bank group: an 8-way bank conflict (module 3's step tc_mma measures it).
///   kSwizzle = true: rows padded to a power-of-two number of chunks (d = 96: 16 chunks,
///     4 unused) and chunk c of row r stored at chunk swizzle_chunk(r, c) (c XOR the row's
///     position in its group of 8 lines): the 8 rows of every ldmatrix phase, and the 8
///     rows a cp.async pass writes, hit 8 different bank groups.
template <int D, bool kSwizzle>
struct TileGeom {
  static_assert(D % 16 == 0 && D >= 32 && D <= 128, "head_dim: 32, 64, 96, 128");
  static constexpr int kChunks = D / 8;  ///< 16-byte chunks per row in global memory
  static constexpr int kRowChunks = kSwizzle ? pow2_ceil(kChunks) : kChunks;
  static constexpr int kRowBytes = 16 * kRowChunks;
  /// Byte offset of chunk `chunk` of row `row`.
  __device__ __forceinline__ static std::uint32_t offset(int row, int chunk) {
    if constexpr (kSwizzle)
      return static_cast<std::uint32_t>(row * kRowBytes + 16 * swizzle_chunk<kRowChunks>(row, chunk));
    else
      return static_cast<std::uint32_t>(row * kRowBytes + 16 * chunk);
  }
};

/// Geometry of a [kRows][D] bf16 tile in the layout wgmma's 128-byte-swizzle descriptors
/// read (wgmma_desc_sw128, mma_ptx.cuh): D / 64 column blocks, each [kRows][64] (rows of 128
/// bytes), 16-byte chunk c of row r at chunk (c % 8) ^ (r % 8) of its row in block c / 8.
/// The tile must start 1024-byte aligned (a swizzle atom is 8 rows x 128 bytes). Same chunk
/// interface as TileGeom, so TileCopier fills it (module 4's step tc_wgmma; module 3's
/// Hopper steps compute the same offset as sw128_offset).
template <int D, int kRows>
struct Sw128Geom {
  static_assert(D % 64 == 0 && kRows % 8 == 0, "whole 128-byte swizzle atoms: D a multiple of 64, rows of 8");
  static constexpr int kChunks = D / 8;
  static constexpr int kBlockBytes = kRows * 128;  ///< one 64-column block
  __device__ __forceinline__ static std::uint32_t offset(int row, int chunk) {
    return static_cast<std::uint32_t>((chunk / 8) * kBlockBytes + row * 128 + (((chunk % 8) ^ (row % 8)) * 16));
  }
};

/// The address tricks of the swizzled kernels (a chunk step as an XOR of address bits)
/// need every tile to start at a multiple of its row length (up to 256 bytes): the
/// kernels round the dynamic shared-memory base up to kSmemAlign and ask for kSmemAlign
/// bytes more (the base is normally 1024-aligned already; this makes it a guarantee).
constexpr int kSmemAlign = 1024;
__device__ __forceinline__ unsigned char* align_smem(unsigned char* p) {
  const std::uint32_t a = smem_u32(p);
  return p + ((kSmemAlign - a % kSmemAlign) % kSmemAlign);
}

/// Copies a [kRows][D] tile (rows row0 .. row0 + kRows - 1 of one head, rows at or past
/// `valid_rows` zero-filled) global -> shared with cp.async, kThreads threads. Thread t
/// owns chunk column t % kChunks of rows t / kChunks + i * kRowStep: per pass the block
/// reads kRowStep whole rows, each 2D contiguous bytes (coalesced). d = 96 (12 chunks)
/// leaves 128 % 12 = 8 threads idle. The column and the first row are computed once.
/// GeomT places the chunks: TileGeom<D, kSwizzle> unless a kernel brings its own geometry
/// with the same rows and another chunk placement (module 3's exercise: the learner's swizzle).
template <int D, int kRows, int kThreads, bool kSwizzle, class GeomT = TileGeom<D, kSwizzle>>
struct TileCopier {
  using Geom = GeomT;
  static constexpr int kChunks = Geom::kChunks;
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kPasses = (kRows + kRowStep - 1) / kRowStep;
  int row;     ///< first row of this thread in the tile (>= kRowStep: idle thread)
  int chunk;   ///< chunk column of this thread

  __device__ __forceinline__ TileCopier() : row(threadIdx.x / kChunks), chunk(threadIdx.x % kChunks) {}

  /// Issue the copies (no commit). `head`: row 0 of the head, `seq_stride` in elements.
  /// The source pointer advances by one 64-bit add per pass and the rows left are one
  /// count, so the copies of a tile keep ~4 registers live, not one address per pass.
  __device__ __forceinline__ void copy(std::uint32_t smem_tile, const __nv_bfloat16* head, std::int64_t seq_stride, int row0,
                                       int valid_rows) const {
    if (row >= kRowStep) return;
    const __nv_bfloat16* src = head + (static_cast<std::int64_t>(row0) + row) * seq_stride + 8 * chunk;
    const std::int64_t step = kRowStep * seq_stride;
    const int rows_left = valid_rows - row0 - row;  // pass i is inside the tensor iff i * kRowStep < rows_left
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = row + i * kRowStep;
      if (kRows % kRowStep != 0 && r >= kRows) break;
      const bool valid = i * kRowStep < rows_left;
      cp_async_16_zfill(smem_tile + Geom::offset(r, chunk), valid ? src : head, valid ? 16 : 0);
      src += step;
    }
  }
};

}  // namespace course::cuda
