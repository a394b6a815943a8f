// The C ABI of bindings/include/course_bridge.h over the public C++ API of modules 1-4.
//
// Compiled twice, like the tests: COURSE_IMPL=solution -> libcourse_bridge_solution,
// COURSE_IMPL=exercise -> libcourse_bridge_exercise. Every exported function
//  1. turns C arguments (names, flat sizes, stride arrays) into the op's argument struct,
//  2. calls course::<impl>::<op>, which validates before any launch,
//  3. maps any exception to a status code and keeps its message for course_last_error().
// The step is found by name in the op's k...Steps table (find_step, one helper for all).
// Ops with an fp32 and a bf16 overload (attention, attention_backward) are two entry points
// and two op names ("attention" / "attention_bf16"): each lists and accepts the steps of its
// dtype, the step table's dtype column.
//
// Without a GPU the first CUDA call fails with the runtime's words for it
// (cudaErrorInsufficientDriver reads as "update your driver"): guarded() says "no NVIDIA GPU
// found" instead, status COURSE_ERR_NO_GPU, the runtime's error on the next line.
//
// Ops a build may lack (module 4's, the bf16 attention overloads) are referenced weakly:
// the library links, course_op_available() says 0, and a call reports
// COURSE_ERR_NOT_IMPLEMENTED naming the folder to fill in. The module libraries are
// linked whole (bindings/CMakeLists.txt), so a weak symbol that exists is found.

#include "course_bridge.h"

#include "course/error.hpp"
#include "course/impl.hpp"
#include "module01/matmul.hpp"
#include "module01/matmul_tc.hpp"
#include "module01/reductions.hpp"
#include "module01/softmax.hpp"
#include "module02/batched_gemm.hpp"
#include "module03/attention.hpp"
#include "module04/adamw.hpp"
#include "module04/attention_backward.hpp"
#include "module04/cross_entropy.hpp"
#include "module04/gelu.hpp"
#include "module04/layer_norm.hpp"
#include "module04/linear_backward.hpp"
#include "module04/softmax_backward.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#ifndef COURSE_IMPL
#error "compile with COURSE_IMPL=solution or COURSE_IMPL=exercise"
#endif

#define COURSE_BRIDGE_STR2(x) #x
#define COURSE_BRIDGE_STR(x) COURSE_BRIDGE_STR2(x)

// Weak references to the ops a build may lack (a module or an overload still being
// written): a missing definition leaves the function's address null, the library still
// links, course_op_available() says 0 and a call reports COURSE_ERR_NOT_IMPLEMENTED.
namespace course::COURSE_IMPL {
__attribute__((weak)) void attention(::course::m03::AttentionStep step, const ::course::m03::AttentionArgsBf16& args);
__attribute__((weak)) void softmax_backward(::course::m04::SoftmaxBackwardStep step,
                                            const ::course::m04::SoftmaxBackwardArgs& args);
__attribute__((weak)) void linear_backward(::course::m04::BiasGradStep step,
                                           const ::course::m04::LinearBackwardArgs& args);
__attribute__((weak)) void attention_backward(::course::m04::AttentionBackwardStep step,
                                              const ::course::m04::AttentionBackwardArgs& args);
__attribute__((weak)) void attention_backward(::course::m04::AttentionBackwardStep step,
                                              const ::course::m04::AttentionBackwardArgsBf16& args);
__attribute__((weak)) void adamw(::course::m04::AdamWStep step, const ::course::m04::AdamWArgs& args);
__attribute__((weak)) void gelu_forward(::course::m04::GeluStep step, const ::course::m04::GeluArgs& args);
__attribute__((weak)) void gelu_backward(::course::m04::GeluStep step, const ::course::m04::GeluBackwardArgs& args);
__attribute__((weak)) void cross_entropy(::course::m04::CrossEntropyStep step,
                                         const ::course::m04::FusedCrossEntropyArgs& args);
__attribute__((weak)) void layer_norm_forward(::course::m04::LayerNormStep step,
                                              const ::course::m04::LayerNormArgs& args);
__attribute__((weak)) void layer_norm_backward(::course::m04::LayerNormBackwardStep step,
                                               const ::course::m04::LayerNormBackwardArgs& args);
}  // namespace course::COURSE_IMPL

namespace {

namespace impl = course::COURSE_IMPL;

// An overloaded function's address needs the overload named: these are the pointer types.
using AttentionBf16Fn = void (*)(course::m03::AttentionStep, const course::m03::AttentionArgsBf16&);
using AttentionBackwardFn = void (*)(course::m04::AttentionBackwardStep, const course::m04::AttentionBackwardArgs&);
using AttentionBackwardBf16Fn = void (*)(course::m04::AttentionBackwardStep,
                                         const course::m04::AttentionBackwardArgsBf16&);

/// True for a step of the bf16 overload: the dtype column of the step's table (argument-
/// dependent lookup finds module 3's or module 4's step_dtype).
template <class Step>
bool reads_bf16(Step step) {
  return step_dtype(step) == decltype(step_dtype(step))::bf16;
}
template <class Step>
bool reads_f32(Step step) {
  return !reads_bf16(step);
}

bool attention_bf16_linked() { return static_cast<AttentionBf16Fn>(&impl::attention) != nullptr; }
using course::InvalidArgument;

constexpr const char* kImplName = COURSE_BRIDGE_STR(COURSE_IMPL);

thread_local std::string t_last_error;

/// What a CUDA error means when it says there is no GPU to run on, in plain words; empty
/// when it means something else. The runtime reports a machine without the NVIDIA driver
/// as cudaErrorInsufficientDriver (or cudaErrorStubLibrary when only the toolkit's stub
/// libcuda is found) -- the same code as a driver too old for the runtime, which
/// cudaDriverGetVersion tells apart: it reports version 0 when no driver is installed.
std::string no_gpu_headline(cudaError_t code) {
  if (code == cudaErrorNoDevice) return "no NVIDIA GPU found (the NVIDIA driver sees no CUDA device)";
  if (code == cudaErrorStubLibrary) return "no NVIDIA GPU found (no NVIDIA driver: only the CUDA toolkit's stub)";
  if (code != cudaErrorInsufficientDriver) return "";
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0)
    return "no NVIDIA GPU found (no NVIDIA driver is installed)";
  return "";
}

