// fix4_stream_ordered_alloc.cpp: Fix 4 (docs/SCENARIOS.md, "CUDA Driver Page Fault
// Handler").
//
// Hypothesis it answers (scenario 4): the driver's unified-memory fault handler deadlocks under
// concurrent faults from several streams. The proposed patch: cudaMallocAsync instead of
// cudaMallocManaged, so there is no managed memory to fault. Its parts, one allocator each
// (docs/FIXES.md):
//   stream-pool   cudaMallocAsync from the device's pool, ordered on the path's stream, as the
//                 patch writes it (the design and lean form);
//   private-pool  cudaMallocFromPoolAsync from a pool of our own, each allocation synchronised on
//                 the pool's stream (math_sdpa/allocator.cpp).
// The stage log's [ALLOC_DEBUG] lines then say kind=async.
#include "fix.h"

namespace sdpa {

namespace {

class StreamOrderedAlloc : public Fix {
 public:
  explicit StreamOrderedAlloc(const FixSet& set)
      : pool_(set.has(4, "private-pool") ? AsyncPool::private_pool : AsyncPool::stream) {}
  int number() const override { return 4; }
  void configure(PathSettings& s) const override {
    s.alloc = AllocKind::async;
    s.async_pool = pool_;
  }

 private:
  AsyncPool pool_;
};

}  // namespace

FixInfo fix4_stream_ordered_alloc() {
  FixInfo f;
  f.number = 4;
  f.name = "stream_ordered_alloc";
  f.scenario = "scenario 4";
  f.what = "allocate every tensor with cudaMallocAsync, ordered on the path's stream, instead of cudaMallocManaged";
  f.hook_point = "the allocator";
  f.budget = "<= 0%";
  f.parts = {{"stream-pool", "every tensor from cudaMallocAsync (the device's pool), ordered on the path's stream", true, true},
             {"private-pool",
              "every tensor from a pool of our own (cudaMallocFromPoolAsync), each allocation synchronised on the pool's "
              "stream",
              false, false, "stream-pool"}};  // one allocator
  f.make = [](const FixSet& set) -> std::unique_ptr<Fix> { return std::make_unique<StreamOrderedAlloc>(set); };
  return f;
}

}  // namespace sdpa
