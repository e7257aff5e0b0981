// fix5_bounded_memory.cpp: Fix 5, for scenario 6 (docs/SCENARIOS.md, docs/CONTEXT.md).
//
// Hypothesis it answers (scenario 6): the first forward pass of training allocates past the memory
// GB10 can give, because the Math path upcasts to fp32 and autograd keeps every layer's fp32
// probabilities (2.04 GB per Qwen-Image block, 60 blocks), and the driver stalls instead of
// failing. Its parts, each a way to allocate less (docs/FIXES.md):
//   native     the scores and probabilities in bf16/fp16, as
//              torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) makes PyTorch compute
//              them: half of what is kept. It changes the numerics, so it is not in the design form;
//   recompute  each layer keeps nothing after its call, what torch.utils.checkpoint does (the
//              backward pass recomputes the forward): the design and lean form;
//   chunk      the scores in chunks of query rows of at most --chunk-size bytes: a call's transient
//              peak shrinks from the whole layer's scores to one chunk's. What autograd keeps does
//              not (every chunk's probabilities are kept), so alone it does not make a retaining
//              pass fit; with recompute it bounds what a call ever holds.
#include "fix.h"

namespace sdpa {

namespace {

// Each chunk's scores at most 256 MiB unless --chunk-size says otherwise: at the failing
// workload's layer (24 heads, 4608 keys, fp32) that is 8 chunks of 576 query rows.
constexpr int64_t kDefaultChunkBytes = int64_t{256} << 20;

class BoundedMemory : public Fix {
 public:
  explicit BoundedMemory(const FixSet& set)
      : native_(set.has(FixPart::native_probs)), recompute_(set.has(FixPart::recompute)), chunk_(set.has(FixPart::chunk)) {}
  int number() const override { return 5; }
  void configure(PathSettings& s) const override {
    if (recompute_) s.retain = Retain::none;
    if (chunk_ && s.chunk_bytes == 0) s.chunk_bytes = kDefaultChunkBytes;
  }
  void configure(SdpaProblem& p) const override {
    if (native_) p.precision = Precision::native;
  }

 private:
  bool native_, recompute_, chunk_;
};

}  // namespace

std::unique_ptr<Fix> make_bounded_memory_fix(const FixSet& set) { return std::make_unique<BoundedMemory>(set); }

}  // namespace sdpa
