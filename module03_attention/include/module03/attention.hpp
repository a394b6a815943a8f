#pragma once
/// @file attention.hpp
/// @brief Module 3 API: fp32 scaled dot-product attention (forward), as a ladder of steps.
///
/// For every batch index b and query head h:
///
///     O[b,h] = softmax( scale * Q[b,h] K[b,g(h)]^T  [+ ALiBi bias] [masked] ) V[b,g(h)]
///     lse[b,h,i] = log sum_j exp(scale * q_i . k_j [+ bias])      (over the visible keys j)
///
/// Q and O are indexed [B, H, N_q, d]; K and V are indexed [B, H_kv, N_k, d]; query head h
/// reads key/value head g(h) = h / (H / H_kv) (grouped-query attention; H_kv = H is ordinary
/// multi-head attention, H_kv = 1 multi-query attention).
///
/// ## Layouts: four strides per tensor, in ELEMENTS
/// Element (b, h, n, c) of X lives at  X + b*s.batch + h*s.head + n*s.seq + c  (the
/// dimension stride is always 1). Both common storage orders are just strides:
///
///     [B, H, N, d] ("BHND", heads outer):   batch = H*N*d, head = N*d, seq = d
///     [B, N, H, d] ("BNHD", a fused QKV projection's output): batch = N*H*d, head = d, seq = H*d
///
/// attention_strides() builds either; padded rows (seq > d) are allowed too.
///
/// ## Options
/// - scale: 0 selects 1/sqrt(d).
/// - causal: query i sees key j iff j <= i + (N_k - N_q): the mask is aligned to the
///   bottom-right corner, so with N_q < N_k (decoding with a KV cache) the last query sees
///   every key, and with N_q > N_k the first N_q - N_k queries see nothing (O = 0, lse = -inf).
///   This is course::ref::attention_forward's convention.
/// - rope (step fused_options): rotary position embedding applied to Q and K inside the
///   kernel, the "rotate-half" (GPT-NeoX / Llama) pairing: element c pairs with c + d/2,
///       angle = pos * rope_theta^(-2c/d),   c = 0 .. d/2 - 1
///       x'[c]       = x[c] cos(angle) - x[c + d/2] sin(angle)
///       x'[c + d/2] = x[c] sin(angle) + x[c + d/2] cos(angle)
///   Positions are token indices, queries aligned to the END of the keys like the causal
///   mask: key j is at position j, query i at position i + (N_k - N_q).
///   (Not the interleaved GPT-J pairing (2c, 2c+1): same idea, different memory pairs.)
/// - alibi (step fused_options): a per-head linear bias added to the scaled score,
///       bias(h, i, j) = m_h * (j - (i + N_k - N_q)),   m_h = 2^(-8 (h + 1) / H)
///   (equivalently -m_h * (distance back from the query); <= 0 for every key a causal query
///   sees). Without the causal mask the same formula is applied as is (keys ahead of the
///   query get a positive bias); the symmetric -m|i-j| variant is not implemented.
///   Slopes use the QUERY head h and the query head count H.
/// - kv_heads < heads (step fused_options): grouped-query attention, see above.
///
/// ## Contract (validate_attention_args, run by both implementations before any launch;
/// each violation throws course::InvalidArgument naming the argument and its value)
/// - batch, heads, kv_heads, seq_q, seq_k >= 1; seq_q, seq_k <= 2^31 - 1; heads % kv_heads == 0;
///   batch * heads <= 65535 (the (batch, head) pair is blockIdx.y, see the lesson).
/// - head_dim in {16, 32, 64, 96, 128} and <= the step's limit (step_support()).
/// - q, k, v, o non-null and 16-byte aligned; every stride >= 0 and a multiple of 4, so each
///   row starts 16-byte aligned (float4 and cp.async loads); seq strides >= head_dim.
///   Input batch/head strides may be 0 (broadcast); O must not map two elements to one address.
/// - O must not overlap Q, K or V; lse (B*H*N_q contiguous floats, optional) must not overlap
///   any of them; the workspace (step naive) must not overlap anything either.
/// - Features a step lacks are rejected, not silently ignored (step_support()).

#include "course/error.hpp"
#include "course/impl.hpp"
#include "course/tensor.hpp"
#include "course/validate.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace course::m03 {

