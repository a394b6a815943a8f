#pragma once
/// @file hopper_ptx.cuh
/// @brief Inline-PTX wrappers for Hopper's (sm_90) asynchronous data movement and
/// synchronisation: the tensor memory accelerator (TMA: `cp.async.bulk.tensor`), the
/// transaction barriers it completes on (`mbarrier`), thread-block-cluster addressing
/// (`mapa`, remote arrives), `setmaxnreg`, and the host check that a binary carries
/// sm_90a code for the current GPU. The one home of these wrappers; wgmma itself lives
/// in mma_ptx.cuh beside mma.sync.
///
/// The model, in one paragraph. A *transaction barrier* (mbarrier, 8 bytes of shared
/// memory) completes a *phase* when (a) the expected number of threads have arrived and
/// (b) the expected number of bytes have landed. A producer thread says "I arrive, and
/// expect 48 KB" (arrive.expect_tx), then starts TMA copies that name the barrier; each
/// copy counts its bytes down as they land. Consumers wait for the phase to complete
/// (try_wait.parity with the phase's parity bit, 0, 1, 0, ... as a ring of stages is
/// reused). The other direction, "this stage is free again", is a plain barrier the
/// consumers arrive on and the producer waits for. No __syncthreads anywhere: producer
/// and consumers run decoupled, as far apart as the ring is deep.
///
/// Where a wrapper needs sm_90 and the pass compiles for an older target, it traps;
/// hosts check sm90a_code_available() (or the compute capability) before launching.
///
/// Used by (solutions/, and the exercises/ file of the same name where there is one):
/// - module 1: matmul_tc_hopper.cu (TMA 2-D copies, multicast and stores, mbarrier ring, clusters,
///   setmaxnreg); tests/planted/matmul_tc_planted.cu
/// - module 2: batched_gemm_tensor_core.cu (wgmma: fence_proxy_async_smem, sm90a_code_available)
/// - module 3: attention_tc_hopper.cuh, attention_tc_hopper_phases.cuh and the exercise's
///   attention_tc_hopper.cu (tma_load_4d, the mbarrier K/V ring, setmaxnreg,
///   named_barrier_sync in the epilogue)
/// - common: course/tma.hpp (the host side of the tensor maps)

#include <cuda_runtime.h>

#include <cstdint>

namespace course::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define COURSE_SM90_PTX 1
#else
#define COURSE_SM90_PTX 0
#endif

// ------------------------------------------------------------------ mbarrier -----

/// `mbarrier.init.shared::cta.b64 [bar], count;` -- a barrier whose phases complete when
/// `count` arrivals (and every expected transaction byte) have been seen. One thread
/// initialises; fence_barrier_init() + a block (or cluster) barrier publish it.
__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, std::uint32_t count) {
#if COURSE_SM90_PTX
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  (void)bar, (void)count;
  __trap();
#endif
}

/// `fence.mbarrier_init.release.cluster;` -- makes the initialisation of this thread's
/// barriers visible to the async proxy (TMA) and to the other blocks of the cluster.
__device__ __forceinline__ void fence_barrier_init() {
#if COURSE_SM90_PTX
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/// `mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes;` -- arrive once, and add
/// `bytes` to the transaction count the current phase waits for (the TMA copies that
/// name this barrier count them down as they land).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
#if COURSE_SM90_PTX
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  (void)bar, (void)bytes;
  __trap();
#endif
}

/// `mbarrier.arrive.shared::cta.b64 _, [bar];` -- one arrival on a barrier of this block.
__device__ __forceinline__ void mbarrier_arrive(std::uint32_t bar) {
#if COURSE_SM90_PTX
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
  __trap();
#endif
}

/// One arrival on the barrier at the same shared-memory offset `bar` in block `cta_rank`
/// of this cluster (`mapa` turns the local address into the peer's). cta_rank may be this
/// block's own rank. The arrive has the default semantics, release at CTA scope: enough to
/// say "my reads of that stage are complete" (the reads were waited for before); a
/// `.release.cluster` arrive would also order this thread's earlier memory writes for the
/// peer, at the price of a cluster-wide fence on every call.
__device__ __forceinline__ void mbarrier_arrive_cluster(std::uint32_t bar, std::uint32_t cta_rank) {
#if COURSE_SM90_PTX
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(cta_rank)
      : "memory");
#else
  (void)bar, (void)cta_rank;
  __trap();
#endif
}

/// Spins until the phase of `bar` with parity `parity` has completed
/// (`mbarrier.try_wait.parity`, which itself suspends the thread for a while before
/// returning false; mbarrier_try_wait is one such attempt). A freshly initialised barrier is in phase 0: waiting for parity 1
/// returns at once (the phase "before" counts as completed), which is how a producer's
/// first pass over an empty ring goes through without anyone having released it.
__device__ __forceinline__ bool mbarrier_try_wait(std::uint32_t bar, std::uint32_t parity) {
#if COURSE_SM90_PTX
  std::uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
#else
  (void)bar, (void)parity;
  __trap();
  return false;
#endif
}
__device__ __forceinline__ void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

