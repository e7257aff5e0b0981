// result_json.h: the machine-readable result of a run (`--json FILE`).
//
// Layout after nvbench's JSON: "meta" (format version, command line, harness version),
// "device", then the run's configuration, outcome and measurements. Bump kResultFormatVersion
// on any incompatible change.
#pragma once

#include <nlohmann/json.hpp>

#include "repro/run/run_result.h"

namespace sdpa {

constexpr int kResultFormatVersion = 1;

nlohmann::json problem_to_json(const SdpaProblem& p);
nlohmann::json settings_to_json(const PathSettings& s);
nlohmann::json scenario_to_json(int number);
nlohmann::json device_to_json(const DeviceInfo& d);
DeviceInfo device_from_json(const nlohmann::json& j);
nlohmann::json result_to_json(const RunResult& r);

}  // namespace sdpa
