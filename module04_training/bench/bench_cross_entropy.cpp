// Fused cross-entropy benchmarks: every step (solution and exercise) at 16384 rows (tokens)
// of the character GPT's vocabulary (84, row stride 88: the next multiple of 8 elements,
// so every row starts on a 16-byte boundary in bf16 and in fp32) and of GPT-2's padded
// vocabulary (50304, contiguous), in fp32 and bf16, beside the ceiling row
// "cross_entropy/library/d2d_copy/<shape>": a cudaMemcpy2DAsync of the logits' rows into
// the dlogits buffer (the same bytes in the same layout: read rows x V, write rows x V).
// No library has a fused cross-entropy; PyTorch's F.cross_entropy + autograd is timed
// beside the course's top step by scripts/compare_torch.py. Every step is credited with
// the op's minimum traffic, bytes = 2 * rows * V * sizeof(element) (read the logits once,
// write dlogits once; the targets, losses and the two one-block kernels add 16 bytes per
// row, not counted), so GB/s / copy GB/s is the fraction of the ceiling reached.
#include "course/bench.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "module04/cross_entropy.hpp"

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::DType;
using course::m04::CrossEntropyStep;
using course::m04::FusedCrossEntropyArgs;
using CrossEntropyFn = void (*)(CrossEntropyStep, const FusedCrossEntropyArgs&);

struct Shape {
  std::int64_t rows, vocab, ld;
  DType dtype;
  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(vocab) + (ld != vocab ? "_ld" + std::to_string(ld) : "") + "_" +
           course::to_string(dtype);
  }
  std::size_t element_bytes() const { return course::m04::cross_entropy_element_bytes(dtype); }
  std::size_t matrix_bytes() const { return static_cast<std::size_t>(rows * ld) * element_bytes(); }
};

const Shape kShapes[] = {{16384, 84, 88, DType::f32},
                         {16384, 84, 88, DType::bf16},
                         {16384, 50304, 50304, DType::f32},
                         {16384, 50304, 50304, DType::bf16}};

/// One set of buffers: logits (uniform in [-4, 4)), targets (uniform classes), dlogits,
/// losses and the two scalars.
struct Set {
  DeviceBuffer<char> logits, dlogits;
  DeviceBuffer<std::int32_t> targets, num_valid;
  DeviceBuffer<float> losses, mean;

  Set(const Shape& s, std::uint64_t seed) {
    const std::int64_t n = s.rows * s.ld;
    logits = DeviceBuffer<char>(s.matrix_bytes());
    dlogits = DeviceBuffer<char>(s.matrix_bytes());
    if (s.dtype == DType::bf16) {
      bench::fill_uniform_device(reinterpret_cast<__nv_bfloat16*>(logits.data()), n, seed, -4.f, 4.f);
      bench::fill_uniform_device(reinterpret_cast<__nv_bfloat16*>(dlogits.data()), n, seed + 1, -1.f, 1.f);
    } else {
      bench::fill_uniform_device(reinterpret_cast<float*>(logits.data()), n, seed, -4.f, 4.f);
      bench::fill_uniform_device(reinterpret_cast<float*>(dlogits.data()), n, seed + 1, -1.f, 1.f);
    }
    std::vector<std::int32_t> t(static_cast<std::size_t>(s.rows));
    const std::vector<float> u = course::random_vector(t.size(), seed + 2, 0.f, 1.f);
    for (std::size_t i = 0; i < t.size(); ++i)
      t[i] = static_cast<std::int32_t>(static_cast<double>(u[i]) * static_cast<double>(s.vocab)) % static_cast<std::int32_t>(s.vocab);
    targets = DeviceBuffer<std::int32_t>(t);
    num_valid = DeviceBuffer<std::int32_t>(1);
    losses = DeviceBuffer<float>(t.size());
    mean = DeviceBuffer<float>(1);
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

/// Rotating copies of the set: 16384 x 88 is 2.9 (bf16) or 5.8 MB (fp32), inside the L2;
/// the 50304-wide matrices (1.6 / 3.3 GB) need one copy.
struct Buffers {
  bench::Rotation<Set> sets;
  explicit Buffers(const Shape& s) {
    const int copies = bench::rotation_copies(2.0 * static_cast<double>(s.matrix_bytes()));
    const std::uint64_t seed = course::seed_for("bench_cross_entropy/" + s.name());
    for (int i = 0; i < copies; ++i) sets.add(s, seed + 16 * static_cast<std::uint64_t>(i));
  }
};

Buffers& buffers_for(const Shape& s) {
  return bench::cached<Buffers>(std::tuple{s.rows, s.vocab, s.ld, static_cast<int>(s.dtype)}, s);
}

FusedCrossEntropyArgs args_for(Set& set, const Shape& s) {
  FusedCrossEntropyArgs a = course::m04::make_cross_entropy_args(s.dtype, set.logits.data(), set.targets.data(),
                                                                 set.losses.data(), set.mean.data(),
                                                                 set.num_valid.data(), set.dlogits.data(), s.rows,
                                                                 s.vocab);
  a.ldl = a.lddl = s.ld;
  return a;
}

/// The op's minimum traffic: read the logits once, write dlogits once.
double bytes_moved(const Shape& s) {
  return 2.0 * static_cast<double>(s.rows * s.vocab) * static_cast<double>(s.element_bytes());
}

void bench_step(benchmark::State& state, CrossEntropyFn cross_entropy, CrossEntropyStep step, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    bench::time_calls(state, [&] { return args_for(b.sets.next(), s); },
                      [&](const FusedCrossEntropyArgs& a) { cross_entropy(step, a); });
    bench::set_bandwidth(state, bytes_moved(s));
    bench::set_device_memory(state, 2 * s.matrix_bytes() + static_cast<std::size_t>(s.rows) * 8);
  });
}

/// The ceiling: the logits' rows copied into dlogits (same widths, same pitches).
void bench_copy(benchmark::State& state, const Shape& s) {
  bench::guard(state, [&] {
    Buffers& b = buffers_for(s);
    const std::size_t pitch = static_cast<std::size_t>(s.ld) * s.element_bytes();
    const std::size_t width = static_cast<std::size_t>(s.vocab) * s.element_bytes();
    bench::time_calls(state, [&]() -> Set& { return b.sets.next(); }, [&](Set& set) {
      COURSE_CUDA_CHECK(cudaMemcpy2DAsync(set.dlogits.data(), pitch, set.logits.data(), pitch, width,
                                          static_cast<std::size_t>(s.rows), cudaMemcpyDeviceToDevice));
    });
    bench::set_bandwidth(state, bytes_moved(s));
  });
}

const bool kRegistered = [] {
  for (const Shape& s : kShapes) {
    for (const auto& info : course::m04::kCrossEntropySteps) {
      bench::add_step_rows("cross_entropy", info.name, s.name(), benchmark::kMicrosecond,
                           &course::solution::cross_entropy, &course::exercise::cross_entropy,
                           [step = info.step, s](benchmark::State& st, CrossEntropyFn fn) {
                             bench_step(st, fn, step, s);
                           });
    }
    bench::add_row(bench::row_name("cross_entropy", "library", "d2d_copy", s.name()), benchmark::kMicrosecond,
                   [s](benchmark::State& st) { bench_copy(st, s); });
  }
  return true;
}();

}  // namespace
