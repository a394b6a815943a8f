/// @file matmul.cu
/// @brief YOUR ladder for fp32 SGEMM, C = alpha * A * B + beta * C (module 1).
///
/// Read module01_basics/README.md, "Matrix multiply", then fill in one step at a time.
/// Run its tests with:   ctest --preset default -L exercise -R MatmulTest
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Compare with the solution and cuBLAS:  ./build/module01_basics/m01_bench --benchmark_filter=sgemm
///
/// Conventions for every step (the tests check all of them):
///  * A is M x K, B is K x N, C is M x N, all row-major: element (r, c) of A is
///    A[r * lda + c]. lda, ldb, ldc may be larger than the row length (padding).
///  * Any M, N, K >= 1: guard every global load and store; never assume a multiple
///    of the tile size. Tiles that stick out of a matrix are filled with zeros.
///  * BLAS semantics: when beta == 0, C is NOT read (it may hold NaN). Use blend().
///  * Accumulate in float; the tests allow for rounding that grows like sqrt(K).

#include "module01/matmul.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace course::exercise {
namespace {

using m01::MatmulArgs;
using m01::MatmulStep;

/// alpha*acc + beta*(*c), reading *c only when beta != 0. (Given.)
__device__ __forceinline__ float blend(float acc, float alpha, float beta, const float* c) {
  return beta == 0.0f ? alpha * acc : fmaf(beta, *c, alpha * acc);
}

/// ceil(a / b) for positive sizes. (Given.)
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// A grid of tiles_x * tiles_y blocks; throws if gridDim.y would exceed 65535. (Given.)
dim3 tile_grid(std::int64_t tiles_x, std::int64_t tiles_y, const char* step, const char* dim_y,
               std::int64_t extent_y) {
  require_arg(tiles_y <= 65535, step, dim_y, extent_y, "needs more than 65535 blocks along gridDim.y");
  return dim3(static_cast<unsigned>(tiles_x), static_cast<unsigned>(tiles_y));
}

// ----------------------------------------------------------------------------
// Step 1: naive -- one thread per element of C, threadIdx.x along M.
//
// TODO(step 1): thread (threadIdx.x, threadIdx.y) of block (blockIdx.x, blockIdx.y)
//               computes C[row][col] with row along x (M) and col along y (N):
//               acc = sum over p of A[row][p] * B[p][col]; then C[row][col] = blend(...).
// Hint 1: do the bounds check (row < M, col < N) before the loop; return early.
// Hint 2: use std::int64_t for row and col: row * lda can exceed 2^31 on big matrices.
// Hint 3: row = blockIdx.x * blockDim.x + threadIdx.x; A[row * lda + p], B[p * ldb + col];
//         float* c = C + row * ldc + col; *c = blend(acc, alpha, beta, c);
// (Yes, x along M is the "wrong" choice: step 2 is about why. Write it this way first
//  and measure it.)
// ----------------------------------------------------------------------------
__global__ void sgemm_naive_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                   std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                   float beta, float* __restrict__ C, std::int64_t ldc) {
  // TODO(step 1)
}

void launch_naive(const MatmulArgs& a) {
  // TODO(step 1): delete the throw; launch 32 x 32 threads per block and enough blocks to
  //               cover M along x and N along y (tile_grid(ceil_div(a.m, 32), ceil_div(a.n, 32),
  //               "matmul naive", "n", a.n)), on a.stream; then COURSE_CHECK_LAUNCH.
  throw NotImplemented("matmul step naive", __FILE__);
}

// ----------------------------------------------------------------------------
// Step 2: coalesced -- same work per thread, threadIdx.x along N.
//
// TODO(step 2): the same kernel with the roles of x and y swapped, so the 32 lanes of
//               a warp compute 32 consecutive columns of one row.
// Hint 1: which accesses does a warp then share (one address) and which are contiguous?
//         Write down, for one load instruction, the 32 addresses of A, B and C.
// Hint 2: col comes from the x indices, row from the y indices; the grid's x now covers N.
// Hint 3: col = blockIdx.x * blockDim.x + threadIdx.x; row = blockIdx.y * blockDim.y + threadIdx.y;
//         grid = tile_grid(ceil_div(a.n, 32), ceil_div(a.m, 32), "matmul coalesced", "m", a.m).
// ----------------------------------------------------------------------------
__global__ void sgemm_coalesced_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                       std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                       float beta, float* __restrict__ C, std::int64_t ldc) {
  // TODO(step 2)
}

