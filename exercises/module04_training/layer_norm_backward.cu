/// @file layer_norm_backward.cu
/// @brief YOUR ladder for the LayerNorm backward (module 4): with xhat = (x - mean) * rstd
/// and g = dy * gamma, per row  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  and per
/// column  dgamma = sum over rows of dy * xhat,  dbeta = sum over rows of dy.
///
/// Read module04_training/include/module04/layer_norm_backward.hpp first (the formula, the
/// accumulate flags, the workspace), then fill in one step at a time. Run its tests with:
///   ctest --preset default -L exercise -R LayerNorm
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint layer_norm_backward/<step>`
/// (all of them: exercises/module04_training/hints/layer_norm_backward.md).

#include "module04/layer_norm_backward.hpp"

#include "course/cuda/elem16.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace course::exercise {
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
  // TODO(step 1): a warp per row (as the forward's warp_per_row; return if r >= rows).
  //   Sweep 1 (j = lane, lane + 32, ...): xhat = (x - mean[r]) * rstd[r], g = dy * gamma[j];
  //   sum g and g * xhat, then cc::warp_sum each and divide by C.
  //   Sweep 2: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (+ the old dx when
  //   accumulate_dx), and atomicAdd(dgamma + j, dy * xhat), atomicAdd(dbeta + j, dy).
  // @end
}

template <class T>
void launch_atomic_params(const LayerNormBackwardArgs& a) {
  // @step atomic_params
  // TODO(step 1): delete the throw; zero_params_unless_accumulating(a), then launch
  //   blocks_for(a.rows, kRowsPerBlock, ...) blocks of kRowThreads threads of
  //   atomic_row_kernel<T> and COURSE_CHECK_LAUNCH.
  throw NotImplemented("layer_norm_backward step atomic_params", __FILE__);
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
  // TODO(step 2a): warp w of block b takes rows b * 8 + w, + gridDim.x * 8, ...; per row load
  //   x and dy as 16-byte vectors (io::load16, vector vi = k * 32 + lane < nvec), compute the
  //   two row sums, write dx (io::store16), and add dy * xhat, dy into float ag[kChunks][kN],
  //   ab[kChunks][kN] (registers, over all the warp's rows).
  // TODO(step 2b): then the block's warps add ag, ab into block_sum (shared, 2 * C floats:
  //   dgamma part at c, dbeta part at C + c) IN WARP ORDER: warp 0 writes, warps 1..7 add,
  //   a __syncthreads() after each; the block writes block_sum to partials + blockIdx.x * 2C.
  // @end
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    block_stream_kernel(const T* x, std::int64_t ldx, const T* dy, std::int64_t lddy, T* dx, std::int64_t lddx,
                        const float* gamma, const float* mean, const float* rstd, std::int64_t rows, std::int64_t C,
                        bool accumulate_dx, float* partials) {
  // @step partial_sums  (the generic rows: a block per row, partials in the workspace)
  // TODO(step 2c): rows the register kernel cannot hold: block b takes rows b, b + gridDim.x,
  //   ...; thread t handles columns t, t + 256, ...; row sums with cc::block_all_reduce; the
  //   contributions go straight into the block's partial (pg = partials + b * 2C, pb = pg + C),
  //   zeroed first (only thread t ever touches column t of it: deterministic).
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
  // TODO(step 2d): i = blockIdx.x * 32 + threadIdx.x % 32 (< 2C), strand = threadIdx.x / 32:
  //   sum partials[p * 2C + i] for p = strand, strand + 8, ... < P; the 8 strands meet in
  //   shared memory and are added IN STRAND ORDER; write (or add to) dgamma[i] (i < C) or
  //   dbeta[i - C].
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
  // TODO(step 2e): delete the throw. P = m04::layer_norm_backward_partials(a.rows) blocks.
  //   With 16-byte rows (C % kN == 0, every ld % kN == 0, x, dy, dx, gamma aligned): for C in
  //   m04::kLayerNormFastWidths, cc::dispatch_value to launch_partial_rows<T, kChunks, kC>;
  //   else launch_partial_rows<T, kChunks, 0> with kChunks = 1, 2, 4 (or 8 for fp32) by
  //   nvec = C / kN. Otherwise block_stream_kernel<T>. Then launch_reduce_partials(a, P)
  //   (it launches your reduce_partials_kernel).
  throw NotImplemented("layer_norm_backward step partial_sums", __FILE__);
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
  // TODO(step 3a): step 2's kernel for kFixedC with its column sums in shared memory and the
  //   next row prefetched. using Row = io::WarpRow16<T, kFixedC>, Slots = ColumnSumSlots<T,
  //   kFixedC>. Warp w's region: regions + w * 2 * kSlots (dy * xhat sums), then kSlots more
  //   (dy sums); zero it, __syncwarp(). Rows r, r + W, ... (W = gridDim.x * kRowsPerBlock):
  //   Row::load the first row's x and dy (uint4 raw, kChunks each) and its mean, rstd before
  //   the loop; in the loop widen them (io::unpack16<T>) into xhat and dy, THEN load the
  //   next row's, then step 2's two row sums, dx, and for each float4 slot
  //   (k * kHalves + h) * 32 + lane add dy * xhat and dy of columns Row::column(k, lane) + 4h
  //   .. + 3. After the loop: __syncthreads(), and thread t adds slot t, t + 256, ... of the
  //   8 regions IN WARP ORDER into the block's partial (partials + blockIdx.x * 2 * kFixedC:
  //   dgamma part, then dbeta part).
  // @end
}

template <class T>
void launch_pipelined(const LayerNormBackwardArgs& a) {
  // @step pipelined
  // TODO(step 3b): delete the throw. Shapes step 2 would not vectorize, and C outside
  //   kLayerNormFastWidths, run launch_partial_sums<T>(a). Otherwise dispatch on C to
  //   kKernel = pipelined_rows_kernel<T, kC> with kSmem = ColumnSumSlots<T, kC>::kSmemBytes
  //   (cc::opt_in_dynamic_smem<kKernel>(kSmem) first): blocks = cc::balanced_blocks(a.rows,
  //   kRowsPerBlock, min(cc::one_wave_blocks<kKernel>(kRowThreads, kSmem),
  //   m04::layer_norm_backward_partials(a.rows))); then launch_reduce_partials(a, blocks,
  //   /*early=*/true): the reduction starts as soon as the rows kernel lets it (comment (d)).
  throw NotImplemented("layer_norm_backward step pipelined", __FILE__);
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

}  // namespace course::exercise
