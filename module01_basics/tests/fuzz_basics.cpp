// Random-case hardening of module 1 (label fuzz), run against course::solution and
// course::exercise like the module's tests. For every step of l2_norm, dot, softmax (both
// dims), matmul (fp32) and matmul_tc (bf16): 512 random cases drawn from the step's whole
// contract, in 4 parts that ctest runs in parallel, plus a few large cases (tests named
// *Large*), each checked by the module's own checking helper (tests/*_check.hpp) against
// the CPU reference. Then, per op, a bad-input sweep: every bad argument is rejected by
// name and leaves a healthy CUDA context. Seeds, replay and the "[fuzz]" lines: course/fuzz.hpp.
#include "course/fuzz.hpp"
#include "course/random.hpp"
#include "course/testing.hpp"
#include "matmul_check.hpp"
#include "matmul_tc_check.hpp"
#include "module01/matmul.hpp"
#include "module01/matmul_tc.hpp"
#include "module01/reductions.hpp"
#include "module01/softmax.hpp"
#include "reductions_check.hpp"
#include "softmax_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::StepInfo;
using course::fuzz::draw_row_stride;
using course::fuzz::fake_address;
using course::fuzz::kCasesPerStep;
using course::fuzz::kLargeCases;
using course::fuzz::make_part;
using course::fuzz::Part;
using course::fuzz::Rng;
using course::fuzz::round_up;
using course::fuzz::step_name;
using course::fuzz::step_part_name;
using course::fuzz::test_name;
using course::fuzz::ValueRange;
using course::fuzz::Verdict;
using course::m01::MatmulArgs;
using course::m01::MatmulStep;
using course::m01::ReduceArgs;
using course::m01::ReduceStep;
using course::m01::SoftmaxArgs;
using course::m01::SoftmaxStep;
using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using course::m01::checks::Op;
using course::testing::GpuTest;

bool one_signed(const ValueRange& r) { return r.lo >= 0.0 || r.hi <= 0.0; }

// =============================================================== reductions =====

struct ReduceCase {
  Op op = Op::l2_norm;
  std::int64_t n = 1;
  ValueRange x, y;
  std::string str() const {
    std::ostringstream os;
    os << to_string(op) << " n=" << n << " x in " << x.str();
    if (op == Op::dot) os << " y in " << y.str();
    return os.str();
  }
};

/// Lengths up to 2^21 around every granule the steps use (a float4, a warp, a block, the
/// vectorized step's 4096-element block iteration), 0 now and then; large: 2^22 .. 2^25.
ReduceCase draw_reduce(Rng& rng, Op op, ReduceStep step, bool large) {
  ReduceCase c;
  c.op = op;
  c.x = course::fuzz::draw_values(rng, 1e4);
  c.y = course::fuzz::draw_values(rng, 1e4);
  c.n = large ? rng.log_uniform(std::int64_t{1} << 22, std::int64_t{1} << 25)
              : (rng.chance(0.01) ? 0 : rng.size(1, std::int64_t{1} << 21, {4, 32, 256, 1024, 4096}));
  // atomic_naive adds every term into ONE fp32 accumulator: once the running sum's ulp
  // exceeds a term, additions round away. With terms of one sign (any norm; a dot of
  // one-signed x and y) that is the lesson's documented limit, not a bug, so those sums
  // stay below 2^20 terms (as in the module's tests).
  const bool terms_one_signed = op == Op::l2_norm || (one_signed(c.x) && one_signed(c.y));
  if (step == ReduceStep::atomic_naive && terms_one_signed) c.n = std::min<std::int64_t>(c.n, 1 << 20);
  return c;
}

Verdict check_reduce(ReduceStep step, const ReduceCase& c, std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(c.n);
  const auto hx = course::random_vector(n, seed, static_cast<float>(c.x.lo), static_cast<float>(c.x.hi));
  const auto hy = c.op == Op::dot
                      ? course::random_vector(n, seed + 1, static_cast<float>(c.y.lo), static_cast<float>(c.y.hi))
                      : std::vector<float>{};
  // The norm's terms are all positive (no cancellation): relative budget only. The dot's
  // random signs cancel: its budget follows the size of its partial sums.
  const double term_scale = c.op == Op::dot ? course::m01::checks::dot_term_scale(hx, hy) : 0.0;
  const course::m01::checks::ReduceFn fn = c.op == Op::dot ? &impl::dot : &impl::l2_norm;
  Verdict v;
  v.add(course::m01::checks::check_reduction(fn, c.op, step, hx, hy, term_scale), "result");
  return v;
}

using ReduceParam = std::tuple<StepInfo<ReduceStep>, Op, int>;

