#pragma once
/// @file matmul_tc_parts.cuh
/// @brief What the two translation units of the tensor-core matmul ladder share:
/// matmul_tc.cu (steps 1-2: wmma, mma_sync) and matmul_tc_hopper.cu (steps 3-6: wgmma,
/// tma_warp_specialized, persistent, cluster_multicast). Tile order, the masked
/// epilogue store, launch helpers, and the Hopper steps' launchers.

#include "module01/matmul_tc.hpp"

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace course::solution::tc_parts {

/// Tiles of C are handed to blocks in groups of kGroupM tile-rows: consecutive
/// blocks walk down a column of kGroupM tiles before moving right. Blocks running at
/// the same time then share A rows and B columns, so one wave reads ~kGroupM times less
/// of B from HBM than a plain row-by-row order (B is 128 MiB at 8192^2, far above L2).
constexpr int kGroupM = 8;

/// Maps the 1-D tile index `pid` to the (tile row, tile column) of C it names.
template <int kGroup = kGroupM>
__device__ __forceinline__ void grouped_tile(int pid, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int per_group = kGroup * tiles_n;
  const int group = pid / per_group;
  const int first_m = group * kGroup;
  const int rows = min(tiles_m - first_m, kGroup);  // the last group may be short
  const int local = pid - group * per_group;
  tile_m = first_m + local % rows;
  tile_n = local / rows;
}

/// Number of tiles of a tm x tn grid (throws if it does not fit a 1-D grid).
inline unsigned grid_blocks(std::int64_t m, std::int64_t n, int bm, int bn, const char* fn) {
  const std::int64_t tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
  require_arg(tiles <= INT_MAX, fn, "m*n", m * n, "needs more than 2^31-1 tiles of C");
  return static_cast<unsigned>(tiles);
}

/// The kernels index rows and columns with int (and add a tile size to them without
/// overflow); sizes of 2^30 and beyond are refused.
inline void require_int_sizes(const m01::TcMatmulArgs& a, const char* fn) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 30;
  require_arg(a.m < kLimit, fn, "m", a.m, "must be < 2^30");
  require_arg(a.n < kLimit, fn, "n", a.n, "must be < 2^30");
  require_arg(a.k < kLimit, fn, "k", a.k, "must be < 2^30");
}

/// Store two horizontally adjacent accumulators (row, col) and (row, col+1), masked.
__device__ __forceinline__ void store_pair(float* C, int M, int N, std::int64_t ldc, bool vec_ok, int row,
                                           int col, float v0, float v1) {
  if (row >= M) return;
  float* p = C + static_cast<std::int64_t>(row) * ldc + col;
  if (vec_ok && col + 1 < N) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else {
    if (col < N) p[0] = v0;
    if (col + 1 < N) p[1] = v1;
  }
}

/// float2 stores of C need an even ldc and an 8-byte aligned C (columns are always even).
inline bool vec2_store_ok(const m01::TcMatmulArgs& a) {
  return a.ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(a.c) % 8 == 0;
}

/// The Hopper steps (matmul_tc_hopper.cu). Each throws course::Unsupported unless the GPU
/// is a Hopper (compute capability 9.0) and the binary carries sm_90a code.
void launch_wgmma(const m01::TcMatmulArgs& a);
void launch_tma_warp_specialized(const m01::TcMatmulArgs& a);
void launch_persistent(const m01::TcMatmulArgs& a);
void launch_cluster_multicast(const m01::TcMatmulArgs& a);

}  // namespace course::solution::tc_parts
