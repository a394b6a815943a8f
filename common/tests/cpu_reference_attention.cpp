// CPU tests of the attention forward reference: masks seen through P, an explicit
// triple-loop definition at odd shapes, both storage layouts, GQA, scale, strides.

#include "course/compare.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "cpu_test_util.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace {

using course::AttentionLayout;
using course::HostTensor;
using course::Tolerance;
using course::testing::copy_values;
using course::testing::test_seed;
namespace ref = course::ref;

constexpr Tolerance kDouble{1e-13, 1e-13};
const std::vector<std::string> kBHID{"b", "h", "i", "c"};
const std::vector<std::string> kBHI{"b", "h", "i"};
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

HostTensor<double> random_attention(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d,
                                    AttentionLayout layout, std::uint64_t seed) {
  auto t = HostTensor<double>::attention(B, H, N, d, layout);
  course::fill_random(t, seed, -1.0, 1.0, 0.25);  // each batch shifted: a batch swap shows
  return t;
}

/// The definition, one (b, h, i) at a time, written independently of the reference:
/// s_j = scale * q_i . k_j (masked -> -inf), p = exp(s - max) / sum, o = sum_j p_j v_j.
ref::AttentionResult<double> triple_loop_attention(const HostTensor<double>& q, const HostTensor<double>& k,
                                                   const HostTensor<double>& v, double scale, bool causal) {
  const std::int64_t B = q.dim(0), H = q.dim(1), Nq = q.dim(2), d = q.dim(3);
  const std::int64_t Hkv = k.dim(1), Nk = k.dim(2);
  if (scale == 0.0) scale = 1.0 / std::sqrt(double(d));
  ref::AttentionResult<double> r{HostTensor<double>({B, H, Nq, d}), HostTensor<double>({B, H, Nq})};
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t hk = h / (H / Hkv);
      for (std::int64_t i = 0; i < Nq; ++i) {
        std::vector<double> s(Nk, kNegInf);
        double mx = kNegInf;
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (causal && j > i + (Nk - Nq)) continue;
          double dotp = 0;
          for (std::int64_t c = 0; c < d; ++c) dotp += q({b, h, i, c}) * k({b, hk, j, c});
          s[j] = scale * dotp;
          mx = std::max(mx, s[j]);
        }
        if (mx == kNegInf) {  // nothing visible
          r.lse({b, h, i}) = kNegInf;
          continue;  // O stays 0
        }
        double l = 0;
        for (std::int64_t j = 0; j < Nk; ++j) l += std::exp(s[j] - mx);
        r.lse({b, h, i}) = mx + std::log(l);
        for (std::int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (std::int64_t j = 0; j < Nk; ++j) o += std::exp(s[j] - mx) / l * v({b, hk, j, c});
          r.out({b, h, i, c}) = o;
        }
      }
    }
  return r;
}

/// P itself, read off the reference: with d = N_k and V = identity, O = P V = P.
HostTensor<double> probabilities(std::int64_t Nq, std::int64_t Nk, bool causal, std::uint64_t seed,
                                 HostTensor<double>* lse = nullptr) {
  const auto q = random_attention(1, 1, Nq, Nk, AttentionLayout::BHND, seed);
  const auto k = random_attention(1, 1, Nk, Nk, AttentionLayout::BHND, seed + 1);
  HostTensor<double> v({1, 1, Nk, Nk});
  for (std::int64_t j = 0; j < Nk; ++j) v({0, 0, j, j}) = 1.0;
  ref::AttentionOptions opts;
  opts.causal = causal;
  auto r = ref::attention_forward(q, k, v, opts);
  if (lse) *lse = r.lse;
  HostTensor<double> p({Nq, Nk});
  for (std::int64_t i = 0; i < Nq; ++i)
    for (std::int64_t j = 0; j < Nk; ++j) p({i, j}) = r.out({0, 0, i, j});
  return p;
}

