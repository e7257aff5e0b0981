// fault_spec.cpp
#include "fault_spec.h"

#include <cstdlib>

#include "errors.h"

namespace sdpa {

FaultSpec parse_fault_spec(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return InputError("--inject " + text + ": " + why + " (expected hang:STAGE, error:STAGE or slow:STAGE:MS)");
  };
  FaultSpec f;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw bad("missing ':'");
  const std::string kind = text.substr(0, colon);
  std::string rest = text.substr(colon + 1);
  if (kind == "hang") {
    f.kind = FaultSpec::hang;
  } else if (kind == "error") {
    f.kind = FaultSpec::error;
  } else if (kind == "slow") {
    f.kind = FaultSpec::slow;
    const size_t ms_colon = rest.find(':');
    if (ms_colon == std::string::npos) throw bad("slow needs milliseconds");
    const std::string ms = rest.substr(ms_colon + 1);
    char* end = nullptr;
    const long value = std::strtol(ms.c_str(), &end, 10);
    if (ms.empty() || *end != '\0' || value < 1 || value > 120000) throw bad("milliseconds must be 1..120000");
    f.slow_ms = static_cast<int>(value);
    rest = rest.substr(0, ms_colon);
  } else {
    throw bad("unknown fault '" + kind + "'");
  }
  if (!parse_stage(rest, f.stage)) throw bad("unknown stage '" + rest + "'");
  return f;
}

std::string fault_spec_string(const FaultSpec& f) {
  switch (f.kind) {
    case FaultSpec::none: return "none";
    case FaultSpec::hang: return std::string("hang:") + stage_name(f.stage);
    case FaultSpec::error: return std::string("error:") + stage_name(f.stage);
    case FaultSpec::slow: return std::string("slow:") + stage_name(f.stage) + ":" + std::to_string(f.slow_ms);
  }
  return "?";
}

}  // namespace sdpa
