#pragma once
/// @file attention_backward.hpp
/// @brief Module 4 API: the backward pass of module 3's attention (fp32, then bf16 on tensor
/// cores), as a ladder of steps.
///
/// The forward pass (module 3, any fused step) computed, for every batch b and query head h,
///
///     S = scale * Q K^T      P = softmax(S [masked])      O = P V      lse_i = log sum_j exp(S_ij)
///
/// Given dO = dL/dO, the backward pass returns dQ, dK, dV:
///
///     P    = exp(S - lse)                 recomputed from Q, K and the forward's lse (never stored)
///     dV   = P^T dO
///     dP   = dO V^T
///     D_i  = sum_c dO_ic O_ic             (= sum_j P_ij dP_ij: the softmax Jacobian's row term)
///     dS   = P * (dP - D)                 (elementwise; D broadcast along the row)
///     dQ   = scale * dS K
///     dK   = scale * dS^T Q
///
/// Shapes and strides follow module 3 exactly: Q, O, dO, dQ are [B, H, N_q, d]; K, V, dK, dV
/// are [B, H_kv, N_k, d]; query head h reads key/value head h / (H / H_kv), so with grouped-
/// query attention dK and dV of a key/value head are SUMS over the H / H_kv query heads that
/// read it. Element (b, h, n, c) of X lives at X + b*s.batch + h*s.head + n*s.seq + c (strides in
/// elements, see m03::AttentionStrides / m03::attention_strides()). The causal mask is
/// bottom-right aligned like the forward's: query i sees key j iff j <= i + (N_k - N_q); a
/// query row that sees no key (lse = -inf) has O = 0 and gets dQ = 0 and contributes nothing.
///
/// ## The ladder
/// - naive: S, P and dP materialized in an O(N^2) workspace, module 2's batched GEMMs (with
///   its a_transposed / b_transposed options: no transpose is ever materialized) and the
///   softmax-backward kernel of this module for dS.
/// - flash: one small kernel for D, then one kernel parallel over K/V tiles that loops over
///   the query tiles, recomputes P from lse on chip, keeps dK and dV in registers and adds
///   its share of dQ with fp32 atomics. Causal tiles above the diagonal are skipped. O(N)
///   extra memory. dQ's summation order depends on scheduling: results differ run to run in
///   the last bits (within tolerance).
/// - flash_deterministic: flash with dQ's additions in a fixed order -- a turn counter per
///   (batch, head, query tile of kFlashBackwardQTile rows) admits the K/V tiles one at a time,
///   in index order (course/cuda/turns.cuh, as tc_deterministic). Bit-identical run to run;
///   the waiting is its price (measured in the lesson).
/// The tensor-core steps (bf16 tensors, AttentionBackwardArgsBf16; contract further below):
/// - tc_mma: flash's structure on mma.sync fragments. Each warp computes S^T = K_w Q^T and
///   dP^T = V_w dO^T for its 16 keys, so that P^T and dS^T are, as accumulators, already the
///   A operands of dV += P^T dO and dK += dS^T Q; dS^T goes through shared memory once for
///   dQ += dS K (fp32 atomics into the workspace, converted to bf16 at the end).
/// - tc_pipelined: the same with XOR-swizzled tiles and a 2-stage cp.async ring; dS^T stored by
///   stmatrix and FlashAttention-2's tiles (P^T through shared memory too): 32 keys x 32
///   queries per warp at d = 128, 128-query tiles and 32 keys x 64 queries per warp at d = 64.
/// - tc_deterministic: dQ added in K/V-tile order, a counter per (batch, head, query tile):
///   bit-identical run to run.
/// - tc_split_dq: deterministic without a hand-off (FlashAttention-2's way): each block owns a
///   fixed list of K/V tiles of one kv head (a "split") and adds its dQ into its OWN fp32
///   copy; the conversion sums the copies in index order (tc_split_dq_plan()).
/// - tc_wgmma (Hopper, sm_90a; elsewhere course::Unsupported): tc_pipelined's work split on
///   warpgroup MMA. Each of two warpgroups owns 64 of the block's 128 keys; S^T, dP^T and dQ
///   read both operands from 128-byte-swizzled shared memory, dV and dK take P^T and dS^T
///   straight from registers.
/// - tc_wgmma_deterministic (Hopper, sm_90a): tc_wgmma with tc_deterministic's ordered dQ
///   hand-off (a turn counter per query tile). Bit-identical run to run.
/// - tc_wgmma_split_dq (Hopper, sm_90a): tc_wgmma made deterministic the way tc_split_dq made
///   tc_pipelined so: a fixed list of K/V tiles per block, one fp32 dQ copy per split, summed
///   in order. Bit-identical run to run.
///
/// ## Contract (validate_attention_backward_args, run by both implementations before any
/// launch; each violation throws course::InvalidArgument naming the argument and its value)
/// - batch, heads, kv_heads, seq_q, seq_k >= 1, heads % kv_heads == 0, batch * heads <= 65535,
///   seq_q, seq_k <= 2^31 - 1; head_dim in {16, 32, 64, 96, 128} (m03::kHeadDims).
/// - Step naive: kv_heads == heads (no grouped-query attention) and a workspace of
///   attention_backward_workspace_bytes(); the flash steps need a workspace too (D, O(N);
///   flash_deterministic also its dQ turn counters).
/// - q, k, v, o, dout, dq, dk, dv non-null and 16-byte aligned; lse non-null, 4-byte aligned,
///   [B, H, N_q] contiguous; strides >= 0, multiples of 4, seq strides >= head_dim. Input
///   batch/head strides may be 0 (broadcast); each gradient maps distinct elements to
///   distinct addresses.
/// - dq, dk, dv overlap no input (q, k, v, o, dout, lse), no other gradient, nor the
///   workspace; the workspace overlaps nothing. Gradients of one layout may interleave
///   without sharing an element (dQ, dK, dV as the column blocks of one dQKV buffer).

#include "course/error.hpp"
#include "course/impl.hpp"
#include "course/validate.hpp"
#include "module03/attention.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace course::m04 {

using m03::AttentionStrides;

/// The attention-backward ladder, in teaching order.
enum class AttentionBackwardStep {
  naive,                ///< S, P, dP materialized; module 2 GEMMs + softmax backward
  flash,                ///< K/V-tile parallel, P recomputed on chip, dQ by fp32 atomics
  flash_deterministic,  ///< flash without atomics: dQ in its own query-parallel pass
  // Tensor-core steps: bf16 Q, K, V, O, dO and gradients, fp32 accumulation
  // (AttentionBackwardArgsBf16).
  tc_mma,            ///< mma.sync on fragments: S^T, dP^T recomputed; P^T, dS^T reused as A operands
  tc_pipelined,      ///< + XOR-swizzled tiles, a 2-stage cp.async ring for Q, dO, lse, D, stmatrix; d = 128: 32 x 32 warp tiles
  tc_deterministic,  ///< + dQ added in K/V-tile order (a semaphore per query tile): bit-identical
  tc_split_dq,       ///< tc_pipelined with one fp32 dQ copy per split, summed in order: bit-identical
  tc_wgmma,          ///< sm_90a: the five products on warpgroup MMA, P^T and dS^T from registers
  tc_wgmma_deterministic,  ///< sm_90a: tc_wgmma with dQ added in K/V-tile order: bit-identical
  tc_wgmma_split_dq,       ///< sm_90a: tc_wgmma with tc_split_dq's dQ copies: bit-identical
};

