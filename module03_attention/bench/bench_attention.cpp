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
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

// Defined in bench_attention_lib.cu (device code); declared here, its only user.
namespace course::m03::bench_lib {
void fill_uniform(float* p, std::int64_t n, std::uint64_t seed, float lo, float hi);
void causal_mask(float* s, std::int64_t rows, std::int64_t seq_q, std::int64_t seq_k, cudaStream_t stream);
}  // namespace course::m03::bench_lib

namespace {

using course::DeviceBuffer;
using course::m03::AttentionArgs;
using course::m03::AttentionStep;

constexpr std::int64_t kB = 4, kH = 16;

struct Shape {
  std::int64_t N, d;
  bool causal;
  std::string name() const {
    return "B" + std::to_string(kB) + "_H" + std::to_string(kH) + "_N" + std::to_string(N) + "_d" +
           std::to_string(d) + (causal ? "_causal" : "");
  }
};

/// Random Q, K, V in enough copies (rotated per iteration) that small problems do not
/// find their inputs in L2 (50 MB) from the previous iteration; O and lse.
struct Buffers {
  std::vector<DeviceBuffer<float>> q, k, v;
  DeviceBuffer<float> o, lse;
  int copies = 1;
  int next = 0;
};

Buffers& buffers_for(std::int64_t N, std::int64_t d) {
  static std::map<std::pair<std::int64_t, std::int64_t>, std::unique_ptr<Buffers>> cache;
  auto& slot = cache[{N, d}];
  if (!slot) {
    slot = std::make_unique<Buffers>();
    const std::int64_t n = kB * kH * N * d;
    const double qkv_bytes = 3.0 * static_cast<double>(n) * sizeof(float);
    slot->copies = static_cast<int>(std::clamp(200e6 / qkv_bytes, 1.0, 8.0));
    for (int c = 0; c < slot->copies; ++c) {
      for (auto* list : {&slot->q, &slot->k, &slot->v}) {
        list->emplace_back(static_cast<std::size_t>(n));
        course::m03::bench_lib::fill_uniform(list->back().data(), n, 0x5eed0000u + 97 * list->size() + 13 * c + N + d,
                                             -1.f, 1.f);
      }
    }
    slot->o = DeviceBuffer<float>(static_cast<std::size_t>(n));
    slot->lse = DeviceBuffer<float>(static_cast<std::size_t>(kB * kH * N));
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return *slot;
}

/// One workspace for the O(N^2) rows, grown on demand (and only if it fits).
float* workspace(std::size_t bytes, std::string* why) {
  static DeviceBuffer<float> ws;
  if (ws.bytes() >= bytes) return ws.data();
  ws = DeviceBuffer<float>();  // free the old one first
  std::size_t free_b = 0, total_b = 0;
  COURSE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (bytes + (std::size_t{512} << 20) > free_b) {
    *why = "the scores need " + std::to_string(bytes >> 20) + " MiB, only " + std::to_string(free_b >> 20) +
           " MiB free";
    return nullptr;
  }
  ws = DeviceBuffer<float>(bytes / sizeof(float));
  return ws.data();
}

AttentionArgs args_for(Buffers& b, const Shape& s, int copy) {
  AttentionArgs a = course::m03::make_attention_args(b.q[copy].data(), b.k[copy].data(), b.v[copy].data(), b.o.data(),
                                                     kB, kH, kH, s.N, s.N, s.d, course::AttentionLayout::BHND);
  a.causal = s.causal;
  return a;
}

void set_counters(benchmark::State& state, const AttentionArgs& a, std::size_t device_bytes) {
  course::bench::set_flops(state, course::m03::attention_flops(a));
  state.counters["mem_MB"] = static_cast<double>(device_bytes) / 1e6;
}

template <class Fn>
void bench_step(benchmark::State& state, Fn attention, AttentionStep step, Shape s) {
  if (!course::bench::require_device(state)) return;
  Buffers& b = buffers_for(s.N, s.d);
  AttentionArgs a = args_for(b, s, 0);
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
  try {
    attention(step, a);  // warm-up, and the NotImplemented check for exercise stubs
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const course::NotImplemented& e) {
    state.SkipWithError((std::string("not implemented: ") + e.what()).c_str());
    return;
  }
  for (auto _ : state) {
    const int c = b.next;
    b.next = (b.next + 1) % b.copies;
    a.q = b.q[c].data();
    a.k = b.k[c].data();
    a.v = b.v[c].data();
    course::bench::time_iteration(state, [&] { attention(step, a); });
  }
  set_counters(state, a, course::m03::attention_device_bytes(step, a));
}

cublasHandle_t cublas() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw course::Error("cublasCreate failed");
    cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain fp32 FMA, no TF32
    return h;
  }();
  return handle;
}

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw course::Error(std::string(what) + " failed: status " + std::to_string(st));
}

