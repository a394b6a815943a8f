/// @file attention.cu
/// @brief The attention ladder (fp32): naive, tiled_online, causal and their dispatcher.
///
/// The ladder (kAttentionSteps in module03/attention.hpp):
///   1. naive                  S = scale Q K^T materialized (module 2's GEMM), module 1's softmax, O = P V
///   2. tiled_online           one kernel: K/V tiles in shared memory, online softmax in registers, S never stored
///   3. causal                 tiled_online with the mask only on diagonal tiles; tiles past the diagonal skipped
///   4. fused                  (attention_fused.cu) 8x4 register micro-tiles, P through shared memory, cp.async K/V
///   5. fused_options          (attention_fused.cu) fused plus RoPE, ALiBi and grouped-query K/V heads
///   6. tc_mma                 (attention_tc.cu) bf16; mma.sync + ldmatrix, S and P staged in shared memory
///   7. tc_swizzled_pipelined  (attention_tc.cu) XOR-swizzled tiles, 2-stage cp.async K/V ring
///   8. tc_register_softmax    (attention_tc_flash.cu) online softmax on the S accumulators
///   9. tc_flash2              (attention_tc_flash.cu) FlashAttention-2's tile shapes
///   10. tc_wgmma              (attention_tc_hopper.cu, sm_90a) both products on warpgroup MMA
///   11. tc_warp_specialized   (attention_tc_hopper.cu, sm_90a) TMA loads, an mbarrier K/V ring, producer and
///                              consumer warpgroups
/// The bf16 steps, tc_mma to tc_warp_specialized, have their own dispatcher in attention_tc.cu.
///
/// Predictions are for an H100 SXM (132 SMs, fp32 FMA peak ~67 TFLOP/s, ~3 TB/s HBM) on
/// the benchmark shape B*H = 64 (B = 4, H = 16), N_q = N_k = N = 4096, d = 64, where
/// attention is 4*B*H*N^2*d = 275 GFLOP (FlashAttention convention) and S would be
/// B*H*N^2*4 bytes = 4.3 GB.

#include "attention_device.cuh"

#include "course/cuda/launch.cuh"
#include "module01/softmax.hpp"
#include "module02/batched_gemm.hpp"
#include "module03/attention.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::solution {
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
// ============================================================================
// Step 1: naive -- S materialized, three library calls and two small kernels.
//
//   S = scale * Q K^T      module 2's batched GEMM (register_blocked), written to the
//                          workspace as [B, H, N_q, N_k]; the scale rides on alpha.
//   causal: S[.., i, j] = -inf for j > i + N_k - N_q          (causal_mask_kernel)
//   P = softmax(S)          module 1's online_vectorized softmax, rows = B*H*N_q, in place
//   O = P V                 module 2's batched GEMM again, O written through its strides
//   causal with N_q > N_k: rows with no visible key came out NaN (0/0); zero them.
//
// Nothing new to write except the glue: the lesson of this step is its cost. S has
// B*H*N_q*N_k floats: 4.3 GB at the benchmark shape, 17 GB at N = 8192 -- O(N^2) memory.
// Bytes: GEMM 1 writes S (4.3 GB), the softmax reads and writes it (8.6 GB), GEMM 2 reads
// it (4.3 GB): ~17 GB, ~5.7 ms of HBM traffic at 3 TB/s, on top of two GEMMs of 137 GFLOP
// each (~4 ms each at module 2's ~35 TFLOP/s; the Q*K^T one with K = 64 is partly bound by
// writing S). Masking does not remove work here: every score is still computed and stored.
// Prediction: ~13-15 ms, ~20 TFLOP/s; causal no faster (slightly slower: one more pass).
// Measured (results: attn_f32/solution/naive/B4_H16_N4096_d64): 26.0 TFLOP/s = 0.84 of cublas_materialized
// (the library row: the same pipeline with cuBLAS's GEMMs), in 4.56 GB of device memory.
// Causal is no faster (causal TFLOP/s count half the FLOPs):
// Measured (results: attn_f32/solution/naive/B4_H16_N4096_d64_causal): 12.3 TFLOP/s
// At N = 8192 the scores alone take 17 GB. (H200 HBM: ~4.8 TB/s, hence faster than the
// H100 prediction.)
// ============================================================================

/// S[r, j] = -inf for each key j the row's query may not see (row r = (b*H + h)*N_q + i).
__global__ void causal_mask_kernel(float* s, long long rows, int seq_q, int seq_k, int causal_offset) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long i = r % seq_q;
    const long long first_hidden = std::max(0LL, i + causal_offset + 1);
    float* row = s + r * seq_k;
    for (long long j = first_hidden + threadIdx.x; j < seq_k; j += blockDim.x) row[j] = -INFINITY;
  }
}

