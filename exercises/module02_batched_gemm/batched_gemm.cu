/// @file batched_gemm.cu
/// @brief YOUR batched GEMM (module 2): C[b,h] = alpha * op(A[b,h]) * op(B[b,h]) for every
/// batch index b and head h.
///
/// Read module02_batched_gemm/README.md first. Three exercises, in order:
///   1. the grid mapping          batched_gemm_grid()                 (no GPU needed to test)
///   2. the strided kernel        StridedOperand::matrix (batched_gemm_device.cuh), the
///                                smem_tiled kernel, its launch
///   3. the pointer-array kernel  PointerArrayOperand::matrix (batched_gemm_device.cuh), then
///                                flip one flag
/// Then the upper steps, with their scaffolding given (they reuse module 1's tiling ideas):
///   register_blocked, warp_tiled   batched_gemm_fp32.cu
///   tensor_core, wgmma             batched_gemm_tensor_core.cu
/// Run the tests with:   ctest --preset default -L exercise -R Bgemm
/// and the benchmark:    ./build/module02_batched_gemm/m02_bench --benchmark_filter='smem_tiled'
/// Hints, one at a time: `bash scripts/course.sh hint batched_gemm/<step>`
/// (all of them: exercises/module02_batched_gemm/hints/batched_gemm.md).

#include "batched_gemm_device.cuh"

#include "module02/batched_gemm.hpp"

#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::exercise {

// ----------------------------------------------------------------------------
// The grid mapping: for an M x N output cut into tile_m x tile_n tiles, for
// batch x num_heads independent matrices:
//     x = tiles_m * tiles_n,  y = num_heads,  z = batch
// and tiles_m, tiles_n filled in. course::InvalidArgument (require_arg names the
// argument and its value) when something does not fit the hardware:
//   tile_m, tile_n, M, N < 1; num_heads or batch outside [1, 65535];
//   tiles_m * tiles_n > 2^31 - 1 (m02::kMaxGridX).
// ----------------------------------------------------------------------------
m02::BgemmGrid batched_gemm_grid(std::int64_t M, std::int64_t N, std::int64_t batch, std::int64_t num_heads,
                                 int tile_m, int tile_n) {
  // @step grid
  // TODO(exercise 1): delete the throw and compute the grid.
  // Hints, one at a time: bash scripts/course.sh hint batched_gemm/grid
  (void)M, (void)N, (void)batch, (void)num_heads, (void)tile_m, (void)tile_n;
  throw NotImplemented("batched_gemm_grid (exercise 1)", __FILE__);
  // @end
}

