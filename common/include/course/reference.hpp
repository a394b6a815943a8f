#pragma once
/// @file reference.hpp
/// @brief CPU reference implementations of every operation in the course.
///
/// All accumulate in double. Templated on the element type T (float or double):
/// tests compare float kernels against the float instantiation; gradient checks use
/// the double one so finite differences are accurate. Every function validates its
/// arguments and throws course::InvalidArgument naming the bad one.

#include "course/tensor.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace course::ref {

// ---------------------------------------------------------------- module 1 -----

/// sqrt(sum x_i^2). n may be 0 (result 0). x may be null only when n == 0.
double l2_norm(const float* x, std::int64_t n);
/// sum x_i * y_i.
double dot(const float* x, const float* y, std::int64_t n);

/// Numerically stable softmax of a 2-D tensor along `dim`:
/// dim = 1 normalizes each row (the usual "last axis"), dim = 0 each column.
/// Subtracts the max of each slice before exp, so [1000, 1001, 1002] is finite.
template <class T>
HostTensor<T> softmax(const HostTensor<T>& x, int dim);

/// C = op(A) * op(B), op = transpose when the flag is set. A is [M,K] ([K,M] if
/// trans_a), B is [K,N] ([N,K] if trans_b). Any strides; result contiguous [M,N].
template <class T>
HostTensor<T> matmul(const HostTensor<T>& a, const HostTensor<T>& b, bool trans_a = false,
                     bool trans_b = false);

// ---------------------------------------------------------------- module 2 -----

/// Shape and strides (in elements) of one strided-batched GEMM over (batch, head):
///   C[b,h] (M x N) = op(A[b,h]) * op(B[b,h]),
/// with op(A) = A^T when a_transposed (A stored K x M, as X in dW = X^T dY) else A (M x K),
/// and op(B) = B^T when b_transposed (B stored N x K, as K in Q*K^T) else B (K x N).
/// Element (r, c) of operand X for (b, h), in its STORED shape, lives at
///   X + b*stride_x_batch + h*stride_x_head + r*stride_x_row + c   (unit column stride).
struct BatchedGemmDesc {
  std::int64_t M = 0, N = 0, K = 0;
  std::int64_t batch = 1, num_heads = 1;
  std::int64_t stride_a_batch = 0, stride_a_head = 0, stride_a_row = 0;
  std::int64_t stride_b_batch = 0, stride_b_head = 0, stride_b_row = 0;
  std::int64_t stride_c_batch = 0, stride_c_head = 0, stride_c_row = 0;
  bool b_transposed = false;
  bool a_transposed = false;
  float alpha = 1.0f;  ///< C = alpha * op(A)*op(B)
};

/// Contiguous [B,H,rows,cols] strides for every operand of `d` (fills the stride fields);
/// A is stored K x M when a_transposed, B is stored N x K when b_transposed.
BatchedGemmDesc contiguous_batched_gemm(std::int64_t batch, std::int64_t heads, std::int64_t M,
                                        std::int64_t N, std::int64_t K, bool b_transposed,
                                        bool a_transposed = false);

/// Strided-batched reference. Only the elements of C that the GEMMs define are written.
/// Strides must be >= 0 (a zero input stride broadcasts); rows of C must not overlap.
template <class T>
void batched_gemm_strided(const BatchedGemmDesc& d, const T* a, const T* b, T* c);

/// Pointer-array reference: a[i], b[i], c[i] for i = batch_index*num_heads + head,
/// each a single matrix with row stride lda/ldb/ldc (only M,N,K,batch,num_heads,
/// a_transposed, b_transposed and alpha of `d` are used).
template <class T>
void batched_gemm_ptr_array(const BatchedGemmDesc& d, const T* const* a, std::int64_t lda,
                            const T* const* b, std::int64_t ldb, T* const* c, std::int64_t ldc);

// ---------------------------------------------------------------- module 3 -----

