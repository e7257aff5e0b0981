// fault_injector.h: the observer that carries out an --inject spec on the GPU.
//
// hang: at the start of the stage, a kernel on the stage's stream spins on a flag in device
// memory that nothing sets; everything after it in the stream waits, so the stage never ends.
// The kernel gives up by itself after 120 s (read from the GPU's global timer), so a shared
// GPU never stays wedged even if the watchdog itself were gone. In an alloc_* or free_* stage
// (host calls into the allocator) the host thread itself waits instead, as long.
// slow: the same, bounded by MS milliseconds.
// error: a real CUDA error raised in the stage (a launch with 4096 threads per block, which the
// runtime rejects: cudaErrorInvalidValue on CUDA 13), reported like any other CUDA error.
#pragma once

#include <cuda_runtime.h>

#include "fault_spec.h"

namespace sdpa {

constexpr double kInjectedHangBoundSeconds = 120.0;

// How long the host waited in launching a kernel that spins for `ms` milliseconds: about `ms`
// where CUDA_LAUNCH_BLOCKING=1 took effect (each launch returns once its kernel has finished),
// microseconds otherwise. --launch-blocking measures it to show that the setting is in force.
double host_wait_for_launch_ms(double ms);

class FaultInjector : public StageObserver {
 public:
  explicit FaultInjector(const FaultSpec& spec);
  ~FaultInjector() override;
  void stage_begin(Stage stage, const std::string& detail, void* stream) override;
  void stage_end(Stage, const std::string&, void*) override {}
  // A fault injected into a stage of a graph is captured with it and happens at every replay.
  bool acts_in_capture() const override { return true; }
  // @layer=K and @step=K: the fault happens only in that call.
  void call_position(const CallPosition& position) override { position_ = position; }

 private:
  FaultSpec spec_;
  CallPosition position_;
  int* flag_ = nullptr;  // device memory, zero, never set
};

}  // namespace sdpa
