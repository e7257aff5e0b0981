// fix_list.cpp
#include "fix_list.h"

#include "math_sdpa/errors.h"

namespace sdpa {

namespace {
const FixInfo kFixes[kFixCount] = {
    {1, "gemm_stream_sync", "scenario 1",
     "bind the cuBLAS handle to the stream that produced Q and K, and synchronise that stream before and after "
     "each GEMM",
     "around qk_gemm and pv_gemm"},
    {2, "prefetch_scores", "scenario 2",
     "prefetch the scores to the GPU (cudaMemPrefetchAsync with a cudaMemLocation) and synchronise before softmax; "
     "synchronise the device after it",
     "around softmax"},
    {3, "contiguous_kt", "scenario 3",
     "copy K^T to a contiguous [B*H, E, S] buffer with our own transpose kernel before the GEMM (op N instead of a "
     "transposed view)",
     "the K^T preparation (stage kt_contiguous)"},
    {4, "stream_ordered_alloc", "scenario 4",
     "allocate every tensor with cudaMallocFromPoolAsync from a stream-ordered pool instead of cudaMallocManaged",
     "the allocator"},
};
}  // namespace

const FixInfo& fix_info(int number) {
  if (number < 1 || number > kFixCount) throw InputError("no fix " + std::to_string(number) + " (fixes are 1-4)");
  return kFixes[number - 1];
}

std::vector<int> FixSet::numbers() const {
  std::vector<int> out;
  for (int n = 1; n <= kFixCount; ++n) {
    if (has(n)) out.push_back(n);
  }
  return out;
}

std::string FixSet::str() const {
  if (empty()) return "none";
  if (*this == all()) return "all";
  std::string s;
  for (int n : numbers()) s += (s.empty() ? "" : ",") + std::to_string(n);
  return s;
}

FixSet parse_fix_list(const std::string& text) {
  if (text.empty() || text == "none") return {};
  if (text == "all") return FixSet::all();
  FixSet set;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.size() != 1 || item[0] < '1' || item[0] > '0' + kFixCount) {
      throw InputError("--fixes: '" + item + "' in '" + text + "' is not a fix number (expected a list of 1-4, all or none)");
    }
    const int n = item[0] - '0';
    if (set.has(n)) throw InputError("--fixes: fix " + item + " listed twice in '" + text + "'");
    set.add(n);
    if (comma == std::string::npos) return set;
    start = comma + 1;
  }
}

}  // namespace sdpa
