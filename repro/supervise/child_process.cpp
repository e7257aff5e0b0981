// child_process.cpp
#include "repro/supervise/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "math_sdpa/errors.h"

namespace sdpa {

ChildResult run_child(const std::string& binary, const std::vector<std::string>& args, const std::string& stdout_path,
                      const std::string& stderr_path, double timeout_s) {
  const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = stderr_path == stdout_path ? out
                                             : ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0 || err < 0) throw InputError("cannot write " + stdout_path + ": " + std::strerror(errno));
  std::vector<std::string> argv_storage{binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  std::fflush(nullptr);  // or the child would write this process's buffered output again
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw InputError(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // its own group: a timeout kills it with whatever it started
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  ::close(out);
  if (err != out) ::close(err);

  ChildResult r;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, timeout_s > 0 ? WNOHANG : 0);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && elapsed > timeout_s) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    if (timeout_s > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
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
