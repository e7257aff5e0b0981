// allocator.cpp: the six allocators (managed, device, async with its two pools, host, system,
// vmm), PyTorch's caching model in front of device memory (AllocatorOptions::caching), and the
// oversubscription guard.
#include "allocator.h"

#include <cuda.h>  // the driver's types only: its functions come through the runtime (see DriverVmmApi)
#include <cudaTypedefs.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>

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

// PyTorch's caching allocator rounds every request up to a multiple of 512 bytes (kMinBlockSize),
// 512 at least, so every block it hands out is 512-byte aligned.
constexpr size_t kBlockRound = 512;
size_t round_up(size_t bytes, size_t multiple) { return (bytes + multiple - 1) / multiple * multiple; }
size_t round_to_block(size_t bytes) { return bytes <= kBlockRound ? kBlockRound : round_up(bytes, kBlockRound); }

// The driver's virtual memory management calls, looked up through the runtime
// (cudaGetDriverEntryPointByVersion) instead of linked: the binary must load without libcuda.so,
// so that a machine without a driver still gets exit 7. Each pointer type names the CUDA version
// that introduced the function's current signature, and is looked up at that version.
struct DriverVmmApi {
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  std::string missing;  // the first function the driver did not provide; empty when it has them all
};

template <class Function>
void find_driver_function(Function& function, const char* symbol, unsigned version, std::string& missing) {
  void* found = nullptr;
  cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &found, version, cudaEnableDefault, &result) == cudaSuccess &&
      result == cudaDriverEntryPointSuccess && found) {
    function = reinterpret_cast<Function>(found);
  } else {
    cudaGetLastError();  // a failed lookup must not surface at the next kernel launch's check
    if (missing.empty()) missing = symbol;
  }
}

// Looked up once per process, after the runtime is initialised (VmmAllocator's constructor).
const DriverVmmApi& driver_vmm_api() {
  static const DriverVmmApi api = [] {
    DriverVmmApi a;
    find_driver_function(a.cuGetErrorName, "cuGetErrorName", 6000, a.missing);
    find_driver_function(a.cuDeviceGet, "cuDeviceGet", 2000, a.missing);
    find_driver_function(a.cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000, a.missing);
    find_driver_function(a.cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 10020, a.missing);
    find_driver_function(a.cuMemAddressReserve, "cuMemAddressReserve", 10020, a.missing);
    find_driver_function(a.cuMemAddressFree, "cuMemAddressFree", 10020, a.missing);
    find_driver_function(a.cuMemCreate, "cuMemCreate", 10020, a.missing);
    find_driver_function(a.cuMemRelease, "cuMemRelease", 10020, a.missing);
    find_driver_function(a.cuMemMap, "cuMemMap", 10020, a.missing);
    find_driver_function(a.cuMemUnmap, "cuMemUnmap", 10020, a.missing);
    find_driver_function(a.cuMemSetAccess, "cuMemSetAccess", 10020, a.missing);
    return a;
  }();
  return api;
}

// CUDA_CHECK for driver calls. cuda_check.h formats runtime and cuBLAS failures only, and keeps the
// running stage to itself; so check_cuda formats a stand-in runtime failure (file, line, stage,
// call) and the driver's code takes the stand-in's place in the message.
[[noreturn]] void throw_driver_error(CUresult status, const char* call, const char* file, int line) {
  const char* name = nullptr;
  const auto& api = driver_vmm_api();
  if (!api.cuGetErrorName || api.cuGetErrorName(status, &name) != CUDA_SUCCESS || !name) name = "unknown CUresult";
  const std::string code = "code=" + std::to_string(static_cast<int>(status)) + "(" + name + ")";
  const cudaError_t stand_in = cudaErrorUnknown;
  const std::string stand_in_code =
      "code=" + std::to_string(static_cast<int>(stand_in)) + "(" + cudaGetErrorName(stand_in) + ")";
  std::string stage = "setup", message;
  try {
    check_cuda(stand_in, call, file, line);
  } catch (const CudaError& e) {
    stage = e.stage;
    message = e.what();
  }
  const size_t at = message.find(stand_in_code);
  if (at != std::string::npos) {
    message.replace(at, stand_in_code.size(), code);
  } else {
    message += " " + code;
  }
  throw CudaError(message, stage, name);
}

void check_driver(CUresult status, const char* call, const char* file, int line) {
  if (status != CUDA_SUCCESS) throw_driver_error(status, call, file, line);
}

#define DRIVER_CHECK(call) check_driver((call), #call, __FILE__, __LINE__)

