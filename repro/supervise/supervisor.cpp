// supervisor.cpp: fork, pipes, poll, deadlines, terminate/kill.
#include "repro/supervise/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "repro/supervise/child_process.h"

namespace sdpa {

namespace {

constexpr int kPollMs = 10;
// After SIGKILL: a process stuck inside the driver may not die at once; report anyway after this.
constexpr double kKillWaitS = 0.4;

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

}  // namespace

SupervisedOutcome supervise(const std::function<int(int)>& child_main, const SupervisorOptions& options) {
  int progress[2], errpipe[2];
  if (pipe2(progress, O_CLOEXEC) != 0 || pipe2(errpipe, O_CLOEXEC) != 0) {
    throw InputError(std::string("cannot create pipes: ") + std::strerror(errno));
  }
  ChildSpec spec;
  spec.body = [&] {
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

  SupervisedOutcome out;
  out.start_us = monotonic_us();
  HangMonitor monitor(options.stage_timeout_s, options.run_timeout_s, out.start_us);
  LineBuffer progress_lines, log_lines;
  bool progress_open = true, log_open = true, reaped = false, malformed = false;
  int status = 0;
  std::string bad_record;
  while (!reaped) {
    pollfd fds[2] = {{progress_open ? progress[0] : -1, POLLIN, 0}, {log_open ? errpipe[0] : -1, POLLIN, 0}};
    poll(fds, 2, kPollMs);
    char buf[65536];
    if (progress_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = read(progress[0], buf, sizeof buf);
      if (n <= 0) progress_open = false;
      if (n > 0) {
        progress_lines.feed(buf, static_cast<size_t>(n), [&](const std::string& line) {
          if (!malformed && !monitor.consume(line, monotonic_us())) {
            malformed = true;
            bad_record = line.substr(0, 60);
          }
        });
        if (progress_lines.pending.size() > 65536) malformed = true, bad_record = "(an unterminated record over 64 KiB)";
      }
    }
    if (log_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = read(errpipe[0], buf, sizeof buf);
      if (n <= 0) log_open = false;
      if (n > 0) {
        (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
        log_lines.feed(buf, static_cast<size_t>(n), [&](const std::string& line) {
          out.log_tail.push_back(line);
          if (out.log_tail.size() > options.log_tail_lines) out.log_tail.erase(out.log_tail.begin());
        });
      }
    }
    if (malformed) {
      out.kind = SupervisedOutcome::bad_output;
      for (char& c : bad_record) c = (c >= 32 && c < 127) ? c : '?';
      out.message = "the GPU child wrote a malformed progress record: \"" + bad_record + "\"";
      reaped = stop_child(pid, false, options.kill_grace_s, kKillWaitS, status);
      break;
    }
    const Expiry expiry = monitor.check(monotonic_us());
    if (expiry.expired) {
      out.kind = SupervisedOutcome::hang;
      out.expiry = expiry;
      reaped = stop_child(pid, false, options.kill_grace_s, kKillWaitS, status);
      break;
    }
    if (waitpid(pid, &status, WNOHANG) == pid) reaped = true;
  }
  // Drain what the child wrote before it went away.
  for (int fd : {progress[0], errpipe[0]}) {
    fcntl(fd, F_SETFL, O_NONBLOCK);
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
      if (fd == errpipe[0]) {
        (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
      } else if (out.kind == SupervisedOutcome::exited) {
        progress_lines.feed(buf, static_cast<size_t>(n), [&](const std::string& line) { monitor.consume(line, monotonic_us()); });
      }
    }
    close(fd);
  }
  out.stage = out.kind == SupervisedOutcome::hang ? out.expiry.stage : monitor.open_stage();
  out.records = monitor.flight_recorder();
  out.device_json = monitor.device_json();
  out.calls_done = monitor.calls_done();
  out.elapsed_s = (monotonic_us() - out.start_us) / 1e6;
  if (out.kind == SupervisedOutcome::exited && reaped) {
    if (WIFSIGNALED(status)) {
      out.kind = SupervisedOutcome::crashed;
      out.signal = WTERMSIG(status);
      out.message = std::string("the GPU child died from signal ") + std::to_string(out.signal) + " (" +
                    strsignal(out.signal) + ")";
    } else {
      out.child_exit_code = WEXITSTATUS(status);
    }
  }
  return out;
}

int start_in_process_watchdog(const SupervisorOptions& options, std::function<void(const SupervisedOutcome&)> on_hang) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw InputError(std::string("cannot create a pipe: ") + std::strerror(errno));
  std::thread([read_fd = fds[0], options, on_hang] {
    SupervisedOutcome out;
    out.start_us = monotonic_us();
    HangMonitor monitor(options.stage_timeout_s, options.run_timeout_s, out.start_us);
    LineBuffer lines;
    while (true) {
      pollfd fd{read_fd, POLLIN, 0};
      poll(&fd, 1, kPollMs);
      char buf[65536];
      if (fd.revents & POLLIN) {
        const ssize_t n = read(read_fd, buf, sizeof buf);
        if (n <= 0) return;  // the run finished and closed its end
        lines.feed(buf, static_cast<size_t>(n), [&](const std::string& line) { monitor.consume(line, monotonic_us()); });
      }
      const Expiry expiry = monitor.check(monotonic_us());
      if (expiry.expired) {
        out.kind = SupervisedOutcome::hang;
        out.expiry = expiry;
        out.stage = expiry.stage;
        out.records = monitor.flight_recorder();
        out.device_json = monitor.device_json();
        out.calls_done = monitor.calls_done();
        out.elapsed_s = (monotonic_us() - out.start_us) / 1e6;
        on_hang(out);
        std::fflush(nullptr);
        _exit(kExitHang);
      }
    }
  }).detach();
  return fds[1];
}

}  // namespace sdpa
