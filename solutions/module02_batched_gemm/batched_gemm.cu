/// @file batched_gemm.cu
/// @brief Solution ladder for the batched GEMM of module 2: C[b,h] = alpha * A[b,h] * op(B[b,h]).
///   1. smem_tiled        fp32  shared-memory tiles, one output per thread          batched_gemm_fp32.cu
///   2. register_blocked  fp32  8x8 outputs per thread in registers, float4 loads   batched_gemm_fp32.cu
///   3. warp_tiled        fp32  warp tiles, 4-stage cp.async pipeline               batched_gemm_fp32.cu
///   4. tensor_core       bf16  mma.sync + ldmatrix, swizzled smem                  batched_gemm_tensor_core.cu
///   5. wgmma             bf16  Hopper warpgroup MMA from shared memory (sm_90a)     batched_gemm_tensor_core.cu
/// This file holds the launch grid and the dispatcher; batched_gemm_device.cuh the
/// operand addressing policies that let both APIs run the same kernel bodies.
///
/// Grid (every step, see batched_gemm_grid): x = tile of C (tiles_m * tiles_n, up to
/// 2^31 - 1), y = head, z = batch (each <= 65535).

#include "batched_gemm_device.cuh"

#include "module02/batched_gemm.hpp"

#include "course/error.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace course::solution {

m02::BgemmGrid batched_gemm_grid(std::int64_t M, std::int64_t N, std::int64_t batch, std::int64_t num_heads,
                                 int tile_m, int tile_n) {
  const char* fn = "batched_gemm_grid";
  require_arg(tile_m >= 1, fn, "tile_m", tile_m, "must be >= 1");
  require_arg(tile_n >= 1, fn, "tile_n", tile_n, "must be >= 1");
  require_arg(M >= 1, fn, "M", M, "must be >= 1");
  require_arg(N >= 1, fn, "N", N, "must be >= 1");
  require_arg(num_heads >= 1 && num_heads <= m02::kMaxGridYZ, fn, "num_heads", num_heads,
              "must be in [1, 65535]: heads go on gridDim.y, which the hardware limits to 65535");
  require_arg(batch >= 1 && batch <= m02::kMaxGridYZ, fn, "batch", batch,
              "must be in [1, 65535]: the batch goes on gridDim.z, which the hardware limits to 65535");
  m02::BgemmGrid g;
  g.tiles_m = (M + tile_m - 1) / tile_m;
  g.tiles_n = (N + tile_n - 1) / tile_n;
  // tiles_m * tiles_n <= 2^31 - 1, written without overflowing int64 on the way.
  require_arg(g.tiles_m <= m02::kMaxGridX / g.tiles_n, fn, "M", M,
              m02::detail::msg("with N = ", N, " and ", tile_m, " x ", tile_n, " tiles needs ", g.tiles_m, " x ",
                               g.tiles_n, " blocks on gridDim.x, more than its limit 2^31 - 1")
                  .c_str());
  g.x = static_cast<unsigned>(g.tiles_m * g.tiles_n);
  g.y = static_cast<unsigned>(num_heads);
  g.z = static_cast<unsigned>(batch);
  return g;
}

namespace {

using namespace bgemm;

// ============================================================================
// Dispatch: one switch for both APIs.
// ============================================================================
template <class T, class OpA, class OpB, class OpC>
void run_step(BgemmStep step, const OpA& A, const OpB& B, const OpC& C, const Problem& p) {
  if constexpr (std::is_same_v<T, float>)
    run_fp32_step(step, A, B, C, p);
  else
    run_bf16_step(step, A, B, C, p);
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

}  // namespace course::solution
