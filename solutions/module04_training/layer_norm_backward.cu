/// @file layer_norm_backward.cu
/// @brief Solution ladder for the LayerNorm backward (module 4): with xhat = (x - mean) * rstd
/// and g = dy * gamma, per row  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  and per
/// column  dgamma = sum over rows of dy * xhat,  dbeta = sum over rows of dy.
///
/// The ladder:
///   1. atomic_params  one warp per row: the two row sums, then dx in the same sweep that
///                     adds each element's dy * xhat and dy into dgamma, dbeta with fp32
///                     atomicAdd. Simple; the order of the adds, hence the last bits of
///                     dgamma and dbeta, changes from run to run.
///   2. partial_sums   16-byte loads, the row in registers (compile-time C for the GPT's
///                     widths): each lane keeps its columns' dgamma, dbeta sums over the
///                     block's rows in registers, the block's 8 warps add theirs in a fixed
///                     order in shared memory into one partial per block (the workspace),
///                     and a second small kernel adds the partials in a fixed order:
///                     deterministic, bit-identical from run to run.
///   3. pipelined      the column sums in shared memory (a region per warp), which frees the
///                     registers for two blocks per SM; a one-wave grid whose warps prefetch
///                     their next row's x and dy while they compute the current one.
///
/// Bytes: read x and dy, write dx (3 matrices; 4 with accumulate_dx, which reads dx too),
/// plus the statistics (8 B per row) and C-sized parameters. The benchmark credits every
/// step with rows * C * 3 * sizeof(element), the traffic of reading x and dy and writing dx,
/// and its ceiling row copies the same bytes.

#include "module04/layer_norm_backward.hpp"

#include "course/cuda/elem16.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::solution {
namespace {

using m04::LayerNormBackwardArgs;
using m04::LayerNormBackwardStep;
namespace cc = ::course::cuda;
namespace io = ::course::cuda;  // elem16.cuh: to_float, from_float, load16, store16
using io::from_float;
using io::to_float;
using bf16 = __nv_bfloat16;

constexpr int kRowsPerBlock = m04::kLayerNormBackwardRowsPerBlock;  // warps (rows) per block
constexpr int kRowThreads = kRowsPerBlock * cc::kWarpSize;

unsigned blocks_for(std::int64_t work, std::int64_t per_block, const char* step) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  require_arg(blocks <= 0x7fffffff, step, "blocks", blocks, "exceeds the grid limit 2^31 - 1");
  return static_cast<unsigned>(blocks);
}

/// Calls launch(T{}) with T = float or bf16, the element type of args.dtype.
template <class Launch>
void with_element_type(course::DType dtype, Launch&& launch) {
  if (dtype == course::DType::bf16) launch(bf16{});
  else launch(float{});
}

/// dgamma = 0 and dbeta = 0 (unless accumulating): the sums start from nothing.
void zero_params_unless_accumulating(const LayerNormBackwardArgs& a) {
  if (a.accumulate_dparams) return;
  COURSE_CUDA_CHECK(cudaMemsetAsync(a.dgamma, 0, static_cast<std::size_t>(a.C) * sizeof(float), a.stream));
  COURSE_CUDA_CHECK(cudaMemsetAsync(a.dbeta, 0, static_cast<std::size_t>(a.C) * sizeof(float), a.stream));
}

