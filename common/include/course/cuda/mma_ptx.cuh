#pragma once
/// @file mma_ptx.cuh
/// @brief Inline-PTX wrappers for the Ampere-style tensor-core path (sm_80 and newer):
/// asynchronous global->shared copies (cp.async), shared->register fragment loads
/// (ldmatrix) and their reverse (stmatrix, sm_90), and the warp-wide matrix multiply-accumulate mma.sync m16n8k16 (bf16 in,
/// fp32 accumulate), the shared-memory swizzle, and Hopper's wgmma (sm_90a).
///
/// The one home of these wrappers. Used by (solutions/, and the exercises/ file of the
/// same name where there is one):
/// - module 1: matmul.cu (cp.async in warp_tiled); matmul_tc.cu (mma_sync: cp.async,
///   ldmatrix, mma.sync, swizzle); matmul_tc_hopper.cu (cp.async, wgmma);
///   softmax.cu (cp.async in cluster_columns); tests/planted/matmul_tc_planted.cu
/// - module 2: batched_gemm_fp32.cu (cp.async); batched_gemm_tensor_core.cu (mma.sync, wgmma)
/// - module 3: attention_device.cuh, solution and exercise, attention_fused.cu (cp.async);
///   attention_tc_device.cuh, attention_tc_phases.cuh, attention_tc.cuh, attention_tc_flash.cuh,
///   attention_tc.cu, attention_tc_flash.cu and the exercise's attention_tc.cu (the mma.sync
///   steps, ex2 too); attention_tc_hopper.cuh,
///   attention_tc_hopper_phases.cuh and the exercise's attention_tc_hopper.cu (the Hopper
///   steps: wgmma, P from registers); tests/planted/attention_tc_planted.cu
/// - module 4: attention_backward_flash.cu (cp.async); attention_backward_tc.cuh,
///   attention_backward_tc_phases.cuh and the exercise's attention_backward_tc.cu (mma.sync,
///   ldmatrix, stmatrix, cp.async; step tc_wgmma, attention_backward_tc_wgmma.cuh: wgmma m64n64 with
///   both operands transposed for dQ, m64nN from registers); tests/planted/attention_backward_tc_planted.cu
/// - common: course/cuda/tile.cuh (smem_u32, swizzle_chunk)
///
/// Why PTX and not a C++ API: these instructions have no stable C++ wrapper that
/// exposes their register layouts (nvcuda::wmma hides them). Knowing the layout is
/// what lets a kernel load fragments straight from a swizzled shared-memory tile and
/// store results straight from registers.
///
/// Notation used below (PTX ISA, "Matrix fragments for mma.m16n8k16"): a warp has 32
/// lanes; for lane `l`, `g = l / 4` (the "group", 0..7) and `t = l % 4` (the thread in
/// the group, 0..3). A 32-bit register holding two b16 values holds the lower column
/// (or row) index in its low half.
///
/// All wrappers are `__forceinline__` and compile to exactly one instruction (plus
/// address conversion). They must be reached by the whole warp where the ISA says
/// `.sync.aligned` (ldmatrix, mma): every lane, same instruction, no divergence.

#include <cuda_bf16.h>

#include <cstdint>

