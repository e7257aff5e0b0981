// fault_injector.cu
#include "fault_injector.h"

#include <chrono>
#include <thread>

#include "cuda_check.h"

namespace sdpa {

namespace {

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until *flag != 0 (never, for an injected hang) or max_ns have passed.
__global__ void spin_kernel(const volatile int* flag, unsigned long long max_ns) {
  const unsigned long long start = global_timer_ns();
  while (*flag == 0 && global_timer_ns() - start < max_ns) __nanosleep(100000);
}

__global__ void never_launched_kernel() {}

}  // namespace

double host_wait_for_launch_ms(double ms) {
  int* flag = nullptr;
  CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  spin_kernel<<<1, 1>>>(flag, static_cast<unsigned long long>(ms * 1e6));
  const double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaFree(flag));
  return waited;
}

FaultInjector::FaultInjector(const FaultSpec& spec) : spec_(spec) {
  CUDA_CHECK(cudaMalloc(&flag_, sizeof(int)));
  CUDA_CHECK(cudaMemset(flag_, 0, sizeof(int)));
}

FaultInjector::~FaultInjector() { cudaFree(flag_); }

void FaultInjector::stage_begin(Stage stage, const std::string&, void* stream_handle) {
  if (spec_.kind == FaultSpec::none || stage != spec_.stage) return;
  if ((spec_.only_layer && position_.layer != spec_.only_layer) || (spec_.only_step && position_.step != spec_.only_step)) return;
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  if (spec_.kind == FaultSpec::error) {
    never_launched_kernel<<<1, 4096, 0, stream>>>();  // > 1024 threads per block: rejected at launch
    CUDA_CHECK_LAUNCH();
    return;
  }
  const double seconds = spec_.kind == FaultSpec::hang ? kInjectedHangBoundSeconds : spec_.slow_ms / 1000.0;
  if (is_memory_stage(stage)) {
    // An allocation or free that does not return is the host thread stuck in the allocator or the
    // driver, with nothing queued on the GPU: the host waits here, bounded as the kernel is.
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return;
  }
  spin_kernel<<<1, 1, 0, stream>>>(flag_, static_cast<unsigned long long>(seconds * 1e9));
  CUDA_CHECK_LAUNCH();
}

}  // namespace sdpa