// ============================================================================
// Step 1: atomic_params.
// One warp per row (8 per block), lanes on columns l, l + 32, ... (coalesced):
//   sweep 1: xhat = (x - mean) * rstd, g = dy * gamma; sum g and g * xhat; two warp_sums
//            give mean(g) and mean(g * xhat);
//   sweep 2: re-read x and dy (L1 / L2: the warp read them a moment ago), write
//            dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ the old dx with
//            accumulate_dx), and atomicAdd(&dgamma[c], dy * xhat), atomicAdd(&dbeta[c], dy).
// The parameter gradients are sums over ROWS, the other direction from the warp's
// reduction: every row adds into the same C addresses, so the atomics serialize at the L2
// slices that hold them (16384 adds per address at 16384 rows), and fp32 addition in
// arrival order is not associative: dgamma, dbeta differ in their last bits between runs.
// dgamma and dbeta are zeroed first (cudaMemsetAsync) unless accumulate_dparams.
//
// Bytes: x and dy read (twice, the second mostly from cache), dx written: the minimum
// 3 matrices from DRAM; plus 2 * rows * C atomics.
// Prediction: the atomics bound it: 2 x 12.6 M reductions on 1536 addresses at 16384 x
// 768: ~0.1-0.3 of the copy, fp32 and bf16.
// Measured (results: layer_norm_backward/solution/atomic_params/{16384x384_bf16,16384x768_bf16,16384x768_f32}): 173.7 / 332.0 / 476.8 GB/s = 0.11 / 0.15 / 0.19 of d2d_copy
// ============================================================================
template <class T>
__global__ void __launch_bounds__(kRowThreads)
    atomic_row_kernel(const T* x, std::int64_t ldx, const T* dy, std::int64_t lddy, T* dx, std::int64_t lddx,
                      const float* gamma, const float* mean, const float* rstd, float* dgamma, float* dbeta,
                      std::int64_t rows, std::int64_t C, bool accumulate_dx) {
  // @step atomic_params
  const int lane = threadIdx.x % cc::kWarpSize;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / cc::kWarpSize;
  if (r >= rows) return;  // uniform per warp
  const T* xr = x + r * ldx;
  const T* dyr = dy + r * lddy;
  T* dxr = dx + r * lddx;
  const float mu = mean[r], rs = rstd[r];
  const float inv_c = 1.f / static_cast<float>(C);

  float sum_g = 0.f, sum_gx = 0.f;
  for (std::int64_t j = lane; j < C; j += cc::kWarpSize) {
    const float xh = (to_float(xr[j]) - mu) * rs;
    const float g = to_float(dyr[j]) * gamma[j];
    sum_g += g;
    sum_gx = fmaf(g, xh, sum_gx);
  }
  const float mean_g = cc::warp_sum(sum_g) * inv_c;
  const float mean_gx = cc::warp_sum(sum_gx) * inv_c;
  for (std::int64_t j = lane; j < C; j += cc::kWarpSize) {
    const float xh = (to_float(xr[j]) - mu) * rs;
    const float d = to_float(dyr[j]);
    float v = rs * (d * gamma[j] - mean_g - xh * mean_gx);
    if (accumulate_dx) v += to_float(dxr[j]);
    dxr[j] = from_float<T>(v);
    atomicAdd(dgamma + j, d * xh);
    atomicAdd(dbeta + j, d);
  }
  // @end
}

template <class T>
void launch_atomic_params(const LayerNormBackwardArgs& a) {
  // @step atomic_params
  zero_params_unless_accumulating(a);
  atomic_row_kernel<T><<<blocks_for(a.rows, kRowsPerBlock, "atomic_params"), kRowThreads, 0, a.stream>>>(
      static_cast<const T*>(a.x), a.ldx, static_cast<const T*>(a.dy), a.lddy, static_cast<T*>(a.dx), a.lddx, a.gamma,
      a.mean, a.rstd, a.dgamma, a.dbeta, a.rows, a.C, a.accumulate_dx);
  COURSE_CHECK_LAUNCH("atomic_row_kernel");
  // @end
}

