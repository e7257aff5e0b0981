// cell_runner.cpp: fork/execv per cell, a poll loop over the running cells, deadlines, signals.
#include "repro/sweep/cell_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "repro/cli/run_options.h"
#include "repro/common/text.h"
#include "repro/run/run_json.h"
#include "repro/supervise/child_process.h"
#include "repro/supervise/hang_snapshot.h"
#include "repro/supervise/watchdog.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;

constexpr size_t kStderrTailLines = 8;
constexpr int kPollMs = 10;
constexpr double kReapAfterKillS = 0.5;  // a child stuck in the driver may not die at once
constexpr double kCanaryTimeoutS = 30;   // the canary takes well under a second on a healthy GPU
constexpr double kSnapshotGraceS = 5;    // beyond a cell's snapshot budget: its report and exit

volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

// SIGINT/SIGTERM set a flag the loop reads; the previous handlers come back afterwards.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

struct RunningCell {
  const SweepCell* cell = nullptr;  // null for the canary
  std::string gpu;
  pid_t pid = -1;
  double deadline_s = 0;
  double snapshot_s = 0;            // added to the deadline once the cell's snapshot began
  std::string snapshot_dir, snapshot_link, log_file, log_link;
  std::optional<int> after_hang;
  bool stuck = false;               // killed at its deadline and still not reaped
  bool earlier_attempt = false;     // its log was there already: a run that never finished (see start)
  ProcessMark mark;                 // its process (process_mark.h)
  std::string mark_file;            // cell-N.process in the cells folder ("": no cells folder)
  int stderr_fd = -1;
  int64_t start_us = 0;
  std::string scratch_path;
  std::string pending;            // stderr bytes after the last newline
  std::deque<std::string> tail;   // the last kStderrTailLines lines

  void read_stderr() {
    char buf[4096];
    ssize_t n;
    while ((n = read(stderr_fd, buf, sizeof buf)) > 0) {
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        tail.push_back(pending.substr(0, nl));
        if (tail.size() > kStderrTailLines) tail.pop_front();
        pending.erase(0, nl + 1);
      }
      if (pending.size() > 4096) pending.erase(0, pending.size() - 4096);
    }
  }
  std::vector<std::string> stderr_tail() const {
    std::vector<std::string> lines(tail.begin(), tail.end());
    if (!pending.empty()) lines.push_back(pending);
    for (auto& line : lines) {
      for (char& c : line) c = (c >= 32 && c < 127) ? c : '?';  // the child's bytes, kept printable
    }
    return lines;
  }
};

// Without a shell, in its own process group (so the sweep can kill it and everything it
// forked), dying with the sweep; stderr goes to the pipe, and its stdout table is not needed:
// the JSON result has everything.
pid_t launch(const std::vector<std::string>& argv, const std::string& gpu, int stderr_write_fd, bool canary,
             const ProcessMark& mark) {
  ChildSpec spec;
  spec.argv = argv;
  spec.stdin_fd = spec.stdout_fd = kNullStream;
  spec.stderr_fd = stderr_write_fd;
  spec.own_process_group = true;
  if (!gpu.empty()) spec.environment.emplace_back("CUDA_VISIBLE_DEVICES", gpu);
  if (canary) spec.environment.emplace_back(kCanaryEnvironment, "1");
  spec.environment.push_back(process_tag_environment(mark));
  return start_child(spec);
}

// A cell's process file: its process and the GPU it runs on (cell_in_flight reads it back).
void write_cell_process(const RunningCell& r) {
  if (r.mark_file.empty()) return;
  write_file_atomic(r.mark_file, nlohmann::json{{"gpu", r.gpu}, {"process", r.mark.to_json()}}.dump() + "\n");
}

// "pass", or "failed: " and why, from how the canary ended and what it wrote.
std::string canary_verdict(const ChildEnd& end, const std::optional<std::string>& json_text) {
  if (end.kind == ChildEnd::timed_out) return "failed: no result within " + format_number("%g", end.deadline_s) + " s";
  if (end.kind == ChildEnd::signalled) return "failed: died from signal " + std::to_string(end.status);
  if (end.status == 0) return "pass";
  std::string why = "exit " + std::to_string(end.status);
  try {
    const RunRecord run = read_run_record(nlohmann::json::parse(json_text.value_or("")));
    why += " (" + std::string(outcome_name(run.outcome)) + (run.error ? ": " + *run.error : "") + ")";
  } catch (const std::exception&) {
  }
  return "failed: " + one_line(why);
}

