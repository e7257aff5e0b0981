// fix.h: a candidate fix as it acts on the path.
//
// Each of the four fixes is written once, in its own file in this folder, and acts at its own
// point: fixes 3 and 4 change how the path is built (configure: the K^T copy, the allocator),
// fixes 1 and 2 act inside stages as hooks (synchronisations around the GEMMs, a prefetch
// around softmax). Every action writes a [FIX_N] line to the stage log. Scenarios configure the
// path; fixes correct it; neither copies it.
#pragma once

#include <memory>
#include <vector>

#include "fix_list.h"
#include "math_sdpa/path_hook.h"
#include "math_sdpa/path_settings.h"

namespace sdpa {

class Fix : public PathHook {
 public:
  virtual int number() const = 0;
  // Applied after the scenario and the command line set the path's settings, before the
  // allocator and the path are created.
  virtual void configure(PathSettings&) const {}
};

std::unique_ptr<Fix> make_gemm_stream_sync_fix();     // fix 1
std::unique_ptr<Fix> make_prefetch_scores_fix();      // fix 2
std::unique_ptr<Fix> make_contiguous_kt_fix();        // fix 3
std::unique_ptr<Fix> make_stream_ordered_alloc_fix(); // fix 4

// The fixes of `set`, in number order.
std::vector<std::unique_ptr<Fix>> make_fixes(const FixSet& set);

}  // namespace sdpa