// ============================================================================
// Step 2: partial_sums.
// (a) No atomics. P = layer_norm_backward_partials(rows) blocks (at most 256) of 8 warps;
//     warp w of block b takes rows b * 8 + w, then + 8P, + 16P, ... (a fixed assignment).
//     Lane l holds its row's vectors l, l + 32, ... (16 bytes each, as the forward's
//     vectorized step; C a compile-time constant for kLayerNormFastWidths) in registers,
//     so x and dy are read once: the row sums, dx, and this lane's contributions
//     dy * xhat, dy to ITS columns, which it adds into registers (ag, ab) row after row.
// (b) At the end the block's 8 warps add their registers into a shared-memory row of
//     2 x C floats, warp 0 first, then 1, ... (a barrier between): one partial per block,
//     written to the workspace (partial b: [dgamma part | dbeta part]).
// (c) reduce_partials_kernel adds the P partials of every column in a fixed order (32
//     columns x 8 strands per block, then the 8 strands in order) and writes (or adds to)
//     dgamma, dbeta. Same inputs, same order of every addition: bit-identical results.
// Rows the register kernel cannot hold (C % kN != 0, unaligned pointers or strides, C > 1024) run block_stream_kernel: a block per row (rows b, b + P, ...), two sweeps over the
// row, and thread t adds its columns' contributions straight into the block's partial in
// the workspace (only thread t ever touches them: still deterministic).
//
// Bytes: x and dy once, dx once (+ dx read with accumulate_dx), plus the partials written
// and read once: P x 2C x 4 B x 2 = 3 MiB at C = 768 (~4% of the bf16 traffic at 16384 rows,
// ~2% of fp32).
// Registers (ptxas, sm_90a): 128-140 at C = 768 (24 values of x, 24 of dy, 48 sums per
// lane), ~160-200 at 1024: one block of 8 warps per SM, each warp with 3 KiB (bf16) or
// 6 KiB (fp32) of loads in flight per row; 256 blocks are ~2 waves on 132 SMs.
// Prediction: 16384 x 768 and 16384 x 384, fp32 and bf16: 0.7-0.85 of the copy (8 warps
// per SM are few for latency; the partial reduction is a few microseconds); >= 1.0x
// PyTorch's layer_norm backward (which also reduces dgamma, dbeta in a second kernel).
// Measured (results: layer_norm_backward/solution/partial_sums/{16384x384_bf16,16384x768_bf16,16384x768_f32}): 1261.0 / 1383.5 / 2093.2 GB/s = 0.76 / 0.64 / 0.83 of d2d_copy
// ============================================================================
template <class T, int kChunks, int kFixedC>
__global__ void __launch_bounds__(kRowThreads)
    partial_rows_kernel(const T* x, std::int64_t ldx, const T* dy, std::int64_t lddy, T* dx, std::int64_t lddx,
                        const float* gamma, const float* mean, const float* rstd, std::int64_t rows, int runtime_c,
                        bool accumulate_dx, float* partials) {
  // @step partial_sums  (a, b: the rows and the block's partial)
  constexpr int kN = io::Vec16<T>::kN;
  extern __shared__ float4 smem4[];
  float* block_sum = reinterpret_cast<float*>(smem4);  // [2 * C]: dgamma part, dbeta part
  const int C = kFixedC > 0 ? kFixedC : runtime_c;
  const int nvec = C / kN;
  const int lane = threadIdx.x % cc::kWarpSize;
  const int warp = threadIdx.x / cc::kWarpSize;
  const float inv_c = 1.f / static_cast<float>(C);

  float ag[kChunks][kN] = {}, ab[kChunks][kN] = {};  // this lane's columns: sum dy * xhat, sum dy
  const std::int64_t row_stride = static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + warp; r < rows; r += row_stride) {
    const T* xr = x + r * ldx;
    const T* dyr = dy + r * lddy;
    T* dxr = dx + r * lddx;
    const float mu = mean[r], rs = rstd[r];
    float xh[kChunks][kN], d[kChunks][kN];
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int vi = k * cc::kWarpSize + lane;
      if (vi < nvec) {
        io::load16(xr + vi * kN, xh[k]);
        io::load16(dyr + vi * kN, d[k]);
      } else {
#pragma unroll
        for (int u = 0; u < kN; ++u) xh[k][u] = d[k][u] = 0.f;
      }
    }
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int vi = k * cc::kWarpSize + lane;
      if (vi < nvec) {
        float gm[kN];
        io::load16_params<kN>(gamma + vi * kN, gm);
#pragma unroll
        for (int u = 0; u < kN; ++u) {
          xh[k][u] = (xh[k][u] - mu) * rs;
          const float g = d[k][u] * gm[u];
          sum_g += g;
          sum_gx = fmaf(g, xh[k][u], sum_gx);
          ag[k][u] = fmaf(d[k][u], xh[k][u], ag[k][u]);
          ab[k][u] += d[k][u];
        }
      }
    }
    const float mean_g = cc::warp_sum(sum_g) * inv_c;
    const float mean_gx = cc::warp_sum(sum_gx) * inv_c;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int vi = k * cc::kWarpSize + lane;
      if (vi < nvec) {
        float gm[kN], out[kN];
        io::load16_params<kN>(gamma + vi * kN, gm);
        if (accumulate_dx) io::load16(dxr + vi * kN, out);
#pragma unroll
        for (int u = 0; u < kN; ++u) {
          const float v = rs * (d[k][u] * gm[u] - mean_g - xh[k][u] * mean_gx);
          out[u] = accumulate_dx ? out[u] + v : v;
        }
        io::store16(dxr + vi * kN, out);
      }
    }
  }

  // (b) The block's warps add their sums in warp order: warp 0 writes, 1 .. 7 add.
  for (int w = 0; w < kRowsPerBlock; ++w) {
    if (warp == w) {
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int vi = k * cc::kWarpSize + lane;
        if (vi < nvec) {
#pragma unroll
          for (int u = 0; u < kN; ++u) {
            const int c = vi * kN + u;
            block_sum[c] = w == 0 ? ag[k][u] : block_sum[c] + ag[k][u];
            block_sum[C + c] = w == 0 ? ab[k][u] : block_sum[C + c] + ab[k][u];
          }
        }
      }
    }
    __syncthreads();
  }
  float* out = partials + static_cast<std::int64_t>(blockIdx.x) * 2 * C;
  for (int i = threadIdx.x; i < 2 * C; i += kRowThreads) out[i] = block_sum[i];
  // @end
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    block_stream_kernel(const T* x, std::int64_t ldx, const T* dy, std::int64_t lddy, T* dx, std::int64_t lddx,
                        const float* gamma, const float* mean, const float* rstd, std::int64_t rows, std::int64_t C,
                        bool accumulate_dx, float* partials) {
  // @step partial_sums  (the generic rows: a block per row, partials in the workspace)
  __shared__ float scratch[cc::kWarpSize];
  float* pg = partials + static_cast<std::int64_t>(blockIdx.x) * 2 * C;  // this block's partial
  float* pb = pg + C;
  const float inv_c = 1.f / static_cast<float>(C);
  for (std::int64_t j = threadIdx.x; j < C; j += kRowThreads) pg[j] = pb[j] = 0.f;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * ldx;
    const T* dyr = dy + r * lddy;
    T* dxr = dx + r * lddx;
    const float mu = mean[r], rs = rstd[r];
    float sum_g = 0.f, sum_gx = 0.f;
    for (std::int64_t j = threadIdx.x; j < C; j += kRowThreads) {
      const float xh = (to_float(xr[j]) - mu) * rs;
      const float g = to_float(dyr[j]) * gamma[j];
      sum_g += g;
      sum_gx = fmaf(g, xh, sum_gx);
    }
    // (block_all_reduce's barriers also keep the two reductions' uses of scratch apart)
    const float mean_g = cc::block_all_reduce(sum_g, cc::Sum{}, 0.f, scratch) * inv_c;
    const float mean_gx = cc::block_all_reduce(sum_gx, cc::Sum{}, 0.f, scratch) * inv_c;
    for (std::int64_t j = threadIdx.x; j < C; j += kRowThreads) {
      const float xh = (to_float(xr[j]) - mu) * rs;
      const float d = to_float(dyr[j]);
      float v = rs * (d * gamma[j] - mean_g - xh * mean_gx);
      if (accumulate_dx) v += to_float(dxr[j]);
      dxr[j] = from_float<T>(v);
      pg[j] = fmaf(d, xh, pg[j]);  // column j of this partial: thread j % 256's alone
      pb[j] += d;
    }
  }
  // @end
}

