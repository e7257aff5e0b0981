// uvm_counters.h: how much managed (unified) memory migrated between host and GPU during a run,
// and how many page faults the driver serviced, as the driver itself reports them through CUPTI's
// Unified Memory counters (CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER), split by address range
// so that a result can say "the path's pages moved X MB host-to-device, Y MB device-to-host,
// Z CPU page faults; the ballast's moved ...".
//
// Read it as: start() before the memory to be measured is touched, name_range() for each
// allocation of interest (before or after its traffic), stop() once the GPU work is synchronized;
// every figure in UvmCounts is a sum over the driver's records from start() to stop().
// CUPTI is loaded at run time (dlopen), never linked: where it is missing, or refuses (an
// unsupported system or device, MPS, another profiler such as Nsight or compute-sanitizer already
// attached), the counts say "unavailable" with a one-line reason and the run goes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sdpa {

// What migrated and faulted at the addresses of one named range (or of none: "other").
struct UvmRangeCounts {
  std::string name;
  int64_t bytes_htod = 0, bytes_dtoh = 0;  // bytes migrated host-to-device, device-to-host
  int64_t cpu_page_faults = 0;             // CPU faults on managed memory the driver serviced
  int64_t gpu_page_faults = 0;             // GPU fault records: a faulting page per fault batch
};

struct UvmCounts {
  bool available = false;
  std::string unavailable;   // why not, one line; empty when available
  bool unsupported = false;  // unavailable because CUPTI is missing or says this system, device or
                             // setup cannot count (expected on some machines), not because a call
                             // failed or the counters were misused
  std::string not_counted;   // optional kinds CUPTI refused (e.g. "THROTTLING (CUPTI_ERROR_...)"): their
                             // figures below stay 0; empty when all were counted
  // Totals over every address. thrashing, throttling and remote_map count the driver's events
  // (records): pages it saw bouncing between processors, times it stalled one processor's faults
  // to stop that, and times it mapped a page remotely instead of migrating it.
  int64_t bytes_htod = 0, bytes_dtoh = 0, cpu_page_faults = 0, gpu_page_faults = 0;
  int64_t thrashing = 0, throttling = 0, remote_map = 0;
  // One entry per name given to name_range, in the order first given, then "other".
  std::vector<UvmRangeCounts> ranges;
  int64_t records = 0;          // Unified Memory records received
  int64_t dropped_records = 0;  // records CUPTI had no buffer for: when > 0 the figures are lower bounds

  // The entry for `name` (ranges' "other" included), or nullptr.
  const UvmRangeCounts* range(const std::string& name) const;
};

struct UvmCollector;  // what CUPTI's thread fills (uvm_counters.cpp)

// Counts while it lives. CUPTI's activity buffers are process-wide, so one counts at a time: a
// second start() while another has not stopped is unavailable (and says so).
class UvmCounters {
 public:
  // Never throws, never returns null: when the counters cannot run, stop() says why.
  // Whether it must precede the process's first CUDA call: CUPTI does not ask for that. Its header
  // asks for the opposite, that cuptiActivityConfigureUnifiedMemoryCounter come after the driver
  // is initialised, which start() does itself (cudaGetDeviceCount); NVIDIA's unified-memory sample
  // does the same before it creates a context. Only what migrates after start() is counted, so
  // call it before the memory to be measured is first touched.
  static std::unique_ptr<UvmCounters> start();

  // Traffic and faults whose address is in [base, base + bytes) count for `name`; everything else
  // counts for "other". A name may be given to several ranges (the path's tensors): their counts
  // add up. Ranges may be named at any time before stop(): records are kept as they come and
  // attributed when stop() sums them. Where ranges overlap, the first named holds the address.
  // A transfer record counts whole for the range holding its first byte: the driver migrates
  // within one allocation, so this is exact for whole allocations and close for sub-allocations.
  void name_range(const std::string& name, const void* base, size_t bytes);

  // Flushes CUPTI's buffers, stops counting and sums. It does not synchronize the GPU (it must
  // not block on a hung one): synchronize first to count everything. Idempotent: later calls
  // return the first call's counts.
  UvmCounts stop();

  ~UvmCounters();  // stops, if stop() was not called
  UvmCounters(const UvmCounters&) = delete;
  UvmCounters& operator=(const UvmCounters&) = delete;

 private:
  UvmCounters();
  void begin();
  std::unique_ptr<UvmCollector> collector_;
  UvmCounts result_;  // stop()'s answer once stopped; before that, whether start() could count
  bool stopped_ = false;
};

}  // namespace sdpa
