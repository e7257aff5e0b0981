// cublas_loader.cpp: cuBLAS loaded at its first call (cublas_loader.h says why).
//
// The program links none of cuBLAS's shared libraries. This file defines the cuBLAS functions the
// harness calls, with the signatures of cublas_api.h; each opens SDPA_CUBLAS_SONAME once
// (dlopen, with this executable's run path, so the library found is the one a link against it
// would have found) and calls the library's own function. Where the library cannot be opened each
// returns CUBLAS_STATUS_NOT_INITIALIZED, and cublasGetStatusName names the reason, so the one
// error idiom (CUDA_CHECK) reports it. A function the harness starts to call must be added here:
// the link fails until it is.
#include "math_sdpa/cublas_loader.h"

#include <cublas_v2.h>
#include <dlfcn.h>

namespace sdpa {

#ifdef SDPA_STATIC_CUBLAS

std::string cublas_library_file() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cublasGetProperty), &info) == 0 || !info.dli_fname) return "unknown";
  return info.dli_fname;
}

std::string cublas_load_error() { return ""; }

#else

namespace {

struct CublasLibrary {
  void* handle = nullptr;
  std::string error;
};

const CublasLibrary& cublas_library() {
  static const CublasLibrary lib = [] {
    CublasLibrary l;
    l.handle = dlopen(SDPA_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) {
      const char* why = dlerror();
      l.error = why ? why : SDPA_CUBLAS_SONAME " could not be loaded";
    }
    return l;
  }();
  return lib;
}

// The library's own `name`, or nullptr where the library (or the function) is missing.
void* cublas_symbol(const char* name) {
  const CublasLibrary& lib = cublas_library();
  return lib.handle ? dlsym(lib.handle, name) : nullptr;
}

// `function` (a cublas_symbol) called with `args`, whose types are those of the definition that
// forwards them (the header's: a definition that differs from its declaration does not compile).
template <typename... Args>
cublasStatus_t call_cublas(void* function, Args... args) {
  return function ? reinterpret_cast<cublasStatus_t (*)(Args...)>(function)(args...) : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // namespace

std::string cublas_load_error() { return cublas_library().error; }

std::string cublas_library_file() {
  Dl_info info{};
  void* const function = cublas_symbol("cublasGetProperty");
  if (!function || dladdr(function, &info) == 0 || !info.dli_fname) return "unknown";
  return info.dli_fname;
}

#endif

}  // namespace sdpa

#ifndef SDPA_STATIC_CUBLAS

// The library's function of this definition's name, resolved once, called with these arguments.
#define SDPA_CUBLAS_FORWARD(name, ...)                      \
  static void* const function = sdpa::cublas_symbol(#name); \
  return sdpa::call_cublas(function, __VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasGetProperty(libraryPropertyType type, int* value) {
  SDPA_CUBLAS_FORWARD(cublasGetProperty, type, value);
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  using GetStatusName = const char* (*)(cublasStatus_t);
  static void* const function = sdpa::cublas_symbol("cublasGetStatusName");
  if (function) return reinterpret_cast<GetStatusName>(function)(status);
  static const std::string unloaded = "CUBLAS_STATUS_NOT_INITIALIZED: " + sdpa::cublas_load_error();
  return unloaded.c_str();
}

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) { SDPA_CUBLAS_FORWARD(cublasCreate_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) { SDPA_CUBLAS_FORWARD(cublasDestroy_v2, handle); }

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  SDPA_CUBLAS_FORWARD(cublasSetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  SDPA_CUBLAS_FORWARD(cublasSetWorkspace_v2, handle, workspace, bytes);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  SDPA_CUBLAS_FORWARD(cublasSetMathMode, handle, mode);
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k, const float* alpha,
                                                      const float* A, int lda, long long int strideA, const float* B,
                                                      int ldb, long long int strideB, const float* beta, float* C,
                                                      int ldc, long long int strideC, int batchCount) {
  SDPA_CUBLAS_FORWARD(cublasSgemmStridedBatched, handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb,
                      strideB, beta, C, ldc, strideC, batchCount);
}

cublasStatus_t CUBLASWINAPI cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                const void* const Aarray[], cudaDataType Atype, int lda,
                                                const void* const Barray[], cudaDataType Btype, int ldb,
                                                const void* beta, void* const Carray[], cudaDataType Ctype, int ldc,
                                                int batchCount, cublasComputeType_t computeType,
                                                cublasGemmAlgo_t algo) {
  SDPA_CUBLAS_FORWARD(cublasGemmBatchedEx, handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype,
                      ldb, beta, Carray, Ctype, ldc, batchCount, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                       cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                       const void* A, cudaDataType Atype, int lda,
                                                       long long int strideA, const void* B, cudaDataType Btype,
                                                       int ldb, long long int strideB, const void* beta, void* C,
                                                       cudaDataType Ctype, int ldc, long long int strideC,
                                                       int batchCount, cublasComputeType_t computeType,
                                                       cublasGemmAlgo_t algo) {
  SDPA_CUBLAS_FORWARD(cublasGemmStridedBatchedEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B,
                      Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

}  // extern "C"

#undef SDPA_CUBLAS_FORWARD

#endif
