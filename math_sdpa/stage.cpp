// stage.cpp: stage names.
#include "stage.h"

namespace sdpa {

namespace {
const char* const kStageNames[kStageCount] = {
    "entry_sync",     "graph_capture", "graph_instantiate", "graph_launch",     "alloc_mask",    "mask_prepare",
    "alloc_upcast",   "upcast",        "alloc_query_scaled", "scale_q",         "alloc_expanded", "gqa_expand",
    "alloc_key_scaled", "scale_k",     "alloc_key_transposed", "kt_contiguous", "alloc_scores",  "qk_gemm",
    "mask_add",       "scores_to_host", "alloc_probs",      "softmax",          "free_scores",   "alloc_dropout",
    "dropout",        "alloc_output",  "pv_gemm",           "cast_output",      "free_call",     "stream_sync",
    "alloc_grad_pv",  "grad_upcast",   "dp_gemm",           "dv_gemm",          "alloc_grad_softmax", "dropout_backward", "grads_to_host",
    "softmax_backward", "free_grad_probs", "alloc_grad_qk", "dq_gemm",          "dk_gemm",       "grad_inputs",
    "free_backward",  "backward_sync", "free_step"};
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
