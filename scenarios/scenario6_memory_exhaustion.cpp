// scenario6_memory_exhaustion.cpp: scenario 6, the first forward pass of training running past the
// memory of GB10's one shared pool.
#include "scenario.h"

#include "hang_classification.h"
#include "workload.h"

namespace sdpa {

namespace {
void setup(PathSettings& s) {
  s.alloc = AllocKind::device;
  s.alloc_timing = AllocTiming::per_call;
  s.layers = kQwenImageBlocks;
  s.retain = Retain::autograd;
}

// A pass of many layers (the training context, even allocated up front) can exhaust memory in any stage.
bool training_context(const PathSettings& ps) {
  return ps.alloc_timing == AllocTiming::per_call || ps.layers > 1 || ps.retain == Retain::autograd;
}

// About the amount of memory, whatever kind it is. A hang before the first call (the weights'
// load) came before any layer allocated or kept anything: the pass had not begun.
void weigh(Stage hung, const SdpaProblem&, const PathSettings& ps, HangCandidate& c) {
  if (stage_when(hung) == StageWhen::load) {
    c.against.push_back("it hung before the first call, before any layer allocated or kept anything");
    return;
  }
  // The backward pass frees what the forward pass kept, layer by layer: past its first
  // allocations memory falls. Only an allocation of its own, inside the call, can still run out.
  if (stage_when(hung) == StageWhen::backward && !(is_memory_stage(hung) && ps.alloc_timing == AllocTiming::per_call)) {
    c.against.push_back("it hung in the backward pass, which frees what the forward pass kept as it goes, and not in "
                        "an allocation of its own");
  }
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
}
}  // namespace

ScenarioInfo scenario6_memory_exhaustion() {
  ScenarioInfo s;
  s.number = 6;
  s.title = "the forward pass exhausts the shared memory pool";
  s.hypothesis =
      "the first forward pass of training allocates past the memory GB10 can give (the Math path upcasts to fp32 and "
      "autograd keeps every layer's fp32 probabilities: 2.04 GB per Qwen-Image block, 60 blocks, beside 41 GB of "
      "weights), and the driver stalls instead of failing with out-of-memory (public DGX Spark reports: "
      "docs/CONTEXT.md)";
  s.setup =
      "the workload's 60 attention layers in sequence, each with its own Q, K, V and output, each call allocating its "
      "intermediates inside the call in PyTorch's order through PyTorch's caching-allocator model (--alloc device: "
      "cudaMalloc; --alloc vmm: an expandable segment), each layer keeping what autograd saves for the backward pass "
      "(the scaled Q and K^T, the fp32 probabilities, dropout's mask and output, V) until the pass ends; memory "
      "(MemAvailable and cudaMemGetInfo) is written to the stage log at every stage. Before anything is allocated the "
      "memory plan is checked against the memory available: a plan past 90% of it is refused (exit 8) unless "
      "--allow-oversubscription, which on a DGX Spark may need a power cycle to recover from: start --log-file first "
      "so that the last stage and the memory are on disk. Add --ballast for the rest of the model";
  s.runs = "every stage of every layer, with alloc_* and free_* stages inside each call (checks each layer's output)";
  s.fix_number = 5;
  s.hang_signature =
      "an alloc_* stage (or the stage after it) of a late layer with MemAvailable near zero in the [MEMORY] lines, and "
      "nothing after it; on GB10 the whole machine may stop";
  s.options = "--layers N|model, --retain, --alloc device|vmm|managed, --ballast, --host-load, --allow-oversubscription, "
              "--log-file, --fixes 5:native|recompute|chunk, --chunk-size";
  s.preconditions = {{"alloc", "device"}, {"alloc_timing", "per-call"}, {"layers", std::to_string(kQwenImageBlocks)},
                     {"retain", "autograd"}};
  s.default_workload = "qwen-image-1024";
  s.setup_fn = setup;
  s.memory_trace = true;
  s.signature_memory_stages = true;
  s.candidate_anywhere = training_context;
  s.anywhere_why = "a stage of a pass that allocates as it goes";
  s.weigh = weigh;
  s.not_by_default = "it allocates past the memory there is on purpose: see its plan first, `repro --scenario 6 --plan`";
  return s;
}

}  // namespace sdpa
