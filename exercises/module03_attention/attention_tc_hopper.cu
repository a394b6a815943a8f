/// @file attention_tc_hopper.cu
/// @brief YOUR Hopper attention steps (module 3, bf16, sm_90a):
///   10. tc_wgmma             the two products on warpgroup MMA: S = Q K^T from shared-memory
///                            descriptors, O += P V with P taken from registers
///   11. tc_warp_specialized  the K/V ring's hand-off: the TMA producer and the consumers
///   12. tc_pingpong          the two consumer warpgroups' turns on the tensor cores
///   13. tc_overlap           one GEMM phase as two commit groups: S first, then P V
///   14. tc_persistent        nothing new to write: step 13's phases, run by a persistent
///                            kernel (one block per SM walking the query tiles; read it)
///
/// The kernels -- tiles in the 128-byte-swizzle layout, the cp.async loads of step 10, the
/// tensor maps and the warp roles of step 11, the online softmax on the accumulators, the
/// epilogue -- are solutions/module03_attention/attention_tc_hopper.cuh, the very code the
/// solution runs. Read its file comment and the lesson (module03_attention/README.md, "The
/// Hopper steps") first. You write the eight phases below; the kernels call them.
/// Set the matching kXxxWritten flag when a step's phases are done: a step whose phases are
/// not written throws NotImplemented and its tests show SKIPPED. On a GPU that is not a
/// Hopper (or a build without sm_90a) the steps report Unsupported, also SKIPPED.
/// Run the tests with:   ctest --preset default -L exercise -R attention_tc
/// Hints, one at a time: `bash scripts/course.sh hint attention/tc_wgmma` (and
/// attention/tc_warp_specialized, attention/tc_pingpong, attention/tc_overlap, attention/tc_persistent).

#include "../../solutions/module03_attention/attention_tc_hopper.cuh"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/error.hpp"
#include "module03/attention.hpp"

#include <cuda.h>

#include <cstdint>
#include <string>

namespace course::exercise {
namespace {

namespace cc = ::course::cuda;
using solution::attn_tc_hopper::ws_step::KvStage;

constexpr bool kProductsWritten = false;  // TODO 1 and 2 below (step tc_wgmma)
constexpr bool kRingWritten = false;      // TODO 3 to 5 below (step tc_warp_specialized)
constexpr bool kTurnsWritten = false;     // TODO 6 and 7 below (step tc_pingpong)
constexpr bool kOverlapWritten = false;   // TODO 8 below (step tc_overlap)

struct Phases {
  /// TODO 1: S = Q K^T for one consumer warpgroup (64 query rows x 128 keys), issued as
  /// d/16 cc::wgmma_m64n128k16_bf16_f32 from two cc::wgmma_desc_sw128 descriptors. Tiles in
  /// shared memory (byte addresses): q_tile [128 rows][d], k_tile [128 keys][d], each stored
  /// as d/64 column blocks of [rows][64] (128-byte rows, the 128-byte swizzle); the
  /// warpgroup's rows start at row q_rows. The first wgmma must overwrite s (accumulate 0).
  /// Issue only: the kernel commits and waits.
  template <class T>
  __device__ __forceinline__ static void issue_scores(float (&s)[T::kSRegs], std::uint32_t q_tile,
                                                      std::uint32_t k_tile, int q_rows) {
    (void)s, (void)q_tile, (void)k_tile, (void)q_rows;
  }

  /// TODO 2: O += P V for one consumer warpgroup: 128/16 wgmma with A = P from registers
  /// (cc::wgmma_m64n64k16_rs_bf16_f32 or ..._m64n128k16_... for d = 64 / 128). pk[j][hr] is
  /// the bf16 pair (P[row g + 8 hr][8 j + 2 t], P[...][8 j + 2 t + 1]) of S's n8 tile j.
  /// v_tile: [128 keys][d] in the layout above -- for P V the keys are the k dimension.
  template <class T>
  __device__ __forceinline__ static void issue_pv(float (&o)[T::kORegs], const std::uint32_t (&pk)[T::kBlockN / 8][2],
                                                  std::uint32_t v_tile) {
    (void)o, (void)pk, (void)v_tile;
  }

