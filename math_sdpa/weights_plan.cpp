// weights_plan.cpp
#include "weights_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace sdpa {

std::vector<WeightsTensor> weights_tensors(int64_t file_bytes, const std::vector<int64_t>& sizes) {
  for (int64_t size : sizes) {
    if (size <= 0 || size % kWeightsPage != 0) {
      throw std::invalid_argument("weights tensor size " + std::to_string(size) + " is not a whole number of pages");
    }
  }
  std::vector<WeightsTensor> tensors;
  for (int64_t at = 0; at < file_bytes && !sizes.empty();) {
    WeightsTensor t;
    t.offset = at;
    t.bytes = std::min(sizes[tensors.size() % sizes.size()], file_bytes - at);
    t.page_bytes = (t.bytes + kWeightsPage - 1) / kWeightsPage * kWeightsPage;
    tensors.push_back(t);
    at += t.bytes;
  }
  return tensors;
}

bool weights_pages_cached(const MappedWeights& w) { return w.io == WeightsIo::mapped && !w.drop_pages; }

bool weights_guard_refuses(const HostMemory& now, int64_t tensor_bytes, const MappedWeights& w) {
  if (now.free < 0 || now.total <= 0) return false;
  // Its GPU copy comes out of the same pool on an integrated GPU; its pages, where they stay in
  // the page cache, a second time. Dropped or never cached, the pages are not counted: they are
  // gone before the next tensor's come.
  const int64_t takes = tensor_bytes * (weights_pages_cached(w) ? 2 : 1);
  return now.free - takes < now.total / 10;
}

}  // namespace sdpa
