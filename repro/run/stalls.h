// stalls.h: a stage that took seconds but finished: the investigation's key symptom (a stuck
// page migration) before, or instead of, a hang. Host-only.
//
// The watchdog's deadline (20 s by default) decides what is a hang; a stage over the stall
// threshold (1 s by default, --stall-threshold) but under the deadline is a stall. A run is
// judged per pass of the path (a call, or a step's calls over its layers), by the longest single
// run of one stage in it (StageLongest): a GPU stage over the threshold is the stall, else a host
// stage (a synchronisation, an allocation). A GPU stage is preferred because the synchronisation
// after it waits for it: the stage is the cause, the wait its symptom. Only the path's stages are
// judged: StageLongest::add never counts the harness's own work (scenario 2's host access to the
// pages, the weights' load before the first call), so neither is a stall however long it takes,
// and an allocation is one (it is PyTorch's, and may stall on unified memory). A run whose every pass
// stalled ends as `stalled` (exit 9): a finding, not a pass; one with some stalled passes passes,
// and says which.
#pragma once

#include <string>
#include <vector>

#include "math_sdpa/stage.h"

namespace sdpa {

struct StallRecord {
  int call = 0;       // 1-based pass
  std::string stage;
  double ms = 0;
};

struct Stalls {
  double threshold_s = 0;  // 0: not judged
  int calls = 0;           // passes judged
  int calls_stalled = 0;
  std::vector<StallRecord> records;  // the first kMaxRecords stalled passes
  StallRecord longest;               // the longest stall of the run (call 0: none)
  static constexpr size_t kMaxRecords = 64;

  bool any() const { return calls_stalled > 0; }
  bool every_call() const { return calls > 0 && calls_stalled == calls; }
  // "softmax 3012.4 ms in call 1 (1 of 5 calls over 1.0 s)"; "" when none.
  std::string summary() const;
};

Stalls judge_stalls(const std::vector<StageLongest>& passes, double threshold_s);

}  // namespace sdpa