void launch_coalesced(const MatmulArgs& a) {
  // TODO(step 2): delete the throw and launch (32 x 32 threads per block).
  throw NotImplemented("matmul step coalesced", __FILE__);
}

// ----------------------------------------------------------------------------
// Step 3: smem_tiled -- 32x32 tiles of A and B in shared memory.
//
// TODO(step 3): walk K in steps of 32. In each step every thread (ty, tx) loads ONE
//               element of the A tile (row, k0 + tx) and ONE of the B tile (k0 + ty, col)
//               into shared memory, the block waits, then each thread accumulates 32
//               products from shared memory, and the block waits again.
// Hint 1: two barriers per step. Which race does each one prevent? (Remove one and
//         run the tests a few times: the planted-bug test in test_matmul.cpp shows
//         what that looks like.)
// Hint 2: out-of-range elements (row >= M, col >= N, k >= K) must be stored as 0.0f,
//         so the inner loop can always run all 32 terms without bounds checks.
// Hint 3: As[ty][tx] = (row < M && k0 + tx < K) ? A[row * lda + k0 + tx] : 0.0f;
//         Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * ldb + col] : 0.0f;
//         __syncthreads(); for p: acc += As[ty][p] * Bs[p][tx]; __syncthreads();
// ----------------------------------------------------------------------------
constexpr int kSmemTile = 32;

__global__ void sgemm_smem_tiled_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                        std::int64_t lda, const float* __restrict__ B, std::int64_t ldb,
                                        float beta, float* __restrict__ C, std::int64_t ldc) {
  __shared__ float As[kSmemTile][kSmemTile];
  __shared__ float Bs[kSmemTile][kSmemTile];
  // TODO(step 3)
}

void launch_smem_tiled(const MatmulArgs& a) {
  // TODO(step 3): delete the throw and launch: kSmemTile x kSmemTile threads, x along N.
  throw NotImplemented("matmul step smem_tiled", __FILE__);
}

// ----------------------------------------------------------------------------
// Step 4: register_1d -- each thread computes TM = 8 outputs of one column.
//
// Block tile BM x BN = 64 x 64, BK = 8, so BM * BN / TM = 512 threads, and each
// thread loads exactly one element of the 64x8 A tile and one of the 8x64 B tile.
// TODO(step 4): thread_col = tid % BN, thread_row = tid / BN. For every k-tile: load
//               the tiles (zeros outside), barrier, then for p in 0..BK-1 read
//               b = Bs[p][thread_col] ONCE and do acc[i] += As[thread_row * TM + i][p] * b
//               for i in 0..TM-1; barrier. Finally store the TM outputs that are in range.
// Hint 1: the A element a thread loads is (tid / BK, tid % BK) of the tile, the B
//         element (tid / BN, tid % BN); both are coalesced.
// Hint 2: keep acc[TM] in registers: index it only with the (unrolled) loop counter.
//         `#pragma unroll` on the p and i loops.
// Hint 3: As is [BM][BK] stored flat: As[(thread_row * TM + i) * BK + p]; the store loop
//         checks row < M for each i and col < N once.
// ----------------------------------------------------------------------------
template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__(BM * BN / TM)
    sgemm_register_1d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                             std::int64_t lda, const float* __restrict__ B, std::int64_t ldb, float beta,
                             float* __restrict__ C, std::int64_t ldc) {
  __shared__ float As[BM * BK];  // [BM][BK]
  __shared__ float Bs[BK * BN];  // [BK][BN]
  // TODO(step 4)
}

void launch_register_1d(const MatmulArgs& a) {
  constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
  // TODO(step 4): delete the throw and launch BM * BN / TM threads per block, one block
  //               per 64x64 tile of C (x along N, y along M).
  throw NotImplemented("matmul step register_1d", __FILE__);
}

