/// @file layer_norm.cu
/// @brief YOUR ladder for the LayerNorm forward (module 4): per row,
/// y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps), biased variance.
///
/// Read module04_training/include/module04/layer_norm.hpp first (the formula, the strides
/// ldx / ldy, the dtypes), then fill in one step at a time. Run its tests with:
///   ctest --preset default -L exercise -R LayerNorm
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint layer_norm/<step>`
/// (all of them: exercises/module04_training/hints/layer_norm.md).
///
/// Every kernel is a template over the element type T (float or __nv_bfloat16): read with
/// to_float(x), write with from_float<T>(v) (course/cuda/elem16.cuh), compute in fp32.
/// Write mean[r] and rstd[r] too: the backward reads them.

#include "module04/layer_norm.hpp"

#include "course/cuda/elem16.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace course::exercise {
namespace {

using m04::LayerNormArgs;
using m04::LayerNormStep;
namespace cc = ::course::cuda;
namespace io = ::course::cuda;  // elem16.cuh: to_float, from_float, load16, store16
using io::from_float;
using io::to_float;
using bf16 = __nv_bfloat16;

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

// ============================================================================
// Step 1: thread_per_row (the naive baseline).
// Thread r owns row r and sweeps it three times in global memory: sum x for the mean, sum
// (x - mean)^2 for the variance, then write y. Two passes over the statistics (mean first,
// then the squared deviations) and not one pass of sum(x) and sum(x^2): with
// var = E[x^2] - mean^2, a row of mean 1e3 and std 1e-2 subtracts two numbers near 1e6 that
// agree in their first 10 digits, more than fp32's 7: the variance is rounding noise (even
// negative). Sweeping the deviations costs a second read, which this step pays in full.
//
// Access pattern: the 32 threads of a warp read 32 different rows, ldx elements apart:
// every load instruction touches 32 sectors for 32 useful elements (4 useful bytes of 32
// in fp32, 2 in bf16), and only `rows` threads exist (16384: ~4 warps per SM).
// Bytes: 3 reads of x + 1 write of y, each at 1/8 (fp32) or 1/16 (bf16) sector efficiency
// unless L1 keeps a thread's sectors between its iterations (32 rows x 32 B per warp per
// column step: it mostly does for the first sweep's neighbours, not across sweeps).
// Prediction: 16384 x 768: ~0.05-0.15 of the copy, fp32 and bf16.
// Measured (results: layer_norm/solution/thread_per_row/{16384x384_bf16,16384x768_bf16,16384x768_f32}): 137.2 / 143.3 / 260.8 GB/s = 0.09 / 0.07 / 0.11 of d2d_copy
// ============================================================================
template <class T>
__global__ void thread_row_kernel(const T* x, std::int64_t ldx, T* y, std::int64_t ldy, const float* gamma,
                                  const float* beta, float* mean, float* rstd, std::int64_t rows, std::int64_t C,
                                  float eps) {
  // @step thread_per_row
  // TODO(step 1): thread r = blockIdx.x * blockDim.x + threadIdx.x (64-bit) owns row r
  //   (return if r >= rows). Sweep the row three times: the mean, then the sum of the
  //   squared deviations (v - mean)^2 (NOT sum(x^2) - mean^2), then y. Write mean[r], rstd[r].
  // @end
}

template <class T>
void launch_thread_per_row(const LayerNormArgs& a) {
  // @step thread_per_row
  // TODO(step 1): delete the throw; launch blocks_for(a.rows, 128, "thread_per_row") blocks of
  //   128 threads of thread_row_kernel<T> on a.stream (static_cast<const T*>(a.x), ...), then
  //   COURSE_CHECK_LAUNCH("thread_row_kernel").
  throw NotImplemented("layer_norm step thread_per_row", __FILE__);
  // @end
}

// ============================================================================
// Step 2: warp_per_row.
// One warp per row, 8 rows per block. Lane l loads columns l, l + 32, ... (coalesced: a
// warp reads 128 B of fp32 or 64 B of bf16 per load instruction) into kPerLane registers
// (compile-time 1, 2, 4, 8, 16 or 32: C <= 1024). Then, with the row on chip:
//   mean = warp_sum(sum of the lane's values) / C
//   var  = warp_sum(sum of (v - mean)^2 over the lane's values) / C
// The second reduction reads registers, not memory: the two-pass variance costs only
// shuffles now, so there is no reason to use sum / sum of squares (cancellation, see step
// 1) nor Welford's one-pass update (a division per element and a three-value merge per
// shuffle: its point is to avoid a second READ, which no longer exists here). Each lane
// then writes y for its own columns.
// Rows longer than 1024 do not fit in registers: warp_row_stream_kernel sweeps x three
// times (mean, variance, y) with the same coalesced pattern; the re-reads come from L1/L2.
//
// Bytes: x read once, y written once: the copy's traffic. Scalar accesses (4 B or 2 B per
// lane per instruction) issue 4x (fp32) or 8x (bf16) the load instructions of step 3.
// Registers: ~kPerLane + 20: at C = 768 (kPerLane 32) ~60, full occupancy.
// Prediction: 16384 x 768: fp32 ~0.7-0.85 of the copy; bf16 ~0.5-0.7 (2-byte loads: half
// the bytes per instruction of fp32); 16384 x 384 a little lower (half the bytes per row,
// same reduction latency).
// Measured (results: layer_norm/solution/warp_per_row/{16384x384_bf16,16384x768_bf16,16384x768_f32}): 960.6 / 876.5 / 1937.5 GB/s = 0.64 / 0.43 / 0.81 of d2d_copy
// ============================================================================
constexpr int kRowsPerBlock = 8;  // warps (rows) per block in steps 2 and 3
constexpr int kRowThreads = kRowsPerBlock * cc::kWarpSize;

template <class T, int kPerLane>
__global__ void __launch_bounds__(kRowThreads)
    warp_row_kernel(const T* x, std::int64_t ldx, T* y, std::int64_t ldy, const float* gamma, const float* beta,
                    float* mean, float* rstd, std::int64_t rows, int C, float eps) {
  // @step warp_per_row
  // TODO(step 2a): row r = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32.
  //   Lane l keeps columns l, l + 32, ... in float v[kPerLane] (0 beyond C); mean by
  //   cc::warp_sum; then the squared deviations FROM THE REGISTERS by warp_sum (skip the
  //   padding columns: they are not deviations of 0 - mean); y; lane 0 writes mean, rstd.
  // @end
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    warp_row_stream_kernel(const T* x, std::int64_t ldx, T* y, std::int64_t ldy, const float* gamma,
                           const float* beta, float* mean, float* rstd, std::int64_t rows, std::int64_t C, float eps) {
  // @step warp_per_row  (rows longer than 1024: three sweeps)
  // TODO(step 2b): rows longer than 1024: the same warp, three strided sweeps over global
  //   memory (j = lane, lane + 32, ... < C): mean, squared deviations, y.
  // @end
}

template <class T, int kPerLane>
void launch_warp_row(const LayerNormArgs& a) {
  warp_row_kernel<T, kPerLane><<<blocks_for(a.rows, kRowsPerBlock, "warp_per_row"), kRowThreads, 0, a.stream>>>(
      static_cast<const T*>(a.x), a.ldx, static_cast<T*>(a.y), a.ldy, a.gamma, a.beta, a.mean, a.rstd, a.rows,
      static_cast<int>(a.C), a.eps);
  COURSE_CHECK_LAUNCH("warp_row_kernel");
}

template <class T>
void launch_warp_per_row(const LayerNormArgs& a) {
  // @step warp_per_row  (the launch: kPerLane by C, else the streamed kernel)
  // TODO(step 2c): delete the throw; pick kPerLane by C (1, 2, 4, 8, 16, 32: C <= 32 * kPerLane)
  //   and call launch_warp_row<T, kPerLane>(a); for C > kLayerNormWarpMaxCols launch
  //   warp_row_stream_kernel<T> (blocks_for(a.rows, kRowsPerBlock, ...) blocks of kRowThreads).
  throw NotImplemented("layer_norm step warp_per_row", __FILE__);
  // @end
}

// ============================================================================
// Step 3: vectorized.
// The warp per row of step 2 with 16-byte accesses: a lane moves kN = 4 floats or 8 bf16
// per load and store instruction (LDG.128 / STG.128, course/cuda/elem16.cuh), and reads gamma
// and beta as float4 (they stay in L1: every row of the block uses the same ones). Vector
// v of the row (elements v*kN .. v*kN + kN - 1) belongs to lane v % 32, chunk v / 32:
// consecutive lanes read consecutive 16 bytes, 512 B per warp instruction.
//
// C is a template parameter for kLayerNormFastWidths (384, 768, 1024), dispatched with
// course::cuda::dispatch_value: the chunk count, the 1/C and the "is this vector inside the
// row" tests are constants, so the loops unroll with no predicates where 32 | C / kN
// (768 fp32 = 6 chunks of 32 lanes, 768 bf16 = 3; 384 bf16 = 48 vectors: chunk 1 is half
// used). Other C with C % kN == 0 and C <= 256 kN run the same kernel with a runtime C
// (kChunks = 1, 2, 4 or 8 by C); the rest (C % kN != 0, unaligned pointers or strides,
// longer rows) falls back to step 2's scalar kernels. 8 rows (warps) per block.
//
// Bytes: as step 2 (x once, y once), with 1/4 (fp32) or 1/8 (bf16) of its memory
// instructions, so each warp has several 16-byte loads in flight before its first shuffle.
// Registers: C = 768 bf16: 24 values + 24 of the output ~50; fp32 1024: ~70. Full occupancy.
// Prediction: 16384 x 768 and 16384 x 384, fp32 and bf16: 0.85-0.95 of the copy; >= 1.0x
// F.layer_norm (which reads x once and writes y once as well).
// Measured (results: layer_norm/solution/vectorized/{16384x384_bf16,16384x768_bf16,16384x768_f32}): 1426.6 / 1920.3 / 2376.3 GB/s = 0.95 / 0.94 / 0.99 of d2d_copy
// ============================================================================
template <class T, int kChunks, int kFixedC>
__global__ void __launch_bounds__(kRowThreads)
    vec_row_kernel(const T* x, std::int64_t ldx, T* y, std::int64_t ldy, const float* gamma, const float* beta,
                   float* mean, float* rstd, std::int64_t rows, int runtime_c, float eps) {
  // @step vectorized
  // TODO(step 3): the kernel of step 2a with 16-byte accesses: vector vi = k * 32 + lane
  //   (k < kChunks, vi < nvec = C / kN) holds elements vi * kN .. vi * kN + kN - 1:
  //   io::load16(xr + vi * kN, v[k]), io::load16_params<kN>(gamma + vi * kN, g), ...,
  //   io::store16(yr + vi * kN, out). C = kFixedC when kFixedC > 0 (a compile-time width).
  // @end
}

template <class T, int kChunks, int kFixedC>
void launch_vec_row(const LayerNormArgs& a) {
  vec_row_kernel<T, kChunks, kFixedC><<<blocks_for(a.rows, kRowsPerBlock, "vectorized"), kRowThreads, 0, a.stream>>>(
      static_cast<const T*>(a.x), a.ldx, static_cast<T*>(a.y), a.ldy, a.gamma, a.beta, a.mean, a.rstd, a.rows,
      static_cast<int>(a.C), a.eps);
  COURSE_CHECK_LAUNCH("vec_row_kernel");
}

template <class T>
void launch_vectorized(const LayerNormArgs& a) {
  // @step vectorized
  // TODO(step 3): delete the throw. 16-byte accesses need C % kN == 0, ldx % kN == 0,
  //   ldy % kN == 0 and x, y, gamma, beta 16-byte aligned (io::aligned16); otherwise call
  //   launch_warp_per_row<T>(a). For C in m04::kLayerNormFastWidths dispatch with
  //   cc::dispatch_value<m04::kLayerNormFastWidths>(a.C, "C", [&](auto c) { ... }) to
  //   launch_vec_row<T, kChunks, decltype(c)::value>(a); other C: launch_vec_row<T, kChunks, 0>
  //   with kChunks = 1, 2, 4 or 8 by nvec = C / kN (> 256: launch_warp_per_row<T>).
  throw NotImplemented("layer_norm step vectorized", __FILE__);
  // @end
}

// ============================================================================
// Step 4: pipelined.
// Step 3's warp reads a row, reduces it, writes it and exits: its loads are in flight only
// at its start, and 2048 blocks of 8 warps run as ~3 waves on 132 SMs, the last one a
// sliver (ncu, H100, 16384 x 384 bf16: 11.0 us against 9.0 us for a 16-byte copy kernel
// moving the same bytes; 51% of the warp slots occupied on average). Two changes:
// (a) A one-wave grid (course::cuda::one_wave_blocks: SMs x resident blocks per SM) whose
//     warps walk the rows r, r + W, r + 2W, ... (W warps in all), with W chosen so that
//     every warp gets ceil(rows / resident warps) rows or one fewer: no tail of a last
//     partial wave, no warp with an extra row while the others idle.
// (b) Software pipelining: right after taking row r from its registers, the warp issues
//     the 16-byte loads of its next row, r + W, into registers (packed: 4 registers per 16
//     bytes, 12 more at C = 768 bf16), so those bytes travel while row r is reduced and
//     written, and DRAM always has every warp's next row in flight.
// C is a compile-time width (kLayerNormFastWidths) with 16-byte access; any other call runs
// step 3.
//
// Bytes: as step 3 (x once, y once: the copy's traffic).
// Prediction: 16384 x 384 and x 768, fp32 and bf16: the kernel within ~5% of the copy
// kernel's time, >= 0.9 of the d2d_copy row (which pays the same launch).
// Measured (results: layer_norm/solution/pipelined/{16384x384_bf16,16384x768_bf16,16384x768_f32}): 1455.3 / 1894.4 / 2305.8 GB/s = 0.97 / 0.93 / 0.96 of d2d_copy
// Outcome (ncu, H100): kernel 10.5 / 16.8 / 32.9 us against step 3's 11.0 / 18.4 / 33.0 (a
// separate run): 5-9% faster in bf16, even in fp32. The prediction is missed: the copy kernel
// takes 9.0 us at 384 bf16, 17% less.
// ============================================================================
template <class T, int kFixedC>
__global__ void __launch_bounds__(kRowThreads)
    pipelined_row_kernel(const T* x, std::int64_t ldx, T* y, std::int64_t ldy, const float* gamma, const float* beta,
                         float* mean, float* rstd, std::int64_t rows, float eps) {
  // @step pipelined
  // TODO(step 4a): step 3's kernel for kFixedC, as a loop over the rows r, r + W, ...
  //   (W = gridDim.x * kRowsPerBlock warps), with the next row's loads issued early.
  //   using Row = io::WarpRow16<T, kFixedC> (course/cuda/elem16.cuh) gives the lane's
  //   16-byte vectors: Row::load(x + r * ldx, lane, next) fills uint4 next[Row::kChunks]
  //   before the loop (if r < rows). In the loop: widen next into v (io::unpack16<T>, zeros
  //   where !Row::inside(k, lane)), THEN issue Row::load for row r + W (if < rows), then
  //   mean, variance, y (columns Row::column(k, lane)) and the statistics of row r from v.
  // @end
}

template <class T>
void launch_pipelined(const LayerNormArgs& a) {
  // @step pipelined
  // TODO(step 4b): delete the throw. Shapes step 3 would not vectorize, and C outside
  //   kLayerNormFastWidths, run launch_vectorized<T>(a). Otherwise dispatch on C
  //   (cc::dispatch_value<m04::kLayerNormFastWidths>) and launch
  //   pipelined_row_kernel<T, C> with cc::balanced_blocks(a.rows, kRowsPerBlock,
  //   cc::one_wave_blocks<kKernel>(kRowThreads)) blocks of kRowThreads threads.
  throw NotImplemented("layer_norm step pipelined", __FILE__);
  // @end
}

}  // namespace

void layer_norm_forward(LayerNormStep step, const LayerNormArgs& args) {
  m04::validate_layer_norm_args(args, step, "layer_norm_forward");
  if (args.rows == 0) return;  // nothing to do
  with_element_type(args.dtype, [&](auto t) {
    using T = decltype(t);
    switch (step) {
      case LayerNormStep::thread_per_row: return launch_thread_per_row<T>(args);
      case LayerNormStep::warp_per_row: return launch_warp_per_row<T>(args);
      case LayerNormStep::vectorized: return launch_vectorized<T>(args);
      case LayerNormStep::pipelined: return launch_pipelined<T>(args);
    }
  });
}

}  // namespace course::exercise
