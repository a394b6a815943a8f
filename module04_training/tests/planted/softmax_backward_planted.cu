/// @file softmax_backward_planted.cu
/// @brief Deliberately wrong softmax backward kernels (see softmax_backward_planted.hpp).
/// Each is a realistic mistake in an otherwise working one-thread-per-slice kernel, so
/// only the planted bug separates it from a correct answer.

#include "softmax_backward_planted.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::planted {
namespace {

using m04::SoftmaxBackwardArgs;

/// Element i of slice s lives at s * slice + i * elem (dim 1: rows, dim 0: columns).
struct Slices {
  std::int64_t count, length, y_slice, y_elem, dy_slice, dy_elem, dx_slice, dx_elem;
};

Slices slices_of(const SoftmaxBackwardArgs& a, int dim) {
  if (dim == 1) return {a.rows, a.cols, a.ldy, 1, a.lddy, 1, a.lddx, 1};
  return {a.cols, a.rows, 1, a.ldy, 1, a.lddy, 1, a.lddx};
}

enum class Bug { none, dropped_d, missing_y_factor };

template <Bug kBug>
__global__ void planted_slice_kernel(const float* y, const float* dy, float* dx, Slices sl) {
  const std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= sl.count) return;
  const float* ys = y + s * sl.y_slice;
  const float* dys = dy + s * sl.dy_slice;
  float* dxs = dx + s * sl.dx_slice;
  float d = 0.f;
  for (std::int64_t i = 0; i < sl.length; ++i) d = fmaf(ys[i * sl.y_elem], dys[i * sl.dy_elem], d);
  for (std::int64_t i = 0; i < sl.length; ++i) {
    const float yi = ys[i * sl.y_elem], gi = dys[i * sl.dy_elem];
    float v;
    if (kBug == Bug::dropped_d) v = yi * gi;               // BUG: - y * D missing
    else if (kBug == Bug::missing_y_factor) v = gi - d;    // BUG: no factor y
    else v = yi * (gi - d);
    dxs[i * sl.dx_elem] = v;
  }
}

template <Bug kBug>
void launch(const SoftmaxBackwardArgs& a, int dim, const char* name) {
  m04::validate_softmax_backward_args(a, m04::SoftmaxBackwardStep::fused_vectorized, name);
  if (a.rows == 0 || a.cols == 0) return;
  const Slices sl = slices_of(a, dim);
  constexpr int kThreads = 128;
  const auto blocks = static_cast<unsigned>((sl.count + kThreads - 1) / kThreads);
  planted_slice_kernel<kBug><<<blocks, kThreads, 0, a.stream>>>(a.y, a.dy, a.dx, sl);
  COURSE_CHECK_LAUNCH(name);
}

}  // namespace

void softmax_backward_dropped_d(m04::SoftmaxBackwardStep, const m04::SoftmaxBackwardArgs& args) {
  launch<Bug::dropped_d>(args, args.dim, "softmax_backward_dropped_d");
}

void softmax_backward_wrong_dim(m04::SoftmaxBackwardStep, const m04::SoftmaxBackwardArgs& args) {
  launch<Bug::none>(args, 1 - args.dim, "softmax_backward_wrong_dim");  // BUG: the other dimension
}

void softmax_backward_missing_y_factor(m04::SoftmaxBackwardStep, const m04::SoftmaxBackwardArgs& args) {
  launch<Bug::missing_y_factor>(args, args.dim, "softmax_backward_missing_y_factor");
}

}  // namespace course::planted
