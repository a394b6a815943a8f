// Random-case hardening of module 3 (label fuzz), run against course::solution and
// course::exercise like the module's tests. For every fp32 attention step: 512 random
// cases drawn from what the step supports (step_support()): batch and heads, N_q and N_k
// (1, primes, tile +- 1, N_q != N_k both ways), every head dim the step takes, BHND/BNHD
// per tensor, padded rows, K/V broadcast over the batch, causal, grouped-query, RoPE and
// ALiBi (fused_options), an explicit scale, lse on or off, large-magnitude and one-signed
// data; in 4 parts that ctest runs in parallel, plus a few large cases (*Large*), each
// checked by the module's own helper (attention_check.hpp). Then a bad-input sweep per
// step, fp32 and bf16 (tensor-core) alike. Seeds, replay and the "[fuzz]" lines: course/fuzz.hpp.
#include "attention_check.hpp"
#include "attention_tc_check.hpp"
#include "course/fuzz.hpp"
#include "course/testing.hpp"
#include "module03/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::AttentionLayout;
using course::DeviceBuffer;
using course::StepInfo;
using course::fuzz::draw_divisor;
using course::fuzz::fake_address;
using course::fuzz::kCasesPerStep;
using course::fuzz::kLargeCases;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::step_name;
using course::fuzz::step_part_name;
using course::fuzz::ValueRange;
using course::fuzz::Verdict;
using course::m03::AttentionArgs;
using course::m03::AttentionStep;
using course::m03::checks::BHND;
using course::m03::checks::BNHD;
using course::m03::checks::Case;
using course::testing::GpuTest;

/// The steps that take fp32 AttentionArgs.
std::vector<StepInfo<AttentionStep>> fp32_steps() {
  return course::m03::attention_steps(course::m03::AttentionDType::f32);
}

/// Everything step_support(step) allows. Sizes: N_q, N_k up to ~300 around the kernels'
/// tiles (32/64-key K/V tiles, 64- and 128-row Q tiles), equal a third of the time; batch
/// up to 3 and heads up to 8 within 2^24 multiply-adds per case (the CPU reference stays
/// quick); now and then many (batch, head) pairs with short sequences. Large: long
/// sequences and many heads.
Case draw_attention(Rng& rng, AttentionStep step, bool large) {
  const auto sup = course::m03::step_support(step);
  Case c;
  std::vector<std::int64_t> dims;
  for (const int d : course::m03::kHeadDims)
    if (d <= sup.max_head_dim) dims.push_back(d);
  c.d = rng.pick(dims);
  if (large) {
    switch (rng.uniform(0, 2)) {
      case 0:
        c.N_q = rng.uniform(1500, 2048), c.N_k = rng.uniform(1500, 2048);
        break;
      case 1:
        c.B = 4, c.H = 16, c.N_q = c.N_k = rng.uniform(200, 300);
        break;
      default:
        c.N_q = rng.uniform(1, 64), c.N_k = rng.uniform(3000, 6000), c.H = 4;
        break;  // decoding
    }
  } else if (rng.chance(0.04)) {
    c.B = rng.uniform(20, 60), c.H = rng.uniform(20, 60);  // many (batch, head) pairs: blockIdx.y
    c.N_q = rng.size(1, 20), c.N_k = rng.size(1, 20);
    c.d = std::min<std::int64_t>(c.d, 32);
  } else {
    c.N_q = rng.size(1, 300, {32, 64, 128});
    c.N_k = rng.chance(0.33) ? c.N_q : rng.size(1, 300, {32, 64, 128});
    const std::int64_t per_pair = c.N_q * c.N_k * c.d, rows = std::max(c.N_q, c.N_k) * c.d;
    const std::int64_t pairs =
        std::max<std::int64_t>(1, std::min((std::int64_t{1} << 24) / per_pair, (std::int64_t{1} << 19) / rows));
    c.B = rng.size(1, std::min<std::int64_t>(3, pairs));
    c.H = rng.size(1, std::max<std::int64_t>(1, std::min<std::int64_t>(8, pairs / c.B)));
  }
  if (sup.options && !large && rng.chance(0.3) && c.B * c.H < 4 && c.N_q * c.N_k * c.d <= (std::int64_t{1} << 22)) {
    c.B = 1;  // enough heads for a group size strictly between 1 and H
    c.H = rng.pick({4, 6, 8});
  }
  c.H_kv = sup.options && rng.chance(0.5) ? draw_divisor(rng, c.H) : c.H;
  c.layout = rng.pick({BHND, BNHD});
  c.o_layout = rng.chance(0.5) ? c.layout : rng.pick({BHND, BNHD});
  c.pad = rng.chance(0.3) ? 4 * rng.uniform(1, 4) : 0;
  c.o_pad = rng.chance(0.25) ? 4 * rng.uniform(1, 3) : 0;
  c.kv_batch_broadcast = c.B > 1 && rng.chance(0.1);
  c.causal = sup.causal && rng.chance(0.5);
  c.rope = sup.options && rng.chance(0.3);
  c.alibi = sup.options && rng.chance(0.3);
  c.input_range = rng.chance(0.5) ? 1.0 : std::exp(rng.real(std::log(0.05), std::log(30.0)));
  const ValueRange v = course::fuzz::draw_values(rng, 100.0);
  c.v_lo = v.lo;
  c.v_hi = v.hi;
  c.scale = rng.chance(0.8) ? 0.f : static_cast<float>(rng.real(0.05, 1.0));
  c.no_lse = sup.lse && rng.chance(0.2);
  return c;
}

