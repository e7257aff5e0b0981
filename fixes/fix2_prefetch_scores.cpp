// fix2_prefetch_scores.cpp: Fix 2 (docs/SCENARIOS.md, "Softmax Reduction Kernel").
//
// Hypothesis it answers (scenario 2): the softmax reduction deadlocks while the scores' pages
// migrate between CPU and GPU. The proposed patch: prefetch the input to the GPU and synchronise
// before the softmax kernel, synchronise the device after it. Its parts (docs/FIXES.md):
//   prefetch     cudaMemPrefetchAsync(ptr, bytes, cudaMemLocation, flags, stream) of the scores
//                to the GPU on the softmax's stream, so the kernel starts after the pages are
//                resident, in stream order;
//   host-sync    cudaStreamSynchronize before the kernel (the host waits for the prefetch);
//   device-sync  cudaDeviceSynchronize after it;
//   device-scores  the lean form, not in the patch as proposed: what softmax reduces over is
//                allocated in device memory (cudaMalloc) whatever --alloc says (the path does it:
//                a setting), so its pages never migrate and the host cannot touch them. It costs
//                nothing per call, where the prefetch walks every page of the scores every call.
// Memory that does not migrate (device, async, pinned host) takes no prefetch.
#include <cstdio>

#include "fix.h"

namespace sdpa {

namespace {

class PrefetchScores : public Fix {
 public:
  explicit PrefetchScores(const FixSet& set)
      : prefetch_(set.has(2, "prefetch")),
        host_sync_(set.has(2, "host-sync")),
        device_sync_(set.has(2, "device-sync")),
        device_scores_(set.has(2, "device-scores")) {}
  int number() const override { return 2; }
  void configure(PathSettings& s) const override {
    if (device_scores_) s.reduced_on_device = true;
  }
  // The softmax's reduction and, with --backward, its backward's: the same hypothesis, the same patch.
  static bool reduction(Stage s) { return s == Stage::softmax || s == Stage::softmax_backward; }
  void before_stage(HookContext& c) override {
    if (!reduction(c.stage)) return;
    char buf[200];
    if (prefetch_ && migratable(c.kind)) {  // c.kind: the memory of what is reduced (device under device-scores)
      for (const ReducedOperand& o : c.reduced) {
        c.gpu->prefetch_to_device(o, c.stream);
        std::snprintf(buf, sizeof buf, "[FIX_2] prefetch: cudaMemPrefetchAsync(%s, %lld bytes, device %d) on the stream", o.name,
                      static_cast<long long>(o.bytes), c.device);
        c.note(buf);
      }
    } else if (prefetch_) {
      std::snprintf(buf, sizeof buf, "[FIX_2] prefetch skipped (%s memory does not migrate)", alloc_kind_name(c.kind));
      c.note(buf);
    }
    if (host_sync_) {
      c.gpu->synchronize_stream(c.stream);
      c.note(std::string("[FIX_2] host-sync: cudaStreamSynchronize before ") + stage_name(c.stage));
    }
  }
  void after_stage(HookContext& c) override {
    if (!reduction(c.stage) || !device_sync_) return;
    c.gpu->synchronize_device();
    c.note(std::string("[FIX_2] device-sync: cudaDeviceSynchronize after ") + stage_name(c.stage));
  }

 private:
  bool prefetch_, host_sync_, device_sync_, device_scores_;
};

}  // namespace

FixInfo fix2_prefetch_scores() {
  FixInfo f;
  f.number = 2;
  f.name = "prefetch_scores";
  f.scenario = "scenario 2";
  f.what = "prefetch the scores to the GPU (cudaMemPrefetchAsync with a cudaMemLocation) and synchronise before softmax; "
           "synchronise the device after it";
  f.hook_point = "around softmax";
  f.budget = "10-15%";
  f.parts = {{"prefetch", "cudaMemPrefetchAsync of the scores to the GPU on the softmax's stream, ordered before the kernel",
              true, false},
             {"host-sync", "cudaStreamSynchronize before softmax", true, false},
             {"device-sync", "cudaDeviceSynchronize after softmax", true, false},
             {"device-scores",
              "the scores (and, backward, the probabilities and their gradient) in device memory (cudaMalloc), which never "
              "migrates: the host cannot touch their pages, so none moves",
              false, true}};
  f.make = [](const FixSet& set) -> std::unique_ptr<Fix> { return std::make_unique<PrefetchScores>(set); };
  // Its lean form (device-scores) is where the scores are allocated, before a capture; its other parts
  // are host work, and a prefetch in a capture fails with cudaErrorStreamCaptureUnsupported (CUDA
  // 13.0, H100).
  f.refuse = [](const FixSet& set, const SdpaProblem&, const PathSettings& s) -> std::string {
    if (!s.graph) return "";
    for (const char* part : {"host-sync", "device-sync"}) {
      if (set.has(2, part)) {
        return std::string("--graph: fix 2's ") + part + " part synchronises the host inside the call, which a graph "
               "cannot hold (--fixes 2:lean, the scores in device memory, needs no capture)";
      }
    }
    if (set.has(2, "prefetch")) {
      return "--graph: fix 2's prefetch cannot be captured into a graph (cudaMemPrefetchAsync in a stream capture fails "
             "with cudaErrorStreamCaptureUnsupported)";
    }
    return "";
  };
  return f;
}

}  // namespace sdpa
