/// @file cross_entropy_planted.cu
/// @brief Deliberately wrong fused cross-entropy kernels (see cross_entropy_planted.hpp).
/// One plain, otherwise working body -- a count kernel, one thread per row, a mean kernel --
/// so only the planted bug separates it from a correct answer.

#include "cross_entropy_planted.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace course::planted {
namespace {

using m04::FusedCrossEntropyArgs;

enum class Bug { none, no_max_subtraction, not_divided_by_n, ignored_counted, missing_one_hot };

__device__ __forceinline__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <Bug kBug>
__global__ void planted_count_kernel(const std::int32_t* targets, std::int64_t rows, std::int32_t ignore,
                                     std::int32_t* num_valid) {
  if (threadIdx.x != 0) return;
  int n = 0;
  for (std::int64_t r = 0; r < rows; ++r) n += (kBug == Bug::ignored_counted || targets[r] != ignore) ? 1 : 0;
  *num_valid = n;  // BUG (ignored_counted): every row
}

template <Bug kBug, class T>
__global__ void planted_row_kernel(FusedCrossEntropyArgs a) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.rows) return;
  const T* x = static_cast<const T*>(a.logits) + r * a.ldl;
  T* d = a.dlogits != nullptr ? static_cast<T*>(a.dlogits) + r * a.lddl : nullptr;
  const std::int32_t t = a.targets[r];
  const std::int64_t V = a.vocab;
  if (t == a.ignore_index) {
    a.losses[r] = 0.f;
    if (d != nullptr)
      for (std::int64_t j = 0; j < V; ++j) store(d, j, 0.f);
    return;
  }
  const bool bad = t < 0 || t >= V;
  float m = -INFINITY;
  for (std::int64_t j = 0; j < V; ++j) m = fmaxf(m, load(x, j));
  if (kBug == Bug::no_max_subtraction) m = 0.f;  // BUG
  float s = 0.f;
  for (std::int64_t j = 0; j < V; ++j) s += expf(load(x, j) - m);
  const float xt = bad ? 0.f : load(x, t);
  a.losses[r] = bad ? NAN : m + logf(s) - xt;
  if (d == nullptr) return;
  float scale = a.dloss / static_cast<float>(*a.num_valid);
  if (kBug == Bug::not_divided_by_n) scale = a.dloss;  // BUG
  for (std::int64_t j = 0; j < V; ++j) {
    const float p = expf(load(x, j) - m) / s;
    const float onehot = kBug == Bug::missing_one_hot ? 0.f : (j == t ? 1.f : 0.f);  // BUG (missing_one_hot)
    store(d, j, bad ? NAN : (p - onehot) * scale);
  }
}

__global__ void planted_mean_kernel(const float* losses, std::int64_t rows, const std::int32_t* num_valid,
                                    float* loss_mean) {
  if (threadIdx.x != 0) return;
  double sum = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) sum += losses[r];
  *loss_mean = *num_valid > 0 ? static_cast<float>(sum / *num_valid) : 0.f;
}

template <Bug kBug>
void launch(const FusedCrossEntropyArgs& a, const char* name) {
  m04::validate_cross_entropy_args(a, m04::CrossEntropyStep::row_on_chip, name);
  planted_count_kernel<kBug><<<1, 32, 0, a.stream>>>(a.targets, a.rows, a.ignore_index, a.num_valid);
  COURSE_CHECK_LAUNCH(name);
  if (a.rows > 0) {
    constexpr int kThreads = 128;
    const auto blocks = static_cast<unsigned>((a.rows + kThreads - 1) / kThreads);
    if (a.dtype == DType::bf16) planted_row_kernel<kBug, __nv_bfloat16><<<blocks, kThreads, 0, a.stream>>>(a);
    else planted_row_kernel<kBug, float><<<blocks, kThreads, 0, a.stream>>>(a);
    COURSE_CHECK_LAUNCH(name);
  }
  planted_mean_kernel<<<1, 32, 0, a.stream>>>(a.losses, a.rows, a.num_valid, a.loss_mean);
  COURSE_CHECK_LAUNCH(name);
}

}  // namespace

void cross_entropy_correct(m04::CrossEntropyStep, const FusedCrossEntropyArgs& args) {
  launch<Bug::none>(args, "cross_entropy_correct");
}
void cross_entropy_no_max_subtraction(m04::CrossEntropyStep, const FusedCrossEntropyArgs& args) {
  launch<Bug::no_max_subtraction>(args, "cross_entropy_no_max_subtraction");
}
void cross_entropy_not_divided_by_n(m04::CrossEntropyStep, const FusedCrossEntropyArgs& args) {
  launch<Bug::not_divided_by_n>(args, "cross_entropy_not_divided_by_n");
}
void cross_entropy_ignored_counted(m04::CrossEntropyStep, const FusedCrossEntropyArgs& args) {
  launch<Bug::ignored_counted>(args, "cross_entropy_ignored_counted");
}
void cross_entropy_missing_one_hot(m04::CrossEntropyStep, const FusedCrossEntropyArgs& args) {
  launch<Bug::missing_one_hot>(args, "cross_entropy_missing_one_hot");
}

}  // namespace course::planted
