// scenario4_concurrent_faults.cpp: scenario 4, the driver's page-fault handling under
// concurrent faults.
#include "scenario.h"

#include "hang_classification.h"

namespace sdpa {

namespace {
void setup(PathSettings& s) {
  s.entry_touch_streams = 4;
  s.entry_host_touch = true;
}

// The storm of concurrent faults at entry.
void weigh(Stage, const SdpaProblem&, const PathSettings& ps, HangCandidate& c) {
  if (ps.entry_touch_streams > 0) {
    c.evidence.push_back(std::to_string(ps.entry_touch_streams) + " streams" + (ps.entry_host_touch ? " and a host thread" : "") +
                         " faulted on every page at entry");
  } else {
    c.against.push_back("no concurrent page faults were set up at entry");
  }
}
}  // namespace

ScenarioInfo scenario4_concurrent_faults() {
  ScenarioInfo s;
  s.number = 4;
  s.title = "driver page-fault handling under concurrent faults";
  s.hypothesis =
      "the CUDA driver's unified-memory fault handler deadlocks on concurrent faults from several streams, and the "
      "first cudaDeviceSynchronize at SDPA entry never returns (judged 5% likely: docs/SCENARIOS.md)";
  s.setup =
      "at entry the host first reads every page of every managed tensor (moving them to the host), then N streams "
      "(--touch-streams, default 4) read every page at once while a host thread reads them again concurrently "
      "where the device reports concurrentManagedAccess (elsewhere the host touches only between launches, "
      "--host-touch off disables it); then the entry synchronisation. The whole path follows";
  s.runs = "every stage; the storm is inside entry_sync (checks the output)";
  s.fix_number = 4;
  s.hang_signature = "[SDPA_ENTRY] Q shape=.. and no [CUDA_EVENT] sdpa_entry: hung in entry_sync";
  s.options = "--touch-streams N, --host-touch on|off, --alloc, --stream";
  s.preconditions = {{"entry_touch_streams", "4"}, {"entry_host_touch", "on"}};
  s.needs_migrating_memory = true;
  s.setup_fn = setup;
  // The entry synchronisation; the first kernels of a call (and of a backward call) to touch on the
  // GPU pages the host wrote, whose faults go through the driver's fault handler; and the
  // synchronisations that did not return though every stage before them completed on the GPU
  // (the progress reporter saw their events): like the entry's, the driver never answered.
  s.signature = {{Stage::entry_sync}, {Stage::mask_prepare}, {Stage::upcast},        {Stage::scale_q},
                 {Stage::stream_sync}, {Stage::grad_upcast}, {Stage::backward_sync}};
  s.kernels = {"touch_pages"};
  s.weigh = weigh;
  return s;
}

}  // namespace sdpa
