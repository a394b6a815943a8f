#pragma once
/// @file attention_tc_hopper_phases.cuh
/// @brief The solution's phases of the Hopper attention steps: the two wgmma products, the
/// K/V ring's producer/consumer hand-off and the ping-pong turns. attention_tc_hopper.cuh's kernels call them through
/// their `Phases` parameter; the exercise writes its own, and the planted bugs of
/// module03_attention/tests/planted derive from these and replace one.

#include "attention_tc_hopper.cuh"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/mma_ptx.cuh"

#include <cuda.h>

#include <cstdint>

namespace course::solution::attn_tc_hopper_phases {

namespace cc = ::course::cuda;
using attn_tc_hopper::ws_step::KvStage;

struct Phases {
  // ---- step tc_wgmma: the two products

  /// S = Q K^T for one consumer warpgroup: d/16 wgmma m64n128k16, both operands K-major in
  /// shared memory. A k16 step is 32 bytes further along the 128-byte rows, and every 4
  /// steps the next 64-column block; 8-row groups are 1024 bytes apart (sbo). `q_rows` is
  /// the warpgroup's first row of the Q tile (64 wg). Issued only: the caller commits and waits.
  template <class T>
  __device__ __forceinline__ static void issue_scores(float (&s)[T::kSRegs], std::uint32_t q_tile,
                                                      std::uint32_t k_tile, int q_rows) {
#pragma unroll
    for (int ks = 0; ks < T::D / 16; ++ks) {
      const std::uint32_t along = (ks % 4) * 32;
      const std::uint64_t da = cc::wgmma_desc_sw128(q_tile + (ks / 4) * T::kBlockM * 128 + q_rows * 128 + along, 16, 1024);
      const std::uint64_t db = cc::wgmma_desc_sw128(k_tile + (ks / 4) * T::kBlockN * 128 + along, 16, 1024);
      cc::wgmma_m64n128k16_bf16_f32</*kBMnMajor=*/false>(s, da, db, ks > 0 ? 1 : 0);
    }
  }

  /// O += P V for one consumer warpgroup: kBlockN/16 wgmma m64nDk16 with A = P from
  /// registers (pk, bf16 pairs in accumulator order) and B = V MN-major: a k16 step is 16
  /// key rows (2048 bytes) further, lbo = one 64-column block of V (kBlockN rows of 128
  /// bytes), sbo = 1024 between groups of 8 keys. Issued only.
  template <class T>
  __device__ __forceinline__ static void issue_pv(float (&o)[T::kORegs], const std::uint32_t (&pk)[T::kBlockN / 8][2],
                                                  std::uint32_t v_tile) {
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
      const std::uint32_t a[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
      const std::uint64_t db = cc::wgmma_desc_sw128(v_tile + kk * 16 * 128, T::kBlockN * 128, 1024);
      if constexpr (T::D == 64)
        cc::wgmma_m64n64k16_rs_bf16_f32</*kBMnMajor=*/true>(o, a, db);
      else
        cc::wgmma_m64n128k16_rs_bf16_f32</*kBMnMajor=*/true>(o, a, db);
    }
  }

  // ---- step tc_warp_specialized: the K/V ring

  /// Producer (one thread): fill stage `st` with K and V rows [row, row + 128) of kv head
  /// `kh`, batch `kb`. Wait until both consumer warpgroups released the stage's previous
  /// use (parity st.phase ^ 1 on "empty": on the first pass through the ring that phase
  /// counts as completed, so the wait returns at once), announce the bytes the stage will
  /// receive on "full" (arrive + expect_tx: the phase completes when they have all landed),
  /// then one TMA box per 64-column block of K and of V, each counted down on "full".
  template <class T, class R>
  __device__ __forceinline__ static void load_kv_tile(const KvStage& st, const CUtensorMap* tmap_k,
                                                      const CUtensorMap* tmap_v, int row, int kh, int kb) {
    cc::mbarrier_wait(st.empty, st.phase ^ 1u);
    cc::mbarrier_arrive_expect_tx(st.full, R::kStageBytes);
#pragma unroll
    for (int cb = 0; cb < T::D / 64; ++cb) {
      cc::tma_load_4d(st.smem + cb * T::kBlockN * 128, tmap_k, st.full, 64 * cb, row, kh, kb);
      cc::tma_load_4d(st.smem + T::kKVBytes + cb * T::kBlockN * 128, tmap_v, st.full, 64 * cb, row, kh, kb);
    }
  }

  /// Consumer (every thread of a consumer warpgroup): wait until stage `st`'s bytes have landed.
  __device__ __forceinline__ static void wait_kv_tile(const KvStage& st) { cc::mbarrier_wait(st.full, st.phase); }

  /// Consumer: after this warpgroup's P V on the stage has COMPLETED (wgmma_wait), one thread
  /// of the warpgroup arrives on "empty" (it expects one arrival per consumer warpgroup).
  __device__ __forceinline__ static void release_kv_tile(const KvStage& st) {
    if (threadIdx.x % 128 == 0) cc::mbarrier_arrive(st.empty);
  }

  // ---- step tc_pingpong: the turns

  /// Wait until consumer warpgroup `cw` may issue its GEMM phase: a bar.sync on its named
  /// barrier kTurnBarrier + cw, which completes when its 128 threads are there AND the other
  /// warpgroup's 128 have arrived (pass_turn) -- 256 in all.
  __device__ __forceinline__ static void wait_turn(int cw) {
    cc::named_barrier_sync(attn_tc_hopper::ws_step::kTurnBarrier + cw, 256);
  }

  /// Hand the tensor cores to the other warpgroup (right after issuing, not after completing:
  /// its wgmmas queue behind ours): bar.arrive on its barrier, counted without waiting.
  __device__ __forceinline__ static void pass_turn(int cw) {
    cc::named_barrier_arrive(attn_tc_hopper::ws_step::kTurnBarrier + (1 - cw), 256);
  }

  // ---- step tc_overlap: two commit groups

  /// One GEMM phase of step 13: S_j = Q K_j^T in a commit group of its own, THEN O +=
  /// P_{j-1} V_{j-1} in a second. Groups complete in commit order, so the kernel's
  /// wgmma_wait<1> (at most one group pending) returns as soon as S_j has landed, and the
  /// softmax of tile j starts while P V still runs. In the other order wait<1> would wait
  /// for P V only; the compiler, which tracks the wgmmas' registers, then holds the
  /// softmax's first read of S until S completes: correct, but nothing overlaps.
  template <class T>
  __device__ __forceinline__ static void issue_scores_then_pv(float (&s)[T::kSRegs], float (&o)[T::kORegs],
                                                              const std::uint32_t (&pk)[T::kBlockN / 8][2],
                                                              std::uint32_t q_tile, std::uint32_t k_tile,
                                                              std::uint32_t v_tile, int q_rows) {
    issue_scores<T>(s, q_tile, k_tile, q_rows);
    cc::wgmma_commit();
    issue_pv<T>(o, pk, v_tile);
    cc::wgmma_commit();
  }
};

}  // namespace course::solution::attn_tc_hopper_phases
