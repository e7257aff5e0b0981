// scenario.h: the deadlock scenarios (docs/SCENARIOS.md), one record each, one registry.
//
// A scenario is a named set of conditions on the path (PathSettings) plus where the call stops:
// the smallest part of the path that exercises its hypothesis. Everything about one scenario is
// its record, in its own file here (scenarioN_*.cpp): its documentation, its setup and option
// defaults, the stages its hang stops in and the conditions that speak for or against it when a
// run hangs, where it is waived, whether the context ladder climbs it, its workload. Every command
// reads it through the registry (registry.cpp, one line a scenario); the conditions themselves
// are carried out by the path (math_sdpa/conditions.cpp). --scenario 0 is the full path with no
// extra conditions. The documentation is printed by --help and `repro help scenarios` (--json for
// the scripts), written to every JSON result, and kept in step with the setup by
// tests/test_scenarios.cpp: the settings a setup changes must be exactly its documented
// preconditions.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"

namespace sdpa {

struct HangCandidate;  // hang_classification.h

// A stage a hang of the scenario's hypothesis stops in, and why it fits there (nullptr: what the
// stage table says a hang in that stage shows).
struct ScenarioSignature {
  Stage stage;
  const char* why = nullptr;
};

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
  // memory the GPU reads directly); on memory that cannot migrate the run is waived, and a hang
  // on it counts against the scenario. A replayed capture's memory does not override its own.
  bool needs_migrating_memory = false;
  // The problem it runs when the command line gives no shape (scenarios/workload.h), or "".
  const char* default_workload = "";
  std::vector<std::pair<std::string, std::string>> preconditions;  // settings_fields() name -> value
  void (*setup_fn)(PathSettings&) = nullptr;                          // applies exactly the preconditions
  bool memory_trace = false;  // --memory-trace on by default: its evidence is the memory at every stage

  // Classification (hang_classification.h): the stages its hang stops in; with
  // signature_memory_stages every allocation and free inside a call too.
  std::vector<ScenarioSignature> signature;
  bool signature_memory_stages = false;
  // A candidate in any stage where this holds (scenario 6: a pass that allocates as it goes can run
  // out of memory anywhere), with `anywhere_why` as the evidence of the stage.
  bool (*candidate_anywhere)(const PathSettings&) = nullptr;
  const char* anywhere_why = "";
  // The run's conditions for and against the hypothesis, added to a candidate's evidence.
  void (*weigh)(Stage hung, const SdpaProblem&, const PathSettings&, HangCandidate&) = nullptr;
  // Fragments of the names of the kernels its hang would leave resident (gemm, softmax): a
  // hang snapshot that finds one on the GPU adds to its evidence.
  std::vector<const char*> kernels;
  // What makes a run of it say nothing about its hypothesis though it runs (scenario_caveats).
  std::vector<std::string> (*caveats)(const SdpaProblem&, const PathSettings&) = nullptr;

  // Where the commands take it: why the context ladder does not climb it (nullptr: it does), and
  // why it is not in the default sweep and triage (nullptr: it is, where it has a fix of its own).
  const char* no_ladder = nullptr;
  const char* not_by_default = nullptr;
};

const std::vector<ScenarioInfo>& scenario_table();  // in number order, 0 first
int scenario_count();
const ScenarioInfo& scenario_info(int number);  // throws InputError for a number no scenario has
void apply_scenario(int number, PathSettings& settings);
std::string scenario_range();  // "0-6", for help and errors

// "1,2,5" or "1-5" (ranges and single numbers, joined by commas; "all" for every scenario) into
// numbers, each checked against the registry, in the order given; throws InputError naming
// `option` on anything else (an empty item, a repeat, a scenario that does not exist).
std::vector<int> parse_scenario_list(const std::string& text, const std::string& option);
std::string scenario_list_text(const std::vector<int>& scenarios);  // "1,2,3"
// The scenarios a sweep takes without --scenarios (those not left out by their record), and those
// a triage sweeps and climbs (the same, less scenario 0: it has no fix of its own to switch).
std::vector<int> default_sweep_scenarios();
std::vector<int> default_triage_scenarios();

// Why scenario `number` cannot be exercised under `conditions` (the settings before any fix: a
// fix that removes the condition is a fix, not a waiver), or nullopt when it can. Decided from
// the command line alone, before the GPU is touched.
std::optional<std::string> scenario_waiver(int number, const PathSettings& conditions);

// What makes a run of scenario `number` with this problem and these conditions say nothing about
// its hypothesis although it runs (its record's caveats): empty when nothing does. A run still
// goes ahead; it warns, the JSON lists the caveat, and a report whose runs all pass says "not
// exercised", never "not reproduced".
std::vector<std::string> scenario_caveats(int number, const SdpaProblem& problem, const PathSettings& conditions);

// Every record as JSON (`repro help scenarios --json`): what the scripts read instead of a copy.
nlohmann::json scenarios_json();

}  // namespace sdpa
