// cmd_bench.cpp: `repro bench`, the benchmark (bench.h).
//
// Runs the benchmark in a supervised child process, exactly as a plain run (cmd_run.cpp): the
// parent never calls CUDA, and a hang in any stage of any timed call is reported like a run's
// (exit 3, the stage named and classified, the flight recorder), with --json written all the
// same. With --no-fork it runs in this process under a watchdog thread.
#include <iostream>

#include "repro/bench/bench.h"
#include "repro/commands.h"
#include "repro/supervise/supervised_command.h"

namespace sdpa {

int bench_main(int argc, char** argv) {
  const BenchParse parsed = parse_bench_command_line(argc, argv);
  if (!parsed.run) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  const BenchOptions& options = parsed.options;
  SupervisedCommand<BenchResult> command;
  command.name = "repro bench";
  command.run = &options.run;
  command.configuration = bench_configuration_line(options);
  command.work = [&](int fd) { return run_bench(options, fd); };
  command.hang_result = [&](const SupervisedOutcome& o) { return bench_watchdog_result(options, o); };
  command.waived_result = [&](const std::string& reason) {
    BenchResult r;
    r.options = options;
    r.fail(Outcome::waived, reason);
    return r;
  };
  command.to_text = bench_to_text;
  command.to_json = bench_to_json;
  return run_supervised_command(command);
}

}  // namespace sdpa
