// triage.cpp: the steps of `repro triage`, planned and checked before the first runs, and its
// SUMMARY.md (triage.h).
#include "repro/triage/triage.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"
#include "repro/cli/context_ladder.h"
#include "repro/cli/workload_file.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "repro/info/environment.h"
#include "repro/minimize/minimizer.h"
#include "repro/report/report_request.h"
#include "repro/supervise/child_process.h"
#include "repro/supervise/durable_log.h"
#include "repro/supervise/process_mark.h"
#include "repro/supervise/snapshot_collectors.h"
#include "repro/supervise/watchdog.h"
#include "repro/sweep/cell_runner.h"
#include "repro/sweep/sweep_options.h"
#include "repro/sweep/sweep_output.h"
#include "scenarios/scenario.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

volatile int g_stop_signal = 0;  // the signal that stopped the triage (a sig_atomic_t)
void on_stop_signal(int sig) { g_stop_signal = sig; }

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string seconds_text(double s) { return format_number("%.0f", s) + " s"; }

json json_file(const std::string& path) {
  try {
    return json::parse(read_file(path).value_or("null"));
  } catch (const json::exception&) {
    return nullptr;
  }
}

bool is_hang(const std::string& outcome) { return outcome == "hang" || outcome == "timeout"; }
bool is_failure(const std::string& outcome) {
  return outcome == "mismatch" || outcome == "crash" || outcome == "cuda_error" || outcome == "stalled";
}

// What a cell's outcome or a ladder's finding found: "hang", "stalled", "failure", or "" (a pass,
// not_reproduced, refused, ...). The one rule for the minimization's choice, the exit code and
// SUMMARY.md's first line.
std::string finding_class(const std::string& outcome_or_finding) {
  if (is_hang(outcome_or_finding)) return "hang";
  if (outcome_or_finding == "stalled") return "stalled";
  return outcome_or_finding == "failure" || is_failure(outcome_or_finding) ? "failure" : "";
}

// The options a resumed triage continues with (triage.json's "settings").
json settings_json(const TriageSettings& t) {
  return {{"budget_s", t.budget_s},   {"capture", t.capture.to_json()}, {"scenarios", t.scenarios}, {"runs", t.runs},
          {"stage_timeout_s", t.stage_timeout_s}, {"inject", t.inject}, {"bug_report", t.bug_report}};
}

std::string state_path(const std::string& out_dir) { return (fs::path(out_dir) / "triage.json").string(); }

std::string step_path(const TriageSettings& t, const std::string& name) { return (fs::path(t.out_dir) / name).string(); }

// The last line of `text` that is not empty ("" when there is none).
std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
}

// The run options every run of the triage gets: the captured call alone (its process's context is
// the ladder's to add), a fault to test the triage itself.
RunSpec cell_options(const TriageSettings& t) {
  RunSpec cell = t.capture;
  if (cell.workload_file) cell.call_only = true;
  if (!t.inject.empty()) cell.inject = t.inject;
  return cell;
}

// The sweep: the scenarios, fix off and on, on memory that migrates.
SweepOptions sweep_of(const TriageSettings& t) {
  SweepOptions s;
  s.json_path = step_path(t, "sweep") + "/sweep.json";
  s.axes.scenarios = t.scenarios;
  s.axes.fixes = {"off", "on"};
  s.axes.allocs = {"managed"};
  s.axes.iters = 5;
  // A captured call is swept as it was captured; otherwise bf16, the failing workload's dtype.
  if (t.capture.workload_file) {
    s.axes.shapes = s.axes.dtypes = {kGivenAxisValue};
  } else {
    s.axes.dtypes = {"bf16"};
  }
  s.axes.cell_options = cell_options(t).to_argv();
  s.stage_timeout_s = t.stage_timeout_s;
  s.cell_timeout_s = std::max(120.0, 6 * t.stage_timeout_s);
  s.repro_binary = t.repro_binary;
  return s;
}

// Scenario N's context ladder: a report that climbs it, with the captured process's conditions.
ReportRequest ladder_of(const TriageSettings& t, int scenario) {
  ReportRequest r;
  r.run = t.capture;
  r.run.scenario = scenario;
  r.run.iters = 5;
  r.run.stage_timeout = t.stage_timeout_s;
  if (!t.inject.empty()) r.run.inject = t.inject, r.allow_inject = true;
  r.out_dir = step_path(t, "ladder-" + std::to_string(scenario));
  r.force = true;
  r.ladder = true;
  r.repro_binary = t.repro_binary;
  return r;
}

// The minimization of the first hang found: its source is known once the sweep or a ladder hung.
MinimizeRequest minimize_of(const TriageSettings& t, double budget_s) {
  MinimizeRequest m;
  m.out_dir = step_path(t, "minimize");
  m.runs = t.runs;
  m.budget_s = budget_s;
  m.force = true;
  m.repro_binary = t.repro_binary;
  return m;
}

std::string join(const std::vector<std::string>& words) { return shell_command(words); }

// What a run of this triage left of a step (triage.json's "state"): never started; in flight (a
// triage that stopped without a word leaves it so); ended; stopped at its share of the budget;
// interrupted (by a signal, or killed on a machine that kept running); and what a resume found of
// one left in flight: the machine had stopped, or its processes were still there, stuck.
enum class StepState { not_started, running, done, stopped, interrupted, stopped_machine, stuck };

const NameTable<StepState>& step_state_names() {
  static const NameTable<StepState> table{"a triage step's state",
                                          {{StepState::not_started, "not_started"},
                                           {StepState::running, "running"},
                                           {StepState::done, "done"},
                                           {StepState::stopped, "stopped"},
                                           {StepState::interrupted, "interrupted"},
                                           {StepState::stopped_machine, "stopped_machine"},
                                           {StepState::stuck, "stuck"}}};
  return table;
}

// What a resumed triage does with a step: run it (continuing where it can when it ran before), or
// not: it ended; it was stopped at its share and the budget has no time left for it; the machine
// stopped while it ran (it may be what stopped it); its processes are still there (a hang).
enum class OnResume { run, ended, no_budget, stopped_machine, stuck };

// "7m", "2h", "90s": a budget as --budget takes it.
std::string budget_text(double s) {
  const long whole = std::lround(s);
  if (whole % 3600 == 0) return std::to_string(whole / 3600) + "h";
  if (whole % 60 == 0) return std::to_string(whole / 60) + "m";
  return std::to_string(whole) + "s";
}

class Triage {
 public:
  explicit Triage(const TriageSettings& t)
      : t_(t), log_((fs::path(t.out_dir) / "triage.log").string(), 0), self_(self_executable()),
        gpu_program_(t.repro_binary.empty() ? self_ : t.repro_binary), plan_(plan_triage(t)) {
    state_ = t.resume ? json_file(state_path(t.out_dir)) : json::object();
    state_["format"] = 2;
    state_["settings"] = settings_json(t);
    if (!state_.contains("steps") || !state_["steps"].is_object()) state_["steps"] = json::object();
    // This triage's own process: a resume refuses to run beside it (resumed_settings).
    state_["process"] = this_process_mark().to_json();
  }

