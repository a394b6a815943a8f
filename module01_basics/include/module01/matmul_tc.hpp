#pragma once
/// @file matmul_tc.hpp
/// @brief Module 1 API: C = A * B on tensor cores, bf16 inputs and fp32 accumulation.
///
/// A is M x K and B is K x N, both row-major __nv_bfloat16 with leading dimensions
/// lda and ldb (in elements); C is M x N row-major float with leading dimension ldc.
/// Every product a_ik * b_kj of two bf16 values is exact in fp32, so the only rounding
/// is in the fp32 accumulation: the CPU reference, fed the same bf16 values widened
/// to float, agrees to fp32 accumulation accuracy.
///
/// Alignment contract (checked by validate_tc_matmul_args): the kernels copy A and B
/// into shared memory in 16-byte chunks (8 bf16 values) with cp.async or vector loads,
/// so A and B must be 16-byte aligned and lda, ldb multiples of 8. A matrix whose
/// row length is not a multiple of 8 is stored with padded rows:
/// lda = tc_leading_dim(K), ldb = tc_leading_dim(N). The padding is never read.
/// Any M, N, K >= 1 is allowed: partial tiles at the edges are zero-filled on load
/// and masked on store. C has no alignment requirement beyond float's own.
///
/// ## Options for a linear layer (module 4's transformer block)
/// The defaults above are plain C = A * B. Three groups of options turn the same kernels
/// into the three products of a linear layer Y = X W^T + b (W stored [out, in], as
/// PyTorch stores it) and its backward dX = dY W, dW = dY^T X, without materializing a
/// transpose:
///   - Operand layouts: a_transposed (A stored K x M: element (i, k) at a[k * lda + i],
///     lda >= m) and b_transposed (B stored N x K: element (k, j) at b[j * ldb + k],
///     ldb >= k). The tile copies are the same 16-byte chunks either way; what changes is
///     which dimension of a shared-memory tile is contiguous, and so whether a fragment
///     comes out of ldmatrix plain or with .trans.
///   - Output: exactly one of c (fp32) and c_bf16 (bf16, leading dimension ldc).
///   - Epilogue (TcEpilogue), applied to each fp32 accumulator in this order:
///     v = acc + bias[j]; pre_gelu(i, j) = v (bf16, for GELU's backward); v = gelu_tanh(v);
///     v += residual(i, j); C(i, j) = v, or C(i, j) += v with accumulate (fp32 C only).
///     residual has the output's dtype and may be C itself (same pointer and leading
///     dimension: the residual stream updated in place); it must not overlap C otherwise.
/// Steps mma_sync, tma_warp_specialized, persistent, cluster_multicast and pingpong take every option;
/// wmma and wgmma throw course::Unsupported naming the first option they are given.
///
/// Steps wgmma and later use Hopper-only instructions (wgmma, setmaxnreg: sm_90a; TMA,
/// mbarrier, clusters: sm_90). On another GPU, or from a binary built without sm_90a,
/// they throw course::Unsupported (tests report SKIPPED with the reason). Their loads go
/// through the TMA, whose tensor maps need the same contract: a 16-byte aligned base and
/// row strides that are multiples of 16 bytes.

#include "course/error.hpp"
#include "course/impl.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>

