// CPU tests of the positional references (common/src/reference_rope_alibi.cpp, used by
// module 3's fused_options step):
// RoPE against its defining properties, ALiBi slopes against the paper's values, and the
// positional attention reference against course::ref::attention_forward (with no option,
// and with ALiBi rewritten as two extra head dimensions).
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using course::AttentionLayout;
using course::HostTensor;

HostTensor<double> random_attention(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d,
                                    AttentionLayout layout, std::uint64_t seed) {
  HostTensor<double> t = HostTensor<double>::attention(B, H, N, d, layout);
  course::fill_random(t, seed);
  return t;
}

TEST(AlibiSlopeTest, PowersOfTwoFromThePaper) {
  // H = 8: 1/2, 1/4, ..., 1/256.
  for (std::int64_t h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(course::ref::alibi_slope(h, 8), std::exp2(-(h + 1.0)));
  // H = 4: 2^-2, 2^-4, 2^-6, 2^-8.
  for (std::int64_t h = 0; h < 4; ++h) EXPECT_DOUBLE_EQ(course::ref::alibi_slope(h, 4), std::exp2(-2.0 * (h + 1)));
  EXPECT_THROW(course::ref::alibi_slope(4, 4), course::InvalidArgument);
}

TEST(RopeTest, RotatesHalvesAsDocumented) {
  // d = 4, one row at position 1: pairs (0, 2) with angle 1 * 10000^0 = 1 and (1, 3) with
  // angle 1 * 10000^(-1/2) = 0.01.
  HostTensor<double> x({1, 1, 2, 4});
  const double row[4] = {1.0, 2.0, 3.0, 4.0};
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 4; ++c) x({0, 0, n, c}) = row[c];
  const HostTensor<double> r = course::ref::apply_rope(x, 10000.0, 0);
  for (int c = 0; c < 4; ++c) EXPECT_DOUBLE_EQ(r({0, 0, 0, c}), row[c]) << "position 0 is the identity";
  const double a0 = 1.0, a1 = 0.01;
  EXPECT_NEAR(r({0, 0, 1, 0}), 1.0 * std::cos(a0) - 3.0 * std::sin(a0), 1e-15);
  EXPECT_NEAR(r({0, 0, 1, 2}), 1.0 * std::sin(a0) + 3.0 * std::cos(a0), 1e-15);
  EXPECT_NEAR(r({0, 0, 1, 1}), 2.0 * std::cos(a1) - 4.0 * std::sin(a1), 1e-15);
  EXPECT_NEAR(r({0, 0, 1, 3}), 2.0 * std::sin(a1) + 4.0 * std::cos(a1), 1e-15);
}

TEST(RopeTest, PreservesNormsAndDependsOnlyOnRelativePosition) {
  const std::int64_t N = 40, d = 16;
  const HostTensor<double> q = random_attention(1, 2, N, d, AttentionLayout::BNHD, 11);
  const HostTensor<double> k = random_attention(1, 2, N, d, AttentionLayout::BHND, 12);
  const HostTensor<double> rq = course::ref::apply_rope(q, 10000.0, 0), rk = course::ref::apply_rope(k, 10000.0, 0);
  const HostTensor<double> rq7 = course::ref::apply_rope(q, 10000.0, 7), rk7 = course::ref::apply_rope(k, 10000.0, 7);
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t n = 0; n < N; ++n) {
      double before = 0, after = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        before += q({0, h, n, c}) * q({0, h, n, c});
        after += rq({0, h, n, c}) * rq({0, h, n, c});
      }
      EXPECT_NEAR(after, before, 1e-12);
      // <R(m) q, R(n) k> is a function of m - n: shifting both positions by 7 changes nothing.
      const std::int64_t m = (n * 7) % N;
      double dot0 = 0, dot7 = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        dot0 += rq({0, h, m, c}) * rk({0, h, n, c});
        dot7 += rq7({0, h, m, c}) * rk7({0, h, n, c});
      }
      EXPECT_NEAR(dot0, dot7, 1e-12);
    }
}

