#pragma once
/// @file cross_entropy_check.hpp
/// @brief The checking helper of the fused cross-entropy, shared by the module's tests
/// (test_cross_entropy.cpp) and its random-case tests (fuzz_cross_entropy.cpp).

#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/fuzz.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module04/cross_entropy.hpp"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace course::m04::xent_checks {

/// Anything with the op's signature: impl::cross_entropy or a planted bug.
using CrossEntropyFn = std::function<void(CrossEntropyStep, const FusedCrossEntropyArgs&)>;

/// The padding between rows of the logits holds this: a kernel that reads past `vocab`
/// takes it into the max (it is larger than every logit of the ordinary cases) and every
/// loss and gradient of the row moves.
constexpr float kPadSentinel = 1000.f;

/// One test input: rows x vocab logits uniform in [center - spread, center + spread),
/// rounded to bf16 for bf16 (kernel and reference see the same values), random targets.
struct Case {
  std::int64_t rows = 1, vocab = 1;
  DType dtype = DType::f32;
  std::int64_t ldl = 0, lddl = 0;  ///< 0: contiguous (= vocab)
  std::int64_t offset = 0;         ///< elements between each buffer's start and its matrix
  bool in_place = false;           ///< dlogits = logits (then lddl = ldl)
  bool forward_only = false;       ///< dlogits = nullptr
  double spread = 4.0, center = 0.0;
  double ignore_share = 0.0;        ///< probability that a row's target is ignore_index
  std::int64_t bad_rows = 0;        ///< rows (the first ones not ignored) given an out-of-range target
  std::int32_t ignore_index = kDefaultIgnoreIndex;
  float dloss = 1.f;

  std::int64_t stride_l() const { return ldl > 0 ? ldl : vocab; }
  std::int64_t stride_d() const { return in_place ? stride_l() : (lddl > 0 ? lddl : vocab); }
  std::string str() const {
    std::ostringstream os;
    os << rows << "x" << vocab << " " << to_string(dtype) << " ldl=" << stride_l();
    if (!forward_only) os << " lddl=" << stride_d();
    os << " logits in [" << center - spread << ", " << center + spread << ")";
    if (offset) os << " offset=" << offset;
    if (in_place) os << " in place";
    if (forward_only) os << " forward only";
    if (ignore_share > 0) os << " ignored share=" << ignore_share;
    if (bad_rows) os << " bad targets=" << bad_rows;
    if (ignore_index != kDefaultIgnoreIndex) os << " ignore_index=" << ignore_index;
    if (dloss != 1.f) os << " dloss=" << dloss;
    return os.str();
  }
};

struct Outcome {
  CompareResult losses;            ///< per-row losses (NaN expected on bad rows: checked apart)
  CompareResult mean;              ///< loss_mean
  CompareResult dlogits;           ///< includes padding writes; empty when forward only
  std::int64_t padding_writes = 0;
  std::int32_t num_valid = -1, want_num_valid = 0;
  double worst_row_sum_ratio = 0;  ///< max over counted rows of |sum dlogits| / allowed; <= 1 passes
  std::string other;               ///< ignored rows not exactly 0, bad rows not NaN, ...
  bool ok() const {
    return losses.ok() && mean.ok() && (dlogits.checked == 0 || dlogits.ok()) && padding_writes == 0 &&
           num_valid == want_num_valid && worst_row_sum_ratio <= 1.0 && other.empty();
  }
  std::string report() const {
    std::ostringstream os;
    if (!losses.ok()) os << "losses: " << losses.report() << "\n";
    if (!mean.ok()) os << "loss_mean: " << mean.report() << "\n";
    if (dlogits.checked > 0 && !dlogits.ok()) os << "dlogits: " << dlogits.report() << "\n";
    if (padding_writes) os << padding_writes << " writes into the row padding of dlogits\n";
    if (num_valid != want_num_valid) os << "num_valid = " << num_valid << ", want " << want_num_valid << "\n";
    if (!(worst_row_sum_ratio <= 1.0))
      os << "a counted row of dlogits sums to " << worst_row_sum_ratio << " x the allowed |sum| (must be ~0)\n";
    os << other;
    return os.str();
  }
};

