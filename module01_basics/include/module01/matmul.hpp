#pragma once
/// @file matmul.hpp
/// @brief Module 1 API: fp32 matrix multiply (SGEMM), as a ladder of seven steps.
///
///     C[M x N] = alpha * A[M x K] * B[K x N] + beta * C
///
/// All matrices are row-major with leading dimensions (row strides, in elements)
/// lda >= K, ldb >= N, ldc >= N, so a matrix may be a window of a wider one.
///
/// Semantics follow BLAS:
///  * beta == 0 means C is NOT read: whatever C held (NaN included) is overwritten
///    with alpha * A * B. Any other beta reads C, so NaN there propagates.
///  * alpha == 0 still computes A * B (no shortcut); the result is then 0 * (A*B)
///    (+ beta * C), so NaN or Inf in A or B still shows, unlike reference BLAS which
///    skips the product. Keeping one code path is simpler to teach and to test.
///
/// Alignment: no step *requires* more than the 4-byte alignment of a float. The two
/// vectorized steps (vectorized, warp_tiled) take their float4 (16-byte) path only when
/// A, B and C are 16-byte aligned and lda, ldb, ldc are multiples of 4; otherwise they
/// run the same kernel instantiated with scalar loads and stores (same results, slower).
/// Every step handles any M, N, K >= 1: partial tiles at the right, bottom and at
/// the end of K are zero-filled on load and masked on store.

#include "course/error.hpp"
#include "course/impl.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

namespace course::m01 {

/// The SGEMM ladder, in teaching order.
enum class MatmulStep {
  naive,        ///< one thread per C element, threadIdx.x along M (the classic mistake)
  coalesced,    ///< one thread per C element, threadIdx.x along N: a warp reads a row segment
  smem_tiled,   ///< 32x32 tiles of A and B staged in shared memory
  register_1d,  ///< each thread computes TM = 8 outputs of one column
  register_2d,  ///< each thread computes an 8x8 block of outputs; 128x128 block tile
  vectorized,   ///< float4 global loads, A transposed in shared memory, float4 shared loads
  warp_tiled,   ///< warp-level tiles, conflict-free float4 fragments, double-buffered tiles
};

inline constexpr StepInfo<MatmulStep> kMatmulSteps[] = {
    {MatmulStep::naive, "naive", "one thread per output, threadIdx.x along M: strided A loads and C stores"},
    {MatmulStep::coalesced, "coalesced", "one thread per output, threadIdx.x along N: coalesced B loads and C stores"},
    {MatmulStep::smem_tiled, "smem_tiled", "32x32 tiles of A and B in shared memory, reused 32 times each"},
    {MatmulStep::register_1d, "register_1d", "each thread computes 8 outputs of a column: 1-D register blocking"},
    {MatmulStep::register_2d, "register_2d", "each thread computes an 8x8 output block: 2-D register blocking"},
    {MatmulStep::vectorized, "vectorized", "float4 global and shared loads, A stored transposed in shared memory"},
    {MatmulStep::warp_tiled, "warp_tiled",
     "warp tiles, bank-conflict-free fragments, double-buffered tiles with register prefetch"},
};
static_assert(steps_in_enum_order(kMatmulSteps), "kMatmulSteps must list MatmulStep in enum order");

/// Device-side arguments of matmul. All pointers are device pointers; the call is
/// asynchronous on `stream`.
struct MatmulArgs {
  const float* a = nullptr;  ///< M x K, row-major, row stride lda
  const float* b = nullptr;  ///< K x N, row-major, row stride ldb
  float* c = nullptr;        ///< M x N, row-major, row stride ldc; read only when beta != 0
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;  ///< in elements: lda >= k, ldb >= n, ldc >= n
  float alpha = 1.0f;
  float beta = 0.0f;
  cudaStream_t stream = nullptr;
};

/// Fill the leading dimensions of a tightly packed problem (lda = k, ldb = n, ldc = n).
inline MatmulArgs packed_matmul_args(const float* a, const float* b, float* c, std::int64_t m,
                                     std::int64_t n, std::int64_t k) {
  MatmulArgs args;
  args.a = a; args.b = b; args.c = c;
  args.m = m; args.n = n; args.k = k;
  args.lda = k; args.ldb = n; args.ldc = n;
  return args;
}

/// True when the vectorized steps can use their float4 path for these arguments.
inline bool matmul_float4_ok(const MatmulArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return aligned(a.a) && aligned(a.b) && aligned(a.c) && a.lda % 4 == 0 && a.ldb % 4 == 0 &&
         a.ldc % 4 == 0;
}

/// Number of floats a row-major rows x cols matrix with row stride ld spans in memory.
inline std::int64_t matmul_span(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return (rows - 1) * ld + cols;
}

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_matmul_args(const MatmulArgs& a, const char* fn) {
  constexpr std::int64_t kMaxDim = std::numeric_limits<int>::max();
  require_arg(a.m >= 1, fn, "m", a.m, "must be >= 1");
  require_arg(a.n >= 1, fn, "n", a.n, "must be >= 1");
  require_arg(a.k >= 1, fn, "k", a.k, "must be >= 1");
  require_arg(a.m <= kMaxDim, fn, "m", a.m, "must fit in an int (kernels index tiles with int)");
  require_arg(a.n <= kMaxDim, fn, "n", a.n, "must fit in an int (kernels index tiles with int)");
  require_arg(a.k <= kMaxDim, fn, "k", a.k, "must fit in an int (kernels index tiles with int)");
  require_not_null(a.a, fn, "a");
  require_not_null(a.b, fn, "b");
  require_not_null(a.c, fn, "c");
  require_arg(a.lda >= a.k, fn, "lda", a.lda, "must be >= k (row-major A is M x K)");
  require_arg(a.ldb >= a.n, fn, "ldb", a.ldb, "must be >= n (row-major B is K x N)");
  require_arg(a.ldc >= a.n, fn, "ldc", a.ldc, "must be >= n (row-major C is M x N)");
  require_aligned(a.a, alignof(float), fn, "a");
  require_aligned(a.b, alignof(float), fn, "b");
  require_aligned(a.c, alignof(float), fn, "c");
  // C is written while A and B are read by other blocks: any shared byte is a race.
  // The check compares the address ranges the matrices span (conservative: two
  // interleaved but disjoint windows of one buffer are rejected too).
  const auto overlaps = [](const float* p, std::int64_t np, const float* q, std::int64_t nq) {
    const auto p0 = reinterpret_cast<std::uintptr_t>(p), q0 = reinterpret_cast<std::uintptr_t>(q);
    const auto p1 = p0 + static_cast<std::uintptr_t>(np) * sizeof(float);
    const auto q1 = q0 + static_cast<std::uintptr_t>(nq) * sizeof(float);
    return p0 < q1 && q0 < p1;
  };
  const std::int64_t c_span = matmul_span(a.m, a.n, a.ldc);
  require_arg(!overlaps(a.c, c_span, a.a, matmul_span(a.m, a.k, a.lda)), fn, "c", a.c,
              "must not overlap A (the kernels write C while other threads still read A)");
  require_arg(!overlaps(a.c, c_span, a.b, matmul_span(a.k, a.n, a.ldb)), fn, "c", a.c,
              "must not overlap B (the kernels write C while other threads still read B)");
}

}  // namespace course::m01

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// C = alpha * A * B + beta * C with the chosen step (asynchronous on args.stream).
    /// Validates `args` first (course::InvalidArgument).
    void matmul(::course::m01::MatmulStep step, const ::course::m01::MatmulArgs& args);)
