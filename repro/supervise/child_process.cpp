// child_process.cpp: fork, exec, redirection, stop and reap.
#include "repro/supervise/child_process.h"

#include <algorithm>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"

#ifdef SDPA_COVERAGE
extern "C" void __gcov_dump(void);  // libgcov's: writes this process's counters now
#endif

namespace sdpa {

namespace {

// Points `target` at what `stream` says (`null_fd`: /dev/null, opened beforehand).
void redirect(int stream, int target, int null_fd) {
  if (stream == kInheritStream) return;
  const int fd = stream == kNullStream ? null_fd : stream;
  if (fd >= 0) dup2(fd, target);
}

// The start of every child, in the child: its group, death with the parent, its streams and folder.
// Only system calls: a program's child shares this process's memory until it execs.
bool prepare_child(const ChildSpec& spec, pid_t parent, int null_fd) {
  if (spec.own_process_group) setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return false;  // the parent died before prctl took effect
  redirect(spec.stdin_fd, STDIN_FILENO, null_fd);
  redirect(spec.stdout_fd, STDOUT_FILENO, null_fd);
  redirect(spec.stderr_fd, STDERR_FILENO, null_fd);
  return spec.cwd.empty() || chdir(spec.cwd.c_str()) == 0;
}

// The environment of a program child: this process's, with spec.environment set over it.
std::vector<std::string> child_environment(const ChildSpec& spec) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e, name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& set : spec.environment) replaced |= set.first == name;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [name, value] : spec.environment) env.push_back(name + "=" + value);
  return env;
}

pid_t start_body(const ChildSpec& spec, int null_fd) {
  std::fflush(nullptr);  // or the child would write this process's buffered output again
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (!prepare_child(spec, parent, null_fd)) _exit(127);
  for (const auto& [name, value] : spec.environment) setenv(name.c_str(), value.c_str(), 1);
  for (int fd : spec.close_in_child) ::close(fd);
  int rc = 127;
  try {
    rc = spec.body();
  } catch (...) {
  }
  std::fflush(nullptr);
  exit_now(rc);
}

pid_t start_program(const ChildSpec& spec, int null_fd) {
  // Built before vfork: the child runs in this process's memory until execve.
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env = child_environment(spec);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string cannot_run = "cannot run " + spec.argv[0] + ": ";
  const pid_t parent = getpid();
  // No handler of this process may run in the child, on the stack it borrows.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = vfork();
  if (pid == 0) {
    if (!prepare_child(spec, parent, null_fd)) _exit(127);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    execve(argv[0], argv.data(), envp.data());
    const char* reason = std::strerror(errno);
    (void)!write(STDERR_FILENO, cannot_run.data(), cannot_run.size());
    (void)!write(STDERR_FILENO, reason, std::strlen(reason));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = fork_errno;
  return pid;
}

}  // namespace

pid_t start_child(const ChildSpec& spec) {
  const bool needs_null = spec.stdin_fd == kNullStream || spec.stdout_fd == kNullStream || spec.stderr_fd == kNullStream;
  const int null_fd = needs_null ? ::open("/dev/null", O_RDWR | O_CLOEXEC) : -1;
  const pid_t pid = spec.argv.empty() ? start_body(spec, null_fd) : start_program(spec, null_fd);
  const int fork_errno = errno;
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) throw InputError(std::string("cannot fork: ") + std::strerror(fork_errno));
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
                      const std::string& stderr_path, double timeout_s, double kill_wait_s, const std::string& cwd,
                      double term_grace_s, const volatile int* stop, const ChildStart& start) {
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
  spec.cwd = cwd;
  spec.environment = start.environment;

  const int64_t started_us = monotonic_us();
  const pid_t pid = start_child(spec);
  ::close(out);
  if (err != out) ::close(err);
  if (start.started) start.started(pid);

  ChildResult r;
  int status = 0;
  // Waits in slices when there is a flag to poll; otherwise in one wait.
  const double slice = stop ? 0.2 : -1;
  bool reaped = false;
  while (!reaped) {
    const double left = timeout_s > 0 ? timeout_s - (monotonic_us() - started_us) / 1e6 : -1;
    if (timeout_s > 0 && left <= 0) {
      r.timed_out = true;
      break;
    }
    if (stop && *stop) {
      r.stopped = true;
      break;
    }
    const double wait = slice < 0 ? left : left < 0 ? slice : std::min(slice, left);
    reaped = reap_within(pid, wait, status);
  }
  if (!reaped) r.abandoned = !stop_child(pid, true, term_grace_s, kill_wait_s, status);
  r.wall_s = (monotonic_us() - started_us) / 1e6;
  r.exit_code = r.abandoned ? -1 : exit_code_of(status);
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

void exit_now(int code) {
#ifdef SDPA_COVERAGE
  __gcov_dump();  // _exit skips the exit handler that writes them
#endif
  _exit(code);
}

}  // namespace sdpa
