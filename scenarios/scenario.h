// scenario.h: the deadlock scenarios (docs/SCENARIOS.md), one registry.
//
// A scenario is a named set of conditions on the path (PathSettings) plus where the call stops:
// the smallest part of the path that exercises its hypothesis. Each scenario lives in its own
// file here (scenarioN_*.cpp) with its documentation and its setup; the conditions themselves
// are carried out by the path (math_sdpa/conditions.cpp). --scenario 0 is the full path with no
// extra conditions. The documentation is printed by --help, written to every JSON result, and
// kept in step with the setup by tests/test_scenarios.cpp: the settings a setup changes must be
// exactly its documented preconditions.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"

namespace sdpa {

struct ScenarioInfo {
  int number = 0;
  const char* title = "";           // one line
  const char* hypothesis = "";      // the hypothesis (docs/SCENARIOS.md)
  const char* setup = "";           // what the harness sets up
  const char* runs = "";            // the part of the path that runs
  int fix_number = 0;               // its own fix (--fix on), 0 for none
  const char* hang_signature = "";  // what a hang looks like in the stage log
  const char* options = "";         // the options that vary it
  // The hypothesis is about pages that migrate between host and GPU (managed memory, or system
  // memory the GPU reads directly); on memory that cannot migrate the run is waived.
  bool needs_migrating_memory = false;
  // The problem it runs when the command line gives no shape (scenarios/workload.h), or "".
  const char* default_workload = "";
  std::vector<std::pair<std::string, std::string>> preconditions;  // settings_fields() name -> value
  void (*setup_fn)(PathSettings&) = nullptr;                          // applies exactly the preconditions
};

constexpr int kScenarioCount = 7;  // 0..6
const std::vector<ScenarioInfo>& scenario_table();
const ScenarioInfo& scenario_info(int number);  // throws InputError for anything but 0..6
void apply_scenario(int number, PathSettings& settings);

// Why scenario `number` cannot be exercised under `conditions` (the settings before any fix: a
// fix that removes the condition is a fix, not a waiver), or nullopt when it can. Decided from
// the command line alone, before the GPU is touched.
std::optional<std::string> scenario_waiver(int number, const PathSettings& conditions);

// What makes a run of scenario `number` with this problem and these conditions say nothing about its
// hypothesis although it runs: scenario 2 with rows of at most 1024 keys, which softmax reduces in
// a warp with no block barrier. Empty when nothing does. A run still goes ahead (a user may want
// the warp path under the same host access); it warns, the JSON lists the caveat, and a report
// whose runs all pass says "not exercised", never "not reproduced".
std::vector<std::string> scenario_caveats(int number, const SdpaProblem& problem, const PathSettings& conditions);

// One entry per scenario file.
ScenarioInfo scenario0_full_path();
ScenarioInfo scenario1_cublas_stream_ordering();
ScenarioInfo scenario2_softmax_migration();
ScenarioInfo scenario3_transposed_k();
ScenarioInfo scenario4_concurrent_faults();
ScenarioInfo scenario5_graph_replay();
ScenarioInfo scenario6_memory_exhaustion();

}  // namespace sdpa
