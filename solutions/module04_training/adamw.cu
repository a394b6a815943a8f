/// @file adamw.cu
/// @brief Solution ladder for one AdamW step over all parameters of a model, with global
/// gradient-norm clipping and an optional bf16 copy of each tensor (module 4).
///
/// The ladder:
///   1. per_tensor    the norm: module 1's l2_norm (vectorized) per tensor into a small
///                    device array, combined in a fixed order by one block; the update: one
///                    scalar launch per tensor, one thread per element.
///   2. multi_tensor  one launch for the sum of squares and one for the update, each over
///                    the whole list: a device table of the tensors and a chunk map (block ->
///                    tensor, chunk), float4 loads and stores, the bf16 copy in the same pass.
///
/// Both are memory-bound: per element ~12 FLOPs on 28 bytes (read params, grads, m, v; write
/// params, m, v), + 2 bytes for a bf16 copy, + 4 for the norm (grads read once more, before
/// the update: the scale needs the whole norm first). The ceiling is a device-to-device copy
/// of the same bytes. The 6-layer GPT of the next rung has 76 tensors, 28 of them 384 or
/// 1152 elements long: what decides the ladder is launches, not arithmetic.
///
/// Clipping never syncs with the host: the combine kernel writes the norm and the scale
/// s = min(1, max_norm / (norm + 1e-6)) to the workspace, and the update kernels read s
/// from there.

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

namespace course::solution {
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
  g *= scale;
  if (decay) p = p - c.lr_wd * p;
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * (g * g);
  const float denom = sqrtf(v) / c.bias2_sqrt + c.eps;
  p = p - (c.step_size * m) / denom;
  // @end
}

// @step per_tensor
// ============================================================================
// Step 1: per_tensor.
// The norm, built on module 1: for each tensor, course::solution::l2_norm (its vectorized
// step: float4 grid-stride loads, per-block partials, a deterministic second pass) writes
// ||grads_i|| into norms[i] of the workspace. l2_norm reads float4 and so wants a 16-byte
// aligned start: a tensor that starts elsewhere (a sub-buffer at an odd offset) hands it
// the aligned body and leaves its first 1-3 elements (the head) to the combine kernel.
// One block then adds norms[i]^2 + head_i in tensor order (a fixed order: the same bits
// every run) and writes the norm and the clip scale.
// The update: one launch per tensor, one thread per element, scalar loads; the clip scale
// read once per thread from the workspace.
//
// Launches: 2 per tensor for the norm (l2_norm's two kernels) + 1 combine + 1 per tensor
// for the update: 76 tensors -> ~230 launches, ~1 ms of launch gaps on their own at
// 3-5 us each, against ~0.1 ms of traffic (10.8 M parameters x 34 B at ~3 TB/s).
// Bytes: 34 per element (32 + 2 with bf16), every element read and written once.
// Prediction (6-layer GPT, 10.8 M parameters): ~0.1-0.2 of the copy: launch-bound;
// the 28 short tensors (384-1536 elements) are a launch each for nothing. 12-layer
// d_model 768 (124 M): ~0.5-0.7 (the big matrices dominate; scalar loads are 4x the
// instructions of float4 but still ~40 B in flight per thread).
// Measured (results: adamw/solution/per_tensor/{gpt6_d384,gpt12_d768}): 373.5 / 1288.7 GB/s = 0.13 / 0.43 of d2d_copy
// ============================================================================
// @end

