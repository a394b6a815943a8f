#pragma once
/// @file error.hpp
/// @brief The course's exceptions and the CUDA error-checking macros.
///
/// Library code never calls exit(): every failure becomes one of these exceptions,
/// carrying enough to act on (the argument and its value, or the CUDA call, file and line).

#include <cuda_runtime_api.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <cstdint>
#include <type_traits>

namespace course {

/// Base of every exception the course throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CUDA runtime call or kernel launch failed.
class CudaError : public Error {
 public:
  CudaError(cudaError_t code, const char* expr, const char* file, int line);
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

/// A caller passed a bad argument: the message names the argument and its value.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// An exercise stub has not been written yet. Tests turn this into SKIPPED.
class NotImplemented : public Error {
 public:
  /// @param what the function or step that is missing
  /// @param file the source file the learner should edit
  NotImplemented(const std::string& what, const std::string& file);
  const std::string& file() const noexcept { return file_; }

 private:
  std::string file_;
};

/// A step this GPU or this build cannot run (e.g. Hopper-only instructions on an
/// Ampere GPU, or a binary built without sm_90a). Tests turn it into SKIPPED with the
/// reason; benchmarks skip the row.
class Unsupported : public Error {
 public:
  /// @param what the function or step; @param needs what it needs that is missing
  Unsupported(const std::string& what, const std::string& needs);
};

/// Throws CudaError when `code` is not cudaSuccess.
void check_cuda(cudaError_t code, const char* expr, const char* file, int line);

/// Checks the last launch: cudaGetLastError(), which reports bad launch
/// configurations (too many threads, too much shared memory) at once.
void check_last_launch(const char* kernel, const char* file, int line);

namespace detail {
template <class T>
std::string describe(const T& value) {
  std::ostringstream os;
  if constexpr (std::is_pointer_v<T>) {
    if (value == nullptr) return "nullptr";
    os << static_cast<const void*>(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    os << (value ? "true" : "false");
  } else {
    os << value;
  }
  return os.str();
}
}  // namespace detail

/// Throws InvalidArgument("<fn>: argument '<name>' = <value>: <requirement>") unless `ok`.
template <class T>
void require_arg(bool ok, const char* fn, const char* name, const T& value, const char* requirement) {
  if (ok) return;
  std::ostringstream os;
  os << fn << ": argument '" << name << "' = " << detail::describe(value) << ": " << requirement;
  throw InvalidArgument(os.str());
}

/// Throws InvalidArgument unless `ptr` is non-null.
template <class T>
void require_not_null(const T* ptr, const char* fn, const char* name) {
  require_arg(ptr != nullptr, fn, name, ptr, "must not be null");
}

/// Throws InvalidArgument unless `ptr` is aligned to `bytes`.
template <class T>
void require_aligned(const T* ptr, std::size_t bytes, const char* fn, const char* name) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (addr % bytes == 0) return;
  std::ostringstream req;
  req << "must be aligned to " << bytes << " bytes";
  require_arg(false, fn, name, ptr, req.str().c_str());
}

}  // namespace course

/// Check a CUDA runtime call: throws course::CudaError with the call, file and line.
#define COURSE_CUDA_CHECK(expr) ::course::check_cuda((expr), #expr, __FILE__, __LINE__)

/// Check the kernel launch just made (configuration errors surface here).
#define COURSE_CHECK_LAUNCH(kernel_name) ::course::check_last_launch((kernel_name), __FILE__, __LINE__)
