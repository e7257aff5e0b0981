// run_json.h: the machine-readable result of a run (`--json FILE`), written and read back.
//
// Layout after nvbench's JSON: "meta" (format version, command line, harness version),
// "device", then the run's configuration, outcome and measurements. Bump kResultFormatVersion
// on any incompatible change.
//
// The writer and the one reader live side by side, so the programs that read a run's result
// back (the sweep, the report) see the same keys, the same outcome words and the same rule for
// which stage a run failed in.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "repro/run/run_result.h"

namespace sdpa {

constexpr int kResultFormatVersion = 3;

nlohmann::json problem_to_json(const SdpaProblem& p);
nlohmann::json settings_to_json(const PathSettings& s);
nlohmann::json context_to_json(const ContextSettings& c);
nlohmann::json plan_to_json(const MemoryPlan& plan, const std::vector<PoolUse>& pools, const std::optional<MemoryFacts>& facts);
nlohmann::json measured_to_json(const MemoryMeasured& m);
nlohmann::json weights_load_to_json(const WeightsLoad& w);
nlohmann::json uvm_to_json(const UvmCounts& u);
nlohmann::json scenario_to_json(int number);
nlohmann::json device_to_json(const DeviceInfo& d);
// A check's cost, the "cost" of a run's or a benchmark's "check" block.
nlohmann::json check_cost_to_json(const CheckCost& c);
DeviceInfo device_from_json(const nlohmann::json& j);
nlohmann::json result_to_json(const RunResult& r);

// What the watchdog found about a run that hung or crashed ("watchdog" in the result).
struct WatchdogFindings {
  struct FlightRecord {
    std::string stage;
    double start_s = 0;
    std::optional<double> duration_ms;  // nullopt: still running when the watchdog looked
    std::string detail;
  };
  std::string kind;  // hang, crash, bad_output
  std::optional<std::string> stage;
  std::optional<std::string> classification;
  std::vector<std::string> candidates;  // "scenario N (title): evidence; against: ...", most likely first
  double running_seconds = 0;
  std::vector<FlightRecord> flight_recorder;  // oldest first
  std::vector<std::string> stage_log_tail;
  // What --on-hang did (watchdog.h, hang_actions_json).
  std::optional<std::string> snapshot_path;   // the snapshot folder
  nlohmann::json snapshot;                    // the "snapshot" object as written (summary, collectors), or null
  std::vector<std::string> evidence;          // snapshot_evidence's lines
  bool survived_kill = false;                 // the hung process was still there after SIGKILL
  std::vector<std::string> kernel_stacks;     // its threads' kernel stacks
};

struct StageMedian {
  std::string stage;
  double median_ms = 0;
};

// What the programs that read a run's result need of it. Absent keys read as their empty
// value, so a result written by a fake or an older run still reads.
struct RunRecord {
  Outcome outcome = Outcome::pass;
  std::optional<int> exit_code;
  std::optional<std::string> error, error_stage;
  std::string alloc;  // config.alloc, "" when absent
  std::optional<double> rel_error, tolerance;  // of --check; a non-finite rel_error is written as null
  int64_t iterations_done = 0;
  std::optional<double> call_median_ms, first_call_ms, steady_call_median_ms;
  std::vector<StageMedian> stages, first_call_stages, steady_stages;  // every call; the first; calls 2..N
  nlohmann::json device;  // the device object as the run wrote it, or null
  std::optional<WatchdogFindings> watchdog;
  // The run's stalls when any call stalled (repro/run/stalls.h; records as the JSON holds them):
  // what a sweep's square and a report's runs show of them.
  std::optional<Stalls> stalls;

  // The stage the watchdog saw it stop in when it hung or crashed, else the stage of its error.
  std::optional<std::string> failing_stage() const;
};

// Throws nlohmann::json::exception where a key has the wrong type, InputError for an outcome
// that is not one.
RunRecord read_run_record(const nlohmann::json& j);

}  // namespace sdpa