class FuzzReduce : public GpuTest, public ::testing::WithParamInterface<ReduceParam> {
 protected:
  void run(bool large) {
    const auto& [info, op, part_index] = GetParam();
    const ReduceStep step = info.step;
    const Op o = op;
    const Part part = make_part(to_string(op), info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_reduce(rng, o, step, large); },
        [&](const ReduceCase& c, std::uint64_t s) { return check_reduce(step, c, s); })));
  }
};

class FuzzReduceLarge : public FuzzReduce {};

TEST_P(FuzzReduce, RandomCases) { run(false); }
TEST_P(FuzzReduceLarge, RandomCases) {
  const auto& [info, op, part_index] = GetParam();
  if (info.step == ReduceStep::atomic_naive && op == Op::l2_norm)
    GTEST_SKIP() << "atomic_naive's single fp32 accumulator stagnates on a norm of 2^22+ terms (the lesson's limit)";
  (void)part_index;
  run(true);
}

std::string reduce_param_name(const ::testing::TestParamInfo<ReduceParam>& info) {
  const auto& [step, op, part] = info.param;
  return test_name(step.name, to_string(op), part);  // "warp_shuffle_dot_part0"
}

COURSE_FUZZ_INSTANTIATE(FuzzReduce, FuzzReduceLarge, reduce_param_name, ::testing::ValuesIn(course::m01::kReduceSteps),
                        ::testing::Values(Op::l2_norm, Op::dot));

// ------------------------------------------------------ reductions: bad inputs -----

/// Device buffers for n = 64 (x, y, result, workspace), broken one argument at a time.
struct ReduceBuffers {
  DeviceBuffer<float> x{64}, y{64}, result{1}, workspace{course::m01::kMaxReduceBlocks};
  ReduceArgs args(bool with_y) {
    ReduceArgs a;
    a.x = x.data();
    a.y = with_y ? y.data() : nullptr;
    a.n = 64;
    a.result = result.data();
    a.workspace = workspace.data();
    a.workspace_bytes = workspace.bytes();
    return a;
  }
};

class FuzzReduceBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<ReduceStep>> {};

TEST_P(FuzzReduceBadInputs, RejectedByNameContextHealthy) {
  const ReduceStep step = GetParam().step;
  ReduceBuffers b;
  struct Bad {
    const char* what;
    bool dot;
    void (*mutate)(ReduceArgs&, ReduceBuffers&);
    const char* needle;
  };
  const Bad bad[] = {
      {"negative n", false, [](ReduceArgs& a, ReduceBuffers&) { a.n = -1; }, "'n' = -1"},
      {"negative n (dot)", true, [](ReduceArgs& a, ReduceBuffers&) { a.n = -5; }, "'n' = -5"},
      {"null result", false, [](ReduceArgs& a, ReduceBuffers&) { a.result = nullptr; }, "'result' = nullptr"},
      {"null x", false, [](ReduceArgs& a, ReduceBuffers&) { a.x = nullptr; }, "'x' = nullptr"},
      {"null y (dot)", true, [](ReduceArgs& a, ReduceBuffers&) { a.y = nullptr; }, "'y' = nullptr"},
      {"x misaligned by one element", false,
       [](ReduceArgs& a, ReduceBuffers& h) {
         a.x = h.x.data() + 1;
         a.n = 63;
       },
       "'x'"},
      {"y misaligned by one element (dot)", true,
       [](ReduceArgs& a, ReduceBuffers& h) {
         a.y = h.y.data() + 1;
         a.n = 63;
       },
       "'y'"},
      {"y given to l2_norm", false, [](ReduceArgs& a, ReduceBuffers& h) { a.y = h.y.data(); }, "'y'"},
      {"workspace too small", false, [](ReduceArgs& a, ReduceBuffers&) { a.workspace_bytes -= sizeof(float); },
       "'workspace_bytes'"},
      {"null workspace (dot)", true, [](ReduceArgs& a, ReduceBuffers&) { a.workspace = nullptr; }, "'workspace'"},
      {"result inside x", false, [](ReduceArgs& a, ReduceBuffers& h) { a.result = h.x.data() + 10; }, "'result'"},
      {"result inside x (dot)", true, [](ReduceArgs& a, ReduceBuffers& h) { a.result = h.x.data() + 63; }, "'result'"},
      {"result inside y (dot)", true, [](ReduceArgs& a, ReduceBuffers& h) { a.result = h.y.data(); }, "'result'"},
      {"result inside the workspace", false, [](ReduceArgs& a, ReduceBuffers& h) { a.result = h.workspace.data() + 3; },
       "'workspace'"},
      {"workspace overlapping x", false, [](ReduceArgs& a, ReduceBuffers& h) { a.workspace = h.x.data(); },
       "'workspace'"},
  };
  for (const Bad& c : bad) {
    SCOPED_TRACE(c.what);
    ReduceArgs a = b.args(c.dot);
    c.mutate(a, b);
    const auto call = [&] { c.dot ? impl::dot(step, a) : impl::l2_norm(step, a); };
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects(call, c.needle)));
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzReduceBadInputs, ::testing::ValuesIn(course::m01::kReduceSteps),
                         step_name<ReduceStep>);

