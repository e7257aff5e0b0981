// sweep_options.h: the command line of `repro sweep`, parsed into a SweepOptions value.
//
// Host-only and separate from running, like run_options.h, so every option and every bad input is
// tested without a GPU (tests/test_sweep.cpp).
#pragma once

#include <string>
#include <vector>

#include "repro/cli/hang_options.h"
#include "repro/sweep/matrix.h"

namespace sdpa {

struct SweepOptions {
  SweepAxes axes;                // from the axis options or --matrix
  std::string json_path;         // the sweep document; the JSON-lines file and the SVG go beside it
  std::string jsonl_path, svg_path;
  std::string out_option = "--out";  // the option that named the outputs' folder (--out or --json)
  // An axis, --matrix or cell options were given: with --resume, a matrix to hold against the
  // sweep's own (without, the resumed sweep keeps its own matrix).
  bool axes_given = false;
  SweepShard shard;              // --shard K/N: run only that slice of the matrix
  bool force = false;            // start again over an existing sweep; with resume: under another matrix
  bool resume = false;           // continue one: skip the cells its JSON-lines file has
  bool dry_run = false;
  double cell_timeout_s = 60;    // the sweep's deadline per cell
  double stage_timeout_s = kDefaultStageTimeoutS;  // the child watchdog's per-stage deadline
  int gpus = 0;                  // 0: count them
  int cells_per_gpu = 1;         // cells running at once on one GPU
  OnHang on_hang = OnHang::snapshot;  // each cell's --on-hang: snapshot or kill
  double snapshot_timeout_s = kDefaultSnapshotTimeoutS;     // each cell's --snapshot-timeout
  std::string repro_binary;      // hidden: the program each cell runs (tests pass a fake child)
  std::vector<std::string> argv;  // the command line as given

  // `sweep` and its options, every axis written out: `repro` followed by them is the command
  // (triage builds a sweep this way). The JSON-lines and SVG files follow from json_path.
  std::vector<std::string> to_argv() const;
};

// Everything `repro sweep` checks before its first cell runs (its options, every cell's run
// options): throws InputError with the sweep's line. Runs nothing.
void validate_sweep(const SweepOptions& options);

struct SweepParseResult {
  bool run = false;
  int exit_code = 0;
  std::string message;  // the help text, or one error line
  SweepOptions options;
};

// argv[0] is "sweep". Bad options and bad axis values give exit 2 and one line
// "repro sweep: error: ...".
SweepParseResult parse_sweep_command_line(int argc, const char* const* argv);

// `repro sweep merge`: the outputs of the shards of one matrix, merged into one sweep.
struct MergeOptions {
  std::vector<std::string> sources;  // each a shard's folder (holding sweep.json) or its FILE.json
  std::string json_path, jsonl_path, svg_path;  // the merged sweep, as `repro sweep` names them
  std::string out_option = "--out";  // the option that named its folder (--out or --json)
  bool force = false;                // replace a merged sweep already there
  std::vector<std::string> argv;     // the command line as given, from "merge"
};

struct MergeParseResult {
  bool run = false;
  int exit_code = 0;
  std::string message;  // the help text, or one error line
  MergeOptions options;
};

// argv[0] is "merge". Errors: exit 2, one line "repro sweep merge: error: ...".
MergeParseResult parse_merge_command_line(int argc, const char* const* argv);

}  // namespace sdpa
