/// @file softmax_planted.cu
/// @brief Deliberately wrong softmax kernels (see softmax_planted.hpp). Each is a
/// realistic mistake in an otherwise working one-thread-per-slice kernel (the cluster
/// bug: in a column-strip kernel spread over a thread-block cluster), so only the
/// planted bug separates it from a correct answer.

#include "softmax_planted.hpp"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

namespace course::planted {
namespace {

using m01::SoftmaxArgs;

/// Element i of slice s lives at s * slice + i * elem (see the solution's Slices).
struct Slices {
  std::int64_t count, length, x_slice, x_elem, y_slice, y_elem;
};

Slices slices_of(const SoftmaxArgs& a, int dim) {
  if (dim == 1) return {a.rows, a.cols, a.ldx, 1, a.ldy, 1};
  return {a.cols, a.rows, 1, a.ldx, 1, a.ldy};
}

enum class Bug { none, no_max, max_replaced_first, dropped_tail };

template <Bug kBug>
__global__ void planted_slice_kernel(const float* x, float* y, Slices sl) {
  const std::int64_t s = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= sl.count) return;
  const float* xs = x + s * sl.x_slice;
  float* ys = y + s * sl.y_slice;
  std::int64_t n = sl.length;
  if (kBug == Bug::dropped_tail) n = (sl.length / 4) * 4;  // BUG: "length / 4 float4 groups", no tail loop

  float m = 0.f;
  float sum = 0.f;
  if (kBug == Bug::no_max) {
    for (std::int64_t i = 0; i < n; ++i) sum += expf(xs[i * sl.x_elem]);  // BUG: no max subtracted
  } else if (kBug == Bug::max_replaced_first) {
    m = -FLT_MAX;
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = xs[i * sl.x_elem];
      const float m_new = fmaxf(m, v);
      m = m_new;                                 // BUG: replaced too early ...
      sum = sum * expf(m - m_new) + expf(v - m_new);  // ... so this factor is always 1
    }
  } else {  // none, dropped_tail: a correct max-then-sum over the first n elements
    m = -FLT_MAX;
    for (std::int64_t i = 0; i < n; ++i) m = fmaxf(m, xs[i * sl.x_elem]);
    for (std::int64_t i = 0; i < n; ++i) sum += expf(xs[i * sl.x_elem] - m);
  }
  const float inv = 1.f / sum;
  for (std::int64_t i = 0; i < n; ++i) ys[i * sl.y_elem] = expf(xs[i * sl.x_elem] - m) * inv;
}

template <Bug kBug>
void launch(const SoftmaxArgs& a, int dim, const char* name) {
  m01::validate_softmax_args(a, m01::SoftmaxStep::block_per_row, name);
  if (a.rows == 0 || a.cols == 0) return;
  const Slices sl = slices_of(a, dim);
  constexpr int kThreads = 128;
  const auto blocks = static_cast<unsigned>((sl.count + kThreads - 1) / kThreads);
  planted_slice_kernel<kBug><<<blocks, kThreads, 0, a.stream>>>(a.x, a.y, sl);
  COURSE_CHECK_LAUNCH(name);
}

/// A 32-column strip per cluster; block `rank` of the cluster owns rows
/// [rank * block_rows, (rank + 1) * block_rows) of it; 32 columns x 8 row phases per block.
constexpr int kStripCols = 32;
constexpr int kRowPhases = 8;

