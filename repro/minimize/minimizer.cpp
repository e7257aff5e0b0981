// minimizer.cpp: the resumable minimization loop (minimizer.h).
#include "repro/minimize/minimizer.h"
#include "repro/report/report_request.h"

#include <signal.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "repro/info/environment.h"
#include "repro/supervise/child_process.h"
#include "repro/supervise/durable_log.h"
#include "repro/supervise/process_mark.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

volatile int g_stop_signal = 0;  // the signal that stopped minimize (a sig_atomic_t)
void on_stop_signal(int sig) { g_stop_signal = sig; }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string duration_text(double s) {
  const int total = static_cast<int>(s + 0.5);
  if (total < 60) return std::to_string(total) + "s";
  if (total < 3600) return std::to_string(total / 60) + "m" + std::to_string(total % 60) + "s";
  return std::to_string(total / 3600) + "h" + std::to_string(total % 3600 / 60) + "m";
}

// The state on disk (OUT/state.json): everything needed to go on after a crash or a frozen machine.
struct State {
  json doc;

  json& trial() { return doc["trial"]; }  // the configuration under test, or null
  RunSpec current() const { return RunSpec::from_json(doc.at("current")); }
  std::set<std::string> fails_with() const { return doc.at("fails_with").get<std::set<std::string>>(); }
};

// 2: configurations as RunSpec JSON objects (1 had command lines).
constexpr int kStateFormat = 2;

std::string state_path(const std::string& out) { return (fs::path(out) / "state.json").string(); }

void save(const State& s, const std::string& out) { write_file_atomic(state_path(out), s.doc.dump(1) + "\n"); }

// Configurations compare as values: the same options, whatever order they were written in.
std::string key_of(const RunSpec& o) { return o.to_json().dump(); }

class Minimizer {
 public:
  Minimizer(const MinimizeSettings& settings, State state)
      : m_(settings), s_(std::move(state)), log_((fs::path(settings.out_dir) / "progress.log").string(), 0) {}

  int run(bool resume);

 private:
  void say(const std::string& line) {
    const std::string text = "[" + duration_text(spent()) + " of " + duration_text(m_.budget_s) + "] " + line;
    std::cout << "minimize: " << text << std::endl;
    log_.record("step", text);
  }
  double spent() const { return s_.doc.at("spent_s").get<double>() + (now_s() - session_start_); }
  void checkpoint() {
    s_.doc["spent_s"] = spent();
    session_start_ = now_s();
    save(s_, m_.out_dir);
  }
  std::string one_run(const RunSpec& options, int number, ProcessMark& mark, bool& timed_out, int& exit_code);
  // On --resume: what became of the run the state says was in flight, said, and counted or not.
  void settle_run_in_flight();
  // The given configuration's runs are done: whether it failed (shrinking starts, looking for the
  // failures it showed unless --fails-with named them).
  bool given_configuration_fails(const json& trial);
  bool next_trial();
  int finish(const std::string& why);
  bool trial_failed() const;

  MinimizeSettings m_;
  State s_;
  DurableLog log_;
  double session_start_ = now_s();
};

// Runs one configuration once, as a repro process of its own, its output in OUT/runs/N.log; its
// process goes into the state's run in flight (`mark`) as soon as it runs.
std::string Minimizer::one_run(const RunSpec& options, int number, ProcessMark& mark, bool& timed_out, int& exit_code) {
  const fs::path runs = fs::path(m_.out_dir) / "runs";
  fs::create_directories(runs);
  char name[32];
  std::snprintf(name, sizeof name, "%04d.log", number);
  RunSpec run = options;
  // A hang's evidence is the report's to take, at the end: here a hang only needs naming.
  if (!run.on_hang) run.on_hang = "kill";
  const std::vector<std::string> args = run.to_argv();
  const std::string log_path = (runs / name).string();
  ChildStart start;
  start.environment = {process_tag_environment(mark)};
  start.started = [&](pid_t pid) {
    mark_started(mark, pid);
    s_.doc["in_flight"]["process"] = mark.to_json();
    checkpoint();
  };
  const ChildResult r = run_child(m_.repro_binary.empty() ? self_executable() : m_.repro_binary, args, log_path, log_path,
                                  m_.run_timeout_s, 30, "", 2, &g_stop_signal, start);
  timed_out = r.timed_out;
  if (r.stopped) return "interrupted";
  exit_code = r.timed_out ? -1 : r.exit_code;
  return run_class(exit_code, r.timed_out);
}

