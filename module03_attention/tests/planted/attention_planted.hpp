#pragma once
/// @file attention_planted.hpp
/// @brief Deliberately wrong attention kernels (realistic mistakes) that test_attention.cpp
/// must reject with the very checking helper its real tests use: proof that the tests can
/// fail. Each has the signature of impl::attention (the step is ignored; arguments are
/// validated as for step fused, so only the kernel is wrong). The kernels are a plain
/// one-thread-per-query-row attention, correct except for the planted line.

#include "module03/attention.hpp"

namespace course::planted {

/// Signature shared with course::solution::attention and the exercise's.
using AttentionFn = void (*)(m03::AttentionStep, const m03::AttentionArgs&);
/// Signature of online_softmax_update_test.
using OnlineUpdateFn = void (*)(const m03::OnlineUpdateTestArgs&);

/// The online update key by key with the running max replaced BEFORE the running sum is
/// rescaled, so the sum's factor is exp(m_new - m_new) = 1 and l is too large whenever
/// the max grows (the accumulator is rescaled with the old max, correctly, so O = acc / l
/// comes out too small).
void attention_max_replaced_first(m03::AttentionStep step, const m03::AttentionArgs& args);

/// Forgets the 1/sqrt(d) scale: softmax(Q K^T) instead of softmax(Q K^T / sqrt(d)).
void attention_missing_scale(m03::AttentionStep step, const m03::AttentionArgs& args);

/// Causal mask off by one: keeps j < i + N_k - N_q instead of j <= ...: the diagonal key is
/// hidden (and the first row, with nothing left to see, becomes 0).
void attention_causal_off_by_one(m03::AttentionStep step, const m03::AttentionArgs& args);

/// Causal mask one key too wide: keeps j <= i + N_k - N_q + 1, so every row sees one
/// future key. Caught exactly by the bit-for-bit causality test.
void attention_causal_leak(m03::AttentionStep step, const m03::AttentionArgs& args);
/// Q's row offset computed as b * stride.head + h * stride.batch: head and batch swapped
/// (in bounds when B == H; K, V and O are addressed correctly).
void attention_swapped_head_batch(m03::AttentionStep step, const m03::AttentionArgs& args);

/// online_softmax_update_test with the max replaced first (m replaced, then l rescaled).
void online_update_max_replaced_first(const m03::OnlineUpdateTestArgs& args);

struct PlantedAttention {
  const char* name;  ///< gtest parameter name
  AttentionFn fn;
};

inline constexpr PlantedAttention kPlantedAttention[] = {
    {"max_replaced_first", attention_max_replaced_first},
    {"missing_scale", attention_missing_scale},
    {"causal_off_by_one", attention_causal_off_by_one},
    {"causal_leak", attention_causal_leak},
    {"swapped_head_batch", attention_swapped_head_batch},
};

}  // namespace course::planted
