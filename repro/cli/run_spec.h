// run_spec.h: a run's settings as one typed value (RunSpec), what every command hands another,
// and the one table of every command's options.
//
// A RunSpec holds each run option as given (unset where it was not): parsed once, from a command
// line (RunOptionParser fills it), validated once (run_options.h turns it into RunOptions, with
// every default, scenario precondition, fix and check applied). Sweep cells, minimize's steps, a
// report's runs, the context ladder's rungs and triage's steps build and change RunSpec values and
// hand them to a child as to_argv(); state files keep them as to_json(). Two specs that give the
// same options compare equal, whatever order or spelling the command lines had.
//
// The options themselves are one table (run_spec.cpp): each option's names, where a RunSpec keeps
// it, help group, label, help, default text, the commands that take it, and the words or the range
// of values it accepts. The help, the parsers of run, report, bench, sweep and triage, to_argv,
// to_json, from_json and the docs (`repro help COMMAND --markdown`) all read it, and every value
// is checked against its row in one place, the same from a command line as from a RunSpec built in
// code: a sweep's and a triage's --stage-timeout take exactly what a run's does. CLI11 only splits
// the command line: every value it hands over is converted and checked here, in the harness's
// words, the value quoted as it was typed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
class Option;
}

namespace sdpa {

// The commands of the option table. Run, report and bench take the run options; a report runs the
// scenario's own fix off and on, checks every call and writes its own JSON, logs and snapshots, a
// bench counts its own calls: each leaves out the options it decides itself. A sweep and a triage
// pass a few run options on to their runs (--stage-timeout, --inject, ...), beside their own.
enum class RunCommand { run, report, bench, sweep, triage };
// "repro", "repro report", ...: the command as its error lines name it.
const char* command_name(RunCommand command);

// A report's calls per run unless --iters says otherwise: a first call that passes and a later
// one that hangs or fails is a failure class of its own.
constexpr int kReportIters = 25;
// ... and its passes over several layers (--layers above 1): every layer's call twice, the second
// compared with the first bit for bit. A pass over the image workload's 32 layers that fit an H100
// takes about 22 s under scenario 2, so 25 of them would be ten minutes a run.
constexpr int kReportLayerPasses = 2;

struct RunSpec {
  // Problem.
  std::optional<std::string> workload, workload_file;
  std::optional<int64_t> call;
  bool call_only = false;
  std::optional<std::string> dtype, precision;
  std::optional<int64_t> batch, heads, kv_heads, q_len, kv_len, head_dim;
  std::optional<std::string> mask, mask_dims, text_padding;
  std::optional<double> dropout, scale;
  std::optional<std::string> seed, inputs;
  // Memory.
  std::optional<std::string> alloc;
  bool allow_oversubscription = false;
  std::optional<std::string> advise;
  std::optional<int64_t> touch_streams;
  std::optional<std::string> host_touch;
  // Scenario, fixes and conditions.
  std::optional<int64_t> scenario;
  std::optional<std::string> fix, fixes;
  bool full = false, graph = false;
  std::optional<std::string> stream, gemm_stream, gemm_order, k_layout, gemm_api, scores_to_host, scores_host_phase;
  // Training context.
  std::optional<std::string> alloc_timing, layers, retain;
  bool layers_fit = false;
  std::optional<int64_t> steps;
  std::optional<std::string> chunk_size;
  bool backward = false;
  std::optional<std::string> ballast, ballast_alloc, ballast_touch;
  std::optional<int64_t> host_load;
  std::optional<std::string> mapped_weights, weights_mapping;
  bool memory_trace = false, uvm_counters = false, plan = false;
  // Logging and watchdog.
  std::optional<std::string> log, log_format;
  bool log_extras = false;
  std::optional<double> stage_timeout, stall_threshold, timeout;
  bool no_fork = false, launch_blocking = false;
  std::optional<std::string> on_hang;
  std::optional<double> snapshot_timeout, keep_timeout;
  std::optional<std::string> snapshot_dir, log_file;
  bool nvidia_bug_report = false;
  std::optional<std::string> inject;
  // Run and output.
  std::optional<int64_t> iters, sample_every;
  bool check = false;
  std::optional<std::string> check_layers;
  std::optional<std::string> json, save_output, save_inputs;

