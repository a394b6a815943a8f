// m01_matmul: the lesson's 2x2 worked example, then a realistic size, for every step of
// the fp32 matmul ladder (the solution's, and yours where you have written it).
//
//   m01_matmul                               1024 x 1024 x 1024
//   m01_matmul --m 4096 --n 4096 --k 1024 --seed 7
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/timer.hpp"
#include "module01/matmul.hpp"

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
using course::m01::MatmulArgs;
using course::m01::MatmulStep;

using MatmulFn = std::function<void(MatmulStep, const MatmulArgs&)>;

struct Impl {
  const char* name;
  MatmulFn fn;
};
const Impl kImpls[] = {
    {"solution", [](MatmulStep s, const MatmulArgs& a) { course::solution::matmul(s, a); }},
    {"exercise", [](MatmulStep s, const MatmulArgs& a) { course::exercise::matmul(s, a); }},
};

/// A row-major matrix as lines of text: "[   1   2 ]".
std::vector<std::string> matrix_lines(const std::vector<double>& v, int rows, int cols) {
  std::vector<std::string> lines;
  for (int r = 0; r < rows; ++r) {
    std::string line = "[";
    for (int c = 0; c < cols; ++c) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %5g", v[static_cast<std::size_t>(r * cols + c)]);
      line += buf;
    }
    lines.push_back(line + " ]");
  }
  return lines;
}

/// Blocks of lines side by side under their titles.
void print_side_by_side(const std::vector<std::string>& titles, const std::vector<std::vector<std::string>>& blocks) {
  for (std::size_t row = 0; row <= 2; ++row) {
    std::string out = "    ";
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      std::size_t width = titles[b].size();
      for (const auto& l : blocks[b]) width = std::max(width, l.size());
      std::string cell = row == 0 ? titles[b] : (row - 1 < blocks[b].size() ? blocks[b][row - 1] : "");
      cell.resize(width + 3, ' ');
      out += cell;
    }
    std::cout << out << "\n";
  }
}

void worked_example(bool gpu) {
  std::cout << "\n== worked example: C = A * B (2 x 2, alpha = 1, beta = 0)\n"
            << "   C[i][j] = sum_p A[i][p] * B[p][j], e.g. C[1][0] = 3*2 + 4*1 = 10\n";
  const std::vector<float> a = {1, 2, 3, 4}, b = {2, 0, 1, 3};
  HostTensor<double> at({2, 2}), bt({2, 2});
  std::copy(a.begin(), a.end(), at.storage().begin());
  std::copy(b.begin(), b.end(), bt.storage().begin());
  const std::vector<double> ref = course::ref::matmul(at, bt).storage();
  print_side_by_side({"A", "B", "C (CPU reference)"},
                     {matrix_lines(at.storage(), 2, 2), matrix_lines(bt.storage(), 2, 2), matrix_lines(ref, 2, 2)});
  if (!gpu) return;
  DeviceBuffer<float> da(a), db(b), dc(4);
  for (const auto& info : course::m01::kMatmulSteps) {
    std::vector<std::string> titles;
    std::vector<std::vector<std::string>> blocks;
    for (const Impl& impl : kImpls) {
      titles.push_back(std::string(impl.name) + "/" + info.name);
      dc.poison();
      try {
        impl.fn(info.step, course::m01::packed_matmul_args(da.data(), db.data(), dc.data(), 2, 2, 2));
      } catch (const course::NotImplemented&) {
        blocks.push_back({"(not implemented yet:", " exercises/module01_basics/matmul.cu)"});
        continue;
      }
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> got = dc.download();
      const std::vector<double> g(got.begin(), got.end());
      std::vector<std::string> lines = matrix_lines(g, 2, 2);
      lines[1] += g == ref ? "  exact" : "  WRONG";
      blocks.push_back(lines);
    }
    print_side_by_side(titles, blocks);
  }
}

/// Rows of C the realistic run checks: all of them when the CPU reference is cheap,
/// else 64 rows spread over M (a full 4096^3 reference would take minutes).
std::vector<std::int64_t> checked_rows(std::int64_t m, std::int64_t n, std::int64_t k) {
  std::vector<std::int64_t> rows;
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const std::int64_t count = work <= 2.2e9 ? m : std::min<std::int64_t>(m, 64);
  for (std::int64_t i = 0; i < count; ++i) rows.push_back(i * m / count);
  rows.back() = m - 1;  // always include the last (edge) row
  return rows;
}

