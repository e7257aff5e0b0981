// run_options.h: the command line of a run (`repro [options]`), parsed into a RunOptions value.
//
// Parsing is host-only and separate from running, so every option and every bad-input case is
// tested in CI without a GPU (tests/test_options.cpp). The subcommands (report, sweep, bench)
// take the same run options through RunOptionParser, so a run, a report and a benchmark of
// "--scenario 2 --dtype fp16" mean the same thing.
//
// Settings are decided in this order: defaults, the scenario's preconditions (scenarios/), the
// explicit options (--gemm-stream, --alloc, ...), then the fixes (--fix on, --fixes), which
// correct whatever the scenario set up.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fixes/fix_list.h"
#include "math_sdpa/fault_spec.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/stage_log.h"
#include "repro/cli/hang_options.h"
#include "repro/common/text.h"

namespace CLI {
class App;
}

namespace sdpa {

struct RunOptions {
  int scenario = 0;
  std::string workload;       // --workload, or the scenario's default workload; "" for none
  SdpaProblem problem;
  bool dtype_given = false;   // --dtype on the command line (else --inputs files decide)
  PathSettings conditions;    // the scenario's preconditions and the explicit options, before fixes
  bool own_fix = false;       // --fix on: the scenario's own fix
  FixSet fixes;               // every fix applied (--fix on and --fixes); change with set_fixes
  PathSettings settings;      // what the path runs with: the conditions corrected by the fixes
  bool allow_oversubscription = false;
  int iters = 1;
  int sample_every = 0;  // soak: sample memory every N calls (0 = never)
  bool check = false;
  std::string json_path;
  std::string inputs_dir;
  std::string save_output_path;
  LogLevel log = LogLevel::off;
  LogFormat log_format = LogFormat::harness;
  double stage_timeout_s = 20;  // per-stage deadline of the watchdog
  double run_timeout_s = 0;     // whole-run deadline; 0 = none
  bool no_fork = false;         // watchdog thread in this process instead of a supervising parent
  HangOptions hang;             // what a hang does: snapshot, kill or keep; the durable log
  FaultSpec inject;
  // Non-empty when the scenario cannot be exercised under these conditions (scenario_waiver):
  // the run ends as waived (exit 6) before the GPU is touched.
  std::string waiver;
  std::vector<std::string> argv;  // the command line as given, for results and reports

  // Applies `set` to the conditions: fixes and settings, decided once here and read everywhere
  // else (each fix's settings are host-only data, fixes/fix.h).
  void set_fixes(const FixSet& set);
};

// Adds the options of a run to a CLI11 app; finish() turns what was parsed into RunOptions.
class RunOptionParser {
 public:
  explicit RunOptionParser(CLI::App& app);
  ~RunOptionParser();
  // Throws InputError (one line) on values that are individually valid but wrong together.
  RunOptions finish(int argc, const char* const* argv) const;

 private:
  struct Fields;
  std::unique_ptr<Fields> f_;
};

// What parsing decided: run with `options`, or exit now with `exit_code` after printing
// `message` (help text on stdout for --help, one error line on stderr otherwise).
struct ParseResult {
  bool run = false;
  int exit_code = 0;
  std::string message;
  RunOptions options;
};

// The plain run: `repro [options]`.
ParseResult parse_command_line(int argc, const char* const* argv);

// Parses argv into `app`, turning --help into exit 0 with the help text and every parse error
// into exit 2 with one line ("<program>: error: ..."); returns true when parsing succeeded.
bool parse_app(CLI::App& app, int argc, const char* const* argv, const std::string& program, ParseResult& result);

}  // namespace sdpa
