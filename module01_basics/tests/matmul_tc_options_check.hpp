#pragma once
/// @file matmul_tc_options_check.hpp
/// @brief The checking helper of matmul_tc's options (operand layouts, bf16 output, the
/// bias / GELU / residual / accumulate epilogue), shared by test_matmul_tc_options.cpp and
/// fuzz_matmul_tc_options.cpp.
///
/// The reference is CPU code from common/: course::ref::matmul on the logical (untransposed)
/// operands, then the epilogue in double in the header's order, with course::ref::gelu_tanh.
/// Inputs are bf16-exact, so the only differences are fp32 accumulation (tc_tolerance) and,
/// for bf16 outputs, one rounding to bf16 (half an ulp: 2^-9 relative).

#include "course/bf16.hpp"
#include "course/compare.hpp"
#include "course/device.hpp"
#include "course/random.hpp"
#include "course/reference.hpp"
#include "course/tensor.hpp"
#include "matmul_tc_check.hpp"
#include "module01/matmul_tc.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace course::m01::checks::tc_options {

using bf16 = __nv_bfloat16;
using checks::tc::MatmulFn;

/// One problem with options. ld* = 0: the smallest valid leading dimension.
struct OptionCase {
  std::int64_t m = 1, n = 1, k = 1;
  bool a_transposed = false, b_transposed = false;
  bool bf16_out = false;
  bool bias = false, gelu = false, pre_gelu = false, residual = false, accumulate = false;
  bool residual_in_place = false;  // the residual is C itself
  std::int64_t pad = 0;            // extra elements on every leading dimension (a multiple of 8)
  bool pad_aligned = false;        // with pad: ldc = N + pad, not N + pad + 1 (see run_option_case)
  /// Large grids: the reference covers the rows checked_rows() picks, not all M (every
  /// element is still scanned for the NaN poison and for writes outside M x N).
  bool sampled_rows = false;

  bool any() const { return a_transposed || b_transposed || bf16_out || bias || gelu || residual || accumulate; }

  std::string str() const {
    std::ostringstream os;
    os << m << "x" << n << "x" << k << (a_transposed ? " A^T" : "") << (b_transposed ? " B^T" : "")
       << (bf16_out ? " bf16-out" : " f32-out") << (bias ? " bias" : "") << (gelu ? " gelu" : "")
       << (pre_gelu ? " pre_gelu" : "") << (residual ? (residual_in_place ? " residual(in place)" : " residual") : "")
       << (accumulate ? " accumulate" : "") << (pad ? " pad " : "");
    if (pad) os << pad << (pad_aligned ? " aligned" : "");
    return os.str();
  }
};

/// What one checked run found: the output and (if written) pre_gelu against the reference,
/// and a scan for non-finite values and for writes past n.
struct OptionCheck {
  CompareResult out, pre;
  bool has_pre = false;
  std::int64_t non_finite = 0, outside = 0;
  std::string what;
  bool ok() const { return out.ok() && (!has_pre || pre.ok()) && non_finite == 0 && outside == 0; }
  std::string report() const {
    std::ostringstream os;
    os << what << ": output " << out.report() << "; pre_gelu " << (has_pre ? pre.report() : "not written") << "; "
       << non_finite
       << " non-finite, " << outside << " written outside M x N";
    return os.str();
  }
};

