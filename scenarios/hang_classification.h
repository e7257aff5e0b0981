// hang_classification.h: which scenarios a hang points to, and the evidence for each.
//
// A hang is classified by two things: the stage the watchdog found open (each scenario's
// signature in the stage log, docs/SCENARIOS.md) and the conditions that were active when it
// hung (the settings the path ran with). A hang inside the Q.K^T GEMM fits scenario 1 (the GEMM
// on another stream) and scenario 3 (K^T reaching cuBLAS as a non-contiguous view); which is
// the likelier depends on whether the GEMM really ran on another stream and whether K^T really
// was a view. Every candidate is listed with what speaks for and against it, most likely first;
// what a hang snapshot saw (the resident kernel, a thread blocked in the driver) adds to that.
// Host-only: the supervising parent classifies from the command line's settings alone.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/stage.h"

namespace sdpa {

struct HangCandidate {
  int scenario = 0;
  std::string title;
  bool signature = false;             // the hung stage is in its signature (not only "anywhere")
  std::vector<std::string> evidence;  // what points to it: its signature, the conditions present
  std::vector<std::string> against;   // what speaks against it: conditions absent
  // For minus against. The first line of `evidence` ("hung in X (...)") counts only where X is in
  // the signature: a scenario that can hang in any stage is not made likelier by the stage alone.
  int weight() const {
    return static_cast<int>(evidence.size()) - (signature ? 0 : 1) - static_cast<int>(against.size());
  }
};

// What a hang snapshot saw of the live hang (repro/supervise/hang_snapshot.h), as far as the
// classification uses it. Empty without a snapshot.
struct HangEvidence {
  std::vector<std::string> resident_kernels;  // the kernels' names ("spin_kernel", "sm90_xmma_gemm_...")
  std::vector<std::string> blocked_threads;   // one line each: a thread in D state and where ("uvm_va_block_...")
  std::string host_call;                      // the main thread's innermost CUDA call ("cuStreamSynchronize")
};

struct HangClassification {
  std::string stage;
  std::vector<HangCandidate> candidates;  // most likely first; empty when no signature fits
  std::vector<std::string> evidence_used;  // what of the snapshot weighed in (HangEvidence), one line each
  std::string no_scenario_reason;          // for a stage no scenario's signature fits: "none, because ..."

  // No candidate has more evidence for it than against it: the classification names none, and
  // lists what each had (a hang the hypotheses do not explain is worth saying so).
  bool none_fits() const {
    return !candidates.empty() &&
           std::all_of(candidates.begin(), candidates.end(), [](const HangCandidate& c) { return c.weight() <= 0; });
  }
  int scenario() const { return candidates.empty() || none_fits() ? 0 : candidates.front().scenario; }
  // One line: the likeliest candidate with its evidence, then the others by number;
  // "unclassified (hung in stage X): none, because ..." when no signature fits; "none fits (hung
  // in stage X): ..." with each candidate's for and against when none has more for than against.
  std::string summary() const;
};

// The scenarios whose stage-log signature a hang in `s` fits (docs/SCENARIOS.md), by number; the
// Q.K^T GEMM itself can hang for scenario 1's reason or for scenario 3's (faulting through the view).
std::vector<int> scenarios_for_hung_stage(Stage s);

// For a stage that fits no scenario, why ("none, because ..."); empty for the others.
std::string why_no_scenario(Stage s);

// A hang is classified by its stage and the conditions first; a snapshot's evidence then adds to
// the candidates it bears on (a GEMM, softmax or page-touch kernel resident; a thread blocked in
// the unified-memory driver) and is listed in evidence_used.
HangClassification classify_hang(Stage hung, const SdpaProblem& problem, const PathSettings& settings,
                                 const HangEvidence& evidence = {});

}  // namespace sdpa
