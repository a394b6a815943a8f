// Tests of the AdamW ladder, run against course::solution and course::exercise (built
// twice; `impl` names the one under test), for every step: the lesson's worked example,
// awkward tensor lists (sizes 1, 3, 4097, chunk +- 1, tensors at every element offset,
// decay flags, bf16 copies), clipping on and off, several consecutive steps, the GPT's own
// parameter list, determinism, planted bugs and bad arguments.
#include "adamw_check.hpp"
#include "adamw_planted.hpp"
#include "course/testing.hpp"
#include "module04/adamw.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::m04::AdamWArgs;
using course::m04::AdamWStep;
using course::m04::AdamWTensor;
using course::m04::adamw_checks::Accepted;
using course::m04::adamw_checks::AdamWFn;
using course::m04::adamw_checks::Case;
using course::m04::adamw_checks::Outcome;
using course::m04::adamw_checks::run_case;
using course::m04::adamw_checks::TensorSpec;
using course::testing::GpuTest;

class AdamWTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<AdamWStep>> {
 protected:
  AdamWStep step() const { return GetParam().step; }
  Outcome run(const Case& c, std::uint64_t salt = 0) {
    return run_case([](AdamWStep s, const AdamWArgs& a) { impl::adamw(s, a); }, step(), c, seed() + salt);
  }
};

TensorSpec spec(std::int64_t n, bool decay = true, bool bf16 = false, int offset = 0, int goffset = 0,
                int boffset = 0) {
  TensorSpec s;
  s.n = n, s.decay = decay, s.bf16 = bf16, s.offset = offset, s.goffset = goffset, s.boffset = boffset;
  return s;
}

/// The awkward list: sizes 1, 3, 4 and 4097, one chunk (16384) and one chunk +- 1, a
/// length that is no multiple of 4 spanning chunks; every offset (0-3) for params, grads,
/// bf16 in turn; decay flags and bf16 copies mixed.
std::vector<TensorSpec> awkward_list() {
  return {spec(1, true, true),           spec(3, false, true, 1, 1, 1), spec(4097, true, true),
          spec(4, false, false, 2, 2),   spec(16384, true, true),       spec(16383, false, true, 3, 3, 3),
          spec(16385, true, false, 0, 1), spec(40001, true, true, 0, 0, 2), spec(384, false, true),
          spec(7, true, false, 1, 2, 0), spec(1152, false, true, 0, 0, 0), spec(33333, true, true, 2, 0, 1)};
}

// ---- the lesson's worked example ------------------------------------------------------

