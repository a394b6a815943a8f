// m01_dot: x . y by every step of the reduction ladder, solution and yours.
// First the lesson's worked example ([1, 2, 3] . [4, 5, 6] = 32), then a realistic
// length (--n, default 2^24) with the CPU reference, the error and the time of each step.
//
//   ./m01_dot                          all steps, n = 2^24
//   ./m01_dot --n 1000003 --steps smem_tree,vectorized --seed 7
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/timer.hpp"
#include "module01/reductions.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::m01::ReduceArgs;
using course::m01::ReduceStep;
using ReduceFn = void (*)(ReduceStep, const ReduceArgs&);

struct Impl {
  const char* name;
  ReduceFn fn;
};
const Impl kImpls[] = {{"solution", &course::solution::dot}, {"exercise", &course::exercise::dot}};

/// Runs every selected step of both implementations on `hx`, `hy` and prints one line each.
void run_steps(const std::vector<float>& hx, const std::vector<float>& hy, const std::vector<std::string>& steps,
               bool timed) {
  const auto n = static_cast<std::int64_t>(hx.size());
  const double ref = course::ref::dot(hx.data(), hy.data(), n);
  DeviceBuffer<float> x(hx), y(hy), result(1), workspace(course::m01::reduce_workspace_bytes(n) / sizeof(float));
  ReduceArgs a;
  a.x = x.data();
  a.y = y.data();
  a.n = n;
  a.result = result.data();
  a.workspace = workspace.data();
  a.workspace_bytes = workspace.bytes();

  std::printf("%-14s %-9s %16s %16s %11s %10s", "step", "impl", "result", "reference", "abs error", "rel error");
  if (timed) std::printf(" %10s %9s", "time (ms)", "GB/s");
  std::printf("\n");
  for (const auto& info : course::m01::kReduceSteps) {
    if (!steps.empty() && std::find(steps.begin(), steps.end(), info.name) == steps.end()) continue;
    for (const Impl& impl : kImpls) {
      std::printf("%-14s %-9s ", info.name, impl.name);
      try {
        result.poison();
        impl.fn(info.step, a);
        COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      } catch (const course::NotImplemented& e) {
        std::printf("not implemented yet (%s)\n", e.file().c_str());
        continue;
      }
      const double got = result.download()[0];
      const double err = std::fabs(got - ref);
      std::printf("%16.9g %16.9g %11.3g %10.3g", got, ref, err, err / std::max(std::fabs(ref), 1e-30));
      if (timed) {
        const auto t = course::time_kernel([&] { impl.fn(info.step, a); });
        std::printf(" %10.4f %9.1f", t.median_ms, 8.0 * static_cast<double>(n) / (t.median_ms * 1e-3) / 1e9);
      }
      std::printf("\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"x . y by every step of module 1's reduction ladder (solution and exercise)"};
  std::int64_t n = std::int64_t{1} << 24;
  std::uint64_t seed = course::seed_for("m01_dot");
  std::vector<std::string> steps;
  std::vector<std::string> step_names;
  for (const auto& info : course::m01::kReduceSteps) step_names.emplace_back(info.name);
  app.add_option("--n", n, "length of the realistic run")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "seed of the random input (default: $COURSE_SEED or a fixed hash)");
  app.add_option("--steps", steps, "only these steps, comma separated (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(step_names));
  CLI11_PARSE(app, argc, argv);

  const std::vector<float> ex = {1.f, 2.f, 3.f}, ey = {4.f, 5.f, 6.f};
  const std::vector<float> hx = course::random_vector(static_cast<std::size_t>(n), seed);
  const std::vector<float> hy = course::random_vector(static_cast<std::size_t>(n), seed + 1);

  std::string why;
  if (!course::cuda_device_available(&why)) {
    const std::string prefix = "no usable CUDA device: ";  // device.cpp's wording
    if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    std::printf("no CUDA device: %s\nCPU reference only:\n", why.c_str());
    std::printf("  [1, 2, 3] . [4, 5, 6] = %.9g\n", course::ref::dot(ex.data(), ey.data(), 3));
    std::printf("  x . y for n = %lld random values in [-1, 1) (seed %llu) = %.9g\n", static_cast<long long>(n),
                static_cast<unsigned long long>(seed), course::ref::dot(hx.data(), hy.data(), n));
    return 0;
  }
  try {
    std::printf("device: %s\n\n== worked example: [1, 2, 3] . [4, 5, 6] = 32 ==\n", course::device_summary().c_str());
    run_steps(ex, ey, steps, /*timed=*/false);
    std::printf("\n== n = %lld random values in [-1, 1) (seed %llu), median of 20 runs ==\n",
                static_cast<long long>(n), static_cast<unsigned long long>(seed));
    run_steps(hx, hy, steps, /*timed=*/true);
  } catch (const course::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
