// Tests of matmul_tc's options -- operand layouts (a_transposed, b_transposed), bf16 output
// and the epilogue (bias, GELU with pre_gelu, residual, accumulate) -- the products of a
// linear layer Y = X W^T + b and its backward. Run against course::solution and
// course::exercise; every combination of layout, output and epilogue, on awkward shapes.
#include "course/bf16.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/testing.hpp"
#include "matmul_tc_options_check.hpp"
#include "module01/matmul_tc.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using course::m01::checks::tc_options::OptionCase;
using course::m01::checks::tc_options::Passes;
using course::m01::checks::tc_options::run_option_case;
using course::testing::GpuTest;
using bf16 = __nv_bfloat16;

/// The steps that take the options (matmul_tc.hpp): the others must refuse them by name.
bool takes_options(TcMatmulStep step) { return step != TcMatmulStep::wmma && step != TcMatmulStep::wgmma; }

class MatmulTcOptionsTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<TcMatmulStep>> {
 protected:
  course::m01::checks::tc::MatmulFn step_fn() const {
    const TcMatmulStep step = GetParam().step;
    return [step](const TcMatmulArgs& a) { impl::matmul_tc(step, a); };
  }
  /// Runs one case; a step without the options must throw Unsupported naming the option.
  void check(const OptionCase& oc, std::uint64_t salt) {
    SCOPED_TRACE(oc.str());
    if (!takes_options(GetParam().step) && oc.any()) {
      try {
        run_option_case(oc, seed() + salt, step_fn());
        ADD_FAILURE() << GetParam().name << " accepted an option it does not implement";
      } catch (const course::Unsupported& e) {
        EXPECT_NE(std::string(e.what()).find("TcMatmulArgs::"), std::string::npos) << e.what();
      }
      return;
    }
    course::m01::checks::tc_options::OptionCheck r;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(r = run_option_case(oc, seed() + salt, step_fn()));
    EXPECT_TRUE(Passes(r));
  }
};

std::string step_name(const ::testing::TestParamInfo<course::StepInfo<TcMatmulStep>>& info) {
  return info.param.name;
}

