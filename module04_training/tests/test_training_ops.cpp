// Tests of the training demo's support ops (module04/training_ops.hpp): embedding lookup and
// its gradient, bias (+ residual) add, softmax cross-entropy, Adam.
//
// These ops have one implementation (library module04_training_ops, no exercise): both builds
// of this file (solution and exercise, by the folder convention) test the same code, and
// `impl` is not used. Each op is compared with a CPU computation on seeded random data;
// cross-entropy's gradient also with central differences of its loss in double; Adam with a
// step computed by hand; the ops that sum (embedding backward, cross-entropy) must give the
// same bits twice; bad arguments must be rejected by name (those tests need no GPU).
#include "course/reference.hpp"
#include "course/testing.hpp"
#include "module04/training_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using course::testing::GpuTest;
namespace m04 = course::m04;

/// `n` token ids uniform in [0, vocab).
std::vector<std::int32_t> random_ids(std::size_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = static_cast<std::int32_t>(gen() % static_cast<std::uint64_t>(vocab));
  return ids;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ------------------------------------------------------------------ embedding -----

struct EmbeddingCase {
  std::int64_t batch, seq, vocab, dim;
  bool position;
};

class EmbeddingTest : public GpuTest {};

TEST_F(EmbeddingTest, ForwardIsTokenRowPlusPositionRow) {
  // dim 19: no alignment assumption; dim 300: more columns than threads per block.
  for (const EmbeddingCase c : {EmbeddingCase{3, 11, 37, 19, true}, EmbeddingCase{2, 64, 32, 64, true},
                                EmbeddingCase{5, 7, 4, 300, false}, EmbeddingCase{1, 1, 1, 1, true}}) {
    SCOPED_TRACE(::testing::Message() << "batch " << c.batch << " seq " << c.seq << " vocab " << c.vocab << " dim "
                                      << c.dim << (c.position ? "" : " no position table"));
    const std::int64_t rows = c.batch * c.seq;
    const auto ids = random_ids(static_cast<std::size_t>(rows), c.vocab, seed());
    const auto tok = course::random_vector(static_cast<std::size_t>(c.vocab * c.dim), seed() + 1);
    const auto pos = course::random_vector(static_cast<std::size_t>(c.seq * c.dim), seed() + 2);
    DeviceBuffer<std::int32_t> d_ids(ids);
    DeviceBuffer<float> d_tok(tok), d_pos(pos), d_out(static_cast<std::size_t>(rows * c.dim));
    d_out.poison();
    m04::EmbeddingArgs a;
    a.ids = d_ids.data();
    a.token_table = d_tok.data();
    a.position_table = c.position ? d_pos.data() : nullptr;
    a.out = d_out.data();
    a.batch = c.batch;
    a.seq = c.seq;
    a.vocab = c.vocab;
    a.dim = c.dim;
    m04::embedding_forward(a);
    const auto got = d_out.download();
    std::int64_t wrong = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < c.dim; ++k) {
        float want = tok[static_cast<std::size_t>(ids[static_cast<std::size_t>(r)] * c.dim + k)];
        if (c.position) want += pos[static_cast<std::size_t>((r % c.seq) * c.dim + k)];
        if (got[static_cast<std::size_t>(r * c.dim + k)] != want && wrong++ < 5)
          ADD_FAILURE() << "out[" << r << ", " << k << "] = " << got[static_cast<std::size_t>(r * c.dim + k)]
                        << ", want " << want;
      }
    EXPECT_EQ(wrong, 0);
  }
}

TEST_F(EmbeddingTest, InvalidIdGivesNanRowOnly) {
  const std::int64_t vocab = 5, dim = 8;
  const std::vector<std::int32_t> ids = {0, -1, 4, 5, 2};
  const auto tok = course::random_vector(static_cast<std::size_t>(vocab * dim), seed());
  DeviceBuffer<std::int32_t> d_ids(ids);
  DeviceBuffer<float> d_tok(tok), d_out(ids.size() * dim);
  m04::EmbeddingArgs a;
  a.ids = d_ids.data();
  a.token_table = d_tok.data();
  a.out = d_out.data();
  a.batch = 1;
  a.seq = static_cast<std::int64_t>(ids.size());
  a.vocab = vocab;
  a.dim = dim;
  m04::embedding_forward(a);
  const auto got = d_out.download();
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const bool valid = ids[r] >= 0 && ids[r] < vocab;
    for (std::int64_t k = 0; k < dim; ++k) {
      const float x = got[r * dim + static_cast<std::size_t>(k)];
      if (valid) EXPECT_EQ(x, tok[static_cast<std::size_t>(ids[r] * dim + k)]) << "row " << r;
      else EXPECT_TRUE(std::isnan(x)) << "row " << r << " (id " << ids[r] << ") col " << k << " = " << x;
    }
  }
}

