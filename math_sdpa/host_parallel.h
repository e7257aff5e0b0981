// host_parallel.h: work cut into items, computed on the CPUs this process may run on: the
// float64 reference's blocks of rows (reference.cpp) and the random inputs' blocks (problem.cpp).
//
// The items depend on the work alone, never on how many threads there are, so a result made of
// them has the same bits on one CPU or on twenty. Each thread takes the next item in turn, so
// faster cores (the DGX Spark's ten Cortex-X925 beside its ten Cortex-A725) take more of them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace sdpa {

// The CPUs this process may run on (its affinity mask; taskset and cpusets narrow it), at least 1.
int host_cpus();

// Blocks of `block` in `n` (the last one may be shorter).
inline int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

struct NoScratch {};

// work(item, scratch) for every item in [0, items), on up to host_cpus() threads (the calling
// thread one of them), each with a Scratch of its own. The first exception stops the others before
// their next item and is rethrown here once all of them have stopped.
template <class Scratch, class Work>
void for_each_item(int64_t items, const Work& work) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto run = [&] {
    try {
      Scratch scratch;
      for (int64_t i = next++; i < items && !stop; i = next++) work(i, scratch);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      stop = true;
    }
  };
  std::vector<std::thread> threads;
  const int64_t count = std::min<int64_t>(items, host_cpus());
  for (int64_t t = 1; t < count; ++t) {
    try {
      threads.emplace_back(run);
    } catch (const std::system_error&) {
      break;  // fewer threads: the same items, the same result
    }
  }
  run();
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace sdpa