/// The four layouts x two outputs, plain epilogue, on shapes where every tile edge is partial.
TEST_P(MatmulTcOptionsTest, EveryLayoutAndOutput) {
  const std::vector<std::vector<std::int64_t>> shapes = {{1, 1, 1}, {127, 129, 65}, {129, 257, 33}, {64, 256, 32},
                                                         {200, 300, 1000}};
  std::uint64_t salt = 0;
  for (const auto& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (bool bf16_out : {false, true}) {
        OptionCase oc;
        oc.m = s[0], oc.n = s[1], oc.k = s[2];
        oc.a_transposed = layout & 1;
        oc.b_transposed = layout & 2;
        oc.bf16_out = bf16_out;
        check(oc, ++salt);
      }
}

/// Every epilogue combination the header allows, on every layout and both outputs.
TEST_P(MatmulTcOptionsTest, EveryEpilogueCombination) {
  std::uint64_t salt = 100;
  for (std::int64_t n : {136, 192})  // 192: pingpong's wide tiles take the bf16 outputs without GELU
  for (int layout = 0; layout < 4; ++layout)
    for (bool bf16_out : {false, true})
      for (int bits = 0; bits < 32; ++bits) {
        OptionCase oc;
        oc.m = 97, oc.n = n, oc.k = 72;  // partial tiles in M and (n = 136) N; N, K multiples of 8
        oc.a_transposed = layout & 1;
        oc.b_transposed = layout & 2;
        oc.bf16_out = bf16_out;
        oc.bias = bits & 1;
        oc.gelu = bits & 2;
        oc.pre_gelu = (bits & 4) && oc.gelu;
        oc.residual = bits & 8;
        oc.residual_in_place = oc.residual && (bits & 16);
        oc.accumulate = !bf16_out && !oc.residual && (bits & 16);
        if ((bits & 4) && !oc.gelu) continue;  // pre_gelu needs gelu
        if ((bits & 16) && !oc.residual && bf16_out) continue;  // accumulate needs fp32 C
        check(oc, ++salt);
      }
}

/// The GPT's own products at a reduced token count: forward X W^T + b (+ GELU), backward
/// dX = dY W and dW += dY^T X, with padded leading dimensions (scalar stores).
TEST_P(MatmulTcOptionsTest, LinearLayerProducts) {
  const std::int64_t tokens = 515, in = 384, out = 1152;
  std::uint64_t salt = 500;
  for (std::int64_t pad : {0, 8}) {
    OptionCase fwd;  // Y = X W^T + b, GELU, bf16 out, pre-activation kept
    fwd.m = tokens, fwd.n = out, fwd.k = in, fwd.b_transposed = true, fwd.bf16_out = true;
    fwd.bias = fwd.gelu = fwd.pre_gelu = true, fwd.pad = pad;
    check(fwd, ++salt);
    OptionCase dx;  // dX = dY W (+ the residual stream's gradient, in place)
    dx.m = tokens, dx.n = in, dx.k = out, dx.bf16_out = true, dx.residual = dx.residual_in_place = true, dx.pad = pad;
    check(dx, ++salt);
    OptionCase dw;  // dW += dY^T X, fp32
    dw.m = out, dw.n = in, dw.k = tokens, dw.a_transposed = true, dw.accumulate = true, dw.pad = pad;
    check(dw, ++salt);
  }
}

/// Small grids with long K (dW = dY^T X: few output tiles, many tokens): mma_sync and the
/// persistent Hopper steps (persistent, cluster_multicast, pingpong) split K and add the
/// splits' partial products in a fixed order. Every layout, plain, bias + residual (applied
/// once, by the first split) and accumulate. The splits have unequal slab counts: K = 3001
/// is 94 slabs of 32 for mma_sync (5 splits, 19 x 4 + 18) and 47 of 64 for the Hopper steps
/// (4 splits, 12 x 3 + 11, the last slab partial). Then K = 2600 (41 slabs of 64: 4 x 11,
/// the last 8) with fp32 output in a padded C (scalar stores and adds) and bias, and a
/// bf16 output and a GELU of the same shape, which must not split.
TEST_P(MatmulTcOptionsTest, SplitKProducts) {
  std::uint64_t salt = 900;
  for (int layout = 0; layout < 4; ++layout)
    for (int epi = 0; epi < 3; ++epi) {
      OptionCase oc;
      oc.m = 300, oc.n = 200, oc.k = 3001;  // 6 tiles of 128 x 128 (3 of 128 x 256)
      oc.a_transposed = layout & 1;
      oc.b_transposed = layout & 2;
      oc.bias = oc.residual = epi == 1;
      oc.accumulate = epi == 2;
      check(oc, ++salt);
    }
  // A padded C whose rows stay 16 bytes apart (pingpong stores and adds it by TMA): fp32 with
  // N % 8 == 4, split and accumulated, then not accumulated (the first split stores); bf16
  // with bias, GELU and pre_gelu. The padding is poisoned: a TMA write past N would show.
  for (int variant = 0; variant < 3; ++variant) {
    OptionCase oc;
    oc.m = 300, oc.n = 260, oc.k = 3001;
    oc.a_transposed = true;
    oc.pad = 8, oc.pad_aligned = true;
    oc.accumulate = variant == 0;
    oc.bf16_out = oc.bias = oc.gelu = oc.pre_gelu = variant == 2;
    if (variant == 2) oc.n = 200, oc.k = 384;
    check(oc, ++salt);
  }
  for (int variant = 0; variant < 4; ++variant) {
    OptionCase oc;
    oc.m = 260, oc.n = 136, oc.k = 2600;
    oc.a_transposed = true;
    oc.pad = 8;                           // odd ldc: the edge path of the epilogue (store1)
    oc.bias = variant == 0;
    oc.accumulate = variant == 1;
    oc.bf16_out = variant == 2;           // not linear: one split
    oc.gelu = oc.pre_gelu = variant == 3;  // not linear: one split
    check(oc, ++salt);
  }
}

/// Grids with more tiles than SMs, for the persistent steps (persistent, cluster_multicast,
/// pingpong; the others report SKIPPED): every block walks several tiles, and pingpong's two
/// consumers take several turns each (585 tiles of 128 x 128 for ~132 blocks: 4-5 each).
/// K = 200 is 4 slabs, the last partial, against a 5-stage ring (pingpong; 6 in steps 4-6): a consumer's ring
/// position wraps at a different stage from one tile to the next. A plain product, the
/// forward layer (B transposed, bias + GELU, bf16 out) and dW (A transposed, accumulate).
/// The K = 384 layer with a residual, then with it in place in a bf16 C (bias too): the
/// GPT's projection, where pingpong's staged epilogue loads each tile of C before its main
/// loop, on alternating phases of a consumer's residual barrier. Then the other ring strides of pingpong's Ring::skip, with several tiles per block:
/// K = 384 (6 slabs: 1.2 passes of pingpong's 5-stage ring), K = 800 (13
/// slabs: the ring wraps twice or three times per skip; 297 tiles of 128 x 128, 2-3 per
/// block) and K = 40 (one partial slab per tile).
/// Then pingpong's wide tiles (a bf16 C without GELU, N % 192 == 0; 195 tiles of 128 x 192,
/// the last tile row 8 rows deep, so one consumer's rows all past M): every operand layout,
/// plain, with a bias, with the residual in place, with K = 520 (a 4-stage ring wrapping
/// across tiles), 200 and 40 (one slab).
/// Last, a dW-like product (A transposed, accumulate) where split-K is allowed (fp32 C, fewer
/// than 2 tiles per SM) but two splits do not fit one wave: 2176 x 1024 x 1802 = 68 tiles of
/// 128 x 256, 36 cluster tiles, 136 tiles of 128 x 128 on a 132-SM GPU -- not split
/// (persistent_split_k: one unit per block, step 5's banner), several tiles per block.
/// The reference covers sampled rows of these outputs (OptionCase::sampled_rows: three in
/// every 64, each tile and each consumer's half of it), the poison scan every element.
TEST_P(MatmulTcOptionsTest, ManyTilesPerBlock) {
  const TcMatmulStep step = GetParam().step;
  if (step != TcMatmulStep::persistent && step != TcMatmulStep::cluster_multicast && step != TcMatmulStep::pingpong)
    GTEST_SKIP() << "not a persistent step (its grid has one block per tile)";
  std::uint64_t salt = 1000;
  for (int product = 0; product < 3; ++product) {
    OptionCase oc;
    oc.m = 8200, oc.n = 1032, oc.k = 200;
    oc.sampled_rows = true;
    oc.b_transposed = product == 1;
    oc.bf16_out = oc.bias = oc.gelu = product == 1;
    oc.a_transposed = oc.accumulate = product == 2;
    check(oc, ++salt);
  }
  OptionCase ring_wrap;  // K = 384: the GPT's forward layer, residual added
  ring_wrap.m = 4100, ring_wrap.n = 1032, ring_wrap.k = 384;
  ring_wrap.b_transposed = ring_wrap.residual = true;
  ring_wrap.sampled_rows = true;
  check(ring_wrap, ++salt);
  OptionCase in_place = ring_wrap;  // the same, the residual stream updated in place (X += H W^T + b):
  in_place.residual_in_place = true;  // pingpong's staged epilogue loads C's tile, several per consumer
  in_place.bf16_out = in_place.bias = true;
  check(in_place, ++salt);
  OptionCase long_k;  // K = 800, both operands transposed
  long_k.m = 4100, long_k.n = 1032, long_k.k = 800;
  long_k.a_transposed = long_k.b_transposed = true;
  long_k.sampled_rows = true;
  check(long_k, ++salt);
  OptionCase one_slab;  // K = 40, bf16 out
  one_slab.m = 8200, one_slab.n = 1032, one_slab.k = 40;
  one_slab.bf16_out = one_slab.sampled_rows = true;
  check(one_slab, ++salt);
  OptionCase wide;  // pingpong's wide tiles (a bf16 C, no GELU, N % 192 == 0) as in the GPT's dX, A stored K x M:
  wide.m = 8200, wide.n = 576, wide.k = 520;  // 195 tiles of 128 x 192, the last row of 8 rows; 9 slabs a tile
  wide.a_transposed = wide.bf16_out = wide.sampled_rows = true;
  check(wide, ++salt);
  OptionCase wide_bias = wide;  // the same with a bias, B stored N x K, into a padded C
  wide_bias.a_transposed = false, wide_bias.b_transposed = true;
  wide_bias.bias = true;
  wide_bias.pad = 8, wide_bias.pad_aligned = true;
  check(wide_bias, ++salt);
  OptionCase wide_in_place;  // wide tiles with the residual stream updated in place
  wide_in_place.m = 8200, wide_in_place.n = 576, wide_in_place.k = 200;
  wide_in_place.b_transposed = wide_in_place.bf16_out = wide_in_place.bias = true;
  wide_in_place.residual = wide_in_place.residual_in_place = true;
  wide_in_place.sampled_rows = true;
  check(wide_in_place, ++salt);
  OptionCase wide_in_place_tt = wide_in_place;  // the same with both operands stored transposed
  wide_in_place_tt.a_transposed = true, wide_in_place_tt.bias = false;
  check(wide_in_place_tt, ++salt);
  OptionCase wide_plain_bias = wide_in_place;  // plain layouts, a bias, no residual, one slab
  wide_plain_bias.b_transposed = wide_plain_bias.residual = wide_plain_bias.residual_in_place = false;
  wide_plain_bias.k = 40;
  check(wide_plain_bias, ++salt);
  OptionCase split_k;  // split-K allowed, but not in one wave: whole K, several tiles per block
  split_k.m = 2176, split_k.n = 1024, split_k.k = 1802;
  split_k.a_transposed = split_k.accumulate = split_k.sampled_rows = true;
  check(split_k, ++salt);
}

INSTANTIATE_TEST_SUITE_P(Steps, MatmulTcOptionsTest, ::testing::ValuesIn(course::m01::kTcMatmulSteps), step_name);

/// The split-K order is fixed: two runs from the same C give the same bits. For each step
/// that splits K (mma_sync and the persistent Hopper steps; the others report SKIPPED).
/// A split that skipped its turn would show here (or, storing first, as wrong values in
/// SplitKProducts); what pingpong's TMA additions do after the turn -- waiting for their
/// writes to complete, the proxy fences -- is argued at staged_f32_epilogue: the window a missing
/// wait would open is too short for a test to catch reliably.
class MatmulTcSplitKTest : public GpuTest, public ::testing::WithParamInterface<course::StepInfo<TcMatmulStep>> {};

TEST_P(MatmulTcSplitKTest, BitIdenticalAcrossRuns) {
  const TcMatmulStep step = GetParam().step;
  if (step != TcMatmulStep::mma_sync && step != TcMatmulStep::persistent && step != TcMatmulStep::cluster_multicast &&
      step != TcMatmulStep::pingpong)
    GTEST_SKIP() << "this step does not split K";
  // A GPT dW on a 132-SM GPU: mma_sync 27 tiles of 128 x 128, 8 splits of 16 slabs of 32;
  // pingpong the same tiles, 4 splits of 16 slabs of 64; persistent and cluster_multicast
  // 18 tiles of 128 x 256, 5 splits of 13 slabs (the last 12).
  const std::int64_t M = 1152, N = 384, K = 4096;
  const auto a_host = course::to_bf16(course::random_vector(static_cast<std::size_t>(K * M), seed(), -1.f, 1.f));
  const auto b_host = course::to_bf16(course::random_vector(static_cast<std::size_t>(K * N), seed() + 1, -1.f, 1.f));
  const auto c0 = course::random_vector(static_cast<std::size_t>(M * N), seed() + 2, -1.f, 1.f);
  course::DeviceBuffer<bf16> da(a_host), db(b_host);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    course::DeviceBuffer<float> dc(c0);
    TcMatmulArgs args;
    args.a = da.data();
    args.b = db.data();
    args.c = dc.data();
    args.m = M, args.n = N, args.k = K;
    args.a_transposed = true;  // A stored K x M (dY), B stored K x N (X)
    args.lda = M, args.ldb = N, args.ldc = N;
    args.epilogue.accumulate = true;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::matmul_tc(step, args));
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto c = dc.download();
    if (run == 0) first = c;
    else ASSERT_EQ(0, std::memcmp(first.data(), c.data(), c.size() * sizeof(float))) << "run " << run << " differs";
  }
}