/// O[b, h, i, :] = 0 for the first n_dead query rows (those that see no key).
__global__ void zero_dead_rows_kernel(float* o, AttentionStrides os, int heads, long long n_dead, int d,
                                      long long total) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const long long c = e % d, t = e / d;
    const long long i = t % n_dead, bh = t / n_dead;
    o[row_offset(os, bh / heads, bh % heads, i) + c] = 0.f;
  }
}
// @end

void launch_naive(const AttentionArgs& a) {
  // @step naive
  float* s = a.workspace;
  const std::int64_t B = a.batch, H = a.heads, Nq = a.seq_q, Nk = a.seq_k, d = a.head_dim;

  m02::StridedBatchedGemmArgs<float> qk;  // S[b,h] (N_q x N_k) = scale * Q[b,h] * K[b,h]^T
  qk.a = a.q;
  qk.b = a.k;
  qk.c = s;
  qk.M = Nq;
  qk.N = Nk;
  qk.K = d;
  qk.batch = B;
  qk.num_heads = H;
  qk.stride_a_batch = a.q_strides.batch;
  qk.stride_a_head = a.q_strides.head;
  qk.stride_a_row = a.q_strides.seq;
  qk.stride_b_batch = a.k_strides.batch;
  qk.stride_b_head = a.k_strides.head;
  qk.stride_b_row = a.k_strides.seq;
  qk.stride_c_batch = H * Nq * Nk;
  qk.stride_c_head = Nq * Nk;
  qk.stride_c_row = Nk;
  qk.b_transposed = true;
  qk.alpha = m03::effective_scale(a);
  qk.stream = a.stream;
  batched_gemm_strided(m02::BgemmStep::register_blocked, qk);

  const long long rows = B * H * Nq;
  const int causal_offset = static_cast<int>(Nk - Nq);
  if (a.causal) {
    causal_mask_kernel<<<grid_stride_blocks(rows, 1), 256, 0, a.stream>>>(s, rows, static_cast<int>(Nq),
                                                                          static_cast<int>(Nk), causal_offset);
    COURSE_CHECK_LAUNCH("causal_mask_kernel");
  }

  m01::SoftmaxArgs sm = m01::contiguous_softmax_args(s, s, rows, Nk, /*dim=*/1, a.stream);  // in place
  softmax(m01::SoftmaxStep::online_vectorized, sm);

  m02::StridedBatchedGemmArgs<float> pv;  // O[b,h] (N_q x d) = P[b,h] (N_q x N_k) * V[b,h] (N_k x d)
  pv.a = s;
  pv.b = a.v;
  pv.c = a.o;
  pv.M = Nq;
  pv.N = d;
  pv.K = Nk;
  pv.batch = B;
  pv.num_heads = H;
  pv.stride_a_batch = H * Nq * Nk;
  pv.stride_a_head = Nq * Nk;
  pv.stride_a_row = Nk;
  pv.stride_b_batch = a.v_strides.batch;
  pv.stride_b_head = a.v_strides.head;
  pv.stride_b_row = a.v_strides.seq;
  pv.stride_c_batch = a.o_strides.batch;
  pv.stride_c_head = a.o_strides.head;
  pv.stride_c_row = a.o_strides.seq;
  pv.b_transposed = false;
  pv.alpha = 1.f;
  pv.stream = a.stream;
  batched_gemm_strided(m02::BgemmStep::register_blocked, pv);

  const long long n_dead = a.causal ? std::max<long long>(0, Nq - Nk) : 0;
  if (n_dead > 0) {
    const long long total = B * H * n_dead * d;
    zero_dead_rows_kernel<<<grid_stride_blocks(total, 256), 256, 0, a.stream>>>(a.o, a.o_strides, static_cast<int>(H),
                                                                                n_dead, static_cast<int>(d), total);
    COURSE_CHECK_LAUNCH("zero_dead_rows_kernel");
  }
  // @end
}

