/* course_bridge.h -- the C ABI over the course's public kernels.
 *
 * One shared library per implementation exports these functions:
 *   libcourse_bridge_solution.so   the complete ladders (namespace course::solution)
 *   libcourse_bridge_exercise.so   your ladders (namespace course::exercise)
 * Both are built by CMake (bindings/, option COURSE_BUILD_BINDINGS) from the same source.
 * The Python package bindings/python/course_kernels reads this header's contract through
 * ctypes; any other language with a C FFI can call it the same way.
 *
 * Conventions (every op function):
 *  - Returns an int status (course_status below). 0 is success; on failure
 *    course_last_error() returns the message, which names the argument and its value
 *    ("softmax: argument 'ldx' = 3: must be >= cols ...").
 *  - No C++ exception crosses this boundary.
 *  - Pointers are DEVICE pointers (void*), except where a comment says host.
 *  - Sizes and strides are in ELEMENTS (not bytes), int64_t. The innermost (column /
 *    head-dim) stride is always 1.
 *  - `step` is the step's NAME from the op's table in its C++ header ("warp_tiled");
 *    course_list_steps(op) lists them in ladder order.
 *  - `stream` is a cudaStream_t (void*); NULL is the legacy default stream. Calls are
 *    asynchronous on it, like the C++ API (the pointer-array and copy helpers excepted).
 *  - Booleans are int (0 false, anything else true).
 *  - Arguments are validated by the C++ API before any launch, so a bad argument is
 *    reported the same way with or without a GPU. Without one, the first CUDA call returns
 *    COURSE_ERR_NO_GPU ("no NVIDIA GPU found", the runtime's error on the next line).
 *  - Steps that need scratch memory take (workspace, workspace_bytes); the matching
 *    course_*_workspace_bytes() says how much (0 when the step needs none).
 *
 * The library is a consumer of the public C++ API (module headers): it adds no kernels.
 */
#ifndef COURSE_BRIDGE_H
#define COURSE_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define COURSE_BRIDGE_API __declspec(dllexport)
#else
#define COURSE_BRIDGE_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped whenever a signature below changes; the Python package checks it. */
#define COURSE_BRIDGE_ABI_VERSION 1

/** Status codes returned by every op function. */
typedef enum course_status {
  COURSE_OK = 0,
  COURSE_ERR_INVALID_ARGUMENT = 1, /**< course::InvalidArgument: a bad size, stride, pointer, option or step name */
  COURSE_ERR_NOT_IMPLEMENTED = 2,  /**< course::NotImplemented: an exercise stub not yet written, or an op
                                        this build does not contain; the message names the file to edit */
  COURSE_ERR_UNSUPPORTED = 3,      /**< course::Unsupported: this GPU or build cannot run the step */
  COURSE_ERR_CUDA = 4,             /**< course::CudaError: a CUDA call or launch failed (call, file, line) */
  COURSE_ERR_OTHER = 5,            /**< any other exception (out of host memory, ...) */
  COURSE_ERR_NO_GPU = 6            /**< a CUDA call found no GPU to run on: no NVIDIA driver, or no device.
                                        The message's first line says so; the runtime's error follows */
} course_status;

/* ---------------------------------------------------------------------------------------
 * Discovery and errors
 * ------------------------------------------------------------------------------------- */

/** COURSE_BRIDGE_ABI_VERSION of the library. */
COURSE_BRIDGE_API int course_bridge_abi_version(void);
/** "solution" or "exercise": which implementation this library calls. */
COURSE_BRIDGE_API const char* course_bridge_impl(void);
/** The message of the last failed call on this thread ("" after a success). Valid until
 *  the next call on this thread. */
COURSE_BRIDGE_API const char* course_last_error(void);
/** Comma-separated op names: "l2_norm,dot,softmax,matmul,...". */
COURSE_BRIDGE_API const char* course_list_ops(void);
/** Comma-separated step names of `op`, in ladder order; NULL for an unknown op
 *  (course_last_error() lists the ops). Steps of ops sharing a table (l2_norm and dot;
 *  the fp32 and bf16 batched GEMMs) are listed under each op name. */
COURSE_BRIDGE_API const char* course_list_steps(const char* op);
/** The one-line summary of `step` of `op` from the C++ step table; NULL if unknown. */
COURSE_BRIDGE_API const char* course_step_summary(const char* op, const char* step);
/** 1 if this library contains `op`'s implementation, 0 if the op is declared but not in
 *  this build yet (its calls return COURSE_ERR_NOT_IMPLEMENTED), -1 for an unknown op. */
