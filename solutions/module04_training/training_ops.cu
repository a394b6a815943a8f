/// @file training_ops.cu
/// @brief Support kernels of the training demo (module04/training_ops.hpp): embedding
/// lookup and its gradient, bias (+ residual) add, softmax cross-entropy, Adam.
///
/// Not a ladder: one plain kernel per job, each a single pass over its data, except the
/// embedding gradient, whose token part is a counting sort and segmented sums (below: the
/// GPT demo's 25 MB gradient made a block-per-id kernel one of its slowest ops). What they
/// must be is correct and deterministic -- no floating-point atomics, every sum in a fixed
/// order -- because the demos promise bit-identical training runs for one seed.

#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"
#include "module04/training_ops.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

namespace course::m04 {
namespace {

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over `work` items.
unsigned grid_for(long long work, int threads = kThreads) {
  const long long blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::max(1LL, std::min(blocks, 1LL << 20)));
}

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fffffff); }

// ---------------------------------------------------------------------------- embedding

/// out[r, c] = token[ids[r], c] + position[r % seq, c]; a thread per element, grid-stride.
__global__ void embedding_forward_kernel(const std::int32_t* __restrict__ ids, const float* __restrict__ token,
                                         const float* __restrict__ position, float* __restrict__ out, int rows,
                                         int seq, int vocab, int dim) {
  const int total = rows * dim;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int r = e / dim, c = e - r * dim;
    const int id = ids[r];
    float x;
    if (id < 0 || id >= vocab) {
      x = quiet_nan();  // an invalid id must be visible, not a silent row of another token
    } else {
      x = token[id * dim + c];
      if (position != nullptr) x += position[(r % seq) * dim + c];
    }
    out[e] = x;
  }
}

// Embedding backward, token gradient. The first version (a block per id, each scanning every
// id) left a few blocks walking the frequent ids' rows one dependent load at a time: in the
// GPT demo it was the slowest op of the backward pass outside the GEMMs and attention. Now
// (rows N, vocab V, dim C):
//   1. embedding_sort_count_kernel  a warp per tile of rows (256 in the demo; more when the
//      [V, tiles] count table would outgrow max(2^16, 16 V) entries):
//      ranks[r] = rank of row r among its tile's rows with the same id (__match_any_sync per
//      32 rows, a per-warp counter per id, in shared memory when V <= kSharedVocab), and
//      counts[v * tiles + t] = rows of id v in tile t. Reads ids (4N bytes).
//   2. embedding_sort_scan_kernel  one block: exclusive scan of counts in (v, t) order, in
//      place: counts[v, t] becomes the sorted position of tile t's first row of id v;
//      starts[v] = that of tile 0, starts[V] = the number of valid rows.
//   3. embedding_sort_scatter_kernel  a thread per row: position = counts[id, tile] +
//      rank; sorted_rows / sorted_ids at that position. The order is (id, row): stable.
//   4. embedding_token_segment_kernel  a warp per (segment of kEmbeddingSegmentRows = 64
//      sorted positions, 128 columns): sums each run of one id in row order; a run whose id
//      lies wholly in the segment is that id's final row of token_grad, otherwise it goes to
//      one of the segment's two partial slots (slot 0: the run that begins the segment,
//      slot 1: a later run that continues past its end).
//   5. embedding_token_combine_kernel  a thread per (id, column): 0 for an absent id; for an
//      id split across segments j0..j1, its partials added in ascending j.
// Every sum has a fixed order (no float atomics; the counts use integer arithmetic only),
// so the bits never change; an id within one segment is even summed exactly as the first
// version did (its rows one after another in row order).
// Bytes for the GPT demo (N = 16384, C = 384, V = 84; 64 sort tiles of 256 rows, 256
// segments): dout read once by step 4, 25.2 MB; the sort about 0.3 MB (ids twice, ranks,
// counts, the two sorted arrays); partials at most 2 x 256 x 1.5 KB = 0.8 MB written and
// read; token_grad 129 KB. Predicted: step 4 about 10 us (768 warps, 32 loads of 4 bytes
// in flight per lane: near the ~3 TB/s of HBM3), steps 1-3 and 5 about 2-3 us each (short
// dependent chains: 8 rows-of-32 per count warp; at most ~40 partials for the space id in
// the combine), so 20-25 us for token_grad; with the position gradient (another read of
// dout, ~8-10 us) 30-35 us for the whole call, against the ceiling of one 25 MB read,
// ~10 us. A vocabulary above kSharedVocab counts in global memory (a cudaMemsetAsync and
// an L2 round trip per 32 rows): correct, slower (tens of microseconds for 50K ids).
// Outcome (H200, m04_gpt --profile, default model): the phase bwd.embedding (this call and
// the bf16 -> fp32 conversion of dx before it) 0.056 ms per step, from 1.29 ms with the
// earlier kernel (one block per vocabulary entry, each scanning all 16384 ids): the step
// went from 10.02 to 8.83 ms (two calls on the same kind of card).

