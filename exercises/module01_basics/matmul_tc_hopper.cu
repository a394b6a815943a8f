/// @file matmul_tc_hopper.cu
/// @brief YOUR Hopper rungs of the tensor-core matmul ladder (module 1), C (fp32) = A * B (bf16):
///   3. wgmma                 warpgroup MMA from 128-byte-swizzled shared memory, fed by cp.async
///   4. tma_warp_specialized  TMA copies on an mbarrier ring; 1 producer + 2 consumer warpgroups
///   5. persistent            one block per SM walks the tiles: next loads overlap this epilogue
///   6. cluster_multicast     2-block clusters; each B tile read once from L2, multicast to both
///
/// Read module01_basics/README.md, "The Hopper GEMM ladder", then fill in one step at a time.
/// Steps 1-2 and the dispatcher are in matmul_tc.cu. Run a step's tests with
///   ctest --preset default -L exercise -R 'MatmulTc.*/wgmma'      (or tma_warp_specialized, ...)
/// A step you have not written throws NotImplemented and its tests show SKIPPED; once
/// written, it needs a Hopper GPU (compute capability 9.0) and an sm_90a build, and
/// elsewhere its tests report SKIPPED with the reason (course::Unsupported).
///
/// Given, and the same in every step: each block computes a 128 x 256 tile of C as two
/// warpgroups of 64 x 256 (wgmma m64n256k16: 128 fp32 accumulators per thread), over K in
/// slabs of 64. The shared-memory layouts of one slab (one pipeline stage) are what wgmma's
/// 128-byte-swizzle descriptors describe, and what the TMA's SWIZZLE_128B writes:
///   A slab [128 m][64 k], K-major: row m is 128 bytes, 16-byte chunk c at c ^ (m % 8).
///   B slab [64 k][256 n], MN-major (B is row-major K x N): four 64-column blocks of
///     [64 k][64 n] (8 KB each), row k 128 bytes, chunk c at c ^ (k % 8).
/// The PTX wrappers are in common/include/course/cuda/mma_ptx.cuh (wgmma, cp.async) and
/// hopper_ptx.cuh (TMA, mbarrier, setmaxnreg, clusters); their comments say what each
/// instruction does. Read the wgmma_desc_sw128 comment before step 3 and the paragraph at
/// the top of hopper_ptx.cuh before step 4.

#include "matmul_tc_parts.cuh"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/tma.hpp"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