  // The options given, in the table's order, by their long names ("--kv-len", "4608").
  std::vector<std::string> to_argv() const;
  // {"kv-len": 4608, "check": true, ...}: the options given, by long name without the dashes.
  nlohmann::json to_json() const;
  // Throws InputError naming the key at fault (an option no run has, a value of the wrong type).
  static RunSpec from_json(const nlohmann::json& j);
  // to_argv's words read back, each value checked as set() checks it; InputError on a word that
  // is no run option.
  static RunSpec from_argv(const std::vector<std::string>& words);

  // One option by its long name ("--kv-len"), as text: whether it was given, its value ("" for a
  // flag), set from text (strictly: an integer option takes an integer), or unset. Unknown names
  // are a bug (std::logic_error); a bad value an InputError naming the option.
  bool given(const std::string& option) const;
  std::string value(const std::string& option) const;
  void set(const std::string& option, const std::string& value);
  void unset(const std::string& option);

  // Every option `adds` gives, given here too (its value replacing this one's).
  void overlay(const RunSpec& adds);

  bool operator==(const RunSpec& o) const { return to_argv() == o.to_argv(); }
  bool operator!=(const RunSpec& o) const { return !(*this == o); }
};

// Whether `command` takes run option `option` (its long name); false for a name no run option has.
bool takes_run_option(RunCommand command, const std::string& option);
// Every run option's long name, in the table's order.
std::vector<std::string> run_option_names();
// The setting a scenario's record sets that run option `option` sets too (settings_fields' name:
// "mapped_weights" for --mapped-weights), or nullptr.
const char* run_option_setting(const std::string& option);

// Every option `spec` gives, checked as `command` takes it: an option of the command, a value its
// row accepts (a word among its choices, a number within its range, a file's name not empty), and
// for a report a scenario. Throws InputError with the first one at fault. Nothing else: how the
// options go together is run_options.h's finish.
void check_run_spec(const RunSpec& spec, RunCommand command);

// What an option's value is: a word or a name, an integer, a real number, or none (a flag).
enum class OptionKind { text, integer, real, flag };

// One command's options from the table, added to a CLI11 app with their labels, help and defaults;
// CLI11 only collects what was typed. After the parse, read() converts and checks each value given
// (in the table's words: "--call: '99999999999999999999' is not in 0-2147483647") and stores it
// where the command keeps it.
class CommandOptions {
 public:
  CommandOptions(CLI::App& app, RunCommand command);
  // Every run option the command takes, in their help groups (Problem, Memory, Scenario and
  // fixes, Training context, Logging and watchdog, Run and output), read into `spec`, which must
  // outlive read().
  void add_run_options(RunSpec& spec);
  // The table's option `name` as the command takes it (std::logic_error where it does not, or
  // where its row holds another kind of value), read into `to`.
  CLI::Option* add(const std::string& name, std::string& to);
  CLI::Option* add(const std::string& name, int& to);
  CLI::Option* add(const std::string& name, double& to);
  CLI::Option* add(const std::string& name, bool& to);
  // Throws InputError naming the option and the value as typed.
  void read() const;

 private:
  struct Bound {
    CLI::Option* option;
    std::function<void(const std::string&)> take;  // the value as typed ("" for a flag given)
  };
  CLI::Option* add_row(const std::string& name, OptionKind kind, std::function<void(const std::string&)> take);
  CLI::App& app_;
  RunCommand command_;
  std::vector<Bound> bound_;
};

// The docs of the option `name` whose --help is `help` (markdown, docs/CLI.md's "meaning") where
// they say more than its help; else `help` (an option outside the table, or one whose help says all).
std::string option_docs(const std::string& name, const std::string& help);
// The help groups of the run options, in order: Problem, Memory, ...
std::vector<std::string> run_option_groups();

}  // namespace sdpa