/// The attention ladder, in teaching order.
enum class AttentionStep {
  naive,          ///< S materialized: module 2's GEMM, module 1's softmax, GEMM again
  tiled_online,   ///< one kernel, K/V tiles in shared memory, online softmax, a thread per query row
  causal,         ///< tiled_online + causal masking only on diagonal tiles, later tiles skipped
  fused,          ///< register-blocked micro-tiles, cp.async pipeline, every head dim, lse
  fused_options,  ///< the fused kernel with RoPE, ALiBi and grouped-query attention
  // Tensor-core steps: bf16 Q/K/V/O, fp32 accumulation and statistics (AttentionArgsBf16).
  tc_mma,                 ///< mma.sync m16n8k16 + ldmatrix (V via .trans); S and P through shared memory
  tc_swizzled_pipelined,  ///< + XOR-swizzled tiles, 2-stage cp.async K/V ring, Q fragments in registers
  tc_register_softmax,    ///< + softmax on the accumulator fragments, P reused as the A operand, exp2
  tc_flash2,              ///< the same kernel with FlashAttention-2's tile shapes (32 query rows per warp)
  // Hopper steps (sm_90a only, head_dim 64 or 128; elsewhere they throw course::Unsupported).
  tc_wgmma,             ///< warpgroup MMA: S from shared-memory Q and K, O += P V with P from registers
  tc_warp_specialized,  ///< + TMA loads into an mbarrier ring, producer and consumer warpgroups, setmaxnreg
  tc_pingpong,          ///< + the two consumer warpgroups take turns: one's softmax under the other's GEMMs
  tc_overlap,           ///< + a warpgroup's softmax of tile j starts when S_j lands, under its own P_{j-1} V_{j-1}
  tc_persistent,        ///< + one block per SM walks the query tiles; the next tile's Q and K/V load under this one
};

inline constexpr StepInfo<AttentionStep> kAttentionSteps[] = {
    {AttentionStep::naive, "naive",
     "S = scale*Q*K^T in a [B,H,N_q,N_k] workspace (module 2 GEMM), module 1 softmax in place, O = P*V"},
    {AttentionStep::tiled_online, "tiled_online",
     "one kernel: K/V tiles staged in shared memory, running max/sum/accumulator in registers, S never stored"},
    {AttentionStep::causal, "causal",
     "tiled_online with the causal mask applied only in diagonal tiles; tiles past the diagonal skipped"},
    {AttentionStep::fused, "fused",
     "8x4 register micro-tiles, P through shared memory, cp.async K/V prefetch, d in {16..128}, lse"},
    {AttentionStep::fused_options, "fused_options",
     "the fused kernel plus RoPE on Q/K tiles, ALiBi bias on scores, grouped-query K/V heads"},
    {AttentionStep::tc_mma, "tc_mma",
     "bf16; mma.sync m16n8k16 + ldmatrix (V through .trans), S and P staged in shared memory"},
    {AttentionStep::tc_swizzled_pipelined, "tc_swizzled_pipelined",
     "bf16; XOR-swizzled Q/K/V tiles, 2-stage cp.async K/V ring, Q fragments held in registers"},
    {AttentionStep::tc_register_softmax, "tc_register_softmax",
     "bf16; online softmax on the S accumulators, P re-packed as the A operand of P*V, exp2, O via smem"},
    {AttentionStep::tc_flash2, "tc_flash2",
     "bf16; FlashAttention-2's tile shapes: 128-row Q tiles, 32 rows per warp, 64/128-key K/V tiles"},
    {AttentionStep::tc_wgmma, "tc_wgmma",
     "bf16, Hopper; wgmma for S = Q K^T (Q, K from swizzled smem) and O += P V (P from registers)"},
    {AttentionStep::tc_warp_specialized, "tc_warp_specialized",
     "bf16, Hopper; Q, K, V by TMA into an mbarrier ring; 1 producer + 2 consumer warpgroups, setmaxnreg"},
    {AttentionStep::tc_pingpong, "tc_pingpong",
     "bf16, Hopper; consumers take turns (named barriers): P V and next S issued together, softmax overlapped"},
    {AttentionStep::tc_overlap, "tc_overlap",
     "bf16, Hopper; + S_j waited for alone: softmax j runs under the same warpgroup's P_{j-1} V_{j-1}"},
    {AttentionStep::tc_persistent, "tc_persistent",
     "bf16, Hopper; + one block per SM takes (q tile, head) from an atomic counter; next Q, K/V load under this tile"},
};
static_assert(steps_in_enum_order(kAttentionSteps), "kAttentionSteps must list AttentionStep in enum order");

/// Element type of Q, K, V and O a step reads and writes (lse is fp32 for every step).
/// fp32 steps take AttentionArgs, bf16 steps AttentionArgsBf16; the other overload rejects them.
enum class AttentionDType { f32, bf16 };

/// What a step accepts. Anything else is rejected by validate_attention_args.
struct StepSupport {
  int max_head_dim;  ///< 64 when a thread keeps a whole q row and accumulator in registers
  bool causal;       ///< args.causal may be true
  bool lse;          ///< args.lse may be non-null
  bool options;      ///< rope, alibi and kv_heads < heads
  bool workspace;    ///< needs attention_workspace_bytes() of scratch
  bool hopper = false;  ///< sm_90a only (wgmma, TMA), head_dim in kHopperHeadDims
};

/// The columns of the step table that only attention has: row i describes the step of
/// row i of kAttentionSteps (same length, same order: checked below). step_dtype() and
/// step_support() read them; validation, tests, benchmarks, demos and the bridge call those.
struct AttentionStepColumns {
  AttentionStep step;
  AttentionDType dtype;
  StepSupport support;  ///< {max_head_dim, causal, lse, options, workspace}
};

