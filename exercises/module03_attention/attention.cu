/// @file attention.cu
/// @brief YOUR attention ladder (module 3), fp32: steps naive, tiled_online, causal,
/// fused_options and the dispatcher.
///
/// Read module03_attention/README.md (the lesson) and include/module03/attention.hpp (the
/// API: strides, the causal convention, the options) first. Then, in this order:
///   0. row_offset                  the stride arithmetic every kernel uses    (attention_device.cuh)
///   1. naive                       compose module 2's GEMM and module 1's softmax
///   2a. online_softmax_rescale     the online-softmax update, tested on its own (attention_device.cuh)
///   2b. tiled_online_kernel        one kernel, K/V tiles in shared memory
///   3. causal                      mask only the diagonal tiles, skip the rest
///   4. fused                       register-blocked micro-tiles on a cp.async pipeline
///                                  (attention_fused.cu; scaffolding given)
///   5. fused_options (ALiBi only)  a per-head linear bias on the scores, in your tiled kernel
/// What you write lies between `// @step <name>` and `// @end` lines; the rest is given.
/// Run the tests with:   ctest --preset default -L exercise -R Attention
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint attention/<step>`
/// (all of them: exercises/module03_attention/hints/attention.md).

#include "attention_device.cuh"

#include "course/cuda/launch.cuh"
#include "module01/softmax.hpp"
#include "module02/batched_gemm.hpp"
#include "module03/attention.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::exercise {
namespace {

using m03::AttentionArgs;
using m03::AttentionStep;
using m03::AttentionStrides;
using namespace attn;

unsigned grid_stride_blocks(long long work, int threads) {
  const long long blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::max(1LL, std::min(blocks, 1LL << 20)));
}

// @step naive
// ----------------------------------------------------------------------------
// Step 1: naive -- S materialized in args.workspace as [B, H, N_q, N_k] (contiguous).
//   S = scale * Q K^T   : course::solution::batched_gemm_strided(BgemmStep::register_blocked, ...)
//                         with b_transposed = true and alpha = scale
//   causal              : S[r, j] = -inf for j > i + N_k - N_q   (causal_mask_kernel below)
//   P = softmax(S)      : course::solution::softmax(SoftmaxStep::online_vectorized, ...),
//                         rows = B*H*N_q, cols = N_k, dim = 1, in place (y == x)
//   O = P V             : batched_gemm_strided again, b_transposed = false, C = O
//   causal, N_q > N_k   : the first N_q - N_k rows see no key; softmax made them NaN,
//                         so set those rows of O to 0 (zero_dead_rows_kernel below).
// TODO(step 1): write the two small kernels and launch_naive.
// Hints, one at a time: bash scripts/course.sh hint attention/naive
// ----------------------------------------------------------------------------
__global__ void causal_mask_kernel(float* s, long long rows, int seq_q, int seq_k, int causal_offset) {
  // TODO(step 1)
}

/// O[b, h, i, :] = 0 for the first n_dead query rows (those that see no key); total is
/// the element count B*H*n_dead*d.
__global__ void zero_dead_rows_kernel(float* o, AttentionStrides os, int heads, long long n_dead, int d,
                                      long long total) {
  // TODO(step 1): one thread per element of the B*H*n_dead dead rows (grid-stride); use row_offset().
}
// @end

void launch_naive(const AttentionArgs& a) {
  // @step naive
  // TODO(step 1): delete the throw, then launch the pipeline above. grid_stride_blocks()
  // (above) sizes a grid-stride launch.
  (void)a;
  (void)grid_stride_blocks;
  throw NotImplemented("attention step naive", __FILE__);
  // @end
}

// @step tiled_online
// ----------------------------------------------------------------------------
// Step 2b: tiled_online -- one kernel; S and P never leave the chip.
// Grid: x = query tiles of kTiledRows rows, y = (batch, head) pairs (b = y / H, h = y % H).
// One thread per query row: it keeps its q row (times the scale), its output accumulator
// (both float4[D/4]) and its running m, l in registers. The block walks the keys in tiles
// of kTiledKV: copy the K and V tile to shared memory, then per thread
//     s_j = q . k_j                          for the kTiledKV keys of the tile
//     alpha = online_softmax_rescale(m, l, max_j s_j)
//     acc = acc * alpha;  then for each j: p = exp(s_j - m), l += p, acc += p * v_j
// and at the end O = acc / l, lse = m + log(l) (if p.lse is not null).
// TODO(step 2b): write the kernel body (kCausal = false); then set kTiledWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention/tiled_online
// ----------------------------------------------------------------------------
// @end
constexpr int kTiledRows = 128;  // threads per block = query rows per block
constexpr int kTiledKV = 32;     // keys per shared-memory tile

// @step causal
// ----------------------------------------------------------------------------
// Step 3: causal (kCausal = true). Query i sees key j iff j <= i + p.causal_offset.
// TODO(step 3): skip the tiles no row of the block can see, mask only where needed;
//               then set kCausalWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention/causal
//
// Step 5 (ALiBi only): if p.alibi, add  slope_h * (j - (i + causal_offset))  to each scaled
// score before masking, with slope_h = 2^(-8 (h + 1) / H).
// TODO(step 5): add the bias; then set kAlibiWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention/fused_options
// ----------------------------------------------------------------------------
// TODO(step 2b / 3 / 5): set each flag to true once its part of the kernel is written.
constexpr bool kTiledWritten = false;
constexpr bool kCausalWritten = false;
constexpr bool kAlibiWritten = false;
// @end
template <int D, bool kCausal>
__global__ void __launch_bounds__(kTiledRows) tiled_online_kernel(const Params p) {
  constexpr int kC4 = D / 4;  // float4 chunks per row
  __shared__ float4 k_tile[kTiledKV][kC4];
  __shared__ float4 v_tile[kTiledKV][kC4];
  // @step tiled_online  (the whole kernel body: steps tiled_online, causal and fused_options)
  // TODO(step 2b), TODO(step 3), TODO(step 5)
  // @end
}

template <int D>
void launch_tiled_d(const Params& p, std::int64_t batch_heads, bool causal, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + kTiledRows - 1) / kTiledRows),
                  static_cast<unsigned>(batch_heads));
  if (causal) tiled_online_kernel<D, true><<<grid, kTiledRows, 0, stream>>>(p);
  else tiled_online_kernel<D, false><<<grid, kTiledRows, 0, stream>>>(p);
  COURSE_CHECK_LAUNCH("tiled_online_kernel");
}

void launch_tiled(const AttentionArgs& a, bool causal) {
  const Params p = make_params(a);
  const std::int64_t bh = a.batch * a.heads;
  // A thread keeps a whole q row in registers: only the small head dims (kTiledHeadDims).
  cuda::dispatch_value<m03::kTiledHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    launch_tiled_d<decltype(d)::value>(p, bh, causal, a.stream);
  });
}
// @step tiled_online  (entry points of tiled_online, causal, fused_options: each runs once its flags are set)

void launch_tiled_online(const AttentionArgs& a) {
  if (!kTiledWritten) throw NotImplemented("attention step tiled_online", __FILE__);
  launch_tiled(a, false);
}

void launch_causal(const AttentionArgs& a) {
  if (!kTiledWritten || !kCausalWritten) throw NotImplemented("attention step causal", __FILE__);
  launch_tiled(a, a.causal);
}

void launch_fused_options(const AttentionArgs& a) {
  if (a.rope || a.kv_heads != a.heads)
    throw NotImplemented("attention step fused_options: only ALiBi is an exercise (RoPE and grouped-query "
                         "attention are in solutions/module03_attention/attention_fused.cu)",
                         __FILE__);
  // Your tiled kernel serves this step (d <= 64) once kAlibiWritten (and, for causal
  // cases, kCausalWritten) is true.
  if (!kTiledWritten || !kAlibiWritten || (a.causal && !kCausalWritten))
    throw NotImplemented("attention step fused_options (ALiBi on your tiled kernel)", __FILE__);
  if (a.head_dim > m03::step_support(AttentionStep::tiled_online).max_head_dim)
    throw NotImplemented("attention: your tiled kernel keeps a q row in registers, head_dim <= 64", __FILE__);
  launch_tiled(a, a.causal);
}
// @end

// ============================================================================
// The online update on its own, for the unit tests: one thread folds num_blocks blocks
// of scores (each with one value per score) into (m, l, acc) exactly as the kernels do.
// ============================================================================
__global__ void online_update_test_kernel(const float* scores, const float* values, int block_len, int num_blocks,
                                          float* out) {
  float m = -INFINITY, l = 0.f, acc = 0.f;
  for (int blk = 0; blk < num_blocks; ++blk) {
    const float* s = scores + static_cast<long long>(blk) * block_len;
    const float* v = values + static_cast<long long>(blk) * block_len;
    float block_max = -INFINITY;
    for (int j = 0; j < block_len; ++j) block_max = fmaxf(block_max, s[j]);
    acc *= online_softmax_rescale(m, l, block_max);
    const float m_ref = exp_reference(m);
    for (int j = 0; j < block_len; ++j) {
      const float pj = __expf(s[j] - m_ref);
      l += pj;
      acc = fmaf(pj, v[j], acc);
    }
  }
  out[0] = m;
  out[1] = l;
  out[2] = l > 0.f ? acc / l : 0.f;
}

}  // namespace

void attention(m03::AttentionStep step, const m03::AttentionArgs& args) {
  m03::validate_attention_args(args, step, "attention");
  switch (step) {
    case AttentionStep::naive: return launch_naive(args);
    // @step fused_options  (the exercise runs ALiBi on its tiled kernel)
    case AttentionStep::tiled_online: return launch_tiled_online(args);
    case AttentionStep::causal: return launch_causal(args);
    case AttentionStep::fused: return attn::launch_fused(args);
    case AttentionStep::fused_options: return launch_fused_options(args);
    // @end
    default: break;  // bf16 steps: validate_attention_args rejected them (attention_tc.cu runs them)
  }
}

std::int64_t attention_row_offset(const m03::AttentionStrides& s, std::int64_t b, std::int64_t h, std::int64_t n) {
  // @step row_offset
  const std::int64_t off = row_offset(s, b, h, n);  // yours: attention_device.cuh
  if (off < 0) throw NotImplemented("attention: row_offset (step 0)", kDeviceFile);
  return off;
  // @end
}

void online_softmax_update_test(const m03::OnlineUpdateTestArgs& args) {
  m03::validate_online_update_test_args(args, "online_softmax_update_test");
  // @step online_softmax_rescale  (the exercise checks that the update is written)
  if (!kOnlineUpdateWritten)
    throw NotImplemented("attention: online_softmax_rescale (step 2a)", kDeviceFile);
  // @end
  online_update_test_kernel<<<1, 1, 0, args.stream>>>(args.scores, args.values, args.block_len, args.num_blocks,
                                                      args.out);
  COURSE_CHECK_LAUNCH("online_update_test_kernel");
  COURSE_CUDA_CHECK(cudaStreamSynchronize(args.stream));
}

}  // namespace course::exercise