/// One block: total = sum_i (norms[i]^2 + head_sq[i]), in tensor order per thread and a
/// fixed tree across threads: the same bits every run.
__global__ void per_tensor_combine_kernel(const float* norms, const float* head_sq, int num_tensors, float max_norm,
                                          float* norm_out, float* scalars) {
  // @step per_tensor
  float s = 0.f;
  for (int i = threadIdx.x; i < num_tensors; i += blockDim.x) s += norms[i] * norms[i] + head_sq[i];
  __shared__ float scratch[cc::kWarpSize];
  s = cc::block_all_reduce(s, cc::Sum{}, 0.f, scratch);
  if (threadIdx.x == 0) finish_norm(s, max_norm, norm_out, scalars);
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
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float scale = scale_ptr != nullptr ? *scale_ptr : 1.f;
  float pi = p[i], mi = m[i], vi = v[i];
  adamw_update(pi, g[i], mi, vi, c, decay, scale);
  p[i] = pi;
  m[i] = mi;
  v[i] = vi;
  if (bf16 != nullptr) bf16[i] = __float2bfloat16_rn(pi);
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
  if (wants_norm(a)) {
    COURSE_CUDA_CHECK(cudaMemsetAsync(norms, 0, 2 * ad::round16(t * sizeof(float)), a.stream));
    for (std::size_t i = 0; i < t; ++i) {
      const AdamWTensor& x = a.tensors[i];
      if (x.n == 0) continue;
      const std::int64_t h = head_length(x.grads, x.n);
      if (h > 0) {
        head_squares_kernel<<<1, cc::kWarpSize, 0, a.stream>>>(x.grads, static_cast<int>(h), head_sq + i);
        COURSE_CHECK_LAUNCH("head_squares_kernel");
      }
      if (x.n - h == 0) continue;
      m01::ReduceArgs r;  // module 1's norm of the aligned body: ||grads_i[h:]|| -> norms[i]
      r.x = x.grads + h;
      r.n = x.n - h;
      r.result = norms + i;
      r.workspace = l2_ws;
      r.workspace_bytes = ad::kL2NormWorkspaceBytes;
      r.stream = a.stream;
      course::solution::l2_norm(m01::ReduceStep::vectorized, r);
    }
    per_tensor_combine_kernel<<<1, 1024, 0, a.stream>>>(norms, head_sq, static_cast<int>(t), a.max_norm,
                                                        a.grad_norm, scalars(a));
    COURSE_CHECK_LAUNCH("per_tensor_combine_kernel");
  }
  const float* scale = a.max_norm > 0.f ? scalars(a) + 1 : nullptr;
  constexpr int kThreads = 256;
  for (std::size_t i = 0; i < t; ++i) {
    const AdamWTensor& x = a.tensors[i];
    if (x.n == 0) continue;
    per_tensor_update_kernel<<<blocks_for(x.n, kThreads, "tensors[i].n"), kThreads, 0, a.stream>>>(
        x.params, x.grads, x.m, x.v, x.bf16, x.n, c, x.decay, scale);
    COURSE_CHECK_LAUNCH("per_tensor_update_kernel");
  }
  // @end
}

