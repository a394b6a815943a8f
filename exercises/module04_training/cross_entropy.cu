/// @file cross_entropy.cu
/// @brief YOUR ladder for the fused softmax cross-entropy (module 4): logits -> per-row
/// loss, mean loss and dlogits = (softmax - onehot) * dloss / N, fp32 or bf16.
///
/// Read module04_training/include/module04/cross_entropy.hpp first (the formulas, ignored
/// rows, out-of-range targets, in place, the row strides ldl / lddl), then fill in one step
/// at a time. Run its tests with:   ctest --preset default -L exercise -R CrossEntropy
/// A step you have not written throws NotImplemented and its tests show SKIPPED.
/// Hints, one at a time: `bash scripts/course.sh hint cross_entropy/<step>`
/// (all of them: exercises/module04_training/hints/cross_entropy.md).
///
/// Given: the element helpers (to_float, from_float, Pack, load_pack, store_pack), the
/// gradient of one logit (RowGrad), and the two small kernels around yours: count_valid_kernel
/// writes N = *num_valid before your row kernel runs, mean_loss_kernel averages your
/// losses[] after it. Every kernel must be correct in place (dlogits == logits): read a logit
/// before you write its gradient, from the same thread, and read x[t] before any thread
/// of the row can overwrite it.

#include "module04/cross_entropy.hpp"

#include "course/cuda/elem16.cuh"
#include "course/cuda/warp_reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <limits>

namespace course::exercise {
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
// ----------------------------------------------------------------------------
// Step 1: three_pass -- one block of kThreePassThreads = 256 threads per row (blockIdx.x),
// thread i taking columns i, i + 256, ... in three passes over the row in global memory:
//   pass 1: m = max_j x_j                        (cc::block_all_reduce with cc::Max{})
//   pass 2: s = sum_j exp(x_j - m)               (cc::block_all_reduce with cc::Sum{})
//   pass 3: losses[r] = m + log(s) - x_t  (thread 0),
//           dlogits_j = (exp(x_j - m) / s - [j == t]) * dloss / N,  N = *a.num_valid
// An ignored row (t == a.ignore_index): losses[r] = 0 and a row of zeros, nothing read.
// A target outside [0, vocab): losses[r] = NaN (quiet_nan()) and NaN gradients (RowGrad
// does that with bad = true); never read x[t] then.
// TODO(step 1): three_pass_kernel, and its launch: one block per row on args.stream.
// Hints, one at a time: bash scripts/course.sh hint cross_entropy/three_pass
// ----------------------------------------------------------------------------
// @end

constexpr int kThreePassThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreePassThreads) three_pass_kernel(RowArgs<T> a) {
// @step three_pass
  // TODO(step 1)
  (void)a;
// @end
}

template <class T>
void launch_three_pass(const FusedCrossEntropyArgs& args) {
// @step three_pass
  const unsigned blocks = blocks_for(args.rows, 1, "three_pass");
  // TODO(step 1): delete the throw; launch `blocks` blocks of kThreePassThreads threads of
  //               three_pass_kernel<T>(row_args<T>(args)), then COURSE_CHECK_LAUNCH.
  (void)blocks;
  throw NotImplemented("cross_entropy step three_pass", __FILE__);
// @end
}

// @step online
// ----------------------------------------------------------------------------
// Step 2: online -- the max and the sum in ONE read (module 1's online softmax), a second
// read for dlogits. Each thread keeps (m, s), s = sum exp(x - m) over what it has seen:
// a logit (or a pack of kN) above m first rescales s by exp(m_old - m_new). The threads'
// pairs meet in cc::block_all_reduce(ms, Merge{}, MaxSum{-inf, 0}, scratch), which merges
// two pairs with merge() -- write that first.
// TODO(step 2a): merge(). TODO(step 2b): online_kernel (one block of kThreads per row, packs
//   of kN logits: load_pack / store_pack), and launch_online_kernel.
// Hints, one at a time: bash scripts/course.sh hint cross_entropy/online
// ----------------------------------------------------------------------------
// @end

/// The running maximum m and sum s = sum exp(x - m) of a part of a row.
struct MaxSum {
  float m, s;
};

/// The (m, s) of the union of two parts: both sums rescaled to the larger max.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
// @step online
  // TODO(step 2a): the (m, s) of both parts together. Careful when both maxima are -inf
  //                (a thread that saw no logit): exp(-inf - -inf) is NaN.
  (void)b;
  return a;
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
  // TODO(step 2b)
  (void)a;
// @end
}

template <class T, int kThreads, int kN>
void launch_online_kernel(const FusedCrossEntropyArgs& args, const char* step) {
// @step online
  const unsigned blocks = blocks_for(args.rows, 1, step);
  // TODO(step 2b): delete the throw; launch `blocks` blocks of kThreads threads of
  //                online_kernel<T, kThreads, kN>(row_args<T>(args)), then COURSE_CHECK_LAUNCH.
  (void)blocks;
  throw NotImplemented("cross_entropy step online", __FILE__);
// @end
}

template <class T>
void launch_online(const FusedCrossEntropyArgs& args) {
  launch_online_kernel<T, kOnlineThreads, 1>(args, "online");
}

// @step row_on_chip
// ----------------------------------------------------------------------------
// Step 3: row_on_chip -- the row read ONCE into registers, dlogits written once.
// on_chip_kernel<T, kRowThreads, kChunks, kN>: kRowThreads threads share a row (4..32
// lanes of a warp, 256 / kRowThreads rows per block; or a block of 128..1024 threads per
// row); each loads kChunks packs of kN logits (16 bytes when kN = kVecOf<T>), pack k at
// column(k), all loads before any use. Then max, sum and gradient from the registers,
// reduced with row_reduce<kRowThreads> (shuffles for lanes, block_all_reduce for blocks).
// Given at the top of the kernel: live (r < rows), t, ignored, bad, and limit (vocab, or 0
// for an ignored or bad row: load_pack then reads nothing and returns -inf).
// Every lane must reach every row_reduce (the shuffles need the whole warp): no early return
// before the last one.
// TODO(step 3a): on_chip_kernel's body. TODO(step 3b): dispatch_on_chip: pick kRowThreads
//   and kChunks from n = packs per row; rows longer than 1024 x 8 packs run
//   launch_online_kernel<T, 1024, kN>(args, "row_on_chip").
// Hints, one at a time: bash scripts/course.sh hint cross_entropy/row_on_chip
// ----------------------------------------------------------------------------
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
  // TODO(step 3a)
  (void)scratch, (void)live, (void)ignored, (void)limit, (void)x, (void)column;
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
  // TODO(step 3b): delete the throw; e.g. n <= 32: launch_on_chip<T, 8, 4, kN>(args) (8 lanes
  //                x 4 packs = 32 packs per row) ... n <= 8192: launch_on_chip<T, 1024, 8, kN>(args).
  (void)n;
  throw NotImplemented("cross_entropy step row_on_chip", __FILE__);
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

}  // namespace course::exercise
