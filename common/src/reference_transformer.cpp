/// @file reference_transformer.cpp
/// @brief CPU references of the transformer-block ops of module 4: LayerNorm forward and
/// backward, GELU (tanh approximation), softmax cross-entropy, and the AdamW step.
///
/// Everything is computed in double and stored as T once. Inputs are read through their
/// strides (t({r, c})), so a transposed view needs no copy; results are contiguous.

#include "course/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace course::ref {

namespace {

/// x must be [rows, C] with C >= 1 (a mean over no columns is undefined).
template <class T>
void require_rows(const HostTensor<T>& x, const char* fn, const char* name) {
  require_arg(x.rank() == 2, fn, name, shape_string(x.shape()), "must be a 2-D tensor [rows, C]");
  require_arg(x.dim(1) >= 1, fn, name, shape_string(x.shape()), "must have at least one column");
}

/// t must be the 1-D tensor [n].
template <class T>
void require_vector(const HostTensor<T>& t, std::int64_t n, const char* fn, const char* name, const char* what) {
  require_arg(t.shape() == Shape{n}, fn, name, shape_string(t.shape()),
              ("must be [" + std::to_string(n) + "] (" + what + ")").c_str());
}

// sqrt(2/pi) and the cubic coefficient of GPT-2's GELU approximation.
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

}  // namespace

// ---------------------------------------------------------------- LayerNorm -----

template <class T>
LayerNormResult<T> layer_norm_forward(const HostTensor<T>& x, const HostTensor<T>& gamma,
                                      const HostTensor<T>& beta, double eps) {
  const char* fn = "layer_norm_forward";
  require_rows(x, fn, "x.shape()");
  const std::int64_t rows = x.dim(0), C = x.dim(1);
  require_vector(gamma, C, fn, "gamma.shape()", "one scale per column of x");
  require_vector(beta, C, fn, "beta.shape()", "one shift per column of x");
  require_arg(std::isfinite(eps) && eps >= 0.0, fn, "eps", eps, "must be finite and >= 0");

  LayerNormResult<T> r{HostTensor<T>({rows, C}), HostTensor<T>({rows}), HostTensor<T>({rows})};
  for (std::int64_t i = 0; i < rows; ++i) {
    // Two passes: the mean first, then the mean squared deviation from it. The one-pass
    // E[x^2] - E[x]^2 cancels catastrophically when |mean| >> std; kernels that use it
    // must be tested against this.
    double mean = 0.0;
    for (std::int64_t c = 0; c < C; ++c) mean += static_cast<double>(x({i, c}));
    mean /= static_cast<double>(C);
    double var = 0.0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(x({i, c})) - mean;
      var += d * d;
    }
    var /= static_cast<double>(C);  // biased, as PyTorch normalizes
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (std::int64_t c = 0; c < C; ++c) {
      const double xhat = (static_cast<double>(x({i, c})) - mean) * rstd;
      r.y({i, c}) = static_cast<T>(static_cast<double>(gamma({c})) * xhat + static_cast<double>(beta({c})));
    }
    r.mean({i}) = static_cast<T>(mean);
    r.rstd({i}) = static_cast<T>(rstd);
  }
  return r;
}

