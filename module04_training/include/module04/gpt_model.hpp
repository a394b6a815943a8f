#pragma once
/// @file gpt_model.hpp
/// @brief The host-side parts of module 4's GPT trainer (demos/gpt.cpp) that need no GPU, so
/// that a CPU test can check them: the model configuration, the parameter layout (the order
/// in which the trainer stores, dumps and checkpoints its tensors), the learning-rate
/// schedule, the batch sampler (a stateless hash that the GPU kernel, the CPU test and the
/// PyTorch twin scripts/gpt_twin.py all evaluate identically), the token-file reader and the
/// sampling of the next character from a row of logits, the precision's name and the
/// per-phase table of --profile.
///
/// Nothing here launches a kernel. gpt_batch_offset() is also compiled for the device
/// (the batch gather kernel of gpt_support.cu calls it), hence COURSE_GPT_HD.

#include "course/error.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define COURSE_GPT_HD __host__ __device__
#else
#define COURSE_GPT_HD
#endif

namespace course::m04::gpt {

// ----------------------------------------------------------------------------------------
// Configuration

/// The model and its training (defaults: the 6 x 384 character model, ~10.8 M
/// parameters, and nanoGPT's shakespeare_char optimizer settings).
struct GptConfig {
  std::int64_t vocab = 84;     ///< from the data (Shakespeare: 84 characters)
  std::int64_t context = 256;  ///< T, tokens per sequence
  std::int64_t layers = 6;
  std::int64_t heads = 6;
  std::int64_t d_model = 384;  ///< C = heads * head_dim
  std::int64_t batch = 64;     ///< B, sequences per step

  std::int64_t head_dim() const { return d_model / heads; }
  std::int64_t mlp() const { return 4 * d_model; }
  /// The logits' row stride: vocab rounded up to 8 (16-byte bf16 rows for the GEMMs).
  std::int64_t vocab_padded() const { return (vocab + 7) / 8 * 8; }
  std::int64_t tokens() const { return batch * context; }
};

/// The trainer's two precisions. bf16 (the default, for speed): bf16 activations, tensor-core
/// GEMMs and attention with fp32 accumulation, fp32 master weights. fp32 (for checking
/// against the PyTorch twin with tight tolerances): every activation fp32, the GEMMs on
/// module 2's fp32 batched GEMM, module 3's fp32 fused attention, no bf16 copy anywhere.
enum class GptPrecision { bf16, fp32 };

inline const char* precision_name(GptPrecision p) { return p == GptPrecision::fp32 ? "fp32" : "bf16"; }

/// "bf16" or "fp32"; anything else throws course::InvalidArgument naming `flag`.
inline GptPrecision parse_precision(const std::string& name, const char* flag = "--precision") {
  if (name == "bf16") return GptPrecision::bf16;
  if (name == "fp32") return GptPrecision::fp32;
  require_arg(false, "m04_gpt", flag, name, "must be bf16 or fp32");
  return GptPrecision::bf16;
}

/// Throws course::InvalidArgument naming the first field the kernels cannot take.
inline void validate_config(const GptConfig& c, const char* fn = "gpt") {
  require_arg(c.vocab >= 2 && c.vocab <= 65536, fn, "vocab", c.vocab, "must be in [2, 65536]");
  require_arg(c.context >= 1 && c.context <= 65536, fn, "context", c.context, "must be in [1, 65536]");
  require_arg(c.layers >= 1 && c.layers <= 256, fn, "layers", c.layers, "must be in [1, 256]");
  require_arg(c.heads >= 1, fn, "heads", c.heads, "must be >= 1");
  require_arg(c.d_model % c.heads == 0, fn, "d_model", c.d_model, "must be a multiple of heads");
  require_arg(c.head_dim() == 64 || c.head_dim() == 128, fn, "head_dim", c.head_dim(),
              "(d_model / heads) must be 64 or 128: the tensor-core attention backward is compiled for those");
  require_arg(c.d_model % 8 == 0, fn, "d_model", c.d_model, "must be a multiple of 8 (16-byte bf16 rows)");
  require_arg(c.batch >= 1 && c.batch * c.heads <= 65535, fn, "batch", c.batch,
              "must be >= 1 with batch * heads <= 65535 (one attention block row per (batch, head))");
}

// ----------------------------------------------------------------------------------------
// Parameter layout

/// What a tensor is, for initialization, weight decay and the bf16 copy.
enum class ParamKind {
  embedding,     ///< wte, wpe: normal(0, 0.02), decayed
  matrix,        ///< a linear layer's W [out, in]: normal(0, 0.02), decayed, bf16 copy for the GEMMs
  residual_out,  ///< attention / MLP output projection: normal(0, 0.02 / sqrt(2 * layers)), decayed, bf16
  bias,          ///< zeros, not decayed
  ln_gamma,      ///< ones, not decayed
  ln_beta,       ///< zeros, not decayed
};

struct ParamTensor {
  std::string name;          ///< "h0.attn.qkv.weight" (PyTorch-like, the twin uses the same names)
  ParamKind kind;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;   ///< in elements, from the start of the parameter buffer (a multiple of kAlign)
  std::int64_t numel = 0;
  bool decay() const {
    return kind == ParamKind::embedding || kind == ParamKind::matrix || kind == ParamKind::residual_out;
  }
  /// The GEMMs read a bf16 copy (wte too: it is the weight-tied head's W).
  bool bf16_copy() const { return name == "wte" || kind == ParamKind::matrix || kind == ParamKind::residual_out; }
};

/// Every tensor starts at a multiple of this many elements (256 bytes of fp32): the
/// GEMMs need 16-byte aligned bf16 copies, AdamW's float4 path 16-byte aligned fp32.
inline constexpr std::int64_t kAlign = 64;

/// Indices of one block's tensors in ParamLayout::tensors.
struct BlockParams {
  int ln1_g, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_g, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

/// The parameters in their one fixed order: wte, wpe, then per block ln1 (g, b), attn.qkv
/// (W [3C, C], b), attn.proj (W [C, C], b), ln2 (g, b), mlp.fc (W [4C, C], b), mlp.proj
/// (W [C, 4C], b), then lnf (g, b). The head is tied to wte (no tensor of its own). This
/// is the order of --dump-init and of the checkpoints (tensors back to back, no padding).
struct ParamLayout {
  std::vector<ParamTensor> tensors;
  std::vector<BlockParams> blocks;
  int wte = 0, wpe = 1, lnf_g = 0, lnf_b = 0;
  std::int64_t total = 0;   ///< elements of the padded buffer
  std::int64_t count = 0;   ///< parameters (no padding)

