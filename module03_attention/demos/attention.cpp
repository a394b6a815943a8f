// m03_attention: the lesson's worked examples (three tokens; the 4 x 4 causal mask), then
// the ladder at growing sequence lengths: time and device memory of naive (O(N^2)) against
// the fused steps (O(N)).
//
//   m03_attention                         B = 1, H = 16, d = 64, N = 256 .. 8192
//   m03_attention --max-n 4096 --d 128 --heads 8 --seed 7
#include "course/compare.hpp"
#include "course/demo.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/timer.hpp"
#include "module03/attention.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

using course::AttentionLayout;
using course::DeviceBuffer;
using course::HostTensor;
using course::m03::AttentionArgs;
using course::m03::AttentionStep;

using AttnFn = std::function<void(AttentionStep, const AttentionArgs&)>;
struct Impl {
  const char* name;
  AttnFn fn;
};
const Impl kImpls[] = {
    {"solution", [](AttentionStep s, const AttentionArgs& a) { course::solution::attention(s, a); }},
    {"exercise", [](AttentionStep s, const AttentionArgs& a) { course::exercise::attention(s, a); }},
};

constexpr std::int64_t kPadD = 16;  // the kernels' smallest head dimension; extra columns are 0

std::string fmt(double x) {
  char buf[32];
  if (std::isinf(x)) std::snprintf(buf, sizeof buf, "%8s", x < 0 ? "-inf" : "inf");
  else std::snprintf(buf, sizeof buf, "%8.4f", x);
  return buf;
}

void print_matrix(const char* title, const std::vector<std::vector<double>>& m, const std::vector<std::string>& rows) {
  std::printf("   %s\n", title);
  for (std::size_t r = 0; r < m.size(); ++r) {
    std::string line = "     " + rows[r];
    line.resize(10, ' ');
    line += "[";
    for (double x : m[r]) line += " " + fmt(x);
    std::printf("%s ]\n", line.c_str());
  }
}

/// Rows of `n` x `cols` small vectors into a padded [1, 1, n, 16] tensor.
HostTensor<float> tensor_of(const std::vector<std::vector<double>>& rows) {
  HostTensor<float> t({1, 1, static_cast<std::int64_t>(rows.size()), kPadD});
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0; c < rows[r].size(); ++c) t({0, 0, static_cast<std::int64_t>(r), static_cast<std::int64_t>(c)}) = static_cast<float>(rows[r][c]);
  return t;
}

/// Runs one step on the padded example; nullopt if it is an unwritten exercise.
std::optional<std::vector<float>> run_example(const AttnFn& fn, AttentionStep step, const HostTensor<float>& q,
                                              const HostTensor<float>& k, const HostTensor<float>& v, bool causal) {
  const std::int64_t n = q.dim(2);
  DeviceBuffer<float> dq(q.storage()), dk(k.storage()), dv(v.storage()), d_o(q.storage().size());
  DeviceBuffer<float> ws(course::m03::attention_workspace_bytes(step, 1, 1, n, n) / sizeof(float));
  d_o.poison();
  AttentionArgs a = course::m03::make_attention_args(dq.data(), dk.data(), dv.data(), d_o.data(), 1, 1, 1, n, n, kPadD,
                                                     AttentionLayout::BHND);
  a.scale = 1.f;
  a.causal = causal;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  try {
    fn(step, a);
  } catch (const course::NotImplemented&) {
    return std::nullopt;
  }
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  return d_o.download();
}

