/// @file reference_gemm.cpp
/// @brief CPU references of matrix multiplication: 2-D matmul (with transposes),
/// its backward pass, and the strided / pointer-array batched GEMMs of module 2.
///
/// Each output element is one double-precision sum over k in increasing order.

#include "course/reference.hpp"

#include <algorithm>
#include <sstream>
#include <string>

namespace course::ref {

namespace {

/// An M x K (or K x N) view of a 2-D operand with element (r, c) at r*rs + c*cs.
template <class T>
struct MatView {
  const T* p;
  std::int64_t rows, cols, rs, cs;
  double operator()(std::int64_t r, std::int64_t c) const { return static_cast<double>(p[r * rs + c * cs]); }
};

/// op(X) of a 2-D tensor: transposing just swaps the extents and the strides.
template <class T>
MatView<T> op_view(const HostTensor<T>& x, bool trans) {
  if (trans) return {x.data(), x.dim(1), x.dim(0), x.stride(1), x.stride(0)};
  return {x.data(), x.dim(0), x.dim(1), x.stride(0), x.stride(1)};
}

/// C[M,N] (contiguous) = A * B over views; row m of C is accumulated in `acc` with the
/// loop order m, k, n, which streams rows of B (every sum still runs over k in order).
template <class T>
HostTensor<T> multiply(const MatView<T>& a, const MatView<T>& b) {
  const std::int64_t M = a.rows, K = a.cols, N = b.cols;
  HostTensor<T> c({M, N});
  std::vector<double> acc(static_cast<std::size_t>(N));
  for (std::int64_t m = 0; m < M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (std::int64_t k = 0; k < K; ++k) {
      const double amk = a(m, k);
      for (std::int64_t n = 0; n < N; ++n) acc[n] += amk * b(k, n);
    }
    for (std::int64_t n = 0; n < N; ++n) c.data()[m * N + n] = static_cast<T>(acc[n]);
  }
  return c;
}

template <class T>
void require_2d(const HostTensor<T>& x, const char* fn, const char* name) {
  require_arg(x.rank() == 2, fn, name, shape_string(x.shape()), "must be a 2-D tensor");
}

/// The sizes of one GEMM of a batched descriptor: all >= 0.
void require_gemm_sizes(const BatchedGemmDesc& d, const char* fn) {
  require_arg(d.M >= 0, fn, "d.M", d.M, "must be >= 0");
  require_arg(d.N >= 0, fn, "d.N", d.N, "must be >= 0");
  require_arg(d.K >= 0, fn, "d.K", d.K, "must be >= 0");
  require_arg(d.batch >= 0, fn, "d.batch", d.batch, "must be >= 0");
  require_arg(d.num_heads >= 0, fn, "d.num_heads", d.num_heads, "must be >= 0");
}

std::string at_least(const char* what, std::int64_t v) {
  std::ostringstream os;
  os << "must be >= " << what << " = " << v;
  return os.str();
}

/// C = 0 for an empty inner dimension (a and b may then be null).
template <class T>
void zero_one(const BatchedGemmDesc& d, T* c, std::int64_t ldc) {
  for (std::int64_t m = 0; m < d.M; ++m)
    for (std::int64_t n = 0; n < d.N; ++n) c[m * ldc + n] = T(0);
}

/// One GEMM: c (M x N, row stride ldc) = alpha * op(a) * op(b); a is K x M (lda) when
/// transposed else M x K, b is N x K (ldb) when transposed else K x N.
template <class T>
void gemm_one(const BatchedGemmDesc& d, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
              std::int64_t ldc, std::vector<double>& acc) {
  const double alpha = static_cast<double>(d.alpha);
  // op(A)(m, k): A(m, k) stored M x K, or A(k, m) stored K x M (a_transposed).
  const std::int64_t a_row_step = d.a_transposed ? 1 : lda, a_k_step = d.a_transposed ? lda : 1;
  acc.assign(static_cast<std::size_t>(d.N), 0.0);
  for (std::int64_t m = 0; m < d.M; ++m) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const T* arow = a + m * a_row_step;  // op(A)(m, k) = arow[k * a_k_step]
    if (d.b_transposed) {
      // op(B)(k, n) = B(n, k): each output is a dot product of row m of op(A) and row n of B.
      for (std::int64_t n = 0; n < d.N; ++n) {
        const T* brow = b + n * ldb;
        double s = 0.0;
        for (std::int64_t k = 0; k < d.K; ++k)
          s += static_cast<double>(arow[k * a_k_step]) * static_cast<double>(brow[k]);
        acc[n] = s;
      }
    } else {
      for (std::int64_t k = 0; k < d.K; ++k) {
        const double amk = static_cast<double>(arow[k * a_k_step]);
        const T* brow = b + k * ldb;
        for (std::int64_t n = 0; n < d.N; ++n) acc[n] += amk * static_cast<double>(brow[n]);
      }
    }
    for (std::int64_t n = 0; n < d.N; ++n) c[m * ldc + n] = static_cast<T>(alpha * acc[n]);
  }
}

}  // namespace

