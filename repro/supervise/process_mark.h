// process_mark.h: which process ran a piece of resumable work (a triage's step, a sweep's cell, a
// minimization's run), written down when it starts, so that --resume can tell what ended it:
//
//   the machine stopped   the kernel's boot id is another: the machine froze or was rebooted while
//                         it ran, and the work may be what stopped it
//   interrupted           same boot, and nothing it started is left: it was killed (SIGKILL, the
//                         OOM killer, a closed terminal) and runs again
//   still there           same boot, and it or something it started is still running after its
//                         parent stopped: every child here dies with its parent (PR_SET_PDEATHSIG),
//                         so one that did not is stuck (in the driver, a hang)
//
// A mark holds the boot id, the process's pid and its start time (/proc/PID/stat's 22nd field, so
// that a pid the kernel gave to another process since is not taken for it), and a tag: one word of
// the environment variable kProcessTagsVariable of that process and of every process it starts,
// whatever its process group, so that a stuck process found on resume is known to be the work's
// however deep it is (a sweep cell's GPU child under the triage's sweep step). A mark is written
// before the child starts (the boot and the tag: a machine that stops at once still tells) and
// again once it runs (its pid and start time).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace sdpa {

// The environment variable that carries the tags of every mark a process was started under,
// separated by spaces (each level of work adds its own to what it carries).
constexpr const char* kProcessTagsVariable = "SDPA_PROCESS_TAGS";
// The test hook: the boot id this process takes for the kernel's, so that a test can make a
// machine that "booted again" between a run and its resume. Not for users.
constexpr const char* kTestBootIdVariable = "SDPA_TEST_BOOT_ID";
// How long a resume waits for what an earlier run started to exit before it calls it stuck: a
// process killed with its parent a moment ago may still be tearing down its CUDA context.
constexpr double kProcessExitGraceS = 10;

struct ProcessMark {
  std::string boot_id;
  int64_t pid = 0;           // 0: written before the child started
  uint64_t start_ticks = 0;  // its start, in clock ticks after the boot
  std::string tag;           // "" for a mark of a process itself (this_process_mark), not of what it starts

  nlohmann::json to_json() const;
  // nullopt when `j` is not a mark (null: a record written before marks were kept).
  static std::optional<ProcessMark> from_json(const nlohmann::json& j);
};

// The kernel's boot id (/proc/sys/kernel/random/boot_id), or kTestBootIdVariable's value when set;
// "" when neither can be read.
std::string current_boot_id();

// A mark for a child about to start: this boot, a tag no other mark has, no pid yet.
ProcessMark new_process_mark();
// The marked child has started as `pid`: its pid and start time are recorded.
void mark_started(ProcessMark& mark, pid_t pid);
// This process itself (no tag): a resume refuses to run beside the run it would continue.
ProcessMark this_process_mark();
// The environment entry that tags a child with `mark`: the tags this process carries and the mark's.
std::pair<std::string, std::string> process_tag_environment(const ProcessMark& mark);

enum class ProcessFate {
  machine_stopped,  // another boot
  gone,             // same boot, nothing of it left: interrupted
  still_there,      // same boot, it or something it started still runs
};

struct ProcessFinding {
  ProcessFate fate = ProcessFate::gone;
  // still_there: the processes left, each "pid N (NAME, state S)", this line's words for them.
  std::vector<std::string> processes;
  std::string processes_text() const;  // "pid 12 (repro, state D), pid 13 (sleep, state S)"
};

// What became of the process `mark` names and of everything started under its tag. A process that
// is there is given up to `grace_s` to exit (polled) before it is called still there. This process
// is never counted.
ProcessFinding find_marked_processes(const ProcessMark& mark, double grace_s = kProcessExitGraceS);

// --resume refuses to run beside the run it would continue: throws InputError ("--resume: WHAT is
// still running (pid N ...): ...") when the process `mark` (this_process_mark's JSON, or null)
// names is still there.
void refuse_if_running(const std::string& what, const nlohmann::json& mark);

}  // namespace sdpa
