// cmd_minimize.cpp: `repro minimize`, its command line (minimizer.h does the work).
//
//   repro minimize --out DIR [options] -- RUN OPTIONS      a configuration given as run options
//   repro minimize --out DIR --from-sweep FILE --cell K    a sweep's cell (sweep.json or .jsonl)
//   repro minimize --out DIR --from-report DIR             a report's failing configuration (fix off;
//                                                          with --ladder, the rung it stopped at)
//   repro minimize --out DIR --resume [--budget T]          go on after an interruption or a freeze
#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "math_sdpa/errors.h"
#include "repro/cli/help_format.h"
#include "repro/cli/run_options.h"
#include "repro/commands.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "repro/minimize/minimizer.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) items.push_back(item);
  return items;
}

// The run options of cell `index` of a sweep's document or JSON-lines file.
RunSpec sweep_cell_options(std::string path, int index) {
  // A sweep's folder (its --out) holds its document: the cells are in sweep.json.
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (!fs::exists(fs::path(path) / "sweep.json", ec)) {
      throw InputError("--from-sweep: " + path + " is a folder without a sweep.json (name a sweep's --out folder, its sweep.json or its sweep.jsonl)");
    }
    path = (fs::path(path) / "sweep.json").string();
  }
  const std::optional<std::string> text = read_file(path);
  if (!text) throw InputError("--from-sweep: " + path + " cannot be read");
  std::vector<json> cells;
  try {
    if (!text->empty() && text->front() == '{' && text->find("\"cells\"") != std::string::npos) {
      // Named: a range-for over parse(...).at(...) would read the parsed document after it is gone.
      const json doc = json::parse(*text);
      for (const json& c : doc.at("cells")) cells.push_back(c);
    } else {
      std::istringstream lines(*text);
      for (std::string line; std::getline(lines, line);) {
        if (!line.empty()) cells.push_back(json::parse(line));
      }
    }
  } catch (const json::exception& e) {
    throw InputError("--from-sweep: " + path + " is not a sweep document or JSON-lines file (" + one_line(e.what()) + ")");
  }
  for (const json& c : cells) {
    if (c.value("index", -1) != index) continue;
    try {
      return RunSpec::from_json(c.at("run_options"));
    } catch (const json::exception& e) {
      throw InputError("--from-sweep: cell " + std::to_string(index) + " of " + path + " has no run_options (" +
                       one_line(e.what()) + ")");
    }
  }
  throw InputError("--cell " + std::to_string(index) + ": " + path + " has no such cell");
}

// A report's failing configuration: its fix-off command (at the rung a ladder stopped at), from
// its result.json.
RunSpec report_options_of(const std::string& dir) {
  const std::string path = (fs::path(dir) / "result.json").string();
  const std::optional<std::string> text = read_file(path);
  if (!text) throw InputError("--from-report: " + path + " cannot be read");
  try {
    return RunSpec::from_json(json::parse(*text).at("run_options").at("fix_off"));
  } catch (const json::exception& e) {
    throw InputError("--from-report: " + path + " has no run_options.fix_off (" + one_line(e.what()) + ")");
  }
}

}  // namespace

std::vector<std::string> MinimizeRequest::to_argv() const {
  std::vector<std::string> args{"minimize", "--out", out_dir, "--runs", std::to_string(runs), "--budget",
                                format_number("%.0f", budget_s) + "s"};
  if (resume) args.push_back("--resume");
  if (force) args.push_back("--force");
  if (!from_sweep.empty()) args.insert(args.end(), {"--from-sweep", from_sweep, "--cell", std::to_string(cell)});
  if (!from_report.empty()) args.insert(args.end(), {"--from-report", from_report});
  if (!repro_binary.empty()) args.insert(args.end(), {"--repro-binary", repro_binary});
  const std::vector<std::string> options = run.to_argv();
  if (!options.empty()) {
    args.push_back("--");
    args.insert(args.end(), options.begin(), options.end());
  }
  return args;
}

