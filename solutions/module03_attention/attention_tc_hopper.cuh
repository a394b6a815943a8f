#pragma once
/// @file attention_tc_hopper.cuh
/// @brief The kernels of the Hopper steps of the attention ladder (sm_90a; elsewhere they throw
/// course::Unsupported): the tensor-core flash forward rebuilt on what Hopper added.
///   10. tc_wgmma             both products on warpgroup MMA: S = Q K^T with Q and K read from
///                            shared memory, O += P V with P straight from registers
///   11. tc_warp_specialized  Q, K, V loaded by the TMA, K/V into a ring of stages guarded by
///                            mbarriers; a producer warpgroup, two consumer warpgroups, setmaxnreg
///   12. tc_pingpong          the two consumers take turns on the tensor cores (named
///                            barriers): one's softmax runs under the other's GEMMs
///   13. tc_overlap           a consumer's softmax of tile j starts once S_j has landed,
///                            under its own P_{j-1} V_{j-1} (two commit groups, O rescaled after)
///   14. tc_persistent        one block per SM takes its next query tile from a counter, in
///                            step 13's order; the producer loads its Q and K/V under this one
///
/// Every step computes 128-row query tiles (one per block; step 14 several) as two warpgroups of 64 rows
/// (wgmma's M is 64), against K/V tiles of 128 keys, for head dims 64 and 128 only (the
/// tiles are whole 128-byte swizzle atoms along d; other head dims are rejected by name).
/// Every tile in shared memory has the layout wgmma's 128-byte-swizzle descriptors read and
/// the TMA's SWIZZLE_128B writes:
///
///   [rows][d] bf16 tile = d/64 column blocks, each [rows][64] (rows of 128 bytes);
///   16-byte chunk c of row r sits at chunk c ^ (r % 8) of its row (sw128_offset below).
///
///   S = Q K^T   A = Q  (K-major: d contiguous)     B = K  (K-major: B[k = d][n = key])
///   O += P V    A = P  (registers, bf16 pairs)      B = V  (MN-major: B[k = key][n = d],
///                                                          transposed on the fly)
///
/// Why P never touches shared memory: the accumulator of wgmma m64nN follows mma.sync's
/// m16n8 fragment order, n8 tile after n8 tile, and wgmma's register A operand follows
/// mma.sync's m16n8k16 A order. So, as in step 9, the accumulators of S's n8 tiles 2kk and
/// 2kk+1, packed to bf16, ARE the A fragment of P's k16 step kk.
///
/// Shapes as in the rest of the ladder (FlashAttention's benchmark: B*N = 16384 tokens,
/// H*d = 2048); an H100/H200 SXM has 132 SMs and ~990 TFLOP/s of dense bf16 wgmma at the
/// boost clock; mma.sync (step 9) reaches ~340-350 of it, cuDNN's forward ~600.
///
/// The kernels below are shared with the exercise (exercises/module03_attention/
/// attention_tc_hopper.cu includes this header): they call the parts that are each step's
/// idea through their `Phases` parameter -- the two wgmma products (issue_scores, issue_pv),
/// the K/V ring's hand-off (load_kv_tile on the producer's side, wait_kv_tile and
/// release_kv_tile on the consumers'), the ping-pong turns (wait_turn, pass_turn) and step
/// 13's two commit groups (issue_scores_then_pv); step 14 reuses step 13's. The
/// solution's phases are attention_tc_hopper_phases.cuh;
/// attention_tc_hopper.cu is the entry point.

#include "attention_tc_device.cuh"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/tma.hpp"
#include "module03/attention.hpp"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

// A build for "80;90a" also compiles this file for sm_80, where the kernel bodies are
// compiled out (wgmma, TMA and setmaxnreg need sm_90a): silence "declared but never
// referenced" for the helpers in that pass only.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

namespace course::solution::attn_tc_hopper {

namespace cc = ::course::cuda;
using namespace ::course::solution::attn_tc;  // TcParams, block order, masks, bf16 packing (attention_tc_device.cuh)

/// Throws course::Unsupported unless wgmma can run here (`step`: the step's name, "attention
/// step " is put before it only then).
inline void require_sm90a(const char* step) {
  if (!cc::sm90a_code_available())
    throw Unsupported(std::string("attention step ") + step,
                      "a Hopper GPU (compute capability 9.0) and a build for sm_90a "
                      "(CMAKE_CUDA_ARCHITECTURES=90a; wgmma, the TMA and setmaxnreg are not in plain sm_90)");
}

// ---------------------------------------------------------------- shared by steps 10-11 ---

/// The block's tiles: 128 query rows (two consumer warpgroups of 64), 128 keys per K/V tile.
template <int D_>
struct HopperTile {
  static constexpr int D = D_;
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = 128;
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kKVBytes = kBlockN * D * 2;     ///< one K (or V) tile
  static constexpr int kSRegs = kBlockN / 2;           ///< S accumulators per thread (m64n128)
  static constexpr int kORegs = D / 2;                 ///< O accumulators per thread (m64nD)
  static_assert(D == 64 || D == 128, "the Hopper steps take head_dim 64 or 128");
};

/// Byte offset of 16-byte chunk `c` (columns 8c .. 8c+7) of row `r` in a [kRows][D] tile
/// stored as 128-byte-swizzle atoms (file banner).
template <int kRows>
__device__ __forceinline__ std::uint32_t sw128_offset(int r, int c) {
  return static_cast<std::uint32_t>((c / 8) * kRows * 128 + r * 128 + (((c % 8) ^ (r % 8)) * 16));
}

/// Hides the scores of keys a row may not see (past N_k, or causal): element e of n8 tile j
/// is row `warp_row0 + g + 8 (e / 2)`, key `kv0 + 8 j + 2 t + e % 2` (g = lane / 4, t = lane % 4).
template <class T, bool kCausal>
__device__ __forceinline__ void mask_scores(float (&s)[T::kSRegs], const TcParams& p, int warp_row0, int kv0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (key_hidden<kCausal>(p, warp_row0 + g + 8 * (e >> 1), kv0 + 8 * j + 2 * t + (e & 1))) s[4 * j + e] = -INFINITY;
}

/// The online-softmax step on the S accumulators of this thread's two rows (g and g+8 of
/// its warp's 16), but for O: new running max (the quad's 4 lanes share a row: 2 shuffles),
/// the partial row sum rescaled by alpha = 2^(old max - new max), and P = 2^(s scale log2 e
/// - max) written over S, still in fp32. Returns alpha per row: O must be multiplied by it
/// (rescale_output) before the next P V adds to it. Step 9's arithmetic, unchanged.
template <class T>
__device__ __forceinline__ void softmax_in_place(float (&s)[T::kSRegs], float (&row_max)[2], float (&row_sum)[2],
                                                 float scale_log2, float (&alpha)[2]) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = row_max[hr];
#pragma unroll
    for (int j = 0; j < T::kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hr], s[4 * j + 2 * hr + 1]));
    mx = cc::warp_max<4>(mx);
    // A row that has seen only hidden keys keeps max = -inf: subtract 0, so that p = 0.
    const float m_scaled = mx == -INFINITY ? 0.f : mx * scale_log2;
    alpha[hr] = cc::ex2_approx(row_max[hr] * scale_log2 - m_scaled);
    row_max[hr] = mx;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < T::kBlockN / 8; ++j) {
      float& p0 = s[4 * j + 2 * hr];
      float& p1 = s[4 * j + 2 * hr + 1];
      p0 = cc::ex2_approx(fmaf(p0, scale_log2, -m_scaled));
      p1 = cc::ex2_approx(fmaf(p1, scale_log2, -m_scaled));
      sum += p0 + p1;
    }
    row_sum[hr] = row_sum[hr] * alpha[hr] + sum;
  }
}

/// P (fp32, in S's registers) packed to bf16 pairs in pk: the A fragments of P V.
template <class T>
__device__ __forceinline__ void pack_probabilities(const float (&s)[T::kSRegs], std::uint32_t (&pk)[T::kBlockN / 8][2]) {
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) pk[j][hr] = pack_bf16x2(s[4 * j + 2 * hr], s[4 * j + 2 * hr + 1]);
}

/// O *= alpha, row by row (the other half of the online-softmax step).
template <class T>
__device__ __forceinline__ void rescale_output(float (&o)[T::kORegs], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < T::D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e / 2];
}

/// The whole online-softmax step at once (steps 10-12, whose P V of the previous tile has
/// completed by then): P over S, O rescaled, P packed.
template <class T>
__device__ __forceinline__ void softmax_update(float (&s)[T::kSRegs], float (&o)[T::kORegs],
                                               std::uint32_t (&pk)[T::kBlockN / 8][2], float (&row_max)[2],
                                               float (&row_sum)[2], float scale_log2) {
  float alpha[2];
  softmax_in_place<T>(s, row_max, row_sum, scale_log2, alpha);
  rescale_output<T>(o, alpha);
  pack_probabilities<T>(s, pk);
}