  explicit ParamLayout(const GptConfig& c) {
    const std::int64_t C = c.d_model;
    const auto add = [&](std::string name, ParamKind kind, std::vector<std::int64_t> shape) {
      ParamTensor t{std::move(name), kind, std::move(shape), total, 1};
      for (const std::int64_t d : t.shape) t.numel *= d;
      total += (t.numel + kAlign - 1) / kAlign * kAlign;
      count += t.numel;
      tensors.push_back(std::move(t));
      return static_cast<int>(tensors.size()) - 1;
    };
    wte = add("wte", ParamKind::embedding, {c.vocab, C});
    wpe = add("wpe", ParamKind::embedding, {c.context, C});
    for (std::int64_t l = 0; l < c.layers; ++l) {
      const std::string p = "h" + std::to_string(l) + ".";
      BlockParams b{};
      b.ln1_g = add(p + "ln1.weight", ParamKind::ln_gamma, {C});
      b.ln1_b = add(p + "ln1.bias", ParamKind::ln_beta, {C});
      b.qkv_w = add(p + "attn.qkv.weight", ParamKind::matrix, {3 * C, C});
      b.qkv_b = add(p + "attn.qkv.bias", ParamKind::bias, {3 * C});
      b.proj_w = add(p + "attn.proj.weight", ParamKind::residual_out, {C, C});
      b.proj_b = add(p + "attn.proj.bias", ParamKind::bias, {C});
      b.ln2_g = add(p + "ln2.weight", ParamKind::ln_gamma, {C});
      b.ln2_b = add(p + "ln2.bias", ParamKind::ln_beta, {C});
      b.fc_w = add(p + "mlp.fc.weight", ParamKind::matrix, {4 * C, C});
      b.fc_b = add(p + "mlp.fc.bias", ParamKind::bias, {4 * C});
      b.fcproj_w = add(p + "mlp.proj.weight", ParamKind::residual_out, {C, 4 * C});
      b.fcproj_b = add(p + "mlp.proj.bias", ParamKind::bias, {C});
      blocks.push_back(b);
    }
    lnf_g = add("lnf.weight", ParamKind::ln_gamma, {C});
    lnf_b = add("lnf.bias", ParamKind::ln_beta, {C});
  }
  const ParamTensor& operator[](int i) const { return tensors[static_cast<std::size_t>(i)]; }
};

/// The parameter count in closed form (the CPU test checks ParamLayout against it):
/// V C + T C + L (12 C^2 + 13 C) + 2 C.
inline std::int64_t gpt_parameter_count(const GptConfig& c) {
  const std::int64_t C = c.d_model;
  return c.vocab * C + c.context * C + c.layers * (12 * C * C + 13 * C) + 2 * C;
}

// ----------------------------------------------------------------------------------------
// Random numbers: splitmix64, simple enough to repeat in Python (the twin) and on the device

COURSE_GPT_HD inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Where sequence b of step `step` starts in a token file of n_tokens tokens (split 0:
/// training batches, 1: validation batches): uniform over [0, n_tokens - context - 1]
/// (the sequence and its targets, shifted by one, must fit). Stateless: batch k of any run
/// with the same seed is the same, wherever the run was resumed.
///   h = splitmix64(splitmix64(splitmix64(seed) ^ split) ^ step) ^ b);  offset = h % (n - T)
COURSE_GPT_HD inline std::int64_t gpt_batch_offset(std::uint64_t seed, std::uint64_t split, std::uint64_t step,
                                                   std::uint64_t b, std::int64_t n_tokens, std::int64_t context) {
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ split) ^ step) ^ b);
  return static_cast<std::int64_t>(h % static_cast<std::uint64_t>(n_tokens - context));
}

