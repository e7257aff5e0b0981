// run_result.cpp: the results of runs that never reached the GPU's end: a hang or crash the
// supervisor reported, and a run waived before it started. Host-only.
#include "repro/run/run_result.h"

#include <nlohmann/json.hpp>

#include "repro/run/run_json.h"

namespace sdpa {

RunResult watchdog_result(const RunOptions& options, const SupervisedOutcome& outcome) {
  RunResult r;
  r.options = options;
  r.settings = options.settings;
  r.result_tensor = result_tensor_of(r.settings);
  const bool hang = outcome.kind == SupervisedOutcome::hang;
  r.fail(hang ? Outcome::hang : Outcome::crash,
         hang ? "stage " + (outcome.stage.empty() ? std::string("(none)") : outcome.stage) + " did not finish within the deadline"
              : outcome.message);
  r.error_stage = outcome.stage;
  r.iterations_done = static_cast<int>(outcome.calls_done);
  r.wall_seconds = outcome.elapsed_s;
  r.watchdog = outcome;
  if (!outcome.device_json.empty()) {
    try {
      r.device = device_from_json(nlohmann::json::parse(outcome.device_json));
    } catch (const std::exception&) {
    }
  }
  return r;
}

RunResult waived_result(const RunOptions& options, const std::string& reason) {
  RunResult r;
  r.options = options;
  r.settings = options.settings;
  r.result_tensor = result_tensor_of(r.settings);
  r.fail(Outcome::waived, reason);
  return r;
}

}  // namespace sdpa
