// m01_l2_norm: ||x||_2 by every step of the reduction ladder, solution and yours.
// First the lesson's worked example (||[3, 4]|| = 5), then a realistic length
// (--n, default 2^24) with the CPU reference, the error and the time of each step.
// Everything but the op itself comes from the demo toolkit (course/demo.hpp).
//
//   ./m01_l2_norm                      all steps, n = 2^24
//   ./m01_l2_norm --n 1000003 --steps smem_tree,vectorized --seed 7
#include "course/demo.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "module01/reductions.hpp"

#include <CLI/CLI.hpp>

namespace {

using course::m01::ReduceArgs;
using course::m01::ReduceStep;

/// ||x||_2: one input vector (4 bytes read per element), y stays null.
const course::demo::VectorReduction<ReduceStep, ReduceArgs> kL2Norm{
    {course::m01::kReduceSteps, &course::solution::l2_norm, &course::exercise::l2_norm},
    1,
    [](const std::vector<const float*>& in, std::int64_t n) { return course::ref::l2_norm(in[0], n); },
    [](const std::vector<const float*>& in, std::int64_t n, float* result, float* ws, std::size_t ws_bytes) {
      return ReduceArgs{in[0], nullptr, n, result, ws, ws_bytes};
    },
    course::m01::reduce_workspace_bytes,
    course::m01::reduce_step_numerics};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"||x||_2 by every step of module 1's reduction ladder (solution and exercise)"};
  course::demo::VectorOptions opt(std::int64_t{1} << 24, course::seed_for("m01_l2_norm"));
  opt.add_to(app, course::m01::kReduceSteps);
  CLI11_PARSE(app, argc, argv);
  return course::demo::run_vector_reduction(kL2Norm, {{3.f, 4.f}}, "||[3, 4]|| = 5", opt);
}
