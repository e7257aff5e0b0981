// device_info.cpp
#include "device_info.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include "cuda_check.h"
#include "errors.h"

namespace sdpa {

namespace {

// Why no device is usable, in words that say what to fix.
std::string no_gpu_reason(cudaError_t status) {
  if (status == cudaSuccess) return "no CUDA device found";
  // Without the driver's user-space library the runtime says its version is "insufficient",
  // which reads as an old driver rather than none: look for the library as the runtime does.
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(driver);
  } else {
    return "no NVIDIA driver is loaded (libcuda.so.1 not found)";
  }
  std::string reason = cudaGetErrorString(status);
  struct stat module {};
  if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
    if (stat("/proc/driver/nvidia", &module) != 0) reason += " (no /proc/driver/nvidia: the NVIDIA kernel module is not loaded)";
  }
  return reason;
}

}  // namespace

DeviceInfo query_device_info(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) throw NoGpuError("no usable CUDA GPU: " + no_gpu_reason(status));
  DeviceInfo d;
  d.index = device;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.total_memory = prop.totalGlobalMem;
  d.integrated = prop.integrated != 0;
  d.concurrent_managed_access = prop.concurrentManagedAccess != 0;
  d.pageable_memory_access = prop.pageableMemoryAccess != 0;
  d.pageable_memory_access_uses_host_page_tables = prop.pageableMemoryAccessUsesHostPageTables != 0;
  d.direct_managed_mem_access_from_host = prop.directManagedMemAccessFromHost != 0;
  d.host_native_atomic_supported = prop.hostNativeAtomicSupported != 0;
  CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  int major = 0, minor = 0, patch = 0;  // of the cuBLAS library actually loaded
  CUDA_CHECK(cublasGetProperty(MAJOR_VERSION, &major));
  CUDA_CHECK(cublasGetProperty(MINOR_VERSION, &minor));
  CUDA_CHECK(cublasGetProperty(PATCH_LEVEL, &patch));
  d.cublas_version = major * 10000 + minor * 100 + patch;
  return d;
}

}  // namespace sdpa
