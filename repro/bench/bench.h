// bench.h: `repro bench`, the benchmark: what it takes, what it measures, how it is printed.
//
//   repro bench [run options] [-w N] [-n N] [--input-sets K] [--fix-overhead LIST] [--json FILE]
//
// It runs the configuration a plain `repro` run would (every run option means the same), in a
// supervised child with the same watchdog, and times every call three ways:
//   gpu    CUDA events: the first GPU stage's start to the last GPU stage's end (StageTimer),
//          the figure comparable with an event-timed PyTorch call;
//   event  CUDA events recorded on the path's stream before and after the whole call (so the
//          entry and closing synchronisations are inside);
//   wall   the host clock around the whole call: what the call costs its caller, every host
//          synchronisation included.
// Per-stage times come from the events around every stage. Statistics: median, p10, p90 and a
// 95% bootstrap interval of the median (math_sdpa/stats.h); iter/s and the mean latency as the
// original benchmark_fix.py prints them (timed calls over their total host time).
//
// Input sets: a small shape's tensors fit in the L2 cache, so timing one set of buffers over and
// over measures the cache. The bench builds K independent copies of the path (workspace,
// streams, cuBLAS handle) and rotates through them; by default K is chosen so that the data
// touched between two uses of one set is at least three times the L2 (choose_input_sets).
//
// Fix overhead (--fix-overhead 1,3,all or `each`): for each entry the configuration as given
// (A) and the same plus the fix (B) are built once, side by side in this process, and called
// interleaved A B A B ...; reported as the ratio of medians B/A with its bootstrap interval and
// Hedges' g, for both the host clock and the GPU events. The verdict uses the host clock: a
// fix's cost is mostly host synchronisation (fixes 1 and 2) or allocation kind (fix 4), which
// events between stages see only in part. Budget (docs/SCENARIOS.md): under 10% ideal,
// under 20% acceptable.
//
// Parsing, summaries and printers are host-only (tested in tests/test_bench.cpp); measuring is
// in bench_runner.cpp.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "math_sdpa/device_info.h"
#include "math_sdpa/reference.h"
#include "math_sdpa/stage.h"
#include "math_sdpa/stats.h"
#include "repro/cli/run_options.h"
#include "repro/run/outcome.h"
#include "repro/supervise/watchdog.h"

