// fault_spec.h: --inject hang:STAGE | error:STAGE | slow:STAGE:MS [@CONDITION...], parsed (host-only;
// inlined into a reproducer whose run injected a fault, which uses its struct only).
//
// Fault injection proves the watchdog on a healthy GPU: every stage of the path can be made to
// hang, fail or run slow, and the harness must name that stage. A condition makes the fault
// happen only somewhere, so that a test (or a user checking the harness) knows where a ladder or
// a report must point: @layer=K and @step=K only in that layer or step; @per-call, @layers,
// @ballast, @host-load, @steps, @retain, @backward only when the run has that condition of the
// context ladder (per-call allocation, more than one layer, a ballast, a host load, more than one
// step, what autograd keeps, the backward pass); @no-fix only when no fix is on (a fault a fix clears, as a real bug would be);
// @B>=N, @H>=N, @L>=N, @S>=N, @E>=N only when that size of the problem is at least N, and
// @alloc=KIND only on that memory: a fault with a known, conditional answer, which a minimizer
// must find (`--inject hang:softmax@S>=2048@alloc=managed` hangs only from S = 2048 on managed
// memory).
#pragma once

#include <string>
#include <vector>

#include "stage.h"

namespace sdpa {

struct FaultSpec {
  enum Kind { none, hang, error, slow } kind = none;
  Stage stage = Stage::entry_sync;
  int slow_ms = 0;
  int only_layer = 0;  // 1-based; 0: every layer
  int only_step = 0;   // 1-based; 0: every step
  std::vector<std::string> only_with;  // context conditions, each one of fault_context_conditions()
  struct AtLeast {
    char size = 'S';  // B, H (query heads), L, S or E
    int64_t min = 0;
  };
  std::vector<AtLeast> only_sizes;
  std::string only_alloc;  // an --alloc kind; "": any
  // Whether the fault happens in the call at `at` (@layer=K, @step=K; the other conditions are
  // the run's, judged before it starts).
  bool fires_at(const CallPosition& at) const {
    return (!only_layer || at.layer == only_layer) && (!only_step || at.step == only_step);
  }
};

// The words of @CONDITION that name a condition of the run's context ("per-call", "layers", ...).
const std::vector<std::string>& fault_context_conditions();

// Throws InputError with one line on a malformed spec.
FaultSpec parse_fault_spec(const std::string& text);
std::string fault_spec_string(const FaultSpec& f);

}  // namespace sdpa
