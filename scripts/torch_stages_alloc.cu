// torch_stages_alloc.cu: the host-side helper library of scripts/torch_stages.py, built by the
// script at first use (nvcc -shared, or g++ with the CUDA runtime) and loaded twice: by PyTorch's
// torch.cuda.memory.CUDAPluggableAllocator (sdpa_managed_malloc / sdpa_managed_free: every tensor
// PyTorch allocates is then cudaMallocManaged memory, the unified-memory condition of the
// scenarios, inside PyTorch), and through ctypes for what PyTorch has no call for: the device's
// concurrentManagedAccess, reading the pages of managed memory from the host (scenarios 2 and 4),
// cudaMemPrefetchAsync (fix 2). ctypes releases the GIL around each call, so a host read that
// stalls on a page fault never stops the script's watchdog thread.
//
// Plain C ABI and runtime API only, no kernels: the same file builds with nvcc or with a host
// compiler (-x c++ -I<cuda>/include -lcudart), with -I at the source folder for math_sdpa/.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sys/types.h>

#include "math_sdpa/bf16_bits.h"  // self-contained, as for the generated reproducers
#include "math_sdpa/fp16_bits.h"

namespace {

std::atomic<long long> g_allocations{0}, g_frees{0}, g_live_bytes{0}, g_peak_bytes{0}, g_failures{0};

}  // namespace

extern "C" {

// PyTorch's pluggable-allocator signatures (torch/csrc/cuda/CUDAPluggableAllocator.h).
void* sdpa_managed_malloc(ssize_t size, int device, cudaStream_t /*stream*/) {
  if (size <= 0) return nullptr;
  int current = -1;
  cudaGetDevice(&current);
  if (current != device) cudaSetDevice(device);
  void* ptr = nullptr;
  // cudaMemAttachGlobal: any stream may touch it, as the scenarios' tensors are.
  const cudaError_t status = cudaMallocManaged(&ptr, static_cast<size_t>(size), cudaMemAttachGlobal);
  if (current != device && current >= 0) cudaSetDevice(current);
  if (status != cudaSuccess) {
    ++g_failures;
    std::fprintf(stderr, "torch_stages_alloc: cudaMallocManaged(%zd bytes, device %d) failed: %s\n", size, device,
                 cudaGetErrorString(status));
    return nullptr;  // PyTorch reports it as an out-of-memory error
  }
  ++g_allocations;
  const long long live = g_live_bytes += size;
  long long peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return ptr;
}

void sdpa_managed_free(void* ptr, ssize_t size, int /*device*/, cudaStream_t /*stream*/) {
  if (!ptr) return;
  // cudaFree waits for the device, so no kernel still using the block outlives it.
  const cudaError_t status = cudaFree(ptr);
  if (status != cudaSuccess) {
    std::fprintf(stderr, "torch_stages_alloc: cudaFree(%p) failed: %s\n", ptr, cudaGetErrorString(status));
  }
  ++g_frees;
  g_live_bytes -= size;
}

// allocations, frees, live bytes, peak live bytes, failed allocations.
void sdpa_managed_stats(long long out[5]) {
  out[0] = g_allocations;
  out[1] = g_frees;
  out[2] = g_live_bytes;
  out[3] = g_peak_bytes;
  out[4] = g_failures;
}

// cudaDevAttrConcurrentManagedAccess: may the host touch managed memory while kernels run?
// -1 when the query fails.
int sdpa_concurrent_managed_access(int device) {
  int value = 0;
  return cudaDeviceGetAttribute(&value, cudaDevAttrConcurrentManagedAccess, device) == cudaSuccess ? value : -1;
}

// Reads one byte of every `page` bytes, so that every page not resident in host memory faults
// to it; returns their sum so the reads are not optimised away.
unsigned long long sdpa_touch_pages(const void* ptr, size_t bytes, size_t page) {
  const volatile unsigned char* p = static_cast<const volatile unsigned char*>(ptr);
  unsigned long long sum = 0;
  for (size_t offset = 0; offset < bytes; offset += page) sum += p[offset];
  return sum;
}

// Reads every element (dtype 0 fp32, 1 bf16, 2 fp16) and returns min and max through out[2],
// as the original instrumentation printed them, but from the host: every page is read.
void sdpa_host_min_max(const void* ptr, size_t count, int dtype, double out[2]) {
  float lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < count; ++i) {
    float x;
    if (dtype == 0) {
      x = static_cast<const volatile float*>(ptr)[i];
    } else {
      const uint16_t h = static_cast<const volatile uint16_t*>(ptr)[i];
      x = dtype == 1 ? sdpa::bf16_bits_to_float(h) : sdpa::fp16_bits_to_float(h);
    }
    if (x < lo) lo = x;
    if (x > hi) hi = x;
  }
  out[0] = lo;
  out[1] = hi;
}

// cudaMemPrefetchAsync of [ptr, ptr + bytes) to `device` on `stream`; the cudaError_t.
int sdpa_prefetch_to_device(void* ptr, size_t bytes, int device, cudaStream_t stream) {
#if CUDART_VERSION >= 13000
  cudaMemLocation where{};
  where.type = cudaMemLocationTypeDevice;
  where.id = device;
  return static_cast<int>(cudaMemPrefetchAsync(ptr, bytes, where, 0, stream));
#else
  return static_cast<int>(cudaMemPrefetchAsync(ptr, bytes, device, stream));
#endif
}

const char* sdpa_error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // extern "C"
