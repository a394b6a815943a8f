/// @file attention_tc.cu
/// @brief YOUR tensor-core attention steps (module 3): bf16 Q, K, V, O; fp32 accumulation,
/// softmax statistics and lse.
///
/// Read module03_attention/README.md, section 11 (the mma fragment layouts, swizzling, the
/// pipeline) and include/module03/attention.hpp (AttentionArgsBf16) first. Then, in order:
///   6. tc_mma                 the two GEMMs of a tile with mma.sync and ldmatrix (6a, 6b)
///   7. tc_swizzled_pipelined  the XOR swizzle that removes ldmatrix's bank conflicts (7)
///   8. tc_register_softmax    the online softmax on the accumulator fragments (8a) and P
///                             re-packed as the A operand of P V (8b)
///   9. tc_flash2              FlashAttention-2's tile shapes for your step-8 kernel (9)
/// Everything else is given: tile loads (synchronous, then a cp.async ring), the shared-
/// memory softmax of steps 6-7, the masks, the epilogues, the launches. The PTX wrappers
/// (ldmatrix_x4, ldmatrix_x4_trans, mma_m16n8k16_bf16_f32, cp.async, ex2_approx) are in
/// common/include/course/cuda/mma_ptx.cuh: read their comments, they give the layouts.
/// Run the tests with:   ctest --preset default -L exercise -R attention_tc
/// A step you have not written throws NotImplemented and its tests show SKIPPED.

// The given phases of both kernels below (storing S, the softmax's loads and stores, the
// rescale of O, the epilogues; the Q K^T of steps 8-9) are the solution's, shared through
// this header; the phases you write have the same names and signatures in the solution.
#include "../../solutions/module03_attention/attention_tc_phases.cuh"

#include "module03/attention.hpp"
#include "module03/attention_indexing.cuh"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/tile.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

