// m04_train: a small transformer layer trained end to end on the GPU with the course's own
// kernels only -- module 2's GEMMs, module 3's fused attention forward, this module's
// linear and attention backward passes, and the support ops of module04/training_ops.hpp
// (embedding, bias add, cross-entropy, Adam). No cuBLAS, no framework.
//
// The model: learned token and position embeddings (d_model 64), ONE causal multi-head
// self-attention layer (4 heads of 16) with a fused QKV projection, an output projection
// with a residual connection, and a projection to the vocabulary; softmax cross-entropy.
// The task needs attention: "copy" asks at every position i >= k for the token k places
// back (y_i = x_{i-k}), which only a head that attends from i to i-k can answer; "first"
// asks for the first token of the sequence. Vocabulary 32, sequences of 64, batches of 64.
// Before training, the whole layer's gradient is checked once against central differences
// of the loss computed in double on the CPU. Training stops when a fresh validation batch
// reaches the target accuracy (99%; the double-precision CPU model with the same seeds gets
// there in 90-100 steps of batch 64, so well under a second of GPU time is expected).
//
// Every step is deterministic (flash_deterministic backward, no atomics anywhere): the same
// seed gives the same loss curve bit for bit; the hash of the final parameters printed at
// the end lets a reader check it (--check-repro trains twice and compares).
//
// Without a GPU it says so and trains the same model on the CPU references (course::ref,
// double precision) with batches of 8, for at most 200 steps (about 150 reach the target);
// --cpu does the same with a GPU present.
//
//   m04_train                               copy task (k = 3), seed 1, until 99% accuracy
//   m04_train --seed 7 --check-repro --out docs/data/m04_training_curve.csv
//   m04_train --task first --lr 0.001
//   m04_train --cpu --steps 30 --batch 16   the CPU reference model
#include "course/demo.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "module02/batched_gemm.hpp"
#include "module03/attention.hpp"
#include "module04/attention_backward.hpp"
#include "module04/linear_backward.hpp"
#include "module04/training_ops.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using course::DeviceBuffer;
using Tensor = course::HostTensor<double>;

// =====================================================================================
// Configuration, parameters, data

struct Config {
  std::string task = "copy";  ///< copy | first
  int offset = 3;             ///< copy: y_i = x_{i - offset}
  std::int64_t vocab = 32, seq = 64, dim = 64, heads = 4;
  std::int64_t batch = 0;     ///< sequences per step (0: 64 on the GPU, 8 on the CPU)
  int steps = 0;              ///< most training steps (0: 2000 on the GPU, 200 on the CPU)
  float lr = 3e-3f;
  float beta1 = 0.9f, beta2 = 0.98f, eps = 1e-8f;
  std::uint64_t seed = 1;
  double target = 0.99;  ///< validation accuracy that ends training
  int eval_every = 10;   ///< steps between validation batches (and log lines)
  std::string out;       ///< CSV of the curve; empty: not written
  bool cpu = false;      ///< train on the CPU references even with a GPU
  bool check_repro = false;
  std::int64_t check_batch = 4;  ///< sequences in the gradient check's batch

  std::int64_t head_dim() const { return dim / heads; }
};

/// One parameter tensor: rows x cols floats at `offset` in the flat parameter vector.
struct TensorInfo {
  const char* name;
  std::int64_t rows, cols, offset;
  std::int64_t size() const { return rows * cols; }
};

/// All parameters live in one flat vector (one device buffer, one Adam launch, one hash);
/// every tensor starts at a multiple of 4 floats, so each is 16-byte aligned.
struct Layout {
  TensorInfo tok, pos, wqkv, bqkv, wo, bo, wout, bout;
  std::int64_t total = 0;

  explicit Layout(const Config& c) {
    std::int64_t at = 0;
    const auto add = [&at](const char* name, std::int64_t rows, std::int64_t cols) {
      const TensorInfo t{name, rows, cols, at};
      at += (rows * cols + 3) / 4 * 4;
      return t;
    };
    tok = add("token embedding", c.vocab, c.dim);
    pos = add("position embedding", c.seq, c.dim);
    wqkv = add("W_qkv", c.dim, 3 * c.dim);
    bqkv = add("b_qkv", 1, 3 * c.dim);
    wo = add("W_o", c.dim, c.dim);
    bo = add("b_o", 1, c.dim);
    wout = add("W_vocab", c.dim, c.vocab);
    bout = add("b_vocab", 1, c.vocab);
    total = at;
  }
  std::vector<TensorInfo> tensors() const { return {tok, pos, wqkv, bqkv, wo, bo, wout, bout}; }
};

/// Uniform in [0, 1) from the top 24 bits of one draw: the same numbers with every
/// standard library (std::uniform_real_distribution's algorithm is not specified).
float uniform01(std::mt19937_64& gen) { return static_cast<float>(gen() >> 40) * 0x1p-24f; }

