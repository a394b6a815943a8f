/// @file attention_backward_flash.cu
/// @brief Steps 2 and 3 of the attention-backward ladder, flash and flash_deterministic: the
/// preprocessing (launch_row_dot, attention_backward.cu), then the K/V-parallel kernel of
/// attention_backward_flash.cuh (the design, predictions and measurements are there), with
/// dQ's additions in any order (flash) or in K/V-tile order (flash_deterministic).

#include "attention_backward_flash.cuh"

#include "attention_backward_device.cuh"
#include "module04/attention_backward.hpp"

namespace course::solution::attn_bwd {

void launch_flash(const m04::AttentionBackwardArgs& args) {
  // @step flash  (the exercise's kFlashWritten test)
  // @end
  // D = rowsum(dO * O) into the workspace and dQ = 0 (the atomics add into it).
  launch_row_dot(args, args.workspace, true);
  launch_flash_kernel<AnyOrder>(make_params(args), args);
}

void launch_flash_deterministic(const m04::AttentionBackwardArgs& args) {
  // @step flash_deterministic  (the exercise's kFlashWritten and kDqTurnsWritten tests)
  // @end
  // The same, plus the turn counters after D in the workspace, reset to 0 in the same pass.
  Params p = make_params(args);
  p.dq_turns = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(args.workspace) +
                                      m04::flash_backward_turns_offset(args.batch, args.heads, args.seq_q));
  launch_row_dot(args, args.workspace, true, p.dq_turns);
  launch_flash_kernel<KvTileOrder>(p, args);
}

}  // namespace course::solution::attn_bwd
