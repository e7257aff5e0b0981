// matrix.h: the axes of `repro sweep` and the cells they expand to.
//
// A cell is one `repro` run: one value of every axis (scenario, fix, dtype, precision, shape,
// allocation, stream), the iteration count and a repeat number. Axes come from the command line
// or a matrix file (JSON, same names); every value is checked here, before anything runs, by
// the same parser a plain `repro` run uses, so a cell that expands is a cell the child accepts.
// A cell's key names all its values; --resume matches finished cells by key, so a resumed
// sweep never runs a finished cell again even if the matrix was reordered. A shard (--shard K/N)
// is one of N disjoint slices of the cells, chosen so that each machine of a scheduler's job
// array gets about the same expected work (docs/SWEEPS.md).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "repro/cli/run_spec.h"
#include "scenarios/scenario.h"

namespace sdpa {

struct SweepAxes {
  std::vector<int> scenarios = default_sweep_scenarios();
  // off, on (the scenario's own fix; scenario 0 has none, so "on" applies all four there),
  // all, or fix numbers joined by '+' ("1+3"): the comma separates axis values.
  std::vector<std::string> fixes{"off", "on"};
  std::vector<std::string> dtypes{"bf16", "fp16", "fp32"};
  std::vector<std::string> precisions{"upcast"};
  // BxHxLxSxE, or a workload by name (scenarios/workload.h): the original standalone test's shape
  // (rows of 128 keys: the warp softmax), a longer query over rows of 1536 keys and rows of 2048,
  // both long enough for the block softmax scenario 2 is about. (A workload layer such as
  // qwen-image-512 costs a second or more a cell in the float64 reference alone: name it with
  // --shapes.)
  std::vector<std::string> shapes{"2x8x128x128x64", "2x8x512x1536x64", "1x8x256x2048x64"};
  std::vector<std::string> allocs{"managed", "device", "async"};
  // "default": no --stream, so each scenario runs on its own default, PyTorch's (the legacy default
  // stream; a side stream for scenario 5's capture, as torch.cuda.graph); or a --stream value.
  std::vector<std::string> streams{"default"};
  // Rungs of the context ladder (math_sdpa/context.h): the call alone, or with the training
  // process's conditions up to that rung (the steps rung counts --iters as steps).
  std::vector<std::string> contexts{"isolated"};
  // Whether combinations that a waiver rules out (scenarios 1-5 on memory that cannot migrate)
  // are cells that end waived, or are left out of the matrix (the default: every cell runs).
  bool keep_waived = false;
  int iters = 5;    // calls of the path per run (timings are medians over them)
  int repeats = 1;  // runs of each configuration (a hang may not come every time)
  // Run options every cell gets (`repro sweep ... -- OPTIONS`): a captured call (--workload-file
  // F --call N --call-only), for which the shapes and dtypes axes default to "given" (no shape or
  // dtype option: the call's own), or a fault to test the sweep itself (--inject).
  std::vector<std::string> cell_options;
};

// The shapes and dtypes axes' value for "what the cell options (or the defaults) say".
constexpr const char* kGivenAxisValue = "given";

struct SweepCell {
  int index = 0;  // position in the expanded matrix
  int scenario = 0;
  std::string fix, dtype, precision, shape, alloc, stream;
  std::string context = "isolated";
  int iters = 1;
  int repeat = 0;
  std::string fix_list;  // the fixes the run applies: "none", "1,3", "all"
  RunSpec options;       // SweepAxes::cell_options, parsed

