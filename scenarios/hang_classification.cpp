// hang_classification.cpp
#include "hang_classification.h"

#include <algorithm>

#include "math_sdpa/softmax_plan.h"
#include "scenario.h"

namespace sdpa {

std::vector<int> scenarios_for_hung_stage(Stage s) {
  switch (s) {
    case Stage::qk_gemm: return {1, 3};
    // The backward's GEMMs run where the Q.K^T GEMM runs (scenario 1's stream); dQ and dK read K
    // and Q as that GEMM did (scenario 3); softmax's backward is the second block reduction (2).
    case Stage::dp_gemm:
    case Stage::dv_gemm: return {1};
    case Stage::dq_gemm:
    case Stage::dk_gemm: return {1, 3};
    case Stage::grads_to_host:
    case Stage::softmax_backward: return {2};
    case Stage::gqa_expand:
    case Stage::scale_k:
    case Stage::kt_contiguous: return {3};
    case Stage::scores_to_host:
    case Stage::softmax: return {2};
    case Stage::entry_sync: return {4};
    case Stage::graph_capture:
    case Stage::graph_instantiate:
    case Stage::graph_launch: return {5};
    // Fix 1 brackets every batched GEMM, not only Q.K^T; mask_add is the first kernel on the
    // path's stream to read what the Q.K^T GEMM wrote on its own stream.
    case Stage::pv_gemm:
    case Stage::mask_add: return {1};
    // The first kernels of a call (and of a backward call) to touch on the GPU pages the host
    // wrote: their faults go through the driver's fault handler, scenario 4's hypothesis.
    case Stage::mask_prepare:
    case Stage::upcast:
    case Stage::scale_q:
    case Stage::grad_upcast: return {4};
    // Synchronisations that did not return though every stage before them completed on the GPU
    // (the progress reporter saw their events): like the entry's, the driver never answered.
    case Stage::stream_sync:
    case Stage::backward_sync: return {4};
    default: return is_memory_stage(s) ? std::vector<int>{6} : std::vector<int>{};
  }
}

std::string why_no_scenario(Stage s) {
  if (!scenarios_for_hung_stage(s).empty()) return {};
  switch (s) {
    case Stage::dropout:
    case Stage::dropout_backward:
    case Stage::cast_output:
    case Stage::grad_inputs:
      return std::string("none, because ") + stage_name(s) +
             " is an elementwise kernel reading only what the GPU wrote earlier in the same call, which no hypothesis "
             "names; the hang snapshot's resident kernel and blocked threads say more";
    default: return std::string("none, because no hypothesis names stage ") + stage_name(s);
  }
}

namespace {

std::string signature_evidence(int scenario, Stage s) {
  const std::string where = std::string("hung in ") + stage_name(s);
  switch (scenario) {
    case 1:
      return s == Stage::qk_gemm    ? where + " (the Q.K^T GEMM had started: [CUBLAS_GEMM_START] is the last line)"
             : s == Stage::pv_gemm  ? where + " (the P.V GEMM, a batched GEMM fix 1 brackets as it does Q.K^T)"
             : s == Stage::mask_add ? where + " (the first kernel on the path's stream to read the scores the Q.K^T "
                                              "GEMM wrote)"
                                    : where + " (a GEMM of the backward pass had started: [CUBLAS_GEMM_START] is the "
                                              "last line)";
    case 2:
      return s == Stage::softmax ? where + " ([MATH_SOFTMAX_START] is the last line)"
                                 : where + " (softmax's backward, a reduction per row like the forward's)";
    case 3:
      return s == Stage::qk_gemm                              ? where + " (cuBLAS reading K^T)"
             : s == Stage::dq_gemm || s == Stage::dk_gemm ? where + " (cuBLAS reading the K or Q the forward's GEMM read)"
                                                              : where + " (after [MATH_QK], before [CUBLAS_GEMM_START])";
    case 4:
      return s == Stage::entry_sync ? where + " (the entry synchronisation never returned)"
             : s == Stage::stream_sync || s == Stage::backward_sync
                 ? where + " (the synchronisation never returned though the stages before it had completed)"
                 : where + " (the first kernel to touch on the GPU pages the host wrote: their faults go through the "
                           "driver)";
    case 5: return where + " (the CUDA graph of the path)";
    case 6:
      return is_memory_stage(s) ? where + " (an allocation or free that did not return)"
                                : where + " (a stage of a pass that allocates as it goes)";
  }
  return where;
}

void add_memory_evidence(HangCandidate& c, const PathSettings& ps) {
  if (migratable(ps.alloc)) {
    c.evidence.push_back(std::string(alloc_kind_name(ps.alloc)) + " memory, whose pages migrate");
  } else {
    c.against.push_back(std::string(alloc_kind_name(ps.alloc)) + " memory does not migrate");
  }
}

HangCandidate candidate(int scenario, Stage hung, const SdpaProblem& p, const PathSettings& ps) {
  HangCandidate c;
  c.scenario = scenario;
  c.title = scenario_info(scenario).title;
  c.evidence.push_back(signature_evidence(scenario, hung));
  switch (scenario) {
    case 1:
      if (ps.qk_gemm_stream != GemmStream::same) {
        c.evidence.push_back(std::string("the Q.K^T GEMM ran on the ") + gemm_stream_name(ps.qk_gemm_stream) +
                             " stream, not the path's (" +
                             (ps.qk_gemm_order == GemmOrder::event ? "ordered by an event"
                              : implicitly_ordered_by_legacy_stream(ps.stream, ps.qk_gemm_stream)
                                  ? "no explicit ordering: only the legacy default stream's implicit one"
                                  : "not ordered at all") +
                             ")");
      } else {
        c.against.push_back("the Q.K^T GEMM ran on the path's own stream");
      }
      break;
    case 2: {
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
      break;
    }
    case 3:
      if (ps.k_layout == KLayout::bshe) c.evidence.push_back("K was a view of a [B, S, H, E] buffer (not contiguous)");
      if (kt_copy_needed(p, ps)) {
        c.against.push_back(ps.kt_contiguous ? "K^T was copied contiguous before the GEMM (fix 3)"
                                             : "K^T was copied contiguous before the GEMM (as at::matmul does for this view)");
      } else {
        c.evidence.push_back(std::string("K^T reached cuBLAS as a transposed view (") +
                             (ps.qk_gemm_api == GemmApi::batched ? "pointer-array cublasGemmBatchedEx" : "strided-batched GEMM") + ")");
      }
      break;
    case 5:
      if (ps.graph) {
        c.evidence.push_back("the call's GPU stages ran as a CUDA graph");
      } else {
        c.against.push_back("no CUDA graph was used");
      }
      break;
    case 6:
      if (ps.alloc_timing == AllocTiming::per_call) {
        c.evidence.push_back("each call allocated its intermediates inside the call (per-call)");
      } else {
        c.against.push_back("every tensor was allocated before the first call");
      }
      if (ps.retain == Retain::autograd) {
        c.evidence.push_back("each layer kept what autograd saves for the backward pass");
      } else {
        c.against.push_back("the layers kept nothing for a backward pass");
      }
      if (ps.layers > 1) c.evidence.push_back(std::to_string(ps.layers) + " layers in sequence");
      return c;  // about the amount of memory, whatever kind it is
    case 4:
      if (ps.entry_touch_streams > 0) {
        c.evidence.push_back(std::to_string(ps.entry_touch_streams) + " streams" + (ps.entry_host_touch ? " and a host thread" : "") +
                             " faulted on every page at entry");
      } else {
        c.against.push_back("no concurrent page faults were set up at entry");
      }
      break;
  }
  add_memory_evidence(c, ps);
  return c;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const auto& part : parts) s += (s.empty() ? "" : sep) + part;
  return s;
}

bool contains_any(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    if (text.find(w) != std::string::npos) return true;
  }
  return false;
}

