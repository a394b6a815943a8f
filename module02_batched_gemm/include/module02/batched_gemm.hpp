#pragma once
/// @file batched_gemm.hpp
/// @brief Module 2 API: batched GEMM over (batch, head), the two matrix products of
/// multi-head attention, with two ways of telling the kernel where each matrix lives.
///
/// For every batch index b < batch and head h < num_heads:
///
///     C[b,h] (M x N)  =  alpha * op(A[b,h]) (M x K) * op(B[b,h]) (K x N)
///
/// op(B) = B^T when `b_transposed` (B stored N x K: the K of Q*K^T), else B (K x N: the
/// V of P*V). op(A) = A^T when `a_transposed` (A stored K x M: the X of dW = X^T dY, the
/// P of dV = P^T dO), else A (M x K). Everything is row-major with a unit column stride;
/// the row stride and the per-batch / per-head strides are in ELEMENTS (not bytes), and
/// describe each operand as STORED.
///
///     scores = Q K^T : A = Q [B,H,N,d], B = K [B,H,N,d], b_transposed = true,  M = N = seq, K = d
///     out    = P V   : A = P [B,H,N,N], B = V [B,H,N,d], b_transposed = false, M = K = seq, N = d
///     dV     = P^T dO: A = P [B,H,N,N], B = dO,          a_transposed = true,  M = K = seq, N = d
///
/// `a_transposed` is an option of the fp32 steps (smem_tiled, register_blocked,
/// warp_tiled): their operand loaders read A^T's rows (m contiguous) the way they read a
/// K x N B, so no transpose is ever materialized. The bf16 steps (tensor_core, wgmma)
/// reject it with InvalidArgument naming `a_transposed`.
///
/// ## Two dispatch strategies, one kernel body
/// - StridedBatchedGemmArgs: one base pointer per operand plus strides. Matrix (b, h) of A
///   starts at `a + b*stride_a_batch + h*stride_a_head`. Any layout that is an affine
///   function of (b, h) fits: contiguous [B,H,N,d], the [B,N,H,d] of a fused QKV
///   projection (stride_row = H*d, stride_head = d), padded rows, and broadcasting
///   (stride 0: every head reads the same K, as in multi-query attention).
/// - PtrArrayBatchedGemmArgs: a DEVICE array of batch*num_heads matrix pointers per operand,
///   entry b*num_heads + h, and one row stride per operand. Fits matrices that live in
///   unrelated allocations (a paged KV cache, a list of differently allocated heads).
///   Costs: building and uploading the arrays (see build_ptr_arrays in
///   batched_gemm_support.hpp), and one dependent global load per operand at the start
///   of every block.
/// The solutions template each kernel on an "operand addressing" policy, so the two APIs
/// run the very same kernel body and differ only in how a block finds its matrices.
///
/// ## Input and output types
/// Steps smem_tiled, register_blocked and warp_tiled read fp32 A and B; steps tensor_core
/// and wgmma read bf16 A and B (call the __nv_bfloat16 overloads). Every step accumulates AND writes fp32 C:
/// one output type keeps the API small, and fp32 scores are what a following softmax
/// wants. (A production kernel would often write bf16 scores to halve the bytes of C;
/// for Q*K^T with d = 64 those bytes dominate, see the lesson.)
///
/// ## Grid mapping (every step)
///     grid.x = tiles_m * tiles_n   (tile of C; up to 2^31 - 1)
///     grid.y = num_heads           (<= 65535)
///     grid.z = batch               (<= 65535)
/// gridDim.y and gridDim.z are limited to 65535 by the hardware, gridDim.x to 2^31 - 1.
/// The tile count is the only extent that grows with the sequence length squared
/// (N = 32768 with 128 x 128 tiles is already 65536 tiles), so it goes on x; heads and
/// batch are small in practice and are validated against 65535. x varies fastest in
/// launch order, so the blocks of one (b, h) run together and share its A and B in L2.
///
/// ## Contract (checked before any launch; violations throw course::InvalidArgument
/// naming the argument and its value)
/// - M, N, K, batch, num_heads >= 1 (an empty problem is rejected: in attention a zero
///   extent is always an upstream bug); M, N, K <= 2^31 - 1; batch, num_heads <= 65535.
/// - Non-null pointers, aligned to their element type. No larger alignment is
///   required: every vectorized path (float4 loads, 16-byte cp.async) is chosen per
///   block at run time when its matrix start and row stride allow it, with a scalar
///   fallback otherwise (same result, slower).
/// - Row strides: stride_a_row >= (a_transposed ? M : K), stride_b_row >= (b_transposed ?
///   K : N), stride_c_row >= N. All strides >= 0; input batch/head strides may be 0 (broadcast).
/// - a_transposed only with the fp32 steps.
/// - C must not alias itself: distinct (b, h, row, col) must be distinct addresses.
///   Checked exactly for the strided API (each stride, in increasing order, must clear
///   the span of the smaller ones) and for pointer arrays when their host copies are
///   at hand (validate_ptr_array_contents, which build_ptr_arrays runs).
/// - Strided API: C's address range must not intersect A's or B's (no in-place GEMM).

