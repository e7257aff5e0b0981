// stalls.cpp
#include "repro/run/stalls.h"

#include <cstdio>

namespace sdpa {

Stalls judge_stalls(const std::vector<StageLongest>& passes, double threshold_s) {
  Stalls s;
  s.threshold_s = threshold_s;
  if (threshold_s <= 0) return s;
  const double threshold_ms = threshold_s * 1e3;
  s.calls = static_cast<int>(passes.size());
  for (size_t i = 0; i < passes.size(); ++i) {
    const StageLongest& p = passes[i];
    StallRecord r;
    r.call = static_cast<int>(i) + 1;
    if (p.gpu_ms > threshold_ms) {
      r.stage = stage_name(p.gpu_stage), r.ms = p.gpu_ms;
    } else if (p.host_ms > threshold_ms) {
      r.stage = stage_name(p.host_stage), r.ms = p.host_ms;
    } else {
      continue;
    }
    ++s.calls_stalled;
    if (s.records.size() < Stalls::kMaxRecords) s.records.push_back(r);
    if (r.ms > s.longest.ms) s.longest = r;
  }
  return s;
}

std::string Stalls::summary() const {
  if (!any()) return "";
  char buf[240];
  std::snprintf(buf, sizeof buf, "%s %.1f ms in call %d (%d of %d call%s over %.1f s, below the deadline)",
                longest.stage.c_str(), longest.ms, longest.call, calls_stalled, calls, calls == 1 ? "" : "s", threshold_s);
  return buf;
}

}  // namespace sdpa