/// A normal(0, 1) value from two splitmix64 draws (Box-Muller), for the initialization:
/// element i of tensor t with seed s uses the draws splitmix64(splitmix64(s ^ (t << 40)) ^ 2i)
/// and ... ^ (2i + 1). Deterministic on every platform (std::normal_distribution is not).
inline double gpt_normal(std::uint64_t seed, std::uint64_t tensor, std::uint64_t i) {
  const std::uint64_t base = splitmix64(seed ^ (tensor << 40));
  const double u1 = (static_cast<double>(splitmix64(base ^ (2 * i)) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(splitmix64(base ^ (2 * i + 1)) >> 11) * 0x1.0p-53;       // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// The initial parameters, GPT-2's scheme, in the padded layout (padding 0).
inline std::vector<float> gpt_init_parameters(const GptConfig& c, const ParamLayout& L, std::uint64_t seed) {
  std::vector<float> p(static_cast<std::size_t>(L.total), 0.f);
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  for (std::size_t t = 0; t < L.tensors.size(); ++t) {
    const ParamTensor& T = L.tensors[t];
    float* out = p.data() + T.offset;
    for (std::int64_t i = 0; i < T.numel; ++i) {
      switch (T.kind) {
        case ParamKind::embedding:
        case ParamKind::matrix:
          out[i] = static_cast<float>(0.02 * gpt_normal(seed, t, static_cast<std::uint64_t>(i)));
          break;
        case ParamKind::residual_out:
          out[i] = static_cast<float>(resid_std * gpt_normal(seed, t, static_cast<std::uint64_t>(i)));
          break;
        case ParamKind::ln_gamma: out[i] = 1.f; break;
        case ParamKind::bias:
        case ParamKind::ln_beta: out[i] = 0.f; break;
      }
    }
  }
  return p;
}

// ----------------------------------------------------------------------------------------
// Learning rate: linear warm-up, then cosine decay to min_lr

struct LrSchedule {
  double lr = 1e-3, min_lr = 1e-4;
  std::int64_t warmup = 100, steps = 2000;

  /// The rate of step `step` (0-based): lr * (step + 1) / warmup during the warm-up, then
  /// min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2 with progress going from 0 at
  /// step warmup to 1 at step steps - 1; min_lr after that.
  double at(std::int64_t step) const {
    if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (step >= steps - 1) return steps - 1 > warmup ? min_lr : lr;
    const double progress = static_cast<double>(step - warmup) / static_cast<double>(steps - 1 - warmup);
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  }
};

// ----------------------------------------------------------------------------------------
// Data: the token files of scripts/gpt_data.py

struct TokenFile {
  std::uint32_t vocab_size = 0, token_bytes = 0;
  std::vector<std::uint8_t> raw;  ///< num_tokens * token_bytes bytes, little-endian ids
  std::int64_t num_tokens() const { return token_bytes ? static_cast<std::int64_t>(raw.size() / token_bytes) : 0; }
  std::int32_t at(std::int64_t i) const {
    const auto k = static_cast<std::size_t>(i);
    return token_bytes == 1 ? raw[k] : static_cast<std::int32_t>(raw[2 * k] | (raw[2 * k + 1] << 8));
  }
};

/// Reads a CRSTOKEN file (32-byte header, see scripts/gpt_data.py); throws course::Error
/// saying what is wrong and what to run.
inline TokenFile read_token_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw Error(path + " is missing: run `python3 scripts/gpt_data.py prepare` first (or `prepare --fallback` "
                       "for the course's lessons as a small offline corpus, then --data build/data/lessons)");
  char magic[8];
  std::uint32_t version = 0, reserved = 0;
  std::uint64_t n = 0;
  TokenFile t;
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(&version), 4);
  f.read(reinterpret_cast<char*>(&t.vocab_size), 4);
  f.read(reinterpret_cast<char*>(&t.token_bytes), 4);
  f.read(reinterpret_cast<char*>(&reserved), 4);
  f.read(reinterpret_cast<char*>(&n), 8);
  if (!f || std::memcmp(magic, "CRSTOKEN", 8) != 0 || version != 1 || (t.token_bytes != 1 && t.token_bytes != 2))
    throw Error(path + " is not a version-1 CRSTOKEN file: run `python3 scripts/gpt_data.py prepare` again");
  t.raw.resize(static_cast<std::size_t>(n) * t.token_bytes);
  f.read(reinterpret_cast<char*>(t.raw.data()), static_cast<std::streamsize>(t.raw.size()));
  if (!f) throw Error(path + " is truncated: run `python3 scripts/gpt_data.py prepare` again");
  return t;
}

/// Reads vocab.bin (CRSVOCAB header, then per id: uint8 n, n UTF-8 bytes): the characters.
inline std::vector<std::string> read_vocab_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + " is missing: run `python3 scripts/gpt_data.py prepare` first");
  char header[32];
  f.read(header, 32);
  std::uint32_t vocab = 0;
  std::memcpy(&vocab, header + 12, 4);
  if (!f || std::memcmp(header, "CRSVOCAB", 8) != 0)
    throw Error(path + " is not a CRSVOCAB file: run `python3 scripts/gpt_data.py prepare` again");
  std::vector<std::string> chars(vocab);
  for (auto& s : chars) {
    unsigned char n = 0;
    f.read(reinterpret_cast<char*>(&n), 1);
    s.resize(n);
    f.read(s.data(), n);
  }
  if (!f) throw Error(path + " is truncated: run `python3 scripts/gpt_data.py prepare` again");
  return chars;
}