namespace course::exercise {
namespace {

using bf16 = __nv_bfloat16;
using m03::AttentionArgsBf16;
using m03::AttentionStep;
// The stride arithmetic and the block order (heaviest query tiles of all heads first when
// causal, step causal's order) are module 3's: module03/attention_indexing.cuh.
using m03::block_coordinates;
using m03::row_offset;

// ============================================================================ given ====

// The parameter block, the causal key range and the masks are the solution's
// (attention_tc_device.cuh, included by attention_tc_phases.cuh).
using solution::attn_tc::key_hidden;
using solution::attn_tc::kv_end;
using solution::attn_tc::make_tc_params;
using solution::attn_tc::TcParams;
using solution::attn_tc::tile_needs_mask;

/// The online update of steps 2-5 (your online_softmax_rescale of attention.cu, repeated
/// here so that this file stands alone): returns alpha, updates m (scaled scores) and l.
__device__ __forceinline__ float online_rescale(float& m, float& l, float block_max) {
  const float m_new = fmaxf(m, block_max);
  const float alpha = m_new == -INFINITY ? 1.f : __expf(m - m_new);
  l *= alpha;
  m = m_new;
  return alpha;
}

// ============================================================================ step 7 ====
// Step 7 (the idea): a swizzle. A tile row of d bf16 is kChunks 16-byte chunks; an
// ldmatrix phase reads the SAME chunk of 8 consecutive rows. Stored as is (rows of 128 or
// 256 bytes), those 8 addresses fall into the same 4 banks: an 8-way conflict. Store chunk
// `chunk` of row `row` at another chunk of the same row so that the 8 rows of every phase
// land in 8 different 16-byte bank groups -- a bijection on the chunks of each row, used
// by the writer (cp.async) and the readers (ldmatrix) alike.
// TODO(step 7): return the physical chunk of logical chunk `chunk` in row `row` of a tile
// whose rows hold kRowChunks chunks (a power of two: 4, 8 or 16); then set kSwizzleWritten.
// Hints, one at a time: bash scripts/course.sh hint attention/tc_swizzled_pipelined
constexpr bool kSwizzleWritten = false;

template <int kRowChunks>
__device__ __forceinline__ int my_swizzle_chunk(int row, int chunk) {
  // TODO(step 7)
  (void)row;
  return chunk;
}

/// Geometry of a [rows][D] bf16 tile in shared memory: course/cuda/tile.cuh's
/// cuda::TileGeom, plain (Swizzle::none: the global layout, step 6) or swizzled by the
/// course's cuda::swizzle_chunk (Swizzle::course: steps 8-9, whose address arithmetic
/// relies on its exact form), and one more for step 7: the same padded rows with the
/// chunks placed by YOUR my_swizzle_chunk (Swizzle::yours).
enum class Swizzle { none, yours, course };
template <int D>
struct YourSwizzleGeom : cuda::TileGeom<D, true> {
  using Base = cuda::TileGeom<D, true>;
  __device__ __forceinline__ static std::uint32_t offset(int row, int chunk) {
    return static_cast<std::uint32_t>(row * Base::kRowBytes + 16 * my_swizzle_chunk<Base::kRowChunks>(row, chunk));
  }
};
template <int D, Swizzle kSw>
using TileGeom = std::conditional_t<kSw == Swizzle::yours, YourSwizzleGeom<D>,
                                    cuda::TileGeom<D, kSw == Swizzle::course>>;

/// cp.async copies of rows row0.. of one head into a [kRows][D] tile (zeros past `valid_rows`).
template <int D, int kRows, int kThreads, Swizzle kSw>
__device__ __forceinline__ void copy_tile_async(std::uint32_t smem_tile, const bf16* head, std::int64_t seq_stride,
                                                int row0, int valid_rows) {
  using Geom = TileGeom<D, kSw>;
  for (int idx = threadIdx.x; idx < kRows * Geom::kChunks; idx += kThreads) {
    const int r = idx / Geom::kChunks, c = idx % Geom::kChunks;
    const bool valid = static_cast<long long>(row0) + r < valid_rows;
    const bf16* src = valid ? head + (static_cast<std::int64_t>(row0) + r) * seq_stride + 8 * c : head;
    cuda::cp_async_16_zfill(smem_tile + Geom::offset(r, c), src, valid ? 16 : 0);
  }
}

/// The same with ordinary 16-byte loads and stores (step 6).
template <int D, int kRows, int kThreads>
__device__ __forceinline__ void load_tile_sync(unsigned char* tile, const bf16* head, std::int64_t seq_stride,
                                               int row0, int valid_rows) {
  using Geom = TileGeom<D, Swizzle::none>;
  for (int idx = threadIdx.x; idx < kRows * Geom::kChunks; idx += kThreads) {
    const int r = idx / Geom::kChunks, c = idx % Geom::kChunks;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (static_cast<long long>(row0) + r < valid_rows)
      x = *reinterpret_cast<const uint4*>(head + (static_cast<std::int64_t>(row0) + r) * seq_stride + 8 * c);
    *reinterpret_cast<uint4*>(tile + Geom::offset(r, c)) = x;
  }
}

/// Consecutive K or V tiles of one head, streamed in order with cp.async into tiles laid
/// out by the course's swizzle: the solution's TileStream (attention_tc_device.cuh).
using solution::attn_tc::TileStream;

// The bf16 packing of fragment registers and the 1024-aligned dynamic shared-memory base
// (the XOR address arithmetic of steps 8-9 needs tiles aligned to their row length; the
// kernel asks for kSmemAlign bytes more) are course/cuda/tile.cuh's.
using cuda::align_smem;
using cuda::kSmemAlign;
using cuda::pack_bf16x2;

// The given phases of the kernels (attention_tc_phases.cuh, the solution's).
using attn_tc_phases::smem::load_scaled_scores;
using attn_tc_phases::smem::rescale_accumulator;
using attn_tc_phases::smem::store_scores;
using attn_tc_phases::smem::write_probabilities;

// ====================================================================== steps 6 and 7 ====
// Step 6: tc_mma. 4 warps, each owns 16 query rows of a 64-row Q tile; K/V tiles of 64
// keys. Per tile, each warp computes its 16 x 64 block of S = Q K^T with mma.sync, writes
// it to shared memory (given), runs the online softmax there (given: two lanes per row)
// and writes P as bf16 (given); then O += P V with mma.sync, O staying in registers.
// Fragment layouts (lane l, g = l/4, t = l%4; see mma_ptx.cuh):
//   A 16x16 (row):  a[0] = A[g][2t..2t+1]  a[1] = A[g+8][2t..]  a[2] = A[g][2t+8..]  a[3] = A[g+8][2t+8..]
//   B 16x8 (col):   b[0] = B[2t..2t+1][g]  b[1] = B[2t+8..2t+9][g]
//   C 16x8:         c[0..1] = C[g][2t..2t+1]   c[2..3] = C[g+8][2t..2t+1]
// ldmatrix_x4 loads four 8x8 matrices; lanes 8i..8i+7 give the row addresses of matrix i
// and register r[i] receives matrix i in exactly these fragment layouts. The lane row
// addresses (given below, for row block 0 and k step 0):
//   q_row/q_c: Q as A: row lane%16 of the warp's 16, chunk 2*ks + lane/16
//   k_row/k_c: K as B (keys are the n of S): key 16*np + lane%8 + 8*(lane/16), chunk 2*ks + (lane/8)%2
//              -> r[0], r[1] = b of n8 tile 2np (keys 16np..+7); r[2], r[3] = b of n8 tile 2np+1
//   p_row/p_c: P as A: row warp_row0 + lane%16, key chunk 2*kk + lane/16 (kLdP bf16 per row,
//              see p_addr in accumulate_pv)
//   v_row/v_c: V as B of P V (keys are the k): key 16*kk + lane%8 + 8*((lane/8)%2), chunk 2*dp + lane/16,
//              loaded with ldmatrix_x4_TRANS -> r[0], r[1] = b of n8 tile 2dp (dims 16dp..+7); r[2], r[3] = 2dp+1
// TODO(step 6a): scores_qk below: S = Q K^T for the warp's 16 rows into s[8][4] (n8 tile
// j = keys 8j..8j+7).
// TODO(step 6b): accumulate_pv below: O += P V into o[D/8][4] (n8 tile dt = dims 8dt..8dt+7).
// TODO(step 6c): set kTcMmaWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention/tc_mma
//
// Step 7: tc_swizzled_pipelined, the same kernel with kTuned = true: swizzled tiles (your
// my_swizzle_chunk above), a 2-stage cp.async K/V ring and Q fragments in registers --
// all given but the swizzle.
constexpr bool kTcMmaWritten = false;

template <int D, bool kTuned>
struct SmemSoftmaxTile {
  static constexpr int kThreads = 128, kBlockM = 64, kBlockN = 64;
  static constexpr int kStages = kTuned ? 2 : 1;
  using Geom = TileGeom<D, kTuned ? Swizzle::yours : Swizzle::none>;
  static constexpr int kDSteps = D / 16, kOTiles = D / 8, kSTiles = kBlockN / 8;
  static constexpr int kLdS = kBlockN + 8, kLdP = kBlockN + 8;
  static constexpr int kQBytes = kBlockM * Geom::kRowBytes;
  static constexpr int kKVBytes = kBlockN * Geom::kRowBytes;
  static constexpr int kStageBytes = 2 * kKVBytes;
  static constexpr int kSBytes = kBlockM * kLdS * 4;
  static constexpr int kPBytes = kBlockM * kLdP * 2;
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kSBytes + kPBytes;
};

/// YOUR step 6a: S = Q K^T for the warp's 16 rows and the tile's 64 keys (8 accumulator
/// tiles of 16 x 8). qf: the Q fragments (given: loaded once, at tile 0); `a` is yours for an
/// A fragment if you want one (the solution reads Q from s_q for tc_mma).
template <class T, bool kTuned, class QFrags>
__device__ __forceinline__ void scores_qk(float (&s)[T::kSTiles][4], std::uint32_t (&a)[4], const QFrags& qf,
                                          std::uint32_t s_q, std::uint32_t s_k, int q_row, int q_c, int k_row,
                                          int k_c) {
  using Geom = typename T::Geom;
#pragma unroll
  for (int j = 0; j < T::kSTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
  // TODO(step 6a): for each k16 step ks < kDSteps: the A fragment is qf[ks]; for each pair
  // np < kSTiles/2 of n8 tiles, one ldmatrix_x4 of K at s_k + Geom::offset(16 * np + k_row,
  // 2 * ks + k_c), then two mma_m16n8k16_bf16_f32 into s[2np] and s[2np+1].
  (void)a;
  (void)qf;
  (void)s_q;
  (void)s_k;
  (void)q_row;
  (void)q_c;
  (void)k_row;
  (void)k_c;
}

/// YOUR step 6b: O += P V for the warp's 16 rows, P (bf16, kLdP per row) from the P tile at
/// s_p as the A operand, V from the tile at s_v; `a` is yours for P's A fragment.
template <class T>
__device__ __forceinline__ void accumulate_pv(float (&o)[T::kOTiles][4], std::uint32_t (&a)[4], std::uint32_t s_p,
                                              std::uint32_t s_v, int warp_row0, int lane, int v_row, int v_c) {
  using Geom = typename T::Geom;
  const int p_row = warp_row0 + (lane & 15), p_c = lane >> 4;
  // Byte address of chunk c (8 keys) of row r of the P tile.
  const auto p_addr = [&](int r, int c) { return s_p + 2u * static_cast<std::uint32_t>(r * T::kLdP + 8 * c); };
  // TODO(step 6b): for each k16 step kk < kBlockN/16 of the keys: the A fragment of P with
  // one ldmatrix_x4 at p_addr(p_row, 2 * kk + p_c); for each pair dp < kDSteps of n8 tiles
  // of O, one ldmatrix_x4_trans of V at s_v + Geom::offset(16 * kk + v_row, 2 * dp + v_c),
  // then two mma into o[2dp] and o[2dp+1].
  (void)o;
  (void)a;
  (void)s_v;
  (void)v_row;
  (void)v_c;
  (void)p_row;
  (void)p_c;
  (void)p_addr;
}

template <int D, bool kCausal, bool kTuned>
__global__ void __launch_bounds__(128, 2) smem_softmax_kernel(const TcParams p) {
  using T = SmemSoftmaxTile<D, kTuned>;
  using Geom = typename T::Geom;
  constexpr int kBM = T::kBlockM, kBN = T::kBlockN;
  constexpr Swizzle kSw = kTuned ? Swizzle::yours : Swizzle::none;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* q_tile = smem_raw;
  unsigned char* kv_tiles = q_tile + T::kQBytes;
  float* s_tile = reinterpret_cast<float*>(kv_tiles + T::kStages * T::kStageBytes);
  bf16* p_tile = reinterpret_cast<bf16*>(reinterpret_cast<unsigned char*>(s_tile) + T::kSBytes);
  const std::uint32_t s_q = cuda::smem_u32(q_tile), s_kv = cuda::smem_u32(kv_tiles), s_p = cuda::smem_u32(p_tile);

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
  const int sm_row = lane >> 1, sm_half = lane & 1;  // softmax: two lanes per row
  const int sm_i = q0 + warp_row0 + sm_row;

  // ldmatrix lane rows and chunks (see the step-6 comment above).
  const int q_row = warp_row0 + (lane & 15), q_c = lane >> 4;
  const int k_row = (lane & 7) + 8 * (lane >> 4), k_c = (lane >> 3) & 1;
  const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1), v_c = lane >> 4;

  auto load_kv_async = [&](int tile) {
    const std::uint32_t stage = s_kv + (tile % T::kStages) * T::kStageBytes;
    copy_tile_async<D, kBN, T::kThreads, kSw>(stage, k_head, p.ks.seq, tile * kBN, p.seq_k);
    copy_tile_async<D, kBN, T::kThreads, kSw>(stage + T::kKVBytes, v_head, p.vs.seq, tile * kBN, p.seq_k);
  };

  float o[T::kOTiles][4];
#pragma unroll
  for (int dt = 0; dt < T::kOTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
  float m = -INFINITY, l = 0.f;
  std::uint32_t qf[T::kDSteps][4];  // step 7: Q fragments, loaded once

  if constexpr (kTuned) {
    copy_tile_async<D, kBM, T::kThreads, kSw>(s_q, q_head, p.qs.seq, q0, p.seq_q);
    if (num_tiles > 0) load_kv_async(0);
    cuda::cp_async_commit();
  } else {
    load_tile_sync<D, kBM, T::kThreads>(q_tile, q_head, p.qs.seq, q0, p.seq_q);
  }

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int kv0 = tile * kBN;
    if constexpr (kTuned) {
      cuda::cp_async_wait<0>();
      __syncthreads();
      if (tile + 1 < num_tiles) load_kv_async(tile + 1);
      cuda::cp_async_commit();
    } else {
      __syncthreads();
      load_tile_sync<D, kBN, T::kThreads>(kv_tiles, k_head, p.ks.seq, kv0, p.seq_k);
      load_tile_sync<D, kBN, T::kThreads>(kv_tiles + T::kKVBytes, v_head, p.vs.seq, kv0, p.seq_k);
      __syncthreads();
    }
    if (tile == 0) {
#pragma unroll
      for (int ks = 0; ks < T::kDSteps; ++ks) cuda::ldmatrix_x4(qf[ks], s_q + Geom::offset(q_row, 2 * ks + q_c));
    }
    const std::uint32_t s_k = s_kv + (tile % T::kStages) * T::kStageBytes;  // this tile's K ...
    const std::uint32_t s_v = s_k + T::kKVBytes;                             // ... and V

    // YOUR step 6a: S = Q K^T.
    float s[T::kSTiles][4];
    std::uint32_t a[4];
    scores_qk<T, kTuned>(s, a, qf, s_q, s_k, q_row, q_c, k_row, k_c);

    // ---- given: S to shared memory, the softmax of steps 2-5, P as bf16.
    float* s_warp = s_tile + warp_row0 * T::kLdS;
    store_scores<T>(s_warp, s, g, t);
    __syncwarp();
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
    const float alpha = online_rescale(m, l, mx);
    const float m_ref = m == -INFINITY ? 0.f : m;
    bf16* p_row = p_tile + (warp_row0 + sm_row) * T::kLdP;
    float pr[4];
    write_probabilities(p_row, x, pr, m_ref, l, sm_half);
    rescale_accumulator<T>(o, alpha, g);
    __syncwarp();  // P complete

    // YOUR step 6b: O += P V.
    std::uint32_t pa[4];
    accumulate_pv<T>(o, pa, s_p, s_v, warp_row0, lane, v_row, v_c);
  }
  if constexpr (kTuned) cuda::cp_async_wait<0>();

  // ---- given: O = acc / l from the fragments, lse = m + ln l.
  attn_tc_phases::smem::write_output_and_lse<T>(p, o, m, l, b, h, bh, q0, warp_row0, g, t, sm_half, sm_i);
}

template <int D, bool kTuned>
void launch_smem_softmax_d(const TcParams& p, std::int64_t batch_heads, bool causal, cudaStream_t stream) {
  using T = SmemSoftmaxTile<D, kTuned>;
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + T::kBlockM - 1) / T::kBlockM),
                  static_cast<unsigned>(batch_heads));
  if (causal) {
    cuda::opt_in_dynamic_smem<smem_softmax_kernel<D, true, kTuned>>(T::kSmemBytes);
    smem_softmax_kernel<D, true, kTuned><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  } else {
    cuda::opt_in_dynamic_smem<smem_softmax_kernel<D, false, kTuned>>(T::kSmemBytes);
    smem_softmax_kernel<D, false, kTuned><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  }
  COURSE_CHECK_LAUNCH("smem_softmax_kernel");
}