/// What a checking helper's check_case (fp32 or tensor-core) reported, as a Verdict.
template <class Report>
Verdict verdict_of(const Report& r) {
  Verdict v;
  v.ratio = r.worst_ratio;
  if (!r.report.empty()) v.fail(r.report);
  return v;
}

using AttnParam = std::tuple<StepInfo<AttentionStep>, int>;

class FuzzAttention : public GpuTest, public ::testing::WithParamInterface<AttnParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const AttentionStep step = info.step;
    const Part part = make_part("attention", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_attention(rng, step, large); },
        [&](const Case& c, std::uint64_t s) {
          return verdict_of(course::m03::checks::check_case(&impl::attention, step, c, s));
        })));
  }
};

class FuzzAttentionLarge : public FuzzAttention {};

TEST_P(FuzzAttention, RandomCases) { run(false); }
TEST_P(FuzzAttentionLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzAttention, FuzzAttentionLarge, step_part_name<AttentionStep>,
                        ::testing::ValuesIn(fp32_steps()));

// ------------------------------------------------ tensor-core (bf16) steps -----

using TcCase = course::m03::tc_checks::Case;

/// The steps that take bf16 AttentionArgsBf16.
std::vector<StepInfo<AttentionStep>> bf16_steps() {
  return course::m03::attention_steps(course::m03::AttentionDType::bf16);
}

/// The tensor-core contract: head dims 32..128 (64 and 128 for the Hopper steps), strides in multiples of 8 elements (padding
/// 8..32), grouped-query heads in every step, causal, lse on or off; sizes, layouts,
/// broadcasts and data ranges as for the fp32 steps. Checked by FlashAttention's rule
/// (attention_tc_check.hpp).
TcCase draw_attention_tc(Rng& rng, AttentionStep step, bool large) {
  const auto sup = course::m03::step_support(step);
  TcCase c;
  c.d = sup.hopper ? rng.pick({64, 128}) : rng.pick({32, 64, 96, 128});
  if (large) {
    switch (rng.uniform(0, 2)) {
      case 0:
        c.N_q = rng.uniform(1500, 2048), c.N_k = rng.uniform(1500, 2048);
        break;
      case 1:
        c.B = 4, c.H = 16, c.N_q = c.N_k = rng.uniform(200, 300);
        break;
      default:
        c.N_q = rng.uniform(1, 64), c.N_k = rng.uniform(3000, 6000), c.H = 4;
        break;  // decoding
    }
  } else if (rng.chance(0.04)) {
    c.B = rng.uniform(20, 60), c.H = rng.uniform(20, 60);
    c.N_q = rng.size(1, 20), c.N_k = rng.size(1, 20);
    c.d = sup.hopper ? 64 : 32;
  } else {
    c.N_q = rng.size(1, 300, {16, 32, 64, 128});
    c.N_k = rng.chance(0.33) ? c.N_q : rng.size(1, 300, {16, 32, 64, 128});
    const std::int64_t per_pair = c.N_q * c.N_k * c.d, rows = std::max(c.N_q, c.N_k) * c.d;
    const std::int64_t pairs =
        std::max<std::int64_t>(1, std::min((std::int64_t{1} << 24) / per_pair, (std::int64_t{1} << 19) / rows));
    c.B = rng.size(1, std::min<std::int64_t>(3, pairs));
    c.H = rng.size(1, std::max<std::int64_t>(1, std::min<std::int64_t>(8, pairs / c.B)));
    if (rng.chance(0.3) && c.B * c.H < 4 && per_pair <= (std::int64_t{1} << 22)) {
      c.B = 1;  // enough heads for a group size strictly between 1 and H
      c.H = rng.pick({4, 6, 8});
    }
  }
  c.H_kv = rng.chance(0.5) ? draw_divisor(rng, c.H) : c.H;
  c.layout = rng.pick({BHND, BNHD});
  c.o_layout = rng.chance(0.5) ? c.layout : rng.pick({BHND, BNHD});
  c.pad = rng.chance(0.3) ? 8 * rng.uniform(1, 4) : 0;
  c.o_pad = rng.chance(0.25) ? 8 * rng.uniform(1, 3) : 0;
  c.kv_batch_broadcast = c.B > 1 && rng.chance(0.1);
  c.causal = sup.causal && rng.chance(0.5);
  c.lse = !sup.lse || rng.chance(0.8);
  c.input_range = rng.chance(0.5) ? 1.0 : std::exp(rng.real(std::log(0.05), std::log(30.0)));
  const ValueRange v = course::fuzz::draw_values(rng, 100.0);
  c.v_lo = v.lo;
  c.v_hi = v.hi;
  c.scale = rng.chance(0.8) ? 0.f : static_cast<float>(rng.real(0.05, 1.0));
  return c;
}

