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

namespace course::m01 {

/// The tensor-core matmul ladder, in teaching order.
enum class TcMatmulStep {
  wmma,      ///< nvcuda::wmma 16x16x16 fragments, A/B tiles staged through shared memory
  mma_sync,  ///< PTX mma.sync m16n8k16 + ldmatrix, swizzled shared memory, cp.async pipeline
  wgmma,     ///< Hopper wgmma m64n256k16 from 128-byte-swizzled shared memory, cp.async pipeline (sm_90a)
  tma_warp_specialized,  ///< TMA loads into an mbarrier ring; a producer warpgroup and two consumer warpgroups
  persistent,            ///< one block per SM loops over tiles: the next tile's loads overlap this tile's stores
  cluster_multicast,     ///< clusters of 2 blocks share each B tile: one TMA read, multicast to both
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
};
static_assert(steps_in_enum_order(kTcMatmulSteps), "kTcMatmulSteps must list TcMatmulStep in enum order");

/// Leading dimensions of A and B must be multiples of this many elements (16 bytes).
inline constexpr std::int64_t kTcLdMultiple = 8;

/// The smallest valid leading dimension for a bf16 row of `cols` elements:
/// `cols` rounded up to a multiple of kTcLdMultiple.
inline constexpr std::int64_t tc_leading_dim(std::int64_t cols) {
  return (cols + kTcLdMultiple - 1) / kTcLdMultiple * kTcLdMultiple;
}

/// Device-side arguments of matmul_tc. All pointers are device pointers.
struct TcMatmulArgs {
  const __nv_bfloat16* a = nullptr;  ///< M x K, row-major, leading dimension lda
  const __nv_bfloat16* b = nullptr;  ///< K x N, row-major, leading dimension ldb
  float* c = nullptr;                ///< M x N, row-major, leading dimension ldc (output)
  std::int64_t m = 0, n = 0, k = 0;  ///< all >= 1
  std::int64_t lda = 0;              ///< >= k and a multiple of kTcLdMultiple
  std::int64_t ldb = 0;              ///< >= n and a multiple of kTcLdMultiple
  std::int64_t ldc = 0;              ///< >= n
  cudaStream_t stream = nullptr;
};

/// The validation both implementations run before any launch.
/// Throws course::InvalidArgument naming the argument and its value.
inline void validate_tc_matmul_args(const TcMatmulArgs& a, const char* fn) {
  require_arg(a.m >= 1, fn, "m", a.m, "must be >= 1");
  require_arg(a.n >= 1, fn, "n", a.n, "must be >= 1");
  require_arg(a.k >= 1, fn, "k", a.k, "must be >= 1");
  require_not_null(a.a, fn, "a");
  require_not_null(a.b, fn, "b");
  require_not_null(a.c, fn, "c");
  require_arg(a.lda >= a.k, fn, "lda", a.lda, "must be >= k (A is M x K, row-major)");
  require_arg(a.ldb >= a.n, fn, "ldb", a.ldb, "must be >= n (B is K x N, row-major)");
  require_arg(a.ldc >= a.n, fn, "ldc", a.ldc, "must be >= n (C is M x N, row-major)");
  require_arg(a.lda % kTcLdMultiple == 0, fn, "lda", a.lda,
              "must be a multiple of 8 (rows are copied in 16-byte chunks); pad rows to tc_leading_dim(k)");
  require_arg(a.ldb % kTcLdMultiple == 0, fn, "ldb", a.ldb,
              "must be a multiple of 8 (rows are copied in 16-byte chunks); pad rows to tc_leading_dim(n)");
  require_aligned(a.a, 16, fn, "a");
  require_aligned(a.b, 16, fn, "b");
  require_aligned(a.c, alignof(float), fn, "c");
  // The output must not overlap an input: the kernels read A and B while C is written.
  const auto begin = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  const std::uintptr_t c0 = begin(a.c);
  const std::uintptr_t c1 = c0 + static_cast<std::uintptr_t>((a.m - 1) * a.ldc + a.n) * sizeof(float);
  const std::uintptr_t a0 = begin(a.a);
  const std::uintptr_t a1 = a0 + static_cast<std::uintptr_t>((a.m - 1) * a.lda + a.k) * sizeof(__nv_bfloat16);
  const std::uintptr_t b0 = begin(a.b);
  const std::uintptr_t b1 = b0 + static_cast<std::uintptr_t>((a.k - 1) * a.ldb + a.n) * sizeof(__nv_bfloat16);
  require_arg(c1 <= a0 || a1 <= c0, fn, "c", static_cast<const void*>(a.c), "must not overlap a");
  require_arg(c1 <= b0 || b1 <= c0, fn, "c", static_cast<const void*>(a.c), "must not overlap b");
}

}  // namespace course::m01

COURSE_DECLARE_FOR_BOTH_IMPLS(
    /// C = A * B with bf16 inputs and fp32 accumulation (asynchronous on args.stream).
    void matmul_tc(::course::m01::TcMatmulStep step, const ::course::m01::TcMatmulArgs& args);)
