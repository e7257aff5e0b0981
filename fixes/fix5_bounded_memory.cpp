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
      : native_(set.has(5, "native")), recompute_(set.has(5, "recompute")), chunk_(set.has(5, "chunk")) {}
  int number() const override { return 5; }
  void configure(PathSettings& s) const override {
    if (recompute_) s.retain = Retain::checkpoint;
    if (chunk_ && s.chunk_bytes == 0) s.chunk_bytes = kDefaultChunkBytes;
  }
  void configure(SdpaProblem& p) const override {
    if (native_) p.precision = Precision::native;
  }

 private:
  bool native_, recompute_, chunk_;
};

}  // namespace

FixInfo fix5_bounded_memory() {
  FixInfo f;
  f.number = 5;
  f.name = "bounded_memory";
  f.scenario = "scenario 6";
  f.what = "keep the forward pass inside the memory there is: each layer keeps nothing for the backward pass (it is "
           "recomputed, as gradient checkpointing does) and the scores are computed in chunks of query rows of at most "
           "256 MiB (--chunk-size)";
  f.hook_point = "what each layer allocates and keeps";
  // Its price is recomputation in the backward pass, not time in the call: no budget per call.
  f.parts = {{"native",
              "the scores and probabilities in the input dtype (bf16/fp16), as allow_fp16_bf16_reduction_math_sdp(True) "
              "computes them: half the bytes kept per layer, and a result within that precision's tolerance",
              false, false},
             {"recompute", "each layer keeps nothing for the backward pass after its call, which recomputes it (gradient "
                           "checkpointing)",
              true, true},
             {"chunk",
              "the scores, probabilities and dropout computed in chunks of query rows, each chunk's scores at most "
              "--chunk-size bytes (what autograd keeps is unchanged: every chunk's)",
              true, false}};
  f.make = [](const FixSet& set) -> std::unique_ptr<Fix> { return std::make_unique<BoundedMemory>(set); };
  f.refuse = [](const FixSet& set, const SdpaProblem& p, const PathSettings& s) -> std::string {
    if (s.backward && set.has(5, "chunk")) {
      return "--backward: fix 5's chunk part computes the forward in chunks of query rows, and the backward call it "
             "would need is not built (fix 5's recompute and native parts work)";
    }
    if (chunk_rows(p, s) < p.q_len && s.qk_gemm_api == GemmApi::batched) {
      return "fix 5's chunk part: the pointer-array GEMM (--gemm-api batched) cannot take chunks of query rows";
    }
    return "";
  };
  return f;
}

}  // namespace sdpa
