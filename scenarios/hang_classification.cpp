// hang_classification.cpp
#include "hang_classification.h"

#include <algorithm>

#include "math_sdpa/softmax_plan.h"
#include "scenario.h"

namespace sdpa {

namespace {

bool signature_fits(const ScenarioInfo& sc, Stage s) {
  if (sc.signature_memory_stages && is_memory_stage(s)) return true;
  return std::any_of(sc.signature.begin(), sc.signature.end(), [&](const ScenarioSignature& g) { return g.stage == s; });
}

// "hung in qk_gemm (cuBLAS reading K^T)": the scenario's own reason where its record gives one,
// else what the stage table says a hang there shows.
std::string signature_evidence(const ScenarioInfo& sc, Stage s) {
  const char* why = stage_row(s).hang;
  for (const ScenarioSignature& g : sc.signature) {
    if (g.stage == s && g.why) why = g.why;
  }
  if (!signature_fits(sc, s)) why = sc.anywhere_why;
  return std::string("hung in ") + stage_name(s) + " (" + why + ")";
}

void add_memory_evidence(HangCandidate& c, const PathSettings& ps) {
  if (migratable(ps.alloc)) {
    c.evidence.push_back(std::string(alloc_kind_name(ps.alloc)) + " memory, whose pages migrate");
  } else {
    c.against.push_back(std::string(alloc_kind_name(ps.alloc)) + " memory does not migrate");
  }
}

HangCandidate candidate(const ScenarioInfo& sc, Stage hung, const SdpaProblem& p, const PathSettings& ps) {
  HangCandidate c;
  c.scenario = sc.number;
  c.title = sc.title;
  c.signature = signature_fits(sc, hung);
  c.evidence.push_back(signature_evidence(sc, hung));
  if (sc.weigh) sc.weigh(hung, p, ps, c);
  // A hypothesis about migrating pages; one about the amount of memory holds whatever kind it is.
  if (sc.needs_migrating_memory) add_memory_evidence(c, ps);
  return c;
}

}  // namespace

std::vector<int> scenarios_for_hung_stage(Stage s) {
  std::vector<int> out;
  for (const ScenarioInfo& sc : scenario_table()) {
    if (signature_fits(sc, s)) out.push_back(sc.number);
  }
  return out;
}

std::string why_no_scenario(Stage s) {
  if (!scenarios_for_hung_stage(s).empty()) return {};
  return std::string("none, because no hypothesis names stage ") + stage_name(s) + " (" + stage_row(s).hang +
         "); the hang snapshot's resident kernel and blocked threads say more";
}

namespace {

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const auto& part : parts) s += (s.empty() ? "" : sep) + part;
  return s;
}

bool contains_any(const std::string& text, const std::vector<const char*>& words) {
  for (const char* w : words) {
    if (text.find(w) != std::string::npos) return true;
  }
  return false;
}

// The scenarios a resident kernel bears on, by what its name says it is (each record's kernels).
std::vector<int> scenarios_of_kernel(const std::string& name) {
  std::vector<int> out;
  for (const ScenarioInfo& sc : scenario_table()) {
    if (contains_any(name, sc.kernels)) out.push_back(sc.number);
  }
  return out;
}

void add_snapshot_evidence(HangClassification& h, const HangEvidence& e) {
  for (const std::string& kernel : e.resident_kernels) {
    const std::vector<int> fits = scenarios_of_kernel(kernel);
    h.evidence_used.push_back("resident kernel " + kernel +
                              (fits.empty() ? std::string(" (no scenario's kernel)") : std::string()));
    for (HangCandidate& c : h.candidates) {
      if (std::find(fits.begin(), fits.end(), c.scenario) != fits.end()) {
        c.evidence.push_back("the snapshot found " + kernel + " resident on the GPU");
      }
    }
  }
  for (const std::string& blocked : e.blocked_threads) {
    const bool in_uvm = contains_any(blocked, {"uvm"});
    h.evidence_used.push_back(blocked);
    if (!in_uvm) continue;
    // A thread stuck in the unified-memory driver: every hypothesis about migrating pages gains,
    // and scenario 4 (the driver's fault handling itself) most of all.
    for (HangCandidate& c : h.candidates) c.evidence.push_back("a thread blocked in the unified-memory driver: " + blocked);
  }
  if (!e.host_call.empty()) h.evidence_used.push_back("the main thread waited in " + e.host_call);
}

}  // namespace

HangClassification classify_hang(Stage hung, const SdpaProblem& p, const PathSettings& ps, const HangEvidence& evidence) {
  HangClassification h;
  h.stage = stage_name(hung);
  h.no_scenario_reason = why_no_scenario(hung);
  for (const ScenarioInfo& sc : scenario_table()) {
    if (signature_fits(sc, hung) || (sc.candidate_anywhere && sc.candidate_anywhere(ps))) {
      h.candidates.push_back(candidate(sc, hung, p, ps));
    }
  }
  add_snapshot_evidence(h, evidence);
  // The candidate with the most conditions for and the fewest against first; on a tie the one
  // judged likelier from the start, which is the lower number (docs/SCENARIOS.md).
  std::stable_sort(h.candidates.begin(), h.candidates.end(),
                   [](const HangCandidate& a, const HangCandidate& b) { return a.weight() > b.weight(); });
  return h;
}

std::string HangClassification::summary() const {
  if (candidates.empty()) {
    return "unclassified (hung in stage " + stage + ")" + (no_scenario_reason.empty() ? "" : ": " + no_scenario_reason) +
           (evidence_used.empty() ? std::string() : "; snapshot: " + join(evidence_used, "; "));
  }
  if (none_fits()) {
    std::string s = "none fits (hung in stage " + stage + "): no scenario has more evidence for it than against it";
    for (const HangCandidate& c : candidates) {
      s += "; scenario " + std::to_string(c.scenario) + " (" + c.title + "): for: " + join(c.evidence, ", ") +
           (c.against.empty() ? "" : "; against: " + join(c.against, ", "));
    }
    if (!evidence_used.empty()) s += "; snapshot evidence used: " + join(evidence_used, "; ");
    return s;
  }
  const HangCandidate& first = candidates.front();
  std::string s = "scenario " + std::to_string(first.scenario) + " (" + first.title + "): " + join(first.evidence, "; ");
  if (!first.against.empty()) s += "; against: " + join(first.against, "; ");
  for (size_t i = 1; i < candidates.size(); ++i) {
    s += (i == 1 ? "; also scenario " : ", scenario ") + std::to_string(candidates[i].scenario) + " (" + candidates[i].title + ")";
  }
  if (!evidence_used.empty()) s += "; snapshot evidence used: " + join(evidence_used, "; ");
  return s;
}

}  // namespace sdpa
