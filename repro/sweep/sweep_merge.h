// sweep_merge.h: `repro sweep merge`, the shards of one matrix back into one sweep.
//
// A matrix too big for one machine runs as N shards (`repro sweep --shard K/N`, matrix.h deals
// the cells), each on its own machine, often as one job array of a scheduler (docs/SWEEPS.md).
// Each shard writes the usual sweep.json and sweep.jsonl; the merge reads them, checks that they
// are slices of one matrix, run by one harness version, that no two hold the same cell and that
// every cell is in the slice its shard was dealt, and builds the one document, JSON-lines file
// and heatmap an unsharded sweep of that matrix would have written. A shard left out, or stopped
// early, leaves its cells not run; `repro sweep --resume` on the merged output runs them.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sdpa {

struct MergedSweep {
  nlohmann::json document;               // the merged sweep document (sweep_output.h)
  std::vector<nlohmann::json> records;   // its finished cells as JSON lines (device objects), matrix order
  std::vector<nlohmann::json> squares;   // a record per cell of the matrix, for the heatmap
  std::string title, caption;            // the heatmap's
  std::string footer;                    // the table's footer lines beyond the outcomes
  std::vector<std::string> warnings;     // one line each
};

// Each source is a shard's output folder (holding sweep.json) or a sweep document FILE.json
// (with FILE.jsonl beside it); `out_folder` is where the merged document goes (the links to
// the shards' cell logs and hang snapshots are made relative to it). Throws InputError (one
// line) when a source is not a sweep document, when shards overlap, or when they come from
// different matrices or harness versions.
MergedSweep merge_shards(const std::vector<std::string>& sources, const std::string& out_folder,
                         const std::vector<std::string>& command_line);

}  // namespace sdpa
