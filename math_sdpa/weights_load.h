// weights_load.h: the model's weights loaded into GPU memory from a memory-mapped file before the
// first call (--mapped-weights SIZE[:FILE]; scenario 7), as a diffusers/transformers training
// script loads them: safetensors maps the files, and `.to("cuda")` copies each tensor from the
// mapped pages into a cudaMalloc'd one, a pageable host-to-device copy in the size of a real
// tensor. The copies stay allocated for the run: they are the model's weights. On GB10 the page
// cache those copies fill and the GPU's allocations share one pool, and MemAvailable counts the
// cache as available (host_memory.h): the condition scenario 7 is about.
//
// The file is created once (real data, written and synced, so its blocks exist on disk) and reused
// while it is large enough, and only a file the harness made is ever written (weights_file.h); its pages are dropped from the page cache before the load, so the load
// starts from what a fresh boot has and the page cache it leaves is the load's own. Fix 6's parts
// change how it reads: with O_DIRECT, bypassing the page cache, or dropping each tensor's pages
// (posix_fadvise DONTNEED) and its mapping after its copy; its guard refuses a tensor that would
// take MemFree below a tenth of the memory (RefusedError) instead of asking the pool to reclaim.
// Those decisions (the tensors' ranges, the guard) need no GPU: weights_plan.h holds them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <chrono>

#include "host_memory.h"
#include "path_settings.h"
#include "weights_plan.h"

struct CUstream_st;  // cudaStream_t, named without the CUDA headers (run_result.h reads WeightsLoad)

namespace sdpa {

// The sizes the load copies in turn, bytes: a Qwen-Image transformer block's weights in bf16
// (attention's four 3072 x 3072 projections, the MLP's 3072 x 12288 pair), page multiples.
const std::vector<int64_t>& weights_tensor_sizes();

// What a load did.
struct WeightsLoad {
  std::string file;
  bool created = false;     // the file was written by this run (else reused)
  int64_t bytes = 0;
  int tensors = 0;
  double seconds = 0;       // the copies alone (the file's creation excluded)
  std::string io, pages, mapping;  // how it read ("mapped" or "direct"), "keep" or "drop", "unmap" or "keep"
  HostMemory before, after; // just before the first copy, and after the last (and the unmapping)
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0; }
};

// The load, tensor by tensor: the file made if it is not there (weights_file.h), opened, its pages
// dropped, mapped (or a pinned buffer for O_DIRECT); then copy(i) for each tensor, which the path
// runs inside tensor i's load_weights stage, and finish(). It holds the file, its mapping and the GPU
// copies until it goes: the model's weights stay for the run. The pipeline (MathSdpa::load_weights)
// and the generated reproducer both load through it.
class WeightsLoader {
 public:
  // `guard`: fix 6's guard (PathSettings::plan_against_free) refuses a tensor that would take
  // MemFree below a tenth of the memory (RefusedError).
  WeightsLoader(const MappedWeights& w, bool guard);
  ~WeightsLoader();  // frees the copies, unmaps, closes
  WeightsLoader(const WeightsLoader&) = delete;
  WeightsLoader& operator=(const WeightsLoader&) = delete;
  int tensors() const { return static_cast<int>(plan_.size()); }
  std::string detail(int i) const;   // tensor i's stage detail: "tensor=1/3 bytes=... offset=... io=... pages=..."
  void copy(int i, CUstream_st* stream);  // tensor i, from the file into a cudaMalloc'd copy, waited for
  const WeightsLoad& finish();       // the mapping dropped (--weights-mapping unmap) and what the load did

 private:
  MappedWeights w_;
  bool guard_;
  std::vector<WeightsTensor> plan_;
  WeightsLoad done_;
  std::chrono::steady_clock::time_point start_;
  int fd_ = -1;
  char* map_ = nullptr;     // the mapping's start (mapped reads, until unmapped), or null
  int64_t mapped_ = 0;      // its length
  void* bounce_ = nullptr;  // O_DIRECT's pinned buffer
  std::vector<void*> copies_;
};

}  // namespace sdpa
