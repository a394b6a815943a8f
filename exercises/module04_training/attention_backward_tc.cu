/// @file attention_backward_tc.cu
/// @brief YOUR tensor-core attention backward (module 4, bf16, mma.sync):
///   4. tc_mma            P^T recomputed on the fragments, dS^T, the rest given
///   5. tc_pipelined      the same phases in the swizzled, pipelined kernel (nothing new to write)
///   6. tc_deterministic  + the ordered dQ hand-off between K/V blocks
///   7. tc_split_dq       deterministic without a hand-off: a list of K/V tiles per block, its
///                        own fp32 dQ copy, the copies summed in order (nothing new to write:
///                        the kernel reuses your phases; read "Step tc_split_dq" in the header)
///   8. tc_wgmma          (Hopper, sm_90a) the three warpgroup-MMA products (TODO 4): your
///                        probabilities and ds run unchanged on wgmma's accumulators; the
///                        kernel is solutions/module04_training/attention_backward_tc_wgmma.cuh
///   9. tc_wgmma_deterministic (Hopper) tc_deterministic's hand-off on tc_wgmma's kernel
///                        (nothing new to write: your wait_dq_turn and wgmma phases)
///   10. tc_wgmma_split_dq (Hopper) tc_split_dq's dQ copies on tc_wgmma's kernel (nothing new to
///                        write: it runs your wgmma phases)
///
/// The kernels -- loads, the five products on fragments, dS^T through shared memory, the dQ
/// atomics, preprocessing and conversion -- are solutions/module04_training/
/// attention_backward_tc.cuh, the very code the solution runs. Read its file comment and
/// the lesson (module04_training/README.md, "The tensor-core backward") first. You write the
/// three phases below; the kernel calls them with the warp's accumulator fragments.
/// Set the matching kXxxWritten flag when a phase is done: a step whose phases are not
/// written throws NotImplemented and its tests show SKIPPED.
/// Run the tests with:   ctest --preset default -L exercise -R AttentionBackwardTc
/// Hints, one at a time: `bash scripts/course.sh hint attention_backward/tc_mma` (and
/// tc_deterministic, tc_wgmma).

#include "../../solutions/module04_training/attention_backward_tc.cuh"

#include "course/cuda/mma_ptx.cuh"
#include "course/error.hpp"
#include "module04/attention_backward.hpp"

#include <cuda/atomic>

#include <cstdint>

namespace course::exercise {
namespace {

using attn_bwd_tc::Params;
using attn_bwd_tc::TileSpot;

constexpr bool kProbabilitiesWritten = false;  // TODO 1 below
constexpr bool kDsWritten = false;             // TODO 2 below
constexpr bool kDqTurnWritten = false;         // TODO 3 below
constexpr bool kWgmmaWritten = false;          // TODO 4 below (step tc_wgmma, Hopper only)

struct Phases {
  /// TODO 1: P^T = exp(scale * S^T - lse) on the warp's accumulators, in place.
  /// s[j][e] is S^T for key spot.key0 + g + 8 (e/2) and query column 8j + 2t + e%2 of the
  /// tile (g = lane / 4, t = lane % 4); lse2[col] is that query's lse * log2(e) (+inf for
  /// rows past N_q and rows that see no key). Keys past N_k, and when causal keys after the
  /// query's diagonal (key > query + causal_offset), must give exactly 0; only tiles with
  /// spot.needs_mask contain such keys. Cfg::kSTiles is the number of n8 query tiles the warp
  /// holds: 8 (the tile's 64 queries, or at d = 64 in tc_pipelined and tc_split_dq a warp's 64
  /// of the tile's 128) or, at d = 128 in the swizzled steps, 4 (a warp's 32); spot and lse2
  /// start at the warp's first query.
  template <class Cfg, bool kCausal>
  __device__ __forceinline__ static void probabilities(float (&s)[Cfg::kSTiles][4], const Params& p,
                                                       const TileSpot& spot, const float* lse2) {
    (void)s, (void)p, (void)spot, (void)lse2;
  }

  /// TODO 2: dS^T = P^T * (dP^T - D), written over dP^T; d_row[col] is the query's D.
  template <class Cfg>
  __device__ __forceinline__ static void ds(float (&dp)[Cfg::kSTiles][4], const float (&pt)[Cfg::kSTiles][4],
                                            const float* d_row) {
    (void)dp, (void)pt, (void)d_row;
  }

  /// TODO 3a: wait until *turn == place, this block's place in the query tile's fixed order
  /// of dQ additions (the kernel computes it: the K/V tile index without the mask); every
  /// thread of the block must leave only after the turn has come.
  __device__ __forceinline__ static void wait_dq_turn(int* turn, int place) { (void)turn, (void)place; }

