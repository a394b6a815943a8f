#pragma once
/// @file batched_gemm_support.hpp
/// @brief Test, benchmark and demo support for module 2's batched GEMM: the CPU
/// reference's descriptor of a strided problem, and device pointer arrays built from a
/// strided layout for the pointer-array API. Not part of the API (batched_gemm.hpp):
/// it needs the course's device buffers and CPU references.

#include "module02/batched_gemm.hpp"

#include "course/device.hpp"
#include "course/reference.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace course::m02 {

/// The CPU reference's descriptor for the same problem (course::ref::batched_gemm_strided).
template <class T>
course::ref::BatchedGemmDesc reference_desc(const StridedBatchedGemmArgs<T>& s) {
  course::ref::BatchedGemmDesc d;
  d.M = s.M;
  d.N = s.N;
  d.K = s.K;
  d.batch = s.batch;
  d.num_heads = s.num_heads;
  d.stride_a_batch = s.stride_a_batch;
  d.stride_a_head = s.stride_a_head;
  d.stride_a_row = s.stride_a_row;
  d.stride_b_batch = s.stride_b_batch;
  d.stride_b_head = s.stride_b_head;
  d.stride_b_row = s.stride_b_row;
  d.stride_c_batch = s.stride_c_batch;
  d.stride_c_head = s.stride_c_head;
  d.stride_c_row = s.stride_c_row;
  d.b_transposed = s.b_transposed;
  d.a_transposed = s.a_transposed;
  d.alpha = s.alpha;
  return d;
}

/// Device pointer arrays for the pointer-array API, with the host copies they were
/// uploaded from (kept for validation and for the CPU reference).
template <class T>
struct BatchedPtrArrays {
  std::vector<const T*> host_a, host_b;
  std::vector<float*> host_c;
  DeviceBuffer<const T*> a, b;
  DeviceBuffer<float*> c;
};

/// Builds, on the host, the batch*num_heads matrix pointers of each operand of a
/// strided layout (entry b*num_heads + h), validates them, and uploads them into `out`
/// (synchronously; the device buffers are reused when their size already fits).
/// This is the set-up cost the pointer-array API adds: O(batch*num_heads) host work and
/// three host->device copies (the benchmark times it: rows bgemm_ptr_build/...).
template <class T>
void build_ptr_arrays(const StridedBatchedGemmArgs<T>& s, BatchedPtrArrays<T>& out) {
  const char* fn = "build_ptr_arrays";
  validate_strided_layout(s, fn);
  const std::size_t count = static_cast<std::size_t>(s.batch * s.num_heads);
  out.host_a.resize(count);
  out.host_b.resize(count);
  out.host_c.resize(count);
  for (std::int64_t bi = 0; bi < s.batch; ++bi)
    for (std::int64_t h = 0; h < s.num_heads; ++h) {
      const std::size_t i = static_cast<std::size_t>(bi * s.num_heads + h);
      out.host_a[i] = s.a + bi * s.stride_a_batch + h * s.stride_a_head;
      out.host_b[i] = s.b + bi * s.stride_b_batch + h * s.stride_b_head;
      out.host_c[i] = s.c + bi * s.stride_c_batch + h * s.stride_c_head;
    }
  if (out.a.size() != count) out.a = DeviceBuffer<const T*>(count);
  if (out.b.size() != count) out.b = DeviceBuffer<const T*>(count);
  if (out.c.size() != count) out.c = DeviceBuffer<float*>(count);
  out.a.upload(out.host_a);
  out.b.upload(out.host_b);
  out.c.upload(out.host_c);
}

/// Pointer-array arguments for the problem `s` over arrays built by build_ptr_arrays(s, ...).
template <class T>
PtrArrayBatchedGemmArgs<T> ptr_array_args(const StridedBatchedGemmArgs<T>& s, const BatchedPtrArrays<T>& arrays) {
  PtrArrayBatchedGemmArgs<T> p;
  p.a_ptrs = arrays.a.data();
  p.b_ptrs = arrays.b.data();
  p.c_ptrs = arrays.c.data();
  p.M = s.M;
  p.N = s.N;
  p.K = s.K;
  p.batch = s.batch;
  p.num_heads = s.num_heads;
  p.lda = s.stride_a_row;
  p.ldb = s.stride_b_row;
  p.ldc = s.stride_c_row;
  p.b_transposed = s.b_transposed;
  p.a_transposed = s.a_transposed;
  p.alpha = s.alpha;
  p.stream = s.stream;
  return p;
}

}  // namespace course::m02