template <class T>
HostTensor<T> matmul(const HostTensor<T>& a, const HostTensor<T>& b, bool trans_a, bool trans_b) {
  require_2d(a, "matmul", "a.shape()");
  require_2d(b, "matmul", "b.shape()");
  const MatView<T> av = op_view(a, trans_a);
  const MatView<T> bv = op_view(b, trans_b);
  if (av.cols != bv.rows) {
    std::ostringstream os;
    os << "inner dimensions differ: op(A) is " << av.rows << " x " << av.cols << " (a.shape() = "
       << shape_string(a.shape()) << ", trans_a = " << (trans_a ? "true" : "false") << ") but op(B) is "
       << bv.rows << " x " << bv.cols << " (trans_b = " << (trans_b ? "true" : "false") << ")";
    require_arg(false, "matmul", "b.shape()", shape_string(b.shape()), os.str().c_str());
  }
  return multiply(av, bv);
}

template <class T>
MatmulGrads<T> matmul_backward(const HostTensor<T>& a, const HostTensor<T>& b, const HostTensor<T>& dc) {
  const char* fn = "matmul_backward";
  require_2d(a, fn, "a.shape()");
  require_2d(b, fn, "b.shape()");
  require_2d(dc, fn, "dc.shape()");
  require_arg(a.dim(1) == b.dim(0), fn, "b.shape()", shape_string(b.shape()),
              ("rows must equal the columns of a.shape() " + shape_string(a.shape())).c_str());
  const Shape c_shape{a.dim(0), b.dim(1)};
  require_arg(dc.shape() == c_shape, fn, "dc.shape()", shape_string(dc.shape()),
              ("must equal the shape of C = A*B, " + shape_string(c_shape)).c_str());
  // C = A B  =>  dA = dC B^T  and  dB = A^T dC.
  MatmulGrads<T> g;
  g.da = multiply(op_view(dc, false), op_view(b, true));
  g.db = multiply(op_view(a, true), op_view(dc, false));
  return g;
}

BatchedGemmDesc contiguous_batched_gemm(std::int64_t batch, std::int64_t heads, std::int64_t M, std::int64_t N,
                                        std::int64_t K, bool b_transposed, bool a_transposed) {
  BatchedGemmDesc d;
  d.M = M;
  d.N = N;
  d.K = K;
  d.batch = batch;
  d.num_heads = heads;
  d.b_transposed = b_transposed;
  d.a_transposed = a_transposed;
  require_gemm_sizes(d, "contiguous_batched_gemm");
  const std::int64_t b_rows = b_transposed ? N : K, b_cols = b_transposed ? K : N;
  d.stride_a_row = a_transposed ? M : K;  // the head stride M * K is the same either way
  d.stride_a_head = M * K;
  d.stride_a_batch = heads * M * K;
  d.stride_b_row = b_cols;
  d.stride_b_head = b_rows * b_cols;
  d.stride_b_batch = heads * b_rows * b_cols;
  d.stride_c_row = N;
  d.stride_c_head = M * N;
  d.stride_c_batch = heads * M * N;
  return d;
}

