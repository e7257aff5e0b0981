// scenario0_full_path.cpp: scenario 0, the whole Math path with no extra conditions: the
// reference point every other scenario is compared with, and what a PyTorch user's call does.
#include "scenario.h"

namespace sdpa {

ScenarioInfo scenario0_full_path() {
  ScenarioInfo s;
  s.number = 0;
  s.title = "the full Math SDPA path";
  s.hypothesis = "none: the path as PyTorch's _scaled_dot_product_attention_math runs it, on unified memory";
  s.setup = "nothing beyond the options given; any fix can be added with --fixes";
  s.runs = "every stage, entry_sync to stream_sync";
  s.fix_number = 0;
  s.hang_signature = "any stage; the watchdog names it and classifies it by the scenarios' hang signatures";
  s.options = "every option of a run; --fixes adds any fix";
  return s;
}

}  // namespace sdpa
