// minimizer.h: `repro minimize`: a configuration that hangs or fails, made as small as it can be
// while it still fails.
//
// Each configuration is run `runs` times, each run a `repro` process of its own (its watchdog
// names a hang; a deadline kills a run that stops answering), and it "still fails" when at least
// one run ends in one of the failure classes being minimized (by default those the given
// configuration showed). From the given configuration, passes over the steps (minimize_steps.h)
// keep every proposal that still fails, until a whole pass keeps nothing or the time budget is
// spent; then `repro report` runs on the smallest configuration.
//
// A minimization can take hours on a machine that may freeze at each hang. So its state (the
// configuration so far, every step kept and rejected, the run in flight) is written to
// OUT/state.json, atomically and fsync'd, before and after every run, and each step's progress is
// appended to OUT/progress.log (fsync'd). The run in flight carries its process's mark
// (process_mark.h). `--resume` continues from the state; a run the state says had started and
// never ended is judged by its mark: gone on the same boot (minimize was killed) it was only
// interrupted, and runs again; in flight when the machine stopped (another boot), or still there
// (stuck: it did not die with minimize), it counts as a hang, unless --in-flight retry says to run
// it again. An interrupt (SIGINT, SIGTERM) kills the run in flight, records it as interrupted (not
// counted) and exits; --resume runs it again. A --resume beside a minimization still running in
// OUT is refused.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "repro/minimize/minimize_steps.h"

namespace sdpa {

// How a run ended, as minimize classifies it: pass, mismatch, hang, error, crash, stall (the
// failure classes), refused, waived, usage, no_gpu, interrupted.
std::string run_class(int exit_code, bool timed_out);
bool is_failure_class(const std::string& c);
const std::vector<std::string>& failure_classes();  // mismatch, hang, error, crash, stall

struct MinimizeSettings {
  RunSpec original;                  // the failing configuration's run options
  int runs = 3;                      // runs per configuration; it fails if one of them does
  double budget_s = 3600;            // the whole minimization, resumes included
  double run_timeout_s = 600;        // a run's deadline (its own watchdog usually ends it first)
  std::set<std::string> fails_with;  // failure classes to keep; empty: those the original shows
  bool in_flight_retry = false;      // on --resume: run again a run in flight the machine stopped in, or stuck
  bool report = true;                // `repro report` on the smallest configuration
  std::string out_dir;
  std::string repro_binary;          // what each run runs ("" this executable; tests: a fake child)
};

// `repro minimize`'s command line as a value (triage builds one): where the configuration comes
// from (a sweep's cell, a report's failing runs, or run options) and the minimization's settings.
struct MinimizeRequest {
  std::string out_dir;
  std::string from_sweep;   // a sweep's JSON-lines file or document, with cell
  int cell = -1;
  std::string from_report;  // or a report's folder
  RunSpec run;              // or the run options themselves
  int runs = 3;
  double budget_s = 3600;
  bool resume = false, force = false;
  std::string repro_binary;
  std::vector<std::string> to_argv() const;  // "minimize", ...
};

// Minimize exit codes: 0 a smallest configuration was found (the budget may have ended it:
// progress.log and the summary say so), 1 the configuration did not fail in its first runs,
// 2 usage, 7 no usable GPU (a run said so).
int run_minimize(const MinimizeSettings& settings, bool resume);

}  // namespace sdpa
