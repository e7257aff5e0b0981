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
// Each run makes kReportIters (25) calls unless --iters says otherwise, and checks every call's
// result. The report takes the run options except those it decides itself (RunCommand::report):
// they are not registered, so giving one is an unknown option.
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
#include "repro/cli/help_format.h"
#include "repro/cli/run_options.h"
#include "repro/commands.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "repro/report/report_writer.h"
#include "repro/report/reproducer/generator.h"
#include "repro/run/run_json.h"
#include "repro/supervise/child_process.h"
#include "scenarios/scenario.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;

constexpr double kInfoTimeoutS = 60;  // `repro info` only queries; longer means a stuck driver

// The run options of the report's command line: without the report's own options, and
// without --log, which the report sets for every run.
std::vector<std::string> run_args(int argc, char** argv) {
  static const std::set<std::string> with_value = {"--out", "--repeat", "--log", "--fix-form", "--repro-binary"};
  static const std::set<std::string> flags = {"--no-run", "--force", "--allow-inject", "--ladder"};
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i], name = arg.substr(0, arg.find('='));
    if (flags.count(arg)) continue;
    if (with_value.count(name)) {
      if (name == arg) ++i;  // "--out DIR" rather than "--out=DIR"
      continue;
    }
    out.push_back(arg);
  }
  return out;
}

// The options a run's child parses from `args`: the report's two configurations are read from
// the commands it runs, so what REPORT.md and the reproducer describe is what the children ran.
RunOptions options_of_child(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"repro"};
  for (const auto& a : args) argv.push_back(a.c_str());
  const ParseResult parsed = parse_command_line(static_cast<int>(argv.size()), argv.data());
  if (!parsed.run) throw InputError(parsed.message);
  return parsed.options;
}

std::string read_text(const fs::path& path) { return read_file(path.string()).value_or(""); }

// --ladder: the options that set a rung's values are taken out of the scenario's command (each
// rung adds them where it climbs); the values they give replace the ladder's own.
std::vector<std::string> take_ladder_values(const std::vector<std::string>& args, LadderValues& v) {
  const std::map<std::string, std::string*> slots = {
      {"--layers", &v.layers},   {"--ballast", &v.ballast},     {"--ballast-alloc", &v.ballast_alloc},
      {"--ballast-touch", &v.ballast_touch}, {"--host-load", &v.host_load}, {"--steps", &v.steps}};
  static const std::set<std::string> decided = {"--alloc-timing", "--retain", "--backward"};  // the rungs decide them
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i], name = arg.substr(0, arg.find('='));
    const bool inline_value = name != arg;
    const std::string value = inline_value ? arg.substr(name.size() + 1) : (i + 1 < args.size() ? args[i + 1] : "");
    const auto slot = slots.find(name);
    if (slot == slots.end() && !decided.count(name)) {
      rest.push_back(arg);
      continue;
    }
    if (decided.count(name)) {
      throw InputError(name + ": with --ladder the rungs decide it (per-call from the second rung, autograd retention from "
                              "the third, the backward pass at the last)");
    }
    *slot->second = value;
    if (!inline_value) ++i;
  }
  return rest;
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
  if (o.context.host_load_threads > 0) out.push_back("the host load");
  if (o.steps) out.push_back("the steps");
  if (s.alloc == AllocKind::vmm) out.push_back("vmm memory (cudaMalloc there)");
  for (PathSettings* p : {&o.conditions, &o.settings}) {
    if (p->alloc == AllocKind::vmm) p->alloc = AllocKind::device;
    p->alloc_timing = AllocTiming::upfront;
    p->layers = 1;
    p->retain = backward ? Retain::autograd : Retain::none;
    p->chunk_bytes = 0;
  }
  o.problem.precision = o.problem_given.precision;
  o.context = ContextSettings{};
  std::string words;
  for (size_t i = 0; i < out.size(); ++i) words += (i == 0 ? "" : i + 1 == out.size() ? " and " : ", ") + out[i];
  if (leaves_out) *leaves_out = words;
  return o;
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

