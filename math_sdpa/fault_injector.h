// fault_injector.h: the observer that carries out an --inject spec on the GPU: in the stage and
// the call its spec names, what fault_kernel.cuh says.
#pragma once

#include <memory>

#include "fault_spec.h"

namespace sdpa {

class FaultFlag;  // fault_kernel.cuh: a .cu's only, as its kernels are

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
  std::unique_ptr<FaultFlag> flag_;
};

}  // namespace sdpa
