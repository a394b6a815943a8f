// Benchmarks of the attention ladder (fp32): every step, solution beside exercise, at
// B = 4, H = 16 (B*H = 64), d in {64, 128}, N_q = N_k = N in {512, ..., 8192}, causal and
// not, beside the library row
//   attn_f32/library/cublas_materialized/<shape>:
//     S = scale * Q K^T   cublasSgemmStridedBatched (default math mode: true fp32, no TF32)
//     [causal mask]       a small kernel writing -inf
//     P = softmax(S)      module 1's best softmax (online_vectorized), in place
//     O = P V             cublasSgemmStridedBatched
// i.e. what a framework without a fused kernel does, with cuBLAS's GEMMs.
//
// Row names: "attn_f32/<impl>/<step>/B4_H16_N<N>_d<d>[_causal]". Counters: TFLOP/s by the
// FlashAttention convention 4*B*H*N^2*d (halved when causal), and mem_MB: the device bytes
// the call needs (Q, K, V, O, lse and the step's workspace: O(N^2) for naive and the
// library row, O(N) for the fused steps). naive and the library row are skipped when
// their B*H*N^2 scores do not fit in free device memory. Step fused_options runs with
// RoPE and ALiBi on, so its row shows what the options cost over step fused.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "module01/softmax.hpp"
#include "module03/attention.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

// Defined in bench_attention_lib.cu (device code); declared here, its only user.
namespace course::m03::bench_lib {
void causal_mask(float* s, std::int64_t rows, std::int64_t seq_q, std::int64_t seq_k, cudaStream_t stream);
}  // namespace course::m03::bench_lib

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m03::AttentionArgs;
using course::m03::AttentionStep;
using AttentionFn = void (*)(AttentionStep, const AttentionArgs&);

constexpr std::int64_t kB = 4, kH = 16;

struct Shape {
  std::int64_t N, d;
  bool causal;
  std::string name() const { return bench::attention_shape(kB, kH, N, d, causal); }
};

/// Random Q, K, V in enough copies (rotated per iteration) that small problems do not
/// find their inputs in L2 (50 MB) from the previous iteration; O and lse.
struct Buffers {
  struct QKV {
    DeviceBuffer<float> q, k, v;
  };
  bench::Rotation<QKV> qkv;
  DeviceBuffer<float> o, lse;

  Buffers(std::int64_t N, std::int64_t d) {
    const std::int64_t n = kB * kH * N * d;
    const double qkv_bytes = 3.0 * static_cast<double>(n) * sizeof(float);
    const int copies = bench::rotation_copies(qkv_bytes);
    for (int c = 0; c < copies; ++c) {
      QKV& x = qkv.add();
      // Distinct data for Q, K and V of every copy (Q = K would make Q K^T symmetric).
      std::uint64_t seed = 0x5eed0000u + 1000 * static_cast<std::uint64_t>(c) + 7 * static_cast<std::uint64_t>(N + d);
      for (DeviceBuffer<float>* buf : {&x.q, &x.k, &x.v}) {
        *buf = DeviceBuffer<float>(static_cast<std::size_t>(n));
        bench::fill_uniform_device(buf->data(), n, seed++, -1.f, 1.f);
      }
    }
    o = DeviceBuffer<float>(static_cast<std::size_t>(n));
    lse = DeviceBuffer<float>(static_cast<std::size_t>(kB * kH * N));
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

Buffers& buffers_for(const Shape& s) { return bench::cached<Buffers>(std::pair{s.N, s.d}, s.N, s.d); }

/// One workspace for the O(N^2) rows (the scores), grown on demand and only if it fits.
float* workspace(std::size_t bytes, std::string* why) { return bench::scratch<float>(bytes, "the scores", why); }

/// The shape's arguments, without inputs: on_next_copy() points them at Q, K and V.
AttentionArgs args_for(Buffers& b, const Shape& s) {
  AttentionArgs a = course::m03::make_attention_args(nullptr, nullptr, nullptr, b.o.data(), kB, kH, kH, s.N, s.N,
                                                     s.d, course::AttentionLayout::BHND);
  a.causal = s.causal;
  return a;
}

/// `a` on the next copy of the inputs.
AttentionArgs on_next_copy(Buffers& b, AttentionArgs a) {
  Buffers::QKV& c = b.qkv.next();
  a.q = c.q.data();
  a.k = c.k.data();
  a.v = c.v.data();
  return a;
}

void set_counters(benchmark::State& state, const AttentionArgs& a, std::size_t device_bytes) {
  bench::set_flops(state, course::m03::attention_flops(a));
  bench::set_device_memory(state, device_bytes);
}

void bench_step(benchmark::State& state, AttentionFn attention, AttentionStep step, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    AttentionArgs a = args_for(b, s);
    if (course::m03::step_support(step).lse) a.lse = b.lse.data();
    if (step == AttentionStep::fused_options) {
      a.rope = true;
      a.alibi = true;
    }
    if (course::m03::step_support(step).workspace) {
      std::string why;
      a.workspace_bytes = course::m03::attention_workspace_bytes(step, a);
      a.workspace = workspace(a.workspace_bytes, &why);
      if (a.workspace == nullptr) {
        state.SkipWithError(("does not fit: " + why).c_str());
        return;
      }
    }
    bench::time_calls(state, [&] { return on_next_copy(b, a); },
                      [&](const AttentionArgs& args) { attention(step, args); });
    set_counters(state, a, course::m03::attention_device_bytes(step, a));
  });
}

