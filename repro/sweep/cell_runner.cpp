// sweep_runner.cpp: fork/execv per cell, a poll loop over the running cells, deadlines, signals.
#include "repro/sweep/cell_runner.h"
#include "repro/common/text.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
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

#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "repro/cli/run_options.h"

namespace sdpa {

namespace {

constexpr size_t kStderrTailLines = 8;
constexpr int kPollMs = 10;
constexpr double kReapAfterKillS = 0.5;  // a child stuck in the driver may not die at once

// repro's exit codes (math_sdpa/errors.h) and the outcome each one means.
const std::map<int, std::string> kOutcomeOfExitCode{
    {kExitPass, "pass"},         {kExitMismatch, "mismatch"}, {kExitUsage, "usage"},
    {kExitHang, "hang"},         {kExitCudaError, "cuda_error"}, {kExitCrash, "crash"},
    {kExitWaived, "waived"},     {kExitNoGpu, "no_gpu"},      {kExitRefused, "refused"}};

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
  const SweepCell* cell = nullptr;
  pid_t pid = -1;
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

// fork + execv, never a shell. The child gets its own process group (so the sweep can kill it
// and everything it forked), dies with the sweep (PR_SET_PDEATHSIG), and writes stderr to the
// pipe; its stdout table is not needed, the JSON result has everything.
pid_t launch(const std::vector<std::string>& argv, const std::string& gpu, int stderr_write_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw InputError(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (!gpu.empty()) setenv("CUDA_VISIBLE_DEVICES", gpu.c_str(), 1);
    const int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, STDIN_FILENO);
    dup2(devnull, STDOUT_FILENO);
    dup2(stderr_write_fd, STDERR_FILENO);
    execv(args[0], args.data());
    const std::string message = std::string("cannot run ") + args[0] + ": " + std::strerror(errno) + "\n";
    (void)!write(STDERR_FILENO, message.data(), message.size());
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so a kill right after fork reaches the group
  return pid;
}

// Waits up to `seconds` for pid; true once reaped.
bool reap_within(pid_t pid, double seconds, int& status) {
  const int64_t until = monotonic_us() + static_cast<int64_t>(seconds * 1e6);
  while (true) {
    if (waitpid(pid, &status, WNOHANG) == pid) return true;
    if (monotonic_us() >= until) return false;
    usleep(2000);
  }
}

std::optional<std::string> take_file(const std::string& path) {
  auto text = read_file(path);
  if (text) std::remove(path.c_str());
  return text;
}

nlohmann::json null_or(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) ? j.at(key) : nlohmann::json(nullptr);
}

// Fills a cell's results from the child's JSON result (result_json.cpp); throws
// nlohmann::json::exception where a field has the wrong type.
void read_child_result(const nlohmann::json& r, nlohmann::json& cell) {
  using nlohmann::json;
  const json error = null_or(r, "error");
  cell["error"] = error.is_null() ? json(nullptr) : json(error.get<std::string>());
  const json watchdog = null_or(r, "watchdog");
  const json stage = watchdog.is_object() ? null_or(watchdog, "stage") : null_or(r, "error_stage");
  cell["stage"] = stage.is_null() ? json(nullptr) : json(stage.get<std::string>());
  const json classification = watchdog.is_object() ? null_or(watchdog, "classification") : json(nullptr);
  cell["classification"] = classification.is_null() ? json(nullptr) : json(classification.get<std::string>());
  const json check = null_or(r, "check");
  cell["rel_error"] = check.is_object() ? null_or(check, "rel_error") : json(nullptr);
  cell["tolerance"] = check.is_object() ? null_or(check, "tolerance") : json(nullptr);
  for (const char* number : {"rel_error", "tolerance"}) {
    if (!cell[number].is_null()) cell[number] = cell[number].get<double>();
  }
  // No completed call, no timing (the result says 0 then).
  const json done = null_or(r, "iterations_done");
  const json timing = null_or(r, "timing");
  cell["call_median_ms"] = done.is_number() && done.get<int64_t>() > 0 && timing.is_object()
                               ? json(timing.at("call_median_ms").get<double>())
                               : json(nullptr);
  json medians = json::object();
  const json stages = null_or(r, "stages");
  if (stages.is_array()) {
    for (const auto& s : stages) medians[s.at("stage").get<std::string>()] = s.at("median_ms").get<double>();
  }
  cell["stage_median_ms"] = medians;
  const json device = null_or(r, "device");
  cell["device"] = device.is_object() ? device : json(nullptr);
}

}  // namespace

const std::vector<std::string>& sweep_outcomes() {
  static const std::vector<std::string> outcomes{"pass",    "waived", "mismatch", "hang",   "timeout", "crash",
                                                 "cuda_error", "usage",  "no_gpu",   "refused", "planned"};
  return outcomes;
}

bool outcome_is_success(const std::string& outcome) { return outcome == "pass" || outcome == "waived"; }

std::vector<std::string> cell_command_args(const SweepCell& cell, double stage_timeout_s) {
  std::vector<std::string> args = cell.run_args();
  std::ostringstream timeout;
  timeout << stage_timeout_s;
  args.insert(args.end(), {"--stage-timeout", timeout.str()});
  return args;
}

nlohmann::json planned_cell_json(const SweepCell& cell, double stage_timeout_s) {
  using nlohmann::json;
  json command_line = json::array({"repro"});
  for (const auto& a : cell_command_args(cell, stage_timeout_s)) command_line.push_back(a);
  return {{"index", cell.index},         {"key", cell.key()},          {"axes", cell_axes_to_json(cell)},
          {"command_line", command_line}, {"gpu", nullptr},            {"outcome", "planned"},
          {"exit_code", nullptr},         {"signal", nullptr},         {"stage", nullptr},
          {"classification", nullptr},    {"error", nullptr},          {"rel_error", nullptr},
          {"tolerance", nullptr},         {"call_median_ms", nullptr}, {"stage_median_ms", json::object()},
          {"wall_seconds", nullptr},      {"is_skipped", false},       {"skip_reason", nullptr},
          {"stderr_tail", json::array()}, {"device", nullptr}};
}

