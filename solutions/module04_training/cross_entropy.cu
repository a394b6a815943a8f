/// @file cross_entropy.cu
/// @brief Solution ladder for the fused softmax cross-entropy (module 4): logits ->
/// per-row loss, mean loss and dlogits = (softmax - onehot) * dloss / N, fp32 or bf16.
///
/// The ladder:
///   1. three_pass   one block per row: pass 1 the row max, pass 2 the sum of exp(x - max),
///                   pass 3 the loss and the gradient; every pass reads the row from global
///                   memory again (scalar loads).
///   2. online       one block per row: max and sum in ONE read (module 1's online softmax:
///                   rescale the running sum when the max grows), a second read writes dlogits.
///   3. row_on_chip  the row read once into registers with 16-byte loads and dlogits written
///                   once: 4..32 lanes per row for small vocabularies (84: 8 lanes per fp32
///                   row, 4 per bf16 row), a block of 128..1024 threads per row up to 128 KiB
///                   of logits per row (32768 fp32, 65536 bf16); longer rows run the online
///                   kernel with 16-byte loads and 1024 threads.
///
/// Every step runs the same two small kernels around its row kernel (see "num_valid and the
/// mean" below): count_valid_kernel before it, mean_loss_kernel after it.
///
/// Bytes per row (es = bytes per logit, 4 or 2), with the gradient / forward only:
///   three_pass    3 V es read + V es written = 4 V es   /  2 V es
///   online        2 V es read + V es written = 3 V es   /  V es
///   row_on_chip   V es read + V es written   = 2 V es   /  V es    (the minimum)
/// plus 4 B of target and 4 B of loss per row, and 12 B per row in the two small kernels.
/// The op is memory-bound: ~10 FLOPs and 2 exponentials per logit. The benchmark credits
/// every step with the minimum 2 V es per row, so its GB/s compare with a copy's.

#include "module04/cross_entropy.hpp"

#include "course/cuda/elem16.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <limits>

