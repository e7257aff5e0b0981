// path_observers.h: what watches a path of a run or a benchmark, attached in one order.
//
// A run has one path, a benchmark one per input set and configuration; both attach the same
// observers the same way, so a benchmark's stage log, NVTX ranges, injected faults and the
// watchdog's view of it are those of a plain run.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "fixes/fix.h"
#include "math_sdpa/allocator.h"
#include "math_sdpa/fault_injector.h"
#include "math_sdpa/pipeline.h"
#include "math_sdpa/stage_log.h"
#include "repro/cli/run_options.h"
#include "repro/run/progress_reporter.h"

namespace sdpa {

struct PathObservers {
  ProgressReporter* reporter = nullptr;  // the watchdog's; null when nothing supervises
  StageLogger* logger = nullptr;         // null with --log off
  StageObserver* nvtx = nullptr;
  StageObserver* timer = nullptr;
  FaultInjector* injector = nullptr;  // --inject
  StageObserver* memory = nullptr;    // --memory-trace
  // At --log stages, the reporter marks GPU stage starts and ends in the logger (a run: one path,
  // one log; the caller stops the marks before the logger goes).
  bool mark_gpu_stages = false;
};

// Attaches the observers in the order they must see each boundary: the watchdog's reporter
// first (the supervisor must hear of a stage before anything in it can hang), the injected fault
// last; then the fixes, and the instrumentation --log asks for. The logger is first told of the
// allocator's records from `first_allocation` on (those of this path) and of the path's set-up.
// With mark_gpu_stages, at level `stages`, the reporter also marks GPU stage starts and ends in
// the log; the sdpa-debug format adds the original instrumentation's own device synchronisations.
void attach_observers(MathSdpa& path, const PathObservers& observers, const std::vector<std::unique_ptr<Fix>>& fixes,
                      const Allocator& allocator, size_t first_allocation, LogLevel log, LogFormat format);

}  // namespace sdpa
