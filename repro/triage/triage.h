// triage.h: `repro triage`, the one command to run on a machine that hangs: everything an NVIDIA
// bug needs, gathered into one archive within a time budget.
//
// A triage is a list of steps (plan_triage), each a repro process of its own (this executable),
// its output in OUT/<step>.log:
//   1. info       the environment block (OUT/info.json); no usable GPU ends the triage here
//   2. sweep      the scenarios, fix off and on, at the captured call (--workload-file) or the
//                 sweep's default shapes, on managed memory (OUT/sweep/)
//   3. ladder-N   `repro report --ladder` for each scenario no sweep cell of which hung: the
//                 training process's conditions added one rung at a time (OUT/ladder-N/); a
//                 scenario whose record leaves the ladder out is said to be left out, and why
//   4. minimize   the first hang found (a sweep cell, else a ladder's rung) made as small as it
//                 can be, and `repro report` on the smallest configuration (OUT/minimize/)
//   5. nvidia-bug-report.sh, when run as root and it is installed (OUT/nvidia-bug-report.log.gz)
//   6. OUT/SUMMARY.md: what hung, under which conditions, what fixes it, which file to attach;
//      then OUT.tar.gz, holding OUT.
// Each step is a typed command (SweepOptions, ReportRequest, MinimizeRequest) rendered to argv once.
// Before the first step runs, every step's command is built and checked exactly as its child would
// check it: a step that cannot run is said at once (on stdout, in SUMMARY.md under its own heading,
// and in the exit code), not when the triage reaches it. `--dry-run` prints that plan and runs
// nothing. Each step gets a share of the budget left; a step past its share is stopped (SIGTERM,
// then SIGKILL) and what it finished is kept (a sweep's JSON-lines file, a minimization's state).
// Where nothing was found, the ladders cut at their share go on with the time no minimization takes.
//
// OUT/triage.json (written atomically before and after every step, and once the step's process
// runs) holds the options, the time spent, the triage's own process and each step's state with its
// process (process_mark.h: the boot, pid and start time, and the tag every process the step starts
// carries), so that `repro triage --out OUT --resume` continues a triage that was interrupted,
// killed, cut by its budget, or stopped with the machine. A step that ended is not run again; one
// stopped at its share of the budget goes on where it stopped while the budget has time for it
// (`--resume --budget TIME` gives the continuation TIME more); one interrupted goes on too (a sweep,
// a ladder from the rung it reached, a minimization). One left in flight by a triage that stopped
// without a word is judged by its processes: gone on this boot (the triage was killed), it was
// interrupted and goes on; the machine booted since (a freeze, a reboot), it is not run again, since
// it may be what stopped the machine: SUMMARY.md names it (for the sweep, each cell that was
// running, with its log's last stage record) as the place the machine stopped, a hang (exit 3);
// its processes still there (they did not die with the triage: stuck in the driver), it is a hang,
// not run again, its processes left as they are. A minimization in flight goes on either way but
// stuck (it judges its own run in flight). A --resume beside the triage still running is refused.
//
// SUMMARY.md says first what the triage did not reach (steps cut at their share, interrupted, not
// started) and the command that continues it, and so do its last lines on stdout.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "repro/cli/hang_options.h"
#include "repro/cli/run_spec.h"

namespace sdpa {

struct TriageSettings {
  std::string out_dir;
  double budget_s = 7200;
  RunSpec capture;                        // --workload-file F --call N, when a capture is given
  std::vector<int> scenarios;             // to sweep and climb (default: the records' default_triage_scenarios)
  int runs = 3;                           // minimize's runs per configuration
  double stage_timeout_s = kDefaultStageTimeoutS;  // every run's watchdog deadline per stage
  std::string inject;                     // a fault every run gets, to test the triage itself
  bool bug_report = true;                 // nvidia-bug-report.sh when root
  std::string repro_binary;               // what info and every run run ("" this executable; tests: a fake)
  bool resume = false;                    // continue the triage in out_dir (resumed_settings)
  double spent_before_s = 0;              // the time the triage in out_dir spent before (resumed)
};

// No step runs for less than this, whatever its share of the budget left.
constexpr double kMinStepSeconds = 30;
// A child run's start before its first stage: the process, its CUDA context, cuBLAS's handle.
constexpr double kRunStartS = 5;
// A step's time: its share of what is left of the budget, at least kMinStepSeconds (the run and
// the dry-run's plan both use it).
inline double step_seconds(double budget_left_s, double share) { return std::max(kMinStepSeconds, budget_left_s * share); }

// One step as planned before the first runs.
struct TriageStep {
  std::string name;        // "info", "sweep", "ladder-2", "minimize", "nvidia-bug-report"
  std::string what;        // one line: what it does
  std::string when;        // "" always; else the condition it runs under ("no sweep cell of scenario 2 hung")
  double share = 0;        // of the budget left when it starts
  std::string program = "repro";  // "repro" (this executable, or --repro-binary for info) or the tool it runs
  std::vector<std::string> argv;  // its command after the program; a template where its input is found on the way
  std::string left_out;    // why it does not run, by design (a scenario's record, no root): said, not an error
  std::string cannot_run;  // the one line its command would be refused with: an error of the triage
  // Predicted seconds before it has a first result (a sweep's first cell, a ladder's first rung,
  // a minimization's first configuration run --runs times, each a hang); 0: not predicted. A share
  // shorter than that is said before the step starts.
  double first_result_s = 0;
};

// Every step of the triage `settings` describes, each command checked as its child would check it.
std::vector<TriageStep> plan_triage(const TriageSettings& settings);

// `repro triage --dry-run`: the plan on stdout, one block a step; exit 0 when every step can run,
// 2 when one cannot. Writes nothing, needs no GPU.
int print_triage_plan(const TriageSettings& settings);

// The settings of the triage that wrote OUT/triage.json, to continue it (`--resume`), with
// `more_budget_s` (--budget given again) the time this continuation may take beyond what was spent;
// a missing or unreadable file, or that triage still running, is an InputError.
TriageSettings resumed_settings(const std::string& out_dir, std::optional<double> more_budget_s = std::nullopt);

// Triage exit codes: 0 nothing hung or failed and every step could run, 1 a run failed (no hang),
// 2 a step could not run (its command was refused: SUMMARY.md says which and why) or usage,
// 3 a run hung (minimized and reported), 7 no usable GPU, 130 / 143 interrupted by SIGINT /
// SIGTERM (the step in flight stopped, the rest skipped). The archive is written in every case
// but usage.
int run_triage(const TriageSettings& settings);

}  // namespace sdpa
