/// @file reference_basics.cpp
/// @brief CPU references of module 1's reductions and softmax (forward and backward).
///
/// Everything accumulates in double. Tensors are read through their strides, so a
/// non-contiguous input needs no copy; results are contiguous.

#include "course/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace course::ref {

namespace {

void require_length(std::int64_t n, const char* fn) {
  require_arg(n >= 0, fn, "n", n, "must be >= 0");
}

/// Checks that `x` is 2-D and `dim` is 0 or 1.
template <class T>
void require_softmax_args(const HostTensor<T>& x, int dim, const char* fn, const char* name) {
  require_arg(x.rank() == 2, fn, name, shape_string(x.shape()), "must be a 2-D tensor");
  require_arg(dim == 0 || dim == 1, fn, "dim", dim, "must be 0 or 1");
}

/// The slices of a 2-D tensor along `dim`: slice `o` (of `count`) has `length`
/// elements; element t of slice o lives at o*outer_stride + t*inner_stride.
struct Slices {
  std::int64_t count, length, outer_stride, inner_stride;
};

template <class T>
Slices slices_of(const HostTensor<T>& x, int dim) {
  const int other = 1 - dim;
  return {x.dim(other), x.dim(dim), x.stride(other), x.stride(dim)};
}

}  // namespace

double l2_norm(const float* x, std::int64_t n) {
  require_length(n, "l2_norm");
  if (n > 0) require_not_null(x, "l2_norm", "x");
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return std::sqrt(sum);
}

double dot(const float* x, const float* y, std::int64_t n) {
  require_length(n, "dot");
  if (n > 0) {
    require_not_null(x, "dot", "x");
    require_not_null(y, "dot", "y");
  }
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(y[i]);
  return sum;
}

template <class T>
HostTensor<T> softmax(const HostTensor<T>& x, int dim) {
  require_softmax_args(x, dim, "softmax", "x.shape()");
  HostTensor<T> y(x.shape());
  const Slices in = slices_of(x, dim);
  const Slices out = slices_of(y, dim);
  std::vector<double> e(static_cast<std::size_t>(in.length));
  for (std::int64_t o = 0; o < in.count; ++o) {
    const T* src = x.data() + o * in.outer_stride;
    T* dst = y.data() + o * out.outer_stride;
    // Subtracting the slice maximum keeps every exponent <= 0: no overflow, and
    // the largest term is exactly 1 so the sum is >= 1 (no division by ~0).
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t t = 0; t < in.length; ++t) m = std::max(m, static_cast<double>(src[t * in.inner_stride]));
    double sum = 0.0;
    for (std::int64_t t = 0; t < in.length; ++t) {
      e[t] = std::exp(static_cast<double>(src[t * in.inner_stride]) - m);
      sum += e[t];
    }
    for (std::int64_t t = 0; t < in.length; ++t) dst[t * out.inner_stride] = static_cast<T>(e[t] / sum);
  }
  return y;
}

template <class T>
HostTensor<T> softmax_backward(const HostTensor<T>& y, const HostTensor<T>& dy, int dim) {
  require_softmax_args(y, dim, "softmax_backward", "y.shape()");
  require_arg(dy.shape() == y.shape(), "softmax_backward", "dy.shape()", shape_string(dy.shape()),
              ("must equal y.shape() " + shape_string(y.shape())).c_str());
  HostTensor<T> dx(y.shape());
  const Slices sy = slices_of(y, dim);
  const Slices sd = slices_of(dy, dim);
  const Slices sx = slices_of(dx, dim);
  for (std::int64_t o = 0; o < sy.count; ++o) {
    const T* yp = y.data() + o * sy.outer_stride;
    const T* dyp = dy.data() + o * sd.outer_stride;
    T* dxp = dx.data() + o * sx.outer_stride;
    // dx_t = y_t * (dy_t - <dy, y>): the Jacobian of softmax is diag(y) - y y^T.
    double inner = 0.0;
    for (std::int64_t t = 0; t < sy.length; ++t)
      inner += static_cast<double>(dyp[t * sd.inner_stride]) * static_cast<double>(yp[t * sy.inner_stride]);
    for (std::int64_t t = 0; t < sy.length; ++t) {
      const double yt = static_cast<double>(yp[t * sy.inner_stride]);
      dxp[t * sx.inner_stride] = static_cast<T>(yt * (static_cast<double>(dyp[t * sd.inner_stride]) - inner));
    }
  }
  return dx;
}

template HostTensor<float> softmax(const HostTensor<float>&, int);
template HostTensor<double> softmax(const HostTensor<double>&, int);
template HostTensor<float> softmax_backward(const HostTensor<float>&, const HostTensor<float>&, int);
template HostTensor<double> softmax_backward(const HostTensor<double>&, const HostTensor<double>&, int);

}  // namespace course::ref
