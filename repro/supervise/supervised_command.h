// supervised_command.h: the frame of every subcommand that runs the path (a plain run, a
// benchmark): the work runs in a supervised child process (supervisor.h), so the parent never
// calls CUDA and a hang in any stage is reported the same way (exit 3, the stage named and
// classified, the flight recorder, the hang snapshot of --on-hang; a crash exits 5); with
// --no-fork it runs in this process under a watchdog thread. The result's table goes to stdout,
// its error as one line to stderr, --json is written atomically whatever the outcome, and the
// exit code is the result's. A run whose scenario is waived under its conditions
// (RunOptions::waiver) ends as waived at once.
#pragma once

#include <unistd.h>

#include <functional>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "repro/cli/run_options.h"
#include "repro/supervise/child_process.h"
#include "repro/supervise/supervisor.h"
#include "repro/supervise/watchdog.h"
#include "scenarios/hang_classification.h"

namespace sdpa {

template <class Result>
struct SupervisedCommand {
  std::string name;             // prefix of its error lines: "repro", "repro bench"
  const RunOptions* run;        // timeouts, --no-fork, --json
  std::string configuration;    // one line naming what ran, for the hang report
  std::function<Result(int progress_fd)> work;
  std::function<Result(const SupervisedOutcome&)> hang_result;  // what a hang or crash reports
  std::function<Result(const std::string& reason)> waived_result;  // a run waived before it started
  std::function<std::string(const Result&)> to_text;
  std::function<nlohmann::json(const Result&)> to_json;
};

// Prints and writes a finished result; returns its exit code.
template <class Result>
int publish_result(const SupervisedCommand<Result>& c, const Result& result) {
  std::cout << c.to_text(result) << std::flush;
  if (!result.error.empty()) std::cerr << c.name << ": " << result.outcome << ": " << result.error << "\n";
  if (!c.run->json_path.empty()) {
    try {
      write_file_atomic(c.run->json_path, c.to_json(result).dump(2) + "\n");
    } catch (const InputError& e) {
      std::cerr << c.name << ": error: " << e.what() << "\n";
      return result.exit_code ? result.exit_code : kExitUsage;
    }
  }
  return result.exit_code;
}

template <class Result>
int run_supervised_command(const SupervisedCommand<Result>& c) {
  SupervisorOptions watch;
  watch.stage_timeout_s = c.run->stage_timeout_s;
  watch.run_timeout_s = c.run->run_timeout_s;
  watch.hang = c.run->hang;
  watch.snapshot_dir = c.run->hang.snapshot_dir.empty() ? default_snapshot_dir(c.run->json_path) : c.run->hang.snapshot_dir;
  watch.log_header = shell_command(c.run->argv);
  auto report_hang = [&](const SupervisedOutcome& outcome) {
    Stage stage;
    const std::string classification =
        parse_stage(outcome.stage, stage)
            ? classify_hang(stage, c.run->problem, c.run->settings,
                            outcome.snapshot ? hang_evidence(outcome.snapshot->summary) : HangEvidence{})
                  .summary()
            : "";
    std::cerr << hang_report_text(outcome, c.configuration, c.run->stage_timeout_s, classification) << std::flush;
    return publish_result(c, c.hang_result(outcome));
  };
  auto work_and_publish = [&](int fd) {
    const Result result = c.work(fd);
    close(fd);
    return publish_result(c, result);
  };
  // A waiver is decided from the command line: nothing is forked and the GPU is not touched.
  if (!c.run->waiver.empty()) return publish_result(c, c.waived_result(c.run->waiver));
  try {
    if (c.run->no_fork) {
      return work_and_publish(start_in_process_watchdog(watch, [&](const SupervisedOutcome& o) { report_hang(o); }));
    }
    const SupervisedOutcome outcome = supervise(work_and_publish, watch);
    if (outcome.kind == SupervisedOutcome::exited) return outcome.child_exit_code;
    return report_hang(outcome);
  } catch (const InputError& e) {  // pipes or fork failed
    std::cerr << c.name << ": error: " << e.what() << "\n";
    return kExitUsage;
  }
}

}  // namespace sdpa
