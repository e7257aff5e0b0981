// hang_snapshot.h: evidence taken from a hung GPU process while the hang is live, before anything
// is killed (docs/HANG_SNAPSHOT.md).
//
// Killing a hung process destroys what a driver engineer can act on: which kernel is resident on
// which SMs, where each host thread is blocked (inside which CUDA call), what the threads' kernel
// stacks say (a fault-servicing deadlock in nvidia-uvm shows there, not in user space), what the
// driver logged, whether nvidia-smi still answers. So on a deadline the supervisor runs a fixed
// list of collectors against the live process, each bounded by its own timeout and all of them
// by the snapshot's budget, writes their raw outputs into one folder, and parses a summary out
// of them into snapshot.json.
//
// Every collector is a child process (child_process.h): a tool run by absolute path with an
// argument vector (never a shell), or a forked reader of /proc and /sys files, since reading
// the files of a process or driver that is stuck can block the reader. A collector that cannot
// run says why (the tool is missing, ptrace is not permitted, a file needs root) and the
// snapshot goes on. Host-only: nothing here links CUDA.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/hang_classification.h"

namespace sdpa {

// How one collector ended.
enum class CollectorState {
  ok,         // it ran and wrote its output
  timed_out,  // it did not end within its bound (for nvidia-smi that is itself a finding)
  failed,     // it ran and failed (a non-zero exit, an unreadable file)
  skipped,    // it could not run here: the tool is missing, not permitted, no budget left
};
const char* collector_state_name(CollectorState state);
CollectorState parse_collector_state(const std::string& text);  // throws InputError

struct CollectorRun {
  std::string name;  // "threads", "debugger", "nvidia_smi", ...
  CollectorState state = CollectorState::skipped;
  std::string reason;  // why it was not ok; for ok, a note on what it could not read ("" when none)
  double seconds = 0;
  std::vector<std::string> command;  // the tool's argv as run (absolute path first); empty for a reader
  std::vector<std::string> files;    // what it wrote, relative to the snapshot folder
};

// What the host threads are doing, judged from the threads' states and the main thread's
// backtrace: inside the kernel (state D), inside a CUDA call, spinning, or asleep elsewhere.
enum class HostVerdict { blocked_in_kernel, waiting_in_cuda_call, spinning_in_user_space, sleeping, unknown };
const char* host_verdict_name(HostVerdict verdict);
HostVerdict parse_host_verdict(const std::string& text);  // throws InputError

// A kernel resident on the GPU, from cuda-gdb's `info cuda kernels|warps|lanes`.
struct ResidentKernel {
  std::string name;      // short: "spin_kernel"
  std::string function;  // as cuda-gdb names it: "sdpa::(anonymous namespace)::spin_kernel(int const volatile*, ...)"
  std::string status;    // "Active"
  std::string grid, block;  // "(1,1,1)"
  std::vector<int> sms;  // the SMs it occupies (from its SM mask)
  struct Warp {          // one warp of it: where the device side is
    int sm = -1, warp = -1;
    std::string pc, block, lane_state, exception;  // lane_state: "active"; exception: "None"
  };
  std::optional<Warp> warp;
};

// One host thread, from /proc (state, wchan, kernel stack) and the debugger (backtrace).
struct HostThread {
  int tid = 0;
  std::string comm;
  char state = '?';                      // R, S, D, T, t, Z
  std::string wchan;                     // "0" or "" when running
  std::vector<std::string> kernel_stack;  // innermost first, offsets dropped: "uvm_va_block_make_resident"
  std::vector<std::string> backtrace;     // functions, innermost first: "cuStreamSynchronize"
  std::string cuda_call;    // the innermost CUDA API function in the backtrace ("" when none)
  std::string called_as;    // the outermost CUDA API function: the call the harness made
  std::string caller;       // the harness's function that made it
};

struct SnapshotSummary {
  HostVerdict verdict = HostVerdict::unknown;
  std::string verdict_detail;  // "thread 1234 in D state in uvm_va_block_make_resident"
  std::optional<HostThread> main_thread;
  std::vector<HostThread> blocked_threads;  // state D
  int thread_count = 0;
  std::vector<ResidentKernel> kernels;
  bool debugger_saw_no_kernel = false;  // the debugger attached and listed no resident kernel
  std::vector<std::string> driver_lines;         // NVRM / Xid / nvidia-uvm lines since the run started
  std::vector<std::string> driver_lines_during;  // of those, the ones logged while the snapshot ran
  std::string nvidia_smi;  // "answered", "did not answer within 8 s", "failed: ...", "skipped: ..."
};

struct HangSnapshot {
  std::string dir;  // the snapshot folder
  pid_t pid = 0;    // the hung process
  std::string hang;  // the watchdog's finding: "stage softmax did not finish within 20.0 s"
  double seconds = 0, budget_s = 0;
  std::string started_utc;
  std::vector<CollectorRun> collectors;
  SnapshotSummary summary;
};

// What to snapshot and how.
struct SnapshotRequest {
  pid_t pid = 0;
  std::string dir;  // created; files already there are replaced
  double budget_s = 60;
  int64_t run_start_us = 0;  // monotonic; the kernel log is read from about then on
  // The kernel log's newest record when the run started (kernel_log_last_sequence): the log is
  // read from the next one on, exactly. -1 (unknown): from about run_start_us on.
  int64_t run_start_kernel_log_seq = -1;
  bool nvidia_bug_report = false;
  std::string hang_line;  // the watchdog's finding, for snapshot.json
  // Where tools are looked for; empty: PATH, then /usr/local/cuda/bin and /usr/local/nvidia/bin.
  std::vector<std::string> tool_dirs;
  std::function<void(const CollectorRun&)> on_collector;  // called as each collector ends
};

// Runs the collectors in order (cheap and non-intrusive first, the debugger once the threads'
// states are on disk, the kernel log again at the end), each within its bound and the budget,
// then parses the summary and writes snapshot.json. Never throws: a folder that cannot be
// created leaves every collector skipped with that reason.
HangSnapshot take_hang_snapshot(const SnapshotRequest& request);

// `dir`, or, when that exists and is not empty, the first of dir-2, dir-3, ... that does not:
// a snapshot never mixes its files with an earlier one's.
std::string fresh_snapshot_dir(const std::string& dir);

// "debugger ok (3.21 s)", "nvidia_smi timed_out (8.00 s): did not answer within 8.0 s".
std::string collector_line(const CollectorRun& run);

// The summary of the raw outputs in `dir` about process `pid` (the parsers, snapshot_summary.cpp).
SnapshotSummary summarize_snapshot(const std::string& dir, pid_t pid, const std::vector<CollectorRun>& collectors);

// The parsers, one per raw output, exposed for the tests against captured outputs.
std::vector<ResidentKernel> parse_debugger_kernels(const std::string& text);
std::vector<HostThread> parse_debugger_threads(const std::string& text);  // tid, comm, backtrace, CUDA frames
std::vector<HostThread> parse_thread_states(const std::string& text);    // threads.txt (tid, comm, state, stacks)
std::vector<std::string> parse_driver_lines(const std::string& kernel_log);
// The SM numbers set in cuda-gdb's SM mask ("0x0010000000000000000000000000000000": 124).
std::vector<int> sms_of_mask(const std::string& mask);
// Threads from /proc merged with the debugger's, and the verdict on the main thread `pid`.
void judge_host_threads(pid_t pid, const std::vector<HostThread>& states, const std::vector<HostThread>& backtraces,
                        SnapshotSummary& summary);

// One line each, the evidence a classification can use: "kernel spin_kernel resident on SM 124",
// "main thread (tid 1148) in cuStreamSynchronize (called as cudaStreamSynchronize), state R",
// "thread 1234 (repro) in D state in uvm_va_block_make_resident", "kernel log: NVRM: ...".
std::vector<std::string> snapshot_evidence(const SnapshotSummary& summary);
// What the classification of the hang uses of a snapshot (scenarios/hang_classification.h).
HangEvidence hang_evidence(const SnapshotSummary& summary);

nlohmann::json snapshot_to_json(const HangSnapshot& snapshot);
nlohmann::json summary_to_json(const SnapshotSummary& summary);
// Reads what snapshot_to_json wrote; throws nlohmann::json::exception or InputError when it does not read.
HangSnapshot snapshot_from_json(const nlohmann::json& j);
SnapshotSummary summary_from_json(const nlohmann::json& j);

// The kernel stacks of a process's threads, read by a bounded child ("tid 1234 (repro) D: a < b < c"),
// for a child that did not die after SIGKILL. Empty when nothing could be read in `bound_s`.
std::vector<std::string> kernel_stacks_of(pid_t pid, double bound_s);

// `repro hang-snapshot --pid N --dir D ...`: a snapshot taken by a fresh process of its own, as
// the in-process watchdog (--no-fork) needs: the process being snapshotted is its own, and a
// debugger attached to it stops every thread, the watchdog's too. Hidden; exit 0 once
// snapshot.json is written.
int hang_snapshot_main(int argc, char** argv);

}  // namespace sdpa
