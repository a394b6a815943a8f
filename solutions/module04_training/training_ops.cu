/// @file training_ops.cu
/// @brief Support kernels of the training demo (module04/training_ops.hpp): embedding
/// lookup and its gradient, bias (+ residual) add, softmax cross-entropy, Adam.
///
/// Not a ladder: one plain kernel per job, each a single pass over data that is small in
/// the demo (a few hundred KB per step), so none of them is worth tuning. What they must be
/// is correct and deterministic -- no floating-point atomics, every sum in a fixed order --
/// because the demo promises bit-identical training runs for one seed.

#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"
#include "module04/training_ops.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

namespace course::m04 {
namespace {

constexpr int kThreads = 256;
constexpr int kIdChunk = 1024;  ///< token ids staged in shared memory per pass (embedding backward)

/// Blocks for a grid-stride loop over `work` items.
unsigned grid_for(long long work, int threads = kThreads) {
  const long long blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::max(1LL, std::min(blocks, 1LL << 20)));
}

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fffffff); }

// ---------------------------------------------------------------------------- embedding

/// out[r, c] = token[ids[r], c] + position[r % seq, c]; a thread per element, grid-stride.
__global__ void embedding_forward_kernel(const std::int32_t* __restrict__ ids, const float* __restrict__ token,
                                         const float* __restrict__ position, float* __restrict__ out, int rows,
                                         int seq, int vocab, int dim) {
  const int total = rows * dim;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int r = e / dim, c = e - r * dim;
    const int id = ids[r];
    float x;
    if (id < 0 || id >= vocab) {
      x = quiet_nan();  // an invalid id must be visible, not a silent row of another token
    } else {
      x = token[id * dim + c];
      if (position != nullptr) x += position[(r % seq) * dim + c];
    }
    out[e] = x;
  }
}

/// token_grad[v, :] = sum of dout[r, :] over the rows r with ids[r] == v, in row order.
/// A block per token; the ids are staged in shared memory chunk by chunk and every thread
/// (one column each) scans them: reads of dout stay coalesced, the order never changes.
__global__ void embedding_token_grad_kernel(const std::int32_t* __restrict__ ids, const float* __restrict__ dout,
                                            float* __restrict__ grad, int rows, int dim) {
  __shared__ std::int32_t s_ids[kIdChunk];
  const int v = blockIdx.x;
  for (int c0 = 0; c0 < dim; c0 += blockDim.x) {  // column strips (one for dim <= blockDim)
    const int c = c0 + threadIdx.x;
    float acc = 0.f;
    for (int r0 = 0; r0 < rows; r0 += kIdChunk) {
      const int n = min(kIdChunk, rows - r0);
      __syncthreads();  // the previous chunk is no longer read
      for (int i = threadIdx.x; i < n; i += blockDim.x) s_ids[i] = ids[r0 + i];
      __syncthreads();
      if (c < dim)
        for (int i = 0; i < n; ++i)
          if (s_ids[i] == v) acc += dout[(r0 + i) * dim + c];
    }
    if (c < dim) grad[v * dim + c] = acc;
  }
}

/// position_grad[i, c] = sum over b (ascending) of dout[b*seq + i, c]; a thread per element.
__global__ void embedding_position_grad_kernel(const float* __restrict__ dout, float* __restrict__ grad, int batch,
                                               int seq, int dim) {
  const int total = seq * dim;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    float acc = 0.f;
    for (int b = 0; b < batch; ++b) acc += dout[b * total + e];  // row b*seq + i, column c
    grad[e] = acc;
  }
}

// ---------------------------------------------------------------------------- bias add

/// y[r, c] = (y[r, c] + bias[c]) + residual[r, c]; a thread per element.
__global__ void bias_add_kernel(float* __restrict__ y, const float* __restrict__ bias,
                                const float* __restrict__ residual, int rows, int cols, int ldy, int ldr) {
  const int total = rows * cols;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int r = e / cols, c = e - r * cols;
    float t = y[r * ldy + c];
    if (bias != nullptr) t += bias[c];
    if (residual != nullptr) t += residual[r * ldr + c];
    y[r * ldy + c] = t;
  }
}

// ---------------------------------------------------------------------------- cross-entropy

/// Workspace of cross_entropy: per-row loss, per-row verdict, the count of counted rows.
struct CeWorkspace {
  float* row_loss;
  std::int32_t* row_correct;
  std::int32_t* count;
};

