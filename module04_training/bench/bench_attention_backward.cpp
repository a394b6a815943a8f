// Benchmarks of the attention-backward ladder (fp32): every step, solution beside exercise,
// at B = 4, H = 16 (B*H = 64), d in {64, 128}, N_q = N_k = N in {512, ..., 8192}, causal and
// not, beside the library row
//   attn_bwd_f32/library/cublas_materialized/<shape>:
//     S  = scale * Q K^T     cublasSgemmStridedBatched (default math mode: true fp32, no TF32)
//     P  = exp(S - lse)      a small elementwise kernel, causal mask included, in place
//     dV = P^T dO            cublasSgemmStridedBatched
//     dP = dO V^T            cublasSgemmStridedBatched
//     dS = P * (dP - rowsum(P * dP))   module 4's softmax backward (fused_vectorized), in place
//     dQ = scale * dS K      cublasSgemmStridedBatched
//     dK = scale * dS^T Q    cublasSgemmStridedBatched
// i.e. what a framework without a fused backward does, with cuBLAS's GEMMs.
//
// Row names: "attn_bwd_f32/<impl>/<step>/B4_H16_N<N>_d<d>[_causal]". Counters: TFLOP/s by the
// FlashAttention convention 10*B*H*N^2*d (backward = 2.5 x forward, halved when causal; the
// library row computes every score and is credited the same), and mem_MB: the device bytes
// the call needs (Q, K, V, O, dO, lse, dQ, dK, dV and the step's workspace: 2*B*H*N^2 floats
// for naive and the library row, B*H*N floats for the flash steps, + B*H*N/64 ints of dQ turn
// counters for flash_deterministic).
// Step naive is skipped where its O(N^2) workspace exceeds 20 GB (N = 8192: 34 GB); the
// library row runs wherever its workspace fits in free device memory.
// Inputs: Q, K, V, dO distinct random data; O and lse from module 3's fused forward.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module03/attention.hpp"
#include "module04/attention_backward.hpp"
#include "module04/softmax_backward.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>

// Defined in bench_attention_backward_lib.cu (device code); declared here, its only user.
namespace course::m04::bench_lib {
void probabilities_from_lse(float* s, const float* lse, std::int64_t rows, std::int64_t seq_q, std::int64_t seq_k,
                            bool causal, cudaStream_t stream);
}  // namespace course::m04::bench_lib

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m04::AttentionBackwardArgs;
using course::m04::AttentionBackwardStep;
using AttentionBackwardFn = void (*)(AttentionBackwardStep, const AttentionBackwardArgs&);

constexpr std::int64_t kB = 4, kH = 16;
/// Step naive is not run where its P and dP would take more than this.
constexpr std::size_t kNaiveWorkspaceLimit = std::size_t{20} << 30;

struct Shape {
  std::int64_t N, d;
  bool causal;
  std::string name() const { return bench::attention_shape(kB, kH, N, d, causal); }
};

/// Random Q, K, V, dO and the forward's O and lse, in enough copies (rotated per iteration)
/// that small problems do not find their inputs in L2 from the previous iteration; one set
/// of gradients and the flash steps' workspace (D, and flash_deterministic's turn counters).
struct Buffers {
  struct Inputs {
    DeviceBuffer<float> q, k, v, o, dout, lse;
  };
  bench::Rotation<Inputs> inputs;
  DeviceBuffer<float> dq, dk, dv, flash_ws;

