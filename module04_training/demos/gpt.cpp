// m04_gpt: a decoder-only GPT trained on Shakespeare's plays, character by character, with
// nothing but the course's kernels: module 1's tensor-core GEMM (matmul_tc with its linear-
// layer options), module 3's tensor-core flash attention, and module 4's LayerNorm, GELU,
// attention backward, fused cross-entropy and AdamW. No cuBLAS, no cuDNN, no framework.
//
// The model (defaults; every size is a flag): 6 pre-LayerNorm blocks of causal self-
// attention (6 heads of 64, d_model 384) and a 4x MLP with GELU, learned token and position
// embeddings, context 256, a weight-tied output head over the 84 characters; 10.8 M
// parameters. Mixed precision: activations, the GEMMs' weight copies and attention are bf16
// with fp32 accumulation; the master weights, their gradients and AdamW's moments are fp32.
//
// --precision fp32 is the check mode (the same class, Gpt<float>; the bf16 trainer is
// Gpt<bf16>): every activation fp32, every GEMM on module 2's fp32 strided batched GEMM (step
// warp_tiled, one matrix, its a_transposed / b_transposed options: no transpose
// materialized), the bias / residual epilogues as training_ops' bias_add, GELU and its
// backward with their fp32 dtype, module 3's fp32 `fused` attention (causal, strided Q/K/V
// views, lse) and module 4's fp32 `flash` backward (`flash_deterministic` with
// --deterministic), the bias gradients by module 4's linear_backward (db only, step
// block_column_strip), LayerNorm and cross-entropy with DType::f32, AdamW without bf16
// copies. The PyTorch twin (scripts/gpt_twin.py --precision fp32, TF32 off) then agrees to
// ~1e-4 instead of bf16 noise: that is what it is for. Options that only mean something in
// bf16 (--gemm, a matmul_tc step) are rejected by name.
//
// One training step (B = 64 sequences of T = 256 tokens, N = B*T rows, C = d_model):
//
//   forward  embed (fp32 tables -> bf16 residual stream x0)
//            per block l:  ln1 -> qkv GEMM (+bias) -> flash attention -> proj GEMM (+bias, +x)
//                          ln2 -> fc GEMM (+bias, GELU) -> fc_proj GEMM (+bias, +x)
//            lnf -> logits GEMM (W = wte's bf16 copy) -> fused cross-entropy (dlogits in place)
//   backward the same phases in reverse, each GEMM's dX = dY W, dW = dY^T X, db = colsum(dY);
//            the residual stream's gradient dx collects each branch through LayerNorm's
//            accumulate_dx; wte's gradient = embedding backward + the head's dW (accumulate).
//   step     AdamW over all tensors in one launch: global-norm clipping, weight decay on the
//            matrices, bf16 copies of the GEMMs' weights written in the same pass.
//
// The residual stream is kept per block (x_{2l} before attention, x_{2l+1} after it): the
// LayerNorm backward reads its input. Activations for the default size: ~1.3 GB (fp32: twice).
//
// Files it reads: build/data/shakespeare/{train,val,vocab}.bin from `python3
// scripts/gpt_data.py prepare` (it says what to run when they are missing). Files it writes:
// the loss curve (--csv), checkpoints (--save), the initial parameters for the PyTorch twin
// (--dump-init; scripts/gpt_twin.py). Both binary formats:
//
//   header (64 bytes): char magic[8] ("CRSGPTIN" for --dump-init, "CRSGPTCK" for a
//     checkpoint), then int64 version (1), vocab, context, layers, heads, d_model, step
//     (the steps already trained; 0 for --dump-init), all little-endian;
//   then the parameters as fp32, tensor after tensor in ParamLayout order (gpt_model.hpp:
//     wte, wpe, per block ln1.w, ln1.b, attn.qkv.w, attn.qkv.b, attn.proj.w, attn.proj.b,
//     ln2.w, ln2.b, mlp.fc.w, mlp.fc.b, mlp.proj.w, mlp.proj.b, then lnf.w, lnf.b), each
//     row-major in PyTorch's [out, in] shape, no padding; a checkpoint then holds AdamW's m
//     and v in the same order.
//
// Batches come from a stateless hash (gpt_batch_offset: step k's batch is the same in every
// run with that seed, resumed or not, and in the twin). Deterministic mode (--deterministic)
// runs the attention backward's deterministic step (tc_deterministic; fp32:
// flash_deterministic); every other kernel here is deterministic already (bf16: the dW GEMMs
// add into their fp32 gradients with atomic reductions, but each element gets one addition
// per K split, the splits in a fixed order; fp32: module 2's GEMM does not split K): the same
// seed then gives the same losses bit for bit, in either precision.
//
// --profile times each phase of a training step (embedding, every forward and backward op
// summed over the layers, AdamW) with a CUDA event at its start, over 10 steps after 5 untimed
// ones, prints the table and writes --profile-csv (phase, ms_per_step, share). Each profiled
// step ends with a synchronization and the events sit between kernels: the profiled steps run
// a little slower than the others (the progress line's ms/step includes them).
//
//   python3 scripts/gpt_data.py prepare && build/module04_training/m04_gpt
//   m04_gpt --steps 200 --eval-every 50          a short run
//   m04_gpt --precision fp32 --steps 20 --dump-init init.bin --dump-grads grads.bin --csv loss.csv
//     then python3 scripts/gpt_twin.py --precision fp32 --init init.bin --grads grads.bin --course-csv loss.csv
//   m04_gpt --steps 30 --profile                 where the time of a step goes
//   m04_gpt --save build/gpt.ckpt                 then: m04_gpt --resume build/gpt.ckpt --steps 0 --sample 1000
#include "course/compare.hpp"
#include "course/demo.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "module01/matmul_tc.hpp"
#include "module02/batched_gemm.hpp"
#include "module03/attention.hpp"
#include "module04/adamw.hpp"
#include "module04/attention_backward.hpp"
#include "module04/cross_entropy.hpp"
#include "module04/gelu.hpp"
#include "module04/gpt_model.hpp"
#include "module04/gpt_support.hpp"
#include "module04/layer_norm.hpp"
#include "module04/linear_backward.hpp"
#include "module04/training_ops.hpp"

#include <CLI/CLI.hpp>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

namespace m01 = course::m01;
namespace m02 = course::m02;
namespace m03 = course::m03;
namespace m04 = course::m04;
namespace gpt = course::m04::gpt;
namespace impl = course::solution;
using bf16 = __nv_bfloat16;
using course::DeviceBuffer;
using course::DType;
using i64 = std::int64_t;

// =====================================================================================
// Options

struct Options {
  gpt::GptConfig model;
  std::string data = "build/data/shakespeare";
  i64 steps = 2000;
  double lr = 1e-3, min_lr = 1e-4;
  i64 warmup = 100;
  float beta1 = 0.9f, beta2 = 0.99f, eps = 1e-8f, weight_decay = 0.1f, clip = 1.0f;
  std::uint64_t seed = 1337;
  i64 eval_every = 250, eval_batches = 20, log_every = 50;
  std::string csv = "build/gpt_loss.csv";
  i64 sample_chars = 500;
  double temperature = 0.8;
  std::string prompt = "\n";
  bool deterministic = false;
  std::string precision = "bf16";  ///< bf16 (mixed precision) or fp32 (the check mode)
  std::string gemm_step = "mma_sync";
  bool gemm_given = false;         ///< --gemm was on the command line (rejected in fp32)
  std::string dump_init, dump_grads, save, resume;
  bool profile = false;            ///< time each phase of a step (--profile)
  std::string profile_csv = "build/gpt_profile.csv";
  double peak_tflops = 0.0;        ///< 0: 989 (H100 SXM dense bf16) or, in fp32, 67 (its fp32 peak)
};

