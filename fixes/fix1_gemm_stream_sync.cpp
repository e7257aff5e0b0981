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
#include <string>

#include "fix.h"

namespace sdpa {

namespace {

class GemmStreamSync : public Fix {
 public:
  explicit GemmStreamSync(const FixSet& set)
      : set_stream_(set.has(1, "set-stream")), host_sync_(set.has(1, "host-sync")) {}
  int number() const override { return 1; }
  void configure(PathSettings& s) const override {
    if (set_stream_) s.qk_gemm_stream = GemmStream::same;
  }
  void before_stage(HookContext& c) override { synchronize(c, "before"); }
  void after_stage(HookContext& c) override { synchronize(c, "after"); }

 private:
  void synchronize(HookContext& c, const char* when) const {
    if (c.stage != Stage::qk_gemm && c.stage != Stage::pv_gemm) return;
    const std::string stream = stream_placeholder(c.path_stream);
    if (host_sync_) {
      c.gpu->synchronize_stream(c.path_stream);
      c.note("[FIX_1] host-sync: cudaStreamSynchronize(" + stream + ") " + when + " the GEMM" +
             (set_stream_ ? " (set-stream: on the producing stream)" : ""));
    } else if (std::string(when) == "before" && set_stream_) {
      c.note("[FIX_1] set-stream: the GEMM on the producing stream " + stream + ", ordered by the stream");
    }
  }
  bool set_stream_, host_sync_;
};

}  // namespace

FixInfo fix1_gemm_stream_sync() {
  FixInfo f;
  f.number = 1;
  f.name = "gemm_stream_sync";
  f.scenario = "scenario 1";
  f.what = "bind the cuBLAS handle to the stream that produced Q and K, and synchronise that stream before and after "
           "each GEMM";
  f.hook_point = "around qk_gemm and pv_gemm";
  f.budget = "5-10%";
  f.parts = {{"set-stream", "the Q.K^T GEMM's cuBLAS handle follows the stream that produced Q and K", true, true},
             {"host-sync", "cudaStreamSynchronize of that stream before and after each GEMM", true, false}};
  f.make = [](const FixSet& set) -> std::unique_ptr<Fix> { return std::make_unique<GemmStreamSync>(set); };
  // Its lean form (set-stream) is stream order and is captured into a graph; a host round trip is not.
  f.refuse = [](const FixSet& set, const SdpaProblem&, const PathSettings& s) -> std::string {
    if (s.graph && set.has(1, "host-sync")) {
      return "--graph: fix 1's host-sync part synchronises the host inside the call, which a graph cannot hold "
             "(--fixes 1:lean keeps its stream-ordered part)";
    }
    return "";
  };
  return f;
}

}  // namespace sdpa
