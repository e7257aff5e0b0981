// cell_runner.h: runs the cells of a sweep, each as its own `repro` process, and turns how
// each ended into its cell record (the JSON object that goes into the JSON-lines file and the
// sweep document; results/sweep.schema.json, "$defs/cell").
//
// A cell is fork + execv of the repro binary with an argument vector (never a shell), in its own
// process group, with --check and --json into a scratch file. Its own watchdog reports a hang
// with the stage (exit 3); on top of that the sweep gives each cell a deadline and kills the
// whole group after it (outcome "timeout"), so a child stuck anywhere, even before its watchdog
// starts, costs one cell and never the sweep. The sweep parent never calls CUDA: GPUs are
// counted from CUDA_VISIBLE_DEVICES or the driver's /proc entries, and each worker's children
// get CUDA_VISIBLE_DEVICES set to their GPU.
//
// A hang can leave its GPU broken for later work (later runs failing early, like unrelated
// bugs). So after a cell hangs or times out, the next cell on that GPU waits for a canary (a
// tiny run on device memory: the path's kernels and a small GEMM, checked, bounded); if the
// canary fails or hangs, and at once if a cell's hung process did not die after SIGKILL (stuck
// in the driver), the GPU is retired: no further cell runs on it, and once every GPU is retired
// the cells left are not run. Every cell run on a GPU after a hang says so ("after_hang"). A cell
// that finds no usable GPU at all stops the sweep (CellsRun::no_gpu_cell).
//
// While a cell runs, its process is recorded in the cells folder (cell-N.process, process_mark.h:
// the boot, its pid and start time, the tag everything it starts carries), written before it
// starts and again once it runs, removed once its record is written. A sweep stopped without a
// word (SIGKILL, a frozen machine) leaves the file, and --resume reads it (cell_in_flight): the
// machine stopped (another boot), the cell was interrupted (gone on this boot: it runs again), or
// its process is still there, stuck (a hang: recorded so, its GPU not used again).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "repro/cli/hang_options.h"
#include "repro/supervise/process_mark.h"
#include "repro/sweep/matrix.h"