inline constexpr StepInfo<AttentionBackwardStep> kAttentionBackwardSteps[] = {
    {AttentionBackwardStep::naive, "naive",
     "S, P, dP in an O(N^2) workspace: module 2's batched GEMMs and the softmax-backward kernel"},
    {AttentionBackwardStep::flash, "flash",
     "one kernel per K/V tile: P recomputed from lse, dK/dV in registers, dQ by fp32 atomics"},
    {AttentionBackwardStep::flash_deterministic, "flash_deterministic",
     "flash with dQ added in K/V-tile order behind a turn counter per query tile; bit-identical runs"},
    {AttentionBackwardStep::tc_mma, "tc_mma",
     "bf16; mma.sync: S^T = K Q^T on fragments, P^T and dS^T reused as A operands, dS via smem for dQ"},
    {AttentionBackwardStep::tc_pipelined, "tc_pipelined",
     "bf16; tc_mma with XOR-swizzled tiles, a 2-stage cp.async ring for Q, dO, lse and D, stmatrix stores; d = 128: 32 x 32 warp tiles"},
    {AttentionBackwardStep::tc_deterministic, "tc_deterministic",
     "bf16; tc_pipelined with dQ added in K/V-tile order behind a semaphore per query tile"},
    {AttentionBackwardStep::tc_split_dq, "tc_split_dq",
     "bf16; tc_pipelined with a fixed list of K/V tiles per block and one fp32 dQ copy per block, summed in order"},
    {AttentionBackwardStep::tc_wgmma, "tc_wgmma",
     "bf16, sm_90a; the five products on wgmma: 64 keys per warpgroup, P^T and dS^T as register A operands"},
    {AttentionBackwardStep::tc_wgmma_deterministic, "tc_wgmma_deterministic",
     "bf16, sm_90a; tc_wgmma with dQ added in K/V-tile order behind a semaphore per query tile"},
    {AttentionBackwardStep::tc_wgmma_split_dq, "tc_wgmma_split_dq",
     "bf16, sm_90a; tc_wgmma with a fixed list of K/V tiles per block and one fp32 dQ copy per block, summed in order"},
};
static_assert(steps_in_enum_order(kAttentionBackwardSteps),
              "kAttentionBackwardSteps must list AttentionBackwardStep in enum order");

/// Element type of Q, K, V, O, dO and the gradients (lse, D and accumulators are fp32).
/// fp32 steps take AttentionBackwardArgs, bf16 steps AttentionBackwardArgsBf16.
enum class AttentionBackwardDType { f32, bf16 };

/// What a step accepts. Anything else is rejected by validate_attention_backward_args.
struct BackwardStepSupport {
  int max_head_dim;    ///< largest head dimension
  bool causal;         ///< args.causal may be true
  bool grouped_query;  ///< kv_heads < heads
  bool deterministic;  ///< bit-identical results run to run
  bool hopper = false;  ///< sm_90a only (wgmma): elsewhere the step throws course::Unsupported
};

/// The step table's further columns: one row per step, in the same order (checked below).
struct AttentionBackwardStepColumns {
  AttentionBackwardStep step;
  AttentionBackwardDType dtype;  ///< which argument struct the step takes
  BackwardStepSupport support;
};

inline constexpr AttentionBackwardStepColumns kAttentionBackwardStepColumns[] = {
    {AttentionBackwardStep::naive, AttentionBackwardDType::f32, {128, true, false, true}},
    {AttentionBackwardStep::flash, AttentionBackwardDType::f32, {128, true, true, false}},
    {AttentionBackwardStep::flash_deterministic, AttentionBackwardDType::f32, {128, true, true, true}},
    {AttentionBackwardStep::tc_mma, AttentionBackwardDType::bf16, {128, true, true, false}},
    {AttentionBackwardStep::tc_pipelined, AttentionBackwardDType::bf16, {128, true, true, false}},
    {AttentionBackwardStep::tc_deterministic, AttentionBackwardDType::bf16, {128, true, true, true}},
    {AttentionBackwardStep::tc_split_dq, AttentionBackwardDType::bf16, {128, true, true, true}},
    {AttentionBackwardStep::tc_wgmma, AttentionBackwardDType::bf16, {128, true, true, false, true}},
    {AttentionBackwardStep::tc_wgmma_deterministic, AttentionBackwardDType::bf16, {128, true, true, true, true}},
    {AttentionBackwardStep::tc_wgmma_split_dq, AttentionBackwardDType::bf16, {128, true, true, true, true}},
};
static_assert(columns_match_steps(kAttentionBackwardSteps, kAttentionBackwardStepColumns),
              "kAttentionBackwardStepColumns must have one row per row of kAttentionBackwardSteps, in the same order");

constexpr BackwardStepSupport step_support(AttentionBackwardStep step) {
  const auto i = static_cast<std::size_t>(step);
  return i < std::size(kAttentionBackwardStepColumns) ? kAttentionBackwardStepColumns[i].support
                                                      : BackwardStepSupport{0, false, false, false};
}
constexpr AttentionBackwardDType step_dtype(AttentionBackwardStep step) {
  const auto i = static_cast<std::size_t>(step);
  return i < std::size(kAttentionBackwardStepColumns) ? kAttentionBackwardStepColumns[i].dtype
                                                      : AttentionBackwardDType::f32;
}

/// The steps of one element type, in ladder order (tests and benchmarks iterate these).
inline std::vector<StepInfo<AttentionBackwardStep>> attention_backward_steps(AttentionBackwardDType dtype) {
  std::vector<StepInfo<AttentionBackwardStep>> out;
  for (const auto& info : kAttentionBackwardSteps)
    if (step_dtype(info.step) == dtype) out.push_back(info);
  return out;
}

/// Head dimensions the tensor-core backward kernels are instantiated for.
inline constexpr int kTcBackwardHeadDims[] = {64, 128};

inline const char* step_name(AttentionBackwardStep step) { return step_name_in(kAttentionBackwardSteps, step); }

