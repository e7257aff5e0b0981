// report_writer.h: the contents of the bug-report folder `repro report` writes: REPORT.md,
// result.json and stage.log, from the runs it made (or none, with --no-run).
//
// Host-only and free of side effects: cmd_report.cpp runs the children and writes the files;
// everything here turns values into text, so the CPU tests check the title, every section and
// the JSON against made-up runs (a hang, a pass, no GPU) without a GPU.
//
// REPORT.md follows NVIDIA's bug template: a one-line finding, the environment, the exact
// commands (harness and the single-file reproducer), the preconditions, expected and actual,
// how often, the hung stage with the flight recorder and its classification, what the hang
// snapshot saw at the moment of the hang (hang_snapshot_section.h), per-stage times,
// the fix off / fix on table, and how to collect nvidia-bug-report.sh's log.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "repro/cli/context_ladder.h"
#include "repro/cli/run_options.h"
#include "repro/info/environment.h"

namespace sdpa {

// One harness run of the report, as its child process ended.
struct ReportRun {
  bool fix_on = false;
  int repeat = 1;                         // 1..K within its fix setting
  std::vector<std::string> args;          // `repro` followed by these is the command it ran
  int exit_code = -1;                     // -1: it never ran
  double wall_s = 0;
  std::optional<nlohmann::json> result;  // its --json result (run_json.h), when it wrote one
  std::string output;                     // its stdout and stderr: table, stage log, hang report
  std::string snapshot_dir;               // its --snapshot-dir, inside the report folder ("": none given)
};

// One rung of the context ladder (`repro report --ladder`, docs/CONTEXT.md): the conditions of the
// training process it adds to the rungs below it, and what its runs found.
struct LadderRung {
  std::string name;                  // "isolated", "per-call", "layers", "ballast", "host-load", "steps"
  RunSpec options;                   // everything it adds to the scenario's options, the rungs below included
  std::string finding;               // report_finding of its runs ("" when not climbed)
  std::string outcomes;              // "fix off: 1 hang; fix on: 1 pass"
  std::string layers;                // what its runs ran: "32 of 60 (as many as fit)", "4"; "" unknown
};

struct ReportInput {
  RunOptions fix_off, fix_on;                 // the two configurations (as the children parse them)
  std::vector<std::string> args_off, args_on; // their command lines, without the binary
  RunSpec spec_off, spec_on;                  // ...as the values they were made from
  std::vector<std::string> report_argv;       // `repro report ...` as given
  int repeat = 1;
  bool no_run = false;
  std::string created_utc;                     // "2025-11-02 14:03:07 UTC"
  std::optional<Environment> environment;      // from `repro info --json`
  std::string environment_error;               // why there is none
  std::vector<ReportRun> runs;                 // in the order they ran (with --ladder: the last rung's)
  // --ladder: every rung climbed, in order, the last the one this report is about; empty without.
  std::vector<LadderRung> ladder;
};

// The rungs of the context ladder (repro/cli/context_ladder.h), not yet climbed.
std::vector<LadderRung> ladder_rungs(const ContextLadderValues& values);

// "hang", "not_reproduced", "not_exercised" (every run passed but RunOptions::caveats says they
// could not show the hypothesis), "failure" (a crash, CUDA error, mismatch... with the fix off),
// "fix_fails" (pass with the fix off, failures with it on), "no_gpu" or "waived" (every run),
// "not_run".
std::string report_finding(const ReportInput& in);
// Whether a finding is one the report is about (a hang, a stall, a failure, a refusal): the
// ladder stops climbing at a rung with one, and the title names that rung.
bool finding_ends_climb(const std::string& finding);
// One line: "Scenario 2 hangs in softmax on managed memory; fix 2 clears it".
std::string report_title(const ReportInput& in);

std::string report_markdown(const ReportInput& in);
nlohmann::json report_json(const ReportInput& in);
std::string report_stage_log(const ReportInput& in);

// "./repro --scenario 2 ... --fix off" for REPORT.md and the reproducer's comment.
std::string display_command(const std::vector<std::string>& args);

}  // namespace sdpa
