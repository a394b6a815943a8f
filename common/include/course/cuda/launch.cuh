#pragma once
/// @file launch.cuh
/// @brief Host-side launch helpers every module's kernels share: the dynamic shared-memory
/// opt-in with its carveout (once per kernel and device), the size of a one-wave grid
/// (once per kernel and device) and its balanced share of the work, the early (programmatic
/// dependent) launch of a kernel that waits for its predecessor, and the dispatch from a
/// runtime head dimension to a kernel templated on it, driven by the public header's list of
/// allowed values.
///
/// Why these exist: a kernel that asks for more than 48 KiB of dynamic shared memory must
/// be opted in with cudaFuncSetAttribute on every device it runs on, and a kernel templated
/// on the head dimension needs one `case` per value of the header's list. Writing either
/// by hand next to every launcher is how copies drift (a cache per process instead of per
/// device, a `case` the header no longer allows).
///
/// Used by (solutions/, and the exercises/ file of the same name where there is one):
/// - module 1: matmul.cu, matmul_tc.cu, matmul_tc_hopper.cu, reductions.cu, softmax.cu
/// - module 2: batched_gemm_fp32.cu, batched_gemm_tensor_core.cu
/// - module 3: attention.cu, attention_fused.cu, attention_tc.cuh, attention_tc_flash.cuh
///   (which the exercise's attention_tc.cu includes), attention_tc_hopper.cuh
/// - module 4: attention_backward_flash.cu, attention_backward_tc.cuh (and the exercise's
///   attention_backward.cu), layer_norm.cu, layer_norm_backward.cu

#include "course/error.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

namespace course::cuda {

/// How an SM's unified L1 / shared-memory storage is split for a kernel (the
/// cudaFuncAttributePreferredSharedMemoryCarveout hint).
enum class Carveout {
  /// As much shared memory as the SM has (L1 keeps the rest: 28 KiB of 256 on sm_90): the
  /// most blocks per SM, for kernels that stage their operands in shared memory or by TMA.
  max_shared,
  /// The driver's choice: enough shared memory for the blocks that fit, the rest stays L1.
  /// For kernels whose loads go through L1: the fp32 warp-tiled GEMMs (4-byte cp.async.ca)
  /// ran 1-3% slower with max_shared on an H100.
  driver_default,
};

/// Lets `kKernel` use `bytes` of dynamic shared memory (more than 48 KiB must be opted
/// into) and asks for `carveout`, once per device: the attributes are per device, so a
/// process that launches on two GPUs configures both. Later calls with at most the bytes
/// already granted on this device return after one atomic load.
/// Throws course::Error, naming both numbers, when the device cannot give `bytes`.
template <auto kKernel>
void opt_in_dynamic_smem(int bytes, Carveout carveout = Carveout::max_shared) {
  static std::atomic<int> granted[64] = {};  // bytes granted per device (0: never)
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<int>* slot = device >= 0 && device < 64 ? &granted[device] : nullptr;
  if (slot != nullptr && slot->load(std::memory_order_acquire) >= bytes) return;
  int optin = 0;  // the most one block may opt into (99 KiB on sm_86/89, 227 KiB on sm_90)
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > optin)
    throw Error("a kernel needs " + std::to_string(bytes) + " bytes of shared memory per block; device " +
                std::to_string(device) + " allows " + std::to_string(optin));
  COURSE_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if (carveout == Carveout::max_shared)
    COURSE_CUDA_CHECK(
        cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  if (slot == nullptr) return;
  int seen = slot->load(std::memory_order_relaxed);
  while (seen < bytes && !slot->compare_exchange_weak(seen, bytes, std::memory_order_release)) {
  }
}

/// The most blocks of `kKernel` (`threads` threads, `smem_bytes` of dynamic shared memory
/// each) resident at once on the current device: its SM count times the occupancy
/// calculator's blocks per SM. A grid of at most that many blocks runs as ONE wave, every
/// block started at once, which is what a kernel whose blocks loop over the rows needs (a
/// "persistent" grid: no second wave, and the loop can prefetch its next row). The query
/// costs microseconds, so the answer is kept per (kernel, device) and recomputed only when
/// smem_bytes changes; `threads` must be the same on every call for one kernel.
template <auto kKernel>
int one_wave_blocks(int threads, int smem_bytes = 0) {
  static std::atomic<std::int64_t> cached[64] = {};  // (smem_bytes + 1) << 32 | blocks; 0: never
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<std::int64_t>* slot = device >= 0 && device < 64 ? &cached[device] : nullptr;
  const std::int64_t key = (static_cast<std::int64_t>(smem_bytes) + 1) << 32;
  if (slot != nullptr) {
    const std::int64_t seen = slot->load(std::memory_order_relaxed);
    if ((seen & ~0xffffffffLL) == key) return static_cast<int>(seen & 0xffffffffLL);
  }
  int sms = 0, per_sm = 0;
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  COURSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, smem_bytes));
  const int blocks = sms * per_sm > 0 ? sms * per_sm : 1;
  if (slot != nullptr) slot->store(key | blocks, std::memory_order_relaxed);
  return blocks;
}

