// error_outcome.cpp: the harness's errors as outcomes. Apart from outcome.cpp because a CUDA
// error is a type of the GPU library, and the host-only readers of results must not need it.
#include <chrono>
#include <new>

#include "math_sdpa/cuda_check.h"
#include "math_sdpa/errors.h"
#include "repro/run/outcome.h"

namespace sdpa {

void run_recording_outcome(Verdict& v, const std::function<void()>& body) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = process_cpu_seconds();
  try {
    body();
  } catch (const InputError& e) {
    v.fail(Outcome::usage, e.what());
  } catch (const NoGpuError& e) {
    v.fail(Outcome::no_gpu, e.what());
  } catch (const RefusedError& e) {
    v.fail(Outcome::refused, e.what());
  } catch (const WaivedError& e) {
    v.fail(Outcome::waived, e.what());
  } catch (const CudaError& e) {
    v.fail(Outcome::cuda_error, e.what());
    v.error_stage = e.stage;
  } catch (const std::bad_alloc&) {
    v.fail(Outcome::usage, "out of host memory for tensors of this size");
  }
  v.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  v.cpu_seconds = process_cpu_seconds() - cpu_start;
}

}  // namespace sdpa
