// scenario2_softmax_migration.cpp: scenario 2, the softmax reduction on unified memory under
// page migration.
#include "scenario.h"

#include "hang_classification.h"
#include "math_sdpa/softmax_plan.h"

namespace sdpa {

namespace {
void setup(PathSettings& s) {
  s.scores_to_host = ScoresToHost::read;
  s.scores_host_phase = ScoresHostPhase::during;
  s.last_stage = Stage::softmax;
}

// The host's access to the scores, and whether softmax's rows took the block reduction.
void weigh(Stage, const SdpaProblem& p, const PathSettings& ps, HangCandidate& c) {
  if (ps.scores_to_host != ScoresToHost::none) {
    c.evidence.push_back(std::string("the host touched the scores (") + scores_to_host_name(ps.scores_to_host) + ", " +
                         scores_host_phase_name(ps.scores_host_phase) + " softmax)");
  } else {
    c.against.push_back("the host did not touch the scores");
  }
  const SoftmaxVariant v = softmax_variant_for(p.compute_dtype(), p.kv_len);
  const std::string rows = "rows of " + std::to_string(p.kv_len) + " columns ran the " + softmax_variant_name(v) + " softmax";
  if (softmax_uses_block_barriers(v)) {
    c.evidence.push_back(rows + " (shared memory and block barriers)");
  } else {
    c.against.push_back(rows + " (no block barrier)");
  }
}

// The hypothesis is about softmax's block reduction: a run that reaches softmax with only warp
// rows never runs it (the backward's softmax splits its rows the same way).
std::vector<std::string> caveats(const SdpaProblem& problem, const PathSettings& conditions) {
  if (conditions.scores_to_host == ScoresToHost::none ||
      softmax_uses_block_barriers(softmax_variant_for(problem.compute_dtype(), problem.kv_len))) {
    return {};
  }
  return {"scenario 2's hypothesis is about softmax's block reduction, but rows of S = " + std::to_string(problem.kv_len) +
          " <= " + std::to_string(kSoftmaxWarpRowMaxCols) +
          " keys take the warp path (no shared memory, no block barrier): a pass says nothing about it (use S > " +
          std::to_string(kSoftmaxWarpRowMaxCols) + ", as the default --workload qwen-image-1024 does)"};
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
  s.preconditions = {{"scores_to_host", "read"}, {"scores_host_phase", "during"}, {"last_stage", stage_name(Stage::softmax)}};
  s.needs_migrating_memory = true;
  // Rows longer than 1024 take the block reduction; the failing workload's own layer has 4608.
  s.default_workload = "qwen-image-1024";
  s.setup_fn = setup;
  s.signature = {{Stage::scores_to_host}, {Stage::softmax}, {Stage::grads_to_host}, {Stage::softmax_backward}};
  s.kernels = {"softmax", "SoftMax"};
  s.weigh = weigh;
  s.caveats = caveats;
  return s;
}

}  // namespace sdpa
