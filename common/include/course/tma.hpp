#pragma once
/// @file tma.hpp
/// @brief Host side of Hopper's tensor memory accelerator (TMA): building the tensor
/// map (a 128-byte CUtensorMap) that describes a 2-D bf16 matrix in global memory and
/// the box one copy moves, for kernels that load tiles with cp.async.bulk.tensor
/// (course/cuda/hopper_ptx.cuh). Pass the map to the kernel by value as a
/// `const __grid_constant__ CUtensorMap` parameter.
///
/// Used by module 1's matmul_tc_hopper.cu (make_tma_map_bf16_2d: A and B tiles, bf16 C;
/// make_tma_map_f32_2d: fp32 C) and module
/// 3's attention_tc_hopper.cuh (make_tma_map_bf16 of rank 4: Q, K, V as (d, N, H, B), read
/// with tma_load_4d), which the exercises of the same names share or mirror.
///
/// The driver function that encodes the map (cuTensorMapEncodeTiled) is looked up
/// through the CUDA runtime (cudaGetDriverEntryPointByVersion), so nothing links
/// against the driver library and programs still start on machines without a GPU.

#include <cuda.h>  // CUtensorMap and its enums (types only; no driver library is linked)

#include <cstdint>

namespace course {

/// The swizzle a TMA copy applies as it writes the box into shared memory.
enum class TmaSwizzle {
  none,      ///< rows stored as they are
  bytes128,  ///< 128-byte swizzle: 16-byte chunk c of row r lands at c ^ (r % 8); the layout
             ///< wgmma's 128-byte-swizzle descriptors read (box rows must be exactly 128 bytes)
};

/// A tensor map for the row-major bf16 matrix at `base` with `rows` x `cols` elements and
/// a leading dimension of `ld` elements; one copy moves a box of `box_rows` x `box_cols`
/// (box_cols contiguous). Elements outside rows x cols read as zeros.
/// Requirements (checked, course::InvalidArgument naming the value): base 16-byte
/// aligned, ld * 2 a multiple of 16 bytes, 1 <= box dims <= 256, with bytes128 the box row
/// is 128 bytes (box_cols = 64). Throws course::Error if the driver refuses the map.
CUtensorMap make_tma_map_bf16_2d(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                 int box_rows, int box_cols, TmaSwizzle swizzle);

/// The same for a row-major fp32 matrix (module 1's pingpong stores and adds fp32 tiles of C
/// with it): ld a multiple of 4 elements, with bytes128 box_cols = 32.
CUtensorMap make_tma_map_f32_2d(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                int box_rows, int box_cols, TmaSwizzle swizzle);

/// A tensor map for a bf16 tensor of `rank` (2..5) dimensions, dims[0] contiguous:
/// `strides[i - 1]` is the distance in ELEMENTS between consecutive indices of dimension i
/// (i = 1 .. rank-1), in any order of size (an attention tensor [B, N, H, d] is mapped as
/// (d, N, H, B) with strides (H d, d, N H d)); one copy moves a box of box[0] x ... x
/// box[rank-1] elements. Elements outside dims read as zeros. Requirements (checked,
/// course::InvalidArgument naming the value): base 16-byte aligned, every stride a positive
/// multiple of 8 elements (16 bytes) below 2^39, 1 <= box[i] <= 256, with bytes128 box[0] = 64.
/// A dimension that a tensor broadcasts (stride 0) cannot be mapped: give it extent 1 (and
/// any valid stride) and coordinate 0. Throws course::Error if the driver refuses the map.
CUtensorMap make_tma_map_bf16(const void* base, int rank, const std::int64_t* dims, const std::int64_t* strides,
                              const int* box, TmaSwizzle swizzle);

}  // namespace course