template <bool kTuned>
void launch_smem_softmax(const AttentionArgsBf16& a) {
  const TcParams p = make_tc_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cuda::dispatch_value<m03::kTcHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    launch_smem_softmax_d<decltype(d)::value, kTuned>(p, bh, a.causal, a.stream);
  });
}

// ====================================================================== steps 8 and 9 ====
namespace flash = attn_tc_phases::flash;  // the given phases of register_softmax_kernel

// Step 8: tc_register_softmax. S never leaves the registers: lane (g, t) holds, for each
// n8 tile j of S, s[j][0..1] = S[g][8j+2t, +1] and s[j][2..3] = S[g+8][8j+2t, +1]; a row
// lives in the 4 lanes of a quad (same g). The kernel below is given; you write the two
// device functions it calls for each m16 tile of a warp:
//
// TODO(step 8a): softmax_on_fragments -- one online-softmax step on the fragments of one
// m16 tile: for each of the thread's two rows (hr = 0: row g, elements 0 and 1 of every
// n8 tile; hr = 1: row g+8, elements 2 and 3):
//   the new running max over row_max[hr] and the row's scores (cuda::warp_max<4> over the quad),
//   alpha = 2^(scale_log2 * (old max - new max)), row_sum[hr] *= alpha, o's row *= alpha,
//   p = 2^(scale_log2 * s - scale_log2 * new max) for each score (cuda::ex2_approx),
//   row_sum[hr] += the lane's p's (reduced over the quad only at the end: given),
//   pk[j][hr] = pack_bf16x2(p of element 2hr, p of element 2hr+1) of n8 tile j.
// row_max stays in raw score units (scale applied only inside the exponent). A row that
// has seen only masked scores (-INFINITY) must come out with p = 0 and alpha finite.
// TODO(step 8b): a_fragment -- the A operand of the P V mma for k16 step kk (keys 16kk ..
// 16kk+15), from pk. Then set kFragmentSoftmaxWritten to true (8c).
// Hints, one at a time: bash scripts/course.sh hint attention/tc_register_softmax
constexpr bool kFragmentSoftmaxWritten = false;

