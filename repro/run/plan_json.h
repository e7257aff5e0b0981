// plan_json.h: a run's call plan (math_sdpa/call_plan.h) as JSON, what `repro --plan --json FILE`
// writes: the problem, the settings, the tensor table, how the calls repeat (layers, steps, the
// backward pass) and each call's steps with their operations and operands. scripts/torch_stages.py
// reads it and maps each operation onto PyTorch's; docs/PATH.md describes the format.
#pragma once

#include <nlohmann/json.hpp>

#include "math_sdpa/call_plan.h"
#include "repro/cli/run_options.h"

namespace sdpa {

constexpr int kPlanFormatVersion = 1;

nlohmann::json call_plan_to_json(const CallPlan& plan);
// The whole document for a run's options: the plan of its calls with its fixes' actions recorded.
nlohmann::json run_plan_to_json(const RunOptions& o);

}  // namespace sdpa