// The scenarios a resident kernel bears on, by what its name says it is.
std::vector<int> scenarios_of_kernel(const std::string& name) {
  if (contains_any(name, {"gemm", "Gemm", "xmma", "cutlass", "cublas"})) return {1, 3};  // a cuBLAS GEMM
  if (contains_any(name, {"softmax", "SoftMax"})) return {2};
  if (contains_any(name, {"transpose_heads"})) return {3};
  if (contains_any(name, {"touch_pages"})) return {4};
  return {};
}

void add_snapshot_evidence(HangClassification& h, const HangEvidence& e) {
  for (const std::string& kernel : e.resident_kernels) {
    const std::vector<int> fits = scenarios_of_kernel(kernel);
    h.evidence_used.push_back("resident kernel " + kernel +
                              (fits.empty() ? std::string(" (no scenario's kernel)") : std::string()));
    for (HangCandidate& c : h.candidates) {
      if (std::find(fits.begin(), fits.end(), c.scenario) != fits.end()) {
        c.evidence.push_back("the snapshot found " + kernel + " resident on the GPU");
      }
    }
  }
  for (const std::string& blocked : e.blocked_threads) {
    const bool in_uvm = contains_any(blocked, {"uvm"});
    h.evidence_used.push_back(blocked);
    if (!in_uvm) continue;
    // A thread stuck in the unified-memory driver: every hypothesis about migrating pages gains,
    // and scenario 4 (the driver's fault handling itself) most of all.
    for (HangCandidate& c : h.candidates) c.evidence.push_back("a thread blocked in the unified-memory driver: " + blocked);
  }
  if (!e.host_call.empty()) h.evidence_used.push_back("the main thread waited in " + e.host_call);
}

}  // namespace

