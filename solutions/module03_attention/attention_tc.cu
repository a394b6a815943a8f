/// @file attention_tc.cu
/// @brief The tensor-core steps of the attention ladder (bf16 Q, K, V, O; fp32
/// accumulation, softmax statistics and lse), tc_mma and tc_swizzled_pipelined, and the
/// dispatcher of all six (numbers as in kAttentionSteps, module03/attention.hpp):
///   6. tc_mma                 mma.sync m16n8k16 + ldmatrix (V via .trans); S and P through shared memory
///   7. tc_swizzled_pipelined  + XOR-swizzled tiles, 2-stage cp.async K/V ring, Q fragments in registers
///   8. tc_register_softmax    (attention_tc_flash.cu) softmax on the accumulator fragments
///   9. tc_flash2              (attention_tc_flash.cu) FlashAttention-2's tile shapes
///   10. tc_wgmma              (attention_tc_hopper.cu, sm_90a) both products on warpgroup MMA
///   11. tc_warp_specialized   (attention_tc_hopper.cu, sm_90a) TMA loads, an mbarrier K/V ring,
///                              producer and consumer warpgroups
/// Every step: any N_q, N_k (tails masked), causal (bottom-right; tiles past the
/// diagonal skipped, heaviest query tiles first), [B,H,N,d] and [B,N,H,d] strides,
/// grouped-query attention, fp32 lse; d in {32, 64, 96, 128} (tc_wgmma and
/// tc_warp_specialized: 64 and 128, on sm_90a only; elsewhere course::Unsupported).
///
/// Predictions are for an H200 (132 SMs, ~1.98 GHz, 128 B/clk of shared memory per SM;
/// mma.sync m16n8k16 bf16 = 4096 FLOPs, ~60-70% of the wgmma peak of 989 TFLOP/s) at the
/// benchmark shapes B*N = 16384 tokens, H*d = 2048, N = 1024 .. 16384 (attention_tc_flash.cu
/// has the numbers). The fp32 step fused, for comparison:
/// Measured (results: attn_f32/solution/fused/B4_H16_N4096_d64): 33.7 TFLOP/s
/// FlashAttention-2 runs ~300-350 TFLOP/s on these shapes.

