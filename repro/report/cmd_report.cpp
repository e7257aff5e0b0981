// cmd_report.cpp: `repro report --scenario N [run options] --out DIR [--repeat K] [--no-run]
// [--force]`: the folder a user attaches to an NVIDIA bug.
//
// It runs the scenario with its own fix off and on, K times each, every run being this binary
// run again as a child (`repro [options] --fix off|on --check --log stages --json FILE`), so each
// is supervised by its own watchdog exactly as a plain run is, and the commands in the report
// are the commands that ran. The environment block comes from `repro info --json`, also a child
// (with a deadline), so this process never calls CUDA and a GPU wedged by a hung run cannot stop
// the report. Each run writes its durable log (run-N.log, kept unless it passed) and, if it
// hangs, its hang snapshot (hang-snapshot-run-N/) into DIR as it runs. DIR then gets REPORT.md,
// result.json, stage.log and repro_scenarioN.cu, each written atomically. --no-run writes all
// of it without running anything (no GPU needed).
//
// Each run makes kReportIters (25) calls (over several layers: kReportLayerPasses passes) unless
// --iters says otherwise, compares every call's result with the first's bit for bit and the last
// with the float64 reference (with several layers: the last layer's, --check-layers last). The
// report takes the run options except those it decides itself (RunCommand::report): they are not
// registered, so giving one is an unknown option.
//
// Exit codes: 0 the folder was written; 2 bad options, an existing DIR without --force, a
// configuration the reproducer cannot express, one that is waived, or an injected fault
// (nothing run, nothing written); 7 the folder was written but no run found a usable GPU.
#include <CLI/CLI.hpp>
#include <stdlib.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "repro/cli/context_ladder.h"
#include "repro/cli/help_format.h"
#include "repro/cli/run_options.h"
#include "repro/commands.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "repro/report/report_request.h"
#include "repro/report/report_writer.h"
#include "repro/report/reproducer/generator.h"
#include "repro/run/run_json.h"
#include "repro/supervise/child_process.h"
#include "scenarios/scenario.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;

constexpr double kInfoTimeoutS = 60;  // `repro info` only queries; longer means a stuck driver

std::string read_text(const fs::path& path) { return read_file(path.string()).value_or(""); }

// --ladder: the options that set a rung's values are taken out of the scenario's options (each
// rung adds them where it climbs); the values they give replace the ladder's own.
RunSpec take_ladder_values(RunSpec base, ContextLadderValues& v) {
  for (const char* decided : {"--alloc-timing", "--retain", "--backward"}) {
    if (base.given(decided)) {
      throw InputError(std::string(decided) + ": with --ladder the rungs decide it (per-call from the second rung, autograd "
                       "retention from the third, the backward pass at the last)");
    }
  }
  if (base.layers) v.layers = *base.layers;
  if (base.ballast) v.ballast = *base.ballast;
  if (base.ballast_alloc) v.ballast_alloc = *base.ballast_alloc;
  if (base.ballast_touch) v.ballast_touch = *base.ballast_touch;
  if (base.mapped_weights) v.mapped_weights = *base.mapped_weights;
  if (base.host_load) v.host_load = *base.host_load;
  if (base.steps) v.steps = *base.steps;
  for (const char* taken :
       {"--layers", "--ballast", "--ballast-alloc", "--ballast-touch", "--mapped-weights", "--host-load", "--steps"}) {
    base.unset(taken);
  }
  return base;
}