namespace course::solution {
namespace {

using m04::CrossEntropyStep;
using m04::FusedCrossEntropyArgs;
using bf16 = __nv_bfloat16;
namespace cc = ::course::cuda;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ------------------------------------------------------------------ elements ----

// Element conversions: course/cuda/elem16.cuh.
using ::course::cuda::from_float;
using ::course::cuda::to_float;

/// kN consecutive logits of one row: one 16-byte vector (kN = 16 / sizeof(T): 4 fp32 or
/// 8 bf16) or one scalar (kN = 1, when the rows are not 16-byte aligned), kept as raw
/// 32-bit words: two bf16 share a register (an array of __nv_bfloat16 would take one
/// register each, twice the registers, and spilled at 1024 threads x 8 vectors).
template <class T, int kN>
struct Pack {
  static constexpr int kWords = (kN * static_cast<int>(sizeof(T)) + 3) / 4;
  std::uint32_t w[kWords];
  /// Logit u as a float (a bf16 is the top half of its float: exact, one shift or AND).
  __device__ __forceinline__ float get(int u) const {
    if constexpr (sizeof(T) == 4) return __uint_as_float(w[u]);
    else return __uint_as_float(u % 2 == 0 ? w[u / 2] << 16 : w[u / 2] & 0xffff0000u);
  }
  /// Replace logit u by v (fp32 only: keeps exp(x - m) in the logit's register).
  __device__ __forceinline__ void set(int u, float v) {
    static_assert(sizeof(T) == 4, "only fp32 packs hold a float per logit");
    w[u] = __float_as_uint(v);
  }
  /// Tells the compiler the words may have changed (an empty asm), so the floats converted
  /// from a bf16 pack before this point are not kept alive to be reused after it: without
  /// it nvcc held all 64 converted logits of a 1024 x 8 x 8 row across the reductions (64
  /// registers + spills) instead of shifting them out of the 32 packed words again.
  __device__ __forceinline__ void reconvert_later() {
    if constexpr (sizeof(T) == 2) {
#pragma unroll
      for (int i = 0; i < kWords; ++i) asm volatile("" : "+r"(w[i]));
    }
  }
};

template <class T>
inline constexpr int kVecOf = 16 / static_cast<int>(sizeof(T));

/// Logits c .. c + kN - 1 of `row`; those at or past `limit` read as -inf (they add 0 to a
/// sum of exponentials and nothing to a max) and are never touched. limit = 0 reads nothing.
template <class T, int kN>
__device__ __forceinline__ void load_pack(const T* row, std::int64_t c, std::int64_t limit, Pack<T, kN>& p) {
  if constexpr (kN == kVecOf<T>) {
    if (c + kN <= limit) {
      const uint4 q = *reinterpret_cast<const uint4*>(row + c);  // one LDG.128
      p.w[0] = q.x, p.w[1] = q.y, p.w[2] = q.z, p.w[3] = q.w;
      return;
    }
  }
#pragma unroll
  for (int u = 0; u < kN; ++u) {
    if constexpr (sizeof(T) == 4) {
      p.w[u] = __float_as_uint(c + u < limit ? to_float(row[c + u]) : kNegInf);
    } else {
      const std::uint32_t h = c + u < limit ? __bfloat16_as_ushort(row[c + u]) : 0xff80u;  // bf16 -inf
      p.w[u / 2] = u % 2 == 0 ? h : (p.w[u / 2] | h << 16);
    }
  }
}

/// The 32-bit word holding values a (low half) and b (high half) as bf16, rounded to nearest.
__device__ __forceinline__ std::uint32_t bf16_pair_bits(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  std::uint32_t bits;
  memcpy(&bits, &h, sizeof(bits));
  return bits;
}

/// Store the values of columns c .. c + kN - 1 that are < limit (never the row padding).
template <class T, int kN>
__device__ __forceinline__ void store_pack(T* row, std::int64_t c, std::int64_t limit, const float (&g)[kN]) {
  if constexpr (kN == kVecOf<T>) {
    if (c + kN <= limit) {
      uint4 q;
      if constexpr (sizeof(T) == 4) {
        q = make_uint4(__float_as_uint(g[0]), __float_as_uint(g[1]), __float_as_uint(g[2]), __float_as_uint(g[3]));
      } else {
        q = make_uint4(bf16_pair_bits(g[0], g[1]), bf16_pair_bits(g[2], g[3]), bf16_pair_bits(g[4], g[5]),
                       bf16_pair_bits(g[6], g[7]));
      }
      __stwb(reinterpret_cast<uint4*>(row + c), q);  // one STG.128
      return;
    }
  }
#pragma unroll
  for (int u = 0; u < kN; ++u)
    if (c + u < limit) row[c + u] = from_float<T>(g[u]);
}

/// The gradient of one logit: ignored rows 0, rows with an out-of-range target NaN, else
/// (p_j - [j == t]) * scale with p_j = exp(x_j - m) / s and scale = dloss / N.
struct RowGrad {
  float m, inv_s, scale;
  std::int64_t target;
  bool ignored, bad;
  __device__ __forceinline__ float operator()(float e_or_x, std::int64_t j, bool is_exp) const {
    if (ignored) return 0.f;
    if (bad) return __int_as_float(0x7fffffff);
    const float e = is_exp ? e_or_x : __expf(e_or_x - m);
    return (e * inv_s - (j == target ? 1.f : 0.f)) * scale;
  }
};

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fffffff); }

// ------------------------------------------------------- num_valid and the mean ----
// N = num_valid is known only on the device. count_valid_kernel (one block, 4 B per row)
// writes it before the row kernel, which reads it for the gradient's scale dloss / N;
// mean_loss_kernel (one block) sums losses[] after it. Both use one block of
// kSmallThreads threads: thread i takes rows i, i + 1024, ... in order, then a fixed
// shuffle tree (block_all_reduce): the same bits on every run, no atomics.

constexpr int kSmallThreads = 1024;

__global__ void __launch_bounds__(kSmallThreads)
    count_valid_kernel(const std::int32_t* targets, std::int64_t rows, std::int32_t ignore_index,
                       std::int32_t* num_valid) {
  __shared__ int scratch[cc::kWarpSize];
  int n = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += kSmallThreads) n += targets[r] != ignore_index ? 1 : 0;
  n = cc::block_all_reduce(n, cc::Sum{}, 0, scratch);
  if (threadIdx.x == 0) *num_valid = n;
}