/// Device-side arguments of attention_backward(). All pointers are DEVICE pointers.
struct AttentionBackwardArgs {
  const float* q = nullptr;     ///< [B, H, N_q, d]
  const float* k = nullptr;     ///< [B, H_kv, N_k, d]
  const float* v = nullptr;     ///< [B, H_kv, N_k, d]
  const float* o = nullptr;     ///< [B, H, N_q, d], the forward's output
  const float* dout = nullptr;  ///< [B, H, N_q, d], dL/dO
  const float* lse = nullptr;   ///< [B, H, N_q] contiguous, the forward's natural-log logsumexp
  float* dq = nullptr;          ///< [B, H, N_q, d]
  float* dk = nullptr;          ///< [B, H_kv, N_k, d]
  float* dv = nullptr;          ///< [B, H_kv, N_k, d]
  std::int64_t batch = 0;       ///< B
  std::int64_t heads = 0;       ///< H, query heads
  std::int64_t kv_heads = 0;    ///< H_kv, key/value heads (H % H_kv == 0)
  std::int64_t seq_q = 0;       ///< N_q
  std::int64_t seq_k = 0;       ///< N_k
  std::int64_t head_dim = 0;    ///< d
  AttentionStrides q_strides, k_strides, v_strides, o_strides, do_strides;
  AttentionStrides dq_strides, dk_strides, dv_strides;
  float scale = 0.f;      ///< 0 selects 1/sqrt(d); must equal the forward's
  bool causal = false;    ///< bottom-right aligned causal mask, as in the forward
  float* workspace = nullptr;       ///< scratch, see attention_backward_workspace_bytes()
  std::size_t workspace_bytes = 0;  ///< >= attention_backward_workspace_bytes(step, ...)
  cudaStream_t stream = nullptr;
};

namespace detail {
/// The part both make_*_args share: pointers, sizes, and every tensor dense in `layout`
/// (the gradients like their inputs).
template <class Args, class In, class Grad>
Args make_backward_args(const In* q, const In* k, const In* v, const In* o, const In* dout, const float* lse, Grad* dq,
                        Grad* dk, Grad* dv, std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                        std::int64_t seq_q, std::int64_t seq_k, std::int64_t head_dim, AttentionLayout layout,
                        cudaStream_t stream) {
  Args a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.dout = dout;
  a.lse = lse;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  m03::detail::set_dense_shape(a, batch, heads, kv_heads, seq_q, seq_k, head_dim, layout, stream);
  a.do_strides = a.q_strides;
  a.dq_strides = a.q_strides;
  a.dk_strides = a.k_strides;
  a.dv_strides = a.k_strides;
  return a;
}
}  // namespace detail

/// Arguments for dense tensors all stored in `layout` (gradients like their inputs).
inline AttentionBackwardArgs make_attention_backward_args(
    const float* q, const float* k, const float* v, const float* o, const float* dout, const float* lse, float* dq,
    float* dk, float* dv, std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t seq_q,
    std::int64_t seq_k, std::int64_t head_dim, AttentionLayout layout, cudaStream_t stream = nullptr) {
  return detail::make_backward_args<AttentionBackwardArgs>(q, k, v, o, dout, lse, dq, dk, dv, batch, heads, kv_heads,
                                                           seq_q, seq_k, head_dim, layout, stream);
}

/// The scale actually used: args.scale, or 1/sqrt(d) when it is 0.
inline float effective_scale(const AttentionBackwardArgs& a) { return m03::detail::scale_or_default(a); }

/// Query rows per dQ turn of flash_deterministic: one turn counter per (batch, head, tile of
/// this many query rows), the K/V-parallel kernel's query tile.
inline constexpr int kFlashBackwardQTile = 64;

/// Byte offset of flash_deterministic's turn counters in its workspace: after D (B*H*N_q
/// floats), rounded up to 16 bytes. The counters are B*H*ceil(N_q / kFlashBackwardQTile) ints.
inline std::size_t flash_backward_turns_offset(std::int64_t batch, std::int64_t heads, std::int64_t seq_q) {
  const auto rows = static_cast<std::size_t>(batch) * static_cast<std::size_t>(heads) * static_cast<std::size_t>(seq_q);
  return (rows * sizeof(float) + 15) / 16 * 16;
}

/// Scratch bytes `step` needs.
///  - naive: P and dP (dS overwrites dP in place), 2 * B*H*N_q*N_k floats: O(N^2).
///  - flash: D, B*H*N_q floats: O(N).
///  - flash_deterministic: D, then the dQ turn counters (flash_backward_turns_offset()):
///    B*H*ceil(N_q / kFlashBackwardQTile) ints more.
inline std::size_t attention_backward_workspace_bytes(AttentionBackwardStep step, std::int64_t batch,
                                                      std::int64_t heads, std::int64_t seq_q, std::int64_t seq_k) {
  require_arg(step_dtype(step) == AttentionBackwardDType::f32, "attention_backward_workspace_bytes", "step",
              step_name(step), "is a bf16 step: its workspace depends on head_dim, call the AttentionBackwardArgsBf16 overload");
  if (batch <= 0 || heads <= 0 || seq_q <= 0 || seq_k <= 0) return 0;
  const auto rows = static_cast<std::size_t>(batch) * static_cast<std::size_t>(heads) * static_cast<std::size_t>(seq_q);
  if (step == AttentionBackwardStep::naive) return 2 * rows * static_cast<std::size_t>(seq_k) * sizeof(float);
  if (step == AttentionBackwardStep::flash_deterministic) {
    const auto tiles = (static_cast<std::size_t>(seq_q) + kFlashBackwardQTile - 1) / kFlashBackwardQTile;
    return flash_backward_turns_offset(batch, heads, seq_q) +
           static_cast<std::size_t>(batch) * static_cast<std::size_t>(heads) * tiles * sizeof(int);
  }
  return rows * sizeof(float);
}
inline std::size_t attention_backward_workspace_bytes(AttentionBackwardStep step, const AttentionBackwardArgs& a) {
  return attention_backward_workspace_bytes(step, a.batch, a.heads, a.seq_q, a.seq_k);
}

// ------------------------------------------------------------------------------
// The tensor-core steps (tc_*): bf16 tensors.
//
// The same computation, conventions and strides as AttentionBackwardArgs. Inside the
// kernels S, P, dP, dS and every accumulation are fp32; P and dS are rounded to bf16 where
// they become mma operands (dV += P^T dO, dK += dS^T Q, dQ += dS K); dK and dV are rounded
// to bf16 once, at the end; dQ is accumulated in an fp32 workspace and rounded once.
// Contract as for AttentionBackwardArgs, except:
//  - head_dim in {64, 128} (kTcBackwardHeadDims);
//  - every stride a multiple of 8 elements and every pointer 16-byte aligned (one cp.async
//    copies 16 bytes = 8 bf16);
//  - the workspace holds D, the lse in base 2 and dQ in fp32 (for the orders_dq() steps also a
//    counter per query tile; for the splits_dq() steps S copies of dQ, S from the sizes and the current
//    device's SM count): tc_backward_workspace().