struct AttentionOptions {
  double scale = 0.0;        ///< 0 means 1/sqrt(d)
  bool causal = false;       ///< query i sees key j iff j <= i + (N_k - N_q) (bottom-right aligned)
};

template <class T>
struct AttentionResult {
  HostTensor<T> out;  ///< O, [B, H, N_q, d], contiguous
  HostTensor<T> lse;  ///< logsumexp of each scaled score row, [B, H, N_q]; -inf for a fully masked row
};

/// O = softmax(scale * Q K^T [+ mask]) V for tensors indexed [B, H, N, d] with any strides.
/// q: [B, H, N_q, d], k and v: [B, H_kv, N_k, d] with H % H_kv == 0 (grouped-query
/// attention: query head h reads kv head h / (H / H_kv)). A row with no visible key
/// (causal with N_q > N_k) gets O = 0 and lse = -inf.
template <class T>
AttentionResult<T> attention_forward(const HostTensor<T>& q, const HostTensor<T>& k,
                                     const HostTensor<T>& v, const AttentionOptions& opts = {});

/// The same attention computed the plain way in bf16 precision: the "same-precision"
/// baseline of FlashAttention's accuracy rule for module 3's tensor-core steps (a kernel's
/// max error against attention_forward must stay within 2x this function's, plus a tiny
/// floor). Q, K and V are rounded to bf16 first (bf16 values stay as they are); each score
/// is a sequential fp32 sum of the (exact) bf16 products times the scale; the softmax is
/// fp32 (max, expf, sum); P = p / l is rounded to bf16; O = sum_j P_j v_j is accumulated
/// in fp32 and rounded to bf16 once; lse = m + logf(l) stays fp32. Conventions as for
/// attention_forward (any strides, causal bottom-right aligned, grouped-query heads,
/// O = 0 and lse = -inf for a row that sees no key). Results are contiguous.
AttentionResult<float> attention_forward_bf16(const HostTensor<float>& q, const HostTensor<float>& k,
                                              const HostTensor<float>& v, const AttentionOptions& opts = {});

// ---------------------------------------------------------------- module 4 -----

/// Given y = softmax(x, dim) and dL/dy, returns dL/dx = y * (dy - sum(dy * y) along dim).
template <class T>
HostTensor<T> softmax_backward(const HostTensor<T>& y, const HostTensor<T>& dy, int dim);

template <class T>
struct MatmulGrads {
  HostTensor<T> da;  ///< dL/dA = dC * B^T, [M, K]
  HostTensor<T> db;  ///< dL/dB = A^T * dC, [K, N]
};
/// Gradients of C = A * B (no transposes) given dL/dC.
template <class T>
MatmulGrads<T> matmul_backward(const HostTensor<T>& a, const HostTensor<T>& b, const HostTensor<T>& dc);

template <class T>
struct AttentionGrads {
  HostTensor<T> dq;  ///< [B, H, N_q, d]
  HostTensor<T> dk;  ///< [B, H_kv, N_k, d] (summed over the query heads sharing it)
  HostTensor<T> dv;  ///< [B, H_kv, N_k, d]
};
/// Gradients of attention_forward given dL/dO; recomputes P from q, k and the options.
template <class T>
AttentionGrads<T> attention_backward(const HostTensor<T>& q, const HostTensor<T>& k,
                                     const HostTensor<T>& v, const HostTensor<T>& dout,
                                     const AttentionOptions& opts = {});