template <class T>
LayerNormGrads<T> layer_norm_backward(const HostTensor<T>& x, const HostTensor<T>& gamma, const HostTensor<T>& mean,
                                      const HostTensor<T>& rstd, const HostTensor<T>& dy) {
  const char* fn = "layer_norm_backward";
  require_rows(x, fn, "x.shape()");
  const std::int64_t rows = x.dim(0), C = x.dim(1);
  require_vector(gamma, C, fn, "gamma.shape()", "one scale per column of x");
  require_vector(mean, rows, fn, "mean.shape()", "the forward's mean, one per row of x");
  require_vector(rstd, rows, fn, "rstd.shape()", "the forward's rstd, one per row of x");
  require_arg(dy.shape() == x.shape(), fn, "dy.shape()", shape_string(dy.shape()),
              ("must equal x.shape() " + shape_string(x.shape())).c_str());

  LayerNormGrads<T> g{HostTensor<T>({rows, C}), HostTensor<T>({C}), HostTensor<T>({C})};
  std::vector<double> dgamma(static_cast<std::size_t>(C), 0.0), dbeta(static_cast<std::size_t>(C), 0.0);
  std::vector<double> xhat(static_cast<std::size_t>(C)), gy(static_cast<std::size_t>(C));
  for (std::int64_t i = 0; i < rows; ++i) {
    const double mu = static_cast<double>(mean({i})), rs = static_cast<double>(rstd({i}));
    // y = gamma xhat + beta, so dL/dxhat = g = dy * gamma. xhat depends on every x of its row
    // through mean and rstd; differentiating those gives two row means to subtract:
    //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    double mean_g = 0.0, mean_gx = 0.0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(dy({i, c}));
      xhat[c] = (static_cast<double>(x({i, c})) - mu) * rs;
      gy[c] = d * static_cast<double>(gamma({c}));
      mean_g += gy[c];
      mean_gx += gy[c] * xhat[c];
      dgamma[c] += d * xhat[c];  // the column sums over rows: what kernels reduce across blocks
      dbeta[c] += d;
    }
    mean_g /= static_cast<double>(C);
    mean_gx /= static_cast<double>(C);
    for (std::int64_t c = 0; c < C; ++c) g.dx({i, c}) = static_cast<T>(rs * (gy[c] - mean_g - xhat[c] * mean_gx));
  }
  for (std::int64_t c = 0; c < C; ++c) {
    g.dgamma({c}) = static_cast<T>(dgamma[c]);
    g.dbeta({c}) = static_cast<T>(dbeta[c]);
  }
  return g;
}

// --------------------------------------------------------------------- GELU -----

template <class T>
HostTensor<T> gelu_tanh(const HostTensor<T>& x) {
  HostTensor<T> y(x.shape());
  x.for_each_index([&](const std::vector<std::int64_t>& i) {
    const double v = static_cast<double>(x.at(i));
    const double u = kGeluScale * (v + kGeluCubic * v * v * v);
    y.at(i) = static_cast<T>(0.5 * v * (1.0 + std::tanh(u)));
  });
  return y;
}

template <class T>
HostTensor<T> gelu_tanh_backward(const HostTensor<T>& x, const HostTensor<T>& dy) {
  require_arg(dy.shape() == x.shape(), "gelu_tanh_backward", "dy.shape()", shape_string(dy.shape()),
              ("must equal x.shape() " + shape_string(x.shape())).c_str());
  HostTensor<T> dx(x.shape());
  x.for_each_index([&](const std::vector<std::int64_t>& i) {
    const double v = static_cast<double>(x.at(i));
    const double t = std::tanh(kGeluScale * (v + kGeluCubic * v * v * v));
    // Product rule on x/2 * (1 + t), with dt/dx = (1 - t^2) du/dx.
    const double du = kGeluScale * (1.0 + 3.0 * kGeluCubic * v * v);
    const double slope = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
    dx.at(i) = static_cast<T>(static_cast<double>(dy.at(i)) * slope);
  });
  return dx;
}

// ------------------------------------------------------------ cross-entropy -----

template <class T>
CrossEntropyResult<T> cross_entropy(const HostTensor<T>& logits, const std::vector<std::int32_t>& targets,
                                    std::int64_t ignore_index) {
  const char* fn = "cross_entropy";
  require_arg(logits.rank() == 2, fn, "logits.shape()", shape_string(logits.shape()),
              "must be a 2-D tensor [rows, V]");
  const std::int64_t rows = logits.dim(0), V = logits.dim(1);
  require_arg(V >= 1, fn, "logits.shape()", shape_string(logits.shape()), "must have at least one class");
  require_arg(static_cast<std::int64_t>(targets.size()) == rows, fn, "targets.size()", targets.size(),
              ("must equal the rows of logits, " + std::to_string(rows)).c_str());
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = targets[r];
    const std::string name = "targets[" + std::to_string(r) + "]";
    require_arg(t == ignore_index || (t >= 0 && t < V), fn, name.c_str(), t,
                ("must be in [0, " + std::to_string(V) + ") or equal ignore_index " + std::to_string(ignore_index))
                    .c_str());
  }

  CrossEntropyResult<T> res;
  res.row_loss.assign(static_cast<std::size_t>(rows), 0.0);
  res.dlogits = HostTensor<T>({rows, V});  // zero-initialized: ignored rows keep dlogits = 0
  for (std::int64_t r = 0; r < rows; ++r) res.counted += targets[r] != ignore_index;
  if (res.counted == 0) return res;  // 0/0: no loss, no gradient

  const double inv_count = 1.0 / static_cast<double>(res.counted);
  std::vector<double> e(static_cast<std::size_t>(V));
  double total = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = targets[r];
    if (t == ignore_index) continue;
    // logsumexp with the row max subtracted: every exponent <= 0 and the sum >= 1.
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < V; ++j) m = std::max(m, static_cast<double>(logits({r, j})));
    double sum = 0.0;
    for (std::int64_t j = 0; j < V; ++j) {
      e[j] = std::exp(static_cast<double>(logits({r, j})) - m);
      sum += e[j];
    }
    const double lse = m + std::log(sum);
    res.row_loss[r] = lse - static_cast<double>(logits({r, t}));
    total += res.row_loss[r];
    // d/dz_j of (lse - z_t) is p_j - [j == t]; the mean divides by the count.
    for (std::int64_t j = 0; j < V; ++j)
      res.dlogits({r, j}) = static_cast<T>((e[j] / sum - (j == t ? 1.0 : 0.0)) * inv_count);
  }
  res.loss = total * inv_count;
  return res;
}