bool Minimizer::trial_failed() const {
  const std::set<std::string> wanted = s_.fails_with();
  for (const json& r : s_.doc.at("trial").at("runs")) {
    const std::string c = r.at("class").get<std::string>();
    if (wanted.empty() ? is_failure_class(c) : wanted.count(c) > 0) return true;
  }
  return false;
}

// Chooses the next configuration to test (a step's proposal not yet rejected); false when a whole
// pass has kept nothing: the current configuration is the smallest.
bool Minimizer::next_trial() {
  const auto& steps = minimize_steps();
  std::set<std::string> rejected;
  for (const json& r : s_.doc.at("rejected")) rejected.insert(r.at("key").get<std::string>());
  for (;;) {
    int next = s_.doc.at("next_step").get<int>();
    if (next >= static_cast<int>(steps.size())) {
      if (!s_.doc.at("pass_kept").get<bool>()) return false;
      s_.doc["next_step"] = next = 0;
      s_.doc["pass_kept"] = false;
      s_.doc["pass"] = s_.doc.at("pass").get<int>() + 1;
    }
    s_.doc["next_step"] = next + 1;
    const std::optional<Proposal> p = propose(steps[next].name, s_.current());
    if (!p || rejected.count(key_of(p->options))) continue;
    s_.trial() = {{"step", steps[next].name}, {"change", p->change}, {"options", p->options.to_json()}, {"runs", json::array()}};
    return true;
  }
}

void Minimizer::settle_run_in_flight() {
  json& in_flight = s_.doc["in_flight"];
  const std::string run = "run " + std::to_string(in_flight.at("run").get<int>());
  // A state written before runs' processes were recorded cannot tell a kill from a freeze: it is
  // taken for a freeze, as it was then.
  const std::optional<ProcessMark> mark = ProcessMark::from_json(in_flight.value("process", json()));
  ProcessFinding found;
  found.fate = ProcessFate::machine_stopped;
  if (mark) found = find_marked_processes(*mark);
  if (found.fate == ProcessFate::gone) {
    // Killed with minimize on a machine that kept running: nothing says what the run would have found.
    say(run + " was interrupted (its process ended without a result on this boot: minimize was stopped): it runs again");
  } else if (m_.in_flight_retry) {
    say(run + " " + (found.fate == ProcessFate::machine_stopped ? "was in flight when the machine stopped" : "is still there") +
        ": it runs again (--in-flight retry)");
  } else if (found.fate == ProcessFate::machine_stopped) {
    s_.trial()["runs"].push_back({{"run", in_flight.at("run")}, {"class", "hang"}, {"exit_code", nullptr}, {"machine_stopped", true}});
    say(run + " was in flight when the machine stopped (it has booted again since): counted as a hang");
  } else {
    // Every run dies with minimize (PR_SET_PDEATHSIG): one still there did not, so it is stuck (in
    // the driver). Left as it is: another SIGKILL does nothing to it, and it is the hang's evidence.
    s_.trial()["runs"].push_back({{"run", in_flight.at("run")},
                                  {"class", "hang"},
                                  {"exit_code", nullptr},
                                  {"stuck", found.processes_text()}});
    say(run + "'s process is still there after minimize stopped (" + found.processes_text() +
        "): stuck, counted as a hang, and left as it is");
  }
  in_flight = nullptr;
  checkpoint();
}

bool Minimizer::given_configuration_fails(const json& trial) {
  if (!trial_failed()) {
    std::string wanted;
    for (const std::string& c : s_.fails_with()) wanted += (wanted.empty() ? " (" : ", ") + c;
    say("the configuration given did not fail" + (wanted.empty() ? "" : wanted + ")") + " in " + std::to_string(m_.runs) +
        " runs: nothing to minimize");
    s_.doc["phase"] = "not_failing";
    checkpoint();
    return false;
  }
  if (s_.fails_with().empty()) {
    std::set<std::string> seen;
    for (const json& r : trial.at("runs")) {
      if (is_failure_class(r.at("class"))) seen.insert(r.at("class").get<std::string>());
    }
    s_.doc["fails_with"] = seen;
  }
  std::string classes;
  for (const std::string& c : s_.fails_with()) classes += (classes.empty() ? "" : ", ") + c;
  say("the configuration given fails (" + classes + "); shrinking it while it still does");
  s_.doc["given_runs"] = trial.at("runs");
  s_.doc["phase"] = "shrinking";
  return true;
}

