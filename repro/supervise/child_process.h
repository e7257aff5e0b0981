// child_process.h: the one place that starts and stops child processes.
//
// Three parts of the harness run children, and all of them the same way: the supervisor forks
// the GPU child (a function of this very process), the sweep runs one `repro` per cell, and the
// report runs `repro info` and each harness run. Every child is started without a shell, dies
// with its parent (PR_SET_PDEATHSIG), and is stopped and reaped here, so the kill-and-reap
// rules (SIGTERM, a grace, SIGKILL to the whole group, a bounded wait for a child stuck in the
// driver) are written once.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sdpa {

// A standard stream of the child: a file descriptor of the parent, or one of these.
constexpr int kInheritStream = -2;  // the parent's own
constexpr int kNullStream = -1;     // /dev/null

struct ChildSpec {
  std::vector<std::string> argv;  // the program (a path) and its arguments, exec'd without a shell;
  std::function<int()> body;      // or, with argv empty, code run in the forked child (its exit code)
  int stdin_fd = kInheritStream, stdout_fd = kInheritStream, stderr_fd = kInheritStream;
  std::vector<int> close_in_child;  // the parent's ends of pipes, closed in a body child
  // Its own process group: stop_child then reaches everything the child started, and a
  // terminal's Ctrl-C reaches it only through the parent.
  bool own_process_group = false;
  std::vector<std::pair<std::string, std::string>> environment;  // set in the child
  std::string cwd;  // the child's working folder; "": this process's
};

// Starts the child. A program (argv) is started with vfork and execve, so starting it neither
// copies this process's memory map nor waits for its lock, which a thread stuck in the driver
// may hold (the in-process watchdog starts its snapshot that way); a body needs fork. Throws
// InputError if the fork fails.
pid_t start_child(const ChildSpec& spec);

// Ends this process now with `code`, as _exit does (no exit handlers, no buffers flushed twice), but
// with gcov's counters written first in a --coverage build (preset asan): a forked body's, or the
// watchdog thread's exit after a hang.
[[noreturn]] void exit_now(int code);

// Waits up to `seconds` (< 0: without limit) for the child to end; true once it is reaped.
bool reap_within(pid_t pid, double seconds, int& status);

// Ends a child: SIGTERM and `term_grace_s` to exit (0: no SIGTERM), then SIGKILL (to its group
// too, with `group`) and up to `kill_wait_s` to reap it (< 0: without limit), since a process
// stuck inside the driver may not die at once. True once reaped.
bool stop_child(pid_t pid, bool group, double term_grace_s, double kill_wait_s, int& status);

// A wait status as a shell reports it: the exit code, or 128 + the signal.
int exit_code_of(int status);

struct ChildResult {
  int exit_code = -1;  // the exit status; 128 + signal when a signal ended it
  bool timed_out = false;
  bool stopped = false;    // *stop was set while it ran: it was ended early
  bool abandoned = false;  // still there kill_wait_s after SIGKILL (stuck in the kernel); not waited for
  double wall_s = 0;
};

// What a caller of run_child may add to the child's start: entries set in its environment, and a
// call once it runs (its pid), before the wait (a resumable command records the process there).
struct ChildStart {
  std::vector<std::pair<std::string, std::string>> environment;
  std::function<void(pid_t)> started;
};

// Runs `binary args...` (argv[0] = binary, no shell) to its end, stdin from /dev/null, stdout
// to `stdout_path` and stderr to `stderr_path` (the same path: both, in order), in `cwd` when
// given. With timeout_s > 0 its process group is ended after that long (SIGTERM and
// term_grace_s to finish, when term_grace_s > 0, then SIGKILL), timed_out is set, and it is
// waited for kill_wait_s more (< 0: without limit) before it is abandoned. A non-null `stop` is
// polled while it runs: once it is set (a signal handler's flag), the child is ended the same way
// and `stopped` is set. Throws InputError if the files or the fork fail.
ChildResult run_child(const std::string& binary, const std::vector<std::string>& args, const std::string& stdout_path,
                      const std::string& stderr_path, double timeout_s = 0, double kill_wait_s = -1,
                      const std::string& cwd = "", double term_grace_s = 0, const volatile int* stop = nullptr,
                      const ChildStart& start = {});

// This executable's path (/proc/self/exe), to run it again as a child.
std::string self_executable();

// `args` as one shell command line, each argument quoted where the shell would split or expand it.
std::string shell_command(const std::vector<std::string>& args);

}  // namespace sdpa