inline constexpr AttentionStepColumns kAttentionStepColumns[] = {
    {AttentionStep::naive, AttentionDType::f32, {128, true, false, false, true}},
    {AttentionStep::tiled_online, AttentionDType::f32, {64, false, true, false, false}},
    {AttentionStep::causal, AttentionDType::f32, {64, true, true, false, false}},
    {AttentionStep::fused, AttentionDType::f32, {128, true, true, false, false}},
    {AttentionStep::fused_options, AttentionDType::f32, {128, true, true, true, false}},
    // bf16 steps: grouped-query attention always; RoPE/ALiBi do not exist in AttentionArgsBf16.
    {AttentionStep::tc_mma, AttentionDType::bf16, {128, true, true, false, false}},
    {AttentionStep::tc_swizzled_pipelined, AttentionDType::bf16, {128, true, true, false, false}},
    {AttentionStep::tc_register_softmax, AttentionDType::bf16, {128, true, true, false, false}},
    {AttentionStep::tc_flash2, AttentionDType::bf16, {128, true, true, false, false}},
    {AttentionStep::tc_wgmma, AttentionDType::bf16, {128, true, true, false, false, true}},
    {AttentionStep::tc_warp_specialized, AttentionDType::bf16, {128, true, true, false, false, true}},
    {AttentionStep::tc_pingpong, AttentionDType::bf16, {128, true, true, false, false, true}},
    {AttentionStep::tc_overlap, AttentionDType::bf16, {128, true, true, false, false, true}},
    {AttentionStep::tc_persistent, AttentionDType::bf16, {128, true, true, false, false, true}},
};
static_assert(columns_match_steps(kAttentionSteps, kAttentionStepColumns),
              "kAttentionStepColumns must have one row per row of kAttentionSteps, in the same order");

/// The dtype and support columns of `step` (a value outside the enum: f32, supports nothing).
constexpr AttentionDType step_dtype(AttentionStep step) {
  const auto i = static_cast<std::size_t>(step);
  return i < std::size(kAttentionStepColumns) ? kAttentionStepColumns[i].dtype : AttentionDType::f32;
}

constexpr StepSupport step_support(AttentionStep step) {
  const auto i = static_cast<std::size_t>(step);
  return i < std::size(kAttentionStepColumns) ? kAttentionStepColumns[i].support : StepSupport{};
}

/// The steps of one element type, in ladder order (tests and benchmarks iterate these).
inline std::vector<StepInfo<AttentionStep>> attention_steps(AttentionDType dtype) {
  std::vector<StepInfo<AttentionStep>> out;
  for (const auto& info : kAttentionSteps)
    if (step_dtype(info.step) == dtype) out.push_back(info);
  return out;
}

inline const char* step_name(AttentionStep step) { return step_name_in(kAttentionSteps, step); }

/// Head dimensions the kernels are instantiated for.
inline constexpr int kHeadDims[] = {16, 32, 64, 96, 128};
/// Those of steps tiled_online and causal, whose threads keep a whole q row and output
/// row in registers: kHeadDims up to their max_head_dim (checked below).
inline constexpr int kTiledHeadDims[] = {16, 32, 64};

namespace detail {
/// True when `list` is exactly the entries of kHeadDims that are <= max_d, in order.
template <std::size_t N>
constexpr bool head_dims_up_to(const int (&list)[N], int max_d) {
  std::size_t n = 0;
  for (const int d : kHeadDims)
    if (d <= max_d && (n >= N || list[n++] != d)) return false;
  return n == N;
}
}  // namespace detail
static_assert(detail::head_dims_up_to(kTiledHeadDims, step_support(AttentionStep::tiled_online).max_head_dim) &&
                  detail::head_dims_up_to(kTiledHeadDims, step_support(AttentionStep::causal).max_head_dim),
              "kTiledHeadDims must be the kHeadDims that steps tiled_online and causal accept");

inline constexpr std::int64_t kMaxGridY = 65535;           ///< gridDim.y limit
inline constexpr std::int64_t kMaxSeq = 2147483647;        ///< sequence lengths are int in the kernels

/// Strides of one [B, H, N, d] tensor in elements (the d stride is 1).
struct AttentionStrides {
  std::int64_t batch = 0;
  std::int64_t head = 0;
  std::int64_t seq = 0;
};

/// Strides of a dense tensor with `heads` heads of `seq` rows of `head_dim` floats.
inline AttentionStrides attention_strides(AttentionLayout layout, std::int64_t heads, std::int64_t seq,
                                          std::int64_t head_dim) {
  if (layout == AttentionLayout::BHND) return {heads * seq * head_dim, seq * head_dim, head_dim};
  return {seq * heads * head_dim, head_dim, heads * head_dim};
}