namespace course::exercise::tc_parts {
namespace {

using m01::TcMatmulArgs;
using bf16 = __nv_bfloat16;
namespace cc = ::course::cuda;

// ---------------------------------------------------------------- given: shared by steps 3-6 ---

constexpr int kBM = 128, kBN = 256, kBK = 64;
constexpr std::uint32_t kABytes = kBM * kBK * 2;          // 16 KB: 128 rows of 128 bytes
constexpr std::uint32_t kBBlockBytes = kBK * 64 * 2;      //  8 KB: one [64 k][64 n] block of B
constexpr std::uint32_t kBBytes = kBN * kBK * 2;          // 32 KB: four blocks
constexpr std::uint32_t kStageBytes = kABytes + kBBytes;  // 48 KB per pipeline stage

// grouped_tile, grid_blocks, vec2_store_ok and store_pair: matmul_tc_parts.cuh (given).

/// Throws course::Unsupported unless the Hopper instructions can run here.
void require_sm90a(const char* step) {
  if (!cc::sm90a_code_available())
    throw Unsupported(step,
                      "a Hopper GPU (compute capability 9.0) and a build for sm_90a "
                      "(CMAKE_CUDA_ARCHITECTURES=90a; wgmma and setmaxnreg are not in plain sm_90)");
}

/// The epilogue of one warpgroup, straight from its accumulators: warp w of the group owns
/// rows 16 w .. 16 w + 15 of its 64, and acc[4 j + 2 h], acc[4 j + 2 h + 1] is the pair of
/// columns (8 j + 2 t, + 1) of row g + 8 h (g = lane / 4, t = lane % 4).
__device__ __forceinline__ void store_warpgroup_tile(const float (&acc)[128], float* C, int M, int N,
                                                     std::int64_t ldc, bool vec_ok, int row0, int n0) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + warp * 16 + lane / 4 + 8 * h;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
      store_pair(C, M, N, ldc, vec_ok, row, n0 + 8 * j + 2 * (lane % 4), acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  }
}

__device__ __forceinline__ void zero(float (&acc)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
}

/// Dynamic shared memory rounded up to the 1024-byte alignment of the swizzle atoms
/// (8 rows x 128 bytes); every launch asks for 1 KB extra to make room.
__device__ __forceinline__ std::uint32_t aligned_smem_base(unsigned char* raw) {
  return (cc::smem_u32(raw) + 1023u) & ~1023u;
}

// ============================================================================
// Step 3: wgmma -- the warpgroup MMA, reading both operands from shared memory.
//
// A warpgroup (4 warps, 128 threads) issues one wgmma m64n256k16 together: a 64 x 16 slice
// of A times a 16 x 256 slice of B, accumulated into 64 x 256 fp32 (128 per thread). There
// are no fragment registers and no ldmatrix: the instruction reads shared memory itself,
// through two 64-bit matrix descriptors (cc::wgmma_desc_sw128: start address, leading byte
// offset, stride byte offset). And it is asynchronous: issue, commit the group, and wait
// before the accumulators are read or the shared memory it reads is overwritten.
//
// Given: the copies (SlabCopier: cp.async straight into the swizzled layouts above), the
// 4-stage pipeline around them, the epilogue. Two slabs are in flight while one is read.
//
// TODO(step 3a): wgmma_slab below: the descriptors of one slab, four k16 steps.
// TODO(step 3b): in the kernel: the fence / issue / commit / wait around wgmma_slab, and
//   the last wait before the epilogue.
// TODO(step 3c): set kWgmmaWritten (above the launchers at the bottom) to true.
// Hints, one at a time: bash scripts/course.sh hint matmul_tc/wgmma
// ============================================================================

/// Consumer warpgroup `wg` (0 or 1: rows 64 wg .. 64 wg + 63 of the tile) multiplies one
/// slab (A at stage_a, B at stage_b, both shared-memory addresses): four k16 steps of
/// cc::wgmma_m64n256k16_bf16_f32</*kBMnMajor=*/true>(acc, desc_a, desc_b). Issued only:
/// the caller fences, commits and waits. Steps 4-6 call it too.
__device__ __forceinline__ void wgmma_slab(float (&acc)[128], std::uint32_t stage_a, std::uint32_t stage_b, int wg) {
  // TODO(step 3a): for ks = 0 .. kBK / 16 - 1, one descriptor of A and one of B, then the wgmma.
  //   A (K-major): where do this warpgroup's 64 rows start? Where does k16 step ks start
  //     along a 128-byte row? The stride byte offset is the distance between groups of 8
  //     rows; the leading byte offset is not used with this swizzle (pass 16).
  //   B (MN-major, transposed by the wgmma on the fly): where does k16 step ks start (one
  //     row of 128 bytes per k)? The leading byte offset is the distance between the
  //     64-column blocks, the stride byte offset the distance between groups of 8 k-rows.
  (void)acc, (void)stage_a, (void)stage_b, (void)wg;
}

namespace wgmma_step {
constexpr int kThreads = 256;  // two warpgroups, both copy and compute
constexpr int kStages = 4;
constexpr int kSmemBytes = kStages * static_cast<int>(kStageBytes) + 1024;

/// (Given.) Per-thread cp.async copies of one slab into the 128-byte-swizzle layouts. Thread t
/// copies chunk column t % 8 of A rows t / 8 + 32 i (i < 4) and chunk column t % 32 of B rows
/// t / 32 + 8 i (i < 8): both row steps are multiples of 8, so each thread's chunks share
/// one swizzle. Chunks past M, N or K copy 0 source bytes: cp.async writes the zeros.
struct SlabCopier {
  const bf16* a;  // this thread's first A chunk of the next slab
  const bf16* b;  // ... of B
  std::int64_t a_step, b_step, b_slab;  // 32 rows of A, 8 rows of B, 64 rows of B (elements)
  std::uint32_t a_dst, b_dst;           // byte offsets inside a stage
  int a_rows, b_cols;                   // rows of A / columns of B left from this thread's first
  int a_k;                              // K minus the k of this thread's A chunk in the next slab
  int b_k;                              // K minus the k of this thread's first B row in the next slab

