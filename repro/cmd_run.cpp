// cmd_run.cpp: `repro [options]`, one configuration.
//
// Parses the command line and runs the path in a supervised child process (supervisor.h): the
// parent never calls CUDA and reports a hang (exit 3) or a crash (exit 5) with the hung stage,
// the flight recorder and the tail of the stage log. With --no-fork the path runs in this
// process under a watchdog thread. The summary table goes to stdout, errors as one line to
// stderr, --json is written atomically, and the exit code is the documented one
// (math_sdpa/errors.h, README "Exit codes").
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "commands.h"
#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "options.h"
#include "report_text.h"
#include "result_json.h"
#include "run_result.h"
#include "supervisor.h"

namespace sdpa {

namespace {

// Prints and writes a finished result; returns its exit code.
int publish(const RunResult& result) {
  std::cout << result_to_text(result) << std::flush;
  if (!result.error.empty()) std::cerr << "repro: " << result.outcome << ": " << result.error << "\n";
  if (!result.options.json_path.empty()) {
    try {
      write_file_atomic(result.options.json_path, result_to_json(result).dump(2) + "\n");
    } catch (const InputError& e) {
      std::cerr << "repro: error: " << e.what() << "\n";
      return result.exit_code ? result.exit_code : kExitUsage;
    }
  }
  return result.exit_code;
}

}  // namespace

int run_main(int argc, char** argv) {
  const ParseResult parsed = parse_command_line(argc, argv);
  if (!parsed.run) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  const RunOptions& options = parsed.options;
  SupervisorOptions watch;
  watch.stage_timeout_s = options.stage_timeout_s;
  watch.run_timeout_s = options.run_timeout_s;
  auto report_hang = [&](const SupervisedOutcome& outcome) {
    std::cerr << hang_report_text(outcome, configuration_line(options), options.stage_timeout_s) << std::flush;
    return publish(watchdog_result(options, outcome));
  };
  try {
    if (options.no_fork) {
      const int fd = start_in_process_watchdog(watch, [&](const SupervisedOutcome& o) { report_hang(o); });
      const RunResult result = run_repro(options, fd);
      close(fd);
      return publish(result);
    }
    const SupervisedOutcome outcome = supervise(
        [&](int fd) {
          const RunResult result = run_repro(options, fd);
          close(fd);
          return publish(result);
        },
        watch);
    if (outcome.kind == SupervisedOutcome::exited) return outcome.child_exit_code;
    return report_hang(outcome);
  } catch (const InputError& e) {  // pipes or fork failed
    std::cerr << "repro: error: " << e.what() << "\n";
    return kExitUsage;
  }
}

}  // namespace sdpa