// The course kernels' steps the trainer runs (the top of each ladder that takes its options;
// attention's per precision: Precision<T> below).
constexpr auto kLnStep = m04::LayerNormStep::pipelined;
constexpr auto kLnBackwardStep = m04::LayerNormBackwardStep::pipelined;
constexpr auto kGeluStep = m04::GeluStep::vectorized;
constexpr auto kCrossEntropyStep = m04::CrossEntropyStep::row_on_chip;
constexpr auto kAdamWStep = m04::AdamWStep::multi_tensor;
// fp32 mode only: module 2's fastest fp32 batched GEMM (it takes a_transposed and
// b_transposed) and module 4's deterministic bias gradient.
constexpr auto kGemmF32Step = m02::BgemmStep::warp_tiled;
constexpr auto kBiasGradStep = m04::BiasGradStep::block_column_strip;

m01::TcMatmulStep parse_gemm_step(const std::string& name) {
  for (const auto& info : m01::kTcMatmulSteps)
    if (name == info.name && info.step != m01::TcMatmulStep::wmma) return info.step;
  throw course::InvalidArgument("m04_gpt: --gemm '" + name +
                                "' is not a matmul_tc step that takes the linear-layer options (mma_sync, wgmma, "
                                "tma_warp_specialized, persistent, cluster_multicast, pingpong)");
}

/// bf16 bits -> float (exact).
float bf16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// =====================================================================================
// The model on the GPU, in either precision

/// What differs between the two precisions, as types and step choices; everything else
/// of the model is one code path (Gpt<Act> below, Act the activations' type).
template <class Act>
struct Precision;

template <>
struct Precision<bf16> {
  static constexpr gpt::GptPrecision kind = gpt::GptPrecision::bf16;
  static constexpr DType dtype = DType::bf16;
  static constexpr m04::GeluDType gelu = m04::GeluDType::bf16;
  using AttentionArgs = m03::AttentionArgsBf16;
  using AttentionBackwardArgs = m04::AttentionBackwardArgsBf16;
  static constexpr auto attention = m03::AttentionStep::tc_flash2;
  static constexpr auto attention_backward = m04::AttentionBackwardStep::tc_pipelined;
  static constexpr auto attention_backward_deterministic = m04::AttentionBackwardStep::tc_deterministic;
};

template <>
struct Precision<float> {
  static constexpr gpt::GptPrecision kind = gpt::GptPrecision::fp32;
  static constexpr DType dtype = DType::f32;
  static constexpr m04::GeluDType gelu = m04::GeluDType::f32;
  using AttentionArgs = m03::AttentionArgs;
  using AttentionBackwardArgs = m04::AttentionBackwardArgs;
  static constexpr auto attention = m03::AttentionStep::fused;
  static constexpr auto attention_backward = m04::AttentionBackwardStep::flash;
  static constexpr auto attention_backward_deterministic = m04::AttentionBackwardStep::flash_deterministic;
};

/// The model, its buffers and one training step's kernels. Act = bf16: the mixed-precision
/// trainer; Act = float: the fp32 check mode (--precision fp32). The dtype-specific calls are
/// the `if constexpr (kF32)` branches of linear(), linear_backward(), the head, the embedding
/// and the weight copies; the rest (LayerNorm, GELU, attention, cross-entropy, AdamW) only
/// passes Precision<Act>'s dtype or step.
template <class Act>
class Gpt {
  static constexpr bool kF32 = std::is_same_v<Act, float>;
  using Prec = Precision<Act>;

