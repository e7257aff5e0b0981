// supervisor.h: runs the GPU work in a child process and watches it.
//
// The parent never calls CUDA. The child reports stage boundaries through a pipe (watchdog.h);
// its stderr (the stage log) goes through a second pipe, forwarded line by line and kept as a
// tail for the report. On a stage deadline or the run's deadline the parent sends SIGTERM,
// then SIGKILL after a short grace, and reports the hang; a child that dies from a signal or
// writes a malformed record is reported as a crash. The child is killed if the parent dies
// (PR_SET_PDEATHSIG), so it never outlives its supervisor.
#pragma once

#include <functional>

#include "repro/supervise/watchdog.h"

namespace sdpa {

struct SupervisorOptions {
  double stage_timeout_s = 20;
  double run_timeout_s = 0;  // 0: none
  double kill_grace_s = 0.3;  // SIGTERM -> SIGKILL; the report must come within deadline + 1 s
  size_t log_tail_lines = 24;
};

// Forks; the child runs child_main(progress_fd) and exits with its return value.
SupervisedOutcome supervise(const std::function<int(int progress_fd)>& child_main, const SupervisorOptions& options);

// --no-fork: the same watch, from a thread of this process, over records this process writes
// to the returned fd. On expiry it calls on_hang(outcome) and then _exit(3).
int start_in_process_watchdog(const SupervisorOptions& options, std::function<void(const SupervisedOutcome&)> on_hang);

}  // namespace sdpa
