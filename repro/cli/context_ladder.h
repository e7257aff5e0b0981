// context_ladder.h: the context ladder (docs/CONTEXT.md): the training process's conditions added
// to the call one at a time, in a fixed order, each rung a RunSpec of the options it adds to the
// rungs below it (given in full, cumulative). `repro report --ladder` climbs it; a sweep's
// contexts axis takes one rung each.
#pragma once

#include <string>
#include <vector>

#include "repro/cli/run_spec.h"

namespace sdpa {

// The values of the rungs (a report's --layers, --ballast*, --mapped-weights, --weights-mapping,
// --host-load and --steps replace them, and a captured process its retention).
struct ContextLadderValues {
  std::string layers = "60";  // the workload's block count ("model" with a workload; Qwen-Image's 60)
  // What the layers keep: autograd's tensors, or with activation checkpointing their inputs.
  std::string retain = "autograd";
  std::string ballast = "0.5", ballast_alloc = "device", ballast_touch = "gpu";
  // The model's weights loaded from a mapped file: Qwen-Image's text encoder's 16 GB (its
  // transformer's 41 GB are scenario 7's, at the model's full size).
  std::string mapped_weights = "16G";
  std::string weights_mapping;  // "": the harness's default (unmapped after the load)
  int64_t host_load = 4;
  // Three steps: the step's end (what the layers kept freed, then allocated again) twice; each step
  // is a pass over as many of the image workload's layers as fit (32 on an H100: about 22 s a pass
  // under scenario 2).
  int64_t steps = 3;
};

struct ContextRung {
  std::string name;  // isolated, per-call, layers, ballast, mapped-weights, host-load, steps, backward
  RunSpec adds;      // the run options of this rung, the ones below it included
};

std::vector<ContextRung> context_ladder(const ContextLadderValues& values = {});
std::vector<std::string> context_rung_names();

}  // namespace sdpa
