/// @file bench_softmax_order.hpp
/// @brief The "column_order_*" ceiling rows of bench_softmax.cpp: bytes moved in
/// cluster_columns' access order, nothing computed (kernels in bench_softmax_order.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace course::m01::softmax_order {

/// What a column_order row moves: x to y, x only, or y only.
enum class ColumnOrderTraffic { copy, read, write };

/// Moves a rows x cols row-major matrix in strips of strip_cols (32 or 64) columns, 1024
/// rows per block, the blocks of one strip consecutive. cols % strip_cols == 0, rows
/// 16-byte aligned.
void column_order_move(ColumnOrderTraffic traffic, const float* x, float* y, std::int64_t rows, std::int64_t cols,
                       int strip_cols, cudaStream_t stream);

}  // namespace course::m01::softmax_order