TEST_P(AdamWTest, WorkedExampleFirstStep) {
  // t = 1, m = v = 0: m = (1 - beta1) g and v = (1 - beta2) g^2, so after the bias
  // corrections m_hat = g and v_hat = g^2: the step is lr * g / (|g| + eps) = lr * sign(g)
  // (0 for g = 0), after the decay p *= 1 - lr * wd.  lr = 0.1, wd = 0.1:
  //   p = [1, -2, 0.5, 3], g = [0.5, -0.25, 0, 4]  ->  p = [0.89, -1.88, 0.495, 2.87]
  const std::vector<float> p0 = {1.f, -2.f, 0.5f, 3.f}, g0 = {0.5f, -0.25f, 0.f, 4.f};
  DeviceBuffer<float> p(p0), g(g0), m(std::vector<float>(4, 0.f)), v(std::vector<float>(4, 0.f)), norm(1);
  DeviceBuffer<__nv_bfloat16> b(4);
  AdamWTensor t{p.data(), g.data(), m.data(), v.data(), b.data(), 4, true};
  AdamWArgs a;
  a.tensors = &t;
  a.num_tensors = 1;
  a.lr = 0.1f, a.weight_decay = 0.1f, a.t = 1;
  a.grad_norm = norm.data();
  DeviceBuffer<float> ws(course::m04::adamw_workspace_bytes(step(), &t, 1) / 4 + 4);
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::adamw(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_MATCHES(course::compare(p.download(), std::vector<double>{0.89, -1.88, 0.495, 2.87}, {1e-6, 1e-6}));
  // ||g|| = sqrt(0.25 + 0.0625 + 16) = 4.0389...
  EXPECT_NEAR(norm.download()[0], std::sqrt(16.3125), 1e-5);
  EXPECT_MATCHES(course::compare(m.download(), std::vector<double>{0.05, -0.025, 0.0, 0.4}, {1e-8, 1e-6}));
}

// ---- random data, awkward lists --------------------------------------------------------

TEST_P(AdamWTest, AwkwardListNoClipping) {
  Case c;
  c.tensors = awkward_list();
  c.steps = 3;
  SCOPED_TRACE(c.str());
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
  EXPECT_TRUE(Accepted(o));
}

TEST_P(AdamWTest, AwkwardListClipped) {
  // ||g|| of ~150k values uniform in [-1, 1) is ~220: max_norm = 1 scales by ~1/220.
  for (bool report : {true, false}) {
    Case c;
    c.tensors = awkward_list();
    c.steps = 3;
    c.max_norm = 1.f;
    c.report_norm = report;
    SCOPED_TRACE(c.str());
    Outcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c, report));
    EXPECT_TRUE(Accepted(o));
  }
}

TEST_P(AdamWTest, ClippingInactiveBelowMaxNorm) {
  // max_norm above the norm: scale 1, the same update as without clipping.
  Case c;
  c.tensors = {spec(1000), spec(3, false), spec(4097, true, true)};
  c.max_norm = 1e6f;
  SCOPED_TRACE(c.str());
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
  EXPECT_TRUE(Accepted(o));
}

TEST_P(AdamWTest, LateStepsWithMovingMoments) {
  // t = 1000 .. 1002 from random moments: bias corrections near 1, v dominating the step.
  Case c;
  c.tensors = awkward_list();
  c.t0 = 1000;
  c.steps = 3;
  c.max_norm = 10.f;
  c.g_lo = -1e-3, c.g_hi = 1e-3;  // small late-training grads: eps matters
  c.eps = 1e-6f;
  SCOPED_TRACE(c.str());
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
  EXPECT_TRUE(Accepted(o));
}

TEST_P(AdamWTest, OtherHyperParameters) {
  // beta1 = 0 (RMSProp-like), beta2 = 0.9, no weight decay, lr = 0; and one-signed grads.
  for (auto [b1, b2, wd, lr] : std::vector<std::tuple<float, float, float, float>>{
           {0.f, 0.9f, 0.f, 1e-3f}, {0.5f, 0.99f, 0.5f, 3e-4f}, {0.9f, 0.999f, 0.1f, 0.f}}) {
    Case c;
    c.tensors = {spec(5000), spec(17, false, true, 1, 3), spec(16385, true, true)};
    c.beta1 = b1, c.beta2 = b2, c.weight_decay = wd, c.lr = lr;
    c.g_lo = 0.25, c.g_hi = 4.0;
    c.max_norm = 50.f;
    SCOPED_TRACE(c.str());
    Outcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
    EXPECT_TRUE(Accepted(o));
  }
}

TEST_P(AdamWTest, GptParameterList) {
  // The next rung's model: 6 layers, d_model 384, vocabulary 84, context 256 (76 tensors,
  // 10.8 M parameters), bf16 copies, clipped at 1.0 as the trainer does.
  Case c;
  c.tensors = course::m04::adamw_checks::gpt_tensors(6, 384, 84, 256, true);
  c.steps = 2;
  c.max_norm = 1.f;
  c.lr = 3e-4f;
  c.g_lo = -1e-2, c.g_hi = 1e-2;
  SCOPED_TRACE(c.str());
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
  EXPECT_TRUE(Accepted(o));
}

