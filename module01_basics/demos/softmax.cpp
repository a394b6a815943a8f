// m01_softmax: the lesson's worked examples, then a realistic size, for every step of
// the softmax ladder (the solution's, and yours where you have written it).
//
//   m01_softmax                          4096 x 4096, dim = 1
//   m01_softmax --rows 65536 --cols 1024 --dim 0 --seed 7
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/timer.hpp"
#include "module01/softmax.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::HostTensor;
using course::m01::SoftmaxArgs;
using course::m01::SoftmaxStep;

using SoftmaxFn = std::function<void(SoftmaxStep, const SoftmaxArgs&)>;

struct Impl {
  const char* name;
  SoftmaxFn fn;
};
const Impl kImpls[] = {
    {"solution", [](SoftmaxStep s, const SoftmaxArgs& a) { course::solution::softmax(s, a); }},
    {"exercise", [](SoftmaxStep s, const SoftmaxArgs& a) { course::exercise::softmax(s, a); }},
};

/// A small matrix as lines of text, e.g. "[ 0.0900  0.2447  0.6652 ]".
template <class T>
std::vector<std::string> matrix_lines(const std::vector<T>& v, std::int64_t rows, std::int64_t cols) {
  std::vector<std::string> lines;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::string line = "[";
    for (std::int64_t c = 0; c < cols; ++c) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %8.4f", static_cast<double>(v[static_cast<std::size_t>(r * cols + c)]));
      line += buf;
    }
    lines.push_back(line + " ]");
  }
  return lines;
}

/// Print blocks of lines side by side under their titles.
void print_side_by_side(const std::vector<std::string>& titles, const std::vector<std::vector<std::string>>& blocks) {
  std::vector<std::size_t> width(blocks.size());
  std::size_t height = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    width[b] = titles[b].size();
    for (const auto& l : blocks[b]) width[b] = std::max(width[b], l.size());
    height = std::max(height, blocks[b].size());
  }
  auto row = [&](auto get) {
    std::string out = "    ";
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      std::string cell = get(b);
      cell.resize(width[b] + 3, ' ');
      out += cell;
    }
    std::cout << out << "\n";
  };
  row([&](std::size_t b) { return titles[b]; });
  for (std::size_t i = 0; i < height; ++i)
    row([&](std::size_t b) { return i < blocks[b].size() ? blocks[b][i] : std::string(); });
}

/// Run one step on a small contiguous input; nullopt if it is an unwritten exercise.
std::optional<std::vector<float>> run_small(const SoftmaxFn& fn, SoftmaxStep step, const std::vector<float>& x,
                                            std::int64_t rows, std::int64_t cols, int dim) {
  DeviceBuffer<float> dx(x), dy(x.size());
  dy.poison();
  DeviceBuffer<float> ws(course::m01::softmax_workspace_bytes(step, rows, cols, dim) / sizeof(float));
  SoftmaxArgs a = course::m01::contiguous_softmax_args(dx.data(), dy.data(), rows, cols, dim);
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  try {
    fn(step, a);
  } catch (const course::NotImplemented&) {
    return std::nullopt;
  }
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  return dy.download();
}

double max_abs_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    e = std::isnan(d) ? INFINITY : std::max(e, d);
  }
  return e;
}

void worked_example(const char* title, const std::vector<float>& x, std::int64_t rows, std::int64_t cols, int dim,
                    bool gpu) {
  std::cout << "\n== " << title << "  (" << rows << " x " << cols << ", dim = " << dim << ": each "
            << (dim == 1 ? "row" : "column") << " sums to 1)\n";
  HostTensor<double> xt({rows, cols});
  std::copy(x.begin(), x.end(), xt.storage().begin());
  const std::vector<double> ref = course::ref::softmax(xt, dim).storage();
  print_side_by_side({"x", "softmax(x) (CPU reference)"}, {matrix_lines(x, rows, cols), matrix_lines(ref, rows, cols)});
  if (!gpu) return;
  for (const auto& info : course::m01::kSoftmaxSteps) {
    std::vector<std::string> titles;
    std::vector<std::vector<std::string>> blocks;
    std::string errors;
    for (const Impl& impl : kImpls) {
      titles.push_back(std::string(impl.name) + "/" + info.name);
      const auto y = run_small(impl.fn, info.step, x, rows, cols, dim);
      if (!y) {
        blocks.push_back({"(not implemented yet:", " exercises/module01_basics/", " softmax.cu)"});
        continue;
      }
      blocks.push_back(matrix_lines(*y, rows, cols));
      char buf[64];
      std::snprintf(buf, sizeof buf, "  %s max|err| = %.2e", impl.name, max_abs_error(*y, ref));
      errors += buf;
    }
    print_side_by_side(titles, blocks);
    std::cout << "   " << errors << "\n";
  }
}

