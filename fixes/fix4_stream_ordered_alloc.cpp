// fix4_stream_ordered_alloc.cpp: Fix 4 (docs/SCENARIOS.md, "CUDA Driver Page Fault
// Handler").
//
// Hypothesis it answers (scenario 4): the driver's unified-memory fault handler deadlocks under
// concurrent faults from several streams. The proposed patch: cudaMallocAsync instead of
// cudaMallocManaged, so there is no managed memory to fault. Here: every tensor comes from the
// AsyncPoolAllocator (a stream-ordered pool of our own, math_sdpa/allocator.cpp); the stage
// log's [ALLOC_DEBUG] lines then say kind=async.
#include "fix.h"

namespace sdpa {

namespace {

class StreamOrderedAlloc : public Fix {
 public:
  int number() const override { return 4; }
  void configure(PathSettings& s) const override { s.alloc = AllocKind::async; }
};

}  // namespace

std::unique_ptr<Fix> make_stream_ordered_alloc_fix() { return std::make_unique<StreamOrderedAlloc>(); }

}  // namespace sdpa