COURSE_BRIDGE_API int course_op_available(const char* op);

/* ---------------------------------------------------------------------------------------
 * Memory helpers for callers without a framework allocator (synchronous)
 * ------------------------------------------------------------------------------------- */

/** cudaMalloc: *ptr receives `bytes` of device memory (NULL for bytes == 0). */
COURSE_BRIDGE_API int course_malloc(size_t bytes, void** ptr);
/** cudaFree (NULL is a no-op). */
COURSE_BRIDGE_API int course_free(void* ptr);
/** cudaMemcpy with cudaMemcpyDefault: host or device on either side, synchronous. */
COURSE_BRIDGE_API int course_memcpy(void* dst, const void* src, size_t bytes);
/** cudaStreamSynchronize(stream). */
COURSE_BRIDGE_API int course_stream_synchronize(void* stream);

/* ---------------------------------------------------------------------------------------
 * Module 1 (module01/reductions.hpp, softmax.hpp, matmul.hpp, matmul_tc.hpp)
 * ------------------------------------------------------------------------------------- */

/** Workspace bytes of l2_norm and dot for n elements. */
COURSE_BRIDGE_API int course_reduce_workspace_bytes(int64_t n, size_t* bytes);
/** *result = ||x||_2. x: n floats, 16-byte aligned; result: 1 float. */
COURSE_BRIDGE_API int course_l2_norm(const char* step, const void* x, int64_t n, void* result, void* workspace,
                                     size_t workspace_bytes, void* stream);
/** *result = x . y. x, y: n floats each, 16-byte aligned; result: 1 float. */
COURSE_BRIDGE_API int course_dot(const char* step, const void* x, const void* y, int64_t n, void* result,
                                 void* workspace, size_t workspace_bytes, void* stream);

/** Workspace bytes of softmax(step) on a rows x cols matrix along dim. */
COURSE_BRIDGE_API int course_softmax_workspace_bytes(const char* step, int64_t rows, int64_t cols, int dim,
                                                     size_t* bytes);
/** y = softmax(x) along dim (1: each row, 0: each column), fp32, row-major with row strides
 *  ldx, ldy >= cols. In place: y == x with ldy == ldx. */
COURSE_BRIDGE_API int course_softmax(const char* step, const void* x, void* y, int64_t rows, int64_t cols,
                                     int64_t ldx, int64_t ldy, int dim, void* workspace, size_t workspace_bytes,
                                     void* stream);

/** C = alpha * A * B + beta * C, fp32, row-major: A m x k (lda), B k x n (ldb), C m x n (ldc).
 *  beta == 0: C is not read. */
COURSE_BRIDGE_API int course_matmul(const char* step, const void* a, const void* b, void* c, int64_t m, int64_t n,
                                    int64_t k, int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta,
                                    void* stream);
/** C = A * B on tensor cores: A (m x k) and B (k x n) bf16, row-major, 16-byte aligned, lda
 *  and ldb multiples of 8; C fp32 m x n (ldc). */
COURSE_BRIDGE_API int course_matmul_tc(const char* step, const void* a, const void* b, void* c, int64_t m,
                                       int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc, void* stream);

/* ---------------------------------------------------------------------------------------
 * Module 2 (module02/batched_gemm.hpp), op name "batched_gemm"
 *
 *   C[b,h] (M x N) = alpha * op(A[b,h]) * op(B[b,h])     for b < batch, h < num_heads
 *
 * op(A) = A^T when a_transposed (A stored K x M; fp32 steps only), op(B) = B^T when
 * b_transposed (B stored N x K). C is fp32. Strided form: strides arrays hold
 * {batch, head, row} strides in elements; input batch/head strides may be 0 (broadcast).
 * ------------------------------------------------------------------------------------- */

/** fp32 A and B (steps smem_tiled, register_blocked, warp_tiled). */
COURSE_BRIDGE_API int course_batched_gemm_strided_f32(const char* step, const void* a, const void* b, void* c,
                                                      int64_t M, int64_t N, int64_t K, int64_t batch,
                                                      int64_t num_heads, const int64_t a_strides[3],
                                                      const int64_t b_strides[3], const int64_t c_strides[3],
                                                      int a_transposed, int b_transposed, float alpha, void* stream);