/// Embeddings uniform in [-1, 1); weights uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)); biases 0.
std::vector<float> init_parameters(const Config& c, const Layout& L) {
  std::vector<float> p(static_cast<std::size_t>(L.total), 0.f);
  std::mt19937_64 gen(c.seed);
  const auto fill = [&](const TensorInfo& t, float bound) {
    for (std::int64_t i = 0; i < t.size(); ++i) p[static_cast<std::size_t>(t.offset + i)] = bound * (2.f * uniform01(gen) - 1.f);
  };
  const float w = 1.f / std::sqrt(static_cast<float>(c.dim));
  fill(L.tok, 1.f);
  fill(L.pos, 1.f);
  fill(L.wqkv, w);
  fill(L.wo, w);
  fill(L.wout, w);
  return p;
}

/// Token ids and targets of `batch` sequences, row r = b*seq + i; target -1 = not scored.
struct Batch {
  std::int64_t size = 0;
  std::vector<std::int32_t> ids, targets;
};

Batch make_batch(const Config& c, std::int64_t batch, std::mt19937_64& gen) {
  Batch b;
  b.size = batch;
  b.ids.resize(static_cast<std::size_t>(batch * c.seq));
  b.targets.assign(b.ids.size(), -1);
  for (auto& id : b.ids) id = static_cast<std::int32_t>(gen() % static_cast<std::uint64_t>(c.vocab));
  for (std::int64_t s = 0; s < batch; ++s) {
    const std::size_t row0 = static_cast<std::size_t>(s * c.seq);
    for (std::int64_t i = 0; i < c.seq; ++i) {
      std::int32_t& t = b.targets[row0 + static_cast<std::size_t>(i)];
      if (c.task == "copy" && i >= c.offset) t = b.ids[row0 + static_cast<std::size_t>(i - c.offset)];
      if (c.task == "first" && i >= 1) t = b.ids[row0];
    }
  }
  return b;
}

/// A step's loss and accuracy over its scored positions.
struct Stats {
  double loss = 0.0;
  std::int64_t correct = 0, counted = 0;
  double accuracy() const { return counted > 0 ? static_cast<double>(correct) / static_cast<double>(counted) : 0.0; }
};

/// FNV-1a over the bytes of the parameters: equal hashes = bit-identical parameters.
std::uint64_t hash_parameters(const std::vector<float>& p) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(p.data());
  for (std::size_t i = 0; i < p.size() * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

// =====================================================================================
// The layer on the CPU, in double, from the course's references (course::ref)

/// rows x cols matrix copied out of the flat parameters.
Tensor matrix(const std::vector<double>& p, const TensorInfo& t) {
  Tensor m({t.rows, t.cols});
  std::copy_n(p.begin() + t.offset, t.size(), m.storage().begin());
  return m;
}

/// y[r, :] += bias[:] for a contiguous rows x cols y.
void add_bias(Tensor& y, const std::vector<double>& p, const TensorInfo& bias) {
  const std::int64_t rows = y.dim(0), cols = y.dim(1);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) y.data()[r * cols + c] += p[static_cast<std::size_t>(bias.offset + c)];
}

/// Column sums of a contiguous rows x cols matrix into grad[t.offset ...].
void column_sums(const Tensor& m, const TensorInfo& t, std::vector<double>& grad) {
  const std::int64_t rows = m.dim(0), cols = m.dim(1);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) grad[static_cast<std::size_t>(t.offset + c)] += m.data()[r * cols + c];
}

void store(const Tensor& m, const TensorInfo& t, std::vector<double>& grad) {
  std::copy_n(m.storage().begin(), t.size(), grad.begin() + t.offset);
}

/// Everything the CPU backward pass reads from the forward pass.
struct CpuForward {
  Tensor x, qkv, q, k, v, o, h, logits, dlogits;
  Stats stats;
};

class CpuLayer {
 public:
  CpuLayer(const Config& c, const Layout& L) : c_(c), L_(L) {}