/// A driver older than the runtime this library was built with: say which versions.
std::string old_driver_headline(cudaError_t code) {
  int driver = 0, runtime = 0;
  if (code != cudaErrorInsufficientDriver || cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return "";
  cudaRuntimeGetVersion(&runtime);
  const auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return "the NVIDIA driver supports CUDA " + version(driver) + ", older than the CUDA " + version(runtime) +
         " runtime this library was built with: update the driver";
}

int fail(int status, const char* message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {  // out of memory for the message itself: keep the status
  }
  return status;
}

/// Runs `body`, mapping every exception to a status; the one place exceptions stop.
template <class F>
int guarded(F&& body) noexcept {
  try {
    body();
    t_last_error.clear();
    return COURSE_OK;
  } catch (const course::InvalidArgument& e) {
    return fail(COURSE_ERR_INVALID_ARGUMENT, e.what());
  } catch (const course::NotImplemented& e) {
    return fail(COURSE_ERR_NOT_IMPLEMENTED, e.what());
  } catch (const course::Unsupported& e) {
    return fail(COURSE_ERR_UNSUPPORTED, e.what());
  } catch (const course::CudaError& e) {
    // The headline first, the runtime's own report (code, call, file, line) under it.
    if (const std::string gpu = no_gpu_headline(e.code()); !gpu.empty())
      return fail(COURSE_ERR_NO_GPU, (gpu + "\n" + e.what()).c_str());
    if (const std::string old = old_driver_headline(e.code()); !old.empty())
      return fail(COURSE_ERR_CUDA, (old + "\n" + e.what()).c_str());
    return fail(COURSE_ERR_CUDA, e.what());
  } catch (const std::bad_alloc&) {
    return fail(COURSE_ERR_OTHER, "out of host memory");
  } catch (const std::exception& e) {
    return fail(COURSE_ERR_OTHER, e.what());
  } catch (...) {
    return fail(COURSE_ERR_OTHER, "unknown C++ exception");
  }
}

// ---- step tables, by op name --------------------------------------------------------

struct StepEntry {
  const char* name;
  const char* summary;
};

struct OpEntry {
  const char* op;
  std::vector<StepEntry> steps;
  std::string joined;  ///< "a,b,c"
  bool available;      ///< this build contains the implementation
};

/// The op's steps: every entry of `table`, or those `keep` accepts.
template <class Step, std::size_t N, class Keep>
OpEntry op_entry(const char* op, const course::StepInfo<Step> (&table)[N], bool available, Keep keep) {
  OpEntry e{op, {}, "", available};
  for (const auto& info : table) {
    if (!keep(info.step)) continue;
    e.steps.push_back({info.name, info.summary});
    e.joined += (e.joined.empty() ? "" : ",") + std::string(info.name);
  }
  return e;
}
template <class Step, std::size_t N>
OpEntry op_entry(const char* op, const course::StepInfo<Step> (&table)[N], bool available = true) {
  return op_entry(op, table, available, [](Step) { return true; });
}

const std::vector<OpEntry>& op_table() {
  static const std::vector<OpEntry> table = [] {
    using namespace course;
    return std::vector<OpEntry>{
        op_entry("l2_norm", m01::kReduceSteps),
        op_entry("dot", m01::kReduceSteps),
        op_entry("softmax", m01::kSoftmaxSteps),
        op_entry("matmul", m01::kMatmulSteps),
        op_entry("matmul_tc", m01::kTcMatmulSteps),
        op_entry("batched_gemm", m02::kBgemmSteps),
        op_entry("attention", m03::kAttentionSteps, true, reads_f32<m03::AttentionStep>),
        op_entry("attention_bf16", m03::kAttentionSteps, attention_bf16_linked(), reads_bf16<m03::AttentionStep>),
        op_entry("softmax_backward", m04::kSoftmaxBackwardSteps, &impl::softmax_backward != nullptr),
        op_entry("linear_backward", m04::kBiasGradSteps, &impl::linear_backward != nullptr),
        op_entry("attention_backward", m04::kAttentionBackwardSteps,
                 static_cast<AttentionBackwardFn>(&impl::attention_backward) != nullptr,
                 reads_f32<m04::AttentionBackwardStep>),
        op_entry("attention_backward_bf16", m04::kAttentionBackwardSteps,
                 static_cast<AttentionBackwardBf16Fn>(&impl::attention_backward) != nullptr,
                 reads_bf16<m04::AttentionBackwardStep>),
        op_entry("cross_entropy", m04::kCrossEntropySteps, &impl::cross_entropy != nullptr),
        op_entry("adamw", m04::kAdamWSteps, &impl::adamw != nullptr),
        op_entry("gelu", m04::kGeluSteps, &impl::gelu_forward != nullptr),
        op_entry("gelu_backward", m04::kGeluSteps, &impl::gelu_backward != nullptr),
        op_entry("layer_norm", m04::kLayerNormSteps, &impl::layer_norm_forward != nullptr),
        op_entry("layer_norm_backward", m04::kLayerNormBackwardSteps, &impl::layer_norm_backward != nullptr),
    };
  }();
  return table;
}

const OpEntry* find_op(const char* op) {
  if (op == nullptr) return nullptr;
  for (const OpEntry& e : op_table())
    if (std::strcmp(e.op, op) == 0) return &e;
  return nullptr;
}

std::string joined_ops() {
  std::string s;
  for (const OpEntry& e : op_table()) s += (s.empty() ? "" : ",") + std::string(e.op);
  return s;
}

std::string quoted(const char* s) { return s == nullptr ? std::string("nullptr") : "\"" + std::string(s) + "\""; }

/// The op called `op`; InvalidArgument listing the ops otherwise.
const OpEntry& require_op(const char* op, const char* fn) {
  if (const OpEntry* e = find_op(op)) return *e;
  throw InvalidArgument(std::string(fn) + ": argument 'op' = " + quoted(op) + ": is not an op; the ops are: " +
                        joined_ops());
}

std::string unknown_step_message(const char* op, const char* step, const std::string& valid) {
  return std::string(op) + ": argument 'step' = " + quoted(step) + ": is not a step of " + op +
         "; the steps are: " + valid;
}

/// The step of `table` called `name`, among those `keep` accepts (an op's steps of one
/// dtype); InvalidArgument listing them otherwise.
template <class Step, std::size_t N, class Keep>
Step find_step(const course::StepInfo<Step> (&table)[N], const char* name, const char* op, Keep keep) {
  std::string valid;
  for (const auto& info : table) {
    if (!keep(info.step)) continue;
    if (name != nullptr && std::strcmp(info.name, name) == 0) return info.step;
    valid += (valid.empty() ? "" : ",") + std::string(info.name);
  }
  throw InvalidArgument(unknown_step_message(op, name, valid));
}
template <class Step, std::size_t N>
Step find_step(const course::StepInfo<Step> (&table)[N], const char* name, const char* op) {
  return find_step(table, name, op, [](Step) { return true; });
}

/// Throws NotImplemented for an op whose implementation this build lacks (weak symbol null).
template <class Fn>
void require_linked(Fn* fn, const char* op, const char* module) {
  if (fn != nullptr) return;
  throw course::NotImplemented(std::string(op) + " is not in this build of the " + kImplName + " library",
                               std::string(kImplName) + "s/" + module + "/ (then rebuild course_bridge_" +
                                   kImplName + ")");
}

/// Reads a {batch, head, seq|row} stride triple.
course::m03::AttentionStrides strides3(const int64_t* s, const char* fn, const char* name) {
  course::require_arg(s != nullptr, fn, name, static_cast<const void*>(s),
                      "must point to 3 strides {batch, head, seq} in elements");
  return {s[0], s[1], s[2]};
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

template <class T>
const T* in(const void* p) {
  return static_cast<const T*>(p);
}
template <class T>
T* out(void* p) {
  return static_cast<T*>(p);
}

/// The arguments of l2_norm (y null) and dot.
course::m01::ReduceArgs reduce_args(const void* x, const void* y, int64_t n, void* result, void* workspace,
                                    size_t workspace_bytes, void* stream) {
  course::m01::ReduceArgs args;
  args.x = in<float>(x);
  args.y = in<float>(y);
  args.n = n;
  args.result = out<float>(result);
  args.workspace = out<float>(workspace);
  args.workspace_bytes = workspace_bytes;
  args.stream = as_stream(stream);
  return args;
}

/// The fields both matmul entry points (fp32, bf16) fill alike.
template <class Args>
void set_matmul_shape(Args& args, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                      void* stream) {
  args.m = m;
  args.n = n;
  args.k = k;
  args.lda = lda;
  args.ldb = ldb;
  args.ldc = ldc;
  args.stream = as_stream(stream);
}

/// The fields both batched-GEMM entry points fill alike.
template <class Args>
void set_gemm_shape(Args& args, int64_t M, int64_t N, int64_t K, int64_t batch, int64_t num_heads, int a_transposed,
                    int b_transposed, float alpha, void* stream) {
  args.M = M;
  args.N = N;
  args.K = K;
  args.batch = batch;
  args.num_heads = num_heads;
  args.a_transposed = a_transposed != 0;
  args.b_transposed = b_transposed != 0;
  args.alpha = alpha;
  args.stream = as_stream(stream);
}

template <class T>
int batched_gemm_strided(const char* step, const void* a, const void* b, void* c, int64_t M, int64_t N, int64_t K,
                         int64_t batch, int64_t num_heads, const int64_t* a_strides, const int64_t* b_strides,
                         const int64_t* c_strides, int a_transposed, int b_transposed, float alpha, void* stream) {
  return guarded([&] {
    const char* fn = "batched_gemm_strided";
    const auto s = find_step(course::m02::kBgemmSteps, step, "batched_gemm");
    const auto sa = strides3(a_strides, fn, "a_strides");
    const auto sb = strides3(b_strides, fn, "b_strides");
    const auto sc = strides3(c_strides, fn, "c_strides");
    course::m02::StridedBatchedGemmArgs<T> args;
    args.a = in<T>(a);
    args.b = in<T>(b);
    args.c = out<float>(c);
    set_gemm_shape(args, M, N, K, batch, num_heads, a_transposed, b_transposed, alpha, stream);
    args.stride_a_batch = sa.batch;
    args.stride_a_head = sa.head;
    args.stride_a_row = sa.seq;
    args.stride_b_batch = sb.batch;
    args.stride_b_head = sb.head;
    args.stride_b_row = sb.seq;
    args.stride_c_batch = sc.batch;
    args.stride_c_head = sc.head;
    args.stride_c_row = sc.seq;
    impl::batched_gemm_strided(s, args);
  });
}

template <class T>
int batched_gemm_ptr_array(const char* step, const void* a_ptrs, const void* b_ptrs, const void* c_ptrs, int64_t M,
                           int64_t N, int64_t K, int64_t batch, int64_t num_heads, int64_t lda, int64_t ldb,
                           int64_t ldc, int a_transposed, int b_transposed, float alpha, void* stream) {
  return guarded([&] {
    const auto s = find_step(course::m02::kBgemmSteps, step, "batched_gemm");
    course::m02::PtrArrayBatchedGemmArgs<T> args;
    args.a_ptrs = static_cast<const T* const*>(a_ptrs);
    args.b_ptrs = static_cast<const T* const*>(b_ptrs);
    args.c_ptrs = static_cast<float* const*>(c_ptrs);
    set_gemm_shape(args, M, N, K, batch, num_heads, a_transposed, b_transposed, alpha, stream);
    args.lda = lda;
    args.ldb = ldb;
    args.ldc = ldc;
    impl::batched_gemm_ptr_array(s, args);
  });
}

/// The fields the attention entry points (forward fp32 and bf16, backward) fill alike: the
/// shape, the Q, K, V, O strides, the scale, the mask and the stream.
template <class Args>
void set_attention_shape(Args& args, const char* fn, int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q,
                         int64_t seq_k, int64_t head_dim, const int64_t* q_strides, const int64_t* k_strides,
                         const int64_t* v_strides, const int64_t* o_strides, float scale, int causal, void* stream) {
  args.batch = batch;
  args.heads = heads;
  args.kv_heads = kv_heads;
  args.seq_q = seq_q;
  args.seq_k = seq_k;
  args.head_dim = head_dim;
  args.q_strides = strides3(q_strides, fn, "q_strides");
  args.k_strides = strides3(k_strides, fn, "k_strides");
  args.v_strides = strides3(v_strides, fn, "v_strides");
  args.o_strides = strides3(o_strides, fn, "o_strides");
  args.scale = scale;
  args.causal = causal != 0;
  args.stream = as_stream(stream);
}

/// Every field of the attention backward's arguments; T is the element type of the tensors
/// (float or __nv_bfloat16), lse and the workspace are fp32 for both.
template <class T, class Args>
void set_attention_backward_args(Args& args, const char* fn, const void* q, const void* k, const void* v,
                                 const void* o, const void* dout, const void* lse, void* dq, void* dk, void* dv,
                                 int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_k,
                                 int64_t head_dim, const int64_t* q_strides, const int64_t* k_strides,
                                 const int64_t* v_strides, const int64_t* o_strides, const int64_t* do_strides,
                                 const int64_t* dq_strides, const int64_t* dk_strides, const int64_t* dv_strides,
                                 float scale, int causal, void* workspace, size_t workspace_bytes, void* stream) {
  args.q = in<T>(q);
  args.k = in<T>(k);
  args.v = in<T>(v);
  args.o = in<T>(o);
  args.dout = in<T>(dout);
  args.lse = in<float>(lse);
  args.dq = out<T>(dq);
  args.dk = out<T>(dk);
  args.dv = out<T>(dv);
  set_attention_shape(args, fn, batch, heads, kv_heads, seq_q, seq_k, head_dim, q_strides, k_strides, v_strides,
                      o_strides, scale, causal, stream);
  args.do_strides = strides3(do_strides, fn, "do_strides");
  args.dq_strides = strides3(dq_strides, fn, "dq_strides");
  args.dk_strides = strides3(dk_strides, fn, "dk_strides");
  args.dv_strides = strides3(dv_strides, fn, "dv_strides");
  args.workspace = out<float>(workspace);
  args.workspace_bytes = workspace_bytes;
}

int set_bytes(size_t* bytes, std::size_t value, const char* fn) {
  course::require_arg(bytes != nullptr, fn, "bytes", static_cast<const void*>(bytes),
                      "must point to a size_t that receives the byte count");
  *bytes = value;
  return COURSE_OK;
}

}  // namespace

extern "C" {

// ---- discovery, errors, memory --------------------------------------------------------

int course_bridge_abi_version(void) { return COURSE_BRIDGE_ABI_VERSION; }

const char* course_bridge_impl(void) { return kImplName; }

const char* course_last_error(void) { return t_last_error.c_str(); }

const char* course_list_ops(void) {
  static const std::string ops = [] {
    try {
      return joined_ops();
    } catch (...) {
      return std::string();
    }
  }();
  return ops.c_str();
}

const char* course_list_steps(const char* op) {
  const char* result = nullptr;
  guarded([&] { result = require_op(op, "course_list_steps").joined.c_str(); });
  return result;
}

const char* course_step_summary(const char* op, const char* step) {
  const char* result = nullptr;
  guarded([&] {
    const OpEntry& e = require_op(op, "course_step_summary");
    for (const StepEntry& s : e.steps)
      if (step != nullptr && std::strcmp(s.name, step) == 0) result = s.summary;
    if (result == nullptr) throw InvalidArgument(unknown_step_message(e.op, step, e.joined));
  });
  return result;
}

int course_op_available(const char* op) {
  int result = -1;
  guarded([&] {
    const OpEntry* e = find_op(op);
    if (e != nullptr) result = e->available ? 1 : 0;
  });
  return result;
}

int course_malloc(size_t bytes, void** ptr) {
  return guarded([&] {
    course::require_arg(ptr != nullptr, "course_malloc", "ptr", static_cast<const void*>(ptr),
                        "must point to a void* that receives the allocation");
    *ptr = nullptr;
    if (bytes > 0) COURSE_CUDA_CHECK(cudaMalloc(ptr, bytes));
  });
}

int course_free(void* ptr) {
  return guarded([&] {
    if (ptr != nullptr) COURSE_CUDA_CHECK(cudaFree(ptr));
  });
}

int course_memcpy(void* dst, const void* src, size_t bytes) {
  return guarded([&] {
    if (bytes == 0) return;
    course::require_not_null(dst, "course_memcpy", "dst");
    course::require_not_null(src, "course_memcpy", "src");
    COURSE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  });
}

int course_stream_synchronize(void* stream) {
  return guarded([&] { COURSE_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream))); });
}

