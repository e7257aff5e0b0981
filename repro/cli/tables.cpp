// tables.cpp: the stage and scenario tables for people (help) and for the scripts (JSON).
#include "repro/cli/tables.h"

#include "fixes/fix_list.h"
#include "math_sdpa/stage.h"
#include "repro/cli/help_format.h"
#include "scenarios/scenario.h"

namespace sdpa {

namespace {

nlohmann::json debug_lines_json(const std::vector<DebugLineTemplate>& lines) {
  nlohmann::json out = nlohmann::json::array();
  for (const DebugLineTemplate& l : lines) {
    out.push_back({{"channel", debug_channel_name(l.channel)}, {"text", l.text}, {"line", l.source_line}});
  }
  return out;
}

}  // namespace

nlohmann::json stages_json() {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageRow& row : stage_table()) {
    const Stage alloc = allocation_stage_of(row.stage);
    stages.push_back({{"name", row.name},
                      {"kind", stage_kind_name(row.kind)},
                      {"when", stage_when_name(row.when)},
                      {"serves", stage_name(row.serves)},
                      {"allocation_stage", alloc == row.stage ? nlohmann::json() : nlohmann::json(stage_name(alloc))},
                      {"begin", row.begin},
                      {"end", row.end},
                      {"debug_begin", debug_lines_json(row.debug_begin)},
                      {"debug_end", debug_lines_json(row.debug_end)},
                      {"hang", row.hang},
                      {"runs_if", row.runs_if.needs ? nlohmann::json(row.runs_if.needs) : nlohmann::json()},
                      {"harness_work", row.harness_work}});
  }
  return {{"format", 1},
          {"comment", "The stage table of math_sdpa/stage.cpp (`repro help stages --json`): each stage in the path's "
                      "order. Line templates hold placeholders in braces ({+x} is a space and x when x is not empty); "
                      "a debug line ends with [source:line]."},
          {"source", stage_table_source()},
          {"stages", stages}};
}

std::string stages_help() {
  std::string s = "Stages (the stage log, --inject STAGE, the JSON's stage names; docs/LOG_FORMAT.md):\n";
  for (const StageRow& row : stage_table()) {
    s += "  " + std::string(row.name) + " (" + stage_kind_name(row.kind) + ", " + stage_when_name(row.when) +
         (row.runs_if.needs ? std::string(", needs ") + row.runs_if.needs : std::string()) + "): a hang: " + row.hang + "\n";
  }
  return wrap_text(s);
}

std::string scenarios_help() {
  std::string s = "Scenarios (--scenario N; docs/SCENARIOS.md has a section on each):\n";
  for (const ScenarioInfo& sc : scenario_table()) {
    s += "  " + std::to_string(sc.number) + "  " + sc.title + "\n";
    if (sc.number == 0) continue;
    s += "     sets up: " + std::string(sc.setup) + "\n";
    s += "     runs: " + std::string(sc.runs) + "\n";
    s += "     a hang looks like: " + std::string(sc.hang_signature) + "\n";
    s += "     its fix (--fix on): fix " + std::to_string(sc.fix_number) + ", " + fix_info(sc.fix_number).what + "\n";
    if (sc.no_ladder) s += "     not climbed by the context ladder: " + std::string(sc.no_ladder) + "\n";
    if (sc.not_by_default) s += "     not in the default sweep and triage: " + std::string(sc.not_by_default) + "\n";
  }
  s += "Fixes (--fixes LIST: any combination, any scenario):\n";
  for (int n = 1; n <= fix_count(); ++n) {
    s += "  " + std::to_string(n) + "  " + fix_info(n).name + " (" + fix_info(n).hook_point + "): " + fix_info(n).what + "\n";
  }
  return wrap_text(s);
}

}  // namespace sdpa
