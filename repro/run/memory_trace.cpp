// memory_trace.cpp
#include "repro/run/memory_trace.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "math_sdpa/cuda_check.h"
#include "math_sdpa/host_memory.h"

namespace sdpa {

MemoryTracer::MemoryTracer(const Allocator& allocator, StageLogger& log, MemoryMeasured& into, bool write_lines)
    : allocator_(allocator), log_(log), into_(into), write_lines_(write_lines) {}

MemoryTraceSample MemoryTracer::read(const char* stage) {
  MemoryTraceSample m;
  m.step = position_.step;
  m.layer = position_.layer;
  m.stage = stage;
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  m.gpu_free = static_cast<int64_t>(free_bytes);
  const HostMemory host = read_host_memory();
  m.mem_available = host.available;
  m.mem_free = host.free;
  m.cached = host.cached;
  m.rss_file = host.rss_file;
  m.live_bytes = static_cast<int64_t>(allocator_.live_bytes());
  m.reserved_bytes = static_cast<int64_t>(allocator_.reserved_bytes());
  into_.min_gpu_free = std::min(into_.min_gpu_free, m.gpu_free);
  into_.min_mem_available = std::min(into_.min_mem_available, m.mem_available);
  return m;
}

void MemoryTracer::stage_begin(Stage stage, const std::string&, void*) {
  const MemoryTraceSample m = read(stage_name(stage));
  ++into_.trace_samples;
  if (into_.trace.size() < MemoryMeasured::kMaxTraceSamples) into_.trace.push_back(m);
  if (!write_lines_) return;
  char line[384];
  std::snprintf(line, sizeof line,
                "[MEMORY] step=%d layer=%d stage=%s mem_available=%lld mem_free=%lld cached=%lld rss_file=%lld gpu_free=%lld "
                "live=%lld reserved=%lld",
                m.step, m.layer, m.stage.c_str(), static_cast<long long>(m.mem_available), static_cast<long long>(m.mem_free),
                static_cast<long long>(m.cached), static_cast<long long>(m.rss_file), static_cast<long long>(m.gpu_free),
                static_cast<long long>(m.live_bytes), static_cast<long long>(m.reserved_bytes));
  log_.write(line);
}

void MemoryTracer::sample(const char* where) { read(where); }

}  // namespace sdpa