namespace sdpa {

// What the sweep did about a GPU after a hang: the canary it ran, whether it retired the GPU.
struct GpuCheck {
  std::string gpu;         // the worker's CUDA_VISIBLE_DEVICES ("" = inherited)
  int after_cell = 0;      // the cell that hung (or whose process did not die)
  std::string canary;      // "pass", "failed: ...", or "" when none ran
  bool retired = false;
  std::string reason;      // why it was retired
};
nlohmann::json gpu_checks_json(const std::vector<GpuCheck>& checks);

struct SweepRunSettings {
  std::string repro_binary;
  std::vector<std::string> workers{""};  // CUDA_VISIBLE_DEVICES of each worker; "" = inherited
  double cell_timeout_s = 60;
  double stage_timeout_s = kDefaultStageTimeoutS;  // the child watchdog's --stage-timeout
  std::string scratch_prefix;      // a cell's child writes its JSON to <prefix><index>.json
  OnHang on_hang = OnHang::snapshot;  // what a cell's watchdog does at a hang: snapshot or kill
  // A cell's snapshot budget: once its snapshot folder appears, its deadline grows by this.
  double snapshot_timeout_s = kDefaultSnapshotTimeoutS;
  // Each cell's --log-file (cell_log_name, removed when it passes or is waived, unless it was
  // there before the run: an earlier run of the cell that never finished) and hang snapshot
  // (cell-N.snapshot) go here; "": neither. `cells_link` is the same folder as the sweep
  // document links it (relative to the document's folder).
  std::string cells_dir, cells_link;
  // What the sweep knows of its GPUs before the first cell: a resumed sweep's GPU that a stuck
  // cell holds is retired here, and no cell runs on it.
  std::vector<GpuCheck> gpu_checks;
};

// The cells folder of the sweep writing `jsonl_path` (FILE.jsonl -> FILE.cells), and the file name
// of cell `index`'s --log-file in it: cell-N.log.
std::string sweep_cells_dir(const std::string& jsonl_path);
std::string cell_log_name(int index);
// The file in the cells folder that records cell `index`'s process while it runs: cell-N.process.
std::string cell_process_name(int index);

// The environment variable that marks the sweep's canary run (a fake child tells it apart by it).
constexpr const char* kCanaryEnvironment = "SDPA_SWEEP_CANARY";


// A cell's options as run (the runner adds where its files go): `repro` followed by their
// to_argv() is the cell's command line.
RunSpec cell_command_spec(const SweepCell& cell, double stage_timeout_s);

// The record of a cell that has not run (--dry-run): axes, command line, results null.
nlohmann::json planned_cell_json(const SweepCell& cell, double stage_timeout_s);

// How a cell's process ended, as the sweep saw it.
struct ChildEnd {
  enum Kind { exited, signalled, timed_out } kind = exited;
  int status = 0;  // the exit code, or the signal
  double wall_s = 0;
  double deadline_s = 0;
  double snapshot_s = 0;  // granted on top of the deadline for the cell's hang snapshot
  std::vector<std::string> stderr_tail;  // the last lines the child wrote to stderr
  std::string snapshot_link;  // the cell's snapshot folder as the document links it ("": the run's own path)
  std::string log_file;       // its --log-file as the document links it ("": none)
  std::optional<int> after_hang;  // the cell that hung on this GPU before this one ran
};

// The record of a finished cell, from how its process ended and the text of its --json file
// (nullopt when it wrote none). `gpu` is the worker's CUDA_VISIBLE_DEVICES ("" = inherited).
nlohmann::json finished_cell_json(const SweepCell& cell, double stage_timeout_s, const std::string& gpu,
                                  const ChildEnd& end, const std::optional<std::string>& child_json);

// A cell an earlier run of the sweep left running (its cell-N.process file), as a resume finds it.
struct CellInFlight {
  std::string gpu;       // the worker's CUDA_VISIBLE_DEVICES it ran on
  ProcessFinding found;  // the machine stopped, it is gone (interrupted), or it is still there
};

// On --resume: what became of cell `cell` of an earlier run of the sweep whose cells folder is
// `cells_dir`, if that run left it running; nullopt when it left no process file. The file is
// removed: its cell runs again, or (still there) is recorded by stuck_cell_json.
std::optional<CellInFlight> cell_in_flight(const SweepCell& cell, const std::string& cells_dir);

// The record of a cell whose process a resumed sweep found still there after the sweep that ran it
// stopped: a hang (every cell dies with its sweep, so one that did not is stuck, in the driver), in
// the stage its log names; its log is kept. The process is left as it is.
nlohmann::json stuck_cell_json(const SweepCell& cell, double stage_timeout_s, const CellInFlight& left,
                               const std::string& cells_dir, const std::string& cells_link);

// How run_cells ended.
struct CellsRun {
  int stop_signal = 0;            // SIGINT or SIGTERM stopped it; 0: none did
  std::vector<GpuCheck> gpu_checks;
  // The first cell that found no usable GPU (outcome no_gpu). That is the machine's answer (no
  // driver, no device CUDA can use), not the cell's, and every later cell would give it too:
  // no cell starts after it (the ones already running finish).
  std::optional<int> no_gpu_cell;
};

// Runs the cells in order, at most one per worker at a time, and calls on_done with each
// finished cell's record as it finishes. SIGINT or SIGTERM stops it: no new cell starts, the
// running ones are killed and not reported. It also ends when every GPU was retired or a cell
// found no GPU; otherwise when every cell ran.
CellsRun run_cells(const std::vector<SweepCell>& cells, const SweepRunSettings& settings,
                   const std::function<void(const nlohmann::json&)>& on_done);

// The canary: one small checked call of the path on device memory.
RunSpec canary_spec();

// One worker per visible GPU, without initialising CUDA: --gpus N (gpus_option > 0), else the
// entries of CUDA_VISIBLE_DEVICES, else the GPUs the NVIDIA driver lists in /proc. Returns the
// CUDA_VISIBLE_DEVICES value of each worker ({""}: one worker, environment left as it is).
// With cells_per_gpu > 1 each GPU has that many workers, GPU by GPU ({"0", "0", "1", "1"}).
std::vector<std::string> sweep_workers(int gpus_option, int cells_per_gpu = 1);

}  // namespace sdpa