/// Split products on two streams at once: each launch takes its own turn counters (in
/// stream order, tc_parts::zeroed_turns), so interleaved launches on two non-blocking
/// streams give C bit-identical to a run alone on the default stream. (With one counter
/// buffer per device, a launch's zeroing would reset the counters of a kernel still running
/// on the other stream: a later split would wait forever, or add out of order.) The dW of
/// BitIdenticalAcrossRuns into a fresh C, with a bias (the first split's whole epilogue) and
/// without (pingpong: the first split's TMA store, the later ones' TMA additions).
TEST_P(MatmulTcSplitKTest, ConcurrentStreamsGiveTheSameResult) {
  const TcMatmulStep step = GetParam().step;
  if (step != TcMatmulStep::mma_sync && step != TcMatmulStep::persistent && step != TcMatmulStep::cluster_multicast &&
      step != TcMatmulStep::pingpong)
    GTEST_SKIP() << "this step does not split K";
  const std::int64_t M = 1152, N = 384, K = 4096;
  const auto a_host = course::to_bf16(course::random_vector(static_cast<std::size_t>(K * M), seed(), -1.f, 1.f));
  const auto b_host = course::to_bf16(course::random_vector(static_cast<std::size_t>(K * N), seed() + 1, -1.f, 1.f));
  const auto bias = course::random_vector(static_cast<std::size_t>(N), seed() + 2, -1.f, 1.f);
  course::DeviceBuffer<bf16> da(a_host), db(b_host);
  course::DeviceBuffer<float> dbias(bias);
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with a bias" : "without a bias");
    std::vector<course::DeviceBuffer<float>> dc;
    for (int i = 0; i < 3; ++i) {
      dc.emplace_back(static_cast<std::size_t>(M * N));
      dc.back().poison();  // every element is written by the first add
    }
    TcMatmulArgs args;
    args.a = da.data();
    args.b = db.data();
    args.c = dc[0].data();
    args.m = M, args.n = N, args.k = K;
    args.a_transposed = true;  // A stored K x M (dY), B stored K x N (X)
    args.lda = M, args.ldb = N, args.ldc = N;
    if (with_bias) args.epilogue.bias = dbias.data();
    COURSE_SKIP_IF_NOT_IMPLEMENTED(impl::matmul_tc(step, args));  // dc[0]: the default stream, alone
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    cudaStream_t streams[2] = {nullptr, nullptr};
    for (cudaStream_t& st : streams) ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 2; ++i) {
        args.c = dc[1 + i].data();
        args.stream = streams[i];
        impl::matmul_tc(step, args);
      }
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());
    for (cudaStream_t st : streams) cudaStreamDestroy(st);
    const std::vector<float> want = dc[0].download();
    for (int i = 0; i < 2; ++i) {
      const std::vector<float> got = dc[1 + i].download();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << "C on stream " << i << " differs from the default stream's";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, MatmulTcSplitKTest, ::testing::ValuesIn(course::m01::kTcMatmulSteps), step_name);