/** bf16 A and B (steps tensor_core, wgmma), fp32 accumulation and output. */
COURSE_BRIDGE_API int course_batched_gemm_strided_bf16(const char* step, const void* a, const void* b, void* c,
                                                       int64_t M, int64_t N, int64_t K, int64_t batch,
                                                       int64_t num_heads, const int64_t a_strides[3],
                                                       const int64_t b_strides[3], const int64_t c_strides[3],
                                                       int a_transposed, int b_transposed, float alpha,
                                                       void* stream);
/** Pointer-array form: a_ptrs, b_ptrs, c_ptrs are DEVICE arrays of batch*num_heads DEVICE
 *  pointers (entry b*num_heads + h); one row stride per operand. The arrays' location is
 *  checked (a host array is rejected by name); their entries are not read on the host. */
COURSE_BRIDGE_API int course_batched_gemm_ptr_array_f32(const char* step, const void* a_ptrs, const void* b_ptrs,
                                                        const void* c_ptrs, int64_t M, int64_t N, int64_t K,
                                                        int64_t batch, int64_t num_heads, int64_t lda, int64_t ldb,
                                                        int64_t ldc, int a_transposed, int b_transposed,
                                                        float alpha, void* stream);
COURSE_BRIDGE_API int course_batched_gemm_ptr_array_bf16(const char* step, const void* a_ptrs, const void* b_ptrs,
                                                         const void* c_ptrs, int64_t M, int64_t N, int64_t K,
                                                         int64_t batch, int64_t num_heads, int64_t lda, int64_t ldb,
                                                         int64_t ldc, int a_transposed, int b_transposed,
                                                         float alpha, void* stream);

/* ---------------------------------------------------------------------------------------
 * Module 3 (module03/attention.hpp), op name "attention"
 *
 *   O[b,h] = softmax(scale * Q[b,h] K[b,g(h)]^T [+ ALiBi] [causal mask]) V[b,g(h)]
 *
 * Q, O: [batch, heads, seq_q, head_dim]; K, V: [batch, kv_heads, seq_k, head_dim]; each
 * with a strides array {batch, head, seq} in elements (head_dim stride 1), so [B,H,N,d]
 * and [B,N,H,d] storage are both just strides. scale 0 selects 1/sqrt(head_dim). The
 * causal mask is aligned to the bottom-right corner (query i sees key j iff
 * j <= i + seq_k - seq_q). lse (optional, may be NULL): [batch, heads, seq_q] contiguous
 * fp32, the natural-log logsumexp of each score row (what the backward pass reads).
 * rope, rope_theta, alibi and kv_heads < heads need step fused_options.
 * The tensor-core steps (tc_*, op name "attention_bf16") read and write bf16 Q, K, V, O
 * (fp32 accumulation and lse): course_attention_forward_bf16.
 * ------------------------------------------------------------------------------------- */

COURSE_BRIDGE_API int course_attention_workspace_bytes(const char* step, int64_t batch, int64_t heads,
                                                       int64_t seq_q, int64_t seq_k, size_t* bytes);
/** fp32 Q, K, V, O (steps naive .. fused_options). */
COURSE_BRIDGE_API int course_attention_forward(const char* step, const void* q, const void* k, const void* v,
                                               void* o, void* lse, int64_t batch, int64_t heads, int64_t kv_heads,
                                               int64_t seq_q, int64_t seq_k, int64_t head_dim,
                                               const int64_t q_strides[3], const int64_t k_strides[3],
                                               const int64_t v_strides[3], const int64_t o_strides[3], float scale,
                                               int causal, int rope, float rope_theta, int alibi, void* workspace,
                                               size_t workspace_bytes, void* stream);
/** bf16 Q, K, V, O (steps tc_*; course_list_steps("attention_bf16")), optional fp32 lse.
 *  Every stride a multiple of 8 elements, pointers 16-byte aligned, head_dim in {32, 64, 96,
 *  128}; grouped-query attention allowed; no RoPE, ALiBi or workspace. Returns
 *  COURSE_ERR_NOT_IMPLEMENTED where the library was built without the tensor-core steps. */