// ================================================================== softmax =====

using SoftmaxCase = course::m01::checks::Case;

/// Slice lengths around every size the steps dispatch on (a float4, a warp, warp_per_row's
/// 1024 columns, online_vectorized's 32768 on-chip limit, cluster_columns' 256 rows held in
/// registers, 1024 rows per block and 16384-row limit for dim = 0), up to 70000; the other extent
/// keeps the matrix under ~2^18 elements. Large: up to 2^24 elements, long and short slices.
SoftmaxCase draw_softmax(Rng& rng, int dim, bool large) {
  SoftmaxCase c;
  c.dim = dim;
  std::int64_t length, slices;
  if (large) {
    switch (rng.uniform(0, 2)) {
      case 0:
        length = rng.uniform(2000, 8192), slices = rng.uniform(1000, 2048);
        break;  // many medium slices
      case 1:
        length = rng.size(32769, 1 << 20), slices = rng.uniform(1, 7);
        break;  // streaming slices
      default:
        length = rng.uniform(1, 64), slices = rng.uniform(100000, 250000);
        break;  // many short slices
    }
  } else {
    length = rng.size(1, 70000, {4, 32, 256, 512, 1024, 4096, 16384, 32768});
    slices = rng.size(1, std::max<std::int64_t>(1, (std::int64_t{1} << 18) / length), {4, 8, 32, 256});
  }
  c.rows = dim == 1 ? slices : length;
  c.cols = dim == 1 ? length : slices;
  if (rng.chance(0.25)) {  // online_vectorized's float4 path: aligned bases, row strides multiples of 4
    c.ldx = round_up(c.cols, 4) + 4 * rng.uniform(0, 2);
    c.ldy = round_up(c.cols, 4) + 4 * rng.uniform(0, 2);
  } else {
    c.ldx = draw_row_stride(rng, c.cols);
    c.ldy = draw_row_stride(rng, c.cols);
    c.offset = rng.chance(0.4) ? rng.uniform(1, 3) : 0;
  }
  c.in_place = rng.chance(0.15);
  if (c.in_place) c.ldy = c.ldx;
  const ValueRange v = course::fuzz::draw_values(rng, 1e4);
  c.lo = v.lo;
  c.hi = v.hi;
  c.masked = rng.chance(0.15) ? rng.real(0.05, 0.95) : 0.0;
  return c;
}

Verdict check_softmax(SoftmaxStep step, const SoftmaxCase& c, std::uint64_t seed) {
  const auto o =
      course::m01::checks::run_case([](SoftmaxStep s, const SoftmaxArgs& a) { impl::softmax(s, a); }, step, c, seed);
  Verdict v;
  v.add(o.cmp, "y");
  if (o.padding_writes) v.fail(std::to_string(o.padding_writes) + " writes into the row padding of y");
  // The sum of a slice joins the worst ratio, so the [fuzz] summary shows how close the
  // long reductions come to their bound too.
  v.ratio = std::max(v.ratio, o.worst_sum_error / 1e-4);
  if (!(o.worst_sum_error <= 1e-4))
    v.fail("a slice sums to 1 +- " + std::to_string(o.worst_sum_error) + " (allowed 1e-4)");
  return v;
}

using SoftmaxParam = std::tuple<StepInfo<SoftmaxStep>, int, int>;  // step, dim, part

class FuzzSoftmax : public GpuTest, public ::testing::WithParamInterface<SoftmaxParam> {
 protected:
  void run(bool large) {
    const auto& [info, dim, part_index] = GetParam();
    const SoftmaxStep step = info.step;
    const int d = dim;
    const Part part =
        make_part("softmax", std::string(info.name) + "/dim" + std::to_string(dim), part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_softmax(rng, d, large); },
        [&](const SoftmaxCase& c, std::uint64_t s) { return check_softmax(step, c, s); })));
  }
};

class FuzzSoftmaxLarge : public FuzzSoftmax {};

TEST_P(FuzzSoftmax, RandomCases) { run(false); }
TEST_P(FuzzSoftmaxLarge, RandomCases) { run(true); }

std::string softmax_param_name(const ::testing::TestParamInfo<SoftmaxParam>& info) {
  const auto& [step, dim, part] = info.param;
  return test_name(step.name, "dim" + std::to_string(dim), part);  // "naive_three_pass_dim0_part0"
}