/// Query rows per tile of the tensor-core backward kernels: the unit of the causal walk and
/// of the turn counters.
inline constexpr int kTcBackwardQTile = 64;
/// The tallest query tile a kernel reads lse and D for at once (two of kTcBackwardQTile at
/// d = 64). It starts at any kTcBackwardQTile boundary (a causal walk starts at its
/// diagonal's tile), so the workspace pads each head's rows by kTcBackwardRowPad -
/// kTcBackwardQTile beyond the last whole tile.
inline constexpr int kTcBackwardRowPad = 2 * kTcBackwardQTile;
/// N_q rounded up to whole kTcBackwardQTile tiles, plus the tallest tile's overhang
/// (constexpr: the kernels' host code calls it too).
constexpr std::int64_t tc_backward_padded_rows(std::int64_t seq_q) {
  return ((seq_q + kTcBackwardQTile - 1) / kTcBackwardQTile) * kTcBackwardQTile + kTcBackwardRowPad - kTcBackwardQTile;
}

/// Device-side arguments of the bf16 attention_backward(). All pointers are DEVICE pointers.
struct AttentionBackwardArgsBf16 {
  const __nv_bfloat16* q = nullptr;     ///< [B, H, N_q, d]
  const __nv_bfloat16* k = nullptr;     ///< [B, H_kv, N_k, d]
  const __nv_bfloat16* v = nullptr;     ///< [B, H_kv, N_k, d]
  const __nv_bfloat16* o = nullptr;     ///< [B, H, N_q, d], the forward's output
  const __nv_bfloat16* dout = nullptr;  ///< [B, H, N_q, d], dL/dO
  const float* lse = nullptr;           ///< [B, H, N_q] contiguous fp32, the forward's natural-log logsumexp
  __nv_bfloat16* dq = nullptr;          ///< [B, H, N_q, d]
  __nv_bfloat16* dk = nullptr;          ///< [B, H_kv, N_k, d]
  __nv_bfloat16* dv = nullptr;          ///< [B, H_kv, N_k, d]
  std::int64_t batch = 0;     ///< B
  std::int64_t heads = 0;     ///< H, query heads
  std::int64_t kv_heads = 0;  ///< H_kv, key/value heads (H % H_kv == 0)
  std::int64_t seq_q = 0;     ///< N_q
  std::int64_t seq_k = 0;     ///< N_k
  std::int64_t head_dim = 0;  ///< d
  AttentionStrides q_strides, k_strides, v_strides, o_strides, do_strides;
  AttentionStrides dq_strides, dk_strides, dv_strides;
  float scale = 0.f;    ///< 0 selects 1/sqrt(d); must equal the forward's
  bool causal = false;  ///< bottom-right aligned causal mask, as in the forward
  float* workspace = nullptr;       ///< scratch, see tc_backward_workspace()
  std::size_t workspace_bytes = 0;  ///< >= attention_backward_workspace_bytes(step, args)
  cudaStream_t stream = nullptr;
};

/// Arguments for dense bf16 tensors all stored in `layout` (gradients like their inputs).
inline AttentionBackwardArgsBf16 make_attention_backward_args_bf16(
    const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* o,
    const __nv_bfloat16* dout, const float* lse, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
    std::int64_t batch, std::int64_t heads, std::int64_t kv_heads, std::int64_t seq_q, std::int64_t seq_k,
    std::int64_t head_dim, AttentionLayout layout, cudaStream_t stream = nullptr) {
  return detail::make_backward_args<AttentionBackwardArgsBf16>(q, k, v, o, dout, lse, dq, dk, dv, batch, heads,
                                                               kv_heads, seq_q, seq_k, head_dim, layout, stream);
}

inline float effective_scale(const AttentionBackwardArgsBf16& a) { return m03::detail::scale_or_default(a); }

/// Keys per block of the tensor-core backward kernels (one K/V tile: 16 per warp, 8 warps).
inline constexpr int kTcBackwardKeyTile = 128;

// ------------------------------------------------------------------------------
// tc_split_dq's plan: how many splits, and which K/V tiles each one gets.
//
// The grid is (S splits, B * H_kv); block (s, bhk) walks its K/V tiles one after the other
// and adds dQ into its own fp32 copy s of the accumulator, which nobody else writes. So:
//  - S * B*H_kv blocks should fill the GPU's block slots in whole waves: the blocks are of
//    equal work, and a last wave that is mostly empty costs as much as a full one;
//  - every split costs one more fp32 dQ copy, read back once (the model still counts 8
//    bytes per element of dQ, from when the copies were zeroed first), which
//    tc_split_dq_cost() weighs against the work of one K/V tile;
//  - the copies together stay within kTcSplitDqMaxBytes (S >= 1 whatever the size).
// All of it is host code on the sizes and the device's SM count, and the workspace size
// (attention_backward_workspace_bytes) and the launch both call tc_split_dq_plan(): the
// same arguments on the same device give the same S.

/// The steps that add dQ into one fp32 copy per split (tc_split_dq_plan()): tc_split_dq and
/// tc_wgmma_split_dq. Their workspace and launch depend on the device's SM count.
constexpr bool splits_dq(AttentionBackwardStep step) {
  return step == AttentionBackwardStep::tc_split_dq || step == AttentionBackwardStep::tc_wgmma_split_dq;
}

/// The steps that add dQ in K/V-tile order behind a turn counter per (batch, head, query
/// tile): tc_deterministic and tc_wgmma_deterministic (the workspace holds the counters).
constexpr bool orders_dq(AttentionBackwardStep step) {
  return step == AttentionBackwardStep::tc_deterministic || step == AttentionBackwardStep::tc_wgmma_deterministic;
}

/// Resident blocks per SM of the tensor-core backward kernels on sm_90: every variant uses
/// 186-255 registers per thread (ptxas -v) at 256 threads, so the register file holds one
/// block whatever the shared memory (~82 KB at d = 64, ~146 KB at d = 128). The launch of
/// the split steps checks it with cudaOccupancyMaxActiveBlocksPerMultiprocessor. The plan
/// below is one for both split steps: its cost model weighs a dQ copy against one K/V tile's
/// pass at tc_split_dq's speed; at tc_wgmma's (~1.3x) a copy weighs ~1.3x more, which moves
/// S at none of the benchmark's shapes (the model's terms differ by whole waves there).
inline constexpr int kTcBackwardBlocksPerSm = 1;

/// Cap on the fp32 dQ copies of tc_split_dq together (at B = 1, H = 16, N_q = 16384,
/// d = 128 one copy is 128 MiB, so 8 copies).
inline constexpr std::size_t kTcSplitDqMaxBytes = std::size_t{1} << 30;