/// The materialized pipeline with cuBLAS's GEMMs (row-major via the transposition trick:
/// a row-major X is a column-major X^T).
void cublas_materialized(const AttentionArgs& a, float* s) {
  const int N = static_cast<int>(a.seq_k), M = static_cast<int>(a.seq_q), d = static_cast<int>(a.head_dim);
  const int batch = static_cast<int>(a.batch * a.heads);
  const float scale = course::m03::effective_scale(a), one = 1.f, zero = 0.f;
  // S^T (col-major N x M) = K (col-major d x N)^T * Q (col-major d x M): S row-major M x N.
  check_cublas(cublasSgemmStridedBatched(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, N, M, d, &scale, a.k, d,
                                         static_cast<long long>(N) * d, a.q, d, static_cast<long long>(M) * d, &zero, s, N,
                                         static_cast<long long>(M) * N, batch),
               "cublasSgemmStridedBatched (Q K^T)");
  const std::int64_t rows = static_cast<std::int64_t>(batch) * M;
  if (a.causal) course::m03::bench_lib::causal_mask(s, rows, M, N, nullptr);
  course::solution::softmax(course::m01::SoftmaxStep::online_vectorized,
                            course::m01::contiguous_softmax_args(s, s, rows, N, 1));
  // O^T (col-major d x M) = V^T (col-major d x N) * P^T (col-major N x M).
  check_cublas(cublasSgemmStridedBatched(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, d, M, N, &one, a.v, d,
                                         static_cast<long long>(N) * d, s, N, static_cast<long long>(M) * N, &zero, a.o, d,
                                         static_cast<long long>(M) * d, batch),
               "cublasSgemmStridedBatched (P V)");
}

void bench_library(benchmark::State& state, Shape s) {
  if (!course::bench::require_device(state)) return;
  Buffers& b = buffers_for(s.N, s.d);
  AttentionArgs a = args_for(b, s, 0);
  const std::size_t ws_bytes = course::m03::attention_workspace_bytes(AttentionStep::naive, a);
  std::string why;
  float* ws = workspace(ws_bytes, &why);
  if (ws == nullptr) {
    state.SkipWithError(("does not fit: " + why).c_str());
    return;
  }
  cublas_materialized(a, ws);  // warm-up
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto _ : state) {
    const int c = b.next;
    b.next = (b.next + 1) % b.copies;
    a.q = b.q[c].data();
    a.k = b.k[c].data();
    a.v = b.v[c].data();
    course::bench::time_iteration(state, [&] { cublas_materialized(a, ws); });
  }
  set_counters(state, a, course::m03::attention_device_bytes(AttentionStep::naive, a));
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
        for (const auto& info : course::m03::kAttentionSteps) {
          if (!registrable(info.step, s)) continue;
          benchmark::RegisterBenchmark(
              ("attn_f32/solution/" + std::string(info.name) + "/" + s.name()).c_str(),
              [step = info.step, s](benchmark::State& st) {
                bench_step(st, [](AttentionStep k, const AttentionArgs& a) { course::solution::attention(k, a); },
                           step, s);
              })
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
          benchmark::RegisterBenchmark(
              ("attn_f32/exercise/" + std::string(info.name) + "/" + s.name()).c_str(),
              [step = info.step, s](benchmark::State& st) {
                bench_step(st, [](AttentionStep k, const AttentionArgs& a) { course::exercise::attention(k, a); },
                           step, s);
              })
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        }
        benchmark::RegisterBenchmark(("attn_f32/library/cublas_materialized/" + s.name()).c_str(),
                                     [s](benchmark::State& st) { bench_library(st, s); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
  return true;
}();

}  // namespace
