// m01_matmul_tc: the lesson's worked example, then a realistic size, for every step of
// the tensor-core matmul ladder (bf16 inputs, fp32 accumulation; the solution's steps,
// and yours where you have written them).
//
//   m01_matmul_tc                              4096 x 4096 x 4096
//   m01_matmul_tc --m 8192 --n 8192 --k 8192 --seed 7 --check-rows 16
#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/timer.hpp"
#include "module01/matmul_tc.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::HostTensor;
using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using course::m01::tc_leading_dim;
using bf16 = __nv_bfloat16;

using MatmulTcFn = std::function<void(TcMatmulStep, const TcMatmulArgs&)>;

struct Impl {
  const char* name;
  MatmulTcFn fn;
};
const Impl kImpls[] = {
    {"solution", [](TcMatmulStep s, const TcMatmulArgs& a) { course::solution::matmul_tc(s, a); }},
    {"exercise", [](TcMatmulStep s, const TcMatmulArgs& a) { course::exercise::matmul_tc(s, a); }},
};

/// rows x cols values (row stride `ld`) as one line: "[[4, 6], [10, 12]]".
std::string matrix_string(const std::vector<float>& v, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  std::string s = "[";
  for (std::int64_t r = 0; r < rows; ++r) {
    s += r ? ", [" : "[";
    for (std::int64_t c = 0; c < cols; ++c) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%g", c ? ", " : "", static_cast<double>(v[static_cast<std::size_t>(r * ld + c)]));
      s += buf;
    }
    s += "]";
  }
  return s + "]";
}

