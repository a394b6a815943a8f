#pragma once
/// @file matmul_tc_planted.hpp
/// @brief Deliberately wrong tensor-core matmuls (realistic mistakes) that the matmul_tc
/// tests must reject. Each has the signature of impl::matmul_tc (the step argument is
/// ignored) and validates its arguments like the real one, so only the kernel is wrong.
///
/// The first three share one small, otherwise correct mma.sync kernel (64x64x32 block tile,
/// 4 warps, one shared-memory stage), so each bug is the only thing wrong; the wgmma ones
/// below share another.

#include "module01/matmul_tc.hpp"

namespace course::planted {

/// Signature shared with course::solution::matmul_tc and the exercise's.
using TcMatmulFn = void (*)(m01::TcMatmulStep, const m01::TcMatmulArgs&);

/// Loops over the K / 32 full slabs only (`k_tiles = K / BK`): the last K % 32 products
/// of every dot product are lost. Invisible whenever K is a multiple of 32.
void dropped_k_tail_matmul_tc(m01::TcMatmulStep step, const m01::TcMatmulArgs& args);

/// Loads the B fragments with ldmatrix without .trans: for row-major B each register
/// then holds two consecutive n of one k instead of two consecutive k of one n, so
/// every 8x8 block of B is used transposed.
void b_not_transposed_matmul_tc(m01::TcMatmulStep step, const m01::TcMatmulArgs& args);

/// Launches M / 64 tile-rows (rounded down): the last partial tile-row of C is never
/// written. Invisible whenever M is a multiple of 64.
void dropped_m_edge_matmul_tc(m01::TcMatmulStep step, const m01::TcMatmulArgs& args);

// ---- Hopper wgmma descriptor bugs. A second small kernel, a cut-down copy of the `wgmma`
// step (solutions/module01_basics/matmul_tc_hopper.cu): 128 x 128 tiles of two warpgroups
// (wgmma m64n128k16), one cp.async stage of A [128 m][64 k] K-major and B [64 k][128 n]
// MN-major in the 128-byte swizzle. Needs sm_90a: elsewhere these throw
// course::Unsupported (the tests skip). Both bugs are deterministic and wrong whenever
// K > 16 (the descriptors then read wrong elements of the staged slab).

/// The same kernel without a bug: the sanity check that the rejections come from the bugs.
void wgmma_copy_matmul_tc(m01::TcMatmulStep step, const m01::TcMatmulArgs& args);

/// B's MN-major descriptor with its leading and stride byte offsets swapped (lbo = 1024,
/// sbo = 8 KB instead of lbo = 8 KB to the next 64-column block, sbo = 1024 to the next
/// 8 k-rows): k-rows 8..15 of every k16 step and every column past 63 are read from the
/// wrong place. Invisible only when K <= 8 and N <= 64.
void wgmma_b_lbo_sbo_swapped_matmul_tc(m01::TcMatmulStep step, const m01::TcMatmulArgs& args);

/// A's K-major descriptor advanced 16 bytes per k16 step instead of 32 (16 elements taken
/// for 16 bytes): k16 steps 1-3 of each slab read A at k 8, 16, 24 instead of 16, 32, 48.
/// Invisible only when K <= 16.
void wgmma_a_k_step_16_bytes_matmul_tc(m01::TcMatmulStep step, const m01::TcMatmulArgs& args);

}  // namespace course::planted