class FuzzAttentionTc : public GpuTest, public ::testing::WithParamInterface<AttnParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const AttentionStep step = info.step;
    const Part part = make_part("attention_bf16", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_attention_tc(rng, step, large); },
        [&](const TcCase& c, std::uint64_t s) {
          return verdict_of(course::m03::tc_checks::check_case(&impl::attention, step, c, s));
        })));
  }
};

class FuzzAttentionTcLarge : public FuzzAttentionTc {};

TEST_P(FuzzAttentionTc, RandomCases) { run(false); }
TEST_P(FuzzAttentionTcLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzAttentionTc, FuzzAttentionTcLarge, step_part_name<AttentionStep>,
                        ::testing::ValuesIn(bf16_steps()));

// ------------------------------------------------------------------ bad inputs -----

class FuzzAttentionBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<AttentionStep>> {};

TEST_P(FuzzAttentionBadInputs, RejectedByNameContextHealthy) {
  const AttentionStep step = GetParam().step;
  const auto sup = course::m03::step_support(step);
  // Valid: B = 2, H = H_kv = 2, N_q = N_k = 8, d = 64, BHND; device buffers.
  constexpr std::int64_t kElems = 2 * 2 * 8 * 64;
  DeviceBuffer<float> q(kElems), k(kElems), v(kElems), o(kElems), lse(2 * 2 * 8 + 4), ws(2 * 2 * 8 * 8);
  const auto good = [&] {
    AttentionArgs a = course::m03::make_attention_args(q.data(), k.data(), v.data(), o.data(), 2, 2, 2, 8, 8, 64, BHND);
    if (sup.lse) a.lse = lse.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    return a;
  };
  struct Bad {
    const char* what;
    std::function<void(AttentionArgs&)> mutate;
    const char* needle;
    bool applies = true;
  };
  const std::int64_t too_big = std::int64_t{1} << 31;
  const std::vector<Bad> bad = {
      {"seq_q = 0", [](AttentionArgs& a) { a.seq_q = 0; }, "'seq_q' = 0"},
      {"negative seq_k", [](AttentionArgs& a) { a.seq_k = -1; }, "'seq_k' = -1"},
      {"seq_q beyond 2^31 - 1", [&](AttentionArgs& a) { a.seq_q = too_big; }, "'seq_q'"},
      {"batch = 0", [](AttentionArgs& a) { a.batch = 0; }, "'batch' = 0"},
      {"heads = 0", [](AttentionArgs& a) { a.heads = 0; }, "'heads' = 0"},
      {"kv_heads = 0", [](AttentionArgs& a) { a.kv_heads = 0; }, "'kv_heads' = 0"},
      {"kv_heads not dividing heads",
       [](AttentionArgs& a) {
         a.heads = 2;
         a.kv_heads = 3;
       },
       "'kv_heads' = 3"},
      {"batch * heads beyond blockIdx.y",
       [](AttentionArgs& a) {
         a.batch = 256;
         a.heads = a.kv_heads = 256;
       },
       "'batch' = 256"},
      {"head_dim 48 (no kernel for it)", [](AttentionArgs& a) { a.head_dim = 48; }, "'head_dim' = 48"},
      {"head_dim 0", [](AttentionArgs& a) { a.head_dim = 0; }, "'head_dim' = 0"},
      {"head_dim above the step's limit",
       [](AttentionArgs& a) {
         a.head_dim = 128;
         a.q_strides.seq = a.k_strides.seq = a.v_strides.seq = a.o_strides.seq = 128;
       },
       "'head_dim' = 128", sup.max_head_dim < 128},
      {"null q", [](AttentionArgs& a) { a.q = nullptr; }, "'q' = nullptr"},
      {"null k", [](AttentionArgs& a) { a.k = nullptr; }, "'k' = nullptr"},
      {"null v", [](AttentionArgs& a) { a.v = nullptr; }, "'v' = nullptr"},
      {"null o", [](AttentionArgs& a) { a.o = nullptr; }, "'o' = nullptr"},
      {"q misaligned by one element",
       [&](AttentionArgs& a) {
         a.q = q.data() + 1;
         a.seq_q = 7;
       },
       "'q'"},
      {"o misaligned by one element",
       [&](AttentionArgs& a) {
         a.o = o.data() + 1;
         a.seq_q = 7;
       },
       "'o'"},
      {"lse misaligned by half an element",
       [&](AttentionArgs& a) { a.lse = reinterpret_cast<float*>(reinterpret_cast<char*>(lse.data()) + 2); }, "'lse'",
       sup.lse},
      {"row stride not a multiple of 4", [](AttentionArgs& a) { a.q_strides.seq = 66; }, "'q_strides.seq' = 66"},
      {"row stride below head_dim", [](AttentionArgs& a) { a.k_strides.seq = 32; }, "'k_strides.seq' = 32"},
      {"negative head stride", [](AttentionArgs& a) { a.v_strides.head = -4; }, "'v_strides.head' = -4"},
      {"O heads on top of each other", [](AttentionArgs& a) { a.o_strides.head = 0; }, "'o_strides.head' = 0"},
      {"O rows overlapping",
       [](AttentionArgs& a) {
         a.o_strides.seq = 32;
         a.o_strides.head = 8 * 32;
         a.o_strides.batch = 2 * 8 * 32;
       },
       "'o_strides.seq' = 32"},
      {"O overlapping Q", [&](AttentionArgs& a) { a.o = q.data(); }, "'o'"},
      {"O overlapping V", [&](AttentionArgs& a) { a.o = v.data() + 64; }, "'o'"},
      {"lse overlapping O", [&](AttentionArgs& a) { a.lse = o.data() + 8; }, "'lse'", sup.lse},
      {"lse overlapping K", [&](AttentionArgs& a) { a.lse = k.data(); }, "'lse'", sup.lse},
      {"negative scale", [](AttentionArgs& a) { a.scale = -1.f; }, "'scale' = -1"},
      {"NaN scale", [](AttentionArgs& a) { a.scale = std::numeric_limits<float>::quiet_NaN(); }, "'scale'"},
      {"causal on a step without a mask", [](AttentionArgs& a) { a.causal = true; }, "'causal'", !sup.causal},
      {"lse on a step without it", [&](AttentionArgs& a) { a.lse = lse.data(); }, "'lse'", !sup.lse},
      {"rope on a step without options", [](AttentionArgs& a) { a.rope = true; }, "'rope'", !sup.options},
      {"alibi on a step without options", [](AttentionArgs& a) { a.alibi = true; }, "'alibi'", !sup.options},
      {"grouped-query on a step without options", [](AttentionArgs& a) { a.kv_heads = 1; }, "'kv_heads' = 1",
       !sup.options},
      {"rope_theta <= 1",
       [](AttentionArgs& a) {
         a.rope = true;
         a.rope_theta = 0.5f;
       },
       "'rope_theta'", sup.options},
      {"workspace too small", [](AttentionArgs& a) { a.workspace_bytes = 16; }, "'workspace_bytes' = 16",
       sup.workspace},
      {"null workspace", [](AttentionArgs& a) { a.workspace = nullptr; }, "'workspace' = nullptr", sup.workspace},
      {"workspace overlapping O", [&](AttentionArgs& a) { a.workspace = o.data(); }, "'workspace'", sup.workspace},
      {"workspace overlapping Q", [&](AttentionArgs& a) { a.workspace = q.data() + 4; }, "'workspace'", sup.workspace},
  };
  for (const Bad& x : bad) {
    if (!x.applies) continue;
    SCOPED_TRACE(x.what);
    AttentionArgs a = good();
    x.mutate(a);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::attention(step, a); }, x.needle)));
  }
  AttentionArgs a = good();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_TRUE(course::fuzz::rejects([&] { impl::attention(static_cast<AttentionStep>(99), a); }, "'step' = 99")));
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzAttentionBadInputs, ::testing::ValuesIn(fp32_steps()), step_name<AttentionStep>);

