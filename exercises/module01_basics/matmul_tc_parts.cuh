#pragma once
/// @file matmul_tc_parts.cuh
/// @brief What the two files of YOUR tensor-core matmul share: matmul_tc.cu (steps 1-2 and
/// the dispatcher matmul_tc()) calls the launchers of the Hopper steps, which live in
/// matmul_tc_hopper.cu (steps 3-7: wgmma, tma_warp_specialized, persistent,
/// cluster_multicast, pingpong). The same split as solutions/module01_basics/, and generated from
/// its matmul_tc_parts.cuh: tile order, the masked epilogue store (Epilogue, which applies
/// TcMatmulArgs' options), launch helpers -- all given.

#include "module01/matmul_tc.hpp"

#include "course/cuda/gelu.cuh"
#include "course/device.hpp"
#include "course/error.hpp"

#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

namespace course::exercise::tc_parts {

/// Tiles of C are handed to blocks in groups of kGroupM tile-rows: consecutive
/// blocks walk down a column of kGroupM tiles before moving right. Blocks running at
/// the same time then share A rows and B columns, so one wave reads ~kGroupM times less
/// of B from HBM than a plain row-by-row order (B is 128 MiB at 8192^2, far above L2).
constexpr int kGroupM = 8;

/// Maps the 1-D tile index `pid` to the (tile row, tile column) of C it names.
template <int kGroup = kGroupM>
__device__ __forceinline__ void grouped_tile(int pid, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int per_group = kGroup * tiles_n;
  const int group = pid / per_group;
  const int first_m = group * kGroup;
  const int rows = min(tiles_m - first_m, kGroup);  // the last group may be short
  const int local = pid - group * per_group;
  tile_m = first_m + local % rows;
  tile_n = local / rows;
}

/// Number of tiles of a tm x tn grid (throws if it does not fit a 1-D grid).
inline unsigned grid_blocks(std::int64_t m, std::int64_t n, int bm, int bn, const char* fn) {
  const std::int64_t tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
  require_arg(tiles <= INT_MAX, fn, "m*n", m * n, "needs more than 2^31-1 tiles of C");
  return static_cast<unsigned>(tiles);
}

/// The kernels index rows and columns with int (and add a tile size to them without
/// overflow); sizes of 2^30 and beyond are refused.
inline void require_int_sizes(const m01::TcMatmulArgs& a, const char* fn) {
  constexpr std::int64_t kLimit = std::int64_t{1} << 30;
  require_arg(a.m < kLimit, fn, "m", a.m, "must be < 2^30");
  require_arg(a.n < kLimit, fn, "n", a.n, "must be < 2^30");
  require_arg(a.k < kLimit, fn, "k", a.k, "must be < 2^30");
}

/// Store two horizontally adjacent accumulators (row, col) and (row, col+1), masked.
__device__ __forceinline__ void store_pair(float* C, int M, int N, std::int64_t ldc, bool vec_ok, int row,
                                           int col, float v0, float v1) {
  if (row >= M) return;
  float* p = C + static_cast<std::int64_t>(row) * ldc + col;
  if (vec_ok && col + 1 < N) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else {
    if (col < N) p[0] = v0;
    if (col + 1 < N) p[1] = v1;
  }
}

/// float2 stores of C need an even ldc and an 8-byte aligned C (columns are always even).
inline bool vec2_store_ok(const m01::TcMatmulArgs& a) {
  return a.ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(a.c) % 8 == 0;
}

/// The epilogue of the steps that take TcMatmulArgs' options (mma_sync), applied to four
/// horizontally adjacent fp32 accumulators (row, col .. col+3) in the order of
/// matmul_tc.hpp: bias, pre_gelu, GELU, residual, store (or accumulate) as fp32 or bf16.
/// Passed to the kernel by value. The kernel calls it from a rolled loop over values staged
/// in shared memory, so its code exists a few times, not once per accumulator register: a
/// fully unrolled epilogue of this size (64 register pairs per thread, each with every
/// option's branches) is ~10 k instructions, more than the instruction cache holds, and the
/// warps then wait on instruction fetches from L2 (measured: +1 ms per 8192^2 outputs).
struct Epilogue {
  float* c = nullptr;
  __nv_bfloat16* c_bf16 = nullptr;
  __nv_bfloat16* pre_gelu = nullptr;
  const float* bias = nullptr;
  const void* residual = nullptr;
  std::int64_t ldc = 0, ldr = 0;
  int m = 0, n = 0;
  bool gelu = false, accumulate = false;
  bool quads_ok = false;  // four in-range values may be loaded and stored as one 16- or 8-byte access
  bool plain = false;     // fp32 C = A * B, no option: a kernel may store straight from registers
  bool pairs_ok = false;  // ... with float2 stores (even ldc, 8-byte aligned C)