#include "course/error.hpp"
#include "course/impl.hpp"
#include "course/validate.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace course::m02 {

/// The batched-GEMM ladder, in teaching order.
enum class BgemmStep {
  smem_tiled,        ///< fp32: 32x32 tiles of A and op(B) in shared memory, one output per thread
  register_blocked,  ///< fp32: 128x128 block tile, 8x8 outputs per thread in registers, float4 loads
  warp_tiled,        ///< fp32: warp tiles with conflict-free fragments, cp.async pipeline, 16-deep K slabs x 4 stages
  tensor_core,       ///< bf16: mma.sync m16n8k16 + ldmatrix on swizzled tiles, 3-stage cp.async pipeline
  wgmma,             ///< bf16, Hopper (sm_90a): warpgroup MMA reading both operands from shared memory
};

inline constexpr StepInfo<BgemmStep> kBgemmSteps[] = {
    {BgemmStep::smem_tiled, "smem_tiled",
     "fp32; 32x32 tiles of A and op(B) staged in shared memory, one output per thread"},
    {BgemmStep::register_blocked, "register_blocked",
     "fp32; 128x128 (or 128x64) block tile, 8x8 outputs per thread, float4 loads, double buffering"},
    {BgemmStep::warp_tiled, "warp_tiled",
     "fp32; module 1's warp-tiled SGEMM: 64x32 warp tiles, cp.async pipeline (A and B^T land transposed)"},
    {BgemmStep::tensor_core, "tensor_core",
     "bf16 in, fp32 out; mma.sync m16n8k16 + ldmatrix, swizzled smem, 3-stage cp.async pipeline"},
    {BgemmStep::wgmma, "wgmma",
     "bf16 in, fp32 out; Hopper wgmma.mma_async from 128B-swizzled shared memory (sm_90a build only)"},
};
static_assert(steps_in_enum_order(kBgemmSteps), "kBgemmSteps must list BgemmStep in enum order");

/// Element type of A and B a step reads (C is always fp32).
enum class BgemmInput { f32, bf16 };

/// The step table's further column: the input type of each step, in the table's order.
struct BgemmStepColumns {
  BgemmStep step;
  BgemmInput input;
};
inline constexpr BgemmStepColumns kBgemmStepColumns[] = {
    {BgemmStep::smem_tiled, BgemmInput::f32},  {BgemmStep::register_blocked, BgemmInput::f32},
    {BgemmStep::warp_tiled, BgemmInput::f32},  {BgemmStep::tensor_core, BgemmInput::bf16},
    {BgemmStep::wgmma, BgemmInput::bf16},
};
static_assert(columns_match_steps(kBgemmSteps, kBgemmStepColumns),
              "kBgemmStepColumns must have one row per row of kBgemmSteps, in the same order");

constexpr BgemmInput step_input(BgemmStep step) {
  const auto i = static_cast<std::size_t>(step);
  return i < std::size(kBgemmStepColumns) ? kBgemmStepColumns[i].input : BgemmInput::f32;
}
inline const char* step_name(BgemmStep step) { return step_name_in(kBgemmSteps, step); }

inline constexpr std::int64_t kMaxGridX = 2147483647;  ///< gridDim.x limit (2^31 - 1)
inline constexpr std::int64_t kMaxGridYZ = 65535;      ///< gridDim.y and gridDim.z limit
inline constexpr std::int64_t kMaxExtent = 2147483647;  ///< M, N, K are int inside the kernels