  __device__ __forceinline__ SlabCopier(const bf16* A, const bf16* B, int M, int N, int K, std::int64_t lda,
                                        std::int64_t ldb, int m0, int n0) {
    const int t = threadIdx.x;
    const int ar = t / 8, ac = t % 8, br = t / 32, bc = t % 32;
    a = A + static_cast<std::int64_t>(m0 + ar) * lda + ac * 8;
    b = B + static_cast<std::int64_t>(br) * ldb + n0 + bc * 8;
    a_step = 32 * lda;
    b_step = 8 * ldb;
    b_slab = kBK * ldb;
    a_dst = ar * 128 + ((ac ^ (ar % 8)) * 16);
    b_dst = kABytes + (bc / 8) * kBBlockBytes + br * 128 + (((bc % 8) ^ (br % 8)) * 16);
    a_rows = M - (m0 + ar);
    b_cols = N - (n0 + bc * 8);
    a_k = K - ac * 8;
    b_k = K - br;
  }
  __device__ __forceinline__ void copy_next(std::uint32_t stage, const bf16* A, const bf16* B) {
    const int a_bytes = 2 * max(0, min(a_k, 8));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool ok = i * 32 < a_rows && a_bytes > 0;
      cc::cp_async_16_zfill(stage + a_dst + i * 32 * 128, ok ? a + i * a_step : A, ok ? a_bytes : 0);
    }
    const int b_bytes = 2 * max(0, min(b_cols, 8));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool ok = i * 8 < b_k && b_bytes > 0;
      cc::cp_async_16_zfill(stage + b_dst + i * 8 * 128, ok ? b + i * b_step : B, ok ? b_bytes : 0);
    }
    a += kBK;
    b += b_slab;
    a_k -= kBK;
    b_k -= kBK;
  }
};

__global__ void __launch_bounds__(kThreads, 1)
    matmul_tc_wgmma_kernel(const bf16* __restrict__ A, const bf16* __restrict__ B, float* __restrict__ C, int M,
                           int N, int K, std::int64_t lda, std::int64_t ldb, std::int64_t ldc, int tiles_m,
                           int tiles_n, bool vec_ok) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t smem = aligned_smem_base(smem_raw);
  int tile_m, tile_n;
  grouped_tile(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * kBM, n0 = tile_n * kBN;
  const int wg = threadIdx.x / 128;
  const int k_tiles = (K + kBK - 1) / kBK;
  SlabCopier copier(A, B, M, N, K, lda, ldb, m0, n0);

  // Prologue (given): slabs 0 .. kStages-3 in flight (commit group g = slab g, empty groups included).
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) copier.copy_next(smem + s * kStageBytes, A, B);
    cc::cp_async_commit();
  }
  float acc[128];
  zero(acc);
  for (int kt = 0; kt < k_tiles; ++kt) {
    // 1. (Given.) Wait for slab kt, publish it to every warp and to the async proxy (the
    //    wgmma reads shared memory through it: fence.proxy.async after the copies land).
    //    The barrier also certifies that every warpgroup has done what your 3b makes it do
    //    at the end of iteration kt-1, before stage (kt - 2) % kStages is refilled below.
    cc::cp_async_wait<kStages - 3>();
    cc::fence_proxy_async_smem();
    __syncthreads();
    // 2. (Given.) Refill: slab kt+2 into the stage slab kt-2 used.
    const int next = kt + kStages - 2;
    if (next < k_tiles) copier.copy_next(smem + (next % kStages) * kStageBytes, A, B);
    cc::cp_async_commit();
    // 3. Math. TODO(step 3b): slab kt is in stage kt % kStages (smem + that * kStageBytes; B
    //    starts kABytes further). Fence the accumulators, issue wgmma_slab, commit the group,
    //    then wait -- but not for everything: slab kt may keep running into the next
    //    iteration. How many groups may stay pending so that the refill above never
    //    overwrites a stage a wgmma still reads?
  }
  // TODO(step 3b): the accumulators are read below: wait for every wgmma group first.
  cc::cp_async_wait<0>();
  store_warpgroup_tile(acc, C, M, N, ldc, vec_ok, m0 + 64 * wg, n0);