TEST(AttentionMask, Causal4x4HasZerosAboveTheDiagonal) {
  const auto p = probabilities(4, 4, true, test_seed());
  for (std::int64_t i = 0; i < 4; ++i) {
    double sum = 0;
    for (std::int64_t j = 0; j < 4; ++j) {
      if (j > i)
        EXPECT_EQ(p({i, j}), 0.0) << "i=" << i << " j=" << j;
      else
        EXPECT_GT(p({i, j}), 0.0) << "i=" << i << " j=" << j;
      sum += p({i, j});
    }
    EXPECT_NEAR(sum, 1.0, 1e-14) << "row " << i;
  }
  EXPECT_EQ(p({0, 0}), 1.0) << "the first query sees only the first key";
  // Without the mask every entry is positive.
  const auto full = probabilities(4, 4, false, test_seed());
  for (double x : full.storage()) EXPECT_GT(x, 0.0);
}

TEST(AttentionMask, CausalIsBottomRightAlignedWhenNqLessThanNk) {
  // N_q = 3, N_k = 5: query i sees keys j <= i + 2; the last query sees all keys.
  const auto p = probabilities(3, 5, true, test_seed());
  for (std::int64_t i = 0; i < 3; ++i) {
    double sum = 0;
    for (std::int64_t j = 0; j < 5; ++j) {
      if (j > i + 2)
        EXPECT_EQ(p({i, j}), 0.0) << "i=" << i << " j=" << j;
      else
        EXPECT_GT(p({i, j}), 0.0) << "i=" << i << " j=" << j;
      sum += p({i, j});
    }
    EXPECT_NEAR(sum, 1.0, 1e-14);
  }
}

TEST(AttentionMask, FullyMaskedRowsWhenNqGreaterThanNk) {
  // N_q = 5, N_k = 3: query i sees keys j <= i - 2, so rows 0 and 1 see nothing.
  HostTensor<double> lse;
  const auto p = probabilities(5, 3, true, test_seed(), &lse);
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) EXPECT_EQ(p({i, j}), 0.0) << "masked row " << i;
    EXPECT_EQ(lse({0, 0, i}), kNegInf) << "masked row " << i;
  }
  EXPECT_EQ(p({2, 0}), 1.0);
  EXPECT_EQ(p({2, 1}), 0.0);
  for (std::int64_t i = 2; i < 5; ++i) EXPECT_TRUE(std::isfinite(lse({0, 0, i})));
  EXPECT_EQ(p({4, 2}) > 0.0, true);
}

TEST(AttentionMask, NoVisibleKeyWithEmptyKeys) {
  // N_k = 0: every row is fully masked.
  const HostTensor<double> q = random_attention(1, 2, 3, 4, AttentionLayout::BHND, test_seed());
  const HostTensor<double> kv({1, 2, 0, 4});
  const auto r = ref::attention_forward(q, kv, kv);
  for (double x : r.out.storage()) EXPECT_EQ(x, 0.0);
  for (double x : r.lse.storage()) EXPECT_EQ(x, kNegInf);
}

// ------------------------------------------------ against the definition -----

struct DefCase {
  const char* name;
  std::int64_t B, H, Hkv, Nq, Nk, d;
  bool causal;
  double scale;
  AttentionLayout layout;
};
/// gtest prints parameters in test names: keep them readable.
void PrintTo(const DefCase& c, std::ostream* os) { *os << c.name; }

class AttentionDefinition : public ::testing::TestWithParam<DefCase> {};

