// weights_plan.h: the decisions of the weights' load (weights_load.h) that need no GPU, so that the
// CPU tests hold them at their edges: the tensors the file is cut into, the pages each one covers
// (what fix 6's drop part unmaps and advises away after that tensor's copy, and no other), whether
// the load leaves the file's pages in the page cache, and fix 6's guard for one tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "host_memory.h"
#include "path_settings.h"

namespace sdpa {

// The granule the load rounds a tensor's range to: O_DIRECT's alignment, and a page of the mapping.
inline constexpr int64_t kWeightsPage = 4096;

// One tensor of the load: its bytes in the file, and the whole pages they lie on,
// [offset, offset + page_bytes): the range the drop part unmaps and drops after the copy, and the
// one O_DIRECT reads.
struct WeightsTensor {
  int64_t offset = 0;
  int64_t bytes = 0;
  int64_t page_bytes = 0;  // bytes rounded up to whole pages
};

// The tensors a load of `file_bytes` copies in turn: `sizes` over and over, the last one cut at the
// file's end. Each begins where the one before ended, and every size is a whole number of pages, so
// each tensor's pages are its own: dropping them after its copy leaves the others where they are.
// Throws std::invalid_argument for a size that is not a positive multiple of kWeightsPage.
std::vector<WeightsTensor> weights_tensors(int64_t file_bytes, const std::vector<int64_t>& sizes);

// Whether the load leaves the weights' pages in the page cache: read through the mapping and not
// dropped after each copy. Read with O_DIRECT or dropped (fix 6), they never stay there.
bool weights_pages_cached(const MappedWeights& w);

// Fix 6's guard for one tensor of the load, with `now` the host's memory just before its copy: the
// tensor is refused when it would take MemFree below a tenth of the memory (and so need the page
// cache reclaimed). It counts what the tensor takes: its GPU copy, and its pages in the page cache
// too where they stay there (weights_pages_cached). Where MemFree or MemTotal is unknown nothing is
// refused.
bool weights_guard_refuses(const HostMemory& now, int64_t tensor_bytes, const MappedWeights& w);

}  // namespace sdpa