  /// TODO 3b: once every warp of the block has issued its additions, set *turn = place + 1
  /// so that the next block in the order may add (make the additions visible before the counter).
  __device__ __forceinline__ static void pass_dq_turn(int* turn, int place) { (void)turn, (void)place; }

  // Step tc_wgmma: issue the wgmma of one product (no fence, commit or wait: the kernel does
  // those). Tiles are in the 128-byte-swizzle layout (cuda::Sw128Geom in course/cuda/tile.cuh):
  // [rows][64] column blocks of 128-byte rows, 8-row groups 1024 bytes apart. The wrappers
  // and cuda::wgmma_desc_sw128 are in course/cuda/mma_ptx.cuh; module 3's issue_scores and
  // issue_pv (solutions/module03_attention/attention_tc_hopper_phases.cuh) are the models.

  /// TODO 4a: acc = X_rows Y^T: rows x_row0 .. x_row0 + 63 of X ([W::kBlockN][D] at x_tile:
  /// K or V) against the W::kBlockM rows of Y ([W::kBlockM][D] at y_tile: Q or dO). W::kDSteps
  /// wgmma m64n64k16, both operands K-major (d contiguous); the first one overwrites acc.
  template <class W>
  __device__ __forceinline__ static void issue_transposed_scores(float (&acc)[W::kSRegs], std::uint32_t x_tile,
                                                                 int x_row0, std::uint32_t y_tile) {
    (void)acc, (void)x_tile, (void)x_row0, (void)y_tile;
  }

  /// TODO 4b: acc (dV or dK, 64 keys x D) += A Y with A = P^T or dS^T FROM REGISTERS (pk:
  /// bf16 pairs in accumulator order; n8 tiles 2kk and 2kk + 1 form k16 step kk) and Y ([64
  /// queries][D] at y_tile: dO or Q) as B, k = the queries: MN-major. D = 64: m64n64k16,
  /// D = 128: m64n128k16 (the _rs_ wrappers).
  template <class W>
  __device__ __forceinline__ static void issue_accumulate_keys(float (&acc)[W::kKeyRegs],
                                                               const std::uint32_t (&pk)[W::kSTiles][2],
                                                               std::uint32_t y_tile) {
    (void)acc, (void)pk, (void)y_tile;
  }

  /// TODO 4c: acc = dS K for one 64 x 64 block of dQ: the tile's 64 queries against all
  /// W::kBlockN keys (W::kDqKeySteps k16 steps), columns 64 col_block ... dS is read from the
  /// stored dS^T at ds_tile ([W::kBlockN keys][64 queries]); K at k_tile ([W::kBlockN][D]).
  /// Which operands are MN-major here?
  template <class W>
  __device__ __forceinline__ static void issue_dq(float (&acc)[W::kDqRegs], std::uint32_t ds_tile,
                                                  std::uint32_t k_tile, int col_block) {
    (void)acc, (void)ds_tile, (void)k_tile, (void)col_block;
  }
};

}  // namespace

void attention_backward(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgsBf16& args) {
  m04::validate_attention_backward_args(args, step, "attention_backward");
  const char* file = "exercises/module04_training/attention_backward_tc.cu";
  if (!kProbabilitiesWritten || !kDsWritten)
    throw NotImplemented(std::string("attention_backward step ") + m04::step_name(step) +
                             " (Phases::probabilities and Phases::ds)",
                         file);
  if (m04::orders_dq(step) && !kDqTurnWritten)
    throw NotImplemented(std::string("attention_backward step ") + m04::step_name(step) +
                             " (Phases::wait_dq_turn / pass_dq_turn)",
                         file);
  // tc_split_dq calls no turn phase; it comes after tc_deterministic in the ladder, so it
  // opens with it (its tests compare the two deterministic ways of adding dQ).
  if (step == m04::AttentionBackwardStep::tc_split_dq && !kDqTurnWritten)
    throw NotImplemented("attention_backward step tc_split_dq (after tc_deterministic: Phases::wait_dq_turn / "
                         "pass_dq_turn)",
                         file);
  if (m04::step_support(step).hopper && !kWgmmaWritten)
    throw NotImplemented(std::string("attention_backward step ") + m04::step_name(step) +
                             " (Phases::issue_transposed_scores, issue_accumulate_keys, issue_dq)",
                         file);
  attn_bwd_tc::run_step<Phases>(step, args);
}

}  // namespace course::exercise