#include "attention_tc_device.cuh"
#include "attention_tc_phases.cuh"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/error.hpp"
#include "module03/attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace course::solution {
namespace attn_tc {
namespace {

// ============================================================================
// Step 6: tc_mma -- the two GEMMs of a tile on the tensor cores.
//
// What changes from fused (fp32 FMAs): bf16 inputs, and Q K^T and P V are
// warp-wide mma.sync.m16n8k16 instructions (course/cuda/mma_ptx.cuh): a warp multiplies
// a 16x16 bf16 tile by a 16x8 one into 16x8 fp32 accumulators, 4096 FLOPs per instruction.
//  - 4 warps, each owns 16 query rows of a 64-row Q tile; K/V tiles of 64 keys.
//  - Operands reach the registers with ldmatrix.x4 (four 8x8 bf16 matrices per warp
//    instruction, already in fragment order): Q as the A operand (16 rows x 16 dims), K
//    as the B operand of S = Q K^T (K's rows are keys with dims contiguous: exactly the
//    "col" layout mma wants for B), V as the B operand of O = P V with ldmatrix.trans
//    (V's rows are keys = the k dimension of P V, so each 8x8 block must be transposed).
//  - The softmax stays what the fp32 steps do: each warp writes its 16 x 64 S tile (fp32) to
//    shared memory, two lanes per row read it back, apply scale and mask, run the online
//    update (online_softmax_rescale of attention_device.cuh) and write P as bf16; the warp
//    then reads P with ldmatrix as the A operand of P V. The O accumulators stay in the
//    mma fragments; alpha and 1/l reach them with __shfl_sync from the row's lanes.
//  - Tiles live in shared memory in their global layout (rows of 2d bytes) and are
//    loaded synchronously (16-byte loads, two barriers per tile).
// Prediction: the 8 row addresses of every ldmatrix phase start in the same bank group
// (rows of 128 or 256 bytes): 8-way conflicts, 32 shared-memory wavefronts per ldmatrix.x4
// instead of 4. Per warp and tile (d = 64): 64 mma against 36 such loads (~1150 cycles of
// the SM's shared-memory pipe), i.e. ~4.5 cycles of smem per 4096 FLOPs, a bound of
// ~58 TFLOP/s for the whole SM at either head dim, before the exposed load latency.
// Expect ~40-50 TFLOP/s: already above fused, and far from the tensor cores' ~600.
// Registers (ptxas, sm_90a, non-causal / causal): d = 64: 152/155, d = 128: 198/190
// (32: 114/117, 96: 178/182); shared memory Q, K, V + S (18 KB) + P (9 KB): 51 / 75 KB;
// 3 / 2 blocks per SM.
// Measured (results: attn_bf16/solution/tc_mma/{B16_H32_N1024_d64,B1_H32_N16384_d64}): 44.1 / 44.6 TFLOP/s
// Measured (results: attn_bf16/solution/tc_mma/{B16_H16_N1024_d128,B1_H16_N16384_d128}): 43.0 / 44.3 TFLOP/s
// Met: inside ~40-50 and above fused's fp32 (header), flat in N and d as a shared-memory
// bound should be. cuBLAS's materialized bf16 pipeline is even at N = 2048, ahead beyond:
// Measured (results: attn_bf16/solution/tc_mma/{B16_H32_N1024_d64,B4_H32_N4096_d64}): 1.74 / 0.65 of cublas_materialized
//
// ============================================================================
// Step 7: tc_swizzled_pipelined -- feed the tensor cores.
//
// What changes from tc_mma (same kernel, kTuned = true):
//  (a) Swizzled tiles. Chunk c (16 bytes) of row r is stored at chunk
//      c XOR (r mod 8) (cuda::swizzle_chunk; d = 96 rows are padded to 16 chunks): the 8
//      rows of every ldmatrix phase land in 8 different bank groups, 4 wavefronts per
//      ldmatrix.x4 instead of 32. The writer (cp.async) uses the same mapping.
//  (b) A 2-stage cp.async ring: tile t+1's K and V are copied global -> shared while tile
//      t is computed (no registers, no waiting); one barrier per tile.
//  (c) Q fragments are loaded once into registers (D/16 x 4 registers per lane).
// S and P still go through shared memory (tc_register_softmax removes that).
// Prediction: per warp-tile (d = 64) 64 mma against ~36 conflict-free ldmatrix.x4
// (~144 cycles) plus the S/P round trip (~8 KB written and read, ~130 cycles) and the
// serialized write-sync-read of each warp: ~300 cycles of smem per 64 mma, a bound near
// 230 TFLOP/s; the softmax's instructions and the round trip's latency land it at
// ~120-170 TFLOP/s (d = 64), ~150-200 (d = 128).
// Registers (ptxas, non-causal / causal): d = 64: 153/155, d = 128: 204/206 (32: 115/117,
// 96: 202/204); shared memory Q + 2 x (K + V) + S + P: 67 / 107 KB; 3 / 2 blocks per SM.
// Measured (results: attn_bf16/solution/tc_swizzled_pipelined/{B16_H32_N1024_d64,B1_H32_N16384_d64}): 192.2 / 207.7 TFLOP/s
// Measured (results: attn_bf16/solution/tc_swizzled_pipelined/{B16_H16_N1024_d128,B1_H16_N16384_d128}): 225.9 / 256.1 TFLOP/s
// Met and beaten: above both ranges, d = 64 near the ~230 smem bound; most likely the
// softmax and the round trip's latency hide behind the other resident warps better than
// estimated. Against tc_mma:
// Measured (results: attn_bf16/solution/tc_swizzled_pipelined/B4_H32_N4096_d64): 4.60 of attn_bf16/solution/tc_mma/B4_H32_N4096_d64
// ============================================================================

template <int D, bool kTuned>
struct SmemSoftmaxTile {
  static constexpr int kThreads = 128;
  static constexpr int kBlockM = 64;  // 4 warps x 16 rows
  static constexpr int kBlockN = 64;
  static constexpr int kStages = kTuned ? 2 : 1;
  using Geom = TileGeom<D, kTuned>;
  static constexpr int kDSteps = D / 16;
  static constexpr int kOTiles = D / 8;
  static constexpr int kSTiles = kBlockN / 8;
  static constexpr int kLdS = kBlockN + 8;  // fp32 per S row: float2 writes and float4 reads conflict-free
  static constexpr int kLdP = kBlockN + 8;  // bf16 per P row (144 B): ldmatrix rows in distinct bank groups
  static constexpr int kQBytes = kBlockM * Geom::kRowBytes;
  static constexpr int kKVBytes = kBlockN * Geom::kRowBytes;
  static constexpr int kStageBytes = 2 * kKVBytes;
  static constexpr int kSBytes = kBlockM * kLdS * 4;
  static constexpr int kPBytes = kBlockM * kLdP * 2;
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kSBytes + kPBytes;
};

/// tc_mma's loads: every thread copies 16-byte chunks through registers; rows at or past
/// `valid_rows` are zero-filled (garbage V could be NaN, and NaN * 0 = NaN).
template <int D, int kRows, int kThreads>
__device__ __forceinline__ void load_tile_sync(unsigned char* tile, const bf16* head, std::int64_t seq_stride,
                                               int row0, int valid_rows) {
  using Geom = TileGeom<D, false>;
  for (int idx = threadIdx.x; idx < kRows * Geom::kChunks; idx += kThreads) {
    const int r = idx / Geom::kChunks, c = idx % Geom::kChunks;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (static_cast<long long>(row0) + r < valid_rows)
      x = *reinterpret_cast<const uint4*>(head + (static_cast<std::int64_t>(row0) + r) * seq_stride + 8 * c);
    *reinterpret_cast<uint4*>(tile + Geom::offset(r, c)) = x;
  }
}

// The given phases (store_scores, load_scaled_scores, write_probabilities,
// rescale_accumulator, write_output_and_lse) are attention_tc_phases.cuh's, shared with the
// exercise; scores_qk and accumulate_pv below are the exercise's step 6, same names and
// signatures.
using attn_tc_phases::smem::load_scaled_scores;
using attn_tc_phases::smem::rescale_accumulator;
using attn_tc_phases::smem::store_scores;
using attn_tc_phases::smem::write_output_and_lse;
using attn_tc_phases::smem::write_probabilities;

// ---- The phases of smem_softmax_kernel, in the order its main loop calls them. One warp
// owns 16 query rows: the mma fragments (lane g = lane/4, t = lane%4) for S and O, and for
// the softmax two lanes per row (sm_row = lane/2, sm_half = lane%2). Each phase takes the
// fragments by reference and is forceinline: the kernel compiles to the code it had with
// the phases written out (checked on the sm_90a SASS); register arrays a phase's loops
// index are declared by the kernel and passed in.

/// The Q fragments of the warp's 16 rows, once, into registers (tc_swizzled_pipelined).
template <class T>
__device__ __forceinline__ void load_q_fragments(std::uint32_t (&qf)[T::kDSteps][4], std::uint32_t s_q, int q_row,
                                                 int q_c) {
#pragma unroll
  for (int ks = 0; ks < T::kDSteps; ++ks)
    cuda::ldmatrix_x4(qf[ks], s_q + q_row * T::Geom::kRowBytes +
                                  16 * cuda::swizzle_chunk<T::Geom::kRowChunks>(q_row, 2 * ks + q_c));
}

/// S = Q K^T for the warp's 16 rows and the tile's 64 keys: 8 accumulator tiles of 16 x 8.
/// The A fragments come from qf (kTuned) or with ldmatrix from the Q tile; `a` is scratch.
template <class T, bool kTuned, class QFrags>
__device__ __forceinline__ void scores_qk(float (&s)[T::kSTiles][4], std::uint32_t (&a)[4], const QFrags& qf,
                                          std::uint32_t s_q, std::uint32_t s_k, int q_row, int q_c, int k_row,
                                          int k_c) {
  using Geom = typename T::Geom;
#pragma unroll
  for (int j = 0; j < T::kSTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < T::kDSteps; ++ks) {
    if constexpr (kTuned) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = qf[ks][r];
    } else {
      cuda::ldmatrix_x4(a, s_q + Geom::offset(q_row, 2 * ks + q_c));
    }
#pragma unroll
    for (int np = 0; np < T::kSTiles / 2; ++np) {
      std::uint32_t kb[4];
      cuda::ldmatrix_x4(kb, s_k + Geom::offset(16 * np + k_row, 2 * ks + k_c));
      const std::uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
      cuda::mma_m16n8k16_bf16_f32(s[2 * np], a, b0);
      cuda::mma_m16n8k16_bf16_f32(s[2 * np + 1], a, b1);
    }
  }
}

/// O += P V: P (16 rows x 16 keys per k16 step, ldmatrix from the P tile) as the A operand,
/// V's B fragments through ldmatrix .trans; `a` is scratch.
template <class T>
__device__ __forceinline__ void accumulate_pv(float (&o)[T::kOTiles][4], std::uint32_t (&a)[4], std::uint32_t s_p,
                                              std::uint32_t s_v, int warp_row0, int lane, int v_row, int v_c) {
  using Geom = typename T::Geom;
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
    cuda::ldmatrix_x4(a, s_p + 2 * ((warp_row0 + (lane & 15)) * T::kLdP + 16 * kk + 8 * (lane >> 4)));
#pragma unroll
    for (int dp = 0; dp < T::kDSteps; ++dp) {
      std::uint32_t vb[4];
      cuda::ldmatrix_x4_trans(vb, s_v + Geom::offset(16 * kk + v_row, 2 * dp + v_c));
      const std::uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
      cuda::mma_m16n8k16_bf16_f32(o[2 * dp], a, b0);
      cuda::mma_m16n8k16_bf16_f32(o[2 * dp + 1], a, b1);
    }
  }
}