// ------------------------------------------------------------------ TMA ----------

/// The PTX instruction cp.async.bulk.tensor, 2-D, global to shared memory, completing on an
/// mbarrier by transaction bytes. One TMA copy of the box at (x = inner coordinate, y = outer coordinate) of the 2-D
/// tensor `tmap` describes into shared memory at `dst`, counted down on `bar`. The
/// box's shape and swizzle are in the tensor map (course/tma.hpp builds it on the host);
/// elements outside the tensor arrive as zeros and still count as bytes. Issued by one
/// thread. `tmap` must be the address of a `const __grid_constant__ CUtensorMap`
/// kernel parameter (or of one in global memory).
__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const void* tmap, std::uint32_t bar, int x, int y) {
#if COURSE_SM90_PTX
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          dst),
      "l"(tmap), "r"(bar), "r"(x), "r"(y)
      : "memory");
#else
  (void)dst, (void)tmap, (void)bar, (void)x, (void)y;
  __trap();
#endif
}

/// `createpolicy.fractional.L2::evict_first.b64` -- an L2 cache policy (for the .L2::cache_hint
/// of a load) that marks the lines it brings in as the first to evict. For an operand that is
/// streamed through once: its lines then make room for each other instead of pushing out what
/// else the L2 holds (another operand's reused tiles, or lines still dirty from an earlier
/// kernel, whose write-backs would otherwise land on this kernel's DRAM traffic).
__device__ __forceinline__ std::uint64_t l2_policy_evict_first() {
  std::uint64_t policy = 0;
#if COURSE_SM90_PTX
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#else
  __trap();
#endif
  return policy;
}

/// The same with the normal eviction priority (`.L2::evict_normal`): a hinted load that
/// behaves as an unhinted one, for kernels that choose the policy at run time.
__device__ __forceinline__ std::uint64_t l2_policy_evict_normal() {
  std::uint64_t policy = 0;
#if COURSE_SM90_PTX
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
#else
  __trap();
#endif
  return policy;
}

/// As tma_load_2d, with an L2 cache policy (`.L2::cache_hint`, e.g. l2_policy_evict_first()).
__device__ __forceinline__ void tma_load_2d_hinted(std::uint32_t dst, const void* tmap, std::uint32_t bar, int x, int y,
                                                   std::uint64_t policy) {
#if COURSE_SM90_PTX
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, "
      "%4}], [%2], %5;\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(x), "r"(y), "l"(policy)
      : "memory");
#else
  (void)dst, (void)tmap, (void)bar, (void)x, (void)y, (void)policy;
  __trap();
#endif
}

/// As tma_load_2d for a 4-D tensor map: the box at coordinates (c0 = innermost, c1, c2, c3),
/// e.g. (column, row, head, batch) of an attention tensor whose heads and batches have
/// strides of their own (module 3's Hopper steps).
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const void* tmap, std::uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
#if COURSE_SM90_PTX
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#else
  (void)dst, (void)tmap, (void)bar, (void)c0, (void)c1, (void)c2, (void)c3;
  __trap();
#endif
}

/// As tma_load_2d, but the box lands at offset `dst` (and completes on barrier `bar`) in
/// EVERY block of the cluster whose bit is set in `cta_mask`: one read of L2, several
/// shared memories written (`.multicast::cluster`).
__device__ __forceinline__ void tma_load_2d_multicast(std::uint32_t dst, const void* tmap, std::uint32_t bar, int x,
                                                      int y, std::uint16_t cta_mask) {
#if COURSE_SM90_PTX
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(tmap), "r"(bar), "r"(x), "r"(y), "h"(cta_mask)
      : "memory");
#else
  (void)dst, (void)tmap, (void)bar, (void)x, (void)y, (void)cta_mask;
  __trap();
#endif
}

/// The PTX instruction cp.async.bulk.tensor, 2-D, shared memory to global, completing in a
/// bulk group -- the other direction of tma_load_2d: one TMA copy of the box at shared-memory
/// address `src`, laid out as the map's swizzle says, to (x, y) of the tensor. Box rows past the tensor's last row are not written, but
/// each row is written on to the next 16-byte boundary past the last column (measured on an
/// H100 with the 128-byte swizzle: a bf16 tensor of 7 or 127 columns got one element more per
/// row, of 100 columns four): keep the row length a multiple of 16 bytes where the elements
/// past it matter (module 1's staged epilogue requires N % 8 == 0). Issued by
/// one thread after every thread that wrote the box has run fence_proxy_async_smem
/// (mma_ptx.cuh) and met it at a barrier. Asynchronous: bulk_commit_group closes a group of
/// stores, bulk_wait_group_read<0> waits until they have read shared memory (before it is
/// written again, or the block exits), bulk_wait_group<0> until their writes are done.
__device__ __forceinline__ void tma_store_2d(const void* tmap, std::uint32_t src, int x, int y) {
#if COURSE_SM90_PTX
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(tmap), "r"(src),
               "r"(x), "r"(y)
               : "memory");
