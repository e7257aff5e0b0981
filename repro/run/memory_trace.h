// memory_trace.h: what memory the run holds, stage by stage (--memory-trace; scenario 6).
//
// At the start of every stage (so after each alloc_* stage, at the next stage's start) it reads
// the host's MemAvailable (/proc/meminfo, which NVIDIA's DGX Spark guidance says to judge by),
// MemFree and Cached (what there is without reclaiming the page cache, and the cache itself: on
// GB10 the page cache shares the GPU's pool), this process's file-backed resident memory (the
// mapped weights' pages), the GPU's free memory (cudaMemGetInfo) and what the path's allocator
// holds, and writes one
// [MEMORY] line to the stage log, which the supervisor fsyncs into --log-file: after a frozen
// machine's power cycle the last line on disk says how much memory there was. Without the trace
// the peaks are still measured (the allocator's own counts, and the GPU's free memory at each
// call's end).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "math_sdpa/allocator.h"
#include "math_sdpa/stage.h"
#include "math_sdpa/stage_log.h"

namespace sdpa {

struct MemoryTraceSample {
  int step = 1, layer = 1;
  std::string stage;
  int64_t mem_available = 0;  // bytes
  int64_t mem_free = 0;
  int64_t cached = 0;         // the page cache
  int64_t rss_file = 0;       // this process's file-backed resident memory
  int64_t gpu_free = 0;
  int64_t live_bytes = 0;      // the path's tensors
  int64_t reserved_bytes = 0;  // what its allocator holds from the driver
};

// The measured side of the memory plan.
struct MemoryMeasured {
  int64_t gpu_free_at_start = 0;  // before the run allocated anything
  int64_t mem_available_at_start = 0;
  int64_t min_gpu_free = 0;       // the least seen (at stages with the trace, else at each call's end)
  int64_t min_mem_available = 0;
  int64_t peak_live_bytes = 0;    // the path's allocator
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;
  std::vector<MemoryTraceSample> trace;  // the first kMaxTraceSamples
  int64_t trace_samples = 0;            // all of them
  static constexpr size_t kMaxTraceSamples = 20000;
  // The GPU memory the run took at its fullest, as cudaMemGetInfo saw it.
  int64_t gpu_used_peak() const { return gpu_free_at_start - min_gpu_free; }
};

class MemoryTracer : public StageObserver {
 public:
  // `log` gets the [MEMORY] lines (it may have --log off: the lines are written all the same).
  MemoryTracer(const Allocator& allocator, StageLogger& log, MemoryMeasured& into, bool write_lines);
  void call_position(const CallPosition& position) override { position_ = position; }
  void stage_begin(Stage stage, const std::string& detail, void* stream) override;
  void stage_end(Stage, const std::string&, void*) override {}
  // One sample outside any stage (a call's end), into the minima only.
  void sample(const char* where);

 private:
  MemoryTraceSample read(const char* stage);
  const Allocator& allocator_;
  StageLogger& log_;
  MemoryMeasured& into_;
  bool write_lines_;
  CallPosition position_;
};

}  // namespace sdpa