// ---- module 1 --------------------------------------------------------------------------

int course_reduce_workspace_bytes(int64_t n, size_t* bytes) {
  return guarded([&] {
    course::require_arg(n >= 0, "reduce_workspace_bytes", "n", n, "must be >= 0");
    set_bytes(bytes, course::m01::reduce_workspace_bytes(n), "reduce_workspace_bytes");
  });
}

int course_l2_norm(const char* step, const void* x, int64_t n, void* result, void* workspace,
                   size_t workspace_bytes, void* stream) {
  return guarded([&] {
    impl::l2_norm(find_step(course::m01::kReduceSteps, step, "l2_norm"),
                  reduce_args(x, nullptr, n, result, workspace, workspace_bytes, stream));
  });
}

int course_dot(const char* step, const void* x, const void* y, int64_t n, void* result, void* workspace,
               size_t workspace_bytes, void* stream) {
  return guarded([&] {
    impl::dot(find_step(course::m01::kReduceSteps, step, "dot"),
              reduce_args(x, y, n, result, workspace, workspace_bytes, stream));
  });
}

int course_softmax_workspace_bytes(const char* step, int64_t rows, int64_t cols, int dim, size_t* bytes) {
  return guarded([&] {
    const auto s = find_step(course::m01::kSoftmaxSteps, step, "softmax");
    set_bytes(bytes, course::m01::softmax_workspace_bytes(s, rows, cols, dim), "softmax_workspace_bytes");
  });
}