// The tensor-core steps (bf16 tensors): the same sweep through AttentionArgsBf16, whose
// contract differs in head dims (32..128), stride granularity (8 elements) and options.
using AttentionArgsBf16 = course::m03::AttentionArgsBf16;

class FuzzAttentionBf16BadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<AttentionStep>> {};

TEST_P(FuzzAttentionBf16BadInputs, RejectedByNameContextHealthy) {
  using bf16 = __nv_bfloat16;
  const AttentionStep step = GetParam().step;
  // Valid: B = 2, H = 4, H_kv = 2 (grouped-query), N_q = N_k = 8, d = 64, BHND; device buffers.
  constexpr std::int64_t kElems = 2 * 4 * 8 * 64;
  DeviceBuffer<bf16> q(kElems), k(kElems), v(kElems), o(kElems);
  DeviceBuffer<float> lse(2 * 4 * 8);
  const auto good = [&] {
    AttentionArgsBf16 a =
        course::m03::make_attention_args_bf16(q.data(), k.data(), v.data(), o.data(), 2, 4, 2, 8, 8, 64, BHND);
    a.lse = lse.data();
    return a;
  };
  using A = AttentionArgsBf16;
  struct Bad {
    const char* what;
    std::function<void(A&)> mutate;
    const char* needle;
  };
  const std::vector<Bad> bad = {
      {"seq_q = 0", [](A& a) { a.seq_q = 0; }, "'seq_q' = 0"},
      {"negative seq_k", [](A& a) { a.seq_k = -2; }, "'seq_k' = -2"},
      {"kv_heads not dividing heads", [](A& a) { a.kv_heads = 3; }, "'kv_heads' = 3"},
      {"batch * heads beyond blockIdx.y",
       [](A& a) {
         a.batch = 256;
         a.heads = a.kv_heads = 256;
       },
       "'batch' = 256"},
      {"head_dim 16 (below the mma k depth)",
       [](A& a) {
         a.head_dim = 16;
         a.q_strides = course::m03::attention_strides(BHND, 4, 8, 16);
         a.k_strides = a.v_strides = course::m03::attention_strides(BHND, 2, 8, 16);
         a.o_strides = a.q_strides;
       },
       "'head_dim' = 16"},
      {"head_dim 48", [](A& a) { a.head_dim = 48; }, "'head_dim' = 48"},
      {"null k", [](A& a) { a.k = nullptr; }, "'k' = nullptr"},
      {"null o", [](A& a) { a.o = nullptr; }, "'o' = nullptr"},
      {"q misaligned by one element",
       [&](A& a) {
         a.q = q.data() + 1;
         a.seq_q = 7;
       },
       "'q'"},
      {"row stride not a multiple of 8", [](A& a) { a.k_strides.seq = 68; }, "'k_strides.seq' = 68"},
      {"row stride below head_dim", [](A& a) { a.v_strides.seq = 32; }, "'v_strides.seq' = 32"},
      {"O heads on top of each other", [](A& a) { a.o_strides.head = 0; }, "'o_strides.head' = 0"},
      {"O overlapping Q", [&](A& a) { a.o = q.data() + 64; }, "'o'"},
      {"lse overlapping O", [&](A& a) { a.lse = reinterpret_cast<float*>(o.data()); }, "'lse'"},
      {"negative scale", [](A& a) { a.scale = -2.f; }, "'scale' = -2"},
  };
  for (const Bad& x : bad) {
    SCOPED_TRACE(x.what);
    A a = good();
    x.mutate(a);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::attention(step, a); }, x.needle)));
  }
  // The other element type than the step's: fp32 arguments for a bf16 step, and the reverse.
  DeviceBuffer<float> qf(kElems), kf(kElems), vf(kElems), of(kElems);
  const AttentionArgs f =
      course::m03::make_attention_args(qf.data(), kf.data(), vf.data(), of.data(), 2, 2, 2, 8, 8, 64, BHND);
  COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::attention(step, f); }, "'step'")));
  for (const auto& info : fp32_steps()) {
    SCOPED_TRACE(std::string("bf16 arguments for fp32 step ") + info.name);
    const A a = good();
    COURSE_SKIP_IF_NOT_IMPLEMENTED(
        EXPECT_TRUE(course::fuzz::rejects([&] { impl::attention(info.step, a); }, "'step'")));
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzAttentionBf16BadInputs, ::testing::ValuesIn(bf16_steps()),
                         step_name<AttentionStep>);

