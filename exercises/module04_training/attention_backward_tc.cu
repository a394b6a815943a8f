/// @file attention_backward_tc.cu
/// @brief YOUR tensor-core attention backward (module 4, bf16, mma.sync):
///   4. tc_mma            P^T recomputed on the fragments, dS^T, the rest given
///   5. tc_pipelined      the same phases in the swizzled, pipelined kernel (nothing new to write)
///   6. tc_deterministic  + the ordered dQ hand-off between K/V blocks
///   7. tc_split_dq       deterministic without a hand-off: a list of K/V tiles per block, its
///                        own fp32 dQ copy, the copies summed in order (nothing new to write:
///                        the kernel reuses your phases; read "Step tc_split_dq" in the header)
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
/// tc_deterministic).

#include "../../solutions/module04_training/attention_backward_tc.cuh"

#include "course/cuda/mma_ptx.cuh"
#include "course/error.hpp"
#include "module04/attention_backward.hpp"

#include <cuda/atomic>

namespace course::exercise {
namespace {

using attn_bwd_tc::Params;
using attn_bwd_tc::TileSpot;

constexpr bool kProbabilitiesWritten = false;  // TODO 1 below
constexpr bool kDsWritten = false;             // TODO 2 below
constexpr bool kDqTurnWritten = false;         // TODO 3 below

struct Phases {
  /// TODO 1: P^T = exp(scale * S^T - lse) on the warp's accumulators, in place.
  /// s[j][e] is S^T for key spot.key0 + g + 8 (e/2) and query column 8j + 2t + e%2 of the
  /// tile (g = lane / 4, t = lane % 4); lse2[col] is that query's lse * log2(e) (+inf for
  /// rows past N_q and rows that see no key). Keys past N_k, and when causal keys after the
  /// query's diagonal (key > query + causal_offset), must give exactly 0; only tiles with
  /// spot.needs_mask contain such keys.
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

  /// TODO 3a: wait until *turn == kv_tile (K/V blocks add to a query tile's dQ in index
  /// order); every thread of the block must leave only after the turn has come.
  __device__ __forceinline__ static void wait_dq_turn(int* turn, int kv_tile) { (void)turn, (void)kv_tile; }

  /// TODO 3b: once every warp of the block has issued its additions, set *turn = kv_tile + 1
  /// so that the next K/V block may add (make the additions visible before the counter).
  __device__ __forceinline__ static void pass_dq_turn(int* turn, int kv_tile) { (void)turn, (void)kv_tile; }
};

}  // namespace

void attention_backward(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgsBf16& args) {
  m04::validate_attention_backward_args(args, step, "attention_backward");
  const char* file = "exercises/module04_training/attention_backward_tc.cu";
  if (!kProbabilitiesWritten || !kDsWritten)
    throw NotImplemented(std::string("attention_backward step ") + m04::step_name(step) +
                             " (Phases::probabilities and Phases::ds)",
                         file);
  if (step == m04::AttentionBackwardStep::tc_deterministic && !kDqTurnWritten)
    throw NotImplemented("attention_backward step tc_deterministic (Phases::wait_dq_turn / pass_dq_turn)", file);
  // tc_split_dq calls no turn phase; it comes after tc_deterministic in the ladder, so it
  // opens with it (its tests compare the two deterministic ways of adding dQ).
  if (step == m04::AttentionBackwardStep::tc_split_dq && !kDqTurnWritten)
    throw NotImplemented("attention_backward step tc_split_dq (after tc_deterministic: Phases::wait_dq_turn / "
                         "pass_dq_turn)",
                         file);
  attn_bwd_tc::run_step<Phases>(step, args);
}

}  // namespace course::exercise