int course_softmax(const char* step, const void* x, void* y, int64_t rows, int64_t cols, int64_t ldx, int64_t ldy,
                   int dim, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    course::m01::SoftmaxArgs args;
    args.x = in<float>(x);
    args.y = out<float>(y);
    args.rows = rows;
    args.cols = cols;
    args.ldx = ldx;
    args.ldy = ldy;
    args.dim = dim;
    args.workspace = out<float>(workspace);
    args.workspace_bytes = workspace_bytes;
    args.stream = as_stream(stream);
    impl::softmax(find_step(course::m01::kSoftmaxSteps, step, "softmax"), args);
  });
}

int course_matmul(const char* step, const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k,
                  int64_t lda, int64_t ldb, int64_t ldc, float alpha, float beta, void* stream) {
  return guarded([&] {
    course::m01::MatmulArgs args;
    args.a = in<float>(a);
    args.b = in<float>(b);
    args.c = out<float>(c);
    set_matmul_shape(args, m, n, k, lda, ldb, ldc, stream);
    args.alpha = alpha;
    args.beta = beta;
    impl::matmul(find_step(course::m01::kMatmulSteps, step, "matmul"), args);
  });
}

int course_matmul_tc(const char* step, const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k,
                     int64_t lda, int64_t ldb, int64_t ldc, void* stream) {
  return guarded([&] {
    course::m01::TcMatmulArgs args;
    args.a = in<__nv_bfloat16>(a);
    args.b = in<__nv_bfloat16>(b);
    args.c = out<float>(c);
    set_matmul_shape(args, m, n, k, lda, ldb, ldc, stream);
    impl::matmul_tc(find_step(course::m01::kTcMatmulSteps, step, "matmul_tc"), args);
  });
}

