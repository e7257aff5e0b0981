// minimize_steps.h: the ways `repro minimize` tries to make a failing configuration smaller.
//
// A configuration is a list of run options (what follows `repro`). Each step proposes a smaller
// one: a condition of the training process dropped, a feature of the call dropped, or one size
// halved. A proposal is checked by the same parser a run uses, so a step never proposes what
// `repro` would refuse; one that would (the text padding longer than a halved S) is skipped.
// Host-only, so every step is tested without a GPU.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sdpa {

using Options = std::vector<std::string>;

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
  Options options;
  std::string change;
};
std::optional<Proposal> propose(const std::string& step, const Options& options);

// `options` in one canonical order and form ("--x=v" split, long names): two lists that mean
// the same run compare equal. Throws InputError when `options` is not a valid run.
Options canonical_options(const Options& options);

// `options` without those that say what the run would do anyway (--mask none, --layers 1,
// --iters 1, ...), which the steps write explicitly: the smallest configuration, as a person reads it.
Options without_defaults(const Options& options);

// The run options a report accepts of `options` (it runs fix off and on, checks every call and
// writes its own files), for `repro report` on the smallest configuration.
Options report_options(const Options& options);

}  // namespace sdpa
