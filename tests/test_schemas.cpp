// test_schemas.cpp: the run, bench and report results against their schemas
// (results/run.schema.json, bench.schema.json, report.schema.json), as the sweep's is checked in
// test_sweep.cpp.
//
// What is validated is what users get: the real binary's output (without a GPU: no_gpu runs,
// benches and reports, `repro info --json`; with one: short real runs), the printers' output for
// every kind of run the binary cannot produce here (a checked pass with GEMMs and memory samples,
// a hang with its flight recorder, a crash, a fix comparison, a report of a hang), and the
// committed GPU results under results/ that have the current layout. A renamed or missing key
// fails: every key of a full document is renamed and removed once, and the schema must refuse
// each change except inside the few maps whose keys are free (scenario preconditions).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_examples.h"
#include "json_schema_check.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/stage.h"
#include "repro/bench/bench.h"
#include "repro/info/environment.h"
#include "repro/report/report_writer.h"
#include "repro/run/outcome.h"
#include "repro/run/run_json.h"
#include "full_run_result.h"
#include "run_program.h"
#include "scenarios/scenario.h"

using namespace sdpa;
using nlohmann::json;

namespace {

const sdpa_test::SchemaFiles& schemas() {
  static const sdpa_test::SchemaFiles files = sdpa_test::load_schema_files(SDPA_RESULTS_DIR);
  return files;
}

std::vector<std::string> errors_of(const std::string& schema, const json& doc, const std::string& pointer = "") {
  return sdpa_test::schema_errors(schemas(), schema, doc, pointer);
}

void check_valid(const std::string& schema, const json& doc, const std::string& what) {
  const auto errors = errors_of(schema, doc);
  for (const auto& e : errors) FAIL_CHECK(what << " against " << schema << ": " << e);
}

json committed(const std::string& path) {
  const std::string text = test_util::file_text(std::string(SDPA_RESULTS_DIR) + "/" + path);
  REQUIRE_MESSAGE(!text.empty(), "cannot read results/", path);
  return json::parse(text);
}

// `repro args... --json FILE` as a user runs it; its result must have been written.
json real_run_result(std::vector<std::string> args) {
  const test_util::JsonRun r = test_util::run_with_json(SDPA_REPRO_BINARY, std::move(args), {120, ""});
  INFO("exit ", r.exit_code, "; stderr: ", r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.result.is_object());
  return r.result;
}

bool gpu_present() { return test_util::run_program({SDPA_REPRO_BINARY, "info", "--json"}).exit_code != 7; }

// Every key path of `doc` whose renaming or removal the schema still accepts: the keys the
// schema does not pin down. Array elements are visited one by one ("/stages/0/calls").
std::set<std::string> unpinned_keys(const std::string& schema, const json& doc) {
  REQUIRE(errors_of(schema, doc).empty());
  std::set<std::string> unpinned;
  std::function<void(const json::json_pointer&)> visit = [&](const json::json_pointer& at) {
    const json& node = doc.at(at);
    if (node.is_array()) {
      for (size_t i = 0; i < node.size(); ++i) visit(at / i);
      return;
    }
    if (!node.is_object()) return;
    for (const auto& item : node.items()) {
      json renamed = doc, removed = doc;
      renamed.at(at).erase(item.key());
      renamed.at(at)[item.key() + "_renamed"] = item.value();
      removed.at(at).erase(item.key());
      if (errors_of(schema, renamed).empty() || errors_of(schema, removed).empty()) unpinned.insert((at / item.key()).to_string());
      visit(at / item.key());
    }
  };
  visit(json::json_pointer());
  return unpinned;
}

// `doc` with every array cut to its first 2 elements: unpinned_keys() copies and validates the
// whole document once per key, and a benchmark's further samples, stages and comparisons add
// nothing but time.
json with_short_arrays(json doc) {
  if (doc.is_array() && doc.size() > 2) doc.erase(doc.begin() + 2, doc.end());
  if (doc.is_structured()) {
    for (auto& item : doc) item = with_short_arrays(item);
  }
  return doc;
}

std::string listed(const std::set<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : " ") + k;
  return s.empty() ? "(none)" : s;
}

