/// @file batched_gemm_planted.cu
/// @brief Planted bugs for the batched GEMM tests (see batched_gemm_planted.hpp).
/// DO NOT copy these: each kernel contains one realistic mistake on purpose.

#include "batched_gemm_planted.hpp"

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::planted {
namespace {

using m02::StridedBatchedGemmArgs;

enum class Bug { swapped_head_batch, ignored_transpose, dropped_edge_tile, contiguous_rows };

constexpr int kTile = 16;

/// Naive batched GEMM, one thread per output, 16 x 16 threads per block; grid x = tile,
/// y = head, z = batch. Correct except for the one `kBug`.
template <Bug kBug>
__global__ void planted_bgemm_kernel(StridedBatchedGemmArgs<float> s, int tiles_n) {
  const int tile_m = blockIdx.x / tiles_n, tile_n = blockIdx.x % tiles_n;
  const int h = blockIdx.y, b = blockIdx.z;
  const int row = tile_m * kTile + threadIdx.y, col = tile_n * kTile + threadIdx.x;
  if (row >= s.M || col >= s.N) return;

  std::int64_t off_a = b * s.stride_a_batch + h * s.stride_a_head;
  std::int64_t off_b = b * s.stride_b_batch + h * s.stride_b_head;
  if constexpr (kBug == Bug::swapped_head_batch) {
    // BUG: the batch index walks the head stride and the head index the batch stride.
    off_a = b * s.stride_a_head + h * s.stride_a_batch;
    off_b = b * s.stride_b_head + h * s.stride_b_batch;
  }
  std::int64_t lda = s.stride_a_row, ldb = s.stride_b_row, ldc = s.stride_c_row;
  if constexpr (kBug == Bug::contiguous_rows) {
    // BUG: "rows are packed": the row strides the caller passed are ignored.
    lda = s.K;
    ldb = s.b_transposed ? s.K : s.N;
    ldc = s.N;
  }
  const float* a = s.a + off_a + row * lda;
  const float* bm = s.b + off_b;
  float acc = 0.f;
  for (int k = 0; k < s.K; ++k) {
    float bkn;
    if constexpr (kBug == Bug::ignored_transpose)
      bkn = bm[k * ldb + col];  // BUG: B read as K x N even when it is stored N x K
    else
      bkn = s.b_transposed ? bm[col * ldb + k] : bm[k * ldb + col];
    acc = fmaf(a[k], bkn, acc);
  }
  s.c[b * s.stride_c_batch + h * s.stride_c_head + row * ldc + col] = s.alpha * acc;
}

template <Bug kBug>
void run(const StridedBatchedGemmArgs<float>& s, const char* fn) {
  m02::validate_strided_args(s, m02::BgemmStep::smem_tiled, fn);
  std::int64_t tiles_m = (s.M + kTile - 1) / kTile, tiles_n = (s.N + kTile - 1) / kTile;
  if constexpr (kBug == Bug::dropped_edge_tile) {
    // BUG: integer division rounds down; the last partial tile row and column are lost.
    tiles_m = s.M / kTile;
    tiles_n = s.N / kTile;
  }
  if (tiles_m * tiles_n == 0) return;  // (a grid of zero blocks is a launch error)
  const dim3 grid(static_cast<unsigned>(tiles_m * tiles_n), static_cast<unsigned>(s.num_heads),
                  static_cast<unsigned>(s.batch));
  planted_bgemm_kernel<kBug><<<grid, dim3(kTile, kTile), 0, s.stream>>>(s, static_cast<int>(tiles_n));
  COURSE_CHECK_LAUNCH("planted_bgemm_kernel");
}

}  // namespace

void bgemm_swapped_head_batch_strides(m02::BgemmStep, const StridedBatchedGemmArgs<float>& args) {
  run<Bug::swapped_head_batch>(args, "bgemm_swapped_head_batch_strides");
}
void bgemm_ignored_b_transposed(m02::BgemmStep, const StridedBatchedGemmArgs<float>& args) {
  run<Bug::ignored_transpose>(args, "bgemm_ignored_b_transposed");
}
void bgemm_dropped_edge_tile(m02::BgemmStep, const StridedBatchedGemmArgs<float>& args) {
  run<Bug::dropped_edge_tile>(args, "bgemm_dropped_edge_tile");
}
void bgemm_assumed_contiguous_rows(m02::BgemmStep, const StridedBatchedGemmArgs<float>& args) {
  run<Bug::contiguous_rows>(args, "bgemm_assumed_contiguous_rows");
}

}  // namespace course::planted