  int run();

 private:
  double spent() const { return t_.spent_before_s + now_s() - start_; }
  double left() const { return std::max(0.0, t_.budget_s - spent()); }
  void say(const std::string& line) {
    const std::string text = "[" + seconds_text(spent()) + " of " + seconds_text(t_.budget_s) + "] " + line;
    std::cout << "triage: " << text << std::endl;
    log_.record("step", text);
  }
  const TriageStep* planned(const std::string& name) const {
    for (const TriageStep& s : plan_) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }
  // Runs `program args` as step `name` (its output in OUT/name.log) for at most `share` of the
  // budget left; returns its exit code (-1 when it was stopped at its deadline).
  int step(const std::string& name, const std::string& program, const std::vector<std::string>& args, double share);
  std::string path(const std::string& name) const { return step_path(t_, name); }
  // What this triage, and the runs of it before (--resume), left of step `name`.
  StepState prior(const std::string& name) const {
    const json& step = state_["steps"].contains(name) ? state_["steps"][name] : json();
    const std::string state = step.is_object() ? step.value("state", "") : "";
    return step_state_names().find(state).value_or(StepState::not_started);
  }
  // What a resumed triage does with step `name`, said. A step left in flight is judged by its
  // processes (process_mark.h): gone on this boot, it was interrupted and runs again; the machine
  // booted since, it is not run again (it may be what stopped the machine), unless it is the
  // minimization (`own_runs_judged`: it judges its own run in flight); still there, it is stuck.
  // `continuing` is set when the step ran before: it goes on where it stopped.
  OnResume resumed_as(const std::string& name, bool& continuing, bool own_runs_judged = false);
  // The sweep's cells that were running when it stopped (their process files in its cells folder),
  // each with its log's last stage record.
  std::vector<std::string> cells_running() const;
  void set_step(const std::string& name, StepState state, int exit_code = 0);
  void save_state() {
    state_["spent_s"] = spent();
    write_file_atomic(state_path(t_.out_dir), state_.dump(2) + "\n");
  }
  void run_sweep();
  void run_ladders();
  // Where nothing was found, the ladders `climbed` that were cut at their share go on from the rung
  // they reached, sharing the time the minimization would have had.
  void continue_cut_ladders(const std::vector<const TriageStep*>& climbed);
  void write_what_to_try_next(std::ostream& s) const;
  void run_minimize();
  void run_bug_report();
  // What the triage found, worst first: "hang" (a run hung, or the machine stopped during one),
  // "stalled" (a stage over the stall threshold that still finished, and nothing hung), "failure"
  // (a mismatch, a CUDA error, a crash), "" nothing. Its exit code and SUMMARY.md's first line.
  std::string finding() const;
  void write_summary();
  // What this triage did not reach, one line each (a step stopped at its share, interrupted, not
  // started), and the command that continues it: SUMMARY.md's first section and the last lines said.
  std::vector<std::string> not_reached() const;
  std::string continue_command() const;
  void write_archive();

  TriageSettings t_;
  DurableLog log_;
  std::string self_, gpu_program_;
  std::vector<TriageStep> plan_;
  double start_ = now_s();
  // What the steps found, for SUMMARY.md.
  std::string device = "unknown";
  bool no_gpu = false;
  std::vector<json> hung_cells, failed_cells;
  std::vector<json> cells;  // the sweep's records, one per cell (sweep_output.h's latest_records)
  int cells_passed = 0;
  std::vector<std::pair<int, json>> ladders;  // scenario, its result.json's "report" (title, finding)
  std::string minimized_from;                 // what minimize started from ("" none ran)
  json minimize_state;
  std::string bug_report;                     // its file, or why there is none
  std::vector<std::string> notes;             // steps stopped at their deadline, skipped, ...
  std::vector<std::string> stopped_in;        // what was running when the machine stopped (--resume)
  std::vector<std::string> stuck_in;          // steps whose processes a resume found still there: "what: processes"
  std::vector<std::string> not_started;       // steps that would have run, not started since the triage was interrupted
  std::vector<std::string> could_not_run;     // steps whose command was refused: "name: why"
  json state_;                                // triage.json
};

OnResume Triage::resumed_as(const std::string& name, bool& continuing, bool own_runs_judged) {
  continuing = false;
  switch (prior(name)) {
    case StepState::not_started:
      return OnResume::run;
    case StepState::done:
      say(name + ": ended before this triage was resumed (done): not run again");
      return OnResume::ended;
    case StepState::stopped:
      if (left() < kMinStepSeconds) {
        say(name + ": stopped at its share of the budget before, and not continued: the budget has no time left (`" +
            continue_command() + "` gives it more)");
        return OnResume::no_budget;
      }
      say(name + ": stopped at its share of the budget before: it goes on where it stopped");
      continuing = true;
      return OnResume::run;
    case StepState::interrupted:
      continuing = true;
      return OnResume::run;
    case StepState::stopped_machine:
      if (own_runs_judged) break;
      say(name + ": was running when the machine stopped (found when this triage was resumed before): not run again");
      return OnResume::stopped_machine;
    case StepState::stuck:
      say(name + ": its processes were still there when this triage was resumed before (stuck): not run again");
      return OnResume::stuck;
    case StepState::running:
      break;
  }
  json& step = state_["steps"][name];
  const std::optional<ProcessMark> mark = ProcessMark::from_json(step.value("process", json()));
  // A triage.json that does not record its steps' processes (an older harness wrote it) cannot
  // tell a kill from a freeze: taken for a freeze, as it was then.
  ProcessFinding found;
  found.fate = ProcessFate::machine_stopped;
  if (mark) found = find_marked_processes(*mark);
  if (found.fate == ProcessFate::still_there) {
    // Every step's process dies with the triage (PR_SET_PDEATHSIG), and what it starts with it:
    // one still there did not, so it is stuck (in the driver). Another SIGKILL does nothing to it,
    // and it is the hang's evidence: left as it is.
    say(name + ": its processes are still there after the triage that started them stopped (" + found.processes_text() +
        "): stuck, a hang; not run again, and left as they are");
    step["stuck"] = found.processes_text();
    set_step(name, StepState::stuck);
    return OnResume::stuck;
  }
  continuing = true;
  if (found.fate == ProcessFate::gone) {
    say(name + ": was interrupted (its processes ended without a result on this boot: the triage was killed): it runs "
               "again, going on where it stopped");
    set_step(name, StepState::interrupted);
    return OnResume::run;
  }
  const std::string when = mark ? "when the machine stopped (it has booted again since)"
                                : "when the triage stopped (its triage.json does not say which process ran it)";
  if (own_runs_judged) {
    say(name + ": was running " + when + ": it goes on from its state, and judges its own run in flight");
    set_step(name, StepState::stopped_machine);
    return OnResume::run;
  }
  say(name + ": was running " + when + ": not run again (it may be what stopped the machine)");
  set_step(name, StepState::stopped_machine);
  return OnResume::stopped_machine;
}

