// supervisor.cpp: fork, pipes, poll, deadlines, what a hang does, terminate/kill.
#include "repro/supervise/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "repro/common/text.h"
#include "repro/supervise/child_process.h"
#include "repro/supervise/durable_log.h"
#include "repro/supervise/snapshot_collectors.h"

namespace sdpa {

namespace {

constexpr int kPollMs = 10;
// After SIGKILL: a process stuck inside the driver may not die at once; report anyway after this.
constexpr double kChildKillWaitS = 0.4;
constexpr double kKernelStacksS = 2;      // reading the kernel stacks of a process that did not die
constexpr double kSnapshotHelperGraceS = 5;  // --no-fork: beyond the budget, before the snapshot process is given up
constexpr int kKeepPollMs = 50;

// Splits a byte stream into lines, one call per complete line.
struct LineBuffer {
  std::string pending;
  template <typename F> void feed(const char* data, size_t n, F&& on_line) {
    pending.append(data, n);
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      on_line(pending.substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
  }
};

// One line on stderr with one write: the in-process watchdog must not wait for a stdio lock
// that the hung thread may hold.
void say(const std::string& line) {
  const std::string text = line + "\n";
  (void)!write(STDERR_FILENO, text.data(), text.size());
}

// Where the run's part of the kernel log begins, for a hang snapshot: only read when one may be taken.
int64_t kernel_log_mark(const SupervisorOptions& o) {
  return o.hang.on_hang == OnHang::snapshot ? kernel_log_last_sequence() : -1;
}

std::unique_ptr<DurableLog> open_log(const SupervisorOptions& o, int64_t start_us) {
  if (o.hang.log_file.empty()) return std::make_unique<DurableLog>();
  auto log = std::make_unique<DurableLog>(o.hang.log_file, start_us);
  log->record("start", o.log_header + " (pid " + std::to_string(getpid()) + ")");
  return log;
}

// "stage softmax did not finish within 20.0 s"
std::string finding(const SupervisedOutcome& out, const SupervisorOptions& o) {
  if (out.expiry.whole_run) {
    return "the run exceeded its --timeout of " + format_number("%g", o.run_timeout_s) + " s; stage " +
           (out.stage.empty() ? std::string("(none)") : out.stage) + " was running";
  }
  return "stage " + out.stage + " did not finish within " + format_number("%.1f", o.stage_timeout_s) + " s";
}

// --no-fork: the snapshot is taken by a process of its own (hang_snapshot_main). A debugger
// attached to this process stops its every thread, this one too, and the snapshot process
// still ends the debugger in time and lets this process go on.
HangSnapshot snapshot_by_helper(const SnapshotRequest& request, const SupervisorOptions& o) {
  ChildSpec spec;
  spec.argv = {o.snapshot_program.empty() ? self_executable() : o.snapshot_program,
               "hang-snapshot",
               "--pid",
               std::to_string(request.pid),
               "--dir",
               request.dir,
               "--budget",
               format_number("%g", request.budget_s),
               "--since-us",
               std::to_string(request.run_start_us),
               "--since-kernel-log-seq",
               std::to_string(request.run_start_kernel_log_seq),
               "--hang",
               request.hang_line};
  if (request.nvidia_bug_report) spec.argv.push_back("--nvidia-bug-report");
  if (!o.hang.log_file.empty()) spec.argv.insert(spec.argv.end(), {"--log-file", o.hang.log_file});
  for (const auto& dir : request.tool_dirs) spec.argv.insert(spec.argv.end(), {"--tool-dir", dir});
  spec.stdin_fd = spec.stdout_fd = kNullStream;
  spec.own_process_group = true;
  std::string failure;
  try {
    const pid_t helper = start_child(spec);
    int status = 0;
    if (!reap_within(helper, request.budget_s + kSnapshotHelperGraceS, status)) {
      stop_child(helper, true, 0, kChildKillWaitS, status);
      failure = "did not end within its budget";
    } else if (exit_code_of(status) != 0) {
      failure = "ended with exit " + std::to_string(exit_code_of(status));
    }
    if (const auto text = read_file(request.dir + "/snapshot.json")) return snapshot_from_json(nlohmann::json::parse(*text));
  } catch (const std::exception& e) {  // it could not start, or its snapshot.json does not read
    failure = one_line(e.what());
  }
  HangSnapshot s;
  s.dir = request.dir;
  s.pid = request.pid;
  s.hang = request.hang_line;
  s.budget_s = request.budget_s;
  CollectorRun helper;
  helper.name = "snapshot_process";
  helper.state = CollectorState::failed;
  helper.reason = "`" + shell_command(spec.argv) + "` " + (failure.empty() ? "wrote no snapshot.json" : failure);
  s.collectors.push_back(helper);
  return s;
}

volatile sig_atomic_t g_keep_interrupted = 0;
void on_keep_signal(int) { g_keep_interrupted = 1; }

// --on-hang keep: prints what to run and waits for Ctrl-C (or SIGTERM), the keep timeout, or a
// forked target ending by itself. True when the target ended meanwhile (reaped into `status`).
bool keep_for_inspection(pid_t target, bool in_process, const SupervisorOptions& o, SupervisedOutcome& out,
                         DurableLog& log, int& status) {
  const std::string pid = std::to_string(target);
  std::string cuda_gdb = find_tool("cuda-gdb", o.tool_dirs.empty() ? default_tool_dirs() : o.tool_dirs);
  if (cuda_gdb.empty()) cuda_gdb = "cuda-gdb";
  say("repro: " + finding(out, o) + "; keeping the hung process (pid " + pid + ") alive for inspection for up to " +
      format_number("%g", o.hang.keep_timeout_s) + " s (--on-hang keep). From another terminal:");
  say("    sudo " + cuda_gdb + " -p " + pid +
      " -batch -ex \"info cuda kernels\" -ex \"info cuda warps\" -ex \"thread apply all bt\"");
  say("    sudo sh -c 'for t in /proc/" + pid + "/task/*; do echo \"== $t $(cat $t/wchan)\"; cat $t/stack; done'");
  say("    sudo nvidia-bug-report.sh");
  say("  Ctrl-C (or kill -INT " + std::to_string(getpid()) + ") ends it now.");
  log.record("keep", "pid " + pid + " kept for up to " + format_number("%g", o.hang.keep_timeout_s) + " s");
  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = on_keep_signal;
  sigemptyset(&sa.sa_mask);
  g_keep_interrupted = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  const int64_t start = monotonic_us();
  bool ended = false;
  while (!g_keep_interrupted && (monotonic_us() - start) / 1e6 < o.hang.keep_timeout_s) {
    if (!in_process && waitpid(target, &status, WNOHANG) == target) {
      ended = true;
      break;
    }
    usleep(kKeepPollMs * 1000);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  out.kept_s = (monotonic_us() - start) / 1e6;
  const std::string why = ended ? "it ended by itself" : g_keep_interrupted ? "interrupted" : "--keep-timeout reached";
  say("repro: kept the hung process for " + format_number("%.1f", out.kept_s) + " s (" + why + ")");
  log.record("keep", "ended after " + format_number("%.1f", out.kept_s) + " s: " + why);
  return ended;
}

// What happens between the deadline and the kill, to the forked child or (in_process) to this
// process. True when a forked target ended meanwhile (reaped into `status`).
bool act_on_hang(pid_t target, bool in_process, const SupervisorOptions& o, SupervisedOutcome& out, DurableLog& log,
                 int& status) {
  const std::string what = finding(out, o);
  log.record("hang", what);
  if (o.hang.on_hang == OnHang::keep) return keep_for_inspection(target, in_process, o, out, log, status);
  if (o.hang.on_hang != OnHang::snapshot) return false;
  SnapshotRequest request;
  request.pid = target;
  request.dir = fresh_snapshot_dir(!o.snapshot_dir.empty()        ? o.snapshot_dir
                                   : !o.hang.snapshot_dir.empty() ? o.hang.snapshot_dir
                                                                  : default_snapshot_dir(""));
  request.budget_s = o.hang.snapshot_timeout_s;
  request.run_start_us = out.start_us;
  request.run_start_kernel_log_seq = out.start_kernel_log_seq;
  request.nvidia_bug_report = o.hang.nvidia_bug_report;
  request.hang_line = what;
  request.tool_dirs = o.tool_dirs;
  request.on_collector = [&](const CollectorRun& r) {
    log.record("snapshot", collector_line(r));
    say("repro: snapshot: " + collector_line(r));
  };
  say("repro: " + what + "; taking a hang snapshot of pid " + std::to_string(target) + " into " + request.dir +
      " (at most " + format_number("%g", request.budget_s) + " s) before killing it");
  out.snapshot = in_process ? snapshot_by_helper(request, o) : take_hang_snapshot(request);
  log.record("snapshot", "done: " + out.snapshot->dir + "/snapshot.json");
  return false;
}

// Starts child_main in a child process of its own, writing its progress records into one pipe and
// its stderr into another, whose read ends are `progress_fd` and `log_fd`.
pid_t start_gpu_child(const std::function<int(int)>& child_main, const SupervisorOptions& options, int& progress_fd,
                      int& log_fd) {
  int progress[2], errpipe[2];
  if (pipe2(progress, O_CLOEXEC) != 0 || pipe2(errpipe, O_CLOEXEC) != 0) {
    throw InputError(std::string("cannot create pipes: ") + std::strerror(errno));
  }
  const pid_t supervisor = getpid();
  ChildSpec spec;
  spec.body = [&] {
    // Yama's default scope lets a debugger attach only to its descendants, unless the target
    // names its ptracer: the snapshot's debugger is a child of the supervisor.
    if (options.hang.on_hang == OnHang::snapshot) prctl(PR_SET_PTRACER, supervisor, 0, 0, 0);
    try {
      return child_main(progress[1]);
    } catch (...) {
      return static_cast<int>(kExitCrash);
    }
  };
  spec.stderr_fd = errpipe[1];  // the stage log, forwarded line by line and kept as a tail
  spec.close_in_child = {progress[0], errpipe[0], errpipe[1]};
  const pid_t pid = start_child(spec);
  close(progress[1]);
  close(errpipe[1]);
  progress_fd = progress[0];
  log_fd = errpipe[0];
  return pid;
}

// SIGKILL did not end the child: it is inside the kernel, most likely the driver. Its kernel
// stacks say where; waiting for it could take forever.
void note_stuck_child(pid_t pid, SupervisedOutcome& out, DurableLog& log) {
  out.survived_kill = true;
  out.kernel_stacks = kernel_stacks_of(pid, kKernelStacksS);
  log.record("stuck", "pid " + std::to_string(pid) + " still there after SIGKILL; not waited for");
  for (const auto& line : out.kernel_stacks) log.write("stuck", line);
  log.sync();
}

// What the monitor knows of the child's records, and how a child that was reaped ended (its
// exit code, or the signal that killed it: a crash).
void settle_outcome(const HangMonitor& monitor, bool reaped, int status, SupervisedOutcome& out) {
  out.stage = out.kind == SupervisedOutcome::hang ? out.expiry.stage : monitor.open_stage();
  out.position = monitor.open_position();
  out.records = monitor.flight_recorder();
  out.device_json = monitor.device_json();
  out.calls_done = monitor.calls_done();
  out.elapsed_s = (monotonic_us() - out.start_us) / 1e6;
  if (out.kind != SupervisedOutcome::exited || !reaped) return;
  if (WIFSIGNALED(status)) {
    out.kind = SupervisedOutcome::crashed;
    out.signal = WTERMSIG(status);
    out.message = std::string("the GPU child died from signal ") + std::to_string(out.signal) + " (" +
                  strsignal(out.signal) + ")";
  } else {
    out.child_exit_code = WEXITSTATUS(status);
  }
}

// Reads what the child wrote to its stderr (the stage log) once: to our stderr, to the durable log
// line by line, and its last `tail_lines` lines into `tail`. False once the pipe is closed.
bool forward_stage_log(int fd, LineBuffer& lines, DurableLog& log, size_t tail_lines, std::vector<std::string>& tail) {
  char buf[65536];
  const ssize_t n = read(fd, buf, sizeof buf);
  if (n <= 0) return false;
  (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
  lines.feed(buf, static_cast<size_t>(n), [&](const std::string& line) {
    log.write("log", line);
    tail.push_back(line);
    if (tail.size() > tail_lines) tail.erase(tail.begin());
  });
  return true;
}

// What a malformed progress record is said to be: its start, every byte that is not printable ASCII
// shown as '?'.
std::string malformed_record_message(std::string record) {
  for (char& c : record) c = (c >= 32 && c < 127) ? c : '?';
  return "the GPU child wrote a malformed progress record: \"" + record + "\"";
}

}  // namespace

SupervisedOutcome supervise(const std::function<int(int)>& child_main, const SupervisorOptions& options) {
  SupervisedOutcome out;
  out.start_us = monotonic_us();
  out.start_kernel_log_seq = kernel_log_mark(options);
  out.on_hang = options.hang.on_hang;
  out.log_file = options.hang.log_file;
  const std::unique_ptr<DurableLog> log = open_log(options, out.start_us);
  int progress_fd = -1, log_fd = -1;
  const pid_t pid = start_gpu_child(child_main, options, progress_fd, log_fd);
  log->record("start", "the GPU child is pid " + std::to_string(pid));

  HangMonitor monitor(options.stage_timeout_s, options.run_timeout_s, out.start_us);
  LineBuffer progress_lines, log_lines;
  bool progress_open = true, log_open = true, reaped = false, malformed = false;
  int status = 0;
  std::string bad_record;
  while (!reaped) {
    pollfd fds[2] = {{progress_open ? progress_fd : -1, POLLIN, 0}, {log_open ? log_fd : -1, POLLIN, 0}};
    poll(fds, 2, kPollMs);
    char buf[65536];
    if (progress_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = read(progress_fd, buf, sizeof buf);
      if (n <= 0) progress_open = false;
      if (n > 0) {
        progress_lines.feed(buf, static_cast<size_t>(n), [&](const std::string& line) {
          log->write("record", line);
          if (!malformed && !monitor.consume(line, monotonic_us())) {
            malformed = true;
            bad_record = line.substr(0, 60);
          }
        });
        if (progress_lines.pending.size() > 65536) malformed = true, bad_record = "(an unterminated record over 64 KiB)";
      }
    }
    if (log_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      log_open = forward_stage_log(log_fd, log_lines, *log, options.log_tail_lines, out.log_tail);
    }
    // What was read in this round is on disk before anything else happens: under a trickle of
    // records, as before a hang, that is record by record.
    log->sync();
    if (malformed) {
      out.kind = SupervisedOutcome::bad_output;
      out.message = malformed_record_message(bad_record);
      reaped = stop_child(pid, false, options.kill_grace_s, kChildKillWaitS, status);
      break;
    }
    const Expiry expiry = monitor.check(monotonic_us());
    if (expiry.expired) {
      out.kind = SupervisedOutcome::hang;
      out.expiry = expiry;
      out.stage = expiry.stage;
      reaped = act_on_hang(pid, false, options, out, *log, status);
      if (!reaped) reaped = stop_child(pid, false, options.kill_grace_s, kChildKillWaitS, status);
      break;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) reaped = true;
  }
  if (!reaped) note_stuck_child(pid, out, *log);
  // Drain what the child wrote before it went away.
  for (int fd : {progress_fd, log_fd}) {
    fcntl(fd, F_SETFL, O_NONBLOCK);
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      if (fd == log_fd) {
        (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
      } else if (out.kind == SupervisedOutcome::exited) {
        progress_lines.feed(buf, static_cast<size_t>(n), [&](const std::string& line) { monitor.consume(line, monotonic_us()); });
      }
    }
    close(fd);
  }
  settle_outcome(monitor, reaped, status, out);
  log->record("end", out.kind == SupervisedOutcome::exited ? "the GPU child exited with code " + std::to_string(out.child_exit_code)
                     : out.kind == SupervisedOutcome::hang ? "hang: the GPU child was killed"
                                                           : out.message);
  return out;
}

int start_in_process_watchdog(const SupervisorOptions& options, std::function<void(const SupervisedOutcome&)> on_hang) {
  const int64_t start_us = monotonic_us();
  const int64_t start_kernel_log_seq = kernel_log_mark(options);
  std::shared_ptr<DurableLog> log = open_log(options, start_us);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw InputError(std::string("cannot create a pipe: ") + std::strerror(errno));
  // The snapshot's debugger is a descendant of this process (hang_snapshot_main's child), which
  // Yama's default scope allows only when this process names itself as the ptracer.
  if (options.hang.on_hang == OnHang::snapshot) prctl(PR_SET_PTRACER, getpid(), 0, 0, 0);
  std::thread([read_fd = fds[0], options, on_hang, log, start_us, start_kernel_log_seq] {
    SupervisedOutcome out;
    out.start_us = start_us;
    out.start_kernel_log_seq = start_kernel_log_seq;
    out.on_hang = options.hang.on_hang;
    out.log_file = options.hang.log_file;
    HangMonitor monitor(options.stage_timeout_s, options.run_timeout_s, out.start_us);
    LineBuffer lines;
    while (true) {
      pollfd fd{read_fd, POLLIN, 0};
      poll(&fd, 1, kPollMs);
      char buf[65536];
      if (fd.revents & (POLLIN | POLLHUP)) {
        const ssize_t n = read(read_fd, buf, sizeof buf);
        if (n <= 0) {  // the run finished and closed its end
          log->record("end", "the run closed its progress pipe");
          return;
        }
        lines.feed(buf, static_cast<size_t>(n), [&](const std::string& line) {
          log->write("record", line);
          monitor.consume(line, monotonic_us());
        });
        log->sync();
      }
      const Expiry expiry = monitor.check(monotonic_us());
      if (expiry.expired) {
        out.kind = SupervisedOutcome::hang;
        out.expiry = expiry;
        out.stage = expiry.stage;
        out.position = monitor.open_position();
        out.records = monitor.flight_recorder();
        out.device_json = monitor.device_json();
        out.calls_done = monitor.calls_done();
        int status = 0;
        act_on_hang(getpid(), true, options, out, *log, status);
        out.elapsed_s = (monotonic_us() - out.start_us) / 1e6;
        on_hang(out);
        log->record("end", "hang: this process exits with code " + std::to_string(kExitHang));
        std::fflush(nullptr);
        exit_now(kExitHang);
      }
    }
  }).detach();
  return fds[1];
}

}  // namespace sdpa
