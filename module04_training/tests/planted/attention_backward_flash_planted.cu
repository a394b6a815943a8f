/// @file attention_backward_flash_planted.cu
/// @brief The planted mistake of step flash_deterministic (attention_backward_planted.hpp):
/// the solution's K/V kernel (solutions/module04_training/attention_backward_flash.cuh) with
/// a turn policy whose wait returns at once, so everything else is the real kernel. The
/// preprocessing is this file's own (the planted library links no module-4 solution).

#include "attention_backward_planted.hpp"

#include "../../../solutions/module04_training/attention_backward_flash.cuh"

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::planted {
namespace {

namespace sol = solution::attn_bwd;

/// The turn is passed on but never awaited: every K/V tile adds to dQ_i as soon as it gets
/// there, the atomics race as in step flash.
struct TurnNotAwaited : sol::KvTileOrder {
  __device__ __forceinline__ static void wait(int*, int) {}  // BUG: nobody waits
};

/// The preprocessing of the solution's flash_deterministic, one thread per query row:
/// D = dO . O into the workspace, the dQ row = 0, the first row of a query tile resets its
/// turn counter.
__global__ void prepare_kernel(const sol::Params p, float* d_row, long long rows, int head_dim) {
  const long long r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const long long bh = r / p.seq_q;
  const int i = static_cast<int>(r % p.seq_q), b = static_cast<int>(bh / p.heads), h = static_cast<int>(bh % p.heads);
  const float* g = p.dout + sol::row_offset(p.dos, b, h, i);
  const float* o = p.o + sol::row_offset(p.os, b, h, i);
  float* dq = p.dq + sol::row_offset(p.dqs, b, h, i);
  float s = 0.f;
  for (int c = 0; c < head_dim; ++c) {
    s = fmaf(g[c], o[c], s);
    dq[c] = 0.f;
  }
  d_row[r] = s;
  if (i % m04::kFlashBackwardQTile == 0) p.dq_turns[bh * p.q_tiles + i / m04::kFlashBackwardQTile] = 0;
}

}  // namespace

void attention_backward_flash_turn_not_awaited(m04::AttentionBackwardStep, const m04::AttentionBackwardArgs& args) {
  constexpr auto kStep = m04::AttentionBackwardStep::flash_deterministic;
  m04::validate_attention_backward_args(args, kStep, "planted attention_backward");
  sol::Params p = sol::make_params(args);
  p.dq_turns = reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(args.workspace) +
                                      m04::flash_backward_turns_offset(args.batch, args.heads, args.seq_q));
  const long long rows = args.batch * args.heads * args.seq_q;
  constexpr int kThreads = 128;
  prepare_kernel<<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, args.stream>>>(
      p, args.workspace, rows, static_cast<int>(args.head_dim));
  COURSE_CHECK_LAUNCH("planted prepare_kernel");
  sol::launch_flash_kernel<TurnNotAwaited>(p, args);
}

}  // namespace course::planted
