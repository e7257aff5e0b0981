// tables.h: the closed sets several layers need, as JSON and text: `repro help stages` and
// `repro help scenarios`, with --json the documents the Python scripts read instead of a copy of
// their own (the build writes both beside the binary: stages.json, scenarios.json).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sdpa {

// The stage table (math_sdpa/stage.h): every row with its log templates and what a hang in it shows.
nlohmann::json stages_json();
std::string stages_help();  // one line a stage: name, kind, when, what a hang in it shows

// `repro help scenarios`: each scenario in full (what it sets up, runs, how its hang looks, its
// fix) and each fix; --help lists them one line each.
std::string scenarios_help();

}  // namespace sdpa
