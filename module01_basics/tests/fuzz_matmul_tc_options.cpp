// Random-case hardening (label fuzz) of matmul_tc's options on every step that takes them
// (mma_sync, tma_warp_specialized, persistent, cluster_multicast, pingpong): 512 random
// cases over the whole options contract -- any of the four operand layouts, fp32 or bf16
// output, any allowed epilogue combination (bias, GELU with or
// without pre_gelu, residual separate or in place, accumulate), sizes around the tiles
// (1, primes, tile +- 1) and padded leading dimensions, with now and then a long K (split-K's
// path: mma_sync and the persistent Hopper steps split a small grid's K) -- plus a few large
// cases (700-1300 per dimension, where K >= ~960 splits too on the Hopper steps when the
// grid is small), each checked by matmul_tc_options_check.hpp against the CPU reference.
// Seeds and replay: course/fuzz.hpp.
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "matmul_tc_options_check.hpp"
#include "module01/matmul_tc.hpp"

#include <cstdint>
#include <string>
#include <tuple>

namespace {

using course::StepInfo;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::step_part_name;
using course::fuzz::Verdict;
using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using course::m01::checks::tc_options::OptionCase;
using course::m01::checks::tc_options::run_option_case;
using course::testing::GpuTest;

OptionCase draw_case(Rng& rng, bool large) {
  OptionCase oc;
  const auto dim = [&] { return large ? rng.uniform(700, 1300) : rng.size(1, 300, {8, 16, 32, 64, 128, 192, 256}); };
  oc.m = dim();
  oc.n = dim();
  oc.k = dim();
  oc.a_transposed = rng.chance(0.5);
  oc.b_transposed = rng.chance(0.5);
  oc.bf16_out = rng.chance(0.5);
  oc.bias = rng.chance(0.5);
  oc.gelu = rng.chance(0.4);
  oc.pre_gelu = oc.gelu && rng.chance(0.5);
  oc.residual = rng.chance(0.35);
  oc.residual_in_place = oc.residual && rng.chance(0.5);
  oc.accumulate = !oc.bf16_out && !oc.residual && rng.chance(0.35);
  oc.pad = rng.chance(0.3) ? 8 * rng.uniform(1, 3) : 0;
  // Split-K: a small grid with a long K splits when the epilogue is linear (fp32 C, no GELU;
  // about a third of the draws). K >= 1024 is 2+ splits of >= 16 slabs of 32 (mma_sync) or
  // of >= 8 slabs of 64 (the persistent Hopper steps). Drawn last, so the draws above keep
  // their values for a seed.
  if (!large && rng.chance(0.15)) oc.k = rng.uniform(1024, 2600);
  oc.pad_aligned = oc.pad && rng.chance(0.5);  // drawn after the rest, for the same reason
  return oc;
}

using OptionsParam = std::tuple<StepInfo<TcMatmulStep>, int>;

class FuzzMatmulTcOptions : public GpuTest, public ::testing::WithParamInterface<OptionsParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const TcMatmulStep step = info.step;
    const Part part = make_part("matmul_tc_options", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_case(rng, large); },
        [&](const OptionCase& oc, std::uint64_t s) {
          const auto r = run_option_case(oc, s, [step](const TcMatmulArgs& a) { impl::matmul_tc(step, a); });
          Verdict v;
          v.add(r.out, "C");
          if (r.has_pre) v.add(r.pre, "pre_gelu");
          if (r.non_finite) v.fail(std::to_string(r.non_finite) + " non-finite outputs");
          if (r.outside) v.fail(std::to_string(r.outside) + " elements written outside M x N");
          return v;
        })));
  }
};

class FuzzMatmulTcOptionsLarge : public FuzzMatmulTcOptions {};

TEST_P(FuzzMatmulTcOptions, RandomCases) { run(false); }
TEST_P(FuzzMatmulTcOptionsLarge, RandomCases) { run(true); }

// The steps that take the options (matmul_tc.hpp): all but wmma and wgmma. On a GPU or a
// build without the Hopper instructions those steps report SKIPPED.
const course::StepInfo<TcMatmulStep>& step_info(TcMatmulStep step) {
  return course::m01::kTcMatmulSteps[static_cast<int>(step)];
}
COURSE_FUZZ_INSTANTIATE(FuzzMatmulTcOptions, FuzzMatmulTcOptionsLarge, step_part_name<TcMatmulStep>,
                        ::testing::Values(step_info(TcMatmulStep::mma_sync), step_info(TcMatmulStep::tma_warp_specialized),
                                          step_info(TcMatmulStep::persistent),
                                          step_info(TcMatmulStep::cluster_multicast),
                                          step_info(TcMatmulStep::pingpong)));

}  // namespace