__global__ void __launch_bounds__(kSmallThreads)
    mean_loss_kernel(const float* losses, std::int64_t rows, const std::int32_t* num_valid, float* loss_mean) {
  __shared__ double scratch[cc::kWarpSize];
  double sum = 0.0;  // ignored rows hold 0: they add nothing
  for (std::int64_t r = threadIdx.x; r < rows; r += kSmallThreads) sum += static_cast<double>(losses[r]);
  sum = cc::block_all_reduce(sum, cc::Sum{}, 0.0, scratch);
  if (threadIdx.x == 0) {
    const int n = *num_valid;
    *loss_mean = n > 0 ? static_cast<float>(sum / n) : 0.f;  // all ignored: 0, not 0/0
  }
}

/// The arguments every row kernel takes, typed.
template <class T>
struct RowArgs {
  const T* logits;
  std::int64_t ldl;
  const std::int32_t* targets;
  float* losses;
  T* dlogits;  ///< null: forward only
  std::int64_t lddl;
  std::int64_t rows, vocab;
  std::int32_t ignore_index;
  float dloss;
  const std::int32_t* num_valid;
};

template <class T>
RowArgs<T> row_args(const FusedCrossEntropyArgs& a) {
  return {static_cast<const T*>(a.logits), a.ldl, a.targets, a.losses, static_cast<T*>(a.dlogits), a.lddl,
          a.rows, a.vocab, a.ignore_index, a.dloss, a.num_valid};
}

unsigned blocks_for(std::int64_t work, std::int64_t per_block, const char* step) {
  const std::int64_t blocks = (work + per_block - 1) / per_block;
  require_arg(blocks <= 0x7fffffff, step, "blocks", blocks, "exceeds the grid limit 2^31 - 1");
  return static_cast<unsigned>(blocks);
}

// @step three_pass
// ============================================================================
// Step 1: three_pass.
// One block of 256 threads per row; thread i takes columns i, i + 256, ... (coalesced).
//   pass 1: m = max_j x_j                   (block reduction)
//   pass 2: s = sum_j exp(x_j - m)           (block reduction; every exponent <= 0, s >= 1)
//   pass 3: losses[r] = m + log s - x_t, dlogits_j = (exp(x_j - m) / s - [j == t]) * dloss / N
// Subtracting m is what keeps exp from overflowing: fp32 exp overflows at x = 88.7, and
// logits of a confident model pass that. An ignored row reads nothing and writes zeros.
// x_t is read in pass 1, before the first barrier: in place, pass 3 overwrites the row.
//
// Bytes per row: 4 V es (three reads of the row, one write); the second and third reads
// come partly from L2 (with 2048 threads per SM, 16 rows of 50304 fp32 per SM are in
// flight: 132 x 16 x 201 KB = 425 MB, far more than the 50 MB L2, so mostly from DRAM).
// Prediction: ~0.45-0.5 of the copy at V = 50304 (4 V es moved for 2 counted); at V = 84
// ~0.1 (a 256-thread block for 84 logits: 172 idle threads, ~8 rows in flight per SM).
// Measured (results: cross_entropy/solution/three_pass/{16384x84_ld88_bf16,16384x50304_bf16,16384x50304_f32}): 112.0 / 1084.5 / 1369.2 GB/s = 0.37 / 0.65 / 0.81 of d2d_copy
// ============================================================================
// @end