constexpr int kReduceCols = 32;    // columns per block of reduce_partials_kernel
constexpr int kReduceStrands = 8;  // partials summed side by side per column

/// out[i] (= or +=) sum over p < P of partials[p * 2C + i], i < 2C: out is dgamma for
/// i < C, dbeta for i >= C.
__global__ void __launch_bounds__(kReduceCols* kReduceStrands)
    reduce_partials_kernel(const float* partials, std::int64_t P, std::int64_t C, float* dgamma, float* dbeta,
                           bool accumulate) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Step 3 launches this kernel early (course::cuda::launch_early): wait until the rows
  // kernel has finished and its partials are visible. After an ordinary launch: no wait.
  cudaGridDependencySynchronize();
#endif
  // @step partial_sums  (c: the fixed-order reduction of the partials)
  __shared__ float strand[kReduceStrands][kReduceCols];
  const int tx = threadIdx.x % kReduceCols, ty = threadIdx.x / kReduceCols;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kReduceCols + tx;
  float s = 0.f;
  if (i < 2 * C)
    for (std::int64_t p = ty; p < P; p += kReduceStrands) s += partials[p * 2 * C + i];
  strand[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && i < 2 * C) {
    float total = 0.f;
    for (int q = 0; q < kReduceStrands; ++q) total += strand[q][tx];  // always in strand order
    float* out = i < C ? dgamma + i : dbeta + (i - C);
    *out = accumulate ? *out + total : total;
  }
  // @end
}