/// Phases: load_kv_async (tc_swizzled_pipelined) or load_tile_sync (tc_mma), load_q_fragments,
/// scores_qk, store_scores, load_scaled_scores, the mask and the row max, the online update
/// (online_softmax_rescale), write_probabilities, rescale_accumulator, accumulate_pv,
/// write_output_and_lse.
template <int D, bool kCausal, bool kTuned>
__global__ void __launch_bounds__(128, 2) smem_softmax_kernel(const TcParams p) {
  using T = SmemSoftmaxTile<D, kTuned>;
  constexpr int kBM = T::kBlockM, kBN = T::kBlockN;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* q_tile = smem_raw;
  unsigned char* kv_tiles = q_tile + T::kQBytes;                         // kStages x (K, V)
  float* s_tile = reinterpret_cast<float*>(kv_tiles + T::kStages * T::kStageBytes);  // [64][kLdS]
  bf16* p_tile = reinterpret_cast<bf16*>(reinterpret_cast<unsigned char*>(s_tile) + T::kSBytes);  // [64][kLdP]
  const std::uint32_t s_q = cuda::smem_u32(q_tile), s_kv = cuda::smem_u32(kv_tiles);
  const std::uint32_t s_p = cuda::smem_u32(p_tile);

  int q_tile_idx, bh;
  block_coordinates(kCausal, q_tile_idx, bh);
  const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
  const int q0 = q_tile_idx * kBM;
  const bf16* q_head = p.q + row_offset(p.qs, b, h, 0);
  const bf16* k_head = p.k + row_offset(p.ks, b, hk, 0);
  const bf16* v_head = p.v + row_offset(p.vs, b, hk, 0);
  const int num_tiles = (kv_end<kCausal>(p, q0, kBM) + kBN - 1) / kBN;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * 16;
  // Softmax lanes: two per row of the warp's 16 (row lane/2); lane half h takes the float4
  // chunks 2c + h (c < 8) of the row's 64 scores.
  const int sm_row = lane >> 1, sm_half = lane & 1;
  const int sm_i = q0 + warp_row0 + sm_row;  // its query row

  // ldmatrix lane rows and chunks, as in attention_tc_flash.cu (see there).
  const int q_row = warp_row0 + (lane & 15), q_c = lane >> 4;
  const int k_row = (lane & 7) + 8 * (lane >> 4), k_c = (lane >> 3) & 1;
  const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1), v_c = lane >> 4;

  const TileCopier<D, kBM, T::kThreads, true> copy_q;
  const TileCopier<D, kBN, T::kThreads, true> copy_kv;
  auto load_kv_async = [&](int tile) {
    const std::uint32_t stage = s_kv + (tile % T::kStages) * T::kStageBytes;
    copy_kv.copy(stage, k_head, p.ks.seq, tile * kBN, p.seq_k);
    copy_kv.copy(stage + T::kKVBytes, v_head, p.vs.seq, tile * kBN, p.seq_k);
  };

  float o[T::kOTiles][4];