/// Strided-batched GEMM: one base pointer per operand plus strides (in elements).
/// Element (r, c) of A[b,h] is a[b*stride_a_batch + h*stride_a_head + r*stride_a_row + c]
/// (rows = K if a_transposed else M); likewise B (rows = N if b_transposed else K) and C
/// (M x N). All DEVICE pointers.
template <class T>
struct StridedBatchedGemmArgs {
  const T* a = nullptr;
  const T* b = nullptr;
  float* c = nullptr;
  std::int64_t M = 0, N = 0, K = 0;
  std::int64_t batch = 1, num_heads = 1;
  std::int64_t stride_a_batch = 0, stride_a_head = 0, stride_a_row = 0;
  std::int64_t stride_b_batch = 0, stride_b_head = 0, stride_b_row = 0;
  std::int64_t stride_c_batch = 0, stride_c_head = 0, stride_c_row = 0;
  bool b_transposed = false;  ///< true: B[b,h] is stored N x K and used as B^T (Q*K^T)
  bool a_transposed = false;  ///< true: A[b,h] is stored K x M and used as A^T (X^T dY); fp32 steps only
  float alpha = 1.0f;         ///< C = alpha * op(A) * op(B) (e.g. 1/sqrt(d) for attention scores)
  cudaStream_t stream = nullptr;
};

/// Pointer-array batched GEMM: a DEVICE array of batch*num_heads DEVICE pointers per
/// operand; entry i = b*num_heads + h is the first element of that (b, h)'s matrix.
/// One row stride per operand (ld*, in elements).
template <class T>
struct PtrArrayBatchedGemmArgs {
  const T* const* a_ptrs = nullptr;  ///< device array: a_ptrs[b*num_heads + h] -> K x M (a_transposed) or M x K
  const T* const* b_ptrs = nullptr;  ///< device array: -> N x K (b_transposed) or K x N
  float* const* c_ptrs = nullptr;    ///< device array: -> M x N
  std::int64_t M = 0, N = 0, K = 0;
  std::int64_t batch = 1, num_heads = 1;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  bool b_transposed = false;
  bool a_transposed = false;  ///< fp32 steps only
  float alpha = 1.0f;
  cudaStream_t stream = nullptr;
};

/// The launch grid of one batched GEMM (see "Grid mapping" above).
struct BgemmGrid {
  unsigned x = 0, y = 0, z = 0;  ///< tiles_m * tiles_n, num_heads, batch
  std::int64_t tiles_m = 0;      ///< ceil(M / tile_m)
  std::int64_t tiles_n = 0;      ///< ceil(N / tile_n); block x covers tile (x / tiles_n, x % tiles_n)
};

namespace detail {

/// The pointer arrays are read by the kernel, so they must live in device (or managed)
/// memory: a host array (std::vector::data()) would fault inside the kernel and take the
/// CUDA context down. cudaPointerGetAttributes tells, at the cost of a driver query.
inline void require_device_array(const void* ptr, const char* fn, const char* name) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();  // clear the error the query left behind
    require_arg(false, fn, name, ptr, "is not a CUDA pointer (the arrays of pointers must be in device memory)");
  }
  require_arg(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, fn, name, ptr,
              "points to host memory: the arrays of pointers must be in device memory (see build_ptr_arrays)");
}

template <class T>
constexpr const char* input_type_name() {
  return std::is_same_v<T, float> ? "float" : "__nv_bfloat16";
}

// The generic checks (message builder, strided extents, injectivity, overlap, stride
// rules) are course::validate's (course/validate.hpp), shared with the other modules.
using ::course::validate::Dim;
using ::course::validate::matrices_overlap;
using ::course::validate::max_offset;
using ::course::validate::msg;
using ::course::validate::ranges_intersect;
using ::course::validate::require_injective;
using ::course::validate::require_row_stride;
using ::course::validate::require_stride;
using ::course::validate::span_bytes;

inline void require_sizes(std::int64_t M, std::int64_t N, std::int64_t K, std::int64_t batch,
                          std::int64_t heads, const char* fn) {
  require_arg(M >= 1 && M <= kMaxExtent, fn, "M", M, "must be in [1, 2^31 - 1]");
  require_arg(N >= 1 && N <= kMaxExtent, fn, "N", N, "must be in [1, 2^31 - 1]");
  require_arg(K >= 1 && K <= kMaxExtent, fn, "K", K, "must be in [1, 2^31 - 1]");
  require_arg(batch >= 1 && batch <= kMaxGridYZ, fn, "batch", batch,
              "must be in [1, 65535]: the batch index is gridDim.z, limited to 65535 by the hardware");
  require_arg(heads >= 1 && heads <= kMaxGridYZ, fn, "num_heads", heads,
              "must be in [1, 65535]: the head index is gridDim.y, limited to 65535 by the hardware");
}