COURSE_FUZZ_INSTANTIATE(FuzzSoftmax, FuzzSoftmaxLarge, softmax_param_name,
                        ::testing::ValuesIn(course::m01::kSoftmaxSteps), ::testing::Values(1, 0));

// --------------------------------------------------------- softmax: bad inputs -----

class FuzzSoftmaxBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<SoftmaxStep>> {};

TEST_P(FuzzSoftmaxBadInputs, RejectedByNameContextHealthy) {
  const SoftmaxStep step = GetParam().step;
  constexpr std::int64_t kRows = 16, kCols = 64;
  DeviceBuffer<float> x(kRows * kCols), y(kRows * kCols), ws(4 * kRows * kCols);
  const auto good = [&] {
    SoftmaxArgs a = course::m01::contiguous_softmax_args(x.data(), y.data(), kRows, kCols, 1);
    a.workspace = ws.data();
    a.workspace_bytes = ws.bytes();
    return a;
  };
  struct Bad {
    const char* what;
    std::function<void(SoftmaxArgs&)> mutate;
    const char* needle;
    bool naive_only = false;
  };
  const float* x_half = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x.data()) + 2);
  const std::vector<Bad> bad = {
      {"negative rows", [](SoftmaxArgs& a) { a.rows = -1; }, "'rows' = -1"},
      {"negative cols", [](SoftmaxArgs& a) { a.cols = -3; }, "'cols' = -3"},
      {"rows beyond 2^31 - 1", [](SoftmaxArgs& a) { a.rows = std::int64_t{1} << 31; }, "'rows'"},
      {"cols beyond 2^31 - 1", [](SoftmaxArgs& a) { a.cols = a.ldx = a.ldy = std::int64_t{1} << 31; }, "'cols'"},
      {"dim 2", [](SoftmaxArgs& a) { a.dim = 2; }, "'dim' = 2"},
      {"dim -1", [](SoftmaxArgs& a) { a.dim = -1; }, "'dim' = -1"},
      {"ldx < cols", [](SoftmaxArgs& a) { a.ldx = a.cols - 1; }, "'ldx'"},
      {"ldy < cols", [](SoftmaxArgs& a) { a.ldy = 0; }, "'ldy'"},
      {"null x", [](SoftmaxArgs& a) { a.x = nullptr; }, "'x' = nullptr"},
      {"null y", [](SoftmaxArgs& a) { a.y = nullptr; }, "'y' = nullptr"},
      {"x misaligned by half an element", [&](SoftmaxArgs& a) { a.x = x_half; }, "'x'"},
      {"y overlapping x (not in place)", [&](SoftmaxArgs& a) { a.y = x.data() + 100; }, "'y'"},
      {"y == x with another row stride",
       [&](SoftmaxArgs& a) {
         a.y = x.data();
         a.rows = 8;
         a.ldy = a.ldx + 4;
       },
       "'y'"},
      {"workspace too small", [](SoftmaxArgs& a) { a.workspace_bytes = 2 * sizeof(float); }, "'workspace_bytes'", true},
      {"null workspace", [](SoftmaxArgs& a) { a.workspace = nullptr; }, "'workspace' = nullptr", true},
      {"workspace overlapping x", [&](SoftmaxArgs& a) { a.workspace = x.data(); }, "'workspace'", true},
      {"workspace overlapping y", [&](SoftmaxArgs& a) { a.workspace = y.data() + 8; }, "'workspace'", true},
  };
  for (const Bad& c : bad) {
    if (c.naive_only && step != SoftmaxStep::naive_three_pass) continue;
    for (const int dim : {1, 0}) {
      SCOPED_TRACE(std::string(c.what) + ", dim " + std::to_string(dim));
      SoftmaxArgs a = good();
      a.dim = dim;
      c.mutate(a);
      COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::softmax(step, a); }, c.needle)));
    }
  }
  SoftmaxArgs a = good();
  COURSE_SKIP_IF_NOT_IMPLEMENTED(
      EXPECT_TRUE(course::fuzz::rejects([&] { impl::softmax(static_cast<SoftmaxStep>(99), a); }, "'step' = 99")));
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzSoftmaxBadInputs, ::testing::ValuesIn(course::m01::kSoftmaxSteps),
                         step_name<SoftmaxStep>);

// =================================================================== matmul =====

using MatmulProblem = course::m01::checks::Problem;