namespace course::cuda {

/// The 32-bit shared-state-space address of a generic pointer into shared memory,
/// which is what the `.shared` forms of cp.async and ldmatrix take.
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// ------------------------------------------------------------------ cp.async -----

/// How the cp.async wrappers hand the source address to the instruction.
///   global:  converted with cvta.to.global, the global state-space address the ISA
///            names for cp.async's source. The default.
///   generic: the generic pointer as it is. A global address and its generic address
///            are the same number on the GPUs this course targets, and skipping the
///            conversion lets ptxas fold more of the address arithmetic; module 1's fp32
///            warp_tiled step and module 3's fused attention were tuned and measured
///            with this form.
/// The instruction (cp.async, its size and its cache hint) is the same in both.
enum class SrcAddress { global, generic };

/// The 64-bit source operand of a cp.async, per SrcAddress: an integer global address,
/// or the pointer itself.
template <SrcAddress kSrc>
__device__ __forceinline__ auto cp_async_src(const void* src) {
  if constexpr (kSrc == SrcAddress::global)
    return __cvta_generic_to_global(src);
  else
    return src;
}

/// `cp.async.cg.shared.global [dst], [src], 16, src_bytes;`
///
/// PTX semantics: starts an asynchronous copy of 16 bytes (the cp-size) from global
/// memory `src` to shared memory `dst` without going through registers; `.cg` caches
/// the source in L2 only (it is the only cache hint allowed with cp-size 16). Only the
/// first `src_bytes` (0..16) bytes are read from `src`; the remaining
/// 16 - src_bytes bytes of `dst` are filled with zeros. So one instruction loads a
/// partial chunk at a matrix edge and zero-pads it, and `src_bytes = 0` writes 16 zero
/// bytes and reads nothing (`src` must still be a valid global address).
/// Both addresses must be 16-byte aligned. The copy is NOT complete when the
/// instruction retires: group it with cp_async_commit() and wait for it with
/// cp_async_wait<N>(); the bytes are then visible to the issuing thread, and to the
/// rest of the block after a __syncthreads().
///
/// kL2Prefetch = 256 adds `.L2::256B`: on an L2 miss, L2 fetches the whole aligned
/// 256-byte block around the source from DRAM instead of just the missing sectors, a
/// hint that pays off when a kernel streams rows it will read in full (the next slab
/// of the same row is then already in L2).
/// kSrc: how `src` reaches the instruction (SrcAddress above).
template <int kL2Prefetch = 0, SrcAddress kSrc = SrcAddress::global>
__device__ __forceinline__ void cp_async_16_zfill(std::uint32_t dst_smem, const void* src, int src_bytes) {
  static_assert(kL2Prefetch == 0 || kL2Prefetch == 256, "prefetch size: none or 256 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kL2Prefetch == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst_smem),
                 "l"(cp_async_src<kSrc>(src)), "r"(src_bytes)
                 : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_smem),
                 "l"(cp_async_src<kSrc>(src)), "r"(src_bytes)
                 : "memory");
#else
  __trap();  // cp.async needs sm_80
#endif
}

/// `cp.async.ca.shared.global [dst], [src], 4, src_bytes;`
///
/// The 4-byte form, for fp32 kernels that scatter single elements: a tile stored
/// k-major in shared memory while its rows are k-contiguous in global memory (A, and
/// B^T in Q*K^T) lands transposed, one element per copy. `.ca` may also cache the
/// source in L1. src_bytes is 4 or 0 (0: write a zero, read nothing). Both addresses
/// 4-byte aligned. Completion rules as for cp_async_16_zfill.
/// kL2Prefetch, kSrc: as for cp_async_16_zfill.
template <int kL2Prefetch = 0, SrcAddress kSrc = SrcAddress::global>
__device__ __forceinline__ void cp_async_4_zfill(std::uint32_t dst_smem, const void* src, int src_bytes) {
  static_assert(kL2Prefetch == 0 || kL2Prefetch == 256, "prefetch size: none or 256 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kL2Prefetch == 256)
    asm volatile("cp.async.ca.shared.global.L2::256B [%0], [%1], 4, %2;\n" ::"r"(dst_smem),
                 "l"(cp_async_src<kSrc>(src)), "r"(src_bytes)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst_smem),
                 "l"(cp_async_src<kSrc>(src)), "r"(src_bytes)
                 : "memory");
#else
  __trap();  // cp.async needs sm_80
#endif
}

