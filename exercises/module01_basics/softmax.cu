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

#include <cfloat>
#include <cstdint>
#include <string>

namespace course::exercise {
namespace {

using m01::SoftmaxArgs;
using m01::SoftmaxStep;
namespace cc = ::course::cuda;

/// Where the slices of the matrix lie (given). A slice is one row (dim = 1) or one
/// column (dim = 0); element i of slice s is at  s * slice_stride + i * elem_stride.
///   dim = 1: count = rows, length = cols, slice stride = ld,  element stride = 1
///   dim = 0: count = cols, length = rows, slice stride = 1,   element stride = ld
struct Slices {
  std::int64_t count, length;
  std::int64_t x_slice, x_elem;
  std::int64_t y_slice, y_elem;
};

Slices slices_of(const SoftmaxArgs& a) {
  if (a.dim == 1) return {a.rows, a.cols, a.ldx, 1, a.ldy, 1};
  return {a.cols, a.rows, 1, a.ldx, 1, a.ldy};
}

unsigned grid_size(std::int64_t work, int per_block) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  require_arg(blocks <= 0x7fffffff, "softmax", "blocks", blocks, "exceeds the grid limit 2^31 - 1");
  return static_cast<unsigned>(blocks);
}

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
__global__ void naive_slice_max_kernel(const float* x, Slices sl, float* slice_max) {
  // TODO(step 1)
}

__global__ void naive_slice_sum_kernel(const float* x, Slices sl, const float* slice_max, float* slice_sum) {
  // TODO(step 1)
}

__global__ void naive_normalize_kernel(const float* x, float* y, Slices sl, const float* slice_max,
                                       const float* slice_sum) {
  // TODO(step 1)
}

void launch_naive_three_pass(const SoftmaxArgs& a) {
  const Slices sl = slices_of(a);
  float* slice_max = a.workspace;
  float* slice_sum = a.workspace + sl.count;
  // TODO(step 1): delete the throw, then launch the three kernels.
  (void)slice_max;
  (void)slice_sum;
  throw NotImplemented("softmax step naive_three_pass", __FILE__);
}

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
constexpr int kRowThreads = 256;
constexpr int kStripCols = 32;
constexpr int kStripRows = 16;

__global__ void __launch_bounds__(kRowThreads)
    block_row_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int cols) {
  __shared__ float scratch[cc::kWarpSize];
  // TODO(step 2a)
}

__global__ void __launch_bounds__(kStripCols* kStripRows)
    column_strip_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int rows, int cols) {
  __shared__ float red[kStripRows][kStripCols];
  // TODO(step 2b)
}

void launch_block_row(const SoftmaxArgs& a) {
  // TODO(step 2a): delete the throw; launch a.rows blocks of kRowThreads threads.
  throw NotImplemented("softmax step block_per_row (dim = 1: block_row_softmax_kernel)", __FILE__);
}

void launch_column_strip(const SoftmaxArgs& a) {
  // TODO(step 2b): delete the throw; launch ceil(cols / kStripCols) blocks of
  //                dim3(kStripCols, kStripRows) threads.
  throw NotImplemented("softmax step block_per_row (dim = 0: column_strip_softmax_kernel)", __FILE__);
}

void launch_block_per_row(const SoftmaxArgs& a) {
  if (a.dim == 1) launch_block_row(a);
  else launch_column_strip(a);
}

// ----------------------------------------------------------------------------
// Step 3: warp_per_row -- one warp per row, the row held in registers.
// Lane l keeps elements l, l + 32, l + 64, ... in `float v[kPerLane]`; rows up to
// 32 * kPerLane = 1024 columns. The row is read once; max and sum are warp shuffles.
//
// TODO(step 3): write warp_row_softmax_kernel.
// Hints, one at a time: bash scripts/course.sh hint softmax/warp_per_row
// ----------------------------------------------------------------------------
constexpr int kWarpsPerBlock = 8;

template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock* cc::kWarpSize)
    warp_row_softmax_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t rows, int cols) {
  // TODO(step 3)
}

template <int kPerLane>
void launch_warp_row(const SoftmaxArgs& a) {
  // TODO(step 3): delete the throw; launch ceil(rows / kWarpsPerBlock) blocks of
  //               kWarpsPerBlock * 32 threads of warp_row_softmax_kernel<kPerLane>.
  throw NotImplemented("softmax step warp_per_row", __FILE__);
}

void launch_warp_per_row(const SoftmaxArgs& a) {
  if (a.dim == 0) return launch_column_strip(a);  // your step 2b kernel
  if (a.cols <= 32) return launch_warp_row<1>(a);
  if (a.cols <= 64) return launch_warp_row<2>(a);
  if (a.cols <= 128) return launch_warp_row<4>(a);
  if (a.cols <= 256) return launch_warp_row<8>(a);
  if (a.cols <= 512) return launch_warp_row<16>(a);
  if (a.cols <= m01::kWarpPerRowMaxCols) return launch_warp_row<32>(a);
  launch_block_row(a);  // rows too long for registers: your step 2a kernel
}

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
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum online_update(MaxSum a, float x) {
  // TODO(step 4a)
  return a;
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  // TODO(step 4a)
  return a;
}