/// Blocks for a grid of at most `resident_blocks` blocks (one_wave_blocks) whose workers
/// (`workers_per_block` per block: threads, warps) take `items` items round-robin, sized so
/// that every worker gets the same number of items or one fewer: items per worker =
/// ceil(items / resident workers), workers = ceil(items / that). With 16384 rows on 5280
/// resident warps, 4096 warps take 4 rows each, where 5280 would leave 10% of the warps a
/// 4th row to run alone.
inline unsigned balanced_blocks(std::int64_t items, int workers_per_block, int resident_blocks) {
  if (items <= 0) return 1;  // nothing to share: one block that finds no item
  const std::int64_t resident = static_cast<std::int64_t>(resident_blocks) * workers_per_block;
  const std::int64_t per_worker = (items + resident - 1) / resident;
  const std::int64_t workers = (items + per_worker - 1) / per_worker;
  return static_cast<unsigned>((workers + workers_per_block - 1) / workers_per_block);
}

/// Whether `kKernel` may be launched early (launch_early) on the current device: the device
/// is sm_90 or newer AND the kernel's code was compiled for sm_90 or newer, so that it
/// contains its cudaGridDependencySynchronize() (a compute_80 build JIT-compiled on an H100
/// does not). Kept per (kernel, device).
template <auto kKernel>
bool supports_early_launch() {
  static std::atomic<int> cached[64] = {};  // 1: no, 2: yes; 0: never asked
  int device = 0;
  COURSE_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<int>* slot = device >= 0 && device < 64 ? &cached[device] : nullptr;
  if (slot != nullptr) {
    if (const int seen = slot->load(std::memory_order_relaxed); seen != 0) return seen == 2;
  }
  int major = 0;
  COURSE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaFuncAttributes attr{};
  COURSE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kKernel));
  const bool early = major >= 9 && attr.ptxVersion >= 90;
  if (slot != nullptr) slot->store(early ? 2 : 1, std::memory_order_relaxed);
  return early;
}

/// Launches kKernel<<<grid, block, smem_bytes, stream>>>(args...) with "programmatic dependent
/// launch" where supports_early_launch allows it: the GPU may start the kernel before the
/// previous kernel in the stream has finished (as soon as every block of that kernel has
/// called cudaTriggerProgrammaticLaunchCompletion() or exited), which hides the 2-3 us gap
/// between two dependent launches. Every block of the kernel must call
/// cudaGridDependencySynchronize() before it reads or writes memory the previous kernel
/// touches (it returns at once after an ordinary launch); kernels launched after it are
/// ordinary launches and wait for it as usual. Elsewhere an ordinary launch. CUDA errors
/// carry the call's file and line (COURSE_CUDA_CHECK).
template <auto kKernel, class... Args>
void launch_early(dim3 grid, dim3 block, std::size_t smem_bytes, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = supports_early_launch<kKernel>() ? 1 : 0;
  COURSE_CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, args...));
}

namespace detail {
template <const auto& kList, class F, std::size_t... I>
void dispatch_in(std::int64_t value, const char* what, F&& f, std::index_sequence<I...>) {
  bool hit = false;
  // One comparison per entry of the list; the matching entry calls f with its value as a
  // compile-time constant.
  ((!hit && value == kList[I] ? (hit = true, f(std::integral_constant<int, kList[I]>{}), 0) : 0), ...);
  if (!hit)
    throw Error(std::string(what) + " = " + std::to_string(value) +
                        " reached a kernel dispatch that has no instance for it (validation should have rejected it)");
}
}  // namespace detail

/// Calls `f(std::integral_constant<int, D>{})` for the entry D of `kList` (a constexpr
/// int array of a public header, e.g. m03::kTcHeadDims) equal to `value`:
///
///     course::cuda::dispatch_value<m04::kTcBackwardHeadDims>(a.head_dim, "head_dim",
///         [&](auto d) { launch<decltype(d)::value>(a); });
///
/// The list is the single source: adding a head dimension to the header instantiates the
/// kernels for it, and the validation and the dispatch can never disagree. A value not in
/// the list throws course::Error (validation runs first, so that is a bug, not bad input).
template <const auto& kList, class F>
void dispatch_value(std::int64_t value, const char* what, F&& f) {
  detail::dispatch_in<kList>(value, what, std::forward<F>(f), std::make_index_sequence<std::size(kList)>{});
}

}  // namespace course::cuda