/// Device-side arguments of attention(). All pointers are DEVICE pointers.
struct AttentionArgs {
  const float* q = nullptr;  ///< [B, H, N_q, d]
  const float* k = nullptr;  ///< [B, H_kv, N_k, d]
  const float* v = nullptr;  ///< [B, H_kv, N_k, d]
  float* o = nullptr;        ///< [B, H, N_q, d]
  float* lse = nullptr;      ///< optional, [B, H, N_q] contiguous: natural-log logsumexp of each score row
  std::int64_t batch = 0;     ///< B
  std::int64_t heads = 0;     ///< H, query heads
  std::int64_t kv_heads = 0;  ///< H_kv, key/value heads (H % H_kv == 0)
  std::int64_t seq_q = 0;     ///< N_q
  std::int64_t seq_k = 0;     ///< N_k
  std::int64_t head_dim = 0;  ///< d
  AttentionStrides q_strides, k_strides, v_strides, o_strides;
  float scale = 0.f;           ///< 0 selects 1/sqrt(d)
  bool causal = false;         ///< bottom-right aligned causal mask
  bool rope = false;           ///< rotary embedding of Q and K (fused_options)
  float rope_theta = 10000.f;  ///< RoPE base
  bool alibi = false;          ///< ALiBi bias (fused_options)
  float* workspace = nullptr;       ///< scratch for step naive
  std::size_t workspace_bytes = 0;  ///< >= attention_workspace_bytes(step, ...)
  cudaStream_t stream = nullptr;
};

namespace detail {
/// The part every make_*_args shares (forward fp32 and bf16, module 4's backward): the
/// sizes, Q and O (and K and V) dense in `layout`, the stream.
template <class Args>
void set_dense_shape(Args& a, std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t seq_q,
                     std::int64_t seq_k, std::int64_t head_dim, AttentionLayout layout, cudaStream_t stream) {
  a.batch = batch;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.seq_q = seq_q;
  a.seq_k = seq_k;
  a.head_dim = head_dim;
  a.q_strides = attention_strides(layout, heads, seq_q, head_dim);
  a.k_strides = attention_strides(layout, kv_heads, seq_k, head_dim);
  a.v_strides = a.k_strides;
  a.o_strides = a.q_strides;
  a.stream = stream;
}

/// FLOPs by the FlashAttention convention: `gemms` GEMMs of N_q x N_k x d per (batch,
/// head), 2 FLOPs per multiply-add, halved when causal (about half the scores are
/// computed). The forward has 2 (S = Q K^T, O = P V), the backward 5.
template <class Args>
double gemm_flops(const Args& a, int gemms) {
  const double f = 2.0 * gemms * static_cast<double>(a.batch) * static_cast<double>(a.heads) *
                   static_cast<double>(a.seq_q) * static_cast<double>(a.seq_k) * static_cast<double>(a.head_dim);
  return a.causal ? f / 2 : f;
}

/// The scale actually used: a.scale, or 1/sqrt(d) when it is 0.
template <class Args>
float scale_or_default(const Args& a) {
  return a.scale != 0.f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
}
}  // namespace detail

/// Arguments for dense Q, K, V and O all stored in `layout`.
inline AttentionArgs make_attention_args(const float* q, const float* k, const float* v, float* o,
                                         std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                                         std::int64_t seq_q, std::int64_t seq_k, std::int64_t head_dim,
                                         AttentionLayout layout, cudaStream_t stream = nullptr) {
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  detail::set_dense_shape(a, batch, heads, kv_heads, seq_q, seq_k, head_dim, layout, stream);
  return a;
}

/// The scale actually used: args.scale, or 1/sqrt(d) when it is 0.
inline float effective_scale(const AttentionArgs& a) { return detail::scale_or_default(a); }

/// Scratch bytes `step` needs: the score matrix S (= P after the in-place softmax),
/// B*H*N_q*N_k floats, for naive -- O(N^2) memory -- and nothing for the fused steps.
inline std::size_t attention_workspace_bytes(AttentionStep step, std::int64_t batch, std::int64_t heads,
                                             std::int64_t seq_q, std::int64_t seq_k) {
  if (!step_support(step).workspace || batch <= 0 || heads <= 0 || seq_q <= 0 || seq_k <= 0) return 0;
  return static_cast<std::size_t>(batch) * static_cast<std::size_t>(heads) * static_cast<std::size_t>(seq_q) *
         static_cast<std::size_t>(seq_k) * sizeof(float);
}
inline std::size_t attention_workspace_bytes(AttentionStep step, const AttentionArgs& a) {
  return attention_workspace_bytes(step, a.batch, a.heads, a.seq_q, a.seq_k);
}

/// FLOPs by the FlashAttention convention: 4*B*H*N_q*N_k*d (two GEMMs, 2 FLOPs per
/// multiply-add), halved when causal (about half the scores are computed).
inline double attention_flops(const AttentionArgs& a) { return detail::gemm_flops(a, 2); }

/// Device bytes a call touches: dense Q, K, V, O (+ lse) + the step's workspace. O(N) for
/// the fused steps, O(N^2) for naive.
inline std::size_t attention_device_bytes(AttentionStep step, const AttentionArgs& a) {
  const auto f = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  std::size_t elems = 2 * f(a.batch) * f(a.heads) * f(a.seq_q) * f(a.head_dim) +
                      2 * f(a.batch) * f(a.kv_heads) * f(a.seq_k) * f(a.head_dim);
  if (a.lse != nullptr) elems += f(a.batch) * f(a.heads) * f(a.seq_q);
  return elems * sizeof(float) + attention_workspace_bytes(step, a);
}