#else
  (void)A, (void)B, (void)C, (void)M, (void)N, (void)K, (void)lda, (void)ldb, (void)ldc, (void)tiles_m,
      (void)tiles_n, (void)vec_ok;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}
}  // namespace wgmma_step

// ============================================================================
// Steps 4-6: one warp-specialized kernel, three configurations (matmul_tc_ws_kernel below;
// kCluster = 1 in steps 4-5, 2 in step 6; launch_ws chooses persistent or not).
//
// Step 4, tma_warp_specialized. The TMA copies a whole 2-D box in one instruction -- A's
// slab (128 rows x 64 k) in one, B's in four 64 x 64 boxes -- writes it in the swizzled
// layout, zero-fills what lies outside the matrix, and counts the bytes down on an mbarrier.
// Warpgroup 0 is the PRODUCER (one thread issues every copy); warpgroups 1-2 are the
// CONSUMERS (wgmma and epilogue). A ring of kStages stages, two barriers per stage:
//   full[s]:  the producer arrives on it, announcing kStageBytes; the TMA counts them down;
//             the consumers wait on it.
//   empty[s]: each consumer warpgroup arrives once its wgmmas on stage s are complete; the
//             producer waits on it before refilling s.
// A barrier's phase parity flips each time it completes: 0, 1, 0, ... as the ring wraps
// (RingPosition keeps the stage and the parity of the current pass).
// Given: the tensor maps and the launch (launch_ws), the shared-memory layout, the barrier
// initialisation, the tile schedule (TileSchedule), wgmma_slab (yours, step 3), the epilogue.
// TODO(step 4a): setmaxnreg: the producer warpgroup gives registers back, the consumers take them.
// TODO(step 4b): the producer's hand-off, per slab.
// TODO(step 4c): the consumers' hand-off and math, per slab, and release().
// TODO(step 4d): set kTmaWarpSpecializedWritten to true.
// Hints, one at a time: bash scripts/course.sh hint matmul_tc/tma_warp_specialized
//
// Step 5, persistent. The grid becomes as many blocks as fit on the GPU at once (one per
// SM) and each block walks the tile schedule with a stride of the grid size; the ring of
// stages carries over from tile to tile, so while the consumers store tile i the producer
// already loads tile i+1.
// TODO(step 5a): TileSchedule: the stride, and take() walking the schedule.
// TODO(step 5b): the kernel: every tile the schedule gives, in producer and consumers.
// TODO(step 5c): launch_ws: the persistent grid size.
// TODO(step 5d): set kPersistentWritten to true.
// Hints, one at a time: bash scripts/course.sh hint matmul_tc/persistent
//
// Step 6, cluster_multicast. Clusters of 2 blocks compute vertically adjacent tiles (tile
// rows 2c and 2c + 1, same columns): they need the same B slabs. Each block loads half of
// B -- two of the four 64-column boxes -- with a multicast copy that lands in BOTH blocks'
// shared memory and completes on both blocks' full barriers. So a stage may be refilled
// only when the consumers of BOTH blocks are done with it.
// (Given: the cluster launch attribute, and TileSchedule's rank within the cluster.)
// TODO(step 6a): the producer: this block's share of B, multicast.
// TODO(step 6b): release(): arrive on the empty barrier of every block of the cluster, and
//   the count those barriers wait for.
// TODO(step 6c): the cluster-wide syncs: after the barrier initialisation, and before exit.
// TODO(step 6d): set kClusterMulticastWritten to true.
// Hints, one at a time: bash scripts/course.sh hint matmul_tc/cluster_multicast
// ============================================================================
namespace ws {
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kStages = 4;
constexpr int kProducerRegisters = 40;   // 128 x 40 + 256 x 232 <= 64 K registers of the SM
constexpr int kConsumerRegisters = 232;  // 128 accumulators and the rest
/// Stages, then the 2 x kStages barriers (8 bytes each), plus the 1 KB alignment slack.
constexpr int kSmemBytes = kStages * static_cast<int>(kStageBytes) + 2 * kStages * 8 + 1024;
/// Tile-rows per group of the tile order (L2 reuse between the blocks running together).
constexpr int kGroupRows = 16;

/// The tile schedule of every step 4-6 block. Tiles are grouped into "cluster tiles" of
/// kCluster vertically adjacent tiles; cluster c of G takes cluster tiles c, c + G, ... in
/// grouped order; its block of rank r computes tile row kCluster * ctile_m + r.
/// Without persistence the grid has one cluster per cluster tile: one trip each.
template <int kCluster>
struct TileSchedule {
  int next, stride, total, ctiles_m, tiles_n;
  __device__ __forceinline__ TileSchedule(int tiles_m, int tiles_n_) {
    next = static_cast<int>(blockIdx.x) / kCluster;  // this cluster's first cluster tile
    stride = 0;  // TODO(step 5a): how many clusters the grid holds.
    ctiles_m = (tiles_m + kCluster - 1) / kCluster;
    tiles_n = tiles_n_;
    total = ctiles_m * tiles_n;
  }
  /// The next tile of this block (false when the schedule is done).
  __device__ __forceinline__ bool take(int& tile_m, int& tile_n) {
    if (next >= total) return false;
    int ctile_m;
    grouped_tile<kGroupRows / kCluster>(next, ctiles_m, tiles_n, ctile_m, tile_n);
    tile_m = ctile_m * kCluster + static_cast<int>(cc::cluster_ctarank());
    next = total;  // TODO(step 5a): this hands out one tile per block (step 4). Walk on instead.
    return true;
  }
};

/// (Given.) A position in the ring of stages: index and the parity of the current pass.
struct RingPosition {
  int stage = 0;
  std::uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

template <int kCluster>
__global__ void __launch_bounds__(kThreads, 1)
    matmul_tc_ws_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                        float* __restrict__ C, int M, int N, int K, std::int64_t ldc, int tiles_m, int tiles_n,
                        bool vec_ok) {
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 blocks");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const std::uint32_t smem = aligned_smem_base(smem_raw);
  const std::uint32_t full_bar = smem + kStages * kStageBytes;  // full[s] at full_bar + 8 s
  const std::uint32_t empty_bar = full_bar + kStages * 8;      // empty[s] at empty_bar + 8 s
  const int wg = threadIdx.x / 128;
  const int k_tiles = (K + kBK - 1) / kBK;

  // Setup (given): one thread initialises the barriers; the fence publishes them to the
  // TMA (and to the other block of a cluster), the barrier below to every thread.
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      cc::mbarrier_init(full_bar + 8 * s, 1);  // the producer's arrive (+ the bytes)
      // TODO(step 6b): in a cluster, who arrives on empty[s] before it may be refilled?
      cc::mbarrier_init(empty_bar + 8 * s, 2);  // each consumer warpgroup
    }
    cc::fence_barrier_init();
    cc::tma_prefetch_descriptor(&tmap_a);
    cc::tma_prefetch_descriptor(&tmap_b);
  }
  // TODO(step 6c): with kCluster > 1 the other block will multicast into this block's shared
  //   memory and arrive on its barriers: no thread of the cluster may go on before the
  //   barriers of every block are initialised.
  __syncthreads();

  TileSchedule<kCluster> schedule(tiles_m, tiles_n);
  RingPosition ring;
  int tile_m, tile_n;
  if (wg == 0) {
    // ---- Producer: one thread issues every copy; the other 127 only lower their registers.
    // TODO(step 4a): give registers back (down to kProducerRegisters), all 128 threads.
    if (threadIdx.x == 0) {
      const std::uint32_t rank = cc::cluster_ctarank();  // for step 6
      // TODO(step 5b): every tile the schedule gives, not only the first.
      if (schedule.take(tile_m, tile_n)) {
        for (int kt = 0; kt < k_tiles; ++kt, ring.advance()) {
          const std::uint32_t full = full_bar + 8 * ring.stage;
          const std::uint32_t stage_a = smem + ring.stage * kStageBytes;
          const std::uint32_t stage_b = stage_a + kABytes;
          // TODO(step 4b): (1) wait until the consumers have released this stage
          //   (empty_bar + 8 * ring.stage). With which parity? On the first pass over the
          //   ring nobody has released anything, and the wait must go through at once.
          // (2) arrive on `full`, announcing the kStageBytes that will land there.
          // (3) the copies, cc::tma_load_2d(dst, &tensor map, full, x, y), x = the inner
          //   (column) coordinate, y = the row: A's box (kBM rows x kBK columns) into
          //   stage_a; B's four boxes (kBK rows x 64 columns), j = 0..3, into
          //   stage_b + j * kBBlockBytes.
          // TODO(step 6a): with kCluster == 2, this block copies only its share of B's boxes,
          //   with cc::tma_load_2d_multicast into both blocks.
          (void)full, (void)stage_b, (void)rank;
        }
      }
    }
  } else {
    // ---- Consumers: warpgroup 1 computes rows 0-63 of the tile, warpgroup 2 rows 64-127.
    // TODO(step 4a): take registers (up to kConsumerRegisters).
    const int cw = wg - 1;
    float acc[128];
    // Release a stage: one arrival per consumer warpgroup, once its wgmmas on the stage are done.
    auto release = [&](int stage) {
      // TODO(step 4c): arrive on empty[stage], once per warpgroup.
      // TODO(step 6b): with kCluster > 1: on empty[stage] of every block of the cluster.
      (void)stage;
    };
    // TODO(step 5b): every tile the schedule gives, not only the first. (What must start
    //   afresh for every tile, and what must not?)
    if (schedule.take(tile_m, tile_n)) {
      zero(acc);
      for (int kt = 0; kt < k_tiles; ++kt, ring.advance()) {
        // TODO(step 4c): wait until this stage's bytes have landed (full_bar + 8 * ring.stage,
        //   parity of this pass), then the math of the slab as in step 3 -- this time wait
        //   until all of it is complete: the release below hands the stage to the producer.
        release(ring.stage);
      }
      store_warpgroup_tile(acc, C, M, N, ldc, vec_ok, tile_m * kBM + 64 * cw, tile_n * kBN);
    }
  }
  // TODO(step 6c): with kCluster > 1, a block must not exit while the other block of its
  //   cluster may still arrive on its barriers or multicast into its shared memory.
