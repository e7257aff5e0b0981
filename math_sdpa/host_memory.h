// host_memory.h: the host's memory as the kernel counts it (/proc/meminfo) and this process's
// file-backed resident memory (/proc/self/status), the facts a unified-memory machine needs.
//
// On GB10 the page cache and the GPU's allocations live in one pool. MemAvailable counts the
// clean page cache as available (the kernel can drop it), so a plan judged by MemAvailable fits
// although the pool may have to give up cached file pages, the model's memory-mapped weights
// among them, for each allocation of the GPU's: MemFree is what is there without reclaiming
// anything, Cached what the page cache holds, RssFile how much of that this process has mapped.
// Host-only: read by the memory plan, the memory trace and the hang classification alike.
#pragma once

#include <cstdint>
#include <string>

namespace sdpa {

struct HostMemory {
  int64_t total = -1;      // MemTotal, bytes; -1 where it cannot be read
  int64_t free = -1;       // MemFree
  int64_t available = -1;  // MemAvailable
  int64_t cached = -1;     // Cached: the page cache
  int64_t rss_file = -1;   // this process's RssFile
};

HostMemory read_host_memory();
// /proc/meminfo's and /proc/self/status's text read into a HostMemory (tests give their own).
HostMemory parse_host_memory(const std::string& meminfo, const std::string& status);
// "MemFree 38.20 GB, MemAvailable 98.10 GB, Cached 60.00 GB, RssFile 0.00 GB"
std::string host_memory_text(const HostMemory& m);

}  // namespace sdpa