  CpuForward forward(const std::vector<double>& p, const Batch& b) const {
    const std::int64_t B = b.size, N = c_.seq, D = c_.dim, H = c_.heads, dh = c_.head_dim(), V = c_.vocab;
    const std::int64_t rows = B * N;
    CpuForward f;
    // Embeddings.
    f.x = Tensor({rows, D});
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < D; ++c)
        f.x.data()[r * D + c] = p[static_cast<std::size_t>(L_.tok.offset + b.ids[static_cast<std::size_t>(r)] * D + c)] +
                                p[static_cast<std::size_t>(L_.pos.offset + (r % N) * D + c)];
    // Fused QKV projection; Q, K, V are column blocks of its rows, one head per dh columns.
    f.qkv = course::ref::matmul(f.x, matrix(p, L_.wqkv));
    add_bias(f.qkv, p, L_.bqkv);
    f.q = Tensor({B, H, N, dh});
    f.k = Tensor({B, H, N, dh});
    f.v = Tensor({B, H, N, dh});
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t c = 0; c < dh; ++c) {
          const std::int64_t at = ((r / N * H + h) * N + r % N) * dh + c;
          const double* row = f.qkv.data() + r * 3 * D + h * dh + c;
          f.q.data()[at] = row[0];
          f.k.data()[at] = row[D];
          f.v.data()[at] = row[2 * D];
        }
    course::ref::AttentionOptions opts;
    opts.causal = true;
    const Tensor att = course::ref::attention_forward(f.q, f.k, f.v, opts).out;
    f.o = Tensor({rows, D});  // heads side by side again: [B*N, H*dh]
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t c = 0; c < dh; ++c)
          f.o.data()[r * D + h * dh + c] = att.data()[((r / N * H + h) * N + r % N) * dh + c];
    // Output projection with the residual, then the vocabulary projection.
    f.h = course::ref::matmul(f.o, matrix(p, L_.wo));
    add_bias(f.h, p, L_.bo);
    for (std::int64_t e = 0; e < rows * D; ++e) f.h.data()[e] += f.x.data()[e];
    f.logits = course::ref::matmul(f.h, matrix(p, L_.wout));
    add_bias(f.logits, p, L_.bout);
    // Cross-entropy over the scored rows, and its gradient (p - onehot) / count.
    f.dlogits = Tensor({rows, V});
    std::int64_t count = 0;
    for (std::int32_t t : b.targets) count += t >= 0 ? 1 : 0;
    double sum = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int32_t t = b.targets[static_cast<std::size_t>(r)];
      if (t < 0) continue;
      const double* z = f.logits.data() + r * V;
      const std::int64_t arg = std::max_element(z, z + V) - z;
      double s = 0.0;
      for (std::int64_t j = 0; j < V; ++j) s += std::exp(z[j] - z[arg]);
      sum += z[arg] + std::log(s) - z[t];
      f.stats.correct += arg == t ? 1 : 0;
      for (std::int64_t j = 0; j < V; ++j)
        f.dlogits.data()[r * V + j] = (std::exp(z[j] - z[arg]) / s - (j == t ? 1.0 : 0.0)) / static_cast<double>(count);
    }
    f.stats.counted = count;
    f.stats.loss = count > 0 ? sum / static_cast<double>(count) : 0.0;
    return f;
  }

  /// dLoss/dparameters by the references' backward passes (matmul_backward, attention_backward).
  std::vector<double> backward(const std::vector<double>& p, const Batch& b, const CpuForward& f) const {
    const std::int64_t B = b.size, N = c_.seq, D = c_.dim, H = c_.heads, dh = c_.head_dim();
    const std::int64_t rows = B * N;
    std::vector<double> g(static_cast<std::size_t>(L_.total), 0.0);
    const auto out = course::ref::matmul_backward(f.h, matrix(p, L_.wout), f.dlogits);
    store(out.db, L_.wout, g);
    column_sums(f.dlogits, L_.bout, g);
    const Tensor& d_h = out.da;  // dL/dh: reaches the attention output AND (residual) x
    const auto proj = course::ref::matmul_backward(f.o, matrix(p, L_.wo), d_h);
    store(proj.db, L_.wo, g);
    column_sums(d_h, L_.bo, g);
    Tensor dout({B, H, N, dh});
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t c = 0; c < dh; ++c)
          dout.data()[((r / N * H + h) * N + r % N) * dh + c] = proj.da.data()[r * D + h * dh + c];
    course::ref::AttentionOptions opts;
    opts.causal = true;
    const auto att = course::ref::attention_backward(f.q, f.k, f.v, dout, opts);
    Tensor dqkv({rows, 3 * D});
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t c = 0; c < dh; ++c) {
          const std::int64_t at = ((r / N * H + h) * N + r % N) * dh + c;
          double* row = dqkv.data() + r * 3 * D + h * dh + c;
          row[0] = att.dq.data()[at];
          row[D] = att.dk.data()[at];
          row[2 * D] = att.dv.data()[at];
        }
    const auto qkv = course::ref::matmul_backward(f.x, matrix(p, L_.wqkv), dqkv);
    store(qkv.db, L_.wqkv, g);
    column_sums(dqkv, L_.bqkv, g);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < D; ++c) {
        const double dx = qkv.da.data()[r * D + c] + d_h.data()[r * D + c];
        g[static_cast<std::size_t>(L_.tok.offset + b.ids[static_cast<std::size_t>(r)] * D + c)] += dx;
        g[static_cast<std::size_t>(L_.pos.offset + (r % N) * D + c)] += dx;
      }
    return g;
  }

 private:
  const Config& c_;
  const Layout& L_;
};

// =====================================================================================
// The layer on the GPU, with the course's kernels

/// The fp32 GEMM step of module 2 every forward projection uses (deterministic: no split-K).
constexpr course::m02::BgemmStep kGemmStep = course::m02::BgemmStep::warp_tiled;