// ---- argument validation of the options (host only, fake device addresses).

TcMatmulArgs valid_fake_args() {
  TcMatmulArgs a;
  a.a = reinterpret_cast<const bf16*>(std::uintptr_t{0x10000});
  a.b = reinterpret_cast<const bf16*>(std::uintptr_t{0x20000});
  a.c = reinterpret_cast<float*>(std::uintptr_t{0x30000});
  a.m = a.n = a.k = 16;
  a.lda = a.ldb = a.ldc = 16;
  return a;
}

void expect_rejected(const TcMatmulArgs& a, const std::string& needle) {
  try {
    impl::matmul_tc(TcMatmulStep::mma_sync, a);
    ADD_FAILURE() << "expected InvalidArgument mentioning " << needle;
  } catch (const course::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MatmulTcOptionsArgsTest, OutputsAreExactlyOne) {
  auto a = valid_fake_args();
  a.c_bf16 = reinterpret_cast<bf16*>(std::uintptr_t{0x40000});
  expect_rejected(a, "give exactly one output");
  a = valid_fake_args();
  a.c = nullptr;
  expect_rejected(a, "give one output");
}

TEST(MatmulTcOptionsArgsTest, TransposedLeadingDimensionsAreNamed) {
  auto a = valid_fake_args();
  a.m = 24;  // A stored K x M: lda must reach m
  a.a_transposed = true;
  expect_rejected(a, "'lda' = 16: must be >= m");
  a = valid_fake_args();
  a.k = 24;
  a.lda = 24;
  a.b_transposed = true;  // B stored N x K: ldb must reach k
  expect_rejected(a, "'ldb' = 16: must be >= k");
}

TEST(MatmulTcOptionsArgsTest, EpilogueRulesAreNamed) {
  auto a = valid_fake_args();
  a.epilogue.pre_gelu = reinterpret_cast<bf16*>(std::uintptr_t{0x50000});
  expect_rejected(a, "'epilogue.pre_gelu'");  // without gelu
  a = valid_fake_args();
  a.c = nullptr;
  a.c_bf16 = reinterpret_cast<bf16*>(std::uintptr_t{0x40000});
  a.epilogue.accumulate = true;
  expect_rejected(a, "'epilogue.accumulate'");  // bf16 output
  a = valid_fake_args();
  a.epilogue.residual = reinterpret_cast<const float*>(std::uintptr_t{0x60000});
  a.epilogue.ldr = 8;
  expect_rejected(a, "'epilogue.ldr' = 8");
  a.epilogue.ldr = 16;
  a.epilogue.accumulate = true;
  expect_rejected(a, "cannot be combined with epilogue.accumulate");
}

TEST(MatmulTcOptionsArgsTest, OverlapsAreRejected) {
  auto a = valid_fake_args();
  a.epilogue.residual = reinterpret_cast<const float*>(std::uintptr_t{0x30000 + 4 * 16});  // C shifted by a row
  a.epilogue.ldr = 16;
  expect_rejected(a, "overlaps the output without being it");
  a = valid_fake_args();
  a.a_transposed = true;
  a.c = reinterpret_cast<float*>(std::uintptr_t{0x10000 + 64});  // inside A (stored K x M)
  expect_rejected(a, "must not overlap a");
  a = valid_fake_args();
  a.epilogue.gelu = true;
  a.epilogue.pre_gelu = reinterpret_cast<bf16*>(std::uintptr_t{0x30000 + 8});  // inside C
  expect_rejected(a, "'epilogue.pre_gelu'");
}

// ---- planted bugs: a kernel that ignores an option must fail the check above. Each is the
// step itself with one option dropped from its arguments (square shapes, so the dropped
// layout still passes validation).

class MatmulTcOptionsPlantedTest : public GpuTest {};

TEST_F(MatmulTcOptionsPlantedTest, CheckerRejectsEveryDroppedOption) {
  struct Planted {
    const char* name;
    OptionCase oc;
    void (*drop)(TcMatmulArgs&);
  };
  OptionCase base;
  base.m = base.n = base.k = 72;
  const auto with = [&](auto set) {
    OptionCase oc = base;
    set(oc);
    return oc;
  };
  const Planted cases[] = {
      {"a_transposed ignored", with([](OptionCase& o) { o.a_transposed = true; }),
       [](TcMatmulArgs& a) { a.a_transposed = false; }},
      {"b_transposed ignored", with([](OptionCase& o) { o.b_transposed = true; }),
       [](TcMatmulArgs& a) { a.b_transposed = false; }},
      {"bias ignored", with([](OptionCase& o) { o.bias = true; }), [](TcMatmulArgs& a) { a.epilogue.bias = nullptr; }},
      {"gelu ignored", with([](OptionCase& o) { o.gelu = true; }), [](TcMatmulArgs& a) { a.epilogue.gelu = false; }},
      {"residual ignored", with([](OptionCase& o) { o.residual = true; }),
       [](TcMatmulArgs& a) { a.epilogue.residual = nullptr; }},
      {"accumulate ignored", with([](OptionCase& o) { o.accumulate = true; }),
       [](TcMatmulArgs& a) { a.epilogue.accumulate = false; }},
  };
  for (const auto& pc : cases) {
    SCOPED_TRACE(pc.name);
    course::m01::checks::tc_options::OptionCheck r;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(r = run_option_case(pc.oc, seed(), [&](const TcMatmulArgs& args) {
      TcMatmulArgs wrong = args;
      pc.drop(wrong);
      impl::matmul_tc(TcMatmulStep::mma_sync, wrong);
    }));
    EXPECT_FALSE(r.ok()) << pc.name << " was not caught";
  }
}

}  // namespace