#else
  (void)tmap_a, (void)tmap_b, (void)C, (void)M, (void)N, (void)K, (void)ldc, (void)tiles_m, (void)tiles_n,
      (void)vec_ok;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

/// Launches the warp-specialized kernel: non-persistent (one cluster per cluster tile) or
/// persistent (as many clusters as fit on the GPU at once, at most one per cluster tile).
template <int kCluster>
void launch_ws(const TcMatmulArgs& a, bool persistent, const char* step) {
  require_sm90a(step);
  const int tiles_m = static_cast<int>((a.m + kBM - 1) / kBM);
  const int tiles_n = static_cast<int>((a.n + kBN - 1) / kBN);
  const int ctiles = static_cast<int>(grid_blocks((a.m + kCluster - 1) / kCluster, a.n, kBM, kBN, step));
  // The TMA boxes: A in kBM x kBK, B in kBK x 64, both written with the 128-byte swizzle.
  const CUtensorMap map_a = make_tma_map_bf16_2d(a.a, a.m, a.k, a.lda, kBM, kBK, TmaSwizzle::bytes128);
  const CUtensorMap map_b = make_tma_map_bf16_2d(a.b, a.k, a.n, a.ldb, kBK, 64, TmaSwizzle::bytes128);
  constexpr auto kernel = matmul_tc_ws_kernel<kCluster>;
  cc::opt_in_dynamic_smem<kernel>(kSmemBytes);

  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kCluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = a.stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  int clusters = ctiles;
  if (persistent) {
    // TODO(step 5c): clusters = as many as fit on the GPU at once, and no more than ctiles.
    //   cudaOccupancyMaxActiveClusters(&fit, kernel, &config) answers how many fit (set
    //   config.gridDim first); refuse fit < 1 with course::require_arg.
  }
  config.gridDim = dim3(clusters * kCluster);
  COURSE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, map_a, map_b, a.c, static_cast<int>(a.m),
                                       static_cast<int>(a.n), static_cast<int>(a.k), a.ldc, tiles_m, tiles_n,
                                       vec2_store_ok(a)));
  COURSE_CHECK_LAUNCH("matmul_tc_ws_kernel");
}
}  // namespace ws