/// M, N, K up to ~400 around the ladder's tiles (8, 32, 64, 128), 1 and primes; every
/// leading dimension packed, odd-padded or float4-padded on its own; base pointers off
/// 16-byte alignment; alpha and beta (beta = 0: C never read). Large: 512 .. 1024.
MatmulProblem draw_matmul(Rng& rng, bool large) {
  const auto dim = [&] { return large ? rng.uniform(512, 1024) : rng.size(1, 300, {8, 32, 64, 128}); };
  MatmulProblem p{dim(), dim(), dim()};
  if (rng.chance(0.35)) {
    // The vectorized steps' float4 path: aligned bases, every row stride a multiple of 4.
    p.lda = round_up(p.k, 4) + 4 * rng.uniform(0, 2);
    p.ldb = round_up(p.n, 4) + 4 * rng.uniform(0, 2);
    p.ldc = round_up(p.n, 4) + 4 * rng.uniform(0, 2);
  } else {
    p.lda = rng.chance(0.5) ? 0 : draw_row_stride(rng, p.k);
    p.ldb = rng.chance(0.5) ? 0 : draw_row_stride(rng, p.n);
    p.ldc = rng.chance(0.5) ? 0 : draw_row_stride(rng, p.n);
    p.offset = rng.chance(0.3) ? rng.uniform(1, 3) : 0;
  }
  p.alpha = rng.chance(0.6) ? 1.0f : rng.pick({-1.0f, 0.5f, 2.0f, -0.75f, 0.0f, 1.5f});
  p.beta = rng.chance(0.5) ? 0.0f : rng.pick({1.0f, -0.5f, 0.25f, 2.0f});
  const ValueRange v = course::fuzz::draw_values(rng, 1e3);
  p.lo = v.lo;
  p.hi = v.hi;
  return p;
}

using MatmulParam = std::tuple<StepInfo<MatmulStep>, int>;

class FuzzMatmul : public GpuTest, public ::testing::WithParamInterface<MatmulParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const MatmulStep step = info.step;
    const Part part = make_part("matmul", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_matmul(rng, large); },
        [&](const MatmulProblem& p, std::uint64_t s) {
          Verdict v;
          v.add(course::m01::checks::check_matmul([](MatmulStep st, const MatmulArgs& a) { impl::matmul(st, a); }, step,
                                                  p, s),
                "C");
          return v;
        })));
  }
};

class FuzzMatmulLarge : public FuzzMatmul {};

TEST_P(FuzzMatmul, RandomCases) { run(false); }
TEST_P(FuzzMatmulLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzMatmul, FuzzMatmulLarge, step_part_name<MatmulStep>,
                        ::testing::ValuesIn(course::m01::kMatmulSteps));

// ---------------------------------------------------------- matmul: bad inputs -----

class FuzzMatmulBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<MatmulStep>> {};

TEST_P(FuzzMatmulBadInputs, RejectedByNameContextHealthy) {
  const MatmulStep step = GetParam().step;
  DeviceBuffer<float> a(64 * 64), b(64 * 64), c(64 * 64);
  const auto good = [&] { return course::m01::packed_matmul_args(a.data(), b.data(), c.data(), 32, 32, 32); };
  const float* a_half = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.data()) + 2);
  const std::int64_t too_big = std::int64_t{std::numeric_limits<int>::max()} + 1;
  struct Bad {
    const char* what;
    std::function<void(MatmulArgs&)> mutate;
    const char* needle;
  };
  const std::vector<Bad> bad = {
      {"m = 0", [](MatmulArgs& x) { x.m = 0; }, "'m' = 0"},
      {"negative n",
       [](MatmulArgs& x) {
         x.n = -1;
         x.ldb = x.ldc = 32;
       },
       "'n' = -1"},
      {"k = 0", [](MatmulArgs& x) { x.k = 0; }, "'k' = 0"},
      {"m beyond int", [&](MatmulArgs& x) { x.m = too_big; }, "'m'"},
      {"k beyond int", [&](MatmulArgs& x) { x.k = x.lda = too_big; }, "'k'"},
      {"null a", [](MatmulArgs& x) { x.a = nullptr; }, "'a' = nullptr"},
      {"null b", [](MatmulArgs& x) { x.b = nullptr; }, "'b' = nullptr"},
      {"null c", [](MatmulArgs& x) { x.c = nullptr; }, "'c' = nullptr"},
      {"lda < k", [](MatmulArgs& x) { x.lda = 31; }, "'lda' = 31"},
      {"ldb < n", [](MatmulArgs& x) { x.ldb = 16; }, "'ldb' = 16"},
      {"ldc < n", [](MatmulArgs& x) { x.ldc = 0; }, "'ldc' = 0"},
      {"a misaligned by half an element", [&](MatmulArgs& x) { x.a = a_half; }, "'a'"},
      {"c overlapping a", [&](MatmulArgs& x) { x.c = a.data() + 1000; }, "'c'"},
      {"c overlapping b", [&](MatmulArgs& x) { x.c = b.data(); }, "'c'"},
  };
  for (const Bad& x : bad) {
    SCOPED_TRACE(x.what);
    MatmulArgs args = good();
    x.mutate(args);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::matmul(step, args); }, x.needle)));
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzMatmulBadInputs, ::testing::ValuesIn(course::m01::kMatmulSteps),
                         step_name<MatmulStep>);

