// run_result.h: everything one run of the harness produced, as a plain value.
//
// Runners fill it, printers (the table on stdout, the JSON file) read it; no printer computes
// anything of its own.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "math_sdpa/allocator.h"
#include "math_sdpa/device_info.h"
#include "math_sdpa/gemm.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/reference.h"
#include "math_sdpa/stage.h"
#include "repro/cli/run_options.h"
#include "repro/run/soak.h"
#include "repro/supervise/watchdog.h"

namespace sdpa {

struct StageTiming {
  std::string stage;
  int calls = 0;
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  bool host_clock = false;  // entry_sync and stream_sync are host waits, timed on the host clock
};

struct RunResult {
  RunOptions options;
  std::optional<DeviceInfo> device;
  std::string outcome = "pass";  // pass, mismatch, usage, cuda_error, no_gpu, refused, waived
  PathSettings settings;         // what the path ran with: the conditions corrected by the fixes
  std::string result_tensor;     // the tensor compared and saved: scores, probs or output
  int exit_code = 0;
  std::string error;        // one line, empty on pass
  std::string error_stage;  // the stage a CUDA error happened in
  bool checked = false;
  Comparison comparison;
  double tolerance = 0;
  int64_t nonfinite_outputs = 0;
  // Summaries of the result tensor (finite values, in double), so another program computing the
  // same function (a generated reproducer) can be compared with this run.
  double result_l2 = 0, result_sum = 0;
  int64_t result_elements = 0;
  int iterations_done = 0;
  double call_median_ms = 0, call_p10_ms = 0, call_p90_ms = 0;
  std::vector<StageTiming> stages;
  std::vector<GemmCall> gemms;
  std::vector<AllocationRecord> allocations;
  std::vector<MemorySample> memory;  // --sample-every
  SoakVerdict soak;
  double wall_seconds = 0;
  // Set by the supervisor when the run hung or its child crashed.
  std::optional<SupervisedOutcome> watchdog;
};

// Runs the path as the options say (GPU). Never throws: every failure becomes an outcome.
// With progress_fd >= 0, stage boundaries are reported there for the watchdog (watchdog.h).
RunResult run_repro(const RunOptions& options, int progress_fd = -1);

// The result of a supervised run that hung or crashed: the configuration, the device the
// child reported, and the watchdog's findings.
RunResult watchdog_result(const RunOptions& options, const SupervisedOutcome& outcome);

}  // namespace sdpa