// The keys of a run's result added after results were committed under results/: optional in the
// schema, so every one of them is a key the schema does not pin down.
const char* const kKeysAddedLater[] = {"/config/conditions/backward", "/config/settings/backward", "/nonfinite_gradients",
                                       "/caveats", "/stalls", "/config/launch_blocking", "/launch_blocking_probe_ms",
                                       "/config/log_extras", "/config/conditions/reduced_on_device",
                                       "/config/settings/reduced_on_device", "/weights_load", "/cpu_seconds", "/check/cost",
                                       "/check/cost/overlapped_seconds", "/check/cost/layers_ahead",
                                       "/check/cost/after_run_because"};
// The settings added later, in a run's conditions and settings and in a bench's settings.
const char* const kSettingsAddedLater[] = {"mapped_weights", "weights_io", "weights_pages", "weights_mapping", "plan_against"};

// unpinned_keys() of `doc` must be exactly `free` (with the keys, when it is not, in the failure).
void check_unpinned(const std::string& schema, const json& doc, const std::set<std::string>& free, const std::string& what) {
  const std::set<std::string> unpinned = unpinned_keys(schema, doc);
  CHECK_MESSAGE(unpinned == free, what, ": keys the schema does not pin down: ", listed(unpinned));
}

DeviceInfo made_up_device() {
  DeviceInfo d;
  d.name = "NVIDIA GB10";
  d.cc_major = 12;
  d.cc_minor = 1;
  d.sm_count = 48;
  d.total_memory = 128ull << 30;
  d.driver_version = 13000;
  d.runtime_version = 13000;
  d.cublas_version = 130100;
  d.integrated = true;
  d.concurrent_managed_access = true;
  d.pageable_memory_access = true;
  return d;
}

RunOptions checked_run_options(int scenario, bool fix_on) {
  RunOptions o;
  o.argv = {"repro", "--scenario", std::to_string(scenario), "--check"};
  o.scenario = scenario;
  apply_scenario(scenario, o.conditions);
  o.check = true;
  FixSet fixes;
  if (fix_on && scenario_info(scenario).fix_number) {
    o.own_fix = true;
    fixes.add(scenario_info(scenario).fix_number);
  }
  o.set_fixes(fixes);
  return o;
}

// A run of `scenario` (its own fix on or off) on a GB10 that ended with `outcome`.
RunResult made_up_run(int scenario, bool fix_on, Outcome outcome, int exit_code, const std::string& error) {
  RunResult r;
  r.options = checked_run_options(scenario, fix_on);
  r.settings = r.options.settings;
  r.device = made_up_device();
  r.result_tensor = result_tensor_of(r.settings);
  r.outcome = outcome;
  r.exit_code = exit_code;
  r.error = error;
  return r;
}

// The printer's result for each kind of run, with every optional block filled somewhere.
RunResult checked_pass() {
  RunResult r = made_up_run(2, true, Outcome::pass, 0, "");
  r.options.iters = 40;
  r.options.sample_every = 10;
  r.checked = true;
  r.comparison.rel_error = 1.5e-3;
  r.comparison.max_abs_error = 2e-3;
  r.tolerance = 4e-3;
  r.iterations_done = 40;
  r.call_median_ms = 0.5;
  r.call_p10_ms = 0.45;
  r.call_p90_ms = 0.7;
  r.result_elements = 262144;
  r.result_l2 = 12.5;
  r.result_sum = -3.25;
  r.stages.push_back({"entry_sync", 40, 0.01, 0.01, 0.02, true});
  r.stages.push_back({"softmax", 40, 0.25, 0.2, 0.3, false});
  r.gemms.push_back(qk_gemm_call(16, 128, 128, 64, DType::fp32, KtOperand{false, 64, 128 * 64}, GemmApi::strided));
  r.allocations.push_back({"scores", 1 << 20, 0x1000, AllocKind::managed});
  for (int64_t calls : {10, 20, 30, 40}) r.memory.push_back({calls, 120000.0, 512.0, 14, 6.5});
  r.soak.summary = "flat over 40 calls";
  r.wall_seconds = 1.25;
  r.cpu_seconds = 2.5;
  r.check_cost = {0.5, 0, 1.75, 16, 0, "the run has a host load", ReferenceProducts::blas,
                  "OpenBLAS 0.3.26 DYNAMIC_ARCH NO_AFFINITY SapphireRapids MAX_THREADS=64 (pthreads, libopenblas.so.0)"};
  return r;
}

