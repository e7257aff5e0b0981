// scenario1_cublas_stream_ordering.cpp: scenario 1, cuBLAS stream ordering with unified memory.
#include "scenario.h"

#include "hang_classification.h"

namespace sdpa {

namespace {
// The path on the legacy default stream (PyTorch's), the GEMM on a second, blocking stream that
// nothing orders explicitly: the missing synchronisation the hypothesis names, and still a
// correct program, since the legacy stream synchronises with blocking streams by itself.
void setup(PathSettings& s) {
  s.qk_gemm_stream = GemmStream::blocking;
  s.qk_gemm_order = GemmOrder::none;
  s.last_stage = Stage::qk_gemm;
}

// The stream the GEMM ran on speaks for or against the hypothesis, with how it was ordered.
void weigh(Stage, const SdpaProblem&, const PathSettings& ps, HangCandidate& c) {
  if (ps.qk_gemm_stream == GemmStream::same) {
    c.against.push_back("the Q.K^T GEMM ran on the path's own stream");
    return;
  }
  c.evidence.push_back(std::string("the Q.K^T GEMM ran on the ") + gemm_stream_name(ps.qk_gemm_stream) +
                       " stream, not the path's (" +
                       (ps.qk_gemm_order == GemmOrder::event ? "ordered by an event"
                        : implicitly_ordered_by_legacy_stream(ps.stream, ps.qk_gemm_stream)
                            ? "no explicit ordering: only the legacy default stream's implicit one"
                            : "not ordered at all") +
                       ")");
}
}  // namespace

ScenarioInfo scenario1_cublas_stream_ordering() {
  ScenarioInfo s;
  s.number = 1;
  s.title = "cuBLAS stream ordering with unified memory";
  s.hypothesis =
      "the Q.K^T GEMM (cublasGemm*Batched*) stalls when cuBLAS runs on a stream that is not explicitly synchronised "
      "with the one whose kernels produced Q and K in managed memory (judged 60% likely: docs/SCENARIOS.md)";
  s.setup =
      "Q and K are produced by our kernels on the path's stream (the legacy default stream, as in PyTorch); the "
      "Q.K^T GEMM runs through a cuBLAS handle bound to a second stream, created blocking (--gemm-stream blocking, "
      "the default), with no event and no synchronisation between them (--gemm-order none, the default): only the "
      "legacy default stream's implicit synchronisation with blocking streams orders the GEMM after Q and K, so the "
      "scores are still right. --gemm-order event orders it explicitly by an event (the synchronised case); "
      "--gemm-stream aux (a non-blocking stream, as in GEMM hangs reported on GB10 for auxiliary streams) or "
      "--gemm-stream legacy with --stream non-blocking make --gemm-order none an outright race whose scores may be "
      "wrong";
  s.runs = "entry_sync, upcast, scale_q, gqa_expand, scale_k, qk_gemm, stream_sync (checks the scores)";
  s.fix_number = 1;
  s.hang_signature = "[MATH_QK] ... [CUBLAS_GEMM_START] M=.. N=.. K=.. and nothing after it: hung in qk_gemm";
  s.options = "--gemm-stream blocking|aux|legacy|same, --gemm-order none|event, --stream, --alloc, --full";
  s.preconditions = {{"qk_gemm_stream", "blocking"}, {"qk_gemm_order", "none"}, {"last_stage", stage_name(Stage::qk_gemm)}};
  s.needs_migrating_memory = true;
  s.setup_fn = setup;
  // Fix 1 brackets every batched GEMM, not only Q.K^T; mask_add is the first kernel on the path's
  // stream to read what the Q.K^T GEMM wrote on its own stream. The backward's GEMMs run where
  // the Q.K^T GEMM runs.
  s.signature = {{Stage::qk_gemm},
                 {Stage::mask_add},
                 {Stage::pv_gemm, "the P.V GEMM, a batched GEMM fix 1 brackets as it does Q.K^T"},
                 {Stage::dp_gemm},
                 {Stage::dv_gemm},
                 {Stage::dq_gemm},
                 {Stage::dk_gemm}};
  s.kernels = {"gemm", "Gemm", "xmma", "cutlass", "cublas"};
  s.weigh = weigh;
  return s;
}

}  // namespace sdpa