TEST(PositionalAttentionTest, WithoutOptionsEqualsAttentionForward) {
  for (const bool causal : {false, true})
    for (const auto& [Nq, Nk] : {std::pair<std::int64_t, std::int64_t>{13, 13}, {5, 17}, {17, 5}}) {
      const HostTensor<double> q = random_attention(2, 4, Nq, 8, AttentionLayout::BNHD, 21);
      const HostTensor<double> k = random_attention(2, 2, Nk, 8, AttentionLayout::BHND, 22);
      const HostTensor<double> v = random_attention(2, 2, Nk, 8, AttentionLayout::BHND, 23);
      course::ref::AttentionOptions opts;
      opts.causal = causal;
      const auto want = course::ref::attention_forward(q, k, v, opts);
      const auto got = course::ref::attention_forward_positional(q, k, v, opts, {});
      for (std::size_t e = 0; e < want.out.storage().size(); ++e)
        EXPECT_NEAR(got.out.storage()[e], want.out.storage()[e], 1e-13);
      for (std::size_t e = 0; e < want.lse.storage().size(); ++e) {
        if (std::isinf(want.lse.storage()[e])) {
          EXPECT_EQ(got.lse.storage()[e], want.lse.storage()[e]);
        } else {
          EXPECT_NEAR(got.lse.storage()[e], want.lse.storage()[e], 1e-13);
        }
      }
    }
}

/// ALiBi is a rank-2 change of the scores: with q' = [q, 1, -p_i] and
/// k' = [k, m j / scale, m / scale] (p_i = i + N_k - N_q), scale * q'.k' = scale * q.k + m (j - p_i).
TEST(PositionalAttentionTest, AlibiEqualsTwoExtraHeadDimensions) {
  const std::int64_t B = 1, H = 4, Nq = 9, Nk = 14, d = 8;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const HostTensor<double> q = random_attention(B, H, Nq, d, AttentionLayout::BHND, 31);
  const HostTensor<double> k = random_attention(B, H, Nk, d, AttentionLayout::BHND, 32);
  const HostTensor<double> v = random_attention(B, H, Nk, d, AttentionLayout::BHND, 33);
  for (const bool causal : {false, true}) {
    course::ref::AttentionOptions opts;
    opts.causal = causal;
    opts.scale = scale;
    course::ref::PositionalOptions pos;
    pos.alibi = true;
    const auto got = course::ref::attention_forward_positional(q, k, v, opts, pos);
    // Each head has its own slope, so build one augmented problem per head.
    for (std::int64_t h = 0; h < H; ++h) {
      const double m = course::ref::alibi_slope(h, H);
      HostTensor<double> qa({1, 1, Nq, d + 2}), ka({1, 1, Nk, d + 2}), va({1, 1, Nk, d + 2});
      for (std::int64_t i = 0; i < Nq; ++i) {
        for (std::int64_t c = 0; c < d; ++c) qa({0, 0, i, c}) = q({0, h, i, c});
        qa({0, 0, i, d}) = 1.0;
        qa({0, 0, i, d + 1}) = -static_cast<double>(i + Nk - Nq);
      }
      for (std::int64_t j = 0; j < Nk; ++j) {
        for (std::int64_t c = 0; c < d; ++c) {
          ka({0, 0, j, c}) = k({0, h, j, c});
          va({0, 0, j, c}) = v({0, h, j, c});
        }
        ka({0, 0, j, d}) = m * static_cast<double>(j) / scale;
        ka({0, 0, j, d + 1}) = m / scale;
      }
      const auto want = course::ref::attention_forward(qa, ka, va, opts);
      for (std::int64_t i = 0; i < Nq; ++i) {
        for (std::int64_t c = 0; c < d; ++c) EXPECT_NEAR(got.out({0, h, i, c}), want.out({0, 0, i, c}), 1e-12);
        if (std::isinf(want.lse({0, 0, i}))) {
          EXPECT_EQ(got.lse({0, h, i}), want.lse({0, 0, i}));
        } else {
          EXPECT_NEAR(got.lse({0, h, i}), want.lse({0, 0, i}), 1e-12);
        }
      }
    }
  }
}

TEST(PositionalAttentionTest, RopeEqualsAttentionOnRotatedInputs) {
  const std::int64_t Nq = 6, Nk = 11, d = 16;
  const HostTensor<double> q = random_attention(2, 2, Nq, d, AttentionLayout::BNHD, 41);
  const HostTensor<double> k = random_attention(2, 1, Nk, d, AttentionLayout::BNHD, 42);
  const HostTensor<double> v = random_attention(2, 1, Nk, d, AttentionLayout::BNHD, 43);
  course::ref::AttentionOptions opts;
  opts.causal = true;
  course::ref::PositionalOptions pos;
  pos.rope = true;
  const auto got = course::ref::attention_forward_positional(q, k, v, opts, pos);
  // Queries sit at positions i + Nk - Nq (aligned to the end of the keys, like the mask).
  const auto want = course::ref::attention_forward(course::ref::apply_rope(q, 10000.0, Nk - Nq),
                                                   course::ref::apply_rope(k, 10000.0, 0), v, opts);
  for (std::size_t e = 0; e < want.out.storage().size(); ++e)
    EXPECT_NEAR(got.out.storage()[e], want.out.storage()[e], 1e-13);
}

}  // namespace