/// Merge the pairs of a whole 1-D block (given; it only calls your merge()). Every
/// thread gets the result; all threads of the block must call it. It is
/// cc::block_all_reduce (course/cuda/warp_reduce.cuh) on MaxSum pairs: Merge makes your
/// merge() its operator, and warp_shfl_xor shuffles a pair as two floats.
struct Merge {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const { return merge(a, b); }
};
__device__ MaxSum warp_shfl_xor(MaxSum v, int offset) {
  return {cc::warp_shfl_xor(v.m, offset), cc::warp_shfl_xor(v.s, offset)};
}
__device__ MaxSum block_merge(MaxSum v, MaxSum* scratch /* 32 entries */) {
  return cc::block_all_reduce(v, Merge{}, MaxSum{-FLT_MAX, 0.f}, scratch);
}

constexpr int kOnlineThreads = 256;

__global__ void __launch_bounds__(kOnlineThreads)
    online_row_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int cols, bool vec4) {
  __shared__ MaxSum scratch[cc::kWarpSize];
  // TODO(step 4b)
}

void launch_online_vectorized(const SoftmaxArgs& a) {
  if (a.dim == 0) return launch_column_strip(a);  // your step 2b kernel
  const bool vec4 = reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(a.y) % 16 == 0 && a.ldx % 4 == 0 && a.ldy % 4 == 0;
  // TODO(step 4b): delete the throw; launch a.rows blocks of kOnlineThreads threads.
  (void)vec4;
  throw NotImplemented("softmax step online_vectorized", __FILE__);
}


// ----------------------------------------------------------------------------
// Step 5: cluster_columns -- dim = 0 with x read ONCE (Hopper, sm_90).
//
// dim = 0 slices are columns: 16384 rows of one column are 64 KiB, more than a block's
// registers, so step 4 reads x twice. Here a thread-block CLUSTER of C blocks (they run
// together on one GPC and can read each other's shared memory: "distributed shared
// memory", DSMEM) owns a strip of kCols = 32 columns (one 128-byte line per row).
// Block `rank` of the cluster holds rows [rank * R, rank * R + R) of the strip in its
// shared memory (R = block_rows, <= 1024 rows = 128 KiB):
//   1. load     (given) cp.async copies of the block's R x 32 floats, then wait.
//   2. partial  TODO(step 5a): fold your elements into one (m, s) pair per column with
//               YOUR online_update, merge the block's pairs -> partial[32].
//   3. exchange TODO(step 5b): cluster.sync(); read the C partial[] arrays of the
//               cluster (cluster.map_shared_rank) and merge them IN RANK ORDER, so every
//               block gets the same (m, s); a second cluster barrier before exiting.
//   4. write    TODO(step 5c): y = exp(x - m) / s from shared memory.
// The launch (cluster attribute, cluster size, fallback to step 4 where the GPU cannot
// run it) is given. dim = 1 runs your online_vectorized.
// Hints, one at a time: bash scripts/course.sh hint softmax/cluster_columns
// ----------------------------------------------------------------------------
namespace cg = ::cooperative_groups;

constexpr int kCols = m01::kClusterStripCols;           // 32 columns per strip
constexpr int kClusterThreads = 512;
constexpr int kChunks = kCols / 4;                       // 8 float4 chunks per strip row
constexpr int kPhases = kClusterThreads / kChunks;       // 64 row phases
constexpr int kClusterMaxSmemBytes = static_cast<int>(m01::kClusterMaxBlockRows) * kCols * sizeof(float);

/// Thread t handles chunk tx = t % 8 (columns 4 tx .. 4 tx + 3 of the strip) of the
/// block's rows ty, ty + 64, ty + 128, ... (ty = t / 8), in every phase.
template <bool kVec>
__global__ void __launch_bounds__(kClusterThreads)
    cluster_columns_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int rows, int cols,
                           int block_rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ float4 strip[];  // [block_rows][8]: this block's rows of the strip
  __shared__ MaxSum partial[kCols];  // the block's (m, s) per column: read by the whole cluster
  __shared__ float2 column[kCols];   // (m, 1 / s) of each column, once merged
  const cg::cluster_group cluster = cg::this_cluster();
  const int blocks = static_cast<int>(cluster.num_blocks());  // C; blocks [k C, (k + 1) C) form cluster k
  const int rank = static_cast<int>(cluster.block_rank());
  const int tx = threadIdx.x % kChunks;
  const int ty = threadIdx.x / kChunks;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x / blocks) * kCols + 4 * tx;  // first column
  const int row0 = rank * block_rows;
  const int my_rows = max(0, min(block_rows, rows - row0));
  const int iters = ty < my_rows ? (my_rows - 1 - ty) / kPhases + 1 : 0;  // this thread's rows
  auto slot = [&](int k) { return strip + (ty + k * kPhases) * kChunks + tx; };  // its k-th chunk
  auto row_of = [&](int k) { return static_cast<std::int64_t>(row0) + ty + k * kPhases; };

  // ---- 1. load (given): every copy in flight, then wait for this thread's copies.
  for (int k = 0; k < iters; ++k) {
    const float* src = x + row_of(k) * ldx;
    float* d = reinterpret_cast<float*>(slot(k));
    if (kVec && c0 + 4 <= cols) {
      cc::cp_async_16_zfill(cc::smem_u32(d), src + c0, 16);
    } else {
      for (int u = 0; u < 4; ++u) {
        if (c0 + u < cols) cc::cp_async_4_zfill(cc::smem_u32(d + u), src + c0 + u, 4);
        else d[u] = 0.f;  // a column past the matrix: never written back
      }
    }
  }
  cc::cp_async_commit();
  cc::cp_async_wait<0>();  // a thread reads back only its own chunks: no __syncthreads needed

  // ---- 2. partial. TODO(step 5a)
  // ---- 3. exchange. TODO(step 5b)
  // ---- 4. write. TODO(step 5c): columns >= cols are not written; float4 stores only if kVec
  //      (cc::store_global4: one explicit 16-byte store, see hint 3).
  (void)y, (void)ldy, (void)partial, (void)column, (void)slot;
