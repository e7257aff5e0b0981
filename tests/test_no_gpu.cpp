// test_no_gpu.cpp: on a machine without a GPU (CI), repro must say so and exit 7, through the
// real CUDA runtime, not a mock. On a machine with a GPU this test has nothing to check and
// reports itself skipped (exit 77).
#include <cuda_runtime.h>

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
  const bool ok = r.outcome == sdpa::Outcome::no_gpu && r.exit_code == sdpa::kExitNoGpu &&
                  r.error.find("no usable CUDA GPU") != std::string::npos && r.iterations_done == 0;
  std::printf("%s\n", ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
  return ok ? 0 : 1;
}