inline void require_row_strides(std::int64_t M, std::int64_t K, std::int64_t N, bool a_transposed,
                                bool b_transposed, std::int64_t lda, std::int64_t ldb, std::int64_t ldc,
                                const char* fn, const char* lda_name, const char* ldb_name, const char* ldc_name) {
  if (a_transposed)
    require_row_stride(lda, M, "M", fn, lda_name, "a_transposed: A is stored K x M");
  else
    require_row_stride(lda, K, "K", fn, lda_name, "A is M x K, row-major");
  if (b_transposed)
    require_row_stride(ldb, K, "K", fn, ldb_name, "b_transposed: B is stored N x K");
  else
    require_row_stride(ldb, N, "N", fn, ldb_name, "B is stored K x N");
  require_row_stride(ldc, N, "N", fn, ldc_name, "C is M x N, row-major");
}

}  // namespace detail

/// Throws unless `step` reads inputs of type T (fp32 steps: float; tensor_core, wgmma: bf16).
template <class T>
void validate_step_input(BgemmStep step, const char* fn) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>, "A and B are float or bf16");
  const int s = static_cast<int>(step);
  require_arg(s >= 0 && s < static_cast<int>(std::size(kBgemmSteps)), fn, "step", s, "is not a BgemmStep");
  const bool want_bf16 = step_input(step) == BgemmInput::bf16;
  require_arg(want_bf16 == std::is_same_v<T, __nv_bfloat16>, fn, "step", step_name(step),
              detail::msg("reads ", want_bf16 ? "__nv_bfloat16" : "float", " A and B, but this overload takes ",
                          detail::input_type_name<T>(), "; call the matching overload"));
}

/// Everything about a strided problem that does not depend on the step.
template <class T>
void validate_strided_layout(const StridedBatchedGemmArgs<T>& s, const char* fn) {
  using detail::Dim;
  detail::require_sizes(s.M, s.N, s.K, s.batch, s.num_heads, fn);
  const std::vector<Dim> strides = {
      {0, s.stride_a_batch, "stride_a_batch"}, {0, s.stride_a_head, "stride_a_head"},
      {0, s.stride_a_row, "stride_a_row"},     {0, s.stride_b_batch, "stride_b_batch"},
      {0, s.stride_b_head, "stride_b_head"},   {0, s.stride_b_row, "stride_b_row"},
      {0, s.stride_c_batch, "stride_c_batch"}, {0, s.stride_c_head, "stride_c_head"},
      {0, s.stride_c_row, "stride_c_row"}};
  for (const Dim& d : strides) detail::require_stride(d.stride, fn, d.name);
  detail::require_row_strides(s.M, s.K, s.N, s.a_transposed, s.b_transposed, s.stride_a_row, s.stride_b_row,
                              s.stride_c_row, fn, "stride_a_row", "stride_b_row", "stride_c_row");
  require_not_null(s.a, fn, "a");
  require_not_null(s.b, fn, "b");
  require_not_null(s.c, fn, "c");
  require_aligned(s.a, alignof(T), fn, "a");
  require_aligned(s.b, alignof(T), fn, "b");
  require_aligned(s.c, alignof(float), fn, "c");
  // C must not alias itself: (b, h, row, col) -> offset must be one-to-one.
  const std::vector<Dim> c_dims = {{s.N, 1, "N (the unit column stride of C)"},
                                         {s.M, s.stride_c_row, "stride_c_row"},
                                         {s.num_heads, s.stride_c_head, "stride_c_head"},
                                         {s.batch, s.stride_c_batch, "stride_c_batch"}};
  detail::require_injective(c_dims, fn, "C");
  // No in-place GEMM: C's address range must not meet A's or B's (conservative: ranges).
  const std::int64_t b_rows = s.b_transposed ? s.N : s.K, b_cols = s.b_transposed ? s.K : s.N;
  const std::int64_t a_rows = s.a_transposed ? s.K : s.M, a_cols = s.a_transposed ? s.M : s.K;
  const std::vector<Dim> a_dims = {
      {a_cols, 1, "cols of A"}, {a_rows, s.stride_a_row, "stride_a_row"},
      {s.num_heads, s.stride_a_head, "stride_a_head"}, {s.batch, s.stride_a_batch, "stride_a_batch"}};
  const std::vector<Dim> b_dims = {
      {b_cols, 1, "cols of B"}, {b_rows, s.stride_b_row, "stride_b_row"},
      {s.num_heads, s.stride_b_head, "stride_b_head"}, {s.batch, s.stride_b_batch, "stride_b_batch"}};
  const std::size_t a_bytes = detail::span_bytes<T>(a_dims);
  const std::size_t b_bytes = detail::span_bytes<T>(b_dims);
  const std::size_t c_bytes = detail::span_bytes<float>(c_dims);
  require_arg(!detail::ranges_intersect(s.c, c_bytes, s.a, a_bytes), fn, "c", static_cast<const void*>(s.c),
              "C's address range intersects A's: in-place batched GEMM is not supported");
  require_arg(!detail::ranges_intersect(s.c, c_bytes, s.b, b_bytes), fn, "c", static_cast<const void*>(s.c),
              "C's address range intersects B's: in-place batched GEMM is not supported");
}

