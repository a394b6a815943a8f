// GELU benchmarks: both steps (solution and exercise), forward and backward (with
// accumulate: the GPT adds the MLP branch's gradient into its buffer), fp32 and bf16, at
// 16384 x 1536 (the GPT-2-small MLP activation of 16 sequences of 1024 tokens), beside the
// ceiling rows "gelu{,_backward}/library/d2d_copy/<shape>": a cudaMemcpyAsync moving the
// same bytes. Credited bytes: forward 2 elements (read x, write y), backward 4 (read x, dy
// and the old dx, write dx). Every buffer is >= 100 MB, above the 50 MB L2.
#include "course/bench.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module04/gelu.hpp"

#include <cstdint>
#include <string>
#include <tuple>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m04::GeluArgs;
using course::m04::GeluBackwardArgs;
using course::m04::GeluDType;
using course::m04::GeluStep;
using GeluForwardFn = void (*)(GeluStep, const GeluArgs&);
using GeluBackwardFn = void (*)(GeluStep, const GeluBackwardArgs&);

constexpr std::int64_t kRows = 16384, kCols = 1536, kN = kRows * kCols;

std::string shape_name(GeluDType d) {
  return std::to_string(kRows) + "x" + std::to_string(kCols) + (d == GeluDType::bf16 ? "_bf16" : "_f32");
}

struct Buffers {
  DeviceBuffer<unsigned char> x, dy, out;
  explicit Buffers(GeluDType d) {
    const std::size_t bytes = static_cast<std::size_t>(kN) * course::m04::gelu_element_bytes(d);
    x = DeviceBuffer<unsigned char>(bytes), dy = DeviceBuffer<unsigned char>(bytes), out = DeviceBuffer<unsigned char>(bytes);
    const std::uint64_t seed = course::seed_for("bench_gelu/" + shape_name(d));
    if (d == GeluDType::bf16) {
      bench::fill_uniform_device(reinterpret_cast<__nv_bfloat16*>(x.data()), kN, seed, -4.f, 4.f);
      bench::fill_uniform_device(reinterpret_cast<__nv_bfloat16*>(dy.data()), kN, seed + 1, -1.f, 1.f);
      bench::fill_uniform_device(reinterpret_cast<__nv_bfloat16*>(out.data()), kN, seed + 2, -1.f, 1.f);
    } else {
      bench::fill_uniform_device(reinterpret_cast<float*>(x.data()), kN, seed, -4.f, 4.f);
      bench::fill_uniform_device(reinterpret_cast<float*>(dy.data()), kN, seed + 1, -1.f, 1.f);
      bench::fill_uniform_device(reinterpret_cast<float*>(out.data()), kN, seed + 2, -1.f, 1.f);
    }
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

Buffers& buffers_for(GeluDType d) { return bench::cached<Buffers>(static_cast<int>(d), d); }

double element_bytes(GeluDType d) { return static_cast<double>(course::m04::gelu_element_bytes(d)); }

void bench_forward(benchmark::State& state, GeluForwardFn fn, GeluStep step, GeluDType d) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(d);
    GeluArgs a;
    a.x = b.x.data(), a.y = b.out.data(), a.n = kN, a.dtype = d;
    bench::time_calls(state, [&] { return a; }, [&](const GeluArgs& args) { fn(step, args); });
    bench::set_bandwidth(state, 2.0 * element_bytes(d) * static_cast<double>(kN));
  });
}

void bench_backward(benchmark::State& state, GeluBackwardFn fn, GeluStep step, GeluDType d) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(d);
    GeluBackwardArgs a;
    a.x = b.x.data(), a.dy = b.dy.data(), a.dx = b.out.data(), a.n = kN, a.dtype = d, a.accumulate = true;
    bench::time_calls(state, [&] { return a; }, [&](const GeluBackwardArgs& args) { fn(step, args); });
    bench::set_bandwidth(state, 4.0 * element_bytes(d) * static_cast<double>(kN));
  });
}

/// The ceiling: copy `elements` elements' bytes (read + write), credited with exactly those.
void bench_copy(benchmark::State& state, GeluDType d, double elements_moved) {
  bench::guard(state, [&] {
    static DeviceBuffer<unsigned char> src, dst;
    const auto half = static_cast<std::size_t>(elements_moved / 2 * element_bytes(d) * static_cast<double>(kN));
    if (src.bytes() < half) {
      src = DeviceBuffer<unsigned char>(half), dst = DeviceBuffer<unsigned char>(half);
      COURSE_CUDA_CHECK(cudaMemset(src.data(), 1, half));
    }
    bench::time_calls(state, [&] { return half; }, [&](std::size_t bytes) {
      COURSE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice));
    });
    bench::set_bandwidth(state, 2.0 * static_cast<double>(half));
  });
}

const bool kRegistered = [] {
  for (GeluDType d : {GeluDType::f32, GeluDType::bf16}) {
    const std::string shape = shape_name(d);
    for (const auto& info : course::m04::kGeluSteps)
      bench::add_step_rows("gelu", info.name, shape, benchmark::kMicrosecond, &course::solution::gelu_forward,
                           &course::exercise::gelu_forward, [step = info.step, d](benchmark::State& st, GeluForwardFn fn) {
                             bench_forward(st, fn, step, d);
                           });
    bench::add_row(bench::row_name("gelu", "library", "d2d_copy", shape), benchmark::kMicrosecond,
                   [d](benchmark::State& st) { bench_copy(st, d, 2.0); });
    for (const auto& info : course::m04::kGeluSteps)
      bench::add_step_rows("gelu_backward", info.name, shape, benchmark::kMicrosecond,
                           &course::solution::gelu_backward, &course::exercise::gelu_backward,
                           [step = info.step, d](benchmark::State& st, GeluBackwardFn fn) {
                             bench_backward(st, fn, step, d);
                           });
    bench::add_row(bench::row_name("gelu_backward", "library", "d2d_copy", shape), benchmark::kMicrosecond,
                   [d](benchmark::State& st) { bench_copy(st, d, 4.0); });
  }
  return true;
}();

}  // namespace