namespace detail {

// The generic checks (message builder, strided extents, injectivity, overlap, stride
// rules) are course::validate's (course/validate.hpp), shared with the other modules.
using ::course::validate::Dim;
using ::course::validate::max_offset;
using ::course::validate::msg;
using ::course::validate::ranges_intersect;
using ::course::validate::require_injective;
using ::course::validate::require_row_stride;
using ::course::validate::require_stride;
using ::course::validate::span_bytes;

/// How messages name the strides of one [B, H, N, d] tensor: "q_strides.batch", ...
/// Module 4 adds the names of its gradients.
struct StrideNames {
  const char* batch;
  const char* head;
  const char* seq;
};
inline constexpr StrideNames kQNames{"q_strides.batch", "q_strides.head", "q_strides.seq"};
inline constexpr StrideNames kKNames{"k_strides.batch", "k_strides.head", "k_strides.seq"};
inline constexpr StrideNames kVNames{"v_strides.batch", "v_strides.head", "v_strides.seq"};
inline constexpr StrideNames kONames{"o_strides.batch", "o_strides.head", "o_strides.seq"};

/// Why fp32 rows must start 16-byte aligned.
inline constexpr const char* kFloatRowRule = "every row must start 16-byte aligned (float4 / cp.async loads)";

/// The stride rules of one tensor: strides >= 0 and multiples of `multiple` elements
/// (16-byte rows: 4 floats, or 8 bf16; `why` says which loads need it), rows of one head
/// apart by at least head_dim.
inline void require_strides(const AttentionStrides& s, std::int64_t head_dim, const char* fn, const StrideNames& n,
                            std::int64_t multiple = 4, const char* why = kFloatRowRule) {
  for (const auto& [value, name] : {std::pair{s.batch, n.batch}, {s.head, n.head}, {s.seq, n.seq}})
    require_stride(value, fn, name, multiple, why);
  require_row_stride(s.seq, head_dim, "head_dim", fn, n.seq, "rows of one head must not overlap");
}

/// The dims of a [B, H, N, d] tensor with strides s, named for messages (n) or not.
inline std::vector<Dim> tensor_dims(const AttentionStrides& s, std::int64_t B, std::int64_t H, std::int64_t N,
                                    std::int64_t d, const StrideNames& n = {"", "", ""}) {
  return {{d, 1, "head_dim"}, {N, s.seq, n.seq}, {H, s.head, n.head}, {B, s.batch, n.batch}};
}

/// The size rules every attention entry point shares (forward fp32 and bf16, module 4's
/// backward): sizes >= 1, kv_heads divides heads, one (batch, head) pair per blockIdx.y,
/// sequence lengths that fit an int.
template <class Args>
void require_attention_sizes(const Args& a, const char* fn) {
  require_arg(a.batch >= 1, fn, "batch", a.batch, "must be >= 1");
  require_arg(a.heads >= 1, fn, "heads", a.heads, "must be >= 1");
  require_arg(a.kv_heads >= 1, fn, "kv_heads", a.kv_heads, "must be >= 1");
  require_arg(a.heads % a.kv_heads == 0, fn, "kv_heads", a.kv_heads,
              msg("must divide heads = ", a.heads, " (query head h reads kv head h / (heads / kv_heads))"));
  require_arg(a.batch <= kMaxGridY && a.heads <= kMaxGridY && a.batch * a.heads <= kMaxGridY, fn, "batch", a.batch,
              msg("times heads = ", a.heads, " must be <= 65535: one (batch, head) pair per blockIdx.y"));
  require_arg(a.seq_q >= 1 && a.seq_q <= kMaxSeq, fn, "seq_q", a.seq_q, "must be in [1, 2^31 - 1]");
  require_arg(a.seq_k >= 1 && a.seq_k <= kMaxSeq, fn, "seq_k", a.seq_k, "must be in [1, 2^31 - 1]");
}

/// head_dim is one the fp32 kernels are instantiated for (kHeadDims).
inline void require_fp32_head_dim(std::int64_t head_dim, const char* fn) {
  const bool known_d = std::find(std::begin(kHeadDims), std::end(kHeadDims), head_dim) != std::end(kHeadDims);
  require_arg(known_d, fn, "head_dim", head_dim,
              "must be one of 16, 32, 64, 96, 128 (the kernels are templated on it)");
}

/// An operand's address range, for the overlap checks.
struct Range {
  const void* p;
  std::size_t bytes;
  const char* name;
};

/// The tensor checks the fp32 and bf16 forward share: Q, K, V, O non-null and 16-byte
/// aligned, lse float-aligned; every stride a multiple of `multiple` elements (`why`);
/// O maps no two elements to one address; O overlaps none of Q, K, V, and lse (when
/// given) none of Q, K, V, O. Returns the byte ranges of Q, K, V, O (elements of type T).
template <class T, class Args>
std::array<Range, 4> require_forward_tensors(const Args& a, const char* fn, std::int64_t multiple, const char* why) {
  require_not_null(a.q, fn, "q");
  require_not_null(a.k, fn, "k");
  require_not_null(a.v, fn, "v");
  require_not_null(a.o, fn, "o");
  require_aligned(a.q, 16, fn, "q");
  require_aligned(a.k, 16, fn, "k");
  require_aligned(a.v, 16, fn, "v");
  require_aligned(a.o, 16, fn, "o");
  require_aligned(a.lse, alignof(float), fn, "lse");
  const std::int64_t d = a.head_dim;
  require_strides(a.q_strides, d, fn, kQNames, multiple, why);
  require_strides(a.k_strides, d, fn, kKNames, multiple, why);
  require_strides(a.v_strides, d, fn, kVNames, multiple, why);
  require_strides(a.o_strides, d, fn, kONames, multiple, why);
  const auto o_dims = tensor_dims(a.o_strides, a.batch, a.heads, a.seq_q, d, kONames);
  require_injective(o_dims, fn, "o");

  // No overlap between what is written (o, lse) and anything else.
  const auto bytes = [&](const AttentionStrides& st, std::int64_t heads, std::int64_t n) {
    return span_bytes<T>(tensor_dims(st, a.batch, heads, n, d));
  };
  const std::array<Range, 4> r{Range{a.q, bytes(a.q_strides, a.heads, a.seq_q), "q"},
                               Range{a.k, bytes(a.k_strides, a.kv_heads, a.seq_k), "k"},
                               Range{a.v, bytes(a.v_strides, a.kv_heads, a.seq_k), "v"},
                               Range{a.o, span_bytes<T>(o_dims), "o"}};
  for (const Range& in : {r[0], r[1], r[2]})
    require_arg(!ranges_intersect(a.o, r[3].bytes, in.p, in.bytes), fn, "o", static_cast<const void*>(a.o),
                msg("overlaps ", in.name, ": attention is not in place (O is written while Q, K, V are read)"));
  if (a.lse != nullptr) {
    const std::size_t lse_bytes = static_cast<std::size_t>(a.batch * a.heads * a.seq_q) * sizeof(float);
    for (const Range& other : r)
      require_arg(!ranges_intersect(a.lse, lse_bytes, other.p, other.bytes), fn, "lse",
                  static_cast<const void*>(a.lse), msg("overlaps ", other.name));
  }
  return r;
}

}  // namespace detail

