// host_parallel.cpp
#include "math_sdpa/host_parallel.h"

#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "math_sdpa/errors.h"

namespace sdpa {

ParallelWork*& parallel_work() {
  thread_local ParallelWork* work = nullptr;
  return work;
}

namespace {

// $SDPA_HOST_CPUS, where set: at most this many CPUs for the host's own work (0: no limit).
int host_cpus_limit() {
  // Read at every call (once per parallel loop: nothing next to the work it sizes).
  const char* text = std::getenv("SDPA_HOST_CPUS");
  if (!text || !*text) return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text, &end, 10);
  if (*text < '0' || *text > '9' || errno != 0 || *end != '\0' || n < 1 || n > 1 << 20) {
    throw InputError(std::string("SDPA_HOST_CPUS=") + text + ": expected a whole number of CPUs, 1 or more");
  }
  return static_cast<int>(n);
}

}  // namespace

int host_cpus() {
  cpu_set_t cpus;
  int count = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus)
                                                           : static_cast<int>(std::thread::hardware_concurrency());
  if (const int limit = host_cpus_limit(); limit > 0) count = std::min(count, limit);
  return std::max(1, count);
}

}  // namespace sdpa
