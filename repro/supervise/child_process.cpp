// child_process.cpp: fork, exec, redirection, stop and reap.
#include "repro/supervise/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"

namespace sdpa {

namespace {

// Points `target` at what `stream` says; false if /dev/null cannot be opened.
void redirect(int stream, int target) {
  if (stream == kInheritStream) return;
  const int fd = stream == kNullStream ? ::open("/dev/null", O_RDWR) : stream;
  if (fd >= 0) dup2(fd, target);
}

}  // namespace

pid_t start_child(const ChildSpec& spec) {
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);  // or the child would write this process's buffered output again
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw InputError(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    if (spec.own_process_group) setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    for (const auto& [name, value] : spec.environment) setenv(name.c_str(), value.c_str(), 1);
    redirect(spec.stdin_fd, STDIN_FILENO);
    redirect(spec.stdout_fd, STDOUT_FILENO);
    redirect(spec.stderr_fd, STDERR_FILENO);
    if (spec.argv.empty()) {
      for (int fd : spec.close_in_child) ::close(fd);
      int rc = 127;
      try {
        rc = spec.body();
      } catch (...) {
      }
      std::fflush(nullptr);
      _exit(rc);
    }
    execv(argv[0], argv.data());
    const std::string message = std::string("cannot run ") + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!write(STDERR_FILENO, message.data(), message.size());
    _exit(127);
  }
  if (spec.own_process_group) setpgid(pid, pid);  // also here, so a kill right after fork reaches the group
  return pid;
}

bool reap_within(pid_t pid, double seconds, int& status) {
  if (seconds < 0) return waitpid(pid, &status, 0) == pid;
  const int64_t until = monotonic_us() + static_cast<int64_t>(seconds * 1e6);
  while (true) {
    if (waitpid(pid, &status, WNOHANG) == pid) return true;
    if (monotonic_us() >= until) return false;
    usleep(2000);
  }
}

bool stop_child(pid_t pid, bool group, double term_grace_s, double kill_wait_s, int& status) {
  if (term_grace_s > 0) {
    kill(pid, SIGTERM);
    if (reap_within(pid, term_grace_s, status)) return true;
  }
  if (group) kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  return reap_within(pid, kill_wait_s, status);
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

ChildResult run_child(const std::string& binary, const std::vector<std::string>& args, const std::string& stdout_path,
                      const std::string& stderr_path, double timeout_s) {
  const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = stderr_path == stdout_path ? out
                                             : ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0 || err < 0) throw InputError("cannot write " + stdout_path + ": " + std::strerror(errno));
  ChildSpec spec;
  spec.argv = {binary};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.stdin_fd = kNullStream;
  spec.stdout_fd = out;
  spec.stderr_fd = err;
  spec.own_process_group = true;  // a timeout kills it with whatever it started

  const int64_t start = monotonic_us();
  const pid_t pid = start_child(spec);
  ::close(out);
  if (err != out) ::close(err);

  ChildResult r;
  int status = 0;
  if (timeout_s > 0 && !reap_within(pid, timeout_s, status)) {
    stop_child(pid, true, 0, -1, status);
    r.timed_out = true;
  } else if (timeout_s <= 0) {
    reap_within(pid, -1, status);
  }
  r.wall_s = (monotonic_us() - start) / 1e6;
  r.exit_code = exit_code_of(status);
  return r;
}

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw InputError(std::string("cannot find this executable (/proc/self/exe): ") + std::strerror(errno));
  return std::string(path, static_cast<size_t>(n));
}

std::string shell_command(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789-_./=:,+@%") == std::string::npos;
    std::string quoted = a;
    if (!plain) {
      quoted = "'";
      for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      quoted += "'";
    }
    s += (s.empty() ? "" : " ") + quoted;
  }
  return s;
}

}  // namespace sdpa