HangClassification classify_hang(Stage hung, const SdpaProblem& p, const PathSettings& ps, const HangEvidence& evidence) {
  HangClassification h;
  h.stage = stage_name(hung);
  h.no_scenario_reason = why_no_scenario(hung);
  std::vector<int> fits = scenarios_for_hung_stage(hung);
  // A pass that allocates as it goes can run out of memory in any stage: scenario 6 is a candidate
  // wherever its conditions were present, ranked by them.
  const bool training_context = ps.alloc_timing == AllocTiming::per_call || ps.layers > 1 || ps.retain == Retain::autograd;
  if (training_context && std::find(fits.begin(), fits.end(), 6) == fits.end()) fits.push_back(6);
  for (int n : fits) h.candidates.push_back(candidate(n, hung, p, ps));
  add_snapshot_evidence(h, evidence);
  // The candidate with the most conditions for and the fewest against first; on a tie the one
  // judged likelier from the start, which is the lower number (docs/SCENARIOS.md).
  std::stable_sort(h.candidates.begin(), h.candidates.end(), [](const HangCandidate& a, const HangCandidate& b) {
    const auto weight = [](const HangCandidate& c) {
      return static_cast<int>(c.evidence.size()) - static_cast<int>(c.against.size());
    };
    return weight(a) > weight(b);
  });
  return h;
}

std::string HangClassification::summary() const {
  if (candidates.empty()) {
    return "unclassified (hung in stage " + stage + ")" + (no_scenario_reason.empty() ? "" : ": " + no_scenario_reason) +
           (evidence_used.empty() ? std::string() : "; snapshot: " + join(evidence_used, "; "));
  }
  const HangCandidate& first = candidates.front();
  std::string s = "scenario " + std::to_string(first.scenario) + " (" + first.title + "): " + join(first.evidence, "; ");
  if (!first.against.empty()) s += "; against: " + join(first.against, "; ");
  for (size_t i = 1; i < candidates.size(); ++i) {
    s += (i == 1 ? "; also scenario " : ", scenario ") + std::to_string(candidates[i].scenario) + " (" + candidates[i].title + ")";
  }
  if (!evidence_used.empty()) s += "; snapshot evidence used: " + join(evidence_used, "; ");
  return s;
}

}  // namespace sdpa
