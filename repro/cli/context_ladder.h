// context_ladder.h: the context ladder (docs/CONTEXT.md): the training process's conditions added
// to the call one at a time, in a fixed order, each rung a RunSpec of the options it adds to the
// rungs below it (given in full, cumulative). `repro report --ladder` climbs it; a sweep's
// contexts axis takes one rung each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "repro/cli/run_spec.h"

namespace sdpa {

// The values of the rungs: each the caller's (a report's --layers, --ballast*, --mapped-weights,
// --host-load and --steps), or where unset the ladder's own (context_ladder.cpp). A rung adds
// the training process's conditions to the scenario's; it never takes away what the scenario's
// record sets itself: where the record sets what a value of the ladder's own would change
// (scenario 7's 57 GB of weights, against the mapped-weights rung's 16 GB), the rung leaves it out
// and the record's stands. A value the caller gives always goes in.
struct ContextLadderValues {
  int scenario = 0;  // the scenario climbed
  std::optional<std::string> layers;  // the ladder's own: 60, Qwen-Image's block count ("model" with a workload)
  std::optional<std::string> ballast, ballast_alloc, ballast_touch;
  std::optional<std::string> retain;  // what the layers keep (the ladder's own: autograd; a captured process's own)
  std::optional<std::string> mapped_weights;
  std::optional<std::string> weights_mapping;  // unset: the harness's default (unmapped after the load)
  std::optional<int64_t> host_load;
  std::optional<int64_t> steps;
};

struct ContextRung {
  std::string name;  // isolated, per-call, layers, ballast, mapped-weights, host-load, steps, backward
  RunSpec adds;      // the run options of this rung, the ones below it included
};

std::vector<ContextRung> context_ladder(const ContextLadderValues& values = {});
std::vector<std::string> context_rung_names();

}  // namespace sdpa
