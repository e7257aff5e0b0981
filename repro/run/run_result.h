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
#include "math_sdpa/memory_plan.h"
#include "math_sdpa/weights_load.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/reference.h"
#include "math_sdpa/stage.h"
#include "math_sdpa/uvm_counters.h"
#include "repro/cli/run_options.h"
#include "repro/run/memory_trace.h"
#include "repro/run/outcome.h"
#include "repro/run/soak.h"
#include "repro/run/stalls.h"
#include "repro/supervise/watchdog.h"

namespace sdpa {

struct StageTiming {
  std::string stage;
  int calls = 0;
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  bool host_clock = false;  // entry_sync and stream_sync are host waits, timed on the host clock
};

// The verdict (outcome, exit code, error, check) first: every reader of a run needs it, the
// measurements after it only some.
constexpr double kLaunchBlockingProbeMs = 50;

struct RunResult : Verdict {
  RunOptions options;
  std::optional<DeviceInfo> device;
  PathSettings settings;       // what the path ran with: the conditions corrected by the fixes
  // The tensor compared and saved; unknown when the run stopped before the path was planned.
  std::optional<ResultTensor> result_tensor;
  // Summaries of the result tensor (finite values, in double), so another program computing the
  // same function (a generated reproducer) can be compared with this run.
  double result_l2 = 0, result_sum = 0;
  int64_t result_elements = 0;
  int iterations_done = 0;
  double call_median_ms = 0, call_p10_ms = 0, call_p90_ms = 0;
  std::vector<StageTiming> stages;  // over every call
  // The first call apart from the rest: cuBLAS and the driver set up on the first call, and a
  // hang or failure that only a later call shows is a class of its own. steady_* cover calls 2..N
  // (empty for a single call).
  std::vector<StageTiming> first_call_stages, steady_stages;
  double first_call_ms = 0, steady_call_median_ms = 0;
  // --check over several calls: each call's result tensor is compared bit for bit with the first
  // call's (a digest on the GPU), and the last with the float64 reference, so every call is checked.
  int calls_compared = 0;        // calls whose result was compared with the first's
  int first_differing_call = 0;  // 1-based; 0 when every call gave the same bits
  std::vector<GemmCall> gemms;
  std::vector<AllocationRecord> allocations;
  std::vector<MemorySample> memory;  // --sample-every (and --steps)
  SoakVerdict soak;
  Stalls stalls;  // stages over --stall-threshold that finished under the deadline
  // --launch-blocking: how long the host waited in launching a kernel of kLaunchBlockingProbeMs
  // (about as long where CUDA_LAUNCH_BLOCKING=1 is in force); unset without the option.
  std::optional<double> launch_blocking_probe_ms;
  // With several layers --check compares each with its own reference; the worst comparison is
  // the run's (Verdict::comparison), and this is its layer.
  int layers_checked = 0;
  int worst_layer = 0;
  // --backward: the input gradients dQ, dK, dV (in that order), each checked against the float64
  // reference's with --check (the worst layer's comparison), their non-finite values counted always.
  struct GradientCheck {
    std::string name;  // "grad_query", "grad_key", "grad_value"
    Comparison comparison;
    int worst_layer = 0;
  };
  std::vector<GradientCheck> gradient_checks;
  double gradient_tolerance = 0;
  int64_t nonfinite_gradients = 0;
  std::vector<double> step_ms;  // each pass's wall time, host clock (--steps: each step's); the first
                                // StageTimer::kMaxPasses - 1 passes and the last
  // The memory plan and what it was checked against, before anything was allocated; and what
  // the run then held. Unknown when the run stopped before the GPU was reached.
  std::optional<MemoryFacts> memory_facts;
  std::optional<MemoryPlan> plan;
  std::vector<PoolUse> pools;
  std::optional<MemoryMeasured> measured;
  // What the ballast's and the host load's threads did.
  struct ContextLoad {
    int64_t ballast_bytes = 0, ballast_host_passes = 0, ballast_gpu_passes = 0, host_load_iterations = 0;
  } context_load;
  std::optional<UvmCounts> uvm;  // --uvm-counters: "ballast" and "other" (the path's) ranges
  std::optional<WeightsLoad> weights_load;  // --mapped-weights: what the load did
  // Set by the supervisor when the run hung or its child crashed.
  std::optional<SupervisedOutcome> watchdog;
};

// Runs the path as the options say (GPU). Never throws: every failure becomes an outcome.
// With progress_fd >= 0, stage boundaries are reported there for the watchdog (watchdog.h).
RunResult run_repro(const RunOptions& options, int progress_fd = -1);

// The result of a supervised run that hung or crashed: the configuration, the device the
// child reported, and the watchdog's findings.
RunResult watchdog_result(const RunOptions& options, const SupervisedOutcome& outcome);

// The result of a run waived before it started (RunOptions::waiver): its configuration only.
RunResult waived_result(const RunOptions& options, const std::string& reason);

}  // namespace sdpa
