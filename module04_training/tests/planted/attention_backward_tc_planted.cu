/// @file attention_backward_tc_planted.cu
/// @brief The planted mistakes of attention_backward_tc_planted.hpp: each derives from the
/// solution's phases and replaces one of them (static members of the derived struct hide the
/// base's), so everything else is the real kernel.

#include "attention_backward_tc_planted.hpp"

#include "../../../solutions/module04_training/attention_backward_tc.cuh"
#include "../../../solutions/module04_training/attention_backward_tc_phases.cuh"

#include "course/cuda/mma_ptx.cuh"

namespace course::planted {
namespace {

using attn_bwd_tc::Params;
using attn_bwd_tc::TileSpot;
using Solution = solution::attn_bwd_tc_phases::Phases;

struct DropD : Solution {
  template <class Cfg>
  __device__ __forceinline__ static void ds(float (&dp)[Cfg::kSTiles][4], const float (&pt)[Cfg::kSTiles][4],
                                            const float*) {
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[j][e] = pt[j][e] * dp[j][e];  // BUG: - D missing
  }
};

struct CausalMaskMissing : Solution {
  template <class Cfg, bool kCausal>
  __device__ __forceinline__ static void probabilities(float (&s)[Cfg::kSTiles][4], const Params& p,
                                                       const TileSpot& spot, const float* lse2) {
    Solution::probabilities<Cfg, false>(s, p, spot, lse2);  // BUG: never the causal mask
  }
};

struct NaturalScale : Solution {
  template <class Cfg, bool kCausal>
  __device__ __forceinline__ static void probabilities(float (&s)[Cfg::kSTiles][4], const Params& p,
                                                       const TileSpot& spot, const float* lse2) {
    Params wrong = p;
    wrong.scale_log2 = p.scale;  // BUG: the scores stay in natural units against a base-2 lse
    Solution::probabilities<Cfg, kCausal>(s, wrong, spot, lse2);
  }
};

struct TurnNotAwaited : Solution {
  __device__ __forceinline__ static void wait_dq_turn(int*, int) {}  // BUG: nobody waits
};

template <class Phases>
void run(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgsBf16& args) {
  m04::validate_attention_backward_args(args, step, "planted attention_backward");
  attn_bwd_tc::run_step<Phases>(step, args);
}

}  // namespace

void attention_backward_tc_drop_d(m04::AttentionBackwardStep step, const m04::AttentionBackwardArgsBf16& args) {
  run<DropD>(step, args);
}
void attention_backward_tc_causal_mask_missing(m04::AttentionBackwardStep step,
                                               const m04::AttentionBackwardArgsBf16& args) {
  run<CausalMaskMissing>(step, args);
}
void attention_backward_tc_natural_scale(m04::AttentionBackwardStep step,
                                         const m04::AttentionBackwardArgsBf16& args) {
  run<NaturalScale>(step, args);
}
void attention_backward_tc_turn_not_awaited(m04::AttentionBackwardStep step,
                                            const m04::AttentionBackwardArgsBf16& args) {
  run<TurnNotAwaited>(step, args);
}

}  // namespace course::planted