/// lse = (max scale log2 e + log2 l) ln 2 of one row straight to global memory, by the
/// quad's lane 0 and for rows inside N_q (-inf for a row that saw no key: l = 0).
__device__ __forceinline__ void store_lse(float row_max, float l, const TcParams& p, int bh, int row) {
  constexpr float kLn2 = 0.6931471805599453f;
  if (p.lse != nullptr && threadIdx.x % 4 == 0 && row < p.seq_q)
    p.lse[static_cast<long long>(bh) * p.seq_q + row] =
        l > 0.f ? (row_max * p.scale_log2 + __log2f(l)) * kLn2 : -INFINITY;
}

/// What both epilogues share: per half row hr (the thread's rows lse_row0 and lse_row0 + 8),
/// l = the row's sum over its quad and inv = 1 / l (0 for a row that sees no key: O = 0),
/// `write_o(hr, inv)` stores that row's O / l, then store_lse writes its lse.
template <class WriteO>
__device__ __forceinline__ void finish_rows(const float (&row_max)[2], const float (&row_sum)[2], const TcParams& p,
                                            int bh, int lse_row0, WriteO&& write_o) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float l = cc::warp_sum<4>(row_sum[hr]);
    write_o(hr, l > 0.f ? 1.f / l : 0.f);
    store_lse(row_max[hr], l, p, bh, lse_row0 + 8 * hr);
  }
}

/// O / l as bf16 into this warpgroup's rows of the (finished) Q tile, in its swizzled
/// layout, and lse (finish_rows). `row0` is the thread's first row inside the 128-row tile
/// (g of its warp's 16).
template <class T>
__device__ __forceinline__ void stage_output(const float (&o)[T::kORegs], const float (&row_max)[2],
                                             const float (&row_sum)[2], unsigned char* q_tile, int row0,
                                             const TcParams& p, int bh, int q0) {
  const int t = threadIdx.x % 4;
  finish_rows(row_max, row_sum, p, bh, q0 + row0, [&](int hr, float inv) {
    const int r = row0 + 8 * hr;
#pragma unroll
    for (int j = 0; j < T::D / 8; ++j)
      *reinterpret_cast<std::uint32_t*>(q_tile + sw128_offset<T::kBlockM>(r, j) + 4 * t) =
          pack_bf16x2(o[4 * j + 2 * hr] * inv, o[4 * j + 2 * hr + 1] * inv);
  });
}

/// Step 14's epilogue: O / l as bf16 straight from the accumulators to global memory (no
/// staging: the Q tile may already hold the next tile's Q), and lse (finish_rows). Each
/// thread writes 4 bytes per n8 tile and row; a quad covers 16 contiguous bytes of a row.
/// `row` is the thread's first row in the tensor (g of its warp's 16; the second is row + 8).
template <class T>
__device__ __forceinline__ void store_output_from_registers(const float (&o)[T::kORegs], const float (&row_max)[2],
                                                            const float (&row_sum)[2], bf16* o_head,
                                                            std::int64_t seq_stride, int row, const TcParams& p,
                                                            int bh) {
  const int t = threadIdx.x % 4;
  finish_rows(row_max, row_sum, p, bh, row, [&](int hr, float inv) {
    const int r = row + 8 * hr;
    if (r >= p.seq_q) return;
    bf16* out = o_head + static_cast<std::int64_t>(r) * seq_stride + 2 * t;
#pragma unroll
    for (int j = 0; j < T::D / 8; ++j)
      *reinterpret_cast<std::uint32_t*>(out + 8 * j) = pack_bf16x2(o[4 * j + 2 * hr] * inv, o[4 * j + 2 * hr + 1] * inv);
  });
}

/// Rows [first_row, first_row + kRows) of the staged O tile to global memory (rows at or
/// past valid_rows are not written): 16-byte chunks, consecutive threads along a row.
template <class T, int kRows>
__device__ __forceinline__ void store_output(const unsigned char* q_tile, bf16* o_head, std::int64_t seq_stride,
                                             int q0, int first_row, int valid_rows, int thread, int threads) {
  constexpr int kChunks = T::D / 8;
  for (int i = thread; i < kRows * kChunks; i += threads) {
    const int r = first_row + i / kChunks, c = i % kChunks;
    if (r >= valid_rows) break;
    *reinterpret_cast<uint4*>(o_head + (static_cast<std::int64_t>(q0) + r) * seq_stride + 8 * c) =
        *reinterpret_cast<const uint4*>(q_tile + sw128_offset<T::kBlockM>(r, c));
  }
}

template <class T>
__device__ __forceinline__ void zero(float (&x)[T::kORegs]) {
#pragma unroll
  for (int i = 0; i < T::kORegs; ++i) x[i] = 0.f;
}