/// The backward pass computed the plain way in bf16 precision: the same-precision baseline of
/// FlashAttention's backward rule for module 4's tensor-core steps (a kernel's max error
/// against attention_backward in double must stay within 3x this function's, plus a tiny
/// floor). Q, K, V, O and dO hold bf16 values (as floats), lse is the forward's fp32
/// logsumexp ([B, H, N_q] contiguous, -inf for a row that sees no key). Every product below
/// is a sequential fp32 sum: s = scale q.k, P = exp(s - lse), dP = dO.v, D = dO.O,
/// dS = P (dP - D); P and dS are rounded to bf16 where a kernel feeds them to a bf16 mma
/// (dV += P^T dO, dK += dS^T Q, dQ += dS K), the sums stay fp32 (dK and dV summed over a
/// group's query heads), and dQ, dK (both times scale) and dV are rounded to bf16 once.
/// Results are contiguous.
AttentionGrads<float> attention_backward_bf16(const HostTensor<float>& q, const HostTensor<float>& k,
                                              const HostTensor<float>& v, const HostTensor<float>& o,
                                              const HostTensor<float>& dout, const std::vector<float>& lse,
                                              const AttentionOptions& opts = {});

// ------------------------------------------------------ gradient checking -----

/// Central finite differences of a scalar function: g_i = (f(x + h e_i) - f(x - h e_i)) / 2h.
std::vector<double> numerical_gradient(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x, double h = 1e-6);

struct GradCheckResult {
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;  ///< |a - n| / max(|a| + |n|, 1e-12) ... worst element
  std::int64_t worst_index = -1;  ///< element with the largest |a - n| / (atol + rtol * |n|)
  bool ok = false;
};
/// Compare an analytic gradient with numerical_gradient(f, x, h): ok when every
/// element satisfies |a - n| <= atol + rtol * |n| (NaN/Inf never pass). x must be non-empty.
GradCheckResult check_gradient(const std::function<double(const std::vector<double>&)>& f,
                               const std::vector<double>& x, const std::vector<double>& analytic,
                               double h = 1e-6, double atol = 1e-7, double rtol = 1e-5);

// ------------------------------------------- module 3: positional options -----
// (implemented in common/src/reference_rope_alibi.cpp)

/// Rotary position embedding of a tensor indexed [B, H, N, d] (any strides, d even), in
/// the "rotate-half" pairing: element c pairs with c + d/2 (c < d/2),
///     angle = (n + position_offset) * theta^(-2c/d)
///     x'[c] = x[c] cos(angle) - x[c + d/2] sin(angle),  x'[c + d/2] = x[c] sin(angle) + x[c + d/2] cos(angle).
/// Returns a contiguous tensor. Computed in double.
template <class T>
HostTensor<T> apply_rope(const HostTensor<T>& x, double theta = 10000.0, std::int64_t position_offset = 0);

/// ALiBi slope of head h (0-based) of H heads: 2^(-8 (h + 1) / H).
double alibi_slope(std::int64_t h, std::int64_t H);

/// Positional options of module 3's attention (see module03/attention.hpp).
struct PositionalOptions {
  bool rope = false;           ///< rotate Q (positions i + N_k - N_q) and K (positions j)
  double rope_theta = 10000.0;
  bool alibi = false;          ///< add alibi_slope(h, H) * (j - (i + N_k - N_q)) to each scaled score
};

/// attention_forward with RoPE and/or ALiBi (same conventions: causal bottom-right aligned,
/// grouped-query heads, fully masked rows give O = 0 and lse = -inf). With both options
/// off it computes exactly what attention_forward does.
template <class T>
AttentionResult<T> attention_forward_positional(const HostTensor<T>& q, const HostTensor<T>& k,
                                                const HostTensor<T>& v, const AttentionOptions& opts,
                                                const PositionalOptions& pos);

// ------------------------------------------------ module 4: transformer block -----
// (implemented in common/src/reference_transformer.cpp)
// The ops of a GPT block beside attention: LayerNorm, GELU, the loss and the optimizer.
// Tensors are read through their strides; results are contiguous.

template <class T>
struct LayerNormResult {
  HostTensor<T> y;     ///< [rows, C]: gamma * xhat + beta, xhat = (x - mean) * rstd
  HostTensor<T> mean;  ///< [rows]
  HostTensor<T> rstd;  ///< [rows]: 1 / sqrt(var + eps), var the biased variance (divide by C)
};