 public:
  Gpt(const gpt::GptConfig& c, const gpt::ParamLayout& L, const Options& o)
      : c_(c), L_(L), o_(o), gemm_(kF32 ? m01::TcMatmulStep::mma_sync : parse_gemm_step(o.gemm_step)),
        att_bwd_(o.deterministic ? Prec::attention_backward_deterministic : Prec::attention_backward),
        N_(c.tokens()), C_(c.d_model), V_(c.vocab), Vp_(c.vocab_padded()) {
    const i64 N = N_, C = C_, Ly = c.layers;
    params_ = DeviceBuffer<float>(static_cast<std::size_t>(L.total));
    grads_ = DeviceBuffer<float>(static_cast<std::size_t>(L.total));
    m_ = DeviceBuffer<float>(static_cast<std::size_t>(L.total));
    v_ = DeviceBuffer<float>(static_cast<std::size_t>(L.total));
    if constexpr (!kF32) wbf16_ = DeviceBuffer<bf16>(static_cast<std::size_t>(L.total));
    for (auto* b : {&grads_, &m_, &v_}) COURSE_CUDA_CHECK(cudaMemset(b->data(), 0, b->bytes()));

    const auto sz = [](i64 x) { return static_cast<std::size_t>(x); };
    x_ = DeviceBuffer<Act>(sz((2 * Ly + 1) * N * C));
    ln1_ = DeviceBuffer<Act>(sz(Ly * N * C));
    qkv_ = DeviceBuffer<Act>(sz(Ly * N * 3 * C));
    att_ = DeviceBuffer<Act>(sz(Ly * N * C));
    ln2_ = DeviceBuffer<Act>(sz(Ly * N * C));
    fc_pre_ = DeviceBuffer<Act>(sz(Ly * N * 4 * C));
    fc_out_ = DeviceBuffer<Act>(sz(Ly * N * 4 * C));
    lnf_ = DeviceBuffer<Act>(sz(N * C));
    logits_ = DeviceBuffer<Act>(sz(N * Vp_));
    COURSE_CUDA_CHECK(cudaMemset(logits_.data(), 0, logits_.bytes()));  // the padding columns stay 0
    stats_ = DeviceBuffer<float>(sz((4 * Ly + 2) * N));                  // mean, rstd of every LayerNorm
    lse_ = DeviceBuffer<float>(sz(Ly * c.batch * c.heads * c.context));
    // bf16: the embedding's fp32 output and its gradient's fp32 copy; fp32: the head's dW
    // before it is added to wte's gradient (module 2's GEMM overwrites its C).
    if constexpr (kF32)
      head_dw_ = DeviceBuffer<float>(sz(V_ * C));
    else
      embed_ = DeviceBuffer<float>(sz(N * C));
    dx_ = DeviceBuffer<Act>(sz(N * C));
    dc_ = DeviceBuffer<Act>(sz(N * C));
    d4_ = DeviceBuffer<Act>(sz(N * 4 * C));
    dqkv_ = DeviceBuffer<Act>(sz(N * 3 * C));
    losses_ = DeviceBuffer<float>(sz(N));
    num_valid_ = DeviceBuffer<std::int32_t>(1);
    ids_ = DeviceBuffer<std::int32_t>(sz(N));
    targets_ = DeviceBuffer<std::int32_t>(sz(N));

    // Workspaces: the attention backward's (bf16: D, lse2, fp32 dQ; fp32: D, and the dQ turn
    // counters when deterministic), LayerNorm backward's partials, the bf16 bias gradient's
    // partials, the embedding backward's sort and partial sums, AdamW's tensor table.
    std::size_t att_ws_bytes = 0;
    if constexpr (kF32)
      att_ws_bytes = m04::attention_backward_workspace_bytes(att_bwd_, c.batch, c.heads, c.context, c.context);
    else
      att_ws_bytes = m04::tc_backward_workspace(att_bwd_, c.batch, c.heads, c.context, c.head_dim()).bytes;
    att_ws_ = DeviceBuffer<float>((att_ws_bytes + 3) / 4);
    const std::size_t lnw = std::max(m04::layer_norm_backward_workspace_bytes(kLnBackwardStep, N, C), std::size_t{16});
    ln_ws_ = DeviceBuffer<float>((lnw + 3) / 4);
    if constexpr (!kF32) bias_ws_ = DeviceBuffer<float>((gpt::bias_grad_bf16_workspace_bytes(N, 4 * C) + 3) / 4);
    eb_ws_ = DeviceBuffer<float>((m04::embedding_backward_workspace_bytes(c.batch, c.context, V_, C) + 3) / 4);

    for (const gpt::ParamTensor& t : L.tensors) {
      m04::AdamWTensor a;
      a.params = params_.data() + t.offset;
      a.grads = grads_.data() + t.offset;
      a.m = m_.data() + t.offset;
      a.v = v_.data() + t.offset;
      a.bf16 = !kF32 && t.bf16_copy() ? wbf16_.data() + t.offset : nullptr;  // fp32: the GEMMs read params
      a.n = t.numel;
      a.decay = t.decay();
      adam_tensors_.push_back(a);
    }
    adam_ws_ = DeviceBuffer<float>(
        (m04::adamw_workspace_bytes(kAdamWStep, adam_tensors_.data(), static_cast<i64>(adam_tensors_.size())) + 3) / 4);
    COURSE_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  ~Gpt() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  cudaStream_t stream() const { return stream_; }
  m04::AttentionBackwardStep attention_backward_step() const { return att_bwd_; }

  /// Uploads fp32 parameters (padded layout) and, in bf16, makes the GEMMs' bf16 copy.
  void set_parameters(const std::vector<float>& p) {
    params_.upload(p);
    if constexpr (!kF32) gpt::convert_f32_to_bf16(params_.data(), wbf16_.data(), static_cast<i64>(p.size()), stream_);
    COURSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::vector<float> parameters() const { return params_.download(); }
  DeviceBuffer<float>& m() { return m_; }
  DeviceBuffer<float>& grads() { return grads_; }
  DeviceBuffer<float>& v() { return v_; }

  /// The batch of `step` (split 0: training, 1: validation) gathered on the device.
  void load_batch(const std::uint8_t* tokens, i64 n_tokens, int token_bytes, std::uint64_t split, std::uint64_t step) {
    gpt::GptBatchArgs a;
    a.tokens = tokens;
    a.num_tokens = n_tokens;
    a.token_bytes = token_bytes;
    a.seed = o_.seed;
    a.split = split;
    a.step = step;
    a.batch = c_.batch;
    a.context = c_.context;
    a.ids = ids_.data();
    a.targets = targets_.data();
    a.stream = stream_;
    gpt::gpt_make_batch(a);
  }
  /// Host ids for sampling (B = 1).
  void upload_ids(const std::vector<std::int32_t>& ids) {
    COURSE_CUDA_CHECK(cudaMemcpyAsync(ids_.data(), ids.data(), ids.size() * sizeof(std::int32_t),
                                      cudaMemcpyHostToDevice, stream_));
  }

  // ---------------------------------------------------------------------------------
  // --profile: an event at the start of every phase (mark), the step's end (mark("")).
  // Off (the default), mark() does nothing.
  void profile(bool on) {
    profiling_ = on;
    marks_.clear();
  }
  void mark(const char* phase) {
    if (!profiling_) return;
    if (marks_.size() == events_.size()) {
      cudaEvent_t e;
      COURSE_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    COURSE_CUDA_CHECK(cudaEventRecord(events_[marks_.size()], stream_));
    marks_.emplace_back(phase);
  }
  /// Closes the profiled step (synchronous): each phase's time, from its mark to the next.
  void end_profiled_step(gpt::PhaseProfile& prof) {
    if (!profiling_) return;
    mark("");
    COURSE_CUDA_CHECK(cudaEventSynchronize(events_[marks_.size() - 1]));
    for (std::size_t i = 0; i + 1 < marks_.size(); ++i) {
      float ms = 0.f;
      COURSE_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
      prof.add(marks_[i], static_cast<double>(ms));
    }
    prof.end_step();
    marks_.clear();
    profiling_ = false;  // a validation forward after the step is not timed
  }

  // ---------------------------------------------------------------------------------
  // forward: B sequences of Act tokens (B*Act <= the configured batch * context). With
  // `loss_out`, the fused cross-entropy writes the mean loss there (device float) and,
  // with `grad`, overwrites the logits with dlogits for backward().
  void forward(i64 B, i64 T, float* loss_out, bool grad) {
    B_ = B;
    T_ = T;
    const i64 N = B * T, C = C_;
    // embed: training_ops' embedding_forward (fp32 tables, fp32 out): bf16, then converted
    // to the bf16 residual stream x0; fp32, written straight into x0.
    mark("embedding");
    m04::EmbeddingArgs e;
    e.ids = ids_.data();
    e.token_table = P(L_.wte);
    e.position_table = P(L_.wpe);
    if constexpr (kF32)
      e.out = x(0);
    else
      e.out = embed_.data();
    e.batch = B;
    e.seq = T;
    e.vocab = V_;
    e.dim = C;
    e.stream = stream_;
    m04::embedding_forward(e);
    if constexpr (!kF32) gpt::convert_f32_to_bf16(embed_.data(), x(0), N * C, stream_);

    for (i64 l = 0; l < c_.layers; ++l) {
      const gpt::BlockParams& p = L_.blocks[static_cast<std::size_t>(l)];
      // ln1: LayerNorm forward (step vectorized), x_{2l} -> ln1, fp32 mean/rstd saved.
      mark("fwd.ln1");
      layer_norm(x(2 * l), ln1(l), p.ln1_g, p.ln1_b, ln_stats(l, 0));
      // qkv: y = x W^Act + b (W [3C, C] as stored) -> [N, 3, H, d] (see linear()).
      mark("fwd.qkv");
      linear(ln1(l), C, p.qkv_w, p.qkv_b, 3 * C, qkv(l));
      // attention: module 3 tc_flash2 (fp32: fused), causal; Q, K, V are strided views of the
      // qkv rows; O [N, H, d], the fp32 logsumexp saved for the backward.
      mark("fwd.attention");
      impl::attention(Prec::attention, attention_args(l));
      // proj: x_{2l+1} = x_{2l} + O Wp^Act + bp (the residual epilogue).
      mark("fwd.proj");
      linear(att(l), C, p.proj_w, p.proj_b, C, x(2 * l + 1), x(2 * l));
      // ln2: LayerNorm forward, x_{2l+1} -> ln2.
      mark("fwd.ln2");
      layer_norm(x(2 * l + 1), ln2(l), p.ln2_g, p.ln2_b, ln_stats(l, 1));
      // fc: GELU(ln2 Wfc^Act + bfc); pre_gelu kept for GELU's backward.
      mark("fwd.fc");
      linear(ln2(l), C, p.fc_w, p.fc_b, 4 * C, fc_out(l), nullptr, fc_pre(l));
      // fc_proj: x_{2l+2} = x_{2l+1} + fc_out Wfp^Act + bfp.
      mark("fwd.fc_proj");
      linear(fc_out(l), 4 * C, p.fcproj_w, p.fcproj_b, C, x(2 * l + 2), x(2 * l + 1));
    }
    // lnf, then the head: logits = lnf wte^Act (no bias; bf16: matmul_tc b_transposed on
    // wte's bf16 copy; fp32: module 2's GEMM on wte itself), rows padded to Vp.
    mark("fwd.lnf");
    layer_norm(x(2 * c_.layers), lnf_.data(), L_.lnf_g, L_.lnf_b, lnf_stats());
    mark("fwd.head");
    if constexpr (kF32) {
      gemm_f32(lnf_.data(), C, false, W(L_.wte), C, true, logits_.data(), Vp_, N, V_, C);
    } else {
      m01::TcMatmulArgs h = gemm_args(lnf_.data(), C, W(L_.wte), C, N, V_, C);
      h.b_transposed = true;
      h.c_bf16 = logits_.data();
      h.ldc = Vp_;
      impl::matmul_tc(gemm_, h);
    }
    if (loss_out == nullptr) return;
    // loss: module 4's fused cross-entropy (step row_on_chip), dlogits in place.
    mark("fwd.cross_entropy");
    m04::FusedCrossEntropyArgs ce;
    ce.dtype = Prec::dtype;
    ce.logits = logits_.data();
    ce.targets = targets_.data();
    ce.losses = losses_.data();
    ce.loss_mean = loss_out;
    ce.num_valid = num_valid_.data();
    ce.dlogits = grad ? logits_.data() : nullptr;
    ce.rows = N;
    ce.vocab = V_;
    ce.ldl = ce.lddl = Vp_;
    ce.stream = stream_;
    impl::cross_entropy(kCrossEntropyStep, ce);
  }

  /// The logits of row `row` of the last forward (synchronous).
  std::vector<float> logits_row(i64 row) {
    std::vector<float> out(static_cast<std::size_t>(V_));
    if constexpr (kF32) {
      COURSE_CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_.data() + row * Vp_, out.size() * 4, cudaMemcpyDeviceToHost,
                                        stream_));
      COURSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } else {
      std::vector<std::uint16_t> bits(out.size());
      COURSE_CUDA_CHECK(cudaMemcpyAsync(bits.data(), logits_.data() + row * Vp_, bits.size() * 2,
                                        cudaMemcpyDeviceToHost, stream_));
      COURSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (std::size_t j = 0; j < bits.size(); ++j) out[j] = bf16_bits_to_float(bits[j]);
    }
    return out;
  }

  // ---------------------------------------------------------------------------------
  // backward: after forward(..., grad = true). Every gradient of grads_ is overwritten
  // (wte's: the embedding backward, then the head's dW added on top).
  void backward() {
    const i64 N = B_ * T_, C = C_;
    // head dX: dlnf = dlogits wte (A = dlogits [N, V] row stride Vp, B = wte [V, C] as
    // stored: matmul_tc plain on the bf16 copy, or module 2's fp32 GEMM).
    mark("bwd.head_dx");
    if constexpr (kF32) {
      gemm_f32(logits_.data(), Vp_, false, W(L_.wte), C, false, dc_.data(), C, N, C, V_);
    } else {
      m01::TcMatmulArgs h = gemm_args(logits_.data(), Vp_, W(L_.wte), C, N, C, V_);
      h.c_bf16 = dc_.data();
      h.ldc = C;
      impl::matmul_tc(gemm_, h);
    }
    // lnf backward: dx (= the residual stream's gradient, overwritten) from dlnf.
    mark("bwd.lnf");
    layer_norm_backward(x(2 * c_.layers), dc_.data(), L_.lnf_g, L_.lnf_b, lnf_stats(), false);

    for (i64 l = c_.layers - 1; l >= 0; --l) {
      const gpt::BlockParams& p = L_.blocks[static_cast<std::size_t>(l)];
      // fc_proj: d(fc_out) = dx Wfp, dWfp = dx^Act fc_out (fp32), dbfp = colsum(dx). dx
      // itself flows on unchanged through the residual connection.
      mark("bwd.fc_proj");
      linear_backward(dx_.data(), fc_out(l), C, 4 * C, p.fcproj_w, p.fcproj_b, d4_.data());
      // GELU backward (step vectorized, in place): d(pre) = d(fc_out) * gelu'(pre_gelu).
      mark("bwd.gelu");
      m04::GeluBackwardArgs g;
      g.x = fc_pre(l);
      g.dy = d4_.data();
      g.dx = d4_.data();
      g.n = N * 4 * C;
      g.dtype = Prec::gelu;
      g.stream = stream_;
      impl::gelu_backward(kGeluStep, g);
      // fc: d(ln2) = d(pre) Wfc, dWfc = d(pre)^Act ln2, dbfc = colsum(d(pre)).
      mark("bwd.fc");
      linear_backward(d4_.data(), ln2(l), 4 * C, C, p.fc_w, p.fc_b, dc_.data());
      // ln2 backward (step partial_sums): dx += LayerNorm'(x_{2l+1}) d(ln2) (accumulate_dx).
      mark("bwd.ln2");
      layer_norm_backward(x(2 * l + 1), dc_.data(), p.ln2_g, p.ln2_b, ln_stats(l, 1), true);
      // proj: d(O) = dx Wp, dWp = dx^Act O, dbp = colsum(dx).
      mark("bwd.proj");
      linear_backward(dx_.data(), att(l), C, C, p.proj_w, p.proj_b, dc_.data());
      // attention backward: module 4 tc_pipelined / tc_deterministic (fp32: flash /
      // flash_deterministic): dQ, dK, dV written as the strided column blocks of one
      // [N, 3C] buffer.
      mark("bwd.attention");
      typename Prec::AttentionBackwardArgs ab;
      const typename Prec::AttentionArgs fa = attention_args(l);
      ab.q = fa.q;
      ab.k = fa.k;
      ab.v = fa.v;
      ab.o = fa.o;
      ab.dout = dc_.data();
      ab.lse = fa.lse;
      ab.dq = dqkv_.data();
      ab.dk = dqkv_.data() + C;
      ab.dv = dqkv_.data() + 2 * C;
      ab.batch = fa.batch;
      ab.heads = ab.kv_heads = fa.heads;
      ab.seq_q = ab.seq_k = fa.seq_q;
      ab.head_dim = fa.head_dim;
      ab.q_strides = fa.q_strides;
      ab.k_strides = fa.k_strides;
      ab.v_strides = fa.v_strides;
      ab.o_strides = fa.o_strides;
      ab.do_strides = fa.o_strides;
      ab.dq_strides = ab.dk_strides = ab.dv_strides = fa.q_strides;
      ab.causal = true;
      ab.workspace = att_ws_.data();
      ab.workspace_bytes = att_ws_.bytes();
      ab.stream = stream_;
      impl::attention_backward(att_bwd_, ab);
      // qkv: d(ln1) = dqkv Wqkv, dWqkv = dqkv^Act ln1, dbqkv = colsum(dqkv).
      mark("bwd.qkv");
      linear_backward(dqkv_.data(), ln1(l), 3 * C, C, p.qkv_w, p.qkv_b, dc_.data());
      // ln1 backward: dx += LayerNorm'(x_{2l}) d(ln1): dx is now d(x_{2l}).
      mark("bwd.ln1");
      layer_norm_backward(x(2 * l), dc_.data(), p.ln1_g, p.ln1_b, ln_stats(l, 0), true);
    }
    // embed backward: training_ops' embedding_backward on dx (bf16: on an fp32 copy of it);
    // wte's and wpe's gradients overwritten, rows summed in a fixed order.
    mark("bwd.embedding");
    m04::EmbeddingBackwardArgs eb;
    if constexpr (kF32) {
      eb.dout = dx_.data();
    } else {
      gpt::convert_bf16_to_f32(dx_.data(), embed_.data(), N * C, stream_);
      eb.dout = embed_.data();
    }
    eb.ids = ids_.data();
    eb.token_grad = G(L_.wte);
    eb.position_grad = G(L_.wpe);
    eb.batch = B_;
    eb.seq = T_;
    eb.vocab = V_;
    eb.dim = C;
    eb.workspace = eb_ws_.data();
    eb.workspace_bytes = eb_ws_.bytes();
    eb.stream = stream_;
    m04::embedding_backward(eb);
    // head dW (weight tying): dwte += dlogits^Act lnf. bf16: matmul_tc a_transposed with
    // the accumulate epilogue; fp32: module 2's GEMM (a_transposed) into a scratch [V, C],
    // then training_ops' bias_add with it as the "residual" term: dwte += scratch.
    mark("bwd.head_dw");
    if constexpr (kF32) {
      gemm_f32(logits_.data(), Vp_, true, lnf_.data(), C, false, head_dw_.data(), C, V_, C, N);
      m04::BiasAddArgs ba;
      ba.y = G(L_.wte);
      ba.residual = head_dw_.data();
      ba.rows = V_;
      ba.cols = C;
      ba.stream = stream_;
      m04::bias_add(ba);
    } else {
      m01::TcMatmulArgs hw = gemm_args(logits_.data(), Vp_, lnf_.data(), C, V_, C, N);
      hw.a_transposed = true;
      hw.c = G(L_.wte);
      hw.ldc = C;
      hw.epilogue.accumulate = true;
      impl::matmul_tc(gemm_, hw);
    }
  }

  // ---------------------------------------------------------------------------------
  // step: module 4's AdamW (step multi_tensor) over every tensor: clip to max_norm, decay
  // the matrices, write the GEMMs' bf16 copies (bf16 only). The norm goes to `grad_norm`
  // (device).
  void step(i64 t, double lr, float* grad_norm) {
    mark("adamw");
    m04::AdamWArgs a;
    a.tensors = adam_tensors_.data();
    a.num_tensors = static_cast<i64>(adam_tensors_.size());
    a.lr = static_cast<float>(lr);
    a.beta1 = o_.beta1;
    a.beta2 = o_.beta2;
    a.eps = o_.eps;
    a.weight_decay = o_.weight_decay;
    a.t = t;
    a.max_norm = o_.clip;
    a.grad_norm = grad_norm;
    a.workspace = adam_ws_.data();
    a.workspace_bytes = adam_ws_.bytes();
    a.stream = stream_;
    impl::adamw(kAdamWStep, a);
  }

 private:
  float* P(int t) { return params_.data() + L_[t].offset; }
  float* G(int t) { return grads_.data() + L_[t].offset; }
  /// The weights the GEMMs read: the bf16 copy, or (fp32) the master weights themselves.
  const Act* W(int t) const {
    if constexpr (kF32)
      return params_.data() + L_[t].offset;
    else
      return wbf16_.data() + L_[t].offset;
  }
  // Per-layer activations are laid out for the configured N; a smaller forward (sampling)
  // uses the first rows of each.
  Act* x(i64 i) { return x_.data() + i * N_ * C_; }
  Act* ln1(i64 l) { return ln1_.data() + l * N_ * C_; }
  Act* qkv(i64 l) { return qkv_.data() + l * N_ * 3 * C_; }
  Act* att(i64 l) { return att_.data() + l * N_ * C_; }
  Act* ln2(i64 l) { return ln2_.data() + l * N_ * C_; }
  Act* fc_pre(i64 l) { return fc_pre_.data() + l * N_ * 4 * C_; }
  Act* fc_out(i64 l) { return fc_out_.data() + l * N_ * 4 * C_; }
  float* ln_stats(i64 l, int which) { return stats_.data() + (4 * l + 2 * which) * N_; }  // mean, then rstd
  float* lnf_stats() { return stats_.data() + 4 * c_.layers * N_; }

  m01::TcMatmulArgs gemm_args(const bf16* a, i64 lda, const bf16* b, i64 ldb, i64 m, i64 n, i64 k) const {
    m01::TcMatmulArgs g;
    g.a = a;
    g.lda = lda;
    g.b = b;
    g.ldb = ldb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.stream = stream_;
    return g;
  }

  /// fp32: C [m, n] (row stride ldc) = op(A) op(B), module 2's strided batched GEMM with one
  /// matrix (step warp_tiled). op(A) = A^Act when a_t (A stored k x m), op(B) = B^Act when b_t
  /// (B stored n x k); lda, ldb are the row strides as stored. C is overwritten.
  void gemm_f32(const float* a, i64 lda, bool a_t, const float* b, i64 ldb, bool b_t, float* c, i64 ldc, i64 m,
                i64 n, i64 k) const {
    m02::StridedBatchedGemmArgs<float> g;
    g.a = a;
    g.b = b;
    g.c = c;
    g.M = m;
    g.N = n;
    g.K = k;
    g.stride_a_row = lda;
    g.stride_b_row = ldb;
    g.stride_c_row = ldc;
    g.a_transposed = a_t;
    g.b_transposed = b_t;
    g.stream = stream_;
    impl::batched_gemm_strided(kGemmF32Step, g);
  }

  /// y [N, out] = x [N, in] W^Act + b (+ residual) (GELU with pre_gelu: y = GELU(pre_gelu),
  /// pre_gelu = x W^Act + b). bf16: one matmul_tc with its epilogue options. fp32: module 2's
  /// GEMM (b_transposed), then training_ops' bias_add (bias and residual in one pass), then
  /// GELU's fp32 forward from pre_gelu.
  void linear(const Act* xin, i64 in, int w, int b, i64 out, Act* y, const Act* residual = nullptr, Act* pre_gelu = nullptr) {
    const i64 N = B_ * T_;
    if constexpr (kF32) {
      float* acc = pre_gelu != nullptr ? pre_gelu : y;
      gemm_f32(xin, in, false, W(w), in, true, acc, out, N, out, in);
      m04::BiasAddArgs ba;
      ba.y = acc;
      ba.bias = P(b);
      ba.residual = residual;
      ba.rows = N;
      ba.cols = out;
      ba.stream = stream_;
      m04::bias_add(ba);
      if (pre_gelu != nullptr) {
        m04::GeluArgs g;
        g.x = pre_gelu;
        g.y = y;
        g.n = N * out;
        g.dtype = m04::GeluDType::f32;
        g.stream = stream_;
        impl::gelu_forward(kGeluStep, g);
      }
    } else {
      m01::TcMatmulArgs g = gemm_args(xin, in, W(w), in, N, out, in);
      g.b_transposed = true;
      g.c_bf16 = y;
      g.ldc = out;
      g.epilogue.bias = P(b);
      if (pre_gelu != nullptr) {
        g.epilogue.gelu = true;
        g.epilogue.pre_gelu = pre_gelu;
      }
      if (residual != nullptr) {
        g.epilogue.residual = residual;
        g.epilogue.ldr = out;
      }
      impl::matmul_tc(gemm_, g);
    }
  }

  /// The backward of y = x W^Act + b for dy [N, out]: dx [N, in] = dy W (activation type),
  /// dW [out, in] = dy^Act x (fp32, overwritten), db = colsum(dy) (fp32, overwritten).
  /// bf16: matmul_tc twice and gpt_support's bias_grad_bf16. fp32: module 2's GEMM twice
  /// (plain, then a_transposed) and module 4's linear_backward with only db requested
  /// (bias-gradient step block_column_strip: deterministic).
  void linear_backward(const Act* dy, const Act* xin, i64 out, i64 in, int w, int b, Act* dxout) {
    const i64 N = B_ * T_;
    if constexpr (kF32) {
      gemm_f32(dy, out, false, W(w), in, false, dxout, in, N, in, out);
      gemm_f32(dy, out, true, xin, in, false, G(w), in, out, in, N);
      m04::LinearBackwardArgs lb;
      lb.dy = dy;
      lb.db = G(b);
      lb.M = N;
      lb.K = in;
      lb.N = out;
      lb.lddy = out;
      lb.stream = stream_;
      impl::linear_backward(kBiasGradStep, lb);
    } else {
      m01::TcMatmulArgs d = gemm_args(dy, out, W(w), in, N, in, out);
      d.c_bf16 = dxout;
      d.ldc = in;
      impl::matmul_tc(gemm_, d);
      m01::TcMatmulArgs dw = gemm_args(dy, out, xin, in, out, in, N);
      dw.a_transposed = true;
      dw.c = G(w);
      dw.ldc = in;
      impl::matmul_tc(gemm_, dw);
      gpt::BiasGradBf16Args bg;
      bg.dy = dy;
      bg.db = G(b);
      bg.rows = N;
      bg.cols = out;
      bg.ld = out;
      bg.workspace = bias_ws_.data();
      bg.workspace_bytes = bias_ws_.bytes();
      bg.stream = stream_;
      gpt::bias_grad_bf16(bg);
    }
  }

  void layer_norm(const Act* xin, Act* y, int g, int b, float* stats) {
    const i64 N = B_ * T_;
    impl::layer_norm_forward(kLnStep, m04::contiguous_layer_norm_args(Prec::dtype, xin, y, P(g), P(b), stats,
                                                                      stats + N_, N, C_, stream_));
  }

  /// dx (= or +=) and dgamma, dbeta (=) of one LayerNorm; dy [N, C].
  void layer_norm_backward(const Act* xin, const Act* dy, int g, int b, const float* stats, bool accumulate) {
    m04::LayerNormBackwardArgs a = m04::contiguous_layer_norm_backward_args(
        Prec::dtype, xin, dy, dx_.data(), P(g), stats, stats + N_, G(g), G(b), B_ * T_, C_, stream_);
    a.accumulate_dx = accumulate;
    a.workspace = ln_ws_.data();
    a.workspace_bytes = ln_ws_.bytes();
    impl::layer_norm_backward(kLnBackwardStep, a);
  }

  typename Prec::AttentionArgs attention_args(i64 l) {
    const i64 C = C_, d = c_.head_dim();
    typename Prec::AttentionArgs a;
    a.q = qkv(l);
    a.k = qkv(l) + C;
    a.v = qkv(l) + 2 * C;
    a.o = att(l);
    a.lse = lse_.data() + l * c_.batch * c_.heads * c_.context;
    a.batch = B_;
    a.heads = a.kv_heads = c_.heads;
    a.seq_q = a.seq_k = T_;
    a.head_dim = d;
    a.q_strides = a.k_strides = a.v_strides = {T_ * 3 * C, d, 3 * C};  // [B, Act, 3, H, d]
    a.o_strides = {T_ * C, d, C};                                      // [B, Act, H, d]
    a.causal = true;
    a.stream = stream_;
    return a;
  }

  gpt::GptConfig c_;
  const gpt::ParamLayout& L_;
  const Options& o_;
  m01::TcMatmulStep gemm_;  ///< bf16 only
  m04::AttentionBackwardStep att_bwd_;
  i64 N_, C_, V_, Vp_;
  i64 B_ = 0, T_ = 0;
  cudaStream_t stream_{};
  DeviceBuffer<float> params_, grads_, m_, v_;
  DeviceBuffer<bf16> wbf16_;  ///< bf16 only: the GEMMs' weight copies
  DeviceBuffer<Act> x_, ln1_, qkv_, att_, ln2_, fc_pre_, fc_out_, lnf_, logits_;
  DeviceBuffer<float> stats_, lse_;
  DeviceBuffer<float> embed_;    ///< bf16 only
  DeviceBuffer<float> head_dw_;  ///< fp32 only
  DeviceBuffer<Act> dx_, dc_, d4_, dqkv_;
  DeviceBuffer<float> losses_;
  DeviceBuffer<std::int32_t> num_valid_, ids_, targets_;
  DeviceBuffer<float> att_ws_, ln_ws_, bias_ws_, eb_ws_, adam_ws_;
  std::vector<m04::AdamWTensor> adam_tensors_;
  bool profiling_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> marks_;
};

// =====================================================================================
// Files: --dump-init and checkpoints

std::ofstream open_out(const std::string& path, const char* flag) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream f(path, std::ios::binary);
  course::require_arg(static_cast<bool>(f), "m04_gpt", flag, path, "cannot be opened for writing");
  return f;
}