/// The materialized pipeline with cuBLAS's GEMMs (row-major via the transposition trick:
/// a row-major X is a column-major X^T).
void cublas_materialized(const AttentionArgs& a, float* s) {
  const int N = static_cast<int>(a.seq_k), M = static_cast<int>(a.seq_q), d = static_cast<int>(a.head_dim);
  const int batch = static_cast<int>(a.batch * a.heads);
  const float scale = course::m03::effective_scale(a), one = 1.f, zero = 0.f;
  const cublasHandle_t h = bench::cublas_handle();
  // S^T (col-major N x M) = K (col-major d x N)^T * Q (col-major d x M): S row-major M x N.
  bench::check_cublas(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, d, &scale, a.k, d,
                                                static_cast<long long>(N) * d, a.q, d, static_cast<long long>(M) * d,
                                                &zero, s, N, static_cast<long long>(M) * N, batch),
                      "cublasSgemmStridedBatched (Q K^T)");
  const std::int64_t rows = static_cast<std::int64_t>(batch) * M;
  if (a.causal) course::m03::bench_lib::causal_mask(s, rows, M, N, nullptr);
  course::solution::softmax(course::m01::SoftmaxStep::online_vectorized,
                            course::m01::contiguous_softmax_args(s, s, rows, N, 1));
  // O^T (col-major d x M) = V^T (col-major d x N) * P^T (col-major N x M).
  bench::check_cublas(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, d, M, N, &one, a.v, d,
                                                static_cast<long long>(N) * d, s, N, static_cast<long long>(M) * N,
                                                &zero, a.o, d, static_cast<long long>(M) * d, batch),
                      "cublasSgemmStridedBatched (P V)");
}

void bench_library(benchmark::State& state, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    const AttentionArgs a = args_for(b, s);
    std::string why;
    float* ws = workspace(course::m03::attention_workspace_bytes(AttentionStep::naive, a), &why);
    if (ws == nullptr) {
      state.SkipWithError(("does not fit: " + why).c_str());
      return;
    }
    bench::time_calls(state, [&] { return on_next_copy(b, a); },
                      [&](const AttentionArgs& args) { cublas_materialized(args, ws); });
    set_counters(state, a, course::m03::attention_device_bytes(AttentionStep::naive, a));
  });
}

bool registrable(AttentionStep step, const Shape& s) {
  const auto sup = course::m03::step_support(step);
  if (s.d > sup.max_head_dim) return false;
  if (s.causal && !sup.causal) return false;
  if (step == AttentionStep::causal && !s.causal) return false;  // same kernel as tiled_online
  return true;
}

const bool kRegistered = [] {
  for (const std::int64_t d : {64, 128})
    for (const bool causal : {false, true})
      for (const std::int64_t N : {512, 1024, 2048, 4096, 8192}) {
        const Shape s{N, d, causal};
        for (const auto& info : course::m03::attention_steps(course::m03::AttentionDType::f32)) {
          if (!registrable(info.step, s)) continue;
          bench::add_step_rows("attn_f32", info.name, s.name(), benchmark::kMillisecond,
                               static_cast<AttentionFn>(&course::solution::attention),  // the fp32 overload
                               static_cast<AttentionFn>(&course::exercise::attention),
                               [step = info.step, s](benchmark::State& st, AttentionFn fn) {
                                 bench_step(st, fn, step, s);
                               });
        }
        bench::add_row(bench::row_name("attn_f32", "library", "cublas_materialized", s.name()),
                       benchmark::kMillisecond, [s](benchmark::State& st) { bench_library(st, s); });
      }
  return true;
}();

}  // namespace