std::vector<std::string> Triage::cells_running() const {
  std::set<int> finished;
  for (const json& cell : cells) finished.insert(cell.value("index", -1));
  std::set<int> started;  // cell-N.process in the sweep's cells folder
  const std::string cells_dir = sweep_cells_dir("sweep/sweep.jsonl");  // relative to the triage's folder
  std::error_code absent;
  for (const auto& entry : fs::directory_iterator(path(cells_dir), absent)) {
    const std::string name = entry.path().filename().string();
    const size_t digits = name.find_first_of("0123456789");
    if (digits == std::string::npos) continue;
    const int index = std::atoi(name.c_str() + digits);
    if (name == cell_process_name(index) && !finished.count(index)) started.insert(index);
  }
  std::vector<std::string> running;
  for (const int index : started) {
    const std::string log = cells_dir + "/" + cell_log_name(index), text = read_file(path(log)).value_or("");
    running.push_back("the sweep's cell " + std::to_string(index) + ", " + progress_text(progress_in_log(text)) +
                      " (its stage log `" + log + "`; its last line: `" + last_line(text) + "`)");
  }
  return running;
}

void Triage::set_step(const std::string& name, StepState state, int exit_code) {
  json& step = state_["steps"][name];
  step["state"] = step_state_names().name(state);
  if (state == StepState::running) {
    step["started_utc"] = utc_now();
    step.erase("exit");
    step.erase("stuck");
  } else if (state == StepState::done) {
    step["exit"] = exit_code;
  }
  save_state();
}

int Triage::step(const std::string& name, const std::string& program, const std::vector<std::string>& args, double share) {
  const double deadline = step_seconds(left(), share);
  const TriageStep* plan = planned(name);
  if (plan && plan->first_result_s > deadline) {
    const std::string warning = name + ": its share of the budget, " + seconds_text(deadline) +
                                ", is shorter than its first result needs (about " + seconds_text(plan->first_result_s) +
                                "): it may end with nothing; a longer --budget gives it one";
    say(warning);
    notes.push_back(warning);
  }
  say(name + ": " + shell_command(args) + " (at most " + seconds_text(deadline) + ")");
  // Its process, recorded before it starts and again once it runs: what a resume judges it by.
  ProcessMark mark = new_process_mark();
  state_["steps"][name]["process"] = mark.to_json();
  // The time the step was given, in all: a step that goes on where it stopped (--resume) had its
  // earlier shares too.
  const bool goes_on = std::find(args.begin(), args.end(), "--resume") != args.end();
  state_["steps"][name]["share_s"] = deadline + (goes_on ? state_["steps"][name].value("share_s", 0.0) : 0.0);
  set_step(name, StepState::running);
  ChildStart start;
  start.environment = {process_tag_environment(mark)};
  start.started = [&](pid_t pid) {
    mark_started(mark, pid);
    state_["steps"][name]["process"] = mark.to_json();
    save_state();
  };
  const ChildResult r =
      run_child(program, args, path(name + ".log"), path(name + ".log"), deadline, 60, "", 10, &g_stop_signal, start);
  say(name + ": " + (r.timed_out ? "stopped at its deadline" : r.stopped ? "interrupted" : "exit " + std::to_string(r.exit_code)) +
      " after " + seconds_text(r.wall_s));
  set_step(name, r.timed_out ? StepState::stopped : r.stopped ? StepState::interrupted : StepState::done, r.exit_code);
  // A child's usage error is a step that could not run: the plan checked its command, so this is
  // what the plan could not know (a file that vanished, a capture that changed).
  if (!r.timed_out && !r.stopped && r.exit_code == kExitUsage) {
    could_not_run.push_back(name + ": its command was refused (exit 2; `" + name + ".log` has the line)");
  }
  return r.timed_out || r.stopped ? -1 : r.exit_code;
}

void Triage::run_sweep() {
  const TriageStep& plan = *planned("sweep");
  if (!plan.cannot_run.empty()) return;
  std::vector<std::string> args = plan.argv;
  bool continuing = false;
  const OnResume as = resumed_as("sweep", continuing);
  if (as == OnResume::run) {
    // A sweep that ran before is continued where it left records; one stopped before it wrote
    // anything starts afresh (sweep --resume refuses a folder with no sweep in it).
    std::error_code ec;
    if (continuing && (fs::exists(path("sweep/sweep.json"), ec) || fs::exists(path("sweep/sweep.jsonl"), ec))) {
      args.push_back("--resume");
    }
    if (step("sweep", self_, args, plan.share) == kExitNoGpu) no_gpu = true;
  }
  try {
    cells = latest_records(read_jsonl(path("sweep/sweep.jsonl")).records);
  } catch (const InputError& e) {  // a damaged line before the last: what the sweep found is unknown
    notes.push_back("the sweep's records cannot be read: " + one_line(e.what()));
  }
  if (as == OnResume::stopped_machine) {
    const std::vector<std::string> running = cells_running();
    stopped_in.insert(stopped_in.end(), running.begin(), running.end());
    if (running.empty()) stopped_in.push_back("the sweep (`sweep/`), in no cell that had recorded its process");
  }
  if (as == OnResume::stuck) {
    std::string in_cells;
    for (const std::string& cell : cells_running()) in_cells += "; " + cell;
    stuck_in.push_back("the sweep (`sweep/`): " + state_["steps"]["sweep"].value("stuck", std::string()) + in_cells);
  }
  for (const json& cell : cells) {
    const std::string outcome = cell.value("outcome", "");
    if (outcome == "pass" || outcome == "waived") ++cells_passed;
    if (is_hang(outcome)) hung_cells.push_back(cell);
    if (is_failure(outcome)) failed_cells.push_back(cell);
  }
}