  static Epilogue from(const m01::TcMatmulArgs& a) {
    Epilogue e;
    e.c = a.c;
    e.c_bf16 = a.c_bf16;
    e.pre_gelu = a.epilogue.pre_gelu;
    e.bias = a.epilogue.bias;
    e.residual = a.epilogue.residual;
    e.ldc = a.ldc;
    e.ldr = a.epilogue.ldr;
    e.m = static_cast<int>(a.m);
    e.n = static_cast<int>(a.n);
    e.gelu = a.epilogue.gelu;
    e.accumulate = a.epilogue.accumulate;
    // Columns come in multiples of 4, so a quad is aligned when every base is aligned to a
    // quad's size and every leading dimension is a multiple of 4.
    const auto aligned = [](const void* p, unsigned bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; };
    const unsigned out_quad = a.c ? 16u : 8u;
    e.plain = a.c != nullptr && !m01::uses_options(a);
    e.pairs_ok = a.ldc % 2 == 0 && aligned(a.c, 8);
    e.quads_ok = a.ldc % 4 == 0 && aligned(a.c, 16) && aligned(a.c_bf16, 8) && aligned(e.pre_gelu, 8) &&
                 aligned(e.bias, 16) && (e.residual == nullptr || (e.ldr % 4 == 0 && aligned(e.residual, out_quad)));
    return e;
  }

  /// The epilogue of split-K's later splits (s > 0): C += the split's partial product.
  /// Bias and residual (in place too: split 0 read it before any later split added) were
  /// applied once, by split 0; a split epilogue is linear (no GELU, no pre_gelu,
  /// fp32 C: split_k_allowed), so nothing else is left to do.
  __host__ __device__ Epilogue later_split() const {
    Epilogue e = *this;
    e.accumulate = true;
    e.bias = nullptr;
    e.residual = nullptr;
    e.plain = false;
    return e;
  }

  /// Values (row, col .. col + 3), col a multiple of 4; columns past n are dropped.
  __device__ __forceinline__ void store4(int row, int col, float4 v) const {
    if (row >= m || col >= n) return;
    if (!(quads_ok && col + 3 < n)) {  // the right edge, or unaligned rows: one value at a time
      store1(row, col, v.x);
      if (col + 1 < n) store1(row, col + 1, v.y);
      if (col + 2 < n) store1(row, col + 2, v.z);
      if (col + 3 < n) store1(row, col + 3, v.w);
      return;
    }
    const std::int64_t at = static_cast<std::int64_t>(row) * ldc + col;
    if (bias) {
      const float4 b = __ldg(reinterpret_cast<const float4*>(bias + col));
      v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
    }
    if (pre_gelu) *reinterpret_cast<uint2*>(pre_gelu + at) = pack_bf16x4(v);
    if (gelu) {
      v.x = ::course::cuda::gelu_tanh(v.x), v.y = ::course::cuda::gelu_tanh(v.y);
      v.z = ::course::cuda::gelu_tanh(v.z), v.w = ::course::cuda::gelu_tanh(v.w);
    }
    const std::int64_t r_at = static_cast<std::int64_t>(row) * ldr + col;
    if (c) {
      if (accumulate && !residual) {
        // C += v as a reduction the SM sends off without waiting (no value comes back): a
        // read-modify-write would stall the rolled epilogue loop on every load of C. One
        // thread adds to each element, and split-K's splits add one after another (their
        // turns), so the sums are the same bit for bit on every run.
        add_to(c + at, v);
        return;
      }
      if (residual) add(v, *reinterpret_cast<const float4*>(static_cast<const float*>(residual) + r_at));
      *reinterpret_cast<float4*>(c + at) = v;
    } else {
      if (residual) add(v, unpack_bf16x4(*reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(residual) + r_at)));
      *reinterpret_cast<uint2*>(c_bf16 + at) = pack_bf16x4(v);
    }
  }

 private:
  __device__ __forceinline__ void store1(int row, int col, float v) const {
    const std::int64_t at = static_cast<std::int64_t>(row) * ldc + col;
    if (bias) v += bias[col];
    if (pre_gelu) pre_gelu[at] = __float2bfloat16(v);
    if (gelu) v = ::course::cuda::gelu_tanh(v);
    const std::int64_t r_at = static_cast<std::int64_t>(row) * ldr + col;
    if (c) {
      if (residual) v += static_cast<const float*>(residual)[r_at];
      if (accumulate) v += c[at];
      c[at] = v;
    } else {
      if (residual) v += __bfloat162float(static_cast<const __nv_bfloat16*>(residual)[r_at]);
      c_bf16[at] = __float2bfloat16(v);
    }
  }
  __device__ __forceinline__ static void add(float4& v, float4 w) { v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w; }
  /// *p += v with one 16-byte reduction on sm_90 (atomicAdd on float4), four elsewhere.
  __device__ __forceinline__ static void add_to(float* p, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4*>(p), v);
#else
    atomicAdd(p, v.x), atomicAdd(p + 1, v.y), atomicAdd(p + 2, v.z), atomicAdd(p + 3, v.w);
#endif
  }
  __device__ __forceinline__ static uint2 pack_bf16x4(float4 v) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    return make_uint2(*reinterpret_cast<const unsigned*>(&lo), *reinterpret_cast<const unsigned*>(&hi));
  }
  __device__ __forceinline__ static float4 unpack_bf16x4(uint2 u) {
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
};

