// context_load.h: the ballast and the host load of a run, running (context.h says what they are).
//
// The ballast is memory held by the rest of the model: allocated before the path's first tensor,
// written once so that its pages exist (managed memory that nobody wrote takes no memory), and,
// with --ballast-touch, touched while the path runs: a host thread reads and writes a byte of every
// page, a GPU stream reads one word of every page, each pass after pass until the run ends, so that
// its pages keep moving between host and GPU and compete with the path's. The host load is
// --host-load threads that do what a data loader does: write and read a pageable buffer, copy it
// into a pinned one and from there to the GPU on a stream of their own.
//
// Both stop and free everything in their destructors. Errors inside their threads are kept, not
// thrown: the run reports them (error()) after the path ran.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "allocator.h"
#include "context.h"
#include "memory_plan.h"

namespace sdpa {

// The memory there is, read before anything of the run is allocated (memory_plan.h).
MemoryFacts query_memory_facts();

class Ballast {
 public:
  // Allocates `bytes` of spec.kind through an allocator of its own (`options` as the path's:
  // the guard and --allow-oversubscription), writes it, and starts the touchers spec.touch asks for.
  Ballast(const BallastSpec& spec, int64_t bytes, const AllocatorOptions& options);
  ~Ballast();
  Ballast(const Ballast&) = delete;
  Ballast& operator=(const Ballast&) = delete;
  const void* data() const { return buffer_.get(); }
  int64_t bytes() const { return static_cast<int64_t>(buffer_.bytes()); }
  // Stops the touchers (also done by the destructor); the passes below are final then.
  void stop();
  int64_t host_passes() const { return host_passes_; }
  int64_t gpu_passes() const { return gpu_passes_; }
  std::string error() const;

 private:
  void touch_from_host();
  void touch_from_gpu();
  BallastSpec spec_;
  std::unique_ptr<Allocator> allocator_;
  DeviceBuffer buffer_;
  cudaStream_t stream_ = nullptr;
  unsigned long long* sink_ = nullptr;  // the GPU touch's sums (device memory)
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> host_passes_{0}, gpu_passes_{0};
  std::vector<std::thread> threads_;
  mutable std::mutex error_mutex_;
  std::string error_;
};

class HostLoad {
 public:
  // Returns once every thread holds its buffers (or failed to get them): the memory they take is
  // taken before the path's first call, not in the middle of it.
  explicit HostLoad(int threads);
  ~HostLoad();
  HostLoad(const HostLoad&) = delete;
  HostLoad& operator=(const HostLoad&) = delete;
  void stop();
  int64_t iterations() const { return iterations_; }
  std::string error() const;

 private:
  void work(int index);
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> iterations_{0};
  std::atomic<uint64_t> checksum_{0};
  std::atomic<int> ready_{0};  // threads that hold their buffers, or gave up
  std::vector<std::thread> threads_;
  mutable std::mutex error_mutex_;
  std::string error_;
};

}  // namespace sdpa
