// m01_matmul: the lesson's 2x2 worked example, then a realistic size, for every step of
// the fp32 matmul ladder (the solution's, and yours where you have written it).
//
//   m01_matmul                               1024 x 1024 x 1024
//   m01_matmul --m 4096 --n 4096 --k 1024 --seed 7 --steps smem_tiled,warp_tiled
#include "course/compare.hpp"
#include "course/demo.hpp"
#include "course/random.hpp"
#include "module01/matmul.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {

namespace demo = course::demo;
using course::DeviceBuffer;
using course::m01::MatmulStep;
using Ladder = demo::Ladder<MatmulStep, course::m01::MatmulArgs>;

void worked_example(const Ladder& ladder, bool gpu) {
  demo::section("worked example: C = A * B (2 x 2, alpha = 1, beta = 0)");
  std::printf("   C[i][j] = sum_p A[i][p] * B[p][j], e.g. C[1][0] = 3*2 + 4*1 = 10\n");
  const std::vector<float> a = {1, 2, 3, 4}, b = {2, 0, 1, 3};
  const std::vector<double> ref = demo::show_matmul_example(a, b, 2, 2, 2);
  if (!gpu) return;
  DeviceBuffer<float> da(a), db(b), dc(4);
  ladder.show_matrices(course::m01::packed_matmul_args(da.data(), db.data(), dc.data(), 2, 2, 2), dc, 2, 2,
                       {5, 6, false}, demo::exact_note(ref));
}

void realistic(const Ladder& ladder, std::int64_t m, std::int64_t n, std::int64_t k, std::uint64_t seed, bool gpu) {
  demo::section(demo::format("random C = A * B with M = %lld, N = %lld, K = %lld, values in [-1, 1), seed %llu",
                             static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                             static_cast<unsigned long long>(seed)));
  const std::vector<float> a = course::random_vector(static_cast<std::size_t>(m * k), seed);
  const std::vector<float> b = course::random_vector(static_cast<std::size_t>(k * n), seed + 1);
  // Every row of C when the CPU reference is cheap, else 64 sampled rows.
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const demo::SampledProduct ref = demo::sampled_matmul_reference(a, b, m, n, k, flops <= 4.4e9 ? m : 64, seed);
  if (!gpu) return;

  // Same tolerance rule as the tests: rtol ~ sqrt(K) eps, atol = rtol * RMS(C).
  const course::Tolerance tol = course::tolerance_for(course::DType::f32, k, std::max(1.0, ref.rms));
  DeviceBuffer<float> da(a), db(b), dc(static_cast<std::size_t>(m * n));
  demo::TableOptions<MatmulStep> options;
  options.work = demo::Work::flops(flops);
  // The slow steps get fewer timed runs: naive at 4096^3 takes ~0.3 s per call.
  options.timing = [&](MatmulStep step) {
    const bool slow = step == MatmulStep::naive || step == MatmulStep::coalesced;
    return demo::Timing{slow ? 1 : 3, slow && flops > 1e11 ? 3 : 20};
  };
  ladder.table(course::m01::packed_matmul_args(da.data(), db.data(), dc.data(), m, n, k), dc,
               [&](const std::vector<float>& c) { return demo::compare_rows(c, n, n, ref, tol); }, options);
  std::printf("   (TFLOP/s = 2*M*N*K / time; compare with cuBLAS in m01_bench --benchmark_filter=sgemm)\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp32 matrix multiply C = A * B: every step of the SGEMM ladder on the lesson's 2x2 "
               "worked example, then on random matrices."};
  demo::ProductOptions opt(1024, 1024, 1024);
  opt.add_to(app, course::m01::kMatmulSteps);
  CLI11_PARSE(app, argc, argv);

  const Ladder ladder(course::m01::kMatmulSteps, &course::solution::matmul, &course::exercise::matmul, opt.steps);
  return demo::run([&](bool gpu) {
    worked_example(ladder, gpu);
    realistic(ladder, opt.m, opt.n, opt.k, opt.seed, gpu);
  });
}
