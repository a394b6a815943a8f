/// @file adamw.cu
/// @brief YOUR ladder for one AdamW step over all parameters of a model, with global
/// gradient-norm clipping and an optional bf16 copy of each tensor (module 4).
///
/// Read module04_training/include/module04/adamw.hpp first (the update in PyTorch's order,
/// the clip scale, the tensor list, the workspace), then fill in one step at a time. Run
/// its tests with:   ctest --preset default -L exercise -R AdamW
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint adamw/<step>`
/// (all of them: exercises/module04_training/hints/adamw.md).
///
/// The norm of step 1 calls module 1's SOLUTION l2_norm (a known-good building block).

#include "module04/adamw.hpp"
#include "module01/reductions.hpp"

#include "course/cuda/vec.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace course::exercise {
namespace {

using m04::AdamWArgs;
using m04::AdamWStep;
using m04::AdamWTensor;
namespace ad = m04::adamw_detail;
namespace cc = ::course::cuda;

/// The per-step constants, computed on the host in double and rounded once.
struct AdamWConsts {
  float lr_wd;            ///< lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;        ///< lr / (1 - beta1^t)
  float bias2_sqrt;       ///< sqrt(1 - beta2^t)
  float eps;
};

AdamWConsts consts_of(const AdamWArgs& a) {
  const double t = static_cast<double>(a.t);
  const double b1 = a.beta1, b2 = a.beta2, lr = a.lr;
  AdamWConsts c;
  c.lr_wd = static_cast<float>(lr * static_cast<double>(a.weight_decay));
  c.beta1 = a.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - b1);
  c.beta2 = a.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - b2);
  c.step_size = static_cast<float>(lr / (1.0 - std::pow(b1, t)));
  c.bias2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
  c.eps = a.eps;
  return c;
}

/// Where the two device scalars live: workspace[0] = the norm, workspace[1] = the scale.
float* scalars(const AdamWArgs& a) { return static_cast<float*>(a.workspace); }

/// The combine kernel's last act, shared by both steps: the norm from the total sum of
/// squares, written where the trainer reads it, and the clip scale.
__device__ __forceinline__ void finish_norm(float sum_sq, float max_norm, float* norm_out, float* scalars) {
  const float norm = sqrtf(sum_sq);
  scalars[0] = norm;
  if (norm_out != nullptr) *norm_out = norm;
  const float clip = max_norm / (norm + 1e-6f);
  scalars[1] = clip >= 1.f ? 1.f : clip;  // a NaN norm gives a NaN scale, as torch's clamp
}

/// One element of AdamW, in PyTorch's fused order (adamw.hpp): decay the old p, update the
/// moments, then the bias-corrected step. Every operation in fp32.
__device__ __forceinline__ void adamw_update(float& p, float g, float& m, float& v, const AdamWConsts& c, bool decay,
                                             float scale) {
  // @step per_tensor
  // TODO(step 1a): one element of AdamW in PyTorch's order (adamw.hpp): g *= scale; decay
  // the old p (only if decay); update m and v; p -= step_size * m / (sqrt(v) / bias2_sqrt + eps).
  (void)p, (void)g, (void)m, (void)v, (void)c, (void)decay, (void)scale;
  // @end
}

// @step per_tensor
// ----------------------------------------------------------------------------
// Step 1: per_tensor -- the norm from module 1's l2_norm, one update launch per tensor.
//   (a) adamw_update: one element of AdamW (the formula and its order: adamw.hpp).
//   (b) per_tensor_update_kernel: one thread per element; the clip scale is *scale_ptr
//       (null: 1); write p, m, v back and, if bf16 != nullptr, the bf16 copy of p.
//   (c) per_tensor_combine_kernel: one block adds norms[i]^2 + head_sq[i] over all tensors
//       in a fixed order and hands the total to finish_norm.
//   (d) launch_per_tensor: the launches.
// Hints, one at a time: bash scripts/course.sh hint adamw/per_tensor
// Then count the launches for the GPT's 76 tensors, and compare with the bench's time.
// ----------------------------------------------------------------------------
// @end

/// One block: total = sum_i (norms[i]^2 + head_sq[i]), in tensor order per thread and a
/// fixed tree across threads: the same bits every run.
__global__ void per_tensor_combine_kernel(const float* norms, const float* head_sq, int num_tensors, float max_norm,
                                          float* norm_out, float* scalars) {
  // @step per_tensor
  // TODO(step 1c)
  (void)norms, (void)head_sq, (void)num_tensors, (void)max_norm, (void)norm_out, (void)scalars;
  // @end
}

/// The sum of squares of the h (<= 3) elements before a tensor's first 16-byte boundary,
/// which module 1's float4 l2_norm cannot start at (one warp; only for such tensors).
__global__ void head_squares_kernel(const float* x, int h, float* out) {
  const float e = static_cast<int>(threadIdx.x) < h ? x[threadIdx.x] : 0.f;
  const float s = cc::warp_sum(e * e);
  if (threadIdx.x == 0) *out = s;
}

__global__ void per_tensor_update_kernel(float* p, const float* g, float* m, float* v, __nv_bfloat16* bf16,
                                         std::int64_t n, AdamWConsts c, bool decay, const float* scale_ptr) {
  // @step per_tensor
  // TODO(step 1b)
  (void)p, (void)g, (void)m, (void)v, (void)bf16, (void)n, (void)c, (void)decay, (void)scale_ptr;
  // @end
}

/// Elements before the first 16-byte boundary of x (0-3, at most n).
std::int64_t head_length(const float* x, std::int64_t n) {
  const auto misalign = reinterpret_cast<std::uintptr_t>(x) % 16;
  const std::int64_t h = misalign == 0 ? 0 : static_cast<std::int64_t>((16 - misalign) / sizeof(float));
  return std::min(h, n);
}

unsigned blocks_for(std::int64_t work, std::int64_t per_block, const char* what) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  require_arg(blocks <= 0x7fffffff, "adamw", what, work, "needs more than 2^31 - 1 blocks");
  return static_cast<unsigned>(blocks);
}

/// Does this call compute the norm? For clipping, or because the trainer asked for it.
bool wants_norm(const AdamWArgs& a) { return a.max_norm > 0.f || a.grad_norm != nullptr; }

void launch_per_tensor(const AdamWArgs& a) {
  const auto t = static_cast<std::size_t>(a.num_tensors);
  auto* base = static_cast<unsigned char*>(a.workspace);
  float* norms = reinterpret_cast<float*>(base + ad::kScalarBytes);
  float* head_sq = reinterpret_cast<float*>(base + ad::kScalarBytes + ad::round16(t * sizeof(float)));
  float* l2_ws = reinterpret_cast<float*>(base + ad::kScalarBytes + 2 * ad::round16(t * sizeof(float)));
  const AdamWConsts c = consts_of(a);
  // @step per_tensor  (the launches)
  // TODO(step 1d): delete the throw. If wants_norm(a): zero norms and head_sq (adjacent: one
  // cudaMemsetAsync of 2 * ad::round16(t * sizeof(float)) bytes); for every tensor with
  // n > 0, head_squares_kernel<<<1, 32>>> over its first head_length(grads, n) elements (if
  // any) into head_sq[i], and course::solution::l2_norm(m01::ReduceStep::vectorized, ...)
  // of the rest into norms[i] (workspace l2_ws, ad::kL2NormWorkspaceBytes); then
  // per_tensor_combine_kernel<<<1, 1024>>>. Then one per_tensor_update_kernel per tensor
  // with n > 0 (scale: scalars(a) + 1 when a.max_norm > 0, else nullptr).
  (void)norms, (void)head_sq, (void)l2_ws, (void)c;
  throw NotImplemented("adamw step per_tensor", __FILE__);
  // @end
}

// @step multi_tensor
// ----------------------------------------------------------------------------
// Step 2: multi_tensor -- one launch over the whole list.
//   launch_multi_tensor (given) writes the device table (one ad::TableEntry per tensor)
//   and the chunk map (tensor i owns blocks chunk_start[i] .. chunk_start[i+1] - 1, each a
//   chunk of m04::kAdamWChunk elements) into the workspace.
//   (a) find_tensor: block b's tensor, by a binary search of chunk_start.
//   (b) sum_squares_kernel: the sum of grads^2 over the block's chunk into partials[b]
//       (float4 when the tensor's grads are 16-byte aligned).
//   (c) multi_tensor_update_kernel: the chunk's elements through adamw_update: float4 when
//       e.vec4 (the last 0-3 elements scalar), scalar otherwise; the bf16 copy in the same pass.
//   (d) launch_multi_tensor: the launches.
// Hints, one at a time: bash scripts/course.sh hint adamw/multi_tensor
// ----------------------------------------------------------------------------
// @end

/// Block b's tensor: the largest i with chunk_start[i] <= b (empty tensors own no chunk,
/// so the largest such i is the one that does); its chunk within the tensor is
/// b - chunk_start[i].
__device__ __forceinline__ int find_tensor(const std::int64_t* chunk_start, int num_tensors, std::int64_t b) {
  // @step multi_tensor
  // TODO(step 2a)
  (void)chunk_start, (void)num_tensors, (void)b;
  return 0;
  // @end
}

constexpr int kUnroll = 2;  // float4 of each array in flight per thread

__global__ void __launch_bounds__(m04::kAdamWThreads)
    sum_squares_kernel(const ad::TableEntry* table, const std::int64_t* chunk_start, int num_tensors,
                       float* partials) {
  // @step multi_tensor
  // TODO(step 2b)
  (void)table, (void)chunk_start, (void)num_tensors, (void)partials;
  // @end
}

/// One block: the partials added in block order (fixed), then the norm and the scale.
__global__ void sum_partials_kernel(const float* partials, std::int64_t count, float max_norm, float* norm_out,
                                    float* scalars) {
  float s = 0.f;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  __shared__ float scratch[cc::kWarpSize];
  s = cc::block_all_reduce(s, cc::Sum{}, 0.f, scratch);
  if (threadIdx.x == 0) finish_norm(s, max_norm, norm_out, scalars);
}

__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* dst, float4 p) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(p.x, p.y), hi = __floats2bfloat162_rn(p.z, p.w);
  uint2 packed;
  packed.x = *reinterpret_cast<const unsigned*>(&lo);
  packed.y = *reinterpret_cast<const unsigned*>(&hi);
  *reinterpret_cast<uint2*>(dst) = packed;
}

__global__ void __launch_bounds__(m04::kAdamWThreads)
    multi_tensor_update_kernel(const ad::TableEntry* table, const std::int64_t* chunk_start, int num_tensors,
                               AdamWConsts c, const float* scale_ptr) {
  // @step multi_tensor
  // TODO(step 2c)
  (void)table, (void)chunk_start, (void)num_tensors, (void)c, (void)scale_ptr;
  // @end
}

bool aligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

void launch_multi_tensor(const AdamWArgs& a) {
  const auto t = static_cast<std::size_t>(a.num_tensors);
  // The device table and the chunk map, built on the host and uploaded in one copy.
  const std::size_t table_bytes = ad::round16(t * sizeof(ad::TableEntry));
  const std::size_t map_bytes = ad::round16((t + 1) * sizeof(std::int64_t));
  std::vector<unsigned char> host(table_bytes + map_bytes, 0);
  auto* table = reinterpret_cast<ad::TableEntry*>(host.data());
  auto* chunk_start = reinterpret_cast<std::int64_t*>(host.data() + table_bytes);
  chunk_start[0] = 0;
  for (std::size_t i = 0; i < t; ++i) {
    const AdamWTensor& x = a.tensors[i];
    const bool vec4 = aligned(x.params, 16) && aligned(x.grads, 16) && aligned(x.m, 16) && aligned(x.v, 16) &&
                      aligned(x.bf16, 8);
    table[i] = {x.params, x.grads, x.m, x.v, x.bf16, x.n, x.decay ? 1 : 0, vec4 ? 1 : 0};
    chunk_start[i + 1] = chunk_start[i] + ad::chunks_of(x.n);
  }
  const std::int64_t chunks = chunk_start[t];
  require_arg(chunks <= 0x7fffffff, "adamw", "num_tensors", a.num_tensors,
              "together hold more than (2^31 - 1) x 16384 elements (one block per chunk)");
  auto* base = static_cast<unsigned char*>(a.workspace);
  auto* d_table = reinterpret_cast<const ad::TableEntry*>(base + ad::kScalarBytes);
  auto* d_chunk_start = reinterpret_cast<const std::int64_t*>(base + ad::kScalarBytes + table_bytes);
  float* partials = reinterpret_cast<float*>(base + ad::kScalarBytes + table_bytes + map_bytes);
  COURSE_CUDA_CHECK(
      cudaMemcpyAsync(base + ad::kScalarBytes, host.data(), host.size(), cudaMemcpyHostToDevice, a.stream));
  const AdamWConsts c = consts_of(a);
  const int nt = static_cast<int>(t);
  // @step multi_tensor  (the launches)
  // TODO(step 2d): delete the throw. If wants_norm(a): sum_squares_kernel (one block of
  // m04::kAdamWThreads per chunk, if chunks > 0), then sum_partials_kernel<<<1, 1024>>>.
  // Then, if chunks > 0, multi_tensor_update_kernel over the chunks (scale as in step 1).
  (void)d_table, (void)d_chunk_start, (void)partials, (void)c, (void)nt;
  throw NotImplemented("adamw step multi_tensor", __FILE__);
  // @end
}

}  // namespace

void adamw(AdamWStep step, const AdamWArgs& args) {
  m04::validate_adamw_args(args, step, "adamw");
  if (args.num_tensors == 0) {  // nothing to update; the norm of nothing is 0
    if (args.grad_norm != nullptr) COURSE_CUDA_CHECK(cudaMemsetAsync(args.grad_norm, 0, sizeof(float), args.stream));
    return;
  }
  switch (step) {
    case AdamWStep::per_tensor: return launch_per_tensor(args);
    case AdamWStep::multi_tensor: return launch_multi_tensor(args);
  }
  require_arg(false, "adamw", "step", static_cast<int>(step), "is not an AdamWStep");
}

}  // namespace course::exercise
