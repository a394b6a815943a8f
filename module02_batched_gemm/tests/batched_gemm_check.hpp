#pragma once
/// @file batched_gemm_check.hpp
/// @brief The checking helper of the batched GEMM (layouts, cases, device runs for both APIs,
/// the judge), shared by the module's tests (test_batched_gemm.cpp) and its random-case
/// tests (fuzz_batched_gemm.cpp). Include after course/testing.hpp in a test built with
/// COURSE_IMPL (impl_under_test() calls `impl::`).

#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "course/testing.hpp"
#include "module02/batched_gemm.hpp"
#include "module02/batched_gemm_support.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace course::m02::checks {

using bf16 = __nv_bfloat16;

// ------------------------------------------------------------------ layouts -----

/// Storage orders of one [batch, heads, rows, cols] operand.
enum class Layout {
  contiguous,      ///< [B, H, rows, cols] packed
  bnhd,            ///< [B, rows, H, cols]: row stride H*cols, head stride cols (fused QKV projection)
  padded_aligned,  ///< rows padded to a multiple of 8 (+8), gaps between heads and batches: vector paths
  padded_odd,      ///< rows padded by 3, odd gaps: misaligned rows and heads, scalar fallbacks
};
inline const char* to_string(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::bnhd: return "bnhd";
    case Layout::padded_aligned: return "padded_aligned";
    case Layout::padded_odd: return "padded_odd";
  }
  return "?";
}

struct OperandLayout {
  std::int64_t sb = 0, sh = 0, ld = 0;  ///< batch, head, row strides (elements)
  std::int64_t storage = 0;             ///< elements to allocate (last element + a guard)
};

inline OperandLayout make_layout(Layout l, std::int64_t B, std::int64_t H, std::int64_t rows, std::int64_t cols) {
  OperandLayout o;
  switch (l) {
    case Layout::contiguous:
      o.ld = cols;
      o.sh = rows * cols;
      o.sb = H * o.sh;
      break;
    case Layout::bnhd:
      o.ld = H * cols;
      o.sh = cols;
      o.sb = rows * H * cols;
      break;
    case Layout::padded_aligned:
      o.ld = (cols + 8 + 7) / 8 * 8;
      o.sh = rows * o.ld + 8;
      o.sb = H * o.sh + 16;
      break;
    case Layout::padded_odd:
      o.ld = cols + 3;
      o.sh = rows * o.ld + 5;
      o.sb = H * o.sh + 7;
      break;
  }
  o.storage = (B - 1) * o.sb + (H - 1) * o.sh + (rows - 1) * o.ld + cols + 16;  // 16-element guard
  return o;
}

// ------------------------------------------------------------------ cases -------

/// One batched GEMM problem: shapes, layouts of A, B, C, alpha, and the data ranges.
struct Case {
  std::int64_t B, H, M, N, K;
  bool trans_b;
  Layout la = Layout::contiguous, lb = Layout::contiguous, lc = Layout::contiguous;
  float alpha = 1.0f;
  bool broadcast_b = false;  ///< stride_b_head = 0: all heads share one B (multi-query attention)
  float a_lo = -1.0f, a_hi = 1.0f;
  bool trans_a = false;  ///< A stored K x M (a_transposed): its layout is that of a K x M matrix
  float b_lo = -1.0f, b_hi = 1.0f;
  bool broadcast_a = false;  ///< stride_a_batch = 0: every batch entry reads batch 0's A
  std::int64_t offset = 0;   ///< A, B and C start this many elements into their allocations
  double tol_floor = 1.0;    ///< smallest result scale of the tolerance (see judge)

  std::string str() const;
};