// ============================================================================
// Step 10: tc_wgmma -- both products on Hopper's warpgroup MMA.
//
// What limits step 9 on Hopper: mma.sync is Ampere's instruction. Each warp first loads
// its operands into registers with ldmatrix (K for S, V for P V: ~128 B of shared memory
// per mma at 32 query rows per warp) and a warp computes 32 rows. wgmma is issued by a
// warpgroup (4 warps) and reads B straight from shared memory for 64 rows at once: the
// shared-memory traffic per FLOP halves again, and no register holds a K or V fragment.
// Changes from step 9:
//  (a) S = Q K^T: wgmma m64n128k16 from two descriptors (issue_scores), d/16 of them per
//      K tile; the 64 S accumulators per thread are step 9's fragments, in the same order.
//  (b) O += P V: wgmma m64nDk16 with A = P from registers (issue_pv): no ldmatrix at all.
//  (c) Tiles in wgmma's 128-byte-swizzle layout (sw128_offset), filled by all 256 threads
//      with cp.async (load_tile); each thread fences its copies into the async proxy
//      (fence.proxy.async) before the block barrier, because wgmma reads shared memory
//      through it.
//  (d) Per K/V tile: wait for it + barrier, prefetch the next tile into the other stage,
//      S (commit, wait), mask, softmax, P V (commit, wait). The two warpgroups interleave
//      on their own: one's softmax runs while the other's wgmmas occupy the tensor cores.
// Tiles: 128 query rows (2 warpgroups x 64), 128-key K/V tiles, 2 stages; shared memory
// Q + 2 x (K + V) + 1 KB of alignment = 81 KB (d = 64) / 161 KB (d = 128): one block per SM.
// Prediction (d = 128, per K/V tile): the block's two warpgroups issue 8.4 MFLOP of wgmma,
// ~1.1 us of its SM's share of the ~990 TFLOP/s peak; the softmax is ~4.5 instructions
// per score, 64 scores per thread: ~290 issue slots per warp, ~0.3 us with two warps per
// scheduler. Inside a warpgroup the softmax waits for S and P V waits for the softmax;
// only the other warpgroup can fill those gaps, and nothing hides the barrier per tile.
// So ~0.45-0.55 of peak: ~420-520 TFLOP/s at d = 128 (1.2-1.5x step 9), and at d = 64,
// where the softmax per FLOP doubles, ~330-420.
// Measured (results: attn_bf16/solution/tc_wgmma/{B16_H32_N1024_d64,B4_H32_N4096_d64,B1_H32_N16384_d64}): 272.8 / 311.9 / 320.5 TFLOP/s
// Measured (results: attn_bf16/solution/tc_wgmma/{B16_H16_N1024_d128,B4_H16_N4096_d128,B1_H16_N16384_d128}): 329.0 / 390.5 / 408.6 TFLOP/s
// Measured (results: attn_bf16/solution/tc_wgmma/B4_H16_N4096_d128): 1.16 of attn_bf16/solution/tc_flash2/B4_H16_N4096_d128
// Missed: below both ranges. At d = 64 it is slower than step 9 (0.86-0.94x), at d = 128
// 1.0-1.3x. The barrier per tile and the serial chain inside each warpgroup cost more than
// predicted: the two warpgroups meet at every tile, so neither runs ahead into the other's
// softmax; and every thread still issues the copies. Step 11 removes both.
// ============================================================================
namespace wgmma_step {

constexpr int kThreads = 256;  // two warpgroups: both copy and compute
constexpr int kStages = 2;

template <int D>
constexpr int smem_bytes() {
  using T = HopperTile<D>;
  return T::kQBytes + kStages * 2 * T::kKVBytes + 1024;
}

/// cp.async copies of rows [row0, row0 + kRows) of one head into a [kRows][D] tile in the
/// 128-byte-swizzle layout; rows at or past `rows` are zero-filled (`any`: any valid global
/// address, never read). All kThreads threads take part.
template <int D, int kRows>
__device__ __forceinline__ void load_tile(std::uint32_t dst, const bf16* head, std::int64_t seq_stride, int row0,
                                          int rows, const void* any) {
  constexpr int kChunks = D / 8;
  static_assert(kRows * kChunks % kThreads == 0, "whole passes");
#pragma unroll
  for (int pass = 0; pass < kRows * kChunks / kThreads; ++pass) {
    const int i = static_cast<int>(threadIdx.x) + pass * kThreads;
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < rows;
    const bf16* src = head + static_cast<std::int64_t>(row0 + r) * seq_stride + 8 * c;
    cc::cp_async_16_zfill(dst + sw128_offset<kRows>(r, c), valid ? static_cast<const void*>(src) : any, valid ? 16 : 0);
  }
}

template <class Phases, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1) wgmma_kernel(const TcParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = HopperTile<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const std::uint32_t s_q = cc::smem_u32(smem);           // [128][D] Q, at the end O
  const std::uint32_t s_kv = s_q + T::kQBytes;            // kStages x ([128][D] K, [128][D] V)
  constexpr std::uint32_t kStageBytes = 2 * T::kKVBytes;

  int q_tile, bh;
  block_coordinates(kCausal, q_tile, bh);  // causal: the heaviest Q tiles first
  const int q0 = q_tile * T::kBlockM;
  const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
  const bf16* k_head = p.k + row_offset(p.ks, b, hk, 0);
  const bf16* v_head = p.v + row_offset(p.vs, b, hk, 0);
  load_tile<D, T::kBlockM>(s_q, p.q + row_offset(p.qs, b, h, 0), p.qs.seq, q0, p.seq_q, p.q);
  const int num_tiles = (kv_end<kCausal>(p, q0, T::kBlockM) + T::kBlockN - 1) / T::kBlockN;
  auto load_kv = [&](int tile) {
    const std::uint32_t stage = s_kv + (tile % kStages) * kStageBytes;
    load_tile<D, T::kBlockN>(stage, k_head, p.ks.seq, tile * T::kBlockN, p.seq_k, p.k);
    load_tile<D, T::kBlockN>(stage + T::kKVBytes, v_head, p.vs.seq, tile * T::kBlockN, p.seq_k, p.v);
  };
  if (num_tiles > 0) load_kv(0);
  cc::cp_async_commit();  // group 0: Q and K/V tile 0

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int row0 = 64 * wg + 16 * warp + lane / 4;  // this thread's first row in the Q tile
  float o[T::kORegs], s[T::kSRegs];
  zero<T>(o);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  std::uint32_t pk[T::kBlockN / 8][2];

  for (int tile = 0; tile < num_tiles; ++tile) {
    // Tile `tile` landed (for this thread: wait; for the async proxy: fence; for the
    // block: barrier, which also says every warpgroup is done with tile - 1's stage).
    cc::cp_async_wait<0>();
    cc::fence_proxy_async_smem();
    __syncthreads();
    if (tile + 1 < num_tiles) load_kv(tile + 1);
    cc::cp_async_commit();
    const std::uint32_t k_tile = s_kv + (tile % kStages) * kStageBytes, v_tile = k_tile + T::kKVBytes;
    const int kv0 = tile * T::kBlockN;

    cc::wgmma_fence();  // S's registers were read by the softmax of the last tile
    Phases::template issue_scores<T>(s, s_q, k_tile, 64 * wg);
    cc::wgmma_commit();
    cc::wgmma_wait<0>();
    const int warp_row0 = q0 + 64 * wg + 16 * warp;  // the warp's first query row
    if (tile_needs_mask<kCausal, T::kBlockN>(p, warp_row0, kv0)) mask_scores<T, kCausal>(s, p, warp_row0, kv0);
    softmax_update<T>(s, o, pk, row_max, row_sum, p.scale_log2);
    cc::wgmma_fence();  // O was rescaled and P written by ordinary instructions
    Phases::template issue_pv<T>(o, pk, v_tile);
    cc::wgmma_commit();
    cc::wgmma_wait<0>();
  }

  cc::cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done with Q
  stage_output<T>(o, row_max, row_sum, smem, row0, p, bh, q0);
  __syncthreads();
  store_output<T, T::kBlockM>(smem, p.o + row_offset(p.os, b, h, 0), p.os.seq, q0, 0, min(T::kBlockM, p.seq_q - q0),
                              static_cast<int>(threadIdx.x), kThreads);
#else
  (void)p;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

template <class Phases, int D, bool kCausal>
void launch(const TcParams& p, std::int64_t batch_heads, cudaStream_t stream) {
  constexpr auto kernel = wgmma_kernel<Phases, D, kCausal>;
  constexpr int kSmem = smem_bytes<D>();
  cc::opt_in_dynamic_smem<kernel>(kSmem);
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + 127) / 128),
                  static_cast<unsigned>(batch_heads));
  kernel<<<grid, kThreads, kSmem, stream>>>(p);
  COURSE_CHECK_LAUNCH("wgmma_kernel");
}

}  // namespace wgmma_step