  explicit Buffers(const Shape& s) {
    const std::int64_t n = kB * kH * s.N * s.d, rows = kB * kH * s.N;
    const auto un = static_cast<std::size_t>(n);
    const double input_bytes = 5.0 * static_cast<double>(n) * sizeof(float);
    const int copies = bench::rotation_copies(input_bytes);
    std::uint64_t seed = course::seed_for("bench_attention_backward/" + s.name());
    for (int c = 0; c < copies; ++c) {
      Inputs& x = inputs.add();
      // Distinct data for Q, K, V, dO of every copy (Q = K would make Q K^T symmetric).
      for (DeviceBuffer<float>* buf : {&x.q, &x.k, &x.v, &x.dout}) {
        *buf = DeviceBuffer<float>(un);
        bench::fill_uniform_device(buf->data(), n, seed++, -1.f, 1.f);
      }
      x.o = DeviceBuffer<float>(un);
      x.lse = DeviceBuffer<float>(static_cast<std::size_t>(rows));
      // O and lse as the forward pass leaves them (module 3's fused step).
      course::m03::AttentionArgs f = course::m03::make_attention_args(
          x.q.data(), x.k.data(), x.v.data(), x.o.data(), kB, kH, kH, s.N, s.N, s.d, course::AttentionLayout::BHND);
      f.lse = x.lse.data();
      f.causal = s.causal;
      course::solution::attention(course::m03::AttentionStep::fused, f);
    }
    dq = DeviceBuffer<float>(un);
    dk = DeviceBuffer<float>(un);
    dv = DeviceBuffer<float>(un);
    // The larger of the two flash steps' workspaces (flash_deterministic's: D + counters).
    const std::size_t ws_bytes = course::m04::attention_backward_workspace_bytes(
        AttentionBackwardStep::flash_deterministic, kB, kH, s.N, s.N);
    flash_ws = DeviceBuffer<float>((ws_bytes + sizeof(float) - 1) / sizeof(float));
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

Buffers& buffers_for(const Shape& s) { return bench::cached<Buffers>(std::tuple{s.N, s.d, s.causal}, s); }

/// One workspace for the O(N^2) rows (P and dP), grown on demand and only if it fits.
float* big_workspace(std::size_t bytes, std::string* why) { return bench::scratch<float>(bytes, "P and dP", why); }

/// The shape's arguments, without inputs: on_next_copy() points them at the next copy.
AttentionBackwardArgs args_for(Buffers& b, const Shape& s) {
  AttentionBackwardArgs a = course::m04::make_attention_backward_args(
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, b.dq.data(), b.dk.data(), b.dv.data(), kB, kH, kH, s.N,
      s.N, s.d, course::AttentionLayout::BHND);
  a.causal = s.causal;
  return a;
}

AttentionBackwardArgs on_next_copy(Buffers& b, AttentionBackwardArgs a) {
  Buffers::Inputs& c = b.inputs.next();
  a.q = c.q.data();
  a.k = c.k.data();
  a.v = c.v.data();
  a.o = c.o.data();
  a.dout = c.dout.data();
  a.lse = c.lse.data();
  return a;
}

void set_counters(benchmark::State& state, const AttentionBackwardArgs& a, std::size_t device_bytes) {
  bench::set_flops(state, course::m04::attention_backward_flops(a));
  bench::set_device_memory(state, device_bytes);
}

void bench_step(benchmark::State& state, AttentionBackwardFn attention_backward, AttentionBackwardStep step,
                const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    AttentionBackwardArgs a = args_for(b, s);
    a.workspace_bytes = course::m04::attention_backward_workspace_bytes(step, a);
    if (step == AttentionBackwardStep::naive) {
      if (a.workspace_bytes > kNaiveWorkspaceLimit) {
        state.SkipWithError(("skipped: step naive needs " + std::to_string(a.workspace_bytes >> 20) +
                             " MiB of O(N^2) workspace (this benchmark's limit: 20 GiB)")
                                .c_str());
        return;
      }
      std::string why;
      a.workspace = big_workspace(a.workspace_bytes, &why);
      if (a.workspace == nullptr) {
        state.SkipWithError(("does not fit: " + why).c_str());
        return;
      }
    } else {
      a.workspace = b.flash_ws.data();
    }
    bench::time_calls(state, [&] { return on_next_copy(b, a); },
                      [&](const AttentionBackwardArgs& args) { attention_backward(step, args); });
    set_counters(state, a, course::m04::attention_backward_device_bytes(step, a));
  });
}

