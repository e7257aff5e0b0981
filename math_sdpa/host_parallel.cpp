// host_parallel.cpp
#include "math_sdpa/host_parallel.h"

#include <sched.h>

namespace sdpa {

ParallelWork*& parallel_work() {
  thread_local ParallelWork* work = nullptr;
  return work;
}

int host_cpus() {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) return std::max(1, CPU_COUNT(&cpus));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace sdpa