TEST_P(AdamWTest, EmptyTensorsAreSkipped) {
  Case c;
  c.tensors = {spec(0), spec(5), spec(0, false, true), spec(4097, true, true), spec(0)};
  c.max_norm = 1.f;
  SCOPED_TRACE(c.str());
  Outcome o;
  COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run(c));
  EXPECT_TRUE(Accepted(o));
}

TEST_P(AdamWTest, EmptyListReportsZeroNorm) {
  DeviceBuffer<float> norm(1), ws(2048);
  norm.poison();
  AdamWArgs a;
  a.t = 1;
  a.grad_norm = norm.data();
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::adamw(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(norm.download()[0], 0.f);
  // Only empty tensors: nothing to update, the norm is 0.
  AdamWTensor t{};
  a.tensors = &t;
  a.num_tensors = 1;
  norm.poison();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::adamw(step(), a));
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(norm.download()[0], 0.f);
}

TEST_P(AdamWTest, BitIdenticalRuns) {
  // No atomics anywhere: two runs from the same state give the same bits (norm included).
  const std::vector<TensorSpec> list = awkward_list();
  std::vector<std::vector<float>> results;
  for (int run_index = 0; run_index < 2; ++run_index) {
    const Case c = [&] {
      Case x;
      x.tensors = list;
      x.max_norm = 1.f;
      x.steps = 1;
      return x;
    }();
    std::vector<float> captured;
    const AdamWFn capture = [&](AdamWStep s, const AdamWArgs& a) {
      impl::adamw(s, a);
      COURSE_CUDA_CHECK(cudaDeviceSynchronize());
      float norm = 0.f;
      COURSE_CUDA_CHECK(cudaMemcpy(&norm, a.grad_norm, sizeof(float), cudaMemcpyDeviceToHost));
      captured.push_back(norm);
      for (std::int64_t i = 0; i < a.num_tensors; ++i) {
        std::vector<float> p(static_cast<std::size_t>(a.tensors[i].n));
        COURSE_CUDA_CHECK(cudaMemcpy(p.data(), a.tensors[i].params, p.size() * sizeof(float), cudaMemcpyDeviceToHost));
        captured.insert(captured.end(), p.begin(), p.end());
      }
    };
    Outcome o;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(o = run_case(capture, step(), c, seed()));
    EXPECT_TRUE(Accepted(o));
    results.push_back(captured);
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Steps, AdamWTest, ::testing::ValuesIn(course::m04::kAdamWSteps),
                         [](const ::testing::TestParamInfo<course::StepInfo<AdamWStep>>& info) {
                           return std::string(info.param.name);
                         });

// ---- planted bugs: the checking helper must reject each ---------------------------------

class AdamWPlantedTest : public GpuTest {
 protected:
  void expect_rejected(const AdamWFn& bug, Case c) {
    SCOPED_TRACE(c.str());
    const Outcome o = run_case(bug, AdamWStep::per_tensor, c, seed());
    EXPECT_FALSE(o.ok()) << "the planted bug passed the checks; they cannot catch it";
  }
  static Case clipped() {
    Case c;
    c.tensors = {spec(1000, true, true), spec(3, false, true, 1, 2, 1), spec(4097, false, true)};
    c.max_norm = 1.f;
    c.steps = 3;
    return c;
  }
};

TEST_F(AdamWPlantedTest, NoBiasCorrectionIsRejected) { expect_rejected(course::planted::adamw_no_bias_correction, clipped()); }
TEST_F(AdamWPlantedTest, DecayOnMIsRejected) { expect_rejected(course::planted::adamw_decay_on_m, clipped()); }
TEST_F(AdamWPlantedTest, ClipIgnoredIsRejected) { expect_rejected(course::planted::adamw_clip_ignored, clipped()); }
TEST_F(AdamWPlantedTest, DecayIgnoringFlagIsRejected) {
  expect_rejected(course::planted::adamw_decay_ignores_flag, clipped());
}
TEST_F(AdamWPlantedTest, StaleBf16IsRejected) { expect_rejected(course::planted::adamw_stale_bf16, clipped()); }
TEST_F(AdamWPlantedTest, NormWithoutSqrtIsRejected) {
  Case c = clipped();
  c.report_norm = false;  // even unreported, the wrong norm gives a wrong scale
  expect_rejected(course::planted::adamw_norm_without_sqrt, c);
  expect_rejected(course::planted::adamw_norm_without_sqrt, clipped());
}

// ---- argument validation: host-side, before any launch (no GPU needed) ------------------

/// Fake "device" storage: validation only looks at the addresses.
alignas(16) float g_fake[1 << 14];
AdamWTensor g_list[3];

/// Three tensors of 1000 floats each, every array its own 1000-float slot; workspace at 12000.
AdamWArgs good_args() {
  for (int i = 0; i < 3; ++i)
    g_list[i] = {g_fake + 4000 * i, g_fake + 4000 * i + 1000, g_fake + 4000 * i + 2000, g_fake + 4000 * i + 3000,
                 nullptr, 1000, i != 1};
  AdamWArgs a;
  a.tensors = g_list;
  a.num_tensors = 3;
  a.t = 1;
  a.workspace = g_fake + 12000;
  a.workspace_bytes = 4000 * sizeof(float);
  return a;
}

void call_default_step(const AdamWArgs& a) { impl::adamw(AdamWStep::multi_tensor, a); }

TEST(AdamWArgsTest, BadHyperParametersAreNamed) {
  course::testing::expect_each_rejected<AdamWArgs>(good_args, call_default_step, {
      {[](AdamWArgs& a) { a.t = 0; }, "'t' = 0"},
      {[](AdamWArgs& a) { a.t = -3; }, "'t' = -3"},
      {[](AdamWArgs& a) { a.lr = -1e-3f; }, "'lr' = -0.001"},
      {[](AdamWArgs& a) { a.lr = NAN; }, "'lr' = nan"},
      {[](AdamWArgs& a) { a.beta1 = 1.f; }, "'beta1' = 1"},
      {[](AdamWArgs& a) { a.beta2 = -0.5f; }, "'beta2' = -0.5"},
      {[](AdamWArgs& a) { a.eps = 0.f; }, "'eps' = 0"},
      {[](AdamWArgs& a) { a.weight_decay = -0.1f; }, "'weight_decay' = -0.1"},
      {[](AdamWArgs& a) { a.max_norm = INFINITY; }, "'max_norm' = inf"},
      {[](AdamWArgs& a) { a.num_tensors = -1; }, "'num_tensors' = -1"},
  });
  course::testing::expect_invalid_argument([] { impl::adamw(static_cast<AdamWStep>(7), good_args()); },
                                           "'step' = 7");
}

TEST(AdamWArgsTest, BadPointersAreNamed) {
  course::testing::expect_each_rejected<AdamWArgs>(good_args, call_default_step, {
      {[](AdamWArgs& a) { a.tensors = nullptr; }, "'tensors' = nullptr"},
      {[](AdamWArgs& a) { g_list[0].params = nullptr; (void)a; }, "'tensors[0].params' = nullptr"},
      {[](AdamWArgs& a) { g_list[1].grads = nullptr; (void)a; }, "'tensors[1].grads' = nullptr"},
      {[](AdamWArgs& a) { g_list[2].m = nullptr; (void)a; }, "'tensors[2].m' = nullptr"},
      {[](AdamWArgs& a) { g_list[2].v = nullptr; (void)a; }, "'tensors[2].v' = nullptr"},
      {[](AdamWArgs& a) { g_list[1].n = -5; (void)a; }, "'tensors[1].n' = -5"},
      {[](AdamWArgs& a) {
         g_list[0].m = reinterpret_cast<float*>(reinterpret_cast<char*>(g_list[0].m) + 2);
         (void)a;
       },
       "'tensors[0].m'"},
      {[](AdamWArgs& a) {
         g_list[0].bf16 = reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<char*>(g_fake + 13000) + 1);
         (void)a;
       },
       "'tensors[0].bf16'"},
      {[](AdamWArgs& a) { a.workspace = nullptr; }, "'workspace' = nullptr"},
      {[](AdamWArgs& a) { a.workspace = g_fake + 12001; }, "'workspace'"},
      {[](AdamWArgs& a) { a.workspace_bytes = 16; }, "'workspace_bytes' = 16"},
      {[](AdamWArgs& a) { a.grad_norm = reinterpret_cast<float*>(reinterpret_cast<char*>(g_fake + 16000) + 1); },
       "'grad_norm'"},
  });
}

