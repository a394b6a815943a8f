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
///   4. fused                       register-blocked micro-tiles on a cp.async pipeline (scaffolding given)
///   5. fused_options (ALiBi only)  a per-head linear bias on the scores
/// Run the tests with:   ctest --preset default -L exercise -R Attention
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint attention/<step>`
/// (all of them: exercises/module03_attention/hints/attention.md).

#include "module01/softmax.hpp"
#include "module02/batched_gemm.hpp"
#include "module03/attention.hpp"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/vec.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
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
// Hints, one at a time: bash scripts/course.sh hint attention/row_offset
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
// Hints, one at a time: bash scripts/course.sh hint attention/online_softmax_rescale
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
// Hints, one at a time: bash scripts/course.sh hint attention/naive
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
// Hints, one at a time: bash scripts/course.sh hint attention/tiled_online
//
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
  // Step fused_options (up to d = 128) runs here too: only kTiledHeadDims have a kernel.
  if (a.head_dim > m03::step_support(AttentionStep::tiled_online).max_head_dim)
    throw NotImplemented("attention: your tiled kernel keeps a q row in registers, head_dim <= 64", __FILE__);
  const Params p = make_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cuda::dispatch_value<m03::kTiledHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    launch_tiled_d<decltype(d)::value>(p, bh, causal, a.stream);
  });
}

void launch_tiled(const AttentionArgs& a) {
  if (!kTiledWritten) throw NotImplemented("attention step tiled_online", __FILE__);
  launch_tiled_any(a, false);
}

void launch_causal(const AttentionArgs& a) {
  if (!kTiledWritten || !kCausalWritten) throw NotImplemented("attention step causal", __FILE__);
  launch_tiled_any(a, a.causal);
}

// ----------------------------------------------------------------------------
// Step 4: fused -- the algorithm of steps 2-3, reorganized so that every value read
// from shared memory feeds several FMAs; any head dim up to 128, lse, causal.
// (The lesson: module03_attention/README.md, step 4; the solution's banner in
// solutions/module03_attention/attention_fused.cu has the predictions.)
//
// A block of 128 threads owns 64 query rows and walks the keys in tiles of kBlockKV.
// Each thread computes an 8 x kCols micro-tile of S = Q K^T and an 8 x kOutCols
// micro-tile of O; the 16 threads of a half-warp (same ty) share the same 8 rows.
// Thread map (tx = threadIdx.x % 16, ty = threadIdx.x / 16, 0..7):
//   query rows   tile_row(ty, ii), ii < 8   (ty*4 + {0..3} and 32 + ty*4 + {0..3})
//   score keys   tx + 16*jj, jj < kCols      (16 consecutive K rows per load)
//   out columns  u*16*kVec + tx*kVec + e     (u < kOutChunks, e < kVec)
// Tiles in shared memory: q_tile, k_tile, v_tile row-major with row stride kLd;
// p_tile holds P^T (key-major: p_tile[key * kLdP + row]).
//
// Given: the tile shapes, the cp.async tile loads (zero-filled past the last row), the
// pipeline (K_{t+1} lands while P_t V_t is computed, V_{t+1} while S_{t+1} is), the P^T
// store, and the epilogue (the 16 partial row sums added, O = acc / l, lse = m + log l).
// TODO(step 4a): S = Q K_t^T: s[ii][jj] = q row tile_row(ty, ii) . k row tx + 16*jj,
//                over d in float4 steps (8 + kCols float4 loads feed 8 * kCols * 4 FMAs).
// TODO(step 4b): per row ii: scale the scores, mask them (keys >= N_k; causal: key j >
//                i + p.causal_offset) -- only in tiles that need it --, the row max over
//                the 16 lanes that share the row (cuda::warp_max<kRowLanes>), YOUR
//                online_softmax_rescale on this thread's m[ii], l[ii], then
//                s[ii][jj] = exp(s - m_ref), l[ii] += it, acc[ii][:] *= alpha.
// TODO(step 4c): O += P_t V_t: for every key kk of the tile, this thread's 8 P values
//                (two float4 of p_tile's row kk) times its kOutCols values of V row kk.
// TODO(step 4d): set kFusedWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention/fused
// ----------------------------------------------------------------------------
// TODO(step 4d): set to true once steps 4a-4c are written.
constexpr bool kFusedWritten = false;

namespace fused {

/// Tile shapes of the kernel for head dimension D. (Given.)
template <int D>
struct FusedTile {
  static constexpr int kThreads = 128;
  static constexpr int kBlockQ = 64;
  static constexpr int kBlockKV = D <= 64 ? 64 : 32;  // d > 64: 32-key tiles, two blocks per SM
  static constexpr int kRows = 8;                      // query rows per thread
  static constexpr int kCols = kBlockKV / 16;          // keys per thread in a tile
  static constexpr int kOutCols = D / 16;              // output columns per thread
  static constexpr int kVec = kOutCols % 4 == 0 ? 4 : (kOutCols % 2 == 0 ? 2 : 1);
  static constexpr int kOutChunks = kOutCols / kVec;
  static constexpr int kLd = D + 4;         // padded row stride of the Q, K, V tiles
  static constexpr int kLdP = kBlockQ + 4;  // padded row stride of P^T
  static constexpr int kQFloats = kBlockQ * kLd;
  static constexpr int kKVFloats = kBlockKV * kLd;
  static constexpr int kPFloats = kBlockKV * kLdP;
  static constexpr std::size_t kSmemBytes = static_cast<std::size_t>(kQFloats + 2 * kKVFloats + kPFloats) * sizeof(float);
  static constexpr int kMinBlocks = D <= 64 ? 3 : 2;
  static_assert(kBlockQ == 8 * kRows && kThreads == 16 * (kBlockQ / kRows), "8 row groups of 8 rows, 16 lanes each");
  static_assert(kOutChunks * kVec == kOutCols, "output columns split into chunks");
};

/// Row (within the tile) of a thread's ii-th query row. (Given.)
__device__ __forceinline__ int tile_row(int ty, int ii) { return ii < 4 ? ty * 4 + ii : 32 + ty * 4 + (ii - 4); }

/// Lanes sharing a query row: the 16 of a half-warp. (Given.)
constexpr int kRowLanes = 16;

using ::course::cuda::cp_async_commit;
using ::course::cuda::cp_async_wait;

/// cp.async copies of rows [row0, row0 + kRowsT) of one head into a [kRowsT x D] tile with
/// row stride ld; rows >= valid_rows are zero-filled. (Given.)
template <int D, int kRowsT, int kThreads>
__device__ __forceinline__ void load_tile_async(float* tile, int ld, const float* head, std::int64_t seq_stride,
                                                int row0, int valid_rows) {
  constexpr int kChunksPerRow = D / 4;
  for (int idx = threadIdx.x; idx < kRowsT * kChunksPerRow; idx += kThreads) {
    const int r = idx / kChunksPerRow, c4 = idx % kChunksPerRow;
    const long long row = static_cast<long long>(row0) + r;
    const bool valid = row < valid_rows;
    const float* src = valid ? head + row * seq_stride + c4 * 4 : head;
    ::course::cuda::cp_async_16_zfill<0, ::course::cuda::SrcAddress::generic>(
        ::course::cuda::smem_u32(tile + r * ld + c4 * 4), src, valid ? 16 : 0);
  }
}

/// kVec consecutive floats as one vector load / store (times s): course/cuda/vec.cuh. (Given.)
using ::course::cuda::load_vec;
using ::course::cuda::store_vec;

/// One past the last key any row in [q0, q0 + rows) may see (causal), clamped to [0, N_k]. (Given.)
__device__ __forceinline__ int causal_kv_end(const Params& p, int q0, int rows) {
  const long long last_row = std::min(static_cast<long long>(q0) + rows, static_cast<long long>(p.seq_q)) - 1;
  const long long end = last_row + p.causal_offset + 1;
  return static_cast<int>(end < 0 ? 0 : (end > p.seq_k ? p.seq_k : end));
}

/// (query tile, batch*head pair) of this block; causal: heaviest tiles of all heads first
/// (step 3, hint 3). (Given.)
__device__ __forceinline__ void block_coordinates(bool causal, int& q_tile, int& bh) {
  if (!causal) {
    q_tile = static_cast<int>(blockIdx.x);
    bh = static_cast<int>(blockIdx.y);
    return;
  }
  const long long linear = static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  q_tile = static_cast<int>(gridDim.x - 1 - linear / gridDim.y);
  bh = static_cast<int>(linear % gridDim.y);
}

template <int D, bool kCausal>
__global__ void __launch_bounds__(FusedTile<D>::kThreads, FusedTile<D>::kMinBlocks)
    fused_attention_kernel(const Params p) {
  using T = FusedTile<D>;
  constexpr int kRows = T::kRows, kCols = T::kCols, kVec = T::kVec;
  constexpr int kOutCols = T::kOutCols, kOutChunks = T::kOutChunks;
  constexpr int kLd = T::kLd, kLdP = T::kLdP, kBlockQ = T::kBlockQ, kBlockKV = T::kBlockKV;

  extern __shared__ __align__(16) unsigned char smem[];
  float* q_tile = reinterpret_cast<float*>(smem);
  float* k_tile = q_tile + T::kQFloats;
  float* v_tile = k_tile + T::kKVFloats;
  float* p_tile = v_tile + T::kKVFloats;  // P^T: [key][row]

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int q_block, bh;
  block_coordinates(kCausal, q_block, bh);
  const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
  const int q0 = q_block * kBlockQ;
  const float* q_head = p.q + row_offset(p.qs, b, h, 0);
  const float* k_head = p.k + row_offset(p.ks, b, hk, 0);
  const float* v_head = p.v + row_offset(p.vs, b, hk, 0);

  const int kv_end = kCausal ? causal_kv_end(p, q0, kBlockQ) : p.seq_k;
  const int num_tiles = (kv_end + kBlockKV - 1) / kBlockKV;

  float acc[kRows][kOutCols];
  float m[kRows], l[kRows];  // l: this thread's partial row sums
#pragma unroll
  for (int ii = 0; ii < kRows; ++ii) {
    m[ii] = -INFINITY;
    l[ii] = 0.f;
#pragma unroll
    for (int c = 0; c < kOutCols; ++c) acc[ii][c] = 0.f;
  }

  if (num_tiles > 0) {
    // Prologue: groups [Q + K_0], [V_0].
    load_tile_async<D, kBlockQ, T::kThreads>(q_tile, kLd, q_head, p.qs.seq, q0, p.seq_q);
    load_tile_async<D, kBlockKV, T::kThreads>(k_tile, kLd, k_head, p.ks.seq, 0, p.seq_k);
    cp_async_commit();
    load_tile_async<D, kBlockKV, T::kThreads>(v_tile, kLd, v_head, p.vs.seq, 0, p.seq_k);
    cp_async_commit();

    for (int t = 0; t < num_tiles; ++t) {
      const int kv0 = t * kBlockKV;
      cp_async_wait<1>();  // everything but the newest group (V_t) has landed: Q, K_t
      __syncthreads();

      float s[kRows][kCols];
#pragma unroll
      for (int ii = 0; ii < kRows; ++ii)
#pragma unroll
        for (int jj = 0; jj < kCols; ++jj) s[ii][jj] = 0.f;
      // TODO(step 4a): S = Q K_t^T into s, from q_tile and k_tile.

      __syncthreads();  // all reads of k_tile are done: prefetch K_{t+1} into it
      if (t + 1 < num_tiles)
        load_tile_async<D, kBlockKV, T::kThreads>(k_tile, kLd, k_head, p.ks.seq, kv0 + kBlockKV, p.seq_k);
      cp_async_commit();  // (possibly empty) group K_{t+1}

      // TODO(step 4b): scale, mask, online softmax per row; s[ii][jj] becomes p.

      // P^T into shared memory (given): key-major, the thread's two groups of 4 rows as float4.
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        float* prow = p_tile + (tx + 16 * jj) * kLdP;
        *reinterpret_cast<float4*>(prow + ty * 4) = make_float4(s[0][jj], s[1][jj], s[2][jj], s[3][jj]);
        *reinterpret_cast<float4*>(prow + 32 + ty * 4) = make_float4(s[4][jj], s[5][jj], s[6][jj], s[7][jj]);
      }
      cp_async_wait<1>();  // V_t has landed (K_{t+1} may still be in flight)
      __syncthreads();     // ... for every thread, and P_t is complete

      // TODO(step 4c): O += P_t V_t into acc, from p_tile and v_tile.

      __syncthreads();  // all reads of v_tile and p_tile are done: prefetch V_{t+1}
      if (t + 1 < num_tiles)
        load_tile_async<D, kBlockKV, T::kThreads>(v_tile, kLd, v_head, p.vs.seq, kv0 + kBlockKV, p.seq_k);
      cp_async_commit();  // (possibly empty) group V_{t+1}
    }
    cp_async_wait<0>();
  }

  // Epilogue (given): O = acc / l, lse = m + log l (rows past N_q are not stored).
#pragma unroll
  for (int ii = 0; ii < kRows; ++ii) {
    const float l_row = ::course::cuda::warp_sum<kRowLanes>(l[ii]);
    const long long i = static_cast<long long>(q0) + tile_row(ty, ii);
    if (i < p.seq_q) {
      const float inv = l_row > 0.f ? 1.f / l_row : 0.f;  // a row that sees no key: O = 0
      float* o_row = p.o + row_offset(p.os, b, h, i);
#pragma unroll
      for (int u = 0; u < kOutChunks; ++u) store_vec<kVec>(o_row + u * 16 * kVec + tx * kVec, &acc[ii][u * kVec], inv);
      if (p.lse != nullptr && tx == 0)
        p.lse[static_cast<long long>(bh) * p.seq_q + i] = l_row > 0.f ? m[ii] + logf(l_row) : -INFINITY;
    }
  }
}

template <int D, bool kCausal>
void launch_cfg(const Params& p, std::int64_t batch_heads, cudaStream_t stream) {
  using T = FusedTile<D>;
  constexpr auto kernel = fused_attention_kernel<D, kCausal>;
  ::course::cuda::opt_in_dynamic_smem<kernel>(static_cast<int>(T::kSmemBytes));
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + T::kBlockQ - 1) / T::kBlockQ),
                  static_cast<unsigned>(batch_heads));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  COURSE_CHECK_LAUNCH("fused_attention_kernel");
}

template <int D>
void launch_d(const Params& p, std::int64_t batch_heads, bool causal, cudaStream_t stream) {
  if (causal) launch_cfg<D, true>(p, batch_heads, stream);
  else launch_cfg<D, false>(p, batch_heads, stream);
}

}  // namespace fused

void launch_fused(const AttentionArgs& a) {
  if (!kFusedWritten || !kOnlineUpdateWritten) throw NotImplemented("attention step fused", __FILE__);
  const Params p = make_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cuda::dispatch_value<m03::kHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    fused::launch_d<decltype(d)::value>(p, bh, a.causal, a.stream);
  });
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
    default: break;  // bf16 steps: validate_attention_args rejected them (attention_tc.cu runs them)
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
