// Random-case hardening of the tensor-core (bf16) attention backward (label fuzz), run
// against course::solution and course::exercise: for every tc step, kCasesPerStep random
// cases from the step's whole contract in parts that ctest runs in parallel, plus a few
// large cases (*Large*), each checked by tests/attention_backward_tc_check.hpp under
// FlashAttention's backward rule. Seeds, replay and the "[fuzz]" lines: course/fuzz.hpp.
#include "attention_backward_tc_check.hpp"
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "module04/attention_backward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::StepInfo;
using course::fuzz::draw_divisor;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::step_part_name;
using course::fuzz::ValueRange;
using course::fuzz::Verdict;
using course::m04::AttentionBackwardStep;
using course::m04::attention_checks::BHND;
using course::m04::attention_checks::BNHD;
using course::testing::GpuTest;
using TcCase = course::m04::tc_backward_checks::Case;

/// Everything a tc step allows: d in {64, 128}; N_q, N_k up to ~300 around the tiles (64
/// query rows, 128 keys), equal a third of the time; B*H kept so that one case is at most
/// ~2^23 multiply-adds on the CPU; BHND/BNHD inputs and gradients, padded rows (multiples of
/// 8 elements), K/V broadcast over the batch, causal, grouped-query, an explicit scale,
/// large-magnitude and one-signed data. Large: ~1000-long sequences and many heads.
/// The split steps (tc_split_dq, tc_wgmma_split_dq) also draw, 15% of the time, B*H = 132-268 query heads (d = 64, 1-4 query
/// rows, 129-300 keys; grouped-query half the time), so that its blocks walk several K/V
/// tiles: the split count falls as B*H_kv nears the SM count.
TcCase draw_attention_backward_tc(Rng& rng, AttentionBackwardStep step, bool large) {
  const auto sup = course::m04::step_support(step);
  TcCase c;
  c.d = rng.pick({64, 128});
  if (large) {
    if (rng.chance(0.5)) {
      c.N_q = rng.uniform(800, 1100), c.N_k = rng.uniform(800, 1100), c.H = 2;
    } else {
      c.B = 2, c.H = 8, c.N_q = c.N_k = rng.uniform(150, 300);
    }
  } else if (course::m04::splits_dq(step) && rng.chance(0.15)) {
    c.B = rng.pick({2, 4});
    c.H = rng.pick({33, 34, 40, 67}) * (c.B == 2 ? 2 : 1);
    c.d = 64;  // with N_q <= 4, N_k <= 300: at most ~2^24.3 multiply-adds on the CPU
    c.N_q = rng.uniform(1, 4);
    c.N_k = rng.uniform(129, 300);
  } else {
    c.N_q = rng.size(1, 300, {64, 128, 256});
    c.N_k = rng.chance(0.33) ? c.N_q : rng.size(1, 300, {64, 128, 256});
    const std::int64_t per_pair = c.N_q * c.N_k * c.d;
    const std::int64_t pairs = std::max<std::int64_t>(1, (std::int64_t{1} << 23) / per_pair);
    c.B = rng.size(1, std::min<std::int64_t>(3, pairs));
    c.H = rng.size(1, std::max<std::int64_t>(1, std::min<std::int64_t>(8, pairs / c.B)));
  }
  c.H_kv = sup.grouped_query && rng.chance(0.5) ? draw_divisor(rng, c.H) : c.H;
  c.layout = rng.pick({BHND, BNHD});
  c.grad_layout = rng.chance(0.5) ? c.layout : rng.pick({BHND, BNHD});
  c.pad = rng.chance(0.3) ? 8 * rng.uniform(1, 3) : 0;
  c.grad_pad = rng.chance(0.25) ? 8 * rng.uniform(1, 2) : 0;
  c.kv_batch_broadcast = c.B > 1 && rng.chance(0.1);
  c.causal = sup.causal && rng.chance(0.5);
  c.input_range = rng.chance(0.5) ? 1.0 : std::exp(rng.real(std::log(0.05), std::log(8.0)));
  const ValueRange v = course::fuzz::draw_values(rng, 100.0), dout = course::fuzz::draw_values(rng, 100.0);
  c.v_lo = v.lo, c.v_hi = v.hi;
  c.do_lo = dout.lo, c.do_hi = dout.hi;
  c.scale = rng.chance(0.8) ? 0.f : static_cast<float>(rng.real(0.05, 1.0));
  return c;
}

using TcParam = std::tuple<StepInfo<AttentionBackwardStep>, int>;

class FuzzAttentionBackwardTc : public GpuTest, public ::testing::WithParamInterface<TcParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const AttentionBackwardStep step = info.step;
    const Part part = make_part("attention_backward_bf16", info.name, part_index, large, seed());
    using Fn = course::m04::tc_backward_checks::BackwardTcFn;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_attention_backward_tc(rng, step, large); },
        [&](const TcCase& c, std::uint64_t s) {
          Verdict v;
          const auto r = course::m04::tc_backward_checks::check_case(static_cast<Fn>(&impl::attention_backward), step,
                                                                     c, s);
          v.ratio = r.worst_ratio;
          if (!r.report.empty()) v.fail(r.report);
          return v;
        })));
  }
};

class FuzzAttentionBackwardTcLarge : public FuzzAttentionBackwardTc {};

TEST_P(FuzzAttentionBackwardTc, RandomCases) { run(false); }
TEST_P(FuzzAttentionBackwardTcLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzAttentionBackwardTc, FuzzAttentionBackwardTcLarge, step_part_name<AttentionBackwardStep>,
                        ::testing::ValuesIn(course::m04::attention_backward_steps(
                            course::m04::AttentionBackwardDType::bf16)));

}  // namespace