COURSE_BRIDGE_API int course_attention_forward_bf16(const char* step, const void* q, const void* k, const void* v,
                                                    void* o, void* lse, int64_t batch, int64_t heads,
                                                    int64_t kv_heads, int64_t seq_q, int64_t seq_k, int64_t head_dim,
                                                    const int64_t q_strides[3], const int64_t k_strides[3],
                                                    const int64_t v_strides[3], const int64_t o_strides[3],
                                                    float scale, int causal, void* stream);

/* ---------------------------------------------------------------------------------------
 * Module 4 (module04/softmax_backward.hpp, linear_backward.hpp, attention_backward.hpp)
 * ------------------------------------------------------------------------------------- */

COURSE_BRIDGE_API int course_softmax_backward_workspace_bytes(const char* step, int64_t rows, int64_t cols, int dim,
                                                              size_t* bytes);
/** dx = y * (dy - sum(dy * y)) along dim, fp32 row-major (row strides ldy, lddy, lddx >= cols).
 *  In place: dx == dy with lddx == lddy. */
COURSE_BRIDGE_API int course_softmax_backward(const char* step, const void* y, const void* dy, void* dx,
                                              int64_t rows, int64_t cols, int64_t ldy, int64_t lddy, int64_t lddx,
                                              int dim, void* workspace, size_t workspace_bytes, void* stream);

/** Backward of Y = X W + b (fp32, row-major; X M x K, W K x N, dY M x N):
 *  dX = dY W^T (M x K), dW = X^T dY (K x N), db = column sums of dY (N floats). Each of dx,
 *  dw, db may be NULL (that gradient is skipped). An ld of 0 means dense. `step` picks the
 *  bias-gradient kernel (course_list_steps("linear_backward")). */
COURSE_BRIDGE_API int course_linear_backward(const char* step, const void* x, const void* w, const void* dy,
                                             void* dx, void* dw, void* db, int64_t M, int64_t K, int64_t N,
                                             int64_t ldx, int64_t ldw, int64_t lddy, int64_t lddx, int64_t lddw,
                                             void* stream);

/** Workspace bytes of the fp32 steps (naive, flash, flash_deterministic). */
COURSE_BRIDGE_API int course_attention_backward_workspace_bytes(const char* step, int64_t batch, int64_t heads,
                                                                int64_t seq_q, int64_t seq_k, size_t* bytes);
/** dQ, dK, dV of module 3's fp32 attention, given Q, K, V, the forward's O and lse, and dO.
 *  Shapes and strides as course_attention_forward (dout, dq like q; dk, dv like k); lse is
 *  required. dq, dk, dv are overwritten. With kv_heads < heads, dK and dV sum over the
 *  query heads of a group. scale and causal must equal the forward's. Steps: op name
 *  "attention_backward" (fp32). */
COURSE_BRIDGE_API int course_attention_backward(
    const char* step, const void* q, const void* k, const void* v, const void* o, const void* dout, const void* lse,
    void* dq, void* dk, void* dv, int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_k,
    int64_t head_dim, const int64_t q_strides[3], const int64_t k_strides[3], const int64_t v_strides[3],
    const int64_t o_strides[3], const int64_t do_strides[3], const int64_t dq_strides[3],
    const int64_t dk_strides[3], const int64_t dv_strides[3], float scale, int causal, void* workspace,
    size_t workspace_bytes, void* stream);

/** Workspace bytes of the tensor-core steps (op name "attention_backward_bf16"): D, the lse
 *  in base 2 and an fp32 dQ accumulator, so it depends on head_dim. tc_split_dq keeps S
 *  copies of the accumulator, S from the sizes, kv_heads and the current device's SM count;
 *  kv_heads not being an argument here, the answer is the largest over the divisors of heads
 *  (enough for any kv_heads, on this device). */
COURSE_BRIDGE_API int course_attention_backward_bf16_workspace_bytes(const char* step, int64_t batch, int64_t heads,
                                                                     int64_t seq_q, int64_t seq_k, int64_t head_dim,
                                                                     size_t* bytes);
/** The same for bf16 Q, K, V, O, dO and bf16 dQ, dK, dV (steps tc_*;
 *  course_list_steps("attention_backward_bf16")); lse stays fp32 (what
 *  course_attention_forward_bf16 writes). head_dim 64 or 128, every stride a multiple of 8
 *  elements, pointers 16-byte aligned. Returns COURSE_ERR_NOT_IMPLEMENTED where the library
 *  was built without the tensor-core backward. */
