#pragma once
/// @file matmul_planted.hpp
/// @brief Deliberately wrong SGEMM kernels. test_matmul.cpp runs them through the same
/// checking helper as the real steps and asserts that it rejects every one: proof
/// that the tests can fail. Each has the op's signature; `step` is ignored.
///
/// Every one of them still validates its arguments and stays inside the matrices
/// (no out-of-bounds access), so the tests can run them safely.

#include "module01/matmul.hpp"

namespace course::planted {

/// The 32x32 shared-memory kernel written for sizes that are multiples of the tile:
/// the grid is M/32 x N/32 (rounded down) and the K loop stops at the last full tile,
/// so the right and bottom edges of C are never written and the K tail is dropped.
void matmul_dropped_edge_tile(m01::MatmulStep step, const m01::MatmulArgs& args);

/// The 32x32 shared-memory kernel without the barrier between storing a tile and
/// reading it: warps read rows of the tile that other warps have not stored yet (or
/// still hold the previous tile). A race: wrong results on almost every run of a
/// large matrix, but not guaranteed on every run.
void matmul_missing_sync(m01::MatmulStep step, const m01::MatmulArgs& args);

/// Reads A as if it were transposed, A[p][row] instead of A[row][p] (the swapped index
/// of a hurried port from column-major code). Computes A^T * B; call it only with
/// square matrices, M == N == K and lda == K, so that every read stays in bounds.
void matmul_transposed_a(m01::MatmulStep step, const m01::MatmulArgs& args);

/// Computes alpha * A*B + beta * C even when beta == 0: with C uninitialised (NaN),
/// 0 * NaN = NaN leaks into the result. BLAS says C is not read when beta == 0.
void matmul_reads_c_when_beta_zero(m01::MatmulStep step, const m01::MatmulArgs& args);

}  // namespace course::planted
