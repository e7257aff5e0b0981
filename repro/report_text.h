// report_text.h: the human-readable summary of a run that repro prints on stdout.
#pragma once

#include <string>

#include "run_result.h"

namespace sdpa {

std::string result_to_text(const RunResult& r);

}  // namespace sdpa