/// Throws unless `step` supports the operand options: a_transposed is an fp32-step option.
inline void validate_step_options(BgemmStep step, bool a_transposed, const char* fn) {
  require_arg(!a_transposed || step_input(step) == BgemmInput::f32, fn, "a_transposed", a_transposed,
              detail::msg("is supported by the fp32 steps (smem_tiled, register_blocked, warp_tiled) only, not by "
                          "step ", step_name(step), "; pass A stored M x K"));
}

/// The validation every strided launch runs first (both implementations).
template <class T>
void validate_strided_args(const StridedBatchedGemmArgs<T>& s, BgemmStep step, const char* fn) {
  validate_step_input<T>(step, fn);
  validate_step_options(step, s.a_transposed, fn);
  validate_strided_layout(s, fn);
}

/// The validation every pointer-array launch runs first (both implementations). The
/// pointer arrays live on the device: checking their entries here would cost a
/// synchronous copy per call, the very overhead the API exists to avoid. Entries are
/// checked where the host has them: validate_ptr_array_contents (build_ptr_arrays).
template <class T>
void validate_ptr_array_args(const PtrArrayBatchedGemmArgs<T>& p, BgemmStep step, const char* fn) {
  validate_step_input<T>(step, fn);
  validate_step_options(step, p.a_transposed, fn);
  detail::require_sizes(p.M, p.N, p.K, p.batch, p.num_heads, fn);
  detail::require_row_strides(p.M, p.K, p.N, p.a_transposed, p.b_transposed, p.lda, p.ldb, p.ldc, fn, "lda", "ldb",
                              "ldc");
  require_not_null(p.a_ptrs, fn, "a_ptrs");
  require_not_null(p.b_ptrs, fn, "b_ptrs");
  require_not_null(p.c_ptrs, fn, "c_ptrs");
  require_aligned(p.a_ptrs, alignof(void*), fn, "a_ptrs");
  require_aligned(p.b_ptrs, alignof(void*), fn, "b_ptrs");
  require_aligned(p.c_ptrs, alignof(void*), fn, "c_ptrs");
  detail::require_device_array(p.a_ptrs, fn, "a_ptrs");
  detail::require_device_array(p.b_ptrs, fn, "b_ptrs");
  detail::require_device_array(p.c_ptrs, fn, "c_ptrs");
}