CeWorkspace ce_workspace(void* base, int rows) {
  auto* bytes = static_cast<char*>(base);
  CeWorkspace w;
  w.row_loss = reinterpret_cast<float*>(bytes);
  w.row_correct = reinterpret_cast<std::int32_t*>(bytes + static_cast<std::size_t>(rows) * sizeof(float));
  w.count = reinterpret_cast<std::int32_t*>(bytes + static_cast<std::size_t>(rows) * 2 * sizeof(float));
  return w;
}

/// One block: count = #{ r : targets[r] != -1 }.
__global__ void ce_count_kernel(const std::int32_t* __restrict__ targets, int rows, std::int32_t* count,
                                std::int32_t* counted_out) {
  __shared__ int scratch[32];
  int n = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) n += targets[r] != -1 ? 1 : 0;
  n = course::cuda::block_all_reduce(n, course::cuda::Sum{}, 0, scratch);
  if (threadIdx.x == 0) {
    *count = n;
    if (counted_out != nullptr) *counted_out = n;
  }
}

/// A warp per row: max and argmax, logsumexp, the row's loss and verdict, and its gradient
/// (p - onehot) / count. Every lane reads the count written by ce_count_kernel before it.
__global__ void ce_rows_kernel(const float* __restrict__ logits, const std::int32_t* __restrict__ targets,
                               float* __restrict__ dlogits, CeWorkspace ws, int rows, int classes, int ld) {
  const int lane = threadIdx.x % course::cuda::kWarpSize;
  const int warps_per_block = blockDim.x / course::cuda::kWarpSize;
  const int count = *ws.count;
  for (int r = blockIdx.x * warps_per_block + threadIdx.x / course::cuda::kWarpSize; r < rows;
       r += gridDim.x * warps_per_block) {
    const float* x = logits + r * ld;
    float* g = dlogits != nullptr ? dlogits + r * ld : nullptr;
    const int t = targets[r];
    if (t == -1) {  // ignored row: no loss, no gradient
      if (g != nullptr)
        for (int j = lane; j < classes; j += course::cuda::kWarpSize) g[j] = 0.f;
      if (lane == 0) {
        ws.row_loss[r] = 0.f;
        ws.row_correct[r] = 0;
      }
      continue;
    }
    const bool bad = t < -1 || t >= classes;
    // Max and its lowest index: each lane scans ascending j (strict > keeps the first), then
    // the butterfly keeps the larger value, or on a tie the lower index.
    float m = -INFINITY;
    int arg = INT_MAX;
    for (int j = lane; j < classes; j += course::cuda::kWarpSize) {
      const float xj = x[j];
      if (xj > m) {
        m = xj;
        arg = j;
      }
    }
#pragma unroll
    for (int offset = course::cuda::kWarpSize / 2; offset > 0; offset /= 2) {
      const float om = __shfl_xor_sync(course::cuda::kFullWarpMask, m, offset);
      const int oarg = __shfl_xor_sync(course::cuda::kFullWarpMask, arg, offset);
      if (om > m || (om == m && oarg < arg)) {
        m = om;
        arg = oarg;
      }
    }
    float s = 0.f;
    for (int j = lane; j < classes; j += course::cuda::kWarpSize) s += expf(x[j] - m);
    s = course::cuda::warp_sum(s);
    if (g != nullptr) {
      const float denom = static_cast<float>(count);
      for (int j = lane; j < classes; j += course::cuda::kWarpSize) {
        const float p = expf(x[j] - m) / s;
        g[j] = bad ? quiet_nan() : (p - (j == t ? 1.f : 0.f)) / denom;
      }
    }
    if (lane == 0) {
      ws.row_loss[r] = bad ? quiet_nan() : (m + logf(s)) - x[t];
      ws.row_correct[r] = !bad && arg == t ? 1 : 0;
    }
  }
}

/// One block: loss = (sum of row losses, in double, fixed order) / count; correct = sum.
__global__ void ce_reduce_kernel(CeWorkspace ws, int rows, float* loss, std::int32_t* correct) {
  __shared__ double scratch_d[32];
  __shared__ int scratch_i[32];
  double sum = 0.0;
  int right = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    sum += static_cast<double>(ws.row_loss[r]);
    right += ws.row_correct[r];
  }
  sum = course::cuda::block_all_reduce(sum, course::cuda::Sum{}, 0.0, scratch_d);
  right = course::cuda::block_all_reduce(right, course::cuda::Sum{}, 0, scratch_i);
  if (threadIdx.x == 0) {
    const int count = *ws.count;
    *loss = count > 0 ? static_cast<float>(sum / count) : 0.f;
    if (correct != nullptr) *correct = right;
  }
}

