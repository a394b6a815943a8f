#pragma once
/// @file attention_tc_planted.hpp
/// @brief Deliberately wrong tensor-core attention kernels that test_attention_tc.cpp must
/// reject with the very checking helper its real tests use: proof that the tests can fail.
/// Each has the signature of impl::attention for bf16 (the step is ignored; arguments are
/// validated as for step tc_register_softmax, and head_dim must be 64). They are copies of
/// one SIMPLE tensor-core kernel (plain shared-memory tiles, synchronous loads, the
/// softmax on the mma fragments), correct except for the planted line;
/// attention_tc_reference_kernel is that kernel without a bug.

#include "module03/attention.hpp"

namespace course::planted {

/// Signature shared with the bf16 course::solution::attention and the exercise's.
using AttentionTcFn = void (*)(m03::AttentionStep, const m03::AttentionArgsBf16&);

/// The planted kernel with no bug (the tests check that it passes).
void attention_tc_reference_kernel(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

/// P's A fragment packed row by row: a = {P[g][k0], P[g][k8], P[g+8][k0], P[g+8][k8]} instead
/// of {P[g][k0], P[g+8][k0], P[g][k8], P[g+8][k8]} (k0 = keys 2t, 2t+1; k8 = keys 2t+8, 2t+9):
/// row g+8 gets row g's later keys and vice versa. The fragment-to-row mapping of mma.sync.
void attention_tc_fragment_row_mapping(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

/// The running max grows but the O accumulator is not multiplied by alpha = 2^(m_old - m_new)
/// (the running sum is): earlier tiles keep too much weight.
void attention_tc_o_not_rescaled(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

/// The diagonal tile's mask off by one: keys j >= i + N_k - N_q are hidden, so every row
/// loses its diagonal key (and the first row of a square problem sees nothing).
void attention_tc_diagonal_mask_off_by_one(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

/// V's B fragments loaded with plain ldmatrix instead of ldmatrix.trans: each 8x8 block
/// arrives transposed (dims where keys should be).
void attention_tc_v_without_trans(m03::AttentionStep step, const m03::AttentionArgsBf16& args);

struct PlantedAttentionTc {
  const char* name;  ///< gtest parameter name
  AttentionTcFn fn;
};

inline constexpr PlantedAttentionTc kPlantedAttentionTc[] = {
    {"fragment_row_mapping", attention_tc_fragment_row_mapping},
    {"o_not_rescaled", attention_tc_o_not_rescaled},
    {"diagonal_mask_off_by_one", attention_tc_diagonal_mask_off_by_one},
    {"v_without_trans", attention_tc_v_without_trans},
};

}  // namespace course::planted