// ---- module 2 --------------------------------------------------------------------------

int course_batched_gemm_strided_f32(const char* step, const void* a, const void* b, void* c, int64_t M, int64_t N,
                                    int64_t K, int64_t batch, int64_t num_heads, const int64_t a_strides[3],
                                    const int64_t b_strides[3], const int64_t c_strides[3], int a_transposed,
                                    int b_transposed, float alpha, void* stream) {
  return batched_gemm_strided<float>(step, a, b, c, M, N, K, batch, num_heads, a_strides, b_strides, c_strides,
                                     a_transposed, b_transposed, alpha, stream);
}

int course_batched_gemm_strided_bf16(const char* step, const void* a, const void* b, void* c, int64_t M, int64_t N,
                                     int64_t K, int64_t batch, int64_t num_heads, const int64_t a_strides[3],
                                     const int64_t b_strides[3], const int64_t c_strides[3], int a_transposed,
                                     int b_transposed, float alpha, void* stream) {
  return batched_gemm_strided<__nv_bfloat16>(step, a, b, c, M, N, K, batch, num_heads, a_strides, b_strides,
                                             c_strides, a_transposed, b_transposed, alpha, stream);
}

int course_batched_gemm_ptr_array_f32(const char* step, const void* a_ptrs, const void* b_ptrs, const void* c_ptrs,
                                      int64_t M, int64_t N, int64_t K, int64_t batch, int64_t num_heads,
                                      int64_t lda, int64_t ldb, int64_t ldc, int a_transposed, int b_transposed,
                                      float alpha, void* stream) {
  return batched_gemm_ptr_array<float>(step, a_ptrs, b_ptrs, c_ptrs, M, N, K, batch, num_heads, lda, ldb, ldc,
                                       a_transposed, b_transposed, alpha, stream);
}

int course_batched_gemm_ptr_array_bf16(const char* step, const void* a_ptrs, const void* b_ptrs, const void* c_ptrs,
                                       int64_t M, int64_t N, int64_t K, int64_t batch, int64_t num_heads,
                                       int64_t lda, int64_t ldb, int64_t ldc, int a_transposed, int b_transposed,
                                       float alpha, void* stream) {
  return batched_gemm_ptr_array<__nv_bfloat16>(step, a_ptrs, b_ptrs, c_ptrs, M, N, K, batch, num_heads, lda, ldb,
                                               ldc, a_transposed, b_transposed, alpha, stream);
}

// ---- module 3 --------------------------------------------------------------------------

int course_attention_workspace_bytes(const char* step, int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_k,
                                     size_t* bytes) {
  return guarded([&] {
    const auto s = find_step(course::m03::kAttentionSteps, step, "attention");
    set_bytes(bytes, course::m03::attention_workspace_bytes(s, batch, heads, seq_q, seq_k),
              "attention_workspace_bytes");
  });
}

int course_attention_forward(const char* step, const void* q, const void* k, const void* v, void* o, void* lse,
                             int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_k,
                             int64_t head_dim, const int64_t q_strides[3], const int64_t k_strides[3],
                             const int64_t v_strides[3], const int64_t o_strides[3], float scale, int causal,
                             int rope, float rope_theta, int alibi, void* workspace, size_t workspace_bytes,
                             void* stream) {
  return guarded([&] {
    const char* fn = "attention";
    const auto s = find_step(course::m03::kAttentionSteps, step, fn);
    course::m03::AttentionArgs args;
    args.q = in<float>(q);
    args.k = in<float>(k);
    args.v = in<float>(v);
    args.o = out<float>(o);
    args.lse = out<float>(lse);
    set_attention_shape(args, fn, batch, heads, kv_heads, seq_q, seq_k, head_dim, q_strides, k_strides, v_strides,
                        o_strides, scale, causal, stream);
    args.rope = rope != 0;
    args.rope_theta = rope_theta;
    args.alibi = alibi != 0;
    args.workspace = out<float>(workspace);
    args.workspace_bytes = workspace_bytes;
    impl::attention(s, args);
  });
}

int course_attention_forward_bf16(const char* step, const void* q, const void* k, const void* v, void* o, void* lse,
                                  int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_k,
                                  int64_t head_dim, const int64_t q_strides[3], const int64_t k_strides[3],
                                  const int64_t v_strides[3], const int64_t o_strides[3], float scale, int causal,
                                  void* stream) {
  return guarded([&] {
    const char* fn = "attention";
    const auto s = find_step(course::m03::kAttentionSteps, step, "attention_bf16");
    if (!attention_bf16_linked())
      throw course::NotImplemented(
          std::string("the bf16 attention overload is not in this build of the ") + kImplName + " library",
          std::string(kImplName) + "s/module03_attention/");
    using bf16 = __nv_bfloat16;
    course::m03::AttentionArgsBf16 args;
    args.q = in<bf16>(q);
    args.k = in<bf16>(k);
    args.v = in<bf16>(v);
    args.o = out<bf16>(o);
    args.lse = out<float>(lse);
    set_attention_shape(args, fn, batch, heads, kv_heads, seq_q, seq_k, head_dim, q_strides, k_strides, v_strides,
                        o_strides, scale, causal, stream);
    static_cast<AttentionBf16Fn>(&impl::attention)(s, args);
  });
}

// ---- module 4 --------------------------------------------------------------------------

