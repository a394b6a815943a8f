/// @file bench_reductions_lib.cu
/// @brief Device code for bench_reductions.cpp: the CUB library rows. Host API declared
/// in bench_reductions.cpp, the only user.

#include "course/error.hpp"

#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>

#include <cstddef>
#include <cstdint>

namespace course::m01::reductions_lib {
namespace {

struct Square {
  __host__ __device__ float operator()(float v) const { return v * v; }
};
struct Sqrt {
  __host__ __device__ float operator()(float v) const { return sqrtf(v); }
};
/// Term i of the dot product, read through an index (CUB reduces a counting iterator).
struct ProductAt {
  const float* x;
  const float* y;
  __host__ __device__ float operator()(std::int64_t i) const { return x[i] * y[i]; }
};

/// ||x||: CUB sums x_i^2; the output iterator applies sqrt as CUB writes the total,
/// so the library row delivers the same result as ours with no extra kernel.
cudaError_t cub_l2_norm_call(void* temp, std::size_t& temp_bytes, const float* x, std::int64_t n, float* result,
                             cudaStream_t stream) {
  return cub::DeviceReduce::TransformReduce(temp, temp_bytes, x, thrust::make_transform_output_iterator(result, Sqrt{}),
                                            n, ::cuda::std::plus<float>{}, Square{}, 0.f, stream);
}

cudaError_t cub_dot_call(void* temp, std::size_t& temp_bytes, const float* x, const float* y, std::int64_t n,
                         float* result, cudaStream_t stream) {
  return cub::DeviceReduce::TransformReduce(temp, temp_bytes, thrust::counting_iterator<std::int64_t>(0), result, n,
                                            ::cuda::std::plus<float>{}, ProductAt{x, y}, 0.f, stream);
}

}  // namespace

std::size_t cub_l2_norm_temp_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  COURSE_CUDA_CHECK(cub_l2_norm_call(nullptr, bytes, nullptr, n, nullptr, nullptr));
  return bytes;
}

void cub_l2_norm(const float* x, std::int64_t n, float* result, void* temp, std::size_t temp_bytes,
                 cudaStream_t stream) {
  COURSE_CUDA_CHECK(cub_l2_norm_call(temp, temp_bytes, x, n, result, stream));
}

std::size_t cub_dot_temp_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  COURSE_CUDA_CHECK(cub_dot_call(nullptr, bytes, nullptr, nullptr, n, nullptr, nullptr));
  return bytes;
}

void cub_dot(const float* x, const float* y, std::int64_t n, float* result, void* temp, std::size_t temp_bytes,
             cudaStream_t stream) {
  COURSE_CUDA_CHECK(cub_dot_call(temp, temp_bytes, x, y, n, result, stream));
}

}  // namespace course::m01::reductions_lib