/// A rows x cols matrix of T with row stride ld, `offset` elements into its buffer; every
/// slot that is not an element holds `pad`.
template <class T>
std::vector<T> padded_storage(const std::vector<T>& values, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                              std::int64_t offset, T pad) {
  std::vector<T> s(static_cast<std::size_t>(offset + (rows - 1) * ld + cols), pad);
  for (std::int64_t r = 0; r < rows; ++r) std::copy_n(values.begin() + r * cols, cols, s.begin() + offset + r * ld);
  return s;
}

/// Random targets of a case: ignore_index with probability ignore_share, then the first
/// `bad_rows` counted rows get an out-of-range target (vocab, -1 or a large one).
inline std::vector<std::int32_t> make_targets(const Case& c, std::uint64_t seed) {
  fuzz::Rng rng(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(c.rows));
  for (auto& v : t) {
    v = static_cast<std::int32_t>(rng.uniform(0, c.vocab - 1));
    if (c.ignore_share > 0 && rng.chance(c.ignore_share)) v = c.ignore_index;
  }
  std::int64_t bad = 0;
  const std::int32_t bad_values[] = {static_cast<std::int32_t>(c.vocab), -1, 0x7fffffff, -0x7fffffff};
  for (std::int64_t r = 0; r < c.rows && bad < c.bad_rows; ++r) {
    const std::int32_t b = bad_values[bad % 4];
    if (t[r] == c.ignore_index || b == c.ignore_index) continue;
    t[r] = b;
    ++bad;
  }
  return t;
}