#pragma unroll
  for (int dt = 0; dt < T::kOTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
  float m = -INFINITY, l = 0.f;  // row sm_row: running max (scaled scores) and this lane's partial sum
  std::uint32_t qf[kTuned ? T::kDSteps : 1][4];

  if constexpr (kTuned) {
    copy_q.copy(s_q, q_head, p.qs.seq, q0, p.seq_q);
    if (num_tiles > 0) load_kv_async(0);
    cuda::cp_async_commit();  // group 0: Q and tile 0
  } else {
    load_tile_sync<D, kBM, T::kThreads>(q_tile, q_head, p.qs.seq, q0, p.seq_q);
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int kv0 = tile * kBN;
    if constexpr (kTuned) {
      cuda::cp_async_wait<0>();  // tile `tile` has landed (for this thread) ...
      __syncthreads();           // ... for every thread; every warp is done with tile-1
      if (tile + 1 < num_tiles) load_kv_async(tile + 1);
      cuda::cp_async_commit();
      if (tile == 0) load_q_fragments<T>(qf, s_q, q_row, q_c);
    } else {
      __syncthreads();  // every warp is done with the previous K, V
      load_tile_sync<D, kBN, T::kThreads>(kv_tiles, k_head, p.ks.seq, kv0, p.seq_k);
      load_tile_sync<D, kBN, T::kThreads>(kv_tiles + T::kKVBytes, v_head, p.vs.seq, kv0, p.seq_k);
      __syncthreads();
    }
    const std::uint32_t s_k = s_kv + (tile % T::kStages) * T::kStageBytes;
    const std::uint32_t s_v = s_k + T::kKVBytes;

    // ---- S = Q K^T for the warp's 16 rows: 8 accumulator tiles of 16 x 8.
    float s[T::kSTiles][4];
    std::uint32_t a[4];
    scores_qk<T, kTuned>(s, a, qf, s_q, s_k, q_row, q_c, k_row, k_c);

    // ---- S to shared memory: row g gets s[j][0..1] at keys 8j+2t, row g+8 s[j][2..3].
    float* s_warp = s_tile + warp_row0 * T::kLdS;
    store_scores<T>(s_warp, s, g, t);
    __syncwarp();

    // ---- The online softmax of the fp32 steps, two lanes per row.
    float x[32];
    load_scaled_scores<T>(x, s_warp, sm_row, sm_half, p.scale);
    if (tile_needs_mask<kCausal, kBN>(p, q0 + warp_row0, kv0)) {
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key_hidden<kCausal>(p, sm_i, kv0 + 4 * (2 * c + sm_half) + e)) x[4 * c + e] = -INFINITY;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int e = 0; e < 32; ++e) mx = fmaxf(mx, x[e]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float alpha = attn::online_softmax_rescale(m, l, mx);  // same m on both lanes; l is per lane
    const float m_ref = attn::exp_reference(m);
    bf16* p_row = p_tile + (warp_row0 + sm_row) * T::kLdP;
    float pr[4];
    write_probabilities(p_row, x, pr, m_ref, l, sm_half);
    rescale_accumulator<T>(o, alpha, g);
    __syncwarp();  // P complete

    // ---- O += P V: P (16 rows x 16 keys per k16 step) as the A operand, V through .trans.
    std::uint32_t pa[4];
    accumulate_pv<T>(o, pa, s_p, s_v, warp_row0, lane, v_row, v_c);
  }
  if constexpr (kTuned) cuda::cp_async_wait<0>();

  write_output_and_lse<T>(p, o, m, l, b, h, bh, q0, warp_row0, g, t, sm_half, sm_i);
}

