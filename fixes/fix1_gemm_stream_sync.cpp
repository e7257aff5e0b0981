// fix1_gemm_stream_sync.cpp: Fix 1 (docs/SCENARIOS.md, "cuBLAS Stream Ordering").
//
// Hypothesis it answers (scenario 1): cuBLAS's kernels run on a stream that is not properly
// ordered after the stream that produced Q and K, and with unified memory that stalls. The proposed
// patch to gemm_batched: bind the handle to the current stream, synchronise that stream
// before the GEMM and again after it. Here: the handle of the Q.K^T GEMM is bound to the path's
// stream (configure), and both GEMMs are bracketed by cudaStreamSynchronize of that stream.
#include <cstdio>

#include "fix.h"

namespace sdpa {

namespace {

class GemmStreamSync : public Fix {
 public:
  int number() const override { return 1; }
  void configure(PathSettings& s) const override { s.qk_gemm_stream = GemmStream::same; }
  void before_stage(HookContext& c) override { synchronize(c, "before"); }
  void after_stage(HookContext& c) override { synchronize(c, "after"); }

 private:
  static void synchronize(HookContext& c, const char* when) {
    if (c.stage != Stage::qk_gemm && c.stage != Stage::pv_gemm) return;
    c.gpu->synchronize_stream(c.path_stream);
    char buf[160];
    std::snprintf(buf, sizeof buf, "[FIX_1] cuBLAS handle on the producing stream %p; cudaStreamSynchronize %s the GEMM",
                  static_cast<void*>(c.path_stream), when);
    c.note(buf);
  }
};

}  // namespace

std::unique_ptr<Fix> make_gemm_stream_sync_fix() { return std::make_unique<GemmStreamSync>(); }

}  // namespace sdpa