void dump_init(const std::string& path, const gpt::GptConfig& c, const gpt::ParamLayout& L,
               const std::vector<float>& p) {
  std::ofstream f = open_out(path, "--dump-init");
  gpt::write_gpt_header(f, "CRSGPTIN", c, 0);
  gpt::write_gpt_tensors(f, L, p);
  std::printf("   initial parameters (%lld fp32, ParamLayout order) written to %s\n", static_cast<long long>(L.count),
              path.c_str());
}

/// The fp32 gradients of the first step (before clipping and AdamW), for scripts/gpt_twin.py
/// --grads: the --dump-init format with magic "CRSGPTGR".
template <class Act>
void dump_grads(const std::string& path, const gpt::GptConfig& c, const gpt::ParamLayout& L, Gpt<Act>& model) {
  COURSE_CUDA_CHECK(cudaStreamSynchronize(model.stream()));  // the backward pass runs on the model's stream
  std::ofstream f = open_out(path, "--dump-grads");
  gpt::write_gpt_header(f, "CRSGPTGR", c, 0);
  gpt::write_gpt_tensors(f, L, model.grads().download());
  if (!f) throw course::Error("writing the gradients " + path + " failed");
  std::printf("   step 1's gradients (fp32, ParamLayout order) written to %s\n", path.c_str());
}

