/// @file attention.cu
/// @brief YOUR attention ladder (module 3), fp32.
///
/// Read module03_attention/README.md (the lesson) and include/module03/attention.hpp (the
/// API: strides, the causal convention, the options) first. Then, in this order:
///   0. row_offset                  the stride arithmetic every kernel uses
///   1. naive                       compose module 2's GEMM and module 1's softmax
///   2a. online_softmax_rescale     the online-softmax update, tested on its own
///   2b. tiled_online_kernel        one kernel, K/V tiles in shared memory
///   3. causal                      mask only the diagonal tiles, skip the rest
///   5. fused_options (ALiBi only)  a per-head linear bias on the scores
/// Step 4 (fused) is not an exercise: read solutions/module03_attention/attention_fused.cu.
/// Run the tests with:   ctest --preset default -L exercise -R Attention
/// A step you have not written throws NotImplemented and its tests show SKIPPED.

#include "module01/softmax.hpp"
#include "module02/batched_gemm.hpp"
#include "module03/attention.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace course::exercise {
namespace {

using m03::AttentionArgs;
using m03::AttentionStep;
using m03::AttentionStrides;

// ----------------------------------------------------------------------------
// Step 0: the stride arithmetic.
// Element (b, h, n, c) of a tensor with strides s lives at  b*s.batch + h*s.head + n*s.seq + c.
// TODO(step 0): return the offset of row n of head h of batch b (the c = 0 element).
// Hint 1: one multiply-add per index; the same formula serves [B,H,N,d] and [B,N,H,d]:
//         only the strides differ (see attention_strides() in the header).
// Hint 2: do it in 64-bit: 16 batches x 32 heads x 32768 rows x 128 floats = 2^31 already.
// Hint 3: return b * s.batch + h * s.head + n * s.seq;   (all std::int64_t)
// Until written it returns -1, which attention_row_offset() reports as NotImplemented.
// ----------------------------------------------------------------------------
__host__ __device__ __forceinline__ std::int64_t row_offset(const AttentionStrides& s, std::int64_t b, std::int64_t h,
                                                            std::int64_t n) {
  // TODO(step 0)
  (void)s;
  (void)b;
  (void)h;
  (void)n;
  return -1;
}

// ----------------------------------------------------------------------------
// Step 2a: the online-softmax update of ONE row for one new block of scores whose max is
// block_max. (m, l) is the running max and running sum of exp(s - m); the caller scales
// its accumulator by the returned factor alpha, then adds exp(s_j - m) (new m) to l and
// exp(s_j - m) * v_j to the accumulator.
// TODO(step 2a): update m and l, return alpha.
// Hint 1: when the max grows, every term already in l was computed against the OLD max
//         and must be multiplied by exp(m_old - m_new).
// Hint 2: the order is everything: m_new = max(m, block_max); alpha = exp(m - m_new);
//         l *= alpha; and only THEN m = m_new. Assigning the max first multiplies by
//         exp(m_new - m_new) = 1, so l is never rescaled: try blocks [0] then [10] by hand.
// Hint 3: a row that has seen only masked scores has m = -inf; if m_new is -inf too,
//         exp(-inf - (-inf)) is NaN: return 1 in that case. (__expf is the fast exp.)
// ----------------------------------------------------------------------------
// TODO(step 2a): set to true once online_softmax_rescale is written.
constexpr bool kOnlineUpdateWritten = false;

__device__ __forceinline__ float online_softmax_rescale(float& m, float& l, float block_max) {
  // TODO(step 2a)
  (void)m;
  (void)l;
  (void)block_max;
  return 1.f;
}

/// The max to subtract in exp(s - m): m, or 0 while the row has seen only -inf (given).
__device__ __forceinline__ float exp_reference(float m) { return m == -INFINITY ? 0.f : m; }

/// Runs your update over the blocks in one thread (given; the tests call it).
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

/// Everything a kernel needs, by value (given).
struct Params {
  const float* q;
  const float* k;
  const float* v;
  float* o;
  float* lse;  ///< may be null
  AttentionStrides qs, ks, vs, os;
  int heads, group, seq_q, seq_k;
  int causal_offset;  ///< N_k - N_q: query i sees key j iff j <= i + causal_offset
  float scale;
  bool alibi;
};

Params make_params(const AttentionArgs& a) {
  Params p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.lse = a.lse;
  p.qs = a.q_strides;
  p.ks = a.k_strides;
  p.vs = a.v_strides;
  p.os = a.o_strides;
  p.heads = static_cast<int>(a.heads);
  p.group = static_cast<int>(a.heads / a.kv_heads);
  p.seq_q = static_cast<int>(a.seq_q);
  p.seq_k = static_cast<int>(a.seq_k);
  p.causal_offset = static_cast<int>(a.seq_k - a.seq_q);
  p.scale = m03::effective_scale(a);
  p.alibi = a.alibi;
  return p;
}

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
// Hint 1: module 2's StridedBatchedGemmArgs takes a batch stride, a head stride and a row
//         stride per operand: for Q they are q_strides.batch/.head/.seq; for S they are
//         H*N_q*N_k, N_q*N_k and N_k. Sizes: M = N_q, N = N_k, K = d for Q*K^T;
//         M = N_q, N = d, K = N_k for P*V.
// Hint 2: causal_mask_kernel: one block per score row r (grid-stride over rows), i = r % N_q;
//         its threads stride over j from max(0, i + N_k - N_q + 1) to N_k.
// Hint 3: m01::contiguous_softmax_args(s, s, rows, N_k, 1, a.stream) builds the softmax
//         arguments; every call goes on a.stream, so no synchronization is needed between them.
// ----------------------------------------------------------------------------
__global__ void causal_mask_kernel(float* s, long long rows, int seq_q, int seq_k, int causal_offset) {
  // TODO(step 1)
}

__global__ void zero_dead_rows_kernel(float* o, AttentionStrides os, int heads, long long n_dead, int d) {
  // TODO(step 1): one thread per element of the B*H*n_dead dead rows; use row_offset().
}

void launch_naive(const AttentionArgs& a) {
  // TODO(step 1): delete the throw, then launch the pipeline above.
  (void)a;
  throw NotImplemented("attention step naive", __FILE__);
}

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
// Hint 1: K/V head: kv head hk = h / p.group; the head's first row is
//         p.k + row_offset(p.ks, b, hk, 0); row j is j * p.ks.seq floats further.
// Hint 2: two __syncthreads() per tile: one before overwriting the tile (others may still
//         read the previous one), one after filling it. Threads whose query row is
//         >= N_q must still take part in both: no early return before the end.
//         Keys >= N_k: store zeros in the tile (garbage V could be NaN, and NaN*0 = NaN)
//         and give their scores -INFINITY.
// Hint 3: compute all kTiledKV scores in a float s[kTiledKV] with the loop over d OUTSIDE
//         and the loop over keys inside (#pragma unroll both): 32 independent sums instead
//         of one long dependency chain. A row with l == 0 saw no key: O = 0, lse = -inf.
//
// Step 3: causal (kCausal = true). Query i sees key j iff j <= i + p.causal_offset.
// TODO(step 3): skip the tiles no row of the block can see, mask only where needed;
//               then set kCausalWritten to true.
// Hint 1: the block's LAST row sees the most keys: loop kv0 only up to
//         min(N_k, last_row + causal_offset + 1) (and not at all if that is <= 0).
// Hint 2: a tile whose last key is <= q0 + causal_offset (the FIRST row's limit) needs no
//         mask; only the others (and the tail tile) test each key.
// Hint 3: launch the heaviest tiles first. Blocks start roughly in the order
//         L = blockIdx.y * gridDim.x + blockIdx.x; take q_tile = gridDim.x - 1 - L / gridDim.y
//         and pair = L % gridDim.y: the last q tiles of ALL heads then start first.
//
// Step 5 (ALiBi only): if p.alibi, add  slope_h * (j - (i + causal_offset))  to each scaled
// score before masking, with slope_h = 2^(-8 (h + 1) / H).
// TODO(step 5): add the bias; then set kAlibiWritten to true.
// Hint 1: compute the slope once per block (exp2f or exp2); h is the QUERY head.
// Hint 2: the bias is a float of (long long)j - i - causal_offset: mind the sign.
// Hint 3: lse must include the bias too: it is added to s before the max.
// ----------------------------------------------------------------------------
constexpr int kTiledRows = 128;
constexpr int kTiledKV = 32;

// TODO(step 2b / 3 / 5): set each flag to true once its part of the kernel is written.
constexpr bool kTiledWritten = false;
constexpr bool kCausalWritten = false;
constexpr bool kAlibiWritten = false;

template <int D, bool kCausal>
__global__ void __launch_bounds__(kTiledRows) tiled_online_kernel(const Params p) {
  constexpr int kC4 = D / 4;
  __shared__ float4 k_tile[kTiledKV][kC4];
  __shared__ float4 v_tile[kTiledKV][kC4];
  // TODO(step 2b), TODO(step 3), TODO(step 5)
}

template <int D>
void launch_tiled_d(const Params& p, std::int64_t batch_heads, bool causal, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + kTiledRows - 1) / kTiledRows),
                  static_cast<unsigned>(batch_heads));
  if (causal) tiled_online_kernel<D, true><<<grid, kTiledRows, 0, stream>>>(p);
  else tiled_online_kernel<D, false><<<grid, kTiledRows, 0, stream>>>(p);
  COURSE_CHECK_LAUNCH("tiled_online_kernel");
}

