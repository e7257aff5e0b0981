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
// of it without running anything (no GPU needed). With --ladder each rung climbed is added to
// DIR/ladder.json (atomically) as it ends, so that --resume goes on from the rung a climb that was
// stopped (a triage's share of its budget, a kill) had reached.
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
#include "repro/cli/workload_file.h"
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
// rung adds them where it climbs); the values they give replace the ladder's own. A captured
// process (`captured`: the options its call derives) gives its values the same way, its retention
// too (activation checkpointing climbs as checkpointed layers), and the backward pass a
// checkpointed step derives is the last rung's, as the ladder's own.
RunSpec take_ladder_values(RunSpec base, const std::vector<DerivedOption>& captured, ContextLadderValues& v) {
  const auto captured_value = [&](const std::string& name) -> std::optional<std::string> {
    for (const DerivedOption& d : captured) {
      if (d.name == name) return d.value;
    }
    return std::nullopt;
  };
  for (const char* decided : {"--alloc-timing", "--retain", "--backward"}) {
    if (!base.given(decided)) continue;
    if (captured_value(decided) == base.value(decided)) {
      base.unset(decided);
      continue;
    }
    throw InputError(std::string(decided) + ": with --ladder the rungs decide it (per-call from the second rung, the "
                     "layers' retention from the third, the backward pass at the last)");
  }
  if (const auto retain = captured_value("--retain")) v.retain = *retain;
  if (base.layers) v.layers = *base.layers;
  if (base.ballast) v.ballast = *base.ballast;
  if (base.ballast_alloc) v.ballast_alloc = *base.ballast_alloc;
  if (base.ballast_touch) v.ballast_touch = *base.ballast_touch;
  if (base.mapped_weights) v.mapped_weights = *base.mapped_weights;
  if (base.weights_mapping) v.weights_mapping = *base.weights_mapping;
  if (base.host_load) v.host_load = *base.host_load;
  if (base.steps) v.steps = *base.steps;
  for (const char* taken : {"--layers", "--ballast", "--ballast-alloc", "--ballast-touch", "--mapped-weights",
                            "--weights-mapping", "--host-load", "--steps"}) {
    base.unset(taken);
  }
  return base;
}

// The single-file reproducer of the report's configuration (with --ladder, the last rung climbed:
// the one the finding is about), printed from the same call plan as the runs, with every condition
// they had. Where the runs fitted their layers to the memory (--layers-fit), it runs as many as they
// ran (each fix setting's first run's memory plan).
std::string reproducer_of(const ReportInput& in) {
  RunOptions off = in.fix_off, on = in.fix_on;
  for (RunOptions* o : {&off, &on}) {
    for (const ReportRun& run : in.runs) {
      if (run.fix_on != (o == &on) || !run.result || !run.result->is_object()) continue;
      const nlohmann::json plan = run.result->value("memory_plan", nlohmann::json());
      if (!o->layers_fit || !plan.is_object() || !plan.value("layers", nlohmann::json()).is_number_integer()) break;
      o->settings.layers = o->conditions.layers = plan["layers"].get<int>();
      o->layers_fit = false;
      break;
    }
  }
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
  if (r.resume && !r.ladder) throw InputError("--resume: it goes on with a --ladder climb");
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
    std::vector<DerivedOption> captured;
    if (plan.base.workload_file && !plan.base.call_only) {
      captured = replay_call(load_workload_file(*plan.base.workload_file), static_cast<int>(plan.base.call.value_or(0))).context;
    }
    plan.base = take_ladder_values(plan.base, captured, values);
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
  // The reproducer of the configuration (with --ladder, of the rung the climb ends at: made again then).
  plan.reproducer = reproducer_of(in);
  std::error_code ec;
  const fs::file_status status = fs::status(r.out_dir, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) throw InputError("--out: " + r.out_dir + " exists and is not a directory");
    if (!r.force && !r.resume) throw InputError("--out: " + r.out_dir + " exists; use --force to replace the report in it");
  }
  return plan;
}

