// CPU test of the C ABI (bindings/include/course_bridge.h), solution library: discovery,
// step names, and validation messages crossing the boundary as status + message. Every
// call here fails validation (or needs no device), so it runs without a GPU: the C++ API
// validates before any launch.

#include "course_bridge.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>

namespace {

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

std::string last_error() { return course_last_error(); }

// Distinct, 16-byte aligned, never dereferenced: validation only compares addresses.
void* fake(std::uintptr_t i) { return reinterpret_cast<void*>(std::uintptr_t{1} << 40 | i << 24); }

const std::int64_t kBhnd[3] = {4 * 8 * 64, 8 * 64, 64};  // [B, H=4, N=8, d=64]

TEST(BridgeAbi, IdentifiesItself) {
  EXPECT_EQ(course_bridge_abi_version(), COURSE_BRIDGE_ABI_VERSION);
  EXPECT_STREQ(course_bridge_impl(), "solution");
}

TEST(BridgeAbi, ListsOpsAndSteps) {
  const std::string ops = course_list_ops();
  for (const char* op : {"l2_norm", "dot", "softmax", "matmul", "matmul_tc", "batched_gemm", "attention"})
    EXPECT_TRUE(contains(ops, op)) << ops;
  EXPECT_STREQ(course_list_steps("softmax"),
               "naive_three_pass,block_per_row,warp_per_row,online_vectorized,cluster_columns");
  EXPECT_STREQ(course_list_steps("l2_norm"), course_list_steps("dot"));
  // Every listed op has steps and a summary for its first step, and says whether it is built.
  std::string rest = ops;
  while (!rest.empty()) {
    const std::string op = rest.substr(0, rest.find(','));
    rest = rest.find(',') == std::string::npos ? "" : rest.substr(rest.find(',') + 1);
    const char* steps = course_list_steps(op.c_str());
    ASSERT_NE(steps, nullptr) << op << ": " << last_error();
    const std::string first = std::string(steps).substr(0, std::string(steps).find(','));
    EXPECT_NE(course_step_summary(op.c_str(), first.c_str()), nullptr) << op;
    EXPECT_GE(course_op_available(op.c_str()), 0) << op;
  }
  EXPECT_EQ(course_op_available("attention"), 1);
}

TEST(BridgeAbi, UnknownOpAndStepAreNamed) {
  EXPECT_EQ(course_list_steps("flash"), nullptr);
  EXPECT_TRUE(contains(last_error(), "argument 'op' = \"flash\"")) << last_error();
  EXPECT_TRUE(contains(last_error(), "attention")) << last_error();
  EXPECT_EQ(course_op_available("flash"), -1);
  EXPECT_EQ(course_step_summary("softmax", "fastest"), nullptr);
  EXPECT_TRUE(contains(last_error(), "online_vectorized")) << last_error();

  EXPECT_EQ(course_softmax("fastest", fake(1), fake(2), 4, 4, 4, 4, 1, nullptr, 0, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "softmax: argument 'step' = \"fastest\"")) << last_error();
  EXPECT_TRUE(contains(last_error(), "warp_per_row")) << last_error();
  EXPECT_EQ(course_matmul(nullptr, fake(1), fake(2), fake(3), 4, 4, 4, 4, 4, 4, 1.f, 0.f, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'step' = nullptr")) << last_error();
}

TEST(BridgeAbi, ValidationMessagesNameTheArgument) {
  EXPECT_EQ(course_matmul("naive", nullptr, fake(2), fake(3), 4, 4, 4, 4, 4, 4, 1.f, 0.f, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'a' = nullptr")) << last_error();
  EXPECT_EQ(course_matmul("warp_tiled", fake(1), fake(2), fake(3), 0, 4, 4, 4, 4, 4, 1.f, 0.f, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'm' = 0")) << last_error();
  EXPECT_EQ(course_softmax("warp_per_row", fake(1), fake(2), 4, 8, 7, 8, 1, nullptr, 0, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'ldx' = 7")) << last_error();
  EXPECT_EQ(course_l2_norm("vectorized", fake(1), 100, nullptr, fake(3), 4096, nullptr), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'result'")) << last_error();
  EXPECT_EQ(course_matmul_tc("mma_sync", fake(1), fake(2), fake(3), 16, 16, 12, 12, 16, 16, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'lda' = 12")) << last_error();

  const std::int64_t s[3] = {1024, 1024, 32};
  EXPECT_EQ(course_batched_gemm_strided_f32("tensor_core", fake(1), fake(2), fake(3), 32, 32, 32, 1, 1, s, s, s, 0,
                                            0, 1.f, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'step' = tensor_core")) << last_error();
  EXPECT_EQ(course_batched_gemm_strided_f32("warp_tiled", fake(1), fake(2), fake(3), 32, 32, 32, 1, 1, s, nullptr, s,
                                            0, 0, 1.f, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'b_strides' = nullptr")) << last_error();
  // Pointer arrays in host memory are rejected by name (the kernel would fault on them).
  const void* host_ptrs[1] = {fake(1)};
  EXPECT_EQ(course_batched_gemm_ptr_array_f32("smem_tiled", host_ptrs, host_ptrs, host_ptrs, 8, 8, 8, 1, 1, 8, 8, 8,
                                              0, 0, 1.f, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'a_ptrs'")) << last_error();
}

TEST(BridgeAbi, AttentionValidation) {
  const auto attention = [](const char* step, std::int64_t d, const std::int64_t* qs, int causal, int alibi) {
    return course_attention_forward(step, fake(1), fake(2), fake(3), fake(4), nullptr, 2, 4, 4, 8, 8, d, qs, kBhnd,
                                    kBhnd, kBhnd, 0.f, causal, 0, 10000.f, alibi, nullptr, 0, nullptr);
  };
  EXPECT_EQ(attention("fused", 48, kBhnd, 0, 0), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'head_dim' = 48")) << last_error();
  EXPECT_EQ(attention("fused", 64, nullptr, 0, 0), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'q_strides' = nullptr")) << last_error();
  EXPECT_EQ(attention("tiled_online", 64, kBhnd, 1, 0), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'causal' = true")) << last_error();
  EXPECT_EQ(attention("fused", 64, kBhnd, 0, 1), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'alibi' = true")) << last_error();
  const std::int64_t odd[3] = {4 * 8 * 64, 8 * 64, 66};
  EXPECT_EQ(attention("fused", 64, odd, 0, 0), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'q_strides.seq' = 66")) << last_error();
  std::size_t bytes = 0;
  ASSERT_EQ(course_attention_workspace_bytes("naive", 2, 4, 8, 16, &bytes), COURSE_OK) << last_error();
  EXPECT_EQ(bytes, std::size_t{2 * 4 * 8 * 16 * sizeof(float)});
  ASSERT_EQ(course_attention_workspace_bytes("fused", 2, 4, 8, 16, &bytes), COURSE_OK);
  EXPECT_EQ(bytes, 0u);
}

TEST(BridgeAbi, TensorCoreAttentionValidatesOrSaysItIsMissing) {
  const bool built = course_op_available("attention_bf16") == 1;  // (a success: it clears the last error)
  const int status = course_attention_forward_bf16("tc_flash2", fake(1), fake(2), fake(3), fake(4), nullptr, 2, 4, 4,
                                                   8, 8, 48, kBhnd, kBhnd, kBhnd, kBhnd, 0.f, 0, nullptr);
  if (built) {
    EXPECT_EQ(status, COURSE_ERR_INVALID_ARGUMENT) << last_error();
    EXPECT_TRUE(contains(last_error(), "argument 'head_dim' = 48")) << last_error();
    EXPECT_FALSE(contains(course_list_steps("attention"), "tc_"));  // fp32 and bf16 steps are listed apart
  } else {
    EXPECT_EQ(status, COURSE_ERR_NOT_IMPLEMENTED) << last_error();
  }
}

TEST(BridgeAbi, ModuleFourReportsItsState) {
  for (const char* op : {"softmax_backward", "linear_backward", "attention_backward"}) {
    const int available = course_op_available(op);
    if (available < 0) continue;  // header not in this checkout yet
    int status = COURSE_OK;
    if (std::string(op) == "softmax_backward")
      status = course_softmax_backward("two_pass", fake(1), fake(2), fake(3), 4, 8, 8,
                                       8, 4, 1, nullptr, 0, nullptr);
    if (std::string(op) == "linear_backward")
      status = course_linear_backward("column_per_thread", fake(1), fake(2), fake(3), fake(4), nullptr, nullptr, 0, 8,
                                      8, 0, 0, 0, 0, 0, nullptr);
    if (std::string(op) == "attention_backward")
      status = course_attention_backward("flash", fake(1), fake(2), fake(3), fake(4), fake(5), fake(6), fake(7),
                                         fake(8), fake(9), 2, 4, 4, 8, 8, 64, kBhnd, kBhnd, kBhnd, kBhnd, kBhnd,
                                         nullptr, kBhnd, kBhnd, 0.f, 0, nullptr, 0, nullptr);
    if (available == 1) {
      EXPECT_EQ(status, COURSE_ERR_INVALID_ARGUMENT) << op << ": " << last_error();
      EXPECT_TRUE(contains(last_error(), "argument '")) << last_error();
    } else {
      EXPECT_EQ(status, COURSE_ERR_NOT_IMPLEMENTED) << op << ": " << last_error();
      EXPECT_TRUE(contains(last_error(), "module04_training")) << last_error();
    }
  }
}

TEST(BridgeAbi, AttentionBackwardStepsAreSplitByDtype) {
  // One op name per overload, as for the forward: each lists and accepts its dtype's steps.
  EXPECT_STREQ(course_list_steps("attention_backward"), "naive,flash,flash_deterministic");
  EXPECT_STREQ(course_list_steps("attention_backward_bf16"),
               "tc_mma,tc_pipelined,tc_deterministic,tc_split_dq,tc_wgmma,tc_wgmma_deterministic,tc_wgmma_split_dq");
  std::size_t bytes = 0;
  EXPECT_EQ(course_attention_backward_workspace_bytes("tc_mma", 2, 4, 100, 100, &bytes), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "is not a step of attention_backward; the steps are: naive,")) << last_error();
  EXPECT_EQ(course_attention_backward_bf16_workspace_bytes("flash", 2, 4, 100, 100, 64, &bytes),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "the steps are: tc_mma,tc_pipelined,tc_deterministic,tc_split_dq,tc_wgmma,"
                                     "tc_wgmma_deterministic,tc_wgmma_split_dq"))
      << last_error();
  // The bf16 workspace holds an fp32 dQ accumulator: it grows with head_dim.
  std::size_t d64 = 0, d128 = 0;
  ASSERT_EQ(course_attention_backward_bf16_workspace_bytes("tc_pipelined", 2, 4, 100, 100, 64, &d64), COURSE_OK);
  ASSERT_EQ(course_attention_backward_bf16_workspace_bytes("tc_pipelined", 2, 4, 100, 100, 128, &d128), COURSE_OK);
  EXPECT_GE(d64, std::size_t{2 * 4 * 100 * 64 * sizeof(float)});
  EXPECT_GT(d128, d64);

  const auto backward_bf16 = [&](const char* step, std::int64_t d) {
    return course_attention_backward_bf16(step, fake(1), fake(2), fake(3), fake(4), fake(5), fake(6), fake(7),
                                          fake(8), fake(9), 2, 4, 4, 8, 8, d, kBhnd, kBhnd, kBhnd, kBhnd, kBhnd,
                                          kBhnd, kBhnd, kBhnd, 0.f, 0, fake(10), d128, nullptr);
  };
  EXPECT_EQ(backward_bf16("flash", 64), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "attention_backward_bf16: argument 'step' = \"flash\"")) << last_error();
  const bool built = course_op_available("attention_backward_bf16") == 1;
  const int status = backward_bf16("tc_pipelined", 48);
  if (built) {
    EXPECT_EQ(status, COURSE_ERR_INVALID_ARGUMENT) << last_error();
    EXPECT_TRUE(contains(last_error(), "argument 'head_dim' = 48")) << last_error();
  } else {
    EXPECT_EQ(status, COURSE_ERR_NOT_IMPLEMENTED) << last_error();
    EXPECT_TRUE(contains(last_error(), "module04_training")) << last_error();
  }
}

TEST(BridgeAbi, NoGpuIsSaidPlainly) {
  // Without a GPU the runtime's first failure (cudaErrorInsufficientDriver when no driver is
  // installed) reads as "update your driver"; the bridge says what it means, then the raw error.
  void* p = nullptr;
  const int status = course_malloc(16, &p);
  if (status == COURSE_OK) {  // a GPU is here
    EXPECT_EQ(course_free(p), COURSE_OK);
    return;
  }
  ASSERT_EQ(status, COURSE_ERR_NO_GPU) << last_error();
  const std::string message = last_error();
  EXPECT_EQ(message.rfind("no NVIDIA GPU found", 0), 0u) << message;
  const std::string second = message.substr(message.find('\n') + 1);
  EXPECT_EQ(second.rfind("CUDA error cuda", 0), 0u) << message;
  EXPECT_TRUE(contains(second, "cudaMalloc")) << message;
}

TEST(BridgeAbi, ErrorsAreClearedAndThreadLocal) {
  ASSERT_EQ(course_matmul("naive", nullptr, nullptr, nullptr, 4, 4, 4, 4, 4, 4, 1.f, 0.f, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  const std::string mine = last_error();
  std::string theirs = "unset";
  std::thread([&] { theirs = course_last_error(); }).join();
  EXPECT_EQ(theirs, "");
  EXPECT_EQ(last_error(), mine);
  std::size_t bytes = 0;
  ASSERT_EQ(course_reduce_workspace_bytes(1000, &bytes), COURSE_OK);
  EXPECT_GT(bytes, 0u);
  EXPECT_EQ(last_error(), "");
  void* p = fake(1);
  EXPECT_EQ(course_malloc(0, &p), COURSE_OK);  // no device call for 0 bytes
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(course_free(nullptr), COURSE_OK);
  EXPECT_EQ(course_reduce_workspace_bytes(10, nullptr), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'bytes'")) << last_error();
}

// AdamW's tensor list as host arrays, GELU's dtype flag and matmul_tc's options: each
// reaches its C++ validation (or the step's Unsupported) and comes back by name.
TEST(BridgeAbi, AdamwGeluAndMatmulOptionsValidate) {
  void* p[2] = {fake(1), fake(2)};
  const void* g[2] = {fake(3), fake(4)};
  void* m[2] = {fake(5), fake(6)};
  void* v[2] = {fake(7), fake(8)};
  const std::int64_t sizes[2] = {100, 16384 * 3 + 1};
  const int decay[2] = {1, 0};
  std::size_t per_tensor = 0, multi_tensor = 0;
  ASSERT_EQ(course_adamw_workspace_bytes("per_tensor", 2, sizes, &per_tensor), COURSE_OK) << last_error();
  ASSERT_EQ(course_adamw_workspace_bytes("multi_tensor", 2, sizes, &multi_tensor), COURSE_OK) << last_error();
  EXPECT_EQ(per_tensor, 16u + 16u + 16u + 4096u);  // norm + scale, 2 x round16(2 floats), l2_norm's
  EXPECT_EQ(multi_tensor, 16u + 112u + 32u + 32u);  // + 2 table rows, 3 chunk starts, 1 + 4 chunk sums
  EXPECT_EQ(course_adamw_workspace_bytes("fused", 2, sizes, &per_tensor), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "adamw: argument 'step' = \"fused\"")) << last_error();

  const auto call = [&](const char* step, std::int64_t t, std::size_t ws_bytes, void* const* params) {
    return course_adamw(step, 2, params, g, m, v, nullptr, sizes, decay, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, 1.f,
                        nullptr, fake(9), ws_bytes, nullptr);
  };
  EXPECT_EQ(call("multi_tensor", 0, multi_tensor, p), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "adamw: argument 't' = 0")) << last_error();
  EXPECT_EQ(call("multi_tensor", 1, 16, p), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'workspace_bytes' = 16")) << last_error();
  EXPECT_EQ(call("per_tensor", 1, per_tensor, nullptr), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "adamw: argument 'params' = nullptr")) << last_error();
  void* same[2] = {fake(3), fake(2)};  // params[0] is grads[0]
  EXPECT_EQ(call("per_tensor", 1, per_tensor, same), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "overlaps tensors[0]")) << last_error();

  EXPECT_EQ(course_gelu_forward("vectorized", fake(1), fake(2), 64, 3, nullptr), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "gelu_forward: argument 'dtype' = 3")) << last_error();
  EXPECT_EQ(course_gelu_backward("scalar", fake(1), fake(2), fake(1), 64, 0, 1, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "gelu_backward: argument 'dx'")) << last_error();
  EXPECT_EQ(course_gelu_backward("tanh", fake(1), fake(2), fake(3), 64, 0, 0, nullptr), COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "gelu_backward: argument 'step' = \"tanh\"")) << last_error();

  // Y = X W^T + b on wmma: the step names the option it lacks; on mma_sync, a bad ldb.
  EXPECT_EQ(course_matmul_tc_ex("wmma", fake(1), fake(2), nullptr, fake(3), 64, 32, 16, 16, 16, 32, 0, 1, fake(4),
                                nullptr, 0, nullptr, 0, 0, nullptr),
            COURSE_ERR_UNSUPPORTED);
  EXPECT_TRUE(contains(last_error(), "TcMatmulArgs::b_transposed")) << last_error();
  EXPECT_EQ(course_matmul_tc_ex("mma_sync", fake(1), fake(2), nullptr, fake(3), 64, 32, 16, 16, 12, 32, 0, 1,
                                fake(4), nullptr, 0, nullptr, 0, 0, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'ldb' = 12")) << last_error();
  EXPECT_EQ(course_matmul_tc_ex("mma_sync", fake(1), fake(2), nullptr, fake(3), 64, 32, 16, 16, 16, 32, 0, 1,
                                nullptr, nullptr, 0, nullptr, 0, 1, nullptr),
            COURSE_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "argument 'epilogue.accumulate'")) << last_error();
}

}  // namespace