void Triage::run_ladders() {
  std::vector<const TriageStep*> climb;
  for (const TriageStep& s : plan_) {
    if (s.name.rfind("ladder-", 0) != 0 || !s.left_out.empty() || !s.cannot_run.empty()) continue;
    const int scenario = std::atoi(s.name.c_str() + 7);
    const bool hung = std::any_of(hung_cells.begin(), hung_cells.end(),
                                  [&](const json& cell) { return cell.at("axes").value("scenario", -1) == scenario; });
    if (hung) {
      say(s.name + ": not run: a sweep cell of scenario " + std::to_string(scenario) + " hung (the minimization takes it)");
      continue;
    }
    climb.push_back(&s);
  }
  std::vector<const TriageStep*> climbed;  // the ladders whose folders hold what they found
  for (size_t i = 0; i < climb.size() && !no_gpu; ++i) {
    const TriageStep& s = *climb[i];
    if (g_stop_signal) {
      if (prior(s.name) != StepState::done) not_started.push_back(s.name);
      continue;
    }
    const std::string ladder = "scenario " + s.name.substr(7) + "'s context ladder (`" + s.name + "/`";
    // The ladders share half the budget left, and the minimization what remains after them.
    bool continuing = false;
    const OnResume as = resumed_as(s.name, continuing);
    if (as == OnResume::run) {
      // A ladder that climbed before goes on from the rung it reached (repro report --resume).
      std::vector<std::string> args = s.argv;
      if (continuing) args.push_back("--resume");
      step(s.name, self_, args, s.share / static_cast<double>(climb.size() - i));
    }
    if (as == OnResume::stopped_machine) {
      stopped_in.push_back(ladder + ": what it wrote)");
      continue;
    }
    if (as == OnResume::stuck) {
      stuck_in.push_back(ladder + "): " + state_["steps"][s.name].value("stuck", std::string()));
      continue;
    }
    climbed.push_back(&s);
  }
  continue_cut_ladders(climbed);
  for (const TriageStep* s : climbed) {
    const json result = json_file(path(s->name + "/result.json"));
    if (result.is_object() && result.contains("report")) {
      json report = result.at("report");
      // The rungs it climbed, each with what it found: what to try next names those it did not reach.
      report["climbed"] = result.contains("ladder") && result["ladder"].is_array() ? result["ladder"] : json::array();
      ladders.emplace_back(std::atoi(s->name.c_str() + 7), report);
    }
  }
}

void Triage::continue_cut_ladders(const std::vector<const TriageStep*>& climbed) {
  if (no_gpu || g_stop_signal || !hung_cells.empty() || !failed_cells.empty()) return;
  std::vector<const TriageStep*> cut;
  for (const TriageStep* s : climbed) {
    const json result = json_file(path(s->name + "/result.json"));
    if (prior(s->name) == StepState::stopped) cut.push_back(s);
    // A ladder that found something has the minimization's time.
    if (result.is_object() && !finding_class(result.value("report", json::object()).value("finding", "")).empty()) return;
  }
  // The minimization's share of what is left, the bug report's kept for it; all of it where no bug report follows.
  const TriageStep* report = planned("nvidia-bug-report");
  const TriageStep* minimize = planned("minimize");
  const bool report_follows = report && report->left_out.empty() && report->cannot_run.empty();
  const double total = report_follows && minimize ? minimize->share : 1.0;
  // As many as get a step's least time each, the first ladders first.
  cut.resize(std::min(cut.size(), static_cast<size_t>(left() * total / kMinStepSeconds)));
  for (size_t i = 0; i < cut.size() && !g_stop_signal; ++i) {
    const double share = total / static_cast<double>(cut.size() - i);
    if (left() * share < kMinStepSeconds) return;
    say(cut[i]->name + ": stopped at its share with nothing found and time left that no minimization takes: it goes on "
                       "where it stopped");
    std::vector<std::string> args = cut[i]->argv;
    args.push_back("--resume");
    step(cut[i]->name, self_, args, share);
  }
}

void Triage::run_minimize() {
  // The first hang, made as small as it can be, and reported: a cell without its fix first, of a
  // scenario a report can take (one with a fix of its own to switch).
  // Else the first stall, else the first failure: what was found, worst first, a sweep's cell before a
  // ladder's rung (a cell is the smaller configuration).
  MinimizeRequest m = minimize_of(t_, std::max(60.0, left() * 0.8));
  const auto rank = [](const json& cell) {
    const int scenario = cell.at("axes").value("scenario", 0);
    return (scenario_info(scenario).fix_number ? 0 : 2) + (cell.at("axes").value("fix", "") == "off" ? 0 : 1);
  };
  for (const char* wanted : {"hang", "stalled", "failure"}) {
    const json* best = nullptr;
    for (const std::vector<json>* found : {&hung_cells, &failed_cells}) {
      for (const json& cell : *found) {
        if (finding_class(cell.value("outcome", "")) == wanted && (!best || rank(cell) < rank(*best))) best = &cell;
      }
    }
    if (best) {
      m.from_sweep = path("sweep/sweep.jsonl");
      m.cell = best->value("index", 0);
      minimized_from = "sweep cell " + std::to_string(m.cell) + " (" + best->value("key", "") + ")";
      break;
    }
    for (const auto& [scenario, report] : ladders) {
      if (finding_class(report.value("finding", "")) == wanted) {
        m.from_report = path("ladder-" + std::to_string(scenario));
        minimized_from = "scenario " + std::to_string(scenario) + "'s ladder (" + report.value("title", "") + ")";
        break;
      }
    }
    if (!minimized_from.empty()) break;
  }
  if (minimized_from.empty() || no_gpu) return;
  if (g_stop_signal) {
    if (prior("minimize") != StepState::done) not_started.push_back("minimize");
    return;
  }
  bool continuing = false;
  const OnResume as = resumed_as("minimize", continuing, true);
  if (as == OnResume::run) {
    // A minimization that ran before goes on from its state (repro minimize --resume), which
    // judges its own run in flight; its budget is the whole minimization's, its time before included.
    if (continuing && fs::exists(path("minimize/state.json"))) {
      m.force = false;
      m.resume = true;
      m.from_sweep.clear();
      m.from_report.clear();
      m.budget_s += json_file(path("minimize/state.json")).value("spent_s", 0.0);
      notes.push_back("the minimization went on from its state (`minimize/progress.log` says what became of its run in "
                      "flight)");
    }
    step("minimize", self_, m.to_argv(), planned("minimize")->share);
  }
  if (as == OnResume::stuck) {
    stuck_in.push_back("the minimization (`minimize/`): " + state_["steps"]["minimize"].value("stuck", std::string()));
  }
  minimize_state = json_file(path("minimize/state.json"));
}

void Triage::run_bug_report() {
  const TriageStep& plan = *planned("nvidia-bug-report");
  if (!plan.left_out.empty()) {
    bug_report = plan.left_out;
  } else if (prior("nvidia-bug-report") == StepState::done && fs::exists(path("nvidia-bug-report.log.gz"))) {
    bug_report = "nvidia-bug-report.log.gz";
  } else if (!g_stop_signal) {
    const std::string tool = find_tool("nvidia-bug-report.sh", default_tool_dirs());
    const int code = step("nvidia-bug-report", tool, plan.argv, plan.share);
    bug_report = fs::exists(path("nvidia-bug-report.log.gz")) ? "nvidia-bug-report.log.gz"
                                                              : "nvidia-bug-report.sh ended with " + std::to_string(code);
  }
}