/// Checks HOST copies of the pointer arrays of `p`: batch*num_heads entries each, none
/// null, each aligned to its element type, and no two C matrices sharing an element.
/// (p's own device arrays are not read.)
template <class T>
void validate_ptr_array_contents(const PtrArrayBatchedGemmArgs<T>& p, const std::vector<const T*>& a,
                                 const std::vector<const T*>& b, const std::vector<float*>& c, const char* fn) {
  detail::require_sizes(p.M, p.N, p.K, p.batch, p.num_heads, fn);
  detail::require_row_strides(p.M, p.K, p.N, p.a_transposed, p.b_transposed, p.lda, p.ldb, p.ldc, fn, "lda", "ldb",
                              "ldc");
  const std::size_t count = static_cast<std::size_t>(p.batch * p.num_heads);
  require_arg(a.size() == count, fn, "a_ptrs.size()", a.size(), "must equal batch * num_heads");
  require_arg(b.size() == count, fn, "b_ptrs.size()", b.size(), "must equal batch * num_heads");
  require_arg(c.size() == count, fn, "c_ptrs.size()", c.size(), "must equal batch * num_heads");
  for (std::size_t i = 0; i < count; ++i) {
    require_not_null(a[i], fn, detail::msg("a_ptrs[", i, "]"));
    require_not_null(b[i], fn, detail::msg("b_ptrs[", i, "]"));
    require_not_null(c[i], fn, detail::msg("c_ptrs[", i, "]"));
    require_aligned(a[i], alignof(T), fn, detail::msg("a_ptrs[", i, "]"));
    require_aligned(b[i], alignof(T), fn, detail::msg("b_ptrs[", i, "]"));
    require_aligned(c[i], alignof(float), fn, detail::msg("c_ptrs[", i, "]"));
  }
  // C matrices pairwise disjoint. Sort by address; a pair can only share an element if
  // the later one starts inside the earlier one's [first, last] element range.
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  const auto addr = [&](std::size_t i) { return reinterpret_cast<std::uintptr_t>(c[i]); };
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return addr(x) < addr(y); });
  const std::uintptr_t hull = ((p.M - 1) * p.ldc + p.N) * sizeof(float);
  for (std::size_t u = 0; u < count; ++u) {
    const std::size_t i = order[u];
    for (std::size_t v = u + 1; v < count && addr(order[v]) < addr(i) + hull; ++v) {
      const std::size_t j = order[v];
      const std::int64_t delta = static_cast<std::int64_t>(addr(j) - addr(i)) / static_cast<std::int64_t>(sizeof(float));
      if (detail::matrices_overlap(delta, p.M, p.N, p.ldc)) {
        const auto req = detail::msg("shares elements with c_ptrs[", i, "] (M = ", p.M, ", N = ", p.N,
                                     ", ldc = ", p.ldc, "): C matrices must not overlap");
        require_arg(false, fn, detail::msg("c_ptrs[", j, "]"), static_cast<const void*>(c[j]), req);
      }
    }
  }
}

/// Strided arguments for contiguous [batch, num_heads, rows, cols] operands (each head's
/// matrix contiguous): A is M x K, B is N x K (b_transposed) or K x N, C is M x N.
template <class T>
StridedBatchedGemmArgs<T> contiguous_strided_args(const T* a, const T* b, float* c, std::int64_t batch,
                                                  std::int64_t num_heads, std::int64_t M, std::int64_t N,
                                                  std::int64_t K, bool b_transposed, float alpha = 1.0f,
                                                  cudaStream_t stream = nullptr) {
  StridedBatchedGemmArgs<T> s;
  s.a = a;
  s.b = b;
  s.c = c;
  s.M = M;
  s.N = N;
  s.K = K;
  s.batch = batch;
  s.num_heads = num_heads;
  const std::int64_t b_rows = b_transposed ? N : K, b_cols = b_transposed ? K : N;
  s.stride_a_row = K;
  s.stride_a_head = M * K;
  s.stride_a_batch = num_heads * M * K;
  s.stride_b_row = b_cols;
  s.stride_b_head = b_rows * b_cols;
  s.stride_b_batch = num_heads * b_rows * b_cols;
  s.stride_c_row = N;
  s.stride_c_head = M * N;
  s.stride_c_batch = num_heads * M * N;
  s.b_transposed = b_transposed;
  s.alpha = alpha;
  s.stream = stream;
  return s;
}

}  // namespace course::m02

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// The grid for an M x N output tiled by tile_m x tile_n blocks, over batch x num_heads
    /// matrices (see "Grid mapping"). Throws InvalidArgument naming the extent that does
    /// not fit: a tile count above 2^31 - 1, num_heads or batch above 65535, sizes < 1.
    ::course::m02::BgemmGrid batched_gemm_grid(std::int64_t M, std::int64_t N, std::int64_t batch,
                                               std::int64_t num_heads, int tile_m, int tile_n);
    /// C[b,h] = alpha * op(A[b,h]) * op(B[b,h]) for every (b, h); fp32 steps (asynchronous on args.stream).
    void batched_gemm_strided(::course::m02::BgemmStep step,
                              const ::course::m02::StridedBatchedGemmArgs<float>& args);
    /// Same, bf16 inputs (steps tensor_core and wgmma), fp32 accumulation and output.
    void batched_gemm_strided(::course::m02::BgemmStep step,
                              const ::course::m02::StridedBatchedGemmArgs<__nv_bfloat16>& args);
    /// Pointer-array form; the same kernels as batched_gemm_strided (asynchronous on args.stream).
    void batched_gemm_ptr_array(::course::m02::BgemmStep step,
                                const ::course::m02::PtrArrayBatchedGemmArgs<float>& args);
    /// Pointer-array form, bf16 inputs (steps tensor_core and wgmma).
    void batched_gemm_ptr_array(::course::m02::BgemmStep step,
                                const ::course::m02::PtrArrayBatchedGemmArgs<__nv_bfloat16>& args);)
