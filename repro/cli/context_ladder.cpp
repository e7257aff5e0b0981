// context_ladder.cpp: the rungs of the context ladder, in order.
#include "repro/cli/context_ladder.h"

namespace sdpa {

std::vector<ContextRung> context_ladder(const ContextLadderValues& v) {
  std::vector<ContextRung> rungs;
  RunSpec adds;
  const auto rung = [&](const char* name) { rungs.push_back({name, adds}); };
  rung("isolated");
  adds.alloc_timing = "per-call";
  rung("per-call");
  adds.layers = v.layers;
  adds.retain = v.retain;
  // On the machine the ladder is for, the model's layers with what autograd keeps may not fit
  // (60 of Qwen-Image's: 137 GB, past a DGX Spark's 121 GiB): this rung and those above run as many
  // as fit beside the rest, and say how many, so that a refusal never ends the climb. Running out
  // on purpose is scenario 6's.
  adds.layers_fit = true;
  rung("layers");
  adds.ballast = v.ballast;
  adds.ballast_alloc = v.ballast_alloc;
  adds.ballast_touch = v.ballast_touch;
  rung("ballast");
  adds.mapped_weights = v.mapped_weights;
  if (!v.weights_mapping.empty()) adds.weights_mapping = v.weights_mapping;
  rung("mapped-weights");
  adds.host_load = v.host_load;
  rung("host-load");
  adds.steps = v.steps;
  rung("steps");
  // The training step: each step's forward pass followed by its backward pass.
  adds.backward = true;
  rung("backward");
  return rungs;
}

std::vector<std::string> context_rung_names() {
  std::vector<std::string> names;
  for (const ContextRung& r : context_ladder()) names.push_back(r.name);
  return names;
}

}  // namespace sdpa