/// dgamma, dbeta (= or +=) the sum of the first `partials` partials in the workspace. With
/// `early`, a programmatic dependent launch where the GPU allows it (step 3).
void launch_reduce_partials(const LayerNormBackwardArgs& a, unsigned partials, bool early = false) {
  const dim3 grid(blocks_for(2 * a.C, kReduceCols, "partial_sums")), block(kReduceCols * kReduceStrands);
  const auto* sums = static_cast<const float*>(a.workspace);
  if (early)
    cc::launch_early<reduce_partials_kernel>(grid, block, 0, a.stream, sums, static_cast<std::int64_t>(partials), a.C,
                                             a.dgamma, a.dbeta, a.accumulate_dparams);
  else
    reduce_partials_kernel<<<grid, block, 0, a.stream>>>(sums, partials, a.C, a.dgamma, a.dbeta, a.accumulate_dparams);
  COURSE_CHECK_LAUNCH("reduce_partials_kernel");
}

template <class T, int kChunks, int kFixedC>
void launch_partial_rows(const LayerNormBackwardArgs& a, unsigned partials) {
  const int smem = static_cast<int>(2 * a.C * sizeof(float));  // <= 2 x 256 x 8 x 4 = 16 KiB
  partial_rows_kernel<T, kChunks, kFixedC><<<partials, kRowThreads, smem, a.stream>>>(
      static_cast<const T*>(a.x), a.ldx, static_cast<const T*>(a.dy), a.lddy, static_cast<T*>(a.dx), a.lddx, a.gamma,
      a.mean, a.rstd, a.rows, static_cast<int>(a.C), a.accumulate_dx, static_cast<float*>(a.workspace));
  COURSE_CHECK_LAUNCH("partial_rows_kernel");
}

template <class T>
void launch_partial_sums(const LayerNormBackwardArgs& a) {
  // @step partial_sums  (the launch: register kernel by C, else the generic one; then the reduction)
  constexpr int kN = io::Vec16<T>::kN;
  const auto partials = static_cast<unsigned>(m04::layer_norm_backward_partials(a.rows));
  const bool vec_ok = a.C % kN == 0 && a.ldx % kN == 0 && a.lddy % kN == 0 && a.lddx % kN == 0 &&
                      io::aligned16(a.x) && io::aligned16(a.dy) && io::aligned16(a.dx) && io::aligned16(a.gamma);
  const std::int64_t nvec = a.C / kN;
  bool fixed = false;
  for (int width : m04::kLayerNormFastWidths) fixed = fixed || a.C == width;
  if (vec_ok && fixed) {
    cc::dispatch_value<m04::kLayerNormFastWidths>(a.C, "C", [&](auto c) {
      constexpr int kC = decltype(c)::value;
      constexpr int kChunks = (kC / kN + cc::kWarpSize - 1) / cc::kWarpSize;
      launch_partial_rows<T, kChunks, kC>(a, partials);
    });
  } else if (vec_ok && nvec <= 32) {
    launch_partial_rows<T, 1, 0>(a, partials);
  } else if (vec_ok && nvec <= 64) {
    launch_partial_rows<T, 2, 0>(a, partials);
  } else if (vec_ok && nvec <= 128) {
    launch_partial_rows<T, 4, 0>(a, partials);
  } else if (vec_ok && nvec <= 256 && kN == 4) {  // at most 32 values of a row per lane (bf16: 4 chunks)
    launch_partial_rows<T, 8 * 4 / kN, 0>(a, partials);
  } else {
    block_stream_kernel<T><<<partials, kRowThreads, 0, a.stream>>>(
        static_cast<const T*>(a.x), a.ldx, static_cast<const T*>(a.dy), a.lddy, static_cast<T*>(a.dx), a.lddx,
        a.gamma, a.mean, a.rstd, a.rows, a.C, a.accumulate_dx, static_cast<float*>(a.workspace));
    COURSE_CHECK_LAUNCH("block_stream_kernel");
  }
  launch_reduce_partials(a, partials);
  // @end
}