/// token_grad and position_grad on the CPU in double (rows with an invalid id add to no token).
void embedding_backward_reference(const std::vector<std::int32_t>& ids, const std::vector<float>& dout,
                                  const EmbeddingCase& c, std::vector<double>& tok, std::vector<double>& pos) {
  tok.assign(static_cast<std::size_t>(c.vocab * c.dim), 0.0);
  pos.assign(static_cast<std::size_t>(c.seq * c.dim), 0.0);
  for (std::int64_t r = 0; r < c.batch * c.seq; ++r)
    for (std::int64_t k = 0; k < c.dim; ++k) {
      const double g = dout[static_cast<std::size_t>(r * c.dim + k)];
      const std::int32_t id = ids[static_cast<std::size_t>(r)];
      if (id >= 0 && id < c.vocab) tok[static_cast<std::size_t>(id * c.dim + k)] += g;
      pos[static_cast<std::size_t>((r % c.seq) * c.dim + k)] += g;
    }
}

/// One embedding-backward problem: dO random (seed), the CPU sums, the device buffers and
/// the arguments (both gradients requested).
struct EmbeddingBackwardProblem {
  std::vector<double> want_tok, want_pos;
  DeviceBuffer<std::int32_t> d_ids;
  DeviceBuffer<float> d_dout, d_tok, d_pos;
  DeviceBuffer<float4> d_ws;  // float4: 16-byte aligned scratch
  m04::EmbeddingBackwardArgs args;

  EmbeddingBackwardProblem(const EmbeddingCase& c, const std::vector<std::int32_t>& ids, std::uint64_t seed) {
    const auto dout = course::random_vector(ids.size() * static_cast<std::size_t>(c.dim), seed);
    embedding_backward_reference(ids, dout, c, want_tok, want_pos);
    d_ids = DeviceBuffer<std::int32_t>(ids);
    d_dout = DeviceBuffer<float>(dout);
    d_tok = DeviceBuffer<float>(want_tok.size());
    d_pos = DeviceBuffer<float>(want_pos.size());
    d_ws = DeviceBuffer<float4>((m04::embedding_backward_workspace_bytes(c.batch, c.seq, c.vocab, c.dim) + 15) / 16);
    d_ws.poison();  // the op must not rely on zeroed scratch
    args.ids = d_ids.data();
    args.dout = d_dout.data();
    args.token_grad = d_tok.data();
    args.position_grad = d_pos.data();
    args.batch = c.batch;
    args.seq = c.seq;
    args.vocab = c.vocab;
    args.dim = c.dim;
    args.workspace = d_ws.data();
    args.workspace_bytes = d_ws.bytes();
  }
};

/// Runs embedding_backward twice on poisoned outputs; checks both gradients against the
/// reference (in double) and that the second run gives the same bits as the first.
void expect_embedding_backward_matches(const EmbeddingCase& c, const std::vector<std::int32_t>& ids,
                                       std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "batch " << c.batch << " seq " << c.seq << " vocab " << c.vocab << " dim "
                                    << c.dim);
  EmbeddingBackwardProblem p(c, ids, seed);
  const std::int64_t rows = c.batch * c.seq;
  std::vector<float> first_tok, first_pos;
  for (int run = 0; run < 2; ++run) {
    p.d_tok.poison();
    p.d_pos.poison();
    m04::embedding_backward(p.args);
    const auto tok = p.d_tok.download(), pos = p.d_pos.download();
    if (run == 0) {
      // A token's sum has up to `rows` terms, a position's `batch`; NaN (unwritten) fails.
      EXPECT_MATCHES(course::compare(tok, p.want_tok, course::tolerance_for(course::DType::f32, rows)));
      EXPECT_MATCHES(course::compare(pos, p.want_pos, course::tolerance_for(course::DType::f32, c.batch)));
      first_tok = tok;
      first_pos = pos;
    } else {
      EXPECT_TRUE(same_bits(tok, first_tok)) << "token_grad differs between two runs: not deterministic";
      EXPECT_TRUE(same_bits(pos, first_pos)) << "position_grad differs between two runs: not deterministic";
    }
  }
}

TEST_F(EmbeddingTest, BackwardSumsRowsPerTokenAndPerPosition) {
  // 40 x 33 = 1320 rows: several sort tiles; vocab 3: long runs split across segments;
  // dim 300: three column strips; vocab 50 > rows: tokens that never occur get 0. Row 1's
  // id is invalid: it adds to no token (but to its position).
  std::uint64_t s = seed();
  for (const EmbeddingCase c : {EmbeddingCase{40, 33, 3, 24, true}, EmbeddingCase{4, 16, 11, 300, true},
                                EmbeddingCase{1, 9, 50, 16, true}, EmbeddingCase{64, 64, 32, 64, true}}) {
    auto ids = random_ids(static_cast<std::size_t>(c.batch * c.seq), c.vocab, s++);
    ids[1 % ids.size()] = -1;
    expect_embedding_backward_matches(c, ids, s++);
  }
}

