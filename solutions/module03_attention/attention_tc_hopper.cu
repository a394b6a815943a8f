/// @file attention_tc_hopper.cu
/// @brief The Hopper steps of the attention ladder (sm_90a; elsewhere they throw
/// course::Unsupported): the tensor-core flash forward rebuilt on what Hopper added.
///   10. tc_wgmma             both products on warpgroup MMA: S = Q K^T with Q and K read from
///                            shared memory, O += P V with P straight from registers
///   11. tc_warp_specialized  K/V tiles loaded by the TMA into a ring of stages guarded by
///                            mbarriers; one producer warp, two consumer warpgroups, setmaxnreg
///
/// Both steps compute a 128-row query tile per block as two consumer warpgroups of 64 rows
/// (wgmma's M is 64), against K/V tiles of 128 keys, for head dims 64 and 128 only (the
/// tiles are whole 128-byte swizzle atoms along d; other head dims are rejected by name).
/// Every tile in shared memory has the layout wgmma's 128-byte-swizzle descriptors read and
/// the TMA's SWIZZLE_128B writes:
///
///   [rows][d] bf16 tile = d/64 column blocks, each [rows][64] (rows of 128 bytes);
///   16-byte chunk c of row r sits at chunk c ^ (r % 8) of its row (sw128_offset below).
///
///   S = Q K^T   A = Q  (K-major: d contiguous)     B = K  (K-major: B[k = d][n = key])
///   O += P V    A = P  (registers, bf16 pairs)      B = V  (MN-major: B[k = key][n = d],
///                                                          transposed on the fly)
///
/// Why P never touches shared memory: the accumulator of wgmma m64nN follows mma.sync's
/// m16n8 fragment order, n8 tile after n8 tile, and wgmma's register A operand follows
/// mma.sync's m16n8k16 A order. So, as in step 9, the accumulators of S's n8 tiles 2kk and
/// 2kk+1, packed to bf16, ARE the A fragment of P's k16 step kk.
///
/// Shapes as in the rest of the ladder (FlashAttention's benchmark: B*N = 16384 tokens,
/// H*d = 2048); an H100/H200 SXM has 132 SMs and ~990 TFLOP/s of dense bf16 wgmma at the
/// boost clock; mma.sync (step 9) reaches ~340-350 of it, cuDNN's forward ~600.

#include "attention_tc_device.cuh"

#include "course/cuda/hopper_ptx.cuh"
#include "course/cuda/launch.cuh"
#include "course/cuda/mma_ptx.cuh"
#include "course/cuda/warp_reduce.cuh"
#include "course/error.hpp"
#include "course/tma.hpp"
#include "module03/attention.hpp"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

// A build for "80;90a" also compiles this file for sm_80, where the kernel bodies are
// compiled out (wgmma, TMA and setmaxnreg need sm_90a): silence "declared but never
// referenced" for the helpers in that pass only.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma nv_diag_suppress 177
#endif