inline ::testing::AssertionResult Passes(const OptionCheck& r) {
  if (r.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.report();
}

/// Stored rows x cols with row stride ld, random bf16-exact values in [-1, 1), NaN padding.
inline std::vector<float> padded(std::int64_t rows, std::int64_t cols, std::int64_t ld, std::uint64_t seed,
                                 std::vector<float>& logical) {
  logical = round_to_bf16(random_vector(static_cast<std::size_t>(rows * cols), seed, -1.f, 1.f));
  std::vector<float> out(static_cast<std::size_t>(rows * ld), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[r * ld + c] = logical[r * cols + c];
  return out;
}

/// The output rows a case compares with the reference: all M, or with sampled_rows, in every
/// block of 64 rows (half a 128-row tile: one pingpong consumer's share) its first and last
/// row and one more picked by the seed, and row M - 1. A tile computed from the wrong tile's
/// coordinates, a wrong ring phase or a consumer's missing half shows in every row it
/// touches; the reference's cost falls 20-fold (the ManyTilesPerBlock cases: from ~20 G
/// multiply-adds in double on the CPU to ~1 G).
inline std::vector<std::int64_t> checked_rows(const OptionCase& oc, std::uint64_t seed) {
  std::vector<std::int64_t> rows;
  for (std::int64_t i = 0; i < oc.m; ++i) {
    const std::int64_t in_block = i % 64, block = i / 64;
    const std::int64_t picked = static_cast<std::int64_t>(((seed + 1) * 0x9E3779B97F4A7C15ull + block * 0xBF58476D1CE4E5B9ull) >> 58);
    if (!oc.sampled_rows || in_block == 0 || in_block == 63 || in_block == picked || i == oc.m - 1) rows.push_back(i);
  }
  return rows;
}

inline OptionCheck run_option_case(const OptionCase& oc, std::uint64_t seed, const MatmulFn& run) {
  const std::int64_t M = oc.m, N = oc.n, K = oc.k;
  const std::int64_t a_rows = oc.a_transposed ? K : M, a_cols = oc.a_transposed ? M : K;
  const std::int64_t b_rows = oc.b_transposed ? N : K, b_cols = oc.b_transposed ? K : N;
  const std::int64_t lda = tc_leading_dim(a_cols) + oc.pad, ldb = tc_leading_dim(b_cols) + oc.pad;
  // Padded C: ldc = N + pad + 1 (odd for an even N: the scalar stores of the register
  // epilogues), or with pad_aligned N + pad (rows 16 bytes apart when N % 8 == 0: pingpong's
  // TMA-stored epilogues, whose writes past N would land in the poisoned padding).
  const std::int64_t ldc = N + oc.pad + (oc.pad && !oc.pad_aligned ? 1 : 0);
  std::vector<float> a_stored, b_stored, bias_v, res_v, c0_v;
  DeviceBuffer<bf16> da(to_bf16(padded(a_rows, a_cols, lda, seed, a_stored)));
  DeviceBuffer<bf16> db(to_bf16(padded(b_rows, b_cols, ldb, seed + 1, b_stored)));
  // Logical A (M x K) and B (K x N) for the reference.
  HostTensor<float> a({M, K}), b({K, N});
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t kk = 0; kk < K; ++kk)
      a({i, kk}) = oc.a_transposed ? a_stored[kk * M + i] : a_stored[i * K + kk];
  for (std::int64_t kk = 0; kk < K; ++kk)
    for (std::int64_t j = 0; j < N; ++j)
      b({kk, j}) = oc.b_transposed ? b_stored[j * K + kk] : b_stored[kk * N + j];

  TcMatmulArgs args;
  args.a = da.data();
  args.b = db.data();
  args.m = M;
  args.n = N;
  args.k = K;
  args.lda = lda;
  args.ldb = ldb;
  args.ldc = ldc;
  args.a_transposed = oc.a_transposed;
  args.b_transposed = oc.b_transposed;

  DeviceBuffer<float> dbias;
  if (oc.bias) {
    bias_v = random_vector(static_cast<std::size_t>(N), seed + 2, -1.f, 1.f);
    dbias = DeviceBuffer<float>(bias_v);
    args.epilogue.bias = dbias.data();
  }
  args.epilogue.gelu = oc.gelu;
  // The output, pre-filled: a sentinel everywhere (what must stay), then the values C
  // starts from (accumulate, or a residual in place) inside M x N, else NaN poison.
  const float sentinel = -7.f;
  const std::size_t c_elems = static_cast<std::size_t>(M * ldc);
  std::vector<float> c_init(c_elems, sentinel);
  const bool c_is_input = oc.accumulate || (oc.residual && oc.residual_in_place);
  c0_v = round_to_bf16(random_vector(static_cast<std::size_t>(M * N), seed + 3, -1.f, 1.f));
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j)
      c_init[i * ldc + j] = c_is_input ? c0_v[i * N + j] : std::numeric_limits<float>::quiet_NaN();
  DeviceBuffer<float> dc;
  DeviceBuffer<bf16> dc_bf16;
  if (oc.bf16_out) {
    dc_bf16 = DeviceBuffer<bf16>(to_bf16(c_init));
    args.c_bf16 = dc_bf16.data();
  } else {
    dc = DeviceBuffer<float>(c_init);
    args.c = dc.data();
  }
  args.epilogue.accumulate = oc.accumulate;
  DeviceBuffer<float> dres;
  DeviceBuffer<bf16> dres_bf16;
  if (oc.residual) {
    if (oc.residual_in_place) {
      res_v = c0_v;
      args.epilogue.residual = oc.bf16_out ? static_cast<const void*>(args.c_bf16) : static_cast<const void*>(args.c);
      args.epilogue.ldr = ldc;
    } else {
      const std::int64_t ldr = N + 3;
      res_v = round_to_bf16(random_vector(static_cast<std::size_t>(M * N), seed + 4, -1.f, 1.f));
      std::vector<float> r(static_cast<std::size_t>(M * ldr), std::numeric_limits<float>::quiet_NaN());
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < N; ++j) r[i * ldr + j] = res_v[i * N + j];
      if (oc.bf16_out) {
        dres_bf16 = DeviceBuffer<bf16>(to_bf16(r));
        args.epilogue.residual = dres_bf16.data();
      } else {
        dres = DeviceBuffer<float>(r);
        args.epilogue.residual = dres.data();
      }
      args.epilogue.ldr = ldr;
    }
  }
  DeviceBuffer<bf16> dpre;
  if (oc.pre_gelu) {  // the sentinel outside M x N, NaN poison inside, in one upload
    std::vector<float> pre_init(c_elems, sentinel);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = 0; j < N; ++j) pre_init[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
    dpre = DeviceBuffer<bf16>(to_bf16(pre_init));
    args.epilogue.pre_gelu = dpre.data();
  }

  OptionCheck out;
  out.what = oc.str();
  run(args);
  COURSE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got_all = oc.bf16_out ? from_bf16(dc_bf16.download()) : dc.download();
  const std::vector<float> pre_all = oc.pre_gelu ? from_bf16(dpre.download()) : std::vector<float>{};

  // Reference: acc = A B in double accumulation, then the epilogue in double, for the rows
  // checked_rows() picks (all M unless sampled_rows): row r of these tensors is output row
  // rows[r], and a mismatch is reported with the output's own row index below.
  const std::vector<std::int64_t> rows = checked_rows(oc, seed);
  const auto R = static_cast<std::int64_t>(rows.size());
  HostTensor<double> a_checked({R, K});
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t kk = 0; kk < K; ++kk) a_checked({r, kk}) = a({rows[r], kk});
  const HostTensor<double> acc = course::ref::matmul(a_checked, b.cast<double>());
  HostTensor<double> pre({R, N});
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t j = 0; j < N; ++j) pre({r, j}) = acc({r, j}) + (oc.bias ? bias_v[j] : 0.0);
  const HostTensor<double> act = oc.gelu ? course::ref::gelu_tanh(pre) : pre;
  HostTensor<double> want({R, N});
  HostTensor<float> got({R, N}), pre_got({R, N});
  for (std::int64_t r = 0; r < R; ++r) {
    const std::int64_t i = rows[r];
    for (std::int64_t j = 0; j < N; ++j) {
      double v = act({r, j});
      if (oc.residual) v += res_v[i * N + j];
      if (oc.accumulate) v += c0_v[i * N + j];
      want({r, j}) = v;
      got({r, j}) = got_all[i * ldc + j];
      if (oc.pre_gelu) pre_got({r, j}) = pre_all[i * ldc + j];
    }
  }
  for (std::int64_t i = 0; i < M; ++i) {
    for (std::int64_t j = 0; j < ldc; ++j) {
      const float v = got_all[i * ldc + j];
      if (j < N && !std::isfinite(v)) ++out.non_finite;
      if (j >= N && v != sentinel) ++out.outside;
      if (oc.pre_gelu) {
        const float p = pre_all[i * ldc + j];
        if (j < N && !std::isfinite(p)) ++out.non_finite;
        if (j >= N && p != sentinel) ++out.outside;
      }
    }
  }
  // Tolerance: fp32 accumulation over K (tc_tolerance; GELU's slope is at most ~1.13), the
  // bias/residual/accumulate adds (a few fp32 ulps of values up to ~K), and one bf16
  // rounding of the output or of pre_gelu: at most half a bf16 ulp, 2^-8 of the value in
  // the worst case; the bound allows one ulp (2^-7) so that worst case stays well inside.
  Tolerance tol = checks::tc::tc_tolerance(K);
  tol.atol = tol.atol * 1.2 + 1e-6;
  Tolerance tol_out = tol;
  if (oc.bf16_out) tol_out.rtol = std::max(tol_out.rtol, 1.0 / 128);
  const auto output_rows = [&rows](CompareResult c) {  // the reports name the output's row
    for (Mismatch& m : c.first) m.index[0] = rows[static_cast<std::size_t>(m.index[0])];
    return c;
  };
  out.out = output_rows(compare(got, want, tol_out, {"i", "j"}));
  Tolerance tol_pre = tol;
  tol_pre.rtol = std::max(tol_pre.rtol, 1.0 / 128);
  out.has_pre = oc.pre_gelu;
  if (oc.pre_gelu) out.pre = output_rows(compare(pre_got, pre, tol_pre, {"i", "j"}));
  return out;
}

}  // namespace course::m01::checks::tc_options
