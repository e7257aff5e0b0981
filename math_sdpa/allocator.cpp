// allocator.cpp: managed and device allocators, and the oversubscription guard.
#include "allocator.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cuda_check.h"
#include "errors.h"

namespace sdpa {

namespace {

size_t host_mem_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

class ManagedAllocator : public Allocator {
 public:
  explicit ManagedAllocator(const AllocatorOptions& o)
      : options_(o), budget_(static_cast<size_t>(o.guard_fraction * static_cast<double>(managed_memory_available()))) {}
  ~ManagedAllocator() override = default;

  void* allocate(size_t bytes, const std::string& what) override {
    if (!options_.allow_oversubscription && outstanding_ + bytes > budget_) {
      throw RefusedError("refusing to allocate " + gib(bytes) + " of managed memory for " + what + ": with the " +
                         gib(outstanding_) + " already allocated it exceeds 90% of the memory free (" +
                         gib(budget_) + " allowed); oversubscribing unified memory can hang the GPU "
                         "(--allow-oversubscription overrides)");
    }
    void* p = nullptr;
    CUDA_CHECK(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal));
    outstanding_ += bytes;
    ++live_;
    sizes_.push_back({p, bytes});
    records_.push_back({what, bytes, reinterpret_cast<uintptr_t>(p), AllocKind::managed});
    return p;
  }
  void release(void* p) override {
    for (auto& entry : sizes_) {
      if (entry.first == p) {
        outstanding_ -= entry.second;
        entry = sizes_.back();
        sizes_.pop_back();
        break;
      }
    }
    --live_;
    cudaFree(p);  // release must not throw (destructors); a failure here surfaces at the next check
  }
  AllocKind kind() const override { return AllocKind::managed; }

 private:
  AllocatorOptions options_;
  size_t budget_;
  size_t outstanding_ = 0;
  std::vector<std::pair<void*, size_t>> sizes_;
};

class DeviceMemAllocator : public Allocator {
 public:
  void* allocate(size_t bytes, const std::string& what) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    ++live_;
    records_.push_back({what, bytes, reinterpret_cast<uintptr_t>(p), AllocKind::device});
    return p;
  }
  void release(void* p) override {
    --live_;
    cudaFree(p);
  }
  AllocKind kind() const override { return AllocKind::device; }
};

}  // namespace

size_t managed_memory_available() {
  int device = 0, integrated = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device));
  if (integrated) return host_mem_available();
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

std::unique_ptr<Allocator> make_allocator(AllocKind kind, const AllocatorOptions& options) {
  if (kind == AllocKind::managed) return std::make_unique<ManagedAllocator>(options);
  return std::make_unique<DeviceMemAllocator>();
}

}  // namespace sdpa
