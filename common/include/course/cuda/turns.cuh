#pragma once
/// @file turns.cuh
/// @brief Blocks that add into one accumulator in a FIXED order take turns: a counter in
/// global memory names the block whose turn it is; a block waits until the counter reads
/// its number, adds, and hands the turn to the next number. Floating-point additions are
/// not associative, so the order fixes the bits: the result is the same on every run.
///
/// Taught in module 4 (the deterministic attention backward: lesson section 5, "Where dQ's
/// additions go"). Used by (solutions/):
/// - module 4: attention_backward_tc_phases.cuh (tc_deterministic, the solution's
///   Phases::wait_dq_turn / pass_dq_turn), attention_backward_flash.cuh
///   (flash_deterministic), attention_backward_tc_wgmma.cuh (tc_wgmma_deterministic's deferred
///   release_turn); the exercises write their own.
///
/// Why it cannot deadlock: a block only ever waits for a block with a LOWER linear block
/// number (the turn before its own), and the GPU starts blocks in increasing linear order,
/// so the block it waits for is running or done. The caller's grid must keep that property
/// (module03/attention_blocks.cuh: kv_block_coordinates and grouped_kv_block_coordinates do;
/// module 4's causal turn steps reverse both the key tiles and the order of the turns,
/// module04/attention_backward.hpp: tc_dq_turn_place).
///
/// Both calls contain __syncthreads(): every thread of the block must make them.

#include <cuda/atomic>
#include <cuda_runtime.h>

namespace course::cuda {

/// Returns once *counter == turn. One thread polls with acquire loads (device scope), with a
/// short sleep between polls; the barrier then holds every thread of the block, and orders
/// the additions after the acquire: they see everything the earlier turns added.
__device__ __forceinline__ void wait_turn(int* counter, int turn) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> c(*counter);
    while (c.load(::cuda::memory_order_acquire) != turn) __nanosleep(32);
  }
  __syncthreads();
}

/// The store half of pass_turn: thread (0, 0, 0) hands the turn to `turn + 1` with a release
/// store. The caller's own block barrier, between every thread's additions and this call,
/// orders them before it. A release store waits until the block's earlier writes are visible
/// (for atomics: acknowledged by L2), which stalls the storing warp; a caller may defer the
/// call past work that does not need the turn (tc_wgmma_deterministic: past the next tile's
/// first products, after the barrier that opens that tile).
__device__ __forceinline__ void release_turn(int* counter, int turn) {
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> c(*counter);
    c.store(turn + 1, ::cuda::memory_order_release);
  }
}

/// Hands the turn to `turn + 1` once every thread's additions are issued: the barrier orders
/// them before one thread's release store, which the next block's acquire load observes.
__device__ __forceinline__ void pass_turn(int* counter, int turn) {
  __syncthreads();
  release_turn(counter, turn);
}

}  // namespace course::cuda