template <int D, bool kTuned>
void launch_smem_softmax_d(const TcParams& p, std::int64_t batch_heads, bool causal, cudaStream_t stream) {
  using T = SmemSoftmaxTile<D, kTuned>;
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + T::kBlockM - 1) / T::kBlockM),
                  static_cast<unsigned>(batch_heads));
  const auto run = [&](auto kernel) {
    kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
    COURSE_CHECK_LAUNCH("smem_softmax_kernel");
  };
  if (causal) {
    cuda::opt_in_dynamic_smem<smem_softmax_kernel<D, true, kTuned>>(T::kSmemBytes);
    run(smem_softmax_kernel<D, true, kTuned>);
  } else {
    cuda::opt_in_dynamic_smem<smem_softmax_kernel<D, false, kTuned>>(T::kSmemBytes);
    run(smem_softmax_kernel<D, false, kTuned>);
  }
}

template <bool kTuned>
void launch_smem_softmax(const AttentionArgsBf16& a) {
  const TcParams p = make_tc_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cuda::dispatch_value<m03::kTcHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    launch_smem_softmax_d<decltype(d)::value, kTuned>(p, bh, a.causal, a.stream);
  });
}

}  // namespace

void launch_tc_mma(const AttentionArgsBf16& a) { launch_smem_softmax<false>(a); }
void launch_tc_swizzled_pipelined(const AttentionArgsBf16& a) { launch_smem_softmax<true>(a); }

}  // namespace attn_tc

void attention(m03::AttentionStep step, const m03::AttentionArgsBf16& args) {
  m03::validate_attention_args(args, step, "attention");
  switch (step) {
    case m03::AttentionStep::tc_mma: return attn_tc::launch_tc_mma(args);
    case m03::AttentionStep::tc_swizzled_pipelined: return attn_tc::launch_tc_swizzled_pipelined(args);
    case m03::AttentionStep::tc_register_softmax: return attn_tc::launch_tc_register_softmax(args);
    case m03::AttentionStep::tc_flash2: return attn_tc::launch_tc_flash2(args);
    case m03::AttentionStep::tc_wgmma: return attn_tc::launch_tc_wgmma(args);
    case m03::AttentionStep::tc_warp_specialized: return attn_tc::launch_tc_warp_specialized(args);
    case m03::AttentionStep::tc_pingpong: return attn_tc::launch_tc_pingpong(args);
    default: break;  // fp32 steps: validate_attention_args rejected them
  }
}

}  // namespace course::solution
