// fix2_prefetch_scores.cpp: Fix 2 (docs/SCENARIOS.md, "Softmax Reduction Kernel").
//
// Hypothesis it answers (scenario 2): the softmax reduction deadlocks while the scores' pages
// migrate between CPU and GPU. The proposed patch: prefetch the input to the GPU and synchronise
// before the softmax kernel, synchronise the device after it. Here with CUDA 13's
// cudaMemPrefetchAsync(ptr, bytes, cudaMemLocation, flags, stream). Memory that does not
// migrate (device, async, pinned host) takes no prefetch; the synchronisations still happen.
#include <cstdio>

#include "fix.h"

namespace sdpa {

namespace {

class PrefetchScores : public Fix {
 public:
  int number() const override { return 2; }
  void before_stage(HookContext& c) override {
    if (c.stage != Stage::softmax) return;
    char buf[200];
    if (migratable(c.scores_kind)) {
      c.gpu->prefetch_to_device(c.scores, c.scores_bytes, c.device, c.stream);
      std::snprintf(buf, sizeof buf, "[FIX_2] cudaMemPrefetchAsync(scores, %zu bytes, device %d); cudaStreamSynchronize",
                    c.scores_bytes, c.device);
    } else {
      std::snprintf(buf, sizeof buf, "[FIX_2] prefetch skipped (%s memory does not migrate); cudaStreamSynchronize",
                    alloc_kind_name(c.scores_kind));
    }
    c.gpu->synchronize_stream(c.stream);
    c.note(buf);
  }
  void after_stage(HookContext& c) override {
    if (c.stage != Stage::softmax) return;
    c.gpu->synchronize_device();
    c.note("[FIX_2] cudaDeviceSynchronize after softmax");
  }
};

}  // namespace

std::unique_ptr<Fix> make_prefetch_scores_fix() { return std::make_unique<PrefetchScores>(); }

}  // namespace sdpa
