// m01_matmul_tc: the lesson's worked example, then a realistic size, for every step of
// the tensor-core matmul ladder (bf16 inputs, fp32 accumulation; the solution's steps,
// and yours where you have written them).
//
//   m01_matmul_tc                              4096 x 4096 x 4096
//   m01_matmul_tc --m 8192 --n 8192 --k 8192 --seed 7 --check-rows 16 --steps mma_sync
#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/demo.hpp"
#include "course/random.hpp"
#include "module01/matmul_tc.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace demo = course::demo;
using course::DeviceBuffer;
using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using Ladder = demo::Ladder<TcMatmulStep, TcMatmulArgs>;

/// C = A * B on the device: A (m x k) and B (k x n) as bf16 with rows padded to
/// tc_leading_dim() (the kernels' 16-byte alignment contract), C packed (ldc = n).
struct DeviceProduct {
  DeviceBuffer<__nv_bfloat16> a, b;
  DeviceBuffer<float> c;
  TcMatmulArgs args;
  DeviceProduct(const std::vector<float>& ha, const std::vector<float>& hb, std::int64_t m, std::int64_t n,
                std::int64_t k)
      : a(upload_padded(ha, m, k)), b(upload_padded(hb, k, n)), c(static_cast<std::size_t>(m * n)) {
    args.a = a.data();
    args.b = b.data();
    args.c = c.data();
    args.m = m;
    args.n = n;
    args.k = k;
    args.lda = course::m01::tc_leading_dim(k);
    args.ldb = course::m01::tc_leading_dim(n);
    args.ldc = n;
  }
  /// Host values to device bf16 with row stride tc_leading_dim(cols); the padding is NaN,
  /// so a kernel that reads it poisons its result.
  static DeviceBuffer<__nv_bfloat16> upload_padded(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
    const std::int64_t ld = course::m01::tc_leading_dim(cols);
    std::vector<float> padded(static_cast<std::size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t r = 0; r < rows; ++r)
      std::copy_n(v.begin() + r * cols, cols, padded.begin() + r * ld);
    return DeviceBuffer<__nv_bfloat16>(course::to_bf16(padded));
  }
};

void worked_example(const Ladder& ladder, bool gpu) {
  // Small integers: exact in bf16 and in fp32, so every step must match to the last bit.
  demo::section("worked example: C = A * B (2 x 2), bf16 inputs, fp32 accumulation");
  const std::vector<float> a = {1, 2, 3, 4}, b = {2, 0, 1, 3};
  const std::vector<double> ref = demo::show_matmul_example(a, b, 2, 2, 2);
  if (!gpu) return;
  DeviceProduct d(a, b, 2, 2, 2);
  ladder.show_matrices(d.args, d.c, 2, 2, {5, 6, false}, demo::exact_note(ref));
}

void realistic(const Ladder& ladder, std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed,
               std::int64_t check_rows, bool gpu) {
  demo::section(demo::format("random A (%lld x %lld) * B (%lld x %lld), bf16 values uniform in [-1, 1), seed %llu",
                             static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(k),
                             static_cast<long long>(n), static_cast<unsigned long long>(seed)));
  // Values rounded to bf16 first, so the reference sees exactly the kernel's inputs.
  const std::vector<float> a = course::round_to_bf16(course::random_vector(static_cast<std::size_t>(m * k), seed));
  const std::vector<float> b = course::round_to_bf16(course::random_vector(static_cast<std::size_t>(k * n), seed + 1));
  const demo::SampledProduct ref = demo::sampled_matmul_reference(a, b, m, n, k, check_rows, seed);
  if (!gpu) return;

  // Same widening of atol as the tests (test_matmul_tc.cpp, tc_tolerance): fp32 rounding
  // error scales with the partial sums, which grow like sqrt(K).
  course::Tolerance tol = course::tolerance_for(course::DType::f32, k);
  tol.atol *= std::sqrt(static_cast<double>(k));
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  DeviceProduct d(a, b, m, n, k);
  demo::TableOptions<TcMatmulStep> options;
  options.work = demo::Work::flops(flops);
  options.timing = [](TcMatmulStep) { return demo::Timing{2, 10}; };
  ladder.table(d.args, d.c, [&](const std::vector<float>& c) { return demo::compare_rows(c, n, n, ref, tol); },
               options);
  std::printf("   (TFLOP/s counts 2*M*N*K = %.3g FLOPs per call; compare with the cuBLAS row of m01_bench)\n", flops);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"C = A * B on tensor cores (bf16 inputs, fp32 accumulation): every step of the ladder on "
               "the lesson's worked example, then on random matrices."};
  demo::ProductOptions opt(4096, 4096, 4096);
  std::int64_t check_rows = 64;
  opt.add_to(app, course::m01::kTcMatmulSteps);
  app.add_option("--check-rows", check_rows, "rows of C compared with the CPU reference")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16));
  CLI11_PARSE(app, argc, argv);

  const Ladder ladder(course::m01::kTcMatmulSteps, &course::solution::matmul_tc, &course::exercise::matmul_tc,
                      opt.steps);
  return demo::run([&](bool gpu) {
    worked_example(ladder, gpu);
    realistic(ladder, opt.m, opt.n, opt.k, opt.seed, check_rows, gpu);
  });
}
