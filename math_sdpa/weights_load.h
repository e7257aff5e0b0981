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

#include "host_memory.h"

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

// The load's file, its mapping and the GPU copies, held by the path (pipeline.h) until it goes.
struct LoadedWeights {
  int fd = -1;
  char* map = nullptr;     // the mapping's start (mapped reads, until unmapped), or null
  int64_t mapped = 0;      // its length
  void* bounce = nullptr;  // O_DIRECT's pinned buffer
  std::vector<void*> copies;
  ~LoadedWeights();        // frees the copies, unmaps, closes
};

}  // namespace sdpa
