#include "course/error.hpp"

namespace course {

namespace {
std::string cuda_message(cudaError_t code, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << "CUDA error " << cudaGetErrorName(code) << " (" << static_cast<int>(code)
     << "): " << cudaGetErrorString(code) << "\n  in " << expr << "\n  at " << file << ":" << line;
  return os.str();
}
}  // namespace

CudaError::CudaError(cudaError_t code, const char* expr, const char* file, int line)
    : Error(cuda_message(code, expr, file, line)), code_(code) {}

NotImplemented::NotImplemented(const std::string& what, const std::string& file)
    : Error("not implemented yet: " + what + " -- edit " + file), file_(file) {}

Unsupported::Unsupported(const std::string& what, const std::string& needs)
    : Error("unsupported here: " + what + " needs " + needs) {}

void check_cuda(cudaError_t code, const char* expr, const char* file, int line) {
  if (code != cudaSuccess) throw CudaError(code, expr, file, line);
}

void check_last_launch(const char* kernel, const char* file, int line) {
  const cudaError_t code = cudaGetLastError();
  if (code != cudaSuccess) {
    const std::string what = std::string("launch of ") + kernel;
    throw CudaError(code, what.c_str(), file, line);
  }
}

}  // namespace course
