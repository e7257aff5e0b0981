// device_info.h: what the GPU, driver and libraries are, for results and bug reports.
#pragma once

#include <cstdint>
#include <string>

namespace sdpa {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  uint64_t total_memory = 0;
  int driver_version = 0;   // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;  // cudaRuntimeGetVersion
  int cublas_version = 0;   // cublasGetVersion of the loaded library
  // The unified-memory attributes a bug report on an integrated GPU needs (cudaDeviceProp names).
  bool integrated = false;
  bool concurrent_managed_access = false;
  bool pageable_memory_access = false;
  bool pageable_memory_access_uses_host_page_tables = false;
  bool direct_managed_mem_access_from_host = false;
  bool host_native_atomic_supported = false;
};

// Throws NoGpuError when no CUDA device or driver is usable.
DeviceInfo query_device_info(int device = 0);

}  // namespace sdpa
