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
  double cell_timeout_s = 0, stage_timeout_s = 0;
  std::vector<std::string> workers;  // CUDA_VISIBLE_DEVICES of each worker ("" = inherited)
};

// The sweep document. `cells` are the records of the finished cells (or, for --dry-run, the
// planned ones) in matrix order; `planned` is the size of the matrix. Each cell's device object
// becomes an index into the document's "devices".
// `gpu_checks` (gpu_checks_json) is what was done about GPUs after a hang.
nlohmann::json sweep_document(const SweepMeta& meta, const std::vector<nlohmann::json>& cells, size_t planned,
                              bool interrupted, double wall_seconds,
                              const nlohmann::json& gpu_checks = nlohmann::json::array());

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

// The heatmap of one record per planned cell (finished or "planned" for not run): rows scenario
// x fix, columns dtype x allocation, one panel per shape x precision x stream; repeats of a
// configuration share a square, which shows their worst outcome.
std::string sweep_svg(const std::vector<nlohmann::json>& cells, const std::string& title);

// Text for XML character data and attribute values.
std::string xml_escape(const std::string& text);

}  // namespace sdpa
