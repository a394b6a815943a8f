// Random-case hardening of the AdamW ladder (label fuzz), run against course::solution and
// course::exercise like the module's tests: for every step, 512 random tensor lists drawn
// from the whole contract (1-40 tensors of 1 .. 70000 elements around the float4 and chunk
// sizes, every element offset per array, decay flags, bf16 copies, clipping on/off, the
// norm reported or not, 1-3 consecutive steps from t = 1 or from a late t with random
// moments, hyper-parameters across their ranges, grads of any magnitude), in 4 parts, plus
// a few large lists (*Large*), each checked by tests/adamw_check.hpp; then a bad-input sweep
// per step: every bad argument rejected by name, the CUDA context healthy afterwards.
// Seeds, replay and the "[fuzz]" lines: course/fuzz.hpp.
#include "adamw_check.hpp"
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "module04/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::StepInfo;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::step_name;
using course::fuzz::step_part_name;
using course::fuzz::Verdict;
using course::m04::AdamWArgs;
using course::m04::AdamWStep;
using course::m04::AdamWTensor;
using course::m04::adamw_checks::Case;
using course::m04::adamw_checks::TensorSpec;
using course::testing::GpuTest;

/// Up to ~2^18 elements per case (the CPU reference runs every step in double); large:
/// up to 2^23 in a few big tensors and many small ones.
Case draw_adamw(Rng& rng, bool large) {
  Case c;
  const int count = large ? static_cast<int>(rng.uniform(20, 80)) : static_cast<int>(rng.size(1, 40));
  std::int64_t budget = large ? (std::int64_t{1} << 23) : (std::int64_t{1} << 18);
  for (int i = 0; i < count && budget > 0; ++i) {
    TensorSpec t;
    t.n = std::min<std::int64_t>(budget, rng.chance(0.05) ? 0 : rng.size(1, large ? 2000000 : 70000, {4, 256, 16384}));
    budget -= t.n;
    t.decay = rng.chance(0.6);
    t.bf16 = rng.chance(0.4);
    if (rng.chance(0.35)) {  // off the float4 path, one array or all
      t.offset = static_cast<int>(rng.uniform(0, 3));
      t.goffset = rng.chance(0.5) ? t.offset : static_cast<int>(rng.uniform(0, 3));
      t.boffset = static_cast<int>(rng.uniform(0, 3));
    }
    c.tensors.push_back(t);
  }
  c.steps = static_cast<int>(rng.uniform(1, 3));
  c.t0 = rng.chance(0.5) ? 1 : rng.log_uniform(2, 100000);
  c.lr = static_cast<float>(std::exp(rng.real(std::log(1e-5), std::log(1e-1))));
  if (rng.chance(0.05)) c.lr = 0.f;
  if (rng.chance(0.7)) {
    c.beta1 = 0.9f, c.beta2 = 0.999f;
  } else {
    c.beta1 = static_cast<float>(rng.real(0.0, 0.99));
    c.beta2 = static_cast<float>(rng.real(0.5, 0.9999));
  }
  c.eps = static_cast<float>(std::exp(rng.real(std::log(1e-10), std::log(1e-3))));
  c.weight_decay = rng.chance(0.2) ? 0.f : static_cast<float>(rng.real(0.0, 0.5));
  const auto g = course::fuzz::draw_values(rng, 1e3);
  c.g_lo = g.lo, c.g_hi = g.hi;
  if (rng.chance(0.6)) {  // clipping: below, near or above the norm
    const double norm_guess = g.magnitude() * std::sqrt(static_cast<double>(std::max<std::int64_t>(c.elements(), 1)));
    c.max_norm = static_cast<float>(norm_guess * std::exp(rng.real(std::log(1e-3), std::log(3.0))));
  }
  c.report_norm = rng.chance(0.8);
  return c;
}

Verdict check_adamw(AdamWStep step, const Case& c, std::uint64_t seed) {
  const auto o = course::m04::adamw_checks::run_case(
      [](AdamWStep s, const AdamWArgs& a) { impl::adamw(s, a); }, step, c, seed);
  Verdict v;
  if (!o.ok()) v.fail(o.report());
  v.ratio = o.worst_ratio();
  return v;
}

using Param = std::tuple<StepInfo<AdamWStep>, int>;  // step, part

