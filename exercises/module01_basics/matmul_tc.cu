/// @file matmul_tc.cu
/// @brief YOUR ladder for C = A * B on tensor cores: bf16 inputs, fp32 accumulation (module 1).
///
/// Read module01_basics/README.md, "Tensor-core matmul", then fill in one step at a time.
/// Steps 1-2 (wmma, mma_sync) are in this file; the Hopper steps 3-6 (wgmma,
/// tma_warp_specialized, persistent, cluster_multicast) in matmul_tc_hopper.cu.
/// Run its tests with:   ctest --preset default -L exercise -R MatmulTc
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint matmul_tc/<step>`
/// (all of them: exercises/module01_basics/hints/matmul_tc.md).
///
/// Contract (module01/matmul_tc.hpp): A is M x K, B is K x N, both row-major bf16 with
/// leading dimensions lda, ldb that are multiples of 8 (so every 8-element chunk of a
/// row is one aligned 16-byte load); C is M x N row-major fp32. Any M, N, K >= 1:
/// zero-fill what lies outside the matrices when loading, mask stores at the edges.

#include "module01/matmul_tc.hpp"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "matmul_tc_parts.cuh"
#include "course/device.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <climits>
#include <cstdint>
#include <string>

namespace course::exercise {
namespace {

using m01::TcMatmulArgs;
using m01::TcMatmulStep;
using bf16 = __nv_bfloat16;

// ============================================================================
// Step 1: wmma -- nvcuda::wmma fragments, tiles staged through shared memory.
//
// Suggested shape: block tile 128 x 128 x 32, 256 threads = 8 warps arranged 2 (M) x 4
// (N), so each warp owns a 64 x 32 piece of C = 4 x 2 accumulator fragments of 16x16.
//
// TODO(step 1): in the kernel
//   (a) Work out this block's tile origin (m0, n0) from blockIdx, and this warp's
//       position (warp_m, warp_n) inside the block tile.
//   (b) Declare and zero the accumulators:
//         wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
//   (c) Loop over K in slabs of 32. For each slab, all 256 threads copy A[m0:m0+128,
//       k0:k0+32] into As and B[k0:k0+32, n0:n0+128] into Bs (load_chunk_zfill below
//       does one 8-element chunk), __syncthreads(), then for kk = 0 and 16: load 4
//       A fragments and 2 B fragments from shared memory and do the 4 x 2 mma_sync.
//       __syncthreads() again before the next slab overwrites the tiles.
//   (d) Store: wmma::store_matrix_sync cannot mask the M/N edges, so store each
//       fragment into this warp's 16x16 `scratch`, then let the 32 lanes copy the
//       in-range elements to C.
// Hints, one at a time: bash scripts/course.sh hint matmul_tc/wmma
// ============================================================================
namespace wmma_cfg {
constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kThreads = 256;
constexpr int kLdsA = kBK + 8;  // padded shared row of A (bf16 elements)
constexpr int kLdsB = kBN + 8;  // padded shared row of B
}  // namespace wmma_cfg

/// Copy the 8 bf16 values base[row_offset + col .. + 7] into dst (16-byte aligned shared
/// memory), with zeros where the row is out of range or col + e >= limit. (Given.)
__device__ __forceinline__ void load_chunk_zfill(bf16* dst, const bf16* base, bool row_ok,
                                                 std::int64_t row_offset, std::int64_t col,
                                                 std::int64_t limit) {
  if (row_ok && col + 8 <= limit) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(base + row_offset + col);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      dst[e] = (row_ok && col + e < limit) ? base[row_offset + col + e] : __float2bfloat16(0.f);
  }
}

__global__ void __launch_bounds__(wmma_cfg::kThreads)
    matmul_tc_wmma_kernel(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C,
                          int M, int N, int K, std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  using namespace wmma_cfg;
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(128) bf16 As[kBM][kLdsA];
  __shared__ __align__(128) bf16 Bs[kBK][kLdsB];
  __shared__ __align__(128) float scratch[kThreads / 32][16 * 16];
  // TODO(step 1): (a) - (d) above.
}

void launch_wmma(const TcMatmulArgs& a) {
  // TODO(step 1): delete this line, then launch a 2-D grid of
  //   dim3(ceil(n / 128), ceil(m / 128)) blocks of wmma_cfg::kThreads threads on a.stream
  //   (M and N are below 2^30, see matmul_tc() below, so int arguments are safe; a 2-D
  //   grid allows up to 65535 * 128 rows), and call
  //   COURSE_CHECK_LAUNCH("matmul_tc_wmma_kernel") right after.
  throw NotImplemented("matmul_tc step wmma", __FILE__);
}

// ============================================================================
// Step 2: mma_sync -- PTX mma.sync + ldmatrix + a cp.async pipeline.
//
// The PTX wrappers listed below are given (each is one instruction; their comments in
// common/include/course/cuda/mma_ptx.cuh document it). The kernel is yours. Suggested
// configuration (what the solution does):
//   block tile 128 x 256 x 32, 256 threads = 8 warps as 2 (M) x 4 (N), warp tile 64 x 64
//   = 4 (m16) x 8 (n8) mma tiles; 4 shared-memory stages of A[128][32] + B[32][256]
//   (96 KB: dynamic shared memory, see course::cuda::opt_in_dynamic_smem).
//
// TODO(step 2), in this order (test after each, with the later items still simple):
//   (1) A single-stage version: per slab, every thread copies its 16-byte chunks with
//       cp_async_16_zfill (src_bytes < 16 at the K and N edges, 0 outside M/K), then
//       cp_async_commit(); cp_async_wait<0>(); __syncthreads(); compute; __syncthreads().
//       Use the plain row-major layout first (chunk c of row r at r * BK + c * 8).
//   (2) Compute a k16 step: per m16 tile one ldmatrix_x4 of A, per pair of n8 tiles one
//       ldmatrix_x4_trans of B, then kMTiles x kNTiles mma_m16n8k16_bf16_f32.
//   (3) Epilogue from registers: acc[mt][nt][0..1] are C(row, col), C(row, col+1) with
//       row = lane/4 and col = 2*(lane%4) inside the 16x8 tile; [2..3] are 8 rows below.
//   (4) Swizzle: store chunk c of row r at chunk swizzle_chunk<chunks_per_row>(r, c), and
//       read with the same function. Tests must still pass; ncu's shared bank-conflict
//       counter (l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld) drops to ~0.
//   (5) Pipeline: kStages stages; prologue issues slabs 0..kStages-2 (one commit each,
//       even when empty); per slab: cp_async_wait<kStages-2>(), __syncthreads(), issue
//       slab kt+kStages-1 into the stage slab kt-1 used, commit, compute on slab kt.
// Hints, one at a time: bash scripts/course.sh hint matmul_tc/mma_sync
// ============================================================================

// Given: the PTX wrappers, from common/include/course/cuda/mma_ptx.cuh. Read their
// comments there: each names its instruction and the register layout it produces.
//   smem_u32(p)                          32-bit shared-memory address of a generic pointer
//   cp_async_16_zfill(dst, src, bytes)   16-byte async copy global -> shared; only `bytes`
//                                        (0..16) are read, the rest zero-filled; both
//                                        16-byte aligned; with bytes == 0 pass a valid src
//                                        anyway (e.g. the matrix base)
//   cp_async_commit(), cp_async_wait<N>() close a group / wait until <= N groups pending
//   ldmatrix_x4(r, addr)                 four 8x8 b16 matrices; lane l supplies the address
//                                        of row (l % 8) of matrix (l / 8); register i gets
//                                        matrix i: row l/4, columns 2*(l%4), 2*(l%4)+1
//   ldmatrix_x4_trans(r, addr)           same, each matrix transposed
//   mma_m16n8k16_bf16_f32(d, a, b)       d += a * b: a 16x16 bf16 (row), b 16x8 (col), d fp32
//   swizzle_chunk<kChunks>(row, chunk)   physical 16-byte chunk of logical `chunk` in `row`
//                                        of a tile with kChunks chunks per row: the 8 rows
//                                        one ldmatrix phase reads land in 8 bank groups
using ::course::cuda::cp_async_16_zfill;
using ::course::cuda::cp_async_commit;
using ::course::cuda::cp_async_wait;
using ::course::cuda::ldmatrix_x4;
using ::course::cuda::ldmatrix_x4_trans;
using ::course::cuda::mma_m16n8k16_bf16_f32;
using ::course::cuda::smem_u32;
using ::course::cuda::swizzle_chunk;

namespace mma_cfg {
constexpr int kBM = 128, kBN = 256, kBK = 32, kStages = 4;
constexpr int kWarpsM = 2, kWarpsN = 4, kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kMTiles = (kBM / kWarpsM) / 16;  // 4 m16 tiles per warp
constexpr int kNTiles = (kBN / kWarpsN) / 8;   // 8 n8 tiles per warp
constexpr int kSmemBytes = kStages * (kBM * kBK + kBK * kBN) * 2;
}  // namespace mma_cfg

__global__ void __launch_bounds__(mma_cfg::kThreads, 1)
    matmul_tc_mma_sync_kernel(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C,
                              int M, int N, int K, std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  using namespace mma_cfg;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float acc[kMTiles][kNTiles][4] = {};
  // TODO(step 2): items (1) - (5) above.
}

// TODO(step 2b): the options of TcMatmulArgs, in this order (the tests of each are in
// module01_basics/tests/test_matmul_tc_options.cpp):
//   (1) Output and epilogue: replace the plain fp32 store with one that adds bias[col],
//       writes pre_gelu, applies course::cuda::gelu_tanh (course/cuda/gelu.cuh), adds the
//       residual, accumulates into C or stores bf16 (c_bf16), in the order of the header.
//       Pass the options to the kernel by value in one struct.
//   (2) b_transposed (B stored N x K): copy B's slab as [BN][BK] (like A's) and load its
//       fragments with plain ldmatrix_x4 instead of .trans.
//   (3) a_transposed (A stored K x M): copy A's slab as [BK][BM] and load its fragments
//       with ldmatrix_x4_trans. Make the layouts template parameters of the kernel.
//   Then set kMmaSyncOptionsWritten = true.
// Hints, one at a time: bash scripts/course.sh hint matmul_tc/mma_sync
constexpr bool kMmaSyncOptionsWritten = false;

void launch_mma_sync(const TcMatmulArgs& a) {
  // TODO(step 2): delete this line; call
  //   ::course::cuda::opt_in_dynamic_smem<matmul_tc_mma_sync_kernel>(mma_cfg::kSmemBytes),
  //   launch dim3(ceil(n / kBN), ceil(m / kBM)) blocks of mma_cfg::kThreads threads with
  //   kSmemBytes of dynamic shared memory on a.stream, then
  //   COURSE_CHECK_LAUNCH("matmul_tc_mma_sync_kernel").
  throw NotImplemented("matmul_tc step mma_sync", __FILE__);
}

}  // namespace

void matmul_tc(TcMatmulStep step, const TcMatmulArgs& args) {
  m01::validate_tc_matmul_args(args, "matmul_tc");
  constexpr std::int64_t kLimit = std::int64_t{1} << 30;  // the kernels index with int
  require_arg(args.m < kLimit, "matmul_tc", "m", args.m, "must be < 2^30");
  require_arg(args.n < kLimit, "matmul_tc", "n", args.n, "must be < 2^30");
  require_arg(args.k < kLimit, "matmul_tc", "k", args.k, "must be < 2^30");
  // Step 2b (after step 2 passes): TcMatmulArgs' options -- operand layouts, bf16 output
  // and the epilogue (module01/matmul_tc.hpp, "Options for a linear layer"). Until you set
  // kMmaSyncOptionsWritten, calls that use them report SKIPPED.
  if (step != TcMatmulStep::mma_sync)
    m01::require_no_options(args, std::string("matmul_tc step ") + step_name_in(m01::kTcMatmulSteps, step));
  else if (m01::uses_options(args) && !kMmaSyncOptionsWritten)
    throw NotImplemented(std::string("matmul_tc step mma_sync with TcMatmulArgs::") + m01::first_option(args) +
                             " (step 2b)",
                         __FILE__);
  switch (step) {
    case TcMatmulStep::wmma: launch_wmma(args); return;
    case TcMatmulStep::mma_sync: launch_mma_sync(args); return;
    case TcMatmulStep::wgmma: tc_parts::launch_wgmma(args); return;  // matmul_tc_hopper.cu
    case TcMatmulStep::tma_warp_specialized: tc_parts::launch_tma_warp_specialized(args); return;
    case TcMatmulStep::persistent: tc_parts::launch_persistent(args); return;
    case TcMatmulStep::cluster_multicast: tc_parts::launch_cluster_multicast(args); return;
  }
  require_arg(false, "matmul_tc", "step", static_cast<int>(step), "is not a TcMatmulStep");
}

}  // namespace course::exercise
