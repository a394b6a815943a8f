/// @file bench_softmax_order.cu
/// @brief Device code for bench_softmax.cpp: the "column_order_copy" ceiling row of the
/// dim = 0 shapes. Host API declared in bench_softmax.cpp, the only user.
///
/// A softmax along columns that reads x once must hold whole columns on chip before it
/// writes any of them, so it cannot stream whole rows as cudaMemcpy does: cluster_columns
/// reads and writes 32-column strips (one 128-byte line per row), with the tiles of one
/// strip in consecutive blocks. This kernel moves the same bytes in that order and does
/// nothing else (no exponentials, no cluster, no exchange): the speed of the access order
/// itself, the ceiling of any kernel that walks the matrix this way.
///
/// The same copy with 64-column strips (256 bytes per row) is the second row,
/// column_order_copy_w64: what a strip twice as wide would buy. It is faster because the
/// memory system moves aligned 256-byte pieces; cluster_columns cannot use it at 16384
/// rows (4 MiB per strip: one 256-KiB block per SM, see its banner).

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::m01::softmax_order {
namespace {

constexpr int kTileRows = 1024;                     // cluster_columns' block: up to 1024 rows of the strip
constexpr int kThreads = 256;                       // small blocks, several per SM
constexpr int kBatch = 8;                           // loads in flight per thread before its stores

/// Block b copies rows [t * 1024, t * 1024 + 1024) of strip s (kStripCols columns: 32 as
/// in cluster_columns, or 64), with t = b % tiles and s = b / tiles: the tiles of one
/// strip are consecutive blocks, as the blocks of one cluster are in cluster_columns.
/// cols % kStripCols == 0 and 16-byte aligned rows (the bench shapes).
template <int kStripCols>
__global__ void __launch_bounds__(kThreads) column_order_copy_kernel(const float* x, float* y, int rows, int cols) {
  constexpr int kChunks = kStripCols / 4;      // float4 per strip row
  constexpr int kPhases = kThreads / kChunks;  // rows per pass
  const int tiles = (rows + kTileRows - 1) / kTileRows;
  const int strip = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int tx = threadIdx.x % kChunks, ty = threadIdx.x / kChunks;
  const std::int64_t c0 = static_cast<std::int64_t>(strip) * kStripCols + 4 * tx;
  if (c0 >= cols) return;
  const int row0 = tile * kTileRows + ty;
  for (int k0 = 0; k0 < kTileRows / kPhases; k0 += kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int r = row0 + (k0 + k) * kPhases;
      if (r < rows) v[k] = *reinterpret_cast<const float4*>(x + static_cast<std::int64_t>(r) * cols + c0);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int r = row0 + (k0 + k) * kPhases;
      if (r < rows) *reinterpret_cast<float4*>(y + static_cast<std::int64_t>(r) * cols + c0) = v[k];
    }
  }
}

}  // namespace

void column_order_copy(const float* x, float* y, std::int64_t rows, std::int64_t cols, int strip_cols,
                       cudaStream_t stream) {
  require_arg(strip_cols == 32 || strip_cols == 64, "column_order_copy", "strip_cols", strip_cols, "must be 32 or 64");
  const std::int64_t strips = (cols + strip_cols - 1) / strip_cols;
  const std::int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  const auto grid = static_cast<unsigned>(strips * tiles);
  if (strip_cols == 32)
    column_order_copy_kernel<32><<<grid, kThreads, 0, stream>>>(x, y, static_cast<int>(rows), static_cast<int>(cols));
  else
    column_order_copy_kernel<64><<<grid, kThreads, 0, stream>>>(x, y, static_cast<int>(rows), static_cast<int>(cols));
  COURSE_CHECK_LAUNCH("column_order_copy_kernel");
}

}  // namespace course::m01::softmax_order