namespace course::solution::attn_tc {
namespace {

namespace cc = ::course::cuda;

/// Throws course::Unsupported unless wgmma can run here.
void require_sm90a(const char* step) {
  if (!cc::sm90a_code_available())
    throw Unsupported(step,
                      "a Hopper GPU (compute capability 9.0) and a build for sm_90a "
                      "(CMAKE_CUDA_ARCHITECTURES=90a; wgmma, the TMA and setmaxnreg are not in plain sm_90)");
}

// ---------------------------------------------------------------- shared by steps 10-11 ---

/// The block's tiles: 128 query rows (two consumer warpgroups of 64), 128 keys per K/V tile.
template <int D_>
struct HopperTile {
  static constexpr int D = D_;
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = 128;
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kKVBytes = kBlockN * D * 2;     ///< one K (or V) tile
  static constexpr int kSRegs = kBlockN / 2;           ///< S accumulators per thread (m64n128)
  static constexpr int kORegs = D / 2;                 ///< O accumulators per thread (m64nD)
  static_assert(D == 64 || D == 128, "the Hopper steps take head_dim 64 or 128");
};

/// Byte offset of 16-byte chunk `c` (columns 8c .. 8c+7) of row `r` in a [kRows][D] tile
/// stored as 128-byte-swizzle atoms (file banner).
template <int kRows>
__device__ __forceinline__ std::uint32_t sw128_offset(int r, int c) {
  return static_cast<std::uint32_t>((c / 8) * kRows * 128 + r * 128 + (((c % 8) ^ (r % 8)) * 16));
}

/// S = Q K^T for one consumer warpgroup: d/16 wgmma m64n128k16, both operands K-major in
/// shared memory. A k16 step is 32 bytes further along the 128-byte rows, and every 4
/// steps the next 64-column block; 8-row groups are 1024 bytes apart (sbo). `q_rows` is
/// the warpgroup's first row of the Q tile (64 wg). Issued only: the caller commits and waits.
template <class T>
__device__ __forceinline__ void issue_scores(float (&s)[T::kSRegs], std::uint32_t q_tile, std::uint32_t k_tile,
                                             int q_rows) {
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
__device__ __forceinline__ void issue_pv(float (&o)[T::kORegs], const std::uint32_t (&pk)[T::kBlockN / 8][2],
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

/// Hides the scores of keys a row may not see (past N_k, or causal): element e of n8 tile j
/// is row `warp_row0 + g + 8 (e / 2)`, key `kv0 + 8 j + 2 t + e % 2` (g = lane / 4, t = lane % 4).
template <class T, bool kCausal>
__device__ __forceinline__ void mask_scores(float (&s)[T::kSRegs], const TcParams& p, int warp_row0, int kv0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (key_hidden<kCausal>(p, warp_row0 + g + 8 * (e >> 1), kv0 + 8 * j + 2 * t + (e & 1))) s[4 * j + e] = -INFINITY;
}

/// The online-softmax step on the S accumulators of this thread's two rows (g and g+8 of
/// its warp's 16): new running max (the quad's 4 lanes share a row: 2 shuffles), O and
/// the partial row sum rescaled by 2^(old max - new max), P = 2^(s scale log2 e - max)
/// packed to bf16 pairs in pk (the A fragments of P V). Step 9's arithmetic, unchanged.
template <class T>
__device__ __forceinline__ void softmax_update(const float (&s)[T::kSRegs], float (&o)[T::kORegs],
                                               std::uint32_t (&pk)[T::kBlockN / 8][2], float (&row_max)[2],
                                               float (&row_sum)[2], float scale_log2) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = row_max[hr];
#pragma unroll
    for (int j = 0; j < T::kBlockN / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hr], s[4 * j + 2 * hr + 1]));
    mx = cc::warp_max<4>(mx);
    // A row that has seen only hidden keys keeps max = -inf: subtract 0, so that p = 0.
    const float m_scaled = mx == -INFINITY ? 0.f : mx * scale_log2;
    const float alpha = cc::ex2_approx(row_max[hr] * scale_log2 - m_scaled);
    row_max[hr] = mx;
    row_sum[hr] *= alpha;
#pragma unroll
    for (int j = 0; j < T::D / 8; ++j) {
      o[4 * j + 2 * hr] *= alpha;
      o[4 * j + 2 * hr + 1] *= alpha;
    }
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < T::kBlockN / 8; ++j) {
      const float p0 = cc::ex2_approx(fmaf(s[4 * j + 2 * hr], scale_log2, -m_scaled));
      const float p1 = cc::ex2_approx(fmaf(s[4 * j + 2 * hr + 1], scale_log2, -m_scaled));
      sum += p0 + p1;
      pk[j][hr] = pack_bf16x2(p0, p1);
    }
    row_sum[hr] += sum;
  }
}

/// O / l as bf16 into this warpgroup's rows of the (finished) Q tile, in its swizzled
/// layout, and lse = (max scale log2 e + log2 l) ln 2 straight to global memory. `row0` is
/// the thread's first row inside the 128-row tile (g of its warp's 16).
template <class T>
__device__ __forceinline__ void stage_output(const float (&o)[T::kORegs], const float (&row_max)[2],
                                             const float (&row_sum)[2], unsigned char* q_tile, int row0,
                                             const TcParams& p, int bh, int q0) {
  constexpr float kLn2 = 0.6931471805599453f;
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float l = cc::warp_sum<4>(row_sum[hr]);
    const float inv = l > 0.f ? 1.f / l : 0.f;  // a row that sees no key: O = 0
    const int r = row0 + 8 * hr;
#pragma unroll
    for (int j = 0; j < T::D / 8; ++j)
      *reinterpret_cast<std::uint32_t*>(q_tile + sw128_offset<T::kBlockM>(r, j) + 4 * t) =
          pack_bf16x2(o[4 * j + 2 * hr] * inv, o[4 * j + 2 * hr + 1] * inv);
    if (p.lse != nullptr && t == 0 && q0 + r < p.seq_q)
      p.lse[static_cast<long long>(bh) * p.seq_q + q0 + r] =
          l > 0.f ? (row_max[hr] * p.scale_log2 + __log2f(l)) * kLn2 : -INFINITY;
  }
}