int Triage::run() {
  if (t_.resume) say("resuming the triage in " + t_.out_dir + " (" + seconds_text(t_.spent_before_s) + " spent before)");
  // The plan, checked before anything runs: a step that cannot run is said now.
  for (const TriageStep& s : plan_) {
    if (!s.cannot_run.empty()) {
      could_not_run.push_back(s.name + ": " + s.cannot_run);
      say(s.name + ": cannot run: " + s.cannot_run);
    } else if (!s.left_out.empty()) {
      say(s.name + ": left out: " + s.left_out);
    }
  }
  save_state();
  // 1. The environment: with no usable GPU nothing else can run.
  {
    const ChildResult r = run_child(gpu_program_, planned("info")->argv, path("info.json"), path("info.log"), 120, 60);
    say("info: exit " + std::to_string(r.exit_code));
    const json info = json_file(path("info.json"));
    if (info.is_object() && info.contains("device") && info["device"].is_object()) device = info["device"].value("name", device);
    if (r.exit_code == kExitNoGpu) {
      no_gpu = true;
      say("no usable GPU (repro info exit 7): nothing else can run");
    }
  }
  if (!no_gpu && !g_stop_signal) {
    run_sweep();
  } else if (g_stop_signal && prior("sweep") != StepState::done) {
    not_started.push_back("sweep");
  }
  run_ladders();
  run_minimize();
  run_bug_report();
  if (g_stop_signal) notes.push_back("interrupted by signal " + std::to_string(g_stop_signal) + ": the steps after it did not run");
  save_state();
  write_summary();
  write_archive();
  // The last lines said: what it did not reach, and how to go on.
  const std::vector<std::string> missed = not_reached();
  if (!missed.empty()) {
    say("NOT REACHED (SUMMARY.md says so first):");
    for (const std::string& line : missed) say("  - " + line);
    say("to continue it: " + continue_command());
  }
  if (g_stop_signal) return 128 + g_stop_signal;
  if (no_gpu) return kExitNoGpu;
  const std::string found = finding();
  if (found == "hang") return kExitHang;
  if (!could_not_run.empty()) return kExitUsage;
  return found == "stalled" ? kExitStalled : found == "failure" ? kExitMismatch : kExitPass;
}

std::string Triage::finding() const {
  std::set<std::string> found;
  for (const std::vector<json>* some : {&hung_cells, &failed_cells}) {
    for (const json& cell : *some) found.insert(finding_class(cell.value("outcome", "")));
  }
  for (const auto& l : ladders) found.insert(finding_class(l.second.value("finding", "")));
  if (!stopped_in.empty() || !stuck_in.empty()) found.insert("hang");  // the machine stopped during a run, or one is stuck
  for (const char* worst_first : {"hang", "stalled", "failure"}) {
    if (found.count(worst_first)) return worst_first;
  }
  return "";
}