// -------------------------------------------------------------------- AdamW -----

template <class T>
void adamw_step(std::vector<T>& params, const std::vector<T>& grads, std::vector<T>& m, std::vector<T>& v,
                std::int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay) {
  const char* fn = "adamw_step";
  const std::string n = "must equal params.size() = " + std::to_string(params.size());
  require_arg(grads.size() == params.size(), fn, "grads.size()", grads.size(), n.c_str());
  require_arg(m.size() == params.size(), fn, "m.size()", m.size(), n.c_str());
  require_arg(v.size() == params.size(), fn, "v.size()", v.size(), n.c_str());
  require_arg(step >= 1, fn, "step", step, "must be >= 1 (the bias correction divides by 1 - beta^step)");
  require_arg(std::isfinite(lr) && lr >= 0.0, fn, "lr", lr, "must be finite and >= 0");
  require_arg(beta1 >= 0.0 && beta1 < 1.0, fn, "beta1", beta1, "must be in [0, 1)");
  require_arg(beta2 >= 0.0 && beta2 < 1.0, fn, "beta2", beta2, "must be in [0, 1)");
  require_arg(std::isfinite(eps) && eps > 0.0, fn, "eps", eps, "must be finite and > 0");
  require_arg(std::isfinite(weight_decay) && weight_decay >= 0.0, fn, "weight_decay", weight_decay,
              "must be finite and >= 0");

  // m and v start at 0, so early averages are biased toward 0 by the factors below.
  const double t = static_cast<double>(step);
  const double bias1 = 1.0 - std::pow(beta1, t), bias2 = 1.0 - std::pow(beta2, t);
  const double decay = 1.0 - lr * weight_decay;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double g = static_cast<double>(grads[i]);
    const double mi = beta1 * static_cast<double>(m[i]) + (1.0 - beta1) * g;
    const double vi = beta2 * static_cast<double>(v[i]) + (1.0 - beta2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    const double p = static_cast<double>(params[i]) * decay;  // decay first, of the old value
    params[i] = static_cast<T>(p - lr * (mi / bias1) / (std::sqrt(vi / bias2) + eps));
  }
}

#define COURSE_INSTANTIATE_TRANSFORMER(T)                                                                        \
  template LayerNormResult<T> layer_norm_forward(const HostTensor<T>&, const HostTensor<T>&,                     \
                                                 const HostTensor<T>&, double);                                  \
  template LayerNormGrads<T> layer_norm_backward(const HostTensor<T>&, const HostTensor<T>&,                     \
                                                 const HostTensor<T>&, const HostTensor<T>&,                     \
                                                 const HostTensor<T>&);                                          \
  template HostTensor<T> gelu_tanh(const HostTensor<T>&);                                                        \
  template HostTensor<T> gelu_tanh_backward(const HostTensor<T>&, const HostTensor<T>&);                         \
  template CrossEntropyResult<T> cross_entropy(const HostTensor<T>&, const std::vector<std::int32_t>&,           \
                                               std::int64_t);                                                    \
  template void adamw_step(std::vector<T>&, const std::vector<T>&, std::vector<T>&, std::vector<T>&,             \
                           std::int64_t, double, double, double, double, double);
COURSE_INSTANTIATE_TRANSFORMER(float)
COURSE_INSTANTIATE_TRANSFORMER(double)
#undef COURSE_INSTANTIATE_TRANSFORMER

}  // namespace course::ref