TEST_F(EmbeddingTest, BackwardAwkwardShapesAndSkewedIds) {
  // vocab 1 and 2: one or two ids own every row (long runs split into many segments of
  // m04::kEmbeddingSegmentRows); vocab 84 as in the GPT demo; vocab 50304 with few rows:
  // almost every id absent (must be 0, not stale); dims not a multiple of 4 or of 128;
  // one row in all.
  const EmbeddingCase cases[] = {{7, 33, 1, 19, true},  {5, 41, 2, 130, true},   {16, 128, 84, 384, true},
                                 {3, 17, 50304, 20, true}, {1, 1, 1, 1, true},  {1, 1, 84, 257, true},
                                 {2, 65, 84, 129, true},   {4, 64, 3000, 5, true},   {10, 256, 3000, 7, true}};
  // vocab 3000: above the count kernel's shared-memory counters (global counters instead),
  // 2560 rows of it: several sort tiles on that path.
  std::uint64_t s = seed();
  for (const EmbeddingCase& c : cases) {
    const auto ids = random_ids(static_cast<std::size_t>(c.batch * c.seq), c.vocab, s++);
    expect_embedding_backward_matches(c, ids, s++);
  }
}

TEST_F(EmbeddingTest, BackwardOneIdForEveryRowAndSkewedCounts) {
  // Every row the same id (1000 rows: 16 segments, the id begins segment 0): the sum is
  // one id's 1000 rows. Then ids skewed like text: id 0 ("space") on ~15% of rows, the rest
  // spread, plus invalid ids -1 and vocab.
  const EmbeddingCase one{8, 125, 84, 96, true};
  expect_embedding_backward_matches(one, std::vector<std::int32_t>(1000, 37), seed());
  const EmbeddingCase skew{32, 129, 84, 200, true};
  auto ids = random_ids(static_cast<std::size_t>(skew.batch * skew.seq), skew.vocab, seed() + 1);
  std::mt19937_64 gen(seed() + 2);
  for (auto& id : ids) {
    const auto u = gen() % 200;
    if (u < 30) id = 0;
    else if (u == 30) id = -1;
    else if (u == 31) id = static_cast<std::int32_t>(skew.vocab);
  }
  expect_embedding_backward_matches(skew, ids, seed() + 3);
}

TEST_F(EmbeddingTest, BackwardLargeBatchIsDeterministic) {
  // The GPT demo's shape (16384 rows x 384, vocab 84, id 0 on ~15%): two runs, same bits.
  const EmbeddingCase c{64, 256, 84, 384, true};
  auto ids = random_ids(static_cast<std::size_t>(c.batch * c.seq), c.vocab, seed());
  for (std::size_t r = 0; r < ids.size(); r += 7) ids[r] = 0;
  expect_embedding_backward_matches(c, ids, seed() + 1);
}

TEST_F(EmbeddingTest, BackwardComputesOnlyTheRequestedGradient) {
  const EmbeddingCase c{2, 5, 7, 12, true};
  EmbeddingBackwardProblem p(c, random_ids(10, c.vocab, seed()), seed() + 1);
  m04::EmbeddingBackwardArgs a = p.args;
  a.position_grad = nullptr;
  p.d_tok.poison();
  m04::embedding_backward(a);
  EXPECT_MATCHES(course::compare(p.d_tok.download(), p.want_tok, course::tolerance_for(course::DType::f32, 10)));
  a.token_grad = nullptr;
  a.position_grad = p.d_pos.data();
  a.workspace = nullptr;  // only the token gradient needs scratch
  a.workspace_bytes = 0;
  p.d_pos.poison();
  m04::embedding_backward(a);
  EXPECT_MATCHES(course::compare(p.d_pos.download(), p.want_pos, course::tolerance_for(course::DType::f32, c.batch)));
}

// ------------------------------------------------------------------- bias add -----

class BiasAddTest : public GpuTest {};