constexpr int kThreePassThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreePassThreads) three_pass_kernel(RowArgs<T> a) {
  // @step three_pass
  __shared__ float scratch[cc::kWarpSize];
  const std::int64_t r = blockIdx.x;
  const T* x = a.logits + r * a.ldl;
  const std::int32_t t = a.targets[r];
  if (t == a.ignore_index) {  // uniform for the block: no loss, zero gradient, nothing read
    if (threadIdx.x == 0) a.losses[r] = 0.f;
    if (a.dlogits != nullptr)
      for (std::int64_t j = threadIdx.x; j < a.vocab; j += kThreePassThreads)
        a.dlogits[r * a.lddl + j] = from_float<T>(0.f);
    return;
  }
  const bool bad = t < 0 || t >= a.vocab;  // never read x[t] then

  float m = kNegInf;
  for (std::int64_t j = threadIdx.x; j < a.vocab; j += kThreePassThreads) m = fmaxf(m, to_float(x[j]));
  const float xt = threadIdx.x == 0 && !bad ? to_float(x[t]) : 0.f;  // before the barrier below
  m = cc::block_all_reduce(m, cc::Max{}, kNegInf, scratch);

  float s = 0.f;
  for (std::int64_t j = threadIdx.x; j < a.vocab; j += kThreePassThreads) s += __expf(to_float(x[j]) - m);
  s = cc::block_all_reduce(s, cc::Sum{}, 0.f, scratch);
  if (threadIdx.x == 0) a.losses[r] = bad ? quiet_nan() : m + logf(s) - xt;

  if (a.dlogits == nullptr) return;
  const RowGrad grad{m, 1.f / s, a.dloss / static_cast<float>(*a.num_valid), t, false, bad};
  T* d = a.dlogits + r * a.lddl;
  for (std::int64_t j = threadIdx.x; j < a.vocab; j += kThreePassThreads)
    d[j] = from_float<T>(grad(to_float(x[j]), j, false));  // read x_j, then write over it (in place)
  // @end
}

template <class T>
void launch_three_pass(const FusedCrossEntropyArgs& args) {
  // @step three_pass
  three_pass_kernel<T><<<blocks_for(args.rows, 1, "three_pass"), kThreePassThreads, 0, args.stream>>>(
      row_args<T>(args));
  COURSE_CHECK_LAUNCH("three_pass_kernel");
  // @end
}

// @step online
// ============================================================================
// Step 2: online.
// Pass 1 keeps a running (m, s) per thread, s = sum exp(x - m) over the logits seen so
// far: a logit above m rescales s by exp(m_old - m_new) first (module 1's online softmax).
// Threads merge their pairs with the same rule (merge(), below) in a block reduction.
// Pass 2 re-reads the row and writes dlogits. One read fewer than three_pass.
// With kN > 1 (row_on_chip's fallback for rows longer than its registers hold) the loads
// are 16-byte vectors and one rescale serves a whole vector (the max of its kN logits).
//
// Bytes per row: 3 V es (2 reads, 1 write); forward only, V es: one read, as few as the
// on-chip step moves.
// Prediction (scalar loads, 256 threads): ~0.6 of the copy at V = 50304 (3 V es moved for
// 2 counted, the second read mostly from DRAM); ~0.1 at V = 84 (same idle threads as
// three_pass). As row_on_chip's fallback at fp32 V = 50304 (16-byte loads, 1024 threads,
// ~2 rows per SM in flight, 53 MB of rows over the 50 MB L2): ~0.7-0.8.
// Measured (results: cross_entropy/solution/online/{16384x84_ld88_bf16,16384x50304_bf16,16384x50304_f32}): 82.1 / 1292.6 / 1735.2 GB/s = 0.27 / 0.77 / 1.03 of d2d_copy
// ============================================================================
// @end

/// The running maximum m and sum s = sum exp(x - m) of a part of a row.
struct MaxSum {
  float m, s;
};

/// The (m, s) of the union of two parts: both sums rescaled to the larger max.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  // @step online
  const float m = fmaxf(a.m, b.m);
  if (m == kNegInf) return {kNegInf, 0.f};  // both parts empty: exp(-inf - -inf) would be NaN
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
  // @end
}

struct Merge {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const { return merge(a, b); }
};

/// Lets course::cuda's reductions shuffle a MaxSum (found by argument-dependent lookup).
__device__ __forceinline__ MaxSum warp_shfl_xor(MaxSum v, int offset) {
  return {__shfl_xor_sync(cc::kFullWarpMask, v.m, offset), __shfl_xor_sync(cc::kFullWarpMask, v.s, offset)};
}

constexpr int kOnlineThreads = 256;

