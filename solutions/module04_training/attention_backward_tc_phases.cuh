#pragma once
/// @file attention_backward_tc_phases.cuh
/// @brief The solution's phases of the tensor-core attention backward: P^T recomputed on the
/// accumulator fragments, dS^T, the ordered dQ hand-off, and tc_wgmma's three wgmma products. attention_backward_tc.cuh's
/// kernels call them through their `Phases` parameter; the exercise writes its own, and the
/// planted bugs of module04_training/tests/planted derive from these and replace one.

#include "attention_backward_tc.cuh"

#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/turns.cuh"

#include <cstdint>

namespace course::solution::attn_bwd_tc_phases {

using attn_bwd_tc::Params;
using attn_bwd_tc::TileSpot;

/// The solution's phases.
struct Phases {
  /// P^T = 2^(S^T * scale * log2(e) - lse2) on the warp's accumulators, in place. Element e
  /// of n8 tile j: key spot.key0 + g + 8 (e/2), query column 8j + 2t + e%2 of the tile.
  /// Rows past N_q and rows that see no key carry lse2 = +inf, so their P is 2^-inf = 0;
  /// keys past N_k and keys after a row's causal diagonal are set to 0 here. Cfg::kSTiles is
  /// the number of n8 query tiles the warp holds: 8 (the tile's 64 queries, or with the
  /// 128-query tiles of d = 64 the warp's 64) or, with the 32 x 32 warp tiles (d = 128), 4;
  /// spot and lse2 start at the warp's first query. The mask is a select per element on a
  /// predicate, or with Cfg::kMaskAsBits (the split steps) an AND with an integer mask.
  template <class Cfg, bool kCausal>
  __device__ __forceinline__ static void probabilities(float (&s)[Cfg::kSTiles][4], const Params& p,
                                                       const TileSpot& spot, const float* lse2) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    if constexpr (Cfg::kMaskAsBits) {
      // Key row key0 + g + 8h sees column 8j + 2t + e%2 of the tile iff the key is inside
      // N_k and, causal, first - 1 < 8j + e%2 with first = key - causal_offset - query0 - 2t:
      // cuda::less_than_mask, the AND mask of the value's bits (without the mask, one AND mask
      // per key row).
      std::uint32_t keep_row[2];  // without the mask
      int first_m1[2];            // causal: first - 1; 2^30 for a key past N_k, -2^30 for no mask
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int key = spot.key0 + g + 8 * h;
        const bool inside = !spot.needs_mask || key < p.seq_k;
        if constexpr (kCausal)
          first_m1[h] = !inside ? (1 << 30)
                        : spot.needs_mask ? key - p.causal_offset - spot.query0 - 2 * t - 1
                                          : -(1 << 30);
        else
          keep_row[h] = inside ? ~0u : 0u;
      }
#pragma unroll
      for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = 8 * j + 2 * t + (e & 1);
          const float pv = cuda::ex2_approx(fmaf(s[j][e], p.scale_log2, -lse2[col]));
          const std::uint32_t keep =
              kCausal ? cuda::less_than_mask(first_m1[e >> 1], 8 * j + (e & 1)) : keep_row[e >> 1];
          s[j][e] = __uint_as_float(__float_as_uint(pv) & keep);
        }
    } else {
#pragma unroll
      for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = 8 * j + 2 * t + (e & 1);
          float pv = cuda::ex2_approx(fmaf(s[j][e], p.scale_log2, -lse2[col]));
          if (spot.needs_mask) {
            const int key = spot.key0 + g + 8 * (e >> 1), query = spot.query0 + col;
            if (key >= p.seq_k || (kCausal && key > query + p.causal_offset)) pv = 0.f;
          }
          s[j][e] = pv;
        }
    }
  }

  /// dS^T = P^T * (dP^T - D), in place of dP^T: D belongs to the query (the column).
  template <class Cfg>
  __device__ __forceinline__ static void ds(float (&dp)[Cfg::kSTiles][4], const float (&pt)[Cfg::kSTiles][4],
                                            const float* d_row) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int j = 0; j < Cfg::kSTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[j][e] = pt[j][e] * (dp[j][e] - d_row[8 * j + 2 * t + (e & 1)]);
  }

  /// tc_deterministic: the block waits until the counter of its query tile reads `place`,
  /// its place in that tile's order of additions (dq_turn_rank: 0, 1, 2, ... by K/V tile
  /// without the mask, from the last K/V tile down with it): course/cuda/turns.cuh, which
  /// the fp32 flash_deterministic step uses too. One thread polls with acquire loads; the
  /// barrier then holds every warp until the turn has come.
  __device__ __forceinline__ static void wait_dq_turn(int* turn, int place) { cuda::wait_turn(turn, place); }

  /// Hands the turn to place + 1 once every warp's additions are issued: the barrier orders
  /// them before thread 0's release store, which the next block acquires.
  __device__ __forceinline__ static void pass_dq_turn(int* turn, int place) { cuda::pass_turn(turn, place); }

  // ---- step tc_wgmma: the three warpgroup products (attention_backward_tc_wgmma.cuh). Each
  // only issues its wgmmas; the kernel fences, commits and waits. Tiles are in the 128-byte-
  // swizzle layout (cuda::Sw128Geom): [rows][64] column blocks of 128-byte rows.

  /// acc = X_rows Y^T (S^T = K_wg Q^T, dP^T = V_wg dO^T): rows x_row0 .. x_row0 + 63 of X
  /// ([kBlockN][D] in shared memory) against the kBlockM rows of Y ([kBlockM][D]), d/16
  /// wgmma m64n64k16 with both operands K-major (d contiguous). A k16 step is 32 bytes
  /// further along the 128-byte rows, every 4 steps the next column block; 8-row groups are
  /// 1024 bytes apart (sbo; lbo is unused for K-major swizzled operands).
  template <class W>
  __device__ __forceinline__ static void issue_transposed_scores(float (&acc)[W::kSRegs], std::uint32_t x_tile,
                                                                 int x_row0, std::uint32_t y_tile) {
#pragma unroll
    for (int ks = 0; ks < W::kDSteps; ++ks) {
      const std::uint32_t along = (ks % 4) * 32;
      const std::uint64_t da =
          cuda::wgmma_desc_sw128(x_tile + (ks / 4) * W::kBlockN * 128 + x_row0 * 128 + along, 16, 1024);
      const std::uint64_t db = cuda::wgmma_desc_sw128(y_tile + (ks / 4) * W::kBlockM * 128 + along, 16, 1024);
      cuda::wgmma_m64n64k16_bf16_f32</*kBMnMajor=*/false>(acc, da, db, ks > 0 ? 1 : 0);
    }
  }

  /// acc (dV or dK: the warpgroup's 64 keys x D) += A Y, A = P^T or dS^T from registers
  /// (pk: packed bf16 in accumulator order, k16 step kk = n8 tiles 2kk, 2kk + 1), Y = dO or Q
  /// ([kBlockM queries][D]) MN-major: k = the queries, one 128-byte row each; a k16 step is
  /// 16 rows (2048 bytes) further, lbo = one 64-column block of Y, sbo = 1024 between groups
  /// of 8 rows. Module 3's P V, with P^T.
  template <class W>
  __device__ __forceinline__ static void issue_accumulate_keys(float (&acc)[W::kKeyRegs],
                                                               const std::uint32_t (&pk)[W::kSTiles][2],
                                                               std::uint32_t y_tile) {
#pragma unroll
    for (int kk = 0; kk < W::kQSteps; ++kk) {
      const std::uint32_t a[4] = {pk[2 * kk][0], pk[2 * kk][1], pk[2 * kk + 1][0], pk[2 * kk + 1][1]};
      const std::uint64_t db = cuda::wgmma_desc_sw128(y_tile + kk * 16 * 128, W::kBlockM * 128, 1024);
      if constexpr (W::D == 64)
        cuda::wgmma_m64n64k16_rs_bf16_f32</*kBMnMajor=*/true>(acc, a, db);
      else
        cuda::wgmma_m64n128k16_rs_bf16_f32</*kBMnMajor=*/true>(acc, a, db);
    }
  }

  /// acc = dS K for one 64 x 64 block of dQ: the tile's 64 queries against all kBlockN keys,
  /// columns 64 col_block ... A = dS read from the stored dS^T ([kBlockN keys][64 queries]):
  /// m (the queries) contiguous, one row per k (key): MN-major, the instruction's transpose
  /// bit for A; B = K ([kBlockN keys][D]) MN-major likewise. Both step 16 key rows (2048
  /// bytes) per k16; sbo = 1024, lbo = a column block (unused at 64 wide).
  template <class W>
  __device__ __forceinline__ static void issue_dq(float (&acc)[W::kDqRegs], std::uint32_t ds_tile,
                                                  std::uint32_t k_tile, int col_block) {
#pragma unroll
    for (int kk = 0; kk < W::kDqKeySteps; ++kk) {
      const int key = 16 * kk;
      const std::uint64_t da = cuda::wgmma_desc_sw128(ds_tile + key * 128, W::kDsBytes, 1024);
      const std::uint64_t db =
          cuda::wgmma_desc_sw128(k_tile + col_block * W::kBlockN * 128 + key * 128, W::kBlockN * 128, 1024);
      cuda::wgmma_m64n64k16_bf16_f32</*kBMnMajor=*/true, /*kAMnMajor=*/true>(acc, da, db, kk > 0 ? 1 : 0);
    }
  }
};

}  // namespace course::solution::attn_bwd_tc_phases