int Minimizer::run(bool resume) {
  json& in_flight = s_.doc["in_flight"];
  if (resume && !in_flight.is_null()) settle_run_in_flight();
  s_.doc["process"] = this_process_mark().to_json();
  checkpoint();
  while (true) {
    if (s_.doc.at("phase") == "done") return finish("no step keeps failing");
    if (spent() >= m_.budget_s) return finish("the time budget is spent");
    if (s_.trial().is_null() && !next_trial()) {
      s_.doc["phase"] = "done";
      checkpoint();
      continue;
    }
    const bool baseline = s_.doc.at("phase") == "baseline";
    json& trial = s_.trial();
    const RunSpec options = RunSpec::from_json(trial.at("options"));
    const int done = static_cast<int>(trial.at("runs").size());
    // The given configuration runs all its runs (they say which failures to look for); a
    // proposal stops at its first failure.
    const bool decided = baseline ? done >= m_.runs : (trial_failed() || done >= m_.runs);
    if (decided) {
      const bool failed = trial_failed();
      const std::string step = trial.at("step").get<std::string>();
      if (baseline) {
        if (!given_configuration_fails(trial)) return 1;
      } else if (failed) {
        s_.doc["current"] = options.to_json();
        s_.doc["kept"].push_back(trial);
        s_.doc["pass_kept"] = true;
        say("kept: " + step + " (" + trial.at("change").get<std::string>() + ")");
      } else {
        s_.doc["rejected"].push_back({{"step", step}, {"change", trial.at("change")}, {"key", key_of(options)}});
        say("rejected: " + step + " (" + trial.at("change").get<std::string>() + "): passed " + std::to_string(done) + " runs");
      }
      s_.trial() = nullptr;
      checkpoint();
      continue;
    }
    const int number = s_.doc.at("runs_started").get<int>() + 1;
    s_.doc["runs_started"] = number;
    ProcessMark mark = new_process_mark();
    in_flight = {{"run", number}, {"started_utc", utc_now()}, {"process", mark.to_json()}};
    checkpoint();
    bool timed_out = false;
    int exit_code = -1;
    const std::string c = one_run(options, number, mark, timed_out, exit_code);
    if (c == "interrupted") {
      in_flight = nullptr;
      checkpoint();
      say("interrupted by signal " + std::to_string(g_stop_signal) + " during run " + std::to_string(number) +
          " (not counted); --resume goes on");
      return 128 + g_stop_signal;
    }
    if (c == "no_gpu") {
      in_flight = nullptr;
      checkpoint();
      say("run " + std::to_string(number) + " found no usable GPU (exit 7): stopped");
      return kExitNoGpu;
    }
    json record = {{"run", number}, {"class", c}, {"exit_code", timed_out ? json(nullptr) : json(exit_code)}};
    if (timed_out) record["timed_out"] = true;
    trial["runs"].push_back(record);
    in_flight = nullptr;
    checkpoint();
    say(trial.at("step").get<std::string>() + (baseline ? "" : " (" + trial.at("change").get<std::string>() + ")") + ": run " +
        std::to_string(done + 1) + " of " + std::to_string(m_.runs) + ": " + c +
        (timed_out ? " (killed at the run deadline)" : " (exit " + std::to_string(exit_code) + ")"));
  }
}