/// The SM count assumed where no device answers (an H100 SXM's): the workspace of a host
/// without a GPU (bindings, CPU tests) is still defined.
inline constexpr int kTcSplitDqFallbackSms = 132;

/// The cost model behind the choice of S, in 1/10000 of one K/V tile's pass (one block, one
/// tile against every query tile of its group):
///   waves * tiles per block            waves = ceil(S * B*H_kv / slots), tiles = ceil(T / S)
///   + S * B*H_kv * 0.0042              one more fp32 dQ copy: 8 bytes per element at 3.35 TB/s
///                                      against 10 * 128 * N_q * group * d FLOP at ~2.3 TFLOP/s
///                                      per SM (300 TFLOP/s over 132 SMs): N_q and d cancel.
constexpr std::int64_t tc_split_dq_cost(std::int64_t splits, std::int64_t kv_tiles, std::int64_t kv_heads_total,
                                        std::int64_t slots) {
  const std::int64_t waves = (splits * kv_heads_total + slots - 1) / slots;
  const std::int64_t tiles = (kv_tiles + splits - 1) / splits;
  return 10000 * waves * tiles + 42 * splits * kv_heads_total;
}

/// The number of splits S: the cheapest by tc_split_dq_cost() (the smaller S on a tie), with
/// 1 <= S <= kv_tiles, S copies of `copy_bytes` within kTcSplitDqMaxBytes, and at most ~4
/// waves of blocks (more only trades quantization for copies). kv_tiles = ceil(N_k / 128),
/// kv_heads_total = B * H_kv, slots = the blocks the GPU holds at once, copy_bytes = one
/// fp32 dQ copy (B*H*N_q*d*4).
constexpr std::int64_t tc_split_dq_splits(std::int64_t kv_tiles, std::int64_t kv_heads_total, std::int64_t slots,
                                          std::size_t copy_bytes) {
  if (kv_tiles <= 1 || kv_heads_total <= 0 || slots <= 0) return 1;
  std::int64_t most = kv_tiles;
  const std::int64_t by_memory = copy_bytes == 0 ? most : static_cast<std::int64_t>(kTcSplitDqMaxBytes / copy_bytes);
  most = by_memory < most ? by_memory : most;
  const std::int64_t by_waves = (4 * slots + kv_heads_total - 1) / kv_heads_total;
  most = by_waves < most ? by_waves : most;
  std::int64_t best = 1, best_cost = tc_split_dq_cost(1, kv_tiles, kv_heads_total, slots);
  for (std::int64_t s = 2; s <= most; ++s) {
    const std::int64_t c = tc_split_dq_cost(s, kv_tiles, kv_heads_total, slots);
    if (c < best_cost) best = s, best_cost = c;
  }
  return best;
}

/// K/V tile of split `split` in round `round` (of ceil(kv_tiles / splits)), dealt
/// serpentine: round 0 gives tiles 0..S-1 to splits 0..S-1, round 1 tiles S..2S-1 to splits
/// S-1..0, and so on. Causal, a tile's work falls with its index (tile j meets the query
/// rows from about j * 128 on), so each pair of rounds gives every split about the same
/// work, where tiles s, s + S, s + 2S, ... would give split 0 the most in every round. A
/// value >= kv_tiles means the split has no tile in that round (the last, partial one).
/// Called by the kernel as well (constexpr: nvcc's --expt-relaxed-constexpr).
constexpr std::int64_t tc_split_dq_tile(std::int64_t split, std::int64_t round, std::int64_t splits) {
  return round * splits + (round % 2 == 0 ? split : splits - 1 - split);
}

/// The first query tile a tensor-core backward block visits, its key tile starting at key
/// `first_key`: causal, the first query row that sees that key is first_key - causal_offset,
/// and the block walks from that row's tile to the last; without the mask, tile 0. Called by
/// the kernels as well (constexpr).
constexpr int tc_first_query_tile(bool causal, int first_key, int causal_offset) {
  if (!causal) return 0;
  const int first_row = first_key - causal_offset;
  return first_row <= 0 ? 0 : first_row / kTcBackwardQTile;
}

/// The first host query tile that dQ copy `split` of the split steps holds. The split's first
/// K/V tile (round 0 of tc_split_dq_tile: tile `split`) is its lowest, and its pass stores
/// every row from that tile's first query tile on, where the later tiles, which start no
/// earlier, add. The rows before it are never written (the copies are not zeroed), so the sum
/// skips copy `split` there; the first tile grows with `split`, so the copies a row sums are
/// 0, 1, ..., some last one. Called by the kernels as well (constexpr).
constexpr int tc_split_dq_first_tile(bool causal, int split, int causal_offset) {
  return tc_first_query_tile(causal, split * kTcBackwardKeyTile, causal_offset);
}

/// How many tiles of span * kTcBackwardQTile query rows a tensor-core backward block visits
/// per query head: the i-th starts at host tile first_tile + span * i (first_tile from
/// tc_first_query_tile), the last may reach past N_q (tc_backward_padded_rows pads for it).
/// Called by the kernels as well (constexpr).
constexpr int tc_walk_tiles(int first_tile, int q_tiles, int span) {
  return first_tile < q_tiles ? (q_tiles - first_tile + span - 1) / span : 0;
}

/// One step of a block's walk over (query head, host tile): iteration `it` visits head
/// head0 + it / tiles_per_head, tile first_tile + span * (it % tiles_per_head), with
/// tiles_per_head = tc_walk_tiles(...) and last_tile = first_tile + span * (tiles_per_head - 1).
/// The kernels carry (head, tile) and step it instead of dividing `it` (constexpr: the CPU
/// tests check it against the division).
constexpr void tc_walk_step(int& head, int& tile, int first_tile, int last_tile, int span) {
  if (tile < last_tile) {
    tile += span;
  } else {
    tile = first_tile;
    ++head;
  }
}

/// The turn steps' (orders_dq) place of key tile `kv_tile` in the order of query tile
/// `q_tile`'s dQ additions: the value the block's turn waits for (the counters start at 0).
///  - No mask: key tile order. Every block walks the query tiles from the first, so they
///    arrive together, and tile kv_tile adds after kv_tile - 1, a lower block number.
///  - Causal: from the LAST key tile that reaches q_tile down to 0. A block starts at its
///    diagonal (tc_first_query_tile: query tile 2 kv_tile without an offset), so the higher
///    its key tile, the sooner it reaches a given query tile: this is the order in which the
///    blocks arrive. The kernels run these steps' key tiles shortest first, so the block a
///    turn waits for, kv_tile + 1, has the lower block number.
/// Query tile q_tile's rows see the keys below reach = (q_tile + 1) * kTcBackwardQTile +
/// causal_offset, and key tile j visits it iff j * kTcBackwardKeyTile < reach: the last one
/// is ceil(reach / kTcBackwardKeyTile) - 1 (at most kv_tiles - 1). A CPU test
/// (tests/cpu_attention_backward_split.cpp) checks both rules on every shape up to 1300.
/// Called by the kernels as well (constexpr).
constexpr int tc_dq_turn_place(bool causal, int kv_tile, int q_tile, int kv_tiles, int causal_offset) {
  if (!causal) return kv_tile;
  const int reach = (q_tile + 1) * kTcBackwardQTile + causal_offset;  // > 0 where kv_tile visits q_tile
  const int last = (reach + kTcBackwardKeyTile - 1) / kTcBackwardKeyTile - 1;
  return (last < kv_tiles - 1 ? last : kv_tiles - 1) - kv_tile;
}