__global__ void __launch_bounds__(kStripCols* kRowPhases)
    planted_cluster_strip_kernel(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, int rows, int cols,
                                 int block_rows) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = ::cooperative_groups;
  __shared__ float red[kRowPhases][kStripCols];
  __shared__ float2 partial[kStripCols];  // (max, sum) of this block's rows of each column
  const cg::cluster_group cluster = cg::this_cluster();
  const int blocks = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int tx = threadIdx.x % kStripCols, ty = threadIdx.x / kStripCols;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x / blocks) * kStripCols + tx;
  const bool active = c < cols;
  const int r0 = rank * block_rows, r1 = min(rows, r0 + block_rows);

  float m = -FLT_MAX;
  if (active)
    for (int r = r0 + ty; r < r1; r += kRowPhases) m = fmaxf(m, x[r * ldx + c]);
  red[ty][tx] = m;
  __syncthreads();
  if (ty == 0) {
    for (int k = 1; k < kRowPhases; ++k) m = fmaxf(m, red[k][tx]);
    partial[tx].x = m;
  }
  __syncthreads();
  m = partial[tx].x;
  float s = 0.f;
  if (active)
    for (int r = r0 + ty; r < r1; r += kRowPhases) s += expf(x[r * ldx + c] - m);
  red[ty][tx] = s;
  __syncthreads();
  if (ty == 0) {
    for (int k = 1; k < kRowPhases; ++k) s += red[k][tx];
    partial[tx].y = s;
  }
  cluster.sync();
  // BUG: the exchange is skipped. The block's own (max, sum) stand in for the column's;
  // right: merge (*cluster.map_shared_rank(&partial[tx], b)) over b = 0 .. blocks - 1.
  const float2 all = partial[tx];
  cluster.sync();
  if (active)
    for (int r = r0 + ty; r < r1; r += kRowPhases) y[r * ldy + c] = expf(x[r * ldx + c] - all.x) / all.y;
#else
  (void)x, (void)ldx, (void)y, (void)ldy, (void)rows, (void)cols, (void)block_rows;
  __trap();  // never launched: the host checks for sm_90 first
#endif
}

}  // namespace

void softmax_no_max_subtraction(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  launch<Bug::no_max>(args, args.dim, "softmax_no_max_subtraction");
}

void softmax_max_replaced_first(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  launch<Bug::max_replaced_first>(args, args.dim, "softmax_max_replaced_first");
}

void softmax_dropped_tail(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  launch<Bug::dropped_tail>(args, args.dim, "softmax_dropped_tail");
}

void softmax_wrong_dim(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  // BUG: a row kernel reused for every call; args.dim never looked at.
  launch<Bug::none>(args, /*dim=*/1, "softmax_wrong_dim");
}

void softmax_cluster_no_exchange(m01::SoftmaxStep, const m01::SoftmaxArgs& args) {
  const char* name = "softmax_cluster_no_exchange";
  if (args.dim == 1) return launch<Bug::none>(args, 1, name);
  m01::validate_softmax_args(args, m01::SoftmaxStep::cluster_columns, name);
  if (args.rows == 0 || args.cols == 0) return;
  int device = 0, major = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaFuncAttributes attr{};
  COURSE_CUDA_CHECK(cudaFuncGetAttributes(&attr, planted_cluster_strip_kernel));
  if (major < 9 || attr.ptxVersion < 90)
    throw Unsupported(name, "thread-block clusters: a GPU of compute capability 9.0+ and a build with sm_90 code");
  int blocks = m01::cluster_columns_blocks(args.rows);
  if (blocks == 0 || blocks > 8) blocks = 8;  // a portable cluster size
  const std::int64_t block_rows = (args.rows + blocks - 1) / blocks;
  const std::int64_t strips = (args.cols + kStripCols - 1) / kStripCols;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {static_cast<unsigned>(blocks), 1, 1};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(strips * blocks));
  cfg.blockDim = dim3(kStripCols * kRowPhases);
  cfg.stream = args.stream;
  cfg.attrs = &cluster;
  cfg.numAttrs = 1;
  COURSE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, planted_cluster_strip_kernel, args.x, args.ldx, args.y, args.ldy,
                                       static_cast<int>(args.rows), static_cast<int>(args.cols),
                                       static_cast<int>(block_rows)));
  COURSE_CHECK_LAUNCH(name);
}

}  // namespace course::planted