void Triage::write_summary() {
  std::ostringstream s;
  // Something to hand NVIDIA: a run that hung, stalled or failed, or a machine that stopped.
  bool ladder_found = false;
  for (const auto& l : ladders) {
    const std::string finding = l.second.value("finding", "");
    ladder_found = ladder_found || finding == "hang" || finding == "stalled" || finding == "failure";
  }
  const bool reproduced = !hung_cells.empty() || !failed_cells.empty() || !stopped_in.empty() || !stuck_in.empty() || ladder_found ||
                          !minimized_from.empty();

  const std::string name = fs::path(t_.out_dir).filename().string();
  s << "# repro triage\n\n"
    << "GPU: " << device << ". Budget " << seconds_text(t_.budget_s) << ", used " << seconds_text(spent()) << ".";
  if (t_.capture.workload_file) {
    s << " The call replayed: `" << shell_command(t_.capture.to_argv()) << "`.";
    // What the capture says of the process around the call: its layers' retention and the weights' page cache.
    try {
      const std::string conditions =
          captured_conditions(load_workload_file(*t_.capture.workload_file), static_cast<int>(t_.capture.call.value_or(0)));
      if (!conditions.empty()) s << " The captured process: " << conditions << ".";
    } catch (const InputError& e) {
      s << " (The capture could not be read again: " << one_line(e.what()) << ".)";
    }
  }
  if (!t_.inject.empty()) {
    s << " **Every run had an injected fault (`--inject " << t_.inject << "`): this triage tests the harness, it "
      << "says nothing about the GPU.**";
  }
  s << "\n\n";
  // First what this triage did not reach: whatever follows covers only what ran.
  const std::vector<std::string> missed = not_reached();
  if (!missed.empty()) {
    s << "## Not reached\n\n"
      << "This triage did not run everything it plans, so what follows covers only what ran:\n\n";
    for (const std::string& line : missed) s << "- " << line << "\n";
    s << "\nTo continue it (the steps that ended are kept; a step that was cut or interrupted goes on where it "
         "stopped):\n\n    "
      << continue_command() << "\n\n";
  }
  if (!could_not_run.empty()) {
    s << "## Steps that could not run\n\n"
      << "Their commands were refused before they started (`triage.log`; `repro triage --dry-run` shows the plan): what "
         "they were to find is not known.\n\n";
    for (const std::string& why : could_not_run) s << "- " << why << "\n";
    s << "\n";
  }
  s << "## What hung, stalled or failed\n\n";
  const std::string found = finding();
  if (found == "hang") s << "**A run hung** (exit 3): a stage overran its deadline, or the machine stopped during a run.\n\n";
  if (found == "stalled") {
    s << "**A stall, not a hang** (exit 9): nothing overran its deadline, but a stage took longer than the stall threshold "
         "and then finished, the symptom of a stuck page migration before it becomes a hang.\n\n";
  }
  if (found == "failure") s << "**Nothing hung, but a run failed** (exit 1): a mismatch, a CUDA error or a crash.\n\n";
  if (no_gpu) s << "Nothing ran: no usable CUDA GPU (`info.log`).\n";
  if (!cells.empty()) {
    const auto stalled = static_cast<size_t>(std::count_if(failed_cells.begin(), failed_cells.end(), [](const json& c) {
      return finding_class(c.value("outcome", "")) == "stalled";
    }));
    s << "The sweep (`sweep/`): " << cells.size() << " cells, " << cells_passed << " passed or waived, " << hung_cells.size()
      << " hung, " << stalled << " stalled, " << failed_cells.size() - stalled << " failed otherwise.\n";
  }
  for (const json& cell : hung_cells) {
    s << "- cell " << cell.value("index", 0) << ": " << cell.value("key", "") << ": " << cell.value("outcome", "")
      << (cell.contains("stage") && cell["stage"].is_string() ? " in " + cell["stage"].get<std::string>() : std::string()) << "\n";
  }
  for (const json& cell : failed_cells) {
    // A stall's stage is its longest stall's; a failure's, where it failed.
    const json& where = cell.contains("stall") && cell["stall"].is_object() ? cell["stall"] : cell;
    s << "- cell " << cell.value("index", 0) << ": " << cell.value("key", "") << ": " << cell.value("outcome", "")
      << (where.contains("stage") && where["stage"].is_string() ? " in " + where["stage"].get<std::string>() : std::string())
      << "\n";
  }
  for (const auto& [scenario, report] : ladders) {
    s << "- scenario " << scenario << "'s context ladder (`ladder-" << scenario << "/REPORT.md`): " << report.value("title", "")
      << " (finding: " << report.value("finding", "") << ")\n";
  }
  if (!no_gpu && hung_cells.empty() && ladders.empty() && cells.empty() && stopped_in.empty() && stuck_in.empty()) {
    s << "No step ran to the end.\n";
  }
  if (hung_cells.empty() && failed_cells.empty() && !stopped_in.empty()) {
    s << "No run that ended hung or failed; the machine stopped during one (below).\n";
  }
  if (hung_cells.empty() && failed_cells.empty() && stopped_in.empty() && !stuck_in.empty()) {
    s << "No run that ended hung or failed; what one step started is stuck (below).\n";
  }
  if (!stopped_in.empty()) {
    s << "\n## Where the machine stopped\n\n"
      << "An earlier run of this triage stopped without a word while these were running, and the machine has booted "
         "again since: it froze or was rebooted. `repro triage --resume` went on without running them again, since they "
         "may be what stopped the machine. Each is counted as a hang.\n\n";
    for (const std::string& what : stopped_in) s << "- " << what << "\n";
  }
  if (!stuck_in.empty()) {
    s << "\n## Still stuck\n\n"
      << "An earlier run of this triage stopped, and what these steps started was still running when it was resumed. "
         "Every process of a step dies with the triage, so one still there did not: it is stuck (in the driver, as a "
         "hung GPU process is). Each is counted as a hang, was not run again, and was left as it is (as root, `cat "
         "/proc/PID/stack` shows where each waits).\n\n";
    for (const std::string& what : stuck_in) s << "- " << what << "\n";
  }
  s << "\n## Under which conditions\n\n";
  if (minimize_state.is_object() && minimize_state.contains("smallest")) {
    std::string classes;
    for (const json& c : minimize_state.value("fails_with", json::array())) classes += (classes.empty() ? "" : ", ") + c.get<std::string>();
    s << "The smallest configuration that still fails (" << classes << "), from "
      << minimized_from << " (`minimize/SUMMARY.md` has the steps):\n\n    repro "
      << shell_command(RunSpec::from_json(minimize_state.at("smallest")).to_argv()) << "\n";
  } else if (!minimized_from.empty()) {
    s << "The minimization of " << minimized_from << " did not finish (`minimize/progress.log`; `repro minimize --out "
      << path("minimize") << " --resume` goes on).\n";
  } else if (stopped_in.empty() && stuck_in.empty()) {
    s << "Nothing hung, stalled or failed, so nothing was minimized.\n";
  } else {
    s << "What was running when the machine stopped, or is stuck, is not minimized (a run of it could stop the machine "
         "again): its options are in its log.\n";
  }
  s << "\n## What fixes it\n\n";
  const json minimal_result = json_file(path("minimize/report/result.json"));
  const json minimal_report = minimal_result.is_object() && minimal_result.contains("report") ? minimal_result.at("report") : json();
  if (minimal_report.is_object()) {
    s << "`minimize/report/REPORT.md`: " << minimal_report.value("title", "") << ".\n";
  } else if (!minimized_from.empty()) {
    s << "No report of the smallest configuration was written (`minimize/report.log`).\n";
  }
  std::vector<json> found_cells = hung_cells;
  found_cells.insert(found_cells.end(), failed_cells.begin(), failed_cells.end());
  for (const json& cell : found_cells) {
    if (cell.at("axes").value("fix", "") != "off") continue;
    const std::string key_on = [&] {
      std::string k = cell.value("key", "");
      const size_t at = k.find("fix=off");
      return at == std::string::npos ? k : k.replace(at, 7, "fix=on");
    }();
    std::string with_fix = "not in the sweep";
    for (const json& other : cells) {
      if (other.value("key", "") == key_on) with_fix = other.value("outcome", "");
    }
    s << "- cell " << cell.value("index", 0) << " with its scenario's fix: " << with_fix << "\n";
  }
  if (!reproduced) s << "Nothing hung, stalled or failed, so there is nothing to fix.\n";
  if (hung_cells.empty() && !minimal_report.is_object() && (!stopped_in.empty() || !stuck_in.empty())) {
    s << "Not known: what was running when the machine stopped, or is stuck, was not run again, with its fix or without.\n";
  }
  if (!reproduced && !no_gpu) write_what_to_try_next(s);
  s << "\n## Files\n\n";
  if (reproduced) {
    s << "Attach `" << name << ".tar.gz` to the NVIDIA bug. ";
  } else {
    s << "Nothing was reproduced, so there is nothing to attach to a bug yet: `" << name
      << ".tar.gz` records what was tried. ";
  }
  if (minimal_report.is_object()) {
    s << "Its `minimize/report/` folder is the bug report itself: REPORT.md (paste it as the description) and the "
         "single-file reproducer.";
  }
  s << "\n\n";
  const std::vector<std::pair<std::string, std::string>> files = {
      {"SUMMARY.md", "this summary"},
      {"triage.log", "every step, with its command and how it ended"},
      {"triage.json", "the triage's options, time spent and each step's state (what --resume continues from)"},
      {"info.json", "the environment: GPU, driver, CUDA, unified memory, OS"},
      {"sweep/sweep.json", "the sweep's cells and their outcomes (sweep.svg: the heatmap)"},
      {"minimize/SUMMARY.md", "the minimization's steps and the smallest configuration"},
      {"minimize/report/REPORT.md", "the report of the smallest configuration"},
      {"nvidia-bug-report.log.gz", "nvidia-bug-report.sh's output"}};
  for (const auto& [file, what] : files) {
    if (fs::exists(path(file))) s << "- `" << file << "`: " << what << "\n";
  }
  for (const auto& [scenario, report] : ladders) {
    s << "- `ladder-" << scenario << "/REPORT.md`: scenario " << scenario << "'s context ladder\n";
  }
  s << "\nnvidia-bug-report.sh: " << bug_report << ".\n";
  if (!notes.empty()) {
    s << "\n## Notes\n\n";
    for (const std::string& n : notes) s << "- " << n << "\n";
  }
  write_file_atomic(path("SUMMARY.md"), s.str());
}

