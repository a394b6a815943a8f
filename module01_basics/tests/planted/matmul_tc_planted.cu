/// @file matmul_tc_planted.cu
/// @brief The planted tensor-core matmul bugs (see matmul_tc_planted.hpp).

#include "matmul_tc_planted.hpp"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/mma_ptx.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace course::planted {
namespace {

using m01::TcMatmulArgs;
using bf16 = __nv_bfloat16;

enum class Bug { dropped_k_tail, b_not_transposed, dropped_m_edge };

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 128;  // 4 warps as 2 x 2, warp tile 32 x 32
constexpr int kLdsA = kBK + 8, kLdsB = kBN + 8;                // padded shared rows (16-byte aligned)

// The PTX wrappers of the solution (common/include/course/cuda/mma_ptx.cuh): the bugs
// are in how they are used, not in the instructions.
using ::course::cuda::ldmatrix_x4;
using ::course::cuda::ldmatrix_x4_trans;
using ::course::cuda::mma_m16n8k16_bf16_f32;
using ::course::cuda::smem_u32;

/// 8 bf16 of one row into shared memory, zeros outside the matrix.
__device__ __forceinline__ void load_chunk(bf16* dst, const bf16* base, bool row_ok, std::int64_t row_offset,
                                           int col, int limit) {
#pragma unroll
  for (int e = 0; e < 8; ++e)
    dst[e] = (row_ok && col + e < limit) ? base[row_offset + col + e] : __float2bfloat16(0.f);
}

template <Bug kBug>
__global__ void __launch_bounds__(kThreads)
    planted_tc_kernel(const bf16* A, const bf16* B, float* C, int M, int N, int K, std::int64_t lda,
                      std::int64_t ldb, std::int64_t ldc) {
  __shared__ __align__(16) bf16 As[kBM][kLdsA];
  __shared__ __align__(16) bf16 Bs[kBK][kLdsB];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / 2, warp_n = warp % 2;
  float acc[2][4][4] = {};

  // BUG (dropped_k_tail): rounds the slab count down.
  const int k_tiles = kBug == Bug::dropped_k_tail ? K / kBK : (K + kBK - 1) / kBK;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int k0 = kt * kBK;
    for (int id = threadIdx.x; id < kBM * kBK / 8; id += kThreads) {
      const int r = id / (kBK / 8), c = (id % (kBK / 8)) * 8;
      load_chunk(&As[r][c], A, m0 + r < M, static_cast<std::int64_t>(m0 + r) * lda, k0 + c, K);
    }
    for (int id = threadIdx.x; id < kBK * kBN / 8; id += kThreads) {
      const int r = id / (kBN / 8), c = (id % (kBN / 8)) * 8;
      load_chunk(&Bs[r][c], B, k0 + r < K, static_cast<std::int64_t>(k0 + r) * ldb, n0 + c, N);
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      unsigned a[2][4], b[4][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldmatrix_x4(a[mt], smem_u32(&As[warp_m * 32 + mt * 16 + lane % 16][ks * 16 + (lane / 16) * 8]));
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        unsigned r[4];
        const unsigned addr = smem_u32(&Bs[ks * 16 + lane % 16][warp_n * 32 + p * 16 + (lane / 16) * 8]);
        // BUG (b_not_transposed): row-major B needs .trans to become the "col" operand.
        if (kBug == Bug::b_not_transposed) {
          ldmatrix_x4(r, addr);
        } else {
          ldmatrix_x4_trans(r, addr);
        }
        b[2 * p][0] = r[0];
        b[2 * p][1] = r[1];
        b[2 * p + 1][0] = r[2];
        b[2 * p + 1][1] = r[3];
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma_m16n8k16_bf16_f32(acc[mt][nt], a[mt], b[nt]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int row = m0 + warp_m * 32 + mt * 16 + lane / 4;
      const int col = n0 + warp_n * 32 + nt * 8 + (lane % 4) * 2;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row + (e / 2) * 8, c = col + e % 2;
        if (r < M && c < N) C[static_cast<std::int64_t>(r) * ldc + c] = acc[mt][nt][e];
      }
    }
  }
}

template <Bug kBug>
void run(const TcMatmulArgs& a) {
  m01::validate_tc_matmul_args(a, "planted matmul_tc");
  require_arg(a.m < INT_MAX && a.n < INT_MAX && a.k < INT_MAX, "planted matmul_tc", "m/n/k", a.m,
              "must fit in int");
  // BUG (dropped_m_edge): rounds the number of tile-rows down.
  const std::int64_t tiles_m = kBug == Bug::dropped_m_edge ? a.m / kBM : (a.m + kBM - 1) / kBM;
  const std::int64_t tiles_n = (a.n + kBN - 1) / kBN;
  if (tiles_m == 0) return;
  require_arg(tiles_m <= 65535, "planted matmul_tc", "m", a.m, "too many tile-rows for this kernel");
  const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m));
  planted_tc_kernel<kBug><<<grid, kThreads, 0, a.stream>>>(a.a, a.b, a.c, static_cast<int>(a.m),
                                                           static_cast<int>(a.n), static_cast<int>(a.k), a.lda,
                                                           a.ldb, a.ldc);
  COURSE_CHECK_LAUNCH("planted_tc_kernel");
}