std::optional<std::string> take_file(const std::string& path) {
  auto text = read_file(path);
  if (text) std::remove(path.c_str());
  return text;
}

// Fills a cell's results from what the child's run reported.
void fill_from_run(const RunRecord& r, nlohmann::json& cell) {
  using nlohmann::json;
  auto string_or_null = [](const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); };
  auto number_or_null = [](const std::optional<double>& x) { return x ? json(*x) : json(nullptr); };
  cell["error"] = string_or_null(r.error);
  cell["stage"] = string_or_null(r.failing_stage());
  cell["classification"] = string_or_null(r.watchdog ? r.watchdog->classification : std::nullopt);
  cell["rel_error"] = number_or_null(r.rel_error);
  cell["tolerance"] = number_or_null(r.tolerance);
  // No completed call, no timing (the result says 0 then).
  cell["call_median_ms"] = number_or_null(r.iterations_done > 0 ? r.call_median_ms : std::nullopt);
  json medians = json::object();
  for (const auto& s : r.stages) medians[s.stage] = s.median_ms;
  cell["stage_median_ms"] = medians;
  cell["device"] = r.device;
  if (r.watchdog && r.watchdog->snapshot_path) {
    cell["snapshot"] = {{"path", *r.watchdog->snapshot_path}, {"evidence", r.watchdog->evidence}};
  }
  cell["stuck_after_kill"] = r.watchdog && r.watchdog->survived_kill;
  cell["stall"] = r.stalls ? json{{"stage", r.stalls->longest.stage},
                                  {"ms", r.stalls->longest.ms},
                                  {"calls_stalled", r.stalls->calls_stalled},
                                  {"calls", r.stalls->calls},
                                  {"summary", r.stalls->summary()}}
                           : json(nullptr);
}

}  // namespace

std::string sweep_cells_dir(const std::string& jsonl_path) {
  const std::string suffix = ".jsonl";
  const bool has_suffix = jsonl_path.size() >= suffix.size() &&
                          jsonl_path.compare(jsonl_path.size() - suffix.size(), suffix.size(), suffix) == 0;
  return (has_suffix ? jsonl_path.substr(0, jsonl_path.size() - suffix.size()) : jsonl_path) + ".cells";
}

std::string cell_log_name(int index) { return "cell-" + std::to_string(index) + ".log"; }

std::string cell_process_name(int index) { return "cell-" + std::to_string(index) + ".process"; }

std::optional<CellInFlight> cell_in_flight(const SweepCell& cell, const std::string& cells_dir) {
  const std::string file = cells_dir + "/" + cell_process_name(cell.index);
  const std::optional<std::string> text = read_file(file);
  if (!text) return std::nullopt;
  std::error_code ignored;
  fs::remove(file, ignored);
  CellInFlight left;
  std::optional<ProcessMark> mark;
  try {
    const nlohmann::json j = nlohmann::json::parse(*text);
    left.gpu = j.at("gpu").get<std::string>();
    mark = ProcessMark::from_json(j.at("process"));
  } catch (const nlohmann::json::exception&) {
  }
  // A file cut short by a frozen machine says nothing of the process: as a stopped machine.
  left.found.fate = ProcessFate::machine_stopped;
  if (mark) left.found = find_marked_processes(*mark);
  return left;
}

nlohmann::json stuck_cell_json(const SweepCell& cell, double stage_timeout_s, const CellInFlight& left,
                               const std::string& cells_dir, const std::string& cells_link) {
  nlohmann::json c = planned_cell_json(cell, stage_timeout_s);
  c["gpu"] = left.gpu.empty() ? nlohmann::json(nullptr) : nlohmann::json(left.gpu);
  c["outcome"] = outcome_name(Outcome::hang);
  c["error"] = "its process was still there when the sweep was resumed, after the sweep that ran it had stopped (" +
               left.found.processes_text() + "): stuck, as a process that does not die with its parent is (in the driver)";
  c["stuck_after_kill"] = true;
  const std::string log = cells_dir + "/" + cell_log_name(cell.index);
  if (const std::optional<std::string> text = read_file(log)) {
    c["log_file"] = cells_link + "/" + cell_log_name(cell.index);
    const LoggedProgress progress = progress_in_log(*text);
    if (!progress.open_stage.empty()) c["stage"] = progress.open_stage;
  }
  return c;
}