/// The staged O tile to global memory: 16-byte chunks, consecutive threads along a row.
template <class T>
__device__ __forceinline__ void store_output(const unsigned char* q_tile, bf16* o_head, std::int64_t seq_stride,
                                             int q0, int valid_rows, int thread, int threads) {
  constexpr int kChunks = T::D / 8;
  for (int i = thread; i < T::kBlockM * kChunks; i += threads) {
    const int r = i / kChunks, c = i % kChunks;
    if (r >= valid_rows) break;
    *reinterpret_cast<uint4*>(o_head + (static_cast<std::int64_t>(q0) + r) * seq_stride + 8 * c) =
        *reinterpret_cast<const uint4*>(q_tile + sw128_offset<T::kBlockM>(r, c));
  }
}

template <class T>
__device__ __forceinline__ void zero(float (&x)[T::kORegs]) {
#pragma unroll
  for (int i = 0; i < T::kORegs; ++i) x[i] = 0.f;
}

// ============================================================================
// Step 10: tc_wgmma -- both products on Hopper's warpgroup MMA.
//
// What limits step 9 on Hopper: mma.sync is Ampere's instruction. Each warp first loads
// its operands into registers with ldmatrix (K for S, V for P V: ~128 B of shared memory
// per mma at 32 query rows per warp) and a warp computes 32 rows. wgmma is issued by a
// warpgroup (4 warps) and reads B straight from shared memory for 64 rows at once: the
// shared-memory traffic per FLOP halves again, and no register holds a K or V fragment.
// Changes from step 9:
//  (a) S = Q K^T: wgmma m64n128k16 from two descriptors (issue_scores), d/16 of them per
//      K tile; the 64 S accumulators per thread are step 9's fragments, in the same order.
//  (b) O += P V: wgmma m64nDk16 with A = P from registers (issue_pv): no ldmatrix at all.
//  (c) Tiles in wgmma's 128-byte-swizzle layout (sw128_offset), filled by all 256 threads
//      with cp.async (load_tile); each thread fences its copies into the async proxy
//      (fence.proxy.async) before the block barrier, because wgmma reads shared memory
//      through it.
//  (d) Per K/V tile: wait for it + barrier, prefetch the next tile into the other stage,
//      S (commit, wait), mask, softmax, P V (commit, wait). The two warpgroups interleave
//      on their own: one's softmax runs while the other's wgmmas occupy the tensor cores.
// Tiles: 128 query rows (2 warpgroups x 64), 128-key K/V tiles, 2 stages; shared memory
// Q + 2 x (K + V) + 1 KB of alignment = 81 KB (d = 64) / 161 KB (d = 128): one block per SM.
// Prediction (d = 128, per K/V tile): the block's two warpgroups issue 8.4 MFLOP of wgmma,
// ~1.1 us of its SM's share of the ~990 TFLOP/s peak; the softmax is ~4.5 instructions
// per score, 64 scores per thread: ~290 issue slots per warp, ~0.3 us with two warps per
// scheduler. Inside a warpgroup the softmax waits for S and P V waits for the softmax;
// only the other warpgroup can fill those gaps, and nothing hides the barrier per tile.
// So ~0.45-0.55 of peak: ~420-520 TFLOP/s at d = 128 (1.2-1.5x step 9), and at d = 64,
// where the softmax per FLOP doubles, ~330-420.
// Measured: pending (GPU run)
// ============================================================================
namespace wgmma_step {

constexpr int kThreads = 256;  // two warpgroups: both copy and compute
constexpr int kStages = 2;

template <int D>
constexpr int smem_bytes() {
  using T = HopperTile<D>;
  return T::kQBytes + kStages * 2 * T::kKVBytes + 1024;
}

/// cp.async copies of rows [row0, row0 + kRows) of one head into a [kRows][D] tile in the
/// 128-byte-swizzle layout; rows at or past `rows` are zero-filled (`any`: any valid global
/// address, never read). All kThreads threads take part.
template <int D, int kRows>
__device__ __forceinline__ void load_tile(std::uint32_t dst, const bf16* head, std::int64_t seq_stride, int row0,
                                          int rows, const void* any) {
  constexpr int kChunks = D / 8;
  static_assert(kRows * kChunks % kThreads == 0, "whole passes");
#pragma unroll
  for (int pass = 0; pass < kRows * kChunks / kThreads; ++pass) {
    const int i = static_cast<int>(threadIdx.x) + pass * kThreads;
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = row0 + r < rows;
    const bf16* src = head + static_cast<std::int64_t>(row0 + r) * seq_stride + 8 * c;
    cc::cp_async_16_zfill(dst + sw128_offset<kRows>(r, c), valid ? static_cast<const void*>(src) : any, valid ? 16 : 0);
  }
}

template <int D, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1) wgmma_kernel(const TcParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = HopperTile<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const std::uint32_t s_q = cc::smem_u32(smem);           // [128][D] Q, at the end O
  const std::uint32_t s_kv = s_q + T::kQBytes;            // kStages x ([128][D] K, [128][D] V)
  constexpr std::uint32_t kStageBytes = 2 * T::kKVBytes;

  int q_tile, bh;
  block_coordinates(kCausal, q_tile, bh);  // causal: the heaviest Q tiles first
  const int q0 = q_tile * T::kBlockM;
  const int b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
  const bf16* k_head = p.k + row_offset(p.ks, b, hk, 0);
  const bf16* v_head = p.v + row_offset(p.vs, b, hk, 0);
  load_tile<D, T::kBlockM>(s_q, p.q + row_offset(p.qs, b, h, 0), p.qs.seq, q0, p.seq_q, p.q);
  const int num_tiles = (kv_end<kCausal>(p, q0, T::kBlockM) + T::kBlockN - 1) / T::kBlockN;
  auto load_kv = [&](int tile) {
    const std::uint32_t stage = s_kv + (tile % kStages) * kStageBytes;
    load_tile<D, T::kBlockN>(stage, k_head, p.ks.seq, tile * T::kBlockN, p.seq_k, p.k);
    load_tile<D, T::kBlockN>(stage + T::kKVBytes, v_head, p.vs.seq, tile * T::kBlockN, p.seq_k, p.v);
  };
  if (num_tiles > 0) load_kv(0);
  cc::cp_async_commit();  // group 0: Q and K/V tile 0

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int row0 = 64 * wg + 16 * warp + lane / 4;  // this thread's first row in the Q tile
  float o[T::kORegs], s[T::kSRegs];
  zero<T>(o);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  std::uint32_t pk[T::kBlockN / 8][2];

  for (int tile = 0; tile < num_tiles; ++tile) {
    // Tile `tile` landed (for this thread: wait; for the async proxy: fence; for the
    // block: barrier, which also says every warpgroup is done with tile - 1's stage).
    cc::cp_async_wait<0>();
    cc::fence_proxy_async_smem();
    __syncthreads();
    if (tile + 1 < num_tiles) load_kv(tile + 1);
    cc::cp_async_commit();
    const std::uint32_t k_tile = s_kv + (tile % kStages) * kStageBytes, v_tile = k_tile + T::kKVBytes;
    const int kv0 = tile * T::kBlockN;

    cc::wgmma_fence();  // S's registers were read by the softmax of the last tile
    issue_scores<T>(s, s_q, k_tile, 64 * wg);
    cc::wgmma_commit();
    cc::wgmma_wait<0>();
    const int warp_row0 = q0 + 64 * wg + 16 * warp;  // the warp's first query row
    if (tile_needs_mask<kCausal, T::kBlockN>(p, warp_row0, kv0)) mask_scores<T, kCausal>(s, p, warp_row0, kv0);
    softmax_update<T>(s, o, pk, row_max, row_sum, p.scale_log2);
    cc::wgmma_fence();  // O was rescaled and P written by ordinary instructions
    issue_pv<T>(o, pk, v_tile);
    cc::wgmma_commit();
    cc::wgmma_wait<0>();
  }

  cc::cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done with Q
  stage_output<T>(o, row_max, row_sum, smem, row0, p, bh, q0);
  __syncthreads();
  store_output<T>(smem, p.o + row_offset(p.os, b, h, 0), p.os.seq, q0, min(T::kBlockM, p.seq_q - q0),
                  static_cast<int>(threadIdx.x), kThreads);
#else
  (void)p;
  __trap();  // never launched: the host checks sm90a_code_available() first
#endif
}

template <int D, bool kCausal>
void launch(const TcParams& p, std::int64_t batch_heads, cudaStream_t stream) {
  constexpr auto kernel = wgmma_kernel<D, kCausal>;
  constexpr int kSmem = smem_bytes<D>();
  cc::opt_in_dynamic_smem<kernel>(kSmem);
  const dim3 grid(static_cast<unsigned>((static_cast<long long>(p.seq_q) + 127) / 128),
                  static_cast<unsigned>(batch_heads));
  kernel<<<grid, kThreads, kSmem, stream>>>(p);
  COURSE_CHECK_LAUNCH("wgmma_kernel");
}

}  // namespace wgmma_step

}  // namespace

void launch_tc_wgmma(const AttentionArgsBf16& a) {
  require_sm90a("attention step tc_wgmma");
  const TcParams p = make_tc_params(a);
  const std::int64_t bh = a.batch * a.heads;
  cc::dispatch_value<m03::kHopperHeadDims>(a.head_dim, "head_dim", [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (a.causal) wgmma_step::launch<D, true>(p, bh, a.stream);
    else wgmma_step::launch<D, false>(p, bh, a.stream);
  });
}

}  // namespace course::solution::attn_tc