// ======================================= the generator itself (CPU only) =====
// Every drawn case must pass validate_attention_args (addresses only, never dereferenced)
// with the strides the checking helper builds, and every feature the step supports occurs.

TEST(FuzzGenerators, AttentionCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  for (const auto& info : fp32_steps()) {
    const auto sup = course::m03::step_support(info.step);
    course::fuzz::Coverage cov(std::string("attention/") + info.name);
    for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
      Rng rng(course::fuzz::case_seed(seed, i));
      const Case c = draw_attention(rng, info.step, i >= kCasesPerStep);
      // The strides the checking helper gives the kernel (make_tensor, as in run_device).
      using course::m03::checks::make_tensor;
      using course::m03::checks::strides_of;
      AttentionArgs a;
      a.q = fake_address<float>(1);
      a.k = fake_address<float>(2);
      a.v = fake_address<float>(3);
      a.o = fake_address<float>(4);
      a.lse = sup.lse && !c.no_lse ? fake_address<float>(5) : nullptr;
      a.batch = c.B, a.heads = c.H, a.kv_heads = c.H_kv, a.seq_q = c.N_q, a.seq_k = c.N_k, a.head_dim = c.d;
      a.q_strides = strides_of(make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad));
      a.k_strides = strides_of(make_tensor(c.B, c.H_kv, c.N_k, c.d, c.layout, c.pad, c.kv_batch_broadcast));
      a.v_strides = a.k_strides;
      a.o_strides = strides_of(make_tensor(c.B, c.H, c.N_q, c.d, c.o_layout, c.o_pad));
      a.scale = c.scale;
      a.causal = c.causal;
      a.rope = c.rope;
      a.alibi = c.alibi;
      a.workspace = fake_address<float>(6);
      a.workspace_bytes = course::m03::attention_workspace_bytes(info.step, a);
      EXPECT_NO_THROW(course::m03::validate_attention_args(a, info.step, "fuzz")) << c.str();
      EXPECT_TRUE(course::m03::checks::supports(info.step, c)) << c.str();
      cov.next_case();
      cov.count("N=1", c.N_q == 1 || c.N_k == 1);
      cov.count("prime N_k", course::fuzz::is_prime(c.N_k));
      cov.count("N_k=k*tile+-1", c.N_k % 32 != 0 && course::fuzz::near_tile(c.N_k, {32, 64, 128}));
      cov.count("N_q>N_k", c.N_q > c.N_k);
      cov.count("N_q<N_k", c.N_q < c.N_k);
      cov.count("B*H>=400", c.B * c.H >= 400);
      cov.count("d=16", c.d == 16);
      cov.count("d=max", c.d == sup.max_head_dim);
      cov.count("BNHD", c.layout == BNHD);
      cov.count("O layout differs", c.o_layout != c.layout);
      cov.count("padded rows", c.pad > 0);
      cov.count("padded O", c.o_pad > 0);
      cov.count("kv batch broadcast", c.kv_batch_broadcast);
      cov.count("|q|>=10", c.input_range >= 10);
      cov.count("one-signed V", c.v_lo >= 0 || c.v_hi <= 0);
      cov.count("explicit scale", c.scale != 0.f);
      if (sup.causal) cov.count("causal", c.causal);
      if (sup.causal) cov.count("causal, N_q>N_k", c.causal && c.N_q > c.N_k);
      if (sup.lse) cov.count("no lse", c.no_lse);
      if (sup.options) {
        cov.count("grouped-query", c.H_kv < c.H && c.H_kv > 1);
        cov.count("multi-query", c.H_kv == 1 && c.H > 1);
        cov.count("rope", c.rope);
        cov.count("alibi", c.alibi);
        cov.count("rope+alibi+causal", c.rope && c.alibi && c.causal);
      }
    }
    std::cout << cov.str() << "\n";
    EXPECT_TRUE(cov.all_hit());
  }
}