/// The validation every implementation runs first. Throws InvalidArgument naming the
/// argument, its value and the rule.
inline void validate_attention_args(const AttentionArgs& a, AttentionStep step, const char* fn) {
  using detail::msg;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kAttentionSteps)), fn, "step", s, "is not an AttentionStep");
  const StepSupport sup = step_support(step);
  const char* sname = step_name(step);
  require_arg(step_dtype(step) == AttentionDType::f32, fn, "step", sname,
              "reads and writes __nv_bfloat16 Q, K, V and O: call attention(step, const AttentionArgsBf16&)");

  // Sizes.
  detail::require_attention_sizes(a, fn);
  detail::require_fp32_head_dim(a.head_dim, fn);
  require_arg(a.head_dim <= sup.max_head_dim, fn, "head_dim", a.head_dim,
              msg("is above ", sup.max_head_dim, " for step ", sname,
                  ": one thread keeps a whole q row and its output row in registers (2d floats); "
                  "steps fused and fused_options split d across threads and take up to 128"));
  require_arg(std::isfinite(a.scale) && a.scale >= 0.f, fn, "scale", a.scale,
              "must be finite and >= 0 (0 selects 1/sqrt(head_dim))");

  // Features of the step.
  require_arg(!a.causal || sup.causal, fn, "causal", a.causal,
              msg("is not supported by step ", sname, ": it applies no mask; use step causal or later"));
  require_arg(a.lse == nullptr || sup.lse, fn, "lse", static_cast<const void*>(a.lse),
              msg("must be null for step ", sname,
                  ": the materialized pipeline keeps P, not the row statistics; lse needs a fused step"));
  const auto opt = msg("needs step fused_options (step ", sname, " has no positional options)");
  require_arg(!a.rope || sup.options, fn, "rope", a.rope, opt);
  require_arg(!a.alibi || sup.options, fn, "alibi", a.alibi, opt);
  require_arg(a.kv_heads == a.heads || sup.options, fn, "kv_heads", a.kv_heads,
              msg("differs from heads = ", a.heads, ": grouped-query attention ", opt));
  if (a.rope)
    require_arg(std::isfinite(a.rope_theta) && a.rope_theta > 1.f, fn, "rope_theta", a.rope_theta,
                "must be finite and > 1");

  // Pointers, strides, and no overlap between what is written (o, lse, workspace) and
  // anything else.
  const auto ranges = detail::require_forward_tensors<float>(a, fn, 4, detail::kFloatRowRule);
  if (sup.workspace) {
    const std::size_t need = attention_workspace_bytes(step, a);
    require_arg(a.workspace_bytes >= need, fn, "workspace_bytes", a.workspace_bytes,
                msg("must be >= attention_workspace_bytes(step, ...) = ", need,
                    " (step ", sname, " stores all B*H*N_q*N_k scores)"));
    require_not_null(a.workspace, fn, "workspace");
    require_aligned(a.workspace, 16, fn, "workspace");
    for (const detail::Range& other : ranges)
      require_arg(!detail::ranges_intersect(a.workspace, need, other.p, other.bytes), fn, "workspace",
                  static_cast<const void*>(a.workspace), msg("overlaps ", other.name));
  }
}

