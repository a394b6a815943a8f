/// @file bench_softmax_order.cu
/// @brief Device code for bench_softmax.cpp: the "column_order_*" ceiling rows of the
/// dim = 0 shapes (declared in bench_softmax_order.hpp).
///
/// A softmax along columns that reads x once must hold whole columns on chip before it
/// writes any of them, so it cannot stream whole rows as cudaMemcpy does: cluster_columns
/// reads and writes 32-column strips (one 128-byte line per row), with the tiles of one
/// strip in consecutive blocks. These kernels move bytes in that order and do nothing else
/// (no exponentials, no cluster, no exchange): the speed of the access order itself.
///   column_order_copy        reads x and writes y: the ceiling of any kernel that walks
///                            the matrix this way;
///   column_order_read / _write   only the reads (a sum kept live) or only the writes: which
///                            half of the traffic the order slows down;
///   ..._w64                  the same with 64-column strips (256 bytes per row): what a
///                            strip twice as wide would buy. cluster_columns cannot use it
///                            at 16384 rows (4 MiB per strip: one 256-KiB block per SM, see
///                            its banner).

#include "bench_softmax_order.hpp"

#include "course/cuda/vec.cuh"
#include "course/error.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::m01::softmax_order {
namespace {

namespace cc = ::course::cuda;

constexpr int kTileRows = 1024;                     // cluster_columns' block: up to 1024 rows of the strip
constexpr int kThreads = 256;                       // small blocks, several per SM
constexpr int kBatch = 8;                           // loads in flight per thread before its stores

/// Block b moves rows [t * 1024, t * 1024 + 1024) of strip s (kStripCols columns: 32 as
/// in cluster_columns, or 64), with t = b % tiles and s = b / tiles: the tiles of one
/// strip are consecutive blocks, as the blocks of one cluster are in cluster_columns.
/// kTraffic: copy x to y, only read x (its sum stays live through a store guarded by a
/// test that random inputs practically never pass), or only write y (each element its row
/// index).
/// cols % kStripCols == 0 and 16-byte aligned rows (the bench shapes).
template <int kStripCols, ColumnOrderTraffic kTraffic>
__global__ void __launch_bounds__(kThreads) column_order_kernel(const float* x, float* y, int rows, int cols) {
  constexpr int kChunks = kStripCols / 4;      // float4 per strip row
  constexpr int kPhases = kThreads / kChunks;  // rows per pass
  const int tiles = (rows + kTileRows - 1) / kTileRows;
  const int strip = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int tx = threadIdx.x % kChunks, ty = threadIdx.x / kChunks;
  const std::int64_t c0 = static_cast<std::int64_t>(strip) * kStripCols + 4 * tx;
  if (c0 >= cols) return;
  const int row0 = tile * kTileRows + ty;
  constexpr bool kReads = kTraffic != ColumnOrderTraffic::write, kWrites = kTraffic != ColumnOrderTraffic::read;
  float sum = 0.f;
  for (int k0 = 0; k0 < kTileRows / kPhases; k0 += kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int r = row0 + (k0 + k) * kPhases;
      const float fr = static_cast<float>(r);
      v[k] = make_float4(fr, fr, fr, fr);
      if (kReads && r < rows) v[k] = *reinterpret_cast<const float4*>(x + static_cast<std::int64_t>(r) * cols + c0);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int r = row0 + (k0 + k) * kPhases;
      if (!kWrites) sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
      else if (r < rows) cc::store_global4(y + static_cast<std::int64_t>(r) * cols + c0, v[k]);
    }
  }
  if (!kWrites && sum == -1.f) y[0] = sum;  // keeps the loads live; harmless should it ever happen
}

template <int kStripCols>
void launch(ColumnOrderTraffic traffic, const float* x, float* y, int rows, int cols, unsigned grid,
            cudaStream_t stream) {
  switch (traffic) {
    case ColumnOrderTraffic::copy:
      column_order_kernel<kStripCols, ColumnOrderTraffic::copy><<<grid, kThreads, 0, stream>>>(x, y, rows, cols);
      break;
    case ColumnOrderTraffic::read:
      column_order_kernel<kStripCols, ColumnOrderTraffic::read><<<grid, kThreads, 0, stream>>>(x, y, rows, cols);
      break;
    case ColumnOrderTraffic::write:
      column_order_kernel<kStripCols, ColumnOrderTraffic::write><<<grid, kThreads, 0, stream>>>(x, y, rows, cols);
      break;
  }
}

}  // namespace

void column_order_move(ColumnOrderTraffic traffic, const float* x, float* y, std::int64_t rows, std::int64_t cols,
                       int strip_cols, cudaStream_t stream) {
  require_arg(strip_cols == 32 || strip_cols == 64, "column_order_move", "strip_cols", strip_cols, "must be 32 or 64");
  const std::int64_t strips = (cols + strip_cols - 1) / strip_cols;
  const std::int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  const auto grid = static_cast<unsigned>(strips * tiles);
  if (strip_cols == 32)
    launch<32>(traffic, x, y, static_cast<int>(rows), static_cast<int>(cols), grid, stream);
  else
    launch<64>(traffic, x, y, static_cast<int>(rows), static_cast<int>(cols), grid, stream);
  COURSE_CHECK_LAUNCH("column_order_kernel");
}

}  // namespace course::m01::softmax_order