TEST(FuzzGenerators, AttentionTcCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  using course::m03::tc_checks::make_tensor;
  using course::m03::tc_checks::strides_of;
  for (const auto& info : bf16_steps()) {
    course::fuzz::Coverage cov(std::string("attention_bf16/") + info.name);
    for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
      Rng rng(course::fuzz::case_seed(seed, i));
      const TcCase c = draw_attention_tc(rng, info.step, i >= kCasesPerStep);
      course::m03::AttentionArgsBf16 a;  // the strides run_device gives the kernel
      a.q = fake_address<__nv_bfloat16>(1);
      a.k = fake_address<__nv_bfloat16>(2);
      a.v = fake_address<__nv_bfloat16>(3);
      a.o = fake_address<__nv_bfloat16>(4);
      a.lse = c.lse ? fake_address<float>(5) : nullptr;
      a.batch = c.B, a.heads = c.H, a.kv_heads = c.H_kv, a.seq_q = c.N_q, a.seq_k = c.N_k, a.head_dim = c.d;
      a.q_strides = strides_of(make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad));
      a.k_strides = a.v_strides =
          strides_of(make_tensor(c.B, c.H_kv, c.N_k, c.d, c.layout, c.pad, c.kv_batch_broadcast));
      a.o_strides = strides_of(make_tensor(c.B, c.H, c.N_q, c.d, c.o_layout, c.o_pad));
      a.scale = c.scale;
      a.causal = c.causal;
      EXPECT_NO_THROW(course::m03::validate_attention_args(a, info.step, "fuzz")) << c.str();
      cov.next_case();
      cov.count("N=1", c.N_q == 1 || c.N_k == 1);
      cov.count("prime N_k", course::fuzz::is_prime(c.N_k));
      cov.count("N_k=k*tile+-1", c.N_k % 16 != 0 && course::fuzz::near_tile(c.N_k, {16, 32, 64, 128}));
      cov.count("N_q>N_k", c.N_q > c.N_k);
      cov.count("N_q<N_k", c.N_q < c.N_k);
      cov.count("B*H>=400", c.B * c.H >= 400);
      // Every head dim the step takes, the odd ones (32, 96) named where it takes them; the
      // Hopper steps take 64 and 128 only (step_takes_head_dim), so those two are theirs.
      for (const int d : {32, 64, 96, 128})
        if (course::m03::step_takes_head_dim(info.step, d) &&
            (d == 32 || d == 96 || !course::m03::step_takes_head_dim(info.step, 32)))
          cov.count("d=" + std::to_string(d), c.d == d);
      cov.count("BNHD", c.layout == BNHD);
      cov.count("O layout differs", c.o_layout != c.layout);
      cov.count("padded rows", c.pad > 0);
      cov.count("padded O", c.o_pad > 0);
      cov.count("kv batch broadcast", c.kv_batch_broadcast);
      cov.count("grouped-query", c.H_kv < c.H && c.H_kv > 1);
      cov.count("multi-query", c.H_kv == 1 && c.H > 1);
      cov.count("causal", c.causal);
      cov.count("causal, N_q>N_k", c.causal && c.N_q > c.N_k);
      cov.count("no lse", !c.lse);
      cov.count("|q|>=10", c.input_range >= 10);
      cov.count("one-signed V", c.v_lo >= 0 || c.v_hi <= 0);
      cov.count("explicit scale", c.scale != 0.f);
    }
    std::cout << cov.str() << "\n";
    EXPECT_TRUE(cov.all_hit());
  }
}

}  // namespace