std::vector<std::string> Triage::not_reached() const {
  std::vector<std::string> lines;
  for (const TriageStep& s : plan_) {
    if (!s.left_out.empty() || !s.cannot_run.empty()) continue;
    const StepState state = prior(s.name);
    const bool unstarted = std::find(not_started.begin(), not_started.end(), s.name) != not_started.end();
    if (state != StepState::stopped && state != StepState::interrupted && !unstarted) continue;
    std::string line = s.name + ": ";
    if (unstarted) {
      line += "not started (the triage was interrupted before it)";
    } else if (state == StepState::stopped) {
      const json& step = state_["steps"][s.name];
      line += "stopped at its share of the budget (" + seconds_text(step.value("share_s", 0.0)) + ")";
    } else {
      line += "interrupted";
    }
    if (s.name == "sweep" && !unstarted) {
      const size_t planned_cells = expand_matrix(sweep_of(t_).axes).size();
      line += ": " + std::to_string(cells.size()) + " of its " + std::to_string(planned_cells) + " cells ran";
    } else if (s.name.rfind("ladder-", 0) == 0 && !unstarted) {
      const json progress = json_file(path(s.name + "/ladder.json"));
      std::set<std::string> climbed;
      std::string climbed_text, missing;
      if (progress.is_object()) {
        for (const json& rung : progress.value("rungs", json::array())) {
          climbed.insert(rung.value("rung", ""));
          climbed_text += (climbed_text.empty() ? "" : ", ") + rung.value("rung", std::string());
        }
      }
      for (const std::string& rung : context_rung_names()) {
        if (!climbed.count(rung)) missing += (missing.empty() ? "" : ", ") + rung;
      }
      line += climbed_text.empty() ? ": no rung climbed to its end" : ": rungs climbed: " + climbed_text;
      line += "; not reached: " + missing;
    } else if (s.name == "minimize" && !unstarted) {
      line += ": no smallest configuration yet (`minimize/progress.log`)";
    }
    lines.push_back(line);
  }
  return lines;
}

std::string Triage::continue_command() const {
  std::vector<std::string> words{"repro", "triage", "--out", t_.out_dir, "--resume"};
  // A step cut at its share needed more than the budget gave it: the command gives as much again.
  bool cut = left() < kMinStepSeconds;
  for (const auto& step : state_["steps"].items()) {
    cut = cut || (step.value().is_object() && step.value().value("state", "") == step_state_names().name(StepState::stopped));
  }
  if (cut) words.insert(words.end(), {"--budget", budget_text(t_.budget_s)});
  return shell_command(words);
}

// When nothing hung, stalled or failed: the conditions this triage did not try, each one command.
void Triage::write_what_to_try_next(std::ostream& s) const {
  s << "\n## Nothing was reproduced: what to try next\n\n"
    << "No run of this triage hung, stalled or failed. The hang needs a condition it did not reach:\n\n";
  if (!not_reached().empty()) {
    s << "- First, what this triage planned and did not reach (## Not reached, above): `" << continue_command()
      << "` goes on with it.\n";
  }
  for (const auto& [scenario, report] : ladders) {
    std::set<std::string> climbed;
    std::string refused;
    for (const json& rung : report.value("climbed", json::array())) {
      climbed.insert(rung.value("rung", ""));
      if (rung.value("finding", "") == "refused") refused = rung.value("rung", "");
    }
    std::string missing;
    for (const std::string& rung : context_rung_names()) {
      if (!climbed.count(rung)) missing += (missing.empty() ? "" : ", ") + rung;
    }
    if (!refused.empty()) {
      s << "- Scenario " << scenario << "'s context ladder stopped at rung " << refused
        << ": the memory guard refused it on this machine (`ladder-" << scenario << "/REPORT.md`).";
    } else if (!missing.empty()) {
      s << "- Scenario " << scenario << "'s context ladder did not reach every rung (its share of the budget ended).";
    } else {
      s << "- Scenario " << scenario << "'s context ladder climbed every rung without a hang.";
    }
    if (!missing.empty()) {
      s << " Not reached: " << missing << "; climb them with a longer budget: `repro report --ladder --scenario "
        << scenario << " --out ladder-" << scenario << "`.";
    }
    s << "\n";
  }
  // The scenarios no default sweep runs, by their records.
  for (const ScenarioInfo& sc : scenario_table()) {
    if (!sc.not_by_default) continue;
    s << "- Scenario " << sc.number << " (" << sc.title << "), which no sweep runs: " << sc.not_by_default
      << "; then run it as the plan says fits (docs/CONTEXT.md).\n";
  }
  if (!t_.capture.workload_file) {
    s << "- The real call and its process: capture the training run that hangs (`python3 scripts/sdpa_capture.py --out "
         "capture -- train.py ...`, docs/CAPTURE.md), then `repro triage --out DIR --workload-file "
         "capture/workload.json`: the sweep runs the captured call and the ladder climbs with its process's conditions.\n";
  }
}

void Triage::write_archive() {
  const fs::path out = fs::absolute(t_.out_dir).lexically_normal();
  const fs::path dir = out.has_filename() ? out : out.parent_path();
  const std::string archive = dir.string() + ".tar.gz", partial = archive + ".partial";
  const std::string tar = find_tool("tar", default_tool_dirs());
  if (tar.empty()) {
    say("no tar in PATH: the folder " + dir.string() + " is the result");
    return;
  }
  // Written aside and renamed, so an archive already there is never left half-written.
  const ChildResult r = run_child(tar, {"-czf", partial, "-C", dir.parent_path().string(), dir.filename().string()},
                                  path("tar.log"), path("tar.log"), 600, 60);
  if (r.exit_code == 0) {
    fs::rename(partial, archive);
    say("wrote " + archive);
  } else {
    say("tar failed (exit " + std::to_string(r.exit_code) + ", tar.log): the folder " + dir.string() + " is the result");
  }
}

}  // namespace