// @step tiled_online
// ============================================================================
// Step 2: tiled_online -- one kernel, S and P never leave the chip.
//
// Grid: x = query tiles of kTiledRows rows, y = (batch, head) pairs (b = y / H, h = y % H).
// gridDim.y is limited to 65535, hence validate's B*H <= 65535; the tile count, which
// grows with N, goes on x (limit 2^31 - 1). x varies fastest in launch order, so the
// blocks running together share one head's K and V in L2.
//
// A block owns kTiledRows = 128 query rows, one thread per row. The thread keeps its q row
// (pre-multiplied by the scale) and its output accumulator in registers (2d floats:
// hence d <= 64 for this step), plus the running max m and sum l. The block walks the
// keys in tiles of kTiledKV = 32: all threads copy the K and V tile into shared memory,
// then each thread
//     s_j = q . k_j for the 32 keys (every thread reads the same k_j: a broadcast)
//     alpha = online_softmax_rescale(m, l, max_j s_j)     -- old max, THEN new max
//     acc = acc * alpha + sum_j exp(s_j - m) v_j,  l += sum_j exp(s_j - m)
// and at the end O = acc / l, lse = m + log(l).
// What changes from naive: no workspace (O(N) memory), one launch, K and V read from
// L2 once per block of 128 queries instead of S round-tripping through HBM.
// Cost model: per key and thread, 16 broadcast float4 loads for 64 FMAs in q.k and as
// many for p*v: one shared load per 4 FMAs, so the load/store pipe, not the FMA pipe,
// sets the pace. ~180 registers per thread leaves ~8 warps per SM.
// Prediction: ~15-25 TFLOP/s (11-18 ms), similar to naive but in O(N) memory.
// Measured (results: attn_f32/solution/tiled_online/B4_H16_N4096_d64): 27.2 TFLOP/s = 0.88 of cublas_materialized
// already, in 0.27 GB (17x less than naive). 252 registers/thread -> 2 blocks (8 warps)
// per SM; __launch_bounds__(128, 3) (<= 170 registers, 3 blocks) made it slower (19.3
// TFLOP/s in a development run).
// ============================================================================
// @end
constexpr int kTiledRows = 128;  // threads per block = query rows per block
constexpr int kTiledKV = 32;     // keys per shared-memory tile

