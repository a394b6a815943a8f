#pragma once
/// @file attention_tc_device.cuh
/// @brief Device helpers shared by the tensor-core attention steps (attention_tc.cu and
/// attention_tc_flash.cu): the kernel parameter block, the shared-memory tile geometry
/// (plain or XOR-swizzled rows of 16-byte chunks), the cp.async tile copier, the causal
/// key range and the bf16 packing of fragments. Private to solutions/module03_attention.
/// The PTX wrappers (cp.async, ldmatrix, mma.sync, ex2, swizzle_chunk) come from
/// course/cuda/mma_ptx.cuh, the quad reductions from course/cuda/warp_reduce.cuh, the
/// stride arithmetic and the block order from attention_indexing.cuh (through
/// attention_device.cuh).

#include "attention_device.cuh"

#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"
#include "module03/attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace course::solution::attn_tc {

using bf16 = __nv_bfloat16;
using m03::AttentionArgsBf16;
using m03::AttentionStrides;
using attn::block_coordinates;
using attn::row_offset;

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
  attn::fill_attention_params(p, a);
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
///     the same bank group: an 8-way bank conflict (step tc_mma measures it).
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
      return static_cast<std::uint32_t>(row * kRowBytes + 16 * cuda::swizzle_chunk<kRowChunks>(row, chunk));
    else
      return static_cast<std::uint32_t>(row * kRowBytes + 16 * chunk);
  }
};

/// The address tricks of the swizzled kernels (a chunk step as an XOR of address bits)
/// need every tile to start at a multiple of its row length (up to 256 bytes): the
/// kernels round the dynamic shared-memory base up to kSmemAlign and ask for kSmemAlign
/// bytes more (the base is normally 1024-aligned already; this makes it a guarantee).
constexpr int kSmemAlign = 1024;
__device__ __forceinline__ unsigned char* align_smem(unsigned char* p) {
  const std::uint32_t a = cuda::smem_u32(p);
  return p + ((kSmemAlign - a % kSmemAlign) % kSmemAlign);
}

/// Copies a [kRows][D] tile (rows row0 .. row0 + kRows - 1 of one head, rows at or past
/// `valid_rows` zero-filled) global -> shared with cp.async, kThreads threads. Thread t
/// owns chunk column t % kChunks of rows t / kChunks + i * kRowStep: per pass the block
/// reads kRowStep whole rows, each 2D contiguous bytes (coalesced). d = 96 (12 chunks)
/// leaves 128 % 12 = 8 threads idle. The column and the first row are computed once.
template <int D, int kRows, int kThreads, bool kSwizzle>
struct TileCopier {
  using Geom = TileGeom<D, kSwizzle>;
  static constexpr int kChunks = Geom::kChunks;
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kPasses = (kRows + kRowStep - 1) / kRowStep;
  int row;     ///< first row of this thread in the tile (>= kRowStep: idle thread)
  int chunk;   ///< chunk column of this thread

  __device__ __forceinline__ TileCopier() : row(threadIdx.x / kChunks), chunk(threadIdx.x % kChunks) {}

  /// Issue the copies (no commit). `head`: row 0 of the head, `seq_stride` in elements.
  /// The source pointer advances by one 64-bit add per pass and the rows left are one
  /// count, so the copies of a tile keep ~4 registers live, not one address per pass.
  __device__ __forceinline__ void copy(std::uint32_t smem_tile, const bf16* head, std::int64_t seq_stride, int row0,
                                       int valid_rows) const {
    if (row >= kRowStep) return;
    const bf16* src = head + (static_cast<std::int64_t>(row0) + row) * seq_stride + 8 * chunk;
    const std::int64_t step = kRowStep * seq_stride;
    const int rows_left = valid_rows - row0 - row;  // pass i is inside the tensor iff i * kRowStep < rows_left
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = row + i * kRowStep;
      if (kRows % kRowStep != 0 && r >= kRows) break;
      const bool valid = i * kRowStep < rows_left;
      cuda::cp_async_16_zfill(smem_tile + Geom::offset(r, chunk), valid ? src : head, valid ? 16 : 0);
      src += step;
    }
  }
};

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

/// Lets `kKernel` use `bytes` of dynamic shared memory (more than 48 KB must be opted
/// into) with the largest shared-memory carveout, once per device.
template <auto kKernel>
void opt_in_shared_memory(int bytes) {
  static std::atomic<unsigned long long> done{0};  // bit d: device d is configured
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  const unsigned long long bit = device < 64 ? 1ull << device : 0ull;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  COURSE_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  COURSE_CUDA_CHECK(
      cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  done.fetch_or(bit, std::memory_order_release);
}

// Launchers (one per step), defined next to their kernels.
void launch_tc_mma(const AttentionArgsBf16& a);                 // attention_tc.cu
void launch_tc_swizzled_pipelined(const AttentionArgsBf16& a);  // attention_tc.cu
void launch_tc_register_softmax(const AttentionArgsBf16& a);    // attention_tc_flash.cu
void launch_tc_flash2(const AttentionArgsBf16& a);              // attention_tc_flash.cu

}  // namespace course::solution::attn_tc
