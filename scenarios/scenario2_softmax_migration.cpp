// scenario2_softmax_migration.cpp: scenario 2, the softmax reduction on unified memory under
// page migration.
#include "scenario.h"

namespace sdpa {

namespace {
void setup(PathSettings& s) {
  s.scores_to_host = ScoresToHost::read;
  s.last_stage = Stage::softmax;
}
}  // namespace

ScenarioInfo scenario2_softmax_migration() {
  ScenarioInfo s;
  s.number = 2;
  s.title = "softmax reduction on unified memory under migration";
  s.hypothesis =
      "the softmax reduction (shared memory, block synchronisation) deadlocks while the scores' managed pages "
      "migrate between CPU and GPU (judged 25% likely: docs/SCENARIOS.md)";
  s.setup =
      "the scores are managed memory; after the Q.K^T GEMM (and the mask) the host synchronises and reads every "
      "score, as the original instrumentation's min/max does, which moves their pages to the host (--scores-to-host "
      "read, the default), and/or advises the driver that the CPU is their preferred location (advise, both); the "
      "softmax kernel then reduces over pages that fault back. Needs --alloc managed (or system where the GPU reads "
      "pageable memory); other allocations are waived";
  s.runs = "entry_sync ... qk_gemm, mask_add, scores_to_host, softmax, stream_sync (checks the probabilities)";
  s.fix_number = 2;
  s.hang_signature = "[MATH_QK_DONE] ... [MATH_SOFTMAX_START] Input shape=[..] and nothing after it: hung in softmax";
  s.options = "--scores-to-host read|advise|both, --alloc managed|system, --advise, --full";
  s.preconditions = {{"scores_to_host", "read"}, {"last_stage", "softmax"}};
  s.setup_fn = setup;
  return s;
}

}  // namespace sdpa
