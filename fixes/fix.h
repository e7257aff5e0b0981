// fix.h: a candidate fix as it acts on the path.
//
// Each fix is written once, in its own file in this folder, with its record and its parts
// (fix_list.h), each acting at its own point: settings change how the path is built (configure:
// the GEMM's stream, the K^T copy, the allocator), hooks act inside stages (synchronisations
// around the GEMMs, a prefetch and synchronisations around softmax). Every action writes a
// [FIX_N] line to the stage log. Scenarios configure the path; fixes correct it; neither copies
// it.
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
  // The problem as the fix computes it (fix 5's native part changes the precision); applied
  // with the settings.
  virtual void configure(SdpaProblem&) const {}
};

// The fixes of `set`, in number order, each with its parts.
std::vector<std::unique_ptr<Fix>> make_fixes(const FixSet& set);

}  // namespace sdpa