// ================================================================ matmul_tc =====

using TcShape = course::m01::checks::tc::Shape3;

/// M, N, K up to ~400 around the tensor-core tiles (16, 32, 64, 128), 1 and primes; lda
/// and ldb the smallest multiple of 8 or padded further; ldc packed or odd. Large: 512 .. 2048.
TcShape draw_tc(Rng& rng, bool large) {
  const auto dim = [&] { return large ? rng.uniform(512, 2048) : rng.size(1, 400, {16, 32, 64, 128}); };
  TcShape s{dim(), dim(), dim()};
  s.lda = rng.chance(0.6) ? 0 : course::m01::tc_leading_dim(s.k) + 8 * rng.uniform(1, 3);
  s.ldb = rng.chance(0.6) ? 0 : course::m01::tc_leading_dim(s.n) + 8 * rng.uniform(1, 3);
  s.ldc = rng.chance(0.6) ? 0 : s.n + rng.uniform(1, 9);
  const ValueRange v = course::fuzz::draw_values(rng, 1e3);
  s.lo = v.lo;
  s.hi = v.hi;
  return s;
}

using TcParam = std::tuple<StepInfo<TcMatmulStep>, int>;

class FuzzMatmulTc : public GpuTest, public ::testing::WithParamInterface<TcParam> {
 protected:
  void run(bool large) {
    const auto& [info, part_index] = GetParam();
    const TcMatmulStep step = info.step;
    const Part part = make_part("matmul_tc", info.name, part_index, large, seed());
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::run_cases(
        part, [&](Rng& rng) { return draw_tc(rng, large); },
        [&](const TcShape& s, std::uint64_t sd) {
          const auto r = course::m01::checks::tc::run_and_check(
              s, sd, [step](const TcMatmulArgs& a) { impl::matmul_tc(step, a); });
          Verdict v;
          v.add(r.cmp, "C");
          if (r.non_finite) v.fail(std::to_string(r.non_finite) + " non-finite elements in C");
          return v;
        })));
  }
};

class FuzzMatmulTcLarge : public FuzzMatmulTc {};

TEST_P(FuzzMatmulTc, RandomCases) { run(false); }
TEST_P(FuzzMatmulTcLarge, RandomCases) { run(true); }

COURSE_FUZZ_INSTANTIATE(FuzzMatmulTc, FuzzMatmulTcLarge, step_part_name<TcMatmulStep>,
                        ::testing::ValuesIn(course::m01::kTcMatmulSteps));

// ------------------------------------------------------- matmul_tc: bad inputs -----

class FuzzMatmulTcBadInputs : public GpuTest, public ::testing::WithParamInterface<StepInfo<TcMatmulStep>> {};