TEST_F(BiasAddTest, AddsBiasAndResidualInPlaceLeavingPaddingAlone) {
  struct Case {
    std::int64_t rows, cols, ldy, ldr;
    bool bias, residual;
  };
  for (const Case c : {Case{7, 13, 0, 0, true, false}, Case{7, 13, 16, 20, true, true}, Case{300, 64, 0, 0, false, true},
                       Case{1, 1, 0, 0, true, true}, Case{33, 192, 200, 0, true, true}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " x " << c.cols << " ldy " << c.ldy << " ldr " << c.ldr
                                      << (c.bias ? " bias" : "") << (c.residual ? " residual" : ""));
    const std::int64_t ldy = c.ldy ? c.ldy : c.cols, ldr = c.ldr ? c.ldr : c.cols;
    const auto y = course::random_vector(static_cast<std::size_t>(c.rows * ldy), seed());
    const auto bias = course::random_vector(static_cast<std::size_t>(c.cols), seed() + 1);
    const auto res = course::random_vector(static_cast<std::size_t>(c.rows * ldr), seed() + 2);
    DeviceBuffer<float> d_y(y), d_bias(bias), d_res(res);
    m04::BiasAddArgs a;
    a.y = d_y.data();
    a.bias = c.bias ? d_bias.data() : nullptr;
    a.residual = c.residual ? d_res.data() : nullptr;
    a.rows = c.rows;
    a.cols = c.cols;
    a.ldy = c.ldy;
    a.ldr = c.ldr;
    m04::bias_add(a);
    const auto got = d_y.download();
    std::int64_t wrong = 0;
    for (std::int64_t r = 0; r < c.rows; ++r)
      for (std::int64_t k = 0; k < ldy; ++k) {
        const std::size_t e = static_cast<std::size_t>(r * ldy + k);
        float want = y[e];  // padding (k >= cols) must be untouched
        if (k < c.cols) {
          if (c.bias) want += bias[static_cast<std::size_t>(k)];
          if (c.residual) want += res[static_cast<std::size_t>(r * ldr + k)];
        }
        if (got[e] != want && wrong++ < 5) ADD_FAILURE() << "y[" << r << ", " << k << "] = " << got[e] << ", want " << want;
      }
    EXPECT_EQ(wrong, 0);
  }
}

// -------------------------------------------------------------- cross-entropy -----

struct CeResult {
  float loss = 0.f;
  std::int32_t correct = -1, counted = -1;
  std::vector<float> dlogits;
};

CeResult run_cross_entropy(const std::vector<float>& logits, const std::vector<std::int32_t>& targets,
                           std::int64_t rows, std::int64_t classes, std::int64_t ld, bool with_grad = true) {
  DeviceBuffer<float> d_logits(logits), d_dlogits(logits.size()), d_loss(1);
  DeviceBuffer<std::int32_t> d_targets(targets), d_correct(1), d_counted(1);
  DeviceBuffer<float4> ws((m04::cross_entropy_workspace_bytes(rows) + 15) / 16);
  d_dlogits.poison();
  d_loss.poison();
  ws.poison();
  m04::CrossEntropyArgs a;
  a.logits = d_logits.data();
  a.targets = d_targets.data();
  a.dlogits = with_grad ? d_dlogits.data() : nullptr;
  a.loss = d_loss.data();
  a.correct = d_correct.data();
  a.counted = d_counted.data();
  a.rows = rows;
  a.classes = classes;
  a.ld = ld;
  a.workspace = ws.data();
  a.workspace_bytes = ws.bytes();
  m04::cross_entropy(a);
  CeResult r;
  r.loss = d_loss.download()[0];
  r.correct = d_correct.download()[0];
  r.counted = d_counted.download()[0];
  r.dlogits = d_dlogits.download();
  return r;
}

/// The mean loss over rows with target != -1, in double; also the reference gradient and
/// the correct count (argmax: lowest index among equal maxima).
double reference_loss(const std::vector<double>& logits, const std::vector<std::int32_t>& targets, std::int64_t rows,
                      std::int64_t classes, std::int64_t ld, std::vector<double>* grad = nullptr,
                      std::int64_t* correct = nullptr) {
  std::int64_t count = 0;
  for (std::int32_t t : targets) count += t != -1 ? 1 : 0;
  if (grad) grad->assign(logits.size(), 0.0);
  if (correct) *correct = 0;
  double sum = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t t = targets[static_cast<std::size_t>(r)];
    if (t == -1) continue;
    const double* z = logits.data() + r * ld;
    const std::int64_t arg = std::max_element(z, z + classes) - z;
    double s = 0.0;
    for (std::int64_t j = 0; j < classes; ++j) s += std::exp(z[j] - z[arg]);
    sum += z[arg] + std::log(s) - z[t];
    if (correct && arg == t) ++*correct;
    if (grad)
      for (std::int64_t j = 0; j < classes; ++j)
        (*grad)[static_cast<std::size_t>(r * ld + j)] =
            (std::exp(z[j] - z[arg]) / s - (j == t ? 1.0 : 0.0)) / static_cast<double>(count);
  }
  return count > 0 ? sum / static_cast<double>(count) : 0.0;
}

class CrossEntropyTest : public GpuTest {};