/// `cp.async.commit_group;`
///
/// PTX semantics: closes the "cp.async-group" of every cp.async this thread issued
/// since the previous commit (possibly none: an empty group is legal and completes at
/// once). Groups complete in commit order, which is what makes a pipeline countable.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// `cp.async.wait_group N;`
///
/// PTX semantics: blocks the thread until at most `N` of its most recent committed
/// groups are still pending; every older group has completed and its writes to
/// shared memory are visible to this thread. `N = 0` waits for everything. Other
/// threads' copies are covered only by their own wait, hence the __syncthreads()
/// that follows in a block-cooperative pipeline.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// ------------------------------------------------------------------ ldmatrix -----

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16 {r0, r1, r2, r3}, [addr];`
///
/// PTX semantics: the warp loads four 8x8 matrices of 16-bit elements from shared
/// memory. Each matrix row is 16 contiguous bytes (16-byte aligned); lanes 8i..8i+7
/// supply the addresses of rows 0..7 of matrix i (every lane passes `addr`, and only
/// those 32 addresses are used). Register r[i] of lane l receives two elements of
/// matrix i: row g = l/4, columns 2t and 2t+1 (t = l%4), the lower column in the low
/// half. That is exactly the fragment layout mma.m16n8k16 expects for A (row) and for
/// B (col) when B's 8x8 blocks are stored with k contiguous.
/// The 8 row addresses of one matrix are served in one shared-memory wavefront when
/// they fall in 8 distinct 16-byte bank groups: swizzle the tile so they do.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr_smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr_smem)
               : "memory");
#else
  r[0] = r[1] = r[2] = r[3] = 0u;
  __trap();
#endif
}

/// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {r0, r1, r2, r3}, [addr];`
///
/// PTX semantics: as ldmatrix_x4, but each 8x8 matrix is transposed on the way:
/// register r[i] of lane l receives the elements at stored rows 2t and 2t+1, stored
/// column g. Use it for a B operand stored with n contiguous (row-major K x N, e.g. V
/// in P*V): the lane then holds (k = 2t, 2t+1; n = g), the mma "col" B layout.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr_smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr_smem)
               : "memory");
#else
  r[0] = r[1] = r[2] = r[3] = 0u;
  __trap();
#endif
}

/// Whether this compilation pass emits stmatrix (device code for sm_90 and newer): kernels
/// choose stmatrix_x4 or plain stores with `if constexpr`. It differs between the host pass
/// and the device passes, so it may pick instructions only, never a size, a template
/// argument or anything else the host also computes.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool kHasStmatrix = true;
#else
inline constexpr bool kHasStmatrix = false;
#endif

/// `stmatrix.sync.aligned.m8n8.x4.shared.b16 [addr], {r0, r1, r2, r3};`  (sm_90)
///
/// PTX semantics: ldmatrix_x4 backwards. The warp stores four 8x8 matrices of 16-bit
/// elements to shared memory; lanes 8i..8i+7 supply the addresses of rows 0..7 of matrix
/// i (16 contiguous bytes each, 16-byte aligned), and register r[i] of lane l holds row
/// g = l/4, columns 2t and 2t+1 (t = l%4) of matrix i. Those are the registers of an
/// mma accumulator tile packed to bf16 pairs (d[0], d[1] -> rows g; d[2], d[3] -> g + 8),
/// so one instruction writes a 16 x 16 accumulator tile that plain stores write with four
/// 4-byte stores per lane; the same swizzle keeps its rows conflict-free.
__device__ __forceinline__ void stmatrix_x4(std::uint32_t addr_smem, std::uint32_t r0, std::uint32_t r1,
                                            std::uint32_t r2, std::uint32_t r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr_smem), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#else
  (void)addr_smem, (void)r0, (void)r1, (void)r2, (void)r3;
  __trap();
#endif
}

// ------------------------------------------------------------------ mma.sync -----