void realistic(std::int64_t rows, std::int64_t cols, int dim, std::uint64_t seed, bool gpu) {
  std::cout << "\n== random " << rows << " x " << cols << ", dim = " << dim << ", values in [-4, 4), seed " << seed
            << "\n";
  const auto n = static_cast<std::size_t>(rows * cols);
  const std::vector<float> x = course::random_vector(n, seed, -4.f, 4.f);
  HostTensor<float> xt({rows, cols});
  xt.storage() = x;
  const auto t0 = std::chrono::steady_clock::now();
  const HostTensor<double> ref_t = course::ref::softmax(xt.cast<double>(), dim);
  const double cpu_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<double>& ref = ref_t.storage();
  std::printf("   CPU reference (double): %.1f ms; y[0, 0:4] = [", cpu_ms);
  for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 4); ++c) std::printf(" %.6g", ref[static_cast<std::size_t>(c)]);
  std::printf(" ]\n");
  if (!gpu) return;

  const std::int64_t length = dim == 1 ? cols : rows;
  const auto tol = course::tolerance_for(course::DType::f32, length);
  const double bytes = 2.0 * static_cast<double>(n) * sizeof(float);
  DeviceBuffer<float> dx(x), dy(n);
  std::printf("   %-28s %12s %8s %10s %10s %8s\n", "step", "max|err|", "ok", "time (ms)", "GB/s", "of copy");

  const auto copy = course::time_kernel(
      [&] { COURSE_CUDA_CHECK(cudaMemcpyAsync(dy.data(), dx.data(), dx.bytes(), cudaMemcpyDeviceToDevice)); });
  std::printf("   %-28s %12s %8s %10.3f %10.0f %8s\n", "library/d2d_copy (ceiling)", "-", "-", copy.median_ms,
              bytes / (copy.median_ms * 1e-3) / 1e9, "1.00");

  for (const auto& info : course::m01::kSoftmaxSteps) {
    for (const Impl& impl : kImpls) {
      const std::string label = std::string(impl.name) + "/" + info.name;
      DeviceBuffer<float> ws(course::m01::softmax_workspace_bytes(info.step, rows, cols, dim) / sizeof(float));
      SoftmaxArgs a = course::m01::contiguous_softmax_args(dx.data(), dy.data(), rows, cols, dim);
      a.workspace = ws.data();
      a.workspace_bytes = ws.bytes();
      dy.poison();
      try {
        impl.fn(info.step, a);
      } catch (const course::NotImplemented&) {
        std::printf("   %-28s (not implemented yet: exercises/module01_basics/softmax.cu)\n", label.c_str());
        continue;
      }
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      const auto cmp = course::compare(dy.download(), ref, tol);
      const auto t = course::time_kernel([&] { impl.fn(info.step, a); });
      const double gbs = bytes / (t.median_ms * 1e-3) / 1e9;
      std::printf("   %-28s %12.2e %8s %10.3f %10.0f %8.2f\n", label.c_str(), cmp.max_abs_error, cmp.ok() ? "yes" : "NO",
                  t.median_ms, gbs, copy.median_ms / t.median_ms);
    }
  }
  std::printf("   (GB/s counts the ideal bytes: read x once + write y once = %.0f MB)\n", bytes / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Softmax along a dimension of a 2-D matrix: every step of the ladder on the lesson's "
               "worked examples, then on a random matrix."};
  std::int64_t rows = 4096, cols = 4096;
  int dim = 1;
  std::uint64_t seed = 42;
  app.add_option("--rows", rows, "rows of the random matrix")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app.add_option("--cols", cols, "columns of the random matrix")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  app.add_option("--dim", dim, "1: normalize each row, 0: normalize each column")->check(CLI::IsMember({0, 1}));
  app.add_option("--seed", seed, "seed of the random matrix");
  CLI11_PARSE(app, argc, argv);

  try {
    std::string why;
    const bool gpu = course::cuda_device_available(&why);
    if (gpu) {
      std::cout << "device: " << course::device_summary() << "\n";
    } else {
      std::cout << "No usable CUDA GPU (" << why << ").\n"
                << "Showing the CPU reference results only; the kernels need an NVIDIA GPU (sm_80 or newer).\n";
    }
    worked_example("softmax([1, 2, 3])", {1.f, 2.f, 3.f}, 1, 3, 1, gpu);
    worked_example("softmax([1000, 1001, 1002]) = softmax([-2, -1, 0]): the max is subtracted first",
                   {1000.f, 1001.f, 1002.f}, 1, 3, 1, gpu);
    worked_example("[[1, 2, 3], [4, 5, 6]] along dim = 1", {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, 2, 3, 1, gpu);
    worked_example("[[1, 2, 3], [4, 5, 6]] along dim = 0", {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, 2, 3, 0, gpu);
    realistic(rows, cols, dim, seed, gpu);
  } catch (const course::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
