// fault_kernel.cuh: what an injected fault does where it happens (fault_injector.h says when).
// Inlined verbatim into a generated reproducer whose run injected a fault
// (repro/report/reproducer), so that its hang is the harness's, in the same stage.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "cuda_check.h"
#include "fault_spec.h"

namespace sdpa {

// An injected hang gives up by itself after this long (read from the GPU's global timer), so a
// shared GPU never stays wedged even if the watchdog itself were gone.
constexpr double kInjectedHangBoundSeconds = 120.0;

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until *flag != 0 (never, for an injected hang) or max_ns have passed.
static __global__ void spin_kernel(const volatile int* flag, unsigned long long max_ns) {
  const unsigned long long start = global_timer_ns();
  while (*flag == 0 && global_timer_ns() - start < max_ns) __nanosleep(100000);
}

static __global__ void never_launched_kernel() {}

// The flag the spinning kernel waits on: device memory, zero, never set. Made before anything is
// captured into a graph (an allocation cannot be).
class FaultFlag {
 public:
  FaultFlag() {
    CUDA_CHECK(cudaMalloc(&flag_, sizeof(int)));
    CUDA_CHECK(cudaMemset(flag_, 0, sizeof(int)));
  }
  ~FaultFlag() { cudaFree(flag_); }
  FaultFlag(const FaultFlag&) = delete;
  FaultFlag& operator=(const FaultFlag&) = delete;
  const int* get() const { return flag_; }

 private:
  int* flag_ = nullptr;
};

// Fault `f` at the start of a stage. hang: a kernel on the stage's `stream` spinning on `flag`,
// so that everything after it in the stream waits and the stage never ends; in a stage that
// allocates or frees (`host_stage`: host calls into the allocator, nothing queued on the GPU) the
// host thread itself waits instead, as long. slow: the same, bounded by its milliseconds. error:
// a real CUDA error raised in the stage (a launch with 4096 threads per block, which the runtime
// rejects: cudaErrorInvalidValue on CUDA 13), reported like any other.
static void inject_fault(const FaultSpec& f, bool host_stage, const FaultFlag& flag, cudaStream_t stream) {
  if (f.kind == FaultSpec::error) {
    never_launched_kernel<<<1, 4096, 0, stream>>>();
    CUDA_CHECK_LAUNCH();
    return;
  }
  const double seconds = f.kind == FaultSpec::hang ? kInjectedHangBoundSeconds : f.slow_ms / 1000.0;
  if (host_stage) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return;
  }
  spin_kernel<<<1, 1, 0, stream>>>(flag.get(), static_cast<unsigned long long>(seconds * 1e9));
  CUDA_CHECK_LAUNCH();
}

}  // namespace sdpa
