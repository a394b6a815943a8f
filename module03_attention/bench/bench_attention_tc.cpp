// Benchmarks of the tensor-core attention steps (bf16 Q, K, V, O; fp32 lse): every bf16
// step, solution beside exercise, at FlashAttention's benchmark shapes -- B*N = 16384
// tokens, H*d = 2048, d in {64, 128}, N_q = N_k = N in {1024, ..., 16384} -- causal and
// not, beside the library row
//   attn_bf16/library/cublas_materialized/<shape>:
//     S = scale * Q K^T   cublasGemmStridedBatchedEx, bf16 in, fp32 accumulation, bf16 S
//     P = softmax(S)      one block per row, fp32 arithmetic, bf16 P in place (+ causal mask)
//     O = P V             cublasGemmStridedBatchedEx, bf16 in, fp32 accumulation, bf16 O
// i.e. what a framework without a fused kernel does in bf16, so this binary keeps a
// library row without PyTorch. (FlashAttention-2 and cuDNN are measured beside these steps
// by the PyTorch bridge's comparison script.)
//
// Row names: "attn_bf16/<impl>/<step>/B<B>_H<H>_N<N>_d<d>[_causal]". Counters: TFLOP/s by
// the FlashAttention convention 4*B*H*N^2*d (halved when causal) and mem_MB, the device
// bytes the call needs (O(N) for the steps, + the B*H*N^2 bf16 scores for the library).
// Every step writes lse, as a training forward pass would.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "module03/attention.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

// Defined in bench_attention_tc_lib.cu (device code); declared here, its only user.
namespace course::m03::bench_lib {
void softmax_rows_bf16(__nv_bfloat16* s, std::int64_t rows, std::int64_t seq_q, std::int64_t seq_k, bool causal,
                       cudaStream_t stream);
}  // namespace course::m03::bench_lib

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m03::AttentionArgsBf16;
using course::m03::AttentionStep;
using bf16 = __nv_bfloat16;
using AttentionTcFn = void (*)(AttentionStep, const AttentionArgsBf16&);

constexpr std::int64_t kTokens = 16384;  // B * N
constexpr std::int64_t kModelDim = 2048;  // H * d

struct Shape {
  std::int64_t N, d;
  bool causal;
  std::int64_t B() const { return kTokens / N; }
  std::int64_t H() const { return kModelDim / d; }
  std::string name() const { return bench::attention_shape(B(), H(), N, d, causal); }
};

/// Random bf16 Q, K, V (distinct data; 64 MB each, so copies rotate only if they fit the
/// L2 several times over -- they never do here), O and lse.
struct Buffers {
  struct QKV {
    DeviceBuffer<bf16> q, k, v;
  };
  bench::Rotation<QKV> qkv;
  DeviceBuffer<bf16> o;
  DeviceBuffer<float> lse;

  Buffers(std::int64_t N, std::int64_t d) {
    const std::int64_t n = kTokens * kModelDim, B = kTokens / N, H = kModelDim / d;
    const double qkv_bytes = 3.0 * static_cast<double>(n) * sizeof(bf16);
    const int copies = bench::rotation_copies(qkv_bytes);
    for (int c = 0; c < copies; ++c) {
      QKV& x = qkv.add();
      std::uint64_t seed = 0xbf160000u + 1000 * static_cast<std::uint64_t>(c) + 7 * static_cast<std::uint64_t>(N + d);
      for (DeviceBuffer<bf16>* buf : {&x.q, &x.k, &x.v}) {
        *buf = DeviceBuffer<bf16>(static_cast<std::size_t>(n));
        bench::fill_uniform_device(buf->data(), n, seed++, -1.f, 1.f);
      }
    }
    o = DeviceBuffer<bf16>(static_cast<std::size_t>(n));
    lse = DeviceBuffer<float>(static_cast<std::size_t>(B * H * N));
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

Buffers& buffers_for(const Shape& s) { return bench::cached<Buffers>(std::pair{s.N, s.d}, s.N, s.d); }

/// The shape's arguments ([B, H, N, d] dense), without inputs: on_next_copy() sets them.
AttentionArgsBf16 args_for(Buffers& b, const Shape& s) {
  AttentionArgsBf16 a = course::m03::make_attention_args_bf16(nullptr, nullptr, nullptr, b.o.data(), s.B(), s.H(),
                                                              s.H(), s.N, s.N, s.d, course::AttentionLayout::BHND);
  a.causal = s.causal;
  a.lse = b.lse.data();
  return a;
}

AttentionArgsBf16 on_next_copy(Buffers& b, AttentionArgsBf16 a) {
  Buffers::QKV& c = b.qkv.next();
  a.q = c.q.data();
  a.k = c.k.data();
  a.v = c.v.data();
  return a;
}

void set_counters(benchmark::State& state, const AttentionArgsBf16& a, std::size_t device_bytes) {
  bench::set_flops(state, course::m03::attention_flops(a));
  bench::set_device_memory(state, device_bytes);
}

void bench_step(benchmark::State& state, AttentionTcFn attention, AttentionStep step, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    const AttentionArgsBf16 a = args_for(b, s);
    bench::time_calls(state, [&] { return on_next_copy(b, a); },
                      [&](const AttentionArgsBf16& args) { attention(step, args); });
    set_counters(state, a, course::m03::attention_device_bytes(a));
  });
}

