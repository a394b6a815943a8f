/// @file attention_tc_hopper_planted.cu
/// @brief The planted bugs of attention_tc_hopper_planted.hpp: the solution's phases with one
/// function replaced (each struct hides one of attn_tc_hopper_phases::Phases' functions).

#include "attention_tc_hopper_planted.hpp"

#include "../../../solutions/module03_attention/attention_tc_hopper_phases.cuh"

namespace course::planted {
namespace {

namespace cc = ::course::cuda;
using Solution = ::course::solution::attn_tc_hopper_phases::Phases;

struct DescriptorStride : Solution {
  template <class T>
  __device__ __forceinline__ static void issue_scores(float (&s)[T::kSRegs], std::uint32_t q_tile,
                                                      std::uint32_t k_tile, int q_rows) {
#pragma unroll
    for (int ks = 0; ks < T::D / 16; ++ks) {
      const std::uint32_t along = (ks % 4) * 32;
      const std::uint64_t da = cc::wgmma_desc_sw128(q_tile + (ks / 4) * T::kBlockM * 128 + q_rows * 128 + along, 16, 1024);
      const std::uint64_t db = cc::wgmma_desc_sw128(k_tile + (ks / 4) * T::kBlockN * 128 + along, 16, 512);  // BUG
      cc::wgmma_m64n128k16_bf16_f32<false>(s, da, db, ks > 0 ? 1 : 0);
    }
  }
};

template <bool kSwapRows, bool kBTransposed>
struct WrongPv : Solution {
  template <class T>
  __device__ __forceinline__ static void issue_pv(float (&o)[T::kORegs], const std::uint32_t (&pk)[T::kBlockN / 8][2],
                                                  std::uint32_t v_tile) {
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
      const std::uint32_t a[4] = {pk[2 * kk][0], kSwapRows ? pk[2 * kk + 1][0] : pk[2 * kk][1],  // BUG if kSwapRows
                                  kSwapRows ? pk[2 * kk][1] : pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
      const std::uint64_t db = cc::wgmma_desc_sw128(v_tile + kk * 16 * 128, T::kBlockN * 128, 1024);
      if constexpr (T::D == 64)
        cc::wgmma_m64n64k16_rs_bf16_f32<kBTransposed>(o, a, db);  // BUG if !kBTransposed
      else
        cc::wgmma_m64n128k16_rs_bf16_f32<kBTransposed>(o, a, db);
    }
  }
};

template <class Phases>
void run(const m03::AttentionArgsBf16& args) {
  constexpr auto kStep = m03::AttentionStep::tc_warp_specialized;
  m03::validate_attention_args(args, kStep, "planted attention");
  ::course::solution::attn_tc_hopper::run_step<Phases>(kStep, args);
}

}  // namespace

void attention_hopper_descriptor_stride(m03::AttentionStep, const m03::AttentionArgsBf16& args) {
  run<DescriptorStride>(args);
}
void attention_hopper_p_fragment_order(m03::AttentionStep, const m03::AttentionArgsBf16& args) {
  run<WrongPv<true, true>>(args);
}
void attention_hopper_v_not_transposed(m03::AttentionStep, const m03::AttentionArgsBf16& args) {
  run<WrongPv<false, false>>(args);
}

}  // namespace course::planted
