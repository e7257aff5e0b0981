// soak.h: memory over a long run (--sample-every N), the guard against leaks and against the
// "first call passes, later calls fail" class of bug.
//
// Every N calls the GPU child samples the device's free memory, its own resident set size and
// the allocator's live allocations. After warm-up (the first tenth of the calls) all three must stay flat:
// within 1 MiB for the two sizes, exactly for the allocation count. Host-only, so the verdict is
// tested on the CPU; the sampling itself is in runner.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sdpa {

struct MemorySample {
  int64_t calls = 0;           // calls completed when sampled
  double gpu_free_mib = 0;     // cudaMemGetInfo's free memory
  double rss_mib = 0;          // this process's VmRSS
  int64_t live_allocations = 0;
  double live_mib = 0;         // bytes the allocator has handed out and not released
  double reserved_mib = 0;     // what the path's allocator holds from the driver (its cache too)
};

struct SoakVerdict {
  bool flat = true;
  double gpu_free_drift_mib = 0, rss_drift_mib = 0;  // largest move away from the baseline
  int64_t allocation_drift = 0;
  std::string summary;  // one line
};

constexpr double kSoakToleranceMib = 1.0;

// With --check the last sample leaves out what the resident set grew by while the last call was
// checked (the float64 reference's threads and buffers are the harness's, not the path's).
// The baseline is the first sample taken once a tenth of the calls are done: warm-up (cuBLAS's
// heuristics, the caching allocator's pool, the bounded records a run keeps) is behind it. With a ballast
// or a host load running (`context`), the device's free memory and the process's RSS move with
// their pages by design: the path's own memory is judged instead (what its allocator holds from
// the driver, and its live allocations), and the summary says so.
SoakVerdict judge_soak(const std::vector<MemorySample>& samples, double tolerance_mib = kSoakToleranceMib,
                       bool context = false);

// This process's resident set size from /proc/self/status, in MiB (0 if unreadable).
double resident_set_mib();

}  // namespace sdpa