class GpuLayer {
 public:
  GpuLayer(const Config& c, const Layout& L, std::int64_t batch)
      : c_(c), L_(L), B_(batch), rows_(batch * c.seq),
        ids_(static_cast<std::size_t>(rows_)), targets_(static_cast<std::size_t>(rows_)),
        x_(n(c.dim)), qkv_(n(3 * c.dim)), o_(n(c.dim)), lse_(static_cast<std::size_t>(batch * c.heads * c.seq)),
        h_(n(c.dim)), logits_(n(c.vocab)), dlogits_(n(c.vocab)), dh_(n(c.dim)), do_(n(c.dim)),
        dqkv_(n(3 * c.dim)), dx_(n(c.dim)),
        attn_ws_(course::m04::attention_backward_workspace_bytes(course::m04::AttentionBackwardStep::flash_deterministic,
                                                                  batch, c.heads, c.seq, c.seq) / sizeof(float) + 1),
        ce_ws_((course::m04::cross_entropy_workspace_bytes(rows_) + 15) / 16),
        eb_ws_((course::m04::embedding_backward_workspace_bytes(batch, c.seq, c.vocab, c.dim) + 15) / 16),
        loss_(1), correct_(1), counted_(1) {}

  void upload(const Batch& b) {
    course::require_arg(b.size == B_, "GpuLayer::upload", "batch.size", b.size, "must equal the layer's batch");
    ids_.upload(b.ids);
    targets_.upload(b.targets);
  }

  /// Embeddings -> QKV -> attention -> output projection + residual -> logits -> loss
  /// (and dL/dlogits when `with_grad`).
  void forward(const float* p, bool with_grad) {
    namespace m04 = course::m04;
    const std::int64_t D = c_.dim;
    m04::EmbeddingArgs e;
    e.ids = ids_.data();
    e.token_table = p + L_.tok.offset;
    e.position_table = p + L_.pos.offset;
    e.out = x_.data();
    e.batch = B_;
    e.seq = c_.seq;
    e.vocab = c_.vocab;
    e.dim = D;
    m04::embedding_forward(e);
    linear(x_.data(), p + L_.wqkv.offset, p + L_.bqkv.offset, nullptr, qkv_.data(), D, 3 * D);
    course::solution::attention(course::m03::AttentionStep::fused, attention_args());
    linear(o_.data(), p + L_.wo.offset, p + L_.bo.offset, x_.data(), h_.data(), D, D);  // + residual x
    linear(h_.data(), p + L_.wout.offset, p + L_.bout.offset, nullptr, logits_.data(), D, c_.vocab);
    m04::CrossEntropyArgs ce;
    ce.logits = logits_.data();
    ce.targets = targets_.data();
    ce.dlogits = with_grad ? dlogits_.data() : nullptr;
    ce.loss = loss_.data();
    ce.correct = correct_.data();
    ce.counted = counted_.data();
    ce.rows = rows_;
    ce.classes = c_.vocab;
    ce.workspace = ce_ws_.data();
    ce.workspace_bytes = ce_ws_.bytes();
    m04::cross_entropy(ce);
  }

  /// dL/dparameters into `g` (same layout as the parameters); every element is overwritten.
  void backward(const float* p, float* g) {
    namespace m04 = course::m04;
    const std::int64_t D = c_.dim;
    const auto step = m04::BiasGradStep::block_column_strip;
    // logits = h W_vocab + b_vocab
    course::solution::linear_backward(step, m04::make_linear_backward_args(h_.data(), p + L_.wout.offset, dlogits_.data(),
                                                                           dh_.data(), g + L_.wout.offset,
                                                                           g + L_.bout.offset, rows_, D, c_.vocab));
    // h = o W_o + b_o + x: dL/dh flows to the attention output here and to x below.
    course::solution::linear_backward(step, m04::make_linear_backward_args(o_.data(), p + L_.wo.offset, dh_.data(),
                                                                           do_.data(), g + L_.wo.offset,
                                                                           g + L_.bo.offset, rows_, D, D));
    // Attention: dQ, dK, dV land in the column blocks of dQKV, as Q, K, V were read.
    m04::AttentionBackwardArgs a;
    const auto fwd = attention_args();
    a.q = fwd.q;
    a.k = fwd.k;
    a.v = fwd.v;
    a.o = fwd.o;
    a.dout = do_.data();
    a.lse = lse_.data();
    a.dq = dqkv_.data();
    a.dk = dqkv_.data() + D;
    a.dv = dqkv_.data() + 2 * D;
    a.batch = B_;
    a.heads = a.kv_heads = c_.heads;
    a.seq_q = a.seq_k = c_.seq;
    a.head_dim = c_.head_dim();
    a.q_strides = a.k_strides = a.v_strides = fwd.q_strides;
    a.dq_strides = a.dk_strides = a.dv_strides = fwd.q_strides;
    a.o_strides = a.do_strides = fwd.o_strides;
    a.causal = true;
    a.workspace = attn_ws_.data();
    a.workspace_bytes = attn_ws_.bytes();
    course::solution::attention_backward(m04::AttentionBackwardStep::flash_deterministic, a);
    // qkv = x W_qkv + b_qkv
    course::solution::linear_backward(step, m04::make_linear_backward_args(x_.data(), p + L_.wqkv.offset, dqkv_.data(),
                                                                           dx_.data(), g + L_.wqkv.offset,
                                                                           g + L_.bqkv.offset, rows_, D, 3 * D));
    // dL/dx = (through QKV) + (through the residual)
    m04::BiasAddArgs add;
    add.y = dx_.data();
    add.residual = dh_.data();
    add.rows = rows_;
    add.cols = D;
    m04::bias_add(add);
    m04::EmbeddingBackwardArgs eb;
    eb.ids = ids_.data();
    eb.dout = dx_.data();
    eb.token_grad = g + L_.tok.offset;
    eb.position_grad = g + L_.pos.offset;
    eb.batch = B_;
    eb.seq = c_.seq;
    eb.vocab = c_.vocab;
    eb.dim = D;
    eb.workspace = eb_ws_.data();
    eb.workspace_bytes = eb_ws_.bytes();
    m04::embedding_backward(eb);
  }

