// fault_injector.cu
#include "fault_injector.h"

#include "fault_kernel.cuh"

namespace sdpa {

double host_wait_for_launch_ms(double ms) {
  const FaultFlag flag;
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  spin_kernel<<<1, 1>>>(flag.get(), static_cast<unsigned long long>(ms * 1e6));
  const double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  return waited;
}

FaultInjector::FaultInjector(const FaultSpec& spec) : spec_(spec), flag_(std::make_unique<FaultFlag>()) {}
FaultInjector::~FaultInjector() = default;

void FaultInjector::stage_begin(Stage stage, const std::string&, void* stream) {
  if (spec_.kind == FaultSpec::none || stage != spec_.stage || !spec_.fires_at(position_)) return;
  inject_fault(spec_, is_memory_stage(stage), *flag_, static_cast<cudaStream_t>(stream));
}

}  // namespace sdpa
