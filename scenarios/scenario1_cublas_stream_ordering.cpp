// scenario1_cublas_stream_ordering.cpp: scenario 1, cuBLAS stream ordering with unified memory.
#include "scenario.h"

namespace sdpa {

namespace {
void setup(PathSettings& s) {
  s.qk_gemm_stream = GemmStream::legacy;
  s.qk_gemm_order = GemmOrder::event;
  s.last_stage = Stage::qk_gemm;
}
}  // namespace

ScenarioInfo scenario1_cublas_stream_ordering() {
  ScenarioInfo s;
  s.number = 1;
  s.title = "cuBLAS stream ordering with unified memory";
  s.hypothesis =
      "the Q.K^T GEMM (cublasGemm*Batched*) stalls when cuBLAS runs on a stream that is not the one whose kernels "
      "produced Q and K in managed memory (judged 60% likely: docs/SCENARIOS.md)";
  s.setup =
      "Q and K are produced by our kernels on the path's stream; the Q.K^T GEMM runs through a cuBLAS handle bound to "
      "another stream: the legacy default stream (--gemm-stream legacy, the default) or a second non-blocking stream "
      "(--gemm-stream aux, as in GEMM hangs reported on GB10 for auxiliary streams); it is ordered after the "
      "producers by an event (--gemm-order event, the default) or, as an explicit race, not at all (--gemm-order "
      "none: the scores may then be wrong)";
  s.runs = "entry_sync, upcast, scale_q, gqa_expand, scale_k, qk_gemm, stream_sync (checks the scores)";
  s.fix_number = 1;
  s.hang_signature = "[MATH_QK] ... [CUBLAS_GEMM_START] M=.. N=.. K=.. and nothing after it: hung in qk_gemm";
  s.options = "--gemm-stream legacy|aux|same, --gemm-order event|none, --stream, --alloc, --full";
  s.preconditions = {{"qk_gemm_stream", "legacy"}, {"qk_gemm_order", "event"}, {"last_stage", "qk_gemm"}};
  s.needs_migrating_memory = true;
  s.setup_fn = setup;
  return s;
}

}  // namespace sdpa
