// hang_options.h: what a run does when its watchdog finds it hung (--on-hang and its companions),
// shared by every command that runs the path under the supervisor (run, bench, and the runs
// that report and sweep start as children).
//
// By default the supervisor takes a hang snapshot of the live hung process before it kills it
// (repro/supervise/hang_snapshot.h, docs/HANG_SNAPSHOT.md): a bounded set of collectors (the
// threads' kernel stacks, cuda-gdb, nvidia-smi, the driver's kernel log lines) whose output a
// driver engineer can act on, which killing the process first would destroy.
#pragma once

#include <string>

namespace sdpa {

// The watchdog's deadline for any one stage, seconds, unless --stage-timeout says otherwise: a
// plain run's, a bench's and every sweep cell's alike, so a configuration hangs or passes the
// same way alone and in a sweep. 20 s: about 30 times the slowest stage recorded on the H100 in
// results/ (0.7 s, scenario 2's workload layer), room for a slower GPU under memory pressure (a
// slow stage must not read as a hang), and well inside the sweep's 60 s cell deadline.
constexpr double kDefaultStageTimeoutS = 20;

// A stage that took longer than this but finished under the deadline is a stall (repro/run/
// stalls.h), unless --stall-threshold says otherwise: the investigation read a stream
// synchronisation of more than a second as page migration stuck, and the slowest stage recorded
// on the H100 (0.7 s) stays under it.
constexpr double kDefaultStallThresholdS = 1.0;

enum class OnHang {
  snapshot,  // collect the snapshot (bounded by --snapshot-timeout), then kill
  kill,      // kill at once, collecting nothing
  keep,      // leave the hung process for a person, then kill it on Ctrl-C or after --keep-timeout
};
const char* on_hang_name(OnHang mode);
OnHang parse_on_hang(const std::string& text);  // throws InputError naming the accepted words

// The whole snapshot's budget, every collector included (--snapshot-timeout's default).
constexpr double kDefaultSnapshotTimeoutS = 60;

struct HangOptions {
  OnHang on_hang = OnHang::snapshot;
  double snapshot_timeout_s = kDefaultSnapshotTimeoutS;
  double keep_timeout_s = 600;     // --on-hang keep: how long the hung process is kept
  std::string snapshot_dir;        // "": chosen by default_snapshot_dir
  std::string log_file;            // "": none
  bool nvidia_bug_report = false;  // also run nvidia-bug-report.sh during the snapshot
};

// Where a snapshot goes when --snapshot-dir is not given: beside the --json file, named after
// it (out/run.json: out/run.snapshot), else ./repro-hang-<UTC time>-<pid>.
std::string default_snapshot_dir(const std::string& json_path);

}  // namespace sdpa
