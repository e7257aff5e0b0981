// pytorch_equivalent.h: the problem of a run, said in PyTorch: the
// torch.nn.functional.scaled_dot_product_attention call under sdpa_kernel(SDPBackend.MATH) that
// computes what the harness computes (REPORT.md's "The same problem in PyTorch"), and the
// command line of scripts/torch_stages.py that runs the run's call plan stage by stage on the
// user's PyTorch. Host-only text.
#pragma once

#include <string>
#include <vector>

#include "repro/cli/run_options.h"

namespace sdpa {

// A short Python program: inputs of the run's shapes, dtypes, layout and mask, the SDPA call
// with its dropout, scale, causality and GQA, the math backend forced, a synchronisation.
std::string pytorch_sdpa_snippet(const RunOptions& o);

// scripts/torch_stages.py with the run's own options (`run_args`, the harness's command without the
// binary): the script asks repro for their call plan (`repro --plan --json`) and maps its steps.
std::vector<std::string> torch_stages_command(const std::vector<std::string>& run_args);

}  // namespace sdpa
