/// @file attention_backward.cu
/// @brief YOUR attention-backward ladder (module 4), fp32.
///
/// Read module04_training/README.md (the lesson: the softmax Jacobian, why D = rowsum(dO * O)
/// replaces it, the chain through attention) and include/module04/attention_backward.hpp
/// (the formulas, strides, the causal convention, grouped-query heads) first. Then, in order:
///   0. row_dot_kernel        D_i = dO_i . O_i for every query row (and dQ = 0 for flash);
///                            both flash steps start with it
///   1. naive                 recompute_p_kernel + the pipeline of GEMMs and softmax backward
///   2. flash                 the per-tile math of the K/V-parallel kernel, dQ by atomics
///   3. flash_deterministic   the query-parallel dQ pass (no atomics)
/// (Steps 1-3 are kAttentionBackwardSteps of module04/attention_backward.hpp.)
/// The kernels here may be simpler than the solution's (a thread per key row, a thread per
/// query row): they must be correct, not fast. Measure them against the solution afterwards.
/// Run the tests with:   ctest --preset default -L exercise -R AttentionBackward
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint attention_backward/<step>`
/// (all of them: exercises/module04_training/hints/attention_backward.md).

#include "course/cuda/launch.cuh"
#include "module02/batched_gemm.hpp"
#include "module03/attention_indexing.cuh"
#include "module04/attention_backward.hpp"
#include "module04/softmax_backward.hpp"

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
// r = (b*H + h)*N_q + i, written to p.d_row[r]; when zero_dq, also dQ row r = 0 (step flash
// adds into dQ with atomics, so it must start from zero; the launch is already there).
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
//     dQ_i += scale * dS * k_j                    many key threads add into the same dQ_i:
//                                                 atomicAdd (step flash only: kAtomicDq)
// flash_deterministic runs the same kernel with kAtomicDq = false and computes dQ in its
// own pass.
// TODO(flash): write the per-row math marked below; then set kFlashWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention_backward/flash
// ----------------------------------------------------------------------------
constexpr bool kFlashWritten = false;  // TODO(flash): true once the per-row math is written

constexpr int kKvRows = 32;  // keys per block = threads per block
constexpr int kQRows = 16;   // query rows per shared-memory tile

template <int D, bool kAtomicDq>
__global__ void __launch_bounds__(kKvRows) flash_kv_kernel(const Params p) {
  __shared__ float q_tile[kQRows][D];
  __shared__ float do_tile[kQRows][D];
  __shared__ float lse_tile[kQRows];
  __shared__ float d_tile[kQRows];

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
    }
  }

  // Causal: row i sees key j0 (the block's first) only from i = j0 - causal_offset on.
  const int q_begin = p.causal ? std::max(0, std::min(p.seq_q, j0 - p.causal_offset)) : 0;
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
      __syncthreads();
      if (!active) continue;  // no return: the other threads still need this one at __syncthreads
      for (int r = 0; r < kQRows; ++r) {
        const int i = q0 + r;
        // TODO(flash): the per-row math (see above): s, P, dv +=, dP, dS, dk +=, and the
        // dQ atomics when kAtomicDq. Skip the row when key j is hidden from it.
        (void)i;
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
// Step 3: flash_deterministic -- dQ without atomics. The K/V kernel above runs with
// kAtomicDq = false (dK, dV only); then this kernel, one thread per query row i (grid:
// x = tiles of kDqRows rows, y = (batch, head)), walks the keys in shared-memory tiles of
// kDqKeys and sums dQ_i = scale * sum_j dS_ij k_j in a fixed order: the same bits every run.
// It recomputes s, P, dP and dS for every (i, j) -- that recomputation is the price of
// determinism, which the lesson measures.
// TODO(flash_deterministic): write the per-key math marked below; then set kDqPassWritten
// to true.
// Hints, one at a time: bash scripts/course.sh hint attention_backward/flash_deterministic
// ----------------------------------------------------------------------------
constexpr bool kDqPassWritten = false;  // TODO(flash_deterministic): true once written

constexpr int kDqRows = 64;  // query rows per block = threads per block
constexpr int kDqKeys = 16;  // keys per shared-memory tile

template <int D>
__global__ void __launch_bounds__(kDqRows) flash_dq_kernel(const Params p) {
  __shared__ float k_tile[kDqKeys][D];
  __shared__ float v_tile[kDqKeys][D];

  const int bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
  const int q0 = blockIdx.x * kDqRows;
  const int i = q0 + threadIdx.x;  // this thread's query row
  const bool active = i < p.seq_q;

  float q_row[D], do_row[D], dq[D];
  {
    const float* qr = p.q + row_offset(p.qs, b, h, active ? i : 0);
    const float* gr = p.dout + row_offset(p.dos, b, h, active ? i : 0);
#pragma unroll
    for (int c = 0; c < D; ++c) {
      q_row[c] = active ? qr[c] : 0.f;
      do_row[c] = active ? gr[c] : 0.f;
      dq[c] = 0.f;
    }
  }
  const float lse = active ? p.lse[static_cast<long long>(bh) * p.seq_q + i] : -INFINITY;
  const float d_i = active ? p.d_row[static_cast<long long>(bh) * p.seq_q + i] : 0.f;

  // Causal: the block's last row sees keys up to last + causal_offset; none past that.
  const int last = std::min(p.seq_q - 1, q0 + kDqRows - 1);
  const int kv_end = p.causal ? std::max(0, std::min(p.seq_k, last + p.causal_offset + 1)) : p.seq_k;
  for (int kv0 = 0; kv0 < kv_end; kv0 += kDqKeys) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kDqKeys * D; idx += kDqRows) {
      const int t = idx / D, c = idx % D, j = kv0 + t;
      const bool in = j < p.seq_k;
      k_tile[t][c] = in ? p.k[row_offset(p.ks, b, hk, j) + c] : 0.f;
      v_tile[t][c] = in ? p.v[row_offset(p.vs, b, hk, j) + c] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int t = 0; t < kDqKeys; ++t) {
      const int j = kv0 + t;
      // TODO(flash_deterministic): the per-key math (see above): skip hidden keys, then s, P,
      // dP, dS and dq += dS * k_tile[t].
      (void)j;
      (void)lse;
      (void)d_i;
    }
  }

  if (!active) return;
  float* dq_out = p.dq + row_offset(p.dqs, b, h, i);
#pragma unroll
  for (int c = 0; c < D; ++c) dq_out[c] = p.scale * dq[c];
}

// ----------------------------------------------------------------------------
// The launches of flash and flash_deterministic (given).
// ----------------------------------------------------------------------------
template <int D>
void launch_flash_d(const Params& p, const AttentionBackwardArgs& a, bool deterministic) {
  const dim3 kv_grid(static_cast<unsigned>((a.seq_k + kKvRows - 1) / kKvRows),
                     static_cast<unsigned>(a.batch * a.kv_heads));
  if (deterministic) {
    flash_kv_kernel<D, false><<<kv_grid, kKvRows, 0, a.stream>>>(p);
    COURSE_CHECK_LAUNCH("flash_kv_kernel");
    const dim3 q_grid(static_cast<unsigned>((a.seq_q + kDqRows - 1) / kDqRows),
                      static_cast<unsigned>(a.batch * a.heads));
    flash_dq_kernel<D><<<q_grid, kDqRows, 0, a.stream>>>(p);
    COURSE_CHECK_LAUNCH("flash_dq_kernel");
  } else {
    flash_kv_kernel<D, true><<<kv_grid, kKvRows, 0, a.stream>>>(p);
    COURSE_CHECK_LAUNCH("flash_kv_kernel");
  }
}

void launch_flash(const AttentionBackwardArgs& a, bool deterministic) {
  if (!kFlashWritten) throw NotImplemented("attention_backward step flash (flash_kv_kernel, step 3)", __FILE__);
  if (deterministic && !kDqPassWritten)
    throw NotImplemented("attention_backward step flash_deterministic (flash_dq_kernel, step 4)", __FILE__);
  const Params p = make_params(a);
  // D (and dQ = 0 when dQ is accumulated with atomics), then the K/V pass (and the dQ pass).
  launch_row_dot(p, a.batch * a.heads * a.seq_q, /*zero_dq=*/!deterministic, a.stream);
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