ReportRun run_once(const std::string& self, const ScratchDir& scratch, const fs::path& out_dir,
                   const std::vector<std::string>& args, bool fix_on, int repeat, int index) {
  ReportRun run;
  run.fix_on = fix_on;
  run.repeat = repeat;
  run.args = args;
  run.snapshot_dir = snapshot_name(index);
  const fs::path json = scratch.path / ("run" + std::to_string(index) + ".json");
  const fs::path output = scratch.path / ("run" + std::to_string(index) + ".log");
  const fs::path log = out_dir / run_log_name(index);
  std::vector<std::string> with_json = args;
  with_json.insert(with_json.end(), {"--json", json.string(), "--log-file", log.string(), "--snapshot-dir",
                                     (out_dir / run.snapshot_dir).string()});
  const ChildResult r = run_child(self, with_json, output.string(), output.string());
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

// The command lines of one configuration, fix off and on, as its children run them.
void set_commands(ReportInput& in, const std::vector<std::string>& base, const std::vector<std::string>& rung_options,
                  bool iters_given, LogLevel log, const std::string& fix_form) {
  // Repeated calls by default (kReportIters), every call's result checked (--check over several
  // calls); each child is told the count. A rung of steps counts steps instead (a given --iters
  // is the other rungs').
  const bool steps = std::find(rung_options.begin(), rung_options.end(), "--steps") != rung_options.end();
  std::vector<std::string> common;
  for (size_t i = 0; i < base.size(); ++i) {
    if (steps && (base[i] == "--iters" || base[i].rfind("--iters=", 0) == 0)) {
      if (base[i] == "--iters") ++i;
      continue;
    }
    common.push_back(base[i]);
  }
  common.insert(common.end(), rung_options.begin(), rung_options.end());
  if (!iters_given && !steps) common.insert(common.end(), {"--iters", std::to_string(kReportIters)});
  for (bool fix_on : {false, true}) {
    std::vector<std::string>& args = fix_on ? in.args_on : in.args_off;
    args = common;
    args.insert(args.end(), {"--check", "--log", log_level_name(log), "--fix", !fix_on ? "off" : fix_form == "lean" ? "lean" : "on"});
    (fix_on ? in.fix_on : in.fix_off) = options_of_child(args);
  }
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

int write_report(CLI::App& app, const RunOptionParser& parser, int argc, char** argv, const std::string& out_dir,
                 int repeat, bool no_run, bool force, bool allow_inject, const std::string& fix_form, bool ladder,
                 const std::string& repro_binary) {
  check_dir_creatable("--out", out_dir);
  ReportInput in;
  in.report_argv.assign(argv, argv + argc);
  in.report_argv[0] = "report";
  in.repeat = repeat;
  in.no_run = no_run;
  in.created_utc = utc_now();
  const RunOptions given = parser.finish(argc, argv);
  check_reproducible(given);
  if (given.inject.kind != FaultSpec::none && !allow_inject) {
    throw InputError("--inject: a report documents a real run; an injected fault would read as the finding "
                     "(--allow-inject lets it through to test the report itself, and says so in its title)");
  }
  if (!given.waiver.empty()) throw InputError("this configuration is waived: " + given.waiver);
  // Every run logs its stages (at least), and every run is checked against the reference.
  const LogLevel log = given.log > LogLevel::stages ? given.log : LogLevel::stages;
  std::vector<std::string> base = run_args(argc, argv);
  // One configuration, or the context ladder's rungs (each checked now, before anything runs).
  std::vector<LadderRung> rungs = {LadderRung{}};
  if (ladder) {
    LadderValues values;
    if (!given.workload.empty()) values.layers = "model";
    base = take_ladder_values(base, values);
    rungs = ladder_rungs(values);
    for (auto r = rungs.begin(); r != rungs.end();) {
      ReportInput probe;
      try {
        set_commands(probe, base, r->options, app.count("--iters") > 0, log, fix_form);
      } catch (const InputError& e) {
        // A fix whose forward keeps nothing (fix 5's recompute and chunks) has no backward call
        // yet: the ladder ends at the steps. Any other rung that cannot run is the command's error.
        if (r->name != "backward") throw;
        std::cout << "repro report: the backward rung is left out: " << e.what() << "\n";
        r = rungs.erase(r);
        continue;
      }
      ++r;
    }
  }
  set_commands(in, base, rungs.front().options, app.count("--iters") > 0, log, fix_form);
  // The reproducer holds one call: the first rung's (the isolated call) with --ladder, and of a
  // configuration with a training context, its call without it (the report says what it leaves out).
  auto reproducer_of = [&](const ReportInput& r) {
    const RunOptions off = one_call(r.fix_off, &in.reproducer_leaves_out), on = one_call(r.fix_on, nullptr);
    return generate_reproducer(off, on, display_command(r.args_off), display_command(r.args_on));
  };
  std::string reproducer = reproducer_of(in);

  std::error_code ec;
  const fs::file_status status = fs::status(out_dir, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) throw InputError("--out: " + out_dir + " exists and is not a directory");
    if (!force) throw InputError("--out: " + out_dir + " exists; use --force to replace the report in it");
  }

  const std::string self = repro_binary.empty() ? self_executable() : repro_binary;
  ScratchDir scratch;
  query_environment_in_child(self, scratch, in);
  if (no_run && ladder) in.ladder = rungs;  // the rungs it would climb
  if (!no_run) {
    fs::create_directories(out_dir, ec);
    if (ec) throw InputError("--out: cannot create " + out_dir + ": " + ec.message());
    remove_earlier_runs(out_dir);
    int index = 0;
    for (LadderRung& rung : rungs) {
      set_commands(in, base, rung.options, app.count("--iters") > 0, log, fix_form);
      in.runs.clear();
      // Fix on first: a hang with the fix off may leave the GPU unusable, and must not pass for
      // the fix failing.
      const int total = 2 * repeat;
      for (bool fix_on : {true, false}) {
        for (int k = 1; k <= repeat; ++k) {
          ++index;
          std::cout << "repro report: " << (ladder ? "rung " + rung.name + ": " : std::string()) << "run "
                    << in.runs.size() + 1 << " of " << total << ": fix " << (fix_on ? "on" : "off") << " (" << k << " of "
                    << repeat << ") ... " << std::flush;
          in.runs.push_back(run_once(self, scratch, out_dir, fix_on ? in.args_on : in.args_off, fix_on, k, index));
          const ReportRun& r = in.runs.back();
          char wall[32];
          std::snprintf(wall, sizeof wall, "%.2f s", r.wall_s);
          std::cout << (r.result ? outcome_word(*r.result) : std::string("no result"))
                    << " (exit " << r.exit_code << ", " << wall << ")\n";
        }
      }
      if (!ladder) break;
      rung.finding = report_finding(in);
      rung.outcomes = outcome_counts(in);
      in.ladder.push_back(rung);
      std::cout << "repro report: rung " << rung.name << ": " << rung.finding << " (" << rung.outcomes << ")\n";
      // The climb stops at the first rung that hangs, stalls or fails: the report is about it. A
      // rung the memory guard refuses stops it too (every rung above keeps its layers), and so does
      // a machine without a GPU.
      if (finding_ends_climb(rung.finding) || rung.finding == "no_gpu") break;
    }
    if (ladder) reproducer = reproducer_of(in);
  }

  fs::create_directories(out_dir, ec);
  if (ec) throw InputError("--out: cannot create " + out_dir + ": " + ec.message());
  const fs::path dir(out_dir);
  const std::string cu = reproducer_file_name(in.fix_off.scenario);
  write_file_atomic((dir / cu).string(), reproducer);
  write_file_atomic((dir / "result.json").string(), report_json(in).dump(2) + "\n");
  write_file_atomic((dir / "stage.log").string(), report_stage_log(in));
  write_file_atomic((dir / "REPORT.md").string(), report_markdown(in));
  std::cout << "repro report: wrote " << out_dir << "/{REPORT.md, result.json, stage.log, " << cu << "}\n"
            << "# " << report_title(in) << "\n";
  return report_finding(in) == "no_gpu" ? kExitNoGpu : kExitPass;
}

}  // namespace