TEST(AdamWArgsTest, OverlapsAreNamed) {
  course::testing::expect_each_rejected<AdamWArgs>(good_args, call_default_step, {
      // within a tensor
      {[](AdamWArgs& a) { g_list[0].m = g_list[0].params + 999; (void)a; }, "overlaps tensors[0].params"},
      {[](AdamWArgs& a) { g_list[1].v = const_cast<float*>(g_list[1].grads); (void)a; }, "overlaps tensors[1]"},
      // across tensors: tensor 2's params start inside tensor 1's v
      {[](AdamWArgs& a) { g_list[2].params = g_list[1].v + 500; (void)a; }, "overlaps tensors[1].v"},
      // the same grads for two tensors
      {[](AdamWArgs& a) { g_list[2].grads = g_list[0].grads; (void)a; }, "tensors[0].grads"},
      // a bf16 copy inside another tensor's m
      {[](AdamWArgs& a) { g_list[0].bf16 = reinterpret_cast<__nv_bfloat16*>(g_list[2].m); (void)a; }, "overlaps"},
      // the workspace or the norm inside a tensor
      {[](AdamWArgs& a) { a.workspace = g_list[1].m; }, "workspace"},
      {[](AdamWArgs& a) { a.grad_norm = g_list[2].v + 10; }, "grad_norm"},
  });
}