// ============================================================================
// Step 11: tc_warp_specialized -- the TMA and a producer/consumer split.
//
// What limits step 10: every thread both copies and computes. Each K/V tile costs every
// thread 8-16 cp.async with their address arithmetic, a wait, a proxy fence and a block
// barrier, and the barrier makes the two warpgroups meet once per tile: the faster one
// waits for the slower one instead of running ahead into the next tile's wgmmas.
// Changes from step 10:
//  (a) The TMA copies whole boxes: [128 rows][64 columns] of Q, K or V (one per 64-column
//      block) described by a 4-D tensor map (column, row, head, batch) with the tensor's own
//      strides, so [B, H, N, d], [B, N, H, d] and padded rows all work; rows past N arrive
//      as zeros. It writes the 128-byte swizzle itself. One thread issues every copy.
//  (b) Warp specialization: warpgroup 0 is the producer (one thread issues the copies, the
//      group gives its registers back with setmaxnreg.dec to 24), warpgroups 1 and 2 are the
//      consumers (setmaxnreg.inc to 240: S, P and O fit without spilling at d = 128).
//  (c) A ring of kStages K/V stages with two mbarriers each: "full" (the producer arrives
//      with the stage's byte count, the TMA counts the bytes down) and "empty" (each
//      consumer warpgroup arrives once its P V has read the stage). Phases alternate 0, 1,
//      0, ... each time the ring wraps (RingPosition). No __syncthreads in the loop: each
//      consumer warpgroup runs at its own pace, up to kStages tiles ahead of the copies.
//  (d) The epilogue needs no block barrier either: each consumer warpgroup stages its own 64
//      rows of O in its own rows of the Q tile and meets only its own 4 warps (bar.sync
//      with 128 threads) before storing them.
// Tiles as in step 10; stages: 2 at d = 128 (Q 32 KB + 2 x 64 KB), 4 at d = 64 (Q 16 KB +
// 4 x 32 KB). One block (384 threads) per SM.
// Prediction: the copies leave the consumers' instruction stream entirely and the warpgroups
// decouple, so the tensor cores idle only while BOTH consumers run their softmax at once.
// ~1.15-1.3x step 10: ~480-540 TFLOP/s at d = 128, ~370-430 at d = 64. What remains is
// the serial S -> softmax -> P V chain inside each warpgroup (the next step's subject).
// Measured (results: attn_bf16/solution/tc_warp_specialized/{B16_H32_N1024_d64,B4_H32_N4096_d64,B1_H32_N16384_d64}): 325.9 / 396.9 / 419.7 TFLOP/s
// Measured (results: attn_bf16/solution/tc_warp_specialized/{B16_H16_N1024_d128,B4_H16_N4096_d128,B1_H16_N16384_d128}): 430.3 / 538.3 / 546.3 TFLOP/s
// Measured (results: attn_bf16/solution/tc_warp_specialized/B4_H16_N4096_d128): 1.38 of attn_bf16/solution/tc_wgmma/B4_H16_N4096_d128
// Met at d = 128 (482-578 TFLOP/s non-causal), above the range at d = 64 long N. Beside
// PyTorch in the same run (results page, "attention_bf16" in the PyTorch section, H200):
// 0.79-0.92x cuDNN's forward and 1.20-1.40x FlashAttention-2 at d = 64, 0.82-0.92x cuDNN
// and 1.48-1.65x FlashAttention-2 at d = 128; causal 0.71-0.95x cuDNN (lowest at N = 1024,
// where 16 tiles per head leave the SMs' last wave half empty). Below 0.9x cuDNN remain
// short sequences and d = 64: the softmax chain inside each warpgroup, which ping-pong
// scheduling of the two consumers and overlapping the next S with this softmax address.
// ============================================================================
// ============================================================================
// Step 12: tc_pingpong -- the two consumers take turns on the tensor cores.
//
// What limits step 11: inside a consumer warpgroup the work is a chain, S (tensor cores)
// -> softmax (ALUs, MUFU) -> P V (tensor cores), and nothing orders the two warpgroups, so
// they drift into lockstep: both run their softmax at once and the tensor cores idle.
// Changes from step 11 (the same kernel, Schedule::pingpong):
//  (a) The loop is regrouped into GEMM phases: phase j issues P_{j-1} V_{j-1} AND S_j =
//      Q K_j^T as one group, then the warpgroup waits for both and runs the softmax of
//      tile j. A last phase issues only P V of the last tile.
//  (b) Ping-pong (FlashAttention-3's schedule): a warpgroup issues a GEMM phase only in its
//      turn, a named barrier per warpgroup (Phases::wait_turn), and hands the turn over as
//      soon as its wgmmas are issued (Phases::pass_turn: bar.arrive on the other's barrier).
//      So one warpgroup's softmax runs under the other's GEMMs:
//
//        warpgroup 1:  [GEMM j ][softmax j   ][GEMM j+1][softmax j+1 ]
//        warpgroup 2:           [GEMM j ][softmax j   ][GEMM j+1][softmax ...
//
//  (c) A stage's V is read one phase later than its K, so at d = 128 the ring gets a third
//      stage (the producer would otherwise wait for the release of stage j-1 before it can
//      load tile j+1, one softmax before it is needed).
// Registers: as step 11 (P V of tile j-1 completes before the softmax of tile j rewrites P).
// Prediction: with the softmax (~0.3 us per tile at d = 128) hidden under the other
// warpgroup's GEMMs (~0.55 us), the tensor cores stay busy: +10-20% over step 11, ~600-650
// TFLOP/s at d = 128 (0.95-1.05x cuDNN), ~450-500 at d = 64.
// Outcome (H100, m03_bench, steps 11 and 12 in one run; beside PyTorch: the results page's
// H100 section, "Hopper attention steps on an H100"): d = 128 non-causal 1.07-1.11x step 11 (450-615
// TFLOP/s, the most at N = 16384), causal 1.01-1.07x; d = 64 0.98-1.03x (316-413): half of
// the predicted gain at d = 128, none at d = 64. Tests, 515 fuzz cases and memcheck,
// racecheck and synccheck: clean. Not profiled yet. The likely reason at d = 64: a GEMM
// phase there (64 x 128 x 64 twice) is short beside the softmax of 128 scores per row, so
// the turns wait for the softmax rather than hide it; and at every d the chain inside a
// warpgroup remains (its softmax still waits for its own S). FlashAttention-3's next
// step -- start the softmax of tile j under the warpgroup's own P V -- is step 13.
// ============================================================================
// ============================================================================
// Step 13: tc_overlap -- the softmax of tile j under the same warpgroup's P_{j-1} V_{j-1}.
//
// What limits step 12: a GEMM phase issues P_{j-1} V_{j-1} and S_j as one commit group and
// waits for both, so the softmax of tile j starts only after the P V it does not need. In
// each warpgroup's cycle the tensor cores run S and P V back to back while its ALUs wait.
// Changes from step 12 (the same kernel, Schedule::overlap):
//  (a) Two commit groups per phase, S_j first (Phases::issue_scores_then_pv); the warpgroup
//      waits with wgmma_wait<1> -- S_j has landed, P V may still run -- and starts the
//      softmax at once: FlashAttention-3's intra-warpgroup overlap, here inside ping-pong.
//  (b) The softmax is split where P V's operands are: softmax_in_place computes the new max,
//      the row sums and P over S's own fp32 registers, leaving O and the packed P (pk) alone
//      while P V reads pk and adds into O; after wgmma_wait<0> the stage is released, O is
//      rescaled (rescale_output) and P packed (pack_probabilities). So no second P buffer:
//      an earlier version packed P into a second array while P V ran, and ptxas serialized
//      the wgmmas (warning C7513: registers of an in-flight wgmma defined by other code).
//  (c) cc::pin_registers after each partial wait: the compiler knows nothing of what
//      wgmma_wait<1> orders and must not move the softmax's reads of S above it.
// Registers: as step 12 (S, O, pk), no spills at d = 128.
// Prediction (written before the run): the softmax no longer waits for P V: +10-20% over
// step 12 at d = 64 (P V as long as S there), +3-8% at d = 128.
// Outcome (H100, one run: m03_bench for steps 11-13, and scripts/compare_torch.py on the
// same tensors as SDPA; the results page's H100 section, apart from its H200 main run):
// over step 12, d = 64 1.00-1.09x non-causal, 0.88-1.09x causal; d = 128 1.02-1.07x from
// N = 4096 on, 0.82-0.98x at N = 1024-2048 in m03_bench but 1.02x and 1.01x beside SDPA in
// the comparison script's run (short runs: noisy) -- below the prediction at d = 64. Up to
// 614 TFLOP/s (d = 128, N = 16384). Beside cuDNN's forward: 0.91-1.00x at d = 128 (causal
// 0.91-1.01x from N = 4096, 0.64x at N = 1024-2048), 0.85-0.96x at d = 64 (causal
// 0.71-0.94x); 1.29-1.85x FlashAttention-2 non-causal. Tests, 515 fuzz cases, memcheck,
// racecheck and synccheck: clean. Left: short causal sequences, where a block has 1-16
// K/V tiles (N = 1024-2048) and its prologue (Q and the first K/V by TMA) and epilogue run with the
// tensor cores idle (one 225 KB block per SM): the persistent schedule that overlaps
// them is the next step. Not profiled with ncu (no device time was left).
// ============================================================================
namespace ws_step {

constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;

/// Named barriers of the ping-pong schedule (step 12): kTurnBarrier + w is consumer
/// warpgroup w's turn to issue its GEMMs (0 is __syncthreads'; 1 + w consumer warpgroup
/// w's own: step 13's epilogue, step 14's tiles without K/V).
constexpr int kTurnBarrier = 3;

/// How a consumer warpgroup orders its work on one K/V tile: step 11 one tile after the
/// other; step 12 GEMM phases in turns with the other warpgroup; step 13 as step 12, with
/// the softmax of tile j started as soon as S_j has landed, under its own P_{j-1} V_{j-1}.
enum class Schedule { serial, pingpong, overlap };

/// The K/V ring: 4 stages at d = 64; at d = 128 2 (step 11) or, for the GEMM-phase
/// schedules, which hold a stage's V one phase longer, 3 (Q 32 KB + 3 x 64 KB: 225 KB of the 227).
template <int D, Schedule kSchedule = Schedule::serial>
struct Ring {
  static constexpr int kStages = D == 64 ? 4 : (kSchedule != Schedule::serial ? 3 : 2);
  static constexpr int kStageBytes = 2 * HopperTile<D>::kKVBytes;  ///< K tile, then V tile
  static constexpr int kBarrierOffset = HopperTile<D>::kQBytes + kStages * kStageBytes;
  static constexpr int kSmemBytes = kBarrierOffset + (2 * kStages + 1) * 8 + 1024;
};

/// The stage and phase parity of the ring position a loop is at; both sides advance it once
/// per K/V tile, so they agree on which stage and which phase tile t uses.
struct RingPosition {
  int stage = 0;
  std::uint32_t phase = 0;
  template <int kStages>
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

/// One stage of the K/V ring as a loop iteration sees it: where its K tile starts in shared
/// memory (V follows kKVBytes later), its two barriers, and the parity of the phase this
/// use of the stage completes on "full" (the producer waits for parity ^ 1 on "empty":
/// the previous use's release; on the first pass that phase counts as completed).
struct KvStage {
  std::uint32_t smem, full, empty;
  std::uint32_t phase;
};

/// What the kernel gets besides the tensor maps: TcParams, and per tensor whether its head
/// and batch coordinates are real (1) or broadcast (0: the map has extent 1 there).
struct WsParams {
  TcParams p;
  int q_head, q_batch, kv_head, kv_batch;
  int group_heads;  ///< causal tile order: heads per group (grouped_tile_coordinates)
};

/// The GEMM phases of one consumer warpgroup over the num_tiles (> 0) K/V tiles of its
/// query tile, for the schedules of steps 12-14 (kSchedule pingpong or overlap): O, the
/// row max and the row sums accumulate in o, row_max, row_sum; `ring` advances once per K/V
/// tile. Step 12: GEMM phase j issues P_{j-1} V_{j-1} and S_j = Q K_j^T together, in turn
/// with the other warpgroup; the softmax of tile j runs while the other's GEMM phase does.
/// Software-pipelined: phase 0 issues S_0 only, the last phase P V of the last tile only,
/// so that the steady-state loop issues both unconditionally. Both warpgroups run
/// num_tiles + 1 phases, so the turns alternate strictly from one query tile to the next.
///  - `open_turns`: warpgroup 1 opens warpgroup 0's first turn (the block's first tile);
///  - `pass_last`: warpgroup 1 passes its turn after its last phase as well (step 14:
///    warpgroup 0 starts the block's next tile under warpgroup 1's epilogue, and takes one
///    unused turn at the very end); otherwise it leaves that pass out (nobody waits for it).
///  - `q_done()` runs once S of the last tile has landed: Q is no longer read (step 14).
template <class Phases, class T, class R, bool kCausal, Schedule kSchedule, class QDone>
__device__ __forceinline__ void gemm_phases(float (&o)[T::kORegs], float (&row_max)[2], float (&row_sum)[2],
                                            RingPosition& ring, std::uint32_t s_q, std::uint32_t s_kv,
                                            std::uint32_t full_bar, std::uint32_t empty_bar, const TcParams& p,
                                            int num_tiles, int cw, int warp_row0, bool open_turns, bool pass_last,
                                            QDone q_done) {
  static_assert(kSchedule != Schedule::serial, "step 11 runs its own loop");
  float s[T::kSRegs];
  std::uint32_t pk[T::kBlockN / 8][2];
  const auto stage_at = [&](const RingPosition& r) {
    return KvStage{s_kv + r.stage * R::kStageBytes, full_bar + 8 * r.stage, empty_bar + 8 * r.stage, r.phase};
  };
  const auto mask_tile = [&](int tile) {
    const int kv0 = tile * T::kBlockN;
    if (tile_needs_mask<kCausal, T::kBlockN>(p, warp_row0, kv0)) mask_scores<T, kCausal>(s, p, warp_row0, kv0);
  };
  const auto softmax_of = [&](int tile) {
    mask_tile(tile);
    softmax_update<T>(s, o, pk, row_max, row_sum, p.scale_log2);
  };
  if (cw == 1 && open_turns) Phases::pass_turn(cw);
  KvStage prev = stage_at(ring);  // phase 0: S_0
  Phases::wait_kv_tile(prev);
  Phases::wait_turn(cw);
  cc::wgmma_fence();
  Phases::template issue_scores<T>(s, s_q, prev.smem, 64 * cw);
  cc::wgmma_commit();
  Phases::pass_turn(cw);
  cc::wgmma_wait<0>();
  if (num_tiles == 1) q_done();
  softmax_of(0);
  ring.advance<R::kStages>();
  for (int tile = 1; tile < num_tiles; ++tile) {  // phase j: P_{j-1} V_{j-1} and S_j
    const KvStage st = stage_at(ring);
    Phases::wait_kv_tile(st);
    if constexpr (kSchedule == Schedule::pingpong) {
      Phases::wait_turn(cw);  // the tensor cores are this warpgroup's ...
      cc::wgmma_fence();
      Phases::template issue_pv<T>(o, pk, prev.smem + T::kKVBytes);
      Phases::template issue_scores<T>(s, s_q, st.smem, 64 * cw);
      cc::wgmma_commit();
      Phases::pass_turn(cw);  // ... and, once issued, the other's
      cc::wgmma_wait<0>();
      if (tile == num_tiles - 1) q_done();
      Phases::release_kv_tile(prev);
      softmax_of(tile);
    } else {
      // Step 13: S_j first, in a group of its own, then P_{j-1} V_{j-1}; the softmax of
      // tile j starts once S_j has landed and runs while P_{j-1} V_{j-1} still reads
      // the old P (pk) and adds into O. So it leaves P in S's fp32 registers and O
      // alone until that product has completed; only then is O rescaled and P packed.
      Phases::wait_turn(cw);
      cc::wgmma_fence();
      Phases::template issue_scores_then_pv<T>(s, o, pk, s_q, st.smem, prev.smem + T::kKVBytes, 64 * cw);
      Phases::pass_turn(cw);
      cc::wgmma_wait<1>();  // S_j has landed; P_{j-1} V_{j-1} may still run
      cc::pin_registers(s);
      if (tile == num_tiles - 1) q_done();
      float alpha[2];
      mask_tile(tile);
      softmax_in_place<T>(s, row_max, row_sum, p.scale_log2, alpha);
      cc::wgmma_wait<0>();  // P_{j-1} V_{j-1} has completed: O and pk are free
      cc::pin_registers(o);
      Phases::release_kv_tile(prev);
      rescale_output<T>(o, alpha);
      pack_probabilities<T>(s, pk);
    }
    prev = st;
    ring.advance<R::kStages>();
  }
  Phases::wait_turn(cw);  // the last phase: P V of the last tile
  cc::wgmma_fence();
  Phases::template issue_pv<T>(o, pk, prev.smem + T::kKVBytes);
  cc::wgmma_commit();
  if (cw == 0 || pass_last) Phases::pass_turn(cw);
  cc::wgmma_wait<0>();
  Phases::release_kv_tile(prev);
}

template <class Phases, int D, bool kCausal, Schedule kSchedule>
__global__ void __launch_bounds__(kThreads, 1)
    warp_specialized_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                            const __grid_constant__ CUtensorMap tmap_v, const WsParams wp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = HopperTile<D>;
  using R = Ring<D, kSchedule>;
  const TcParams& p = wp.p;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const std::uint32_t s_q = cc::smem_u32(smem);   // [128][D] Q, at the end O
  const std::uint32_t s_kv = s_q + T::kQBytes;    // kStages x ([128][D] K, [128][D] V)
  const std::uint32_t full_bar = s_q + R::kBarrierOffset;  // full[s] at full_bar + 8 s
  const std::uint32_t empty_bar = full_bar + 8 * R::kStages;
  const std::uint32_t q_bar = empty_bar + 8 * R::kStages;