int report_main(int argc, char** argv) {
  CLI::App app{"repro report: a bug-report folder for NVIDIA. Runs the scenario with its own fix off and on (--repeat "
               "K times each, every run supervised as a plain run is, every call checked) and writes DIR/REPORT.md "
               "(the finding, the environment, the exact commands, expected and actual, how often, the hung stage, "
               "stage times, fix off/on), DIR/result.json, DIR/stage.log and DIR/repro_scenarioN.cu, a single-file "
               "reproducer. --no-run writes all of it without a GPU. The report decides the fixes, the checks and "
               "where every file goes, so it takes no --fix, --fixes, --check, --json, --save-output, --log-file, "
               "--snapshot-dir, --no-fork or --inputs.",
               "repro report"};
  use_help_format(app, "repro report --out DIR --scenario N [--repeat K] [--no-run] [run options]");
  app.footer("Exit codes: 0 the folder was written; 2 usage (nothing run, nothing written); 7 the folder was "
             "written but no run found a usable GPU.");
  std::string out_dir;
  int repeat = 1;
  bool no_run = false, force = false, allow_inject = false, ladder = false;
  std::string repro_binary;
  std::string fix_form = "design";
  app.option_defaults()->group("Report");
  app.add_option("--out", out_dir, "the report folder (must not exist, unless --force)")->required()->option_text("DIR");
  app.add_option("--repeat", repeat, "runs of each setting, fix off and fix on")
      ->check(CLI::Range(1, 1000))
      ->option_text("K")
      ->capture_default_str();
  app.add_flag("--no-run", no_run, "write what needs no GPU: the reproducer, the commands, the REPORT.md template");
  app.add_flag("--force", force, "replace the report in an existing --out folder");
  app.add_option("--fix-form", fix_form, "the fix-on runs' fix: as designed, or its lean form (docs/FIXES.md)")
      ->check(CLI::IsMember({"design", "lean"}))
      ->option_text("design|lean")
      ->capture_default_str();
  app.add_flag("--ladder", ladder,
               "climb the context ladder: the scenario isolated, then per-call allocation, layers with autograd's "
               "retention, a ballast, a host load, steps, the backward pass (docs/CONTEXT.md); stop at the first rung that "
               "hangs or fails "
               "and report it. --layers, --ballast*, --host-load and --steps set their rungs' values");
  app.add_option("--repro-binary", repro_binary, "the program each run runs (tests)")->group("");
  app.add_flag("--allow-inject", allow_inject,
               "for testing the report itself: let --inject through (refused otherwise); the title then says the "
               "fault was injected");
  RunOptionParser parser(app, RunCommand::report);
  ParseResult parsed;
  if (!parse_run_app(app, argc, argv, "repro report", parsed)) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  // The command line as parsed: a --workload-file call's derived options are every run's.
  std::vector<std::string> words = parsed.words;
  std::vector<char*> word_ptrs;
  for (std::string& w : words) word_ptrs.push_back(w.data());
  try {
    return write_report(app, parser, static_cast<int>(word_ptrs.size()), word_ptrs.data(), out_dir, repeat, no_run, force,
                        allow_inject, fix_form, ladder, repro_binary);
  } catch (const std::exception& e) {  // InputError; a generator bug (std::logic_error) reads the same way
    std::cerr << "repro report: error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
}

}  // namespace sdpa
