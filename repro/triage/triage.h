// triage.h: `repro triage`, the one command to run on a machine that hangs: everything an NVIDIA
// bug needs, gathered into one archive within a time budget.
//
// In order, each step a repro process of its own (this executable), its output in OUT/<step>.log:
//   1. info       the environment block (OUT/info.json); no usable GPU ends the triage here
//   2. sweep      the scenarios, fix off and on, at the captured call (--workload-file) or the
//                 sweep's default shapes, on managed memory (OUT/sweep/)
//   3. ladder     `repro report --ladder` for each scenario no sweep cell of which hung: the
//                 training process's conditions added one rung at a time (OUT/ladder-N/)
//   4. minimize   the first hang found (a sweep cell, else a ladder's rung) made as small as it
//                 can be, and `repro report` on the smallest configuration (OUT/minimize/)
//   5. nvidia-bug-report.sh, when run as root and it is installed (OUT/nvidia-bug-report.log.gz)
//   6. OUT/SUMMARY.md: what hung, under which conditions, what fixes it, which file to attach;
//      then OUT.tar.gz, holding OUT.
// Each step gets a share of the budget left; a step past its share is stopped (SIGTERM, then
// SIGKILL) and what it finished is kept (a sweep's JSON-lines file, a minimization's state).
#pragma once

#include <string>
#include <vector>

namespace sdpa {

struct TriageSettings {
  std::string out_dir;
  double budget_s = 7200;
  std::vector<std::string> call_options;  // --workload-file F --call N, when a capture is given
  std::string scenarios = "1,2,3,4,5";
  int runs = 3;                           // minimize's runs per configuration
  double stage_timeout_s = 20;            // every run's watchdog deadline per stage
  std::string inject;                     // a fault every run gets, to test the triage itself
  bool bug_report = true;                 // nvidia-bug-report.sh when root
  std::string repro_binary;               // what info and every run run ("" this executable; tests: a fake)
};

// Triage exit codes: 0 nothing hung or failed, 1 a run failed (no hang), 3 a run hung (minimized
// and reported), 7 no usable GPU, 2 usage, 130 / 143 interrupted by SIGINT / SIGTERM (the step in
// flight stopped, the rest skipped). The archive is written in every case but usage.
int run_triage(const TriageSettings& settings);

}  // namespace sdpa