// ---- the flags: a step's launcher throws NotImplemented until you set its flag.
// TODO(step 3c): true once wgmma_slab and the math of matmul_tc_wgmma_kernel are written.
constexpr bool kWgmmaWritten = false;
// TODO(step 4d): true once the setmaxnreg split and both hand-offs of matmul_tc_ws_kernel are written.
constexpr bool kTmaWarpSpecializedWritten = false;
// TODO(step 5d): true once TileSchedule, the tile loops and the persistent grid are written.
constexpr bool kPersistentWritten = false;
// TODO(step 6d): true once the multicast, the cluster-wide releases and syncs are written.
constexpr bool kClusterMulticastWritten = false;

}  // namespace

void launch_wgmma(const TcMatmulArgs& a) {
  constexpr const char* step = "matmul_tc(wgmma)";
  if (!kWgmmaWritten) throw NotImplemented("matmul_tc step wgmma (TODO 3a-3c)", __FILE__);
  require_sm90a(step);
  const int tiles_m = static_cast<int>((a.m + kBM - 1) / kBM);
  const int tiles_n = static_cast<int>((a.n + kBN - 1) / kBN);
  const unsigned tiles = grid_blocks(a.m, a.n, kBM, kBN, step);
  cc::opt_in_dynamic_smem<wgmma_step::matmul_tc_wgmma_kernel>(wgmma_step::kSmemBytes);
  wgmma_step::matmul_tc_wgmma_kernel<<<tiles, wgmma_step::kThreads, wgmma_step::kSmemBytes, a.stream>>>(
      a.a, a.b, a.c, static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.lda, a.ldb, a.ldc,
      tiles_m, tiles_n, vec2_store_ok(a));
  COURSE_CHECK_LAUNCH("matmul_tc_wgmma_kernel");
}