constexpr int kSortWarps = 4;        ///< tiles (one warp each) per block of the count kernel
constexpr int kSharedVocab = 2048;   ///< the count kernel keeps its counters in shared memory up to this vocab
constexpr int kScanThreads = 1024;
constexpr int kSegRows = static_cast<int>(kEmbeddingSegmentRows);
constexpr int kSegCols = 128;        ///< columns per warp in the segment kernel: 4 per lane
constexpr int kSegLoads = 8;         ///< sorted rows whose loads a lane issues before summing them
constexpr int kCombineLoads = 8;     ///< partials whose loads the combine kernel issues before adding them
constexpr int kPositionLoads = 8;    ///< rows whose loads the position kernel issues before adding them

static_assert(kSegRows == 64, "the segment kernel holds two sorted positions per lane");

/// Pointers into embedding_backward's workspace (layout: detail::embedding_backward_workspace_layout).
struct EbWorkspace {
  std::int32_t* counts;
  std::int32_t* starts;
  std::int32_t* ranks;
  std::int32_t* sorted_rows;
  std::int32_t* sorted_ids;
  float* partials;
};

EbWorkspace eb_workspace(void* base, const detail::EmbeddingBackwardWorkspaceLayout& l) {
  auto* bytes = static_cast<char*>(base);
  return {reinterpret_cast<std::int32_t*>(bytes + l.counts),      reinterpret_cast<std::int32_t*>(bytes + l.starts),
          reinterpret_cast<std::int32_t*>(bytes + l.ranks),       reinterpret_cast<std::int32_t*>(bytes + l.sorted_rows),
          reinterpret_cast<std::int32_t*>(bytes + l.sorted_ids),  reinterpret_cast<float*>(bytes + l.partials)};
}

/// Step 1: a warp per tile of `tile_rows` rows, 32 rows at a time in row order. Lanes with
/// the same id find each other with __match_any_sync; each reads the id's running count
/// (rows of that id earlier in the tile), adds its rank among its peers, and the lowest
/// peer adds the peers to the count. kShared: counters in shared memory (vocab <=
/// kSharedVocab), copied to counts[v * tiles + t] at the end; otherwise counts (zeroed by
/// the caller) is the counter itself. Each warp owns its tile's counters: no atomics.
template <bool kShared>
__global__ void __launch_bounds__(kSortWarps * 32)
    embedding_sort_count_kernel(const std::int32_t* __restrict__ ids, std::int32_t* __restrict__ counts,
                                std::int32_t* __restrict__ ranks, int rows, int vocab, int tile_rows, int tiles) {
  __shared__ std::int32_t s_count[kShared ? kSortWarps * kSharedVocab : 1];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int t = blockIdx.x * kSortWarps + warp;
  if (t >= tiles) return;  // warp-uniform; no block barrier below
  std::int32_t* counter = kShared ? s_count + warp * kSharedVocab : counts + t;
  const int stride = kShared ? 1 : tiles;
  if (kShared) {
    for (int v = lane; v < vocab; v += 32) counter[v] = 0;
    __syncwarp();
  }
  const long long first = static_cast<long long>(t) * tile_rows;
  const long long last = min(first + tile_rows, static_cast<long long>(rows));
  int next_id = first + lane < last ? ids[first + lane] : -1;
  for (long long r0 = first; r0 < last; r0 += 32) {
    const long long r = r0 + lane;
    const int id = next_id;
    next_id = r + 32 < last ? ids[r + 32] : -1;  // in flight while these 32 rows are counted
    const bool valid = id >= 0 && id < vocab;
    const unsigned peers = __match_any_sync(course::cuda::kFullWarpMask, valid ? id : -1);
    const unsigned below = peers & ((1u << lane) - 1u);
    const int before = valid ? counter[id * stride] : 0;
    __syncwarp();  // every peer has read the count before the lowest one updates it
    if (valid && below == 0u) counter[id * stride] = before + __popc(peers);
    __syncwarp();  // ... and the update is seen by the next 32 rows
    if (valid) ranks[r] = before + __popc(below);
  }
  if (kShared)
    for (int v = lane; v < vocab; v += 32) counts[static_cast<long long>(v) * tiles + t] = counter[v];
}