  int q_tile, bh;
  grouped_tile_coordinates(kCausal, static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x,
                           static_cast<int>(gridDim.x), static_cast<int>(gridDim.y), wp.group_heads, q_tile, bh);
  const int q0 = q_tile * T::kBlockM;
  const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
  const int num_tiles = (kv_end<kCausal>(p, q0, T::kBlockM) + T::kBlockN - 1) / T::kBlockN;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < R::kStages; ++s) {
      cc::mbarrier_init(full_bar + 8 * s, 1);                 // the producer's arrive (+ bytes)
      cc::mbarrier_init(empty_bar + 8 * s, T::kBlockM / 64);  // one arrive per consumer warpgroup
    }
    cc::mbarrier_init(q_bar, 1);
    cc::fence_barrier_init();
  }
  __syncthreads();  // the only block-wide barrier: the mbarriers exist for everyone

  RingPosition ring;
  if (wg == 0) {
    // ---- Producer: thread 0 issues every copy; the rest of the group just lowers its registers.
    cc::setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == 0) {
      cc::tma_prefetch_descriptor(&tmap_q);
      cc::tma_prefetch_descriptor(&tmap_k);
      cc::tma_prefetch_descriptor(&tmap_v);
      const int qh = h * wp.q_head, qb = b * wp.q_batch, kh = hk * wp.kv_head, kb = b * wp.kv_batch;
      cc::mbarrier_arrive_expect_tx(q_bar, T::kQBytes);
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) cc::tma_load_4d(s_q + cb * T::kBlockM * 128, &tmap_q, q_bar, 64 * cb, q0, qh, qb);
      for (int tile = 0; tile < num_tiles; ++tile, ring.advance<R::kStages>()) {
        const KvStage st{s_kv + ring.stage * R::kStageBytes, full_bar + 8 * ring.stage, empty_bar + 8 * ring.stage,
                         ring.phase};
        Phases::template load_kv_tile<T, R>(st, &tmap_k, &tmap_v, tile * T::kBlockN, kh, kb);
      }
    }
  } else {
    // ---- Consumers: warpgroup 1 computes rows 0-63 of the Q tile, warpgroup 2 rows 64-127.
    cc::setmaxnreg_inc<kConsumerRegisters>();
    const int cw = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int row0 = 64 * cw + 16 * warp + lane / 4;  // this thread's first row in the Q tile
    const int warp_row0 = q0 + 64 * cw + 16 * warp;
    float o[T::kORegs];
    zero<T>(o);
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    cc::mbarrier_wait(q_bar, 0);  // always: O is staged where Q lands
    if constexpr (kSchedule != Schedule::serial) {
      // Steps 12-13: the GEMM phases (gemm_phases above); one query tile per block, so
      // warpgroup 1 opens the turns and keeps its last pass.
      if (num_tiles > 0)
        gemm_phases<Phases, T, R, kCausal, kSchedule>(o, row_max, row_sum, ring, s_q, s_kv, full_bar, empty_bar, p,
                                                       num_tiles, cw, warp_row0, true, false, [] {});
    } else {
      // Step 11: S, softmax, P V, one tile after the other.
      float s[T::kSRegs];
      std::uint32_t pk[T::kBlockN / 8][2];
      for (int tile = 0; tile < num_tiles; ++tile, ring.advance<R::kStages>()) {
        const KvStage st{s_kv + ring.stage * R::kStageBytes, full_bar + 8 * ring.stage, empty_bar + 8 * ring.stage,
                         ring.phase};
        const std::uint32_t k_tile = st.smem, v_tile = st.smem + T::kKVBytes;
        const int kv0 = tile * T::kBlockN;
        Phases::wait_kv_tile(st);  // K and V of this tile have landed
        cc::wgmma_fence();
        Phases::template issue_scores<T>(s, s_q, k_tile, 64 * cw);
        cc::wgmma_commit();
        cc::wgmma_wait<0>();
        if (tile_needs_mask<kCausal, T::kBlockN>(p, warp_row0, kv0)) mask_scores<T, kCausal>(s, p, warp_row0, kv0);
        softmax_update<T>(s, o, pk, row_max, row_sum, p.scale_log2);
        cc::wgmma_fence();
        Phases::template issue_pv<T>(o, pk, v_tile);
        cc::wgmma_commit();
        cc::wgmma_wait<0>();
        Phases::release_kv_tile(st);  // this warpgroup is done with the stage
      }
    }
    // Epilogue: this warpgroup's rows only (its own rows of Q are no longer read).
    stage_output<T>(o, row_max, row_sum, smem, row0, p, bh, q0);
    cc::named_barrier_sync(1 + cw, 128);
    store_output<T, 64>(smem, p.o + row_offset(p.os, b, h, 0), p.os.seq, q0, 64 * cw, min(T::kBlockM, p.seq_q - q0),
                        static_cast<int>(threadIdx.x % 128), 128);
  }