template <class T, int kThreads, int kN>
__global__ void __launch_bounds__(kThreads) online_kernel(RowArgs<T> a) {
  // @step online
  __shared__ MaxSum scratch[cc::kWarpSize];
  const std::int64_t r = blockIdx.x;
  const T* x = a.logits + r * a.ldl;
  T* d = a.dlogits != nullptr ? a.dlogits + r * a.lddl : nullptr;
  const std::int32_t t = a.targets[r];
  constexpr std::int64_t kStride = static_cast<std::int64_t>(kThreads) * kN;
  const std::int64_t first = static_cast<std::int64_t>(threadIdx.x) * kN;
  if (t == a.ignore_index) {
    if (threadIdx.x == 0) a.losses[r] = 0.f;
    const float zero[kN] = {};
    if (d != nullptr)
      for (std::int64_t c = first; c < a.vocab; c += kStride) store_pack<T, kN>(d, c, a.vocab, zero);
    return;
  }
  const bool bad = t < 0 || t >= a.vocab;
  const float xt = threadIdx.x == 0 && !bad ? to_float(x[t]) : 0.f;  // before the barriers (in place)

  MaxSum ms{kNegInf, 0.f};
  for (std::int64_t c = first; c < a.vocab; c += kStride) {
    Pack<T, kN> p;
    load_pack<T, kN>(x, c, a.vocab, p);
    float pm = p.get(0);
#pragma unroll
    for (int u = 1; u < kN; ++u) pm = fmaxf(pm, p.get(u));
    if (pm > ms.m) {  // the max grows: rescale what was summed so far (s = 0 on the first pack)
      ms.s *= __expf(ms.m - pm);
      ms.m = pm;
    }
#pragma unroll
    for (int u = 0; u < kN; ++u) ms.s += __expf(p.get(u) - ms.m);
  }
  ms = cc::block_all_reduce(ms, Merge{}, MaxSum{kNegInf, 0.f}, scratch);
  if (threadIdx.x == 0) a.losses[r] = bad ? quiet_nan() : ms.m + logf(ms.s) - xt;

  if (d == nullptr) return;
  const RowGrad grad{ms.m, 1.f / ms.s, a.dloss / static_cast<float>(*a.num_valid), t, false, bad};
  for (std::int64_t c = first; c < a.vocab; c += kStride) {
    Pack<T, kN> p;
    load_pack<T, kN>(x, c, a.vocab, p);
    float g[kN];
#pragma unroll
    for (int u = 0; u < kN; ++u) g[u] = grad(p.get(u), c + u, false);
    store_pack<T, kN>(d, c, a.vocab, g);
  }
  // @end
}

template <class T, int kThreads, int kN>
void launch_online_kernel(const FusedCrossEntropyArgs& args, const char* step) {
  // @step online
  online_kernel<T, kThreads, kN><<<blocks_for(args.rows, 1, step), kThreads, 0, args.stream>>>(row_args<T>(args));
  COURSE_CHECK_LAUNCH("online_kernel");
  // @end
}

template <class T>
void launch_online(const FusedCrossEntropyArgs& args) {
  launch_online_kernel<T, kOnlineThreads, 1>(args, "online");
}

// @step row_on_chip
// ============================================================================
// Step 3: row_on_chip.
// Each thread loads its kChunks 16-byte vectors of the row into registers, all before
// using any (kChunks loads in flight per thread), then max, sum and gradient run from the
// registers: the row is read once and dlogits written once, 2 V es per row. The row's
// threads: kRowThreads lanes of a warp (4, 8, 16 or 32: the butterfly reductions of
// course::cuda::warp_all_reduce<Width>, no barrier, several rows per 256-thread block) or
// a block of 128..1024 threads (block_all_reduce). Chosen by the number of vectors n:
//   n <= 16: 4 lanes x 4    n <= 32: 8 x 4    n <= 64: 16 x 4    n <= 128: 32 x 4
//   n <= 256: 32 x 8        then a block: 128, 256, 512, 1024 threads x 4, 1024 x 8.
//   V = 84: fp32 21 vectors -> 8 lanes (32 rows per block), bf16 11 vectors -> 4 lanes
//   (64 rows per block); V = 50304 bf16: 6288 vectors -> 1024 threads x 8 (77% of the
//   slots used); fp32 50304 (12576 vectors, 201 KB) does not fit: online with 16-byte loads.
// fp32 keeps exp(x - m) in the registers of x after the sum (one exponential per logit);
// bf16 packs two logits per register and computes it again for the gradient (the fp32
// value would need twice the registers).
// Unaligned rows (pointer or row stride off 16 bytes) run the same layouts with scalar
// loads (kN = 1, 8 logits per thread at most; longer rows: online, scalar).
// x_t: lane 0 of the row reads it before the max and folds it into its max (x_t is in the
// row, so the max is unchanged): the warp-level rows have no barrier, and this orders the
// read before every lane's store (in place).
//
// Registers (the 1024-thread block x 8 vectors): 32 data registers of the 64 a 1024-thread
// block allows; one block per SM, 8 x 16 KB = 128 KB of loads in flight per SM.
// Prediction: V = 50304 bf16: ~0.7 of the copy (one row per SM: the SM idles while a row's
// two reductions drain and between its last store and the next row's loads); V = 84:
// ~0.7-0.8 (~10 KB rows per 256-thread block, many blocks per SM; the three launches cost
// ~2-3 us next to ~4-8 us of data); V = 4097 and 1000: ~0.8.
// Measured (results: cross_entropy/solution/row_on_chip/{16384x84_ld88_bf16,16384x50304_bf16,16384x50304_f32}): 261.6 / 2227.9 / 1984.8 GB/s = 0.86 / 1.33 / 1.17 of d2d_copy
// ============================================================================
// @end

