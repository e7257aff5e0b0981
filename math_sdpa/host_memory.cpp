// host_memory.cpp: /proc/meminfo and /proc/self/status, read.
#include "host_memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace sdpa {

namespace {

std::string file_text(const char* path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The "Key:   123 kB" line's value in bytes, or -1.
int64_t kib_field(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
    long long kib = -1;
    if (std::sscanf(line.c_str() + key.size() + 1, "%lld", &kib) != 1) return -1;
    return kib * 1024;
  }
  return -1;
}

std::string gb(int64_t bytes) {
  if (bytes < 0) return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

HostMemory parse_host_memory(const std::string& meminfo, const std::string& status) {
  HostMemory m;
  m.total = kib_field(meminfo, "MemTotal");
  m.free = kib_field(meminfo, "MemFree");
  m.available = kib_field(meminfo, "MemAvailable");
  m.cached = kib_field(meminfo, "Cached");
  m.rss_file = kib_field(status, "RssFile");
  return m;
}

HostMemory read_host_memory() { return parse_host_memory(file_text("/proc/meminfo"), file_text("/proc/self/status")); }

std::string host_memory_text(const HostMemory& m) {
  return "MemFree " + gb(m.free) + ", MemAvailable " + gb(m.available) + ", Cached " + gb(m.cached) + ", RssFile " +
         gb(m.rss_file);
}

}  // namespace sdpa
