#pragma once
/// @file bf16.hpp
/// @brief Host-side bf16 conversion for tensor-core inputs (storage type __nv_bfloat16).

#include <cuda_bf16.h>

#include <vector>

namespace course {

/// Round each float to bf16 (round-to-nearest-even).
std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& x);
/// Widen bf16 values back to float (exact).
std::vector<float> from_bf16(const std::vector<__nv_bfloat16>& x);
/// Round-trip float -> bf16 -> float: the values a bf16 kernel actually sees.
/// References for bf16 steps are computed on these, so the comparison measures the
/// kernel's accumulation error, not the input rounding.
std::vector<float> round_to_bf16(const std::vector<float>& x);

}  // namespace course
