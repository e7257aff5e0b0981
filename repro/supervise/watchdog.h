// watchdog.h: the supervisor's view of a run: the progress protocol the GPU child speaks, the
// flight recorder, the per-stage and whole-run deadlines, and the hang report.
//
// Host-only and CUDA-free by design: the supervising process never touches CUDA, so a stuck
// driver cannot stop it from reporting (PyTorch's FlightRecorder and NCCL watchdog do the
// same: a ring of what ran, and a monitor that reports from host-only state).
//
// Protocol, child -> parent, one record per line, fields separated by tabs:
//   B <stage> <t_us> <detail>     a stage began (issued by the host)
//   E <stage> <t_us> <summary>    a stage ended (for GPU stages: finished on the GPU)
//   I <calls done> <t_us>         progress of a long --iters run
//   L <step>,<layer>,<layers> <t_us>  the call of that layer of that step begins (--layers, --steps)
//   D <device json>               the device, for the report
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "math_sdpa/stage.h"
#include "repro/cli/hang_options.h"
#include "repro/supervise/hang_snapshot.h"

namespace sdpa {

constexpr size_t kFlightRecorderSize = 64;

struct FlightRecord {
  std::string stage;
  int64_t start_us = 0;  // parent's monotonic clock, when the record arrived
  int64_t end_us = -1;   // -1 while the stage runs
  std::string detail, summary;
  int step = 0, layer = 0;  // the call it belongs to (0: the child named none)
};

struct Expiry {
  bool expired = false;
  bool whole_run = false;  // the --timeout of the whole run, not a stage deadline
  std::string stage;       // the hung stage ("" if none was running)
  double running_s = 0;    // how long that stage (or the run) had been running
};

class HangMonitor {
 public:
  HangMonitor(double stage_timeout_s, double run_timeout_s, int64_t start_us);
  // Feeds one record (without its newline). Returns false if it is malformed.
  bool consume(const std::string& line, int64_t now_us);
  // Expired once a stage has run longer than the stage deadline, or the run longer than its
  // --timeout: strictly longer (`>`), so a stage that ends exactly at its deadline is not a hang
  // and a deadline of N s allows N s. Times are whole microseconds divided by 1e6, which is the
  // double nearest a decimal deadline such as 0.3, so the boundary is exact.
  Expiry check(int64_t now_us) const;
  // The earliest stage that began and has not ended: where the path is stuck, since a GPU
  // stage ends only once the GPU finished it and later stages queue behind it.
  std::string open_stage() const;
  // The call that stage belongs to; layers == 0 when the child named none.
  CallPosition open_position() const;
  std::vector<FlightRecord> flight_recorder() const { return {records_.begin(), records_.end()}; }
  int64_t calls_done() const { return calls_done_; }
  const std::string& device_json() const { return device_json_; }
  int64_t start_us() const { return start_us_; }

 private:
  double stage_timeout_s_, run_timeout_s_;
  int64_t start_us_;
  std::deque<FlightRecord> records_;  // the last kFlightRecorderSize
  struct Open {
    std::string stage;
    int64_t begin_us;
    CallPosition position;
  };
  std::vector<Open> open_;  // oldest first
  CallPosition position_{0, 0, 0};  // of the latest L record
  int64_t calls_done_ = 0;
  std::string device_json_;
};

// Writing records from the child; tabs and newlines in free text become spaces.
std::string progress_record(char type, const std::string& a, int64_t t_us, const std::string& b);

// How a supervised run ended.
struct SupervisedOutcome {
  enum Kind { exited, hang, crashed, bad_output } kind = exited;
  int child_exit_code = 0;  // kind == exited
  int signal = 0;           // kind == crashed by a signal
  Expiry expiry;            // kind == hang
  std::string stage;        // the stage open when it ended ("" if none)
  CallPosition position{0, 0, 0};  // the call that stage belongs to (layers == 0: not named)
  std::string message;      // one line for crashed / bad_output
  std::vector<FlightRecord> records;
  std::vector<std::string> log_tail;  // the last lines the child wrote to stderr
  std::string device_json;
  int64_t calls_done = 0;
  int64_t start_us = 0;
  int64_t start_kernel_log_seq = -1;  // the kernel log's newest record then (SnapshotRequest)
  double elapsed_s = 0;
  // What the supervisor did at a hang, before the kill (hang_snapshot.h, --on-hang).
  OnHang on_hang = OnHang::kill;
  std::optional<HangSnapshot> snapshot;    // --on-hang snapshot
  double kept_s = 0;                       // --on-hang keep: how long the hung process was kept
  bool survived_kill = false;              // still there after SIGKILL and the wait: stuck in the kernel
  std::vector<std::string> kernel_stacks;  // of such a process, one line per thread
  std::string log_file;                    // --log-file
};

// "layer 3 of 60, step 1"; "" for a run of one layer and one step (or a position not named).
std::string position_text(const CallPosition& p);

// Where a run was when it stopped, read back from its --log-file, whose "record" lines are the
// child's records above, written as they came: a run on a machine that froze left it as its last
// word. The stage begun and not ended (the earliest, as HangMonitor::open_stage; "" none) and its
// call's position (of the latest call otherwise), and the calls done as last reported (I records
// come at most ten a second: a floor).
struct LoggedProgress {
  std::string open_stage;
  CallPosition position{0, 0, 0};
  int64_t calls_done = 0;
};
LoggedProgress progress_in_log(const std::string& log_text);
// "in call 5, in stage softmax", "in layer 3 of 60, step 1, between stages", "before its first call".
std::string progress_text(const LoggedProgress& p);

// The hang report's lines about the snapshot, the evidence, a kept or unkillable process and the
// log file ("" when there is nothing to say).
std::string hang_actions_text(const SupervisedOutcome& o);
// The same for the run's JSON, merged into its "watchdog" object: on_hang, snapshot (path,
// seconds, collectors, summary; null without one), evidence, kept_seconds, survived_kill,
// kernel_stacks, log_file.
nlohmann::json hang_actions_json(const SupervisedOutcome& o);

// The report written to stderr when a run hung or crashed: hung stage, how long it ran, the
// classification, the flight recorder, the tail of the stage log.
// `classification` is the line naming the candidate scenarios (scenarios/hang_classification.h);
// empty when the stage is unknown.
std::string hang_report_text(const SupervisedOutcome& o, const std::string& configuration, double stage_timeout_s,
                             const std::string& classification);

}  // namespace sdpa