// ---------------------------------------------------------------- wgmma descriptor bugs ---
// A cut-down copy of the `wgmma` step's kernel (solutions/module01_basics/matmul_tc_hopper.cu):
// the same copies into the same 128-byte-swizzle layouts and the same descriptors, but
// 128 x 128 tiles (wgmma m64n128k16, two blocks of 64 columns of B) and one stage, so that
// 33 KB of shared memory fit under the default limit. Only the descriptors are bugged.
namespace wg {

enum class Bug { none, b_lbo_sbo_swapped, a_k_step_16_bytes };

constexpr int kBM = 128, kBN = 128, kBK = 64, kThreads = 256;  // two warpgroups of 64 x 128
constexpr std::uint32_t kABytes = kBM * kBK * 2;               // 16 KB: [128 m][64 k], 128-byte rows
constexpr std::uint32_t kBBlockBytes = kBK * 64 * 2;           //  8 KB: one [64 k][64 n] block of B
constexpr int kSmemBytes = kABytes + 2 * kBBlockBytes + 1024;  // + room to align to 1024

template <Bug kBug>
__global__ void __launch_bounds__(kThreads)
    planted_wgmma_kernel(const bf16* A, const bf16* B, float* C, int M, int N, int K, std::int64_t lda,
                         std::int64_t ldb, std::int64_t ldc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace cc = ::course::cuda;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t smem = (smem_u32(smem_raw) + 1023u) & ~1023u;  // swizzle atoms: 1024-aligned
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int t = threadIdx.x, wg = t / 128;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;

  for (int k0 = 0; k0 < K; k0 += kBK) {
    // A: chunk c (8 k) of row r at r * 128 + (c ^ r % 8) * 16. B: chunk c (8 n) of k-row r in
    // 64-column block c / 8, at r * 128 + (c % 8 ^ r % 8) * 16. Zeros outside the matrices.
    for (int id = t; id < kBM * 8; id += kThreads) {
      const int r = id / 8, c = id % 8, k = k0 + 8 * c;
      const int bytes = m0 + r < M ? 2 * max(0, min(K - k, 8)) : 0;
      const bf16* src = bytes > 0 ? A + static_cast<std::int64_t>(m0 + r) * lda + k : A;
      cc::cp_async_16_zfill(smem + r * 128 + ((c ^ (r % 8)) * 16), src, bytes);
    }
    for (int id = t; id < kBK * (kBN / 8); id += kThreads) {
      const int r = id / (kBN / 8), c = id % (kBN / 8), n = n0 + 8 * c;
      const int bytes = k0 + r < K ? 2 * max(0, min(N - n, 8)) : 0;
      const bf16* src = bytes > 0 ? B + static_cast<std::int64_t>(k0 + r) * ldb + n : B;
      cc::cp_async_16_zfill(smem + kABytes + (c / 8) * kBBlockBytes + r * 128 + (((c % 8) ^ (r % 8)) * 16), src,
                            bytes);
    }
    cc::cp_async_commit();
    cc::cp_async_wait<0>();
    cc::fence_proxy_async_smem();
    __syncthreads();
    cc::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      // BUG (a_k_step_16_bytes): a k16 step is 16 bf16 = 32 bytes along A's rows, not 16.
      const std::uint32_t a_step = kBug == Bug::a_k_step_16_bytes ? 16 : 32;
      const std::uint64_t da = cc::wgmma_desc_sw128(smem + wg * 64 * 128 + ks * a_step, 16, 1024);
      // BUG (b_lbo_sbo_swapped): MN-major B wants lbo = 8 KB (next 64 columns), sbo = 1024 (next 8 k).
      const bool swapped = kBug == Bug::b_lbo_sbo_swapped;
      const std::uint64_t db = cc::wgmma_desc_sw128(smem + kABytes + ks * 16 * 128, swapped ? 1024 : kBBlockBytes,
                                                    swapped ? kBBlockBytes : 1024);
      cc::wgmma_m64n128k16_bf16_f32</*kBMnMajor=*/true>(acc, da, db);
    }
    cc::wgmma_commit();
    cc::wgmma_wait<0>();
    __syncthreads();  // every warpgroup's wgmmas are done before the next slab is copied in
  }
  // acc[4 j + 2 h + e] is C(row g + 8 h, column 8 j + 2 t + e) of this warp's 16 rows.
  const int warp = (t / 32) % 4, lane = t % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = m0 + wg * 64 + warp * 16 + lane / 4 + 8 * h;
    if (row >= M) continue;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n0 + 8 * j + 2 * (lane % 4) + e;
        if (col < N) C[static_cast<std::int64_t>(row) * ldc + col] = acc[4 * j + 2 * h + e];
      }
  }
