// scenario7_mapped_weights.cpp: scenario 7, the model's memory-mapped weights in the page cache,
// sharing GB10's one pool with the GPU's allocations.
#include "scenario.h"

#include "hang_classification.h"
#include "math_sdpa/host_memory.h"
#include "math_sdpa/weights_plan.h"
#include "workload.h"

namespace sdpa {

namespace {

// Qwen-Image's weights as a training script loads them: its transformer's 41 GB and its text
// encoder's 16 GB (docs/SCENARIOS.md), through safetensors' mapped files.
constexpr int64_t kQwenImageWeightsBytes = 57'000'000'000LL;

void setup(PathSettings& s) {
  s.weights.bytes = kQwenImageWeightsBytes;
  s.alloc = AllocKind::device;
  s.alloc_timing = AllocTiming::per_call;
  s.layers = kQwenImageBlocks;
  s.retain = Retain::autograd;
}

std::string gb(int64_t bytes) { return std::to_string(bytes / 1'000'000'000) + " GB"; }

// Whether the weights came through the page cache, and how much of it there is now: the hang is
// classified where it happened, so the page cache read here is the one the hung run left.
void weigh(Stage, const SdpaProblem&, const PathSettings& ps, HangCandidate& c) {
  if (ps.weights.bytes == 0) {
    c.against.push_back("no weights were loaded from a mapped file");
    return;
  }
  // Pages read with O_DIRECT or dropped after each copy never stayed in the page cache: against.
  if (weights_pages_cached(ps.weights)) {
    c.evidence.push_back("the model's " + gb(ps.weights.bytes) + " of weights were read through the page cache (mapped), "
                         "which MemAvailable counts as available");
  } else {
    c.against.push_back(std::string("the weights were kept out of the page cache (") +
                        (ps.weights.io == WeightsIo::direct ? "O_DIRECT" : "pages dropped after each copy") + ")");
  }
  c.evidence.push_back(gb(ps.weights.bytes) + " of their GPU copies held beside the path");
  const HostMemory now = read_host_memory();
  if (now.cached >= 0) {
    c.evidence.push_back("the page cache held " + gb(now.cached) + " when the hang was classified (" + host_memory_text(now) + ")");
  }
}

}  // namespace

ScenarioInfo scenario7_mapped_weights() {
  ScenarioInfo s;
  s.number = 7;
  s.title = "the model's mapped weights in the page cache share the memory pool";
  s.hypothesis =
      "a training script loads its weights through safetensors, which maps the files: the page cache then holds them "
      "next to their GPU copies in GB10's one pool, MemAvailable counts the cached pages as available, and the GPU's "
      "next allocations (the rest of the load, the first forward pass) need the pool to reclaim them, which the driver "
      "cannot do in time: it stalls instead of failing (public GB10 reports of loads that hang in cudaMemcpy with ~92 GB "
      "of page cache, and of NV_ERR_NO_MEMORY under unified-memory pressure: docs/SCENARIOS.md)";
  s.setup =
      "before the first call the model's 57 GB of weights (--mapped-weights; Qwen-Image's transformer and text "
      "encoder) are loaded from a memory-mapped file into device memory tensor by tensor, each a pageable copy from the "
      "mapped pages (stage load_weights), the copies kept; then the first forward pass of training as scenario 6 runs "
      "it: the workload's 60 layers, each call allocating in PyTorch's order through its caching-allocator model, each "
      "layer keeping what autograd keeps; memory (MemFree, MemAvailable, Cached, RssFile, cudaMemGetInfo) at every "
      "stage. The memory plan counts the weights' copies and their page cache, and judges an integrated GPU's pool "
      "without reclaiming the cache: a plan that fits only by reclaiming it is refused (exit 8) unless "
      "--allow-oversubscription. Give a --mapped-weights and --layers that fit to run it on a smaller machine";
  s.runs = "load_weights (once a tensor), then every stage of every layer with alloc_* and free_* stages inside each call "
           "(checks each layer's output)";
  s.fix_number = 6;
  s.hang_signature =
      "[LOAD_WEIGHTS] tensor=N/M ... and nothing after it (the load), or an alloc_* stage of a later layer, with Cached "
      "near the weights' size in the [MEMORY] lines";
  s.options = "--mapped-weights SIZE[:FILE], --weights-mapping unmap|keep, --layers N|model, --retain, --allow-oversubscription, "
              "--log-file, --fixes 6:direct|drop|guard";
  s.preconditions = {{"mapped_weights", std::to_string(kQwenImageWeightsBytes)},
                     {"alloc", "device"},
                     {"alloc_timing", "per-call"},
                     {"layers", std::to_string(kQwenImageBlocks)},
                     {"retain", "autograd"}};
  s.default_workload = "qwen-image-1024";
  s.setup_fn = setup;
  s.memory_trace = true;
  s.signature = {{Stage::load_weights, "a copy of a weight tensor from the mapped pages never returned"}};
  s.signature_memory_stages = true;
  s.weigh = weigh;
  s.not_by_default = "it loads 57 GB of weights and runs 60 layers on purpose: see its plan first, `repro --scenario 7 --plan`";
  return s;
}

}  // namespace sdpa