// The configuration of one call of `o`: what the single-file reproducer can hold (the training
// context around the call is the harness's, but a call's backward call it holds, with what
// autograd keeps for it), and what that leaves out, in words.
RunOptions one_call(RunOptions o, std::string* leaves_out) {
  std::vector<std::string> out;
  const PathSettings& s = o.settings;
  const bool backward = s.backward;
  if (s.alloc_timing == AllocTiming::per_call) out.push_back("the per-call allocation");
  if (s.layers > 1) out.push_back(std::to_string(s.layers) + " layers");
  if (s.retain == Retain::autograd && !backward) out.push_back("autograd's retention");
  if (s.chunk_bytes > 0) out.push_back("fix 5's chunks");
  if (o.context.ballast.given()) out.push_back("the ballast");
  if (s.weights.bytes > 0) out.push_back("the mapped weights' load");
  if (o.context.host_load_threads > 0) out.push_back("the host load");
  if (o.steps) out.push_back("the steps");
  if (s.alloc == AllocKind::vmm) out.push_back("vmm memory (cudaMalloc there)");
  for (PathSettings* p : {&o.conditions, &o.settings}) {
    if (p->alloc == AllocKind::vmm) p->alloc = AllocKind::device;
    p->alloc_timing = AllocTiming::upfront;
    p->layers = 1;
    p->retain = backward ? Retain::autograd : Retain::none;
    p->chunk_bytes = 0;
    // The load before the calls, and the plan it is judged by, are the run's, not the call's.
    p->weights = MappedWeights{};
    p->plan_against_free = false;
  }
  o.problem.precision = o.problem_given.precision;
  o.context = ContextSettings{};
  std::string words;
  for (size_t i = 0; i < out.size(); ++i) words += (i == 0 ? "" : i + 1 == out.size() ? " and " : ", ") + out[i];
  if (leaves_out) *leaves_out = words;
  return o;
}

// The single-file reproducer of a report's first configuration, and what it leaves out.
std::string reproducer_of(ReportInput& in) {
  const RunOptions off = one_call(in.fix_off, &in.reproducer_leaves_out), on = one_call(in.fix_on, nullptr);
  return generate_reproducer(off, on, display_command(in.args_off), display_command(in.args_on));
}

// A private scratch folder for the children's files, removed whatever happens.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "repro-report-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw InputError("cannot create a scratch folder in " + fs::temp_directory_path().string());
    path = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

void query_environment_in_child(const std::string& self, const ScratchDir& scratch, ReportInput& in) {
  const fs::path out = scratch.path / "info.json", err = scratch.path / "info.err";
  const ChildResult r = run_child(self, {"info", "--json"}, out.string(), err.string(), kInfoTimeoutS);
  if (r.timed_out) {
    in.environment_error = "`repro info` did not finish within 60 s (a stuck driver?)";
    return;
  }
  try {
    in.environment = environment_from_json(nlohmann::json::parse(read_text(out)));
  } catch (const std::exception&) {
    std::string first_line = read_text(err);
    first_line = first_line.substr(0, first_line.find('\n'));
    in.environment_error = "`repro info --json` gave no environment (exit " + std::to_string(r.exit_code) + ")" +
                           (first_line.empty() ? "" : ": " + first_line);
  }
}

// The outcome a run's result names, or "?" when it names none that reads.
std::string outcome_word(const nlohmann::json& result) {
  try {
    return outcome_name(read_run_record(result).outcome);
  } catch (const std::exception&) {
    return "?";
  }
}

// The run's durable log (--log-file) and hang snapshot go straight into the report folder: a
// machine that freezes during the run keeps them, and a hung run's snapshot is the report's.
std::string run_log_name(int index) { return "run-" + std::to_string(index) + ".log"; }
std::string snapshot_name(int index) { return "hang-snapshot-run-" + std::to_string(index); }

ReportRun run_once(const std::string& self, const ScratchDir& scratch, const fs::path& out_dir, const RunSpec& spec,
                   bool fix_on, int repeat, int index) {
  ReportRun run;
  run.fix_on = fix_on;
  run.repeat = repeat;
  run.args = spec.to_argv();
  run.snapshot_dir = snapshot_name(index);
  const fs::path json = scratch.path / ("run" + std::to_string(index) + ".json");
  const fs::path output = scratch.path / ("run" + std::to_string(index) + ".log");
  const fs::path log = out_dir / run_log_name(index);
  RunSpec with_files = spec;
  with_files.json = json.string();
  with_files.log_file = log.string();
  with_files.snapshot_dir = (out_dir / run.snapshot_dir).string();
  const ChildResult r = run_child(self, with_files.to_argv(), output.string(), output.string());
  run.exit_code = r.exit_code;
  run.wall_s = r.wall_s;
  run.output = read_text(output);
  if (fs::exists(json)) {
    nlohmann::json j = nlohmann::json::parse(read_text(json), nullptr, false);
    if (!j.is_discarded()) run.result = std::move(j);
  }
  std::error_code ignored;
  if (run.exit_code == kExitPass) fs::remove(log, ignored);  // stage.log has its output
  return run;
}