  /// The last forward's loss and counts (waits for the GPU).
  Stats stats() const {
    Stats s;
    s.loss = loss_.download()[0];
    s.correct = correct_.download()[0];
    s.counted = counted_.download()[0];
    return s;
  }

 private:
  std::size_t n(std::int64_t cols) const { return static_cast<std::size_t>(rows_ * cols); }

  /// y = x W + bias (+ residual): module 2's GEMM (batch 1, one head), then the bias add.
  void linear(const float* x, const float* w, const float* bias, const float* residual, float* y, std::int64_t K,
              std::int64_t N) {
    course::m02::StridedBatchedGemmArgs<float> g;
    g.a = x;
    g.b = w;
    g.c = y;
    g.M = rows_;
    g.N = N;
    g.K = K;
    g.stride_a_row = K;
    g.stride_b_row = N;
    g.stride_c_row = N;
    course::solution::batched_gemm_strided(kGemmStep, g);
    course::m04::BiasAddArgs add;
    add.y = y;
    add.bias = bias;
    add.residual = residual;
    add.rows = rows_;
    add.cols = N;
    course::m04::bias_add(add);
  }

  /// Q, K, V: [B, N, H, dh] views ("BNHD") into the QKV projection's rows of 3*D floats;
  /// O is written [B, N, H, dh] = the [B*N, D] matrix the output projection reads.
  course::m03::AttentionArgs attention_args() {
    const std::int64_t D = c_.dim, dh = c_.head_dim();
    course::m03::AttentionArgs a;
    a.q = qkv_.data();
    a.k = qkv_.data() + D;
    a.v = qkv_.data() + 2 * D;
    a.o = o_.data();
    a.lse = lse_.data();
    a.batch = B_;
    a.heads = a.kv_heads = c_.heads;
    a.seq_q = a.seq_k = c_.seq;
    a.head_dim = dh;
    a.q_strides = a.k_strides = a.v_strides = {c_.seq * 3 * D, dh, 3 * D};
    a.o_strides = {c_.seq * D, dh, D};
    a.causal = true;
    return a;
  }

  const Config& c_;
  const Layout& L_;
  std::int64_t B_, rows_;
  DeviceBuffer<std::int32_t> ids_, targets_;
  DeviceBuffer<float> x_, qkv_, o_, lse_, h_, logits_, dlogits_, dh_, do_, dqkv_, dx_, attn_ws_;
  DeviceBuffer<float4> ce_ws_, eb_ws_;  // float4: 16-byte aligned scratch
  DeviceBuffer<float> loss_;
  DeviceBuffer<std::int32_t> correct_, counted_;
};

// =====================================================================================
// Trainers: the same loop drives the GPU layer and the CPU reference layer

class Trainer {
 public:
  virtual ~Trainer() = default;
  /// Forward, backward and an Adam step (t counts from 1) on `b`; returns the step's stats.
  virtual Stats train_step(const Batch& b, int t) = 0;
  /// Forward only on `b`.
  virtual Stats evaluate(const Batch& b) = 0;
  virtual std::vector<float> parameters() = 0;
};

class GpuTrainer final : public Trainer {
 public:
  GpuTrainer(const Config& c, const Layout& L, const std::vector<float>& init)
      : c_(c), layer_(c, L, c.batch), p_(init), g_(init.size()), m_(init.size()), v_(init.size()) {
    // Zeros: the moments start at 0, and the padding between tensors (no kernel writes its
    // gradient) must stay 0 so that Adam leaves it -- and the parameter hash -- unchanged.
    COURSE_CUDA_CHECK(cudaMemset(g_.data(), 0, g_.bytes()));
    COURSE_CUDA_CHECK(cudaMemset(m_.data(), 0, m_.bytes()));
    COURSE_CUDA_CHECK(cudaMemset(v_.data(), 0, v_.bytes()));
  }
  Stats train_step(const Batch& b, int t) override {
    layer_.upload(b);
    layer_.forward(p_.data(), /*with_grad=*/true);
    layer_.backward(p_.data(), g_.data());
    course::m04::AdamArgs a;
    a.params = p_.data();
    a.grads = g_.data();
    a.m = m_.data();
    a.v = v_.data();
    a.n = static_cast<std::int64_t>(p_.size());
    a.lr = c_.lr;
    a.beta1 = c_.beta1;
    a.beta2 = c_.beta2;
    a.eps = c_.eps;
    a.step = t;
    course::m04::adam_update(a);
    return layer_.stats();
  }
  Stats evaluate(const Batch& b) override {
    layer_.upload(b);
    layer_.forward(p_.data(), /*with_grad=*/false);
    return layer_.stats();
  }
  std::vector<float> parameters() override { return p_.download(); }

