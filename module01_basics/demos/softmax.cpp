// m01_softmax: the lesson's worked examples, then a realistic size, for every step of
// the softmax ladder (the solution's, and yours where you have written it).
//
//   m01_softmax                          4096 x 4096, dim = 1
//   m01_softmax --rows 65536 --cols 1024 --dim 0 --seed 7 --steps warp_per_row
#include "course/compare.hpp"
#include "course/demo.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "module01/softmax.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {

namespace demo = course::demo;
using course::DeviceBuffer;
using course::HostTensor;
using course::m01::SoftmaxStep;
using Ladder = demo::Ladder<SoftmaxStep, course::m01::SoftmaxArgs>;

/// Contiguous rows x cols on the device, with the workspace the hungriest step needs.
struct DeviceSoftmax {
  DeviceBuffer<float> x, y, workspace;
  course::m01::SoftmaxArgs args;
  DeviceSoftmax(const std::vector<float>& hx, std::int64_t rows, std::int64_t cols, int dim)
      : x(hx), y(hx.size()), workspace(workspace_floats(rows, cols, dim)) {
    args = course::m01::contiguous_softmax_args(x.data(), y.data(), rows, cols, dim);
    args.workspace = workspace.data();
    args.workspace_bytes = workspace.bytes();
  }
  static std::size_t workspace_floats(std::int64_t rows, std::int64_t cols, int dim) {
    std::size_t bytes = 0;
    for (const auto& info : course::m01::kSoftmaxSteps)
      bytes = std::max(bytes, course::m01::softmax_workspace_bytes(info.step, rows, cols, dim));
    return bytes / sizeof(float);
  }
};

/// The CPU reference of softmax(x) along `dim` (in double).
std::vector<double> reference(const std::vector<float>& x, std::int64_t rows, std::int64_t cols, int dim) {
  HostTensor<double> xt({rows, cols});
  std::copy(x.begin(), x.end(), xt.storage().begin());
  return course::ref::softmax(xt, dim).storage();
}

void worked_example(const Ladder& ladder, const char* title, const std::vector<float>& x, std::int64_t rows,
                    std::int64_t cols, int dim, bool gpu) {
  demo::section(demo::format("%s  (%lld x %lld, dim = %d: each %s sums to 1)", title, static_cast<long long>(rows),
                             static_cast<long long>(cols), dim, dim == 1 ? "row" : "column"));
  const std::vector<double> ref = reference(x, rows, cols, dim);
  demo::print_side_by_side({"x", "softmax(x) (CPU reference)"},
                           {demo::matrix_lines({x.begin(), x.end()}, rows, cols), demo::matrix_lines(ref, rows, cols)});
  if (!gpu) return;
  DeviceSoftmax d(x, rows, cols, dim);
  ladder.show_matrices(d.args, d.y, rows, cols, {}, demo::max_error_note(ref));
}

void realistic(const Ladder& ladder, std::int64_t rows, std::int64_t cols, int dim, std::uint64_t seed, bool gpu) {
  demo::section(demo::format("random %lld x %lld, dim = %d, values in [-4, 4), seed %llu",
                             static_cast<long long>(rows), static_cast<long long>(cols), dim,
                             static_cast<unsigned long long>(seed)));
  const std::vector<float> x = course::random_vector(static_cast<std::size_t>(rows * cols), seed, -4.f, 4.f);
  std::vector<double> ref;
  const double cpu_ms = demo::cpu_ms([&] { return reference(x, rows, cols, dim); }, ref);
  std::printf("   CPU reference (double): %.1f ms; y[0, 0:4] = %s\n", cpu_ms,
              demo::preview(ref, static_cast<std::size_t>(std::min<std::int64_t>(cols, 4))).c_str());
  if (!gpu) return;

  // Ceiling: a device-to-device copy moves the same bytes (read x, write y) with no math.
  const double bytes = 2.0 * static_cast<double>(x.size()) * sizeof(float);
  DeviceSoftmax d(x, rows, cols, dim);
  const auto copy = course::time_kernel(
      [&] { COURSE_CUDA_CHECK(cudaMemcpyAsync(d.y.data(), d.x.data(), d.x.bytes(), cudaMemcpyDeviceToDevice)); });
  demo::TableOptions<SoftmaxStep> options;
  options.work = demo::Work::bytes(bytes);
  options.ceiling = demo::Ceiling{"library/d2d_copy (ceiling)", copy.median_ms, "of copy"};
  const auto tol = course::tolerance_for(course::DType::f32, dim == 1 ? cols : rows);
  ladder.table(d.args, d.y, [&](const std::vector<float>& y) { return course::compare(y, ref, tol); }, options);
  std::printf("   (GB/s counts the ideal bytes: read x once + write y once = %.0f MB)\n", bytes / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Softmax along a dimension of a 2-D matrix: every step of the ladder on the lesson's "
               "worked examples, then on a random matrix."};
  std::int64_t rows = 4096, cols = 4096;
  int dim = 1;
  std::uint64_t seed = 42;
  std::vector<std::string> steps;
  const auto extent = CLI::Range(std::int64_t{1}, std::int64_t{1} << 20);
  app.add_option("--rows", rows, "rows of the random matrix")->check(extent);
  app.add_option("--cols", cols, "columns of the random matrix")->check(extent);
  app.add_option("--dim", dim, "1: normalize each row, 0: normalize each column")->check(CLI::IsMember({0, 1}));
  app.add_option("--seed", seed, "seed of the random matrix");
  demo::add_steps_option(app, steps, course::m01::kSoftmaxSteps);
  CLI11_PARSE(app, argc, argv);

  const Ladder ladder(course::m01::kSoftmaxSteps, &course::solution::softmax, &course::exercise::softmax, steps);
  return demo::run([&](bool gpu) {
    worked_example(ladder, "softmax([1, 2, 3])", {1.f, 2.f, 3.f}, 1, 3, 1, gpu);
    worked_example(ladder, "softmax([1000, 1001, 1002]) = softmax([-2, -1, 0]): the max is subtracted first",
                   {1000.f, 1001.f, 1002.f}, 1, 3, 1, gpu);
    worked_example(ladder, "[[1, 2, 3], [4, 5, 6]] along dim = 1", {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, 2, 3, 1, gpu);
    worked_example(ladder, "[[1, 2, 3], [4, 5, 6]] along dim = 0", {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, 2, 3, 0, gpu);
    realistic(ladder, rows, cols, dim, seed, gpu);
  });
}