// @step causal
// ============================================================================
// Step 3: causal -- the same kernel with kCausal = true.
//
// Query i sees key j iff j <= i + off (off = N_k - N_q). For the block's rows
// [q0, q0 + 128):
//   - a tile whose first key is beyond the LAST row's limit is never loaded: the loop
//     stops at causal_kv_end() (about half the tiles at N_q = N_k);
//   - a tile entirely within the FIRST row's limit needs no mask at all;
//   - only the diagonal tiles in between (and the tail tile past N_k) test j per score.
// The blocks are launched heaviest first, across all heads (block_coordinates()): the
// last rows see the most keys, and starting them first keeps the final wave short.
// Prediction: ~1.8-1.9x faster than tiled_online at N = 4096 (ideal 1 / (0.5 + 128/(2N)) = 1.94).
// Measured (results: attn_f32/solution/causal/B4_H16_N4096_d64_causal): 25.3 TFLOP/s, counting
// half the FLOPs, against tiled_online's (results: attn_f32/solution/tiled_online/B4_H16_N4096_d64): 27.2 TFLOP/s:
// 2 x 25.3 / 27.2 = 1.86x faster than tiled_online (ideal 1.94).
// A first version reversed the tiles only WITHIN each head and reached just 1.28x: the
// heavy tiles of the last heads started late and ran nearly alone at the end, which the
// ordering across all heads (block_coordinates) fixed.
// ============================================================================
// @end
template <int D, bool kCausal>
__global__ void __launch_bounds__(kTiledRows) tiled_online_kernel(const Params p) {
  constexpr int kC4 = D / 4;  // float4 chunks per row
  __shared__ float4 k_tile[kTiledKV][kC4];
  __shared__ float4 v_tile[kTiledKV][kC4];
  // @step tiled_online  (the whole kernel body: steps tiled_online and causal)

  int q_tile, bh;
  block_coordinates(kCausal, q_tile, bh);
  const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
  const int q0 = q_tile * kTiledRows;
  const int i = q0 + threadIdx.x;  // this thread's query row
  const bool active = i < p.seq_q;
  const float* k_head = p.k + row_offset(p.ks, b, hk, 0);
  const float* v_head = p.v + row_offset(p.vs, b, hk, 0);

  float4 q[kC4];
  {
    const float4* q_row = reinterpret_cast<const float4*>(p.q + row_offset(p.qs, b, h, active ? i : 0));
#pragma unroll
    for (int c = 0; c < kC4; ++c) {
      const float4 x = active ? q_row[c] : make_float4(0.f, 0.f, 0.f, 0.f);
      q[c] = make_float4(x.x * p.scale, x.y * p.scale, x.z * p.scale, x.w * p.scale);
    }
  }
  float4 acc[kC4];
#pragma unroll
  for (int c = 0; c < kC4; ++c) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  float m = -INFINITY, l = 0.f;

  const int kv_end = kCausal ? causal_kv_end(p, q0, kTiledRows) : p.seq_k;
  for (int kv0 = 0; kv0 < kv_end; kv0 += kTiledKV) {
    __syncthreads();  // everyone is done with the previous tile
    for (int idx = threadIdx.x; idx < kTiledKV * kC4; idx += kTiledRows) {
      const int r = idx / kC4, c = idx % kC4, j = kv0 + r;
      const bool in = j < p.seq_k;  // past the end: zeros (a V row of garbage could be NaN, and NaN * 0 = NaN)
      k_tile[r][c] = in ? reinterpret_cast<const float4*>(k_head + j * p.ks.seq)[c] : make_float4(0.f, 0.f, 0.f, 0.f);
      v_tile[r][c] = in ? reinterpret_cast<const float4*>(v_head + j * p.vs.seq)[c] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();

    float s[kTiledKV];
#pragma unroll
    for (int j = 0; j < kTiledKV; ++j) s[j] = 0.f;
#pragma unroll
    for (int c = 0; c < kC4; ++c) {
#pragma unroll
      for (int j = 0; j < kTiledKV; ++j) {  // 32 independent dot products: no dependency chain
        const float4 kk = k_tile[j][c];
        s[j] = fmaf(q[c].x, kk.x, fmaf(q[c].y, kk.y, fmaf(q[c].z, kk.z, fmaf(q[c].w, kk.w, s[j]))));
      }
    }

    const bool need_mask = static_cast<long long>(kv0) + kTiledKV > p.seq_k ||
                           (kCausal && static_cast<long long>(kv0) + kTiledKV - 1 > static_cast<long long>(q0) + p.causal_offset);
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTiledKV; ++j) {
      if (need_mask) {
        const int key = kv0 + j;
        if (key >= p.seq_k || (kCausal && static_cast<long long>(key) > static_cast<long long>(i) + p.causal_offset))
          s[j] = -INFINITY;
      }
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float alpha = online_softmax_rescale(m, l, tile_max);
    const float m_ref = exp_reference(m);
#pragma unroll
    for (int c = 0; c < kC4; ++c) {
      acc[c].x *= alpha;
      acc[c].y *= alpha;
      acc[c].z *= alpha;
      acc[c].w *= alpha;
    }
#pragma unroll
    for (int j = 0; j < kTiledKV; ++j) {
      const float pj = __expf(s[j] - m_ref);
      l += pj;
#pragma unroll
      for (int c = 0; c < kC4; ++c) {
        const float4 vv = v_tile[j][c];
        acc[c].x = fmaf(pj, vv.x, acc[c].x);
        acc[c].y = fmaf(pj, vv.y, acc[c].y);
        acc[c].z = fmaf(pj, vv.z, acc[c].z);
        acc[c].w = fmaf(pj, vv.w, acc[c].w);
      }
    }
  }

  if (!active) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // l == 0: the row sees no key, O = 0
  float4* o_row = reinterpret_cast<float4*>(p.o + row_offset(p.os, b, h, i));
#pragma unroll
  for (int c = 0; c < kC4; ++c) o_row[c] = make_float4(acc[c].x * inv, acc[c].y * inv, acc[c].z * inv, acc[c].w * inv);
  if (p.lse != nullptr) p.lse[static_cast<long long>(bh) * p.seq_q + i] = l > 0.f ? m + logf(l) : -INFINITY;
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
// @step tiled_online  (the exercise's entry points of steps tiled_online, causal, fused_options)
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
    case AttentionStep::tiled_online: return launch_tiled(args, false);
    case AttentionStep::causal: return launch_tiled(args, args.causal);
    case AttentionStep::fused:
    case AttentionStep::fused_options: return attn::launch_fused(args);
    // @end
    default: break;  // bf16 steps: validate_attention_args rejected them (attention_tc.cu runs them)
  }
}

std::int64_t attention_row_offset(const m03::AttentionStrides& s, std::int64_t b, std::int64_t h, std::int64_t n) {
  // @step row_offset
  return m03::row_offset(s, b, h, n);
  // @end
}

void online_softmax_update_test(const m03::OnlineUpdateTestArgs& args) {
  m03::validate_online_update_test_args(args, "online_softmax_update_test");
  // @step online_softmax_rescale  (the exercise checks that the update is written)
  // @end
  online_update_test_kernel<<<1, 1, 0, args.stream>>>(args.scores, args.values, args.block_len, args.num_blocks,
                                                      args.out);
  COURSE_CHECK_LAUNCH("online_update_test_kernel");
  COURSE_CUDA_CHECK(cudaStreamSynchronize(args.stream));
}

}  // namespace course::solution