namespace {

using namespace bgemm;

// ============================================================================
// @step smem_tiled
// Exercise 2: step smem_tiled (fp32), the kernel both APIs run.
// A block of 32 x 32 threads computes one 32 x 32 tile of C[b, h], one output per
// thread: for each 32-wide slab of K, copy a 32 x 32 tile of A and of op(B) into
// shared memory (one element per thread), wait, accumulate 32 products, wait.
//
// TODO(exercise 2b): which tile, head and batch does this block own? Mirror the grid
//                    of exercise 1: blockIdx.x counts tiles (row-major over
//                    tiles_m x tiles_n), blockIdx.y is the head, blockIdx.z the batch.
// TODO(exercise 2c): the block's three matrices: A.matrix(b, h), B.matrix(b, h),
//                    C.matrix(b, h), with row strides A.ld, B.ld, C.ld.
// TODO(exercise 2d): the tiled loop, then store alpha * acc if the output is inside C.
//   op(B)(k, n) is B[k * ldb + n] when B is stored K x N (kTransB == false), and
//   B[n * ldb + k] when it is stored N x K (kTransB == true, the K of Q*K^T).
//   op(A)(m, k) is A[m * lda + k] when A is stored M x K (kTransA == false), and
//   A[k * lda + m] when it is stored K x M (kTransA == true: the X of dW = X^T dY in
//   module 4's backward pass). Handle both in the LOADS only: the tiles in shared
//   memory, and so the inner loop, are the same whatever the flags.
// Hints, one at a time: bash scripts/course.sh hint batched_gemm/smem_tiled
// @end
// ============================================================================
constexpr int kSmemTile = 32;

template <bool kTransA, bool kTransB, class OpA, class OpB, class OpC>
__global__ void __launch_bounds__(kSmemTile * kSmemTile)
    bgemm_smem_tiled_kernel(OpA A, OpB B, OpC C, int M, int N, int K, float alpha, int tiles_n) {
  constexpr int T = kSmemTile;
  __shared__ float As[T][kTransA ? T + 1 : T];  // As[row][k]; +1 with A^T: conflict-free transposed store
  __shared__ float Bs[T][T + 1];                // Bs[k][col]; +1: conflict-free transposed store
  // @step smem_tiled
  // TODO(exercise 2b, 2c, 2d)
  // @end
}

template <class OpA, class OpB, class OpC>
void launch_smem_tiled(const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  // @step smem_tiled
  // TODO(exercise 2e): delete the throw. Get the grid from YOUR batched_gemm_grid(p.M,
  //   p.N, p.batch, p.heads, kSmemTile, kSmemTile), launch
  //   bgemm_smem_tiled_kernel<kTransA, kTransB> (from p.trans_a, p.trans_b) with
  //   dim3(g.x, g.y, g.z) blocks of dim3(32, 32) threads on p.stream, passing
  //   static_cast<int>(g.tiles_n); then COURSE_CHECK_LAUNCH("bgemm_smem_tiled_kernel").
  (void)A, (void)B, (void)C, (void)p;
  throw NotImplemented("batched_gemm step smem_tiled (exercise 2)", __FILE__);
  // @end
}

// ============================================================================
// Dispatch: one switch for both APIs.
// ============================================================================
template <class T, class OpA, class OpB, class OpC>
void run_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  if constexpr (std::is_same_v<T, float>) {
    if (step == BgemmStep::smem_tiled)
      launch_smem_tiled(A, B, C, p);
    else
      run_fp32_step(step, A, B, C, p);  // batched_gemm_fp32.cu
  } else {
    run_bf16_step(step, A, B, C, p);  // batched_gemm_tensor_core.cu
  }
}

template <class Args>
Problem problem_of(const Args& s) {
  return Problem{static_cast<int>(s.M), static_cast<int>(s.N), static_cast<int>(s.K), static_cast<int>(s.batch),
                 static_cast<int>(s.num_heads), s.alpha, s.b_transposed, s.a_transposed, s.stream};
}

template <class T>
void strided(BgemmStep step, const m02::StridedBatchedGemmArgs<T>& s) {
  m02::validate_strided_args(s, step, "batched_gemm_strided");
  run_step<T>(step, StridedOperand<const T>{s.a, s.stride_a_batch, s.stride_a_head, s.stride_a_row},
              StridedOperand<const T>{s.b, s.stride_b_batch, s.stride_b_head, s.stride_b_row},
              StridedOperand<float>{s.c, s.stride_c_batch, s.stride_c_head, s.stride_c_row}, problem_of(s));
}

template <class T>
void ptr_array(BgemmStep step, const m02::PtrArrayBatchedGemmArgs<T>& p) {
  m02::validate_ptr_array_args(p, step, "batched_gemm_ptr_array");
  // @step smem_tiled
  // TODO(exercise 3b): once PointerArrayOperand::matrix is written, set this to true.
  //   Nothing else changes: the same kernel, the same launch. That is the point.
  constexpr bool kExercise3Done = false;
  if (!kExercise3Done) throw NotImplemented("batched_gemm_ptr_array (exercise 3)", __FILE__);
  // @end
  const int heads = static_cast<int>(p.num_heads);
  run_step<T>(step, PointerArrayOperand<const T>{p.a_ptrs, p.lda, heads},
              PointerArrayOperand<const T>{p.b_ptrs, p.ldb, heads}, PointerArrayOperand<float>{p.c_ptrs, p.ldc, heads},
              problem_of(p));
}

}  // namespace

void batched_gemm_strided(m02::BgemmStep step, const m02::StridedBatchedGemmArgs<float>& args) {
  strided(step, args);
}
void batched_gemm_strided(m02::BgemmStep step, const m02::StridedBatchedGemmArgs<__nv_bfloat16>& args) {
  strided(step, args);
}
void batched_gemm_ptr_array(m02::BgemmStep step, const m02::PtrArrayBatchedGemmArgs<float>& args) {
  ptr_array(step, args);
}
void batched_gemm_ptr_array(m02::BgemmStep step, const m02::PtrArrayBatchedGemmArgs<__nv_bfloat16>& args) {
  ptr_array(step, args);
}

}  // namespace course::exercise