TEST_P(AttentionDefinition, MatchesTripleLoop) {
  const DefCase c = GetParam();
  const auto q = random_attention(c.B, c.H, c.Nq, c.d, c.layout, test_seed());
  const auto k = random_attention(c.B, c.Hkv, c.Nk, c.d, c.layout, test_seed() + 1);
  const auto v = random_attention(c.B, c.Hkv, c.Nk, c.d, c.layout, test_seed() + 2);
  ref::AttentionOptions opts;
  opts.causal = c.causal;
  opts.scale = c.scale;
  const auto got = ref::attention_forward(q, k, v, opts);
  const auto want = triple_loop_attention(q, k, v, c.scale, c.causal);
  EXPECT_EQ(got.out.shape(), (course::Shape{c.B, c.H, c.Nq, c.d}));
  EXPECT_EQ(got.out.strides(), course::contiguous_strides(got.out.shape())) << "O is contiguous";
  EXPECT_EQ(got.lse.shape(), (course::Shape{c.B, c.H, c.Nq}));
  EXPECT_MATCHES(course::compare(got.out, want.out, kDouble, kBHID));
  EXPECT_MATCHES(course::compare(got.lse, want.lse, kDouble, kBHI));

  // The float instantiation agrees with the double definition to float rounding.
  const auto gotf = ref::attention_forward(q.cast<float>(), k.cast<float>(), v.cast<float>(), opts);
  EXPECT_MATCHES(course::compare(gotf.out, want.out, {1e-6, 1e-6}, kBHID));
  EXPECT_MATCHES(course::compare(gotf.lse, want.lse, {1e-6, 1e-6}, kBHI));

  // The other storage layout gives the same result (matched by logical index).
  const auto other = c.layout == AttentionLayout::BHND ? AttentionLayout::BNHD : AttentionLayout::BHND;
  auto q2 = HostTensor<double>::attention(c.B, c.H, c.Nq, c.d, other);
  auto k2 = HostTensor<double>::attention(c.B, c.Hkv, c.Nk, c.d, other);
  auto v2 = HostTensor<double>::attention(c.B, c.Hkv, c.Nk, c.d, other);
  copy_values(q, q2);
  copy_values(k, k2);
  copy_values(v, v2);
  EXPECT_MATCHES(course::compare(ref::attention_forward(q2, k2, v2, opts).out, got.out, {0, 0}, kBHID));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionDefinition,
    ::testing::Values(
        DefCase{"odd_BHND", 2, 3, 3, 5, 7, 3, false, 0.0, AttentionLayout::BHND},
        DefCase{"odd_BNHD", 2, 3, 3, 5, 7, 3, false, 0.0, AttentionLayout::BNHD},
        DefCase{"odd_causal_BHND", 2, 3, 3, 5, 7, 3, true, 0.0, AttentionLayout::BHND},
        DefCase{"odd_causal_BNHD", 2, 3, 3, 5, 7, 3, true, 0.0, AttentionLayout::BNHD},
        DefCase{"causal_NqGtNk", 2, 3, 3, 7, 5, 3, true, 0.0, AttentionLayout::BNHD},
        DefCase{"gqa_6_2", 2, 6, 2, 5, 7, 4, false, 0.0, AttentionLayout::BHND},
        DefCase{"gqa_6_3_causal", 1, 6, 3, 5, 7, 4, true, 0.0, AttentionLayout::BNHD},
        DefCase{"mqa_4_1", 2, 4, 1, 3, 9, 5, false, 0.0, AttentionLayout::BHND},
        DefCase{"scale", 2, 3, 3, 5, 7, 3, false, 0.37, AttentionLayout::BHND},
        DefCase{"scale_causal_gqa", 2, 4, 2, 6, 6, 8, true, 2.5, AttentionLayout::BNHD},
        DefCase{"single", 1, 1, 1, 1, 1, 1, false, 0.0, AttentionLayout::BHND}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Attention, ZeroScaleMeansOneOverSqrtD) {
  const auto q = random_attention(2, 2, 4, 9, AttentionLayout::BHND, test_seed());
  const auto k = random_attention(2, 2, 5, 9, AttentionLayout::BHND, test_seed() + 1);
  const auto v = random_attention(2, 2, 5, 9, AttentionLayout::BHND, test_seed() + 2);
  ref::AttentionOptions a, b;
  b.scale = 1.0 / 3.0;
  EXPECT_MATCHES(course::compare(ref::attention_forward(q, k, v, a).out, ref::attention_forward(q, k, v, b).out,
                                 {1e-15, 1e-15}, kBHID));
}

TEST(Attention, GqaEqualsReplicatedKv) {
  // GQA with H_kv = 2, H = 6 must equal ordinary attention with each kv head copied
  // to the 3 query heads that share it.
  const auto q = random_attention(2, 6, 5, 4, AttentionLayout::BHND, test_seed());
  const auto k = random_attention(2, 2, 7, 4, AttentionLayout::BHND, test_seed() + 1);
  const auto v = random_attention(2, 2, 7, 4, AttentionLayout::BHND, test_seed() + 2);
  HostTensor<double> kr({2, 6, 7, 4}), vr({2, 6, 7, 4});
  kr.for_each_index([&](const std::vector<std::int64_t>& i) {
    kr.at(i) = k({i[0], i[1] / 3, i[2], i[3]});
    vr.at(i) = v({i[0], i[1] / 3, i[2], i[3]});
  });
  for (bool causal : {false, true}) {
    ref::AttentionOptions opts;
    opts.causal = causal;
    const auto gqa = ref::attention_forward(q, k, v, opts);
    const auto rep = ref::attention_forward(q, kr, vr, opts);
    EXPECT_MATCHES(course::compare(gqa.out, rep.out, {0, 0}, kBHID));
    EXPECT_MATCHES(course::compare(gqa.lse, rep.lse, {0, 0}, kBHI));
  }
}

TEST(Attention, AnyStrides) {
  // Storage order (N, d, B, H) with padding: nothing like BHND or BNHD.
  const std::int64_t B = 2, H = 3, N = 5, d = 4;
  const auto q = random_attention(B, H, N, d, AttentionLayout::BHND, test_seed());
  const auto k = random_attention(B, H, N, d, AttentionLayout::BHND, test_seed() + 1);
  const auto v = random_attention(B, H, N, d, AttentionLayout::BHND, test_seed() + 2);
  const course::Shape strides{H + 1, 1, d * B * (H + 1) + 3, B * (H + 1)};
  HostTensor<double> qs({B, H, N, d}, strides), ks({B, H, N, d}, strides), vs({B, H, N, d}, strides);
  copy_values(q, qs);
  copy_values(k, ks);
  copy_values(v, vs);
  ref::AttentionOptions opts;
  opts.causal = true;
  EXPECT_MATCHES(course::compare(ref::attention_forward(qs, ks, vs, opts).out,
                                 ref::attention_forward(q, k, v, opts).out, {0, 0}, kBHID));
}

TEST(Attention, BadArgumentsAreNamed) {
  const auto q = random_attention(2, 6, 5, 4, AttentionLayout::BHND, test_seed());
  const auto k4 = random_attention(2, 4, 7, 4, AttentionLayout::BHND, test_seed());
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(q, k4, k4), "attention_forward: argument 'H_kv' = 4");
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(q, k4, k4), "H = 6");
  const auto kd = random_attention(2, 2, 7, 3, AttentionLayout::BHND, test_seed());
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(q, kd, kd), "argument 'k.shape()' = [2, 2, 7, 3]");
  const auto k = random_attention(2, 2, 7, 4, AttentionLayout::BHND, test_seed());
  const auto v = random_attention(2, 2, 6, 4, AttentionLayout::BHND, test_seed());
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(q, k, v), "argument 'v.shape()' = [2, 2, 6, 4]");
  const auto kb = random_attention(3, 2, 7, 4, AttentionLayout::BHND, test_seed());
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(q, kb, kb), "argument 'k.shape()' = [3, 2, 7, 4]");
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(HostTensor<double>({6, 5, 4}), k, k),
                          "argument 'q.shape()' = [6, 5, 4]");
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(q, HostTensor<double>({2, 0, 7, 4}), HostTensor<double>({2, 0, 7, 4})),
                          "argument 'H_kv' = 0");
  ref::AttentionOptions bad;
  bad.scale = -1.0;
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(q, k, k, bad), "argument 'opts.scale' = -1");
  bad.scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_INVALID_ARGUMENT(ref::attention_forward(q, k, k, bad), "argument 'opts.scale' = nan");
  EXPECT_NO_THROW(ref::attention_forward(q, k, k));
}

}  // namespace
