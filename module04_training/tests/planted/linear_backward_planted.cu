/// @file linear_backward_planted.cu
/// @brief Planted bugs for the linear backward tests (see linear_backward_planted.hpp).
/// DO NOT copy these: each contains one realistic mistake on purpose.

#include "linear_backward_planted.hpp"

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::planted {
namespace {

using m04::LinearBackwardArgs;

enum class Bug { db_row_sums, dw_without_transpose, dx_without_transpose };

constexpr int kTile = 16;

/// dX[m, k] = sum_n dY[m, n] * W[k, n], one thread per element.
template <Bug kBug>
__global__ void planted_dx_kernel(LinearBackwardArgs a) {
  const std::int64_t m = blockIdx.y * static_cast<std::int64_t>(kTile) + threadIdx.y;
  const std::int64_t k = blockIdx.x * static_cast<std::int64_t>(kTile) + threadIdx.x;
  if (m >= a.M || k >= a.K) return;
  float acc = 0.f;
  for (std::int64_t n = 0; n < a.N; ++n) {
    // BUG (dx_without_transpose): W[n, k] -- W read as if stored N x K.
    const float w = kBug == Bug::dx_without_transpose ? a.w[n * a.ldw + k] : a.w[k * a.ldw + n];
    acc = fmaf(a.dy[m * a.lddy + n], w, acc);
  }
  a.dx[m * a.lddx + k] = acc;
}

/// dW[k, n] = sum_m X[m, k] * dY[m, n], one thread per element.
template <Bug kBug>
__global__ void planted_dw_kernel(LinearBackwardArgs a) {
  const std::int64_t k = blockIdx.y * static_cast<std::int64_t>(kTile) + threadIdx.y;
  const std::int64_t n = blockIdx.x * static_cast<std::int64_t>(kTile) + threadIdx.x;
  if (k >= a.K || n >= a.N) return;
  float acc = 0.f;
  for (std::int64_t m = 0; m < a.M; ++m) {
    // BUG (dw_without_transpose): X[k, m] -- X used as stored, i.e. X dY instead of X^T dY.
    const float x = kBug == Bug::dw_without_transpose ? a.x[k * a.ldx + m] : a.x[m * a.ldx + k];
    acc = fmaf(x, a.dy[m * a.lddy + n], acc);
  }
  a.dw[k * a.lddw + n] = acc;
}

/// db[j] = sum_i dY[i, j], one thread per column.
template <Bug kBug>
__global__ void planted_db_kernel(LinearBackwardArgs a) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= a.N) return;
  float acc = 0.f;
  if constexpr (kBug == Bug::db_row_sums) {
    for (std::int64_t c = 0; c < a.N; ++c) acc += a.dy[j * a.lddy + c];  // BUG: along row j
  } else {
    for (std::int64_t i = 0; i < a.M; ++i) acc += a.dy[i * a.lddy + j];
  }
  a.db[j] = acc;
}

unsigned tiles(std::int64_t n) { return static_cast<unsigned>((n + kTile - 1) / kTile); }

template <Bug kBug>
void run(m04::BiasGradStep step, const LinearBackwardArgs& args, const char* fn) {
  m04::validate_linear_backward_args(args, step, fn);
  require_arg(args.M == args.K && args.K == args.N, fn, "M", args.M,
              "a planted bug runs on square problems only (M == K == N): its wrong indices stay in bounds there");
  const LinearBackwardArgs a = m04::resolve_leading_dims(args);
  const dim3 block(kTile, kTile);
  if (a.dx) {
    planted_dx_kernel<kBug><<<dim3(tiles(a.K), tiles(a.M)), block, 0, a.stream>>>(a);
    COURSE_CHECK_LAUNCH("planted_dx_kernel");
  }
  if (a.dw) {
    planted_dw_kernel<kBug><<<dim3(tiles(a.N), tiles(a.K)), block, 0, a.stream>>>(a);
    COURSE_CHECK_LAUNCH("planted_dw_kernel");
  }
  if (a.db) {
    planted_db_kernel<kBug><<<static_cast<unsigned>((a.N + 127) / 128), 128, 0, a.stream>>>(a);
    COURSE_CHECK_LAUNCH("planted_db_kernel");
  }
}

}  // namespace

void linear_backward_db_row_sums(m04::BiasGradStep step, const m04::LinearBackwardArgs& args) {
  run<Bug::db_row_sums>(step, args, "linear_backward_db_row_sums");
}
void linear_backward_dw_without_transpose(m04::BiasGradStep step, const m04::LinearBackwardArgs& args) {
  run<Bug::dw_without_transpose>(step, args, "linear_backward_dw_without_transpose");
}
void linear_backward_dx_without_transpose(m04::BiasGradStep step, const m04::LinearBackwardArgs& args) {
  run<Bug::dx_without_transpose>(step, args, "linear_backward_dx_without_transpose");
}

}  // namespace course::planted