#else
  (void)tmap_q, (void)tmap_k, (void)tmap_v, (void)wp;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

/// The 4-D map (column, row, head, batch) of one attention tensor, boxes of [128 rows][64
/// columns]; a broadcast head or batch (stride 0) becomes extent 1, *real = 0.
inline CUtensorMap attention_map(const bf16* base, std::int64_t heads, std::int64_t batch, std::int64_t seq, std::int64_t d,
                          const AttentionStrides& st, int* head_real, int* batch_real) {
  *head_real = st.head != 0 ? 1 : 0;
  *batch_real = st.batch != 0 ? 1 : 0;
  const std::int64_t dims[4] = {d, seq, *head_real ? heads : 1, *batch_real ? batch : 1};
  const std::int64_t strides[3] = {st.seq, *head_real ? st.head : st.seq, *batch_real ? st.batch : st.seq};
  const int box[4] = {64, 128, 1, 1};
  return make_tma_map_bf16(base, 4, dims, strides, box, TmaSwizzle::bytes128);
}

/// The step's name in messages.
constexpr const char* schedule_step_name(Schedule s) {
  return s == Schedule::serial ? "attention step tc_warp_specialized"
                               : (s == Schedule::pingpong ? "attention step tc_pingpong" : "attention step tc_overlap");
}

/// Q, K and V as the TMA reads them.
struct TensorMaps {
  CUtensorMap q, k, v;
};

/// The tensor maps of `a` for head dim D, and wp's head and batch flags; `step` names the
/// step in the Unsupported thrown when K and V broadcast different dimensions.
template <int D>
TensorMaps tensor_maps(const AttentionArgsBf16& a, WsParams& wp, const char* step) {
  TensorMaps m;
  m.q = attention_map(a.q, a.heads, a.batch, a.seq_q, D, a.q_strides, &wp.q_head, &wp.q_batch);
  int v_head = 0, v_batch = 0;
  m.k = attention_map(a.k, a.kv_heads, a.batch, a.seq_k, D, a.k_strides, &wp.kv_head, &wp.kv_batch);
  m.v = attention_map(a.v, a.kv_heads, a.batch, a.seq_k, D, a.v_strides, &v_head, &v_batch);
  if (v_head != wp.kv_head || v_batch != wp.kv_batch)
    throw Unsupported(step, "K and V broadcast the same dimensions (a stride of 0 in one but not the other)");
  return m;
}

template <class Phases, int D, bool kCausal, Schedule kSchedule>
void launch(const AttentionArgsBf16& a, const TcParams& p) {
  WsParams wp{};
  wp.p = p;
  const TensorMaps m = tensor_maps<D>(a, wp, schedule_step_name(kSchedule));
  constexpr auto kernel = warp_specialized_kernel<Phases, D, kCausal, kSchedule>;
  constexpr int kSmem = Ring<D, kSchedule>::kSmemBytes;
  cc::opt_in_dynamic_smem<kernel>(kSmem);
  const dim3 grid(static_cast<unsigned>((a.seq_q + 127) / 128), static_cast<unsigned>(a.batch * a.heads));
  wp.group_heads = causal_group_heads(grid.x, grid.y, device_properties().multiProcessorCount);  // 1 block per SM
  kernel<<<grid, kThreads, kSmem, a.stream>>>(m.q, m.k, m.v, wp);
  COURSE_CHECK_LAUNCH("warp_specialized_kernel");
}

}  // namespace ws_step