/// Inclusive sum over the block (blockDim.x a multiple of 32, <= 1024); scratch >= 32 ints.
__device__ int block_inclusive_sum(int x, int* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int y = __shfl_up_sync(course::cuda::kFullWarpMask, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int y = __shfl_up_sync(course::cuda::kFullWarpMask, w, d);
      if (lane >= d) w += y;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  return warp > 0 ? x + scratch[warp - 1] : x;
}

/// Step 2, one block: counts (n = vocab * tiles entries, (v, t) order) -> exclusive prefix
/// sums in place; starts[v] = prefix at (v, 0), starts[vocab] = total. Each thread scans
/// one contiguous range of entries (two passes: its sum, then its prefixes).
__global__ void __launch_bounds__(kScanThreads)
    embedding_sort_scan_kernel(std::int32_t* __restrict__ counts, std::int32_t* __restrict__ starts, int vocab,
                               int tiles) {
  __shared__ int scratch[32];
  const int n = vocab * tiles;  // < 2^31: detail::embedding_sort_max_tiles
  const int per = (n + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int lo = static_cast<int>(min(static_cast<long long>(n), static_cast<long long>(per) * threadIdx.x));
  const int hi = lo + min(per, n - lo);
  int sum = 0;
  for (int e = lo; e < hi; ++e) sum += counts[e];
  const int inclusive = block_inclusive_sum(sum, scratch);
  int run = inclusive - sum;
  for (int e = lo; e < hi; ++e) {
    const int c = counts[e];
    counts[e] = run;
    if (e % tiles == 0) starts[e / tiles] = run;
    run += c;
  }
  if (threadIdx.x == blockDim.x - 1) starts[vocab] = inclusive;
}

/// Step 3: a thread per row; a valid row goes to counts[id, tile] + its rank.
__global__ void embedding_sort_scatter_kernel(const std::int32_t* __restrict__ ids,
                                              const std::int32_t* __restrict__ counts,
                                              const std::int32_t* __restrict__ ranks,
                                              std::int32_t* __restrict__ sorted_rows,
                                              std::int32_t* __restrict__ sorted_ids, int rows, int vocab,
                                              int tile_rows, int tiles) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
    const int id = ids[r];
    if (id < 0 || id >= vocab) continue;
    const int at = counts[static_cast<long long>(id) * tiles + r / tile_rows] + ranks[r];
    sorted_rows[at] = r;
    sorted_ids[at] = id;
  }
}