namespace {

// What `repro minimize` was given, as typed, until finish_minimize_settings checks it.
struct MinimizeArgs {
  MinimizeSettings s;
  std::string budget = "1h", run_timeout = "10m", fails_with, in_flight = "hang", from_sweep, from_report;
  int cell = -1;
  bool resume = false, force = false, no_report = false;
  std::vector<std::string> run_options;
};

void add_minimize_options(CLI::App& app, MinimizeArgs& a) {
  MinimizeSettings& s = a.s;
  app.add_option("--out", s.out_dir, "the minimization's folder: state.json, progress.log, runs/, SUMMARY.md, report/")
      ->required()
      ->option_text("DIR");
  app.add_option("--runs", s.runs, "runs of each configuration; it still fails if one of them fails")
      ->check(CLI::Range(1, 1000))
      ->option_text("N")
      ->capture_default_str();
  app.add_option("--budget", a.budget, "the whole minimization's time, the time before a --resume included")
      ->option_text("TIME")
      ->capture_default_str();
  app.add_option("--run-timeout", a.run_timeout, "a run's deadline (its watchdog names most hangs long before)")
      ->option_text("TIME")
      ->capture_default_str();
  app.add_option("--fails-with", a.fails_with,
                 "failure classes to keep, joined by commas: hang, stall, mismatch, error, crash (default: those "
                 "the given configuration shows)")
      ->option_text("LIST");
  app.add_option("--in-flight", a.in_flight,
                 "on --resume, a run in flight when the machine stopped, or whose process is still there (stuck): "
                 "hang (count it) or retry (run it again); a run only interrupted (its process gone, same boot) runs again")
      ->check(CLI::IsMember({"hang", "retry"}))
      ->option_text("hang|retry")
      ->capture_default_str();
  app.add_option("--from-sweep", a.from_sweep, "take the configuration of a sweep's cell (with --cell)")->option_text("FILE");
  app.add_option("--cell", a.cell, "the sweep cell's index (from 0)")->option_text("K")->check(CLI::Range(0, 100000));
  app.add_option("--from-report", a.from_report, "take a report's failing configuration (its fix-off runs)")->option_text("DIR");
  app.add_flag("--resume", a.resume, "go on with the minimization in --out");
  app.add_flag("--force", a.force, "start again over a minimization already in --out");
  app.add_flag("--no-report", a.no_report, "do not run `repro report` on the smallest configuration");
  app.add_option("--repro-binary", s.repro_binary, "the program each run runs (tests)")->group("");
  app.add_option("run-options", a.run_options, "the configuration's run options (after --)")->option_text("RUN OPTIONS");
  app.footer("Exit codes: 0 a smallest failing configuration found (SUMMARY.md), 1 the configuration did not fail in its "
             "first runs, 2 usage, 7 no usable GPU. docs/TRIAGE.md has the steps and the state file.");
}

// The settings from what was given: one configuration (or --resume with none), the times, the
// failure classes; InputError for anything else.
void finish_minimize_settings(MinimizeArgs& a) {
  MinimizeSettings& s = a.s;
  check_not_empty("--out", s.out_dir);
  const int sources = !a.run_options.empty() + !a.from_sweep.empty() + !a.from_report.empty();
  if (a.resume) {
    if (sources) throw InputError("--resume goes on with the configuration in --out: give no other");
  } else {
    if (sources != 1) throw InputError("give one configuration: run options after --, --from-sweep FILE --cell K, or --from-report DIR");
    if (!a.from_sweep.empty() && a.cell < 0) throw InputError("--from-sweep needs --cell K");
    if (fs::exists(fs::path(s.out_dir) / "state.json") && !a.force) {
      throw InputError("--out " + s.out_dir + " holds a minimization: --resume to go on, --force to start again");
    }
    const RunSpec given = !a.from_sweep.empty()    ? sweep_cell_options(a.from_sweep, a.cell)
                          : !a.from_report.empty() ? report_options_of(a.from_report)
                                                   : parse_run_spec(a.run_options);
    s.original = carried_options(given);
  }
  if (a.cell >= 0 && a.from_sweep.empty()) throw InputError("--cell selects a cell of --from-sweep");
  s.budget_s = parse_duration(a.budget, "--budget");
  s.run_timeout_s = parse_duration(a.run_timeout, "--run-timeout");
  for (const std::string& c : a.fails_with.empty() ? std::vector<std::string>() : split_list(a.fails_with)) {
    if (!is_failure_class(c)) throw InputError("--fails-with: '" + c + "' is not one of hang, stall, mismatch, error, crash");
    s.fails_with.insert(c);
  }
  s.in_flight_retry = a.in_flight == "retry";
  s.report = !a.no_report;
}

}  // namespace

int minimize_main(int argc, char** argv) {
  CLI::App app{"repro minimize: run a configuration that hangs or fails a few times, then shrink it (halve its sizes, "
               "drop its conditions and features) while it still fails, and report the smallest",
               "repro minimize"};
  use_help_format(app, "repro minimize --out DIR [options] -- RUN OPTIONS | --from-sweep FILE --cell K | --from-report DIR | --resume");
  MinimizeArgs args;
  add_minimize_options(app, args);
  ParseResult parsed;
  if (!parse_app(app, argc, argv, "repro minimize", parsed)) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  try {
    finish_minimize_settings(args);
    return run_minimize(args.s, args.resume);
  } catch (const InputError& e) {
    std::cerr << "repro minimize: error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
}

}  // namespace sdpa
