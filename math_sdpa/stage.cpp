// stage.cpp: stage names.
#include "stage.h"

namespace sdpa {

namespace {
const char* const kStageNames[kStageCount] = {
    "entry_sync", "graph_capture", "graph_instantiate", "graph_launch", "mask_prepare", "upcast",  "scale_q",
    "gqa_expand", "scale_k",       "kt_contiguous",     "qk_gemm",      "mask_add",     "scores_to_host",
    "softmax",    "dropout",       "pv_gemm",           "cast_output",  "stream_sync"};
}

const char* stage_name(Stage s) { return kStageNames[static_cast<int>(s)]; }

bool parse_stage(const std::string& name, Stage& out) {
  for (int i = 0; i < kStageCount; ++i) {
    if (name == kStageNames[i]) {
      out = static_cast<Stage>(i);
      return true;
    }
  }
  return false;
}

}  // namespace sdpa
