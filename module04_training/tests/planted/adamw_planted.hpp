#pragma once
/// @file adamw_planted.hpp
/// @brief Deliberately wrong AdamW steps. test_adamw.cpp runs them through the same
/// checking helper as the real steps and asserts that it rejects every one: proof that the
/// tests can fail. Each has the op's signature; `step` is ignored. All share one otherwise
/// correct implementation (a scalar launch per tensor, the norm summed tensor by tensor in
/// the workspace's first float, the scale in its second), so only the planted bug differs.

#include "module04/adamw.hpp"

namespace course::planted {

/// m and v used without the bias corrections 1 - beta^t (the early steps ~3x too long at
/// t = 1 with the default betas).
void adamw_no_bias_correction(m04::AdamWStep step, const m04::AdamWArgs& args);

/// The weight decay applied to m instead of p (m -= lr * wd * m): decoupled decay misplaced.
void adamw_decay_on_m(m04::AdamWStep step, const m04::AdamWArgs& args);

/// The clip scale computed (and the norm reported) but never applied to the grads.
void adamw_clip_ignored(m04::AdamWStep step, const m04::AdamWArgs& args);

/// Every tensor decayed, whatever its decay flag (LayerNorm gains and biases shrink).
void adamw_decay_ignores_flag(m04::AdamWStep step, const m04::AdamWArgs& args);

/// The bf16 copy rounded from the params BEFORE the update (one step stale).
void adamw_stale_bf16(m04::AdamWStep step, const m04::AdamWArgs& args);

/// The norm without the square root (the sum of squares reported and used for the clip).
void adamw_norm_without_sqrt(m04::AdamWStep step, const m04::AdamWArgs& args);

}  // namespace course::planted