 private:
  const Config& c_;
  GpuLayer layer_;
  DeviceBuffer<float> p_, g_, m_, v_;
};

class CpuTrainer final : public Trainer {
 public:
  CpuTrainer(const Config& c, const Layout& L, const std::vector<float>& init)
      : c_(c), layer_(c, L), p_(init.begin(), init.end()), m_(init.size(), 0.0), v_(init.size(), 0.0) {}
  Stats train_step(const Batch& b, int t) override {
    const CpuForward f = layer_.forward(p_, b);
    const std::vector<double> g = layer_.backward(p_, b, f);
    const double c1 = 1.0 - std::pow(static_cast<double>(c_.beta1), t), c2 = 1.0 - std::pow(static_cast<double>(c_.beta2), t);
    for (std::size_t i = 0; i < p_.size(); ++i) {
      m_[i] = c_.beta1 * m_[i] + (1.0 - c_.beta1) * g[i];
      v_[i] = c_.beta2 * v_[i] + (1.0 - c_.beta2) * g[i] * g[i];
      p_[i] -= c_.lr * (m_[i] / c1) / (std::sqrt(v_[i] / c2) + c_.eps);
    }
    return f.stats;
  }
  Stats evaluate(const Batch& b) override { return layer_.forward(p_, b).stats; }
  std::vector<float> parameters() override { return {p_.begin(), p_.end()}; }

 private:
  const Config& c_;
  CpuLayer layer_;
  std::vector<double> p_, m_, v_;
};

// =====================================================================================
// Gradient check: analytic gradients against central differences of the double CPU loss

/// Compares `analytic` (the whole gradient) with central differences of the CPU loss for a
/// few parameters per tensor: the largest |gradient| of each tensor and 4 drawn at random.
/// Relative error |a - n| / max(|a|, |n|, 1e-2 * max|a| of that tensor): gradients far below
/// their tensor's scale are judged against that scale (fp32 sums carry absolute error).
bool gradient_check(const Config& c, const Layout& L, const std::vector<float>& params, const Batch& b,
                    const std::vector<double>& analytic, const char* what) {
  constexpr double kBound = 1e-3, kStep = 1e-5;
  const CpuLayer cpu(c, L);
  std::vector<double> p(params.begin(), params.end());
  const double loss = cpu.forward(p, b).stats.loss;
  std::printf("   %s vs central differences (h = %.0e) of the loss in double on the CPU (course::ref),\n"
              "   batch of %lld sequences, loss %.6f; relative error |a - n| / max(|a|, |n|, 1e-2 max|a| of the tensor)\n",
              what, kStep, static_cast<long long>(b.size), loss);
  std::mt19937_64 gen(c.seed + 17);
  double worst = 0.0;
  for (const TensorInfo& t : L.tensors()) {
    std::vector<std::int64_t> picks;
    std::int64_t largest = 0;
    double scale = 0.0;
    for (std::int64_t i = 0; i < t.size(); ++i)
      if (std::fabs(analytic[static_cast<std::size_t>(t.offset + i)]) > scale) {
        scale = std::fabs(analytic[static_cast<std::size_t>(t.offset + i)]);
        largest = i;
      }
    picks.push_back(largest);
    while (picks.size() < std::min<std::size_t>(5, static_cast<std::size_t>(t.size()))) {  // 4 more, distinct
      const auto i = static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(t.size()));
      if (std::find(picks.begin(), picks.end(), i) == picks.end()) picks.push_back(i);
    }
    std::vector<double> x;
    for (std::int64_t i : picks) x.push_back(p[static_cast<std::size_t>(t.offset + i)]);
    const auto f = [&](const std::vector<double>& values) {
      std::vector<double> q = p;
      for (std::size_t k = 0; k < picks.size(); ++k) q[static_cast<std::size_t>(t.offset + picks[k])] = values[k];
      return cpu.forward(q, b).stats.loss;
    };
    const std::vector<double> numeric = course::ref::numerical_gradient(f, x, kStep);
    double tensor_worst = 0.0;
    for (std::size_t k = 0; k < picks.size(); ++k) {
      const double a = analytic[static_cast<std::size_t>(t.offset + picks[k])], nu = numeric[k];
      const double rel = std::fabs(a - nu) / std::max({std::fabs(a), std::fabs(nu), 1e-2 * scale, 1e-300});
      tensor_worst = std::max(tensor_worst, std::isfinite(rel) ? rel : INFINITY);
    }
    worst = std::max(worst, tensor_worst);
    std::printf("     %-20s %zu samples  max|grad| %.3e  max rel error %.2e\n", t.name, picks.size(), scale,
                tensor_worst);
  }
  const bool ok = worst <= kBound;
  std::printf("   max relative error %.2e (bound %.0e): %s\n", worst, kBound, ok ? "PASS" : "FAIL");
  return ok;
}

// =====================================================================================
// The training loop

struct CurvePoint {
  int step = 0;
  Stats train;
  bool evaluated = false;
  Stats val;
};

