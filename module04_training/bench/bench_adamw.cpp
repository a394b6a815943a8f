// AdamW benchmarks: both steps (solution and exercise) on two parameter lists -- the GPT of
// the next rung ("gpt6_d384": 6 layers, d_model 384, vocabulary 84, context 256; 76
// tensors, 10.8 M parameters) and GPT-2 small ("gpt12_d768": 12 layers, d_model 768,
// vocabulary 50257, context 1024; 148 tensors, 124 M parameters) -- with clipping
// (max_norm 1, the norm written to a device float) and a bf16 copy of every tensor, as the
// mixed-precision trainer calls it; beside the ceiling row "adamw/library/d2d_copy/<list>":
// a cudaMemcpyAsync moving the same bytes. Every step is credited with the op's minimum
// traffic, adamw_bytes_per_element(bf16, norm) = 34 bytes per parameter (read params, grads,
// m, v; write params, m, v, bf16; grads read once more for the norm), so its GB/s over the
// copy's is the fraction of the ceiling. Parameters, grads and moments live in one
// allocation per array (tensors back to back, as a trainer allocates them); the update is
// in place, so every iteration starts from the previous one's state (lr 1e-4 keeps it tame).
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module04/adamw.hpp"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m04::AdamWArgs;
using course::m04::AdamWStep;
using course::m04::AdamWTensor;
using AdamWFn = void (*)(AdamWStep, const AdamWArgs&);

struct Model {
  const char* name;
  int layers;
  std::int64_t d, vocab, context;
};

const Model kModels[] = {{"gpt6_d384", 6, 384, 84, 256}, {"gpt12_d768", 12, 768, 50257, 1024}};

/// (elements, decay) of every tensor, in the trainer's order.
std::vector<std::pair<std::int64_t, bool>> tensor_sizes(const Model& m) {
  std::vector<std::pair<std::int64_t, bool>> t;
  const std::int64_t d = m.d;
  for (int i = 0; i < m.layers; ++i) {
    for (auto s : {std::pair{d, false}, {d, false}, {3 * d * d, true}, {3 * d, false}, {d * d, true}, {d, false},
                   {d, false}, {d, false}, {4 * d * d, true}, {4 * d, false}, {4 * d * d, true}, {d, false}})
      t.push_back(s);
  }
  t.push_back({m.vocab * d, true});
  t.push_back({m.context * d, true});
  t.push_back({d, false});
  t.push_back({d, false});
  return t;
}

struct Buffers {
  std::int64_t total = 0;
  DeviceBuffer<float> p, g, m, v, norm;
  DeviceBuffer<__nv_bfloat16> b;
  std::vector<AdamWTensor> list;
  DeviceBuffer<unsigned char> ws[2];

  explicit Buffers(const Model& model) {
    const auto sizes = tensor_sizes(model);
    for (const auto& s : sizes) total += s.first;
    const auto n = static_cast<std::size_t>(total);
    p = DeviceBuffer<float>(n), g = DeviceBuffer<float>(n), m = DeviceBuffer<float>(n), v = DeviceBuffer<float>(n);
    b = DeviceBuffer<__nv_bfloat16>(n);
    norm = DeviceBuffer<float>(1);
    const std::uint64_t seed = course::seed_for(std::string("bench_adamw/") + model.name);
    bench::fill_uniform_device(p.data(), total, seed, -0.1f, 0.1f);
    bench::fill_uniform_device(g.data(), total, seed + 1, -1e-2f, 1e-2f);
    bench::fill_uniform_device(m.data(), total, seed + 2, -1e-3f, 1e-3f);
    bench::fill_uniform_device(v.data(), total, seed + 3, 0.f, 1e-4f);
    std::int64_t off = 0;
    for (const auto& s : sizes) {
      list.push_back({p.data() + off, g.data() + off, m.data() + off, v.data() + off, b.data() + off, s.first,
                      s.second});
      off += s.first;
    }
    for (const auto& info : course::m04::kAdamWSteps) {
      const auto step = static_cast<int>(info.step);
      ws[step] = DeviceBuffer<unsigned char>(
          course::m04::adamw_workspace_bytes(info.step, list.data(), static_cast<std::int64_t>(list.size())));
    }
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  AdamWArgs args(AdamWStep step) {
    AdamWArgs a;
    a.tensors = list.data();
    a.num_tensors = static_cast<std::int64_t>(list.size());
    a.lr = 1e-4f;
    a.t = 1000;
    a.max_norm = 1.f;
    a.grad_norm = norm.data();
    a.workspace = ws[static_cast<int>(step)].data();
    a.workspace_bytes = ws[static_cast<int>(step)].bytes();
    return a;
  }
};

Buffers& buffers_for(const Model& m) { return bench::cached<Buffers>(std::string(m.name), m); }

double bytes_moved(const Buffers& b) {
  return course::m04::adamw_bytes_per_element(true, true) * static_cast<double>(b.total);
}

void bench_step(benchmark::State& state, AdamWFn adamw, AdamWStep step, const Model& m) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(m);
    const AdamWArgs a = b.args(step);
    bench::time_calls(state, [&] { return a; }, [&](const AdamWArgs& args) { adamw(step, args); });
    bench::set_bandwidth(state, bytes_moved(b));
    state.counters["tensors"] = static_cast<double>(b.list.size());
  });
}

/// The ceiling: a device-to-device copy of half the op's bytes (read once, written once:
/// the same 34 bytes per parameter moved), credited with exactly those bytes.
void bench_copy(benchmark::State& state, const Model& m) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(m);
    static DeviceBuffer<unsigned char> src, dst;
    const std::size_t half = static_cast<std::size_t>(bytes_moved(b) / 2);
    if (src.bytes() < half) {
      src = DeviceBuffer<unsigned char>(half);
      dst = DeviceBuffer<unsigned char>(half);
      COURSE_CUDA_CHECK(cudaMemset(src.data(), 1, half));
    }
    bench::time_calls(state, [&]() -> std::size_t { return half; }, [&](std::size_t bytes) {
      COURSE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice));
    });
    bench::set_bandwidth(state, 2.0 * static_cast<double>(half));
  });
}

const bool kRegistered = [] {
  for (const Model& m : kModels) {
    for (const auto& info : course::m04::kAdamWSteps) {
      bench::add_step_rows("adamw", info.name, m.name, benchmark::kMicrosecond, &course::solution::adamw,
                           &course::exercise::adamw, [step = info.step, m](benchmark::State& st, AdamWFn fn) {
                             bench_step(st, fn, step, m);
                           });
    }
    bench::add_row(bench::row_name("adamw", "library", "d2d_copy", m.name), benchmark::kMicrosecond,
                   [m](benchmark::State& st) { bench_copy(st, m); });
  }
  return true;
}();

}  // namespace