// ---------------------------------------------------------------------- split-K ---
// When a product has too few tiles of C to keep every SM busy and a long K (the GPT's
// dW = dY^T X: 1152 x 384 outputs, K = 16384), K is cut into splits of whole slabs and each
// (tile, split) pair is computed by its own block (mma_sync: blockIdx.y is the split) or as
// its own work unit of a persistent block (steps 5-7, one unit per block). Split 0 applies
// the whole epilogue (including accumulate); split s > 0 then adds its partial product into
// C (Epilogue::later_split). The additions happen in the order s = 1, 2, ... : `turns` holds
// one counter per tile of C, zero at launch; split s waits until its tile's counter reads s
// (acquire), adds, and stores s + 1 (release). The order is fixed, so C is the same bit for
// bit on every run -- unlike atomics racing in whatever order the blocks finish. Split s
// waits only for a block of lower index (split s - 1 of its tile): with blocks started in
// index order that cannot deadlock, however few of the grid's blocks are resident.

/// Whether K may be split at all: only for a linear epilogue -- GELU of a sum is not the sum
/// of GELUs, and a bf16 C would round every partial sum -- and only when the tiles alone
/// cannot fill the GPU twice over (`tiles` of the kernel's block tile, `sms` SMs).
inline bool split_k_allowed(const m01::TcMatmulArgs& a, std::int64_t tiles, int sms) {
  return a.c != nullptr && !a.epilogue.gelu && tiles < 2 * static_cast<std::int64_t>(sms);
}

/// A split of K: `splits` ranges of `slabs` slabs each (the last may be shorter, never empty).
struct SplitK {
  int splits = 1;
  int slabs = 0;
};

/// k_tiles slabs cut into at most `splits` ranges of equal length (rounded up), then as few
/// ranges as that length needs, so that no split is empty.
inline SplitK split_evenly(int k_tiles, int splits) {
  SplitK s;
  s.slabs = (k_tiles + std::max(splits, 1) - 1) / std::max(splits, 1);
  s.splits = (k_tiles + s.slabs - 1) / s.slabs;
  return s;
}

/// `count` zeroed ints for ONE launch's split-K turns, allocated and zeroed in stream order on
/// `stream` from course::scratch_pool (device.hpp: a per-device pool that keeps its memory
/// mapped across synchronizations); give them back with free_turns right after the launch.
/// Not a buffer kept per device: two split products running at once on two streams would
/// count each other's turns, and zeroing it for the next launch would race with a kernel
/// still running on another stream (module 3's step 14 takes its tile counter the same way).
inline int* zeroed_turns(int count, cudaStream_t stream) {
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(int);
  int* turns = nullptr;
  COURSE_CUDA_CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&turns), bytes, ::course::scratch_pool(), stream));
  COURSE_CUDA_CHECK(cudaMemsetAsync(turns, 0, bytes, stream));
  return turns;
}

/// Frees zeroed_turns' counters once the launch that uses them is done (stream order). Call
/// it before the launch check, so that a failed launch frees them too. Null: nothing to free.
inline void free_turns(int* turns, cudaStream_t stream) {
  if (turns != nullptr) COURSE_CUDA_CHECK(cudaFreeAsync(turns, stream));
}

/// One thread: waits until tile `tile`'s counter reads `split` (every earlier split has added
/// its part). The caller then synchronizes the threads that store the tile (a block or named
/// barrier): they read C only after this acquire.
__device__ __forceinline__ void wait_split_turn(int* turns, int tile, int split) {
  ::cuda::atomic_ref<int, ::cuda::thread_scope_device> turn(turns[tile]);
  while (turn.load(::cuda::memory_order_acquire) != split) __nanosleep(64);
}

/// One thread, after a barrier of every thread that stored the tile: hands the tile to split
/// `split` + 1. The release orders those threads' stores (ordered before it by the barrier)
/// before the next split's acquire.
__device__ __forceinline__ void pass_split_turn(int* turns, int tile, int split) {
  ::cuda::atomic_ref<int, ::cuda::thread_scope_device> turn(turns[tile]);
  turn.store(split + 1, ::cuda::memory_order_release);
}

// @step wgmma
// Your Hopper steps (matmul_tc_hopper.cu) throw course::NotImplemented until you have
// written them (their kXxxWritten flags); the solution's throw course::Unsupported unless
// the GPU is a Hopper (compute capability 9.0) and the binary carries sm_90a code.
// @end
/// The Hopper steps (matmul_tc_hopper.cu). Each throws course::Unsupported unless the GPU
/// is a Hopper (compute capability 9.0) and the binary carries sm_90a code.
void launch_wgmma(const m01::TcMatmulArgs& a);
void launch_tma_warp_specialized(const m01::TcMatmulArgs& a);
void launch_persistent(const m01::TcMatmulArgs& a);
void launch_cluster_multicast(const m01::TcMatmulArgs& a);
void launch_pingpong(const m01::TcMatmulArgs& a);

}  // namespace course::exercise::tc_parts
