#pragma once
/// @file attention_backward_tc_phases.cuh
/// @brief The solution's phases of the tensor-core attention backward: P^T recomputed on the
/// accumulator fragments, dS^T, and the ordered dQ hand-off. attention_backward_tc.cuh's
/// kernels call them through their `Phases` parameter; the exercise writes its own, and the
/// planted bugs of module04_training/tests/planted derive from these and replace one.

#include "attention_backward_tc.cuh"

#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/turns.cuh"

namespace course::solution::attn_bwd_tc_phases {

using attn_bwd_tc::Params;
using attn_bwd_tc::TileSpot;

/// The solution's phases.
struct Phases {
  /// P^T = 2^(S^T * scale * log2(e) - lse2) on the warp's accumulators, in place. Element e
  /// of n8 tile j: key spot.key0 + g + 8 (e/2), query column 8j + 2t + e%2 of the tile.
  /// Rows past N_q and rows that see no key carry lse2 = +inf, so their P is 2^-inf = 0;
  /// keys past N_k and keys after a row's causal diagonal are set to 0 here.
  template <class Cfg, bool kCausal>
  __device__ __forceinline__ static void probabilities(float (&s)[Cfg::kSTiles][4], const Params& p,
                                                       const TileSpot& spot, const float* lse2) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + 2 * t + (e & 1);
        float pv = cuda::ex2_approx(fmaf(s[j][e], p.scale_log2, -lse2[col]));
        if (spot.needs_mask) {
          const int key = spot.key0 + g + 8 * (e >> 1), query = spot.query0 + col;
          if (key >= p.seq_k || (kCausal && key > query + p.causal_offset)) pv = 0.f;
        }
        s[j][e] = pv;
      }
  }

  /// dS^T = P^T * (dP^T - D), in place of dP^T: D belongs to the query (the column).
  template <class Cfg>
  __device__ __forceinline__ static void ds(float (&dp)[Cfg::kSTiles][4], const float (&pt)[Cfg::kSTiles][4],
                                            const float* d_row) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[j][e] = pt[j][e] * (dp[j][e] - d_row[8 * j + 2 * t + (e & 1)]);
  }

  /// tc_deterministic: block `kv_tile` waits until the counter of its query tile says it is
  /// its turn (K/V tiles 0, 1, 2, ... in order): course/cuda/turns.cuh, which the fp32
  /// flash_deterministic step uses too. One thread polls with acquire loads; the barrier
  /// then holds every warp until the turn has come.
  __device__ __forceinline__ static void wait_dq_turn(int* turn, int kv_tile) { cuda::wait_turn(turn, kv_tile); }

  /// Hands the turn to K/V tile kv_tile + 1 once every warp's additions are issued: the
  /// barrier orders them before thread 0's release store, which the next block acquires.
  __device__ __forceinline__ static void pass_dq_turn(int* turn, int kv_tile) { cuda::pass_turn(turn, kv_tile); }
};

}  // namespace course::solution::attn_bwd_tc_phases
