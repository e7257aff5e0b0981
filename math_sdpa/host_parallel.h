// host_parallel.h: work cut into items, computed on the CPUs this process may run on: the
// float64 reference's blocks of rows (reference.cpp) and the random inputs' blocks (layer_inputs.cpp).
//
// The items depend on the work alone, never on how many threads there are, so a result made of
// them has the same bits on one CPU or on twenty. Each thread takes the next item in turn, so
// faster cores (the DGX Spark's ten Cortex-X925 beside its ten Cortex-A725) take more of them.
#pragma once

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

namespace sdpa {

// The CPUs this process may run on (its affinity mask; taskset and cpusets narrow it), at most
// $SDPA_HOST_CPUS where that is set (a user's cap on the threads of the reference and of input
// generation; an emulator that runs threads side by side slowly sets it to 1), at least 1. A value
// that is not a whole number of CPUs throws InputError.
int host_cpus();

// Blocks of `block` in `n` (the last one may be shorter).
inline int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

struct NoScratch {};

// What the for_each_item calls a thread makes share, where that thread set it (ParallelWorkScope):
// how many threads they may use, a flag that stops them at their next item (they then throw
// ParallelCancelled), and the CPU time of the threads they start (the calling thread's own is its
// thread's clock).
struct ParallelWork {
  int max_threads = 0;  // at most this many threads (0: host_cpus())
  std::atomic<bool> cancel{false};
  std::atomic<int64_t> started_threads_cpu_ns{0};
};
struct ParallelCancelled : std::runtime_error {
  ParallelCancelled() : std::runtime_error("cancelled") {}
};
// The calling thread's ParallelWork, or null.
ParallelWork*& parallel_work();
class ParallelWorkScope {
 public:
  explicit ParallelWorkScope(ParallelWork& work) : saved_(parallel_work()) { parallel_work() = &work; }
  ~ParallelWorkScope() { parallel_work() = saved_; }
  ParallelWorkScope(const ParallelWorkScope&) = delete;
  ParallelWorkScope& operator=(const ParallelWorkScope&) = delete;

 private:
  ParallelWork* saved_;
};

// This thread's CPU time, in nanoseconds.
inline int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// work(item, scratch) for every item in [0, items), on up to host_cpus() threads (the calling
// thread one of them), each with a Scratch of its own, the items taken in order. The first
// exception stops the others before their next item and is rethrown here once all of them have
// stopped; so is ParallelCancelled where the calling thread's ParallelWork was cancelled.
template <class Scratch, class Work>
void for_each_item(int64_t items, const Work& work) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  ParallelWork* const shared = parallel_work();
  const auto cancelled = [shared] { return shared && shared->cancel.load(); };
  auto run = [&] {
    try {
      Scratch scratch;
      // Stopped before an item is taken, never after: every item taken is computed (a later item
      // may wait for an earlier one, as the reference's backward blocks wait for their turn).
      for (int64_t i = 0; !stop && !cancelled() && (i = next++) < items;) work(i, scratch);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      stop = true;
    }
  };
  auto run_started = [&] {
    const int64_t cpu0 = shared ? thread_cpu_ns() : 0;
    run();
    if (shared) shared->started_threads_cpu_ns += thread_cpu_ns() - cpu0;
  };
  std::vector<std::thread> threads;
  const int64_t count = std::min<int64_t>(items, shared && shared->max_threads > 0 ? shared->max_threads : host_cpus());
  for (int64_t t = 1; t < count; ++t) {
    try {
      threads.emplace_back(run_started);
    } catch (const std::system_error&) {
      break;  // fewer threads: the same items, the same result
    }
  }
  run();
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  if (cancelled()) throw ParallelCancelled();
}

}  // namespace sdpa
