/// @file attention_backward.cu
/// @brief YOUR attention-backward ladder (module 4), fp32.
///
/// Read module04_training/README.md (the lesson: the softmax Jacobian, why D = rowsum(dO * O)
/// replaces it, the chain through attention) and include/module04/attention_backward.hpp
/// (the formulas, strides, the causal convention, grouped-query heads) first. Then, in order:
///   0. row_dot_kernel        D_i = dO_i . O_i for every query row (and dQ = 0 for the flash
///                            steps); both flash steps start with it
///   1. naive                 recompute_p_kernel + the pipeline of GEMMs and softmax backward
///   2. flash                 the per-tile math of the K/V-parallel kernel, dQ by atomics
///   3. flash_deterministic   dQ added in a fixed order: the K/V blocks take turns per query
///                            tile (wait_dq_turn, pass_dq_turn) and sum their share in a fixed
///                            order (add_dq_tile)
/// (Steps 1-3 are kAttentionBackwardSteps of module04/attention_backward.hpp.)
/// The kernels here may be simpler than the solution's (a thread per key row, a thread per
/// query row): they must be correct, not fast. Measure them against the solution afterwards.
/// Run the tests with:   ctest --preset default -L exercise -R AttentionBackward
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint attention_backward/<step>`
/// (all of them: exercises/module04_training/hints/attention_backward.md).

#include "course/cuda/launch.cuh"
#include "course/error.hpp"
#include "module02/batched_gemm.hpp"
#include "module03/attention_indexing.cuh"
#include "module04/attention_backward.hpp"
#include "module04/softmax_backward.hpp"

#include <cuda/atomic>  // ::cuda::atomic_ref, for the dQ turns of flash_deterministic
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace course::exercise {
namespace {

using m03::AttentionStrides;
using m04::AttentionBackwardArgs;
using m04::AttentionBackwardStep;

/// Element offset of row n of head h of batch b (given: module 3's row_offset).
using m03::row_offset;

/// Everything a kernel needs, by value (given).
struct Params {
  const float* q;
  const float* k;
  const float* v;
  const float* o;
  const float* dout;
  const float* lse;  ///< [B*H*N_q], the forward's logsumexp (-inf: the row sees no key)
  float* dq;
  float* dk;
  float* dv;
  float* d_row;  ///< [B*H*N_q], D_i = dO_i . O_i (the workspace of the flash steps)
  int* dq_turns;  ///< flash_deterministic: [B*H, q_tiles] turn counters (the workspace, after D)
  int q_tiles;    ///< ceil(N_q / kTurnRows): query tiles of 64 rows per head
  AttentionStrides qs, ks, vs, os, dos, dqs, dks, dvs;
  int heads, kv_heads, group, seq_q, seq_k, head_dim;
  int causal_offset;  ///< N_k - N_q: query i sees key j iff j <= i + causal_offset
  bool causal;
  float scale;
};

Params make_params(const AttentionBackwardArgs& a) {
  Params p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.o = a.o;
  p.dout = a.dout;
  p.lse = a.lse;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.d_row = a.workspace;
  p.dq_turns = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(a.workspace) +
                                      m04::flash_backward_turns_offset(a.batch, a.heads, a.seq_q));
  p.q_tiles = static_cast<int>((a.seq_q + m04::kFlashBackwardQTile - 1) / m04::kFlashBackwardQTile);
  p.qs = a.q_strides;
  p.ks = a.k_strides;
  p.vs = a.v_strides;
  p.os = a.o_strides;
  p.dos = a.do_strides;
  p.dqs = a.dq_strides;
  p.dks = a.dk_strides;
  p.dvs = a.dv_strides;
  p.heads = static_cast<int>(a.heads);
  p.kv_heads = static_cast<int>(a.kv_heads);
  p.group = static_cast<int>(a.heads / a.kv_heads);
  p.seq_q = static_cast<int>(a.seq_q);
  p.seq_k = static_cast<int>(a.seq_k);
  p.head_dim = static_cast<int>(a.head_dim);
  p.causal_offset = static_cast<int>(a.seq_k - a.seq_q);
  p.causal = a.causal;
  p.scale = m04::effective_scale(a);
  return p;
}

unsigned grid_stride_blocks(long long work, int threads) {
  const long long blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::max(1LL, std::min(blocks, 1LL << 20)));
}

// ----------------------------------------------------------------------------
// Step 0: row_dot_kernel, the preprocessing.  D_i = sum_c dO_ic * O_ic  for every query row
// r = (b*H + h)*N_q + i, written to p.d_row[r]; when zero_dq, also dQ row r = 0 (both flash
// steps add into dQ, so it must start from zero; the launch is already there).
// This dot product of length d replaces sum_j P_ij dP_ij, one of length N_k: see the lesson.
// TODO(row_dot): write the kernel body; then set kRowDotWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention_backward/row_dot
// (The solution gives each row a group of lanes with float4 loads and a shuffle reduction.)
// ----------------------------------------------------------------------------
constexpr bool kRowDotWritten = false;  // TODO(row_dot): true once row_dot_kernel is written

__global__ void row_dot_kernel(const Params p, long long rows, bool zero_dq) {
  // TODO(row_dot)
  (void)p;
  (void)rows;
  (void)zero_dq;
}

void launch_row_dot(const Params& p, long long rows, bool zero_dq, cudaStream_t stream) {
  if (!kRowDotWritten) throw NotImplemented("attention_backward: row_dot_kernel (step 0, the preprocessing)", __FILE__);
  constexpr int kThreads = 256;
  row_dot_kernel<<<grid_stride_blocks(rows, kThreads), kThreads, 0, stream>>>(p, rows, zero_dq);
  COURSE_CHECK_LAUNCH("row_dot_kernel");
}

// ----------------------------------------------------------------------------
// Step 1: naive -- S, P and dP materialized. The workspace holds two [B, H, N_q, N_k]
// matrices, W1 = a.workspace and W2 = W1 + B*H*N_q*N_k (strides H*N_q*N_k, N_q*N_k, N_k):
//   W1 = scale * Q K^T       course::solution::batched_gemm_strided(BgemmStep::warp_tiled, ...),
//                            b_transposed = true, alpha = scale
//   W1 = P = exp(W1 - lse)   recompute_p_kernel (below), in place, 0 where masked
//   dV = P^T dO              GEMM with a_transposed = true (P is stored N_q x N_k)
//   W2 = dP = dO V^T         GEMM, b_transposed = true
//   W2 = dS = P * (dP - D)   course::solution::softmax_backward(SoftmaxBackwardStep::fused_vectorized,
//                            ...) with y = W1, dy = dx = W2 (in place), rows = B*H*N_q, cols = N_k
//   dQ = scale * dS K        GEMM, alpha = scale
//   dK = scale * dS^T Q      GEMM, a_transposed = true, alpha = scale
// Why does the softmax backward give dS? It computes D_i = sum_j P_ij dP_ij itself, and
// sum_j P_ij (dO_i . V_j) = dO_i . O_i: the same D as row_dot_kernel's.
// TODO(naive): write recompute_p_kernel and launch_naive.
// Hints, one at a time: bash scripts/course.sh hint attention_backward/naive
// ----------------------------------------------------------------------------
__global__ void recompute_p_kernel(float* s, const float* lse, long long rows, int seq_q, int seq_k, bool causal) {
  // TODO(naive)
  (void)s;
  (void)lse;
  (void)rows;
  (void)seq_q;
  (void)seq_k;
  (void)causal;
}

m02::StridedBatchedGemmArgs<float> gemm(const AttentionBackwardArgs& a, std::int64_t M, std::int64_t N,
                                        std::int64_t K, const float* A, const AttentionStrides& as, const float* Bm,
                                        const AttentionStrides& bs, float* C, const AttentionStrides& cs) {
  m02::StridedBatchedGemmArgs<float> g;
  g.a = A;
  g.b = Bm;
  g.c = C;
  g.M = M;
  g.N = N;
  g.K = K;
  g.batch = a.batch;
  g.num_heads = a.heads;
  g.stride_a_batch = as.batch;
  g.stride_a_head = as.head;
  g.stride_a_row = as.seq;
  g.stride_b_batch = bs.batch;
  g.stride_b_head = bs.head;
  g.stride_b_row = bs.seq;
  g.stride_c_batch = cs.batch;
  g.stride_c_head = cs.head;
  g.stride_c_row = cs.seq;
  g.stream = a.stream;
  return g;
}

void launch_naive(const AttentionBackwardArgs& a) {
  // TODO(naive): delete the throw, then launch the pipeline above (gemm() fills in the
  // sizes and strides of one batched GEMM; set b_transposed, a_transposed and alpha yourself).
  (void)a;
  throw NotImplemented("attention_backward step naive", __FILE__);
}

// ----------------------------------------------------------------------------
// Step 2: flash -- never store S or P. Grid: x = tiles of kKvRows keys, y = (batch, kv head).
// One thread per key j keeps k_j, v_j and its accumulators dK_j, dV_j (float[D] each) in
// registers (or local memory, for large D: correct, not fast). The block walks the query
// rows of every query head that reads its kv head, kQRows at a time; the scaffolding loads
// each query tile (Q, dO, lse, D) into shared memory. Per query row i of the tile, the
// thread of key j recomputes
//     s    = scale * q_i . k_j                    P = exp(s - lse_i)   (0 if j is hidden)
//     dV_j += P * dO_i
//     dP   = dO_i . v_j                           dS = P * (dP - D_i)
//     dK_j += dS * q_i                            (times scale once, at the store)
//     ds_tile[r][threadIdx.x] = dS                (flash_deterministic adds dQ from it)
//     dQ_i += scale * dS * k_j                    many key threads add into the same dQ_i:
//                                                 atomicAdd (step flash only: kAtomicDq)
// flash_deterministic runs the same kernel with kAtomicDq = false and adds dQ in its turn
// (step 3 below).
// TODO(flash): write the per-row math marked below; then set kFlashWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention_backward/flash
// ----------------------------------------------------------------------------
constexpr bool kFlashWritten = false;  // TODO(flash): true once the per-row math is written

constexpr int kKvRows = 32;  // keys per block = threads per block
constexpr int kQRows = 16;   // query rows per shared-memory tile
constexpr int kTurnRows = m04::kFlashBackwardQTile;  // query rows per dQ turn (64: 4 tiles)

// ----------------------------------------------------------------------------
// Step 3: flash_deterministic -- dQ added in a FIXED order, without recomputing anything.
// With atomics, the K/V blocks of a head add into dQ_i in whatever order they get there,
// and float addition is not associative: the last bits change run to run. Here each
// (batch, head, query tile of kTurnRows rows) has a turn counter in the workspace (p.dq_turns,
// zeroed before the kernel): K/V block j (blockIdx.x) waits until the counter reads j, adds
// its share of dQ for the tile's rows, and sets it to j + 1. Within the block the share is
// summed in a fixed order too: add_dq_tile gives each thread whole dQ elements and sums the
// block's 32 keys in key order, from ds_tile and k_tile in shared memory.
// Why no deadlock: block (j, head) only waits for block (j - 1, head), whose linear block
// index is lower, so it was started before (blocks start in index order) and is running or
// done; it visits the same query tiles in the same order (the loop below starts every block
// at a multiple of kTurnRows, so a turn tile is always visited from its first row on).
// The block holds the turn from its first sub-tile's additions to its last one's: simple,
// if slower than the solution's, which computes a whole 64-row tile before its turn.
// TODO(flash_deterministic): write wait_dq_turn, add_dq_tile and pass_dq_turn; then set
// kDqTurnsWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention_backward/flash_deterministic
// ----------------------------------------------------------------------------
constexpr bool kDqTurnsWritten = false;  // TODO(flash_deterministic): true once written

/// Returns (in every thread of the block) once *turn == kv_block. Contains __syncthreads().
__device__ void wait_dq_turn(int* turn, int kv_block) {
  // TODO(flash_deterministic): one thread polls *turn (acquire) until it reads kv_block;
  // then every thread waits at a barrier.
  (void)turn;
  (void)kv_block;
}

/// Hands the turn to kv_block + 1 once every thread's additions are issued. Contains
/// __syncthreads().
__device__ void pass_dq_turn(int* turn, int kv_block) {
  // TODO(flash_deterministic): a barrier, then one thread stores kv_block + 1 (release).
  (void)turn;
  (void)kv_block;
}

/// dQ_i += scale * sum_t ds_tile[r][t] * k_tile[t] for the rows i = q0 + r < N_q of the tile,
/// the keys t = 0 .. kKvRows - 1 in this order: the block's share of dQ, in its turn.
template <int D>
__device__ void add_dq_tile(const Params& p, const float (&ds_tile)[kQRows][kKvRows], const float (&k_tile)[kKvRows][D],
                            int b, int h, int q0) {
  // TODO(flash_deterministic): split the kQRows x D elements over the block's threads; each
  // sums its element over the keys in order and adds it to dQ.
  (void)p;
  (void)ds_tile;
  (void)k_tile;
  (void)b;
  (void)h;
  (void)q0;
}

template <int D, bool kAtomicDq>
__global__ void __launch_bounds__(kKvRows) flash_kv_kernel(const Params p) {
  __shared__ float q_tile[kQRows][D];
  __shared__ float do_tile[kQRows][D];
  __shared__ float lse_tile[kQRows];
  __shared__ float d_tile[kQRows];
  __shared__ float ds_tile[kQRows][kKvRows];  // dS of the tile's rows x the block's keys
  __shared__ float k_tile[kKvRows][D];        // flash_deterministic: the block's keys

  const int bhk = blockIdx.y, b = bhk / p.kv_heads, hk = bhk % p.kv_heads;
  const int j0 = blockIdx.x * kKvRows;
  const int j = j0 + threadIdx.x;  // this thread's key
  const bool active = j < p.seq_k;

  float k_row[D], v_row[D], dk[D], dv[D];
  {
    const float* kr = p.k + row_offset(p.ks, b, hk, active ? j : 0);
    const float* vr = p.v + row_offset(p.vs, b, hk, active ? j : 0);
#pragma unroll
    for (int c = 0; c < D; ++c) {
      k_row[c] = active ? kr[c] : 0.f;
      v_row[c] = active ? vr[c] : 0.f;
      dk[c] = 0.f;
      dv[c] = 0.f;
      if (!kAtomicDq) k_tile[threadIdx.x][c] = k_row[c];  // read after the loop's first barrier
    }
  }

  // Causal: row i sees key j0 (the block's first) only from i = j0 - causal_offset on; the
  // loop starts at the turn tile (kTurnRows rows) holding that row. Rows before it are
  // hidden from every key of the block (the per-row math skips them).
  const int q_first = p.causal ? std::max(0, std::min(p.seq_q, j0 - p.causal_offset)) : 0;
  const int q_begin = q_first / kTurnRows * kTurnRows;
  for (int h = hk * p.group; h < (hk + 1) * p.group; ++h) {
    const long long bh = static_cast<long long>(b) * p.heads + h;
    for (int q0 = q_begin; q0 < p.seq_q; q0 += kQRows) {
      __syncthreads();  // everyone is done with the previous tile
      for (int idx = threadIdx.x; idx < kQRows * D; idx += kKvRows) {
        const int r = idx / D, c = idx % D, i = q0 + r;
        const bool in = i < p.seq_q;
        q_tile[r][c] = in ? p.q[row_offset(p.qs, b, h, i) + c] : 0.f;
        do_tile[r][c] = in ? p.dout[row_offset(p.dos, b, h, i) + c] : 0.f;
      }
      for (int r = threadIdx.x; r < kQRows; r += kKvRows) {
        const int i = q0 + r;
        lse_tile[r] = i < p.seq_q ? p.lse[bh * p.seq_q + i] : -INFINITY;
        d_tile[r] = i < p.seq_q ? p.d_row[bh * p.seq_q + i] : 0.f;
      }
      for (int r = 0; r < kQRows; ++r) ds_tile[r][threadIdx.x] = 0.f;  // hidden keys add 0
      __syncthreads();
      if (active) {  // no `continue`: every thread must reach the barriers of the dQ turn
        for (int r = 0; r < kQRows; ++r) {
          const int i = q0 + r;
          // TODO(flash): the per-row math (see above): s, P, dv +=, dP, dS, dk +=,
          // ds_tile[r][threadIdx.x] = dS, and the dQ atomics when kAtomicDq. Skip the row
          // when key j is hidden from it.
          (void)i;
        }
      }
      if (!kAtomicDq) {
        // The block's share of dQ for these kQRows rows, in its turn: the turn of the query
        // tile (kTurnRows rows) is taken at its first sub-tile and passed after its last.
        int* turn = p.dq_turns + bh * p.q_tiles + q0 / kTurnRows;
        const bool first_rows = q0 % kTurnRows == 0;
        const bool last_rows = (q0 + kQRows) % kTurnRows == 0 || q0 + kQRows >= p.seq_q;
        __syncthreads();  // ds_tile (and, the first time, k_tile) complete
        if (first_rows) wait_dq_turn(turn, static_cast<int>(blockIdx.x));
        add_dq_tile<D>(p, ds_tile, k_tile, b, h, q0);
        if (last_rows) pass_dq_turn(turn, static_cast<int>(blockIdx.x));
      }
    }
  }

  if (!active) return;
  float* dk_out = p.dk + row_offset(p.dks, b, hk, j);
  float* dv_out = p.dv + row_offset(p.dvs, b, hk, j);
#pragma unroll
  for (int c = 0; c < D; ++c) {
    dk_out[c] = p.scale * dk[c];
    dv_out[c] = dv[c];
  }
}

// ----------------------------------------------------------------------------
// The launches of flash and flash_deterministic (given).
// ----------------------------------------------------------------------------
template <int D>
void launch_flash_d(const Params& p, const AttentionBackwardArgs& a, bool deterministic) {
  const dim3 kv_grid(static_cast<unsigned>((a.seq_k + kKvRows - 1) / kKvRows),
                     static_cast<unsigned>(a.batch * a.kv_heads));
  if (deterministic) flash_kv_kernel<D, false><<<kv_grid, kKvRows, 0, a.stream>>>(p);
  else flash_kv_kernel<D, true><<<kv_grid, kKvRows, 0, a.stream>>>(p);
  COURSE_CHECK_LAUNCH("flash_kv_kernel");
}

void launch_flash(const AttentionBackwardArgs& a, bool deterministic) {
  if (!kFlashWritten) throw NotImplemented("attention_backward step flash (flash_kv_kernel, step 3)", __FILE__);
  if (deterministic && !kDqTurnsWritten)
    throw NotImplemented("attention_backward step flash_deterministic (wait_dq_turn, add_dq_tile, pass_dq_turn, step 4)",
                         __FILE__);
  const Params p = make_params(a);
  // D and dQ = 0 (both steps add into dQ), the turn counters = 0 (flash_deterministic), then
  // the K/V pass.
  launch_row_dot(p, a.batch * a.heads * a.seq_q, /*zero_dq=*/true, a.stream);
  if (deterministic)
    COURSE_CUDA_CHECK(cudaMemsetAsync(p.dq_turns, 0, static_cast<std::size_t>(a.batch * a.heads) * p.q_tiles * sizeof(int),
                                      a.stream));
  cuda::dispatch_value<m03::kHeadDims>(a.head_dim, "head_dim",
                                      [&](auto d) { launch_flash_d<decltype(d)::value>(p, a, deterministic); });
}

}  // namespace

void attention_backward(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgs& args) {
  m04::validate_attention_backward_args(args, step, "attention_backward");
  switch (step) {
    case AttentionBackwardStep::naive: return launch_naive(args);
    case AttentionBackwardStep::flash: return launch_flash(args, false);
    case AttentionBackwardStep::flash_deterministic: return launch_flash(args, true);
    default: return;  // the tensor-core steps take AttentionBackwardArgsBf16 (validation rejected them)
  }
}

void attention_backward_row_dot(const m04::AttentionBackwardArgs& args, float* d) {
  m04::validate_attention_backward_args(args, AttentionBackwardStep::flash, "attention_backward_row_dot");
  require_not_null(d, "attention_backward_row_dot", "d");
  require_aligned(d, alignof(float), "attention_backward_row_dot", "d");
  Params p = make_params(args);
  p.d_row = d;
  launch_row_dot(p, args.batch * args.heads * args.seq_q, /*zero_dq=*/false, args.stream);
  COURSE_CUDA_CHECK(cudaStreamSynchronize(args.stream));
}

}  // namespace course::exercise