/// Resident blocks of the tensor-core backward kernel on the current device (SMs *
/// kTcBackwardBlocksPerSm; kTcSplitDqFallbackSms where no device answers).
inline std::int64_t tc_backward_block_slots() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    (void)cudaGetLastError();  // no device here: not an error of a later call
    sms = kTcSplitDqFallbackSms;
  }
  return static_cast<std::int64_t>(sms) * kTcBackwardBlocksPerSm;
}

/// tc_split_dq's S for these arguments on the current device (1 for sizes validation
/// rejects). The workspace size and the launch both come from here.
inline std::int64_t tc_split_dq_plan(const AttentionBackwardArgsBf16& a) {
  if (a.batch <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.seq_q <= 0 || a.seq_k <= 0 || a.head_dim <= 0) return 1;
  const auto f = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  const std::int64_t kv_tiles = (a.seq_k + kTcBackwardKeyTile - 1) / kTcBackwardKeyTile;
  const std::size_t copy_bytes = f(a.batch) * f(a.heads) * f(a.seq_q) * f(a.head_dim) * sizeof(float);
  return tc_split_dq_splits(kv_tiles, a.batch * a.kv_heads, tc_backward_block_slots(), copy_bytes);
}

/// Where the parts of a tensor-core step's workspace live (byte offsets from its start, each
/// 16-byte aligned). Rows are padded: N_q_pad = tc_backward_padded_rows(N_q), so that a
/// tile's lse and D are read as whole 16-byte chunks, even the tallest tile's.
///  - lse2 [B*H, N_q_pad] fp32: lse * log2(e); +inf for padding and for rows that see no key
///    (P = 2^(s*c - lse2) is then exactly 0);
///  - d    [B*H, N_q_pad] fp32: D_i = dO_i . O_i (0 for padding);
///  - dq   [splits][B*H, N_q, d] fp32: the dQ accumulator (zeroed, then added to by every K/V
///    tile); one copy per split for the splits_dq() steps (tc_split_dq_plan()), else one --
///    those are not zeroed: each split's first K/V tile stores (tc_split_dq_first_tile);
///  - sem  [B*H, N_q_pad / kTcBackwardQTile] int: the dQ turn counters (the orders_dq() steps).
struct TcBackwardWorkspace {
  std::size_t lse2 = 0, d = 0, dq = 0, sem = 0, bytes = 0;
};

inline TcBackwardWorkspace tc_backward_workspace(AttentionBackwardStep step, std::int64_t batch, std::int64_t heads,
                                                 std::int64_t seq_q, std::int64_t head_dim, std::int64_t splits = 1) {
  TcBackwardWorkspace w;
  if (batch <= 0 || heads <= 0 || seq_q <= 0 || head_dim <= 0 || splits <= 0) return w;
  const auto f = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  const std::size_t bh = f(batch) * f(heads);
  const std::size_t tiles = (f(seq_q) + kTcBackwardQTile - 1) / kTcBackwardQTile;
  const std::size_t padded = static_cast<std::size_t>(tc_backward_padded_rows(seq_q));
  const auto up16 = [](std::size_t x) { return (x + 15) / 16 * 16; };
  w.lse2 = 0;
  w.d = w.lse2 + up16(bh * padded * sizeof(float));
  w.dq = w.d + up16(bh * padded * sizeof(float));
  w.sem = w.dq + up16(f(splits) * bh * f(seq_q) * f(head_dim) * sizeof(float));
  w.bytes = w.sem + (orders_dq(step) ? up16(bh * tiles * sizeof(int)) : 0);
  return w;
}

/// The workspace of a tensor-core step for these arguments (tc_split_dq: on the current
/// device, see tc_split_dq_plan()).
inline TcBackwardWorkspace tc_backward_workspace(AttentionBackwardStep step, const AttentionBackwardArgsBf16& a) {
  const std::int64_t splits = splits_dq(step) ? tc_split_dq_plan(a) : 1;
  return tc_backward_workspace(step, a.batch, a.heads, a.seq_q, a.head_dim, splits);
}

/// Scratch bytes a tensor-core step needs: O(B*H*N_q*d) (the fp32 dQ accumulator; S copies
/// of it for the splits_dq() steps, which depends on the device's SM count).
inline std::size_t attention_backward_workspace_bytes(AttentionBackwardStep step, const AttentionBackwardArgsBf16& a) {
  return tc_backward_workspace(step, a).bytes;
}

/// FLOPs by the FlashAttention convention, as for AttentionBackwardArgs.
inline double attention_backward_flops(const AttentionBackwardArgsBf16& a) { return m03::detail::gemm_flops(a, 5); }

/// Device bytes a call touches: the bf16 inputs and gradients, lse and the workspace.
inline std::size_t attention_backward_device_bytes(AttentionBackwardStep step, const AttentionBackwardArgsBf16& a) {
  const auto f = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  const std::size_t q_like = f(a.batch) * f(a.heads) * f(a.seq_q) * f(a.head_dim);
  const std::size_t kv_like = f(a.batch) * f(a.kv_heads) * f(a.seq_k) * f(a.head_dim);
  const std::size_t lse = f(a.batch) * f(a.heads) * f(a.seq_q);
  return (4 * q_like + 4 * kv_like) * sizeof(__nv_bfloat16) + lse * sizeof(float) +
         attention_backward_workspace_bytes(step, a);
}

/// FLOPs by the FlashAttention convention: backward = 2.5 x forward = 10*B*H*N_q*N_k*d
/// (five GEMMs: S recomputed, dV, dP, dQ, dK), halved when causal.
inline double attention_backward_flops(const AttentionBackwardArgs& a) { return m03::detail::gemm_flops(a, 5); }

/// Device bytes a call touches: the inputs Q, K, V, O, dO and lse, the gradients dQ, dK,
/// dV (all dense) and the step's workspace: O(N) for the flash steps, O(N^2) for naive.
inline std::size_t attention_backward_device_bytes(AttentionBackwardStep step, const AttentionBackwardArgs& a) {
  const auto f = [](std::int64_t x) { return static_cast<std::size_t>(x); };
  const std::size_t q_like = f(a.batch) * f(a.heads) * f(a.seq_q) * f(a.head_dim);   // Q, O, dO, dQ
  const std::size_t kv_like = f(a.batch) * f(a.kv_heads) * f(a.seq_k) * f(a.head_dim);  // K, V, dK, dV
  const std::size_t lse = f(a.batch) * f(a.heads) * f(a.seq_q);
  return (4 * q_like + 4 * kv_like + lse) * sizeof(float) + attention_backward_workspace_bytes(step, a);
}