COURSE_BRIDGE_API int course_attention_backward_bf16(
    const char* step, const void* q, const void* k, const void* v, const void* o, const void* dout, const void* lse,
    void* dq, void* dk, void* dv, int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_k,
    int64_t head_dim, const int64_t q_strides[3], const int64_t k_strides[3], const int64_t v_strides[3],
    const int64_t o_strides[3], const int64_t do_strides[3], const int64_t dq_strides[3],
    const int64_t dk_strides[3], const int64_t dv_strides[3], float scale, int causal, void* workspace,
    size_t workspace_bytes, void* stream);

/* ---------------------------------------------------------------------------------------
 * Module 4: fused cross-entropy (module04/cross_entropy.hpp)
 * ------------------------------------------------------------------------------------- */

/** Softmax cross-entropy of logits (rows x vocab, row stride ldl; fp32, or bf16 when bf16 != 0)
 *  against int32 targets: losses[r] = logsumexp(row) - row[target] (0 on rows whose target is
 *  ignore_index), *loss_mean = their mean over the N counted rows (0 when N = 0), *num_valid =
 *  N, and, unless dlogits is NULL, dlogits = (softmax - onehot) * dloss / N (same dtype, row
 *  stride lddl; may equal logits with lddl == ldl: in place). A target outside [0, vocab) that
 *  is not ignore_index makes that row's loss and gradient NaN. Deterministic. */
COURSE_BRIDGE_API int course_cross_entropy(const char* step, int bf16, const void* logits, const int32_t* targets,
                                           float* losses, float* loss_mean, int32_t* num_valid, void* dlogits,
                                           int64_t rows, int64_t vocab, int64_t ldl, int64_t lddl,
                                           int32_t ignore_index, float dloss, void* stream);

/* ---------------------------------------------------------------------------------------
 * Module 4's optimizer and activation, module 1's tensor-core matmul with its options
 * (module04/adamw.hpp, module04/gelu.hpp, module01/matmul_tc.hpp "Options for a linear layer")
 * ------------------------------------------------------------------------------------- */

/** Workspace bytes of adamw(step) for num_tensors tensors of sizes[i] elements (a HOST
 *  array; multi_tensor's workspace grows with the number of 16384-element chunks). */
COURSE_BRIDGE_API int course_adamw_workspace_bytes(const char* step, int64_t num_tensors, const int64_t* sizes,
                                                   size_t* bytes);
/** One AdamW step (torch.optim.AdamW's formula and order) over a list of fp32 tensors, with
 *  global gradient-norm clipping when max_norm > 0 (torch.nn.utils.clip_grad_norm_'s scale,
 *  applied on the fly: grads are not modified). params, grads, exp_avgs, exp_avg_sqs, sizes
 *  are HOST arrays of num_tensors entries; their entries are DEVICE pointers to sizes[i]
 *  contiguous floats. bf16_copies: NULL (none) or a HOST array whose non-NULL entries receive
 *  the updated params rounded to bf16. decay: NULL (weight decay on every tensor) or a HOST
 *  array of num_tensors ints (0: no decay, e.g. biases and LayerNorm). grad_norm: NULL or a
 *  device float that receives the norm before clipping. t >= 1 is the step number (the bias
 *  corrections 1 - beta^t). Nothing is copied to the host: the clip scale stays on the device.
 *  Steps: op name "adamw". */
COURSE_BRIDGE_API int course_adamw(const char* step, int64_t num_tensors, void* const* params,
                                   const void* const* grads, void* const* exp_avgs, void* const* exp_avg_sqs,
                                   void* const* bf16_copies, const int64_t* sizes, const int* decay, float lr,
                                   float beta1, float beta2, float eps, float weight_decay, int64_t t,
                                   float max_norm, void* grad_norm, void* workspace, size_t workspace_bytes,
                                   void* stream);

/** y = gelu(x), GPT-2's tanh approximation, over n contiguous elements; bf16 = 0: fp32
 *  tensors, 1: bf16 tensors (fp32 arithmetic, one rounding). In place: y == x. Steps: op name
 *  "gelu". */
COURSE_BRIDGE_API int course_gelu_forward(const char* step, const void* x, void* y, int64_t n, int bf16,
                                          void* stream);
/** dx = dy * gelu'(x), or dx += dy * gelu'(x) with accumulate; dtypes as course_gelu_forward.
 *  In place: dx == dy. Steps: op name "gelu_backward" (the same table as "gelu"). */