/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, d;`  (d += a * b)
///
/// PTX semantics: the warp multiplies a 16x16 bf16 tile A (row-major fragment) by a
/// 16x8 bf16 tile B (column-major fragment) and adds the 16x8 fp32 tile D. Products
/// of bf16 values are exact; the sum is accumulated in (at least) fp32. The fragments,
/// for lane l with g = l/4 and t = l%4 (each a-/b- register packs 2 bf16):
///   a[0] = A[g   ][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
///   a[2] = A[g   ][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
///   b[0] = B[2t, 2t+1  ][g]      b[1] = B[2t+8, 2t+9][g]
///   d[0], d[1] = D[g  ][2t, 2t+1]      d[2], d[3] = D[g+8][2t, 2t+1]
/// ldmatrix_x4 on a 16x16 A tile (lanes 0-15: rows 0-15 at k 0; lanes 16-31: rows
/// 0-15 at k 8) yields a[0..3] in this order.
__device__ __forceinline__ void mma_m16n8k16_bf16_f32(float (&d)[4], const std::uint32_t (&a)[4],
                                                      const std::uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

// ------------------------------------------------------------------ ex2 ------------

/// `ex2.approx.ftz.f32 y, x;`  (y = 2^x)
///
/// PTX semantics: the special-function unit's base-2 exponential, one instruction
/// (MUFU.EX2), maximum relative error about 2^-22 over the whole range; ex2(-inf) = +0,
/// ex2(+inf) = +inf; `.ftz` flushes subnormal inputs and results to zero. The softmax of
/// the tensor-core attention steps (module 3) computes e^(scale*(s - m)) as
/// 2^(s*scale*log2(e) - m*scale*log2(e)): one FFMA and this, with no range handling
/// around it (the plain exp2f of a build without fast math adds a few instructions
/// per element for subnormal results, which do not matter to a softmax).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// All ones if a < b, else 0 (assuming a - b does not overflow): the sign bit of a - b spread
/// by an arithmetic shift, an AND mask without a predicate. In inline PTX so that the
/// compiler does not turn it back into a compare and a select (the attention backward's split
/// kernels, where ptxas had spilled such predicates into registers).
__device__ __forceinline__ std::uint32_t less_than_mask(int a, int b) {
  std::uint32_t m;
  asm("sub.s32 %0, %1, %2;\n\tshr.s32 %0, %0, 31;\n" : "=r"(m) : "r"(a), "r"(b));
  return m;
}

// ------------------------------------------------------------------ swizzle ------

/// Physical 16-byte chunk of logical chunk `chunk` in row `row` of a shared-memory
/// tile whose rows hold `kChunks` chunks (kChunks * 16 bytes; a power of two).
///
/// Shared memory serves one 128-byte line (8 chunks, all 32 banks) per wavefront. An
/// ldmatrix phase reads the SAME logical chunk of 8 consecutive rows; without a
/// swizzle those 8 addresses map to the same bank group whenever the row length is a
/// multiple of 128 bytes (an 8-way conflict). XOR-ing the chunk index with the row's
/// position inside its group of 8 lines spreads them over 8 distinct bank groups.
/// Rows shorter than 128 bytes share a line (kRowsPerLine rows each), so the XOR key
/// is the line index and only the low log2(kChunks) bits of the chunk change.
/// The writer (cp.async) and the reader (ldmatrix) must both use this mapping.
template <int kChunks>
__device__ __forceinline__ int swizzle_chunk(int row, int chunk) {
  static_assert(kChunks >= 2 && (kChunks & (kChunks - 1)) == 0, "kChunks must be a power of two >= 2");
  constexpr int kRowsPerLine = kChunks >= 8 ? 1 : 8 / kChunks;
  constexpr int kMask = (kChunks >= 8 ? 8 : kChunks) - 1;
  return chunk ^ ((row / kRowsPerLine) & kMask);
}


// ------------------------------------------------------------------ wgmma (sm_90a) -----
// Hopper's warpgroup MMA. Four consecutive warps (a warpgroup, the first warp index a
// multiple of 4) issue one wgmma together; it reads A and B straight from shared
// memory through 64-bit "matrix descriptors" and accumulates into registers, and it is
// asynchronous: issue, commit the group, wait for it. The accumulator layout of
// m64nNk16: warp w of the group owns rows 16w..16w+15, and inside them the registers
// follow mma.sync m16n8's fragment order, n8 tile after n8 tile: d[4j + 0/1] = (row
// 16w + g, columns 8j + 2t, 8j + 2t + 1), d[4j + 2/3] = the same columns of row + 8
// (g = lane / 4, t = lane % 4).
// Only compiled for the sm_90a target (`__CUDA_ARCH_FEAT_SM90_ALL`); elsewhere the
// wrappers trap, and hosts must check wgmma_available() before launching.

/// `fence.proxy.async.shared::cta;` -- orders this thread's earlier generic-proxy
/// writes to shared memory (ordinary stores, and cp.async's writes) before later
/// async-proxy reads (wgmma operands). Each writing thread runs it before the barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/// `wgmma.fence.sync.aligned;` -- required before the first wgmma that uses accumulator
/// registers written by other instructions (here: their zero initialisation).
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

/// `wgmma.commit_group.sync.aligned;` -- closes the group of wgmmas issued so far.
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

/// `wgmma.wait_group.sync.aligned N;` -- waits until at most N groups are pending; then
/// the accumulators of the others may be read and their shared-memory operands reused.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/// Pins registers in place for the compiler: an empty asm that "reads and writes" each
/// element, so that no instruction touching them is moved across it. Put it after a
/// wgmma_wait<N> with N > 0 around the accumulators that wait made readable: the compiler
/// does not know that a wait orders ordinary register reads, and must not hoist them above it.
template <int N>
__device__ __forceinline__ void pin_registers(float (&x)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(x[i])::"memory");
}

/// A wgmma shared-memory matrix descriptor for the 128-byte swizzle (layout type 1):
/// start address, leading and stride byte offsets, all in 16-byte units (bits 0-13,
/// 16-29, 32-45), base offset 0 (every swizzle atom of 8 x 128 bytes is 1024-byte
/// aligned). K-major operand (rows of 64 bf16 = 128 bytes along k): sbo = 1024, the
/// distance between groups of 8 rows; lbo unused. MN-major operand (rows of 64 bf16
/// along m or n, one row per k): sbo = 1024 between groups of 8 k, lbo = distance
/// between the 64-wide column blocks.
__device__ __forceinline__ std::uint64_t wgmma_desc_sw128(std::uint32_t smem_addr, std::uint32_t lbo_bytes,
                                                          std::uint32_t sbo_bytes) {
  return static_cast<std::uint64_t>((smem_addr & 0x3FFFFu) >> 4) |
         static_cast<std::uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16 |
         static_cast<std::uint64_t>((sbo_bytes >> 4) & 0x3FFFu) << 32 | (1ull << 62);
}

/// `wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16` with both operands in shared
/// memory: the warpgroup's 64 x 64 fp32 accumulator tile d += A (64 x 16) * B (16 x 64).
/// desc_a / desc_b: wgmma_desc_sw128 descriptors; accumulate = 0 computes d = A * B.
/// kBMnMajor = false: B is K-major (rows are n, k contiguous: the K of Q*K^T); true: B
/// is MN-major (rows are k, n contiguous: the V of P*V), transposed on the fly. kAMnMajor
/// likewise for A (true: A stored with m contiguous, rows are k -- module 4's dQ = dS K, which
/// reads dS from the stored dS^T). 32 registers per thread, in
/// the mma.sync fragment order repeated over n8 tiles (see wgmma_m64nNk16 notes above).
template <bool kBMnMajor, bool kAMnMajor = false>
__device__ __forceinline__ void wgmma_m64n64k16_bf16_f32(float (&d)[32], std::uint64_t desc_a, std::uint64_t desc_b,
                                                         int accumulate = 1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{" 
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, %36, %35;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kBMnMajor ? 1 : 0), "n"(kAMnMajor ? 1 : 0));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();  // wgmma needs an sm_90a build
#endif
}

/// `wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16` with both operands in shared
/// memory: the warpgroup's 64 x 128 fp32 accumulator tile d += A (64 x 16) * B (16 x 128).
/// desc_a / desc_b: wgmma_desc_sw128 descriptors; accumulate = 0 computes d = A * B.
/// kBMnMajor = false: B is K-major (rows are n, k contiguous: the K of Q*K^T); true: B
/// is MN-major (rows are k, n contiguous: the V of P*V), transposed on the fly. kAMnMajor
/// likewise for A (true: a transposed A, module 1's pingpong step). 64 registers per thread, in
/// the mma.sync fragment order repeated over n8 tiles (see wgmma_m64nNk16 notes above).
template <bool kBMnMajor, bool kAMnMajor = false>
__device__ __forceinline__ void wgmma_m64n128k16_bf16_f32(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                                         int accumulate = 1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{" 
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, %68, %67;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kBMnMajor ? 1 : 0), "n"(kAMnMajor ? 1 : 0));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();  // wgmma needs an sm_90a build
#endif
}

/// `wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16` with both operands in shared
/// memory: the warpgroup's 64 x 192 fp32 accumulator tile d += A (64 x 16) * B (16 x 192) --
/// module 1's wide tiles, whose N = 192 divides the GPT's 384, 1152 and 1536. Operands,
/// kBMnMajor and kAMnMajor as for wgmma_m64n128k16_bf16_f32. 96 registers per thread.
template <bool kBMnMajor, bool kAMnMajor = false>
__device__ __forceinline__ void wgmma_m64n192k16_bf16_f32(float (&d)[96], std::uint64_t desc_a, std::uint64_t desc_b,
                                                         int accumulate = 1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
      "}, %96, %97, p, 1, 1, %100, %99;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kBMnMajor ? 1 : 0), "n"(kAMnMajor ? 1 : 0));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();  // wgmma needs an sm_90a build
#endif
}

/// `wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16` with both operands in shared
/// memory: the warpgroup's 64 x 256 fp32 accumulator tile d += A (64 x 16) * B (16 x 256),
/// the widest N wgmma has: B is read from shared memory once for 64 rows of A, the best
/// ratio of math to shared-memory traffic (module 1's Hopper GEMM steps). Operands and
/// kBMnMajor as for wgmma_m64n128k16_bf16_f32; kAMnMajor likewise for A (true: A stored
/// with m contiguous, rows are k -- a transposed A, transposed on the fly). 128 registers
/// per thread.
template <bool kBMnMajor, bool kAMnMajor = false>
__device__ __forceinline__ void wgmma_m64n256k16_bf16_f32(float (&d)[128], std::uint64_t desc_a, std::uint64_t desc_b,
                                                         int accumulate = 1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, %132, %131;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kBMnMajor ? 1 : 0), "n"(kAMnMajor ? 1 : 0));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();  // wgmma needs an sm_90a build
#endif
}

/// `wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16` with A from REGISTERS and B from
/// shared memory: d (64 x 64, fp32) += A (64 x 16) * B (16 x 64). Each warp w of the group holds
/// rows 16 w .. 16 w + 15 of A in mma.sync m16n8k16's A-fragment order: a[0] = (row g,
/// k 2t, 2t+1), a[1] = (row g+8, same k), a[2] = (row g, k 2t+8, 2t+9), a[3] = (row g+8,
/// same k), bf16 pairs -- the order of two neighbouring n8 tiles of an m64nN accumulator,
/// packed, which is how attention feeds P = softmax(S) to P * V without shared memory.
/// kBMnMajor as for wgmma_m64n128k16_bf16_f32 (only B can be transposed when A is in
/// registers). 32 accumulator registers per thread.
template <bool kBMnMajor>
__device__ __forceinline__ void wgmma_m64n64k16_rs_bf16_f32(float (&d)[32], const std::uint32_t (&a)[4],
                                                            std::uint64_t desc_b, int accumulate = 1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kBMnMajor ? 1 : 0));
#else
  (void)d, (void)a, (void)desc_b, (void)accumulate;
  __trap();  // wgmma needs an sm_90a build
#endif
}

/// `wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16` with A from REGISTERS and B from
/// shared memory: d (64 x 128, fp32) += A (64 x 16) * B (16 x 128). Each warp w of the group holds
/// rows 16 w .. 16 w + 15 of A in mma.sync m16n8k16's A-fragment order: a[0] = (row g,
/// k 2t, 2t+1), a[1] = (row g+8, same k), a[2] = (row g, k 2t+8, 2t+9), a[3] = (row g+8,
/// same k), bf16 pairs -- the order of two neighbouring n8 tiles of an m64nN accumulator,
/// packed, which is how attention feeds P = softmax(S) to P * V without shared memory.
/// kBMnMajor as for wgmma_m64n128k16_bf16_f32 (only B can be transposed when A is in
/// registers). 64 accumulator registers per thread.
template <bool kBMnMajor>
__device__ __forceinline__ void wgmma_m64n128k16_rs_bf16_f32(float (&d)[64], const std::uint32_t (&a)[4],
                                                            std::uint64_t desc_b, int accumulate = 1) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kBMnMajor ? 1 : 0));
#else
  (void)d, (void)a, (void)desc_b, (void)accumulate;
  __trap();  // wgmma needs an sm_90a build
#endif
}

}  // namespace course::cuda
