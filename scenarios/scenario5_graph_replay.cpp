// scenario5_graph_replay.cpp: scenario 5, the path captured into a CUDA graph and replayed on
// unified memory.
#include "scenario.h"

#include "hang_classification.h"

namespace sdpa {

namespace {
// torch.cuda.graph captures on a side stream of its own: the legacy default stream cannot be captured.
void setup(PathSettings& s) {
  s.graph = true;
  s.stream = StreamMode::non_blocking;
}

void weigh(Stage, const SdpaProblem&, const PathSettings& ps, HangCandidate& c) {
  if (ps.graph) {
    c.evidence.push_back("the call's GPU stages ran as a CUDA graph");
  } else {
    c.against.push_back("no CUDA graph was used");
  }
}
}  // namespace

ScenarioInfo scenario5_graph_replay() {
  ScenarioInfo s;
  s.number = 5;
  s.title = "CUDA-graph capture and replay on unified memory";
  s.hypothesis =
      "capturing the math path into a CUDA graph (as torch.compile's reduce-overhead mode and serving stacks do) and "
      "replaying it on unified memory hangs or fails on GB10, in the capture, the instantiation or a replay "
      "(public reports of graph capture failing and of graph replays hanging on DGX Spark: docs/SCENARIOS.md)";
  s.setup =
      "the first call's GPU stages (the kernels, both cuBLAS GEMMs with their workspace set, an injected fault) are "
      "captured from the path's stream into one CUDA graph (stage graph_capture), instantiated (graph_instantiate), "
      "and every call replays it (graph_launch) between the entry synchronisation and the final one, on managed "
      "memory. Host work inside the call cannot be captured: --scores-to-host, the legacy default stream, "
      "--gemm-order none, fix 1's host-sync part, every part of fix 2 (a prefetch cannot be captured either) and "
      "--log sync|values are refused with --graph (fix 1's lean form is stream order and is captured)";
  s.runs = "entry_sync, graph_capture and graph_instantiate (first call), graph_launch, stream_sync (checks the output)";
  s.fix_number = 4;
  s.hang_signature = "[MATH_GRAPH_CAPTURE], [MATH_GRAPH_INSTANTIATE] or [MATH_GRAPH_LAUNCH] and nothing after it";
  s.options = "--alloc, --fixes (lean forms), --iters (replays), --gemm-stream aux";
  s.preconditions = {{"graph", "on"}, {"stream", "non-blocking"}};
  s.needs_migrating_memory = true;
  s.setup_fn = setup;
  s.signature = {{Stage::graph_capture}, {Stage::graph_instantiate}, {Stage::graph_launch}};
  s.weigh = weigh;
  // The ladder's rungs from per-call allocation on change the tensors' addresses every call or
  // layer, which a graph replays fixed: they cannot go together (--graph refuses them).
  s.no_ladder = "a CUDA graph replays one layer's tensors at fixed addresses, and the ladder's rungs from per-call "
                "allocation on allocate inside each call or run several layers";
  return s;
}

}  // namespace sdpa
