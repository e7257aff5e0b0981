// fix1_gemm_stream_sync.cpp: Fix 1 (docs/SCENARIOS.md, "cuBLAS Stream Ordering").
//
// Hypothesis it answers (scenario 1): cuBLAS's kernels run on a stream that is not properly
// ordered after the stream that produced Q and K, and with unified memory that stalls. The
// proposed patch to gemm_batched: bind the handle to the current stream, synchronise that stream
// before the GEMM and again after it. Its two parts (docs/FIXES.md):
//   set-stream  the handle of the Q.K^T GEMM is bound to the path's stream (configure), so the
//               GEMM is ordered after Q and K by the stream itself: the lean form;
//   host-sync   both GEMMs bracketed by cudaStreamSynchronize of that stream, a host round trip
//               each: the host issues the GEMM only once Q and K are done, and sees the GEMM
//               finish only where it runs on that stream (pv_gemm; qk_gemm with set-stream).
#include <cstdio>

#include "fix.h"

namespace sdpa {

namespace {

class GemmStreamSync : public Fix {
 public:
  explicit GemmStreamSync(const FixSet& set)
      : set_stream_(set.has(FixPart::set_stream)), host_sync_(set.has(FixPart::gemm_host_sync)) {}
  int number() const override { return 1; }
  void configure(PathSettings& s) const override {
    if (set_stream_) s.qk_gemm_stream = GemmStream::same;
  }
  void before_stage(HookContext& c) override { synchronize(c, "before"); }
  void after_stage(HookContext& c) override { synchronize(c, "after"); }

 private:
  void synchronize(HookContext& c, const char* when) const {
    if (c.stage != Stage::qk_gemm && c.stage != Stage::pv_gemm) return;
    char buf[200];
    if (host_sync_) {
      c.gpu->synchronize_stream(c.path_stream);
      std::snprintf(buf, sizeof buf, "[FIX_1] host-sync: cudaStreamSynchronize(%p) %s the GEMM%s",
                    static_cast<void*>(c.path_stream), when, set_stream_ ? " (set-stream: on the producing stream)" : "");
      c.note(buf);
    } else if (std::string(when) == "before" && set_stream_) {
      std::snprintf(buf, sizeof buf, "[FIX_1] set-stream: the GEMM on the producing stream %p, ordered by the stream",
                    static_cast<void*>(c.path_stream));
      c.note(buf);
    }
  }
  bool set_stream_, host_sync_;
};

}  // namespace

std::unique_ptr<Fix> make_gemm_stream_sync_fix(const FixSet& set) { return std::make_unique<GemmStreamSync>(set); }

}  // namespace sdpa
