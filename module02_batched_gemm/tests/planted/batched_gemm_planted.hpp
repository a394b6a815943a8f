#pragma once
/// @file batched_gemm_planted.hpp
/// @brief Deliberately wrong strided batched GEMMs (realistic mistakes) that the batched
/// GEMM tests must reject. Each has the signature of impl::batched_gemm_strided for fp32
/// inputs (the step is ignored: every bug is its own naive kernel) and validates its
/// arguments like the real ones, so only the kernel is wrong.
///
/// The checks run them only on problems where batch == num_heads and K <= N, so that
/// their wrong addresses still fall inside the buffers: a planted bug must fail the
/// comparison, not crash the test process with an illegal address.

#include "module02/batched_gemm.hpp"

namespace course::planted {

/// Signature shared with course::solution::batched_gemm_strided (fp32 overload).
using BgemmStridedFn = void (*)(m02::BgemmStep, const m02::StridedBatchedGemmArgs<float>&);

/// A and B are addressed with the head and batch strides swapped
/// (b * stride_head + h * stride_batch); C is addressed correctly.
void bgemm_swapped_head_batch_strides(m02::BgemmStep step, const m02::StridedBatchedGemmArgs<float>& args);

/// Ignores b_transposed: always reads B as a K x N matrix (op(B)(k, n) = B[k*ldb + n]).
void bgemm_ignored_b_transposed(m02::BgemmStep step, const m02::StridedBatchedGemmArgs<float>& args);

/// Sizes the grid with M / 16 and N / 16 (rounded down): the partial tiles at the
/// bottom and right edges are never computed.
void bgemm_dropped_edge_tile(m02::BgemmStep step, const m02::StridedBatchedGemmArgs<float>& args);

/// Assumes packed rows (row stride = number of columns) for A, B and C, ignoring the
/// stride_*_row arguments: wrong for padded rows and for the [B,N,H,d] layout.
void bgemm_assumed_contiguous_rows(m02::BgemmStep step, const m02::StridedBatchedGemmArgs<float>& args);

struct PlantedBgemm {
  const char* name;  ///< gtest parameter name
  BgemmStridedFn fn;
};

inline constexpr PlantedBgemm kPlantedBgemms[] = {
    {"swapped_head_batch_strides", bgemm_swapped_head_batch_strides},
    {"ignored_b_transposed", bgemm_ignored_b_transposed},
    {"dropped_edge_tile", bgemm_dropped_edge_tile},
    {"assumed_contiguous_rows", bgemm_assumed_contiguous_rows},
};

}  // namespace course::planted