// ============================================================================
// Step 14: tc_persistent -- one block per SM takes query tiles one after another, in step
// 13's order, from a counter; the producer loads the next tile's Q and K/V while the
// consumers finish the current one.
//
// What limits step 13: a block owns one (query tile, batch*head) pair. With causal masking
// and short sequences it has 1-16 K/V tiles (N = 1024, d = 128: 4.5 on average, 8.4 MFLOP
// each, ~1.9 us at 600 TFLOP/s over 132 SMs), and around them the tensor cores idle: a new
// block starts only when the old one has exited (one 225 KB block per SM), then waits for
// its Q and first K/V tile by TMA (~1-2 us from DRAM); at the end each consumer stages its
// O rows in the Q tile, meets its own 4 warps and stores them. That is ~2-3 us per block
// beside ~8 us of wgmma: step 13 runs
// at 0.64x cuDNN there (d = 128, N = 1024-2048 causal), 0.71-0.79x at d = 64 up to N = 4096.
// Changes from step 13 (persistent_kernel below; the consumers' loop is step 13's,
// gemm_phases with Schedule::overlap):
//  (a) The grid is one block per SM (device_properties().multiProcessorCount, fewer when
//      there are fewer tiles). Work tile w is (q tile, batch*head) in step 13's block order
//      (grouped_tile_coordinates with w as the linear block number; causal: heads in
//      groups, longest query tile first inside a group, so that the tiles running together
//      share K/V in L2), and the tiles START in w order, as step 13's blocks do: a dynamic
//      schedule. Block i takes tile i first, then whichever tile is next on a counter of the
//      launch (gridDim.x + atomicAdd(counter, 1), fetched while the current tile's K/V
//      loads; the host allocates and zeroes the counter on the launch's stream). The
//      producer hands each tile to the consumers through its Q stage: a shared-memory int
//      per stage, written before the q_full arrive; after the last tile a sentinel (w >=
//      work_tiles) ends the consumers' loop.
//      Why not the static walk i, i + grid, i + 2 grid, ... (this step's first version):
//      causal tiles differ in length, so the blocks drift apart and the tiles in flight are
//      no longer consecutive ones: they stop sharing K/V in L2. Seen on an H100 (ncu, B = 1,
//      H = 16, N = 16384, d = 128, causal): 3.0 GB read from DRAM against 1.18 GB for step 13
//      (L2 hit rate 59% against 79%), 0.86x the speed of step 13; 0.81-0.89x of step 13 at
//      d = 128 causal, N = 1024-2048; faster than step 13 only at d = 64 (up to 12%).
//  (b) The barriers are initialized once. The K/V ring's RingPosition runs on across tiles
//      (producer and consumers advance it once per K/V tile, so they agree on every stage
//      and parity); Q becomes a ring too, kQStages tiles with a "q_full" (TMA bytes) and a
//      "q_empty" barrier each (one arrival per consumer thread once its LAST S of the tile
//      has landed: Q is read by S only, and the tile slot by every thread before its S). Both sides advance the Q ring once per tile,
//      including tiles without any K/V tile (causal, N_q > N_k: q_full completes by the
//      producer's arrive alone, no bytes, and each consumer thread releases the stage as
//      soon as it has read the slot) and the sentinel; such tiles load nothing else, and their
//      O = 0 and lse = -inf are written all the same.
//  (c) The producer issues, per tile, K/V tile 0, then Q (waiting on q_empty), then the
//      other K/V tiles: the stage that K/V tile 0 of the next tile reuses is released at
//      least one GEMM phase before the current tile's last S lands (q_empty), so it never
//      waits behind the Q hand-off.
//  (d) O leaves the accumulators straight for global memory (store_output_from_registers):
//      no staging, so the Q tile is free as soon as both consumers' last S has landed, and
//      no barrier in the epilogue. Each thread writes 4 bytes per n8 tile and row (a quad:
//      16 contiguous bytes, half a 32-byte sector; the L2 merges them before DRAM): 32 KB
//      per tile at d = 128, beside ~38 MFLOP of wgmma in an average causal tile at N = 1024.
//  (e) The turns run across tiles: warpgroup 1 opens warpgroup 0's first turn once, then
//      passes after every GEMM phase including each tile's last, so warpgroup 0 starts the
//      next tile's S_0 while warpgroup 1 still runs its last P V and epilogue; warpgroup 0
//      takes one unused turn at the end, so that every pass has its wait. Both warpgroups
//      run num_tiles + 1 phases per tile, so the turns alternate strictly across tiles.
// Shared memory, where O staged in Q would have needed a second Q buffer:
//   d = 128: Q 32 KB + 3 x 64 KB (K, V) = 224 KB + 8 barriers + the tile slot + 1 KB
//            alignment = 230,468 B of the 232,448 (227 KB); a second Q tile (256 KB) does not fit. Alternatives:
//            2 Q + 2 K/V stages (192 KB: kQStagesAt128 = 2 below, which measures whether
//            the third stage of step 12 still matters), or O staged in the K half of the
//            last stage (free once both last S have landed, but then the stage's release
//            waits for the stores, and one warpgroup's O would overwrite K rows the other's
//            S may still read: a cross-warpgroup barrier per tile). Direct stores cost none.
//   d = 64:  2 Q x 16 KB + 4 x 32 KB = 160 KB (164,968 B): Q of the next tile loads during
//            the whole current tile.
// Registers: as step 13 (S 64, O 64 at d = 128, packed P 32 per consumer thread) plus the
// tile walk (tile index, Q ring position, flags): no spills at 240. The producer thread
// fits its 24: the next tile's index replaces the current one as soon as Q is issued.
// Prediction: the ~2-3 us per block that step 13 spends without wgmma shrink to the wait
// for the next Q at d = 128 (its load starts when the last S of the tile has landed, ~1 us
// of TMA latency against ~0.5-1 us of softmax, last P V and epilogue) and to nothing at
// d = 64. Causal, N = 1024-2048: +15-25% over step 13 at d = 128 (0.74-0.8x cuDNN), +10-20%
// at d = 64 up to N = 4096; non-causal N = 1024-2048 +3-8%; from N = 4096 on (32+ K/V
// tiles per block) within +-3% of step 13. If d = 128 gains clearly less than d = 64, the
// single Q buffer is the first suspect (try kQStagesAt128 = 2).
// Prediction for the dynamic schedule: DRAM reads and L2 hit rate back to step 13's at
// N = 16384, d = 128 causal; step 14 >= step 13 within noise at d = 128, causal and
// non-causal long N, and at d = 128 causal N = 1024-2048; the d = 64 gains kept. Costs: an
// atomic per tile (hidden under the loads) and, per launch, a 4-byte stream-ordered
// allocation and memset (a few us of host and stream time, visible only on the shortest runs).
// Outcome (H100, compare_torch.py, step 14 / step 13 in one run; m03_bench agrees within 0.05
// now that the counter comes from scratch_pool): causal N = 1024: 1.19x at d = 64 (0.87x
// cuDNN, step 13 0.73x), 1.12x at d = 128 (0.92x cuDNN); causal N = 2048: 1.06x and 1.00x;
// non-causal N = 1024-2048 0.99-1.08x. From N = 4096 on it loses: 0.96-0.97x at d = 128,
// 0.88-0.96x causal. The drift is gone (ncu, N = 16384: 222 MB from DRAM at d = 128,
// 203 MB at d = 64 causal, both as step 13's), so the loss is not memory: at d = 128 the
// tensor pipe is busy 76.7% against 79.4% and the barrier stalls per issue rise 12%; at
// d = 64 causal 45.7% against 49.5%. Not yet explained; the suspects are the O stores
// straight from registers (step 13 stages O and stores it by TMA, off the critical path)
// and the extra turn per tile. So the top step depends on the shape: 14 up to N = 2048,
// 13 beyond.
// ============================================================================
namespace persistent_step {

using ws_step::KvStage;
using ws_step::RingPosition;
using ws_step::Schedule;
using ws_step::WsParams;
using ws_step::kThreads;

/// Q tiles at d = 128: 1 (the K/V ring keeps step 13's 3 stages), or 2 (the ring drops
/// to 2 stages: 192 KB). At d = 64 always 2 (and 4 stages).
constexpr int kQStagesAt128 = 1;

/// Shared memory of step 14: kQStages Q tiles, then step 13's K/V ring, then the barriers
/// (full and empty per K/V stage, q_full and q_empty per Q tile), then one int per Q tile:
/// the work tile that stage holds (change (a)).
template <int D>
struct Ring {
  using Step13 = ws_step::Ring<D, Schedule::overlap>;
  static constexpr int kQStages = D == 64 ? 2 : kQStagesAt128;
  static constexpr int kStages = D == 128 && kQStages == 2 ? 2 : Step13::kStages;
  static constexpr int kStageBytes = Step13::kStageBytes;  ///< K tile, then V tile
  static constexpr int kKvOffset = kQStages * HopperTile<D>::kQBytes;
  static constexpr int kBarrierOffset = kKvOffset + kStages * kStageBytes;
  static constexpr int kTileSlotOffset = kBarrierOffset + (2 * kStages + 2 * kQStages) * 8;
  static constexpr int kSmemBytes = kTileSlotOffset + kQStages * 4 + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than a Hopper block may have");
};

template <class Phases, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1)
    persistent_kernel(const __grid_constant__ CUtensorMap tmap_q, const __grid_constant__ CUtensorMap tmap_k,
                      const __grid_constant__ CUtensorMap tmap_v, const WsParams wp, int q_tiles, int work_tiles,
                      int* tile_counter) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = HopperTile<D>;
  using R = Ring<D>;
  const TcParams& p = wp.p;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const std::uint32_t s_q = cc::smem_u32(smem);    // kQStages x [128][D] Q
  const std::uint32_t s_kv = s_q + R::kKvOffset;   // kStages x ([128][D] K, [128][D] V)
  const std::uint32_t full_bar = s_q + R::kBarrierOffset;  // full[s] at full_bar + 8 s
  const std::uint32_t empty_bar = full_bar + 8 * R::kStages;
  const std::uint32_t q_full_bar = empty_bar + 8 * R::kStages;  // q_full[i] at q_full_bar + 8 i
  const std::uint32_t q_empty_bar = q_full_bar + 8 * R::kQStages;
  int* const tile_slot = reinterpret_cast<int*>(smem + R::kTileSlotOffset);  // the work tile of each Q stage
  const int batch_heads = work_tiles / q_tiles;
  const int wg = threadIdx.x / 128;
  // Work tile w: its first query row, batch*head pair and number of K/V tiles.
  const auto tile_of = [&](int w, int& q0, int& bh, int& num_tiles) {
    int q_tile;
    grouped_tile_coordinates(kCausal, w, q_tiles, batch_heads, wp.group_heads, q_tile, bh);
    q0 = q_tile * T::kBlockM;
    num_tiles = (kv_end<kCausal>(p, q0, T::kBlockM) + T::kBlockN - 1) / T::kBlockN;
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < R::kStages; ++s) {
      cc::mbarrier_init(full_bar + 8 * s, 1);                 // the producer's arrive (+ bytes)
      cc::mbarrier_init(empty_bar + 8 * s, T::kBlockM / 64);  // one arrive per consumer warpgroup
    }
    for (int i = 0; i < R::kQStages; ++i) {
      cc::mbarrier_init(q_full_bar + 8 * i, 1);
      // Every consumer thread arrives (256): each has read the stage's tile slot by then, so
      // the producer's next write to it is ordered after every read by the mbarrier itself.
      cc::mbarrier_init(q_empty_bar + 8 * i, T::kBlockM / 64 * 128);
    }
    cc::fence_barrier_init();
  }
  __syncthreads();  // the only block-wide barrier: the mbarriers exist for everyone

  RingPosition ring, q_ring;  // both run on from tile to tile, on both sides
  if (wg == 0) {
    // ---- Producer: thread 0 issues every copy of every tile of this block.
    cc::setmaxnreg_dec<ws_step::kProducerRegisters>();
    if (threadIdx.x == 0) {
      cc::tma_prefetch_descriptor(&tmap_q);
      cc::tma_prefetch_descriptor(&tmap_k);
      cc::tma_prefetch_descriptor(&tmap_v);
      // Hands work tile w to the consumers through the next Q stage (change (a)): once the
      // stage is free, its slot names w -- written before the arrive, whose release the
      // consumers' wait acquires -- and Q follows by TMA when the tile has K/V tiles; a tile
      // without any (or the end, w >= work_tiles) completes the phase with a plain arrive.
      const auto publish_tile = [&](int w, bool load_q, int q0, int qh, int qb) {
        const std::uint32_t q_full = q_full_bar + 8 * q_ring.stage;
        cc::mbarrier_wait(q_empty_bar + 8 * q_ring.stage, q_ring.phase ^ 1u);  // the last tile's S are done
        tile_slot[q_ring.stage] = w;
        if (load_q) {
          cc::mbarrier_arrive_expect_tx(q_full, T::kQBytes);
#pragma unroll
          for (int cb = 0; cb < D / 64; ++cb)
            cc::tma_load_4d(s_q + q_ring.stage * T::kQBytes + cb * T::kBlockM * 128, &tmap_q, q_full, 64 * cb, q0, qh,
                            qb);
        } else {
          cc::mbarrier_arrive(q_full);
        }
        q_ring.advance<R::kQStages>();
      };
      // The next work tile: the first beyond the grid's first wave that no block has taken.
      const auto next_work_tile = [&] { return static_cast<int>(gridDim.x) + atomicAdd(tile_counter, 1); };
      int w = static_cast<int>(blockIdx.x);  // the first wave: one tile per block (grid <= work tiles)
      while (w < work_tiles) {
        int q0, bh, num_tiles;
        tile_of(w, q0, bh, num_tiles);
        const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
        const int qh = h * wp.q_head, qb = b * wp.q_batch, kh = hk * wp.kv_head, kb = b * wp.kv_batch;
        const auto load_kv = [&](int tile) {
          const KvStage st{s_kv + ring.stage * R::kStageBytes, full_bar + 8 * ring.stage, empty_bar + 8 * ring.stage,
                           ring.phase};
          Phases::template load_kv_tile<T, R>(st, &tmap_k, &tmap_v, tile * T::kBlockN, kh, kb);
          ring.advance<R::kStages>();
        };
        if (num_tiles > 0) load_kv(0);  // Q once K/V tile 0 is on its way (change (c))
        publish_tile(w, num_tiles > 0, q0, qh, qb);
        w = next_work_tile();  // early: the atomic's latency hides under the loads below
        for (int tile = 1; tile < num_tiles; ++tile) load_kv(tile);
      }
      publish_tile(w, false, 0, 0, 0);  // the end: w >= work_tiles
    }
  } else {
    // ---- Consumers: warpgroup 1 computes rows 0-63 of each query tile, warpgroup 2 rows 64-127.
    cc::setmaxnreg_inc<ws_step::kConsumerRegisters>();
    const int cw = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int row_in_tile = 64 * cw + 16 * warp + lane / 4;  // this thread's first row in a query tile
    bool first = true;  // no tile with K/V tiles yet: the turns are not open
    for (;;) {
      // The producer's next work tile (change (a)): its Q stage names it.
      cc::mbarrier_wait(q_full_bar + 8 * q_ring.stage, q_ring.phase);
      const int w = tile_slot[q_ring.stage];
      if (w >= work_tiles) break;  // the end
      int q0, bh, num_tiles;
      tile_of(w, q0, bh, num_tiles);
      float o[T::kORegs];
      zero<T>(o);
      float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
      const std::uint32_t q_tile = s_q + q_ring.stage * T::kQBytes;
      const std::uint32_t q_empty = q_empty_bar + 8 * q_ring.stage;
      if (num_tiles > 0) {
        // q_empty once this thread's last S has landed: Q and the slot are free (every
        // thread arrives itself, after its own read of the slot).
        ws_step::gemm_phases<Phases, T, R, kCausal, Schedule::overlap>(
            o, row_max, row_sum, ring, q_tile, s_kv, full_bar, empty_bar, p, num_tiles, cw, q0 + 64 * cw + 16 * warp,
            /*open_turns=*/first, /*pass_last=*/true, [&] { cc::mbarrier_arrive(q_empty); });
        first = false;
      } else {
        cc::mbarrier_arrive(q_empty);  // no K/V tile: the slot, read above, is all this tile used
      }
      q_ring.advance<R::kQStages>();
      const int b = bh / p.heads, h = bh % p.heads;
      store_output_from_registers<T>(o, row_max, row_sum, p.o + row_offset(p.os, b, h, 0), p.os.seq, q0 + row_in_tile,
                                     p, bh);
    }
    if (cw == 0 && !first) Phases::wait_turn(cw);  // warpgroup 1's last pass (change (e))
  }
