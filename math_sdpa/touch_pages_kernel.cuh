// touch_pages_kernel.cuh: scenario 4's page-fault storm. Inlined verbatim into every generated
// reproducer of it (repro/report/reproducer), so it includes nothing from the harness.
#pragma once

#include <cstddef>

namespace sdpa {

// Reads one byte of every kPageBytes page of [data, data + bytes), so that every page not
// resident on this GPU faults; the sum goes to *sink so that the reads cannot be elided.
template <size_t kPageBytes>
__global__ void touch_pages_kernel(const unsigned char* data, size_t pages, size_t bytes, unsigned long long* sink) {
  unsigned long long sum = 0;
  for (size_t page = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; page < pages;
       page += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t offset = page * kPageBytes;
    sum += *reinterpret_cast<const volatile unsigned char*>(data + (offset < bytes ? offset : bytes - 1));
  }
  if (sum) atomicAdd(sink, sum);
}

}  // namespace sdpa
