/// @file gpt_support.cu
/// @brief Glue kernels of the GPT trainer (module04/gpt_support.hpp): fp32 <-> bf16
/// conversions, the bias gradient of a bf16 dY, the batch gather.
///
/// Not a ladder (no exercise): plain one-pass kernels around the course's real ones. They
/// must be correct and deterministic -- no floating-point atomics, sums in a fixed order --
/// so that the trainer's deterministic mode gives the same bits for one seed. Sizes in the
/// trainer: a conversion moves at most 16384 x 384 values per step (the embedding's output
/// and its gradient), the bias gradients read each dY once more (~4% of a step's traffic).

#include "course/error.hpp"
#include "module04/gpt_support.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::m04::gpt {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(long long work, int threads = kThreads) {
  const long long blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::max(1LL, std::min(blocks, 1LL << 20)));
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ in, float* __restrict__ out, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

/// partial[p, c] = sum of dy[r, c] over the rows r of chunk p, in row order. Grid
/// (column blocks, partials); a thread per column, so each row's read is coalesced.
__global__ void bias_grad_partial_kernel(const __nv_bfloat16* __restrict__ dy, float* __restrict__ partial, int rows,
                                         int cols, long long ld, int rows_per_partial) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int r0 = blockIdx.y * rows_per_partial;
  const int r1 = min(rows, r0 + rows_per_partial);
  float s = 0.f;
  for (int r = r0; r < r1; ++r) s += __bfloat162float(dy[static_cast<long long>(r) * ld + c]);
  partial[static_cast<long long>(blockIdx.y) * cols + c] = s;
}

/// db[c] = sum over p of partial[p, c], in order.
__global__ void bias_grad_final_kernel(const float* __restrict__ partial, float* __restrict__ db, int cols,
                                       int partials) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.f;
  for (int p = 0; p < partials; ++p) s += partial[static_cast<long long>(p) * cols + c];
  db[c] = s;
}

__global__ void make_batch_kernel(const std::uint8_t* __restrict__ tokens, long long n_tokens, int token_bytes,
                                  unsigned long long seed, unsigned long long split, unsigned long long step,
                                  int batch, int context, std::int32_t* __restrict__ ids,
                                  std::int32_t* __restrict__ targets) {
  const long long total = static_cast<long long>(batch) * context;
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(e / context), t = static_cast<int>(e - static_cast<long long>(b) * context);
    const long long o = gpt_batch_offset(seed, split, step, static_cast<unsigned long long>(b), n_tokens, context) + t;
    const auto id_at = [&](long long i) {
      return token_bytes == 1 ? static_cast<std::int32_t>(tokens[i])
                              : static_cast<std::int32_t>(tokens[2 * i] | (tokens[2 * i + 1] << 8));
    };
    ids[e] = id_at(o);
    targets[e] = id_at(o + 1);
  }
}

}  // namespace

void convert_f32_to_bf16(const float* in, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream) {
  const char* fn = "convert_f32_to_bf16";
  require_arg(n >= 0, fn, "n", n, "must be >= 0");
  if (n == 0) return;
  require_not_null(in, fn, "in");
  require_not_null(out, fn, "out");
  f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, out, n);
  COURSE_CHECK_LAUNCH("f32_to_bf16_kernel");
}

void convert_bf16_to_f32(const __nv_bfloat16* in, float* out, std::int64_t n, cudaStream_t stream) {
  const char* fn = "convert_bf16_to_f32";
  require_arg(n >= 0, fn, "n", n, "must be >= 0");
  if (n == 0) return;
  require_not_null(in, fn, "in");
  require_not_null(out, fn, "out");
  bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, out, n);
  COURSE_CHECK_LAUNCH("bf16_to_f32_kernel");
}

void bias_grad_bf16(const BiasGradBf16Args& a) {
  validate_bias_grad_bf16_args(a);
  const int partials = static_cast<int>(bias_grad_partials(a.rows));
  const int cols = static_cast<int>(a.cols);
  const dim3 grid((cols + kThreads - 1) / kThreads, static_cast<unsigned>(partials));
  bias_grad_partial_kernel<<<grid, kThreads, 0, a.stream>>>(a.dy, a.workspace, static_cast<int>(a.rows), cols, a.ld,
                                                            static_cast<int>(kBiasGradRowsPerPartial));
  COURSE_CHECK_LAUNCH("bias_grad_partial_kernel");
  bias_grad_final_kernel<<<(cols + kThreads - 1) / kThreads, kThreads, 0, a.stream>>>(a.workspace, a.db, cols,
                                                                                       partials);
  COURSE_CHECK_LAUNCH("bias_grad_final_kernel");
}

void gpt_make_batch(const GptBatchArgs& a) {
  validate_gpt_batch_args(a);
  make_batch_kernel<<<grid_for(a.batch * a.context), kThreads, 0, a.stream>>>(
      a.tokens, a.num_tokens, a.token_bytes, a.seed, a.split, a.step, static_cast<int>(a.batch),
      static_cast<int>(a.context), a.ids, a.targets);
  COURSE_CHECK_LAUNCH("make_batch_kernel");
}

}  // namespace course::m04::gpt
