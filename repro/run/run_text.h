// run_text.h: the human-readable summary of a run that repro prints on stdout.
#pragma once

#include <string>

#include "repro/run/run_result.h"

namespace sdpa {

std::string result_to_text(const RunResult& r);
// "scenario 0 B=2 Hq=8 ... dtype=bf16 precision=upcast mask=none dropout=0 alloc=managed iters=1"
std::string configuration_line(const RunOptions& o);

}  // namespace sdpa
