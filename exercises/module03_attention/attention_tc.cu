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
/// The kernels -- tile loads (synchronous, then a cp.async ring), the shared-memory softmax
/// of steps 6-7, the masks, the epilogues, the launches -- are
/// solutions/module03_attention/attention_tc.cuh (steps 6-7) and attention_tc_flash.cuh
/// (steps 8-9), the very code the solution runs: read their file comments. You write the
/// functions of `Phases` below, which the kernels call, and step 9's tile shapes. The PTX
/// wrappers (ldmatrix_x4, ldmatrix_x4_trans, mma_m16n8k16_bf16_f32, cp.async, ex2_approx)
/// are in common/include/course/cuda/mma_ptx.cuh: read their comments, they give the layouts.
/// Run the tests with:   ctest --preset default -L exercise -R attention_tc
/// A step you have not written throws NotImplemented and its tests show SKIPPED.

#include "../../solutions/module03_attention/attention_tc.cuh"
#include "../../solutions/module03_attention/attention_tc_flash.cuh"

#include "module03/attention.hpp"

#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/tile.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"

#include <cmath>
#include <cstdint>
#include <string>

namespace course::exercise {
namespace {

using m03::AttentionArgsBf16;
using m03::AttentionStep;
using cuda::pack_bf16x2;
using solution::attn_tc::flash_step::FlashConfig;
using solution::attn_tc::flash_step::RegisterSoftmaxConfig;

// ====================================================================== steps 6 and 7 ====
// Step 6: tc_mma (smem_step::smem_softmax_kernel, kTuned = false). 4 warps, each owns 16
// query rows of a 64-row Q tile; K/V tiles of 64 keys. Per tile, each warp computes its
// 16 x 64 block of S = Q K^T with mma.sync (yours: scores_qk), writes it to shared memory
// (given), runs the online softmax there (given: two lanes per row) and writes P as bf16
// (given); then O += P V with mma.sync (yours: accumulate_pv), O staying in registers.
// Fragment layouts (lane l, g = l/4, t = l%4; see mma_ptx.cuh):
//   A 16x16 (row):  a[0] = A[g][2t..2t+1]  a[1] = A[g+8][2t..]  a[2] = A[g][2t+8..]  a[3] = A[g+8][2t+8..]
//   B 16x8 (col):   b[0] = B[2t..2t+1][g]  b[1] = B[2t+8..2t+9][g]
//   C 16x8:         c[0..1] = C[g][2t..2t+1]   c[2..3] = C[g+8][2t..2t+1]
// ldmatrix_x4 loads four 8x8 matrices; lanes 8i..8i+7 give the row addresses of matrix i
// and register r[i] receives matrix i in exactly these fragment layouts. The lane row
// addresses (given to your functions, for row block 0 and k step 0):
//   q_row/q_c: Q as A: row lane%16 of the warp's 16, chunk 2*ks + lane/16
//   k_row/k_c: K as B (keys are the n of S): key 16*np + lane%8 + 8*(lane/16), chunk 2*ks + (lane/8)%2
//              -> r[0], r[1] = b of n8 tile 2np (keys 16np..+7); r[2], r[3] = b of n8 tile 2np+1
//   p_row/p_c: P as A: row warp_row0 + lane%16, key chunk 2*kk + lane/16 (kLdP bf16 per row,
//              see p_addr in accumulate_pv)
//   v_row/v_c: V as B of P V (keys are the k): key 16*kk + lane%8 + 8*((lane/8)%2), chunk 2*dp + lane/16,
//              loaded with ldmatrix_x4_TRANS -> r[0], r[1] = b of n8 tile 2dp (dims 16dp..+7); r[2], r[3] = 2dp+1
// A tile's chunk `c` of row `r` is at byte Geom::offset(r, c) of the tile (T::Geom: plain
// rows for tc_mma, your swizzle for tc_swizzled_pipelined).
// TODO(step 6a): Phases::scores_qk below: S = Q K^T for the warp's 16 rows into s[8][4]
// (n8 tile j = keys 8j..8j+7).
// TODO(step 6b): Phases::accumulate_pv below: O += P V into o[D/8][4] (n8 tile dt = dims
// 8dt..8dt+7).
// TODO(step 6c): set kTcMmaWritten to true.
// Hints, one at a time: bash scripts/course.sh hint attention/tc_mma
constexpr bool kTcMmaWritten = false;

// Step 7: tc_swizzled_pipelined, the same kernel with kTuned = true: swizzled tiles, a
// 2-stage cp.async K/V ring and Q fragments in registers -- all given but the swizzle.
// The idea: a tile row of d bf16 is kChunks 16-byte chunks; an ldmatrix phase reads the
// SAME chunk of 8 consecutive rows. Stored as is (rows of 128 or 256 bytes), those 8
// addresses fall into the same 4 banks: an 8-way conflict. Store chunk `chunk` of row
// `row` at another chunk of the same row so that the 8 rows of every phase land in 8
// different 16-byte bank groups -- a bijection on the chunks of each row, used by the
// writer (cp.async) and the readers (ldmatrix) alike (smem_step::SwizzledGeom).
// TODO(step 7): Phases::swizzle_chunk below: return the physical chunk of logical chunk
// `chunk` in row `row` of a tile whose rows hold kRowChunks chunks (a power of two: 4, 8 or
// 16); then set kSwizzleWritten.
// Hints, one at a time: bash scripts/course.sh hint attention/tc_swizzled_pipelined
constexpr bool kSwizzleWritten = false;

// ====================================================================== steps 8 and 9 ====
// Step 8: tc_register_softmax (flash_step::register_softmax_kernel). S never leaves the
// registers: lane (g, t) holds, for each n8 tile j of S, s[j][0..1] = S[g][8j+2t, +1] and
// s[j][2..3] = S[g+8][8j+2t, +1]; a row lives in the 4 lanes of a quad (same g). The kernel
// is given; you write the two functions it calls for each m16 tile of a warp:
//
// TODO(step 8a): Phases::softmax_on_fragments -- one online-softmax step on the fragments
// of one m16 tile: for each of the thread's two rows (hr = 0: row g, elements 0 and 1 of
// every n8 tile; hr = 1: row g+8, elements 2 and 3):
//   the new running max over row_max[hr] and the row's scores (cuda::warp_max<4> over the quad),
//   alpha = 2^(scale_log2 * (old max - new max)), row_sum[hr] *= alpha, o's row *= alpha,
//   p = 2^(scale_log2 * s - scale_log2 * new max) for each score (cuda::ex2_approx),
//   row_sum[hr] += the lane's p's (reduced over the quad only at the end: given),
//   pk[j][hr] = pack_bf16x2(p of element 2hr, p of element 2hr+1) of n8 tile j.
// row_max stays in raw score units (scale applied only inside the exponent). A row that
// has seen only masked scores (-INFINITY) must come out with p = 0 and alpha finite.
// TODO(step 8b): Phases::a_fragment -- the A operand of the P V mma for k16 step kk (keys
// 16kk .. 16kk+15), from pk. Then set kFragmentSoftmaxWritten to true (8c).
// Hints, one at a time: bash scripts/course.sh hint attention/tc_register_softmax
constexpr bool kFragmentSoftmaxWritten = false;

struct Phases {
  /// YOUR step 7: the physical chunk of logical chunk `chunk` in row `row`.
  template <int kRowChunks>
  __device__ __forceinline__ static int swizzle_chunk(int row, int chunk) {
    // TODO(step 7)
    (void)row;
    return chunk;
  }

