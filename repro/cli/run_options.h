// run_options.h: the command line of a run (`repro [options]`), parsed into a RunOptions value.
//
// Parsing is host-only and separate from running, so every option and every bad-input case is
// tested in CI without a GPU (tests/test_options.cpp). The subcommands (report, bench) take the
// same run options through RunOptionParser, so a run, a report and a benchmark of
// "--scenario 2 --dtype fp16" mean the same thing; each registers only the ones it accepts.
//
// Settings are decided in this order: defaults, the scenario's preconditions (scenarios/), the
// explicit options (--gemm-stream, --alloc, ...), then the fixes (--fix on, --fixes), which
// correct whatever the scenario set up.
//
// Everything a run would otherwise find out only after its GPU work is found out here, before
// the GPU is touched: --inputs files are read and checked (the child runs on the tensors read
// here), every output path is checked to be writable, and an option the configuration would
// ignore is refused. Each is a usage error: exit 2, one line, nothing written.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fixes/fix_list.h"
#include "math_sdpa/context.h"
#include "math_sdpa/fault_spec.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/stage_log.h"
#include "repro/cli/hang_options.h"
#include "repro/cli/run_spec.h"
#include "repro/common/text.h"

namespace CLI {
class App;
}

namespace sdpa {

struct RunOptions {
  int scenario = 0;
  std::string workload;       // --workload, or the scenario's default workload; "" for none
  SdpaProblem problem_given;  // what the command line asks to compute
  SdpaProblem problem;        // what the path computes: problem_given as the fixes adjust it
  bool dtype_given = false;   // --dtype on the command line (else --inputs files decide)
  PathSettings conditions;    // the scenario's preconditions and the explicit options, before fixes
  bool own_fix = false;       // --fix on: the scenario's own fix
  FixSet fixes;               // every fix applied (--fix on and --fixes); change with set_fixes
  PathSettings settings;      // what the path runs with: the conditions corrected by the fixes
  bool allow_oversubscription = false;
  bool layers_fit = false;    // --layers-fit: fewer layers where all of them would be refused
  ContextSettings context;    // the ballast and the host load (math_sdpa/context.h)
  int64_t chunk_size = 0;     // --chunk-size: fix 5's chunk budget (0: its default)
  bool plan_only = false;     // --plan: print the memory plan and exit, allocating nothing
  bool memory_trace = false;  // --memory-trace (scenario 6's default): memory at every stage
  bool uvm_counters = false;  // --uvm-counters: managed memory's migrations and faults (CUPTI)
  // Passes over the layers, each a training step's forward pass after which what the layers kept
  // is freed: --iters (calls, with one layer) or --steps, which also samples memory (after every
  // step, or every steps/100th) and reports per-step times.
  int iters = 1;
  bool steps = false;         // the loop was given as --steps
  int sample_every = 0;  // soak: sample memory every N calls (0 = never)
  bool check = false;
  bool check_last_layer_only = false;  // --check-layers last
  std::string json_path;
  std::string inputs_dir;
  std::string save_output_path;
  std::string save_inputs_dir;  // --save-inputs: each layer's inputs as .npy files (inputs.h)
  LogLevel log = LogLevel::off;
  LogFormat log_format = LogFormat::harness;
  bool log_extras = false;  // sdpa-debug: also the harness's own lines
  double stage_timeout_s = kDefaultStageTimeoutS;  // per-stage deadline of the watchdog
  double stall_threshold_s = kDefaultStallThresholdS;  // a stage longer than this is a stall; 0: not judged
  double run_timeout_s = 0;     // whole-run deadline; 0 = none
  bool no_fork = false;         // watchdog thread in this process instead of a supervising parent
  // CUDA_LAUNCH_BLOCKING=1 for the GPU process, set before CUDA starts: every launch returns once
  // its kernel has finished, the debug mode the original investigation ran in.
  bool launch_blocking = false;
  HangOptions hang;             // what a hang does: snapshot, kill or keep; the durable log
  FaultSpec inject;
  // Whether the fault's @conditions of the context hold in this run; a fault whose do not is not
  // injected (the ladder's rungs below the condition run clean).
  bool inject_armed = true;
  // Non-empty when the scenario cannot be exercised under these conditions (scenario_waiver):
  // the run ends as waived (exit 6) before the GPU is touched.
  std::string waiver;
  // What makes this run say nothing about its scenario's hypothesis though it runs
  // (scenario_caveats): warned on stderr, listed in the JSON, and a report says "not exercised".
  std::vector<std::string> caveats;
  std::vector<std::string> argv;  // the command line as given (with a replay's derived options), for results and reports
  // --workload-file FILE --call N: the captured call this run replays ("" none), and what of it
  // the harness replays only approximately (warned at the start of the run).
  std::string workload_file;
  int call = 0;
  std::vector<std::string> replay_approximations;
  // --inputs: the tensors, read and checked while parsing; the problem's shapes, dtype and mask
  // are the files'. Shared, not copied: captured tensors can be gigabytes.
  std::shared_ptr<const HostInputs> inputs;