#else
  (void)tmap, (void)src, (void)x, (void)y;
  __trap();
#endif
}

/// The PTX instruction cp.reduce.async.bulk.tensor with .add, 2-D, shared memory to global:
/// as tma_store_2d, but each element of the box is ADDED to the tensor's element, atomically
/// at L2 (the map's element type; module 1's pingpong adds fp32 tiles of C with it). Adds from
/// several copies to one element are each atomic, in no fixed order: where the order of the
/// sums must not vary (split-K's partial products), hand a turn on after bulk_wait_group<0>.
__device__ __forceinline__ void tma_reduce_add_2d(const void* tmap, std::uint32_t src, int x, int y) {
#if COURSE_SM90_PTX
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   tmap),
               "r"(src), "r"(x), "r"(y)
               : "memory");
#else
  (void)tmap, (void)src, (void)x, (void)y;
  __trap();
#endif
}

/// `fence.proxy.async.global;` -- orders this thread's global-memory accesses of the generic
/// proxy (an acquire or release of a flag) against its bulk copies' (the async proxy's) on
/// either side of it: module 1's pingpong runs it after taking a split-K turn and before
/// handing it on, around its TMA additions into C.
__device__ __forceinline__ void fence_proxy_async_global() {
#if COURSE_SM90_PTX
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

/// `cp.async.bulk.commit_group;` -- closes the group of this thread's bulk stores issued since
/// the last commit.
__device__ __forceinline__ void bulk_commit_group() {
#if COURSE_SM90_PTX
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

/// `cp.async.bulk.wait_group.read N;` -- waits until at most N of this thread's committed
/// bulk-store groups have still to read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
#if COURSE_SM90_PTX
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}

/// `cp.async.bulk.wait_group N;` -- waits until at most N of this thread's committed
/// bulk-store groups are incomplete (their global writes included).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
#if COURSE_SM90_PTX
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/// `prefetch.tensormap [tmap];` -- brings the tensor map's 128 bytes into the cache
/// before the first copy needs them.
__device__ __forceinline__ void tma_prefetch_descriptor(const void* tmap) {
#if COURSE_SM90_PTX
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
#else
  (void)tmap;
#endif
}

// ------------------------------------------------------------------ registers / cluster --

/// `setmaxnreg.inc.sync.aligned.u32 N;` / `.dec` -- the warpgroup's register budget per
/// thread becomes N (a multiple of 8, 24..256). A producer warpgroup that only issues
/// copies gives registers back (dec), consumer warpgroups that hold big accumulator
/// tiles take them (inc). Needs sm_90a, a register cap at kernel entry
/// (`__launch_bounds__(threads, 1)`), and all warps of the warpgroup executing it.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/// `bar.sync id, threads;` -- a barrier for `threads` threads (a multiple of 32) that use
/// hardware barrier `id` (1..15; 0 is __syncthreads'): warpgroups that must meet without
/// the rest of the block, e.g. consumers while the producer warp runs on.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
  (void)id, (void)threads;
#endif
}

/// `bar.arrive id, threads;` -- counts this warp's threads on named barrier `id` without
/// waiting: the other side of named_barrier_sync (a producer of a turn hands it over and
/// runs on; those who sync on `id` proceed once `threads` have arrived or synced).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
#if defined(__CUDA_ARCH__)
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#else
  (void)id, (void)threads;
#endif
}

/// This block's rank in its cluster (`%cluster_ctarank`; 0 without clusters).
__device__ __forceinline__ std::uint32_t cluster_ctarank() {
#if COURSE_SM90_PTX
  std::uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  return 0;
#endif
}

/// Every thread of every block of the cluster arrives and waits
/// (`barrier.cluster.arrive` + `wait`, release/acquire): a __syncthreads across the cluster.
__device__ __forceinline__ void cluster_sync() {
#if COURSE_SM90_PTX
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// ------------------------------------------------------------------ host check ----

/// A probe compiled for every target of the build: it reports 1 only when the driver
/// picked sm_90a machine code for this GPU (a template, so every translation unit that
/// includes this header shares one definition).
template <int kUnused = 0>
__global__ void sm90a_probe_kernel(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

/// True when the current GPU has compute capability 9.0 and this binary carries sm_90a
/// code for it (wgmma and setmaxnreg exist only there, not in plain sm_90). Cached per
/// device. Any CUDA error on the way (no device, no kernel image) answers false.
inline bool sm90a_code_available() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  static int cached_device = -1;
  static bool cached = false;
  if (device == cached_device) return cached;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  bool ok = false;
  if (major == 9 && minor == 0) {
    int* flag = nullptr;
    if (cudaMalloc(&flag, sizeof(int)) == cudaSuccess) {
      sm90a_probe_kernel<<<1, 1>>>(flag);
      if (cudaGetLastError() == cudaSuccess) {  // no sm_90 code at all: "no kernel image"
        int host = 0;
        if (cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess) ok = host == 1;
      }
      cudaFree(flag);
    }
  }
  cached_device = device;
  cached = ok;
  return ok;
}

}  // namespace course::cuda
