#pragma once
/// @file matmul_tc_planted.hpp
/// @brief Deliberately wrong tensor-core matmuls (realistic mistakes) that the matmul_tc
/// tests must reject. Each has the signature of impl::matmul_tc (the step argument is
/// ignored) and validates its arguments like the real one, so only the kernel is wrong.
///
/// All three share one small, otherwise correct mma.sync kernel (64x64x32 block tile,
/// 4 warps, one shared-memory stage), so each bug is the only thing wrong.

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

}  // namespace course::planted
