#pragma once
/// @file attention_tc.cuh
/// @brief The kernel of steps 6 and 7 of the attention ladder (tc_mma, tc_swizzled_pipelined):
/// smem_softmax_kernel, its tile configuration, its loads and its launch. The solution
/// (attention_tc.cu) and the exercise (exercises/module03_attention/attention_tc.cu) both run
/// this very code; each brings the parts that are a step's idea as its `Phases` parameter,
/// a struct of static forceinline functions:
///   `template <class T, bool kTuned, class QFrags> scores_qk(s, a, qf, s_q, s_k, q_row, q_c, k_row, k_c)`
///       step 6: S = Q K^T for the warp's 16 rows (the A fragments from qf when kTuned,
///       else with ldmatrix from the Q tile at s_q)
///   `template <class T> accumulate_pv(o, a, s_p, s_v, warp_row0, lane, v_row, v_c)`
///       step 6: O += P V, P from the P tile at s_p, V from the tile at s_v
///   `template <int kRowChunks> swizzle_chunk(row, chunk)`
///       step 7: where chunk `chunk` of row `row` is stored in a swizzled tile
/// The solution's phases, and each step's story, prediction and outcome, are in
/// attention_tc.cu; the given phases the kernel calls are attention_tc_phases.cuh's.

#include "attention_tc_device.cuh"
#include "attention_tc_phases.cuh"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/tile.cuh"
#include "course/error.hpp"
#include "module03/attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::solution::attn_tc::smem_step {

/// The tiles of tc_swizzled_pipelined: TileGeom<D, true>'s rows (padded to a power-of-two
/// number of 16-byte chunks), chunk `chunk` of row `row` stored at chunk
/// Phases::swizzle_chunk(row, chunk) of the same row. Used by the writer (cp.async) and the
/// readers (ldmatrix) alike.
template <int D, class Phases>
struct SwizzledGeom : TileGeom<D, true> {
  using Base = TileGeom<D, true>;
  __device__ __forceinline__ static std::uint32_t offset(int row, int chunk) {
    return static_cast<std::uint32_t>(row * Base::kRowBytes +
                                      16 * Phases::template swizzle_chunk<Base::kRowChunks>(row, chunk));
  }
};

/// The tile configuration: plain tiles in their global layout (tc_mma) or swizzled ones
/// (tc_swizzled_pipelined).
template <class Phases, int D, bool kTuned>
struct SmemSoftmaxTile {
  static constexpr int kThreads = 128;
  static constexpr int kBlockM = 64;  // 4 warps x 16 rows
  static constexpr int kBlockN = 64;
  static constexpr int kStages = kTuned ? 2 : 1;
  using Geom = std::conditional_t<kTuned, SwizzledGeom<D, Phases>, TileGeom<D, false>>;
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
// rescale_accumulator, write_output_and_lse) are attention_tc_phases.cuh's; scores_qk,
// accumulate_pv and swizzle_chunk are the Phases parameter's.
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
    cuda::ldmatrix_x4(qf[ks], s_q + T::Geom::offset(q_row, 2 * ks + q_c));
}

/// Phases: load_kv_async (tc_swizzled_pipelined) or load_tile_sync (tc_mma), load_q_fragments,
/// scores_qk, store_scores, load_scaled_scores, the mask and the row max, the online update
/// (online_softmax_rescale), write_probabilities, rescale_accumulator, accumulate_pv,
/// write_output_and_lse.
template <class Phases, int D, bool kCausal, bool kTuned>
__global__ void __launch_bounds__(128, 2) smem_softmax_kernel(const TcParams p) {
  using T = SmemSoftmaxTile<Phases, D, kTuned>;
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

  const TileCopier<D, kBM, T::kThreads, true, typename T::Geom> copy_q;
  const TileCopier<D, kBN, T::kThreads, true, typename T::Geom> copy_kv;
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
    Phases::template scores_qk<T, kTuned>(s, a, qf, s_q, s_k, q_row, q_c, k_row, k_c);

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
    Phases::template accumulate_pv<T>(o, pa, s_p, s_v, warp_row0, lane, v_row, v_c);
  }
  if constexpr (kTuned) cuda::cp_async_wait<0>();

  write_output_and_lse<T>(p, o, m, l, b, h, bh, q0, warp_row0, g, t, sm_half, sm_i);
}

template <class Phases, int D, bool kTuned>
void launch_smem_softmax_d(const TcParams& p, std::int64_t batch_heads, bool causal, cudaStream_t stream) {
  using T = SmemSoftmaxTile<Phases, D, kTuned>;
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + T::kBlockM - 1) / T::kBlockM),
                  static_cast<unsigned>(batch_heads));
  const auto run = [&](auto kernel) {
    kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
    COURSE_CHECK_LAUNCH("smem_softmax_kernel");
  };
  if (causal) {
    cuda::opt_in_dynamic_smem<smem_softmax_kernel<Phases, D, true, kTuned>>(T::kSmemBytes);
    run(smem_softmax_kernel<Phases, D, true, kTuned>);
  } else {
    cuda::opt_in_dynamic_smem<smem_softmax_kernel<Phases, D, false, kTuned>>(T::kSmemBytes);
    run(smem_softmax_kernel<Phases, D, false, kTuned>);
  }
}

/// Launches step tc_mma (kTuned = false) or tc_swizzled_pipelined (kTuned = true).
template <class Phases, bool kTuned>
void launch_smem_softmax(const AttentionArgsBf16& a) {
  const TcParams p = make_tc_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cuda::dispatch_value<m03::kTcHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    launch_smem_softmax_d<Phases, decltype(d)::value, kTuned>(p, bh, a.causal, a.stream);
  });
}

}  // namespace course::solution::attn_tc::smem_step
