// bench.cpp: `repro bench`'s options, summaries and printers (host-only; bench.h).
#include "repro/bench/bench.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "fixes/fix_list.h"
#include "math_sdpa/errors.h"
#include "repro/cli/help_format.h"
#include "repro/run/run_text.h"
#include "repro/run/run_json.h"
#include "repro/run/run_result.h"
#include "scenarios/scenario.h"
#include "version.h"

namespace sdpa {

namespace {

using nlohmann::json;

json finite_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

std::string format(const char* fmt, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a, b, c, d);
  return buf;
}

std::string mib(int64_t bytes) { return format("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

// The fix an --fix-overhead label ("1", "2:lean", "5:chunk") is of, or 0 for "all" and the rest.
int overhead_fix(const std::string& label) {
  const std::string number = label.substr(0, label.find(':'));
  if (number.empty() || number.size() > 3 || number.find_first_not_of("0123456789") != std::string::npos) return 0;
  const int n = std::stoi(number);
  return n >= 1 && n <= fix_count() ? n : 0;
}

// The fix an --fix-overhead label names: "gemm_stream_sync" for "1" and "1:lean", "all" for the rest.
std::string overhead_name(const std::string& label) {
  const int n = overhead_fix(label);
  return n ? fix_info(n).name : "all";
}

// One entry of a --fix-overhead list is one of a --fixes list, a fix number or all; none and ""
// are not entries, as no fix has no cost to measure, nor is a fix that acts outside the calls.
FixSet overhead_item(const std::string& item, const std::string& text) {
  const InputError not_a_fix("--fix-overhead: '" + item + "' in '" + text +
                             "' is not a fix (expected items of a --fixes list: N, N:lean, N:part/part, all, all:lean; "
                             "or each, or none)");
  if (item.empty() || item == "none") throw not_a_fix;
  FixSet set;
  try {
    set = parse_fix_list(item);
  } catch (const InputError&) {
    throw not_a_fix;
  }
  if (const int n = overhead_fix(item); n && fix_info(n).outside_the_calls) {
    throw InputError("--fix-overhead: '" + item + "': fix " + std::to_string(n) + " " + fix_info(n).outside_the_calls +
                     ": nothing of it to time");
  }
  return set;
}

}  // namespace

std::string each_fix_overhead() {
  std::string list;
  for (int n = 1; n <= fix_count(); ++n) {
    if (fix_info(n).outside_the_calls) continue;
    FixSet design, lean;
    design.add(n);
    lean.add_lean(n);
    list += (list.empty() ? "" : ",") + std::to_string(n) + (lean == design ? "" : "," + std::to_string(n) + ":lean");
  }
  return list + ",all,all:lean";
}

void parse_fix_overhead_list(const std::string& text, std::vector<std::string>& labels, std::vector<FixSet>& fixes) {
  labels.clear();
  fixes.clear();
  if (text.empty() || text == "none") return;
  const std::string list = text == "each" ? each_fix_overhead() : text;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const FixSet set = overhead_item(item, text);
    for (const auto& l : labels) {
      if (l == item) throw InputError("--fix-overhead: '" + item + "' listed twice in '" + text + "'");
    }
    labels.push_back(item);
    fixes.push_back(set);
    if (comma == std::string::npos) return;
    start = comma + 1;
  }
}

BenchParse parse_bench_command_line(int argc, const char* const* argv) {
  BenchParse result;
  CLI::App app{
      "repro bench: times the configuration a plain run would execute (every run option means the same), "
      "in a supervised child with the run's watchdog: median, p10, p90 and a 95% bootstrap interval of the "
      "median per call (CUDA events and the host clock) and per stage, iter/s and ms as the original "
      "benchmark_fix.py prints them, and with --fix-overhead the cost of each fix (A/B interleaved, ratio of "
      "medians with its interval, Hedges' g).",
      "repro bench"};
  use_help_format(app, "repro bench [-w N] [-n N] [--fix-overhead LIST] [run options]");
  app.footer(std::string("Exit codes: as a run's: ") + kExitCodeSummary + ".");
  BenchOptions& b = result.options;
  std::string overhead;
  app.option_defaults()->group("Benchmark");
  app.add_option("-w,--warmup", b.warmup, "untimed calls before timing (after each input set ran once)")
      ->check(CLI::Range(0, 1000000))
      ->option_text("N")
      ->capture_default_str();
  app.add_option("-n,--iterations", b.iterations, "timed calls (per side with --fix-overhead)")
      ->check(CLI::Range(1, 10000000))
      ->option_text("N")
      ->capture_default_str();
  app.add_option("--input-sets", b.input_sets,
                 "independent copies of the inputs and workspace, used in rotation so the L2 cache does not "
                 "flatter small shapes; 0: enough that 3x the L2 is touched between two uses of one set")
      ->check(CLI::Range(0, kMaxInputSets))
      ->option_text("K")
      ->capture_default_str();
  app.add_option("--fix-overhead", overhead,
                 "fixes whose cost to measure, each against the configuration as given (A/B interleaved): a list "
                 "of N, N:lean, N:part/part, all and all:lean, or each (= " + each_fix_overhead() + ")")
      ->option_text("LIST")
      ->default_str("none");
  RunOptionParser parser(app, RunCommand::bench);
  ParseResult parsed;
  if (!parser.parse(argc, argv, "repro bench", parsed)) {
    result.exit_code = parsed.exit_code;
    result.message = parsed.message;
    return result;
  }
  try {
    b.run = parser.finish(parsed.words);
    parse_fix_overhead_list(overhead, b.overhead_labels, b.overhead_fixes);
  } catch (const InputError& e) {
    result.exit_code = kExitUsage;
    result.message = std::string("repro bench: error: ") + one_line(e.what());
    return result;
  }
  result.run = true;
  return result;
}

int choose_input_sets(int64_t bytes_per_call, int64_t l2_bytes, int64_t bytes_per_set, int64_t memory_budget_bytes) {
  if (bytes_per_call <= 0 || l2_bytes <= 0) return 1;
  const int64_t flush = 3 * l2_bytes;
  int64_t sets = bytes_per_call >= flush ? 1 : 1 + (flush + bytes_per_call - 1) / bytes_per_call;
  sets = std::min<int64_t>(sets, kMaxInputSets);
  if (bytes_per_set > 0) sets = std::min<int64_t>(sets, std::max<int64_t>(1, memory_budget_bytes / bytes_per_set));
  return static_cast<int>(std::max<int64_t>(1, sets));
}

std::string overhead_verdict(double ratio) {
  if (std::isnan(ratio)) return "n/a";
  if (ratio < kOverheadIdeal) return "ideal (< 10%)";
  if (ratio < kOverheadAcceptable) return "acceptable (< 20%)";
  if (ratio < kOverheadWorstCase) return "worst case (< 30%)";
  return "over budget (>= 30%)";
}

std::string overhead_budget(const std::string& label) {
  // The fix as designed and its lean form answer to the same budget, its record's.
  const int n = overhead_fix(label);
  return n ? fix_info(n).budget : "";
}

void summarize_series(BenchSeries& s) {
  const CallSamples& c = s.samples;
  s.gpu = summarize(c.gpu_ms);
  s.event = summarize(c.event_ms);
  s.wall = summarize(c.wall_ms);
  s.stages.clear();
  for (int i = 0; i < kStageCount; ++i) {
    if (c.stage_ms[i].empty()) continue;
    const Stage stage = static_cast<Stage>(i);
    s.stages.push_back({stage_name(stage), !is_gpu_stage(stage), summarize(c.stage_ms[i])});
  }
  // The original benchmark's figures: calls over their total host time, and its inverse.
  const double calls = static_cast<double>(c.wall_ms.size());
  s.iter_per_s = c.total_seconds > 0 ? calls / c.total_seconds : 0;
  s.avg_latency_ms = calls > 0 ? c.total_seconds * 1e3 / calls : 0;
}

void summarize_comparison(OverheadComparison& c) {
  c.budget = overhead_budget(c.label);
  if (c.skipped) {
    c.verdict = "skipped";
    return;
  }
  summarize_series(c.a);
  summarize_series(c.b);
  c.wall_ratio = median_ratio(c.b.samples.wall_ms, c.a.samples.wall_ms);
  c.gpu_ratio = median_ratio(c.b.samples.gpu_ms, c.a.samples.gpu_ms);
  c.wall_g = hedges_g(c.a.samples.wall_ms, c.b.samples.wall_ms);
  c.gpu_g = hedges_g(c.a.samples.gpu_ms, c.b.samples.gpu_ms);
  c.verdict = overhead_verdict(c.wall_ratio.ratio);
}

namespace {

json summary_json(const SampleSummary& s) {
  return {{"n", s.n},
          {"median_ms", s.median},
          {"median_ci95_ms", {finite_or_null(s.median_ci.low), finite_or_null(s.median_ci.high)}},
          {"p10_ms", s.p10},
          {"p90_ms", s.p90},
          {"mean_ms", finite_or_null(s.mean)},
          {"std_dev_ms", finite_or_null(s.std_dev)},
          {"min_ms", finite_or_null(s.min)},
          {"max_ms", finite_or_null(s.max)}};
}

json series_json(const BenchSeries& s) {
  json stages = json::array();
  for (const auto& st : s.stages) {
    json j = summary_json(st.ms);
    j["stage"] = st.stage;
    j["clock"] = st.host_clock ? "host" : "cuda_event";
    stages.push_back(j);
  }
  json settings = json::object();
  for (const auto& [name, value] : s.settings) settings[name] = value;
  return {{"label", s.label},
          {"fixes", s.fixes.str()},
          {"settings", settings},
          {"summaries",
           {{"gpu", summary_json(s.gpu)}, {"event", summary_json(s.event)}, {"wall", summary_json(s.wall)}}},
          {"iter_per_s", s.iter_per_s},
          {"avg_latency_ms", s.avg_latency_ms},
          {"total_seconds", s.samples.total_seconds},
          {"stages", stages},
          {"samples", {{"gpu_ms", s.samples.gpu_ms}, {"event_ms", s.samples.event_ms}, {"wall_ms", s.samples.wall_ms}}}};
}

json ratio_json(const RatioEstimate& r) {
  return {{"ratio", finite_or_null(r.ratio)}, {"ci95", {finite_or_null(r.ci.low), finite_or_null(r.ci.high)}}};
}

// One fix's overhead: the runs without it (a) and with it (b), their ratios and the verdict, or
// why it was skipped.
json overhead_json(const OverheadComparison& c) {
  json e = {{"fix", c.label},
            {"fixes_b", c.fixes_b.str()},
            {"name", overhead_name(c.label)},
            {"budget", c.budget.empty() ? json(nullptr) : json(c.budget)},
            {"is_skipped", c.skipped},
            {"skip_reason", c.skipped ? json(c.skip_reason) : json(nullptr)}};
  if (!c.skipped) {
    e["a"] = series_json(c.a);
    e["b"] = series_json(c.b);
    e["ratio_wall"] = ratio_json(c.wall_ratio);
    e["ratio_gpu"] = ratio_json(c.gpu_ratio);
    e["hedges_g_wall"] = finite_or_null(c.wall_g);
    e["hedges_g_gpu"] = finite_or_null(c.gpu_g);
    e["verdict"] = c.verdict;
    e["verdict_uses"] = "wall";
  }
  return e;
}

}  // namespace

json bench_to_json(const BenchResult& r) {
  const BenchOptions& o = r.options;
  json j;
  j["meta"] = {{"format_version", kBenchFormatVersion},
               {"harness", "sdpa-repro"},
               {"harness_version", kHarnessVersion},
               {"git_commit", kGitCommit},
               {"command", "bench"},
               {"command_line", o.run.argv}};
  json device = json(nullptr);
  json devices = json::array();
  if (r.device) {
    device = device_to_json(*r.device);
    device["l2_cache_bytes"] = r.l2_bytes;
    devices.push_back(device);
  }
  j["devices"] = devices;
  j["config"] = {{"scenario", o.run.scenario},
                 {"problem", problem_to_json(o.run.problem)},
                 {"fixes", o.run.fixes.str()},
                 {"conditions", settings_to_json(o.run.conditions)},
                 {"settings", settings_to_json(o.run.settings)},
                 {"warmup", o.warmup},
                 {"iterations", o.iterations},
                 {"input_sets", r.input_sets},
                 {"input_sets_chosen_from_l2", r.input_sets_chosen},
                 {"bytes_per_call", r.bytes_per_call},
                 {"bytes_per_set", r.bytes_per_set},
                 {"fix_overhead", o.overhead_labels},
                 {"check", o.run.check},
                 {"bootstrap", {{"method", "percentile"}, {"resamples", kBootstrapResamples}, {"confidence", 0.95},
                                {"seed", kBootstrapSeed}}},
                 {"clocks",
                  {{"gpu", "CUDA events: first GPU stage's start to last GPU stage's end, nothing timed in between"},
                   {"stages", "a second pass of as many calls, with CUDA events around every GPU stage"},
                   {"event", "CUDA events on the path's stream before and after the whole call"},
                   {"wall", "host steady clock around the whole call (its synchronisations included)"}}}};
  j["scenario"] = scenario_to_json(o.run.scenario);
  j["outcome"] = outcome_name(r.outcome);
  j["exit_code"] = r.exit_code;
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  j["error_stage"] = r.error_stage.empty() ? json(nullptr) : json(r.error_stage);
  j["result_tensor"] = r.result_tensor ? result_tensor_name(*r.result_tensor) : "";
  j["nonfinite_outputs"] = r.nonfinite_outputs;
  j["check"] = r.checked ? json{{"rel_error", finite_or_null(r.comparison.rel_error)},
                                {"max_abs_error", finite_or_null(r.comparison.max_abs_error)},
                                {"tolerance", r.tolerance},
                                {"passed", r.comparison.passed(r.tolerance)},
                                {"cost", check_cost_to_json(r.check_cost)}}
                         : json(nullptr);
  // nvbench's layout: one entry per measured configuration, with its summaries.
  json benchmarks = json::array();
  if (!r.path.samples.wall_ms.empty()) benchmarks.push_back(series_json(r.path));
  j["benchmarks"] = benchmarks;
  j["fix_overhead"] = json::array();
  for (const auto& c : r.overhead) j["fix_overhead"].push_back(overhead_json(c));
  j["wall_seconds"] = r.wall_seconds;
  j["cpu_seconds"] = r.cpu_seconds ? json(*r.cpu_seconds) : json(nullptr);
  j["watchdog"] = nullptr;
  if (r.watchdog) {
    // The same watchdog block as a run's result (run_json.cpp), not a second copy of it.
    RunResult run;
    run.options = o.run;
    run.watchdog = r.watchdog;
    j["watchdog"] = result_to_json(run).at("watchdog");
  }
  return j;
}

std::string bench_configuration_line(const BenchOptions& o) {
  std::ostringstream s;
  const SdpaProblem& p = o.run.problem;
  s << "scenario " << o.run.scenario << " " << p.shape_string() << " dtype=" << dtype_name(p.dtype)
    << " precision=" << precision_name(p.precision) << " mask=" << mask_kind_name(p.mask) << " dropout=" << p.dropout_p
    << " alloc=" << alloc_kind_name(o.run.settings.alloc) << " fixes=" << o.run.fixes.str() << " warmup=" << o.warmup
    << " iterations=" << o.iterations;
  if (!o.run.inputs_dir.empty()) s << " inputs=" << o.run.inputs_dir;
  if (o.run.inject.kind != FaultSpec::none) s << " inject=" << fault_spec_string(o.run.inject);
  return s.str();
}

namespace {

std::string summary_row(const char* what, const SampleSummary& s) {
  char line[200];
  std::snprintf(line, sizeof line, "   %-26s %10.4f  [%.4f, %.4f] %10.4f %10.4f %10.4f %9.4f\n", what, s.median,
                s.median_ci.low, s.median_ci.high, s.p10, s.p90, s.mean, s.std_dev);
  return line;
}

std::string ratio_cell(const RatioEstimate& r) {
  return format("%6.3f [%.3f, %.3f]", r.ratio, r.ci.low, r.ci.high);
}

}  // namespace

std::string bench_to_text(const BenchResult& r) {
  const BenchOptions& o = r.options;
  std::ostringstream s;
  s << "# repro bench: scenario " << o.run.scenario << " (" << scenario_info(o.run.scenario).title << ")";
  if (r.device) {
    const DeviceInfo& d = *r.device;
    s << " on " << d.name << " (sm_" << d.cc_major << d.cc_minor << ", " << d.sm_count << " SMs, L2 " << mib(r.l2_bytes)
      << "), driver " << d.driver_version / 1000 << "." << (d.driver_version % 1000) / 10;
  }
  s << "\n# " << bench_configuration_line(o) << "\n";
  if (r.input_sets > 0) {
    s << "# " << r.input_sets << " input set" << (r.input_sets > 1 ? "s" : "") << " in rotation ("
      << (r.input_sets_chosen ? "chosen from the L2 size" : "--input-sets") << "): a call touches " << mib(r.bytes_per_call)
      << ", " << mib(r.bytes_per_call * (r.input_sets - 1)) << " between two uses of a set; each set ran once, then "
      << o.warmup << " warm-up calls\n";
  }
  const BenchSeries& p = r.path;
  if (!p.samples.wall_ms.empty()) {
    // The original benchmark_fix.py block, with its labels.
    s << "# SDPA Benchmark Results\n";
    s << "Iterations:   " << p.samples.wall_ms.size() << "\n";
    s << format("Total time:   %.3f seconds\n", p.samples.total_seconds);
    s << format("Throughput:   %.2f iter/s\n", p.iter_per_s);
    s << format("Avg latency:  %.4f ms\n", p.avg_latency_ms);
    s << "#  per call                   median_ms  [95% CI of the median]     p10_ms     p90_ms    mean_ms     sd_ms\n";
    s << summary_row("GPU stages (events)", p.gpu);
    s << summary_row("whole call (events)", p.event);
    s << summary_row("whole call (host clock)", p.wall);
    s << "#  stage          calls   median_ms  [95% CI of the median]     p10_ms     p90_ms  clock\n";
    for (const auto& st : p.stages) {
      char line[200];
      std::snprintf(line, sizeof line, "   %-13s %6d %11.4f  [%.4f, %.4f] %10.4f %10.4f  %s\n", st.stage.c_str(), st.ms.n,
                    st.ms.median, st.ms.median_ci.low, st.ms.median_ci.high, st.ms.p10, st.ms.p90,
                    st.host_clock ? "host" : "event");
      s << line;
    }
  }
  if (r.checked) {
    s << "# check (" << (r.result_tensor ? result_tensor_name(*r.result_tensor) : "") << ", first input set)"
      << format(": rel_error %.3e  max_abs_error %.3e  tolerance %.1e", r.comparison.rel_error, r.comparison.max_abs_error,
                r.tolerance)
      << (r.comparison.passed(r.tolerance) ? "  OK\n" : "  FAILED\n");
    s << check_cost_line(r);
  }
  if (!r.overhead.empty()) {
    s << "# fix overhead: A = as configured (fixes " << o.run.fixes.str() << "), B = A plus the fix; called A B A B ..., "
      << o.iterations << " pairs; ratio of medians B/A [95% bootstrap CI], Hedges' g of B vs A; the verdict uses the "
         "host clock (what a fix costs a caller)\n";
    s << "#  fix        name                   A_host_ms  B_host_ms  ratio_host [95% CI]      g_host  ratio_gpu [95% CI]  "
         "      g_gpu  budget  verdict\n";
    for (const auto& c : r.overhead) {
      const std::string name = overhead_name(c.label);
      char line[480];
      if (c.skipped) {
        std::snprintf(line, sizeof line, "   %-10s %-20s  skipped: %s\n", c.label.c_str(), name.c_str(), c.skip_reason.c_str());
      } else {
        std::snprintf(line, sizeof line, "   %-10s %-20s %10.4f %10.4f  %s %7.2f  %s %7.2f  %-6s  %s\n", c.label.c_str(),
                      name.c_str(), c.a.wall.median, c.b.wall.median, ratio_cell(c.wall_ratio).c_str(), c.wall_g,
                      ratio_cell(c.gpu_ratio).c_str(), c.gpu_g, c.budget.empty() ? "-" : c.budget.c_str(),
                      c.verdict.c_str());
      }
      s << line;
    }
  }
  s << "# result: " << outcome_name(r.outcome) << " (exit " << r.exit_code << ")";
  if (!r.error.empty()) s << ": " << r.error;
  s << "\n";
  return s.str();
}

}  // namespace sdpa