template <int kSTiles, int kOTiles>
__device__ __forceinline__ void softmax_on_fragments(float (&s)[kSTiles][4], float (&row_max)[2], float (&row_sum)[2],
                                                     float (&o)[kOTiles][4], std::uint32_t (&pk)[kSTiles][2],
                                                     float scale_log2) {
  // TODO(step 8a)
  (void)s;
  (void)row_max;
  (void)row_sum;
  (void)o;
  (void)scale_log2;
#pragma unroll
  for (int j = 0; j < kSTiles; ++j) pk[j][0] = pk[j][1] = 0u;
}

template <int kSTiles>
__device__ __forceinline__ void a_fragment(const std::uint32_t (&pk)[kSTiles][2], int kk, std::uint32_t (&a)[4]) {
  // TODO(step 8b)
  (void)pk;
  (void)kk;
  a[0] = a[1] = a[2] = a[3] = 0u;
}

// Step 9: tc_flash2 -- the same kernel with other tile shapes.
// TODO(step 9): choose Flash2Choice below for each head dim (rows per warp through
// kMTiles, keys per tile, keys per softmax step, Q in registers or not); then set
// kFlash2Written to true. Check your choice for spills: the lesson shows how.
// Hints, one at a time: bash scripts/course.sh hint attention/tc_flash2
constexpr bool kFlash2Written = false;