TEST_F(CrossEntropyTest, LossGradientAndAccuracyMatchTheReference) {
  struct Case {
    std::int64_t rows, classes, ld;
  };
  // classes 37 and 100: more classes than lanes; ld 40: padded rows; rows 3000: many blocks.
  for (const Case c : {Case{5, 3, 3}, Case{300, 37, 40}, Case{3000, 32, 32}, Case{17, 100, 100}, Case{1, 1, 1}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows x " << c.classes << " classes, ld " << c.ld);
    auto logits = course::random_vector(static_cast<std::size_t>(c.rows * c.ld), seed(), -4.f, 4.f);
    auto targets = random_ids(static_cast<std::size_t>(c.rows), c.classes, seed() + 1);
    for (std::size_t r = 2; r < targets.size(); r += 3) targets[r] = -1;  // ignored rows
    const CeResult got = run_cross_entropy(logits, targets, c.rows, c.classes, c.ld);
    std::vector<double> want_grad;
    std::int64_t want_correct = 0;
    const double want = reference_loss({logits.begin(), logits.end()}, targets, c.rows, c.classes, c.ld, &want_grad,
                                       &want_correct);
    std::int64_t counted = 0;
    for (std::int32_t t : targets) counted += t != -1 ? 1 : 0;
    EXPECT_EQ(got.counted, counted);
    EXPECT_EQ(got.correct, want_correct);
    EXPECT_NEAR(got.loss, want, 1e-5 * std::max(1.0, std::fabs(want)));
    // dlogits on the rows' columns; the padding columns of dlogits are never written.
    std::vector<float> g;
    std::vector<double> w;
    for (std::int64_t r = 0; r < c.rows; ++r)
      for (std::int64_t j = 0; j < c.classes; ++j) {
        g.push_back(got.dlogits[static_cast<std::size_t>(r * c.ld + j)]);
        w.push_back(want_grad[static_cast<std::size_t>(r * c.ld + j)]);
      }
    const double scale = 1.0 / static_cast<double>(std::max<std::int64_t>(counted, 1));
    EXPECT_MATCHES(course::compare(g, w, course::tolerance_for(course::DType::f32, c.classes, scale)));
    for (std::int64_t r = 0; r < c.rows; ++r)
      for (std::int64_t j = c.classes; j < c.ld; ++j)
        EXPECT_TRUE(std::isnan(got.dlogits[static_cast<std::size_t>(r * c.ld + j)])) << "padding written at row " << r;
  }
}

TEST_F(CrossEntropyTest, GradientMatchesFiniteDifferencesOfTheLoss) {
  const std::int64_t rows = 6, classes = 5;
  const auto logits = course::random_vector(static_cast<std::size_t>(rows * classes), seed(), -2.f, 2.f);
  const std::vector<std::int32_t> targets = {0, 4, -1, 2, 2, 1};
  const CeResult got = run_cross_entropy(logits, targets, rows, classes, classes);
  const std::vector<double> x(logits.begin(), logits.end());
  const auto loss = [&](const std::vector<double>& z) { return reference_loss(z, targets, rows, classes, classes); };
  const std::vector<double> analytic(got.dlogits.begin(), got.dlogits.end());
  // fp32 gradient against double differences: absolute 1e-6 on values of about 1/count.
  const auto r = course::ref::check_gradient(loss, x, analytic, 1e-6, 1e-6, 1e-4);
  EXPECT_TRUE(r.ok) << "max abs error " << r.max_abs_error << " at logit " << r.worst_index;
  for (std::int64_t j = 0; j < classes; ++j) EXPECT_EQ(got.dlogits[static_cast<std::size_t>(2 * classes + j)], 0.f);
}

TEST_F(CrossEntropyTest, TiesIgnoredRowsAndInvalidTargets) {
  // Row 0: all equal -> argmax is class 0 (target 0: right). Row 1: all equal, target 2:
  // wrong. Row 2: ignored. Loss of an all-equal row = log(classes).
  const std::int64_t classes = 4;
  const std::vector<float> logits = {1, 1, 1, 1, 0.5f, 0.5f, 0.5f, 0.5f, 9, 1, 2, 3};
  CeResult got = run_cross_entropy(logits, {0, 2, -1}, 3, classes, classes);
  EXPECT_EQ(got.counted, 2);
  EXPECT_EQ(got.correct, 1);
  EXPECT_NEAR(got.loss, std::log(4.0), 1e-6);
  // Every row ignored: loss 0, nothing counted, zero gradient.
  got = run_cross_entropy(logits, {-1, -1, -1}, 3, classes, classes);
  EXPECT_EQ(got.counted, 0);
  EXPECT_EQ(got.correct, 0);
  EXPECT_EQ(got.loss, 0.f);
  for (float g : got.dlogits) EXPECT_EQ(g, 0.f);
  // A target outside [-1, classes) must show as NaN, never as a plausible number.
  got = run_cross_entropy(logits, {0, 4, 1}, 3, classes, classes);
  EXPECT_TRUE(std::isnan(got.loss)) << got.loss;
  for (std::int64_t j = 0; j < classes; ++j) EXPECT_TRUE(std::isnan(got.dlogits[static_cast<std::size_t>(classes + j)]));
  // Loss only (no gradient buffer): the same loss.
  const CeResult with = run_cross_entropy(logits, {0, 2, 3}, 3, classes, classes, true);
  const CeResult without = run_cross_entropy(logits, {0, 2, 3}, 3, classes, classes, false);
  EXPECT_EQ(with.loss, without.loss);
  EXPECT_EQ(with.correct, without.correct);
}

TEST_F(CrossEntropyTest, RepeatedRunsAreBitIdentical) {
  const std::int64_t rows = 4096, classes = 32;
  const auto logits = course::random_vector(static_cast<std::size_t>(rows * classes), seed(), -3.f, 3.f);
  const auto targets = random_ids(static_cast<std::size_t>(rows), classes, seed() + 1);
  const CeResult a = run_cross_entropy(logits, targets, rows, classes, classes);
  const CeResult b = run_cross_entropy(logits, targets, rows, classes, classes);
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0) << a.loss << " vs " << b.loss;
  EXPECT_TRUE(same_bits(a.dlogits, b.dlogits));
}

