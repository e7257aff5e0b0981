// allocator.cpp: the five allocators and the oversubscription guard.
#include "allocator.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cuda_check.h"
#include "errors.h"

namespace sdpa {

namespace {

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1u << 30));
  return buf;
}

int device_attribute(cudaDeviceAttr attr) {
  int device = 0, value = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

// Refuses a request that, with what is outstanding, exceeds the budget (see allocator.h).
class OversubscriptionGuard {
 public:
  OversubscriptionGuard(const AllocatorOptions& o, size_t available, const char* memory)
      : enabled_(!o.allow_oversubscription),
        budget_(static_cast<size_t>(o.guard_fraction * static_cast<double>(available))),
        memory_(memory) {}
  void check(size_t outstanding, size_t bytes, const std::string& what) const {
    if (enabled_ && outstanding + bytes > budget_) {
      throw RefusedError("refusing to allocate " + gib(bytes) + " of " + memory_ + " for " + what + ": with the " +
                         gib(outstanding) + " already allocated it exceeds 90% of the memory free (" + gib(budget_) +
                         " allowed); oversubscribing unified memory can hang the GPU (--allow-oversubscription "
                         "overrides)");
    }
  }

 private:
  bool enabled_;
  size_t budget_;
  const char* memory_;
};

class ManagedAllocator : public Allocator {
 public:
  explicit ManagedAllocator(const AllocatorOptions& o) : guard_(o, managed_memory_available(), "managed memory") {
    if (!device_attribute(cudaDevAttrManagedMemory)) throw WaivedError("this GPU does not support managed memory");
  }
  void* allocate(size_t bytes, const std::string& what) override {
    guard_.check(live_bytes_, bytes, what);
    void* p = nullptr;
    CUDA_CHECK(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal));
    note_allocation(p, bytes, what);
    return p;
  }
  void release(void* p) override {
    note_release(p);
    cudaFree(p);  // release must not throw (destructors); a failure here surfaces at the next check
  }
  AllocKind kind() const override { return AllocKind::managed; }

 private:
  OversubscriptionGuard guard_;
};

class DeviceMemAllocator : public Allocator {
 public:
  void* allocate(size_t bytes, const std::string& what) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    note_allocation(p, bytes, what);
    return p;
  }
  void release(void* p) override {
    note_release(p);
    cudaFree(p);
  }
  AllocKind kind() const override { return AllocKind::device; }
};

// Fix 4's allocator: a stream-ordered pool of our own (not the device's default pool, so its
// settings are ours), allocated from and freed on a private stream that is synchronised at once,
// so the memory is usable from any stream of the path when allocate() returns.
class AsyncPoolAllocator : public Allocator {
 public:
  AsyncPoolAllocator() {
    if (!device_attribute(cudaDevAttrMemoryPoolsSupported)) {
      throw WaivedError("this GPU does not support stream-ordered memory pools (cudaMallocAsync)");
    }
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    // Keep freed memory in the pool: the workspace is allocated once, and a soak run must not
    // see the pool grow and shrink.
    uint64_t keep_all = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~AsyncPoolAllocator() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaMemPoolDestroy(pool_);
  }
  void* allocate(size_t bytes, const std::string& what) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, pool_, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    note_allocation(p, bytes, what);
    return p;
  }
  void release(void* p) override {
    note_release(p);
    cudaFreeAsync(p, stream_);
    cudaStreamSynchronize(stream_);
  }
  AllocKind kind() const override { return AllocKind::async; }

 private:
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

class PinnedHostAllocator : public Allocator {
 public:
  explicit PinnedHostAllocator(const AllocatorOptions& o) : guard_(o, host_memory_available(), "pinned host memory") {}
  void* allocate(size_t bytes, const std::string& what) override {
    guard_.check(live_bytes_, bytes, what);
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    note_allocation(p, bytes, what);
    return p;
  }
  void release(void* p) override {
    note_release(p);
    cudaFreeHost(p);
  }
  AllocKind kind() const override { return AllocKind::host; }

 private:
  OversubscriptionGuard guard_;
};

class SystemAllocator : public Allocator {
 public:
  explicit SystemAllocator(const AllocatorOptions& o) : guard_(o, host_memory_available(), "system memory") {
    if (!device_attribute(cudaDevAttrPageableMemoryAccess)) {
      throw WaivedError("--alloc system needs a GPU that reads pageable host memory directly "
                        "(pageableMemoryAccess, as on DGX Spark); this one does not");
    }
  }
  void* allocate(size_t bytes, const std::string& what) override {
    guard_.check(live_bytes_, bytes, what);
    constexpr size_t kPage = 4096;
    void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
    if (!p) throw RefusedError("out of host memory allocating " + gib(bytes) + " for " + what);
    note_allocation(p, bytes, what);
    return p;
  }
  void release(void* p) override {
    note_release(p);
    std::free(p);
  }
  AllocKind kind() const override { return AllocKind::system; }

 private:
  OversubscriptionGuard guard_;
};

}  // namespace

void Allocator::note_allocation(void* p, size_t bytes, const std::string& what) {
  ++live_;
  live_bytes_ += bytes;
  live_sizes_.push_back({p, bytes});
  records_.push_back({what, bytes, reinterpret_cast<uintptr_t>(p), kind()});
}

void Allocator::note_release(void* p) {
  for (auto& entry : live_sizes_) {
    if (entry.first == p) {
      live_bytes_ -= entry.second;
      entry = live_sizes_.back();
      live_sizes_.pop_back();
      --live_;
      return;
    }
  }
}

size_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  size_t kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

size_t managed_memory_available() {
  if (device_attribute(cudaDevAttrIntegrated)) return host_memory_available();
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

// cudaMallocAsync from the device's current pool, ordered on the stream the path gives it (as
// PyTorch's cudaMallocAsync backend allocates on the current stream). Before a stream is given,
// and after it is taken back, on the legacy stream and waited for.
class StreamOrderedAllocator : public Allocator {
 public:
  StreamOrderedAllocator() {
    if (!device_attribute(cudaDevAttrMemoryPoolsSupported)) {
      throw WaivedError("this GPU does not support stream-ordered memory pools (cudaMallocAsync)");
    }
  }
  void order_on(cudaStream_t stream) override { stream_ = stream; }
  void* allocate(size_t bytes, const std::string& what) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocAsync(&p, bytes, stream_ ? stream_ : cudaStreamLegacy));
    if (!stream_) CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    note_allocation(p, bytes, what);
    return p;
  }
  void release(void* p) override {
    note_release(p);
    if (stream_) {
      cudaFreeAsync(p, stream_);
    } else {
      cudaFreeAsync(p, cudaStreamLegacy);
      cudaStreamSynchronize(cudaStreamLegacy);
    }
  }
  AllocKind kind() const override { return AllocKind::async; }

 private:
  cudaStream_t stream_ = nullptr;
};

std::unique_ptr<Allocator> make_allocator(AllocKind kind, const AllocatorOptions& options) {
  switch (kind) {
    case AllocKind::managed: return std::make_unique<ManagedAllocator>(options);
    case AllocKind::device: return std::make_unique<DeviceMemAllocator>();
    case AllocKind::async:
      if (options.async_pool == AsyncPool::stream) return std::make_unique<StreamOrderedAllocator>();
      return std::make_unique<AsyncPoolAllocator>();
    case AllocKind::host: return std::make_unique<PinnedHostAllocator>(options);
    case AllocKind::system: return std::make_unique<SystemAllocator>(options);
  }
  return nullptr;
}

}  // namespace sdpa
