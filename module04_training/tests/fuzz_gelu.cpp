// Random-case hardening of the GELU ladder (label fuzz), run against course::solution and
// course::exercise: for every step, 512 random calls drawn from the whole contract (n from
// 1 to 300000 around the 16-byte pack sizes, fp32 or bf16, forward, backward or backward
// with accumulate, in place, element offsets off the 16-byte boundary, input ranges of any
// magnitude up to 1e3), in 4 parts, plus a few large calls (*Large*), each checked by
// tests/gelu_check.hpp; then a bad-input sweep per step. Seeds and replay: course/fuzz.hpp.
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "gelu_check.hpp"
#include "module04/gelu.hpp"

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
using course::m04::GeluArgs;
using course::m04::GeluBackwardArgs;
using course::m04::GeluDType;
using course::m04::GeluStep;
using course::m04::gelu_checks::Case;
using course::m04::gelu_checks::Direction;
using course::testing::GpuTest;

Case draw_gelu(Rng& rng, bool large) {
  Case c;
  c.n = large ? rng.uniform(1 << 22, 1 << 24) : rng.size(1, 300000, {4, 8, 1024, 4096});
  c.dtype = rng.chance(0.5) ? GeluDType::f32 : GeluDType::bf16;
  c.dir = rng.pick({Direction::forward, Direction::backward, Direction::backward_accumulate});
  c.in_place = rng.chance(0.2);
  c.offset = rng.chance(0.3) ? rng.uniform(1, 7) : 0;
  if (rng.chance(0.5)) {
    c.lo = -4.0, c.hi = 4.0;
  } else {
    const auto v = course::fuzz::draw_values(rng, 1e3);
    c.lo = v.lo, c.hi = v.hi;
  }
  return c;
}

Verdict check_gelu(GeluStep step, const Case& c, std::uint64_t seed) {
  const auto o = course::m04::gelu_checks::run_case(
      [](GeluStep s, const GeluArgs& a) { impl::gelu_forward(s, a); },
      [](GeluStep s, const GeluBackwardArgs& a) { impl::gelu_backward(s, a); }, step, c, seed);
  Verdict v;
  v.add(o.cmp, c.dir == Direction::forward ? "y" : "dx");
  if (o.guard_writes) v.fail(std::to_string(o.guard_writes) + " writes outside the tensor");
  return v;
}

using Param = std::tuple<StepInfo<GeluStep>, int>;

class FuzzGelu : public GpuTest, public ::testing::WithParamInterface<Param> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const GeluStep step = info.step;
    const Part part = make_part("gelu", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_gelu(rng, large); },
        [&](const Case& c, std::uint64_t s) { return check_gelu(step, c, s); })));
  }
};

class FuzzGeluLarge : public FuzzGelu {};

TEST_P(FuzzGelu, RandomCases) { run(false); }
TEST_P(FuzzGeluLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzGelu, FuzzGeluLarge, step_part_name<GeluStep>, ::testing::ValuesIn(course::m04::kGeluSteps));

class FuzzGeluBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<GeluStep>> {};

TEST_P(FuzzGeluBadInputs, RejectedByNameContextHealthy) {
  const GeluStep step = GetParam().step;
  DeviceBuffer<float> buf(4096);
  const auto good = [&] {
    GeluBackwardArgs a;
    a.x = buf.data(), a.dy = buf.data() + 1024, a.dx = buf.data() + 2048, a.n = 1000;
    return a;
  };
  struct Bad {
    const char* what;
    std::function<void(GeluBackwardArgs&)> mutate;
    const char* needle;
  };
  const std::vector<Bad> bad = {
      {"negative n", [](GeluBackwardArgs& a) { a.n = -1; }, "'n'"},
      {"null x", [](GeluBackwardArgs& a) { a.x = nullptr; }, "'x'"},
      {"null dx", [](GeluBackwardArgs& a) { a.dx = nullptr; }, "'dx'"},
      {"dx overlapping x", [&](GeluBackwardArgs& a) { a.dx = buf.data() + 10; }, "'dx'"},
      {"dx overlapping dy, shifted", [&](GeluBackwardArgs& a) { a.dx = buf.data() + 1025; }, "'dx'"},
      {"misaligned dy", [&](GeluBackwardArgs& a) { a.dy = reinterpret_cast<char*>(buf.data()) + 4098; }, "'dy'"},
      {"bad dtype", [](GeluBackwardArgs& a) { a.dtype = static_cast<GeluDType>(3); }, "'dtype'"},
  };
  for (const Bad& x : bad) {
    SCOPED_TRACE(x.what);
    GeluBackwardArgs a = good();
    x.mutate(a);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::gelu_backward(step, a); }, x.needle)));
  }
  GeluArgs f;
  f.x = buf.data(), f.y = buf.data() + 100, f.n = 1000;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::gelu_forward(step, f); }, "'y'")));
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzGeluBadInputs, ::testing::ValuesIn(course::m04::kGeluSteps), step_name<GeluStep>);

}  // namespace