RunResult hang_in_softmax() {
  RunResult r = made_up_run(2, false, Outcome::hang, kExitHang, "stage softmax did not finish within 20.0 s");
  r.error_stage = "softmax";
  SupervisedOutcome w;
  w.kind = SupervisedOutcome::hang;
  w.stage = "softmax";
  w.start_us = 1000;
  w.expiry = {true, false, "softmax", 20.5};
  w.records.push_back({"qk_gemm", 2000, 3000, "M=128 N=128 K=64", "done"});
  w.records.push_back({"softmax", 4000, -1, "rows=2048 cols=128", ""});
  w.log_tail = {"[MATH_SOFTMAX_START] Input shape=[2, 8, 128, 128]"};
  r.watchdog = w;
  r.wall_seconds = 21;
  return r;
}

// Died before it reported a device or a stage.
RunResult crash_without_stage() {
  RunResult r = made_up_run(0, false, Outcome::crash, kExitCrash, "the run's process died from signal 11");
  r.device.reset();
  r.result_tensor.reset();
  SupervisedOutcome w;
  w.kind = SupervisedOutcome::crashed;
  w.signal = 11;
  w.message = "signal 11 (Segmentation fault)";
  r.watchdog = w;
  return r;
}

RunResult nan_mismatch() {
  RunResult r = made_up_run(0, false, Outcome::mismatch, kExitMismatch, "3 non-finite outputs");
  r.checked = true;
  r.comparison.rel_error = std::numeric_limits<double>::infinity();
  r.comparison.max_abs_error = std::numeric_limits<double>::quiet_NaN();
  r.comparison.nonfinite = 3;
  r.tolerance = 4e-3;
  r.nonfinite_outputs = 3;
  r.check_cost = {12.5, 0, 190.0, 16, 0, "SDPA_CHECK_AHEAD=0", ReferenceProducts::loops, ""};  // SDPA_REFERENCE_PRODUCTS=loops: no BLAS named
  return r;
}

// A report of scenario 2 that hangs with the fix off and passes with it on, on a GB10.
ReportInput made_up_report() {
  ReportInput in;
  in.fix_off = checked_run_options(2, false);
  in.fix_on = checked_run_options(2, true);
  in.args_off = {"--scenario", "2", "--check", "--fix", "off"};
  in.args_on = {"--scenario", "2", "--check", "--fix", "on"};
  in.report_argv = {"repro", "report", "--scenario", "2", "--out", "r"};
  in.created_utc = "2026-11-24 10:00:00 UTC";
  Environment e;
  e.host = {"Ubuntu 24.04.3 LTS", "6.11.0-1016-nvidia", "aarch64", "580.95.05", {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}}};
  e.cuda = {13000, 13000, 130100, 130100, true, "/usr/local/bin/repro"};
  e.device = made_up_device();
  in.environment = e;
  ReportRun on{true, 1, in.args_on, 0, 1.5, result_to_json(checked_pass()), "pass\n", ""};
  ReportRun off{false, 1, in.args_off, kExitHang, 21, result_to_json(hang_in_softmax()), "HANG\n", ""};
  ReportRun silent{false, 2, in.args_off, 139, 0.5, std::nullopt, "", ""};  // died before writing a result
  in.runs = {on, off, silent};
  in.repeat = 2;
  return in;
}

std::set<std::string> enum_of(const std::string& schema, const std::string& def) {
  std::set<std::string> names;
  for (const auto& name : schemas().at(schema).at("$defs").at(def).at("enum")) names.insert(name.get<std::string>());
  return names;
}

}  // namespace

