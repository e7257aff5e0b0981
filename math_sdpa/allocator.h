// allocator.h: the one interface through which the path allocates every tensor.
//
// The hang under study lives in unified memory, so where memory comes from is a first-class
// setting: `managed` (cudaMallocManaged, the default) and `device` (cudaMalloc, what PyTorch's
// caching allocator really uses). Scenario 4's fix swaps in a stream-ordered pool here.
//
// Managed memory can be oversubscribed, and oversubscribing it can hang a shared GPU for every
// user; so before any managed allocation the allocator checks the request, together with what
// it has already handed out, against 90% of the memory that was free when it was created, and
// refuses (RefusedError, exit 8) unless the user passed --allow-oversubscription. On an
// integrated GPU (DGX Spark) cudaMemGetInfo does not see memory the OS could reclaim, so the
// host's MemAvailable is the measure there.
//
// The interface is host-only (no CUDA types), so the CLI and printers can name allocation kinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sdpa {

enum class AllocKind { managed, device };
inline const char* alloc_kind_name(AllocKind k) { return k == AllocKind::managed ? "managed" : "device"; }

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
  const std::vector<AllocationRecord>& records() const { return records_; }
  size_t live_allocations() const { return live_; }

 protected:
  std::vector<AllocationRecord> records_;
  size_t live_ = 0;
};

struct AllocatorOptions {
  bool allow_oversubscription = false;
  double guard_fraction = 0.9;  // of the free memory measured at creation
};

std::unique_ptr<Allocator> make_allocator(AllocKind kind, const AllocatorOptions& options);

// Memory a managed allocation may use: cudaMemGetInfo's free memory on a discrete GPU, the
// host's MemAvailable on an integrated one.
size_t managed_memory_available();

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
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace sdpa