template <class Act>
void save_checkpoint(const std::string& path, const gpt::GptConfig& c, const gpt::ParamLayout& L, Gpt<Act>& model,
                     i64 step) {
  open_out(path, "--save");  // creates the folder and names the flag if the path cannot be written
  gpt::GptCheckpoint ck;
  ck.step = step;
  ck.params = model.parameters();
  ck.m = model.m().download();
  ck.v = model.v().download();
  gpt::write_gpt_checkpoint(path, c, L, ck);
  std::printf("   checkpoint after step %lld written to %s\n", static_cast<long long>(step), path.c_str());
}

/// Loads a checkpoint into `model`; returns the steps it had trained.
template <class Act>
i64 load_checkpoint(const std::string& path, const gpt::GptConfig& c, const gpt::ParamLayout& L, Gpt<Act>& model) {
  const gpt::GptCheckpoint ck = gpt::read_gpt_checkpoint(path, c, L);
  model.set_parameters(ck.params);
  model.m().upload(ck.m);
  model.v().upload(ck.v);
  return ck.step;
}

// =====================================================================================
// The run

struct Data {
  gpt::TokenFile train, val;
  std::vector<std::string> vocab;
  DeviceBuffer<std::uint8_t> train_dev, val_dev;
};

Data load_data(const std::string& dir) {
  Data d;
  d.train = gpt::read_token_file(dir + "/train.bin");
  d.val = gpt::read_token_file(dir + "/val.bin");
  d.vocab = gpt::read_vocab_file(dir + "/vocab.bin");
  if (d.train.vocab_size != d.vocab.size() || d.val.vocab_size != d.vocab.size())
    throw course::Error(dir + ": train.bin, val.bin and vocab.bin disagree on the vocabulary size: run "
                              "`python3 scripts/gpt_data.py prepare` again");
  return d;
}

