// The tensor-core matmul's options at work: the products of a GPT block's linear layers at the
// course GPT's sizes (16384 tokens, d_model 384, MLP 1536), every step that takes the
// options (mma_sync, tma_warp_specialized, persistent, cluster_multicast, pingpong), beside cuBLAS.
//
// Rows "linear_bf16/<impl>/<step>/<product>" where <product> names the layer, its
// options and M x N x K:
//   fwd_qkv      Y = X W^T + b            16384 x 1152 x 384    b_transposed, bias, bf16 out
//   fwd_fc_gelu  H = gelu(X W^T + b)      16384 x 1536 x 384    b_transposed, bias, GELU, pre_gelu, bf16
//                                                               (training: the backward needs X W^T + b)
//   fwd_fc_gelu_only  the same without pre_gelu (inference; what cuBLASLt's GELU epilogue writes)
//   fwd_proj_res X += H W^T + b           16384 x 384 x 1536    b_transposed, bias, residual in place, bf16
//   bwd_dx       dX = dY W                16384 x 384 x 1152    plain layouts, bf16 out
//   bwd_dw       dW += dY^T X             1152 x 384 x 16384    a_transposed, fp32 accumulate
// (the QKV layer's backward), and the MLP layers' backward products:
//   bwd_dx_fc    16384 x 384 x 1536,  bwd_dw_fc    1536 x 384 x 16384
//   bwd_dx_proj  16384 x 1536 x 384,  bwd_dw_proj  384 x 1536 x 16384
// Library rows "linear_bf16/library/cublas_gemmex/<product>": cublasGemmEx with the same
// operand layouts and output dtype (row-major through the operand swap), beta = 1 where the
// course adds the residual in place or accumulates -- but WITHOUT the bias and GELU, which
// cuBLAS's plain GEMM cannot fuse. So the library row is a lower bound on what cuBLAS needs
// for the product plus its epilogue (cuBLASLt's epilogues, which F.linear uses, are
// compared through the PyTorch bridge), and our/library ratios are conservative.
#include "course/bench.hpp"
#include "course/bf16.hpp"
#include "course/device.hpp"
#include "course/error.hpp"
#include "course/random.hpp"
#include "course/timer.hpp"
#include "module01/matmul_tc.hpp"

#include <cublas_v2.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace {

namespace bench = course::bench;
using course::DeviceBuffer;
using course::m01::TcMatmulArgs;
using course::m01::TcMatmulStep;
using bf16 = __nv_bfloat16;
using MatmulTcFn = void (*)(TcMatmulStep, const TcMatmulArgs&);