/// The tile configuration of the register-softmax kernel (the solution's FlashConfig).
template <int D_, int kMTiles_, int kBlockN_, int kSubN_, int kStages_, bool kQInRegs_>
struct FlashConfig {
  static constexpr int D = D_;
  static constexpr int kThreads = 128;
  static constexpr int kMTiles = kMTiles_;       ///< m16 tiles (16 query rows) per warp
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kBlockM = 4 * kWarpRows;
  static constexpr int kBlockN = kBlockN_;       ///< keys per K/V tile (one barrier each)
  static constexpr int kSubN = kSubN_;           ///< keys per online-softmax step
  static constexpr int kSubTiles = kBlockN / kSubN;
  static constexpr int kStages = kStages_;
  static constexpr bool kQInRegs = kQInRegs_;
  using Geom = TileGeom<D, Swizzle::course>;
  static constexpr int kSTiles = kSubN / 8, kDSteps = D / 16, kOTiles = D / 8, kKeySteps = kSubN / 16;
  static constexpr int kQBytes = kBlockM * Geom::kRowBytes;
  static constexpr int kKVBytes = kBlockN * Geom::kRowBytes;
  static constexpr int kStageBytes = 2 * kKVBytes;
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kSmemAlign;
  static_assert(kSubN % 16 == 0 && kBlockN % kSubN == 0 && kStages >= 2, "whole k16 steps and sub-tiles");
};