#else
  (void)A, (void)B, (void)C, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)ldc;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

template <Bug kBug>
void run(const TcMatmulArgs& a) {
  m01::validate_tc_matmul_args(a, "planted matmul_tc");
  require_arg(a.m < INT_MAX && a.n < INT_MAX && a.k < INT_MAX, "planted matmul_tc", "m/n/k", a.m,
              "must fit in int");
  if (!::course::cuda::sm90a_code_available())
    throw Unsupported("planted matmul_tc (wgmma)", "a Hopper GPU (compute capability 9.0) and a build for sm_90a");
  const std::int64_t tiles_m = (a.m + kBM - 1) / kBM, tiles_n = (a.n + kBN - 1) / kBN;
  require_arg(tiles_m <= 65535, "planted matmul_tc", "m", a.m, "too many tile-rows for this kernel");
  const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m));
  planted_wgmma_kernel<kBug><<<grid, kThreads, kSmemBytes, a.stream>>>(
      a.a, a.b, a.c, static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.lda, a.ldb, a.ldc);
  COURSE_CHECK_LAUNCH("planted_wgmma_kernel");
}

}  // namespace wg
}  // namespace

void dropped_k_tail_matmul_tc(m01::TcMatmulStep, const TcMatmulArgs& a) { run<Bug::dropped_k_tail>(a); }
void b_not_transposed_matmul_tc(m01::TcMatmulStep, const TcMatmulArgs& a) { run<Bug::b_not_transposed>(a); }
void dropped_m_edge_matmul_tc(m01::TcMatmulStep, const TcMatmulArgs& a) { run<Bug::dropped_m_edge>(a); }
void wgmma_copy_matmul_tc(m01::TcMatmulStep, const TcMatmulArgs& a) { wg::run<wg::Bug::none>(a); }
void wgmma_b_lbo_sbo_swapped_matmul_tc(m01::TcMatmulStep, const TcMatmulArgs& a) {
  wg::run<wg::Bug::b_lbo_sbo_swapped>(a);
}
void wgmma_a_k_step_16_bytes_matmul_tc(m01::TcMatmulStep, const TcMatmulArgs& a) {
  wg::run<wg::Bug::a_k_step_16_bytes>(a);
}

}  // namespace course::planted