/// Scores of the library row: B*H*N^2 bf16, grown on demand (and only if they fit with
/// 1 GiB to spare).
bf16* scores(std::size_t elems, std::string* why) {
  return bench::scratch<bf16>(elems * sizeof(bf16), "the scores", why, std::size_t{1} << 30);
}

/// The materialized bf16 pipeline with cuBLAS's GEMMs (row-major through the transposition
/// trick: a row-major X is a column-major X^T). fp32 accumulation in both GEMMs.
void cublas_materialized(const AttentionArgsBf16& a, bf16* s) {
  const int Nk = static_cast<int>(a.seq_k), Nq = static_cast<int>(a.seq_q), d = static_cast<int>(a.head_dim);
  const int batch = static_cast<int>(a.batch * a.heads);
  const float scale = course::m03::effective_scale(a), one = 1.f, zero = 0.f;
  const cublasHandle_t h = bench::cublas_handle();
  // S^T (col-major Nk x Nq) = K (col-major d x Nk)^T * Q (col-major d x Nq): S row-major Nq x Nk.
  bench::check_cublas(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, Nk, Nq, d, &scale, a.k, CUDA_R_16BF, d,
                                                 static_cast<long long>(Nk) * d, a.q, CUDA_R_16BF, d,
                                                 static_cast<long long>(Nq) * d, &zero, s, CUDA_R_16BF, Nk,
                                                 static_cast<long long>(Nq) * Nk, batch, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT),
                      "cublasGemmStridedBatchedEx (Q K^T)");
  course::m03::bench_lib::softmax_rows_bf16(s, static_cast<std::int64_t>(batch) * Nq, Nq, Nk, a.causal, nullptr);
  // O^T (col-major d x Nq) = V^T (col-major d x Nk) * P^T (col-major Nk x Nq).
  bench::check_cublas(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, d, Nq, Nk, &one, a.v, CUDA_R_16BF, d,
                                                 static_cast<long long>(Nk) * d, s, CUDA_R_16BF, Nk,
                                                 static_cast<long long>(Nq) * Nk, &zero, a.o, CUDA_R_16BF, d,
                                                 static_cast<long long>(Nq) * d, batch, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT),
                      "cublasGemmStridedBatchedEx (P V)");
}

void bench_library(benchmark::State& state, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    const AttentionArgsBf16 a = args_for(b, s);
    const std::size_t elems = static_cast<std::size_t>(s.B() * s.H()) * static_cast<std::size_t>(s.N * s.N);
    std::string why;
    bf16* ws = scores(elems, &why);
    if (ws == nullptr) {
      state.SkipWithError(("does not fit: " + why).c_str());
      return;
    }
    bench::time_calls(state, [&] { return on_next_copy(b, a); },
                      [&](const AttentionArgsBf16& args) { cublas_materialized(args, ws); });
    set_counters(state, a, course::m03::attention_device_bytes(a) + elems * sizeof(bf16));
  });
}

const bool kRegistered = [] {
  for (const std::int64_t d : {64, 128})
    for (const bool causal : {false, true})
      for (const std::int64_t N : {1024, 2048, 4096, 8192, 16384}) {
        const Shape s{N, d, causal};
        for (const auto& info : course::m03::attention_steps(course::m03::AttentionDType::bf16))
          bench::add_step_rows("attn_bf16", info.name, s.name(), benchmark::kMillisecond,
                               static_cast<AttentionTcFn>(&course::solution::attention),
                               static_cast<AttentionTcFn>(&course::exercise::attention),
                               [step = info.step, s](benchmark::State& st, AttentionTcFn fn) {
                                 bench_step(st, fn, step, s);
                               });
        bench::add_row(bench::row_name("attn_bf16", "library", "cublas_materialized", s.name()),
                       benchmark::kMillisecond, [s](benchmark::State& st) { bench_library(st, s); });
      }
  return true;
}();

}  // namespace
