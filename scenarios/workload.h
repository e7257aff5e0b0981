// workload.h: the failing workload's attention layers, as named problems (--workload NAME).
//
// The hang was seen in the first forward pass of a LoRA training run of Qwen-Image, a 20B
// text-to-image diffusion transformer, in bf16 through PyTorch's Math SDPA. Its 60 blocks each run
// one joint attention over the text tokens followed by the image tokens: 24 heads of 128, the
// joint sequence [text, image] as both queries and keys, K handed to SDPA as a transposed view of
// a [B, S, H, E] projection. docs/SCENARIOS.md gives the published configuration these shapes
// come from. Host-only data, like the scenarios.
#pragma once

#include <string>
#include <vector>

#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"

namespace sdpa {

// Qwen-Image's transformer: 60 dual-stream blocks, one joint attention each (docs/SCENARIOS.md).
constexpr int kQwenImageBlocks = 60;

struct Workload {
  const char* name = "";
  const char* what = "";  // one line: the layer, and how its sequence is made up
  SdpaProblem problem;    // shape, dtype and mask (--seed stays the command line's)
  KLayout k_layout = KLayout::bhse;  // the layout the model hands K to SDPA in
  int blocks = 1;         // attention layers in the model's forward pass (--layers model)
};

const std::vector<Workload>& workload_table();
// Throws InputError naming every workload.
const Workload& find_workload(const std::string& name);
std::string workload_names();  // "a|b|c"

}  // namespace sdpa