/// Scores, weights and output of a tiny example, CPU reference beside every step's output.
void worked_example(const char* title, const std::vector<std::string>& tokens, const std::vector<std::vector<double>>& Q,
                    const std::vector<std::vector<double>>& K, const std::vector<std::vector<double>>& V, bool causal,
                    bool gpu) {
  const std::size_t n = Q.size(), dv = V[0].size();
  std::printf("\n== %s (scale = 1: scores are the raw dot products%s)\n", title, causal ? "; causal" : "");
  print_matrix("Q", Q, tokens);
  print_matrix("K", K, tokens);
  print_matrix("V", V, tokens);
  std::vector<std::vector<double>> S(n, std::vector<double>(n)), P = S, O(n, std::vector<double>(dv, 0.0));
  for (std::size_t i = 0; i < n; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t c = 0; c < Q[i].size(); ++c) s += Q[i][c] * K[j][c];
      S[i][j] = causal && j > i ? -std::numeric_limits<double>::infinity() : s;
      m = std::max(m, S[i][j]);
    }
    double l = 0;
    for (std::size_t j = 0; j < n; ++j) l += std::exp(S[i][j] - m);
    for (std::size_t j = 0; j < n; ++j) {
      P[i][j] = std::exp(S[i][j] - m) / l;
      for (std::size_t c = 0; c < dv; ++c) O[i][c] += P[i][j] * V[j][c];
    }
  }
  if (causal) {
    std::vector<std::vector<double>> mask(n, std::vector<double>(n, 0.0));
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = i + 1; j < n; ++j) mask[i][j] = -std::numeric_limits<double>::infinity();
    print_matrix("causal mask (added to the scores): row i sees keys j <= i", mask, tokens);
  }
  print_matrix(causal ? "masked scores S = Q K^T + mask" : "scores S = Q K^T", S, tokens);
  print_matrix("weights P = softmax(S) (each row sums to 1)", P, tokens);
  print_matrix("output O = P V (CPU reference)", O, tokens);

  // The library reference on the padded tensors must agree (it is what the tests use).
  const HostTensor<float> q = tensor_of(Q), k = tensor_of(K), v = tensor_of(V);
  course::ref::AttentionOptions opts;
  opts.scale = 1.0;
  opts.causal = causal;
  const auto ref = course::ref::attention_forward(q, k, v, opts);
  if (!gpu) return;
  for (const auto& info : course::m03::attention_steps(course::m03::AttentionDType::f32)) {
    if (causal && !course::m03::step_support(info.step).causal) continue;
    for (const Impl& impl : kImpls) {
      const auto got = run_example(impl.fn, info.step, q, k, v, causal);
      const std::string label = std::string(impl.name) + "/" + info.name;
      if (!got) {
        std::printf("   %-26s (not implemented yet: exercises/module03_attention/attention.cu)\n", label.c_str());
        continue;
      }
      double err = 0;
      std::string rows;
      for (std::size_t i = 0; i < n; ++i) {
        rows += " [";
        for (std::size_t c = 0; c < dv; ++c) rows += fmt((*got)[i * kPadD + c]);
        rows += " ]";
        for (std::int64_t c = 0; c < kPadD; ++c) {
          const double e = std::fabs((*got)[i * kPadD + c] - ref.out.storage()[i * kPadD + c]);
          err = std::isnan(e) ? INFINITY : std::max(err, e);
        }
      }
      std::printf("   %-26s O =%s   max|err| = %.1e\n", label.c_str(), rows.c_str(), err);
    }
  }
}