#else
  (void)tmap_q, (void)tmap_k, (void)tmap_v, (void)wp, (void)q_tiles, (void)work_tiles, (void)tile_counter;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

template <class Phases, int D, bool kCausal>
void launch(const AttentionArgsBf16& a, const TcParams& p) {
  WsParams wp{};
  wp.p = p;
  const ws_step::TensorMaps m = ws_step::tensor_maps<D>(a, wp, "attention step tc_persistent");
  constexpr int kBlockM = HopperTile<D>::kBlockM;
  const long long q_tiles = (static_cast<long long>(a.seq_q) + kBlockM - 1) / kBlockM;
  const long long work = q_tiles * a.batch * a.heads;  // >= 1: validation asks for N_q, B, H >= 1
  const int blocks = static_cast<int>(std::min<long long>(work, device_properties().multiProcessorCount));
  require_arg(work + blocks <= std::numeric_limits<int>::max(), "attention", "seq_q", a.seq_q,
              "times batch times heads, in 128-row query tiles, plus one per SM must be below 2^31 for step "
              "tc_persistent (its work tiles, and the tile counter past the last one, are counted in int)");
  constexpr auto kernel = persistent_kernel<Phases, D, kCausal>;
  constexpr int kSmem = Ring<D>::kSmemBytes;
  cc::opt_in_dynamic_smem<kernel>(kSmem);
  wp.group_heads = causal_group_heads(q_tiles, a.batch * a.heads, blocks);
  // The tile counter (change (a)): one int of this launch's own, zeroed, allocated and freed
  // in stream order on a.stream. Not a static counter: two launches on concurrent streams
  // would take tiles from each other's count, and a reset between launches would race with a
  // kernel still running on another stream.
  // From the course's scratch pool (course::scratch_pool, device.hpp), which keeps its memory
  // mapped across synchronizations: the default pool returns it at every sync, and the next
  // cudaMallocAsync then maps it again -- tens of microseconds, on a benchmark's timeline.
  int* tile_counter = nullptr;
  COURSE_CUDA_CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&tile_counter), sizeof(int), scratch_pool(),
                                            a.stream));
  COURSE_CUDA_CHECK(cudaMemsetAsync(tile_counter, 0, sizeof(int), a.stream));
  kernel<<<static_cast<unsigned>(blocks), kThreads, kSmem, a.stream>>>(m.q, m.k, m.v, wp, static_cast<int>(q_tiles),
                                                                      static_cast<int>(work), tile_counter);
  // Freed once the kernel is done (stream order); before the launch check, so that a failed
  // launch frees it too (a successful call leaves the launch's error for cudaGetLastError).
  COURSE_CUDA_CHECK(cudaFreeAsync(tile_counter, a.stream));
  COURSE_CHECK_LAUNCH("persistent_kernel");
}

}  // namespace persistent_step

/// Runs Hopper step `step` (tc_wgmma, tc_warp_specialized, tc_pingpong, tc_overlap or tc_persistent) with the phases
/// `Phases`: the solution's (attention_tc_hopper_phases.cuh) or the exercise's.
template <class Phases>
void run_step(m03::AttentionStep step, const AttentionArgsBf16& a) {
  require_sm90a(m03::step_name(step));
  const TcParams p = make_tc_params(a);
  cc::dispatch_value<m03::kHopperHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    constexpr int D = decltype(d)::value;
    const auto launch = [&](auto causal) {
      constexpr bool kCausal = decltype(causal)::value;
      if (step == m03::AttentionStep::tc_wgmma)
        wgmma_step::launch<Phases, D, kCausal>(p, a.batch * a.heads, a.stream);
      else if (step == m03::AttentionStep::tc_warp_specialized)
        ws_step::launch<Phases, D, kCausal, ws_step::Schedule::serial>(a, p);
      else if (step == m03::AttentionStep::tc_pingpong)
        ws_step::launch<Phases, D, kCausal, ws_step::Schedule::pingpong>(a, p);
      else if (step == m03::AttentionStep::tc_overlap)
        ws_step::launch<Phases, D, kCausal, ws_step::Schedule::overlap>(a, p);
      else
        persistent_step::launch<Phases, D, kCausal>(a, p);
    };
    if (a.causal) launch(std::true_type{});
    else launch(std::false_type{});
  });
}

}  // namespace course::solution::attn_tc_hopper