// ------------------------------------------------------------------------------
// The tensor-core steps (tc_*): bf16 tensors.
//
// The same computation and conventions as AttentionArgs (index order [B, H, N, d] with
// four strides, bottom-right causal mask, kv head h / (H / H_kv), natural-log lse, O = 0
// and lse = -inf for a row that sees no key). Inside the kernels Q, K, V are bf16, the
// scores, the softmax statistics and the P*V accumulation are fp32, P is rounded to bf16
// (it is the A operand of a bf16 mma) and O is rounded to bf16 once, at the end; lse is
// fp32. Contract (validate_attention_args below) as for AttentionArgs, except:
//  - head_dim in {32, 64, 96, 128} (kTcHeadDims); the Hopper steps 64 or 128 (kHopperHeadDims);
//  - every stride a multiple of 8 elements, so each row starts 16-byte aligned (one
//    cp.async copies 16 bytes = 8 bf16), pointers 16-byte aligned;
//  - grouped-query attention (kv_heads < heads) in every tc step; no RoPE, ALiBi or workspace;
//  - the Hopper steps (tc_wgmma, tc_warp_specialized, tc_pingpong, tc_overlap, tc_persistent;
//    StepSupport::hopper) need
//    an sm_90a build on a compute-capability-9.0 GPU (else course::Unsupported naming the
//    step) and head_dim 64 or 128. The TMA steps map Q, K and V as 4-D tensors (column, row,
//    head, batch): the rules above (16-byte aligned pointers, strides in multiples of 8
//    elements) are exactly the TMA's; a stride of 0 (a broadcast batch or head) is mapped
//    as extent 1, and K and V must broadcast the same dimensions (else Unsupported).

/// Head dimensions the tensor-core kernels are instantiated for.
inline constexpr int kTcHeadDims[] = {32, 64, 96, 128};
/// Those of the Hopper steps (StepSupport::hopper): whole 64-column blocks of the
/// 128-byte-swizzle layout that wgmma and the TMA share.
inline constexpr int kHopperHeadDims[] = {64, 128};

/// Does bf16 step `step` take head dimension `d`? (Tests and fuzzers draw only those.)
constexpr bool step_takes_head_dim(AttentionStep step, std::int64_t d) {
  bool known = false;
  for (const int x : kTcHeadDims) known = known || x == d;
  if (!step_support(step).hopper) return known;
  bool hopper = false;
  for (const int x : kHopperHeadDims) hopper = hopper || x == d;
  return known && hopper;
}

/// Device-side arguments of the bf16 attention(). All pointers are DEVICE pointers.
struct AttentionArgsBf16 {
  const __nv_bfloat16* q = nullptr;  ///< [B, H, N_q, d]
  const __nv_bfloat16* k = nullptr;  ///< [B, H_kv, N_k, d]
  const __nv_bfloat16* v = nullptr;  ///< [B, H_kv, N_k, d]
  __nv_bfloat16* o = nullptr;        ///< [B, H, N_q, d]
  float* lse = nullptr;              ///< optional, [B, H, N_q] contiguous fp32, natural log
  std::int64_t batch = 0;     ///< B
  std::int64_t heads = 0;     ///< H, query heads
  std::int64_t kv_heads = 0;  ///< H_kv, key/value heads (H % H_kv == 0)
  std::int64_t seq_q = 0;     ///< N_q
  std::int64_t seq_k = 0;     ///< N_k
  std::int64_t head_dim = 0;  ///< d
  AttentionStrides q_strides, k_strides, v_strides, o_strides;  ///< in elements
  float scale = 0.f;    ///< 0 selects 1/sqrt(d)
  bool causal = false;  ///< bottom-right aligned causal mask
  cudaStream_t stream = nullptr;
};

/// Arguments for dense bf16 Q, K, V and O all stored in `layout`.
inline AttentionArgsBf16 make_attention_args_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                  const __nv_bfloat16* v, __nv_bfloat16* o, std::int64_t batch,
                                                  std::int64_t heads, std::int64_t kv_heads, std::int64_t seq_q,
                                                  std::int64_t seq_k, std::int64_t head_dim, AttentionLayout layout,
                                                  cudaStream_t stream = nullptr) {
  AttentionArgsBf16 a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  detail::set_dense_shape(a, batch, heads, kv_heads, seq_q, seq_k, head_dim, layout, stream);
  return a;
}