  /// YOUR step 6a: S = Q K^T for the warp's 16 rows and the tile's 64 keys (8 accumulator
  /// tiles of 16 x 8). Q's A fragments: for step 7 (kTuned) the kernel has loaded them once
  /// into qf[ks]; for tc_mma (kTuned = false) read them from the Q tile at s_q (`a` is yours
  /// for that A fragment).
  template <class T, bool kTuned, class QFrags>
  __device__ __forceinline__ static void scores_qk(float (&s)[T::kSTiles][4], std::uint32_t (&a)[4],
                                                   const QFrags& qf, std::uint32_t s_q, std::uint32_t s_k, int q_row,
                                                   int q_c, int k_row, int k_c) {
    using Geom = typename T::Geom;
#pragma unroll
    for (int j = 0; j < T::kSTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;  // S starts at 0
    // TODO(step 6a): for each k16 step ks < kDSteps: the A fragment (qf[ks] if kTuned, else
    // one ldmatrix_x4 of Q at s_q + Geom::offset(q_row, 2 * ks + q_c)); for each pair np <
    // kSTiles/2 of n8 tiles, one ldmatrix_x4 of K at s_k + Geom::offset(16 * np + k_row,
    // 2 * ks + k_c), then two mma_m16n8k16_bf16_f32 into s[2np] and s[2np+1].
    (void)a, (void)qf, (void)s_q, (void)s_k, (void)q_row, (void)q_c, (void)k_row, (void)k_c;
  }

  /// YOUR step 6b: O += P V for the warp's 16 rows, P (bf16, kLdP per row) from the P tile
  /// at s_p as the A operand, V from the tile at s_v; `a` is yours for P's A fragment.
  template <class T>
  __device__ __forceinline__ static void accumulate_pv(float (&o)[T::kOTiles][4], std::uint32_t (&a)[4],
                                                       std::uint32_t s_p, std::uint32_t s_v, int warp_row0, int lane,
                                                       int v_row, int v_c) {
    using Geom = typename T::Geom;
    const int p_row = warp_row0 + (lane & 15), p_c = lane >> 4;
    // Byte address of chunk c (8 keys) of row r of the P tile.
    const auto p_addr = [&](int r, int c) { return s_p + 2u * static_cast<std::uint32_t>(r * T::kLdP + 8 * c); };
    // TODO(step 6b): for each k16 step kk < kBlockN/16 of the keys: the A fragment of P with
    // one ldmatrix_x4 at p_addr(p_row, 2 * kk + p_c); for each pair dp < kDSteps of n8 tiles
    // of O, one ldmatrix_x4_trans of V at s_v + Geom::offset(16 * kk + v_row, 2 * dp + v_c),
    // then two mma into o[2dp] and o[2dp+1].
    (void)o, (void)a, (void)s_v, (void)v_row, (void)v_c, (void)p_row, (void)p_c, (void)p_addr;
  }

  /// YOUR step 8a (see the TODO above).
  template <int kSTiles, int kOTiles>
  __device__ __forceinline__ static void softmax_on_fragments(float (&s)[kSTiles][4], float (&row_max)[2],
                                                              float (&row_sum)[2], float (&o)[kOTiles][4],
                                                              std::uint32_t (&pk)[kSTiles][2], float scale_log2) {
    // TODO(step 8a)
    (void)s, (void)row_max, (void)row_sum, (void)o, (void)scale_log2;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) pk[j][0] = pk[j][1] = 0u;
  }