// With --force: the logs and snapshots of the report that was there, which this one replaces.
void remove_earlier_runs(const fs::path& out_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("hang-snapshot-run-", 0) == 0 || (name.rfind("run-", 0) == 0 && entry.path().extension() == ".log")) {
      fs::remove_all(entry.path(), ec);
    }
  }
}

// The command lines of one configuration, fix off and on, as its children run them: the scenario's
// options with a rung's added, every call checked (several calls: kReportIters, or kReportLayerPasses
// passes over several layers, unless --iters says otherwise; a rung of steps counts steps, a given
// --iters being the other rungs').
void set_commands(ReportInput& in, const RunSpec& base, const RunSpec& rung, LogLevel log, const std::string& fix_form) {
  RunSpec common = base;
  if (rung.steps) common.iters.reset();
  common.overlay(rung);
  const bool several_layers = common.layers && *common.layers != "1";
  if (!common.iters && !common.steps) common.iters = several_layers ? kReportLayerPasses : kReportIters;
  common.check = true;
  // Every layer's values are counted for NaN, but only the last is compared with its reference:
  // each layer's float64 reference at the image workload's size costs seconds of every core, and
  // the report is about whether the runs hang.
  if (several_layers) common.check_layers = "last";
  common.log = log_level_name(log);
  for (bool fix_on : {false, true}) {
    RunSpec spec = common;
    spec.fix = !fix_on ? "off" : fix_form == "lean" ? "lean" : "on";
    (fix_on ? in.args_on : in.args_off) = spec.to_argv();
    (fix_on ? in.spec_on : in.spec_off) = spec;
    (fix_on ? in.fix_on : in.fix_off) = validate_run_spec(spec);
  }
}

// The layers a rung's runs ran, from their results' memory plans: "32 of 60 (as many as fit)" where
// --layers-fit took fewer than asked (the runs may fit different numbers: "31-32 of 60 ..."), "4",
// or "" where no run wrote a plan.
std::string layers_run(const ReportInput& in) {
  int64_t fewest = 0, most = 0, asked = 0;
  for (const ReportRun& r : in.runs) {
    if (!r.result || !r.result->is_object()) continue;
    const nlohmann::json plan = r.result->value("memory_plan", nlohmann::json());
    if (!plan.is_object() || !plan.value("layers", nlohmann::json()).is_number_integer()) continue;
    const int64_t layers = plan["layers"].get<int64_t>();
    fewest = fewest == 0 ? layers : std::min(fewest, layers);
    most = std::max(most, layers);
    if (plan.value("layers_asked", nlohmann::json()).is_number_integer()) asked = std::max(asked, plan["layers_asked"].get<int64_t>());
  }
  if (most == 0) return "";
  std::string s = std::to_string(fewest) + (most != fewest ? "-" + std::to_string(most) : "");
  return asked > most ? s + " of " + std::to_string(asked) + " (as many as fit)" : s;
}

// "fix off: 1 hang; fix on: 1 pass"
std::string outcome_counts(const ReportInput& in) {
  std::string s;
  for (bool fix_on : {false, true}) {
    std::map<std::string, int> counts;
    for (const ReportRun& r : in.runs) {
      if (r.fix_on == fix_on) ++counts[r.result ? outcome_word(*r.result) : "no result"];
    }
    s += std::string(fix_on ? "; fix on: " : "fix off: ");
    bool first = true;
    for (const auto& [word, n] : counts) {
      s += (first ? "" : ", ") + std::to_string(n) + " " + word;
      first = false;
    }
  }
  return s;
}

