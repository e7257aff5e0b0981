// unified_pages.h: where unified memory is advised or prefetched to, and the host's reads of it
// page by page (scenarios 2 and 4). Inlined verbatim into every generated reproducer
// (repro/report/reproducer), after kernels.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels.h"

namespace sdpa {

// The host (its NUMA node 0) or GPU `device`, as cudaMemAdvise and cudaMemPrefetchAsync take it.
inline cudaMemLocation memory_location(bool host, int device) {
  cudaMemLocation l{};
  l.type = host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  l.id = host ? 0 : device;
  return l;
}

// Reads one byte of every page, so that every page not resident in host memory faults to it.
inline uint64_t host_touch(const std::vector<std::pair<void*, size_t>>& buffers) {
  uint64_t sum = 0;
  for (const auto& [ptr, bytes] : buffers) {
    const auto* p = static_cast<const volatile unsigned char*>(ptr);
    for (size_t offset = 0; offset < bytes; offset += kTouchPageBytes) sum += p[offset];
  }
  return sum;
}

}  // namespace sdpa
