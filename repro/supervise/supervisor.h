// supervisor.h: runs the GPU work in a child process and watches it.
//
// The parent never calls CUDA. The child reports stage boundaries through a pipe (watchdog.h);
// its stderr (the stage log) goes through a second pipe, forwarded line by line and kept as a
// tail for the report. On a stage deadline or the run's deadline the parent first does what
// --on-hang says (by default a hang snapshot of the live child, hang_snapshot.h, bounded by
// --snapshot-timeout; or it keeps the child for a person), then sends SIGTERM, then SIGKILL after
// a short grace, and reports the hang; a child still there after that is stuck in the kernel,
// and is reported with its kernel stacks and not waited for. A child that dies from a signal or
// writes a malformed record is reported as a crash. The child is killed if the parent dies
// (PR_SET_PDEATHSIG), so it never outlives its supervisor. With --log-file every stage-log line
// and record goes to disk as it arrives (durable_log.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "repro/cli/hang_options.h"
#include "repro/supervise/watchdog.h"

namespace sdpa {

struct SupervisorOptions {
  double stage_timeout_s = kDefaultStageTimeoutS;
  double run_timeout_s = 0;  // 0: none
  double kill_grace_s = 0.3;  // SIGTERM -> SIGKILL; the report must come within deadline + 1 s (+ the snapshot)
  size_t log_tail_lines = 24;
  // --on-hang, the snapshot's budget, --keep-timeout, --log-file. Killing at once unless asked:
  // run_supervised_command passes the run's own (whose default is a snapshot).
  HangOptions hang = [] {
    HangOptions h;
    h.on_hang = OnHang::kill;
    return h;
  }();
  std::string snapshot_dir;   // where a snapshot goes ("": hang.snapshot_dir, else default_snapshot_dir)
  std::string log_header;     // the log file's first record: what runs
  // --no-fork: the program whose `hang-snapshot` takes the snapshot ("": this executable); where
  // the collectors look for tools (empty: PATH and the CUDA folders). Set by tests.
  std::string snapshot_program;
  std::vector<std::string> tool_dirs;
};

// Forks; the child runs child_main(progress_fd) and exits with its return value.
SupervisedOutcome supervise(const std::function<int(int progress_fd)>& child_main, const SupervisorOptions& options);

// --no-fork: the same watch, from a thread of this process, over records this process writes
// to the returned fd. On expiry it does what --on-hang says to this process (the snapshot by a
// `repro hang-snapshot` process of its own), calls on_hang(outcome) and then _exit(3). Throws
// InputError if the pipe or the --log-file cannot be opened.
int start_in_process_watchdog(const SupervisorOptions& options, std::function<void(const SupervisedOutcome&)> on_hang);

}  // namespace sdpa