// @step multi_tensor
// ============================================================================
// Step 2: multi_tensor.
// Changes from per_tensor:
//  - One launch over the whole list. The host writes a device table (one row per tensor:
//    its five pointers, n, the decay flag, whether its arrays allow float4) and the chunk
//    map into the workspace with ONE pageable cudaMemcpyAsync (staged at once, no device
//    synchronization): tensor i owns chunks chunk_start[i] .. chunk_start[i+1]-1 of
//    16384 elements each, and block b finds its tensor by a binary search of chunk_start
//    (<= 24 probes of an L1-resident array; a tensor of 384 elements is one short chunk).
//    The map is one int64 per tensor, not one entry per block: 76 + 1 of them for the GPT
//    instead of ~700 (6 layers) or ~7600 (GPT-2 small) block entries to upload each call.
//  - float4: a tensor whose params, grads, m, v start 16-byte aligned (and bf16 8-byte)
//    moves 16 bytes per load and store instruction; each thread keeps two float4 of each
//    array in flight (128 B of loads) before the math. Other tensors take a scalar loop in
//    the same kernel.
//  - The bf16 copy is written from the registers in the same pass (4 values as one 8-byte
//    store): no second read of the params.
//  - The norm: one multi-tensor sum-of-squares launch (same table, same chunks, a partial
//    per block) and one block that adds the partials in block order (deterministic) and
//    writes norm and scale. Why not module 1's l2_norm per tensor, as step 1: its two
//    kernels per tensor make ~150 launches for the GPT's 76 tensors, several times the
//    ~0.1 ms the whole update's traffic takes; one launch reads the same bytes.
// Launches: 2 for the norm + 1 update + 1 table upload, whatever the tensor count.
// Bytes: 34 per element with the norm and the bf16 copy (28 + 4 + 2), as step 1.
// Prediction: 6-layer GPT (10.8 M parameters, ~370 MB): ~0.75-0.85 of the copy (three
// kernels' tails and gaps of ~3 us each on a ~130 us job); 12-layer d_model 768 (GPT-2
// small, 124 M): ~0.85-0.9 (7 read/write streams per thread, the DRAM turnaround of a
// 4:3 read/write mix). Against torch.optim.AdamW(fused=True) after
// torch.nn.utils.clip_grad_norm_ on the same tensors: >= 1.0x (torch's clip runs one
// foreach norm per dtype group plus a host-side stack and a scaling pass over the grads).
// Measured (results: adamw/solution/multi_tensor/{gpt6_d384,gpt12_d768}): 1996.1 / 2810.3 GB/s = 0.71 / 0.93 of d2d_copy
// ============================================================================
// @end

