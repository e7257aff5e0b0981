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
//
// OUT/triage.json (written atomically before and after every step) holds the options, the time
// spent and each step's state, so that `repro triage --out OUT --resume` continues a triage that
// was interrupted, killed, or stopped with the machine: a step that ended is not run again; one
// that was interrupted runs again, continuing (a sweep or a minimization resumes); one that was
// running when the triage stopped without a word (a freeze, a reboot, SIGKILL) is not run again,
// since it may be what stopped the machine: SUMMARY.md names it (for the sweep, each cell that was
// running, with its log's last stage record) as the place the machine stopped, a hang (exit 3);
// a minimization in flight resumes (it counts its own run in flight as a hang).
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
  bool resume = false;                    // continue the triage in out_dir (resumed_settings)
  double spent_before_s = 0;              // the time the triage in out_dir spent before (resumed)
};

// The settings of the triage that wrote OUT/triage.json, to continue it (`--resume`); a missing or
// unreadable file is an InputError.
TriageSettings resumed_settings(const std::string& out_dir);

// Triage exit codes: 0 nothing hung or failed, 1 a run failed (no hang), 3 a run hung (minimized
// and reported), 7 no usable GPU, 2 usage, 130 / 143 interrupted by SIGINT / SIGTERM (the step in
// flight stopped, the rest skipped). The archive is written in every case but usage.
int run_triage(const TriageSettings& settings);

}  // namespace sdpa