template <int D>
using RegisterSoftmaxConfig = FlashConfig<D, 1, 64, 64, 2, true>;

template <int D>
struct Flash2Choice {
  // TODO(step 9): FlashConfig<D, kMTiles, kBlockN, kSubN, kStages, kQInRegs> for this D
  // (a specialization per head dim if they differ). Step 8's shapes until then.
  using type = FlashConfig<D, 1, 64, 64, 2, true>;
};

template <class Cfg, bool kCausal>
__global__ void __launch_bounds__(Cfg::kThreads, 2) register_softmax_kernel(const TcParams p) {
  constexpr int kMT = Cfg::kMTiles, kBM = Cfg::kBlockM, kBN = Cfg::kBlockN, kRB = Cfg::Geom::kRowBytes;
  constexpr int kRowChunks = Cfg::Geom::kRowChunks;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const std::uint32_t s_q = cuda::smem_u32(smem);  // [kBlockM][D] Q, at the end O
  const std::uint32_t s_kv = s_q + Cfg::kQBytes;   // kStages x (K tile, V tile)

  int q_tile, bh;
  block_coordinates(kCausal, q_tile, bh);
  const int q0 = q_tile * kBM;
  const bf16* k_head;
  const bf16* v_head;
  {
    const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
    k_head = p.k + row_offset(p.ks, b, hk, 0);
    v_head = p.v + row_offset(p.vs, b, hk, 0);
    copy_tile_async<Cfg::D, kBM, Cfg::kThreads, Swizzle::course>(s_q, p.q + row_offset(p.qs, b, h, 0), p.qs.seq, q0,
                                                                 p.seq_q);
  }
  const int num_tiles = (kv_end<kCausal>(p, q0, kBM) + kBN - 1) / kBN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * Cfg::kWarpRows;

  TileStream<Cfg::D, kBN, Cfg::kThreads> k_stream(k_head, p.ks.seq, p.seq_k), v_stream(v_head, p.vs.seq, p.seq_k);
  auto load_kv = [&](int tile) {  // in order 0, 1, 2, ...
    const std::uint32_t stage = s_kv + (tile % Cfg::kStages) * Cfg::kStageBytes;
    k_stream.copy_next(stage, p.k);
    v_stream.copy_next(stage + Cfg::kKVBytes, p.v);
  };
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < num_tiles) load_kv(s);
    cuda::cp_async_commit();
  }

  // ldmatrix lane addresses for k step 0 of row block 0; with the course's XOR swizzle,
  // k step st is `addr ^ (32 * st)` and row block rb is `+ 16 * rb * kRB` (see the
  // solution's comment in attention_tc_flash.cu).
  const int q_row = warp_row0 + (lane & 15);
  const int k_row = (lane & 7) + 8 * (lane >> 4);
  const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1);
  const std::uint32_t q_lane = s_q + q_row * kRB + 16 * cuda::swizzle_chunk<kRowChunks>(q_row, lane >> 4);
  const std::uint32_t k_lane = k_row * kRB + 16 * cuda::swizzle_chunk<kRowChunks>(k_row, (lane >> 3) & 1);
  const std::uint32_t v_lane = v_row * kRB + 16 * cuda::swizzle_chunk<kRowChunks>(v_row, lane >> 4);

  float o[kMT][Cfg::kOTiles][4];
  float row_max[kMT][2], row_sum[kMT][2];
  flash::init_accumulators<Cfg>(o, row_max, row_sum);
  std::uint32_t qf[Cfg::kQInRegs ? kMT : 1][Cfg::kQInRegs ? Cfg::kDSteps : 1][4];

  for (int tile = 0; tile < num_tiles; ++tile) {
    cuda::cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    if (tile + Cfg::kStages - 1 < num_tiles) load_kv(tile + Cfg::kStages - 1);
    cuda::cp_async_commit();
    if constexpr (Cfg::kQInRegs) {
      if (tile == 0) flash::load_q_fragments<Cfg>(qf, q_lane);
    }
    const std::uint32_t k_tile = s_kv + (tile % Cfg::kStages) * Cfg::kStageBytes + k_lane;
    const std::uint32_t v_tile = k_tile - k_lane + Cfg::kKVBytes + v_lane;

#pragma unroll 1
    for (int sub = 0; sub < Cfg::kSubTiles; ++sub) {
      const int kv0 = tile * kBN + sub * Cfg::kSubN;
      const std::uint32_t k_addr = k_tile + sub * Cfg::kSubN * kRB, v_addr = v_tile + sub * Cfg::kSubN * kRB;
      // Keys no row of this warp may see (past its last row's diagonal, or past N_k):
      // they would add nothing (alpha = 1, p = 0), so the warp skips them. Warp-uniform;
      // it happens in the diagonal tiles when a tile is narrower than the Q tile.
      if (kv0 >= p.seq_k || (kCausal && static_cast<long long>(kv0) > static_cast<long long>(q0) + warp_row0 +
                                                                          Cfg::kWarpRows - 1 + p.causal_offset))
        continue;
      // ---- given: S = Q K^T, one k16 step at a time.
      float s[kMT][Cfg::kSTiles][4];
      flash::clear_scores<Cfg>(s);
#pragma unroll
      for (int ks = 0; ks < Cfg::kDSteps; ++ks) {
        std::uint32_t a[kMT][4];
        flash::load_q_operand<Cfg>(a, qf, q_lane, ks);
        flash::accumulate_qk<Cfg>(s, a, k_addr, ks);
      }
      if (tile_needs_mask<kCausal, Cfg::kSubN>(p, q0 + warp_row0, kv0)) {
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
          for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (key_hidden<kCausal>(p, q0 + warp_row0 + 16 * mi + g + 8 * (e >> 1), kv0 + 8 * j + 2 * t + (e & 1)))
                s[mi][j][e] = -INFINITY;
      }
      // YOUR step 8: the softmax on the fragments, then P as the A operand.
      std::uint32_t pk[kMT][Cfg::kSTiles][2];
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi) softmax_on_fragments(s[mi], row_max[mi], row_sum[mi], o[mi], pk[mi], p.scale_log2);
#pragma unroll
      for (int kk = 0; kk < Cfg::kKeySteps; ++kk) {
        std::uint32_t a[kMT][4];
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi) a_fragment(pk[mi], kk, a[mi]);
#pragma unroll
        for (int dp = 0; dp < Cfg::kDSteps; ++dp) {
          std::uint32_t vb[4];
          cuda::ldmatrix_x4_trans(vb, (v_addr ^ (32 * dp)) + 16 * kk * kRB);
          const std::uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
#pragma unroll
          for (int mi = 0; mi < kMT; ++mi) {
            cuda::mma_m16n8k16_bf16_f32(o[mi][2 * dp], a[mi], b0);
            cuda::mma_m16n8k16_bf16_f32(o[mi][2 * dp + 1], a[mi], b1);
          }
        }
      }
    }
  }

  // ---- given: O = acc / l through shared memory (the Q tile), lse.
  flash::write_output_and_lse<Cfg, kCausal>(smem, p, q0, warp_row0, g, t, o, row_max, row_sum);
}