TEST_P(FuzzMatmulTcBadInputs, RejectedByNameContextHealthy) {
  using bf16 = __nv_bfloat16;
  const TcMatmulStep step = GetParam().step;
  DeviceBuffer<bf16> a(64 * 64), b(64 * 64);
  DeviceBuffer<float> c(64 * 64);
  const auto good = [&] {
    TcMatmulArgs x;
    x.a = a.data();
    x.b = b.data();
    x.c = c.data();
    x.m = x.n = x.k = 32;
    x.lda = x.ldb = x.ldc = 32;
    return x;
  };
  struct Bad {
    const char* what;
    std::function<void(TcMatmulArgs&)> mutate;
    const char* needle;
  };
  const std::vector<Bad> bad = {
      {"m = 0", [](TcMatmulArgs& x) { x.m = 0; }, "'m' = 0"},
      {"negative n", [](TcMatmulArgs& x) { x.n = -2; }, "'n' = -2"},
      {"k = 0", [](TcMatmulArgs& x) { x.k = 0; }, "'k' = 0"},
      {"null a", [](TcMatmulArgs& x) { x.a = nullptr; }, "'a' = nullptr"},
      {"null b", [](TcMatmulArgs& x) { x.b = nullptr; }, "'b' = nullptr"},
      {"null c", [](TcMatmulArgs& x) { x.c = nullptr; }, "'c' = nullptr"},
      {"lda < k", [](TcMatmulArgs& x) { x.lda = 24; }, "'lda' = 24"},
      {"lda not a multiple of 8", [](TcMatmulArgs& x) { x.lda = 33; }, "'lda' = 33"},
      {"ldb not a multiple of 8", [](TcMatmulArgs& x) { x.ldb = 36; }, "'ldb' = 36"},
      {"ldc < n", [](TcMatmulArgs& x) { x.ldc = 31; }, "'ldc' = 31"},
      {"a misaligned by one element", [&](TcMatmulArgs& x) { x.a = a.data() + 1; }, "'a'"},
      {"b misaligned by one element", [&](TcMatmulArgs& x) { x.b = b.data() + 1; }, "'b'"},
      {"c overlapping a", [&](TcMatmulArgs& x) { x.c = reinterpret_cast<float*>(a.data() + 64); }, "'c'"},
      {"c overlapping b", [&](TcMatmulArgs& x) { x.c = reinterpret_cast<float*>(b.data()); }, "'c'"},
  };
  for (const Bad& x : bad) {
    SCOPED_TRACE(x.what);
    TcMatmulArgs args = good();
    x.mutate(args);
    COURSE_SKIP_IF_NOT_IMPLEMENTED(EXPECT_TRUE(course::fuzz::rejects([&] { impl::matmul_tc(step, args); }, x.needle)));
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, FuzzMatmulTcBadInputs, ::testing::ValuesIn(course::m01::kTcMatmulSteps),
                         step_name<TcMatmulStep>);

// ======================================= the generators themselves (CPU only) =====
// Every case a generator draws must pass the op's own validation (a generator that drifts
// outside the contract would test nothing), and every feature of the contract must occur.
// This runs without a GPU: validation only looks at addresses, never dereferences them.

TEST(FuzzGenerators, ReduceCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  for (const auto& info : course::m01::kReduceSteps)
    for (const Op op : {Op::l2_norm, Op::dot}) {
      course::fuzz::Coverage cov(std::string(to_string(op)) + "/" + info.name);
      for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
        Rng rng(course::fuzz::case_seed(seed, i));
        const ReduceCase c = draw_reduce(rng, op, info.step, i >= kCasesPerStep);
        ReduceArgs a;
        a.x = fake_address<float>(1);
        a.y = op == Op::dot ? fake_address<float>(2) : nullptr;
        a.n = c.n;
        a.result = fake_address<float>(3);
        a.workspace = fake_address<float>(4);
        a.workspace_bytes = course::m01::reduce_workspace_bytes(c.n);
        EXPECT_NO_THROW(course::m01::validate_reduce_args(a, "fuzz", op == Op::dot)) << c.str();
        cov.next_case();
        cov.count("n=0", c.n == 0);
        cov.count("n=1", c.n == 1);
        cov.count("n%4!=0", c.n % 4 != 0);
        cov.count("prime n", course::fuzz::is_prime(c.n));
        cov.count("n=k*tile+-1", c.n > 1 && course::fuzz::near_tile(c.n, {32, 256, 1024, 4096}) && c.n % 32 != 0);
        cov.count("n>=2^20", c.n >= (1 << 20));
        cov.count("one-signed x", one_signed(c.x));
        cov.count("|x|>=100", c.x.magnitude() >= 100);
        cov.count("|x|<0.1", c.x.magnitude() < 0.1);
      }
      std::cout << cov.str() << "\n";
      EXPECT_TRUE(cov.all_hit());
    }
}

TEST(FuzzGenerators, SoftmaxCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  for (const auto& info : course::m01::kSoftmaxSteps)
    for (const int dim : {1, 0}) {
      course::fuzz::Coverage cov(std::string("softmax/") + info.name + "/dim" + std::to_string(dim));
      for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
        Rng rng(course::fuzz::case_seed(seed, i));
        const SoftmaxCase c = draw_softmax(rng, dim, i >= kCasesPerStep);
        SoftmaxArgs a;
        a.x = fake_address<float>(1, c.offset);
        a.y = c.in_place ? fake_address<float>(1, c.offset) : fake_address<float>(2, c.offset);
        a.rows = c.rows;
        a.cols = c.cols;
        a.ldx = c.row_stride_x();
        a.ldy = c.row_stride_y();
        a.dim = c.dim;
        a.workspace = fake_address<float>(3);
        a.workspace_bytes = course::m01::softmax_workspace_bytes(info.step, c.rows, c.cols, c.dim);
        EXPECT_NO_THROW(course::m01::validate_softmax_args(a, info.step, "fuzz")) << c.str();
        const std::int64_t length = dim == 1 ? c.cols : c.rows;
        cov.next_case();
        cov.count("length 1", length == 1);
        cov.count("one slice", (dim == 1 ? c.rows : c.cols) == 1);
        cov.count("prime length", course::fuzz::is_prime(length));
        cov.count("length=k*tile+-1",
                  length > 1 && length % 4 != 0 && course::fuzz::near_tile(length, {32, 1024, 32768}));
        cov.count("length>1024", length > 1024);
        cov.count("length>32768", length > 32768);
        cov.count("padded rows", c.row_stride_x() > c.cols || c.row_stride_y() > c.cols);
        cov.count("ld%4!=0", c.row_stride_x() % 4 != 0);
        cov.count("float4 path", c.offset == 0 && c.row_stride_x() % 4 == 0 && c.row_stride_y() % 4 == 0);
        cov.count("in place", c.in_place);
        cov.count("misaligned base", c.offset != 0);
        cov.count("masked", c.masked > 0);
        cov.count("one-signed", c.lo >= 0 || c.hi <= 0);
        cov.count("|x|>=1000", std::max(std::fabs(c.lo), std::fabs(c.hi)) >= 1000);
      }
      std::cout << cov.str() << "\n";
      EXPECT_TRUE(cov.all_hit());
    }
}

