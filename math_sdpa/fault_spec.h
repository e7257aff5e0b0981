// fault_spec.h: --inject hang:STAGE | error:STAGE | slow:STAGE:MS, parsed (host-only).
//
// Fault injection proves the watchdog on a healthy GPU: every stage of the path can be made to
// hang, fail or run slow, and the harness must name that stage.
#pragma once

#include <string>

#include "stage.h"

namespace sdpa {

struct FaultSpec {
  enum Kind { none, hang, error, slow } kind = none;
  Stage stage = Stage::entry_sync;
  int slow_ms = 0;
};

// Throws InputError with one line on a malformed spec.
FaultSpec parse_fault_spec(const std::string& text);
std::string fault_spec_string(const FaultSpec& f);

}  // namespace sdpa
