// registry.cpp: the scenario registry, and what every command asks of it.
#include "scenario.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "math_sdpa/errors.h"

// Every scenario, one line each, in number order: each is a function in its own file that returns
// its record (scenarioN_*.cpp).
#define SDPA_SCENARIOS(X)               \
  X(scenario0_full_path)                \
  X(scenario1_cublas_stream_ordering)   \
  X(scenario2_softmax_migration)        \
  X(scenario3_transposed_k)             \
  X(scenario4_concurrent_faults)        \
  X(scenario5_graph_replay)             \
  X(scenario6_memory_exhaustion)        \
  X(scenario7_mapped_weights)           \
  /* one line a record above; the list ends here */

namespace sdpa {

#define SDPA_DECLARE_SCENARIO(name) ScenarioInfo name();
SDPA_SCENARIOS(SDPA_DECLARE_SCENARIO)
#undef SDPA_DECLARE_SCENARIO

const std::vector<ScenarioInfo>& scenario_table() {
#define SDPA_SCENARIO_RECORD(name) name(),
  static const std::vector<ScenarioInfo> table = [] {
    std::vector<ScenarioInfo> t = {SDPA_SCENARIOS(SDPA_SCENARIO_RECORD)};
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].number != static_cast<int>(i)) throw std::logic_error("scenario registry: scenario " + std::to_string(t[i].number) + " out of order");
    }
    return t;
  }();
#undef SDPA_SCENARIO_RECORD
  return table;
}

int scenario_count() { return static_cast<int>(scenario_table().size()); }

std::string scenario_range() { return "0-" + std::to_string(scenario_count() - 1); }

const ScenarioInfo& scenario_info(int number) {
  if (number < 0 || number >= scenario_count()) {
    throw InputError("no scenario " + std::to_string(number) + " (scenarios are " + scenario_range() + ")");
  }
  return scenario_table()[static_cast<size_t>(number)];
}

void apply_scenario(int number, PathSettings& settings) {
  const ScenarioInfo& s = scenario_info(number);
  if (s.setup_fn) s.setup_fn(settings);
}

namespace {

// A scenario number: decimal digits only, one the registry has.
int scenario_number(const std::string& item, const std::string& text, const std::string& option) {
  const bool digits = !item.empty() && item.size() <= 4 && item.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(item) >= scenario_count()) {
    throw InputError(option + ": '" + item + "' in '" + text + "' is not a scenario (scenarios are " + scenario_range() +
                     "; a list is N,N,.. or N-M)");
  }
  return std::stoi(item);
}

}  // namespace

std::vector<int> parse_scenario_list(const std::string& text, const std::string& option) {
  std::vector<int> out;
  if (text == "all") {
    for (const ScenarioInfo& s : scenario_table()) out.push_back(s.number);
    return out;
  }
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) throw InputError(option + ": empty item in '" + text + "'");
    const size_t dash = item.find('-');
    const int first = scenario_number(item.substr(0, dash), text, option);
    const int last = dash == std::string::npos ? first : scenario_number(item.substr(dash + 1), text, option);
    if (last < first) throw InputError(option + ": '" + item + "' in '" + text + "' is an empty range");
    for (int n = first; n <= last; ++n) {
      if (std::find(out.begin(), out.end(), n) != out.end()) {
        throw InputError(option + ": scenario " + std::to_string(n) + " is listed twice in '" + text + "'");
      }
      out.push_back(n);
    }
  }
  return out;
}

std::string scenario_list_text(const std::vector<int>& scenarios) {
  std::string s;
  for (int n : scenarios) s += (s.empty() ? "" : ",") + std::to_string(n);
  return s;
}

std::vector<int> default_sweep_scenarios() {
  std::vector<int> out;
  for (const ScenarioInfo& s : scenario_table()) {
    if (!s.not_by_default) out.push_back(s.number);
  }
  return out;
}

std::vector<int> default_triage_scenarios() {
  std::vector<int> out;
  for (int n : default_sweep_scenarios()) {
    if (scenario_info(n).fix_number) out.push_back(n);
  }
  return out;
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
  const ScenarioInfo& s = scenario_info(number);
  return s.caveats ? s.caveats(problem, conditions) : std::vector<std::string>{};
}

nlohmann::json scenarios_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const ScenarioInfo& s : scenario_table()) {
    nlohmann::json signature = nlohmann::json::array();
    for (const ScenarioSignature& g : s.signature) signature.push_back(stage_name(g.stage));
    nlohmann::json preconditions = nlohmann::json::object();
    for (const auto& [field, value] : s.preconditions) preconditions[field] = value;
    out.push_back({{"number", s.number},
                   {"title", s.title},
                   {"hypothesis", s.hypothesis},
                   {"setup", s.setup},
                   {"runs", s.runs},
                   {"fix", s.fix_number},
                   {"hang_signature", s.hang_signature},
                   {"signature_stages", signature},
                   {"signature_memory_stages", s.signature_memory_stages},
                   {"preconditions", preconditions},
                   {"needs_migrating_memory", s.needs_migrating_memory},
                   {"default_workload", s.default_workload},
                   {"memory_trace", s.memory_trace},
                   {"ladder", s.no_ladder ? nlohmann::json(s.no_ladder) : nlohmann::json(true)},
                   {"by_default", s.not_by_default ? nlohmann::json(s.not_by_default) : nlohmann::json(true)}});
  }
  return out;
}

}  // namespace sdpa