// What a report will do, decided and checked before anything runs or is written: its two
// configurations (fix off and on) per rung, the rungs, the reproducer of the first.
struct ReportPlan {
  ReportInput in;
  RunSpec base;                     // the runs' options without the rung's
  LogLevel log = LogLevel::stages;  // every run logs its stages, at least
  std::vector<LadderRung> rungs;    // {one rung of no options} without --ladder
  std::string reproducer;
};

ReportPlan plan_report(const ReportRequest& r, const std::vector<std::string>& words) {
  check_dir_creatable("--out", r.out_dir);
  ReportPlan plan;
  ReportInput& in = plan.in;
  in.report_argv = words;
  in.report_argv[0] = "report";
  in.repeat = r.repeat;
  in.no_run = r.no_run;
  in.created_utc = utc_now();
  const RunOptions given = validate_run_spec(r.run, RunCommand::report);
  check_reproducible(given);
  if (given.inject.kind != FaultSpec::none && !r.allow_inject) {
    throw InputError("--inject: a report documents a real run; an injected fault would read as the finding "
                     "(--allow-inject lets it through to test the report itself, and says so in its title)");
  }
  if (!given.waiver.empty()) throw InputError("this configuration is waived: " + given.waiver);
  plan.log = given.log > LogLevel::stages ? given.log : LogLevel::stages;
  // The runs' options: the report's own decide the fix, the checks, the log and where files go.
  plan.base = r.run;
  plan.base.log.reset();
  // One configuration, or the context ladder's rungs (each checked now, before anything runs).
  plan.rungs = {LadderRung{}};
  if (r.ladder) {
    const ScenarioInfo& sc = scenario_info(given.scenario);
    if (sc.no_ladder) {
      throw InputError("--ladder: scenario " + std::to_string(sc.number) + " is not climbed by the context ladder: " +
                       sc.no_ladder);
    }
    ContextLadderValues values;
    values.scenario = given.scenario;
    if (!given.workload.empty()) values.layers = "model";
    plan.base = take_ladder_values(plan.base, values);
    // A captured call's runs would take its process again from the file (its layers, its ballast):
    // the rungs give those, so the first rung is the call alone.
    if (plan.base.workload_file) plan.base.call_only = true;
    plan.rungs = ladder_rungs(values);
    for (auto rung = plan.rungs.begin(); rung != plan.rungs.end();) {
      ReportInput probe;
      try {
        set_commands(probe, plan.base, rung->options, plan.log, r.fix_form);
      } catch (const InputError& e) {
        // A fix whose forward keeps nothing (fix 5's recompute and chunks) has no backward call
        // yet: the ladder ends at the steps. Any other rung that cannot run is the command's error.
        if (rung->name != "backward") throw;
        std::cout << "repro report: the backward rung is left out: " << e.what() << "\n";
        rung = plan.rungs.erase(rung);
        continue;
      }
      ++rung;
    }
  }
  set_commands(in, plan.base, plan.rungs.front().options, plan.log, r.fix_form);
  // The reproducer holds one call: the first rung's (the isolated call) with --ladder, and of a
  // configuration with a training context, its call without it (the report says what it leaves out).
  plan.reproducer = reproducer_of(in);
  std::error_code ec;
  const fs::file_status status = fs::status(r.out_dir, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) throw InputError("--out: " + r.out_dir + " exists and is not a directory");
    if (!r.force) throw InputError("--out: " + r.out_dir + " exists; use --force to replace the report in it");
  }
  return plan;
}

