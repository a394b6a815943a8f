/// @file attention_tc.cu
/// @brief YOUR tensor-core attention steps (module 3, bf16 Q/K/V/O, fp32 accumulation).
/// (Placeholder while the exercises are written: every step throws NotImplemented.)

#include "module03/attention.hpp"

namespace course::exercise {

void attention(m03::AttentionStep step, const m03::AttentionArgsBf16& args) {
  m03::validate_attention_args(args, step, "attention");
  throw NotImplemented(std::string("attention step ") + m03::step_name(step), __FILE__);
}

}  // namespace course::exercise
