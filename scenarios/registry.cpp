// registry.cpp: the scenario table.
#include "scenario.h"

#include "math_sdpa/errors.h"
#include "math_sdpa/softmax_plan.h"

namespace sdpa {

const std::vector<ScenarioInfo>& scenario_table() {
  static const std::vector<ScenarioInfo> table = {scenario0_full_path(), scenario1_cublas_stream_ordering(),
                                                  scenario2_softmax_migration(), scenario3_transposed_k(),
                                                  scenario4_concurrent_faults(), scenario5_graph_replay(),
                                                  scenario6_memory_exhaustion()};
  return table;
}

const ScenarioInfo& scenario_info(int number) {
  if (number < 0 || number >= kScenarioCount) {
    throw InputError("no scenario " + std::to_string(number) + " (scenarios are 0-" + std::to_string(kScenarioCount - 1) + ")");
  }
  return scenario_table()[static_cast<size_t>(number)];
}

void apply_scenario(int number, PathSettings& settings) {
  const ScenarioInfo& s = scenario_info(number);
  if (s.setup_fn) s.setup_fn(settings);
}

std::optional<std::string> scenario_waiver(int number, const PathSettings& conditions) {
  const ScenarioInfo& s = scenario_info(number);
  if (!s.needs_migrating_memory || migratable(conditions.alloc)) return std::nullopt;
  const AllocKind a = conditions.alloc;
  return "scenario " + std::to_string(number) + " (" + s.title + ") is about pages that migrate between host and GPU; " +
         alloc_kind_name(a) + " memory " +
         (a == AllocKind::host ? "is pinned in host memory and never migrates" : "never leaves the GPU") +
         " (use --alloc managed, or system where the GPU reads pageable memory)";
}

std::vector<std::string> scenario_caveats(int number, const SdpaProblem& problem, const PathSettings& conditions) {
  std::vector<std::string> caveats;
  // Scenario 2 is about the block reduction; a run that reaches softmax with only warp rows never
  // runs it (the backward's softmax splits its rows the same way).
  if (number == 2 && conditions.scores_to_host != ScoresToHost::none &&
      !softmax_uses_block_barriers(softmax_variant_for(problem.compute_dtype(), problem.kv_len))) {
    caveats.push_back("scenario 2's hypothesis is about softmax's block reduction, but rows of S = " +
                      std::to_string(problem.kv_len) + " <= " + std::to_string(kSoftmaxWarpRowMaxCols) +
                      " keys take the warp path (no shared memory, no block barrier): a pass says nothing about it "
                      "(use S > " + std::to_string(kSoftmaxWarpRowMaxCols) + ", as the default --workload qwen-image-1024 does)");
  }
  return caveats;
}

}  // namespace sdpa
