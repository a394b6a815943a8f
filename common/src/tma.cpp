// Host side of the TMA: tensor-map encoding through the runtime's driver entry point.
#include "course/tma.hpp"

#include "course/error.hpp"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000
#include <cuda_runtime_api.h>

#include <sstream>

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

}  // namespace

CUtensorMap make_tma_map_bf16_2d(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                 int box_rows, int box_cols, TmaSwizzle swizzle) {
  constexpr const char* fn = "make_tma_map_bf16_2d";
  require_not_null(base, fn, "base");
  require_aligned(base, 16, fn, "base");
  require_arg(rows >= 1, fn, "rows", rows, "must be >= 1");
  require_arg(cols >= 1, fn, "cols", cols, "must be >= 1");
  require_arg(ld >= cols, fn, "ld", ld, "must be >= cols");
  require_arg(ld * 2 % 16 == 0, fn, "ld", ld, "must be a multiple of 8 elements (TMA strides are multiples of 16 bytes)");
  require_arg(box_rows >= 1 && box_rows <= 256, fn, "box_rows", box_rows, "must be in [1, 256]");
  require_arg(box_cols >= 1 && box_cols <= 256, fn, "box_cols", box_cols, "must be in [1, 256]");
  if (swizzle == TmaSwizzle::bytes128)
    require_arg(box_cols * 2 == 128, fn, "box_cols", box_cols, "must be 64 with the 128-byte swizzle (128-byte rows)");

  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};  // bytes between rows
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides,
                                    box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
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

}  // namespace course