  /// YOUR step 8b (see the TODO above).
  template <int kSTiles>
  __device__ __forceinline__ static void a_fragment(const std::uint32_t (&pk)[kSTiles][2], int kk,
                                                    std::uint32_t (&a)[4]) {
    // TODO(step 8b)
    (void)pk, (void)kk;
    a[0] = a[1] = a[2] = a[3] = 0u;
  }
};

// Step 9: tc_flash2 -- the same kernel with other tile shapes.
// TODO(step 9): choose Flash2Choice below for each head dim (rows per warp through
// kMTiles, keys per tile, keys per softmax step, Q in registers or not: the fields of
// FlashConfig in attention_tc_flash.cuh); then set kFlash2Written to true. Check your
// choice for spills: the lesson shows how.
// Hints, one at a time: bash scripts/course.sh hint attention/tc_flash2
constexpr bool kFlash2Written = false;

template <int D>
struct Flash2Choice {
  // TODO(step 9): FlashConfig<D, kMTiles, kBlockN, kSubN, kStages, kQInRegs> for this D
  // (a specialization per head dim if they differ). Step 8's shapes until then.
  using type = FlashConfig<D, 1, 64, 64, 2, true>;
};

template <int D>
using Flash2Config = typename Flash2Choice<D>::type;

}  // namespace

/// Steps 10-14 (Hopper): your phases, in attention_tc_hopper.cu.
void attention_hopper(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

void attention(m03::AttentionStep step, const m03::AttentionArgsBf16& args) {
  m03::validate_attention_args(args, step, "attention");
  const std::string name = std::string("attention step ") + m03::step_name(step);
  namespace smem_step = solution::attn_tc::smem_step;    // the kernel of steps 6-7
  namespace flash_step = solution::attn_tc::flash_step;  // the kernel of steps 8-9
  switch (step) {
    case AttentionStep::tc_mma:
      if (!kTcMmaWritten) throw NotImplemented(name + " (TODO 6a-6c)", __FILE__);
      return smem_step::launch_smem_softmax<Phases, false>(args);
    case AttentionStep::tc_swizzled_pipelined:
      if (!kTcMmaWritten || !kSwizzleWritten) throw NotImplemented(name + " (TODO 6 and 7)", __FILE__);
      return smem_step::launch_smem_softmax<Phases, true>(args);
    case AttentionStep::tc_register_softmax:
      if (!kFragmentSoftmaxWritten) throw NotImplemented(name + " (TODO 8a-8c)", __FILE__);
      return flash_step::launch_by_head_dim<Phases, RegisterSoftmaxConfig>(args);
    case AttentionStep::tc_flash2:
      if (!kFragmentSoftmaxWritten || !kFlash2Written) throw NotImplemented(name + " (TODO 8 and 9)", __FILE__);
      return flash_step::launch_by_head_dim<Phases, Flash2Config>(args);
    case AttentionStep::tc_wgmma:
    case AttentionStep::tc_warp_specialized:
    case AttentionStep::tc_pingpong:
    case AttentionStep::tc_overlap:
    case AttentionStep::tc_persistent:
      return attention_hopper(step, args);  // attention_tc_hopper.cu
    default: break;  // fp32 steps: validate_attention_args rejected them
  }
}

}  // namespace course::exercise
