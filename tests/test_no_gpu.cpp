// test_no_gpu.cpp: on a machine without a GPU (CI), repro must say so and exit 7, through the
// real CUDA runtime, not a mock; without an NVIDIA driver at all, it must say that. On a machine with a GPU this test has nothing to check and
// reports itself skipped (exit 77).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "math_sdpa/errors.h"
#include "repro/run/run_result.h"

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    std::printf("SKIPPED: a GPU is present; the no-GPU exit code is only testable without one\n");
    return 77;
  }
  sdpa::RunOptions options;
  const sdpa::RunResult r = sdpa::run_repro(options);
  std::printf("outcome=%s exit=%d error=%s\n", sdpa::outcome_name(r.outcome), r.exit_code, r.error.c_str());
  // Without the driver's library at all, the error says so (the runtime alone would call the
  // driver "insufficient").
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY);
  const bool no_driver = driver == nullptr;
  if (driver) dlclose(driver);
  const bool names_driver = !no_driver || r.error == "no usable CUDA GPU: no NVIDIA driver is loaded (libcuda.so.1 not found)";
  std::printf("libcuda.so.1 %s\n", no_driver ? "absent: the error must name the missing driver" : "present");
  const bool ok = r.outcome == sdpa::Outcome::no_gpu && r.exit_code == sdpa::kExitNoGpu &&
                  r.error.find("no usable CUDA GPU") != std::string::npos && r.iterations_done == 0 && names_driver;
  std::printf("%s\n", ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
  return ok ? 0 : 1;
}
