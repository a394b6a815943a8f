#pragma once
/// @file attention_indexing.cuh
/// @brief The stride arithmetic, the block order and the fields every attention kernel's
/// parameter block shares (device code: include it from .cu files only). Module 3's
/// forward steps (solutions/module03_attention/attention_device.cuh, and through it
/// attention_tc_device.cuh), module 4's backward steps
/// (solutions/module04_training/attention_backward_device.cuh) and the exercises' given
/// code include it, so that every attention kernel of the course computes a row's address
/// in one place. The block order and the parameter fields are in attention_blocks.cuh,
/// included here. (Step row_offset asks you to write row_offset yourself, in
/// exercises/module03_attention/attention_device.cuh: that file includes
/// attention_blocks.cuh only.)

#include "module03/attention.hpp"
#include "module03/attention_blocks.cuh"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::m03 {

/// Element offset of row n of head h of batch b: the one place the course computes it.
/// 64-bit: B*H*N*d exceeds 2^31 for realistic tensors (16 x 32 heads x 32768 x 128 = 2^31).
__host__ __device__ __forceinline__ std::int64_t row_offset(const AttentionStrides& s, std::int64_t b,
                                                            std::int64_t h, std::int64_t n) {
  return b * s.batch + h * s.head + n * s.seq;
}

}  // namespace course::m03