class FuzzAdamW : public GpuTest, public ::testing::WithParamInterface<Param> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const AdamWStep step = info.step;
    const Part part = make_part("adamw", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_adamw(rng, large); },
        [&](const Case& c, std::uint64_t s) { return check_adamw(step, c, s); })));
  }
};

class FuzzAdamWLarge : public FuzzAdamW {};

TEST_P(FuzzAdamW, RandomCases) { run(false); }
TEST_P(FuzzAdamWLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzAdamW, FuzzAdamWLarge, step_part_name<AdamWStep>,
                        ::testing::ValuesIn(course::m04::kAdamWSteps));

class FuzzAdamWBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<AdamWStep>> {};

TEST_P(FuzzAdamWBadInputs, RejectedByNameContextHealthy) {
  const AdamWStep step = GetParam().step;
  constexpr std::int64_t kN = 1000;
  DeviceBuffer<float> buf(8 * kN), ws(4096), norm(1);
  std::vector<AdamWTensor> list;
  const auto good = [&] {
    list = {{buf.data(), buf.data() + kN, buf.data() + 2 * kN, buf.data() + 3 * kN, nullptr, kN, true},
            {buf.data() + 4 * kN, buf.data() + 5 * kN, buf.data() + 6 * kN, buf.data() + 7 * kN, nullptr, kN, false}};
    AdamWArgs a;
    a.tensors = list.data();
    a.num_tensors = 2;
    a.t = 1;
    a.grad_norm = norm.data();
    a.max_norm = 1.f;
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    return a;
  };
  struct Bad {
    const char* what;
    std::function<void(AdamWArgs&)> mutate;
    const char* needle;
  };
  const std::vector<Bad> bad = {
      {"t = 0", [](AdamWArgs& a) { a.t = 0; }, "'t' = 0"},
      {"negative lr", [](AdamWArgs& a) { a.lr = -1.f; }, "'lr'"},
      {"beta1 = 1", [](AdamWArgs& a) { a.beta1 = 1.f; }, "'beta1'"},
      {"beta2 NaN", [](AdamWArgs& a) { a.beta2 = NAN; }, "'beta2'"},
      {"eps negative", [](AdamWArgs& a) { a.eps = -1e-8f; }, "'eps'"},
      {"weight decay NaN", [](AdamWArgs& a) { a.weight_decay = NAN; }, "'weight_decay'"},
      {"max_norm NaN", [](AdamWArgs& a) { a.max_norm = NAN; }, "'max_norm'"},
      {"null tensor list", [](AdamWArgs& a) { a.tensors = nullptr; }, "'tensors'"},
      {"null params", [&](AdamWArgs&) { list[0].params = nullptr; }, "'tensors[0].params'"},
      {"null grads", [&](AdamWArgs&) { list[1].grads = nullptr; }, "'tensors[1].grads'"},
      {"negative n", [&](AdamWArgs&) { list[1].n = -1; }, "'tensors[1].n'"},
      {"m overlapping its params", [&](AdamWArgs&) { list[0].m = list[0].params + 10; }, "overlaps"},
      {"tensor 1 inside tensor 0", [&](AdamWArgs&) { list[1].params = list[0].v + 100; }, "overlaps"},
      {"bf16 inside grads", [&](AdamWArgs&) { list[1].bf16 = reinterpret_cast<__nv_bfloat16*>(buf.data() + kN); },
       "overlaps"},
      {"workspace too small", [](AdamWArgs& a) { a.workspace_bytes = 8; }, "'workspace_bytes'"},
      {"null workspace", [](AdamWArgs& a) { a.workspace = nullptr; }, "'workspace' = nullptr"},
      {"workspace inside a tensor", [&](AdamWArgs& a) { a.workspace = buf.data() + 4; }, "'workspace'"},
      {"norm inside a tensor", [&](AdamWArgs& a) { a.grad_norm = buf.data() + 5 * kN + 1; }, "grad_norm"},
  };
  for (const Bad& x : bad) {
    SCOPED_TRACE(x.what);
    AdamWArgs a = good();
    x.mutate(a);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::adamw(step, a); }, x.needle)));
  }
  AdamWArgs a = good();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_TRUE(course::fuzz::rejects([&] { impl::adamw(static_cast<AdamWStep>(99), a); }, "'step' = 99")));
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzAdamWBadInputs, ::testing::ValuesIn(course::m04::kAdamWSteps),
                         step_name<AdamWStep>);

}  // namespace