// ----------------------------------------------------------------------------------------
// Files: --dump-init, --dump-grads and checkpoints (the formats are in demos/gpt.cpp's header
// comment: a 64-byte header -- magic, then int64 version, vocab, context, layers, heads,
// d_model, step -- then fp32 tensors back to back in ParamLayout order, no padding)

inline constexpr std::int64_t kGptFileVersion = 1;

inline void write_gpt_header(std::ostream& f, const char* magic, const GptConfig& c, std::int64_t step) {
  f.write(magic, 8);
  const std::int64_t fields[7] = {kGptFileVersion, c.vocab, c.context, c.layers, c.heads, c.d_model, step};
  f.write(reinterpret_cast<const char*>(fields), sizeof fields);
}

/// The tensors of a padded buffer (ParamLayout::total elements), back to back.
inline void write_gpt_tensors(std::ostream& f, const ParamLayout& L, const std::vector<float>& padded) {
  for (const ParamTensor& t : L.tensors)
    f.write(reinterpret_cast<const char*>(padded.data() + t.offset), static_cast<std::streamsize>(t.numel * 4));
}

/// Reads the tensors into a padded buffer (padding 0).
inline std::vector<float> read_gpt_tensors(std::istream& f, const ParamLayout& L) {
  std::vector<float> padded(static_cast<std::size_t>(L.total), 0.f);
  for (const ParamTensor& t : L.tensors)
    f.read(reinterpret_cast<char*>(padded.data() + t.offset), static_cast<std::streamsize>(t.numel * 4));
  return padded;
}

/// A checkpoint's contents, in the padded layout.
struct GptCheckpoint {
  std::int64_t step = 0;  ///< steps already trained
  std::vector<float> params, m, v;
};

/// Writes a checkpoint ("CRSGPTCK": parameters, then AdamW's m and v). Throws course::Error
/// when the file cannot be written.
inline void write_gpt_checkpoint(const std::string& path, const GptConfig& c, const ParamLayout& L,
                                 const GptCheckpoint& ck) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("--save " + path + ": cannot be opened for writing");
  write_gpt_header(f, "CRSGPTCK", c, ck.step);
  write_gpt_tensors(f, L, ck.params);
  write_gpt_tensors(f, L, ck.m);
  write_gpt_tensors(f, L, ck.v);
  if (!f) throw Error("--save " + path + ": writing the checkpoint failed");
}

