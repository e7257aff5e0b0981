// fault_spec.cpp
#include "fault_spec.h"

#include <cstdlib>

#include "allocator.h"
#include "errors.h"
#include "path_settings.h"

namespace sdpa {

const std::vector<std::string>& fault_context_conditions() {
  static const std::vector<std::string> words = {"per-call", "layers", "ballast", "host-load", "steps", "retain", "backward", "no-fix"};
  return words;
}

namespace {

// A positive integer of at most 9 digits, or -1.
int positive(const std::string& text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int value = std::atoi(text.c_str());
  return value >= 1 ? value : -1;
}

}  // namespace

FaultSpec parse_fault_spec(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return InputError("--inject " + text + ": " + why +
                      " (expected hang:STAGE, error:STAGE or slow:STAGE:MS, each with any of @layer=K, @step=K, "
                      "@per-call, @layers, @ballast, @host-load, @steps, @retain, @backward, @no-fix, @B>=N (or H, L, S, E), @alloc=KIND)");
  };
  FaultSpec f;
  const size_t at = text.find('@');
  const std::string fault = text.substr(0, at);
  const size_t colon = fault.find(':');
  if (colon == std::string::npos) throw bad("missing ':'");
  const std::string kind = fault.substr(0, colon);
  std::string rest = fault.substr(colon + 1);
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
  for (size_t from = at; from != std::string::npos;) {
    const size_t next = text.find('@', from + 1);
    const std::string condition = text.substr(from + 1, next == std::string::npos ? std::string::npos : next - from - 1);
    from = next;
    const size_t eq = condition.find('=');
    const std::string name = condition.substr(0, eq);
    if (eq != std::string::npos && (name == "layer" || name == "step")) {
      const int value = positive(condition.substr(eq + 1));
      if (value < 0) throw bad("@" + name + "= needs a positive number");
      int& slot = name == "layer" ? f.only_layer : f.only_step;
      if (slot) throw bad("@" + name + " given twice");
      slot = value;
      continue;
    }
    const size_t ge = condition.find(">=");
    if (ge == 1 && std::string("BHLSE").find(condition[0]) != std::string::npos) {
      const int value = positive(condition.substr(ge + 2));
      if (value < 0) throw bad("@" + condition.substr(0, 3) + " needs a positive number");
      for (const FaultSpec::AtLeast& seen : f.only_sizes) {
        if (seen.size == condition[0]) throw bad("@" + condition.substr(0, 1) + ">= given twice");
      }
      f.only_sizes.push_back({condition[0], value});
      continue;
    }
    if (eq != std::string::npos && name == "alloc") {
      if (!f.only_alloc.empty()) throw bad("@alloc given twice");
      try {
        f.only_alloc = alloc_kind_name(parse_alloc_kind(condition.substr(eq + 1)));
      } catch (const InputError&) {
        throw bad("@alloc=" + condition.substr(eq + 1, 40) + " is not an --alloc kind");
      }
      continue;
    }
    bool known = false;
    for (const std::string& word : fault_context_conditions()) known = known || condition == word;
    if (!known) throw bad("unknown condition '@" + condition + "'");
    for (const std::string& seen : f.only_with) {
      if (seen == condition) throw bad("@" + condition + " given twice");
    }
    f.only_with.push_back(condition);
  }
  return f;
}

std::string fault_spec_string(const FaultSpec& f) {
  std::string s;
  switch (f.kind) {
    case FaultSpec::none: return "none";
    case FaultSpec::hang: s = std::string("hang:") + stage_name(f.stage); break;
    case FaultSpec::error: s = std::string("error:") + stage_name(f.stage); break;
    case FaultSpec::slow: s = std::string("slow:") + stage_name(f.stage) + ":" + std::to_string(f.slow_ms); break;
  }
  if (f.only_layer) s += "@layer=" + std::to_string(f.only_layer);
  if (f.only_step) s += "@step=" + std::to_string(f.only_step);
  for (const std::string& c : f.only_with) s += "@" + c;
  for (const FaultSpec::AtLeast& a : f.only_sizes) s += "@" + std::string(1, a.size) + ">=" + std::to_string(a.min);
  if (!f.only_alloc.empty()) s += "@alloc=" + f.only_alloc;
  return s;
}

}  // namespace sdpa
