// context_ladder.cpp: the rungs of the context ladder, in order.
#include "repro/cli/context_ladder.h"

#include "scenarios/scenario.h"

namespace sdpa {

namespace {

// The ladder's own values.
const char* const kLayers = "60";  // Qwen-Image's block count
const char* const kBallast = "0.5";
const char* const kBallastAlloc = "device";
const char* const kBallastTouch = "gpu";
// The model's weights loaded from a mapped file: Qwen-Image's text encoder's 16 GB (its
// transformer's 41 GB are scenario 7's, at the model's full size).
const char* const kMappedWeights = "16G";
constexpr int64_t kHostLoad = 4;
// Three steps: the step's end (what the layers kept freed, then allocated again) twice; each step
// is a pass over as many of the image workload's layers as fit (32 on an H100: about 22 s a pass
// under scenario 2).
constexpr int64_t kSteps = 3;

// Whether scenario `number`'s record sets the setting that run option `option` sets. (A record
// without preconditions, scenario 0's, asks the option table nothing: the table's help lists the
// rungs' names, from a ladder of scenario 0.)
bool scenario_sets(int number, const std::string& option) {
  for (const auto& [field, value] : scenario_info(number).preconditions) {
    const char* setting = run_option_setting(option);
    if (setting && field == setting) return true;
  }
  return false;
}

}  // namespace

std::vector<ContextRung> context_ladder(const ContextLadderValues& v) {
  std::vector<ContextRung> rungs;
  RunSpec adds;
  const auto rung = [&](const char* name) { rungs.push_back({name, adds}); };
  // The caller's value, else the ladder's own unless the scenario's record sets that option's setting.
  const auto text = [&](const std::optional<std::string>& given, const char* own, const char* option,
                        std::optional<std::string>& to) {
    if (given) to = *given;
    else if (!scenario_sets(v.scenario, option)) to = own;
  };
  rung("isolated");
  adds.alloc_timing = "per-call";
  rung("per-call");
  text(v.layers, kLayers, "--layers", adds.layers);
  adds.retain = v.retain.value_or("autograd");
  // On the machine the ladder is for, the model's layers with what autograd keeps may not fit
  // (60 of Qwen-Image's: 137 GB, past a DGX Spark's 121 GiB): this rung and those above run as many
  // as fit beside the rest, and say how many, so that a refusal never ends the climb. Running out
  // on purpose is scenario 6's.
  adds.layers_fit = true;
  rung("layers");
  text(v.ballast, kBallast, "--ballast", adds.ballast);
  text(v.ballast_alloc, kBallastAlloc, "--ballast-alloc", adds.ballast_alloc);
  text(v.ballast_touch, kBallastTouch, "--ballast-touch", adds.ballast_touch);
  rung("ballast");
  text(v.mapped_weights, kMappedWeights, "--mapped-weights", adds.mapped_weights);
  if (v.weights_mapping && adds.mapped_weights) adds.weights_mapping = *v.weights_mapping;
  rung("mapped-weights");
  adds.host_load = v.host_load.value_or(kHostLoad);
  rung("host-load");
  adds.steps = v.steps.value_or(kSteps);
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