struct RunResult {
  std::vector<CurvePoint> curve;
  bool reached = false;
  double seconds = 0.0;
  std::uint64_t hash = 0;
};

/// Trains until a fresh validation batch reaches the target accuracy or `max_steps`;
/// `quiet` prints nothing (the reproducibility rerun).
RunResult train(const Config& c, Trainer& trainer, int max_steps, bool quiet) {
  std::mt19937_64 train_gen(c.seed * 2654435761u + 1), val_gen(c.seed * 2654435761u + 2);
  RunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  if (!quiet) std::printf("   %6s %10s %10s %10s %10s\n", "step", "loss", "accuracy", "val loss", "val acc");
  for (int t = 1; t <= max_steps; ++t) {
    const Batch b = make_batch(c, c.batch, train_gen);
    CurvePoint pt;
    pt.step = t;
    pt.train = trainer.train_step(b, t);
    if (t % c.eval_every == 0 || t == max_steps) {
      pt.evaluated = true;
      pt.val = trainer.evaluate(make_batch(c, c.batch, val_gen));
      if (!quiet)
        std::printf("   %6d %10.4f %9.2f%% %10.4f %9.2f%%\n", t, pt.train.loss, 100 * pt.train.accuracy(), pt.val.loss,
                    100 * pt.val.accuracy());
      r.reached = pt.val.accuracy() >= c.target;
    }
    r.curve.push_back(pt);
    if (r.reached) break;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.hash = hash_parameters(trainer.parameters());
  return r;
}

void write_curve(const std::string& path, const RunResult& r) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream f(path);
  course::require_arg(static_cast<bool>(f), "m04_train", "--out", path, "cannot be opened for writing");
  f << "step,loss,accuracy,val_loss,val_accuracy\n";
  char line[160];
  for (const CurvePoint& p : r.curve) {
    std::snprintf(line, sizeof line, "%d,%.9g,%.6f,", p.step, p.train.loss, p.train.accuracy());
    f << line;
    if (p.evaluated) {
      std::snprintf(line, sizeof line, "%.9g,%.6f", p.val.loss, p.val.accuracy());
      f << line;
    } else {
      f << ",";
    }
    f << "\n";
  }
  std::printf("   curve (%zu steps) written to %s\n", r.curve.size(), path.c_str());
}

bool same_curve(const RunResult& a, const RunResult& b) {
  if (a.curve.size() != b.curve.size()) return false;
  for (std::size_t i = 0; i < a.curve.size(); ++i)
    if (std::memcmp(&a.curve[i].train.loss, &b.curve[i].train.loss, sizeof(double)) != 0) return false;
  return a.hash == b.hash;
}

void describe(const Config& c, const Layout& L, bool gpu) {
  course::demo::section("model and task");
  std::printf("   task %s: ", c.task.c_str());
  if (c.task == "copy")
    std::printf("at every position i >= %d predict the token %d places back (y_i = x_{i-%d})\n", c.offset, c.offset,
                c.offset);
  else
    std::printf("at every position i >= 1 predict the first token of the sequence\n");
  std::printf("   vocabulary %lld tokens, sequences of %lld, batch %lld (%s), chance accuracy %.1f%%\n",
              static_cast<long long>(c.vocab), static_cast<long long>(c.seq), static_cast<long long>(c.batch),
              gpu ? "GPU" : "CPU", 100.0 / static_cast<double>(c.vocab));
  std::printf("   layer: token + position embeddings (d_model %lld) -> fused QKV projection -> causal attention,\n"
              "   %lld heads of %lld -> output projection + residual -> vocabulary projection -> cross-entropy\n",
              static_cast<long long>(c.dim), static_cast<long long>(c.heads), static_cast<long long>(c.head_dim()));
  std::printf("   %lld parameters; Adam lr %g, betas (%g, %g), eps %g; seed %llu\n", static_cast<long long>(L.total),
              static_cast<double>(c.lr), static_cast<double>(c.beta1), static_cast<double>(c.beta2),
              static_cast<double>(c.eps), static_cast<unsigned long long>(c.seed));
  if (gpu)
    std::printf("   kernels: module 2 GEMM (%s), module 3 attention (fused, lse), module 4 linear_backward\n"
                "   (block_column_strip) and attention_backward (flash_deterministic), training ops\n",
                course::m02::step_name(kGemmStep));
}