int Minimizer::finish(const std::string& why) {
  const RunSpec current = without_defaults(s_.current());
  const std::string command = "repro " + shell_command(current.to_argv());
  say("smallest failing configuration (" + why + "): " + command);
  s_.doc["phase"] = "done";
  s_.doc["ended_because"] = why;
  s_.doc["smallest"] = current.to_json();
  checkpoint();
  std::string steps_text;
  for (const json& k : s_.doc.at("kept")) {
    steps_text += "- " + k.at("step").get<std::string>() + ": " + k.at("change").get<std::string>() + "\n";
  }
  std::string summary = "# repro minimize\n\nGiven:\n\n    repro " + shell_command(RunSpec::from_json(s_.doc.at("original")).to_argv()) +
                        "\n\nSmallest configuration that still fails (" + why + "):\n\n    " + command +
                        "\n\nSteps kept, in order:\n\n" + (steps_text.empty() ? "(none)\n" : steps_text);
  if (m_.report && !s_.doc.contains("report_exit")) {
    ReportRequest report;
    report.run = report_options(current);
    report.out_dir = (fs::path(m_.out_dir) / "report").string();
    report.force = true;
    report.allow_inject = current.inject.has_value();
    // The report is this program's; only its runs are the --repro-binary's (a fake in tests).
    report.repro_binary = m_.repro_binary;
    const std::vector<std::string> args = report.to_argv();
    say("repro " + shell_command(args));
    const std::string log = (fs::path(m_.out_dir) / "report.log").string();
    const ChildResult r = run_child(self_executable(), args, log, log, std::max(600.0, m_.budget_s - spent()), 30, "", 10,
                                    &g_stop_signal);
    s_.doc["report_exit"] = r.exit_code;
    checkpoint();
    say("report: exit " + std::to_string(r.exit_code) + (r.exit_code == 2 ? " (see report.log)" : "") + ", " + report.out_dir);
  }
  if (s_.doc.contains("report_exit")) {
    summary += "\nReport: `report/` (`repro report` exit " + std::to_string(s_.doc.at("report_exit").get<int>()) +
               "; its output in report.log).\n";
  }
  write_file_atomic((fs::path(m_.out_dir) / "SUMMARY.md").string(), summary);
  return kExitPass;
}

}  // namespace

const std::vector<std::string>& failure_classes() {
  static const std::vector<std::string> classes = {"mismatch", "hang", "error", "crash", "stall"};
  return classes;
}

bool is_failure_class(const std::string& c) {
  const auto& f = failure_classes();
  return std::find(f.begin(), f.end(), c) != f.end();
}

std::string run_class(int exit_code, bool timed_out) {
  if (timed_out) return "hang";
  switch (exit_code) {
    case kExitPass: return "pass";
    case kExitMismatch: return "mismatch";
    case kExitUsage: return "usage";
    case kExitHang: return "hang";
    case kExitCudaError: return "error";
    case kExitCrash: return "crash";
    case kExitWaived: return "waived";
    case kExitNoGpu: return "no_gpu";
    case kExitRefused: return "refused";
    case kExitStalled: return "stall";
    default: return exit_code > 128 ? "crash" : "error";
  }
}

int run_minimize(const MinimizeSettings& settings, bool resume) {
  State state;
  const std::string path = state_path(settings.out_dir);
  if (resume) {
    const std::optional<std::string> text = read_file(path);
    if (!text) throw InputError("--resume: " + path + " cannot be read (start a minimization with --out)");
    try {
      state.doc = json::parse(*text);
    } catch (const json::exception& e) {
      throw InputError("--resume: " + path + " is not a minimize state (" + one_line(e.what()) + ")");
    }
    if (state.doc.value("format", "") != "sdpa-repro-minimize" || state.doc.value("format_version", 0) != kStateFormat) {
      throw InputError("--resume: " + path + " is not a minimize state of this version (format_version " +
                       std::to_string(kStateFormat) + ")");
    }
    refuse_if_running("the minimization in " + settings.out_dir, state.doc.value("process", json()));
  } else {
    state.doc = {{"format", "sdpa-repro-minimize"},
                 {"format_version", kStateFormat},
                 {"started_utc", utc_now()},
                 {"original", settings.original.to_json()},
                 {"runs_per_configuration", settings.runs},
                 {"fails_with", settings.fails_with},
                 {"current", settings.original.to_json()},
                 {"phase", "baseline"},
                 {"trial", {{"step", "the configuration given"}, {"change", ""}, {"options", settings.original.to_json()}, {"runs", json::array()}}},
                 {"kept", json::array()},
                 {"rejected", json::array()},
                 {"next_step", 0},
                 {"pass", 1},
                 {"pass_kept", false},
                 {"runs_started", 0},
                 {"in_flight", nullptr},
                 {"spent_s", 0.0}};
    make_output_dir("--out", settings.out_dir);
    save(state, settings.out_dir);
  }
  MinimizeSettings m = settings;
  if (resume) {  // the minimization's own settings are the state's; the budget may be given anew
    m.original = RunSpec::from_json(state.doc.at("original"));
    m.runs = state.doc.at("runs_per_configuration").get<int>();
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  Minimizer minimizer(m, std::move(state));
  return minimizer.run(resume);
}

}  // namespace sdpa
