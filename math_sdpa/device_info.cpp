// device_info.cpp
#include "device_info.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "errors.h"

namespace sdpa {

DeviceInfo query_device_info(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    throw NoGpuError(std::string("no usable CUDA GPU: ") +
                     (status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device found"));
  }
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