nlohmann::json finished_cell_json(const SweepCell& cell, double stage_timeout_s, const std::string& gpu,
                                  const ChildEnd& end, const std::optional<std::string>& child_json) {
  using nlohmann::json;
  json c = planned_cell_json(cell, stage_timeout_s);
  c["gpu"] = gpu.empty() ? json(nullptr) : json(gpu);
  c["wall_seconds"] = end.wall_s;
  c["stderr_tail"] = end.stderr_tail;
  auto crash = [&](const std::string& why) {
    c["outcome"] = "crash";
    c["error"] = why;
    return c;
  };
  if (end.kind == ChildEnd::timed_out) {
    std::ostringstream why;
    why << "no result within the sweep's per-cell deadline of " << end.deadline_s << " s; its process group was killed";
    c["outcome"] = "timeout";
    c["error"] = why.str();
    return c;
  }
  if (end.kind == ChildEnd::signalled) {
    c["signal"] = end.status;
    return crash("the repro process died from signal " + std::to_string(end.status) + " (" + strsignal(end.status) + ")");
  }
  c["exit_code"] = end.status;
  const auto known = kOutcomeOfExitCode.find(end.status);
  if (known == kOutcomeOfExitCode.end()) {
    return crash("repro exited with code " + std::to_string(end.status) + ", which is not one of its exit codes");
  }
  const std::string& outcome = known->second;
  const std::string code = "repro exited with code " + std::to_string(end.status) + " (" + outcome + ")";
  if (!child_json) {
    if (end.status != kExitUsage) return crash(code + " but wrote no JSON result");
    c["outcome"] = outcome;  // a usage error stops repro before it writes anything
    c["error"] = end.stderr_tail.empty() ? json("usage error") : json(end.stderr_tail.back());
    return c;
  }
  try {
    const json r = json::parse(*child_json);
    if (!r.is_object()) return crash(code + " but its JSON result is not an object");
    if (null_or(r, "exit_code") != json(end.status)) {
      return crash(code + " but its JSON result says exit_code " + null_or(r, "exit_code").dump());
    }
    read_child_result(r, c);
  } catch (const json::exception& e) {
    return crash(code + " but its JSON result is malformed: " + one_line(e.what()));
  }
  c["outcome"] = outcome;
  if (outcome == "waived") {
    // nvbench's way of saying a configuration was not measured, and why.
    c["is_skipped"] = true;
    c["skip_reason"] = c["error"].is_null() ? json("waived") : c["error"];
  }
  return c;
}

int run_cells(const std::vector<SweepCell>& cells, const SweepRunSettings& settings,
              const std::function<void(const nlohmann::json&)>& on_done) {
  const StopSignals stop_signals;
  std::vector<std::optional<RunningCell>> slots(settings.workers.size());
  std::vector<pid_t> unreaped;  // killed but stuck (in the driver); reaped when they can be
  size_t next = 0;

  auto start = [&](size_t w) {
    RunningCell r;
    r.cell = &cells[next++];
    r.scratch_path = settings.scratch_prefix + std::to_string(r.cell->index) + ".json";
    std::remove(r.scratch_path.c_str());
    std::vector<std::string> argv{settings.repro_binary};
    for (const auto& a : cell_command_args(*r.cell, settings.stage_timeout_s)) argv.push_back(a);
    argv.insert(argv.end(), {"--json", r.scratch_path});
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw InputError(std::string("cannot create a pipe: ") + std::strerror(errno));
    r.start_us = monotonic_us();
    try {
      r.pid = launch(argv, settings.workers[w], fds[1]);
    } catch (...) {
      close(fds[0]);
      close(fds[1]);
      throw;
    }
    close(fds[1]);
    r.stderr_fd = fds[0];
    fcntl(r.stderr_fd, F_SETFL, O_NONBLOCK);
    slots[w] = std::move(r);
  };
  // Kills the cell's process group; true once the child is reaped.
  auto kill_cell = [&](RunningCell& r, int& status) {
    kill(-r.pid, SIGKILL);
    kill(r.pid, SIGKILL);
    const bool reaped = reap_within(r.pid, kReapAfterKillS, status);
    if (!reaped) unreaped.push_back(r.pid);
    return reaped;
  };
  auto finish = [&](size_t w, ChildEnd end) {
    RunningCell& r = *slots[w];
    r.read_stderr();
    close(r.stderr_fd);
    end.wall_s = (monotonic_us() - r.start_us) / 1e6;
    end.deadline_s = settings.cell_timeout_s;
    end.stderr_tail = r.stderr_tail();
    const auto json_text = take_file(r.scratch_path);
    const nlohmann::json record =
        finished_cell_json(*r.cell, settings.stage_timeout_s, settings.workers[w], end, json_text);
    slots[w].reset();
    on_done(record);
  };

  while (true) {
    for (size_t w = 0; w < slots.size() && !g_stop_signal; ++w) {
      if (!slots[w] && next < cells.size()) start(w);
    }
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
        slots[w].reset();
      } else if (waitpid(r.pid, &status, WNOHANG) == r.pid) {
        ChildEnd end;
        end.kind = WIFSIGNALED(status) ? ChildEnd::signalled : ChildEnd::exited;
        end.status = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
        finish(w, end);
      } else if ((monotonic_us() - r.start_us) / 1e6 >= settings.cell_timeout_s) {
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
  return g_stop_signal;
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
