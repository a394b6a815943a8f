// Host side of the TMA: tensor-map encoding through the runtime's driver entry point.
#include "course/tma.hpp"

#include "course/error.hpp"
#include "course/validate.hpp"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000
#include <cuda_runtime_api.h>

#include <sstream>
#include <string>

namespace course {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    COURSE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || p == nullptr)
      throw Error("cuTensorMapEncodeTiled: the CUDA driver does not provide it (needs a CUDA 12 driver or newer)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

/// The 2-D map of either element type: `elem` bytes per element, `fn` the public name.
CUtensorMap make_map_2d(const char* fn, CUtensorMapDataType type, int elem, const void* base, std::int64_t rows,
                        std::int64_t cols, std::int64_t ld, int box_rows, int box_cols, TmaSwizzle swizzle) {
  require_not_null(base, fn, "base");
  require_aligned(base, 16, fn, "base");
  require_arg(rows >= 1, fn, "rows", rows, "must be >= 1");
  require_arg(cols >= 1, fn, "cols", cols, "must be >= 1");
  require_arg(ld >= cols, fn, "ld", ld, "must be >= cols");
  require_arg(ld * elem % 16 == 0, fn, "ld", ld,
              validate::msg("must be a multiple of ", 16 / elem, " elements (TMA strides are multiples of 16 bytes)"));
  require_arg(box_rows >= 1 && box_rows <= 256, fn, "box_rows", box_rows, "must be in [1, 256]");
  require_arg(box_cols >= 1 && box_cols <= 256, fn, "box_cols", box_cols, "must be in [1, 256]");
  if (swizzle == TmaSwizzle::bytes128)
    require_arg(box_cols * elem == 128, fn, "box_cols", box_cols,
                validate::msg("must be ", 128 / elem, " with the 128-byte swizzle (128-byte rows)"));

  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * static_cast<cuuint64_t>(elem)};  // bytes between rows
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    swizzle == TmaSwizzle::bytes128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                                                    : CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream os;
    os << fn << ": cuTensorMapEncodeTiled failed with CUresult " << static_cast<int>(r) << " (rows " << rows
       << ", cols " << cols << ", ld " << ld << ", box " << box_rows << " x " << box_cols << ")";
    throw Error(os.str());
  }
  return map;
}

}  // namespace

CUtensorMap make_tma_map_bf16_2d(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                 int box_rows, int box_cols, TmaSwizzle swizzle) {
  return make_map_2d("make_tma_map_bf16_2d", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rows, cols, ld, box_rows,
                     box_cols, swizzle);
}

CUtensorMap make_tma_map_f32_2d(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                int box_rows, int box_cols, TmaSwizzle swizzle) {
  return make_map_2d("make_tma_map_f32_2d", CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, rows, cols, ld, box_rows,
                     box_cols, swizzle);
}

CUtensorMap make_tma_map_bf16(const void* base, int rank, const std::int64_t* dims, const std::int64_t* strides,
                              const int* box, TmaSwizzle swizzle) {
  constexpr const char* fn = "make_tma_map_bf16";
  require_not_null(base, fn, "base");
  require_aligned(base, 16, fn, "base");
  require_arg(rank >= 2 && rank <= 5, fn, "rank", rank, "must be in [2, 5]");
  cuuint64_t g_dims[5], g_strides[4];
  cuuint32_t g_box[5], element_strides[5];
  for (int i = 0; i < rank; ++i) {
    require_arg(dims[i] >= 1 && dims[i] <= (std::int64_t{1} << 32), fn, validate::msg("dims[", i, "]"), dims[i],
                "must be in [1, 2^32]");
    require_arg(box[i] >= 1 && box[i] <= 256, fn, validate::msg("box[", i, "]"), box[i], "must be in [1, 256]");
    g_dims[i] = static_cast<cuuint64_t>(dims[i]);
    g_box[i] = static_cast<cuuint32_t>(box[i]);
    element_strides[i] = 1;
    if (i > 0) {
      require_arg(strides[i - 1] > 0 && strides[i - 1] % 8 == 0 && strides[i - 1] < (std::int64_t{1} << 39), fn,
                  validate::msg("strides[", i - 1, "]"), strides[i - 1],
                  "must be a positive multiple of 8 elements below 2^39 (TMA strides are multiples of 16 bytes)");
      g_strides[i - 1] = static_cast<cuuint64_t>(strides[i - 1]) * 2;
    }
  }
  if (swizzle == TmaSwizzle::bytes128)
    require_arg(box[0] * 2 == 128, fn, "box[0]", box[0], "must be 64 with the 128-byte swizzle (128-byte rows)");
  CUtensorMap map{};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(rank),
                                    const_cast<void*>(base), g_dims, g_strides, g_box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    swizzle == TmaSwizzle::bytes128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                                                    : CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream os;
    os << fn << ": cuTensorMapEncodeTiled failed with CUresult " << static_cast<int>(r) << " (rank " << rank
       << ", dims";
    for (int i = 0; i < rank; ++i) os << " " << dims[i];
    os << ")";
    throw Error(os.str());
  }
  return map;
}

}  // namespace course