/// Step 4: a warp per (segment j of kSegRows sorted positions, kSegCols columns); lane l
/// sums columns c0 + l + 32 k (k < 4: coalesced 128-byte rows, any dim). The segment's ids
/// and rows are loaded once, two per lane, and broadcast by shuffles; the loads of
/// kSegLoads rows are issued before any is added, then the adds run in sorted order.
__global__ void __launch_bounds__(32)
    embedding_token_segment_kernel(const std::int32_t* __restrict__ sorted_rows,
                                   const std::int32_t* __restrict__ sorted_ids,
                                   const std::int32_t* __restrict__ starts, const float* __restrict__ dout,
                                   float* __restrict__ grad, float* __restrict__ partials, int vocab, int dim) {
  const int lane = threadIdx.x;
  const int total = starts[vocab];
  const int p0 = blockIdx.x * kSegRows;
  if (p0 >= total) return;
  const int n = min(kSegRows, total - p0);
  const int row_lo = lane < n ? sorted_rows[p0 + lane] : 0, row_hi = lane + 32 < n ? sorted_rows[p0 + 32 + lane] : 0;
  const int id_lo = lane < n ? sorted_ids[p0 + lane] : -1, id_hi = lane + 32 < n ? sorted_ids[p0 + 32 + lane] : -1;
  const auto row_at = [&](int i) { return __shfl_sync(course::cuda::kFullWarpMask, i < 32 ? row_lo : row_hi, i & 31); };
  const auto id_at = [&](int i) { return __shfl_sync(course::cuda::kFullWarpMask, i < 32 ? id_lo : id_hi, i & 31); };
  // The ids just outside the segment: a run that begins the segment with id_before's id, or
  // ends it with id_after's, belongs to an id split across segments (the order is sorted).
  const int id_before = p0 > 0 ? sorted_ids[p0 - 1] : -1, id_after = p0 + n < total ? sorted_ids[p0 + n] : -1;
  for (long long cb = blockIdx.y; cb * kSegCols < dim; cb += gridDim.y) {  // one strip unless dim > 128 * 65535
    const int c0 = static_cast<int>(cb) * kSegCols + lane;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    int run_begin = 0;
    for (int i0 = 0; i0 < n; i0 += kSegLoads) {
      float x[kSegLoads][4];
#pragma unroll
      for (int u = 0; u < kSegLoads; ++u) {
        const int i = i0 + u;
        const int row = row_at(i & (kSegRows - 1));  // every lane shuffles; i >= n loads nothing
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int c = c0 + 32 * k;
          x[u][k] = i < n && c < dim ? dout[static_cast<long long>(row) * dim + c] : 0.f;
        }
      }
#pragma unroll
      for (int u = 0; u < kSegLoads; ++u) {
        const int i = i0 + u;
        const int id = id_at(i & (kSegRows - 1));
        const int next = id_at((i + 1) & (kSegRows - 1));
        if (i >= n) break;  // warp-uniform
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[k] += x[u][k];
        if (i + 1 < n && next == id) continue;  // the run goes on
        // Run [run_begin, i] of id ends: final unless the id goes on outside the segment.
        const bool split = (run_begin == 0 && id == id_before) || (i + 1 == n && id == id_after);
        float* out = split ? partials + (2LL * blockIdx.x + (run_begin == 0 ? 0 : 1)) * dim
                           : grad + static_cast<long long>(id) * dim;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int c = c0 + 32 * k;
          if (c < dim) out[c] = acc[k];
          acc[k] = 0.f;
        }
        run_begin = i + 1;
      }
    }
  }
}

/// Step 5: a thread per (id, column). Absent id: 0. Id split across segments j0 < j1: its
/// run in j0 (slot 0 if it begins j0, else slot 1), then slot 0 of j0+1 .. j1, in that order.
/// An id within one segment was written by step 4.
__global__ void embedding_token_combine_kernel(const std::int32_t* __restrict__ starts,
                                               const float* __restrict__ partials, float* __restrict__ grad,
                                               int vocab, int dim) {
  const long long total = static_cast<long long>(vocab) * dim;
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int v = static_cast<int>(e / dim), c = static_cast<int>(e - static_cast<long long>(v) * dim);
    const int lo = starts[v], hi = starts[v + 1];
    if (lo == hi) {
      grad[e] = 0.f;
      continue;
    }
    const int j0 = lo / kSegRows, j1 = (hi - 1) / kSegRows;
    if (j0 == j1) continue;
    float acc = partials[(2LL * j0 + (lo % kSegRows == 0 ? 0 : 1)) * dim + c];
    int j = j0 + 1;
    for (; j + kCombineLoads <= j1 + 1; j += kCombineLoads) {  // independent loads, added in order
      float x[kCombineLoads];
#pragma unroll
      for (int u = 0; u < kCombineLoads; ++u) x[u] = partials[2LL * (j + u) * dim + c];
#pragma unroll
      for (int u = 0; u < kCombineLoads; ++u) acc += x[u];
    }
    for (; j <= j1; ++j) acc += partials[2LL * j * dim + c];
    grad[e] = acc;
  }
}

