// environment_query.cpp: the CUDA part of the environment block (environment.h).
//
// Versions that need no GPU come first (the runtime is linked in; cuBLAS answers
// cublasGetProperty without a device), so that a machine without a usable GPU still reports
// them; the device comes last.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <exception>

#include "repro/info/environment.h"
#include "math_sdpa/cublas_loader.h"
#include "math_sdpa/cuda_check.h"
#include "math_sdpa/errors.h"

namespace sdpa {

namespace {

int loaded_cublas_version() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return 0;
  }
  return major * 10000 + minor * 100 + patch;
}

}  // namespace

CudaVersions query_cuda_versions() {
  CudaVersions v;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = CUDART_VERSION;
  v.cublas_loaded = loaded_cublas_version();
  v.cublas_built = CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH;
#ifdef SDPA_STATIC_CUBLAS
  v.cublas_static = true;
#endif
  v.cublas_path = cublas_library_file();
  if (!cublas_load_error().empty()) v.cublas_path = "not loaded: " + cublas_load_error();
  return v;
}

Environment query_environment() {
  Environment e;
  e.host = query_host_info();
  e.cuda = query_cuda_versions();
  try {
    e.device = query_device_info(0);
  } catch (const NoGpuError& err) {
    e.gpu_error = err.what();
  } catch (const std::exception& err) {  // a CUDA error while querying a device that is there
    e.gpu_error = std::string("no usable CUDA GPU: ") + err.what();
  }
  return e;
}

}  // namespace sdpa