constexpr int kGroupBlockThreads = 256;  // lanes-per-row layouts: 256 / kRowThreads rows per block

template <int kRowThreads, class V, class Op>
__device__ __forceinline__ V row_reduce(V v, Op op, V identity, V* scratch) {
  if constexpr (kRowThreads <= cc::kWarpSize) {
    (void)identity, (void)scratch;
    return cc::warp_all_reduce<kRowThreads>(v, op);
  } else {
    return cc::block_all_reduce(v, op, identity, scratch);
  }
}

template <class T, int kRowThreads, int kChunks, int kN>
__global__ void __launch_bounds__(kRowThreads <= cc::kWarpSize ? kGroupBlockThreads : kRowThreads)
    on_chip_kernel(RowArgs<T> a) {
  constexpr bool kGroup = kRowThreads <= cc::kWarpSize;
  constexpr int kRowsPerBlock = kGroup ? kGroupBlockThreads / kRowThreads : 1;
  __shared__ float scratch[cc::kWarpSize];
  const int lane = threadIdx.x % kRowThreads;
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowThreads;
  const bool live = r < a.rows;  // every lane stays to the end: the shuffles need the whole warp
  const std::int32_t t = live ? a.targets[r] : a.ignore_index;
  const bool ignored = t == a.ignore_index;
  const bool bad = !ignored && (t < 0 || t >= a.vocab);
  const std::int64_t limit = ignored || bad ? 0 : a.vocab;  // 0: read nothing
  const T* x = a.logits + r * a.ldl;
  const auto column = [&](int k) { return static_cast<std::int64_t>(k * kRowThreads + lane) * kN; };

  // @step row_on_chip
  Pack<T, kN> p[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) load_pack<T, kN>(x, column(k), limit, p[k]);
  float xt = kNegInf;
  if (lane == 0 && limit > 0) xt = to_float(x[t]);
  float m = xt;
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
#pragma unroll
    for (int u = 0; u < kN; ++u) m = fmaxf(m, p[k].get(u));
#pragma unroll
  for (int k = 0; k < kChunks; ++k) p[k].reconvert_later();
  m = row_reduce<kRowThreads>(m, cc::Max{}, kNegInf, scratch);
  if (limit == 0) m = 0.f;  // nothing loaded (ignored or bad row): keep the arithmetic finite

  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const float e = __expf(p[k].get(u) - m);  // 0 for the -inf of columns >= vocab
      if constexpr (sizeof(T) == 4) p[k].set(u, e);      // fp32: keep exp for the gradient
      s += e;
    }
#pragma unroll
  for (int k = 0; k < kChunks; ++k) p[k].reconvert_later();
  s = row_reduce<kRowThreads>(s, cc::Sum{}, 0.f, scratch);
  if (live && lane == 0) a.losses[r] = ignored ? 0.f : bad ? quiet_nan() : m + logf(s) - xt;

  if (a.dlogits == nullptr || !live) return;  // no shuffle or barrier below
  const float scale = ignored ? 0.f : a.dloss / static_cast<float>(*a.num_valid);
  const RowGrad grad{m, 1.f / s, scale, t, ignored, bad};
  T* d = a.dlogits + r * a.lddl;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const std::int64_t c = column(k);
    if (c >= a.vocab) break;
    float g[kN];