RunSpec cell_command_spec(const SweepCell& cell, double stage_timeout_s) {
  RunSpec spec = cell.run_spec();
  spec.stage_timeout = stage_timeout_s;
  return spec;
}

nlohmann::json planned_cell_json(const SweepCell& cell, double stage_timeout_s) {
  using nlohmann::json;
  const RunSpec spec = cell_command_spec(cell, stage_timeout_s);
  json command_line = json::array({"repro"});
  for (const auto& a : spec.to_argv()) command_line.push_back(a);
  return {{"index", cell.index},         {"key", cell.key()},          {"axes", cell_axes_to_json(cell)},
          {"command_line", command_line}, {"run_options", spec.to_json()}, {"gpu", nullptr},            {"outcome", outcome_name(Outcome::planned)},
          {"exit_code", nullptr},         {"signal", nullptr},         {"stage", nullptr},
          {"classification", nullptr},    {"error", nullptr},          {"rel_error", nullptr},
          {"tolerance", nullptr},         {"call_median_ms", nullptr}, {"stage_median_ms", json::object()},
          {"wall_seconds", nullptr},      {"is_skipped", false},       {"skip_reason", nullptr},
          {"stderr_tail", json::array()}, {"device", nullptr},         {"snapshot", nullptr},
          {"log_file", nullptr},          {"after_hang", nullptr},     {"stuck_after_kill", false}};
}

nlohmann::json finished_cell_json(const SweepCell& cell, double stage_timeout_s, const std::string& gpu,
                                  const ChildEnd& end, const std::optional<std::string>& child_json) {
  using nlohmann::json;
  json c = planned_cell_json(cell, stage_timeout_s);
  c["gpu"] = gpu.empty() ? json(nullptr) : json(gpu);
  c["wall_seconds"] = end.wall_s;
  c["stderr_tail"] = end.stderr_tail;
  c["log_file"] = end.log_file.empty() ? json(nullptr) : json(end.log_file);
  c["after_hang"] = end.after_hang ? json(*end.after_hang) : json(nullptr);
  auto crash = [&](const std::string& why) {
    c["outcome"] = outcome_name(Outcome::crash);
    c["error"] = why;
    return c;
  };
  if (end.kind == ChildEnd::timed_out) {
    std::ostringstream why;
    why << "no result within the sweep's per-cell deadline of " << end.deadline_s << " s";
    if (end.snapshot_s > 0) why << " (and " << end.snapshot_s << " s for its hang snapshot)";
    why << "; its process group was killed";
    c["outcome"] = outcome_name(Outcome::timeout);
    c["error"] = why.str();
    // The snapshot it was taking when it was killed: partial, and still the best evidence.
    if (end.snapshot_s > 0) c["snapshot"] = {{"path", end.snapshot_link}, {"evidence", json::array()}};
    return c;
  }
  if (end.kind == ChildEnd::signalled) {
    c["signal"] = end.status;
    return crash("the repro process died from signal " + std::to_string(end.status) + " (" + strsignal(end.status) + ")");
  }
  c["exit_code"] = end.status;
  const auto known = outcome_of_exit_code(end.status);
  if (!known) {
    return crash("repro exited with code " + std::to_string(end.status) + ", which is not one of its exit codes");
  }
  const std::string code = "repro exited with code " + std::to_string(end.status) + " (" + outcome_name(*known) + ")";
  if (!child_json) {
    if (*known != Outcome::usage) return crash(code + " but wrote no JSON result");
    c["outcome"] = outcome_name(*known);  // a usage error stops repro before it writes anything
    c["error"] = end.stderr_tail.empty() ? json("usage error") : json(end.stderr_tail.back());
    return c;
  }
  // The run's own outcome, not the one its exit code stands for: exit code 1 is a mismatch or
  // a soak's leak, and only the run knows which.
  Outcome outcome;
  try {
    const json r = json::parse(*child_json);
    if (!r.is_object()) return crash(code + " but its JSON result is not an object");
    const RunRecord run = read_run_record(r);
    if (run.exit_code != end.status) {
      return crash(code + " but its JSON result says exit_code " + (run.exit_code ? std::to_string(*run.exit_code) : "null"));
    }
    if (outcome_exit_code(run.outcome) != end.status) {
      return crash(code + " but its JSON result says outcome " + outcome_name(run.outcome));
    }
    outcome = run.outcome;
    fill_from_run(run, c);
  } catch (const std::exception& e) {  // a key of the wrong type, an outcome that is none
    return crash(code + " but its JSON result is malformed: " + one_line(e.what()));
  }
  c["outcome"] = outcome_name(outcome);
  if (c["snapshot"].is_object() && !end.snapshot_link.empty()) c["snapshot"]["path"] = end.snapshot_link;
  if (outcome == Outcome::waived) {
    // nvbench's way of saying a configuration was not measured, and why.
    c["is_skipped"] = true;
    c["skip_reason"] = c["error"].is_null() ? json("waived") : c["error"];
  }
  return c;
}