namespace detail {

/// How messages name the backward's own tensors (module 3's table has q, k, v, o).
inline constexpr m03::detail::StrideNames kDoutNames{"do_strides.batch", "do_strides.head", "do_strides.seq"};
inline constexpr m03::detail::StrideNames kDqNames{"dq_strides.batch", "dq_strides.head", "dq_strides.seq"};
inline constexpr m03::detail::StrideNames kDkNames{"dk_strides.batch", "dk_strides.head", "dk_strides.seq"};
inline constexpr m03::detail::StrideNames kDvNames{"dv_strides.batch", "dv_strides.head", "dv_strides.seq"};

/// True if two views with the same dims (extent, stride), starting `delta` elements apart,
/// share an address: delta = sum_k i_k * stride_k with |i_k| <= extent_k - 1 for some i.
/// The dims must pass m03::detail::require_injective (sorted by stride, each stride exceeds
/// the offsets the smaller ones reach), so at most two values of i_k fit the largest stride
/// and the search visits at most 2^(number of dims) candidates.
inline bool same_layout_views_overlap(std::int64_t delta, std::vector<m03::detail::Dim> dims) {
  dims.erase(std::remove_if(dims.begin(), dims.end(), [](const m03::detail::Dim& d) { return d.extent <= 1; }),
             dims.end());
  std::stable_sort(dims.begin(), dims.end(),
                   [](const m03::detail::Dim& x, const m03::detail::Dim& y) { return x.stride < y.stride; });
  if (dims.empty()) return delta == 0;
  const m03::detail::Dim top = dims.back();
  dims.pop_back();
  const std::int64_t reach = dims.empty() ? 0 : m03::detail::max_offset(dims);
  const auto floor_div = [](std::int64_t a, std::int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); };
  // |delta - i * stride| <= reach  <=>  i in [ceil((delta - reach) / stride), floor((delta + reach) / stride)]
  const std::int64_t lo = std::max(-(top.extent - 1), -floor_div(reach - delta, top.stride));
  const std::int64_t hi = std::min(top.extent - 1, floor_div(delta + reach, top.stride));
  for (std::int64_t i = lo; i <= hi; ++i)
    if (same_layout_views_overlap(delta - i * top.stride, dims)) return true;
  return false;
}