/// position_grad[i, c] = sum over b (ascending) of dout[b*seq + i, c]; a thread per
/// element, consecutive threads on consecutive columns (coalesced). Reads dout once more:
/// 25 MB in the GPT demo (B = 64, T = 256, C = 384: 98K threads of 64 rows), ~8-10 us
/// predicted. The loads of kPositionLoads rows are issued before their adds (in order).
__global__ void embedding_position_grad_kernel(const float* __restrict__ dout, float* __restrict__ grad, int batch,
                                               int seq, int dim) {
  const int total = seq * dim;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    float acc = 0.f;
    int b = 0;
    for (; b + kPositionLoads <= batch; b += kPositionLoads) {
      float x[kPositionLoads];
#pragma unroll
      for (int u = 0; u < kPositionLoads; ++u) x[u] = dout[static_cast<long long>(b + u) * total + e];
#pragma unroll
      for (int u = 0; u < kPositionLoads; ++u) acc += x[u];
    }
    for (; b < batch; ++b) acc += dout[static_cast<long long>(b) * total + e];  // row b*seq + i, column c
    grad[e] = acc;
  }
}

// ---------------------------------------------------------------------------- bias add

/// y[r, c] = (y[r, c] + bias[c]) + residual[r, c]; a thread per element.
__global__ void bias_add_kernel(float* __restrict__ y, const float* __restrict__ bias,
                                const float* __restrict__ residual, int rows, int cols, int ldy, int ldr) {
  const int total = rows * cols;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int r = e / cols, c = e - r * cols;
    float t = y[r * ldy + c];
    if (bias != nullptr) t += bias[c];
    if (residual != nullptr) t += residual[r * ldr + c];
    y[r * ldy + c] = t;
  }
}

// ---------------------------------------------------------------------------- cross-entropy

/// Workspace of cross_entropy: per-row loss, per-row verdict, the count of counted rows.
struct CeWorkspace {
  float* row_loss;
  std::int32_t* row_correct;
  std::int32_t* count;
};

CeWorkspace ce_workspace(void* base, int rows) {
  auto* bytes = static_cast<char*>(base);
  CeWorkspace w;
  w.row_loss = reinterpret_cast<float*>(bytes);
  w.row_correct = reinterpret_cast<std::int32_t*>(bytes + static_cast<std::size_t>(rows) * sizeof(float));
  w.count = reinterpret_cast<std::int32_t*>(bytes + static_cast<std::size_t>(rows) * 2 * sizeof(float));
  return w;
}

/// One block: count = #{ r : targets[r] != -1 }.
__global__ void ce_count_kernel(const std::int32_t* __restrict__ targets, int rows, std::int32_t* count,
                                std::int32_t* counted_out) {
  __shared__ int scratch[32];
  int n = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) n += targets[r] != -1 ? 1 : 0;
  n = course::cuda::block_all_reduce(n, course::cuda::Sum{}, 0, scratch);
  if (threadIdx.x == 0) {
    *count = n;
    if (counted_out != nullptr) *counted_out = n;
  }
}

/// A warp per row: max and argmax, logsumexp, the row's loss and verdict, and its gradient
/// (p - onehot) / count. Every lane reads the count written by ce_count_kernel before it.
__global__ void ce_rows_kernel(const float* __restrict__ logits, const std::int32_t* __restrict__ targets,
                               float* __restrict__ dlogits, CeWorkspace ws, int rows, int classes, int ld) {
  const int lane = threadIdx.x % course::cuda::kWarpSize;
  const int warps_per_block = blockDim.x / course::cuda::kWarpSize;
  const int count = *ws.count;
  for (int r = blockIdx.x * warps_per_block + threadIdx.x / course::cuda::kWarpSize; r < rows;
       r += gridDim.x * warps_per_block) {
    const float* x = logits + r * ld;
    float* g = dlogits != nullptr ? dlogits + r * ld : nullptr;
    const int t = targets[r];
    if (t == -1) {  // ignored row: no loss, no gradient
      if (g != nullptr)
        for (int j = lane; j < classes; j += course::cuda::kWarpSize) g[j] = 0.f;
      if (lane == 0) {
        ws.row_loss[r] = 0.f;
        ws.row_correct[r] = 0;
      }
      continue;
    }
    const bool bad = t < -1 || t >= classes;
    // Max and its lowest index: each lane scans ascending j (strict > keeps the first), then
    // the butterfly keeps the larger value, or on a tie the lower index.
    float m = -INFINITY;
    int arg = INT_MAX;
    for (int j = lane; j < classes; j += course::cuda::kWarpSize) {
      const float xj = x[j];
      if (xj > m) {
        m = xj;
        arg = j;
      }
    }
#pragma unroll
    for (int offset = course::cuda::kWarpSize / 2; offset > 0; offset /= 2) {
      const float om = __shfl_xor_sync(course::cuda::kFullWarpMask, m, offset);
      const int oarg = __shfl_xor_sync(course::cuda::kFullWarpMask, arg, offset);
      if (om > m || (om == m && oarg < arg)) {
        m = om;
        arg = oarg;
      }
    }
    float s = 0.f;
    for (int j = lane; j < classes; j += course::cuda::kWarpSize) s += expf(x[j] - m);
    s = course::cuda::warp_sum(s);
    if (g != nullptr) {
      const float denom = static_cast<float>(count);
      for (int j = lane; j < classes; j += course::cuda::kWarpSize) {
        const float p = expf(x[j] - m) / s;
        g[j] = bad ? quiet_nan() : (p - (j == t ? 1.f : 0.f)) / denom;
      }
    }
    if (lane == 0) {
      ws.row_loss[r] = bad ? quiet_nan() : (m + logf(s)) - x[t];
      ws.row_correct[r] = !bad && arg == t ? 1 : 0;
    }
  }
}