// ----------------------------------------------------------------------------
// Step 5: register_2d -- each thread computes a TM x TN = 8x8 block of outputs.
//
// Block tile 128 x 128, BK = 8, 256 threads; each thread loads 4 elements of each tile.
// TODO(step 5): per k-tile: load the tiles (4 elements each per thread), barrier; for
//               p in 0..BK-1 copy the thread's 8 values of column p of As into reg_m[8]
//               and its 8 values of row p of Bs into reg_n[8], then do the 8x8 outer
//               product acc[i][j] += reg_m[i] * reg_n[j]; barrier. Store 64 outputs.
// Hint 1: thread_col = tid % (BN / TN), thread_row = tid / (BN / TN). The thread's
//         outputs are rows thread_row * TM + i, columns thread_col * TN + j of the tile.
// Hint 2: A tile loads: rows (tid / BK) + r for r = 0, 32, 64, 96 (256 threads / BK = 32
//         rows per pass), column tid % BK. B tile: rows (tid / BN) + r for r = 0, 2, 4, 6.
// Hint 3: 16 shared loads now feed 64 FMAs. Count the registers: 64 + 16 + addresses;
//         build with -DCOURSE_PTXAS_VERBOSE=ON and check there are no spills.
// ----------------------------------------------------------------------------
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(BM * BN / (TM * TN))
    sgemm_register_2d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                             std::int64_t lda, const float* __restrict__ B, std::int64_t ldb, float beta,
                             float* __restrict__ C, std::int64_t ldc) {
  __shared__ float As[BM * BK];  // [BM][BK]
  __shared__ float Bs[BK * BN];  // [BK][BN]
  // TODO(step 5)
}

void launch_register_2d(const MatmulArgs& a) {
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  // TODO(step 5): delete the throw and launch BM * BN / (TM * TN) threads per block.
  throw NotImplemented("matmul step register_2d", __FILE__);
}

// ----------------------------------------------------------------------------
// Step 6: vectorized -- float4 loads, A transposed in shared memory.
//
// Same tiles as step 5. Three changes:
//  (a) each thread loads its share of the A tile and of the B tile as ONE float4 each;
//  (b) A is stored transposed, As[k][m] with a padded row of BM + 4 floats, so the 8
//      A values a thread needs for one k are contiguous;
//  (c) fragments are read from shared memory as float4, and C is written as float4.
// float4 accesses must be 16-byte aligned: the launch picks kVec = true only when
// m01::matmul_float4_ok(args); kVec = false must still work (scalar loads).
// TODO(step 6): write load4<kVec> (4 elements of a row, zeros out of range), then the
//               kernel, then the launch that picks the instantiation.
// Hint 1: A tile 128x8 = 256 float4 = one per thread: row tid / 2, k (tid % 2) * 4.
//         B tile 8x128 = 256 float4: row tid / 32, column (tid % 32) * 4.
// Hint 2: near the right edge of a matrix a float4 may be partly outside: load the
//         valid elements one by one and zero the rest. The same in the store.
// Hint 3: *reinterpret_cast<const float4*>(&As[p * (BM + 4) + thread_row * TM]) reads
//         four fragments at once; declare the shared arrays __align__(16).
// ----------------------------------------------------------------------------
void launch_vectorized(const MatmulArgs& a) {
  // TODO(step 6): write sgemm_vectorized_kernel<..., bool kVec> above, then launch it.
  throw NotImplemented("matmul step vectorized", __FILE__);
}

// ----------------------------------------------------------------------------
// Step 7: warp_tiled -- not an exercise. Read the solution
// (solutions/module01_basics/matmul.cu): warp tiles, conflict-free fragments and a
// multistage cp.async pipeline. Try it once your vectorized step passes: copy it
// here and change one thing at a time (BK, STAGES, the warp tile) while watching
// the benchmark.
// ----------------------------------------------------------------------------
void launch_warp_tiled(const MatmulArgs& /*a*/) {
  throw NotImplemented("matmul step warp_tiled (optional: see the solution)", __FILE__);
}

}  // namespace

void matmul(MatmulStep step, const MatmulArgs& args) {
  m01::validate_matmul_args(args, "matmul");
  switch (step) {
    case MatmulStep::naive: launch_naive(args); return;
    case MatmulStep::coalesced: launch_coalesced(args); return;
    case MatmulStep::smem_tiled: launch_smem_tiled(args); return;
    case MatmulStep::register_1d: launch_register_1d(args); return;
    case MatmulStep::register_2d: launch_register_2d(args); return;
    case MatmulStep::vectorized: launch_vectorized(args); return;
    case MatmulStep::warp_tiled: launch_warp_tiled(args); return;
  }
  require_arg(false, "matmul", "step", static_cast<int>(step), "is not a MatmulStep");
}

}  // namespace course::exercise