template <class T>
void batched_gemm_strided(const BatchedGemmDesc& d, const T* a, const T* b, T* c) {
  const char* fn = "batched_gemm_strided";
  require_gemm_sizes(d, fn);
  for (auto [name, v] : {std::pair{"d.stride_a_batch", d.stride_a_batch}, {"d.stride_a_head", d.stride_a_head},
                         {"d.stride_a_row", d.stride_a_row}, {"d.stride_b_batch", d.stride_b_batch},
                         {"d.stride_b_head", d.stride_b_head}, {"d.stride_b_row", d.stride_b_row},
                         {"d.stride_c_batch", d.stride_c_batch}, {"d.stride_c_head", d.stride_c_head},
                         {"d.stride_c_row", d.stride_c_row}})
    require_arg(v >= 0, fn, name, v, "must be >= 0");
  // Rows of C must not overlap (inputs may: a zero stride broadcasts an operand).
  if (d.M > 1) require_arg(d.stride_c_row >= d.N, fn, "d.stride_c_row", d.stride_c_row, at_least("d.N", d.N).c_str());
  const std::int64_t count = d.batch * d.num_heads;
  if (count == 0 || d.M == 0 || d.N == 0) return;
  require_not_null(c, fn, "c");
  if (d.K > 0) {
    require_not_null(a, fn, "a");
    require_not_null(b, fn, "b");
  }
  std::vector<double> acc;
  for (std::int64_t bi = 0; bi < d.batch; ++bi)
    for (std::int64_t h = 0; h < d.num_heads; ++h)
      if (d.K == 0)
        zero_one(d, c + bi * d.stride_c_batch + h * d.stride_c_head, d.stride_c_row);
      else
        gemm_one(d, a + bi * d.stride_a_batch + h * d.stride_a_head, d.stride_a_row,
               b + bi * d.stride_b_batch + h * d.stride_b_head, d.stride_b_row,
               c + bi * d.stride_c_batch + h * d.stride_c_head, d.stride_c_row, acc);
}

template <class T>
void batched_gemm_ptr_array(const BatchedGemmDesc& d, const T* const* a, std::int64_t lda, const T* const* b,
                            std::int64_t ldb, T* const* c, std::int64_t ldc) {
  const char* fn = "batched_gemm_ptr_array";
  require_gemm_sizes(d, fn);
  const std::int64_t b_cols = d.b_transposed ? d.K : d.N, a_cols = d.a_transposed ? d.M : d.K;
  require_arg(lda >= a_cols, fn, "lda", lda,
              at_least(d.a_transposed ? "d.M (A is K x M)" : "d.K (A is M x K)", a_cols).c_str());
  require_arg(ldb >= b_cols, fn, "ldb", ldb,
              at_least(d.b_transposed ? "d.K (B is N x K)" : "d.N (B is K x N)", b_cols).c_str());
  require_arg(ldc >= d.N, fn, "ldc", ldc, at_least("d.N", d.N).c_str());
  const std::int64_t count = d.batch * d.num_heads;
  if (count == 0 || d.M == 0 || d.N == 0) return;
  require_not_null(a, fn, "a");
  require_not_null(b, fn, "b");
  require_not_null(c, fn, "c");
  for (std::int64_t i = 0; i < count; ++i) {
    const std::string idx = "[" + std::to_string(i) + "]";
    require_not_null(c[i], fn, ("c" + idx).c_str());
    if (d.K > 0) {
      require_not_null(a[i], fn, ("a" + idx).c_str());
      require_not_null(b[i], fn, ("b" + idx).c_str());
    }
  }
  std::vector<double> acc;
  for (std::int64_t i = 0; i < count; ++i) {
    if (d.K == 0)
      zero_one(d, c[i], ldc);
    else
      gemm_one(d, a[i], lda, b[i], ldb, c[i], ldc, acc);
  }
}

#define COURSE_INSTANTIATE_GEMM(T)                                                                           \
  template HostTensor<T> matmul(const HostTensor<T>&, const HostTensor<T>&, bool, bool);                     \
  template MatmulGrads<T> matmul_backward(const HostTensor<T>&, const HostTensor<T>&, const HostTensor<T>&); \
  template void batched_gemm_strided(const BatchedGemmDesc&, const T*, const T*, T*);                       \
  template void batched_gemm_ptr_array(const BatchedGemmDesc&, const T* const*, std::int64_t, const T* const*, \
                                       std::int64_t, T* const*, std::int64_t);
COURSE_INSTANTIATE_GEMM(float)
COURSE_INSTANTIATE_GEMM(double)
#undef COURSE_INSTANTIATE_GEMM

}  // namespace course::ref