TEST(FuzzGenerators, MatmulCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  course::fuzz::Coverage cov("matmul");
  for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
    Rng rng(course::fuzz::case_seed(seed, i));
    const MatmulProblem p = draw_matmul(rng, i >= kCasesPerStep);
    MatmulArgs a = course::m01::packed_matmul_args(fake_address<float>(1, p.offset), fake_address<float>(2, p.offset),
                                                   fake_address<float>(3, p.offset), p.m, p.n, p.k);
    if (p.lda) a.lda = p.lda;
    if (p.ldb) a.ldb = p.ldb;
    if (p.ldc) a.ldc = p.ldc;
    EXPECT_NO_THROW(course::m01::validate_matmul_args(a, "fuzz")) << p.str();
    cov.next_case();
    cov.count("a dim = 1", p.m == 1 || p.n == 1 || p.k == 1);
    cov.count("a prime dim", course::fuzz::is_prime(p.m) || course::fuzz::is_prime(p.n) || course::fuzz::is_prime(p.k));
    cov.count("dim=k*tile+-1", course::fuzz::near_tile(p.m, {32, 64, 128}) && p.m % 32 != 0);
    cov.count("padded ld", a.lda > p.k || a.ldb > p.n || a.ldc > p.n);
    cov.count("float4 path", course::m01::matmul_float4_ok(a));
    cov.count("misaligned base", p.offset != 0);
    cov.count("alpha!=1", p.alpha != 1.0f);
    cov.count("beta!=0", p.beta != 0.0f);
    cov.count("one-signed", p.lo >= 0 || p.hi <= 0);
    cov.count("|x|>=100", std::max(std::fabs(p.lo), std::fabs(p.hi)) >= 100);
  }
  std::cout << cov.str() << "\n";
  EXPECT_TRUE(cov.all_hit());
}

TEST(FuzzGenerators, MatmulTcCasesAreValidAndCoverTheContract) {
  const std::uint64_t seed = course::testing::test_seed();
  course::fuzz::Coverage cov("matmul_tc");
  for (int i = 0; i < kCasesPerStep + kLargeCases; ++i) {
    Rng rng(course::fuzz::case_seed(seed, i));
    const TcShape s = draw_tc(rng, i >= kCasesPerStep);
    TcMatmulArgs a;
    a.a = fake_address<__nv_bfloat16>(1);
    a.b = fake_address<__nv_bfloat16>(2);
    a.c = fake_address<float>(3);
    a.m = s.m;
    a.n = s.n;
    a.k = s.k;
    a.lda = s.lda ? s.lda : course::m01::tc_leading_dim(s.k);
    a.ldb = s.ldb ? s.ldb : course::m01::tc_leading_dim(s.n);
    a.ldc = s.ldc ? s.ldc : s.n;
    EXPECT_NO_THROW(course::m01::validate_tc_matmul_args(a, "fuzz")) << s.str();
    cov.next_case();
    cov.count("a dim = 1", s.m == 1 || s.n == 1 || s.k == 1);
    cov.count("a prime dim", course::fuzz::is_prime(s.m) || course::fuzz::is_prime(s.n) || course::fuzz::is_prime(s.k));
    cov.count("k%8!=0", s.k % 8 != 0);
    cov.count("dim=k*tile+-1", course::fuzz::near_tile(s.n, {16, 64, 128}) && s.n % 16 != 0);
    cov.count("padded lda", a.lda > course::m01::tc_leading_dim(s.k));
    cov.count("ldc>n", a.ldc > s.n);
    cov.count("one-signed", s.lo >= 0 || s.hi <= 0);
    cov.count("|x|>=100", std::max(std::fabs(s.lo), std::fabs(s.hi)) >= 100);
  }
  std::cout << cov.str() << "\n";
  EXPECT_TRUE(cov.all_hit());
}

}  // namespace
