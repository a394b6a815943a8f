// CPU tests of the plain bf16-precision attention reference (attention_forward_bf16): its
// results are bf16 values, its conventions are attention_forward's, its error against the
// double reference is the size the bf16 roundings predict, and strides do not change it.

#include "course/bf16.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "cpu_test_util.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <limits>
#include <tuple>
#include <vector>

namespace {

using course::AttentionLayout;
using course::HostTensor;
using course::testing::test_seed;
namespace ref = course::ref;

HostTensor<float> random_bf16(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d, AttentionLayout layout,
                              std::uint64_t seed, double range = 1.0) {
  HostTensor<float> t = HostTensor<float>::attention(B, H, N, d, layout);
  course::fill_random(t, seed, -range, range);
  t.storage() = course::round_to_bf16(t.storage());
  return t;
}

TEST(AttentionForwardBf16, OutputsAreBf16Values) {
  const auto q = random_bf16(2, 2, 37, 64, AttentionLayout::BHND, test_seed());
  const auto k = random_bf16(2, 2, 53, 64, AttentionLayout::BHND, test_seed() + 1);
  const auto v = random_bf16(2, 2, 53, 64, AttentionLayout::BHND, test_seed() + 2);
  const auto r = ref::attention_forward_bf16(q, k, v);
  EXPECT_EQ(course::round_to_bf16(r.out.storage()), r.out.storage());
}

TEST(AttentionForwardBf16, OneKeyGivesItsValueExactly) {
  const auto q = random_bf16(1, 3, 5, 32, AttentionLayout::BNHD, test_seed());
  const auto k = random_bf16(1, 3, 1, 32, AttentionLayout::BNHD, test_seed() + 1);
  const auto v = random_bf16(1, 3, 1, 32, AttentionLayout::BNHD, test_seed() + 2);
  const auto r = ref::attention_forward_bf16(q, k, v);
  for (std::int64_t h = 0; h < 3; ++h)
    for (std::int64_t i = 0; i < 5; ++i) {
      for (std::int64_t c = 0; c < 32; ++c) EXPECT_EQ(r.out({0, h, i, c}), v({0, h, 0, c}));
      float dot = 0.f;
      for (std::int64_t c = 0; c < 32; ++c) dot += q({0, h, i, c}) * k({0, h, 0, c});
      EXPECT_FLOAT_EQ(r.lse({0, h, i}), dot / std::sqrt(32.f));  // log(1) = 0
    }
}

/// The error budget of the roundings: P to bf16 (2^-8 relative per weight) and O to bf16
/// (2^-8 relative): |O - O_exact| <= ~2 * 2^-8 * max|V|. lse is fp32 throughout.
TEST(AttentionForwardBf16, CloseToTheDoubleReference) {
  for (const bool causal : {false, true})
    for (const double range : {1.0, 8.0}) {
      SCOPED_TRACE(causal ? "causal" : "full");
      const auto q = random_bf16(2, 4, 70, 128, AttentionLayout::BHND, test_seed(), range);
      const auto k = random_bf16(2, 2, 90, 128, AttentionLayout::BHND, test_seed() + 1, range);
      const auto v = random_bf16(2, 2, 90, 128, AttentionLayout::BHND, test_seed() + 2);
      ref::AttentionOptions opts;
      opts.causal = causal;
      const auto plain = ref::attention_forward_bf16(q, k, v, opts);
      const auto exact = ref::attention_forward(q, k, v, opts);
      double err = 0, err_lse = 0;
      for (std::size_t n = 0; n < exact.out.storage().size(); ++n)
        err = std::max(err, static_cast<double>(std::fabs(plain.out.storage()[n] - exact.out.storage()[n])));
      for (std::size_t n = 0; n < exact.lse.storage().size(); ++n)
        err_lse = std::max(err_lse, static_cast<double>(std::fabs(plain.lse.storage()[n] - exact.lse.storage()[n])) /
                                        (1.0 + std::fabs(exact.lse.storage()[n])));
      EXPECT_LE(err, 2.0 * 0x1p-8);
      EXPECT_GT(err, 0.0) << "no rounding at all: the bf16 steps are not being modelled";
      EXPECT_LE(err_lse, 1e-5);
    }
}

TEST(AttentionForwardBf16, RowsWithoutKeysAreZeroWithLseMinusInfinity) {
  const auto q = random_bf16(1, 2, 9, 32, AttentionLayout::BHND, test_seed());
  const auto k = random_bf16(1, 2, 4, 32, AttentionLayout::BHND, test_seed() + 1);
  const auto v = random_bf16(1, 2, 4, 32, AttentionLayout::BHND, test_seed() + 2);
  ref::AttentionOptions opts;
  opts.causal = true;  // bottom-right: rows 0..4 see nothing, row 5 sees key 0
  const auto r = ref::attention_forward_bf16(q, k, v, opts);
  for (std::int64_t h = 0; h < 2; ++h) {
    for (std::int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(r.lse({0, h, i}), -std::numeric_limits<float>::infinity());
      for (std::int64_t c = 0; c < 32; ++c) EXPECT_EQ(r.out({0, h, i, c}), 0.f);
    }
    for (std::int64_t c = 0; c < 32; ++c) EXPECT_EQ(r.out({0, h, 5, c}), v({0, h, 0, c}));
  }
}

/// The same values in [B,N,H,d] storage with grouped-query heads give bit-identical results.
TEST(AttentionForwardBf16, StridesDoNotChangeTheResult) {
  const auto q = random_bf16(2, 6, 21, 64, AttentionLayout::BHND, test_seed());
  const auto k = random_bf16(2, 3, 33, 64, AttentionLayout::BHND, test_seed() + 1);
  const auto v = random_bf16(2, 3, 33, 64, AttentionLayout::BHND, test_seed() + 2);
  HostTensor<float> q2 = HostTensor<float>::attention(2, 6, 21, 64, AttentionLayout::BNHD);
  HostTensor<float> k2 = HostTensor<float>::attention(2, 3, 33, 64, AttentionLayout::BNHD);
  HostTensor<float> v2 = HostTensor<float>::attention(2, 3, 33, 64, AttentionLayout::BNHD);
  course::testing::copy_values(q, q2);
  course::testing::copy_values(k, k2);
  course::testing::copy_values(v, v2);
  ref::AttentionOptions opts;
  opts.causal = true;
  const auto a = ref::attention_forward_bf16(q, k, v, opts), b = ref::attention_forward_bf16(q2, k2, v2, opts);
  EXPECT_EQ(a.out.storage(), b.out.storage());
  EXPECT_EQ(a.lse.storage(), b.lse.storage());
}

TEST(AttentionForwardBf16, BadArgumentsAreNamed) {
  const auto q = random_bf16(1, 4, 5, 32, AttentionLayout::BHND, 1);
  const auto k = random_bf16(1, 3, 5, 32, AttentionLayout::BHND, 2);
  EXPECT_INVALID_ARGUMENT(ref::attention_forward_bf16(q, k, k), "H_kv");
  const auto k16 = random_bf16(1, 4, 5, 16, AttentionLayout::BHND, 3);
  EXPECT_INVALID_ARGUMENT(ref::attention_forward_bf16(q, k16, k16), "k.shape()");
  ref::AttentionOptions opts;
  opts.scale = -1.0;
  EXPECT_INVALID_ARGUMENT(ref::attention_forward_bf16(q, q, q, opts), "opts.scale");
}

}  // namespace

