// soak.cpp
#include "repro/run/soak.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace sdpa {

SoakVerdict judge_soak(const std::vector<MemorySample>& samples, double tolerance_mib, bool context) {
  SoakVerdict v;
  if (samples.size() < 2) {
    v.summary = "not judged: fewer than two samples (use more --iters than --sample-every)";
    return v;
  }
  // Warm-up: the first tenth of the calls (at least the first sample).
  size_t first = 0;
  while (first + 1 < samples.size() && samples[first].calls * 10 < samples.back().calls) ++first;
  if (first + 1 == samples.size()) first = 0;
  const MemorySample& base = samples[first];
  for (size_t i = first; i < samples.size(); ++i) {
    const MemorySample& s = samples[i];
    v.gpu_free_drift_mib = std::max(v.gpu_free_drift_mib, context ? std::fabs(s.reserved_mib - base.reserved_mib)
                                                                   : std::fabs(s.gpu_free_mib - base.gpu_free_mib));
    if (!context) v.rss_drift_mib = std::max(v.rss_drift_mib, std::fabs(s.rss_mib - base.rss_mib));
    const int64_t moved = s.live_allocations - base.live_allocations;
    v.allocation_drift = std::max<int64_t>(v.allocation_drift, moved < 0 ? -moved : moved);
  }
  v.flat = v.gpu_free_drift_mib <= tolerance_mib && v.rss_drift_mib <= tolerance_mib && v.allocation_drift == 0;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                context ? "%s after warm-up over calls %lld-%lld: the path's memory from the driver moved %.2f MiB "
                          "(RSS %.2f: not judged beside a ballast or host load), live allocations %lld (tolerance %.1f MiB)"
                        : "%s after warm-up over calls %lld-%lld: GPU free memory moved %.2f MiB, RSS %.2f MiB, live "
                          "allocations %lld (tolerance %.1f MiB)",
                v.flat ? "flat" : "GROWING", static_cast<long long>(base.calls),
                static_cast<long long>(samples.back().calls), v.gpu_free_drift_mib, v.rss_drift_mib,
                static_cast<long long>(v.allocation_drift), tolerance_mib);
  v.summary = buf;
  return v;
}

double resident_set_mib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      double kib = 0;
      status >> kib;
      return kib / 1024.0;
    }
    status.ignore(1 << 20, '\n');
  }
  return 0;
}

}  // namespace sdpa