/// The materialized backward with cuBLAS's GEMMs. Row-major matrices through the
/// transposition trick: a row-major X (rows x cols) is a column-major X^T with ld = cols.
/// `ws` holds S (then P) and dP (then dS), B*H*N_q*N_k floats each.
void cublas_materialized(const AttentionBackwardArgs& a, float* ws) {
  const int Nk = static_cast<int>(a.seq_k), Nq = static_cast<int>(a.seq_q), d = static_cast<int>(a.head_dim);
  const int batch = static_cast<int>(a.batch * a.heads);
  const long long sq = static_cast<long long>(Nq) * d, sk = static_cast<long long>(Nk) * d;
  const long long ss = static_cast<long long>(Nq) * Nk;
  float* p = ws;
  float* dp = ws + static_cast<std::size_t>(batch) * static_cast<std::size_t>(ss);
  const float scale = course::m04::effective_scale(a), one = 1.f, zero = 0.f;
  const cublasHandle_t h = bench::cublas_handle();
  // S^T (col-major Nk x Nq) = K (col-major d x Nk)^T * Q (col-major d x Nq): S row-major Nq x Nk.
  bench::check_cublas(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, Nk, Nq, d, &scale, a.k, d, sk, a.q, d,
                                                sq, &zero, p, Nk, ss, batch),
                      "cublasSgemmStridedBatched (S = scale Q K^T)");
  const std::int64_t rows = static_cast<std::int64_t>(batch) * Nq;
  course::m04::bench_lib::probabilities_from_lse(p, a.lse, rows, Nq, Nk, a.causal, nullptr);
  // dV^T (col-major d x Nk) = dO^T (col-major d x Nq) * P (P row-major = col-major P^T: op T).
  bench::check_cublas(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, d, Nk, Nq, &one, a.dout, d, sq, p, Nk,
                                                ss, &zero, a.dv, d, sk, batch),
                      "cublasSgemmStridedBatched (dV = P^T dO)");
  // dP^T (col-major Nk x Nq) = V (op T of col-major d x Nk) * dO^T (col-major d x Nq).
  bench::check_cublas(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, Nk, Nq, d, &one, a.v, d, sk, a.dout, d,
                                                sq, &zero, dp, Nk, ss, batch),
                      "cublasSgemmStridedBatched (dP = dO V^T)");
  // dS = P * (dP - rowsum(P * dP)) in place over dP (rowsum(P * dP) = rowsum(dO * O) = D).
  course::solution::softmax_backward(course::m04::SoftmaxBackwardStep::fused_vectorized,
                                     course::m04::contiguous_softmax_backward_args(p, dp, dp, rows, Nk, 1));
  // dQ^T (col-major d x Nq) = K^T (col-major d x Nk) * dS^T (dS row-major = col-major dS^T).
  bench::check_cublas(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, d, Nq, Nk, &scale, a.k, d, sk, dp, Nk,
                                                ss, &zero, a.dq, d, sq, batch),
                      "cublasSgemmStridedBatched (dQ = scale dS K)");
  // dK^T (col-major d x Nk) = Q^T (col-major d x Nq) * dS (op T of the stored dS^T).
  bench::check_cublas(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, d, Nk, Nq, &scale, a.q, d, sq, dp, Nk,
                                                ss, &zero, a.dk, d, sk, batch),
                      "cublasSgemmStridedBatched (dK = scale dS^T Q)");
}

void bench_library(benchmark::State& state, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    const AttentionBackwardArgs a = args_for(b, s);
    std::string why;
    float* ws = big_workspace(course::m04::attention_backward_workspace_bytes(AttentionBackwardStep::naive, a), &why);
    if (ws == nullptr) {
      state.SkipWithError(("does not fit: " + why).c_str());
      return;
    }
    bench::time_calls(state, [&] { return on_next_copy(b, a); },
                      [&](const AttentionBackwardArgs& args) { cublas_materialized(args, ws); });
    set_counters(state, a, course::m04::attention_backward_device_bytes(AttentionBackwardStep::naive, a));
  });
}

const bool kRegistered = [] {
  for (const std::int64_t d : {64, 128})
    for (const bool causal : {false, true})
      for (const std::int64_t N : {512, 1024, 2048, 4096, 8192}) {
        const Shape s{N, d, causal};
        for (const auto& info : course::m04::attention_backward_steps(course::m04::AttentionBackwardDType::f32)) {
          bench::add_step_rows("attn_bwd_f32", info.name, s.name(), benchmark::kMillisecond,
                               static_cast<AttentionBackwardFn>(&course::solution::attention_backward),
                               static_cast<AttentionBackwardFn>(&course::exercise::attention_backward),
                               [step = info.step, s](benchmark::State& st, AttentionBackwardFn fn) {
                                 bench_step(st, fn, step, s);
                               });
        }
        bench::add_row(bench::row_name("attn_bwd_f32", "library", "cublas_materialized", s.name()),
                       benchmark::kMillisecond, [s](benchmark::State& st) { bench_library(st, s); });
      }
  return true;
}();

}  // namespace