struct Product {
  const char* name;
  std::int64_t m, n, k;
  bool a_transposed, b_transposed, bf16_out, bias, gelu, pre_gelu, residual_in_place, accumulate;
  std::string row() const {
    return std::string(name) + "_" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

constexpr std::int64_t kTokens = 16384, kModel = 384, kQkv = 3 * kModel, kHidden = 4 * kModel;
const Product kProducts[] = {
    {"fwd_qkv", kTokens, kQkv, kModel, false, true, true, true, false, false, false, false},
    {"fwd_fc_gelu", kTokens, kHidden, kModel, false, true, true, true, true, true, false, false},
    {"fwd_fc_gelu_only", kTokens, kHidden, kModel, false, true, true, true, true, false, false, false},
    {"fwd_proj_res", kTokens, kModel, kHidden, false, true, true, true, false, false, true, false},
    {"bwd_dx", kTokens, kModel, kQkv, false, false, true, false, false, false, false, false},
    {"bwd_dw", kQkv, kModel, kTokens, true, false, false, false, false, false, false, true},
    {"bwd_dx_fc", kTokens, kModel, kHidden, false, false, true, false, false, false, false, false},
    {"bwd_dw_fc", kHidden, kModel, kTokens, true, false, false, false, false, false, false, true},
    {"bwd_dx_proj", kTokens, kHidden, kModel, false, false, true, false, false, false, false, false},
    {"bwd_dw_proj", kModel, kHidden, kTokens, true, false, false, false, false, false, false, true},
};

/// Operands of one product, allocated once per process: random bf16 A and B (never zeros),
/// the output (bf16 or fp32, holding random values for the in-place residual and the
/// accumulation), bias and pre_gelu.
struct Operands {
  DeviceBuffer<bf16> a, b, c_bf16, pre;
  DeviceBuffer<float> c, bias;
  explicit Operands(const Product& p) {
    const auto seed = course::seed_for("bench_linear_tc/" + p.row());
    a = DeviceBuffer<bf16>(course::to_bf16(course::random_vector(static_cast<std::size_t>(p.m * p.k), seed)));
    b = DeviceBuffer<bf16>(course::to_bf16(course::random_vector(static_cast<std::size_t>(p.k * p.n), seed + 1)));
    const auto out = course::random_vector(static_cast<std::size_t>(p.m * p.n), seed + 2);
    if (p.bf16_out) c_bf16 = DeviceBuffer<bf16>(course::to_bf16(out));
    else c = DeviceBuffer<float>(out);
    bias = DeviceBuffer<float>(course::random_vector(static_cast<std::size_t>(p.n), seed + 3));
    if (p.pre_gelu) pre = DeviceBuffer<bf16>(static_cast<std::size_t>(p.m * p.n));
  }
};

TcMatmulArgs args_for(const Product& p) {
  Operands& op = bench::cached<Operands>(p.row(), p);
  TcMatmulArgs a;
  a.a = op.a.data();
  a.b = op.b.data();
  a.m = p.m;
  a.n = p.n;
  a.k = p.k;
  a.a_transposed = p.a_transposed;
  a.b_transposed = p.b_transposed;
  a.lda = p.a_transposed ? p.m : p.k;
  a.ldb = p.b_transposed ? p.k : p.n;
  a.ldc = p.n;
  if (p.bf16_out) a.c_bf16 = op.c_bf16.data();
  else a.c = op.c.data();
  if (p.bias) a.epilogue.bias = op.bias.data();
  a.epilogue.gelu = p.gelu;
  if (p.pre_gelu) a.epilogue.pre_gelu = op.pre.data();
  if (p.residual_in_place) {
    a.epilogue.residual = a.c_bf16;
    a.epilogue.ldr = a.ldc;
  }
  a.epilogue.accumulate = p.accumulate;
  return a;
}

/// Row-major C = op(A) op(B) through column-major cuBLAS: C^T = op(B)^T op(A)^T, where a
/// row-major operand stored as it is used is its transpose column-major (OP_N), and one
/// stored transposed is the operand itself column-major (OP_T).
void cublas_product(const TcMatmulArgs& a) {
  const float one = 1.f;
  const float beta = (a.epilogue.accumulate || a.epilogue.residual) ? 1.f : 0.f;
  void* c = a.c ? static_cast<void*>(a.c) : static_cast<void*>(a.c_bf16);
  bench::check_cublas(
      cublasGemmEx(bench::cublas_handle(), a.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                   a.a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(a.n), static_cast<int>(a.m),
                   static_cast<int>(a.k), &one, a.b, CUDA_R_16BF, static_cast<int>(a.ldb), a.a, CUDA_R_16BF,
                   static_cast<int>(a.lda), &beta, c, a.c ? CUDA_R_32F : CUDA_R_16BF, static_cast<int>(a.ldc),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

double cublas_tflops(const Product& p) {
  static std::map<std::string, double> cache;
  auto it = cache.find(p.row());
  if (it != cache.end()) return it->second;
  const TcMatmulArgs a = args_for(p);
  const course::TimingStats t = course::time_kernel([&] { cublas_product(a); }, 3, 20);
  return cache[p.row()] = p.flops() / (t.median_ms * 1e-3) / 1e12;
}

void bench_product(benchmark::State& state, const Product& p, const std::function<void(const TcMatmulArgs&)>& run) {
  bench::guard(state, [&] {
    const TcMatmulArgs a = args_for(p);
    bench::time_calls(state, [&] { return a; }, run);
    bench::set_flops(state, p.flops(), cublas_tflops(p));
  });
}

const bool kRegistered = [] {
  for (const Product& p : kProducts) {
    for (const auto& info : course::m01::kTcMatmulSteps) {
      if (info.step == TcMatmulStep::wmma || info.step == TcMatmulStep::wgmma) continue;  // no options
      bench::add_step_rows("linear_bf16", info.name, p.row(), benchmark::kMicrosecond, &course::solution::matmul_tc,
                           &course::exercise::matmul_tc, [p, step = info.step](benchmark::State& st, MatmulTcFn fn) {
                             bench_product(st, p, [=](const TcMatmulArgs& a) { fn(step, a); });
                           });
    }
    bench::add_row(bench::row_name("linear_bf16", "library", "cublas_gemmex", p.row()), benchmark::kMicrosecond,
                   [p](benchmark::State& st) { bench_product(st, p, cublas_product); });
  }
  return true;
}();

}  // namespace
