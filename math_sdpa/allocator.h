// allocator.h: the one interface through which the path allocates every tensor.
//
// The hang under study lives in unified memory, so where memory comes from is a first-class
// setting (--alloc):
//   managed  cudaMallocManaged, the default: the unified memory the harness is about
//   device   cudaMalloc, what PyTorch's caching allocator really uses
//   async    stream-ordered allocation (fix 4): cudaMallocAsync from the device's pool, ordered on
//            the path's stream (--async-pool stream, fix 4's design), or cudaMallocFromPoolAsync
//            from a pool of our own, each allocation synchronised on its stream (private)
//   host     cudaHostAlloc, pinned and mapped: host memory the GPU reads over the bus
//   system   plain host memory (aligned_alloc) used by the GPU directly, where the device reports
//            pageableMemoryAccess (DGX Spark does); elsewhere the run is waived (exit 6)
//   vmm      one reserved virtual range that grows by mapping physical memory at its end
//            (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess), as PyTorch's caching
//            allocator does with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
//
// PyTorch never gives freed memory back to the driver during a run: its caching allocator keeps
// the block for the next tensor that fits. With AllocatorOptions::caching (--alloc-timing
// per-call) make_allocator puts the same model in front of device memory, and vmm memory is
// always handed out that way; memory from a pluggable allocator (managed, host, system) or from
// the cudaMallocAsync backend (async) is freed at once, as PyTorch frees it through those.
//
// Managed, host and system memory can be oversubscribed, and oversubscribing unified memory can
// hang a shared GPU for every user; so before each such allocation the allocator checks the
// request, with what it already handed out, against 90% of the memory that was free when it
// was created (cudaMemGetInfo's free memory for managed memory on a discrete GPU; the host's
// MemAvailable on an integrated GPU such as GB10, where cudaMemGetInfo does not see memory the
// OS could reclaim, and for host and system memory), and refuses (RefusedError, exit 8) unless
// the user passed --allow-oversubscription. device and async memory cannot oversubscribe: an
// oversized request fails in cudaMalloc with a CUDA error.
//
// The interface is host-only (no CUDA types), so the CLI and printers can name allocation kinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

struct CUstream_st;  // cudaStream_t, named without the CUDA headers

namespace sdpa {

enum class AllocKind { managed, device, async, host, system, vmm };
const char* alloc_kind_name(AllocKind k);  // defined with the other setting names (path_settings.cpp)

// Which stream-ordered allocator `async` memory comes from.
enum class AsyncPool {
  private_pool,  // a pool of our own with a stream of its own, each allocation synchronised
  stream,        // cudaMallocAsync from the device's pool, ordered on the path's stream
};
const char* async_pool_name(AsyncPool p);

// Whether the host may read the memory directly (scenario 4's host touches, scenario 2's read).
inline bool host_accessible(AllocKind k) {
  return k == AllocKind::managed || k == AllocKind::host || k == AllocKind::system;
}
// Whether its pages migrate between host and GPU, so that cudaMemAdvise and cudaMemPrefetchAsync
// act on it and scenario 2 can move the scores away from the GPU.
inline bool migratable(AllocKind k) { return k == AllocKind::managed || k == AllocKind::system; }

struct AllocationRecord {
  std::string what;  // tensor name, e.g. "scores"
  size_t bytes = 0;
  uintptr_t address = 0;
  AllocKind kind = AllocKind::managed;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes, const std::string& what) = 0;
  virtual void release(void* ptr) = 0;
  virtual AllocKind kind() const = 0;
  // The stream allocations and releases are ordered on from now on (the path's, once it exists;
  // null: none). Only the stream-ordered allocator uses it.
  virtual void order_on(CUstream_st* /*stream*/) {}
  // The first kMaxAllocationRecords allocations (a run of many layers and steps makes millions).
  const std::vector<AllocationRecord>& records() const { return records_; }
  size_t allocations_made() const { return allocations_made_; }  // all of them, listed or not
  size_t live_allocations() const { return live_; }
  size_t live_bytes() const { return live_bytes_; }
  size_t peak_live_bytes() const { return peak_live_bytes_; }
  // What it holds from the driver: the live bytes, for an allocator that frees at once; with a
  // cache (PyTorch's model), the blocks it keeps for reuse as well.
  virtual size_t reserved_bytes() const { return live_bytes_; }
  virtual size_t peak_reserved_bytes() const { return peak_live_bytes_; }

  static constexpr size_t kMaxAllocationRecords = 1024;

 protected:
  void note_allocation(void* p, size_t bytes, const std::string& what);
  void note_release(void* p);
  std::vector<AllocationRecord> records_;
  std::vector<std::pair<void*, size_t>> live_sizes_;
  size_t allocations_made_ = 0;
  size_t live_ = 0;
  size_t live_bytes_ = 0;
  size_t peak_live_bytes_ = 0;
};

struct AllocatorOptions {
  bool allow_oversubscription = false;
  AsyncPool async_pool = AsyncPool::private_pool;  // for AllocKind::async
  double guard_fraction = 0.9;  // of the free memory measured at creation
  // PyTorch's caching-allocator model in front of device memory: a freed block is kept and given to
  // the next tensor it fits instead of going back to the driver (--alloc-timing per-call). vmm
  // memory is always managed that way; the other kinds never are (see above).
  bool caching = false;
};

// Throws WaivedError when the device cannot provide `kind` (system memory without
// pageableMemoryAccess, managed memory without managedMemory, async without memory pools).
std::unique_ptr<Allocator> make_allocator(AllocKind kind, const AllocatorOptions& options);

// Memory a managed allocation may use: cudaMemGetInfo's free memory on a discrete GPU, the
// host's MemAvailable on an integrated one.
size_t managed_memory_available();
size_t host_memory_available();  // /proc/meminfo's MemAvailable

// An owned allocation from an Allocator; moves, never copies.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Allocator& allocator, size_t bytes, const std::string& what)
      : allocator_(&allocator), ptr_(allocator.allocate(bytes, what)), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(allocator_, o.allocator_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) allocator_->release(ptr_);
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  bool from(const Allocator& a) const { return allocator_ == &a; }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace sdpa