// ---------------------------------------------------------------------------- Adam

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ m1,
                            float* __restrict__ m2, int n, float lr, float beta1, float beta2, float eps,
                            float correction1, float correction2) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float g = grad[i];
    const float m = beta1 * m1[i] + (1.f - beta1) * g;
    const float v = beta2 * m2[i] + (1.f - beta2) * g * g;
    m1[i] = m;
    m2[i] = v;
    p[i] -= lr * (m / correction1) / (sqrtf(v / correction2) + eps);
  }
}

}  // namespace

void embedding_forward(const EmbeddingArgs& a) {
  validate_embedding_args(a);
  const int rows = static_cast<int>(a.batch * a.seq), dim = static_cast<int>(a.dim);
  embedding_forward_kernel<<<grid_for(static_cast<long long>(rows) * dim), kThreads, 0, a.stream>>>(
      a.ids, a.token_table, a.position_table, a.out, rows, static_cast<int>(a.seq), static_cast<int>(a.vocab), dim);
  COURSE_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward(const EmbeddingBackwardArgs& a) {
  validate_embedding_backward_args(a);
  const int rows = static_cast<int>(a.batch * a.seq), dim = static_cast<int>(a.dim);
  if (a.token_grad != nullptr) {
    const int threads = std::min(kThreads, (dim + 31) / 32 * 32);
    embedding_token_grad_kernel<<<static_cast<unsigned>(a.vocab), threads, 0, a.stream>>>(a.ids, a.dout,
                                                                                           a.token_grad, rows, dim);
    COURSE_CHECK_LAUNCH("embedding_token_grad_kernel");
  }
  if (a.position_grad != nullptr) {
    embedding_position_grad_kernel<<<grid_for(a.seq * a.dim), kThreads, 0, a.stream>>>(
        a.dout, a.position_grad, static_cast<int>(a.batch), static_cast<int>(a.seq), dim);
    COURSE_CHECK_LAUNCH("embedding_position_grad_kernel");
  }
}

void bias_add(const BiasAddArgs& a) {
  validate_bias_add_args(a);
  const int ldy = static_cast<int>(a.ldy != 0 ? a.ldy : a.cols), ldr = static_cast<int>(a.ldr != 0 ? a.ldr : a.cols);
  bias_add_kernel<<<grid_for(a.rows * a.cols), kThreads, 0, a.stream>>>(
      a.y, a.bias, a.residual, static_cast<int>(a.rows), static_cast<int>(a.cols), ldy, ldr);
  COURSE_CHECK_LAUNCH("bias_add_kernel");
}

void cross_entropy(const CrossEntropyArgs& a) {
  validate_cross_entropy_args(a);
  const int rows = static_cast<int>(a.rows), classes = static_cast<int>(a.classes);
  const int ld = static_cast<int>(a.ld != 0 ? a.ld : a.classes);
  const CeWorkspace ws = ce_workspace(a.workspace, rows);
  ce_count_kernel<<<1, kThreads, 0, a.stream>>>(a.targets, rows, ws.count, a.counted);
  COURSE_CHECK_LAUNCH("ce_count_kernel");
  const int warps_per_block = kThreads / course::cuda::kWarpSize;
  ce_rows_kernel<<<grid_for(rows, warps_per_block), kThreads, 0, a.stream>>>(a.logits, a.targets, a.dlogits, ws,
                                                                             rows, classes, ld);
  COURSE_CHECK_LAUNCH("ce_rows_kernel");
  ce_reduce_kernel<<<1, kThreads, 0, a.stream>>>(ws, rows, a.loss, a.correct);
  COURSE_CHECK_LAUNCH("ce_reduce_kernel");
}

void adam_update(const AdamArgs& a) {
  validate_adam_args(a);
  const double t = static_cast<double>(a.step);
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), t));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), t));
  adam_kernel<<<grid_for(a.n), kThreads, 0, a.stream>>>(a.params, a.grads, a.m, a.v, static_cast<int>(a.n), a.lr,
                                                        a.beta1, a.beta2, a.eps, correction1, correction2);
  COURSE_CHECK_LAUNCH("adam_kernel");
}

}  // namespace course::m04
