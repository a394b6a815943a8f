/// @file softmax_planted.cu
/// @brief Deliberately wrong softmax kernels (see softmax_planted.hpp). Each is a
/// realistic mistake in an otherwise working one-thread-per-slice kernel, so only the
/// planted bug separates it from a correct answer.

#include "softmax_planted.hpp"

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

namespace course::planted {
namespace {

using m01::SoftmaxArgs;

/// Element i of slice s lives at s * slice + i * elem (see the solution's Slices).
struct Slices {
  std::int64_t count, length, x_slice, x_elem, y_slice, y_elem;
};

Slices slices_of(const SoftmaxArgs& a, int dim) {
  if (dim == 1) return {a.rows, a.cols, a.ldx, 1, a.ldy, 1};
  return {a.cols, a.rows, 1, a.ldx, 1, a.ldy};
}

enum class Bug { none, no_max, max_replaced_first, dropped_tail };

template <Bug kBug>
__global__ void planted_slice_kernel(const float* x, float* y, Slices sl) {
  const std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= sl.count) return;
  const float* xs = x + s * sl.x_slice;
  float* ys = y + s * sl.y_slice;
  std::int64_t n = sl.length;
  if (kBug == Bug::dropped_tail) n = (sl.length / 4) * 4;  // BUG: "length / 4 float4 groups", no tail loop

  float m = 0.f;
  float sum = 0.f;
  if (kBug == Bug::no_max) {
    for (std::int64_t i = 0; i < n; ++i) sum += expf(xs[i * sl.x_elem]);  // BUG: no max subtracted
  } else if (kBug == Bug::max_replaced_first) {
    m = -FLT_MAX;
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = xs[i * sl.x_elem];
      const float m_new = fmaxf(m, v);
      m = m_new;                                 // BUG: replaced too early ...
      sum = sum * expf(m - m_new) + expf(v - m_new);  // ... so this factor is always 1
    }
  } else {  // none, dropped_tail: a correct max-then-sum over the first n elements
    m = -FLT_MAX;
    for (std::int64_t i = 0; i < n; ++i) m = fmaxf(m, xs[i * sl.x_elem]);
    for (std::int64_t i = 0; i < n; ++i) sum += expf(xs[i * sl.x_elem] - m);
  }
  const float inv = 1.f / sum;
  for (std::int64_t i = 0; i < n; ++i) ys[i * sl.y_elem] = expf(xs[i * sl.x_elem] - m) * inv;
}

template <Bug kBug>
void launch(const SoftmaxArgs& a, int dim, const char* name) {
  m01::validate_softmax_args(a, m01::SoftmaxStep::block_per_row, name);
  if (a.rows == 0 || a.cols == 0) return;
  const Slices sl = slices_of(a, dim);
  constexpr int kThreads = 128;
  const auto blocks = static_cast<unsigned>((sl.count + kThreads - 1) / kThreads);
  planted_slice_kernel<kBug><<<blocks, kThreads, 0, a.stream>>>(a.x, a.y, sl);
  COURSE_CHECK_LAUNCH(name);
}

}  // namespace

void softmax_no_max_subtraction(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  launch<Bug::no_max>(args, args.dim, "softmax_no_max_subtraction");
}

void softmax_max_replaced_first(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  launch<Bug::max_replaced_first>(args, args.dim, "softmax_max_replaced_first");
}

void softmax_dropped_tail(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  launch<Bug::dropped_tail>(args, args.dim, "softmax_dropped_tail");
}

void softmax_wrong_dim(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  // BUG: a row kernel reused for every call; args.dim never looked at.
  launch<Bug::none>(args, /*dim=*/1, "softmax_wrong_dim");
}

}  // namespace course::planted