// ---------------------------------------------------------------- backward -----

/// The bf16 backward's inputs: bf16 Q, K, V, dO; O and lse from the double forward (O
/// rounded to bf16, lse to fp32), as a bf16 forward hands them over.
struct BackwardInputs {
  HostTensor<float> q, k, v, o, dout;
  std::vector<float> lse;
};
BackwardInputs backward_inputs(std::int64_t B, std::int64_t H, std::int64_t H_kv, std::int64_t N_q, std::int64_t N_k,
                               const ref::AttentionOptions& opts) {
  BackwardInputs in{random_bf16(B, H, N_q, 64, AttentionLayout::BHND, test_seed()),
                    random_bf16(B, H_kv, N_k, 64, AttentionLayout::BNHD, test_seed() + 1),
                    random_bf16(B, H_kv, N_k, 64, AttentionLayout::BNHD, test_seed() + 2),
                    HostTensor<float>::attention(B, H, N_q, 64, AttentionLayout::BHND),
                    random_bf16(B, H, N_q, 64, AttentionLayout::BHND, test_seed() + 3),
                    {}};
  const auto fwd = ref::attention_forward(in.q.cast<double>(), in.k.cast<double>(), in.v.cast<double>(), opts);
  for (std::size_t e = 0; e < in.o.storage().size(); ++e) in.o.storage()[e] = static_cast<float>(fwd.out.storage()[e]);
  in.o.storage() = course::round_to_bf16(in.o.storage());
  in.lse.assign(fwd.lse.storage().begin(), fwd.lse.storage().end());
  return in;
}

/// Its gradients are bf16 values, within a few bf16 ulps of the double backward (the
/// rule's baseline must be the size of bf16 rounding: neither exact nor far off), and the
/// rows that see no key get dQ = 0.
TEST(AttentionBackwardBf16, CloseToTheDoubleReferenceAndBf16Valued) {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    ref::AttentionOptions opts;
    opts.causal = causal;
    const BackwardInputs in = backward_inputs(2, 4, 2, 45, 30, opts);  // grouped-query, N_q > N_k
    const auto got = ref::attention_backward_bf16(in.q, in.k, in.v, in.o, in.dout, in.lse, opts);
    const auto exact = ref::attention_backward(in.q.cast<double>(), in.k.cast<double>(), in.v.cast<double>(),
                                               in.dout.cast<double>(), opts);
    for (const auto& [g, e, name] : {std::tuple{&got.dq, &exact.dq, "dQ"}, {&got.dk, &exact.dk, "dK"},
                                     {&got.dv, &exact.dv, "dV"}}) {
      EXPECT_EQ(course::round_to_bf16(g->storage()), g->storage()) << name;
      double err = 0, scale = 0;
      for (std::size_t i = 0; i < g->storage().size(); ++i) {
        err = std::max(err, std::fabs(g->storage()[i] - e->storage()[i]));
        scale = std::max(scale, std::fabs(e->storage()[i]));
      }
      EXPECT_GT(err, 0.0) << name << ": bf16 roundings should leave some error";
      EXPECT_LT(err, 0x1p-5 * scale) << name << ": error " << err << " against max |grad| " << scale;
    }
    if (causal) {  // the first N_q - N_k = 15 rows see no key
      for (std::int64_t i = 0; i < 15; ++i)
        for (std::int64_t c = 0; c < 64; ++c) EXPECT_EQ(got.dq({1, 3, i, c}), 0.f);
    }
  }
}

TEST(AttentionBackwardBf16, RejectsAnLseOfTheWrongSize) {
  const BackwardInputs in = backward_inputs(1, 2, 2, 8, 8, {});
  std::vector<float> short_lse(in.lse.begin(), in.lse.end() - 1);
  course::testing::expect_invalid_argument(
      [&] { ref::attention_backward_bf16(in.q, in.k, in.v, in.o, in.dout, short_lse); }, "lse.size()");
}
