// child_process.h: running another program (this very binary, for `repro report`) as a child,
// with its output in files.
//
// The report writer never calls CUDA itself: it runs `repro info --json` and each harness run as
// a child process (every run is supervised by that child's own watchdog), so that a GPU left
// stuck by one run cannot stop the report from being written.
#pragma once

#include <string>
#include <vector>

namespace sdpa {

struct ChildResult {
  int exit_code = -1;  // the exit status; 128 + signal when a signal ended it
  bool timed_out = false;
  double wall_s = 0;
};

// Runs `binary args...` (argv[0] = binary, no shell), stdin from /dev/null, stdout to
// `stdout_path` and stderr to `stderr_path` (the same path: both, in order). The child is
// killed if this process dies. With timeout_s > 0 its process group is killed (SIGKILL) after
// that long and timed_out is set. Throws InputError if the files or the fork fail.
ChildResult run_child(const std::string& binary, const std::vector<std::string>& args, const std::string& stdout_path,
                      const std::string& stderr_path, double timeout_s = 0);

// This executable's path (/proc/self/exe), to run it again as a child.
std::string self_executable();

// `args` as one shell command line, each argument quoted where the shell would split or expand it.
std::string shell_command(const std::vector<std::string>& args);

}  // namespace sdpa