  // The options as given (with a replay's derived options): what a child of this run is handed.
  RunSpec spec;

  // Applies `set` to the conditions and to problem_given: fixes, settings and the problem,
  // decided once here and read everywhere else (each fix's settings are host-only data, fixes/fix.h).
  void set_fixes(const FixSet& set);
};

struct ParseResult;

// Adds the options of a run to a CLI11 app (run_spec.h: the table, in its help groups);
// parse() parses a command line into the RunSpec those options fill, and finish() turns that into
// RunOptions.
class RunOptionParser {
 public:
  explicit RunOptionParser(CLI::App& app, RunCommand command = RunCommand::run);
  ~RunOptionParser();
  // Parses argv into the app (parse_app), and with --workload-file adds the call's derived options
  // the command line does not give (the command line's win): result.words holds the command line
  // with them in front. False (with result's exit code and message) on --help or a parse error.
  bool parse(int argc, const char* const* argv, const std::string& program, ParseResult& result);
  void expand_replay(bool on) { expand_replay_ = on; }
  // What was parsed, as given.
  const RunSpec& spec() const { return spec_; }
  // Throws InputError (one line) on values that are individually valid but wrong together, on
  // --inputs files that do not load or agree, on an output path that cannot be written, and on
  // an option this configuration would ignore. `words` is the command line as given, kept in the
  // result for its JSON and reports.
  RunOptions finish(const std::vector<std::string>& words) const;

 private:
  CLI::App& app_;
  RunCommand command_;
  RunSpec spec_;
  CommandOptions options_;
  bool expand_replay_ = true;
};

// The RunOptions of `spec` exactly as a child of `command` given spec.to_argv() would make them,
// decided on the value: every value checked against its row (check_run_spec), a workload file's
// call expanded, then finished. Throws InputError with the child's one line (without its
// "repro: error: " prefix).
RunOptions validate_run_spec(const RunSpec& spec, RunCommand command = RunCommand::run);

// A command line's run options as a RunSpec, parsed as `command` parses them, a workload file's
// call expanded unless `expand_replay` is false (options a child will be given, whose command line
// decides which of the call's options it takes); throws InputError with the parser's line.
RunSpec parse_run_spec(const std::vector<std::string>& args, RunCommand command = RunCommand::run, bool expand_replay = true);

// CLI11's message for a value out of the range of an option outside the table (a report's
// --repeat) in the harness's words: "--repeat: Value 0 not in range 1.000000 to 1000.000000"
// (CLI11 2.3, Debian 12) and "--repeat: Value 0 not in range [1 - 1000]" (CLI11 2.4, Ubuntu
// 24.04) both as "--repeat: '0' is not in 1-1000" (bounds that are integers) or "is not in [0.01,
// 86400]"; "" for any other message.
std::string range_error(const std::string& what);

// CLI11's message for a word outside an option's set ("--fix-form: leen not in {design,lean}") in
// the words of every closed set (name_table.h's unknown_value); "" for any other message.
std::string choice_error(const std::string& what);

// What parsing decided: run with `options`, or exit now with `exit_code` after printing
// `message` (help text on stdout for --help, one error line on stderr otherwise).
struct ParseResult {
  bool run = false;
  int exit_code = 0;
  std::string message;
  RunOptions options;
  // The command line as parsed (parse_app): as given, or with a --workload-file call's derived
  // options put in front of it (repro/cli/workload_file.h). What finish() and children take.
  std::vector<std::string> words;
};

// The plain run: `repro [options]`.
ParseResult parse_command_line(int argc, const char* const* argv);

// Parses argv into `app` with the help format of every repro command (help_format.h), turning
// --help into exit 0 with the help text, --help-markdown into exit 0 with the docs' tables of its
// options (help_format.h), and every parse error into exit 2 with one line ("<program>: error:
// ..." in the harness's words, never CLI11's); then `options`, when given, reads the table's
// options (CommandOptions::read). Returns true when parsing succeeded. result.words holds what was
// parsed.
bool parse_app(CLI::App& app, int argc, const char* const* argv, const std::string& program, ParseResult& result,
               const CommandOptions* options = nullptr);

}  // namespace sdpa
