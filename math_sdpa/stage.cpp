// stage.cpp: stage names.
#include "stage.h"

namespace sdpa {

namespace {
const char* const kStageNames[kStageCount] = {
    "entry_sync", "mask_prepare", "upcast",         "scale_q", "gqa_expand", "scale_k",     "kt_contiguous", "qk_gemm",
    "mask_add",   "scores_to_host", "softmax", "dropout",    "pv_gemm",     "cast_output",   "stream_sync"};
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

int scenario_for_hung_stage(Stage s) {
  switch (s) {
    case Stage::qk_gemm: return 1;
    case Stage::softmax: return 2;
    case Stage::gqa_expand:
    case Stage::scale_k:
    case Stage::kt_contiguous: return 3;  // after [MATH_QK], before [CUBLAS_GEMM_START]
    case Stage::entry_sync: return 4;
    default: return 0;
  }
}

std::string classify_hang(Stage s) {
  switch (scenario_for_hung_stage(s)) {
    case 1: return "scenario 1 (cuBLAS stream ordering with unified memory: hung inside the Q.K^T GEMM)";
    case 2: return "scenario 2 (softmax reduction on unified memory: hung inside softmax)";
    case 3: return "scenario 3 (transposed K: hung after [MATH_QK], before the GEMM started)";
    case 4: return "scenario 4 (driver page-fault handling: hung at the entry synchronisation)";
    default: return std::string("unclassified (hung in stage ") + stage_name(s) + ")";
  }
}

}  // namespace sdpa
