// weights_load.cpp: the model's weights copied from the mapped file into GPU memory, tensor by
// tensor (weights_load.h says why and how). Inlined verbatim into the generated reproducer.
#include "weights_load.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>

#include "cuda_check.h"
#include "errors.h"
#include "weights_file.h"
#include "weights_plan.h"

namespace sdpa {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

}  // namespace

const std::vector<int64_t>& weights_tensor_sizes() {
  static const std::vector<int64_t> sizes = {18 * kMiB, 18 * kMiB, 18 * kMiB, 18 * kMiB, 72 * kMiB, 72 * kMiB};
  return sizes;
}

WeightsLoader::WeightsLoader(const MappedWeights& w, bool guard) : w_(w), guard_(guard) {
  WeightsLoad& r = done_;
  r.file = w.file.empty() ? default_weights_file() : w.file;
  r.bytes = w.bytes;
  r.io = weights_io_name(w.io);
  r.pages = w.drop_pages ? "drop" : "keep";
  r.mapping = weights_mapping_name(w.mapping);
  r.created = ensure_weights_file(weights_file_route(w.file), r.file, w.bytes);
  const bool direct = w.io == WeightsIo::direct;
  fd_ = ::open(r.file.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd_ < 0) throw InputError("--mapped-weights: cannot open " + r.file + ": " + std::strerror(errno));
  // From what a fresh boot has: the file's pages are the load's to bring in.
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  const std::vector<int64_t>& sizes = weights_tensor_sizes();
  if (direct) {
    CUDA_CHECK(cudaHostAlloc(&bounce_, static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end())), cudaHostAllocDefault));
  } else {
    mapped_ = w.bytes;
    void* map = ::mmap(nullptr, static_cast<size_t>(w.bytes), PROT_READ, MAP_PRIVATE, fd_, 0);
    if (map == MAP_FAILED) throw InputError("--mapped-weights: cannot map " + r.file + ": " + std::strerror(errno));
    map_ = static_cast<char*>(map);
  }
  plan_ = weights_tensors(w.bytes, sizes);
  r.tensors = tensors();
  r.before = read_host_memory();
  start_ = std::chrono::steady_clock::now();
}

WeightsLoader::~WeightsLoader() {
  for (void* p : copies_) cudaFree(p);
  if (bounce_) cudaFreeHost(bounce_);
  if (map_) ::munmap(map_, static_cast<size_t>(mapped_));
  if (fd_ >= 0) ::close(fd_);
}

std::string WeightsLoader::detail(int i) const {
  const WeightsTensor& t = plan_[static_cast<size_t>(i)];
  return "tensor=" + std::to_string(i + 1) + "/" + std::to_string(tensors()) + " bytes=" + std::to_string(t.bytes) +
         " offset=" + std::to_string(t.offset) + " io=" + done_.io + " pages=" + done_.pages;
}

void WeightsLoader::copy(int i, CUstream_st* stream) {
  const WeightsTensor& t = plan_[static_cast<size_t>(i)];
  const int64_t at = t.offset, n = t.bytes;
  if (guard_) {
    // Fix 6's guard, before the pool is asked to reclaim anything (weights_plan.h).
    const HostMemory m = read_host_memory();
    if (weights_guard_refuses(m, n, w_)) {
      throw RefusedError("the weights' tensor " + std::to_string(i + 1) + " of " + std::to_string(tensors()) + " (" +
                         std::to_string(n) + " bytes) would take MemFree (" + std::to_string(m.free) +
                         " bytes) below a tenth of the memory: fix 6's guard refuses it rather than have the page "
                         "cache reclaimed (" + host_memory_text(m) + ")");
    }
  }
  void* copy = nullptr;
  CUDA_CHECK(cudaMalloc(&copy, static_cast<size_t>(n)));
  copies_.push_back(copy);
  const void* from = map_ ? map_ + at : bounce_;
  if (!map_) {
    // O_DIRECT reads whole pages into an aligned buffer; the last tensor's tail is read rounded up.
    for (int64_t done = 0; done < t.page_bytes;) {
      const ssize_t got = ::pread(fd_, static_cast<char*>(bounce_) + done, static_cast<size_t>(t.page_bytes - done), at + done);
      if (got <= 0) {
        if (got == 0 && at + done >= w_.bytes) break;
        throw InputError("--mapped-weights: cannot read " + done_.file + " with O_DIRECT: " + std::strerror(errno));
      }
      done += got;
    }
  }
  CUDA_CHECK(cudaMemcpyAsync(copy, from, static_cast<size_t>(n), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (w_.drop_pages) {
    // This tensor's own pages and no other's. Unmapped first: the kernel keeps a page in the
    // cache while any mapping still holds it, so dropping before unmapping leaves every page
    // where it was. The whole last page too: the advice drops only pages it covers entirely.
    if (map_) ::munmap(map_ + at, static_cast<size_t>(t.page_bytes));
    ::posix_fadvise(fd_, at, t.page_bytes, POSIX_FADV_DONTNEED);
  }
}

const WeightsLoad& WeightsLoader::finish() {
  done_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // As the CPU state dict is freed once the model is on the GPU: the mapping goes (its pages stay
  // in the page cache); with --weights-mapping keep the process holds it until it ends.
  if (map_ && w_.mapping == WeightsMapping::unmap) {
    if (!w_.drop_pages) ::munmap(map_, static_cast<size_t>(mapped_));
    map_ = nullptr;
  }
  done_.after = read_host_memory();
  return done_;
}

}  // namespace sdpa