void launch_tma_warp_specialized(const TcMatmulArgs& a) {
  if (!kWgmmaWritten || !kTmaWarpSpecializedWritten)
    throw NotImplemented("matmul_tc step tma_warp_specialized (TODO 4a-4d; it uses your step 3 wgmma_slab)",
                         __FILE__);
  ws::launch_ws<1>(a, /*persistent=*/false, "matmul_tc(tma_warp_specialized)");
}

void launch_persistent(const TcMatmulArgs& a) {
  if (!kWgmmaWritten || !kTmaWarpSpecializedWritten || !kPersistentWritten)
    throw NotImplemented("matmul_tc step persistent (TODO 5a-5d, on top of steps 3 and 4)", __FILE__);
  ws::launch_ws<1>(a, /*persistent=*/true, "matmul_tc(persistent)");
}

void launch_cluster_multicast(const TcMatmulArgs& a) {
  if (!kWgmmaWritten || !kTmaWarpSpecializedWritten || !kPersistentWritten || !kClusterMulticastWritten)
    throw NotImplemented("matmul_tc step cluster_multicast (TODO 6a-6d, on top of steps 3-5)", __FILE__);
  ws::launch_ws<2>(a, /*persistent=*/true, "matmul_tc(cluster_multicast)");
}

}  // namespace course::exercise::tc_parts