inline float effective_scale(const AttentionArgsBf16& a) { return detail::scale_or_default(a); }

/// FLOPs by the FlashAttention convention, as for AttentionArgs.
inline double attention_flops(const AttentionArgsBf16& a) { return detail::gemm_flops(a, 2); }

/// Device bytes a call touches: dense bf16 Q, K, V, O (+ fp32 lse).
inline std::size_t attention_device_bytes(const AttentionArgsBf16& a) {
  const auto f = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  const std::size_t elems = 2 * f(a.batch) * f(a.heads) * f(a.seq_q) * f(a.head_dim) +
                            2 * f(a.batch) * f(a.kv_heads) * f(a.seq_k) * f(a.head_dim);
  const std::size_t lse = a.lse != nullptr ? f(a.batch) * f(a.heads) * f(a.seq_q) * sizeof(float) : 0;
  return elems * sizeof(__nv_bfloat16) + lse;
}

/// The validation both implementations run first for a bf16 step. Throws InvalidArgument
/// naming the argument, its value and the rule.
inline void validate_attention_args(const AttentionArgsBf16& a, AttentionStep step, const char* fn) {
  using detail::msg;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kAttentionSteps)), fn, "step", s, "is not an AttentionStep");
  const char* sname = step_name(step);
  require_arg(step_dtype(step) == AttentionDType::bf16, fn, "step", sname,
              "reads and writes float Q, K, V and O: call attention(step, const AttentionArgs&)");

  detail::require_attention_sizes(a, fn);
  const bool known_d = std::find(std::begin(kTcHeadDims), std::end(kTcHeadDims), a.head_dim) != std::end(kTcHeadDims);
  require_arg(known_d, fn, "head_dim", a.head_dim,
              msg("must be 32, 64, 96 or 128 for step ", sname,
                  " (the tensor-core kernels are templated on it; d is a whole number of 16-deep mma k steps)"));
  require_arg(step_takes_head_dim(step, a.head_dim), fn, "head_dim", a.head_dim,
              msg("must be 64 or 128 for step ", sname,
                  " (a Hopper step: its tiles are whole 64-column blocks of the 128-byte-swizzle layout)"));
  require_arg(std::isfinite(a.scale) && a.scale >= 0.f, fn, "scale", a.scale,
              "must be finite and >= 0 (0 selects 1/sqrt(head_dim))");

  // Pointers, strides, and no overlap between what is written (o, lse) and anything else.
  detail::require_forward_tensors<__nv_bfloat16>(
      a, fn, 8, "every row must start 16-byte aligned (cp.async copies 8 bf16 at once)");
}

// ------------------------------------------------------------------------------
// The online-softmax update on its own: the attention kernels fold each tile of scores
// into a running (max m, sum l, accumulator) with one __device__ function; this entry
// point runs that very function in ONE thread over a sequence of score blocks, so it can
// be unit-tested with hand-picked numbers (e.g. block [0] then block [10]).

/// Arguments of online_softmax_update_test. Device pointers.
struct OnlineUpdateTestArgs {
  const float* scores = nullptr;  ///< num_blocks * block_len scores, block after block (-inf allowed: masked)
  const float* values = nullptr;  ///< one value per score: a 1-wide V
  int block_len = 0;              ///< scores per block (>= 1)
  int num_blocks = 0;             ///< >= 1
  float* out = nullptr;           ///< 3 floats: final m, final l, o = sum_j exp(s_j - m) v_j / l (0 if l == 0)
  cudaStream_t stream = nullptr;
};

inline void validate_online_update_test_args(const OnlineUpdateTestArgs& a, const char* fn) {
  require_arg(a.block_len >= 1, fn, "block_len", a.block_len, "must be >= 1");
  require_arg(a.num_blocks >= 1, fn, "num_blocks", a.num_blocks, "must be >= 1");
  require_not_null(a.scores, fn, "scores");
  require_not_null(a.values, fn, "values");
  require_not_null(a.out, fn, "out");
}

}  // namespace course::m03

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// O (and lse) = attention(Q, K, V) with the step's kernels (asynchronous on args.stream).
    void attention(::course::m03::AttentionStep step, const ::course::m03::AttentionArgs& args);
    /// The tensor-core steps (tc_*): bf16 Q, K, V, O, fp32 lse (asynchronous on args.stream).
    void attention(::course::m03::AttentionStep step, const ::course::m03::AttentionArgsBf16& args);
    /// Element offset of row (b, h, n) of a tensor with strides `s`: the same function the
    /// kernels use (exposed so that tests can check the stride arithmetic on the host).
    std::int64_t attention_row_offset(const ::course::m03::AttentionStrides& s, std::int64_t b, std::int64_t h,
                                      std::int64_t n);
    /// Runs the kernels' online-softmax update over args' blocks in one GPU thread (synchronous).
    void online_softmax_update_test(const ::course::m03::OnlineUpdateTestArgs& args);)
