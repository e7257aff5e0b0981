// weights_load.cpp: the model's weights copied from the mapped file into GPU memory, tensor by
// tensor, each copy a load_weights stage of the path (weights_load.h says why and how).
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
#include "pipeline.h"
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

LoadedWeights::~LoadedWeights() {
  for (void* p : copies) cudaFree(p);
  if (bounce) cudaFreeHost(bounce);
  if (map) ::munmap(map, static_cast<size_t>(mapped));
  if (fd >= 0) ::close(fd);
}

WeightsLoad MathSdpa::load_weights() {
  const MappedWeights& w = settings_.weights;
  WeightsLoad r;
  r.file = w.file.empty() ? default_weights_file() : w.file;
  r.bytes = w.bytes;
  r.io = weights_io_name(w.io);
  r.pages = w.drop_pages ? "drop" : "keep";
  r.mapping = weights_mapping_name(w.mapping);
  r.created = ensure_weights_file(weights_file_route(w.file), r.file, w.bytes);
  weights_ = std::make_unique<LoadedWeights>();
  LoadedWeights& loaded = *weights_;
  const bool direct = w.io == WeightsIo::direct;
  loaded.fd = ::open(r.file.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (loaded.fd < 0) throw InputError("--mapped-weights: cannot open " + r.file + ": " + std::strerror(errno));
  // From what a fresh boot has: the file's pages are the load's to bring in.
  ::posix_fadvise(loaded.fd, 0, 0, POSIX_FADV_DONTNEED);
  const std::vector<int64_t>& sizes = weights_tensor_sizes();
  if (direct) {
    CUDA_CHECK(cudaHostAlloc(&loaded.bounce, static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end())),
                             cudaHostAllocDefault));
  } else {
    loaded.mapped = w.bytes;
    void* map = ::mmap(nullptr, static_cast<size_t>(w.bytes), PROT_READ, MAP_PRIVATE, loaded.fd, 0);
    if (map == MAP_FAILED) throw InputError("--mapped-weights: cannot map " + r.file + ": " + std::strerror(errno));
    loaded.map = static_cast<char*>(map);
  }
  const std::vector<WeightsTensor> plan = weights_tensors(w.bytes, sizes);
  const int tensors = static_cast<int>(plan.size());
  r.before = read_host_memory();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < tensors; ++i) {
    const WeightsTensor& t = plan[static_cast<size_t>(i)];
    const int64_t at = t.offset, n = t.bytes;
    const std::string detail = "tensor=" + std::to_string(i + 1) + "/" + std::to_string(tensors) + " bytes=" + std::to_string(n) +
                               " offset=" + std::to_string(at) + " io=" + r.io + " pages=" + r.pages;
    stage(Stage::load_weights, detail, [&] {
      if (settings_.plan_against_free) {
        // Fix 6's guard, before the pool is asked to reclaim anything (weights_plan.h).
        const HostMemory m = read_host_memory();
        if (weights_guard_refuses(m, n, w)) {
          throw RefusedError("the weights' tensor " + std::to_string(i + 1) + " of " + std::to_string(tensors) + " (" +
                             std::to_string(n) + " bytes) would take MemFree (" + std::to_string(m.free) +
                             " bytes) below a tenth of the memory: fix 6's guard refuses it rather than have the page "
                             "cache reclaimed (" + host_memory_text(m) + ")");
        }
      }
      void* copy = nullptr;
      CUDA_CHECK(cudaMalloc(&copy, static_cast<size_t>(n)));
      loaded.copies.push_back(copy);
      const void* from = loaded.map ? loaded.map + at : loaded.bounce;
      if (direct) {
        // O_DIRECT reads whole pages into an aligned buffer; the last tensor's tail is read rounded up.
        for (int64_t done = 0; done < t.page_bytes;) {
          const ssize_t got = ::pread(loaded.fd, static_cast<char*>(loaded.bounce) + done,
                                      static_cast<size_t>(t.page_bytes - done), at + done);
          if (got <= 0) {
            if (got == 0 && at + done >= w.bytes) break;
            throw InputError("--mapped-weights: cannot read " + r.file + " with O_DIRECT: " + std::strerror(errno));
          }
          done += got;
        }
      }
      CUDA_CHECK(cudaMemcpyAsync(copy, from, static_cast<size_t>(n), cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (w.drop_pages) {
        // This tensor's own pages and no other's. Unmapped first: the kernel keeps a page in the
        // cache while any mapping still holds it, so dropping before unmapping leaves every page
        // where it was. The whole last page too: the advice drops only pages it covers entirely.
        if (loaded.map) ::munmap(loaded.map + at, static_cast<size_t>(t.page_bytes));
        ::posix_fadvise(loaded.fd, at, t.page_bytes, POSIX_FADV_DONTNEED);
      }
    });
  }
  r.tensors = tensors;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // As the CPU state dict is freed once the model is on the GPU: the mapping goes (its pages stay
  // in the page cache); with --weights-mapping keep the process holds it until it ends.
  if (loaded.map && w.mapping == WeightsMapping::unmap) {
    if (!w.drop_pages) ::munmap(loaded.map, static_cast<size_t>(loaded.mapped));
    loaded.map = nullptr;
  }
  r.after = read_host_memory();
  return r;
}

}  // namespace sdpa