namespace sdpa {

constexpr int kBenchFormatVersion = 2;
constexpr int kMaxInputSets = 64;
// The tiers of a fix's cost (docs/SCENARIOS.md): under 10% ideal, under 20% acceptable, under 30%
// the worst case a fix may cost, over budget beyond.
constexpr double kOverheadIdeal = 1.10, kOverheadAcceptable = 1.20, kOverheadWorstCase = 1.30;

struct BenchOptions {
  RunOptions run;          // every run option (RunOptionParser); --json and --check included
  int warmup = 10;         // -w: untimed calls after each set ran once (as the original benchmark)
  int iterations = 100;    // -n: timed calls (as the original); per side with --fix-overhead
  int input_sets = 0;      // --input-sets: 0 = chosen from the L2 size
  // --fix-overhead: one comparison per entry, B = the given fixes plus these.
  std::vector<std::string> overhead_labels;  // "1", "2", "3", "4", "all"
  std::vector<FixSet> overhead_fixes;
};

// What parsing decided (as ParseResult for a run).
struct BenchParse {
  bool run = false;
  int exit_code = 0;
  std::string message;
  BenchOptions options;
};
BenchParse parse_bench_command_line(int argc, const char* const* argv);

// "1,3,all" -> labels {"1","3","all"}; "each" -> each_fix_overhead(); "none" or "" -> none. Items
// are those of a --fixes list (fix_list.h). Throws InputError (one line) on anything else, on a
// repeat, and on a fix that acts outside the calls (FixInfo::outside_the_calls: nothing to time).
void parse_fix_overhead_list(const std::string& text, std::vector<std::string>& labels, std::vector<FixSet>& fixes);

// "1,1:lean,2,2:lean,...,all,all:lean": every fix a bench can time, as designed and, where its lean
// form differs, lean; then all of them both ways. From the records.
std::string each_fix_overhead();

// Input sets so that the bytes touched between two uses of one set (the other sets' calls) are
// at least 3x the L2: 1 when one call moves that much itself; never more than kMaxInputSets,
// nor more sets than `memory_budget_bytes` holds (at least 1).
int choose_input_sets(int64_t bytes_per_call, int64_t l2_bytes, int64_t bytes_per_set, int64_t memory_budget_bytes);

// "ideal (< 10%)", "acceptable (< 20%)", "worst case (< 30%)", "over budget (>= 30%)" for a ratio
// B/A; "n/a" for NaN.
std::string overhead_verdict(double ratio);

// What the fix's author expected it to cost (docs/SCENARIOS.md), for an --fix-overhead label:
// "5-10%" for fix 1, ...; "" for a combination.
std::string overhead_budget(const std::string& label);

// The raw samples of one measured configuration (ms unless named otherwise).
struct CallSamples {
  std::vector<double> gpu_ms, event_ms, wall_ms;
  std::array<std::vector<double>, kStageCount> stage_ms;  // events; host clock for host stages
  // The original benchmark's loop time: the host-clock times of the timed calls added up (without the event
  // bookkeeping the bench does between calls, which its loop does not have).
  double total_seconds = 0;
};

struct StageSummary {
  std::string stage;
  bool host_clock = false;
  SampleSummary ms;
};

// One measured configuration, with the summaries computed from its samples.
struct BenchSeries {
  std::string label;  // "path", or "A"/"B" of a comparison
  FixSet fixes;
  std::map<std::string, std::string> settings;  // settings_fields() of what it ran with
  CallSamples samples;
  SampleSummary gpu, event, wall;
  std::vector<StageSummary> stages;
  double iter_per_s = 0, avg_latency_ms = 0;  // as the original benchmark prints them
};

struct OverheadComparison {
  std::string label;  // "1" .. "4", "all"
  FixSet fixes_b;
  bool skipped = false;
  std::string skip_reason;
  BenchSeries a, b;
  RatioEstimate wall_ratio, gpu_ratio;
  double wall_g = 0, gpu_g = 0;  // Hedges' g of B against A
  std::string verdict;           // from wall_ratio
  std::string budget;            // overhead_budget(label)
};

// In the verdict, nonfinite_outputs counts over the final outputs of every set of every
// configuration, and --check compares the first set's last output with the reference.
struct BenchResult : Verdict {
  BenchOptions options;
  std::optional<DeviceInfo> device;
  int64_t l2_bytes = 0;
  int input_sets = 0;
  bool input_sets_chosen = false;  // from the L2 size (no --input-sets)
  int64_t bytes_per_call = 0;      // tensors one call touches (the workspace without cuBLAS's)
  int64_t bytes_per_set = 0;       // one set's whole workspace
  std::optional<ResultTensor> result_tensor;  // unknown when it stopped before the path was planned
  BenchSeries path;  // the plain benchmark of the configuration
  std::vector<OverheadComparison> overhead;
  std::optional<SupervisedOutcome> watchdog;
};

// Fills every summary, ratio, g and verdict from the raw samples (the runner calls it; printers
// only print).
void summarize_series(BenchSeries& s);
void summarize_comparison(OverheadComparison& c);

nlohmann::json bench_to_json(const BenchResult& r);
std::string bench_to_text(const BenchResult& r);
std::string bench_configuration_line(const BenchOptions& o);

// Runs the benchmark on the GPU (bench_runner.cpp). Never throws: every failure is an outcome.
BenchResult run_bench(const BenchOptions& options, int progress_fd = -1);

// The result of a supervised bench that hung or crashed.
BenchResult bench_watchdog_result(const BenchOptions& options, const SupervisedOutcome& outcome);

}  // namespace sdpa
