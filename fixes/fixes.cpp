// fixes.cpp: the fixes of a FixSet.
#include "fix.h"

namespace sdpa {

std::vector<std::unique_ptr<Fix>> make_fixes(const FixSet& set) {
  std::vector<std::unique_ptr<Fix>> out;
  if (set.has(1)) out.push_back(make_gemm_stream_sync_fix(set));
  if (set.has(2)) out.push_back(make_prefetch_scores_fix(set));
  if (set.has(3)) out.push_back(make_contiguous_kt_fix(set));
  if (set.has(4)) out.push_back(make_stream_ordered_alloc_fix(set));
  if (set.has(5)) out.push_back(make_bounded_memory_fix(set));
  return out;
}

}  // namespace sdpa
