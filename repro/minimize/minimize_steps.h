// minimize_steps.h: the ways `repro minimize` tries to make a failing configuration smaller.
//
// A configuration is a RunSpec (the run options of the failing run). Each step proposes a smaller
// one: a condition of the training process dropped, a feature of the call dropped, or one size
// halved. A proposal is validated as the run would be (validate_run_spec), so a step never proposes
// what `repro` would refuse; one that would (the text padding longer than a halved S) is skipped.
// Configurations compare as values: two that give the same options are the same.
// Host-only, so every step is tested without a GPU.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "repro/cli/run_spec.h"

namespace sdpa {

struct MinimizeStep {
  const char* name;   // "no ballast", "halve S"
  const char* what;   // one line: what it changes
};

// Every step, in the order a pass tries them: the costliest conditions first (they make each run
// slow), then the call's features, then its sizes.
const std::vector<MinimizeStep>& minimize_steps();

// The configuration `step` proposes from `options`, with a short description of the change
// ("S 4096 -> 2048"); nothing when the step does not apply (its condition is not there, the size
// is 1) or its proposal is not a valid run.
struct Proposal {
  RunSpec options;
  std::string change;
};
std::optional<Proposal> propose(const std::string& step, const RunSpec& options);

// `options` as a configuration carries them: without the output files, the replay's source (its
// derived options are given instead) and what a hang does (each minimize run names it and is
// killed). Throws InputError when `options` is not a valid run.
RunSpec carried_options(const RunSpec& options);

// `options` without those that say what the run would do anyway (--mask none, --layers 1,
// --iters 1, ...), which the steps write explicitly: the smallest configuration, as a person reads it.
RunSpec without_defaults(const RunSpec& options);

// The run options a report accepts of `options` (it runs fix off and on, checks every call and
// writes its own files), for `repro report` on the smallest configuration.
RunSpec report_options(const RunSpec& options);

}  // namespace sdpa