int course_softmax_backward_workspace_bytes(const char* step, int64_t rows, int64_t cols, int dim, size_t* bytes) {
  return guarded([&] {
    const auto s = find_step(course::m04::kSoftmaxBackwardSteps, step, "softmax_backward");
    set_bytes(bytes, course::m04::softmax_backward_workspace_bytes(s, rows, cols, dim),
              "softmax_backward_workspace_bytes");
  });
}

int course_softmax_backward(const char* step, const void* y, const void* dy, void* dx, int64_t rows, int64_t cols,
                            int64_t ldy, int64_t lddy, int64_t lddx, int dim, void* workspace,
                            size_t workspace_bytes, void* stream) {
  return guarded([&] {
    const auto s = find_step(course::m04::kSoftmaxBackwardSteps, step, "softmax_backward");
    require_linked(&impl::softmax_backward, "softmax_backward", "module04_training");
    course::m04::SoftmaxBackwardArgs args;
    args.y = in<float>(y);
    args.dy = in<float>(dy);
    args.dx = out<float>(dx);
    args.rows = rows;
    args.cols = cols;
    args.ldy = ldy;
    args.lddy = lddy;
    args.lddx = lddx;
    args.dim = dim;
    args.workspace = out<float>(workspace);
    args.workspace_bytes = workspace_bytes;
    args.stream = as_stream(stream);
    impl::softmax_backward(s, args);
  });
}

int course_linear_backward(const char* step, const void* x, const void* w, const void* dy, void* dx, void* dw,
                           void* db, int64_t M, int64_t K, int64_t N, int64_t ldx, int64_t ldw, int64_t lddy,
                           int64_t lddx, int64_t lddw, void* stream) {
  return guarded([&] {
    const auto s = find_step(course::m04::kBiasGradSteps, step, "linear_backward");
    require_linked(&impl::linear_backward, "linear_backward", "module04_training");
    course::m04::LinearBackwardArgs args;
    args.x = in<float>(x);
    args.w = in<float>(w);
    args.dy = in<float>(dy);
    args.dx = out<float>(dx);
    args.dw = out<float>(dw);
    args.db = out<float>(db);
    args.M = M;
    args.K = K;
    args.N = N;
    args.ldx = ldx;
    args.ldw = ldw;
    args.lddy = lddy;
    args.lddx = lddx;
    args.lddw = lddw;
    args.stream = as_stream(stream);
    impl::linear_backward(s, args);
  });
}

int course_attention_backward_workspace_bytes(const char* step, int64_t batch, int64_t heads, int64_t seq_q,
                                              int64_t seq_k, size_t* bytes) {
  return guarded([&] {
    const auto s = find_step(course::m04::kAttentionBackwardSteps, step, "attention_backward",
                             reads_f32<course::m04::AttentionBackwardStep>);
    set_bytes(bytes, course::m04::attention_backward_workspace_bytes(s, batch, heads, seq_q, seq_k),
              "attention_backward_workspace_bytes");
  });
}

int course_attention_backward_bf16_workspace_bytes(const char* step, int64_t batch, int64_t heads, int64_t seq_q,
                                                   int64_t seq_k, int64_t head_dim, size_t* bytes) {
  return guarded([&] {
    const auto s = find_step(course::m04::kAttentionBackwardSteps, step, "attention_backward_bf16",
                             reads_bf16<course::m04::AttentionBackwardStep>);
    course::m04::AttentionBackwardArgsBf16 args;  // the workspace depends on the sizes alone
    args.batch = batch;
    args.heads = heads;
    args.seq_q = seq_q;
    args.seq_k = seq_k;
    args.head_dim = head_dim;
    // The split steps' also on kv_heads (its S, tc_split_dq_plan), which this call does not
    // take: the largest over every kv_heads that divides heads, on the current device.
    std::size_t most = 0;
    for (std::int64_t kv = 1; kv <= heads; ++kv) {
      if (heads % kv != 0) continue;
      args.kv_heads = kv;
      most = std::max(most, course::m04::attention_backward_workspace_bytes(s, args));
      if (!course::m04::splits_dq(s)) break;
    }
    set_bytes(bytes, most, "attention_backward_bf16_workspace_bytes");
  });
}

int course_attention_backward(const char* step, const void* q, const void* k, const void* v, const void* o,
                              const void* dout, const void* lse, void* dq, void* dk, void* dv, int64_t batch,
                              int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_k, int64_t head_dim,
                              const int64_t q_strides[3], const int64_t k_strides[3], const int64_t v_strides[3],
                              const int64_t o_strides[3], const int64_t do_strides[3], const int64_t dq_strides[3],
                              const int64_t dk_strides[3], const int64_t dv_strides[3], float scale, int causal,
                              void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    const char* fn = "attention_backward";
    const auto s = find_step(course::m04::kAttentionBackwardSteps, step, fn,
                             reads_f32<course::m04::AttentionBackwardStep>);
    const auto run = static_cast<AttentionBackwardFn>(&impl::attention_backward);
    require_linked(run, fn, "module04_training");
    course::m04::AttentionBackwardArgs args;
    set_attention_backward_args<float>(args, fn, q, k, v, o, dout, lse, dq, dk, dv, batch, heads, kv_heads, seq_q,
                                       seq_k, head_dim, q_strides, k_strides, v_strides, o_strides, do_strides,
                                       dq_strides, dk_strides, dv_strides, scale, causal, workspace,
                                       workspace_bytes, stream);
    run(s, args);
  });
}

int course_attention_backward_bf16(const char* step, const void* q, const void* k, const void* v, const void* o,
                                   const void* dout, const void* lse, void* dq, void* dk, void* dv, int64_t batch,
                                   int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_k, int64_t head_dim,
                                   const int64_t q_strides[3], const int64_t k_strides[3],
                                   const int64_t v_strides[3], const int64_t o_strides[3],
                                   const int64_t do_strides[3], const int64_t dq_strides[3],
                                   const int64_t dk_strides[3], const int64_t dv_strides[3], float scale, int causal,
                                   void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    const char* fn = "attention_backward";
    const auto s = find_step(course::m04::kAttentionBackwardSteps, step, "attention_backward_bf16",
                             reads_bf16<course::m04::AttentionBackwardStep>);
    const auto run = static_cast<AttentionBackwardBf16Fn>(&impl::attention_backward);
    require_linked(run, "the bf16 attention_backward", "module04_training");
    course::m04::AttentionBackwardArgsBf16 args;
    set_attention_backward_args<__nv_bfloat16>(args, fn, q, k, v, o, dout, lse, dq, dk, dv, batch, heads, kv_heads,
                                               seq_q, seq_k, head_dim, q_strides, k_strides, v_strides, o_strides,
                                               do_strides, dq_strides, dk_strides, dv_strides, scale, causal,
                                               workspace, workspace_bytes, stream);
    run(s, args);
  });
}

}  // extern "C"