template <class Cfg, bool kCausal>
void launch_cfg(const TcParams& p, std::int64_t batch_heads, cudaStream_t stream) {
  constexpr auto kernel = register_softmax_kernel<Cfg, kCausal>;
  cuda::opt_in_dynamic_smem<kernel>(Cfg::kSmemBytes);
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + Cfg::kBlockM - 1) / Cfg::kBlockM),
                  static_cast<unsigned>(batch_heads));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  COURSE_CHECK_LAUNCH("register_softmax_kernel");
}

template <template <int> class ConfigOf>
void launch_by_head_dim(const AttentionArgsBf16& a) {
  const TcParams p = make_tc_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cuda::dispatch_value<m03::kTcHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    using Cfg = ConfigOf<decltype(d)::value>;
    if (a.causal) launch_cfg<Cfg, true>(p, bh, a.stream);
    else launch_cfg<Cfg, false>(p, bh, a.stream);
  });
}

template <int D>
using Flash2Config = typename Flash2Choice<D>::type;

}  // namespace

/// Steps 10 and 11 (Hopper): your phases, in attention_tc_hopper.cu.
void attention_hopper(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

void attention(m03::AttentionStep step, const m03::AttentionArgsBf16& args) {
  m03::validate_attention_args(args, step, "attention");
  const std::string name = std::string("attention step ") + m03::step_name(step);
  switch (step) {
    case AttentionStep::tc_mma:
      if (!kTcMmaWritten) throw NotImplemented(name + " (TODO 6a-6c)", __FILE__);
      return launch_smem_softmax<false>(args);
    case AttentionStep::tc_swizzled_pipelined:
      if (!kTcMmaWritten || !kSwizzleWritten) throw NotImplemented(name + " (TODO 6 and 7)", __FILE__);
      return launch_smem_softmax<true>(args);
    case AttentionStep::tc_register_softmax:
      if (!kFragmentSoftmaxWritten) throw NotImplemented(name + " (TODO 8a-8c)", __FILE__);
      return launch_by_head_dim<RegisterSoftmaxConfig>(args);
    case AttentionStep::tc_flash2:
      if (!kFragmentSoftmaxWritten || !kFlash2Written) throw NotImplemented(name + " (TODO 8 and 9)", __FILE__);
      return launch_by_head_dim<Flash2Config>(args);
    case AttentionStep::tc_wgmma:
    case AttentionStep::tc_warp_specialized:
    case AttentionStep::tc_pingpong:
      return attention_hopper(step, args);  // attention_tc_hopper.cu
    default: break;  // fp32 steps: validate_attention_args rejected them
  }
}

}  // namespace course::exercise
