// m01_dot: x . y by every step of the reduction ladder, solution and yours.
// First the lesson's worked example ([1, 2, 3] . [4, 5, 6] = 32), then a realistic
// length (--n, default 2^24) with the CPU reference, the error and the time of each step.
// Everything but the op itself comes from the demo toolkit (course/demo.hpp).
//
//   ./m01_dot                          all steps, n = 2^24
//   ./m01_dot --n 1000003 --steps smem_tree,vectorized --seed 7
#include "course/demo.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "module01/reductions.hpp"

#include <CLI/CLI.hpp>

namespace {

/// x . y: two input vectors (8 bytes read per element; y = seed + 1).
const course::demo::VectorReduction<course::m01::ReduceStep, course::m01::ReduceArgs> kDot{
    {course::m01::kReduceSteps, &course::solution::dot, &course::exercise::dot},
    2,
    [](const std::vector<const float*>& in, std::int64_t n) { return course::ref::dot(in[0], in[1], n); },
    [](const std::vector<const float*>& in, std::int64_t n, float* result, float* ws, std::size_t ws_bytes) {
      return course::m01::ReduceArgs{in[0], in[1], n, result, ws, ws_bytes};
    },
    course::m01::reduce_workspace_bytes,
    course::m01::reduce_step_numerics};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"x . y by every step of module 1's reduction ladder (solution and exercise)"};
  course::demo::VectorOptions opt(std::int64_t{1} << 24, course::seed_for("m01_dot"));
  opt.add_to(app, course::m01::kReduceSteps);
  CLI11_PARSE(app, argc, argv);
  return course::demo::run_vector_reduction(kDot, {{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}}, "[1, 2, 3] . [4, 5, 6] = 32",
                                            opt);
}
