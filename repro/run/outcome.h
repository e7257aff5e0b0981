// outcome.h: how a run of the path ends, the same for every subcommand that runs it (a plain
// run, a benchmark) and every one that reads such a run back (the sweep, the report): the
// harness's errors become an outcome and an exit code (README "Exit codes"), and the outputs are
// judged (NaN never passes, with or without --check).
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/reference.h"
#include "repro/cli/run_options.h"

namespace sdpa {

// Every way a run can end, and the words the JSON, the tables and the sweep use for each. The
// last three are never a run's own: the sweep's deadline killed it, the sweep has not run it
// yet, or it ended without writing a result.
enum class Outcome {
  pass,
  waived,
  mismatch,
  leak,  // a soak run's memory grew (--sample-every)
  hang,
  timeout,
  crash,
  cuda_error,
  usage,
  no_gpu,
  refused,
  stalled,  // every call had a stage over the stall threshold (repro/run/stalls.h)
  planned,
  no_result,
};

const char* outcome_name(Outcome o);
// Throws InputError naming every outcome.
Outcome parse_outcome(const std::string& s);
std::optional<Outcome> find_outcome(const std::string& s);
// The exit code of repro for an outcome of its own; nullopt for timeout, planned, no_result.
std::optional<int> outcome_exit_code(Outcome o);
// The outcome an exit code of repro stands for when nothing more is known (1: mismatch, which
// a leak shares); nullopt for a code repro never exits with.
std::optional<Outcome> outcome_of_exit_code(int code);
std::ostream& operator<<(std::ostream& out, Outcome o);

// What a check cost: the float64 reference computed again on the CPU for each checked layer (its
// inputs made again, the reference, the comparison), in the run's own process; the references of
// the first layers during the run, on idle CPUs (repro/run/reference_ahead.h), where it allows.
struct CheckCost {
  double wall_seconds = 0;        // what the check added to the run: after the last call
  double overlapped_seconds = 0;  // the references' time during the run, which added nothing
  // The process's CPU time while the check ran after the last call (--host-load's threads too),
  // and the CPU time of the threads that computed the references during the run.
  double cpu_seconds = 0;
  int threads = 0;         // the reference's threads (host_parallel.h)
  int layers_ahead = 0;    // the layers whose references were computed during the run
  std::string after_run_because;  // why none were, where none were
  ReferenceProducts products = ReferenceProducts::blas;
  std::string blas;        // cpu_blas_description(); "" when the loops computed the products

  // The references computed during the run: they took `compute_seconds`, of which the check
  // waited `waited_seconds` after the last call, and `cpu_seconds` of their threads.
  void add_ahead(double compute_seconds, double waited_seconds, double cpu);
};

// What every run of the path reports about how it ended, whatever else it measured.
struct Verdict {
  Outcome outcome = Outcome::pass;
  int exit_code = 0;
  std::string error;        // one line, empty on pass
  std::string error_stage;  // the stage a CUDA error or a hang happened in
  double wall_seconds = 0;
  std::optional<double> cpu_seconds;  // the run's process's CPU time; unknown in a result the supervisor made
  int64_t nonfinite_outputs = 0;
  bool checked = false;  // --check: compared with the float64 reference
  Comparison comparison;
  double tolerance = 0;
  CheckCost check_cost;  // with --check

  // Sets outcome, its exit code and the error line.
  void fail(Outcome o, const std::string& message);
};

// Runs body() and records how it ended in v (outcome, exit code, error, failing stage, wall and CPU
// time).
// In the GPU library (error_outcome.cpp): a CUDA error is one of the ends.
void run_recording_outcome(Verdict& v, const std::function<void()>& body);

// With --check, before anything runs: what will compute the reference, in v.check_cost. Throws
// InputError (exit 2, nothing run) when SDPA_REFERENCE_PRODUCTS is wrong or OpenBLAS cannot be
// opened.
void prepare_check(Verdict& v);

// Adds the wall and CPU time of its scope to a CheckCost (the time a check adds to a run).
class CheckCostMeter {
 public:
  explicit CheckCostMeter(CheckCost& cost);
  ~CheckCostMeter();
  CheckCostMeter(const CheckCostMeter&) = delete;
  CheckCostMeter& operator=(const CheckCostMeter&) = delete;

 private:
  CheckCost& cost_;
  double wall_start_, cpu_start_;
};

// The CPU time this process has used (every thread's), in seconds.
double process_cpu_seconds();

// "# check cost: 1.21 s, CPU 15.4 s, 16 threads, OpenBLAS 0.3.26 ... (pthreads, libopenblas.so.0);
// the whole run 3.40 s, CPU 17.9 s\n", for a checked run's or benchmark's table.
std::string check_cost_line(const Verdict& v);

// The result tensor of a finished run: written to --save-output, and with --check compared with
// the float64 reference computed from the same inputs (v.checked, v.tolerance, v.comparison; its
// time added to v.check_cost), or with `reference` where the caller has it already.
void save_and_check_result(Verdict& v, const RunOptions& o, ResultTensor tensor, const HostInputs& inputs,
                           const std::vector<float>& result, const std::vector<double>* reference = nullptr);

// A mismatch when any output is not finite, or (with --check) the error exceeds the tolerance.
// `where` names what was scanned for non-finite values, e.g. "output" or "outputs of the input sets".
void judge_outputs(Verdict& v, const std::string& where);

}  // namespace sdpa