// ----------------------------------------------------------------------- Adam -----

class AdamTest : public GpuTest {};

TEST_F(AdamTest, FirstStepsMatchAHandComputedUpdate) {
  // Step 1 from zero moments: m = (1 - b1) g, v = (1 - b2) g^2, so after bias correction
  // m^ = g and v^ = g^2: the update is lr * g / (|g| + eps) -- about lr * sign(g) for every
  // parameter, whatever the scale of its gradient (Adam's hallmark).
  const std::int64_t n = 1000 + 3;
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  auto p0 = course::random_vector(static_cast<std::size_t>(n), seed());
  auto g1 = course::random_vector(static_cast<std::size_t>(n), seed() + 1);
  auto g2 = course::random_vector(static_cast<std::size_t>(n), seed() + 2);
  for (std::size_t i = 0; i < g1.size(); i += 7) g1[i] *= 1e-3f;  // tiny gradients: same step size
  DeviceBuffer<float> d_p(p0), d_g(g1), d_m(static_cast<std::size_t>(n)), d_v(static_cast<std::size_t>(n));
  COURSE_CUDA_CHECK(cudaMemset(d_m.data(), 0, d_m.bytes()));
  COURSE_CUDA_CHECK(cudaMemset(d_v.data(), 0, d_v.bytes()));
  m04::AdamArgs a;
  a.params = d_p.data();
  a.grads = d_g.data();
  a.m = d_m.data();
  a.v = d_v.data();
  a.n = n;
  a.lr = lr;
  a.beta1 = b1;
  a.beta2 = b2;
  a.eps = eps;
  a.step = 1;
  m04::adam_update(a);
  const auto p1 = d_p.download();
  for (std::size_t i = 0; i < p1.size(); ++i) {
    const double g = g1[i];
    const double want = p0[i] - lr * g / (std::fabs(g) + eps);
    ASSERT_NEAR(p1[i], want, 1e-6) << "parameter " << i << " after step 1 (g = " << g << ")";
  }
  // Step 2 with a new gradient, by the formulas in double.
  d_g.upload(g2);
  a.step = 2;
  m04::adam_update(a);
  const auto p2 = d_p.download(), m2 = d_m.download(), v2 = d_v.download();
  for (std::size_t i = 0; i < p2.size(); ++i) {
    const double m = b1 * (1.0 - b1) * g1[i] + (1.0 - b1) * g2[i];
    const double v = b2 * (1.0 - b2) * g1[i] * g1[i] + (1.0 - b2) * g2[i] * g2[i];
    const double mhat = m / (1.0 - std::pow(static_cast<double>(b1), 2)),
                 vhat = v / (1.0 - std::pow(static_cast<double>(b2), 2));
    const double want = static_cast<double>(p1[i]) - lr * mhat / (std::sqrt(vhat) + eps);
    ASSERT_NEAR(m2[i], m, 1e-6 * std::max(1.0, std::fabs(m))) << "m[" << i << "]";
    ASSERT_NEAR(v2[i], v, 1e-6 * std::max(1e-3, std::fabs(v))) << "v[" << i << "]";
    ASSERT_NEAR(p2[i], want, 2e-6) << "parameter " << i << " after step 2";
  }
}

// ------------------------------------------------------------ bad arguments -----
// Validation runs before any CUDA call, so these need no GPU: fake, aligned host addresses.

alignas(16) float g_fake[16384];
std::int32_t* fake_ints(std::size_t at) { return reinterpret_cast<std::int32_t*>(g_fake + at); }