// ============================================================================
// Step 3: pipelined.
// Step 2 holds each lane's dgamma, dbeta sums in registers: ~130-140 per thread at C = 768,
// one block of 8 warps per SM, and its 256 blocks run as ~2 waves on 132 SMs. Each warp
// loads a row, then computes and writes it with no load in flight. Three changes:
// (a) The column sums move to shared memory, one private region per warp (2 x C floats,
//     48 KiB per block at C = 768): a lane adds this row's dy * xhat and dy into ITS
//     float4 slots, a read and a write of shared memory per 4 columns and row, and the
//     registers this frees let two blocks share an SM. Slot (k, h, lane) of a region holds
//     columns column(k, lane) + 4h .. + 3: consecutive lanes, consecutive 16 bytes (no
//     bank conflict). Only the warp touches its region until the end: no barrier per row.
// (b) The forward's pipelining (layer_norm.cu, step 4): a one-wave grid of at most
//     kLayerNormMaxPartials blocks whose warps walk the rows, each issuing its next row's
//     x and dy loads (raw) and statistics before it computes the current row.
// (c) At the end the block adds its 8 warps' regions in warp order into its partial, and
//     step 2's reduce_partials_kernel adds the partials in a fixed order: bit-identical
//     across runs on one GPU (the number of partials depends on its SM count).
// (d) That reduction is launched early (programmatic dependent launch, sm_90, as module 1's
//     vectorized reduction): each block of the rows kernel signals when its rows are done
//     (cudaTriggerProgrammaticLaunchCompletion), so the GPU processes the reduction's launch
//     while the blocks write their partials, and the reduction waits inside
//     (cudaGridDependencySynchronize) until they are complete and visible. What it hides:
//     the gap between two dependent launches, 2-3 us, against ~29 us for this step at
//     16384 x 384 bf16.
// C a compile-time width (kLayerNormFastWidths) with 16-byte access; any other call runs
// step 2.
//
// Bytes: as step 2 (x, dy read once, dx written once, the partials).
// Shared memory per row and warp: 2C floats read and written (12 KiB at C = 768) against
// 4.5 KiB of DRAM traffic (bf16): ~1/3 of the shared-memory bandwidth when DRAM runs full.
// Prediction: 16384 x 384 and x 768, fp32 and bf16: 0.85-0.95 of the copy; (d), added after
// the first measurement: 1.03-1.08x faster at 384, 1.02-1.05x at 768.
// Measured (results: layer_norm_backward/solution/pipelined/{16384x384_bf16,16384x768_bf16,16384x768_f32}): 1554.2 / 1986.9 / 2273.6 GB/s = 0.94 / 0.92 / 0.90 of d2d_copy
// Outcome (ncu, H100, the run before the results page's): kernel 16.3 / 29.9 / 57.2 us against step 2's 20.1 /
// 41.9 / 61.4, with 24% of the warp slots resident against 12% at 768.
// Outcome of (d) (H100, pipelined / partial_sums within one run, against the run before it):
// 1.107x faster at 384 bf16, 1.094x at 768 bf16, 1.069x and 1.037x in fp32; 384 bf16 went
// from 0.84 to 0.94 of the copy.
// ============================================================================
template <class T, int kFixedC>
struct ColumnSumSlots {
  using Row = io::WarpRow16<T, kFixedC>;
  static constexpr int kHalves = Row::kN / 4;                                     // float4 per vector
  static constexpr int kSlots = Row::kChunks * kHalves * cc::kWarpSize;           // float4 per sum and warp
  static constexpr int kSmemBytes = kRowsPerBlock * 2 * kSlots * sizeof(float4);  // a block's regions
  /// Blocks per SM the kernel is compiled for. Two rows (this one, the prefetched one) of x
  /// and dy take 4 x kChunks x kN registers per lane: up to 96 (C = 768), two blocks fit in
  /// 128 registers per thread (ptxas: 128 at bf16 768, 12 bytes spilled at fp32 768); at
  /// C = 1024 (128 values) one block, unspilled (ptxas, CUDA 13.0: 164 bf16, 198 fp32).
  static constexpr int kMinBlocks = 4 * Row::kChunks * Row::kN <= 96 ? 2 : 1;
};