void launch_tiled_any(const AttentionArgs& a, bool causal) {
  const Params p = make_params(a);
  const std::int64_t bh = a.batch * a.heads;
  switch (a.head_dim) {
    case 16: return launch_tiled_d<16>(p, bh, causal, a.stream);
    case 32: return launch_tiled_d<32>(p, bh, causal, a.stream);
    case 64: return launch_tiled_d<64>(p, bh, causal, a.stream);
  }
  throw NotImplemented("attention: your tiled kernel keeps a q row in registers, head_dim <= 64", __FILE__);
}

void launch_tiled(const AttentionArgs& a) {
  if (!kTiledWritten) throw NotImplemented("attention step tiled_online", __FILE__);
  launch_tiled_any(a, false);
}

void launch_causal(const AttentionArgs& a) {
  if (!kTiledWritten || !kCausalWritten) throw NotImplemented("attention step causal", __FILE__);
  launch_tiled_any(a, a.causal);
}

void launch_fused(const AttentionArgs&) {
  throw NotImplemented(
      "attention step fused (not an exercise: read solutions/module03_attention/attention_fused.cu, "
      "then write your own register-blocked kernel here if you like)",
      __FILE__);
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
  launch_tiled_any(a, a.causal);
}

}  // namespace

void attention(m03::AttentionStep step, const m03::AttentionArgs& args) {
  m03::validate_attention_args(args, step, "attention");
  switch (step) {
    case AttentionStep::naive: return launch_naive(args);
    case AttentionStep::tiled_online: return launch_tiled(args);
    case AttentionStep::causal: return launch_causal(args);
    case AttentionStep::fused: return launch_fused(args);
    case AttentionStep::fused_options: return launch_fused_options(args);
  }
}

std::int64_t attention_row_offset(const m03::AttentionStrides& s, std::int64_t b, std::int64_t h, std::int64_t n) {
  const std::int64_t off = row_offset(s, b, h, n);
  if (off < 0) throw NotImplemented("attention: row_offset (step 0)", __FILE__);
  return off;
}

void online_softmax_update_test(const m03::OnlineUpdateTestArgs& args) {
  m03::validate_online_update_test_args(args, "online_softmax_update_test");
  if (!kOnlineUpdateWritten) throw NotImplemented("attention: online_softmax_rescale (step 2a)", __FILE__);
  online_update_test_kernel<<<1, 1, 0, args.stream>>>(args.scores, args.values, args.block_len, args.num_blocks,
                                                      args.out);
  COURSE_CHECK_LAUNCH("online_update_test_kernel");
  COURSE_CUDA_CHECK(cudaStreamSynchronize(args.stream));
}

}  // namespace course::exercise