  /// TODO 3 (producer, one thread): fill stage st (K at st.smem, V at st.smem + T::kKVBytes)
  /// with rows [row, row + 128) of kv head kh, batch kb: wait until the consumers released
  /// the stage's previous use (barrier st.empty), announce R::kStageBytes on st.full, then
  /// issue the TMA copies (cc::tma_load_4d, one [128][64] box per 64-column block of K and
  /// of V; coordinates (column, row, head, batch)).
  template <class T, class R>
  __device__ __forceinline__ static void load_kv_tile(const KvStage& st, const CUtensorMap* tmap_k,
                                                      const CUtensorMap* tmap_v, int row, int kh, int kb) {
    (void)st, (void)tmap_k, (void)tmap_v, (void)row, (void)kh, (void)kb;
  }

  /// TODO 4 (consumer, every thread of a consumer warpgroup): wait until stage st has landed.
  __device__ __forceinline__ static void wait_kv_tile(const KvStage& st) { (void)st; }

  /// TODO 5 (consumer, after this warpgroup's P V on the stage has completed): tell the
  /// producer the stage is free. st.empty expects one arrival per consumer warpgroup.
  __device__ __forceinline__ static void release_kv_tile(const KvStage& st) { (void)st; }

  /// TODO 6 (consumer warpgroup cw, every thread): wait for this warpgroup's turn to issue
  /// its GEMMs: named barrier solution::attn_tc_hopper::ws_step::kTurnBarrier + cw, which
  /// the other warpgroup's 128 threads arrive on (TODO 7) -- 256 threads in all.
  __device__ __forceinline__ static void wait_turn(int cw) { (void)cw; }

  /// TODO 7 (consumer warpgroup cw, right after issuing its GEMMs): give the turn to the
  /// other warpgroup without waiting (cc::named_barrier_arrive).
  __device__ __forceinline__ static void pass_turn(int cw) { (void)cw; }

  /// TODO 8 (step tc_overlap, consumer warpgroup, inside its turn): issue S = Q K^T for the
  /// new tile (k_tile) and O += P V for the previous one (v_tile) as TWO commit groups
  /// (cc::wgmma_commit), so that the kernel's cc::wgmma_wait<1>() returns once S alone has
  /// landed and the softmax runs while P V still computes. Use your TODO 1 and 2. Which
  /// group must come first? (The tests cannot tell: the wrong order stays correct and only
  /// loses the overlap. Compare tc_overlap with tc_pingpong in the benchmark.)
  template <class T>
  __device__ __forceinline__ static void issue_scores_then_pv(float (&s)[T::kSRegs], float (&o)[T::kORegs],
                                                              const std::uint32_t (&pk)[T::kBlockN / 8][2],
                                                              std::uint32_t q_tile, std::uint32_t k_tile,
                                                              std::uint32_t v_tile, int q_rows) {
    (void)s, (void)o, (void)pk, (void)q_tile, (void)k_tile, (void)v_tile, (void)q_rows;
  }
};

}  // namespace

/// The Hopper steps, called by attention() in attention_tc.cu after validation.
void attention_hopper(m03::AttentionStep step, const m03::AttentionArgsBf16& args) {
  const char* file = "exercises/module03_attention/attention_tc_hopper.cu";
  const std::string name = std::string("attention step ") + m03::step_name(step);
  if (!kProductsWritten) throw NotImplemented(name + " (Phases::issue_scores and issue_pv)", file);
  if (step != m03::AttentionStep::tc_wgmma && !kRingWritten)
    throw NotImplemented(name + " (Phases::load_kv_tile, wait_kv_tile, release_kv_tile)", file);
  const bool overlap = step == m03::AttentionStep::tc_overlap || step == m03::AttentionStep::tc_persistent;
  if ((step == m03::AttentionStep::tc_pingpong || overlap) && !kTurnsWritten)
    throw NotImplemented(name + " (Phases::wait_turn, pass_turn)", file);
  if (overlap && !kOverlapWritten)
    throw NotImplemented(name + " (Phases::issue_scores_then_pv)", file);
  solution::attn_tc_hopper::run_step<Phases>(step, args);
}

}  // namespace course::exercise