/// Host values (row stride ld, padding NaN: the kernels must never read it) to device bf16.
DeviceBuffer<bf16> upload_padded(const std::vector<float>& v, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  std::vector<float> padded(static_cast<std::size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      padded[static_cast<std::size_t>(r * ld + c)] = v[static_cast<std::size_t>(r * cols + c)];
  return DeviceBuffer<bf16>(course::to_bf16(padded));
}

void worked_example(bool gpu) {
  // [[1,2],[3,4]] * [[2,0],[1,3]] = [[1*2+2*1, 1*0+2*3], [3*2+4*1, 3*0+4*3]] = [[4,6],[10,12]]:
  // small integers, exact in bf16 and in fp32.
  const std::vector<float> a = {1, 2, 3, 4}, b = {2, 0, 1, 3};
  HostTensor<float> at({2, 2}), bt({2, 2});
  at.storage() = a;
  bt.storage() = b;
  const auto ref = course::ref::matmul(at, bt);
  std::cout << "\n== worked example: A = " << matrix_string(a, 2, 2, 2) << ", B = " << matrix_string(b, 2, 2, 2)
            << "\n   A*B (CPU reference) = " << matrix_string(ref.storage(), 2, 2, 2) << "\n";
  if (!gpu) return;
  // Rows padded to lda = ldb = 8 elements (16 bytes): the alignment contract of the kernels.
  DeviceBuffer<bf16> da = upload_padded(a, 2, 2, 8), db = upload_padded(b, 2, 2, 8);
  DeviceBuffer<float> dc(4);
  TcMatmulArgs args;
  args.a = da.data();
  args.b = db.data();
  args.c = dc.data();
  args.m = args.n = args.k = 2;
  args.lda = args.ldb = 8;
  args.ldc = 2;
  for (const auto& info : course::m01::kTcMatmulSteps) {
    for (const Impl& impl : kImpls) {
      const std::string label = std::string(impl.name) + "/" + info.name;
      dc.poison();
      try {
        impl.fn(info.step, args);
      } catch (const course::NotImplemented&) {
        std::printf("   %-20s (not implemented yet: exercises/module01_basics/matmul_tc.cu)\n", label.c_str());
        continue;
      }
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      const auto c = dc.download();
      std::printf("   %-20s %s  %s\n", label.c_str(), matrix_string(c, 2, 2, 2).c_str(),
                  c == ref.storage() ? "(exact)" : "(WRONG)");
    }
  }
}

void realistic(std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed, std::int64_t check_rows, bool gpu) {
  const std::int64_t lda = tc_leading_dim(k), ldb = tc_leading_dim(n), ldc = n;
  std::cout << "\n== random A (" << m << " x " << k << ") * B (" << k << " x " << n
            << "), bf16 values uniform in [-1, 1), seed " << seed << "\n";
  // Values rounded to bf16 first, so the fp32 reference sees exactly the kernel's inputs.
  const std::vector<float> a = course::round_to_bf16(course::random_vector(static_cast<std::size_t>(m * k), seed));
  HostTensor<float> bt({k, n});
  bt.storage() = course::round_to_bf16(course::random_vector(static_cast<std::size_t>(k * n), seed + 1));

  // The CPU reference for a sample of rows (first, last, random ones): a full
  // M x N x K product in double would take minutes.
  std::set<std::int64_t> picked{0, m - 1};
  std::mt19937_64 gen(seed);
  while (static_cast<std::int64_t>(picked.size()) < std::min(check_rows, m))
    picked.insert(static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(m)));
  const std::vector<std::int64_t> rows(picked.begin(), picked.end());
  const auto R = static_cast<std::int64_t>(rows.size());
  HostTensor<float> a_rows({R, k});
  for (std::int64_t i = 0; i < R; ++i)
    std::copy_n(a.begin() + rows[static_cast<std::size_t>(i)] * k, k, a_rows.storage().begin() + i * k);
  const auto t0 = std::chrono::steady_clock::now();
  const HostTensor<float> ref = course::ref::matmul(a_rows, bt);
  const double cpu_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("   CPU reference (double accumulation) on %lld sampled rows: %.0f ms; C[0, 0:4] = [",
              static_cast<long long>(R), cpu_ms);
  for (std::int64_t c = 0; c < std::min<std::int64_t>(n, 4); ++c) std::printf(" %.6g", static_cast<double>(ref({0, c})));
  std::printf(" ]\n");
  if (!gpu) return;

  // Same widening of atol as the tests (test_matmul_tc.cpp, tc_tolerance): fp32 rounding
  // error scales with the partial sums, which grow like sqrt(K).
  course::Tolerance tol = course::tolerance_for(course::DType::f32, k);
  tol.atol *= std::sqrt(static_cast<double>(k));
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  DeviceBuffer<bf16> da = upload_padded(a, m, k, lda), db = upload_padded(bt.storage(), k, n, ldb);
  DeviceBuffer<float> dc(static_cast<std::size_t>(m * ldc));
  TcMatmulArgs args;
  args.a = da.data();
  args.b = db.data();
  args.c = dc.data();
  args.m = m;
  args.n = n;
  args.k = k;
  args.lda = lda;
  args.ldb = ldb;
  args.ldc = ldc;

  std::printf("   %-20s %12s %6s %11s %10s\n", "step", "max|err|", "ok", "time (ms)", "TFLOP/s");
  for (const auto& info : course::m01::kTcMatmulSteps) {
    for (const Impl& impl : kImpls) {
      const std::string label = std::string(impl.name) + "/" + info.name;
      dc.poison();
      try {
        impl.fn(info.step, args);
      } catch (const course::NotImplemented&) {
        std::printf("   %-20s (not implemented yet: exercises/module01_basics/matmul_tc.cu)\n", label.c_str());
        continue;
      }
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> c = dc.download();
      HostTensor<float> got({R, n});
      for (std::int64_t i = 0; i < R; ++i)
        std::copy_n(c.begin() + rows[static_cast<std::size_t>(i)] * ldc, n, got.storage().begin() + i * n);
      const auto cmp = course::compare(got, ref, tol);
      const auto t = course::time_kernel([&] { impl.fn(info.step, args); }, 2, 10);
      std::printf("   %-20s %12.2e %6s %11.3f %10.1f\n", label.c_str(), cmp.max_abs_error, cmp.ok() ? "yes" : "NO",
                  t.median_ms, flops / (t.median_ms * 1e-3) / 1e12);
    }
  }
  std::printf("   (TFLOP/s counts 2*M*N*K = %.3g FLOPs per call; compare with the cuBLAS row of m01_bench)\n", flops);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"C = A * B on tensor cores (bf16 inputs, fp32 accumulation): every step of the ladder on "
               "the lesson's worked example, then on random matrices."};
  std::int64_t m = 4096, n = 4096, k = 4096, check_rows = 64;
  std::uint64_t seed = 42;
  const auto size_range = CLI::Range(std::int64_t{1}, std::int64_t{1} << 16);
  app.add_option("--m", m, "rows of A and C")->check(size_range);
  app.add_option("--n", n, "columns of B and C")->check(size_range);
  app.add_option("--k", k, "columns of A, rows of B")->check(size_range);
  app.add_option("--seed", seed, "seed of the random matrices");
  app.add_option("--check-rows", check_rows, "rows of C compared with the CPU reference")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16));
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
    realistic(m, n, k, seed, check_rows, gpu);
  } catch (const course::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