template <class T, int kFixedC>
__global__ void __launch_bounds__(kRowThreads, (ColumnSumSlots<T, kFixedC>::kMinBlocks))
    pipelined_rows_kernel(const T* x, std::int64_t ldx, const T* dy, std::int64_t lddy, T* dx, std::int64_t lddx,
                          const float* gamma, const float* mean, const float* rstd, std::int64_t rows,
                          bool accumulate_dx, float* partials) {
  // @step pipelined
  using Row = io::WarpRow16<T, kFixedC>;
  using Slots = ColumnSumSlots<T, kFixedC>;
  constexpr int kN = Row::kN, kChunks = Row::kChunks, kHalves = Slots::kHalves, kSlots = Slots::kSlots;
  constexpr float kInvC = 1.f / static_cast<float>(kFixedC);
  extern __shared__ float4 regions[];  // [warp][dgamma sums | dbeta sums][kSlots]
  const int lane = threadIdx.x % cc::kWarpSize;
  const int warp = threadIdx.x / cc::kWarpSize;
  float4* sum_gx = regions + warp * 2 * kSlots;  // this warp's sums of dy * xhat
  float4* sum_d = sum_gx + kSlots;               // and of dy
  for (int i = lane; i < kSlots; i += cc::kWarpSize) sum_gx[i] = sum_d[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  __syncwarp();

  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock;
  std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  uint4 next_x[kChunks], next_dy[kChunks];
  float next_mu = 0.f, next_rs = 0.f;
  const auto prefetch = [&](std::int64_t row) {
    Row::load(x + row * ldx, lane, next_x);
    Row::load(dy + row * lddy, lane, next_dy);
    next_mu = mean[row];
    next_rs = rstd[row];
  };
  if (r < rows) prefetch(r);
  for (; r < rows; r += stride) {
    // Phase 1: widen the row that arrived (xhat, dy); issue the next row's loads.
    const float mu = next_mu, rs = next_rs;
    float xh[kChunks][kN], d[kChunks][kN];
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      if (Row::inside(k, lane)) {
        io::unpack16<T>(next_x[k], xh[k]);
        io::unpack16<T>(next_dy[k], d[k]);
#pragma unroll
        for (int u = 0; u < kN; ++u) xh[k][u] = (xh[k][u] - mu) * rs;
      }
    }
    if (r + stride < rows) prefetch(r + stride);

    // Phase 2: the row sums of g = dy * gamma and g * xhat.
    float sum_g = 0.f, sum_gxh = 0.f;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      if (Row::inside(k, lane)) {
        float gm[kN];
        io::load16_params<kN>(gamma + Row::column(k, lane), gm);
#pragma unroll
        for (int u = 0; u < kN; ++u) {
          const float g = d[k][u] * gm[u];
          sum_g += g;
          sum_gxh = fmaf(g, xh[k][u], sum_gxh);
        }
      }
    }
    const float mean_g = cc::warp_sum(sum_g) * kInvC;
    const float mean_gx = cc::warp_sum(sum_gxh) * kInvC;

    // Phase 3: dx, and this row's dy * xhat and dy added into the warp's column sums.
    T* dxr = dx + r * lddx;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      if (Row::inside(k, lane)) {
        const int c = Row::column(k, lane);
        float gm[kN], out[kN];
        io::load16_params<kN>(gamma + c, gm);
        if (accumulate_dx) io::load16(dxr + c, out);
#pragma unroll
        for (int u = 0; u < kN; ++u) {
          const float v = rs * (d[k][u] * gm[u] - mean_g - xh[k][u] * mean_gx);
          out[u] = accumulate_dx ? out[u] + v : v;
        }
        io::store16(dxr + c, out);
#pragma unroll
        for (int h = 0; h < kHalves; ++h) {
          const int slot = (k * kHalves + h) * cc::kWarpSize + lane;
          const float* dd = d[k] + 4 * h;
          const float* xx = xh[k] + 4 * h;
          float4 a = sum_gx[slot], b = sum_d[slot];
          a.x = fmaf(dd[0], xx[0], a.x), a.y = fmaf(dd[1], xx[1], a.y), a.z = fmaf(dd[2], xx[2], a.z),
          a.w = fmaf(dd[3], xx[3], a.w);
          b.x += dd[0], b.y += dd[1], b.z += dd[2], b.w += dd[3];
          sum_gx[slot] = a;
          sum_d[slot] = b;
        }
      }
    }
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The rows are done: the early-launched reduction may be scheduled once every block got
  // here (it still waits for this kernel to finish and its partials to be visible).
  cudaTriggerProgrammaticLaunchCompletion();
