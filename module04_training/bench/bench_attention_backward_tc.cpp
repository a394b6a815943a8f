// Benchmarks of the tensor-core (bf16) attention-backward steps, solution beside exercise,
// at FlashAttention's benchmark shapes: B*N = 16384 tokens, H*d = 2048 (d = 64: H = 32;
// d = 128: H = 16), N in {1024, ..., 16384}, causal and not. The library comparison
// (FlashAttention-2 and cuDNN through PyTorch's SDPA backward on the same shapes) is
// scripts/compare_torch.py's; the lesson quotes both from one run.
//
// Row names: "attn_bwd_bf16/<impl>/<step>/B<B>_H<H>_N<N>_d<d>[_causal]". Counters: TFLOP/s by
// the FlashAttention convention 10*B*H*N^2*d (halved when causal) and mem_MB (bf16 Q, K, V, O,
// dO and gradients, fp32 lse and the workspace: D, lse2 and the fp32 dQ accumulator, S copies
// of it for tc_split_dq).
// Inputs: Q, K, V, dO distinct random bf16 data; O and lse from module 3's tc_flash2 forward.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module03/attention.hpp"
#include "module04/attention_backward.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>

namespace {

namespace bench = course::bench;
using bf16 = __nv_bfloat16;
using course::DeviceBuffer;
using course::m04::AttentionBackwardArgsBf16;
using course::m04::AttentionBackwardStep;
using AttentionBackwardTcFn = void (*)(AttentionBackwardStep, const AttentionBackwardArgsBf16&);

constexpr std::int64_t kTokens = 16384, kModelWidth = 2048;

struct Shape {
  std::int64_t N, d;
  bool causal;
  std::int64_t B() const { return kTokens / N; }
  std::int64_t H() const { return kModelWidth / d; }
  std::string name() const { return bench::attention_shape(B(), H(), N, d, causal); }
};

/// Random bf16 Q, K, V, dO and the forward's O and lse, rotated per iteration where they
/// would fit in L2; one set of gradients and one workspace per step kind.
struct Buffers {
  struct Inputs {
    DeviceBuffer<bf16> q, k, v, o, dout;
    DeviceBuffer<float> lse;
  };
  bench::Rotation<Inputs> inputs;
  DeviceBuffer<bf16> dq, dk, dv;
  DeviceBuffer<float> ws;

  explicit Buffers(const Shape& s) {
    const std::int64_t n = s.B() * s.H() * s.N * s.d, rows = s.B() * s.H() * s.N;
    const auto un = static_cast<std::size_t>(n);
    const int copies = bench::rotation_copies(5.0 * static_cast<double>(n) * sizeof(bf16));
    std::uint64_t seed = course::seed_for("bench_attention_backward_tc/" + s.name());
    for (int c = 0; c < copies; ++c) {
      Inputs& x = inputs.add();
      for (DeviceBuffer<bf16>* buf : {&x.q, &x.k, &x.v, &x.dout}) {
        *buf = DeviceBuffer<bf16>(un);
        bench::fill_uniform_device(buf->data(), n, seed++, -1.f, 1.f);
      }
      x.o = DeviceBuffer<bf16>(un);
      x.lse = DeviceBuffer<float>(static_cast<std::size_t>(rows));
      course::m03::AttentionArgsBf16 f =
          course::m03::make_attention_args_bf16(x.q.data(), x.k.data(), x.v.data(), x.o.data(), s.B(), s.H(), s.H(),
                                                s.N, s.N, s.d, course::AttentionLayout::BHND);
      f.lse = x.lse.data();
      f.causal = s.causal;
      course::solution::attention(course::m03::AttentionStep::tc_flash2, f);
    }
    dq = DeviceBuffer<bf16>(un);
    dk = DeviceBuffer<bf16>(un);
    dv = DeviceBuffer<bf16>(un);
    const AttentionBackwardArgsBf16 a = args_for(s);
    std::size_t ws_bytes = 0;  // the largest step's (tc_split_dq: S fp32 dQ copies on this device)
    for (const auto& info : course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::bf16))
      ws_bytes = std::max(ws_bytes, course::m04::attention_backward_workspace_bytes(info.step, a));
    ws = DeviceBuffer<float>(ws_bytes / sizeof(float) + 4);
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  AttentionBackwardArgsBf16 args_for(const Shape& s) {
    AttentionBackwardArgsBf16 a = course::m04::make_attention_backward_args_bf16(
        nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, dq.data(), dk.data(), dv.data(), s.B(), s.H(), s.H(), s.N,
        s.N, s.d, course::AttentionLayout::BHND);
    a.causal = s.causal;
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    return a;
  }
};

Buffers& buffers_for(const Shape& s) { return bench::cached<Buffers>(std::tuple{s.N, s.d, s.causal}, s); }

void bench_step(benchmark::State& state, AttentionBackwardTcFn attention_backward, AttentionBackwardStep step,
                const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    const AttentionBackwardArgsBf16 a = b.args_for(s);
    bench::time_calls(
        state,
        [&] {
          AttentionBackwardArgsBf16 next = a;
          Buffers::Inputs& c = b.inputs.next();
          next.q = c.q.data();
          next.k = c.k.data();
          next.v = c.v.data();
          next.o = c.o.data();
          next.dout = c.dout.data();
          next.lse = c.lse.data();
          return next;
        },
        [&](const AttentionBackwardArgsBf16& args) { attention_backward(step, args); });
    bench::set_flops(state, course::m04::attention_backward_flops(a));
    bench::set_device_memory(state, course::m04::attention_backward_device_bytes(step, a));
  });
}

const bool kRegistered = [] {
  for (const std::int64_t d : {64, 128})
    for (const bool causal : {false, true})
      for (const std::int64_t N : {1024, 2048, 4096, 8192, 16384}) {
        const Shape s{N, d, causal};
        for (const auto& info : course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::bf16))
          bench::add_step_rows("attn_bwd_bf16", info.name, s.name(), benchmark::kMillisecond,
                               static_cast<AttentionBackwardTcFn>(&course::solution::attention_backward),
                               static_cast<AttentionBackwardTcFn>(&course::exercise::attention_backward),
                               [step = info.step, s](benchmark::State& st, AttentionBackwardTcFn fn) {
                                 bench_step(st, fn, step, s);
                               });
      }
  return true;
}();

}  // namespace