/// FLOPs of one training step: 6 per parameter per token (forward 2, backward 4) for the
/// GEMMs (embeddings excluded, the tied head counted), plus the attention's 4 T d per
/// head per token forward (causal: half) times 3 for forward + backward.
double step_flops(const gpt::GptConfig& c) {
  const double C = static_cast<double>(c.d_model), tokens = static_cast<double>(c.tokens());
  const double gemm_params = static_cast<double>(c.layers) * 12.0 * C * C + static_cast<double>(c.vocab) * C;
  const double attention = static_cast<double>(c.layers) * 3.0 * 2.0 * static_cast<double>(c.context) * C;
  return tokens * (6.0 * gemm_params + attention);
}

std::string format_seconds(double s) {
  const long long t = static_cast<long long>(s + 0.5);
  return t >= 60 ? course::demo::format("%lldm%02llds", t / 60, t % 60) : course::demo::format("%llds", t);
}

/// Steps timed by --profile: kProfileSteps after kProfileWarmup untimed ones (fewer when
/// the run is shorter).
constexpr i64 kProfileWarmup = 5, kProfileSteps = 10;

void print_profile(const gpt::PhaseProfile& prof, const std::string& csv_path) {
  course::demo::section(course::demo::format(
      "--profile: %lld steps, CUDA events at each phase (summed over the layers); %.3f ms per step",
      static_cast<long long>(prof.steps()), prof.ms_per_step()));
  std::printf("   %-20s %10s %7s\n", "phase", "ms/step", "share");
  for (const gpt::PhaseProfile::Row& r : prof.rows())
    std::printf("   %-20s %10.3f %6.1f%%\n", r.phase.c_str(), r.ms_per_step, 100.0 * r.share);
  if (!csv_path.empty()) {
    std::ofstream f = open_out(csv_path, "--profile-csv");
    f << prof.csv();
    std::printf("   written to %s\n", csv_path.c_str());
  }
}