/// The checks both element types share (see the contracts above): T is float or
/// __nv_bfloat16. Throws InvalidArgument naming the argument, its value and the rule.
template <class T, class Args>
void validate_backward_args(const Args& a, AttentionBackwardStep step, const char* fn) {
  namespace cv = ::course::validate;  // generic checks (course/validate.hpp)
  namespace md = m03::detail;          // the attention tensors' stride rules and dims (module 3)
  using cv::msg;
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kAttentionBackwardSteps)), fn, "step", s,
              "is not an AttentionBackwardStep");
  const BackwardStepSupport sup = step_support(step);
  const char* sname = step_name(step);
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  require_arg(step_dtype(step) == (kBf16 ? AttentionBackwardDType::bf16 : AttentionBackwardDType::f32), fn, "step", sname,
              kBf16 ? "reads and writes float tensors: call attention_backward(step, const AttentionBackwardArgs&)"
                    : "reads and writes __nv_bfloat16 tensors: call attention_backward(step, const "
                      "AttentionBackwardArgsBf16&)");

  // Sizes (module 3's rules).
  md::require_attention_sizes(a, fn);
  if constexpr (kBf16) {
    const bool known_d = std::find(std::begin(kTcBackwardHeadDims), std::end(kTcBackwardHeadDims), a.head_dim) !=
                         std::end(kTcBackwardHeadDims);
    require_arg(known_d, fn, "head_dim", a.head_dim,
                msg("must be 64 or 128 for step ", sname, " (the tensor-core kernels are templated on it)"));
  } else {
    md::require_fp32_head_dim(a.head_dim, fn);
  }
  require_arg(a.head_dim <= sup.max_head_dim, fn, "head_dim", a.head_dim,
              msg("is above ", sup.max_head_dim, " for step ", sname));
  require_arg(std::isfinite(a.scale) && a.scale >= 0.f, fn, "scale", a.scale,
              "must be finite and >= 0 (0 selects 1/sqrt(head_dim)); it must equal the forward's");

  // Features of the step.
  require_arg(!a.causal || sup.causal, fn, "causal", a.causal, msg("is not supported by step ", sname));
  require_arg(a.kv_heads == a.heads || sup.grouped_query, fn, "kv_heads", a.kv_heads,
              msg("differs from heads = ", a.heads, ": step ", sname,
                  " has no grouped-query attention (its batched GEMMs pair query head h with kv head h); "
                  "use step flash or flash_deterministic"));

  // Pointers and strides.
  using TensorName = std::pair<const T*, const char*>;
  const TensorName tensors[] = {{a.q, "q"},       {a.k, "k"},   {a.v, "v"},   {a.o, "o"},
                                {a.dout, "dout"}, {a.dq, "dq"}, {a.dk, "dk"}, {a.dv, "dv"}};
  for (const auto& [p, name] : tensors) {
    require_not_null(p, fn, name);
    require_aligned(p, 16, fn, name);
  }
  require_not_null(a.lse, fn, "lse");
  require_aligned(a.lse, alignof(float), fn, "lse");
  const std::int64_t d = a.head_dim;
  // 16-byte rows: 4 floats or 8 bf16 (float4 / cp.async loads).
  const std::int64_t multiple = 16 / static_cast<std::int64_t>(sizeof(T));
  const char* why = kBf16 ? "every row must start 16-byte aligned (cp.async copies 8 bf16 at once)"
                          : md::kFloatRowRule;
  md::require_strides(a.q_strides, d, fn, md::kQNames, multiple, why);
  md::require_strides(a.k_strides, d, fn, md::kKNames, multiple, why);
  md::require_strides(a.v_strides, d, fn, md::kVNames, multiple, why);
  md::require_strides(a.o_strides, d, fn, md::kONames, multiple, why);
  md::require_strides(a.do_strides, d, fn, kDoutNames, multiple, why);
  md::require_strides(a.dq_strides, d, fn, kDqNames, multiple, why);
  md::require_strides(a.dk_strides, d, fn, kDkNames, multiple, why);
  md::require_strides(a.dv_strides, d, fn, kDvNames, multiple, why);
  const auto q_dims = [&](const AttentionStrides& st, const md::StrideNames& n = {"", "", ""}) {
    return md::tensor_dims(st, a.batch, a.heads, a.seq_q, d, n);
  };
  const auto kv_dims = [&](const AttentionStrides& st, const md::StrideNames& n = {"", "", ""}) {
    return md::tensor_dims(st, a.batch, a.kv_heads, a.seq_k, d, n);
  };
  const auto dq_dims = q_dims(a.dq_strides, detail::kDqNames);
  const auto dk_dims = kv_dims(a.dk_strides, detail::kDkNames);
  const auto dv_dims = kv_dims(a.dv_strides, detail::kDvNames);
  cv::require_injective(dq_dims, fn, "dq");
  cv::require_injective(dk_dims, fn, "dk");
  cv::require_injective(dv_dims, fn, "dv");

  // No overlap between what is written (dq, dk, dv, workspace) and anything else.
  using md::Range;
  const Range inputs[] = {
      {a.q, cv::span_bytes<T>(q_dims(a.q_strides)), "q"},
      {a.k, cv::span_bytes<T>(kv_dims(a.k_strides)), "k"},
      {a.v, cv::span_bytes<T>(kv_dims(a.v_strides)), "v"},
      {a.o, cv::span_bytes<T>(q_dims(a.o_strides)), "o"},
      {a.dout, cv::span_bytes<T>(q_dims(a.do_strides)), "dout"},
      {a.lse, static_cast<std::size_t>(a.batch * a.heads * a.seq_q) * sizeof(float), "lse"},
  };
  const Range grads[] = {
      {a.dq, cv::span_bytes<T>(dq_dims), "dq"},
      {a.dk, cv::span_bytes<T>(dk_dims), "dk"},
      {a.dv, cv::span_bytes<T>(dv_dims), "dv"},
  };
  // Two gradients overlap if their address ranges meet -- unless they have one layout and
  // interleave without sharing an element: dQ, dK, dV written as the column blocks of one
  // fused dQKV buffer (the mirror of module 3's Q, K, V read from one QKV projection).
  const std::vector<md::Dim> grad_dims[] = {dq_dims, dk_dims, dv_dims};
  const auto gradient_views_overlap = [](const Range& x, const std::vector<md::Dim>& x_dims, const Range& y,
                                         const std::vector<md::Dim>& y_dims) {
    if (!cv::ranges_intersect(x.p, x.bytes, y.p, y.bytes)) return false;
    const auto delta = reinterpret_cast<std::intptr_t>(y.p) - reinterpret_cast<std::intptr_t>(x.p);
    bool same_layout = delta % static_cast<std::intptr_t>(sizeof(T)) == 0 && x_dims.size() == y_dims.size();
    for (std::size_t i = 0; same_layout && i < x_dims.size(); ++i)
      same_layout = x_dims[i].extent == y_dims[i].extent && x_dims[i].stride == y_dims[i].stride;
    return !same_layout || same_layout_views_overlap(delta / static_cast<std::intptr_t>(sizeof(T)), x_dims);
  };
  // Inputs first, for every gradient: a gradient pointed at an input is named as the one at
  // fault even when its span also runs into another gradient's buffer.
  for (const Range& g : grads)
    for (const Range& in : inputs)
      require_arg(!cv::ranges_intersect(g.p, g.bytes, in.p, in.bytes), fn, g.name, g.p,
                  msg("overlaps ", in.name, ": the backward pass is not in place (gradients are written while ",
                      "the inputs are read)"));
  for (std::size_t g = 0; g < std::size(grads); ++g)
    for (std::size_t other = g + 1; other < std::size(grads); ++other)
      require_arg(!gradient_views_overlap(grads[g], grad_dims[g], grads[other], grad_dims[other]), fn,
                  grads[g].name, grads[g].p, msg("overlaps '", grads[other].name, "'"));

  // The workspace: D (flash steps, O(N); flash_deterministic: + turn counters) or P and dP
  // (naive, O(N^2)).
  const std::size_t need = attention_backward_workspace_bytes(step, a);
  require_arg(a.workspace_bytes >= need, fn, "workspace_bytes", a.workspace_bytes,
              msg("must be >= attention_backward_workspace_bytes(step, ...) = ", need, " (step ", sname,
                  kBf16 ? " stores D, lse in base 2, an fp32 dQ accumulator of B*H*N_q*d floats (tc_split_dq, "
                          "tc_wgmma_split_dq: one per split, tc_split_dq_plan()) and its counters)"
                  : step == AttentionBackwardStep::naive ? " stores P and dP: 2 * B*H*N_q*N_k floats)"
                                                         : " stores D = rowsum(dO * O): B*H*N_q floats)"));
  require_not_null(a.workspace, fn, "workspace");
  require_aligned(a.workspace, 16, fn, "workspace");
  for (const Range& r : inputs)
    require_arg(!cv::ranges_intersect(a.workspace, need, r.p, r.bytes), fn, "workspace",
                static_cast<const void*>(a.workspace), msg("overlaps ", r.name));
  for (const Range& r : grads)
    require_arg(!cv::ranges_intersect(a.workspace, need, r.p, r.bytes), fn, "workspace",
                static_cast<const void*>(a.workspace), msg("overlaps ", r.name));
}


}  // namespace detail

/// The validation every implementation runs first (see the contract above). Throws
/// InvalidArgument naming the argument, its value and the rule.
inline void validate_attention_backward_args(const AttentionBackwardArgs& a, AttentionBackwardStep step,
                                             const char* fn) {
  detail::validate_backward_args<float>(a, step, fn);
}
/// The same for the tensor-core steps (bf16 tensors, see their contract).
inline void validate_attention_backward_args(const AttentionBackwardArgsBf16& a, AttentionBackwardStep step,
                                             const char* fn) {
  detail::validate_backward_args<__nv_bfloat16>(a, step, fn);
}

}  // namespace course::m04

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// dQ, dK, dV = attention_backward(Q, K, V, O, dO, lse) with the step's kernels
    /// (asynchronous on args.stream). dq, dk, dv are overwritten (not accumulated into).
    void attention_backward(::course::m04::AttentionBackwardStep step,
                            const ::course::m04::AttentionBackwardArgs& args);
    /// The tensor-core steps (tc_*): bf16 tensors, fp32 lse; dq, dk, dv overwritten
    /// (asynchronous on args.stream; args.workspace is used as scratch).
    void attention_backward(::course::m04::AttentionBackwardStep step,
                            const ::course::m04::AttentionBackwardArgsBf16& args);
    /// The preprocessing kernel alone: D[b, h, i] = sum_c dO[b,h,i,c] * O[b,h,i,c] written to
    /// `d` ([B, H, N_q] contiguous floats, device). Validated like step flash. Synchronous.
    void attention_backward_row_dot(const ::course::m04::AttentionBackwardArgs& args, float* d);)
