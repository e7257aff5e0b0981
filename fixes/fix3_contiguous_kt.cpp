// fix3_contiguous_kt.cpp: Fix 3 (docs/SCENARIOS.md, "Transpose Memory Layout").
//
// Hypothesis it answers (scenario 3): K^T reaching cuBLAS as a non-contiguous view (a transposed
// operand with a leading dimension, perhaps of a [B, S, H, E] buffer) makes the GEMM fault its
// way through unified memory. The proposed patch: key.transpose(-2, -1).contiguous() before the
// bmm. Here: the path copies K^T into a contiguous [B*H, E, S] buffer with our own transpose
// kernel (stage kt_contiguous, logged with reason=fix_3), and the GEMM takes it with op N.
#include "fix.h"

namespace sdpa {

namespace {

class ContiguousKt : public Fix {
 public:
  int number() const override { return 3; }
  void configure(PathSettings& s) const override { s.kt_contiguous = true; }
};

}  // namespace

FixInfo fix3_contiguous_kt() {
  FixInfo f;
  f.number = 3;
  f.name = "contiguous_kt";
  f.scenario = "scenario 3";
  f.what = "copy K^T to a contiguous [B*H, E, S] buffer with our own transpose kernel before the GEMM (op N instead of a "
           "transposed view)";
  f.hook_point = "the K^T preparation (stage kt_contiguous)";
  f.budget = "2-5%";
  f.parts = {{"contiguous-kt", "K^T copied to a contiguous [B*H, E, S] buffer before the GEMM", true, true}};
  f.make = [](const FixSet&) -> std::unique_ptr<Fix> { return std::make_unique<ContiguousKt>(); };
  return f;
}

}  // namespace sdpa