void run_demo(Config c, bool gpu) {
  const bool on_gpu = gpu && !c.cpu;
  if (!on_gpu) {
    if (c.steps == 0) c.steps = 200;  // the CPU references are slower: a small batch, fewer steps
    if (c.batch == 0) c.batch = 8;
  }
  if (c.steps == 0) c.steps = 2000;
  if (c.batch == 0) c.batch = 64;
  const Layout L(c);
  const std::vector<float> init = init_parameters(c, L);
  describe(c, L, on_gpu);

  // ---- gradient check, once, before training
  std::mt19937_64 check_gen(c.seed * 2654435761u + 3);
  const Batch check_batch = make_batch(c, c.check_batch, check_gen);
  bool check_ok = false;
  if (on_gpu) {
    course::demo::section("gradient check of the whole layer (GPU analytic gradients)");
    GpuLayer layer(c, L, c.check_batch);
    DeviceBuffer<float> p(init), g(init.size());
    g.poison();
    layer.upload(check_batch);
    layer.forward(p.data(), true);
    layer.backward(p.data(), g.data());
    const std::vector<float> grad = g.download();
    std::printf("   GPU loss on the check batch: %.6f\n", layer.stats().loss);
    check_ok = gradient_check(c, L, init, check_batch, {grad.begin(), grad.end()}, "GPU gradients");
  } else {
    course::demo::section("gradient check of the whole layer (CPU reference backward)");
    const CpuLayer cpu(c, L);
    const std::vector<double> p(init.begin(), init.end());
    check_ok = gradient_check(c, L, init, check_batch, cpu.backward(p, check_batch, cpu.forward(p, check_batch)),
                              "CPU reference gradients");
  }

  // ---- training
  course::demo::section(course::demo::format("training on the %s: at most %d steps, until %.0f%% validation accuracy",
                                             on_gpu ? "GPU" : "CPU references", c.steps, 100 * c.target));
  std::unique_ptr<Trainer> trainer;
  if (on_gpu) trainer = std::make_unique<GpuTrainer>(c, L, init);
  else trainer = std::make_unique<CpuTrainer>(c, L, init);
  const RunResult r = train(c, *trainer, c.steps, false);
  const CurvePoint& last = r.curve.back();
  if (r.reached)
    std::printf("   reached %.2f%% validation accuracy (target %.0f%%) after %d steps in %.2f s (%.2f ms per step)\n",
                100 * last.val.accuracy(), 100 * c.target, last.step, r.seconds, 1e3 * r.seconds / last.step);
  else
    std::printf("   stopped after %d steps in %.2f s: validation accuracy %.2f%% (target %.0f%% not reached)\n",
                last.step, r.seconds, 100 * last.val.accuracy(), 100 * c.target);
  std::printf("   loss %.4f at step 1 -> %.4f at step %d\n", r.curve.front().train.loss, last.train.loss, last.step);
  std::printf("   final parameters: hash %016llx (FNV-1a of their bytes; the same seed must print the same hash)\n",
              static_cast<unsigned long long>(r.hash));
  if (!c.out.empty()) write_curve(c.out, r);

  if (c.check_repro) {
    course::demo::section("reproducibility: the same seed, trained again");
    std::unique_ptr<Trainer> again;
    if (on_gpu) again = std::make_unique<GpuTrainer>(c, L, init);
    else again = std::make_unique<CpuTrainer>(c, L, init);
    Config same = c;
    same.target = 2.0;  // run exactly as many steps as the first run took
    const RunResult r2 = train(same, *again, last.step, true);
    const bool same_bits = same_curve(r, r2);
    std::printf("   second run: %d steps, hash %016llx: %s\n", r2.curve.back().step,
                static_cast<unsigned long long>(r2.hash),
                same_bits ? "identical loss curve and parameters, bit for bit" : "DIFFERENT (not reproducible)");
    if (!same_bits) throw course::Error("training is not reproducible: the two runs differ");
  }
  if (!check_ok) throw course::Error("the gradient check failed (see above)");
  if (on_gpu && !r.reached) throw course::Error("training did not reach the stated accuracy");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"m04_train: one causal self-attention layer trained end to end with the course's kernels"};
  Config c;
  app.add_option("--steps", c.steps, "most training steps (default: 2000 on the GPU, 200 on the CPU)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--seed", c.seed, "seed of the parameters and of every batch");
  app.add_option("--lr", c.lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--out", c.out, "write the curve (step, loss, accuracy, val_loss, val_accuracy) to this CSV file");
  app.add_option("--task", c.task, "copy: y_i = x_{i-k}; first: y_i = x_0")->check(CLI::IsMember({"copy", "first"}));
  app.add_option("--offset", c.offset, "k of the copy task (< --seq)")->check(CLI::Range(1, 1023));
  app.add_option("--vocab", c.vocab, "tokens in the vocabulary")->check(CLI::Range(2, 4096));
  app.add_option("--seq", c.seq, "tokens per sequence")->check(CLI::Range(2, 1024));
  app.add_option("--batch", c.batch, "sequences per step (default: 64 on the GPU, 8 on the CPU)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--target", c.target, "validation accuracy that ends training")->check(CLI::Range(0.0, 1.0));
  app.add_option("--eval-every", c.eval_every, "steps between validation batches and log lines")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--cpu", c.cpu, "train on the CPU references even when a GPU is present");
  app.add_flag("--check-repro", c.check_repro, "train a second time with the same seed and compare bit for bit");
  CLI11_PARSE(app, argc, argv);
  if (c.task == "copy" && c.offset >= c.seq) {
    std::fprintf(stderr, "--offset %d must be < --seq %lld: no position would have a target\n", c.offset,
                 static_cast<long long>(c.seq));
    return 2;
  }
  return course::demo::run([&](bool gpu) { run_demo(c, gpu); });
}