std::vector<TriageStep> plan_triage(const TriageSettings& t) {
  std::vector<TriageStep> plan;
  const auto checked = [](TriageStep& s, const std::function<void()>& check) {
    try {
      check();
    } catch (const std::exception& e) {  // InputError; a reproducer generator bug reads the same way
      s.cannot_run = one_line(e.what());
    }
  };
  plan.push_back({"info", "the environment block: GPU, driver, CUDA, unified memory, OS", "", 0, "repro", {"info", "--json"}, "", ""});

  TriageStep sweep{"sweep", "the scenarios " + scenario_list_text(t.scenarios) + ", fix off and on, on managed memory", "",
                   0.35, "repro", {}, "", ""};
  const SweepOptions sweep_options = sweep_of(t);
  sweep.argv = sweep_options.to_argv();
  checked(sweep, [&] {
    validate_sweep(sweep_options);
    const std::vector<SweepCell> cells = expand_matrix(sweep_options.axes);
    if (!cells.empty()) sweep.first_result_s = expected_cell_cost(cells.front()) / kCellCostPerSecond;
  });
  plan.push_back(sweep);

  for (int scenario : t.scenarios) {
    TriageStep ladder{"ladder-" + std::to_string(scenario), "scenario " + std::to_string(scenario) + "'s context ladder",
                      "no sweep cell of scenario " + std::to_string(scenario) + " hung", 0.5, "repro", {}, "", ""};
    const ReportRequest request = ladder_of(t, scenario);
    ladder.argv = request.to_argv();
    const ScenarioInfo& sc = scenario_info(scenario);
    if (sc.no_ladder) {
      ladder.left_out = "scenario " + std::to_string(scenario) + "'s record leaves the ladder out: " + sc.no_ladder;
    } else if (!sc.fix_number) {
      ladder.left_out = "scenario " + std::to_string(scenario) + " has no fix of its own for a report to switch";
    } else {
      checked(ladder, [&] {
        validate_report(request);
        // Its first rung: the scenario's call, fix on and off, --repeat runs each.
        const SdpaProblem p = validate_run_spec(request.run, RunCommand::report).problem;
        ladder.first_result_s = 2.0 * request.repeat * expected_run_cost(p) / kCellCostPerSecond;
      });
    }
    plan.push_back(ladder);
  }

  TriageStep minimize{"minimize", "the first hang found made as small as it can be, and reported",
                      "a sweep cell or a ladder's rung hung (its configuration is the minimization's)", 0.9, "repro", {}, "",
                      ""};
  MinimizeRequest m = minimize_of(t, t.budget_s);
  m.from_sweep = step_path(t, "sweep/sweep.jsonl");
  m.cell = 0;
  minimize.argv = m.to_argv();
  // Its first result: the hang's configuration run --runs times, each started (a process, its CUDA
  // context and cuBLAS handle: about 2 s on an H100, kRunStartS with room) and hanging until the
  // stage's deadline, then killed (a minimization's runs take no snapshot).
  minimize.first_result_s = t.runs * (kRunStartS + t.stage_timeout_s);
  plan.push_back(minimize);

  TriageStep bug{"nvidia-bug-report", "nvidia-bug-report.sh's log of the driver and the machine", "", 0.9,
                 "nvidia-bug-report.sh", {"--output-file", step_path(t, "nvidia-bug-report.log")}, "", ""};
  if (!t.bug_report) {
    bug.left_out = "not taken (--no-bug-report)";
  } else if (geteuid() != 0) {
    bug.left_out = "not taken: it needs root (sudo nvidia-bug-report.sh)";
  } else if (find_tool("nvidia-bug-report.sh", default_tool_dirs()).empty()) {
    bug.left_out = "not taken: nvidia-bug-report.sh is not installed";
  }
  plan.push_back(bug);
  return plan;
}

int print_triage_plan(const TriageSettings& t) {
  const std::vector<TriageStep> plan = plan_triage(t);
  bool all_can_run = true;
  // Each step's share in seconds when every step before it uses all of its own: the least it gets
  // (Triage::step's deadlines: the ladders that climb share their part of what is left).
  int ladders = 0;
  for (const TriageStep& s : plan) ladders += s.name.rfind("ladder-", 0) == 0 && s.left_out.empty() && s.cannot_run.empty();
  double left = t.budget_s;
  int ladder_index = 0;
  const auto least_seconds = [&](const TriageStep& s) {
    if (s.share <= 0 || !s.left_out.empty() || !s.cannot_run.empty()) return 0.0;
    const bool ladder = s.name.rfind("ladder-", 0) == 0;
    const double seconds = step_seconds(left, ladder ? s.share / (ladders - ladder_index++) : s.share);
    left = std::max(0.0, left - seconds);
    return seconds;
  };
  std::cout << "repro triage --dry-run: the plan of " << t.out_dir << " (budget " << seconds_text(t.budget_s)
            << "); nothing is run\n";
  for (const TriageStep& s : plan) {
    std::cout << "\n" << s.name << ": " << s.what << "\n";
    if (!s.when.empty()) std::cout << "  runs when: " << s.when << "\n";
    const double seconds = least_seconds(s);
    if (s.share > 0) {
      std::cout << "  share: " << format_number("%.0f", 100 * s.share) << "% of the budget left"
                << (s.name.rfind("ladder-", 0) == 0 ? ", shared by the ladders that climb" : "")
                << (seconds > 0 ? " (" + seconds_text(seconds) + " if the steps before it use all of theirs)" : "") << "\n";
    }
    if (s.first_result_s > 0 && seconds > 0) {
      std::cout << "  first result: in about " << seconds_text(s.first_result_s)
                << (s.first_result_s > seconds ? "; TOO SHORT a share: it may end with nothing (a longer --budget gives it one)"
                                                : "")
                << "\n";
    }
    std::cout << "  command: " << s.program << " " << join(s.argv) << "\n";
    if (!s.cannot_run.empty()) {
      all_can_run = false;
      std::cout << "  CANNOT RUN: " << s.cannot_run << "\n";
    } else if (!s.left_out.empty()) {
      std::cout << "  left out: " << s.left_out << "\n";
    } else if (s.name == "minimize") {
      std::cout << "  valid: its configuration is checked when it starts (the hang's own)\n";
    } else {
      std::cout << "  valid\n";
    }
  }
  std::cout << "\n# " << (all_can_run ? "every step can run" : "a step cannot run (exit 2)") << "\n";
  return all_can_run ? kExitPass : kExitUsage;
}

TriageSettings resumed_settings(const std::string& out_dir, std::optional<double> more_budget_s) {
  const std::string file = state_path(out_dir);
  const json doc = json_file(file);
  if (!doc.is_object() || !doc.contains("settings") || !doc["settings"].is_object()) {
    throw InputError("--resume: " + out_dir + " holds no triage to continue (" + file +
                     (fs::exists(file) ? " cannot be read)" : " is not there)"));
  }
  TriageSettings t;
  try {
    const json& s = doc.at("settings");
    t.out_dir = out_dir;
    t.budget_s = s.at("budget_s").get<double>();
    t.capture = RunSpec::from_json(s.at("capture"));
    t.scenarios = s.at("scenarios").get<std::vector<int>>();
    t.runs = s.at("runs").get<int>();
    t.stage_timeout_s = s.at("stage_timeout_s").get<double>();
    t.inject = s.at("inject").get<std::string>();
    t.bug_report = s.at("bug_report").get<bool>();
    t.resume = true;
    t.spent_before_s = doc.value("spent_s", 0.0);
    // --budget with --resume: the time this continuation may take, on top of what was spent.
    if (more_budget_s) t.budget_s = t.spent_before_s + *more_budget_s;
  } catch (const json::exception& e) {
    throw InputError("--resume: " + file + " cannot be read: " + one_line(e.what()));
  }
  refuse_if_running("the triage in " + out_dir, doc.value("process", json()));
  return t;
}

int run_triage(const TriageSettings& settings) {
  make_output_dir("--out", settings.out_dir);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  Triage triage(settings);
  return triage.run();
}

}  // namespace sdpa