/// One block: loss = (sum of row losses, in double, fixed order) / count; correct = sum.
__global__ void ce_reduce_kernel(CeWorkspace ws, int rows, float* loss, std::int32_t* correct) {
  __shared__ double scratch_d[32];
  __shared__ int scratch_i[32];
  double sum = 0.0;
  int right = 0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    sum += static_cast<double>(ws.row_loss[r]);
    right += ws.row_correct[r];
  }
  sum = course::cuda::block_all_reduce(sum, course::cuda::Sum{}, 0.0, scratch_d);
  right = course::cuda::block_all_reduce(right, course::cuda::Sum{}, 0, scratch_i);
  if (threadIdx.x == 0) {
    const int count = *ws.count;
    *loss = count > 0 ? static_cast<float>(sum / count) : 0.f;
    if (correct != nullptr) *correct = right;
  }
}

// ---------------------------------------------------------------------------- Adam

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ m1,
                            float* __restrict__ m2, int n, float lr, float beta1, float beta2, float eps,
                            float correction1, float correction2) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float g = grad[i];
    const float m = beta1 * m1[i] + (1.f - beta1) * g;
    const float v = beta2 * m2[i] + (1.f - beta2) * g * g;
    m1[i] = m;
    m2[i] = v;
    p[i] -= lr * (m / correction1) / (sqrtf(v / correction2) + eps);
  }
}

}  // namespace