#endif
  // Phase 4: the block's partial, its warps' regions added in warp order.
  __syncthreads();
  float* out = partials + static_cast<std::int64_t>(blockIdx.x) * 2 * kFixedC;  // [dgamma part | dbeta part]
  for (int slot = threadIdx.x; slot < kSlots; slot += kRowThreads) {
    const int k = slot / (kHalves * cc::kWarpSize), h = slot / cc::kWarpSize % kHalves, l = slot % cc::kWarpSize;
    if (!Row::inside(k, l)) continue;
    float4 a = regions[slot], b = regions[kSlots + slot];
    for (int w = 1; w < kRowsPerBlock; ++w) {
      const float4 aw = regions[w * 2 * kSlots + slot], bw = regions[w * 2 * kSlots + kSlots + slot];
      a.x += aw.x, a.y += aw.y, a.z += aw.z, a.w += aw.w;
      b.x += bw.x, b.y += bw.y, b.z += bw.z, b.w += bw.w;
    }
    const int c = Row::column(k, l) + 4 * h;
    *reinterpret_cast<float4*>(out + c) = a;
    *reinterpret_cast<float4*>(out + kFixedC + c) = b;
  }
  // @end
}

template <class T>
void launch_pipelined(const LayerNormBackwardArgs& a) {
  // @step pipelined
  constexpr int kN = io::Vec16<T>::kN;
  const bool vec_ok = a.C % kN == 0 && a.ldx % kN == 0 && a.lddy % kN == 0 && a.lddx % kN == 0 &&
                      io::aligned16(a.x) && io::aligned16(a.dy) && io::aligned16(a.dx) && io::aligned16(a.gamma);
  bool fixed = false;
  for (int width : m04::kLayerNormFastWidths) fixed = fixed || a.C == width;
  if (!vec_ok || !fixed) return launch_partial_sums<T>(a);  // step 2 for the other shapes
  cc::dispatch_value<m04::kLayerNormFastWidths>(a.C, "C", [&](auto c) {
    constexpr int kC = decltype(c)::value;
    constexpr auto kKernel = pipelined_rows_kernel<T, kC>;
    constexpr int kSmem = ColumnSumSlots<T, kC>::kSmemBytes;
    cc::opt_in_dynamic_smem<kKernel>(kSmem);
    // A one-wave grid, at most the workspace's partials, every warp with the same rows (+-1).
    const int resident = std::min<int>(cc::one_wave_blocks<kKernel>(kRowThreads, kSmem),
                                       static_cast<int>(m04::layer_norm_backward_partials(a.rows)));
    const unsigned blocks = cc::balanced_blocks(a.rows, kRowsPerBlock, resident);
    kKernel<<<blocks, kRowThreads, kSmem, a.stream>>>(static_cast<const T*>(a.x), a.ldx, static_cast<const T*>(a.dy),
                                                      a.lddy, static_cast<T*>(a.dx), a.lddx, a.gamma, a.mean, a.rstd,
                                                      a.rows, a.accumulate_dx, static_cast<float*>(a.workspace));
    COURSE_CHECK_LAUNCH("pipelined_rows_kernel");
    launch_reduce_partials(a, blocks, /*early=*/true);
  });
  // @end
}

}  // namespace

void layer_norm_backward(LayerNormBackwardStep step, const LayerNormBackwardArgs& args) {
  m04::validate_layer_norm_backward_args(args, step, "layer_norm_backward");
  if (args.rows == 0) {  // sums over no rows: 0, or nothing added
    zero_params_unless_accumulating(args);
    return;
  }
  with_element_type(args.dtype, [&](auto t) {
    using T = decltype(t);
    switch (step) {
      case LayerNormBackwardStep::atomic_params: return launch_atomic_params<T>(args);
      case LayerNormBackwardStep::partial_sums: return launch_partial_sums<T>(args);
      case LayerNormBackwardStep::pipelined: return launch_pipelined<T>(args);
    }
  });
}

}  // namespace course::solution