/// LayerNorm over the last axis of x [rows, C] with affine gamma, beta [C], as
/// torch.nn.functional.layer_norm: each row is normalized by its own mean and biased
/// variance, then scaled and shifted per column. Two passes in double (mean, then the
/// squared deviations), so a large common offset costs no accuracy. eps >= 0; with
/// eps = 0 a constant row divides by zero (rstd = inf, y = NaN), as it does in PyTorch.
template <class T>
LayerNormResult<T> layer_norm_forward(const HostTensor<T>& x, const HostTensor<T>& gamma,
                                      const HostTensor<T>& beta, double eps = 1e-5);

template <class T>
struct LayerNormGrads {
  HostTensor<T> dx;      ///< [rows, C]
  HostTensor<T> dgamma;  ///< [C]: sum over rows of dy * xhat
  HostTensor<T> dbeta;   ///< [C]: sum over rows of dy
};

/// Gradients of layer_norm_forward given dL/dy and the forward's saved mean and rstd
/// ([rows] each; xhat is recomputed from them). With g = dy * gamma, per row:
///   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
template <class T>
LayerNormGrads<T> layer_norm_backward(const HostTensor<T>& x, const HostTensor<T>& gamma,
                                      const HostTensor<T>& mean, const HostTensor<T>& rstd,
                                      const HostTensor<T>& dy);

/// GELU in GPT-2's tanh approximation (torch's gelu(approximate='tanh')), elementwise on a
/// tensor of any rank and strides:  gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
HostTensor<T> gelu_tanh(const HostTensor<T>& x);

/// dL/dx of gelu_tanh given x and dL/dy (same shape). With u = sqrt(2/pi) (x + 0.044715 x^3)
/// and t = tanh(u):  dy/dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <class T>
HostTensor<T> gelu_tanh_backward(const HostTensor<T>& x, const HostTensor<T>& dy);

template <class T>
struct CrossEntropyResult {
  double loss = 0.0;            ///< mean over counted rows; 0 when no row is counted
  std::int64_t counted = 0;     ///< rows whose target is not ignore_index
  std::vector<double> row_loss; ///< [rows]: logsumexp(row) - row[target]; 0 on ignored rows
  HostTensor<T> dlogits;        ///< [rows, V]: d loss / d logits
};

/// Mean softmax cross-entropy of logits [rows, V] against targets [rows], as
/// torch.nn.functional.cross_entropy(reduction='mean', ignore_index=...). A row whose
/// target equals ignore_index is not counted: it adds no loss and gets a zero gradient.
/// With N counted rows and p = softmax(row):
///   loss = (1/N) sum_counted (logsumexp(row) - row[target]),  dlogits = (p - onehot(target)) / N.
/// When every row is ignored (or rows = 0), loss = 0 and dlogits = 0 (PyTorch returns NaN
/// there, 0/0; a training loop is better served by 0). Other targets must lie in [0, V).
template <class T>
CrossEntropyResult<T> cross_entropy(const HostTensor<T>& logits, const std::vector<std::int32_t>& targets,
                                    std::int64_t ignore_index = -100);

/// One AdamW step (Loshchilov & Hutter's decoupled weight decay, in torch.optim.AdamW's
/// form), elementwise and in place over flat vectors of equal length; step t counts from 1.
/// In this order, as PyTorch does:
///   p  = p * (1 - lr * weight_decay)                       decay first, of the old p
///   m  = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
///   p  = p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
/// The decay is decoupled: it never enters m or v, so every weight shrinks by the same
/// factor whatever its gradient history (an L2 term added to g would be divided by sqrt(v)
/// like the gradient). As in PyTorch the factor is lr * weight_decay, and eps is added after
/// the square root. lr = 0 leaves params unchanged (m and v still update). Computed in
/// double, stored as T.
template <class T>
void adamw_step(std::vector<T>& params, const std::vector<T>& grads, std::vector<T>& m, std::vector<T>& v,
                std::int64_t step, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                double eps = 1e-8, double weight_decay = 1e-2);

}  // namespace course::ref