// --alloc vmm: PyTorch's caching allocator with expandable_segments:True. One virtual range is
// reserved at creation and physical memory is mapped at its end as tensors need it, so the
// memory a run holds stays one contiguous segment instead of one cudaMalloc per block. Inside the
// mapped part, blocks are handed out best fit (smallest free block that holds the request, lowest
// address among equals, as PyTorch's block pool orders them) and split; freed blocks merge with
// free neighbours. Nothing is unmapped before destruction: PyTorch unmaps only on empty_cache().
// A freed block is handed out again at once, without waiting for the GPU, as PyTorch does for
// blocks used on one stream: work on the old tensor was queued before the new tensor's.
//
// No oversubscription guard, as for device memory: mapped memory is device memory, and the run's
// memory plan is checked before anything is allocated.
class VmmAllocator : public Allocator {
 public:
  VmmAllocator() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    // The driver calls below act on the current context: the runtime makes the device's primary
    // context current on its first call that needs one, so make that call now.
    CUDA_CHECK(cudaFree(nullptr));
    cu_ = &driver_vmm_api();
    if (!cu_->missing.empty()) {
      throw WaivedError("--alloc vmm needs the driver's virtual memory management API; this driver does not provide " +
                        cu_->missing);
    }
    CUdevice cu_device = 0;
    int supported = 0;
    DRIVER_CHECK(cu_->cuDeviceGet(&cu_device, device));
    DRIVER_CHECK(cu_->cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cu_device));
    if (!supported) {
      throw WaivedError("--alloc vmm needs a GPU that supports virtual memory management (cuMemCreate, cuMemMap); "
                        "this one does not");
    }
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = device;
    DRIVER_CHECK(cu_->cuMemGetAllocationGranularity(&granularity_, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    // Addresses cost nothing: with twice the device's memory reserved, the segment runs out of
    // physical memory long before it runs out of addresses (PyTorch reserves 1.125 times).
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    reservation_ = round_up(2 * total_bytes, granularity_);
    DRIVER_CHECK(cu_->cuMemAddressReserve(&base_, reservation_, 0, 0, 0));
  }
  VmmAllocator(const VmmAllocator&) = delete;
  VmmAllocator& operator=(const VmmAllocator&) = delete;
  ~VmmAllocator() override {
    // cudaFree waits for the device before it frees; cuMemUnmap does not, and a kernel still
    // using a block must not lose its pages.
    cudaDeviceSynchronize();
    for (const Mapping& m : mappings_) {
      cu_->cuMemUnmap(base_ + m.offset, m.bytes);
      cu_->cuMemRelease(m.handle);
    }
    cu_->cuMemAddressFree(base_, reservation_);
  }

  void* allocate(size_t bytes, const std::string& what) override {
    const size_t size = round_to_block(bytes);
    auto fit = free_.lower_bound({size, 0});
    if (fit == free_.end()) {
      grow(size);
      fit = free_.lower_bound({size, 0});
    }
    const size_t offset = fit->second;
    free_.erase(fit);
    Block& block = blocks_.at(offset);
    if (block.bytes > size) {
      blocks_.emplace(offset + size, Block{block.bytes - size, true});
      free_.insert({block.bytes - size, offset + size});
      block.bytes = size;
    }
    block.free = false;
    void* p = reinterpret_cast<void*>(base_ + offset);
    note_allocation(p, bytes, what);  // the tensor's own size: live bytes exclude the rounding
    return p;
  }
  void release(void* p) override {
    note_release(p);
    const auto block = blocks_.find(static_cast<size_t>(reinterpret_cast<CUdeviceptr>(p) - base_));
    if (block != blocks_.end() && !block->second.free) make_free(block);
  }
  AllocKind kind() const override { return AllocKind::vmm; }
  // The mapped bytes; nothing is unmapped during the run, so they are also the peak.
  size_t reserved_bytes() const override { return mapped_; }
  size_t peak_reserved_bytes() const override { return mapped_; }

 private:
  struct Block {
    size_t bytes;
    bool free;
  };
  struct Mapping {
    size_t offset;
    size_t bytes;
    CUmemGenericAllocationHandle handle;
  };
  using BlockMap = std::map<size_t, Block>;

  // Maps enough memory at the segment's end for a block of `size` bytes: when the last block is
  // free, the new memory extends it, as an expandable segment grows.
  void grow(size_t size) {
    const bool tail_free = !blocks_.empty() && blocks_.rbegin()->second.free;
    const size_t more = round_up(size - (tail_free ? blocks_.rbegin()->second.bytes : 0), granularity_);
    if (more > reservation_ - mapped_) {
      // What cuMemCreate would say if the device ran out first; the reservation makes that unlikely.
      check_driver(CUDA_ERROR_OUT_OF_MEMORY, "growing the vmm segment past its reserved addresses", __FILE__,
                   __LINE__);
    }
    map_at(mapped_, more);
    const size_t offset = mapped_;
    mapped_ += more;
    make_free(blocks_.emplace(offset, Block{more, false}).first);
  }

  // One physical allocation per growth (PyTorch maps 2 or 20 MiB pieces so that empty_cache can
  // unmap them one by one; nothing here is unmapped before the end).
  void map_at(size_t offset, size_t bytes) {
    CUmemGenericAllocationHandle handle = 0;
    DRIVER_CHECK(cu_->cuMemCreate(&handle, bytes, &prop_, 0));
    const CUdeviceptr at = base_ + offset;
    bool mapped = false;
    try {
      DRIVER_CHECK(cu_->cuMemMap(at, bytes, 0, handle, 0));
      mapped = true;
      CUmemAccessDesc access{};
      access.location = prop_.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      DRIVER_CHECK(cu_->cuMemSetAccess(at, bytes, &access, 1));
      mappings_.push_back({offset, bytes, handle});
    } catch (...) {
      // Leave the segment as it was, so that its end is still where the next growth maps.
      if (mapped) cu_->cuMemUnmap(at, bytes);
      cu_->cuMemRelease(handle);
      throw;
    }
  }

  // Frees `block` and merges it with its free neighbours, so that adjacent freed blocks can serve
  // one request of their total size.
  void make_free(BlockMap::iterator block) {
    block->second.free = true;
    const auto next = std::next(block);
    if (next != blocks_.end() && next->second.free) {
      free_.erase({next->second.bytes, next->first});
      block->second.bytes += next->second.bytes;
      blocks_.erase(next);
    }
    if (block != blocks_.begin()) {
      const auto previous = std::prev(block);
      if (previous->second.free) {
        free_.erase({previous->second.bytes, previous->first});
        previous->second.bytes += block->second.bytes;
        blocks_.erase(block);
        block = previous;
      }
    }
    free_.insert({block->second.bytes, block->first});
  }

  const DriverVmmApi* cu_ = nullptr;
  CUmemAllocationProp prop_{};
  size_t granularity_ = 0;
  CUdeviceptr base_ = 0;
  size_t reservation_ = 0;
  size_t mapped_ = 0;
  std::vector<Mapping> mappings_;
  BlockMap blocks_;                           // by offset; they tile [0, mapped_)
  std::set<std::pair<size_t, size_t>> free_;  // (bytes, offset) of the free blocks: best fit first
};

