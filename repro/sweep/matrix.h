// matrix.h: the axes of `repro sweep` and the cells they expand to.
//
// A cell is one `repro` run: one value of every axis (scenario, fix, dtype, precision, shape,
// allocation, stream), the iteration count and a repeat number. Axes come from the command line
// or a matrix file (JSON, same names); every value is checked here, before anything runs, by
// the same parser a plain `repro` run uses, so a cell that expands is a cell the child accepts.
// A cell's key names all its values; --resume matches finished cells by key, so a resumed
// sweep never runs a finished cell again even if the matrix was reordered.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sdpa {

struct SweepAxes {
  std::vector<int> scenarios{0, 1, 2, 3, 4, 5};
  // off, on (the scenario's own fix; scenario 0 has none, so "on" applies all four there),
  // all, or fix numbers joined by '+' ("1+3"): the comma separates axis values.
  std::vector<std::string> fixes{"off", "on"};
  std::vector<std::string> dtypes{"bf16", "fp16", "fp32"};
  std::vector<std::string> precisions{"upcast"};
  // BxHxLxSxE, or a workload by name (scenarios/workload.h): the original standalone test's shape,
  // its longer sequence, and rows of 2048 keys, long enough for the block softmax, so that every
  // scenario meets both softmax variants. (A workload layer such as qwen-image-512 costs a second
  // or more a cell in the float64 reference alone: name it with --shapes.)
  std::vector<std::string> shapes{"2x8x128x128x64", "2x8x512x512x64", "1x8x256x2048x64"};
  std::vector<std::string> allocs{"managed", "device", "async"};
  std::vector<std::string> streams{"non-blocking"};
  int iters = 5;    // calls of the path per run (timings are medians over them)
  int repeats = 1;  // runs of each configuration (a hang may not come every time)
};

struct SweepCell {
  int index = 0;  // position in the expanded matrix
  int scenario = 0;
  std::string fix, dtype, precision, shape, alloc, stream;
  int iters = 1;
  int repeat = 0;
  std::string fix_list;  // the fixes the run applies: "none", "1,3", "all"

  std::string key() const;
  // The run options of this cell as `repro` takes them (without the program name and --json).
  std::vector<std::string> run_args() const;
};

// Splits "a,b,c" into its items; throws InputError naming `option` on an empty item.
std::vector<std::string> split_axis_list(const std::string& text, const std::string& option);

// Checks every value and writes it in its canonical form ("none" -> "off", "3+1" -> "1+3").
// Throws InputError (one line, naming the option) on an empty axis, a bad or repeated value.
void canonicalise_axes(SweepAxes& axes);

// The most cells one sweep may have: at a second or more a cell, a day's work.
constexpr int kMaxSweepCells = 100000;

// Every combination, in axis order (scenario slowest, repeat fastest). Canonicalises first and
// checks each cell's run options as `repro` would.
std::vector<SweepCell> expand_matrix(SweepAxes axes);

// A matrix file: a JSON object with any of the keys scenarios (integers), fix, dtypes,
// precisions, shapes, allocs, streams (lists of strings), iters, repeats (integers >= 1); a key
// left out keeps its default. Unknown keys, wrong types and empty lists throw InputError.
SweepAxes read_matrix_file(const std::string& path);
// The same for the text of one (`path` names it in messages).
SweepAxes parse_matrix(const std::string& text, const std::string& path);

nlohmann::json axes_to_json(const SweepAxes& axes);
nlohmann::json cell_axes_to_json(const SweepCell& cell);

}  // namespace sdpa