inline std::string describe(const Case& c) {
  std::ostringstream os;
  os << "B=" << c.B << " H=" << c.H << " M=" << c.M << " N=" << c.N << " K=" << c.K
     << (c.trans_a ? " A^T" : " A") << (c.trans_b ? "*B^T" : "*B") << " layouts(a,b,c)=" << to_string(c.la) << "," << to_string(c.lb) << ","
     << to_string(c.lc);
  if (c.alpha != 1.0f) os << " alpha=" << c.alpha;
  if (c.broadcast_b) os << " broadcast_b";
  if (c.broadcast_a) os << " broadcast_a";
  if (c.offset) os << " offset=" << c.offset;
  if (c.a_lo != -1.0f || c.a_hi != 1.0f) os << " A in [" << c.a_lo << ", " << c.a_hi << ")";
  if (c.b_lo != -1.0f || c.b_hi != 1.0f) os << " B in [" << c.b_lo << ", " << c.b_hi << ")";
  return os.str();
}
inline std::string Case::str() const { return describe(*this); }

/// Host data of a case, and the CPU reference for it.
struct Problem {
  Case cs;
  OperandLayout la, lb, lc;
  std::vector<float> a, b;             ///< storage of A and B (bf16-rounded for bf16 steps)
  std::vector<float> ref_strided;      ///< course::ref::batched_gemm_strided; NaN where C is undefined
  std::vector<float> ref_ptr;          ///< course::ref::batched_gemm_ptr_array on the same matrices
  std::vector<char> defined;           ///< 1 where C defines an element
};

template <class T>
StridedBatchedGemmArgs<T> args_on(const Problem& p, const T* a, const T* b, float* c) {
  StridedBatchedGemmArgs<T> s;
  s.a = a;
  s.b = b;
  s.c = c;
  s.M = p.cs.M;
  s.N = p.cs.N;
  s.K = p.cs.K;
  s.batch = p.cs.B;
  s.num_heads = p.cs.H;
  s.stride_a_batch = p.cs.broadcast_a ? 0 : p.la.sb;
  s.stride_a_head = p.la.sh;
  s.stride_a_row = p.la.ld;
  s.stride_b_batch = p.lb.sb;
  s.stride_b_head = p.cs.broadcast_b ? 0 : p.lb.sh;
  s.stride_b_row = p.lb.ld;
  s.stride_c_batch = p.lc.sb;
  s.stride_c_head = p.lc.sh;
  s.stride_c_row = p.lc.ld;
  s.b_transposed = p.cs.trans_b;
  s.a_transposed = p.cs.trans_a;
  s.alpha = p.cs.alpha;
  return s;
}

enum class Api { strided, ptr_array };
inline const char* to_string(Api api) { return api == Api::strided ? "strided" : "ptr_array"; }

/// The layouts of `cs` alone (no data): what args_on() needs.
inline Problem layout_problem(const Case& cs) {
  Problem p;
  p.cs = cs;
  const std::int64_t b_rows = cs.trans_b ? cs.N : cs.K, b_cols = cs.trans_b ? cs.K : cs.N;
  const std::int64_t a_rows = cs.trans_a ? cs.K : cs.M, a_cols = cs.trans_a ? cs.M : cs.K;
  p.la = make_layout(cs.la, cs.broadcast_a ? 1 : cs.B, cs.H, a_rows, a_cols);
  p.lb = make_layout(cs.lb, cs.B, cs.broadcast_b ? 1 : cs.H, b_rows, b_cols);
  p.lc = make_layout(cs.lc, cs.B, cs.H, cs.M, cs.N);
  return p;
}