// PyTorch's caching allocator in front of device memory (--alloc device with
// AllocatorOptions::caching): a freed block is kept, not given back with cudaFree, and handed to
// the next request it fits; the driver gets the blocks back only when the allocator is destroyed.
// PyTorch would split a cached block larger than the request; these blocks come from separate
// cudaMalloc calls and are not split, so instead a block serves only requests of at least 80% of
// its size (at most a quarter of the request is wasted), best fit among those.
// records() and live_bytes() describe the tensors handed out; the inner device allocator's
// describe the blocks held from the driver, which reserved_bytes() reports.
// Caching applies to device memory only: managed, host and system memory reach PyTorch through a
// pluggable allocator and async memory through its cudaMallocAsync backend, both of which free at
// once, and vmm memory is cached already.
class CachingDeviceAllocator : public Allocator {
 public:
  CachingDeviceAllocator() : driver_(std::make_unique<DeviceMemAllocator>()) {}
  ~CachingDeviceAllocator() override {
    for (const auto& block : cached_) driver_->release(block.second);
  }
  void* allocate(size_t bytes, const std::string& what) override {
    const size_t size = round_to_block(bytes);
    void* p = nullptr;
    const auto fit = cached_.lower_bound(size);
    if (fit != cached_.end() && fit->first <= size + size / 4) {
      p = fit->second;
      in_use_.emplace(p, fit->first);
      cached_.erase(fit);
    } else {
      p = driver_->allocate(size, what);
      in_use_.emplace(p, size);
    }
    note_allocation(p, bytes, what);  // the tensor's own size, as the other allocators note it
    return p;
  }
  void release(void* p) override {
    note_release(p);
    const auto block = in_use_.find(p);
    if (block == in_use_.end()) return;
    cached_.emplace(block->second, p);
    in_use_.erase(block);
  }
  AllocKind kind() const override { return AllocKind::device; }
  size_t reserved_bytes() const override { return driver_->live_bytes(); }
  size_t peak_reserved_bytes() const override { return driver_->peak_live_bytes(); }

 private:
  std::unique_ptr<Allocator> driver_;
  std::unordered_map<void*, size_t> in_use_;  // block size of each tensor handed out
  std::multimap<size_t, void*> cached_;       // by block size
};

}  // namespace

void Allocator::note_allocation(void* p, size_t bytes, const std::string& what) {
  ++live_;
  ++allocations_made_;
  live_bytes_ += bytes;
  if (live_bytes_ > peak_live_bytes_) peak_live_bytes_ = live_bytes_;
  live_sizes_.push_back({p, bytes});
  if (records_.size() < kMaxAllocationRecords) records_.push_back({what, bytes, reinterpret_cast<uintptr_t>(p), kind()});
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
    case AllocKind::device:
      if (options.caching) return std::make_unique<CachingDeviceAllocator>();
      return std::make_unique<DeviceMemAllocator>();
    case AllocKind::async:
      if (options.async_pool == AsyncPool::stream) return std::make_unique<StreamOrderedAllocator>();
      return std::make_unique<AsyncPoolAllocator>();
    case AllocKind::host: return std::make_unique<PinnedHostAllocator>(options);
    case AllocKind::system: return std::make_unique<SystemAllocator>(options);
    case AllocKind::vmm: return std::make_unique<VmmAllocator>();
  }
  return nullptr;
}

}  // namespace sdpa