TEST_SUITE("schemas") {
  TEST_CASE("the validator: anyOf, minItems and maxItems, references into another schema file") {
    const sdpa_test::SchemaFiles files = {
        {"a.schema.json", json::parse(R"({"type": "object", "required": ["d", "pair"], "additionalProperties": false,
            "properties": {"d": {"anyOf": [{"type": "null"}, {"$ref": "b.schema.json#/$defs/thing"}]},
                           "pair": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer"}},
                           "whole": {"$ref": "b.schema.json"}}})")},
        {"b.schema.json", json::parse(R"({"type": "object", "required": ["k"], "properties": {"k": {"$ref": "#/$defs/word"}},
            "$defs": {"thing": {"type": "object", "required": ["k"], "additionalProperties": false,
                                "properties": {"k": {"$ref": "#/$defs/word"}}},
                      "word": {"enum": ["x", "y"]}}})")}};
    auto errors = [&](const char* doc) { return sdpa_test::schema_errors(files, "a.schema.json", json::parse(doc)); };
    CHECK(errors(R"({"d": null, "pair": [1, 2]})").empty());
    CHECK(errors(R"({"d": {"k": "y"}, "pair": [1, 2], "whole": {"k": "x", "other": 1}})").empty());
    const std::vector<std::pair<const char*, const char*>> bad{
        {R"({"d": {"k": "z"}, "pair": [1, 2]})", "/d/k: \"z\" is not one of [\"x\",\"y\"]"},  // "#/$defs/word" of b
        {R"({"d": {}, "pair": [1, 2]})", "/d: required property \"k\" is missing"},              // the object's complaint
        {R"({"d": 3, "pair": [1, 2]})", "/d: 3 is of none of the types anyOf allows"},
        {R"({"d": null, "pair": [1]})", "/pair: 1 items, fewer than 2"},
        {R"({"d": null, "pair": [1, 2, 3]})", "/pair: 3 items, more than 2"},
        {R"({"d": null, "pair": [1, 2], "whole": {"k": 1}})", "/whole/k: 1 is not one of"},
    };
    for (const auto& [doc, expected] : bad) {
      CAPTURE(doc);
      const auto e = errors(doc);
      REQUIRE(e.size() == 1);
      CHECK(e[0].rfind(expected, 0) == 0);
    }
    CHECK_THROWS_AS(sdpa_test::schema_errors(files, "c.schema.json", json::object()), std::invalid_argument);
    CHECK_THROWS_AS(sdpa_test::schema_errors({{"a.schema.json", json::parse(R"({"$ref": "c.schema.json"})")}}, "a.schema.json", json(1)),
                    std::invalid_argument);
    CHECK(schemas().size() >= 4);  // run, bench, report and the sweep's, all loaded from results/
  }

  TEST_CASE("the real binary's run results are valid: no_gpu here, short real runs with a GPU") {
    for (const auto& args : {std::vector<std::string>{"--scenario", "2"},
                             std::vector<std::string>{"--scenario", "0", "--check", "--mask", "causal", "--dropout", "0.1",
                                                      "--iters", "2", "--alloc", "device"},
                             std::vector<std::string>{"--scenario", "3", "--fix", "on", "--dtype", "fp16", "--log", "stages"}}) {
      const json result = real_run_result(args);
      check_valid("run.schema.json", result, "repro " + args[1]);
      CHECK(result["config"]["problem"]["mask"].is_string());
    }
    const test_util::ProgramRun info = test_util::run_program({SDPA_REPRO_BINARY, "info", "--json"});
    json environment = json::parse(info.out);
    environment.erase("meta");  // the info command's own; the rest is the environment a report embeds
    for (const auto& e : errors_of("report.schema.json", environment, "#/$defs/environment")) FAIL_CHECK("repro info --json: " << e);
  }

  TEST_CASE("the printer's run results for a pass, a hang, a crash and a NaN mismatch are valid") {
    const std::vector<std::pair<const char*, RunResult>> runs = {
        {"checked pass", checked_pass()}, {"hang", hang_in_softmax()}, {"crash", crash_without_stage()}, {"mismatch", nan_mismatch()}};
    for (const auto& [what, run] : runs) check_valid("run.schema.json", result_to_json(run), what);
    // The blocks are there to be checked: a pass has its check and stages, a hang its watchdog.
    const json pass = result_to_json(checked_pass()), hang = result_to_json(hang_in_softmax());
    CHECK(pass["check"]["max_abs_error"] == 2e-3);
    CHECK(pass["memory"]["samples"].size() == 4);
    CHECK(hang["watchdog"]["flight_recorder"][1]["duration_ms"].is_null());
    CHECK(result_to_json(nan_mismatch())["check"]["max_abs_error"].is_null());
  }

  TEST_CASE("a result with every measurement is valid, each block where the schema has it") {
    const json j = result_to_json(test_util::full_run_result());
    check_valid("run.schema.json", j, "every measurement");
    CHECK(j["memory_plan"]["layers_asked"] == 60);
    CHECK(j["memory_plan"]["tensors"][0]["allocated_in"] == "alloc_scores");
    CHECK(j["memory_plan"]["pools"][0]["fits_only_by_reclaim"] == true);
    CHECK(j["memory_plan"]["integrated"] == true);
    CHECK(j["weights_load"]["gb_per_s"] == doctest::Approx(2.0));
    CHECK(j["weights_load"]["after"]["rss_file"] == 1'500'000'000);
    CHECK(j["stalls"]["calls_stalled"] == 10);
    CHECK(j["check"]["gradients"][1]["passed"] == false);
    // The UVM counters: "other" is every address but the named ones, so the path's.
    CHECK(j["uvm"]["ranges"][1]["range"] == "path");
    CHECK(j["uvm"]["ranges"][0]["bytes_htod"] == 614'465'536);
    CHECK(j["uvm"]["not_counted"] == "THROTTLING (CUPTI_ERROR_NOT_SUPPORTED)");
  }

  TEST_CASE("the committed GPU runs with the current layout are valid") {
    // Runs committed before format 3 (results/h100-2026-11-24/ and older) have an older layout
    // (the schema's description says so).
    for (const char* path :
         {"h100-2026-11-25/context/default_device.json", "h100-2026-11-25/context/context_all.json",
          "h100-2026-11-25/context/ballast.json", "h100-2026-11-25/context/plan_device.json",
          "h100-2026-11-25/context/plan_vmm.json", "h100-2026-11-25/context/s6_fix_on.json"}) {
      const json doc = committed(path);
      check_valid("run.schema.json", doc, path);
      CHECK(doc["outcome"] == "pass");
      CHECK(doc["device"]["name"] == "NVIDIA H100 80GB HBM3");
    }
    // An injected hang in a layer: the watchdog block as a real hang writes it, with its layer.
    const json hang = committed("h100-2026-11-25/context/hang_layer.json");
    check_valid("run.schema.json", hang, "context/hang_layer.json");
    CHECK(hang["outcome"] == "hang");
    CHECK(hang["watchdog"]["position"]["layer"] == 3);
  }

  TEST_CASE("a renamed or missing key of a run result fails, wherever it is") {
    // The sweep, the report and users' scripts read these by key.
    json doc = result_to_json(checked_pass());
    doc["watchdog"] = result_to_json(hang_in_softmax())["watchdog"];
    // Keys added after results were committed are optional: the committed runs before them have none.
    std::set<std::string> free{"/scenario/preconditions/last_stage", "/scenario/preconditions/scores_host_phase",
                               "/scenario/preconditions/scores_to_host"};
    for (const char* key : kKeysAddedLater) free.insert(key);
    for (const char* setting : kSettingsAddedLater) {
      for (const char* in : {"/config/conditions/", "/config/settings/"}) free.insert(in + std::string(setting));
    }
    check_unpinned("run.schema.json", doc, free,
                   "a pass with a watchdog block");
    check_unpinned("run.schema.json", committed("h100-2026-11-25/context/default_device.json"), {}, "context/default_device.json");
    json renamed = doc;
    renamed["check"]["max_error"] = renamed["check"]["max_abs_error"];
    renamed["check"].erase("max_abs_error");
    const auto errors = errors_of("run.schema.json", renamed);
    REQUIRE(errors.size() == 2);
    CHECK(errors[0] == "/check: required property \"max_abs_error\" is missing");
    CHECK(errors[1] == "/check: property \"max_error\" is not allowed");
  }

  TEST_CASE("the schema's outcomes and stages are exactly the code's") {
    std::set<std::string> own;  // a run's own outcomes: those with an exit code of repro's
    for (int o = 0; o <= static_cast<int>(Outcome::no_result); ++o) {
      if (outcome_exit_code(static_cast<Outcome>(o))) own.insert(outcome_name(static_cast<Outcome>(o)));
    }
    CHECK(enum_of("run.schema.json", "outcome") == own);
    std::set<std::string> stages;
    for (int s = 0; s < kStageCount; ++s) stages.insert(stage_name(static_cast<Stage>(s)));
    CHECK(enum_of("run.schema.json", "stage") == stages);
  }

  TEST_CASE("the real binary's bench result is valid") {
    const json real = real_run_result({"bench", "-n", "5", "-w", "1", "--fix-overhead", "each"});
    check_valid("bench.schema.json", real, "repro bench");
  }

  TEST_CASE("bench results are valid: the printer's, the committed GPU benchmarks") {
    const json printed = bench_to_json(bench_examples::overhead_result());
    check_valid("bench.schema.json", printed, "bench_to_json");
    REQUIRE(printed["fix_overhead"].size() == 2);
    CHECK(printed["fix_overhead"][1]["is_skipped"] == true);
    BenchResult hung;
    hung.options.run = checked_run_options(2, false);
    hung.outcome = Outcome::hang;
    hung.exit_code = kExitHang;
    hung.watchdog = *hang_in_softmax().watchdog;
    check_valid("bench.schema.json", bench_to_json(hung), "a hung bench");
    // Benchmarks with the training context's settings (committed from 2026-11-25 on): a 60-layer
    // pass and the single call it is compared with.
    for (const char* path : {"h100-2026-11-25/context/bench_layers1.json", "h100-2026-11-25/context/bench_layers60.json"}) {
      const json doc = committed(path);
      check_valid("bench.schema.json", doc, path);
      CHECK(doc["outcome"] == "pass");
    }
    CHECK(committed("h100-2026-11-25/context/bench_layers60.json")["config"]["settings"]["layers"] == "60");
  }

  TEST_CASE("a renamed or missing key of a bench result fails, and a measured comparison must be complete") {
    const json printed = bench_to_json(bench_examples::overhead_result());
    std::set<std::string> free;
    for (const char* in : {"/benchmarks/0/settings/", "/config/conditions/", "/config/settings/", "/fix_overhead/0/a/settings/",
                           "/fix_overhead/0/b/settings/"}) {
      for (const char* setting : {"backward", "reduced_on_device"}) free.insert(in + std::string(setting));
      for (const char* setting : kSettingsAddedLater) free.insert(in + std::string(setting));
    }
    free.insert("/cpu_seconds");  // added after the benchmarks under results/ were committed
    check_unpinned("bench.schema.json", with_short_arrays(printed), free, "bench_to_json");
    check_unpinned("bench.schema.json", with_short_arrays(committed("h100-2026-11-25/context/bench_layers60.json")), {},
                   "context/bench_layers60.json");
    json skipped_but_measured = printed;
    skipped_but_measured["fix_overhead"][0]["is_skipped"] = true;
    CHECK_FALSE(errors_of("bench.schema.json", skipped_but_measured).empty());
  }

  TEST_CASE("the real binary's report results are valid: --no-run; the runs without a GPU") {
    const std::string dir = test_util::temp_dir("schema_report");
    const test_util::ProgramRun no_run =
        test_util::run_program({SDPA_REPRO_BINARY, "report", "--scenario", "4", "--no-run", "--out", dir + "/no_run"});
    REQUIRE(no_run.exit_code == 0);
    check_valid("report.schema.json", json::parse(test_util::file_text(dir + "/no_run/result.json")), "report --no-run");
    if (gpu_present()) {
      MESSAGE("a GPU is present: a report that runs its children is validated only without one (they would run for real)");
    } else {
      const test_util::ProgramRun ran =
          test_util::run_program({SDPA_REPRO_BINARY, "report", "--scenario", "3", "--out", dir + "/ran"}, {300, ""});
      CHECK(ran.exit_code == 7);
      const json doc = json::parse(test_util::file_text(dir + "/ran/result.json"));
      check_valid("report.schema.json", doc, "report without a GPU");
      CHECK(doc["runs"][0]["result"]["outcome"] == "no_gpu");
    }
    test_util::remove_tree(dir);
  }

  TEST_CASE("report results are valid: the printer's, with and without the context ladder") {
    // The committed GPU reports (results/h100-2026-11-24/) are of format 2, before the ladder.
    ReportInput in = made_up_report();
    const json printed = report_json(in);
    check_valid("report.schema.json", printed, "report_json");
    CHECK(printed["report"]["finding"] == "hang");
    CHECK(printed["runs"][2]["outcome"] == "no_result");
    CHECK(printed["ladder"].is_null());
    in.ladder = ladder_rungs(ContextLadderValues{});
    in.ladder.resize(4);  // isolated, per-call, layers, ballast
    for (LadderRung& r : in.ladder) r.finding = "not_reproduced";
    in.ladder.back().finding = "hang";
    const json laddered = report_json(in);
    check_valid("report.schema.json", laddered, "report_json with a ladder");
    CHECK(laddered["ladder"][3]["rung"] == "ballast");
    CHECK(laddered["report"]["title"].get<std::string>().find("at rung ballast of the context ladder") != std::string::npos);
  }

  TEST_CASE("a renamed or missing key of a report fails, in the report and in each run's result") {
    std::set<std::string> free;
    for (const char* key : {"/scenario/preconditions/last_stage", "/scenario/preconditions/scores_host_phase",
                            "/scenario/preconditions/scores_to_host"}) {
      free.insert(key);
      for (const char* run : {"/runs/0/result", "/runs/1/result"}) free.insert(run + std::string(key));
    }
    const json report = report_json(made_up_report());
    for (const char* key : kKeysAddedLater) {
      for (const char* run : {"/runs/0/result", "/runs/1/result"}) {
        // A key inside a block one of the runs has not (the hung run's check) is no key of it.
        if (report.contains(json::json_pointer(run + std::string(key)))) free.insert(run + std::string(key));
      }
    }
    for (const char* setting : kSettingsAddedLater) {
      for (const char* run : {"/runs/0/result", "/runs/1/result"}) {
        for (const char* in : {"/config/conditions/", "/config/settings/"}) free.insert(run + std::string(in) + setting);
      }
    }
    // The environment's CUDA variables are whatever names it has: the map is pinned, not its entries.
    free.insert("/environment/host/cuda_variables/CUDA_DEVICE_MAX_CONNECTIONS");
    check_unpinned("report.schema.json", report, free,
                   "report_json");
  }

  TEST_CASE("every mutant of tests/mutants.json still applies: its original text occurs once in its file") {
    // A mutant whose code has changed since is reported "stale" by tools/mutation_check.py, and
    // the decision it guarded goes unchecked without anyone being told; this says so in CI. While
    // mutation_check.py has a mutant in (SDPA_MUTANT_IN), the mutants of its file are left out: its
    // original text is out of the file, and so may another's that shares its line (two mutants of
    // one condition), and this case would kill every mutant, survivors included.
    const char* mutant_in = std::getenv("SDPA_MUTANT_IN");
    const json doc = json::parse(test_util::file_text(std::string(SDPA_SOURCE_DIR) + "/tests/mutants.json"));
    REQUIRE(doc["mutants"].size() >= 90);
    std::string file_in;  // the file the mutant put in changed
    for (const json& m : doc["mutants"]) {
      if (mutant_in && m.at("id") == mutant_in) file_in = m.at("file");
    }
    std::set<std::string> ids;
    for (const json& m : doc["mutants"]) {
      const std::string id = m.at("id"), file = m.at("file"), original = m.at("original"), mutant = m.at("mutant");
      CAPTURE(id);
      CHECK(ids.insert(id).second);  // each id once
      CHECK(original != mutant);
      CHECK_FALSE(m.at("means").get<std::string>().empty());
      if (file == file_in) continue;
      const std::string source = test_util::file_text(std::string(SDPA_SOURCE_DIR) + "/" + file);
      REQUIRE_MESSAGE(!source.empty(), file, " is missing or empty");
      size_t count = 0;
      for (size_t at = source.find(original); at != std::string::npos; at = source.find(original, at + 1)) ++count;
      CHECK_MESSAGE(count == 1, file, " holds the original text ", count, " times");
    }
  }
}
