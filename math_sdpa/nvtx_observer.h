// nvtx_observer.h: each stage as an NVTX range, so Nsight Systems shows the same stages as
// the stage log on its timeline. NVTX v3 is header-only and costs nothing without a tool.
#pragma once

#include <nvtx3/nvToolsExt.h>

#include "stage.h"

namespace sdpa {

class NvtxObserver : public StageObserver {
 public:
  void stage_begin(Stage stage, const std::string&, void*) override { nvtxRangePushA(stage_name(stage)); }
  void stage_end(Stage, const std::string&, void*) override { nvtxRangePop(); }
};

}  // namespace sdpa