TEST(TrainingOpsArgsTest, EmbeddingRejectsBadArgumentsByName) {
  const auto good = [] {
    m04::EmbeddingArgs a;
    a.ids = fake_ints(0);  // 64 ids
    a.token_table = g_fake + 64;      // 10 x 8
    a.position_table = g_fake + 256;  // 16 x 8
    a.out = g_fake + 1024;            // 64 x 8
    a.batch = 4;
    a.seq = 16;
    a.vocab = 10;
    a.dim = 8;
    return a;
  };
  const auto run = [](const m04::EmbeddingArgs& a) { m04::embedding_forward(a); };
  course::testing::expect_each_rejected<m04::EmbeddingArgs>(good, run, {
      {[](m04::EmbeddingArgs& a) { a.batch = 0; }, "'batch' = 0"},
      {[](m04::EmbeddingArgs& a) { a.dim = -3; }, "'dim' = -3"},
      {[](m04::EmbeddingArgs& a) { a.vocab = std::int64_t{1} << 31; }, "'vocab' = 2147483648"},
      {[](m04::EmbeddingArgs& a) { a.ids = nullptr; }, "'ids' = nullptr"},
      {[](m04::EmbeddingArgs& a) { a.token_table = nullptr; }, "'token_table' = nullptr"},
      {[](m04::EmbeddingArgs& a) { a.out = g_fake + 300; }, "'out'"},  // inside the position table
      {[](m04::EmbeddingArgs& a) {
         a.out = reinterpret_cast<float*>(reinterpret_cast<char*>(g_fake + 1024) + 2);
       },
       "'out'"},
      {[](m04::EmbeddingArgs& a) { a.batch = 1 << 16; a.seq = 1 << 12; }, "'batch * seq * dim'"},
  });

  const auto good_bwd = [] {
    m04::EmbeddingBackwardArgs b;
    b.ids = fake_ints(0);
    b.dout = g_fake + 64;            // 64 x 8 = 512
    b.token_grad = g_fake + 1024;    // 10 x 8
    b.position_grad = g_fake + 2048; // 16 x 8
    b.batch = 4;
    b.seq = 16;
    b.vocab = 10;
    b.dim = 8;
    b.workspace = g_fake + 4096;
    b.workspace_bytes = m04::embedding_backward_workspace_bytes(4, 16, 10, 8);
    return b;
  };
  EXPECT_NO_THROW(m04::validate_embedding_backward_args(good_bwd()));
  EXPECT_GT(m04::embedding_backward_workspace_bytes(4, 16, 10, 8), std::size_t{0});
  EXPECT_LE(m04::embedding_backward_workspace_bytes(4, 16, 10, 8), sizeof(g_fake) - 4096 * sizeof(float));
  EXPECT_EQ(m04::embedding_backward_workspace_bytes(0, 16, 10, 8), std::size_t{0});
  const auto run_bwd = [](const m04::EmbeddingBackwardArgs& b) { m04::embedding_backward(b); };
  course::testing::expect_each_rejected<m04::EmbeddingBackwardArgs>(good_bwd, run_bwd, {
      {[](m04::EmbeddingBackwardArgs& b) {
         b.token_grad = nullptr;
         b.position_grad = nullptr;
       },
       "'token_grad' = nullptr"},
      {[](m04::EmbeddingBackwardArgs& b) { b.dout = nullptr; }, "'dout' = nullptr"},
      {[](m04::EmbeddingBackwardArgs& b) { b.token_grad = g_fake + 100; }, "'token_grad'"},  // inside dout
      {[](m04::EmbeddingBackwardArgs& b) { b.position_grad = g_fake + 1030; }, "'position_grad'"},  // inside token_grad
      {[](m04::EmbeddingBackwardArgs& b) { b.seq = 0; }, "'seq' = 0"},
      {[](m04::EmbeddingBackwardArgs& b) { b.workspace = nullptr; }, "'workspace' = nullptr"},
      {[](m04::EmbeddingBackwardArgs& b) { b.workspace_bytes = 16; }, "'workspace_bytes' = 16"},
      {[](m04::EmbeddingBackwardArgs& b) { b.workspace = g_fake + 4097; }, "'workspace'"},  // not 16-byte aligned
      {[](m04::EmbeddingBackwardArgs& b) { b.workspace = g_fake + 2000; }, "'workspace'"},  // overlaps position_grad
  });
  // Only position_grad: no workspace needed.
  m04::EmbeddingBackwardArgs only_pos = good_bwd();
  only_pos.token_grad = nullptr;
  only_pos.workspace = nullptr;
  only_pos.workspace_bytes = 0;
  EXPECT_NO_THROW(m04::validate_embedding_backward_args(only_pos));
}

