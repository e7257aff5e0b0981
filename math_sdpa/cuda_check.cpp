// cuda_check.cpp: formatting of CUDA and cuBLAS failures.
#include "cuda_check.h"

#include <cstdio>

namespace sdpa {

namespace {
thread_local const char* g_current_stage = "setup";

// __FILE__ is absolute in a CMake build; the message shows it relative to the source tree.
const char* source_relative(const char* file) {
#ifdef SDPA_SOURCE_ROOT
  const std::string root = SDPA_SOURCE_ROOT "/";
  if (std::string(file).compare(0, root.size(), root) == 0) return file + root.size();
#endif
  return file;
}

[[noreturn]] void raise(const std::string& code, const char* call, const char* file, int line, int number) {
  char buf[1024];
  file = source_relative(file);
  std::snprintf(buf, sizeof buf, "CUDA error at %s:%d in stage %s: code=%d(%s) \"%s\"", file, line,
                g_current_stage, number, code.c_str(), call);
  throw CudaError(buf, g_current_stage, code);
}
}  // namespace

void set_current_stage(const char* name) { g_current_stage = name; }

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) raise(cudaGetErrorName(status), call, file, line, static_cast<int>(status));
}

void check_cuda(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) raise(cublasGetStatusName(status), call, file, line, static_cast<int>(status));
}

}  // namespace sdpa
