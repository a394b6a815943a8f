#pragma once
/// @file attention_testing.hpp
/// @brief What the attention tests of modules 3 and 4 share (forward fp32 and bf16,
/// backward): [B, H, N, d] tensors in either layout with padded rows, the shape part of a
/// case and its name, fresh Q, K, V, the untouched-padding check, the bit-for-bit
/// causality probe, and the loop that checks a list of cases and reports every failure.
///
/// A module's Case derives from CaseShape and adds its own fields (O's layout, the
/// gradients', the forward's options, ...).

#include "course/random.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace course::attention_testing {

constexpr AttentionLayout BHND = AttentionLayout::BHND;
constexpr AttentionLayout BNHD = AttentionLayout::BNHD;

/// The fields every attention case has: the shape, the inputs' storage and value ranges,
/// scale and mask.
struct CaseShape {
  std::int64_t B = 1, H = 1, H_kv = 1, N_q = 1, N_k = 1, d = 64;
  AttentionLayout layout = AttentionLayout::BHND;  ///< storage of the inputs (Q, K, V, ...)
  std::int64_t pad = 0;             ///< extra elements after each input row (16 bytes' worth or a multiple)
  bool kv_batch_broadcast = false;  ///< K and V batch stride 0: every batch reads batch 0's K, V
  bool causal = false;
  double input_range = 1.0;        ///< Q and K uniform in [-r, r)
  float scale = 0.f;               ///< 0 selects 1/sqrt(d)
  double v_lo = -1.0, v_hi = 1.0;  ///< V uniform in [v_lo, v_hi)
};

/// The cases of `cases` that `step` supports, by the module's supports(step, case)
/// (found next to its Case).
template <class Step, class Case>
std::vector<Case> supported(Step step, const std::vector<Case>& cases) {
  std::vector<Case> out;
  for (const Case& c : cases)
    if (supports(step, c)) out.push_back(c);
  return out;
}

/// A [B, H, N, d] tensor stored in `layout` with `pad` elements after each row; batch
/// stride 0 when `batch_broadcast`.
inline HostTensor<float> make_tensor(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d,
                                     AttentionLayout layout, std::int64_t pad, bool batch_broadcast = false) {
  const std::int64_t row = (layout == BHND ? d : H * d) + pad;  // seq stride
  Shape strides = layout == BHND ? Shape{H * N * row, N * row, row, 1} : Shape{N * row, d, row, 1};
  if (batch_broadcast) strides[0] = 0;
  return HostTensor<float>({B, H, N, d}, strides);
}

/// The (batch, head, seq) strides of a [B, H, N, d] tensor, as the API's strides struct.
template <class Strides>
Strides strides_of(const HostTensor<float>& t) {
  return {t.stride(0), t.stride(1), t.stride(2)};
}

/// A case with the shape (B, H = H_kv, N_q, N_k, d), Q, K, V (and whatever the module
/// stores like them) in `layout`, causal or not; every other field at its default.
template <class Case>
Case make_shape_case(std::int64_t B, std::int64_t H, std::int64_t N_q, std::int64_t N_k, std::int64_t d,
                     AttentionLayout layout, bool causal) {
  Case c;
  c.B = B;
  c.H = H;
  c.H_kv = H;
  c.N_q = N_q;
  c.N_k = N_k;
  c.d = d;
  c.layout = layout;
  c.causal = causal;
  return c;
}

/// The first part of a case's name: "B2_H8_Hkv2_Nq45_Nk77_d64_BHND".
template <class Case>
std::string shape_name(const Case& c) {
  std::ostringstream os;
  os << "B" << c.B << "_H" << c.H;
  if (c.H_kv != c.H) os << "_Hkv" << c.H_kv;
  os << "_Nq" << c.N_q << "_Nk" << c.N_k << "_d" << c.d << "_" << to_string(c.layout);
  return os.str();
}

/// The last part of a case's name: the input ranges when not the defaults.
template <class Case>
std::string range_name(const Case& c) {
  std::ostringstream os;
  if (c.input_range != 1.0) os << "_x" << c.input_range;
  if (c.scale != 0.f) os << "_scale" << c.scale;
  if (c.v_lo != -1.0 || c.v_hi != 1.0) os << "_v[" << c.v_lo << "," << c.v_hi << ")";
  return os.str();
}

/// Fresh Q ([B, H, N_q, d]), K and V ([B, H_kv, N_k, d]) in the case's layout and padding:
/// Q and K uniform in [-input_range, input_range), V in [v_lo, v_hi), seeds seed, +1, +2.
template <class Case>
void make_qkv(const Case& c, std::uint64_t seed, HostTensor<float>& q, HostTensor<float>& k, HostTensor<float>& v) {
  q = make_tensor(c.B, c.H, c.N_q, c.d, c.layout, c.pad);
  k = make_tensor(c.B, c.H_kv, c.N_k, c.d, c.layout, c.pad, c.kv_batch_broadcast);
  v = make_tensor(c.B, c.H_kv, c.N_k, c.d, c.layout, c.pad, c.kv_batch_broadcast);
  fill_random(q, seed, -c.input_range, c.input_range);
  fill_random(k, seed + 1, -c.input_range, c.input_range);
  fill_random(v, seed + 2, c.v_lo, c.v_hi);
}