COURSE_BRIDGE_API int course_gelu_backward(const char* step, const void* x, const void* dy, void* dx, int64_t n,
                                           int bf16, int accumulate, void* stream);

/** course_matmul_tc with TcMatmulArgs' options (course_matmul_tc's signature is kept as it is):
 *    C (M x N) = op(A) op(B) [+ bias] [-> pre_gelu, gelu] [+ residual]   (C += ... with accumulate)
 *  a_transposed: A stored K x M (element (i, k) at a[k * lda + i]); b_transposed: B stored
 *  N x K (element (k, j) at b[j * ldb + k]) -- so a linear layer Y = X W^T with W stored
 *  [out, in] is a = X, b = W, b_transposed = 1. Exactly one of c (fp32) and c_bf16 (bf16),
 *  leading dimension ldc. bias: NULL or N floats. pre_gelu: NULL or an M x N bf16 matrix with
 *  leading dimension ldc (needs gelu). residual: NULL or M x N in the output's dtype,
 *  leading dimension ldr; it may be the output itself (same pointer, ldr == ldc).
 *  accumulate: fp32 output only, C += the result. Step mma_sync takes every option; the
 *  other steps report COURSE_ERR_UNSUPPORTED naming the first option they are given. */
COURSE_BRIDGE_API int course_matmul_tc_ex(const char* step, const void* a, const void* b, void* c, void* c_bf16,
                                          int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                                          int a_transposed, int b_transposed, const void* bias, void* pre_gelu,
                                          int gelu, const void* residual, int64_t ldr, int accumulate,
                                          void* stream);

/* ---------------------------------------------------------------------------------------
 * Module 4: LayerNorm (module04/layer_norm.hpp, module04/layer_norm_backward.hpp), op names
 * "layer_norm" (forward steps) and "layer_norm_backward" (backward steps)
 *
 *   mean_r = mean_c x(r, c),  rstd_r = 1 / sqrt(mean_c (x(r, c) - mean_r)^2 + eps)
 *   y(r, c) = (x(r, c) - mean_r) * rstd_r * gamma[c] + beta[c]
 *
 * x, y, dy, dx: rows x C, row-major, each with its own row stride (>= C), one dtype:
 * bf16 = 0: float32, 1: bfloat16 (fp32 arithmetic). gamma, beta [C], mean, rstd [rows],
 * dgamma, dbeta [C]: float32 always. Outputs never overlap an input (no in place).
 * ------------------------------------------------------------------------------------- */

/** y = LayerNorm(x) * gamma + beta over each row, and the row statistics mean and rstd (what
 *  the backward reads; both required). eps >= 0 (torch's default 1e-5). rows = 0 is a no-op. */
COURSE_BRIDGE_API int course_layer_norm_forward(const char* step, int bf16, const void* x, void* y,
                                                const void* gamma, const void* beta, void* mean, void* rstd,
                                                int64_t rows, int64_t C, int64_t ldx, int64_t ldy, float eps,
                                                void* stream);
/** Workspace bytes of layer_norm_backward(step) (partial_sums: one dgamma, dbeta partial per
 *  block; atomic_params: 0). */
COURSE_BRIDGE_API int course_layer_norm_backward_workspace_bytes(const char* step, int64_t rows, int64_t C,
                                                                 size_t* bytes);
/** dx (= or += with accumulate_dx), dgamma and dbeta (= or += with accumulate_dparams) of
 *  LayerNorm, from x, dy, gamma and the forward's mean and rstd. rows = 0: dgamma and dbeta
 *  are zeroed (unless accumulate_dparams) and x, dy, dx, mean, rstd may be NULL. atomic_params
 *  is nondeterministic in dgamma, dbeta's last bits; partial_sums is deterministic. */
COURSE_BRIDGE_API int course_layer_norm_backward(const char* step, int bf16, const void* x, const void* dy,
                                                 void* dx, const void* gamma, const void* mean, const void* rstd,
                                                 void* dgamma, void* dbeta, int64_t rows, int64_t C, int64_t ldx,
                                                 int64_t lddy, int64_t lddx, int accumulate_dx,
                                                 int accumulate_dparams, void* workspace, size_t workspace_bytes,
                                                 void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* COURSE_BRIDGE_H */