// ---- module 4: fused cross-entropy (module04/cross_entropy.hpp) -------------------------
// Its weak declaration and its op_table() entry are above with the other ops'.

extern "C" {

int course_cross_entropy(const char* step, int bf16, const void* logits, const int32_t* targets, float* losses,
                         float* loss_mean, int32_t* num_valid, void* dlogits, int64_t rows, int64_t vocab,
                         int64_t ldl, int64_t lddl, int32_t ignore_index, float dloss, void* stream) {
  return guarded([&] {
    const auto s = find_step(course::m04::kCrossEntropySteps, step, "cross_entropy");
    require_linked(&course::COURSE_IMPL::cross_entropy, "cross_entropy", "module04_training");
    course::m04::FusedCrossEntropyArgs args;
    args.dtype = bf16 ? course::DType::bf16 : course::DType::f32;
    args.logits = logits;
    args.targets = targets;
    args.losses = losses;
    args.loss_mean = loss_mean;
    args.num_valid = num_valid;
    args.dlogits = dlogits;
    args.rows = rows;
    args.vocab = vocab;
    args.ldl = ldl;
    args.lddl = lddl;
    args.ignore_index = ignore_index;
    args.dloss = dloss;
    args.stream = as_stream(stream);
    course::COURSE_IMPL::cross_entropy(s, args);
  });
}

}  // extern "C"

// ---- module 4's AdamW and GELU, module 1's tensor-core matmul with its options ---------
//
// AdamW's tensor list arrives as parallel HOST arrays (one entry per tensor); they are read
// into the HOST vector of AdamWTensor the C++ API takes. Nothing here reads device memory.

namespace {

/// The AdamW tensor list from the C arrays. Every entry of `sizes` is read; params == null
/// reads the sizes alone (the workspace query), else grads, exp_avgs and exp_avg_sqs are
/// non-null too (the caller checks) and bf16_copies and decay may be null (no copies, decay
/// on every tensor).
/// An out-of-range num_tensors gives an empty list, for validate_adamw_args to reject by name.
std::vector<course::m04::AdamWTensor> adamw_tensors(const char* fn, int64_t num_tensors, void* const* params,
                                                    const void* const* grads, void* const* exp_avgs,
                                                    void* const* exp_avg_sqs, void* const* bf16_copies,
                                                    const int64_t* sizes, const int* decay) {
  std::vector<course::m04::AdamWTensor> list;
  if (num_tensors <= 0 || num_tensors > (int64_t{1} << 24)) return list;
  course::require_not_null(sizes, fn, "sizes");
  list.resize(static_cast<std::size_t>(num_tensors));
  for (int64_t i = 0; i < num_tensors; ++i) {
    course::m04::AdamWTensor& t = list[static_cast<std::size_t>(i)];
    t.n = sizes[i];
    if (params == nullptr) continue;  // sizes only (the workspace query)
    t.params = static_cast<float*>(params[i]);
    t.grads = static_cast<const float*>(grads[i]);
    t.m = static_cast<float*>(exp_avgs[i]);
    t.v = static_cast<float*>(exp_avg_sqs[i]);
    t.bf16 = bf16_copies != nullptr ? static_cast<__nv_bfloat16*>(bf16_copies[i]) : nullptr;
    t.decay = decay == nullptr || decay[i] != 0;
  }
  return list;
}

course::m04::GeluDType gelu_dtype(int bf16) {
  // 0 and 1 map to f32 and bf16; any other value reaches validate_gelu_args, which names it.
  return static_cast<course::m04::GeluDType>(bf16);
}

}  // namespace

extern "C" {

int course_adamw_workspace_bytes(const char* step, int64_t num_tensors, const int64_t* sizes, size_t* bytes) {
  return guarded([&] {
    const char* fn = "adamw_workspace_bytes";
    const auto s = find_step(course::m04::kAdamWSteps, step, "adamw");
    course::require_arg(num_tensors >= 0 && num_tensors <= (int64_t{1} << 24), fn, "num_tensors", num_tensors,
                        "must be in [0, 2^24]");
    const auto list = adamw_tensors(fn, num_tensors, nullptr, nullptr, nullptr, nullptr, nullptr, sizes, nullptr);
    for (std::size_t i = 0; i < list.size(); ++i)
      course::require_arg(list[i].n >= 0 && list[i].n <= course::m04::kAdamWMaxElements, fn,
                          ("sizes[" + std::to_string(i) + "]").c_str(), list[i].n, "must be in [0, 2^40]");
    set_bytes(bytes, course::m04::adamw_workspace_bytes(s, list.data(), static_cast<int64_t>(list.size())), fn);
  });
}

int course_adamw(const char* step, int64_t num_tensors, void* const* params, const void* const* grads,
                 void* const* exp_avgs, void* const* exp_avg_sqs, void* const* bf16_copies, const int64_t* sizes,
                 const int* decay, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                 float max_norm, void* grad_norm, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    const char* fn = "adamw";
    const auto s = find_step(course::m04::kAdamWSteps, step, fn);
    require_linked(&impl::adamw, fn, "module04_training");
    if (num_tensors > 0) {  // the arrays themselves (their entries are checked by the C++ API)
      course::require_not_null(params, fn, "params");
      course::require_not_null(grads, fn, "grads");
      course::require_not_null(exp_avgs, fn, "exp_avgs");
      course::require_not_null(exp_avg_sqs, fn, "exp_avg_sqs");
    }
    const auto list =
        adamw_tensors(fn, num_tensors, params, grads, exp_avgs, exp_avg_sqs, bf16_copies, sizes, decay);
    course::m04::AdamWArgs args;
    args.tensors = list.empty() ? nullptr : list.data();
    args.num_tensors = num_tensors;
    args.lr = lr;
    args.beta1 = beta1;
    args.beta2 = beta2;
    args.eps = eps;
    args.weight_decay = weight_decay;
    args.t = t;
    args.max_norm = max_norm;
    args.grad_norm = out<float>(grad_norm);
    args.workspace = workspace;
    args.workspace_bytes = workspace_bytes;
    args.stream = as_stream(stream);
    impl::adamw(s, args);
  });
}