/// The shape fields of an argument struct from a case: sizes, scale, causal flag.
template <class Args, class Case>
void set_shape(Args& a, const Case& c) {
  a.batch = c.B;
  a.heads = c.H;
  a.kv_heads = c.H_kv;
  a.seq_q = c.N_q;
  a.seq_k = c.N_k;
  a.head_dim = c.d;
  a.scale = c.scale;
  a.causal = c.causal;
}

/// Largest |x| in a tensor's storage.
inline double max_abs(const HostTensor<float>& t) {
  double m = 0;
  for (float x : t.storage()) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

/// Elements of a [B, H, N, d] tensor's storage that no (b, h, n, c) maps to and that are
/// no longer NaN: an output must leave the poison in its padding.
inline std::int64_t padding_overwritten(const HostTensor<float>& t) {
  std::vector<char> defined(t.storage().size(), 0);
  for (std::int64_t b = 0; b < t.dim(0); ++b)
    for (std::int64_t h = 0; h < t.dim(1); ++h)
      for (std::int64_t n = 0; n < t.dim(2); ++n)
        for (std::int64_t e = 0; e < t.dim(3); ++e) defined[static_cast<std::size_t>(t.offset({b, h, n, e}))] = 1;
  std::int64_t bad = 0;
  for (std::size_t e = 0; e < defined.size(); ++e)
    if (!defined[e] && !std::isnan(t.storage()[e])) ++bad;
  return bad;
}

/// "" when the padding of output `what` (t) still holds the poison, else the report line
/// "\n    <n> padding elements of <what> were overwritten".
inline std::string padding_report(const HostTensor<float>& t, const char* what) {
  const std::int64_t bad = padding_overwritten(t);
  if (bad == 0) return "";
  return "\n    " + std::to_string(bad) + " padding elements of " + what + " were overwritten";
}

/// Every case through `check_one(case, seed)` (which returns "" when right, else a report)
/// on fresh data: case n gets seed + 1009 n. The failure lists every failing case by name.
template <class Case, class CheckOne>
::testing::AssertionResult check_each(const char* step_name, const std::vector<Case>& cases, std::uint64_t seed,
                                      CheckOne check_one) {
  std::ostringstream failures;
  int failed = 0;
  for (std::size_t n = 0; n < cases.size(); ++n) {
    const std::string report = check_one(cases[n], seed + 1009 * n);
    if (!report.empty()) {
      ++failed;
      failures << "\n  " << cases[n].name() << ":" << report;
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << step_name << ": " << failed << " of " << cases.size()
                                       << " cases failed (seed " << seed << "):" << failures.str();
}

/// Causality, bit for bit: set K and V at every key that query rows 0..i0 may not see
/// (j > i0 + N_k - N_q) to `hidden_k(b, j, e)` and 500, and rerun. `run(inputs)` returns O
/// ([B, H, N_q, d]). Returns the rows 0..i0 whose output changed by even one bit (they saw
/// a hidden key); `changed_later` counts the rows after i0 that changed (they should).
template <class Case, class Inputs, class Run, class HiddenK>
std::int64_t rows_that_saw_hidden_keys(const Case& c, const Inputs& in, std::int64_t i0, Run run, HiddenK hidden_k,
                                       std::int64_t* changed_later) {
  const std::int64_t off = c.N_k - c.N_q;
  const HostTensor<float> before = run(in);
  Inputs changed = in;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H_kv; ++h)
      for (std::int64_t j = std::max<std::int64_t>(0, i0 + off + 1); j < c.N_k; ++j)
        for (std::int64_t e = 0; e < c.d; ++e) {
          changed.k({b, h, j, e}) = hidden_k(b, j, e);
          changed.v({b, h, j, e}) = 500.f;
        }
  const HostTensor<float> after = run(changed);
  std::int64_t leaked = 0;
  *changed_later = 0;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t i = 0; i < c.N_q; ++i) {
        const bool same = std::memcmp(&before({b, h, i, 0}), &after({b, h, i, 0}),
                                      sizeof(float) * static_cast<std::size_t>(c.d)) == 0;
        if (i <= i0) leaked += same ? 0 : 1;
        else *changed_later += same ? 0 : 1;
      }
  return leaked;
}

/// The causality test of one case: for each i0 of `i0s` that leaves some key hidden from
/// rows 0..i0, `probe(i0, &changed_later)` (rows_that_saw_hidden_keys for the step under
/// test) must report no row 0..i0 changed and, unless i0 is the last row, some later row
/// changed. An exercise stub (NotImplemented) skips the test.
template <class Case, class Probe>
void expect_causal(const Case& c, const std::vector<std::int64_t>& i0s, Probe probe) {
  const std::int64_t off = c.N_k - c.N_q;
  for (const std::int64_t i0 : i0s) {
    if (std::max<std::int64_t>(0, i0 + off + 1) >= c.N_k) continue;  // nothing hidden to perturb
    SCOPED_TRACE("rows 0.." + std::to_string(i0) + " must be unchanged");
    std::int64_t leaked = 0, changed_later = 0;
    COURSE_SKIP_IF_NOT_IMPLEMENTED(leaked = probe(i0, &changed_later));
    EXPECT_EQ(leaked, 0) << leaked << " rows saw a hidden key";
    if (i0 < c.N_q - 1) {
      EXPECT_GT(changed_later, 0) << "the perturbation changed nothing";
    }
  }
}

}  // namespace course::attention_testing