TEST(AdamWArgsTest, EmptyTensorsNeedNoPointers) {
  auto a = good_args();
  g_list[1] = AdamWTensor{};  // n = 0, all null
  for (const auto& s : course::m04::kAdamWSteps) {
    auto b = a;
    b.workspace_bytes = course::m04::adamw_workspace_bytes(s.step, b.tensors, b.num_tensors);
    EXPECT_NO_THROW(course::m04::validate_adamw_args(b, s.step, "test")) << s.name;
  }
}

TEST(AdamWArgsTest, WorkspaceBytes) {
  using course::m04::adamw_workspace_bytes;
  good_args();
  // per_tensor: 16 + 2 x round16(3 x 4) + 4096
  EXPECT_EQ(adamw_workspace_bytes(AdamWStep::per_tensor, g_list, 3), 16u + 32u + 4096u);
  // multi_tensor: 16 + round16(3 x 56) + round16(4 x 8) + round16(3 chunks x 4)
  EXPECT_EQ(adamw_workspace_bytes(AdamWStep::multi_tensor, g_list, 3), 16u + 176u + 32u + 16u);
  EXPECT_EQ(adamw_workspace_bytes(AdamWStep::multi_tensor, nullptr, 0), 16u);
}

TEST(AdamWArgsTest, StepTableNamesEveryStep) {
  EXPECT_STREQ(course::m04::step_name(AdamWStep::per_tensor), "per_tensor");
  EXPECT_STREQ(course::m04::step_name(AdamWStep::multi_tensor), "multi_tensor");
  EXPECT_STREQ(course::m04::step_name(static_cast<AdamWStep>(9)), "?");
}

}  // namespace