TEST(TrainingOpsArgsTest, BiasAddRejectsBadArgumentsByName) {
  const auto good = [] {
    m04::BiasAddArgs a;
    a.y = g_fake;               // 16 x 32
    a.bias = g_fake + 1024;     // 32
    a.residual = g_fake + 2048; // 16 x 32
    a.rows = 16;
    a.cols = 32;
    return a;
  };
  const auto run = [](const m04::BiasAddArgs& a) { m04::bias_add(a); };
  course::testing::expect_each_rejected<m04::BiasAddArgs>(good, run, {
      {[](m04::BiasAddArgs& a) { a.rows = 0; }, "'rows' = 0"},
      {[](m04::BiasAddArgs& a) { a.cols = -1; }, "'cols' = -1"},
      {[](m04::BiasAddArgs& a) { a.ldy = 31; }, "'ldy' = 31"},
      {[](m04::BiasAddArgs& a) { a.ldr = 5; }, "'ldr' = 5"},
      {[](m04::BiasAddArgs& a) { a.y = nullptr; }, "'y' = nullptr"},
      {[](m04::BiasAddArgs& a) { a.bias = nullptr; a.residual = nullptr; }, "'bias' = nullptr"},
      {[](m04::BiasAddArgs& a) { a.residual = g_fake + 100; }, "'residual'"},  // overlaps y
      {[](m04::BiasAddArgs& a) { a.bias = g_fake + 10; }, "'bias'"},  // overlaps y
  });
}

TEST(TrainingOpsArgsTest, CrossEntropyRejectsBadArgumentsByName) {
  const std::int64_t rows = 64, classes = 16;
  const auto good = [&] {
    m04::CrossEntropyArgs a;
    a.logits = g_fake;             // 64 x 16 = 1024
    a.dlogits = g_fake + 1024;     // 1024
    a.targets = fake_ints(2048);   // 64
    a.loss = g_fake + 2112;
    a.correct = fake_ints(2116);
    a.counted = fake_ints(2120);
    a.workspace = g_fake + 4096;
    a.workspace_bytes = m04::cross_entropy_workspace_bytes(rows);
    a.rows = rows;
    a.classes = classes;
    return a;
  };
  const auto run = [](const m04::CrossEntropyArgs& a) { m04::cross_entropy(a); };
  EXPECT_NO_THROW(m04::validate_cross_entropy_args(good()));
  course::testing::expect_each_rejected<m04::CrossEntropyArgs>(good, run, {
      {[](m04::CrossEntropyArgs& a) { a.rows = 0; }, "'rows' = 0"},
      {[](m04::CrossEntropyArgs& a) { a.classes = 0; }, "'classes' = 0"},
      {[](m04::CrossEntropyArgs& a) { a.ld = 8; }, "'ld' = 8"},
      {[](m04::CrossEntropyArgs& a) { a.logits = nullptr; }, "'logits' = nullptr"},
      {[](m04::CrossEntropyArgs& a) { a.targets = nullptr; }, "'targets' = nullptr"},
      {[](m04::CrossEntropyArgs& a) { a.loss = nullptr; }, "'loss' = nullptr"},
      {[](m04::CrossEntropyArgs& a) { a.workspace = nullptr; }, "'workspace' = nullptr"},
      {[](m04::CrossEntropyArgs& a) { a.workspace_bytes = 16; }, "'workspace_bytes' = 16"},
      {[](m04::CrossEntropyArgs& a) { a.dlogits = g_fake + 512; }, "'dlogits'"},  // overlaps logits
      {[](m04::CrossEntropyArgs& a) { a.loss = g_fake + 3; }, "'loss'"},  // inside logits
      {[](m04::CrossEntropyArgs& a) { a.workspace = g_fake + 1024; }, "overlaps"},  // on top of dlogits
  });
}

TEST(TrainingOpsArgsTest, AdamRejectsBadArgumentsByName) {
  const auto good = [] {
    m04::AdamArgs a;
    a.params = g_fake;
    a.grads = g_fake + 1024;
    a.m = g_fake + 2048;
    a.v = g_fake + 3072;
    a.n = 1000;
    a.step = 1;
    return a;
  };
  const auto run = [](const m04::AdamArgs& a) { m04::adam_update(a); };
  EXPECT_NO_THROW(m04::validate_adam_args(good()));
  course::testing::expect_each_rejected<m04::AdamArgs>(good, run, {
      {[](m04::AdamArgs& a) { a.n = 0; }, "'n' = 0"},
      {[](m04::AdamArgs& a) { a.step = 0; }, "'step' = 0"},
      {[](m04::AdamArgs& a) { a.lr = 0.f; }, "'lr' = 0"},
      {[](m04::AdamArgs& a) { a.lr = std::numeric_limits<float>::quiet_NaN(); }, "'lr' = nan"},
      {[](m04::AdamArgs& a) { a.beta1 = 1.f; }, "'beta1' = 1"},
      {[](m04::AdamArgs& a) { a.beta2 = -0.5f; }, "'beta2' = -0.5"},
      {[](m04::AdamArgs& a) { a.eps = 0.f; }, "'eps' = 0"},
      {[](m04::AdamArgs& a) { a.m = nullptr; }, "'m' = nullptr"},
      {[](m04::AdamArgs& a) { a.grads = g_fake + 500; }, "'grads'"},  // overlaps params
      {[](m04::AdamArgs& a) { a.v = g_fake + 2500; }, "'v'"},  // overlaps m
  });
}

}  // namespace