/// The ladder at growing N: time and device memory of each step.
void growing_n(std::int64_t B, std::int64_t H, std::int64_t d, std::int64_t max_n, std::uint64_t seed) {
  std::printf("\n== growing N: B = %lld, H = %lld, d = %lld, random Q, K, V in [-1, 1) (seed %llu)\n",
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(d),
              static_cast<unsigned long long>(seed));
  std::printf("   memory = Q, K, V, O (+ lse) + workspace on the device; naive stores all B*H*N^2 scores\n");
  std::printf("   %-6s %-26s %10s %10s %12s %14s\n", "N", "step", "time (ms)", "TFLOP/s", "memory (MB)", "max|O - ref|");
  struct Run {
    AttentionStep step;
    bool causal;
  };
  const Run runs[] = {{AttentionStep::fused, false}, {AttentionStep::naive, false}, {AttentionStep::tiled_online, false},
                      {AttentionStep::fused, true},  {AttentionStep::naive, true},  {AttentionStep::causal, true}};
  for (std::int64_t N = 256; N <= max_n; N *= 2) {
    const std::int64_t n = B * H * N * d;
    const std::vector<float> hq = course::random_vector(static_cast<std::size_t>(n), seed + N);
    const std::vector<float> hk = course::random_vector(static_cast<std::size_t>(n), seed + N + 1);
    const std::vector<float> hv = course::random_vector(static_cast<std::size_t>(n), seed + N + 2);
    DeviceBuffer<float> dq(hq), dk(hk), dv(hv), d_o(static_cast<std::size_t>(n)), d_lse(static_cast<std::size_t>(B * H * N));
    // Reference: the CPU for small N, else the fused step (its error against the CPU is the
    // tests' business; here the point is that every step agrees).
    std::vector<float> ref_out[2];
    const bool cpu_ref = N <= 512;
    if (cpu_ref) {
      for (const bool causal : {false, true}) {
        HostTensor<float> q({B, H, N, d}), k({B, H, N, d}), v({B, H, N, d});
        q.storage() = hq;
        k.storage() = hk;
        v.storage() = hv;
        course::ref::AttentionOptions opts;
        opts.causal = causal;
        ref_out[causal] = course::ref::attention_forward(q, k, v, opts).out.storage();
      }
    }
    for (const Run& r : runs) {
      if (d > course::m03::step_support(r.step).max_head_dim) continue;
      AttentionArgs a = course::m03::make_attention_args(dq.data(), dk.data(), dv.data(), d_o.data(), B, H, H, N, N, d,
                                                         AttentionLayout::BHND);
      a.causal = r.causal;
      if (course::m03::step_support(r.step).lse) a.lse = d_lse.data();
      const std::string label = std::string("solution/") + course::m03::step_name(r.step) + (r.causal ? " (causal)" : "");
      std::optional<DeviceBuffer<float>> ws;
      if (course::m03::step_support(r.step).workspace) {
        const std::size_t bytes = course::m03::attention_workspace_bytes(r.step, a);
        std::size_t free_b = 0, total_b = 0;
        COURSE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        if (bytes + (std::size_t{256} << 20) > free_b) {
          std::printf("   %-6lld %-26s %10s %10s %12.0f %14s\n", static_cast<long long>(N), label.c_str(), "-", "-",
                      static_cast<double>(course::m03::attention_device_bytes(r.step, a)) / 1e6, "does not fit");
          continue;
        }
        ws.emplace(bytes / sizeof(float));
        a.workspace = ws->data();
        a.workspace_bytes = bytes;
      }
      d_o.poison();
      course::solution::attention(r.step, a);
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> o = d_o.download();
      if (!cpu_ref && r.step == AttentionStep::fused) ref_out[r.causal] = o;
      std::string err = "-";
      if (!ref_out[r.causal].empty()) {
        double e = 0;
        for (std::size_t i = 0; i < o.size(); ++i) {
          const double x = std::fabs(static_cast<double>(o[i]) - ref_out[r.causal][i]);
          e = std::isnan(x) ? INFINITY : std::max(e, x);
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1e%s", e, cpu_ref ? "" : " (vs fused)");
        err = buf;
      }
      const auto t = course::time_kernel([&] { course::solution::attention(r.step, a); }, 2, 5);
      const double tflops = course::m03::attention_flops(a) / (t.median_ms * 1e-3) / 1e12;
      std::printf("   %-6lld %-26s %10.3f %10.1f %12.0f %14s\n", static_cast<long long>(N), label.c_str(), t.median_ms,
                  tflops, static_cast<double>(course::m03::attention_device_bytes(r.step, a)) / 1e6, err.c_str());
    }
  }
  std::printf("   (runs at N > 512 are compared with the fused step's output, computed first in each group\n"
              "    of the same masking; the tests compare every step with the CPU reference)\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Scaled dot-product attention: the lesson's worked examples, then every step of the ladder at "
               "growing sequence lengths (time and device memory)."};
  std::int64_t batch = 1, heads = 16, d = 64, max_n = 8192;
  std::uint64_t seed = 42;
  app.add_option("--batch", batch, "batch size B")->check(CLI::Range(std::int64_t{1}, std::int64_t{64}));
  app.add_option("--heads", heads, "heads H")->check(CLI::Range(std::int64_t{1}, std::int64_t{128}));
  app.add_option("--d", d, "head dimension")->check(CLI::IsMember({16, 32, 64, 96, 128}));
  app.add_option("--max-n", max_n, "largest sequence length (doubling from 256)")
      ->check(CLI::Range(std::int64_t{256}, std::int64_t{65536}));
  app.add_option("--seed", seed, "seed of the random inputs");
  CLI11_PARSE(app, argc, argv);

  try {
    const bool gpu = course::demo::device_or_explain();
    worked_example("three tokens: 'The cat sat'", {"The", "cat", "sat"}, {{1, 0}, {0, 2}, {1, 1}},
                   {{1, 0}, {0, 1}, {1, 1}}, {{1, 0}, {0, 1}, {1, 1}}, false, gpu);
    worked_example("four tokens, every score row [1, 2, 3, 4], V = identity: O shows the weights",
                   {"t0", "t1", "t2", "t3"}, {{1}, {1}, {1}, {1}}, {{1}, {2}, {3}, {4}},
                   {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}}, true, gpu);
    if (gpu) growing_n(batch, heads, d, max_n, seed);
    else std::cout << "\n(the growing-N timings need a GPU)\n";
  } catch (const course::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