void realistic(std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed, bool gpu) {
  std::cout << "\n== random C = A * B with M = " << m << ", N = " << n << ", K = " << k
            << ", values in [-1, 1), seed " << seed << "\n";
  const std::vector<float> a = course::random_vector(static_cast<std::size_t>(m * k), seed);
  const std::vector<float> b = course::random_vector(static_cast<std::size_t>(k * n), seed + 1);

  // CPU reference (double) on the checked rows: C[i][:] = A[i][:] * B.
  const std::vector<std::int64_t> rows = checked_rows(m, n, k);
  HostTensor<double> a_rows({static_cast<std::int64_t>(rows.size()), k}), bt({k, n});
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::int64_t p = 0; p < k; ++p)
      a_rows({static_cast<std::int64_t>(r), p}) = a[static_cast<std::size_t>(rows[r] * k + p)];
  std::copy(b.begin(), b.end(), bt.storage().begin());
  const auto t0 = std::chrono::steady_clock::now();
  const HostTensor<double> ref = course::ref::matmul(a_rows, bt);
  const double cpu_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("   CPU reference (double) on %zu of %lld rows: %.0f ms; C[0][0:4] = [", rows.size(),
              static_cast<long long>(m), cpu_ms);
  for (std::int64_t c = 0; c < std::min<std::int64_t>(n, 4); ++c) std::printf(" %.6g", ref({0, c}));
  std::printf(" ]\n");
  if (!gpu) return;

  // Same tolerance rule as the tests: rtol ~ sqrt(K) eps, atol = rtol * RMS(C).
  const course::Tolerance tol = course::tolerance_for(course::DType::f32, k, std::max(1.0, course::rms(ref)));

  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  DeviceBuffer<float> da(a), db(b), dc(static_cast<std::size_t>(m * n));
  const MatmulArgs args = course::m01::packed_matmul_args(da.data(), db.data(), dc.data(), m, n, k);
  std::printf("   %-24s %12s %6s %12s %10s\n", "step", "max|err|", "ok", "time (ms)", "TFLOP/s");
  for (const auto& info : course::m01::kMatmulSteps) {
    for (const Impl& impl : kImpls) {
      const std::string label = std::string(impl.name) + "/" + info.name;
      dc.poison();
      try {
        impl.fn(info.step, args);
      } catch (const course::NotImplemented&) {
        std::printf("   %-24s (not implemented yet: exercises/module01_basics/matmul.cu)\n", label.c_str());
        continue;
      }
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> c = dc.download();
      HostTensor<float> got({static_cast<std::int64_t>(rows.size()), n});
      for (std::size_t r = 0; r < rows.size(); ++r)
        std::copy_n(c.begin() + rows[r] * n, n, got.storage().begin() + static_cast<std::ptrdiff_t>(r) * n);
      const auto cmp = course::compare(got, ref, tol);
      // The slow steps get fewer timed runs: naive at 4096^3 takes ~0.3 s per call.
      const bool slow = info.step == MatmulStep::naive || info.step == MatmulStep::coalesced;
      const int runs = slow && flops > 1e11 ? 3 : 20;
      const auto t = course::time_kernel([&] { impl.fn(info.step, args); }, slow ? 1 : 3, runs);
      std::printf("   %-24s %12.2e %6s %12.3f %10.2f\n", label.c_str(), cmp.max_abs_error, cmp.ok() ? "yes" : "NO",
                  t.median_ms, flops / (t.median_ms * 1e-3) / 1e12);
    }
  }
  std::printf("   (TFLOP/s = 2*M*N*K / time; compare with cuBLAS in m01_bench --benchmark_filter=sgemm)\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp32 matrix multiply C = A * B: every step of the SGEMM ladder on the lesson's 2x2 "
               "worked example, then on random matrices."};
  std::int64_t m = 1024, n = 1024, k = 1024;
  std::uint64_t seed = 42;
  const auto range = CLI::Range(std::int64_t{1}, std::int64_t{1} << 16);
  app.add_option("--m", m, "rows of A and C")->check(range);
  app.add_option("--n", n, "columns of B and C")->check(range);
  app.add_option("--k", k, "columns of A, rows of B")->check(range);
  app.add_option("--seed", seed, "seed of the random matrices");
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
    worked_example(gpu);
    realistic(m, n, k, seed, gpu);
  } catch (const course::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
