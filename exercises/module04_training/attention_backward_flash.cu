/// @file attention_backward_flash.cu
/// @brief The launchers of YOUR steps flash and flash_deterministic (the kernel and what you
/// write: attention_backward_flash.cuh): the preprocessing (launch_row_dot, your step
/// row_dot in attention_backward.cu), then the K/V-parallel kernel, with dQ's additions in
/// any order (flash) or in K/V-tile order (flash_deterministic). Nothing to write here: a
/// step whose flag (attention_backward_device.cuh) is false throws NotImplemented.

#include "attention_backward_flash.cuh"

#include "attention_backward_device.cuh"
#include "module04/attention_backward.hpp"

namespace course::exercise::attn_bwd {

void launch_flash(const m04::AttentionBackwardArgs& args) {
  // @step flash
  if (!kFlashWritten)
    throw NotImplemented("attention_backward step flash (attention_backward_flash.cuh: the masked P^T, "
                         "ds_from_dp, write_dq_rows)",
                         __FILE__);
  // @end
  // D = rowsum(dO * O) into the workspace and dQ = 0 (the atomics add into it).
  launch_row_dot(args, args.workspace, true);
  launch_flash_kernel<AnyOrder>(make_params(args), args);
}

void launch_flash_deterministic(const m04::AttentionBackwardArgs& args) {
  // @step flash_deterministic
  if (!kFlashWritten)
    throw NotImplemented("attention_backward step flash_deterministic (needs step flash first)", __FILE__);
  if (!kDqTurnsWritten)
    throw NotImplemented("attention_backward step flash_deterministic (attention_backward_flash.cuh: "
                         "KvTileOrder::wait and ::pass)",
                         __FILE__);
  // @end
  // The same, plus the turn counters after D in the workspace, reset to 0 in the same pass.
  Params p = make_params(args);
  p.dq_turns = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(args.workspace) +
                                      m04::flash_backward_turns_offset(args.batch, args.heads, args.seq_q));
  launch_row_dot(args, args.workspace, true, p.dq_turns);
  launch_flash_kernel<KvTileOrder>(p, args);
}

}  // namespace course::exercise::attn_bwd
