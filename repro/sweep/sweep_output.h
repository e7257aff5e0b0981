// sweep_output.h: what `repro sweep` writes: the sweep document (JSON, after nvbench's layout:
// meta, devices, then one entry per cell), the JSON-lines file of finished cells, the table in
// the manner of nccl-tests, and the SVG heatmap. results/sweep.schema.json describes the
// document and one cell (one line of the JSON-lines file).
//
// Printers only read cell records (cell_runner.h); nothing here runs or recomputes a cell.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "repro/run/outcome.h"
#include "repro/sweep/matrix.h"

namespace sdpa {

// Every outcome a cell can have, best first; planned is a cell of --dry-run.
const std::vector<Outcome>& sweep_outcomes();
// pass and waived; anything else makes the sweep fail.
bool outcome_is_success(Outcome outcome);
// The outcome of a cell record; throws InputError when its "outcome" is none.
Outcome cell_outcome(const nlohmann::json& record);

constexpr int kSweepFormatVersion = 1;

// What the document says about the sweep itself.
struct SweepMeta {
  std::vector<std::string> command_line;
  std::string started_utc;  // ISO 8601
  bool dry_run = false;
  SweepAxes axes;
  SweepShard shard;          // the slice of the matrix this sweep runs (1/1: all of it)
  size_t matrix_cells = 0;   // cells of the whole matrix (0: as many as the document plans)
  int left_out = 0;          // combinations that cannot show their hypothesis (expand_matrix)
  std::string left_out_why;  // one of them and why
  double cell_timeout_s = 0, stage_timeout_s = 0;
  std::vector<std::string> workers;  // CUDA_VISIBLE_DEVICES of each worker ("" = inherited)
  nlohmann::json host;       // host_json() of the machine that ran it; null: none (a merged document)
  nlohmann::json shards;     // a merged document's shards (sweep_merge.h); null: not merged
};

// How the sweep went, for the document's summary.
struct SweepEnd {
  size_t cells_planned = 0;  // the cells this sweep (or shard) set out to run
  bool interrupted = false;
  double wall_seconds = 0;
  nlohmann::json gpu_checks = nlohmann::json::array();  // gpu_checks_json: GPUs checked after a hang
  nlohmann::json no_gpu;     // no_gpu_json: the sweep stopped because a cell found no GPU; null: it did not
};

// The sweep document. `cells` are the records of the finished cells (or, for --dry-run, the
// planned ones) in matrix order. Each cell's device object becomes an index into the
// document's "devices".
nlohmann::json sweep_document(const SweepMeta& meta, const std::vector<nlohmann::json>& cells, const SweepEnd& end);

// The machine a sweep runs on, read without CUDA: host name, OS, kernel, CPU architecture and
// the NVIDIA kernel driver ("unknown" when none is loaded).
nlohmann::json host_json();
// "NVIDIA H100 80GB HBM3 (sm_90, CUDA 13.0), NVIDIA driver 580.95.05": the GPUs the cells
// reported (their device objects) and the host's driver; "no GPU reported" and "no NVIDIA
// driver loaded" where there is none. For the heatmap's title.
std::string machine_description(const nlohmann::json& host, const std::vector<nlohmann::json>& cells);

// The summary's account of a sweep stopped at `record`, the first cell that found no usable GPU.
nlohmann::json no_gpu_json(const nlohmann::json& record, size_t cells_not_run);
// Its footer line: "# 269 cells not run: cell 0 found no usable CUDA GPU (...)"; "" for null.
std::string no_gpu_footer(const nlohmann::json& no_gpu);

// The footer's lines about GPUs retired after a hang, and the cells that were not run for
// that: "# GPU 0 retired after cell 12: the canary after cell 12 failed: exit 4 (...)". "" when none.
std::string gpu_checks_footer(const nlohmann::json& gpu_checks, size_t cells_not_run);

// One finished cell appended as one line, flushed and fsync'd, so a sweep that is killed
// loses no finished cell. Throws InputError if the file cannot be written.
void append_jsonl_line(const std::string& path, const nlohmann::json& record);

// Why a JSON-lines record is not a finished cell's record that the outputs can use ("" when it
// is one): key, index, a finished outcome, the axes with their types, device, gpu, stage, error,
// and the numbers (or nulls) the table and the SVG show.
std::string cell_record_problem(const nlohmann::json& record);

struct JsonlContents {
  std::vector<nlohmann::json> records;
  std::vector<std::string> warnings;  // one line each
  bool dropped_last_line = false;     // a truncated or unreadable last line was left out
};
// One record per key, in the order keys first appear: the first, unless it found no GPU and a
// later one did not (the cell ran again where there is one). `repeated` counts the others left out.
std::vector<nlohmann::json> latest_records(const std::vector<nlohmann::json>& records, size_t* repeated = nullptr);

// Reads a JSON-lines file of cell records (a missing file is empty). A bad last line (not JSON,
// or not a cell record), as a killed writer leaves it, is left out with a warning; a bad line
// before it throws InputError.
JsonlContents read_jsonl(const std::string& path);
// The same for the text of one (`path` names it in messages).
JsonlContents parse_jsonl(const std::string& text, const std::string& path);

// One row per cell (axes, outcome, stage, relative error, call time), and a footer with the
// count of each outcome and OK or FAILED.
std::string sweep_table(const std::vector<nlohmann::json>& cells, size_t planned, bool interrupted);
// The footer alone: "# 180 of 180 cells: 150 passed, 30 waived, 0 mismatched, ..." and the verdict.
std::string sweep_footer(const std::vector<nlohmann::json>& cells, size_t planned, bool interrupted);

// The heatmap of one record per planned cell (finished, or "planned" for not run, with
// skip_reason saying why when the sweep stopped before it): rows scenario x fix, columns dtype x
// allocation, one panel per shape x precision x stream; repeats of a configuration share a square,
// which shows their worst outcome. `title` names the machine (machine_description), `caption`
// the cells and the start. A square's reason (a waiver's, a hang's stage and classification, an
// error, why it was not run) is numbered in it and written out below the legend.
std::string sweep_svg(const std::vector<nlohmann::json>& cells, const std::string& title, const std::string& caption);

// Text for XML character data and attribute values.
std::string xml_escape(const std::string& text);

}  // namespace sdpa
