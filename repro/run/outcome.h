// outcome.h: how a run of the path ends, the same for every subcommand that runs it (a plain
// run, a benchmark): the harness's errors become an outcome and an exit code (README "Exit
// codes"), and the outputs are judged (NaN never passes, with or without --check).
//
// Templates over the result type: RunResult (run_result.h) and BenchResult (bench.h) both have
// outcome, exit_code, error, error_stage, wall_seconds, nonfinite_outputs, checked, comparison,
// tolerance.
#pragma once

#include <chrono>
#include <new>
#include <string>

#include "math_sdpa/errors.h"
#include "math_sdpa/npy.h"
#include "math_sdpa/reference.h"
#include "repro/cli/run_options.h"

namespace sdpa {

// Runs body() and records how it ended in r (outcome, exit code, error, failing stage, wall time).
template <class Result, class Body>
void run_recording_outcome(Result& r, Body&& body) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](const char* outcome, int code, const std::string& message) {
    r.outcome = outcome;
    r.exit_code = code;
    r.error = message;
  };
  try {
    body();
  } catch (const InputError& e) {
    fail("usage", kExitUsage, e.what());
  } catch (const NoGpuError& e) {
    fail("no_gpu", kExitNoGpu, e.what());
  } catch (const RefusedError& e) {
    fail("refused", kExitRefused, e.what());
  } catch (const WaivedError& e) {
    fail("waived", kExitWaived, e.what());
  } catch (const CudaError& e) {
    fail("cuda_error", kExitCudaError, e.what());
    r.error_stage = e.stage;
  } catch (const std::bad_alloc&) {
    fail("usage", kExitUsage, "out of host memory for tensors of this size");
  }
  r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The result tensor of a finished run: written to --save-output, and with --check compared with
// the float64 reference computed from the same inputs (r.checked, r.tolerance, r.comparison).
template <class Result>
void save_and_check_result(Result& r, const RunOptions& o, const HostInputs& inputs, const std::vector<float>& result) {
  const SdpaProblem& p = o.problem;
  if (!o.save_output_path.empty()) {
    const int64_t last = r.result_tensor == "output" ? p.head_dim : p.kv_len;
    write_npy_float32(o.save_output_path, {p.batch, p.q_heads, p.q_len, last}, result.data());
  }
  if (o.check) {
    r.checked = true;
    r.tolerance = tolerance_for(p.dtype, p.precision);
    r.comparison = compare_to_reference(result, reference_tensor(p, inputs, r.result_tensor));
  }
}

// A mismatch when any output is not finite, or (with --check) the error exceeds the tolerance.
// `where` names what was scanned for non-finite values, e.g. "output" or "outputs of the input sets".
template <class Result>
void judge_outputs(Result& r, const std::string& where) {
  if (r.nonfinite_outputs == 0 && !(r.checked && !r.comparison.passed(r.tolerance))) return;
  r.outcome = "mismatch";
  r.exit_code = kExitMismatch;
  r.error = r.nonfinite_outputs > 0
                ? std::to_string(r.nonfinite_outputs) + " non-finite values in the " + where
                : "relative error " + std::to_string(r.comparison.rel_error) + " exceeds " + std::to_string(r.tolerance);
}

}  // namespace sdpa