int write_report(const ReportRequest& r, ReportPlan plan) {
  ReportInput& in = plan.in;
  const std::string& out_dir = r.out_dir;
  std::error_code ec;
  const std::string self = r.repro_binary.empty() ? self_executable() : r.repro_binary;
  ScratchDir scratch;
  query_environment_in_child(self, scratch, in);
  if (r.no_run && r.ladder) in.ladder = plan.rungs;  // the rungs it would climb
  if (!r.no_run) {
    fs::create_directories(out_dir, ec);
    if (ec) throw InputError("--out: cannot create " + out_dir + ": " + ec.message());
    remove_earlier_runs(out_dir);
    int index = 0;
    for (LadderRung& rung : plan.rungs) {
      set_commands(in, plan.base, rung.options, plan.log, r.fix_form);
      in.runs.clear();
      // Fix on first: a hang with the fix off may leave the GPU unusable, and must not pass for
      // the fix failing.
      const int total = 2 * r.repeat;
      for (bool fix_on : {true, false}) {
        for (int k = 1; k <= r.repeat; ++k) {
          ++index;
          std::cout << "repro report: " << (r.ladder ? "rung " + rung.name + ": " : std::string()) << "run "
                    << in.runs.size() + 1 << " of " << total << ": fix " << (fix_on ? "on" : "off") << " (" << k << " of "
                    << r.repeat << ") ... " << std::flush;
          in.runs.push_back(run_once(self, scratch, out_dir, fix_on ? in.spec_on : in.spec_off, fix_on, k, index));
          const ReportRun& run = in.runs.back();
          char wall[32];
          std::snprintf(wall, sizeof wall, "%.2f s", run.wall_s);
          std::cout << (run.result ? outcome_word(*run.result) : std::string("no result"))
                    << " (exit " << run.exit_code << ", " << wall << ")\n";
        }
      }
      if (!r.ladder) break;
      rung.finding = report_finding(in);
      rung.outcomes = outcome_counts(in);
      rung.layers = layers_run(in);
      in.ladder.push_back(rung);
      std::cout << "repro report: rung " << rung.name << ": " << rung.finding << " (" << rung.outcomes << ")\n";
      // The climb stops at the first rung that hangs, stalls or fails: the report is about it. A
      // rung the memory guard refuses stops it too (its runs fit their layers to the memory first,
      // so not even one layer fitted: every rung above keeps at least that), and so does a
      // machine without a GPU.
      if (finding_ends_climb(rung.finding) || rung.finding == "no_gpu") break;
    }
    if (r.ladder) plan.reproducer = reproducer_of(in);
  }

  fs::create_directories(out_dir, ec);
  if (ec) throw InputError("--out: cannot create " + out_dir + ": " + ec.message());
  const fs::path dir(out_dir);
  const std::string cu = reproducer_file_name(in.fix_off.scenario);
  write_file_atomic((dir / cu).string(), plan.reproducer);
  write_file_atomic((dir / "result.json").string(), report_json(in).dump(2) + "\n");
  write_file_atomic((dir / "stage.log").string(), report_stage_log(in));
  write_file_atomic((dir / "REPORT.md").string(), report_markdown(in));
  std::cout << "repro report: wrote " << out_dir << "/{REPORT.md, result.json, stage.log, " << cu << "}\n"
            << "# " << report_title(in) << "\n";
  return report_finding(in) == "no_gpu" ? kExitNoGpu : kExitPass;
}

}  // namespace

int report_main(int argc, char** argv) {
  const ReportParse parsed = parse_report_command_line(argc, argv);
  if (!parsed.run) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  try {
    return write_report(parsed.request, plan_report(parsed.request, parsed.words));
  } catch (const std::exception& e) {  // InputError; a generator bug (std::logic_error) reads the same way
    std::cerr << "repro report: error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
}

void validate_report(const ReportRequest& request) {
  std::vector<std::string> words = request.to_argv();
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  const ReportParse parsed = parse_report_command_line(static_cast<int>(argv.size()), argv.data());
  const std::string prefix = "repro report: error: ";
  if (!parsed.run) {
    throw InputError(parsed.message.rfind(prefix, 0) == 0 ? parsed.message.substr(prefix.size()) : parsed.message);
  }
  plan_report(parsed.request, parsed.words);
}

}  // namespace sdpa