nlohmann::json gpu_checks_json(const std::vector<GpuCheck>& checks) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : checks) {
    out.push_back({{"gpu", c.gpu.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.gpu)},
                   {"after_cell", c.after_cell},
                   {"canary", c.canary.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.canary)},
                   {"retired", c.retired},
                   {"reason", c.reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.reason)}});
  }
  return out;
}

RunSpec canary_spec() {
  RunSpec spec;
  spec.scenario = 0;
  spec.alloc = "device";
  spec.batch = 1, spec.heads = 1, spec.q_len = 16, spec.head_dim = 16;
  spec.check = true;
  spec.stage_timeout = 5;
  spec.on_hang = "kill";
  return spec;
}

CellsRun run_cells(const std::vector<SweepCell>& cells, const SweepRunSettings& settings,
                   const std::function<void(const nlohmann::json&)>& on_done) {
  const StopSignals stop_signals;
  CellsRun result;
  std::vector<std::optional<RunningCell>> slots(settings.workers.size());
  std::vector<pid_t> unreaped;  // killed but stuck (in the driver); reaped when they can be
  size_t next = 0;
  // What the sweep knows of each GPU (workers on one GPU share it).
  struct GpuState {
    bool retired = false, needs_canary = false, canary_running = false;
    std::optional<int> after_hang;  // the last cell that hung there
  };
  std::map<std::string, GpuState> gpus;
  std::vector<GpuCheck> checks = settings.gpu_checks;
  for (const GpuCheck& c : checks) gpus[c.gpu].retired = gpus[c.gpu].retired || c.retired;
  std::error_code ec;
  if (!settings.cells_dir.empty()) fs::create_directories(settings.cells_dir, ec);

  auto launch_in = [&](size_t w, RunningCell r, std::vector<std::string> argv) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw InputError(std::string("cannot create a pipe: ") + std::strerror(errno));
    r.start_us = monotonic_us();
    r.mark = new_process_mark();
    write_cell_process(r);
    try {
      r.pid = launch(argv, r.gpu, fds[1], r.cell == nullptr, r.mark);
    } catch (...) {
      close(fds[0]);
      close(fds[1]);
      throw;
    }
    close(fds[1]);
    mark_started(r.mark, r.pid);
    write_cell_process(r);
    r.stderr_fd = fds[0];
    fcntl(r.stderr_fd, F_SETFL, O_NONBLOCK);
    slots[w] = std::move(r);
  };
  auto start = [&](size_t w) {
    RunningCell r;
    r.cell = &cells[next++];
    r.gpu = settings.workers[w];
    r.after_hang = gpus[r.gpu].after_hang;
    r.deadline_s = settings.cell_timeout_s;
    r.scratch_path = settings.scratch_prefix + std::to_string(r.cell->index) + ".json";
    std::remove(r.scratch_path.c_str());
    RunSpec spec = cell_command_spec(*r.cell, settings.stage_timeout_s);
    spec.json = r.scratch_path;
    spec.on_hang = on_hang_name(settings.on_hang);
    if (settings.on_hang == OnHang::snapshot) spec.snapshot_timeout = settings.snapshot_timeout_s;
    if (!settings.cells_dir.empty()) {
      const std::string name = "cell-" + std::to_string(r.cell->index);
      r.log_file = settings.cells_dir + "/" + cell_log_name(r.cell->index);
      r.log_link = settings.cells_link + "/" + cell_log_name(r.cell->index);
      // A cell's log outlives its run only when the run did not pass, and then its record names it;
      // a log of a cell still to run is an earlier run that never finished: a resumed sweep after the
      // sweep was killed, or after a freeze whose last stage records are in it. The run appends to it,
      // and the log is kept whatever this run's outcome.
      std::error_code absent;
      r.earlier_attempt = fs::exists(r.log_file, absent);
      // A folder of its own: an earlier attempt's snapshot (a sweep resumed after a freeze) stays.
      r.snapshot_dir = fresh_snapshot_dir(settings.cells_dir + "/" + name + ".snapshot");
      r.snapshot_link = settings.cells_link + "/" + fs::path(r.snapshot_dir).filename().string();
      spec.log_file = r.log_file;
      spec.snapshot_dir = r.snapshot_dir;
      r.mark_file = settings.cells_dir + "/" + cell_process_name(r.cell->index);
    }
    std::vector<std::string> argv = spec.to_argv();
    argv.insert(argv.begin(), settings.repro_binary);
    launch_in(w, std::move(r), argv);
  };
  auto start_canary = [&](size_t w) {
    RunningCell r;
    r.gpu = settings.workers[w];
    r.deadline_s = std::min(settings.cell_timeout_s, kCanaryTimeoutS);
    r.scratch_path = settings.scratch_prefix + "canary-" + std::to_string(w) + ".json";
    std::remove(r.scratch_path.c_str());
    RunSpec spec = canary_spec();
    spec.json = r.scratch_path;
    std::vector<std::string> argv = spec.to_argv();
    argv.insert(argv.begin(), settings.repro_binary);
    gpus[r.gpu].canary_running = true;
    launch_in(w, std::move(r), argv);
  };
  auto retire = [&](GpuCheck& check, const std::string& reason) {
    gpus[check.gpu].retired = true;
    check.retired = true;
    check.reason = reason;
  };
  // Kills the cell's process group; true once the child is reaped.
  auto kill_cell = [&](RunningCell& r, int& status) {
    const bool reaped = stop_child(r.pid, true, 0, kReapAfterKillS, status);
    if (!reaped) unreaped.push_back(r.pid);
    r.stuck = !reaped;
    return reaped;
  };
  auto finish = [&](size_t w, ChildEnd end) {
    RunningCell& r = *slots[w];
    r.read_stderr();
    close(r.stderr_fd);
    end.wall_s = (monotonic_us() - r.start_us) / 1e6;
    end.deadline_s = r.deadline_s;
    end.snapshot_s = r.snapshot_s;
    end.stderr_tail = r.stderr_tail();
    const auto json_text = take_file(r.scratch_path);
    GpuState& gpu = gpus[r.gpu];
    if (!r.cell) {  // the canary
      gpu.canary_running = gpu.needs_canary = false;
      const std::string verdict = canary_verdict(end, json_text);
      GpuCheck* last = nullptr;  // the hangs on this GPU since its last canary: this one answers for them all
      for (auto& c : checks) {
        if (c.gpu != r.gpu || !c.canary.empty() || c.retired) continue;
        c.canary = verdict;
        last = &c;
      }
      if (last && verdict != "pass") retire(*last, "the canary after cell " + std::to_string(last->after_cell) + " " + verdict);
      slots[w].reset();
      return;
    }
    end.snapshot_link = r.snapshot_link;
    end.after_hang = r.after_hang;
    std::error_code ignored;
    const bool logged = !r.log_file.empty() && fs::exists(r.log_file, ignored);
    if (logged) end.log_file = r.log_link;
    nlohmann::json record = finished_cell_json(*r.cell, settings.stage_timeout_s, settings.workers[w], end, json_text);
    const Outcome outcome = parse_outcome(record.at("outcome").get<std::string>());
    if ((outcome == Outcome::pass || outcome == Outcome::waived) && logged && !r.earlier_attempt) {
      fs::remove(r.log_file, ignored);  // its result is in the JSON-lines file
      record["log_file"] = nullptr;
    }
    if (outcome == Outcome::no_gpu && !result.no_gpu_cell) result.no_gpu_cell = r.cell->index;
    if (outcome == Outcome::hang || outcome == Outcome::timeout) {
      checks.push_back({r.gpu, r.cell->index, "", false, ""});
      gpu.after_hang = r.cell->index;
      if (r.stuck || record.at("stuck_after_kill").get<bool>()) {
        retire(checks.back(), "cell " + std::to_string(r.cell->index) +
                                  "'s hung process did not die after SIGKILL (stuck in the driver)");
      } else if (!gpu.retired) {
        gpu.needs_canary = true;
      }
    }
    const std::string mark_file = r.mark_file;
    slots[w].reset();
    on_done(record);
    // Its record is written: its process file goes (a resume would otherwise ask after it).
    if (!mark_file.empty()) fs::remove(mark_file, ignored);
  };

  while (true) {
    for (size_t w = 0; w < slots.size() && !g_stop_signal; ++w) {
      if (slots[w] || next >= cells.size() || result.no_gpu_cell) continue;
      GpuState& gpu = gpus[settings.workers[w]];
      if (gpu.retired || gpu.canary_running) continue;
      if (gpu.needs_canary) {
        start_canary(w);
      } else {
        start(w);
      }
    }
    // Nothing running: every cell ran, every GPU left is retired, or there is no GPU.
    const bool running = std::any_of(slots.begin(), slots.end(), [](const auto& s) { return s.has_value(); });
    if (!running) break;

    std::vector<pollfd> fds;
    for (const auto& s : slots) fds.push_back({s ? s->stderr_fd : -1, POLLIN, 0});
    poll(fds.data(), fds.size(), kPollMs);  // EINTR on a signal is fine: the flag is read below

    for (size_t w = 0; w < slots.size(); ++w) {
      if (!slots[w]) continue;
      RunningCell& r = *slots[w];
      r.read_stderr();
      int status = 0;
      if (g_stop_signal) {
        kill_cell(r, status);
        close(r.stderr_fd);
        std::remove(r.scratch_path.c_str());
        if (!r.cell) gpus[r.gpu].canary_running = false;
        slots[w].reset();
      } else if (waitpid(r.pid, &status, WNOHANG) == r.pid) {
        ChildEnd end;
        end.kind = WIFSIGNALED(status) ? ChildEnd::signalled : ChildEnd::exited;
        end.status = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
        finish(w, end);
      } else if ((monotonic_us() - r.start_us) / 1e6 >= r.deadline_s + r.snapshot_s) {
        std::error_code ignored;
        if (r.snapshot_s == 0 && settings.on_hang == OnHang::snapshot && !r.snapshot_dir.empty() &&
            fs::exists(r.snapshot_dir, ignored)) {
          // Its watchdog found the hang and is taking the snapshot: that has its own budget.
          r.snapshot_s = settings.snapshot_timeout_s + kSnapshotGraceS;
          continue;
        }
        kill_cell(r, status);
        ChildEnd end;
        end.kind = ChildEnd::timed_out;
        finish(w, end);
      }
    }
  }
  for (pid_t pid : unreaped) {
    int status;
    waitpid(pid, &status, WNOHANG);
  }
  if (!settings.cells_dir.empty()) fs::remove(settings.cells_dir, ec);  // only when nothing was kept in it
  result.gpu_checks = checks;
  result.stop_signal = g_stop_signal;
  return result;
}

