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
      : prefetch_(set.has(FixPart::prefetch)),
        host_sync_(set.has(FixPart::softmax_host_sync)),
        device_sync_(set.has(FixPart::device_sync)),
        device_scores_(set.has(FixPart::device_scores)) {}
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
      for (const HookContext::Operand& o : c.reduced) {
        c.gpu->prefetch_to_device(o.data, o.bytes, c.device, c.stream);
        std::snprintf(buf, sizeof buf, "[FIX_2] prefetch: cudaMemPrefetchAsync(%s, %zu bytes, device %d) on the stream", o.name,
                      o.bytes, c.device);
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

std::unique_ptr<Fix> make_prefetch_scores_fix(const FixSet& set) { return std::make_unique<PrefetchScores>(set); }

}  // namespace sdpa