void embedding_forward(const EmbeddingArgs& a) {
  validate_embedding_args(a);
  const int rows = static_cast<int>(a.batch * a.seq), dim = static_cast<int>(a.dim);
  embedding_forward_kernel<<<grid_for(static_cast<long long>(rows) * dim), kThreads, 0, a.stream>>>(
      a.ids, a.token_table, a.position_table, a.out, rows, static_cast<int>(a.seq), static_cast<int>(a.vocab), dim);
  COURSE_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward(const EmbeddingBackwardArgs& a) {
  validate_embedding_backward_args(a);
  const int rows = static_cast<int>(a.batch * a.seq), dim = static_cast<int>(a.dim), vocab = static_cast<int>(a.vocab);
  if (a.token_grad != nullptr) {
    const auto layout = detail::embedding_backward_workspace_layout(rows, a.vocab, a.dim);
    const EbWorkspace ws = eb_workspace(a.workspace, layout);
    const int tile_rows = static_cast<int>(layout.tile_rows), tiles = static_cast<int>(layout.tiles);
    const unsigned count_blocks = static_cast<unsigned>((tiles + kSortWarps - 1) / kSortWarps);
    if (vocab <= kSharedVocab) {
      embedding_sort_count_kernel<true><<<count_blocks, kSortWarps * 32, 0, a.stream>>>(a.ids, ws.counts, ws.ranks, rows,
                                                                                        vocab, tile_rows, tiles);
    } else {
      COURSE_CUDA_CHECK(cudaMemsetAsync(ws.counts, 0, static_cast<std::size_t>(a.vocab) * layout.tiles * sizeof(std::int32_t),
                                        a.stream));
      embedding_sort_count_kernel<false><<<count_blocks, kSortWarps * 32, 0, a.stream>>>(a.ids, ws.counts, ws.ranks,
                                                                                         rows, vocab, tile_rows, tiles);
    }
    COURSE_CHECK_LAUNCH("embedding_sort_count_kernel");
    embedding_sort_scan_kernel<<<1, kScanThreads, 0, a.stream>>>(ws.counts, ws.starts, vocab, tiles);
    COURSE_CHECK_LAUNCH("embedding_sort_scan_kernel");
    embedding_sort_scatter_kernel<<<grid_for(rows), kThreads, 0, a.stream>>>(a.ids, ws.counts, ws.ranks, ws.sorted_rows,
                                                                             ws.sorted_ids, rows, vocab, tile_rows, tiles);
    COURSE_CHECK_LAUNCH("embedding_sort_scatter_kernel");
    const dim3 seg_grid(static_cast<unsigned>(layout.segments),
                        static_cast<unsigned>(std::min<long long>((dim + kSegCols - 1) / kSegCols, 65535)));
    embedding_token_segment_kernel<<<seg_grid, 32, 0, a.stream>>>(ws.sorted_rows, ws.sorted_ids, ws.starts, a.dout,
                                                                  a.token_grad, ws.partials, vocab, dim);
    COURSE_CHECK_LAUNCH("embedding_token_segment_kernel");
    embedding_token_combine_kernel<<<grid_for(a.vocab * a.dim), kThreads, 0, a.stream>>>(ws.starts, ws.partials,
                                                                                         a.token_grad, vocab, dim);
    COURSE_CHECK_LAUNCH("embedding_token_combine_kernel");
  }
  if (a.position_grad != nullptr) {
    embedding_position_grad_kernel<<<grid_for(a.seq * a.dim), kThreads, 0, a.stream>>>(
        a.dout, a.position_grad, static_cast<int>(a.batch), static_cast<int>(a.seq), dim);
    COURSE_CHECK_LAUNCH("embedding_position_grad_kernel");
  }
}

void bias_add(const BiasAddArgs& a) {
  validate_bias_add_args(a);
  const int ldy = static_cast<int>(a.ldy != 0 ? a.ldy : a.cols), ldr = static_cast<int>(a.ldr != 0 ? a.ldr : a.cols);
  bias_add_kernel<<<grid_for(a.rows * a.cols), kThreads, 0, a.stream>>>(
      a.y, a.bias, a.residual, static_cast<int>(a.rows), static_cast<int>(a.cols), ldy, ldr);
  COURSE_CHECK_LAUNCH("bias_add_kernel");
}

void cross_entropy(const CrossEntropyArgs& a) {
  validate_cross_entropy_args(a);
  const int rows = static_cast<int>(a.rows), classes = static_cast<int>(a.classes);
  const int ld = static_cast<int>(a.ld != 0 ? a.ld : a.classes);
  const CeWorkspace ws = ce_workspace(a.workspace, rows);
  ce_count_kernel<<<1, kThreads, 0, a.stream>>>(a.targets, rows, ws.count, a.counted);
  COURSE_CHECK_LAUNCH("ce_count_kernel");
  const int warps_per_block = kThreads / course::cuda::kWarpSize;
  ce_rows_kernel<<<grid_for(rows, warps_per_block), kThreads, 0, a.stream>>>(a.logits, a.targets, a.dlogits, ws,
                                                                             rows, classes, ld);
  COURSE_CHECK_LAUNCH("ce_rows_kernel");
  ce_reduce_kernel<<<1, kThreads, 0, a.stream>>>(ws, rows, a.loss, a.correct);
  COURSE_CHECK_LAUNCH("ce_reduce_kernel");
}

void adam_update(const AdamArgs& a) {
  validate_adam_args(a);
  const double t = static_cast<double>(a.step);
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), t));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), t));
  adam_kernel<<<grid_for(a.n), kThreads, 0, a.stream>>>(a.params, a.grads, a.m, a.v, static_cast<int>(a.n), a.lr,
                                                        a.beta1, a.beta2, a.eps, correction1, correction2);
  COURSE_CHECK_LAUNCH("adam_kernel");
}

}  // namespace course::m04