int course_gelu_forward(const char* step, const void* x, void* y, int64_t n, int bf16, void* stream) {
  return guarded([&] {
    const auto s = find_step(course::m04::kGeluSteps, step, "gelu");
    require_linked(&impl::gelu_forward, "gelu", "module04_training");
    course::m04::GeluArgs args;
    args.x = x;
    args.y = y;
    args.n = n;
    args.dtype = gelu_dtype(bf16);
    args.stream = as_stream(stream);
    impl::gelu_forward(s, args);
  });
}

int course_gelu_backward(const char* step, const void* x, const void* dy, void* dx, int64_t n, int bf16,
                         int accumulate, void* stream) {
  return guarded([&] {
    const auto s = find_step(course::m04::kGeluSteps, step, "gelu_backward");
    require_linked(&impl::gelu_backward, "gelu_backward", "module04_training");
    course::m04::GeluBackwardArgs args;
    args.x = x;
    args.dy = dy;
    args.dx = dx;
    args.n = n;
    args.dtype = gelu_dtype(bf16);
    args.accumulate = accumulate != 0;
    args.stream = as_stream(stream);
    impl::gelu_backward(s, args);
  });
}

int course_matmul_tc_ex(const char* step, const void* a, const void* b, void* c, void* c_bf16, int64_t m, int64_t n,
                        int64_t k, int64_t lda, int64_t ldb, int64_t ldc, int a_transposed, int b_transposed,
                        const void* bias, void* pre_gelu, int gelu, const void* residual, int64_t ldr,
                        int accumulate, void* stream) {
  return guarded([&] {
    using bf16 = __nv_bfloat16;
    course::m01::TcMatmulArgs args;
    args.a = in<bf16>(a);
    args.b = in<bf16>(b);
    args.c = out<float>(c);
    args.c_bf16 = out<bf16>(c_bf16);
    set_matmul_shape(args, m, n, k, lda, ldb, ldc, stream);
    args.a_transposed = a_transposed != 0;
    args.b_transposed = b_transposed != 0;
    args.epilogue.bias = in<float>(bias);
    args.epilogue.pre_gelu = out<bf16>(pre_gelu);
    args.epilogue.gelu = gelu != 0;
    args.epilogue.residual = residual;
    args.epilogue.ldr = ldr;
    args.epilogue.accumulate = accumulate != 0;
    impl::matmul_tc(find_step(course::m01::kTcMatmulSteps, step, "matmul_tc"), args);
  });
}

}  // extern "C"

// ---- module 4's LayerNorm (module04/layer_norm.hpp, layer_norm_backward.hpp) ------------
// Its weak declarations and op_table() entries ("layer_norm", "layer_norm_backward") are
// above with the other ops'. x, y, dy, dx share one dtype (bf16 = 0: float32, 1: bfloat16);
// gamma, beta, the statistics and the parameter gradients are fp32 always.

namespace {

course::DType layer_norm_dtype(int bf16, const char* fn) {
  course::require_arg(bf16 == 0 || bf16 == 1, fn, "bf16", bf16,
                      "must be 0 (float32 x, y, dy, dx) or 1 (bfloat16)");
  return bf16 ? course::DType::bf16 : course::DType::f32;
}

}  // namespace

extern "C" {

int course_layer_norm_forward(const char* step, int bf16, const void* x, void* y, const void* gamma,
                              const void* beta, void* mean, void* rstd, int64_t rows, int64_t C, int64_t ldx,
                              int64_t ldy, float eps, void* stream) {
  return guarded([&] {
    const char* fn = "layer_norm_forward";
    const auto s = find_step(course::m04::kLayerNormSteps, step, "layer_norm");
    require_linked(&impl::layer_norm_forward, "layer_norm", "module04_training");
    course::m04::LayerNormArgs args;
    args.dtype = layer_norm_dtype(bf16, fn);
    args.x = x;
    args.y = y;
    args.gamma = in<float>(gamma);
    args.beta = in<float>(beta);
    args.mean = out<float>(mean);
    args.rstd = out<float>(rstd);
    args.rows = rows;
    args.C = C;
    args.ldx = ldx;
    args.ldy = ldy;
    args.eps = eps;
    args.stream = as_stream(stream);
    impl::layer_norm_forward(s, args);
  });
}

int course_layer_norm_backward_workspace_bytes(const char* step, int64_t rows, int64_t C, size_t* bytes) {
  return guarded([&] {
    const auto s = find_step(course::m04::kLayerNormBackwardSteps, step, "layer_norm_backward");
    set_bytes(bytes, course::m04::layer_norm_backward_workspace_bytes(s, rows, C),
              "layer_norm_backward_workspace_bytes");
  });
}

int course_layer_norm_backward(const char* step, int bf16, const void* x, const void* dy, void* dx,
                               const void* gamma, const void* mean, const void* rstd, void* dgamma, void* dbeta,
                               int64_t rows, int64_t C, int64_t ldx, int64_t lddy, int64_t lddx, int accumulate_dx,
                               int accumulate_dparams, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    const char* fn = "layer_norm_backward";
    const auto s = find_step(course::m04::kLayerNormBackwardSteps, step, fn);
    require_linked(&impl::layer_norm_backward, fn, "module04_training");
    course::m04::LayerNormBackwardArgs args;
    args.dtype = layer_norm_dtype(bf16, fn);
    args.x = x;
    args.dy = dy;
    args.dx = dx;
    args.gamma = in<float>(gamma);
    args.mean = in<float>(mean);
    args.rstd = in<float>(rstd);
    args.dgamma = out<float>(dgamma);
    args.dbeta = out<float>(dbeta);
    args.rows = rows;
    args.C = C;
    args.ldx = ldx;
    args.lddy = lddy;
    args.lddx = lddx;
    args.accumulate_dx = accumulate_dx != 0;
    args.accumulate_dparams = accumulate_dparams != 0;
    args.workspace = workspace;
    args.workspace_bytes = workspace_bytes;
    args.stream = as_stream(stream);
    impl::layer_norm_backward(s, args);
  });
}

}  // extern "C"