#pragma unroll
    for (int u = 0; u < kN; ++u) g[u] = grad(p[k].get(u), c + u, sizeof(T) == 4);
    store_pack<T, kN>(d, c, a.vocab, g);
  }
  // @end
}

template <class T, int kRowThreads, int kChunks, int kN>
void launch_on_chip(const FusedCrossEntropyArgs& args) {
  constexpr bool kGroup = kRowThreads <= cc::kWarpSize;
  constexpr int kRowsPerBlock = kGroup ? kGroupBlockThreads / kRowThreads : 1;
  on_chip_kernel<T, kRowThreads, kChunks, kN>
      <<<blocks_for(args.rows, kRowsPerBlock, "row_on_chip"), kGroup ? kGroupBlockThreads : kRowThreads, 0,
         args.stream>>>(row_args<T>(args));
  COURSE_CHECK_LAUNCH("on_chip_kernel");
}

template <class T, int kN>
void dispatch_on_chip(const FusedCrossEntropyArgs& args) {
  // @step row_on_chip
  const std::int64_t n = (args.vocab + kN - 1) / kN;  // packs per row
  if (n <= 16) return launch_on_chip<T, 4, 4, kN>(args);
  if (n <= 32) return launch_on_chip<T, 8, 4, kN>(args);
  if (n <= 64) return launch_on_chip<T, 16, 4, kN>(args);
  if (n <= 128) return launch_on_chip<T, 32, 4, kN>(args);
  if (n <= 256) return launch_on_chip<T, 32, 8, kN>(args);
  if (n <= 512) return launch_on_chip<T, 128, 4, kN>(args);
  if (n <= 1024) return launch_on_chip<T, 256, 4, kN>(args);
  if (n <= 2048) return launch_on_chip<T, 512, 4, kN>(args);
  if (n <= 4096) return launch_on_chip<T, 1024, 4, kN>(args);
  if (n <= 8192) return launch_on_chip<T, 1024, 8, kN>(args);
  // Longer than 1024 threads x 8 packs: the online kernel, 1024 threads.
  launch_online_kernel<T, 1024, kN>(args, "row_on_chip");
  // @end
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class T>
void launch_row_on_chip(const FusedCrossEntropyArgs& args) {
  constexpr int kVec = kVecOf<T>;
  const bool vec = aligned16(args.logits) && args.ldl % kVec == 0 &&
                   (args.dlogits == nullptr || (aligned16(args.dlogits) && args.lddl % kVec == 0));
  if (vec) dispatch_on_chip<T, kVec>(args);
  else dispatch_on_chip<T, 1>(args);
}

template <class T>
void launch_rows(CrossEntropyStep step, const FusedCrossEntropyArgs& args) {
  switch (step) {
    case CrossEntropyStep::three_pass: return launch_three_pass<T>(args);
    case CrossEntropyStep::online: return launch_online<T>(args);
    case CrossEntropyStep::row_on_chip: return launch_row_on_chip<T>(args);
  }
}

}  // namespace

void cross_entropy(CrossEntropyStep step, const FusedCrossEntropyArgs& args) {
  m04::validate_cross_entropy_args(args, step, "cross_entropy");
  if (args.rows > 0) {
    count_valid_kernel<<<1, kSmallThreads, 0, args.stream>>>(args.targets, args.rows, args.ignore_index,
                                                             args.num_valid);
    COURSE_CHECK_LAUNCH("count_valid_kernel");
    if (args.dtype == DType::bf16) launch_rows<bf16>(step, args);
    else launch_rows<float>(step, args);
  } else {
    COURSE_CUDA_CHECK(cudaMemsetAsync(args.num_valid, 0, sizeof(std::int32_t), args.stream));
  }
  mean_loss_kernel<<<1, kSmallThreads, 0, args.stream>>>(args.losses, args.rows, args.num_valid, args.loss_mean);
  COURSE_CHECK_LAUNCH("mean_loss_kernel");
}

}  // namespace course::solution
