/// @file softmax.cu
/// @brief YOUR ladder for softmax along a dimension of a 2-D matrix (module 1).
///
/// Read module01_basics/include/module01/softmax.hpp first (what dim = 0 and dim = 1
/// mean, the layout with row strides ldx/ldy, in place), then fill in one step at a time.
/// Run its tests with:   ctest --preset default -L exercise -R Softmax
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint softmax/<step>`
/// (all of them: exercises/module01_basics/hints/softmax.md).
///
/// Every kernel must be correct when y == x (in place): read an element before you
/// write it, from the same thread, and finish all reads a reduction needs before the
/// barrier that ends the reduction.

#include "module01/softmax.hpp"

#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/vec.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <array>
#include <cfloat>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace course::exercise {
namespace {

using m01::SoftmaxArgs;
using m01::SoftmaxStep;
namespace cc = ::course::cuda;

constexpr float kLog2e = 1.4426950408889634f;

/// exp(x) as one multiply and one MUFU.EX2 (2^x). Its error grows with |x|
/// (~|x| * 2^-24 relative); softmax only feeds it x <= 0, and the terms with large
/// |x| are the tiny ones, so the error that reaches y stays a few ulp.
__device__ __forceinline__ float fast_exp(float x) { return exp2f(x * kLog2e); }

/// Where the slices of a 2-D matrix lie: element i of slice s is at
/// base + s * slice_stride + i * elem_stride. dim = 1: slices are rows (elem_stride 1),
/// dim = 0: slices are columns (elem_stride = the row stride).
struct Slices {
  std::int64_t count;      ///< number of slices
  std::int64_t length;     ///< elements per slice
  std::int64_t x_slice, x_elem;
  std::int64_t y_slice, y_elem;
};

Slices slices_of(const SoftmaxArgs& a) {
  if (a.dim == 1) return {a.rows, a.cols, a.ldx, 1, a.ldy, 1};
  return {a.cols, a.rows, 1, a.ldx, 1, a.ldy};
}

unsigned blocks_for(std::int64_t work, int per_block, const char* step) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  require_arg(blocks <= 0x7fffffff, step, "blocks", blocks, "exceeds the grid limit 2^31 - 1");
  return static_cast<unsigned>(blocks);
}

// @step naive_three_pass  (step 1: the section's comment)
// ----------------------------------------------------------------------------
// Step 1: naive_three_pass -- three kernels, one thread per slice.
//   kernel 1: slice_max[s] = max_i x(s, i)
//   kernel 2: slice_sum[s] = sum_i exp(x(s, i) - slice_max[s])
//   kernel 3: y(s, i) = exp(x(s, i) - slice_max[s]) / slice_sum[s]
// The workspace (args.workspace) holds slice_max (count floats) then slice_sum.
//
// TODO(step 1): write the three kernels and launch them in order on a.stream.
// Hints, one at a time: bash scripts/course.sh hint softmax/naive_three_pass
// Then measure dim = 0 against dim = 1: same code, very different speed. Why?
// ----------------------------------------------------------------------------
// @end
__global__ void naive_slice_max_kernel(const float* x, Slices sl, float* slice_max) {
  // @step naive_three_pass
  // TODO(step 1)
  // @end
}

__global__ void naive_slice_sum_kernel(const float* x, Slices sl, const float* slice_max, float* slice_sum) {
  // @step naive_three_pass
  // TODO(step 1)
  // @end
}

__global__ void naive_normalize_kernel(const float* x, float* y, Slices sl, const float* slice_max,
                                       const float* slice_sum) {
  // @step naive_three_pass
  // TODO(step 1)
  // @end
}

void launch_naive_three_pass(const SoftmaxArgs& a) {
  // @step naive_three_pass
  const Slices sl = slices_of(a);
  float* slice_max = a.workspace;
  float* slice_sum = a.workspace + sl.count;
  // TODO(step 1): delete the throw, then launch the three kernels.
  (void)slice_max;
  (void)slice_sum;
  throw NotImplemented("softmax step naive_three_pass", __FILE__);
  // @end
}

// @step block_per_row  (steps 2a and 2b: the section's comment)
// ----------------------------------------------------------------------------
// Step 2: block_per_row -- one block per row (dim = 1), coalesced loads.
//
// TODO(step 2a): in block_row_softmax_kernel, blockIdx.x is the row. The block's
//   threads stride over the row three times: max, sum of exp(x - max), normalize.
// Hints, one at a time: bash scripts/course.sh hint softmax/block_per_row
//
// TODO(step 2b): column_strip_softmax_kernel, for dim = 0 (also used by steps 3 and 4).
//   One column per thread would be coalesced but too few threads for tall matrices;
//   instead a block of (kStripCols = 32, kStripRows = 16) threads owns 32 neighbouring
//   columns: threadIdx.x picks the column, threadIdx.y the rows y, y + 16, y + 32, ...
// ----------------------------------------------------------------------------
// @end
constexpr int kRowThreads = 256;

__global__ void __launch_bounds__(kRowThreads)
    block_row_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int cols) {
  __shared__ float scratch[cc::kWarpSize];
  // @step block_per_row  (step 2a)
  // TODO(step 2a)
  // @end
}

void launch_block_row(const SoftmaxArgs& a) {
  // @step block_per_row  (step 2a)
  // TODO(step 2a): delete the throw; launch a.rows blocks of kRowThreads threads.
  throw NotImplemented("softmax step block_per_row (dim = 1: block_row_softmax_kernel)", __FILE__);
  // @end
}

constexpr int kStripCols = 32;  // = warp size: one warp reads one 128-byte row segment
constexpr int kStripRows = 16;  // row phases per block: 32 x 16 = 512 threads

// @step block_per_row  (step 2b: the strip's reduction is the learner's)
// @end
__global__ void __launch_bounds__(kStripCols* kStripRows)
    column_strip_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int rows, int cols) {
  __shared__ float red[kStripRows][kStripCols];
  // @step block_per_row  (step 2b)
  // TODO(step 2b)
  // @end
}

void launch_column_strip(const SoftmaxArgs& a) {
  // @step block_per_row  (step 2b)
  // TODO(step 2b): delete the throw; launch ceil(cols / kStripCols) blocks of
  //                dim3(kStripCols, kStripRows) threads.
  throw NotImplemented("softmax step block_per_row (dim = 0: column_strip_softmax_kernel)", __FILE__);
  // @end
}

void launch_block_per_row(const SoftmaxArgs& a) {
  if (a.dim == 1) launch_block_row(a);
  else launch_column_strip(a);
}

// @step warp_per_row  (step 3: the section's comment)
// ----------------------------------------------------------------------------
// Step 3: warp_per_row -- one warp per row, the row held in registers.
// Lane l keeps elements l, l + 32, l + 64, ... in `float v[kPerLane]`; rows up to
// 32 * kPerLane = 1024 columns. The row is read once; max and sum are warp shuffles.
//
// TODO(step 3): write warp_row_softmax_kernel.
// Hints, one at a time: bash scripts/course.sh hint softmax/warp_per_row
// ----------------------------------------------------------------------------
// @end
constexpr int kWarpsPerBlock = 8;

template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t rows, int cols) {
  // @step warp_per_row
  // TODO(step 3)
  // @end
}

template <int kPerLane>
void launch_warp_row(const SoftmaxArgs& a) {
  // @step warp_per_row
  // TODO(step 3): delete the throw; launch ceil(rows / kWarpsPerBlock) blocks of
  //               kWarpsPerBlock * 32 threads of warp_row_softmax_kernel<kPerLane>.
  throw NotImplemented("softmax step warp_per_row", __FILE__);
  // @end
}

void launch_warp_per_row(const SoftmaxArgs& a) {
  if (a.dim == 0) return launch_column_strip(a);
  if (a.cols <= 32) return launch_warp_row<1>(a);
  if (a.cols <= 64) return launch_warp_row<2>(a);
  if (a.cols <= 128) return launch_warp_row<4>(a);
  if (a.cols <= 256) return launch_warp_row<8>(a);
  if (a.cols <= 512) return launch_warp_row<16>(a);
  if (a.cols <= m01::kWarpPerRowMaxCols) return launch_warp_row<32>(a);
  launch_block_row(a);  // too long for registers
}

// @step online_vectorized  (steps 4a and 4b: the section's comment)
// ----------------------------------------------------------------------------
// Step 4: online_vectorized -- the max and the sum in ONE pass, float4 loads.
//
// A running pair (m, s): m = the max so far, s = sum of exp(x_i - m) so far.
// TODO(step 4a): online_update folds one value x into (m, s);
//                merge combines two pairs (two threads' partial results).
// Hints, one at a time: bash scripts/course.sh hint softmax/online_vectorized
//
// TODO(step 4b): online_row_kernel, one block of kOnlineThreads per row (dim = 1):
//   pass 1 reads the row once in float4 chunks and folds them into (m, s); block_merge
//   (given) combines the pairs; pass 2 re-reads the row and writes y.
// ----------------------------------------------------------------------------
// @end

/// A running softmax state: the max so far and the sum of exp(x_i - m) so far.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum empty_max_sum() { return {-FLT_MAX, 0.f}; }

// @step online_vectorized  (step 4a: the online update and the merge)
__device__ __forceinline__ MaxSum online_update(MaxSum a, float x) {
  // TODO(step 4a)
  return a;
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  // TODO(step 4a)
  return a;
}
// @end

/// merge() as a functor, and the shuffle of a pair: with them the common warp and block
/// reductions (course/cuda/warp_reduce.cuh) combine MaxSum pairs like plain floats.
struct Merge {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const { return merge(a, b); }
};
__device__ __forceinline__ MaxSum warp_shfl_xor(MaxSum v, int offset) {
  return {cc::warp_shfl_xor(v.m, offset), cc::warp_shfl_xor(v.s, offset)};
}

/// Warp-wide merge; every lane gets the result.
__device__ __forceinline__ MaxSum warp_merge(MaxSum v) { return cc::warp_all_reduce(v, Merge{}); }

/// Block-wide merge; every thread gets the result. blockDim.x % 32 == 0, 1-D block.
__device__ __forceinline__ MaxSum block_merge(MaxSum v, MaxSum* scratch /* >= 32 */) {
  return cc::block_all_reduce(v, Merge{}, empty_max_sum(), scratch);
}

// @step online_vectorized  (step 4b: the kernels)
constexpr int kOnlineThreads = 256;

__global__ void __launch_bounds__(kOnlineThreads)
    online_row_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int cols, bool vec4) {
  __shared__ MaxSum scratch[cc::kWarpSize];
  // TODO(step 4b)
}
// @end

/// float4 loads and stores are legal: x and y 16-byte aligned, row strides multiples of 4.
bool float4_ok(const SoftmaxArgs& a) {
  return reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(a.y) % 16 == 0 &&
         a.ldx % 4 == 0 && a.ldy % 4 == 0;
}

void launch_online_vectorized(const SoftmaxArgs& a) {
  // @step online_vectorized  (step 4b: the launch)
  if (a.dim == 0) return launch_column_strip(a);  // your step 2b kernel
  const bool vec4 = float4_ok(a);
  // TODO(step 4b): delete the throw; launch a.rows blocks of kOnlineThreads threads.
  (void)vec4;
  throw NotImplemented("softmax step online_vectorized", __FILE__);
  // @end
}


// @step cluster_columns  (step 5: the section's comment)
// ----------------------------------------------------------------------------
// Step 5: cluster_columns -- dim = 0 with x read ONCE (Hopper, sm_90).
//
// dim = 0 slices are columns: 16384 rows of one column are 64 KiB, more than a block's
// registers, so step 4 reads x twice. Here a thread-block CLUSTER of C blocks (they run
// together on one GPC and can read each other's shared memory: "distributed shared
// memory", DSMEM) owns a strip of kClusterCols = 32 columns (one 128-byte line per row).
// Block `rank` of the cluster holds rows [rank * R, rank * R + R) of the strip on chip
// (R = block_rows <= 1024 rows = 128 KiB): its first 256 rows in registers, the rest
// (<= 96 KiB) in shared memory, so that two blocks share an SM.
//   1. load     (given) thread (tx, ty) owns chunk tx (columns 4 tx .. 4 tx + 3) of the
//               rows ty, ty + 64, ...: its chunks k < kClusterHeldChunks = 4 in
//               `float4 held[4]`, the chunks 4 <= k < iters at *slot(k) in shared memory,
//               copied by cp.async in `groups` groups that are still in flight.
//   2. partial  TODO(step 5a): wait for your cp.async groups; fold your elements into one
//               (m, s) pair per column with YOUR online_update, merge the block's pairs
//               -> partial[32].
//   3. exchange TODO(step 5b): cluster.sync(); read the C partial[] arrays of the
//               cluster (cluster.map_shared_rank) and merge them IN RANK ORDER, so every
//               block gets the same (m, s); a second cluster barrier before exiting.
//   4. write    TODO(step 5c): y = exp(x - m) / s from registers and shared memory.
// The launch (cluster attribute, cluster size, fallback to step 4 where the GPU cannot
// run it) is given. dim = 1 runs your online_vectorized.
// Hints, one at a time: bash scripts/course.sh hint softmax/cluster_columns
// ----------------------------------------------------------------------------
// @end
namespace cg = ::cooperative_groups;

constexpr int kClusterCols = m01::kClusterStripCols;           // W = 32: one 128-byte line per row
constexpr int kClusterThreads = 512;
constexpr int kClusterChunks = kClusterCols / 4;                // 8 float4 chunks per row of the strip
constexpr int kClusterPhases = kClusterThreads / kClusterChunks;  // 64 row phases
constexpr int kClusterWarps = kClusterThreads / cc::kWarpSize;  // 16
constexpr int kClusterBatch = 4;  // chunks per online_update4 and per cp.async group
/// A thread's first kClusterHeldChunks chunks (rows ty, ty + 64, ty + 128, ty + 192) stay in
/// registers; only the rest go through shared memory.
constexpr int kClusterHeldChunks = 4;
constexpr int kClusterHeldRows = kClusterHeldChunks * kClusterPhases;  // 256 rows of a block
constexpr int kClusterMaxChunks = static_cast<int>(m01::kClusterMaxBlockRows) / kClusterPhases;  // 16
constexpr int kClusterMaxGroups = (kClusterMaxChunks - kClusterHeldChunks) / kClusterBatch;     // 3
/// Dynamic shared memory of a block of `block_rows` rows: the rows past the held ones.
constexpr std::size_t cluster_smem_bytes(std::int64_t block_rows) {
  return static_cast<std::size_t>(block_rows > kClusterHeldRows ? block_rows - kClusterHeldRows : 0) * kClusterCols *
         sizeof(float);
}
constexpr int kClusterMaxSmemBytes = static_cast<int>(cluster_smem_bytes(m01::kClusterMaxBlockRows));  // 96 KiB
static_assert(m01::kClusterMaxBlockRows % kClusterPhases == 0 &&
                  (kClusterMaxChunks - kClusterHeldChunks) % kClusterBatch == 0,
              "a full block's shared chunks form whole cp.async groups");
static_assert(kClusterWarps * cc::kWarpSize == kClusterThreads && kClusterPhases % (cc::kWarpSize / kClusterChunks) == 0,
              "whole warps, each covering whole rows of the strip");
static_assert(kClusterMaxGroups == 3, "cp_async_wait_pending has one case per pending count 0..2");
static_assert(kClusterWarps >= m01::kClusterMaxBlocks && kClusterThreads == m01::kClusterMaxBlocks * kClusterCols,
              "phase 3: one thread per (block, column) pair, gathered into pairs[16][32]");

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // used only by the sm_90 kernel body below
/// Wait until at most `pending` of this thread's cp.async groups are in flight
/// (cp.async.wait_group takes an immediate: one case per possible count).
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 0: cc::cp_async_wait<0>(); break;
    case 1: cc::cp_async_wait<1>(); break;
    default: cc::cp_async_wait<kClusterMaxGroups - 1>(); break;
  }
}
#endif

/// Phase 1 for one 4-column chunk of one row kept in shared memory: global row `src` ->
/// shared `dst`. Columns >= cols are not read; their slots get 0 (their statistics are never used).
template <bool kVec>
__device__ __forceinline__ void load_strip_chunk(float4* dst, const float* src, std::int64_t c0, int cols) {
  if (kVec && c0 + 4 <= cols) {
    cc::cp_async_16_zfill(cc::smem_u32(dst), src + c0, 16);
    return;
  }
  float* d = reinterpret_cast<float*>(dst);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    if (c0 + u < cols) cc::cp_async_4_zfill(cc::smem_u32(d + u), src + c0 + u, 4);
    else d[u] = 0.f;
  }
}

/// Phase 1 for one chunk held in registers: a plain load (not the read-only path: y may be x).
template <bool kVec>
__device__ __forceinline__ float4 load_held_chunk(const float* src, std::int64_t c0, int cols) {
  if (kVec && c0 + 4 <= cols) return *reinterpret_cast<const float4*>(src + c0);
  float e[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) e[u] = c0 + u < cols ? src[c0 + u] : 0.f;
  return make_float4(e[0], e[1], e[2], e[3]);
}

// @step cluster_columns  (step 5c: the store of phase 4)
// @end
/// Thread t handles chunk column tx = t % 8 (columns 4 tx .. 4 tx + 3 of the strip) of
/// rows ty, ty + 64, ty + 128, ... (ty = t / 8) of its block's rows, in every phase: it
/// reads back only what it loaded itself, so phases 1-2 need no block barrier. Its
/// chunks 0-3 live in registers (held[]), chunks 4.. in shared memory (slot(k)).
template <bool kVec>
__global__ void __launch_bounds__(kClusterThreads, 2)
    cluster_columns_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int rows, int cols,
                           int block_rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ float4 strip[];                      // [block_rows - 256][8]: this block's x past the held rows
  __shared__ MaxSum pairs[kClusterWarps][kClusterCols];  // phase 2: per warp; phase 3: per block of the cluster
  __shared__ MaxSum partial[kClusterCols];               // the block's pairs: read by the whole cluster
  __shared__ float2 column[kClusterCols];                // (max, 1 / sum) of each column
  const cg::cluster_group cluster = cg::this_cluster();
  const int blocks = static_cast<int>(cluster.num_blocks());  // C; the cluster is blocks [k C, (k + 1) C)
  const int rank = static_cast<int>(cluster.block_rank());
  const int tx = threadIdx.x % kClusterChunks;
  const int ty = threadIdx.x / kClusterChunks;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x / blocks) * kClusterCols + 4 * tx;
  const int row0 = rank * block_rows;
  const int my_rows = max(0, min(block_rows, rows - row0));
  const int iters = ty < my_rows ? (my_rows - 1 - ty) / kClusterPhases + 1 : 0;  // this thread's chunks
  const int groups = (max(iters - kClusterHeldChunks, 0) + kClusterBatch - 1) / kClusterBatch;
  auto slot = [&](int k) { return strip + (ty + (k - kClusterHeldChunks) * kClusterPhases) * kClusterChunks + tx; };
  auto row_of = [&](int k) { return static_cast<std::int64_t>(row0) + ty + k * kClusterPhases; };

  // ---- 1. load: every copy in flight. Shared chunks by cp.async, one group per
  // kClusterBatch chunks; then the held chunks by plain loads into registers.
  for (int g = 0; g < groups; ++g) {
    const int k0 = kClusterHeldChunks + g * kClusterBatch;
    for (int k = k0; k < min(iters, k0 + kClusterBatch); ++k)
      load_strip_chunk<kVec>(slot(k), x + row_of(k) * ldx, c0, cols);
    cc::cp_async_commit();
  }
  float4 held[kClusterHeldChunks];
#pragma unroll
  for (int k = 0; k < kClusterHeldChunks; ++k)
    held[k] = k < iters ? load_held_chunk<kVec>(x + row_of(k) * ldx, c0, cols) : make_float4(0.f, 0.f, 0.f, 0.f);

  // @step cluster_columns  (steps 5a, 5b, 5c: phases 2-4)
  // ---- 2. partial. TODO(step 5a): cc::cp_async_wait<0>() first (your shared chunks have
  //      landed), then fold held[k] (k < 4) and *slot(k) (4 <= k), for k < iters.
  // ---- 3. exchange. TODO(step 5b)
  // ---- 4. write. TODO(step 5c): columns >= cols are not written; float4 stores only if kVec
  //      (cc::store_global4: one explicit 16-byte store, see hint 3).
  (void)y, (void)ldy, (void)pairs, (void)partial, (void)column, (void)held;
  // @end
#else
  (void)x, (void)ldx, (void)y, (void)ldy, (void)rows, (void)cols, (void)block_rows;
  __trap();  // never launched: the host checks cluster_columns_fits() first
#endif
}

/// The launch configuration of cluster_columns_kernel: `grid` blocks in clusters of `blocks`.
cudaLaunchConfig_t cluster_launch_config(unsigned grid, int blocks, std::size_t smem_bytes, cudaStream_t stream,
                                         cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(blocks);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kClusterThreads);
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

/// True when cluster_columns_kernel<kVec> can run clusters of `blocks` blocks (1..16) on
/// the current GPU: compute capability >= 9.0, the kernel compiled for sm_90+ (a
/// compute_80 build JIT-compiled on Hopper holds only the __trap), and at least one
/// such cluster of full blocks (96 KiB of dynamic shared memory each) fits the GPU
/// (cudaOccupancyMaxActiveClusters). Opts the kernel into those 96 KiB and, for 16, the
/// non-portable size.
/// Cached per device.
template <bool kVec>
bool cluster_columns_fits(int blocks) {
  static std::mutex mutex;
  static std::vector<std::pair<int, std::array<bool, 5>>> known;  // device -> fits, per log2(blocks)
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  int log2_blocks = 0;
  while ((1 << log2_blocks) < blocks) ++log2_blocks;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [d, fits] : known)
    if (d == device) return fits[log2_blocks];

  std::array<bool, 5> fits{};
  int major = 0;
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaFuncAttributes attr{};
  COURSE_CUDA_CHECK(cudaFuncGetAttributes(&attr, cluster_columns_kernel<kVec>));
  if (major >= 9 && attr.ptxVersion >= 90) {
    constexpr auto kernel = cluster_columns_kernel<kVec>;
    cc::opt_in_dynamic_smem<kernel>(kClusterMaxSmemBytes);
    // Refused (an error, not a crash) where the GPU has no non-portable sizes: then 16 does not fit.
    const bool nonportable = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    (void)cudaGetLastError();
    for (int i = 0; i < 5; ++i) {
      const int c = 1 << i;
      if (c > 8 && !nonportable) break;
      cudaLaunchAttribute cluster{};
      const cudaLaunchConfig_t cfg = cluster_launch_config(static_cast<unsigned>(c), c, kClusterMaxSmemBytes, nullptr, &cluster);
      int active = 0;
      fits[i] = cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) == cudaSuccess && active > 0;
      (void)cudaGetLastError();  // a refused query must not surface at the next launch check
    }
  }
  known.emplace_back(device, fits);
  return fits[log2_blocks];
}

template <bool kVec>
void launch_cluster_columns_kernel(const SoftmaxArgs& a, int blocks) {
  const std::int64_t block_rows = (a.rows + blocks - 1) / blocks;
  const std::int64_t strips = (a.cols + kClusterCols - 1) / kClusterCols;
  cudaLaunchAttribute cluster{};
  const cudaLaunchConfig_t cfg = cluster_launch_config(blocks_for(strips * blocks, 1, "cluster_columns"), blocks,
                                                       cluster_smem_bytes(block_rows), a.stream, &cluster);
  COURSE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_columns_kernel<kVec>, a.x, a.ldx, a.y, a.ldy,
                                       static_cast<int>(a.rows), static_cast<int>(a.cols),
                                       static_cast<int>(block_rows)));
  COURSE_CHECK_LAUNCH("cluster_columns_kernel");
}

void launch_cluster_columns(const SoftmaxArgs& a) {
  if (a.dim == 1) return launch_online_vectorized(a);
  // @step cluster_columns  (the stub's NotImplemented until phases 2-4 are written)
  // TODO(step 5): delete the throw once the kernel's phases 2-4 are written.
  throw NotImplemented("softmax step cluster_columns", __FILE__);
  // @end
  const int blocks = m01::cluster_columns_blocks(a.rows);  // 0: columns too tall to hold
  const bool vec4 = float4_ok(a);
  if (blocks > 0 && vec4 && cluster_columns_fits<true>(blocks))
    return launch_cluster_columns_kernel<true>(a, blocks);
  if (blocks > 0 && !vec4 && cluster_columns_fits<false>(blocks))
    return launch_cluster_columns_kernel<false>(a, blocks);
  launch_online_vectorized(a);  // the fallback: two-pass column strips
}

}  // namespace

void softmax(SoftmaxStep step, const SoftmaxArgs& args) {
  m01::validate_softmax_args(args, step, "softmax");
  if (args.rows == 0 || args.cols == 0) return;  // empty: nothing to do
  switch (step) {
    case SoftmaxStep::naive_three_pass: return launch_naive_three_pass(args);
    case SoftmaxStep::block_per_row: return launch_block_per_row(args);
    case SoftmaxStep::warp_per_row: return launch_warp_per_row(args);
    case SoftmaxStep::online_vectorized: return launch_online_vectorized(args);
    case SoftmaxStep::cluster_columns: return launch_cluster_columns(args);
  }
  require_arg(false, "softmax", "step", static_cast<int>(step), "is not a SoftmaxStep");
}

}  // namespace course::exercise