#else
  (void)x, (void)ldx, (void)y, (void)ldy, (void)rows, (void)cols, (void)block_rows;
  __trap();  // never launched: the host checks cluster_fits() first
#endif
}

/// Given: true when this GPU can run cluster_columns_kernel<kVec> in clusters of
/// `blocks` (compute capability 9.0+, the kernel built for sm_90+, and
/// cudaOccupancyMaxActiveClusters > 0 with 128 KiB blocks). Checked once per device.
template <bool kVec>
bool cluster_fits(int blocks) {
  static int known_device = -1;
  static bool fits[5] = {};
  int device = 0, major = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  int i = 0;
  while ((1 << i) < blocks) ++i;
  if (device == known_device) return fits[i];
  constexpr auto kernel = cluster_columns_kernel<kVec>;
  cudaFuncAttributes attr{};
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  COURSE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  for (int j = 0; j < 5; ++j) fits[j] = false;
  if (major >= 9 && attr.ptxVersion >= 90) {
    cc::opt_in_dynamic_smem<kernel>(kClusterMaxSmemBytes);
    const bool size16 = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    for (int j = 0; j < (size16 ? 5 : 4); ++j) {
      cudaLaunchAttribute cluster{};
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim = {1u << j, 1, 1};
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(1u << j);
      cfg.blockDim = dim3(kClusterThreads);
      cfg.dynamicSmemBytes = kClusterMaxSmemBytes;
      cfg.attrs = &cluster;
      cfg.numAttrs = 1;
      int active = 0;
      fits[j] = cudaOccupancyMaxActiveClusters(&active, kernel, &cfg) == cudaSuccess && active > 0;
    }
    (void)cudaGetLastError();  // a refused query must not surface at the next launch check
  }
  known_device = device;
  return fits[i];
}

/// Given: ceil(cols / 32) strips x C blocks, in clusters of C along x.
template <bool kVec>
void launch_cluster_kernel(const SoftmaxArgs& a, int blocks) {
  const std::int64_t block_rows = (a.rows + blocks - 1) / blocks;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {static_cast<unsigned>(blocks), 1, 1};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid_size(a.cols, kCols) * static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kClusterThreads);
  cfg.dynamicSmemBytes = static_cast<std::size_t>(block_rows) * kCols * sizeof(float);
  cfg.stream = a.stream;
  cfg.attrs = &cluster;
  cfg.numAttrs = 1;
  COURSE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_columns_kernel<kVec>, a.x, a.ldx, a.y, a.ldy,
                                       static_cast<int>(a.rows), static_cast<int>(a.cols),
                                       static_cast<int>(block_rows)));
  COURSE_CHECK_LAUNCH("cluster_columns_kernel");
}

void launch_cluster_columns(const SoftmaxArgs& a) {
  if (a.dim == 1) return launch_online_vectorized(a);  // your step 4
  // TODO(step 5): delete the throw once the kernel's phases 2-4 are written.
  throw NotImplemented("softmax step cluster_columns", __FILE__);
  const int blocks = m01::cluster_columns_blocks(a.rows);  // 0: a column taller than 16 x 1024 rows
  const bool vec4 = reinterpret_cast<std::uintptr_t>(a.x) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(a.y) % 16 == 0 && a.ldx % 4 == 0 && a.ldy % 4 == 0;
  if (blocks > 0 && vec4 && cluster_fits<true>(blocks)) return launch_cluster_kernel<true>(a, blocks);
  if (blocks > 0 && !vec4 && cluster_fits<false>(blocks)) return launch_cluster_kernel<false>(a, blocks);
  launch_online_vectorized(a);  // fallback: your step 4 (two passes over x)
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
  throw NotImplemented(std::string("softmax step ") + std::to_string(static_cast<int>(step)), __FILE__);
}

}  // namespace course::exercise