// ladder.json: the rungs climbed so far, each with what its runs found and its fix-off command
// (what a resume checks it is the same climb), and the next run's number.
std::string ladder_progress_path(const fs::path& out_dir) { return (out_dir / "ladder.json").string(); }

void write_ladder_progress(const fs::path& out_dir, const ReportInput& in, const std::vector<std::vector<std::string>>& commands,
                           int next_run) {
  nlohmann::json rungs = nlohmann::json::array();
  for (size_t i = 0; i < in.ladder.size(); ++i) {
    const LadderRung& r = in.ladder[i];
    rungs.push_back({{"rung", r.name}, {"finding", r.finding}, {"outcomes", r.outcomes}, {"layers", r.layers},
                     {"command_fix_off", commands[i]}});
  }
  write_file_atomic(ladder_progress_path(out_dir), nlohmann::json{{"rungs", rungs}, {"next_run", next_run}}.dump(1) + "\n");
}

// --resume: the rungs an earlier climb into `out_dir` recorded, when they are this plan's rungs
// with the same commands, are taken as climbed (into in.ladder and `commands`, `index` past their
// runs); returns the first rung to climb. The last one recorded is climbed again when it ended the
// climb or no rung is left, so that the report has its runs. No ladder.json: from the first rung.
size_t resume_climb(const fs::path& out_dir, const ReportRequest& r, const ReportPlan& plan, ReportInput& in,
                    std::vector<std::vector<std::string>>& commands, int& index) {
  const std::optional<std::string> text = read_file(ladder_progress_path(out_dir));
  if (!text) {
    std::cout << "repro report: --resume: no climb to go on with in " << out_dir.string() << ": from the first rung\n";
    return 0;
  }
  const std::string refused = "--resume: " + ladder_progress_path(out_dir) + " ";
  nlohmann::json progress;
  try {
    progress = nlohmann::json::parse(*text);
    for (const nlohmann::json& rung : progress.at("rungs")) {
      const size_t i = in.ladder.size();
      ReportInput probe;
      if (i < plan.rungs.size()) set_commands(probe, plan.base, plan.rungs[i].options, plan.log, r.fix_form);
      if (i >= plan.rungs.size() || rung.at("rung") != plan.rungs[i].name || rung.at("command_fix_off") != probe.args_off) {
        throw InputError(refused + "was climbed with other options (its rung " + std::to_string(i + 1) +
                         "): --force without --resume climbs again from the first rung");
      }
      LadderRung climbed = plan.rungs[i];
      climbed.finding = rung.at("finding").get<std::string>();
      climbed.outcomes = rung.at("outcomes").get<std::string>();
      climbed.layers = rung.at("layers").get<std::string>();
      in.ladder.push_back(climbed);
      commands.push_back(probe.args_off);
    }
    index = progress.at("next_run").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(refused + "cannot be read (" + one_line(e.what()) + "): --force without --resume climbs again");
  }
  if (!in.ladder.empty() &&
      (in.ladder.size() == plan.rungs.size() || finding_ends_climb(in.ladder.back().finding) || in.ladder.back().finding == "no_gpu")) {
    in.ladder.pop_back();
    commands.pop_back();
  }
  for (const LadderRung& rung : in.ladder) {
    std::cout << "repro report: rung " << rung.name << ": climbed before: " << rung.finding << " (" << rung.outcomes << ")\n";
  }
  return in.ladder.size();
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
    int index = 0;
    std::vector<std::vector<std::string>> commands;  // each rung climbed: its fix-off command (ladder.json)
    const size_t first = r.resume ? resume_climb(out_dir, r, plan, in, commands, index) : 0;
    // The runs of a climb it goes on with are kept; a report it replaces goes with its runs and climb.
    if (index == 0) {
      remove_earlier_runs(out_dir);
      fs::remove(ladder_progress_path(out_dir), ec);
    }
    for (size_t rung_index = first; rung_index < plan.rungs.size(); ++rung_index) {
      LadderRung& rung = plan.rungs[rung_index];
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
      commands.push_back(in.args_off);
      write_ladder_progress(out_dir, in, commands, index);
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