/// Block b's tensor: the largest i with chunk_start[i] <= b (empty tensors own no chunk,
/// so the largest such i is the one that does); its chunk within the tensor is
/// b - chunk_start[i].
__device__ __forceinline__ int find_tensor(const std::int64_t* chunk_start, int num_tensors, std::int64_t b) {
  // @step multi_tensor
  int lo = 0, hi = num_tensors - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (chunk_start[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
  // @end
}

constexpr int kUnroll = 2;  // float4 of each array in flight per thread

__global__ void __launch_bounds__(m04::kAdamWThreads)
    sum_squares_kernel(const ad::TableEntry* table, const std::int64_t* chunk_start, int num_tensors,
                       float* partials) {
  // @step multi_tensor
  const std::int64_t b = blockIdx.x;
  const int i = find_tensor(chunk_start, num_tensors, b);
  const ad::TableEntry& e = table[i];
  const std::int64_t begin = (b - chunk_start[i]) * m04::kAdamWChunk;
  const std::int64_t len = min(e.n - begin, m04::kAdamWChunk);
  const float* g = e.grads + begin;
  float s = 0.f;
  if (reinterpret_cast<std::uintptr_t>(e.grads) % 16 == 0) {
    const std::int64_t n4 = len / 4;
    for (std::int64_t j = threadIdx.x; j < n4; j += m04::kAdamWThreads) {
      const float4 q = reinterpret_cast<const float4*>(g)[j];
      s += q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w;
    }
    for (std::int64_t j = n4 * 4 + threadIdx.x; j < len; j += m04::kAdamWThreads) s += g[j] * g[j];
  } else {
    for (std::int64_t j = threadIdx.x; j < len; j += m04::kAdamWThreads) s += g[j] * g[j];
  }
  __shared__ float scratch[cc::kWarpSize];
  s = cc::block_all_reduce(s, cc::Sum{}, 0.f, scratch);
  if (threadIdx.x == 0) partials[b] = s;
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
  const std::int64_t b = blockIdx.x;
  const int i = find_tensor(chunk_start, num_tensors, b);
  const ad::TableEntry e = table[i];
  const std::int64_t begin = (b - chunk_start[i]) * m04::kAdamWChunk;
  const std::int64_t len = min(e.n - begin, m04::kAdamWChunk);
  const float scale = scale_ptr != nullptr ? *scale_ptr : 1.f;
  const bool decay = e.decay != 0;
  float* p = e.params + begin;
  const float* g = e.grads + begin;
  float* m = e.m + begin;
  float* v = e.v + begin;
  __nv_bfloat16* bf = e.bf16 != nullptr ? e.bf16 + begin : nullptr;
  std::int64_t scalar_from = 0;
  if (e.vec4) {
    const std::int64_t n4 = len / 4;
    constexpr std::int64_t kStride = m04::kAdamWThreads;
    std::int64_t j = threadIdx.x;
    for (; j + (kUnroll - 1) * kStride < n4; j += kUnroll * kStride) {
      float4 P[kUnroll], G[kUnroll], M[kUnroll], V[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        P[u] = reinterpret_cast<const float4*>(p)[j + u * kStride];
        G[u] = reinterpret_cast<const float4*>(g)[j + u * kStride];
        M[u] = reinterpret_cast<const float4*>(m)[j + u * kStride];
        V[u] = reinterpret_cast<const float4*>(v)[j + u * kStride];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        adamw_update(P[u].x, G[u].x, M[u].x, V[u].x, c, decay, scale);
        adamw_update(P[u].y, G[u].y, M[u].y, V[u].y, c, decay, scale);
        adamw_update(P[u].z, G[u].z, M[u].z, V[u].z, c, decay, scale);
        adamw_update(P[u].w, G[u].w, M[u].w, V[u].w, c, decay, scale);
        const std::int64_t k = j + u * kStride;
        cc::store_global4(p + 4 * k, P[u]);
        cc::store_global4(m + 4 * k, M[u]);
        cc::store_global4(v + 4 * k, V[u]);
        if (bf != nullptr) store_bf16x4(bf + 4 * k, P[u]);
      }
    }
    for (; j < n4; j += kStride) {
      float4 P = reinterpret_cast<const float4*>(p)[j], G = reinterpret_cast<const float4*>(g)[j];
      float4 M = reinterpret_cast<const float4*>(m)[j], V = reinterpret_cast<const float4*>(v)[j];
      adamw_update(P.x, G.x, M.x, V.x, c, decay, scale);
      adamw_update(P.y, G.y, M.y, V.y, c, decay, scale);
      adamw_update(P.z, G.z, M.z, V.z, c, decay, scale);
      adamw_update(P.w, G.w, M.w, V.w, c, decay, scale);
      cc::store_global4(p + 4 * j, P);
      cc::store_global4(m + 4 * j, M);
      cc::store_global4(v + 4 * j, V);
      if (bf != nullptr) store_bf16x4(bf + 4 * j, P);
    }
    scalar_from = n4 * 4;  // the last chunk's 0-3 leftover elements
  }
  for (std::int64_t j = scalar_from + threadIdx.x; j < len; j += m04::kAdamWThreads) {
    float pj = p[j], mj = m[j], vj = v[j];
    adamw_update(pj, g[j], mj, vj, c, decay, scale);
    p[j] = pj;
    m[j] = mj;
    v[j] = vj;
    if (bf != nullptr) bf[j] = __float2bfloat16_rn(pj);
  }
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
  if (wants_norm(a)) {
    if (chunks > 0) {
      sum_squares_kernel<<<static_cast<unsigned>(chunks), m04::kAdamWThreads, 0, a.stream>>>(d_table, d_chunk_start,
                                                                                            nt, partials);
      COURSE_CHECK_LAUNCH("sum_squares_kernel");
    }
    sum_partials_kernel<<<1, 1024, 0, a.stream>>>(partials, chunks, a.max_norm, a.grad_norm, scalars(a));
    COURSE_CHECK_LAUNCH("sum_partials_kernel");
  }
  if (chunks == 0) return;
  const float* scale = a.max_norm > 0.f ? scalars(a) + 1 : nullptr;
  multi_tensor_update_kernel<<<static_cast<unsigned>(chunks), m04::kAdamWThreads, 0, a.stream>>>(
      d_table, d_chunk_start, nt, c, scale);
  COURSE_CHECK_LAUNCH("multi_tensor_update_kernel");
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

}  // namespace course::solution