template <class Act>
void run(const Options& o) {
  constexpr bool kF32 = std::is_same_v<Act, float>;
  gpt::GptConfig c = o.model;
  Data data = load_data(o.data);
  c.vocab = static_cast<i64>(data.vocab.size());
  gpt::validate_config(c, "m04_gpt");
  if (data.train.num_tokens() <= c.context || data.val.num_tokens() <= c.context)
    throw course::Error(o.data + ": a split has no more tokens than one context of " + std::to_string(c.context));
  const gpt::ParamLayout L(c);

  course::demo::section("model");
  std::printf("   %lld layers, %lld heads of %lld, d_model %lld, context %lld, vocabulary %lld (logit rows padded to "
              "%lld)\n",
              static_cast<long long>(c.layers), static_cast<long long>(c.heads), static_cast<long long>(c.head_dim()),
              static_cast<long long>(c.d_model), static_cast<long long>(c.context), static_cast<long long>(c.vocab),
              static_cast<long long>(c.vocab_padded()));
  std::printf("   %lld parameters (%.2f M); batch %lld x %lld = %lld tokens per step; data %s: %lld train, %lld val "
              "tokens\n",
              static_cast<long long>(L.count), static_cast<double>(L.count) / 1e6, static_cast<long long>(c.batch),
              static_cast<long long>(c.context), static_cast<long long>(c.tokens()), o.data.c_str(),
              static_cast<long long>(data.train.num_tokens()), static_cast<long long>(data.val.num_tokens()));
  Gpt<Act> model(c, L, o);
  const std::string gemms = kF32 ? std::string("batched_gemm_strided ") + m02::step_name(kGemmF32Step) + " (fp32)"
                                 : "matmul_tc " + o.gemm_step;
  std::printf("   kernels: %s, attention %s, attention_backward %s, layer_norm %s / %s, gelu %s,\n"
              "   cross_entropy %s, adamw %s%s\n",
              gemms.c_str(), m03::step_name(Precision<Act>::attention), m04::step_name(model.attention_backward_step()),
              m04::step_name(kLnStep), m04::step_name(kLnBackwardStep), m04::step_name(kGeluStep),
              m04::step_name(kCrossEntropyStep), m04::step_name(kAdamWStep),
              kF32 ? (", bias_add, linear_backward (db) " + std::string(m04::step_name(kBiasGradStep)) +
                      "\n   (precision fp32, the check mode: fp32 activations, GEMMs and attention)")
                         .c_str()
                   : " (precision bf16: bf16 activations, fp32 master weights and moments)");
  data.train_dev = DeviceBuffer<std::uint8_t>(data.train.raw);
  data.val_dev = DeviceBuffer<std::uint8_t>(data.val.raw);

  i64 start = 0;
  if (!o.resume.empty()) {
    start = load_checkpoint(o.resume, c, L, model);
    std::printf("   resumed from %s after step %lld\n", o.resume.c_str(), static_cast<long long>(start));
  } else {
    const std::vector<float> init = gpt::gpt_init_parameters(c, L, o.seed);
    model.set_parameters(init);
    if (!o.dump_init.empty()) dump_init(o.dump_init, c, L, init);
  }

  // Per-step loss and gradient norm stay on the device until a log line needs them.
  const i64 end = std::max(start, o.steps);
  DeviceBuffer<float> loss_hist(static_cast<std::size_t>(std::max<i64>(end, 1))),
      norm_hist(static_cast<std::size_t>(std::max<i64>(end, 1))),
      val_hist(static_cast<std::size_t>(std::max<i64>(o.eval_batches, 1)));
  const gpt::LrSchedule sched{o.lr, o.min_lr, o.warmup, o.steps};
  struct Row {
    i64 step;
    double lr;
    double val = std::nan("");
  };
  std::vector<Row> rows;
  std::vector<std::pair<i64, double>> vals;

  const auto validate = [&]() {
    for (i64 i = 0; i < o.eval_batches; ++i) {
      model.load_batch(data.val_dev.data(), data.val.num_tokens(), static_cast<int>(data.val.token_bytes), 1,
                       static_cast<std::uint64_t>(i));
      model.forward(c.batch, c.context, val_hist.data() + i, false);
    }
    const std::vector<float> v = val_hist.download();
    double s = 0;
    for (i64 i = 0; i < o.eval_batches; ++i) s += v[static_cast<std::size_t>(i)];
    return s / static_cast<double>(std::max<i64>(o.eval_batches, 1));
  };

  if (start < end) {
    course::demo::section(course::demo::format(
        "training: steps %lld..%lld, AdamW lr %g (warm-up %lld, cosine to %g), betas (%g, %g), weight decay %g, "
        "clip %g, seed %llu%s",
        static_cast<long long>(start + 1), static_cast<long long>(end), o.lr, static_cast<long long>(o.warmup),
        o.min_lr, static_cast<double>(o.beta1), static_cast<double>(o.beta2), static_cast<double>(o.weight_decay),
        static_cast<double>(o.clip), static_cast<unsigned long long>(o.seed),
        o.deterministic ? ", deterministic" : ""));
  }
  const double flops = step_flops(c);
  const double peak_tflops = o.peak_tflops > 0.0 ? o.peak_tflops : (kF32 ? 67.0 : 989.0);
  // --profile: steps [p0, p1) are timed phase by phase (each ends with a synchronization).
  gpt::PhaseProfile prof;
  const i64 p0 = start + std::min<i64>(kProfileWarmup, (end - start) / 2), p1 = std::min(end, p0 + kProfileSteps);
  const auto t0 = std::chrono::steady_clock::now();
  auto t_last = t0;
  i64 last_logged = start;
  for (i64 s = start; s < end; ++s) {
    model.profile(o.profile && s >= p0 && s < p1);
    model.mark("batch");
    model.load_batch(data.train_dev.data(), data.train.num_tokens(), static_cast<int>(data.train.token_bytes), 0,
                     static_cast<std::uint64_t>(s));
    model.forward(c.batch, c.context, loss_hist.data() + s, true);
    model.backward();
    if (s == 0 && !o.dump_grads.empty()) dump_grads(o.dump_grads, c, L, model);
    const double lr = sched.at(s);
    model.step(s + 1, lr, norm_hist.data() + s);
    model.end_profiled_step(prof);
    rows.push_back({s + 1, lr});
    const bool last = s + 1 == end;
    const bool eval = o.eval_batches > 0 && o.eval_every > 0 && ((s + 1) % o.eval_every == 0 || last);
    if ((s + 1) % o.log_every == 0 || last || eval) {
      COURSE_CUDA_CHECK(cudaStreamSynchronize(model.stream()));
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - t_last).count();
      const double elapsed = std::chrono::duration<double>(now - t0).count();
      const i64 done = s + 1 - last_logged;
      float loss = 0.f, norm = 0.f;
      COURSE_CUDA_CHECK(cudaMemcpy(&loss, loss_hist.data() + s, 4, cudaMemcpyDeviceToHost));
      COURSE_CUDA_CHECK(cudaMemcpy(&norm, norm_hist.data() + s, 4, cudaMemcpyDeviceToHost));
      const double step_s = dt / static_cast<double>(done);
      const double eta = step_s * static_cast<double>(end - s - 1);
      std::printf("   step %5lld/%lld  loss %.4f  lr %.2e  |g| %.3f  %.2f ms/step  %.0f tok/s  MFU %.1f%%  ETA %s\n",
                  static_cast<long long>(s + 1), static_cast<long long>(end), static_cast<double>(loss), lr,
                  static_cast<double>(norm), 1e3 * step_s, static_cast<double>(c.tokens()) / step_s,
                  100.0 * flops / step_s / (peak_tflops * 1e12), format_seconds(eta).c_str());
      if (!std::isfinite(loss)) throw course::Error("the loss is not finite: training diverged");
      if (eval) {
        const double v = validate();
        rows.back().val = v;
        std::printf("   step %5lld  validation loss %.4f (%lld batches)   [%s elapsed]\n",
                    static_cast<long long>(s + 1),
                    v, static_cast<long long>(o.eval_batches), format_seconds(elapsed).c_str());
      }
      COURSE_CUDA_CHECK(cudaStreamSynchronize(model.stream()));
      t_last = std::chrono::steady_clock::now();  // validation time is not charged to the steps
      last_logged = s + 1;
    }
  }
  if (start < end) {
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("   %lld steps in %s (validation included)\n", static_cast<long long>(end - start),
                format_seconds(total).c_str());
    if (!o.csv.empty()) {
      const std::vector<float> losses = loss_hist.download(), norms = norm_hist.download();
      std::ofstream f = open_out(o.csv, "--csv");
      f << "step,lr,loss,grad_norm,val_loss\n";
      for (const Row& r : rows) {
        const auto i = static_cast<std::size_t>(r.step - 1);
        f << course::demo::format("%lld,%.6g,%.6f,%.4f,", static_cast<long long>(r.step), r.lr,
                                  static_cast<double>(losses[i]), static_cast<double>(norms[i]));
        if (std::isfinite(r.val)) f << course::demo::format("%.6f", r.val);
        f << "\n";
      }
      std::printf("   loss curve written to %s\n", o.csv.c_str());
    }
    if (!o.save.empty()) save_checkpoint(o.save, c, L, model, end);
    if (o.profile && prof.steps() > 0) print_profile(prof, o.profile_csv);
  } else if (o.eval_batches > 0) {
    std::printf("   validation loss %.4f\n", validate());
  }

  // Sampling: a full-context forward per character (B = 1, the last <= T tokens).
  if (o.sample_chars > 0) {
    course::demo::section(course::demo::format("%lld sampled characters (temperature %g, seed %llu)",
                                               static_cast<long long>(o.sample_chars), o.temperature,
                                               static_cast<unsigned long long>(o.seed)));
    std::vector<std::int32_t> ids;
    for (const char ch : o.prompt) {
      const auto it = std::find(data.vocab.begin(), data.vocab.end(), std::string(1, ch));
      if (it != data.vocab.end()) ids.push_back(static_cast<std::int32_t>(it - data.vocab.begin()));
    }
    if (ids.empty()) ids.push_back(0);
    std::string text;
    for (const std::int32_t id : ids) text += data.vocab[static_cast<std::size_t>(id)];
    for (i64 i = 0; i < o.sample_chars; ++i) {
      const i64 T = std::min<i64>(static_cast<i64>(ids.size()), c.context);
      const std::vector<std::int32_t> window(ids.end() - T, ids.end());
      model.upload_ids(window);
      model.forward(1, T, nullptr, false);
      const double u = gpt::gpt_uniform(o.seed, static_cast<std::uint64_t>(i));
      const std::int32_t next = gpt::sample_token(model.logits_row(T - 1), o.temperature, u);
      ids.push_back(next);
      text += data.vocab[static_cast<std::size_t>(next)];
    }
    std::printf("%s\n", text.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "m04_gpt: a character-level GPT trained on Shakespeare with the course's kernels only (bf16 mixed precision, "
      "or fp32 for checking)"};
  Options o;
  app.add_option("--data", o.data, "folder of train.bin, val.bin, vocab.bin (python3 scripts/gpt_data.py prepare)");
  app.add_option("--steps", o.steps, "training steps in all (a resumed run continues up to this count)")
      ->check(CLI::Range(0, 10000000));
  app.add_option("--layers", o.model.layers, "transformer blocks")->check(CLI::Range(1, 256));
  app.add_option("--heads", o.model.heads, "attention heads per block")->check(CLI::Range(1, 256));
  app.add_option("--d-model", o.model.d_model, "model width C (head_dim = C / heads must be 64 or 128)")
      ->check(CLI::Range(64, 8192));
  app.add_option("--context", o.model.context, "tokens per sequence T")->check(CLI::Range(2, 65536));
  app.add_option("--batch", o.model.batch, "sequences per step B")->check(CLI::Range(1, 65535));
  app.add_option("--lr", o.lr, "peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine decay")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", o.warmup, "linear warm-up steps")->check(CLI::Range(0, 10000000));
  app.add_option("--beta1", o.beta1, "AdamW beta1")->check(CLI::Range(0.0, 0.9999));
  app.add_option("--beta2", o.beta2, "AdamW beta2")->check(CLI::Range(0.0, 0.99999));
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (matrices and embeddings only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--clip", o.clip, "global gradient-norm clipping (0: none)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "seed of the initial parameters, the batches and the sampling");
  app.add_option("--eval-every", o.eval_every, "steps between validation losses (0: only at the end)")
      ->check(CLI::Range(0, 10000000));
  app.add_option("--eval-batches", o.eval_batches, "validation batches per validation loss")
      ->check(CLI::Range(0, 10000));
  app.add_option("--log-every", o.log_every, "steps between progress lines")->check(CLI::Range(1, 10000000));
  app.add_option("--csv", o.csv, "the loss curve (step, lr, loss, grad_norm, val_loss); empty: none");
  app.add_option("--sample", o.sample_chars, "characters to sample at the end (0: none)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)")->check(CLI::NonNegativeNumber);
  app.add_option("--prompt", o.prompt, "text the sample continues (characters outside the vocabulary are dropped)");
  app.add_flag("--deterministic", o.deterministic,
               "the attention backward's deterministic step: the same seed gives the same losses bit for bit");
  app.add_option("--precision", o.precision,
                 "bf16 (mixed precision, the fast mode) or fp32 (every activation, GEMM and attention in fp32: "
                 "the mode the PyTorch twin checks tightly)")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  app.add_option("--gemm", o.gemm_step, "matmul_tc step of every GEMM (mma_sync, or a Hopper step); bf16 only");
  app.add_flag("--profile", o.profile,
               "time each phase of a training step with CUDA events (10 steps after 5 untimed ones), print a "
               "table and write --profile-csv");
  app.add_option("--profile-csv", o.profile_csv, "where --profile writes its table (phase, ms_per_step, share)");
  app.add_option("--dump-init", o.dump_init, "write the initial parameters here (for scripts/gpt_twin.py)");
  app.add_option("--dump-grads", o.dump_grads, "write step 1's gradients here (for scripts/gpt_twin.py --grads)");
  app.add_option("--save", o.save, "write a checkpoint (parameters and AdamW moments) here at the end");
  app.add_option("--resume", o.resume, "continue from this checkpoint (--steps 0 only samples from it)");
  app.add_option("--peak-tflops", o.peak_tflops,
                 "the GPU's peak for the MFU column (default: 989, an H100 SXM's dense bf16; in fp32 67, its fp32)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  o.gemm_given = app.count("--gemm") > 0;
  // Options that only mean something in one precision are rejected by name in the other.
  const gpt::GptPrecision precision = gpt::parse_precision(o.precision);
  if (precision == gpt::GptPrecision::fp32 && o.gemm_given) {
    std::fprintf(stderr,
                 "m04_gpt: --gemm %s selects a bf16 tensor-core matmul_tc step; --precision fp32 runs every GEMM on "
                 "module 2's fp32 batched GEMM (warp_tiled): drop --gemm or use --precision bf16\n",
                 o.gemm_step.c_str());
    return 2;
  }
  if (o.eval_every == 0) o.eval_every = std::max<i64>(o.steps, 1);
  if (std::string why; !course::cuda_device_available(&why)) {
    // The trainer has no CPU path: everything it runs is a GPU kernel.
    std::fprintf(stderr,
                 "m04_gpt: no usable NVIDIA GPU (%s).\nm04_gpt trains on the GPU only, there is no CPU fallback: "
                 "run it on a machine with an NVIDIA GPU (sm_80 or newer; the defaults are sized for an H100).\n",
                 why.c_str());
    return 2;
  }
  return course::demo::run([&](bool) {
    if (precision == gpt::GptPrecision::fp32)
      run<float>(o);
    else
      run<bf16>(o);
  });
}
