// triage_known_answers.h: four faults whose answer is known, for `repro triage` end to end: the
// CPU test gives them to the fake child (tests/test_triage.cpp), the GPU test to the real path
// (tests/test_gpu_triage.cpp), and both hold SUMMARY.md and the exit code to the same answers.
//
// Each is a fault the harness injects under conditions (`--inject`, docs/WATCHDOG.md), so the
// triage must find it where it is and call it what it is:
//   a hang in softmax only from S = 2048 on managed memory, without the fix: the sweep finds it,
//     the minimization shrinks it to S exactly 2048 and every other size 1, the fix clears it;
//   a hang only from layer 3, with what autograd keeps: no sweep cell (one layer) meets it, the
//     ladder's layers rung does, and the minimization ends at 3 layers;
//   a CUDA error in dq_gemm, only with the backward pass: the ladder's last rung, a failure;
//   a stall (softmax 1.5 s a call, under the 3 s deadline): called a stall, never a hang.
// The last three replay the captured call of tests/fixtures/triage/workload.json (S = 2048, 4
// layers), so that every rung's checked run is small.
#pragma once

#include <string>
#include <vector>

#include "math_sdpa/errors.h"

namespace test_util {

struct KnownTriage {
  std::string name;                   // its folder
  std::string inject;                 // --inject
  bool capture;                       // --workload-file tests/fixtures/triage/workload.json
  std::string budget;                 // --budget on the GPU (the fake child's runs take no time)
  int exit_code;                      // the triage's
  std::vector<std::string> said;      // in SUMMARY.md
  std::vector<std::string> not_said;  // not in SUMMARY.md
};

inline const std::vector<KnownTriage>& known_triages() {
  static const std::vector<KnownTriage> known = {
      {"softmax_from_2048", "hang:softmax@S>=2048@alloc=managed@no-fix", false, "6m", sdpa::kExitHang,
       {"**A run hung** (exit 3)", "shape=1x8x256x2048x64 alloc=managed stream=default iters=5 repeat=0: hang in softmax",
        "--q-len 1 --kv-len 2048 --head-dim 1 ", "with its scenario's fix: pass", "fix 2 clears it"},
       {"A stall", "with its scenario's fix: hang"}},
      {"layer_3", "hang:softmax@layer=3@retain", true, "6m", sdpa::kExitHang,
       {"**A run hung** (exit 3)", "scenario 2's context ladder (`ladder-2/REPORT.md`)", "at rung layers", "(finding: hang)",
        "from scenario 2's ladder", "--kv-len 1 --head-dim 1 ", " --layers 3 "},
       {"rung isolated of", "0 failed otherwise.\n- cell"}},
      {"dq_gemm_backward", "error:dq_gemm@backward", true, "8m", sdpa::kExitMismatch,
       {"**Nothing hung, but a run failed** (exit 1)", "at rung backward", "(finding: failure)", "from scenario 2's ladder",
        "--kv-len 1 --head-dim 1 ", " --backward "},
       {"A run hung", "A stall", "--mapped-weights", "--layers"}},
      {"stall", "slow:softmax:1500", true, "6m", sdpa::kExitStalled,
       {"**A stall, not a hang** (exit 9)", "0 hung, 2 stalled, 0 failed otherwise.", ": stalled in softmax",
        "The smallest configuration that still fails (stall"},
       {"A run hung", ": hang"}},
  };
  return known;
}

// The triage's options but --out and the fake child's.
inline std::vector<std::string> known_triage_args(const KnownTriage& k, const std::string& budget) {
  std::vector<std::string> args = {"--budget", budget, "--scenarios", "2", "--stage-timeout", "3", "--runs", "2",
                                   "--no-bug-report", "--inject", k.inject};
  if (k.capture) {
    args.insert(args.end(), {"--workload-file", std::string(SDPA_SOURCE_DIR) + "/tests/fixtures/triage/workload.json"});
  }
  return args;
}

}  // namespace test_util
