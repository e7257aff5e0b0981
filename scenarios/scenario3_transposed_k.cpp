// scenario3_transposed_k.cpp: scenario 3, K^T reaching cuBLAS as a non-contiguous view.
#include "scenario.h"

#include "hang_classification.h"

namespace sdpa {

namespace {
void setup(PathSettings& s) {
  s.k_layout = KLayout::bshe;
  s.qk_gemm_api = GemmApi::batched;
  s.last_stage = Stage::qk_gemm;
}

// K's layout, and whether K^T reached cuBLAS as a view or was copied contiguous first.
void weigh(Stage, const SdpaProblem& p, const PathSettings& ps, HangCandidate& c) {
  if (ps.k_layout == KLayout::bshe) c.evidence.push_back("K was a view of a [B, S, H, E] buffer (not contiguous)");
  if (kt_copy_needed(p, ps)) {
    c.against.push_back(ps.kt_contiguous ? "K^T was copied contiguous before the GEMM (fix 3)"
                                         : "K^T was copied contiguous before the GEMM (as at::matmul does for this view)");
  } else {
    c.evidence.push_back(std::string("K^T reached cuBLAS as a transposed view (") +
                         (ps.qk_gemm_api == GemmApi::batched ? "pointer-array cublasGemmBatchedEx" : "strided-batched GEMM") + ")");
  }
}
}  // namespace

ScenarioInfo scenario3_transposed_k() {
  ScenarioInfo s;
  s.number = 3;
  s.title = "transposed K";
  s.hypothesis =
      "key.transpose(-2, -1) hands cuBLAS a non-contiguous view whose stride pattern makes the GEMM fault its way "
      "through unified memory, or fail to launch (judged 10% likely: docs/SCENARIOS.md)";
  s.setup =
      "K is the layout attention modules really produce: a [B, S, H, E] buffer viewed as [B, H, S, E] (--k-layout "
      "bshe, the default; bhse for a contiguous K), scaled in place of its layout as PyTorch's elementwise kernels "
      "do; K^T reaches cuBLAS as a transposed operand with leading dimension H*E through the pointer-array "
      "cublasGemmBatchedEx, the call the original instrumentation names (--gemm-api batched, the default). With "
      "--gemm-api strided (at::bmm's cublasGemmStridedBatchedEx) a view whose batch and head strides do not fold "
      "(B > 1) is copied contiguous first, exactly where PyTorch's matmul copies it (stage kt_contiguous, "
      "reason=reshape_copy)";
  s.runs = "entry_sync, upcast, scale_q, gqa_expand, scale_k, [kt_contiguous], qk_gemm, stream_sync (checks the scores)";
  s.fix_number = 3;
  s.hang_signature =
      "[MATH_QK] Q strides=.. K strides=.. and no [CUBLAS_GEMM_START]: hung in the K^T preparation (scale_k, "
      "kt_contiguous)";
  s.options = "--k-layout bshe|bhse, --gemm-api batched|strided, --alloc, --full";
  s.preconditions = {{"k_layout", "bshe"}, {"qk_gemm_api", "batched"}, {"last_stage", stage_name(Stage::qk_gemm)}};
  s.needs_migrating_memory = true;
  s.setup_fn = setup;
  // The K^T preparation, and the GEMMs that read K^T (dQ and dK read K and Q as the forward's did).
  s.signature = {{Stage::gqa_expand},
                 {Stage::scale_k},
                 {Stage::kt_contiguous},
                 {Stage::qk_gemm, "cuBLAS reading K^T"},
                 {Stage::dq_gemm, "cuBLAS reading the K or Q the forward's GEMM read"},
                 {Stage::dk_gemm, "cuBLAS reading the K or Q the forward's GEMM read"}};
  s.kernels = {"gemm", "Gemm", "xmma", "cutlass", "cublas", "transpose_heads"};
  s.weigh = weigh;
  return s;
}

}  // namespace sdpa