/// Data for `cs` and the reference of `api` (the other reference stays empty).
inline Problem make_problem(const Case& cs, std::uint64_t seed, bool bf16_inputs, Api api) {
  Problem p = layout_problem(cs);
  p.a = course::random_vector(static_cast<std::size_t>(p.la.storage), seed, cs.a_lo, cs.a_hi);
  p.b = course::random_vector(static_cast<std::size_t>(p.lb.storage), seed ^ 0x9e3779b97f4a7c15ull, cs.b_lo, cs.b_hi);
  if (bf16_inputs) {  // the values a bf16 kernel actually sees
    p.a = course::round_to_bf16(p.a);
    p.b = course::round_to_bf16(p.b);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (api == Api::strided) {
    p.ref_strided.assign(static_cast<std::size_t>(p.lc.storage), nan);
    const auto s = args_on<float>(p, p.a.data(), p.b.data(), p.ref_strided.data());
    course::ref::batched_gemm_strided(course::m02::reference_desc(s), s.a, s.b, s.c);
  } else {
    // The same matrices through the pointer-array reference.
    p.ref_ptr.assign(static_cast<std::size_t>(p.lc.storage), nan);
    const auto s = args_on<float>(p, p.a.data(), p.b.data(), p.ref_ptr.data());
    std::vector<const float*> pa, pb;
    std::vector<float*> pc;
    for (std::int64_t bi = 0; bi < cs.B; ++bi)
      for (std::int64_t h = 0; h < cs.H; ++h) {
        pa.push_back(s.a + bi * s.stride_a_batch + h * s.stride_a_head);
        pb.push_back(s.b + bi * s.stride_b_batch + h * s.stride_b_head);
        pc.push_back(s.c + bi * s.stride_c_batch + h * s.stride_c_head);
      }
    course::ref::batched_gemm_ptr_array(course::m02::reference_desc(s), pa.data(), s.stride_a_row, pb.data(),
                                        s.stride_b_row, pc.data(), s.stride_c_row);
  }

  p.defined.assign(static_cast<std::size_t>(p.lc.storage), 0);
  for (std::int64_t bi = 0; bi < cs.B; ++bi)
    for (std::int64_t h = 0; h < cs.H; ++h)
      for (std::int64_t i = 0; i < cs.M; ++i)
        for (std::int64_t j = 0; j < cs.N; ++j)
          p.defined[static_cast<std::size_t>(bi * p.lc.sb + h * p.lc.sh + i * p.lc.ld + j)] = 1;
  return p;
}

// ------------------------------------------------------------------ running ------

/// The functions under test. The real tests fill all four; a planted bug only the first.
struct Impl {
  std::function<void(BgemmStep, const StridedBatchedGemmArgs<float>&)> strided_f32;
  std::function<void(BgemmStep, const StridedBatchedGemmArgs<bf16>&)> strided_bf16;
  std::function<void(BgemmStep, const PtrArrayBatchedGemmArgs<float>&)> ptr_f32;
  std::function<void(BgemmStep, const PtrArrayBatchedGemmArgs<bf16>&)> ptr_bf16;
};

inline Impl impl_under_test() {
  Impl i;
  i.strided_f32 = static_cast<void (*)(BgemmStep, const StridedBatchedGemmArgs<float>&)>(&impl::batched_gemm_strided);
  i.strided_bf16 = static_cast<void (*)(BgemmStep, const StridedBatchedGemmArgs<bf16>&)>(&impl::batched_gemm_strided);
  i.ptr_f32 = static_cast<void (*)(BgemmStep, const PtrArrayBatchedGemmArgs<float>&)>(&impl::batched_gemm_ptr_array);
  i.ptr_bf16 = static_cast<void (*)(BgemmStep, const PtrArrayBatchedGemmArgs<bf16>&)>(&impl::batched_gemm_ptr_array);
  return i;
}

template <class T>
std::vector<T> as_input(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return course::to_bf16(x);
}

/// Runs `fn` on the device (C poisoned first) and returns C's whole storage.
template <class T, class Fn>
std::vector<float> run_on_device(const Fn& fn, Api api, BgemmStep step, const Problem& p) {
  if (!fn) throw std::logic_error(std::string("no ") + to_string(api) + " function for this input type");
  testing::OffsetBuffer<T> a(as_input<T>(p.a), p.cs.offset), b(as_input<T>(p.b), p.cs.offset);
  float poison;  // all bits set, as DeviceBuffer::poison() writes: judge() looks for these bits
  const std::uint32_t poison_bits = 0xFFFFFFFFu;
  std::memcpy(&poison, &poison_bits, sizeof poison);
  testing::OffsetBuffer<float> c(std::vector<float>(static_cast<std::size_t>(p.lc.storage), poison), p.cs.offset);
  const StridedBatchedGemmArgs<T> s = args_on<T>(p, a.ptr(), b.ptr(), c.ptr());
  if constexpr (std::is_invocable_v<Fn, BgemmStep, const StridedBatchedGemmArgs<T>&>) {
    fn(step, s);
  } else {
    course::m02::BatchedPtrArrays<T> arrays;
    course::m02::build_ptr_arrays(s, arrays);
    fn(step, course::m02::ptr_array_args(s, arrays));
    COURSE_CUDA_CHECK(cudaDeviceSynchronize());  // the arrays are freed at the end of this scope
  }
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  return c.download();
}

inline std::vector<float> run(const Impl& impl, Api api, BgemmStep step, const Problem& p) {
  const bool bf = course::m02::step_input(step) == BgemmInput::bf16;
  if (api == Api::strided)
    return bf ? run_on_device<bf16>(impl.strided_bf16, api, step, p) : run_on_device<float>(impl.strided_f32, api, step, p);
  return bf ? run_on_device<bf16>(impl.ptr_bf16, api, step, p) : run_on_device<float>(impl.ptr_f32, api, step, p);
}

/// Compares C's defined elements with the reference and checks that nothing else changed.
/// Returns "" when the result is right, else a report; `worst_ratio` (if given) receives the
/// comparison's largest error-to-bound ratio.
inline std::string judge(const Problem& p, BgemmStep step, const std::vector<float>& got,
                         const std::vector<float>& ref, double* worst_ratio = nullptr) {
  const course::Shape shape{p.cs.B, p.cs.H, p.cs.M, p.cs.N};
  const course::Shape strides{p.lc.sb, p.lc.sh, p.lc.ld, 1};
  course::HostTensor<float> g(shape, strides), r(shape, strides);
  std::copy_n(got.begin(), g.storage().size(), g.storage().begin());
  std::copy_n(ref.begin(), r.storage().size(), r.storage().begin());
  // Every step accumulates and stores in fp32, and the bf16 steps' inputs are bf16-exact
  // (the reference sees the same rounded values), so one fp32 budget fits all steps: a
  // kernel that rounds C or its partial sums to bf16 fails it.
  (void)step;
  // The result scale: rms of the reference, at least tol_floor (1: a unit-size product; the
  // random-case tests pass the size of one product for tiny or huge data).
  const double scale = std::max(p.cs.tol_floor, course::rms(r));
  const auto result = course::compare(g, r, course::tolerance_for(course::DType::f32, p.cs.K, scale),
                                      {"b", "h", "i", "j"});
  if (worst_ratio != nullptr) *worst_ratio = result.worst_ratio;
  std::ostringstream os;
  if (!result.ok()) os << result.report();
  std::int64_t stray = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &got[i], sizeof bits);
    if (!p.defined[i] && bits != 0xFFFFFFFFu) {
      if (stray++ == 0) os << (result.ok() ? "" : "\n") << "wrote outside C's elements, first at storage offset " << i;
    }
  }
  if (stray) os << " (" << stray << " stray writes)";
  return os.str();
}

/// THE check, shared by the real tests and the planted-bug tests: every case on fresh
/// random data (seed + case index), one API, one step. course::NotImplemented propagates
/// (callers wrap it in COURSE_SKIP_IF_NOT_IMPLEMENTED).
inline ::testing::AssertionResult check_cases(const Impl& impl, Api api, BgemmStep step, const std::vector<Case>& cases,
                                       std::uint64_t seed) {
  std::ostringstream failures;
  int failed = 0;
  const bool bf = course::m02::step_input(step) == BgemmInput::bf16;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Problem p = make_problem(cases[k], seed + 101 * k, bf, api);
    const std::vector<float> got = run(impl, api, step, p);
    const std::string verdict = judge(p, step, got, api == Api::strided ? p.ref_strided : p.ref_ptr);
    if (!verdict.empty()) {
      ++failed;
      failures << "\n  [" << describe(cases[k]) << "]: " << verdict;
    }
  }
  if (failed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << to_string(api) << " / " << course::m02::step_name(step) << ": " << failed
                                       << " of " << cases.size() << " cases failed (seed " << seed << "):"
                                       << failures.str();
}

}  // namespace course::m02::checks
