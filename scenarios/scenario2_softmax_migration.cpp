// scenario2_softmax_migration.cpp: scenario 2, the softmax reduction on unified memory under
// page migration.
#include "scenario.h"

namespace sdpa {

namespace {
void setup(PathSettings& s) {
  s.scores_to_host = ScoresToHost::read;
  s.scores_host_phase = ScoresHostPhase::during;
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
      "the scores are managed memory; once the Q.K^T GEMM (and the mask) have written them, a host thread keeps "
      "reading one byte of every page of the scores while the softmax kernel runs (--scores-host-phase during, the "
      "default; where the device lacks concurrentManagedAccess it reads them all before the kernel instead), so pages "
      "migrate to the host in the middle of the reduction and fault back; --scores-to-host advise makes the thread "
      "switch the pages' preferred location between CPU and none instead, both does both, and --scores-host-phase "
      "before has the host read every score (min and max) before the kernel starts. (The original instrumentation's "
      "scores.min().item() is a GPU reduction plus a one-value copy, which moves no page: the harness touches the "
      "pages on purpose.) Reads and advice change no value, so the probabilities are checked exactly. The default "
      "problem is the failing workload's attention layer (--workload qwen-image-1024: S = 4608 > 1024, so softmax "
      "runs a block per row with shared memory and block barriers, the reduction the hypothesis is about). Needs "
      "--alloc managed (or system where the GPU reads pageable memory); other allocations are waived";
  s.runs = "entry_sync ... qk_gemm, mask_add, scores_to_host, softmax, stream_sync (checks the probabilities)";
  s.fix_number = 2;
  s.hang_signature = "[MATH_QK_DONE] ... [MATH_SOFTMAX_START] Input shape=[..] and nothing after it: hung in softmax";
  s.options = "--scores-to-host read|advise|both, --scores-host-phase during|before, --workload, --alloc managed|system, "
              "--advise, --full";
  s.preconditions = {{"scores_to_host", "read"}, {"scores_host_phase", "during"}, {"last_stage", "softmax"}};
  s.needs_migrating_memory = true;
  // Rows longer than 1024 take the block reduction; the failing workload's own layer has 4608.
  s.default_workload = "qwen-image-1024";
  s.setup_fn = setup;
  return s;
}

}  // namespace sdpa