  std::string key() const;
  // The run options of this cell: its axes' values and the cell options (without --json, which
  // the runner adds); InputError when a cell option is also an axis's.
  RunSpec run_spec() const;
  std::vector<std::string> run_args() const;  // run_spec().to_argv()
};

// Splits "a,b,c" into its items; throws InputError naming `option` on an empty item.
std::vector<std::string> split_axis_list(const std::string& text, const std::string& option);

// Checks every value and writes it in its canonical form ("none" -> "off", "3+1" -> "1+3").
// Throws InputError (one line, naming the option) on an empty axis, a bad or repeated value.
void canonicalise_axes(SweepAxes& axes);

// The most cells one sweep may have: at a second or more a cell, a day's work.
constexpr int kMaxSweepCells = 100000;

// Every combination, in axis order (scenario slowest, repeat fastest). Canonicalises first and
// checks each cell's run options as `repro` would. A combination whose run could not show its
// scenario's hypothesis (scenario_caveats: scenario 2 on rows the warp softmax reduces), or that a
// waiver rules out (unless keep_waived), is not a cell: it is counted in *left_out and named in
// *left_out_why (one example); a matrix left with no cell at all is an InputError saying why.
std::vector<SweepCell> expand_matrix(SweepAxes axes, int* left_out = nullptr, std::string* left_out_why = nullptr);

// A matrix file: a JSON object with any of the keys scenarios (integers), fix, dtypes,
// precisions, shapes, allocs, streams, contexts (lists of strings), iters, repeats (integers >= 1); a key
// left out keeps its default. Unknown keys, wrong types and empty lists throw InputError.
SweepAxes read_matrix_file(const std::string& path);
// The same for the text of one (`path` names it in messages).
SweepAxes parse_matrix(const std::string& text, const std::string& path);

// One of `count` disjoint slices of a matrix, numbered from 1 as `--shard K/N` writes it (a Slurm
// array of 1-N passes $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT). 1/1 is the whole matrix.
struct SweepShard {
  int index = 1;
  int count = 1;
  bool whole() const { return count == 1; }
  std::string str() const;  // "2/4"
  bool operator==(const SweepShard& other) const { return index == other.index && count == other.count; }
};
constexpr int kMaxSweepShards = 10000;
// "K/N" with 1 <= K <= N <= kMaxSweepShards; throws InputError naming --shard.
SweepShard parse_shard(const std::string& text);

// A cell's expected cost, in floating-point operations of its float64 reference (4 L S E per
// batch entry and head: the part of a cell that grows with its shape; about 1e10 a second, from
// the 3 s of qwen-image-512's) plus a fixed 5e9 for starting the process and CUDA (the H200's
// default sweep took 0.57 s a cell, most of them small). Integers, so that every machine of a
// sharded sweep computes the same slices.
int64_t expected_cell_cost(const SweepCell& cell);
// The same for one checked run of a problem, and the cost model's seconds (about 1e10 a second).
int64_t expected_run_cost(const SdpaProblem& p);
constexpr double kCellCostPerSecond = 1e10;

// The cells of one shard, in matrix order (indices kept). Cells are dealt by longest expected
// cost first, each to the shard with the least expected work so far (the lowest-numbered on a
// tie), cells of equal cost in the order of a hash of their key (FNV-1a), so that no axis lines
// up with the shards. Deterministic: the same matrix gives the same slices on every machine.
std::vector<SweepCell> shard_cells(const std::vector<SweepCell>& cells, SweepShard shard);

nlohmann::json axes_to_json(const SweepAxes& axes);
nlohmann::json cell_axes_to_json(const SweepCell& cell);
nlohmann::json shard_to_json(SweepShard shard);  // {"index": K, "count": N}
// The shard of a sweep document's matrix; a document without one (written before shards
// existed) is the whole matrix. Throws InputError when it is not a shard.
SweepShard shard_from_json(const nlohmann::json& matrix);
// The axes of a sweep document's matrix (axes_to_json), checked and canonicalised like a
// matrix file; throws InputError naming `path`.
SweepAxes axes_from_document_matrix(const nlohmann::json& matrix, const std::string& path);
// Where two matrices (axes and shard) differ, for one error line: "dtypes bf16 here, bf16,fp16
// there" (with the names given); "" when they are the same.
std::string matrix_difference(const SweepAxes& a, SweepShard a_shard, const SweepAxes& b, SweepShard b_shard,
                              const std::string& a_name = "here", const std::string& b_name = "there");

}  // namespace sdpa
