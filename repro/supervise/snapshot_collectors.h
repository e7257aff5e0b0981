// snapshot_collectors.h: the collectors of a hang snapshot (hang_snapshot.h), each a child
// process bounded by the time it is given. Internal to repro/supervise.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "repro/supervise/hang_snapshot.h"

namespace sdpa {

// What every collector needs: the hung process, the folder, where tools are.
struct CollectorContext {
  pid_t pid = 0;
  std::string dir;
  std::vector<std::string> tool_dirs;  // searched in order
  int64_t run_start_us = 0;
  int64_t run_start_kernel_log_seq = -1;  // see SnapshotRequest
};

// One /dev/kmsg record ("priority,sequence,microseconds,flags;message\n" and " KEY=value" lines).
struct KernelLogRecord {
  int64_t sequence = 0;
  int64_t microseconds = 0;  // the kernel log's clock, since boot
  std::string message;       // its first line
};
std::optional<KernelLogRecord> parse_kernel_log_record(const std::string& record);
// Whether a record belongs to the run: newer than the run's last record where that is known, else
// logged no earlier than a second before the run's start (the two clocks drift apart).
bool kernel_log_record_in_run(const KernelLogRecord& r, const CollectorContext& c);
// The sequence number of the kernel log's newest record, or -1 where /dev/kmsg cannot be read
// (it needs root or kernel.dmesg_restrict = 0).
int64_t kernel_log_last_sequence();

// The tool's absolute path in the first of `dirs` that has it as an executable file, or "".
std::string find_tool(const std::string& name, const std::vector<std::string>& dirs);
// PATH's absolute entries, then /usr/local/cuda/bin and /usr/local/nvidia/bin.
std::vector<std::string> default_tool_dirs();

// A folder of the driver's files copied into one file of the snapshot.
struct DriverFiles {
  const char* name;    // the collector's name
  const char* folder;  // one entry per GPU or per parameter
  const char* suffix;  // appended to each entry's path ("/information")
  const char* file;    // in the snapshot folder
  const char* absent;  // what an empty or missing folder means
  bool one_line_each;  // "entry=value" lines, else "== path" and the file's text
};

// Each runs for at most bound_s and returns how it went (name, state, reason, seconds, files).
// The kernel log's lines since the run's start (kernel_log_record_in_run), from /dev/kmsg.
CollectorRun collect_kernel_log(const CollectorContext& c, const std::string& name, const std::string& file, double bound_s);
// Each thread's comm, State, wchan and kernel stack (threads.txt, the format parse_thread_states
// reads), the process's status and its CUDA_*/NVIDIA_* environment.
CollectorRun collect_threads(const CollectorContext& c, double bound_s);
// cuda-gdb (or gdb) attached in batch mode: resident kernels, warps, lanes, every thread's backtrace.
CollectorRun collect_debugger(const CollectorContext& c, double bound_s);
// A tool found in c.tool_dirs, run with `args`, output into `file`.
CollectorRun collect_tool(const CollectorContext& c, const std::string& name, const std::string& tool_name,
                          const std::vector<std::string>& args, const std::string& file, double bound_s);
CollectorRun collect_driver_files(const CollectorContext& c, const DriverFiles& what, double bound_s);
CollectorRun collect_nvidia_bug_report(const CollectorContext& c, double bound_s);

}  // namespace sdpa