/// Reads a checkpoint written for configuration `c`; throws course::Error naming what is
/// wrong (not a checkpoint, another version, a model size that differs, a truncated file).
inline GptCheckpoint read_gpt_checkpoint(const std::string& path, const GptConfig& c, const ParamLayout& L) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("--resume " + path + ": cannot be opened");
  char magic[8];
  std::int64_t fields[7];
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(fields), sizeof fields);
  if (!f || std::memcmp(magic, "CRSGPTCK", 8) != 0 || fields[0] != kGptFileVersion)
    throw Error("--resume " + path + ": not a version-1 m04_gpt checkpoint");
  const std::int64_t want[5] = {c.vocab, c.context, c.layers, c.heads, c.d_model};
  const char* names[5] = {"vocab", "context", "layers", "heads", "d_model"};
  for (int i = 0; i < 5; ++i)
    if (fields[1 + i] != want[i])
      throw Error("--resume " + path + ": the checkpoint has " + names[i] + " = " + std::to_string(fields[1 + i]) +
                  ", this run " + std::to_string(want[i]));
  GptCheckpoint ck;
  ck.step = fields[6];
  ck.params = read_gpt_tensors(f, L);
  ck.m = read_gpt_tensors(f, L);
  ck.v = read_gpt_tensors(f, L);
  if (!f) throw Error("--resume " + path + ": truncated");
  return ck;
}

// ----------------------------------------------------------------------------------------
// Sampling

/// The next token from one row of logits: softmax(logits / temperature) in double, then the
/// first id whose cumulative probability exceeds u (u uniform in [0, 1)). temperature <= 0
/// selects the argmax (the lowest id on ties).
inline std::int32_t sample_token(const std::vector<float>& logits, double temperature, double u) {
  const std::size_t V = logits.size();
  std::size_t best = 0;
  for (std::size_t j = 1; j < V; ++j)
    if (logits[j] > logits[best]) best = j;
  if (temperature <= 0.0) return static_cast<std::int32_t>(best);
  std::vector<double> p(V);
  double sum = 0.0;
  for (std::size_t j = 0; j < V; ++j) sum += p[j] = std::exp((logits[j] - logits[best]) / temperature);
  double acc = 0.0;
  for (std::size_t j = 0; j < V; ++j) {
    acc += p[j] / sum;
    if (u < acc) return static_cast<std::int32_t>(j);
  }
  return static_cast<std::int32_t>(V - 1);  // u within rounding of 1
}

/// A uniform double in [0, 1) from (seed, i).
inline double gpt_uniform(std::uint64_t seed, std::uint64_t i) {
  return static_cast<double>(splitmix64(splitmix64(seed) ^ i) >> 11) * 0x1.0p-53;
}

// ----------------------------------------------------------------------------------------
// --profile: where the time of a training step goes

/// Times per phase of a training step (m04_gpt --profile), summed over the layers and over
/// the profiled steps. The trainer records a CUDA event at the start of every phase (the
/// phase's name, e.g. "fwd.qkv") and one at the end of the step; the time between an event
/// and the next is added to the phase that event opened. Phases keep the order in which
/// they first appeared (the order of the step).
class PhaseProfile {
 public:
  struct Row {
    std::string phase;
    double ms_per_step = 0.0;  ///< summed over the layers, averaged over the steps
    double share = 0.0;        ///< of the step's total, in [0, 1]
  };

  void add(const std::string& phase, double ms) {
    for (std::size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == phase) {
        ms_[i] += ms;
        return;
      }
    names_.push_back(phase);
    ms_.push_back(ms);
  }
  /// One more step has been added (the divisor of ms_per_step).
  void end_step() { ++steps_; }
  std::int64_t steps() const { return steps_; }

  std::vector<Row> rows() const {
    double total = 0.0;
    for (const double m : ms_) total += m;
    std::vector<Row> out;
    const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
    for (std::size_t i = 0; i < names_.size(); ++i)
      out.push_back({names_[i], ms_[i] / n, total > 0.0 ? ms_[i] / total : 0.0});
    return out;
  }
  double ms_per_step() const {
    double total = 0.0;
    for (const Row& r : rows()) total += r.ms_per_step;
    return total;
  }

  /// "phase,ms_per_step,share\n" then one line per phase, in step order.
  std::string csv() const {
    std::string s = "phase,ms_per_step,share\n";
    char line[256];
    for (const Row& r : rows()) {
      std::snprintf(line, sizeof line, ",%.6f,%.6f\n", r.ms_per_step, r.share);
      s += r.phase + line;
    }
    return s;
  }

 private:
  std::vector<std::string> names_;
  std::vector<double> ms_;
  std::int64_t steps_ = 0;
};

}  // namespace course::m04::gpt