namespace {

// One worker per visible GPU (see sweep_workers).
std::vector<std::string> gpu_workers(int gpus_option) {
  std::vector<std::string> workers;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::stringstream list(visible);
    std::string item;
    while (std::getline(list, item, ',')) {
      if (!item.empty()) workers.push_back(item);
    }
    if (gpus_option > static_cast<int>(workers.size())) {
      throw InputError("--gpus " + std::to_string(gpus_option) + ": CUDA_VISIBLE_DEVICES lists " +
                       std::to_string(workers.size()) + " GPU(s)");
    }
    if (gpus_option > 0) workers.resize(static_cast<size_t>(gpus_option));
    if (workers.empty()) workers.push_back("");  // no GPU visible: one worker, its cells say no_gpu
    return workers;
  }
  int count = gpus_option;
  if (count <= 0) {
    // One directory per GPU, without initialising CUDA in this process.
    std::error_code ec;
    count = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      (void)entry;
      ++count;
    }
  }
  if (count <= 1) return {""};
  for (int i = 0; i < count; ++i) workers.push_back(std::to_string(i));
  return workers;
}

}  // namespace

std::vector<std::string> sweep_workers(int gpus_option, int cells_per_gpu) {
  std::vector<std::string> workers;
  for (const auto& gpu : gpu_workers(gpus_option)) workers.insert(workers.end(), static_cast<size_t>(cells_per_gpu), gpu);
  return workers;
}

}  // namespace sdpa
