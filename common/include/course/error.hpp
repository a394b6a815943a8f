#pragma once
/// @file error.hpp
/// @brief The course's exceptions and the CUDA error-checking macros.
///
/// Library code never calls exit(): every failure becomes one of these exceptions,
/// carrying enough to act on (the argument and its value, or the CUDA call, file and line).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
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
  if constexpr (std::is_same_v<T, const char*> || std::is_same_v<T, char*>) {
    return value == nullptr ? "nullptr" : value;  // text (a step's or a dtype's name), not an address
  } else if constexpr (std::is_pointer_v<T>) {
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

/// Text kept as its pieces and streamed only when printed: validate::msg("must be >= K = ", k)
/// builds one. Validation runs before every launch and almost never fails, so its messages
/// must cost nothing until a check fails: an std::ostringstream costs about a microsecond,
/// and a launch path that formats a dozen messages eagerly spends longer on them than a
/// 10-microsecond kernel runs.
template <class... Parts>
class Msg {
 public:
  explicit Msg(const Parts&... parts) : parts_(parts...) {}
  std::string str() const {
    std::ostringstream os;
    os << *this;
    return os.str();
  }
  friend std::ostream& operator<<(std::ostream& os, const Msg& m) {
    const auto flags = os.flags();
    os << std::boolalpha;  // a bool piece reads true / false, as require_arg's value does
    std::apply([&os](const auto&... p) { (os << ... << p); }, m.parts_);
    os.flags(flags);
    return os;
  }

 private:
  std::tuple<Parts...> parts_;  // by value (string literals as pointers): safe to keep
};

/// Throws InvalidArgument("<fn>: argument '<name>' = <value>: <requirement>") unless `ok`.
/// `name` and `requirement` are anything an std::ostream prints (a string literal, an
/// std::string, a Msg): they are formatted only when the check fails.
template <class T, class Name, class Requirement>
void require_arg(bool ok, const char* fn, const Name& name, const T& value, const Requirement& requirement) {
  if (ok) return;
  std::ostringstream os;
  os << fn << ": argument '" << name << "' = " << detail::describe(value) << ": " << requirement;
  throw InvalidArgument(os.str());
}

/// Throws InvalidArgument unless `ptr` is non-null.
template <class T, class Name>
void require_not_null(const T* ptr, const char* fn, const Name& name) {
  require_arg(ptr != nullptr, fn, name, static_cast<const void*>(ptr), "must not be null");
}

/// Throws InvalidArgument unless `ptr` is aligned to `bytes`.
template <class T, class Name>
void require_aligned(const T* ptr, std::size_t bytes, const char* fn, const Name& name) {
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  if (addr % bytes == 0) return;
  std::ostringstream req;
  req << "must be aligned to " << bytes << " bytes";
  require_arg(false, fn, name, static_cast<const void*>(ptr), req.str().c_str());
}

}  // namespace course

/// Check a CUDA runtime call: throws course::CudaError with the call, file and line.
#define COURSE_CUDA_CHECK(expr) ::course::check_cuda((expr), #expr, __FILE__, __LINE__)

/// Check the kernel launch just made (configuration errors surface here).
#define COURSE_CHECK_LAUNCH(kernel_name) ::course::check_last_launch((kernel_name), __FILE__, __LINE__)