namespace course::m01 {

/// The tensor-core matmul ladder, in teaching order.
enum class TcMatmulStep {
  wmma,      ///< nvcuda::wmma 16x16x16 fragments, A/B tiles staged through shared memory
  mma_sync,  ///< PTX mma.sync m16n8k16 + ldmatrix, swizzled shared memory, cp.async pipeline
  wgmma,     ///< Hopper wgmma m64n256k16 from 128-byte-swizzled shared memory, cp.async pipeline (sm_90a)
  tma_warp_specialized,  ///< TMA loads into an mbarrier ring; a producer warpgroup and two consumer warpgroups
  persistent,            ///< one block per SM loops over tiles: the next tile's loads overlap this tile's stores
  cluster_multicast,     ///< clusters of 2 blocks share each B tile: one TMA read, multicast to both
  pingpong,              ///< each consumer warpgroup owns a 128x128 tile; they take turns on the tensor cores
                         ///< (a bf16 C without GELU, N % 192 == 0: both on one 128x192 tile, "wide tiles")
};

inline constexpr StepInfo<TcMatmulStep> kTcMatmulSteps[] = {
    {TcMatmulStep::wmma, "wmma",
     "nvcuda::wmma 16x16x16 fragments; 128x128x32 block tile staged through shared memory"},
    {TcMatmulStep::mma_sync, "mma_sync",
     "PTX mma.sync m16n8k16 + ldmatrix on XOR-swizzled shared memory, multi-stage cp.async pipeline"},
    {TcMatmulStep::wgmma, "wgmma",
     "Hopper warpgroup MMA (m64n256k16) reading both operands from 128-byte-swizzled shared memory"},
    {TcMatmulStep::tma_warp_specialized, "tma_warp_specialized",
     "TMA copies complete on an mbarrier ring; a producer warpgroup feeds two consumer warpgroups"},
    {TcMatmulStep::persistent, "persistent",
     "one block per SM walks a tile schedule: the next tile's loads overlap this tile's epilogue"},
    {TcMatmulStep::cluster_multicast, "cluster_multicast",
     "2-block clusters: each B tile is read once from L2 and multicast into both blocks"},
    {TcMatmulStep::pingpong, "pingpong",
     "each consumer warpgroup owns a 128x128 tile; taking turns, one's epilogue runs under the other's math"},
};
static_assert(steps_in_enum_order(kTcMatmulSteps), "kTcMatmulSteps must list TcMatmulStep in enum order");

/// Leading dimensions of A and B must be multiples of this many elements (16 bytes).
inline constexpr std::int64_t kTcLdMultiple = 8;

/// The smallest valid leading dimension for a bf16 row of `cols` elements:
/// `cols` rounded up to a multiple of kTcLdMultiple.
inline constexpr std::int64_t tc_leading_dim(std::int64_t cols) {
  return (cols + kTcLdMultiple - 1) / kTcLdMultiple * kTcLdMultiple;
}

/// What the epilogue does with each fp32 accumulator value (see the file comment for the
/// order). Every field's default leaves C = A * B.
struct TcEpilogue {
  const float* bias = nullptr;             ///< [n] fp32: v = acc + bias[j]
  __nv_bfloat16* pre_gelu = nullptr;       ///< M x N bf16, leading dimension ldc: v before GELU (needs gelu)
  bool gelu = false;                       ///< v = gelu_tanh(v), GPT-2's tanh approximation
  const void* residual = nullptr;          ///< M x N in the output's dtype, leading dimension ldr: v += residual
  std::int64_t ldr = 0;                    ///< >= n when residual is set
  bool accumulate = false;                 ///< fp32 output only: C += v (gradient accumulation)
};

/// Device-side arguments of matmul_tc. All pointers are device pointers.
struct TcMatmulArgs {
  const __nv_bfloat16* a = nullptr;  ///< M x K, row-major, leading dimension lda (K x M if a_transposed)
  const __nv_bfloat16* b = nullptr;  ///< K x N, row-major, leading dimension ldb (N x K if b_transposed)
  float* c = nullptr;                ///< M x N, row-major, leading dimension ldc (fp32 output)
  std::int64_t m = 0, n = 0, k = 0;  ///< all >= 1
  std::int64_t lda = 0;              ///< >= k (>= m if a_transposed), a multiple of kTcLdMultiple
  std::int64_t ldb = 0;              ///< >= n (>= k if b_transposed), a multiple of kTcLdMultiple
  std::int64_t ldc = 0;              ///< >= n
  cudaStream_t stream = nullptr;
  bool a_transposed = false;         ///< A stored K x M: A(i, k) = a[k * lda + i]
  bool b_transposed = false;         ///< B stored N x K: B(k, j) = b[j * ldb + k]
  __nv_bfloat16* c_bf16 = nullptr;   ///< the bf16 output instead of c (exactly one of the two)
  TcEpilogue epilogue;               ///< bias, GELU, residual, accumulate
};

/// True when `a` asks for anything beyond plain fp32 C = A * B (a layout, bf16 output or
/// an epilogue). Steps without the options (wmma) reject such calls.
inline bool uses_options(const TcMatmulArgs& a) {
  const TcEpilogue& e = a.epilogue;
  return a.a_transposed || a.b_transposed || a.c_bf16 != nullptr || e.bias != nullptr || e.pre_gelu != nullptr ||
         e.gelu || e.residual != nullptr || e.accumulate;
}

/// The name of the first option `a` uses ("a_transposed", ...), or "" for none.
inline const char* first_option(const TcMatmulArgs& a) {
  const TcEpilogue& e = a.epilogue;
  if (a.a_transposed) return "a_transposed";
  if (a.b_transposed) return "b_transposed";
  if (a.c_bf16 != nullptr) return "c_bf16";
  if (e.bias != nullptr) return "epilogue.bias";
  if (e.pre_gelu != nullptr) return "epilogue.pre_gelu";
  if (e.gelu) return "epilogue.gelu";
  if (e.residual != nullptr) return "epilogue.residual";
  if (e.accumulate) return "epilogue.accumulate";
  return "";
}

/// Steps that compute only plain fp32 C = A * B throw course::Unsupported naming the first
/// option they are given; `step` names the step in the message ("matmul_tc step wmma").
inline void require_no_options(const TcMatmulArgs& a, const std::string& step) {
  if (uses_options(a))
    throw Unsupported(step, std::string("plain fp32 C = A * B only: it does not take TcMatmulArgs::") +
                                first_option(a) +
                                " (steps mma_sync, tma_warp_specialized, persistent, cluster_multicast and "
                                "pingpong take them)");
}

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_tc_matmul_args(const TcMatmulArgs& a, const char* fn) {
  require_arg(a.m >= 1, fn, "m", a.m, "must be >= 1");
  require_arg(a.n >= 1, fn, "n", a.n, "must be >= 1");
  require_arg(a.k >= 1, fn, "k", a.k, "must be >= 1");
  require_not_null(a.a, fn, "a");
  require_not_null(a.b, fn, "b");
  require_arg((a.c == nullptr) != (a.c_bf16 == nullptr), fn, "c", static_cast<const void*>(a.c),
              a.c ? "and c_bf16 are both set: give exactly one output"
                  : "while c_bf16 is null too: give one output (c for fp32, c_bf16 for bf16)");
  // Rows and columns of the operands as stored.
  const std::int64_t a_rows = a.a_transposed ? a.k : a.m, a_cols = a.a_transposed ? a.m : a.k;
  const std::int64_t b_rows = a.b_transposed ? a.n : a.k, b_cols = a.b_transposed ? a.k : a.n;
  require_arg(a.lda >= a_cols, fn, "lda", a.lda,
              a.a_transposed ? "must be >= m (A is stored K x M, a_transposed)" : "must be >= k (A is M x K, row-major)");
  require_arg(a.ldb >= b_cols, fn, "ldb", a.ldb,
              a.b_transposed ? "must be >= k (B is stored N x K, b_transposed)" : "must be >= n (B is K x N, row-major)");
  require_arg(a.ldc >= a.n, fn, "ldc", a.ldc, "must be >= n (C is M x N, row-major)");
  require_arg(a.lda % kTcLdMultiple == 0, fn, "lda", a.lda,
              "must be a multiple of 8 (rows are copied in 16-byte chunks); pad rows to tc_leading_dim of their length");
  require_arg(a.ldb % kTcLdMultiple == 0, fn, "ldb", a.ldb,
              "must be a multiple of 8 (rows are copied in 16-byte chunks); pad rows to tc_leading_dim of their length");
  require_aligned(a.a, 16, fn, "a");
  require_aligned(a.b, 16, fn, "b");
  require_aligned(a.c, alignof(float), fn, "c");
  require_aligned(a.c_bf16, alignof(__nv_bfloat16), fn, "c_bf16");
  const TcEpilogue& e = a.epilogue;
  const std::size_t out_size = a.c ? sizeof(float) : sizeof(__nv_bfloat16);
  require_arg(!e.accumulate || a.c != nullptr, fn, "epilogue.accumulate", e.accumulate,
              "needs the fp32 output c (a bf16 sum would round at every accumulation)");
  require_arg(e.pre_gelu == nullptr || e.gelu, fn, "epilogue.pre_gelu", static_cast<const void*>(e.pre_gelu),
              "is only written with epilogue.gelu = true");
  require_arg(!(e.accumulate && e.residual != nullptr), fn, "epilogue.residual", e.residual,
              "cannot be combined with epilogue.accumulate (accumulate already adds C; add the residual into C first)");
  require_aligned(e.pre_gelu, alignof(__nv_bfloat16), fn, "epilogue.pre_gelu");
  require_aligned(e.bias, alignof(float), fn, "epilogue.bias");
  if (e.residual != nullptr) {
    require_arg(e.ldr >= a.n, fn, "epilogue.ldr", e.ldr, "must be >= n (the residual is M x N)");
    require_aligned(e.residual, out_size, fn, "epilogue.residual");
  }
  // The output must not overlap an input: the kernels read A and B while C is written.
  const auto span = [](const void* p, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::size_t size) {
    const auto b0 = reinterpret_cast<std::uintptr_t>(p);
    return std::pair<std::uintptr_t, std::uintptr_t>{b0, b0 + static_cast<std::uintptr_t>((rows - 1) * ld + cols) * size};
  };
  const auto disjoint = [](std::pair<std::uintptr_t, std::uintptr_t> x, std::pair<std::uintptr_t, std::uintptr_t> y) {
    return x.second <= y.first || y.second <= x.first;
  };
  const void* out = a.c ? static_cast<const void*>(a.c) : static_cast<const void*>(a.c_bf16);
  const char* out_name = a.c ? "c" : "c_bf16";
  const auto c_span = span(out, a.m, a.n, a.ldc, out_size);
  const auto a_span = span(a.a, a_rows, a_cols, a.lda, sizeof(__nv_bfloat16));
  const auto b_span = span(a.b, b_rows, b_cols, a.ldb, sizeof(__nv_bfloat16));
  require_arg(disjoint(c_span, a_span), fn, out_name, out, "must not overlap a");
  require_arg(disjoint(c_span, b_span), fn, out_name, out, "must not overlap b");
  if (e.residual != nullptr) {
    // The one allowed overlap: the residual IS the output (each element read, then written,
    // by the same thread).
    const bool same = e.residual == out && e.ldr == a.ldc;
    require_arg(same || disjoint(c_span, span(e.residual, a.m, a.n, e.ldr, out_size)), fn, "epilogue.residual",
                e.residual, "overlaps the output without being it (same pointer and ldr == ldc)");
  }
  if (e.pre_gelu != nullptr) {
    const auto p_span = span(e.pre_gelu, a.m, a.n, a.ldc, sizeof(__nv_bfloat16));
    require_arg(disjoint(p_span, c_span) && disjoint(p_span, a_span) && disjoint(p_span, b_span), fn,
                "epilogue.pre_gelu", static_cast<const void*>(e.pre_gelu), "must not overlap c, a or b");
    if (e.residual != nullptr)
      require_arg(disjoint(p_span, span(e.residual, a.m, a.n, e.ldr, out_size)), fn, "epilogue.pre_gelu",
                  static_cast<const void*>(e.pre_gelu), "must not overlap the residual");
  }
}

}  // namespace course::m01

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// C = A * B with bf16 inputs and fp32 accumulation (asynchronous on args.stream).
    void matmul_tc(::course::m01::TcMatmulStep step, const ::course::m01::TcMatmulArgs& args);)
