// context_load.cpp: the ballast's and the host load's threads.
#include "context_load.h"

#include <algorithm>
#include <cstring>

#include "cuda_check.h"
#include "host_memory.h"
#include "kernels.h"

namespace sdpa {

namespace {

// A CUDA call inside a thread of the context: its error is kept, and the thread stops.
bool ok(cudaError_t status, const char* call, std::mutex& m, std::string& error) {
  if (status == cudaSuccess) return true;
  std::lock_guard<std::mutex> lock(m);
  if (error.empty()) error = std::string(call) + ": " + cudaGetErrorName(status);
  return false;
}

}  // namespace

MemoryFacts query_memory_facts() {
  MemoryFacts f;
  int device = 0, integrated = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device));
  f.integrated = integrated != 0;
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  f.gpu_free = static_cast<int64_t>(free_bytes);
  const HostMemory host = read_host_memory();
  f.host_available = host.available;
  f.host_free = host.free;
  f.page_cache = host.cached;
  return f;
}

Ballast::Ballast(const BallastSpec& spec, int64_t bytes, const AllocatorOptions& options) : spec_(spec) {
  AllocatorOptions o = options;
  o.caching = false;  // one allocation, held for the run
  allocator_ = make_allocator(spec.kind, o);
  buffer_ = DeviceBuffer(*allocator_, static_cast<size_t>(bytes), "ballast");
  // Written once, from where its pages would live: the GPU for memory the GPU can reach, which is
  // every kind here (managed, device, pinned host, and system memory where the GPU reads it).
  CUDA_CHECK(cudaMemset(buffer_.get(), 0x5a, buffer_.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
  if (spec.touch == BallastTouch::host || spec.touch == BallastTouch::both) threads_.emplace_back([this] { touch_from_host(); });
  if (spec.touch == BallastTouch::gpu || spec.touch == BallastTouch::both) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&sink_, sizeof(unsigned long long)));
    threads_.emplace_back([this] { touch_from_gpu(); });
  }
}

Ballast::~Ballast() {
  stop();
  if (stream_) cudaStreamDestroy(stream_);
  if (sink_) cudaFree(sink_);
}

void Ballast::stop() {
  stop_ = true;
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::string Ballast::error() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  return error_;
}

// A read and a write of one byte of every page: each page not on the host faults to it (managed
// memory), or crosses the bus (pinned or system memory read by the GPU).
void Ballast::touch_from_host() {
  auto* bytes = static_cast<volatile unsigned char*>(buffer_.get());
  while (!stop_) {
    for (size_t offset = 0; offset < buffer_.bytes() && !stop_; offset += kTouchPageBytes) bytes[offset] = bytes[offset] + 0;
    ++host_passes_;
  }
}

// One read of every page per pass on a stream of its own, a slice of 256 MiB per launch, each
// waited for before the next: a device-wide synchronisation of the path (its entry, a cudaFree)
// then waits for one slice, as it would for one of the model's kernels, not for a pass over
// tens of gigabytes.
void Ballast::touch_from_gpu() {
  constexpr size_t kSlice = size_t{256} << 20;
  char* const base = static_cast<char*>(buffer_.get());
  while (!stop_) {
    for (size_t offset = 0; offset < buffer_.bytes() && !stop_; offset += kSlice) {
      try {
        launch_touch_pages(base + offset, std::min(kSlice, buffer_.bytes() - offset), sink_, stream_);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (error_.empty()) error_ = e.what();
        return;
      }
      if (!ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(ballast stream)", error_mutex_, error_)) return;
    }
    ++gpu_passes_;
  }
}

HostLoad::HostLoad(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { work(i); });
  while (ready_ < threads) std::this_thread::yield();
}

HostLoad::~HostLoad() { stop(); }

void HostLoad::stop() {
  stop_ = true;
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::string HostLoad::error() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  return error_;
}

// A data loader's batch, over and over: decode into pageable memory (written), read it back
// (augmentation), stage it in pinned memory, copy it to the GPU on its own stream.
void HostLoad::work(int index) {
  const size_t n = static_cast<size_t>(kHostLoadBufferBytes);
  std::vector<unsigned char> pageable(n);
  void* pinned = nullptr;
  void* device = nullptr;
  cudaStream_t stream = nullptr;
  auto check = [&](cudaError_t s, const char* call) { return ok(s, call, error_mutex_, error_); };
  const bool got = check(cudaHostAlloc(&pinned, n, cudaHostAllocDefault), "cudaHostAlloc(host load)") &&
                   check(cudaMalloc(&device, n), "cudaMalloc(host load)") &&
                   check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate(host load)");
  ++ready_;  // `pageable` was written when made: its pages are taken
  if (got) {
    uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
    uint64_t sum = 0;
    while (!stop_) {
      for (size_t i = 0; i < n; i += 64) pageable[i] = static_cast<unsigned char>(state += 0x9E3779B97F4A7C15ull);
      for (size_t i = 0; i < n; i += 64) sum += pageable[i];
      std::memcpy(pinned, pageable.data(), n);
      if (!check(cudaMemcpyAsync(device, pinned, n, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync(host load)") ||
          !check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(host load)")) {
        break;
      }
      ++iterations_;
    }
    checksum_ += sum;  // the reads count for something, so they are not optimised away
  }
  if (stream) cudaStreamDestroy(stream);
  if (device) cudaFree(device);
  if (pinned) cudaFreeHost(pinned);
}

}  // namespace sdpa