/// The checking helper every test (and the planted-bug test) uses: builds the input,
/// poisons every output, runs `fn`, and checks against course::ref::cross_entropy (double,
/// on the same -- for bf16, bf16-rounded -- logits):
///  - num_valid exactly; losses and loss_mean with the fp32 tolerance of a V-term sum (the
///    loss is fp32 math in both dtypes), scaled by the size of the logits (lse - x_t loses
///    |max| * 2^-24 to rounding);
///  - dlogits with the tolerance of its dtype; ignored rows exactly 0, bad-target rows NaN
///    (their loss too, and then loss_mean), the row padding never written;
///  - every counted row of dlogits sums to ~0.
/// Throws course::NotImplemented through for exercise stubs.
inline Outcome run_case(const CrossEntropyFn& fn, CrossEntropyStep step, const Case& c, std::uint64_t seed,
                        std::vector<float>* losses_out = nullptr, float* mean_out = nullptr) {
  const std::int64_t rows = c.rows, V = c.vocab, n = rows * V;
  const std::int64_t ldl = c.stride_l(), lddl = c.stride_d();
  const bool bf = c.dtype == DType::bf16;

  std::vector<float> x = random_vector(static_cast<std::size_t>(n), seed, static_cast<float>(c.center - c.spread),
                                       static_cast<float>(c.center + c.spread));
  if (bf) x = round_to_bf16(x);
  const std::vector<std::int32_t> targets = make_targets(c, seed ^ 0x7a29e7u);

  // Device buffers: logits (+ sentinel padding), dlogits poisoned (NaN, padding included).
  const std::size_t es = bf ? 2 : 4;
  const std::vector<float> x_storage = padded_storage(x, rows, V, ldl, c.offset, kPadSentinel);
  DeviceBuffer<float> d_x32;
  DeviceBuffer<__nv_bfloat16> d_x16, d_d16;
  DeviceBuffer<float> d_d32;
  const std::size_t d_elems = static_cast<std::size_t>(c.offset + (rows - 1) * lddl + V);
  if (bf) {
    d_x16 = DeviceBuffer<__nv_bfloat16>(to_bf16(x_storage));
    if (!c.in_place && !c.forward_only) {
      d_d16 = DeviceBuffer<__nv_bfloat16>(d_elems);
      d_d16.poison();
    }
  } else {
    d_x32 = DeviceBuffer<float>(x_storage);
    if (!c.in_place && !c.forward_only) {
      d_d32 = DeviceBuffer<float>(d_elems);
      d_d32.poison();
    }
  }
  DeviceBuffer<std::int32_t> d_t(targets), d_n(1);
  DeviceBuffer<float> d_losses(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1))), d_mean(1);
  d_losses.poison();
  d_mean.poison();
  d_n.poison();

  FusedCrossEntropyArgs a;
  a.dtype = c.dtype;
  char* x_base = bf ? reinterpret_cast<char*>(d_x16.data()) : reinterpret_cast<char*>(d_x32.data());
  a.logits = x_base + c.offset * es;
  a.targets = d_t.data();
  a.losses = d_losses.data();
  a.loss_mean = d_mean.data();
  a.num_valid = d_n.data();
  if (!c.forward_only) {
    char* d_base = c.in_place ? x_base
                   : bf       ? reinterpret_cast<char*>(d_d16.data())
                              : reinterpret_cast<char*>(d_d32.data());
    a.dlogits = d_base + c.offset * es;
  }
  a.rows = rows;
  a.vocab = V;
  a.ldl = ldl;
  a.lddl = lddl;
  a.ignore_index = c.ignore_index;
  a.dloss = c.dloss;
  fn(step, a);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());

  Outcome out;
  const std::vector<float> losses = d_losses.download();
  const float mean = d_mean.download()[0];
  out.num_valid = d_n.download()[0];
  if (losses_out != nullptr) *losses_out = losses;
  if (mean_out != nullptr) *mean_out = mean;

  // Reference: bad rows are given ignore_index there (the reference rejects them), then
  // checked apart; their count joins N, so counted rows' gradients scale by ref N / N.
  std::vector<std::int32_t> ref_targets = targets;
  std::vector<bool> bad(static_cast<std::size_t>(rows), false);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t t = targets[r];
    if (t != c.ignore_index && (t < 0 || t >= V)) {
      bad[r] = true;
      ref_targets[r] = c.ignore_index;
    }
  }
  HostTensor<double> xt({rows, V});
  std::copy(x.begin(), x.end(), xt.storage().begin());
  const auto ref = course::ref::cross_entropy(xt, ref_targets, c.ignore_index);
  const std::int64_t n_bad = std::count(bad.begin(), bad.end(), true);
  out.want_num_valid = static_cast<std::int32_t>(ref.counted + n_bad);

  // Losses: fp32 arithmetic on values up to max|x|: lse = m + log(s) rounds at |m| * 2^-24.
  double max_abs = 0.0;
  for (float v : x) max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
  const Tolerance loss_tol = tolerance_for(DType::f32, V, std::max(1.0, max_abs));
  std::vector<float> got_ok;
  std::vector<double> want_ok;
  std::ostringstream other;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (bad[r]) {
      if (!std::isnan(losses[r])) other << "row " << r << " has an out-of-range target but loss " << losses[r] << "\n";
      continue;
    }
    if (targets[r] == c.ignore_index && losses[r] != 0.f) {
      other << "ignored row " << r << " has loss " << losses[r] << " (must be exactly 0)\n";
      continue;
    }
    got_ok.push_back(losses[r]);
    want_ok.push_back(ref.row_loss[r]);
  }
  out.losses = compare(got_ok, want_ok, loss_tol);
  if (got_ok.empty()) out.losses.checked = 1;  // every row bad: nothing to compare, not a failure
  if (n_bad > 0) {
    out.mean.checked = 1;
    if (!std::isnan(mean)) other << "loss_mean = " << mean << " with out-of-range targets (must be NaN)\n";
  } else {
    out.mean = compare_scalar(mean, ref.loss, loss_tol);
  }

  // dlogits
  if (!c.forward_only) {
    std::vector<float> d_storage;
    if (bf) d_storage = from_bf16(c.in_place ? d_x16.download() : d_d16.download());
    else d_storage = c.in_place ? d_x32.download() : d_d32.download();
    d_storage.erase(d_storage.begin(), d_storage.begin() + c.offset);
    HostTensor<float> got({rows, V}, {lddl, 1});
    got.storage() = std::move(d_storage);
    const double n_valid = static_cast<double>(out.want_num_valid);
    const double rescale = n_valid > 0 ? static_cast<double>(c.dloss) * static_cast<double>(ref.counted) / n_valid
                                       : 0.0;
    HostTensor<double> want({rows, V});
    for (std::int64_t i = 0; i < n; ++i) want.storage()[i] = static_cast<double>(ref.dlogits.storage()[i]) * rescale;
    // The rows of NaN: compare them with NaN by hand, then take them out of the comparison.
    for (std::int64_t r = 0; r < rows; ++r) {
      if (!bad[r]) continue;
      std::int64_t not_nan = 0;
      for (std::int64_t j = 0; j < V; ++j) {
        float& g = got.storage()[r * lddl + j];
        not_nan += std::isnan(g) ? 0 : 1;
        g = 0.f;  // want is 0 there too
      }
      if (not_nan) other << "row " << r << " has an out-of-range target but " << not_nan << " non-NaN dlogits\n";
    }
    // Ignored rows: exactly 0.
    for (std::int64_t r = 0; r < rows; ++r) {
      if (targets[r] != c.ignore_index) continue;
      std::int64_t nonzero = 0;
      for (std::int64_t j = 0; j < V; ++j) nonzero += got.storage()[r * lddl + j] != 0.f ? 1 : 0;
      if (nonzero) other << "ignored row " << r << " has " << nonzero << " non-zero dlogits\n";
    }
    const double g_scale = n_valid > 0 ? std::fabs(static_cast<double>(c.dloss)) / n_valid : 1.0;
    const Tolerance d_tol = tolerance_for(c.dtype, V, g_scale);
    out.dlogits = compare(got, want, d_tol, {"r", "j"});
    std::uint32_t pad_bits;
    if (c.in_place) {
      pad_bits = testing::bits_of(bf ? from_bf16(to_bf16({kPadSentinel}))[0] : kPadSentinel);
    } else {
      pad_bits = bf ? 0xFFFF0000u : 0xFFFFFFFFu;  // the poison, widened
    }
    out.padding_writes = testing::record_padding_writes(got, pad_bits, out.dlogits);

    // Counted rows sum to ~0: sum_j p_j = 1 up to the rounding of each term (and, for bf16,
    // of each stored value): 3 rtol x sum_j |g_j|, plus the absolute rounding of the
    // target's p - 1 (half an ulp of 1 in the dtype, times the gradient scale), which
    // dominates when p_target -> 1 and every |g_j| is tiny.
    for (std::int64_t r = 0; r < rows; ++r) {
      if (bad[r] || targets[r] == c.ignore_index) continue;
      double sum = 0.0, terms = 0.0;
      for (std::int64_t j = 0; j < V; ++j) {
        sum += got.storage()[r * lddl + j];
        terms += std::fabs(want.storage()[r * V + j]);
      }
      const double unit = bf ? 1.0 / 256 : std::ldexp(1.0, -24);
      const double allowed = 3.0 * (d_tol.rtol * terms + unit * g_scale) + 1e-30;
      const double ratio = std::fabs(sum) / allowed;
      if (!(ratio <= out.worst_row_sum_ratio)) out.worst_row_sum_ratio = std::isnan(ratio) ? INFINITY : ratio;
    }
  }
  out.other = other.str();
  return out;
}

inline ::testing::AssertionResult Accepted(const Outcome& o) {
  if (o.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << o.report();
}

}  // namespace course::m04::xent_checks
