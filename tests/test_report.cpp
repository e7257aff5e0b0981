// test_report.cpp: `repro report`, `repro info`, `repro --version` and the generated reproducer,
// without a GPU.
//
// Suite "report": the real binary writes a complete folder with --no-run for every scenario;
// `repro info --json` carries every field of the environment block; --force and an existing
// folder; bad options exit 2 with one line; and, in-process, the title and sections of a report
// of made-up runs (a hang, passes, no GPU), the environment's parsers and the template language.
// Suite "report_nvcc": every scenario's reproducer, and configurations that between them print
// every operation of the call plan, compiles with nvcc and links with cuBLAS without a warning.
// Skipped (exit 77) without nvcc.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "math_sdpa/errors.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/reference.h"
#include "repro/info/environment.h"
#include "repro/report/report_writer.h"
#include "repro/report/reproducer/generator.h"
#include "repro/run/run_json.h"
#include "report_test_util.h"
#include "scenarios/scenario.h"

using namespace sdpa;
using namespace report_test;

namespace {

const std::vector<std::string> kSections = {
    "## Environment", "## Exact commands", "## The same problem in PyTorch", "## Preconditions", "## Expected and actual", "## How often",
    "## Hang",        "## Stage times",    "## Fix off / fix on", "## nvidia-bug-report.sh", "## Files"};

RunOptions options_for(int scenario, bool fix_on) {
  RunOptions o;
  o.scenario = scenario;
  apply_scenario(scenario, o.conditions);
  o.check = true;
  o.log = LogLevel::stages;
  FixSet fixes;
  if (fix_on) {
    o.own_fix = true;
    fixes.add(scenario_info(scenario).fix_number);
  }
  o.set_fixes(fixes);
  return o;
}

// The JSON result of a run as the harness writes it (result_to_json), from a few facts.
nlohmann::json run_json(const RunOptions& o, const std::string& outcome, const std::string& stage = "") {
  RunResult r;
  r.options = o;
  r.settings = o.settings;
  r.result_tensor = result_tensor_of(r.settings);
  // "stall_pass": a pass with one of its three calls stalled; "stalled": every call stalled.
  const bool stall = outcome == "stall_pass" || outcome == "stalled";
  if (stall) {
    std::vector<StageLongest> passes(3);
    for (size_t i = 0; i < passes.size(); ++i) {
      passes[i].gpu_stage = Stage::softmax;
      passes[i].gpu_ms = outcome == "stalled" || i == 1 ? 3012.5 : 0.25;
    }
    r.stalls = judge_stalls(passes, 1.0);
  }
  r.outcome = parse_outcome(outcome == "stall_pass" ? "pass" : outcome);
  if (outcome == "stalled") {
    r.exit_code = 9;
    r.error = "every call stalled: " + r.stalls.summary();
    r.error_stage = "softmax";
  } else if (outcome == "pass" || outcome == "stall_pass") {
    r.checked = true;
    r.comparison.rel_error = 1.5e-3;
    r.tolerance = 4e-3;
    r.stages.push_back({"softmax", 3, 0.25, 0.25, 0.25, false});
    r.first_call_stages.push_back({"softmax", 1, 80.5, 80.5, 80.5, false});  // the cold call
    r.steady_stages.push_back({"softmax", 2, 0.25, 0.25, 0.25, false});
    r.call_median_ms = 0.5;
    r.first_call_ms = 81.0;
    r.steady_call_median_ms = 0.5;
  } else if (outcome == "hang") {
    r.exit_code = 3;
    r.error = "stage " + stage + " did not finish within the deadline";
    r.error_stage = stage;
    SupervisedOutcome w;
    w.kind = SupervisedOutcome::hang;
    w.stage = stage;
    w.expiry = {true, false, stage, 20.0};
    w.records.push_back({"qk_gemm", 1000, 2000, "M=128 N=128 K=64", ""});
    w.records.push_back({stage, 3000, -1, "rows=2048 cols=128", ""});
    w.log_tail = {"[MATH_SOFTMAX_START] Input shape=[2, 8, 128, 128]"};
    r.watchdog = w;
  } else {
    r.exit_code = outcome == "no_gpu" ? 7 : 4;
    r.error = outcome == "no_gpu" ? "no usable CUDA GPU: no CUDA device found" : "CUDA error";
    r.error_stage = stage;
  }
  return result_to_json(r);
}

ReportInput made_up_report(int scenario, const std::vector<std::string>& off, const std::vector<std::string>& on) {
  ReportInput in;
  in.fix_off = options_for(scenario, false);
  in.fix_on = options_for(scenario, true);
  in.args_off = {"--scenario", std::to_string(scenario), "--check", "--log", "stages", "--fix", "off"};
  in.args_on = {"--scenario", std::to_string(scenario), "--check", "--log", "stages", "--fix", "on"};
  in.report_argv = {"report", "--scenario", std::to_string(scenario), "--out", "r"};
  in.repeat = static_cast<int>(off.size());
  in.created_utc = "2025-01-01T00:00:00Z";
  in.environment_error = "not asked in this test";
  for (bool fix_on : {true, false}) {
    const auto& outcomes = fix_on ? on : off;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      ReportRun run;
      run.fix_on = fix_on;
      run.repeat = static_cast<int>(i) + 1;
      run.args = fix_on ? in.args_on : in.args_off;
      run.exit_code = outcomes[i] == "pass" || outcomes[i] == "stall_pass" ? 0 : outcomes[i] == "hang" ? 3
                      : outcomes[i] == "stalled"                          ? 9
                                                                          : 7;
      run.result = run_json(fix_on ? in.fix_on : in.fix_off, outcomes[i], "softmax");
      run.output = "[MATH_SOFTMAX_START] Input shape=[2, 8, 128, 128]\n";
      in.runs.push_back(run);
    }
  }
  return in;
}

// The checks every bad command line of `repro report` must pass: exit 2, one line on stderr
// naming the subcommand, nothing on stdout, no folder.
void check_usage_error(const std::vector<std::string>& args, const std::string& expected_fragment) {
  const std::string dir = temp_dir("report_bad");
  std::vector<std::string> full = {"report"};
  full.insert(full.end(), args.begin(), args.end());
  for (auto& a : full) {
    if (a == "DIR") a = dir + "/out";
  }
  const Ran r = run_repro(full);
  INFO("args: ", [&] { std::string s; for (const auto& a : args) s += a + " "; return s; }(), "stderr: ", r.err);
  CHECK(r.exit_code == 2);
  CHECK(count_lines(r.err) == 1);
  CHECK(r.err.rfind("repro report: error: ", 0) == 0);
  CHECK(r.err.find(expected_fragment) != std::string::npos);
  CHECK(r.out.empty());
  CHECK_FALSE(exists(dir + "/out"));
  remove_tree(dir);
}

}  // namespace

TEST_SUITE("report") {
  TEST_CASE("a report's title says what its fix-off runs did, for every way a run ends") {
    // The fake child ends every run of scenario 1 the named way, fix on or off.
    const std::string dir = temp_dir("report_endings");
    // The machine's answers (refused, no GPU) are not findings: the title says so.
    const std::vector<std::tuple<std::string, std::string, int>> endings = {
        {"crash_reported", "Scenario 1 crashes in pv_gemm", 0},
        {"cuda_error", "Scenario 1 fails with a CUDA error in qk_gemm", 0},
        {"mismatch", "Scenario 1 gives a wrong result (", 0},
        {"hang", "Scenario 1 hangs in softmax", 0},
        {"segv", "Scenario 1 ends without a result", 0},
        {"refused", "Scenario 1: refused by the memory guard on this machine", 0},
        {"no_gpu", "Scenario 1: not run on this machine (no usable CUDA GPU)", kExitNoGpu},
    };
    for (const auto& [ending, title, exit_code] : endings) {
      CAPTURE(ending);
      setenv("SWEEP_FAKE", ("1=" + ending).c_str(), 1);
      const std::string out = dir + "/" + ending;
      const Ran r = run_repro({"report", "--scenario", "1", "--out", out, "--repro-binary", SWEEP_TEST_FAKE_CHILD});
      unsetenv("SWEEP_FAKE");
      INFO(r.out, r.err);
      CHECK(r.exit_code == exit_code);
      const nlohmann::json j = nlohmann::json::parse(file_text(out + "/result.json"));
      const std::string got = j["report"]["title"];
      CHECK_MESSAGE(got.find(title) != std::string::npos, got);
      CHECK(file_text(out + "/REPORT.md").find(title) != std::string::npos);
    }
    remove_tree(dir);
  }

  TEST_CASE("repro report --ladder climbs the rungs in order and stops at the first that hangs") {
    // A fake child in place of each run: every run passes, but one given --ballast hangs.
    const std::string dir = temp_dir("report_ladder"), out = dir + "/report", log = dir + "/fake.log";
    setenv("SWEEP_FAKE_WHEN", "--ballast=hang", 1);
    setenv("SWEEP_FAKE_LOG", log.c_str(), 1);
    const Ran r = run_repro({"report", "--ladder", "--scenario", "2", "--out", out, "--repro-binary", SWEEP_TEST_FAKE_CHILD,
                             "--layers", "3", "--steps", "4"});
    unsetenv("SWEEP_FAKE_WHEN");
    INFO(r.out, r.err);
    CHECK(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(file_text(out + "/result.json"));
    const auto& ladder = j["ladder"];
    REQUIRE(ladder.size() == 4);  // isolated, per-call, layers: pass; ballast: hang; host-load and steps not climbed
    const std::vector<std::string> names = {"isolated", "per-call", "layers", "ballast"};
    for (size_t i = 0; i < names.size(); ++i) {
      CHECK(ladder[i]["rung"] == names[i]);
      CHECK(ladder[i]["finding"] == (i < 3 ? "not_reproduced" : "hang"));
    }
    // From the layers rung on, as many of the layers as fit (a refusal never ends the climb).
    CHECK(ladder[2]["options"] == nlohmann::json({"--alloc-timing", "per-call", "--layers", "3", "--layers-fit", "--retain", "autograd"}));
    CHECK(j["report"]["finding"] == "hang");
    const std::string title = j["report"]["title"];
    CHECK(title.find("at rung ballast of the context ladder (rungs below it pass: isolated, per-call, layers)") != std::string::npos);
    // The runs in the rungs' order, fix on first in each, two a rung: 8 in all.
    std::vector<std::string> starts;
    for (const std::string& line : test_util::lines_of(file_text(log))) {
      if (line.rfind("start ", 0) == 0 && line.find("--check") != std::string::npos) starts.push_back(line);  // not `info`
    }
    REQUIRE(starts.size() == 8);
    CHECK(starts[0].find("--alloc-timing") == std::string::npos);
    CHECK(starts[2].find("--alloc-timing per-call") != std::string::npos);
    CHECK(starts[2].find("--layers") == std::string::npos);
    CHECK(starts[4].find("--layers 3 --layers-fit --retain autograd") != std::string::npos);
    CHECK(starts[6].find("--ballast 0.5 --ballast-alloc device --ballast-touch gpu") != std::string::npos);
    CHECK(starts[6].find("--fix on") != std::string::npos);
    CHECK(starts[7].find("--fix off") != std::string::npos);
    for (const std::string& s : starts) CHECK(s.find("--host-load") == std::string::npos);
    const std::string md = file_text(out + "/REPORT.md");
    CHECK(md.find("## Context ladder") != std::string::npos);
    CHECK(md.find("| ballast | `--alloc-timing per-call --layers 3 --layers-fit --retain autograd --ballast 0.5") != std::string::npos);
    // The reproducer carries every condition of the run: it leaves nothing out.
    CHECK_FALSE(j.contains("reproducer_leaves_out"));

    // Nothing hangs: every rung climbed, the last with --steps (and no --iters).
    std::remove(log.c_str());
    const Ran all = run_repro({"report", "--ladder", "--scenario", "2", "--out", out + "2", "--repro-binary", SWEEP_TEST_FAKE_CHILD});
    CHECK(all.exit_code == 0);
    const nlohmann::json k = nlohmann::json::parse(file_text(out + "2/result.json"));
    REQUIRE(k["ladder"].size() == 8);
    CHECK(k["ladder"][4]["rung"] == "mapped-weights");
    CHECK(k["ladder"][6]["rung"] == "steps");
    CHECK(k["ladder"][7]["rung"] == "backward");
    CHECK(k["report"]["title"].get<std::string>().find("at every rung of the context ladder") != std::string::npos);
    // The layers each rung ran, as its runs' memory plans say: one, then as many as fit.
    CHECK(k["ladder"][0]["layers"] == "1");
    CHECK(k["ladder"][2]["layers"] == "7 of 60 (as many as fit)");
    CHECK(k["ladder"][7]["layers"] == "7 of 60 (as many as fit)");
    CHECK(file_text(out + "2/REPORT.md").find("| 7 of 60 (as many as fit) | not_reproduced |") != std::string::npos);
    std::vector<std::string> last;
    for (const std::string& line : test_util::lines_of(file_text(log))) {
      if (line.rfind("start ", 0) == 0 && line.find("--check") != std::string::npos) last.push_back(line);
    }
    REQUIRE(last.size() == 16);
    CHECK(last[8].find("--mapped-weights 16G") != std::string::npos);
    CHECK(last[6].find("--mapped-weights") == std::string::npos);
    CHECK(last[12].find("--steps 3") != std::string::npos);
    CHECK(last[12].find("--iters") == std::string::npos);
    CHECK(last[12].find("--backward") == std::string::npos);
    CHECK(last[14].find("--steps 3 --backward") != std::string::npos);
    CHECK(last[14].find("--iters") == std::string::npos);
    // One layer: 25 calls, each checked; from the layers rung on, two passes over the layers and
    // only the last layer compared with its reference (every layer's values counted).
    CHECK(last[0].find("--iters 25") != std::string::npos);
    CHECK(last[0].find("--check-layers") == std::string::npos);
    CHECK(last[2].find("--iters 25") != std::string::npos);
    CHECK(last[4].find("--iters 2 ") != std::string::npos);
    CHECK(last[10].find("--iters 2 ") != std::string::npos);
    for (size_t i = 4; i < last.size(); ++i) CHECK(last[i].find("--check-layers last") != std::string::npos);
    // A given --iters is the count of every rung but the steps', which counts steps.
    std::remove(log.c_str());
    CHECK(run_repro({"report", "--ladder", "--scenario", "2", "--iters", "3", "--out", out + "4", "--repro-binary",
                     SWEEP_TEST_FAKE_CHILD}).exit_code == 0);
    std::vector<std::string> counted;
    for (const std::string& line : test_util::lines_of(file_text(log))) {
      if (line.rfind("start ", 0) == 0 && line.find("--check") != std::string::npos) counted.push_back(line);
    }
    REQUIRE(counted.size() == 16);
    CHECK(counted[0].find("--iters 3") != std::string::npos);
    CHECK(counted[12].find("--iters") == std::string::npos);
    // A rung whose plan the memory guard refuses ends the climb (the rungs above keep its layers),
    // with its own finding, not a failure of the scenario.
    std::remove(log.c_str());
    setenv("SWEEP_FAKE_WHEN", "--layers=refused", 1);
    const Ran refused = run_repro({"report", "--ladder", "--scenario", "2", "--out", out + "5", "--repro-binary", SWEEP_TEST_FAKE_CHILD});
    unsetenv("SWEEP_FAKE_WHEN");
    CHECK(refused.exit_code == 0);
    const nlohmann::json f = nlohmann::json::parse(file_text(out + "5/result.json"));
    REQUIRE(f["ladder"].size() == 3);
    CHECK(f["ladder"][2]["finding"] == "refused");
    CHECK(f["report"]["finding"] == "refused");
    CHECK(f["report"]["title"].get<std::string>().find(
              "refused by the memory guard on this machine (managed allocation beyond the guard), at rung layers of the "
              "context ladder (rungs below it pass: isolated, per-call)") != std::string::npos);
    unsetenv("SWEEP_FAKE_LOG");
    // The rungs decide the allocation timing and the retention.
    CHECK(run_repro({"report", "--ladder", "--scenario", "2", "--out", out + "3", "--retain", "none"}).exit_code == kExitUsage);
    CHECK(run_repro({"report", "--ladder", "--scenario", "2", "--out", out + "3", "--backward"}).exit_code == kExitUsage);
    // Scenario 6's fix keeps nothing for a backward pass: its ladder ends at the steps, and says so.
    const Ran six = run_repro({"report", "--ladder", "--scenario", "6", "--no-run", "--out", out + "6"});
    CHECK(six.exit_code == 0);
    CHECK(six.out.find("the backward rung is left out") != std::string::npos);
    const nlohmann::json s6 = nlohmann::json::parse(file_text(out + "6/result.json"));
    REQUIRE(s6["ladder"].size() == 7);
    CHECK(s6["ladder"][6]["rung"] == "steps");
  }

  TEST_CASE("repro report --no-run writes the reproducer, the commands and the REPORT.md template of every scenario") {
    for (int scenario = 1; scenario <= 4; ++scenario) {
      CAPTURE(scenario);
      const std::string dir = temp_dir("report_norun"), out = dir + "/report";
      const Ran r = run_repro({"report", "--scenario", std::to_string(scenario), "--no-run", "--out", out});
      CHECK(r.exit_code == 0);
      CHECK(r.err.empty());
      const std::string md = file_text(out + "/REPORT.md");
      const std::string cu_name = "repro_scenario" + std::to_string(scenario) + ".cu";
      REQUIRE_FALSE(md.empty());
      CHECK(md.rfind("# Scenario " + std::to_string(scenario) + " (", 0) == 0);
      CHECK(md.find("not run (report prepared with --no-run)") != std::string::npos);
      size_t last = 0;
      for (const auto& section : kSections) {  // every section, in the order of NVIDIA's template
        const size_t at = md.find("\n" + section + "\n");
        CHECK_MESSAGE(at != std::string::npos, section);
        CHECK_MESSAGE(at > last, section);
        last = at;
      }
      CHECK(md.find("./repro --scenario " + std::to_string(scenario) + " --fix off --log stages --iters 25 --check") !=
            std::string::npos);  // repeated calls by default, every call checked
      CHECK(md.find("nvcc -O2 -std=c++17 -arch=native " + cu_name + " -lcublas -o repro_scenario" +
                    std::to_string(scenario)) != std::string::npos);
      CHECK(md.find(scenario_info(scenario).hypothesis) != std::string::npos);  // preconditions from the registry
      CHECK(md.find("| GPU |") != std::string::npos);                            // the environment block
      CHECK(md.find("| unified memory |") != std::string::npos);
      CHECK(md.find("sudo nvidia-bug-report.sh") != std::string::npos);

      const nlohmann::json j = nlohmann::json::parse(file_text(out + "/result.json"));
      CHECK(j["meta"]["kind"] == "report");
      CHECK(j["report"]["scenario"] == scenario);
      CHECK(j["report"]["no_run"] == true);
      CHECK(j["report"]["finding"] == "not_run");
      CHECK(j["runs"].empty());
      CHECK(j["environment"]["host"]["cpu_arch"].is_string());
      CHECK(j["commands"]["reproducer_build"] == reproducer_nvcc_command(scenario));
      CHECK(file_text(out + "/stage.log").find("Not run (--no-run)") != std::string::npos);

      const std::string cu = file_text(out + "/" + cu_name);
      CHECK(cu.rfind("// " + cu_name + ": ", 0) == 0);
      const std::string first_comment = cu.substr(0, cu.find("\n\n"));  // the nvcc line is in the first comment
      CHECK(first_comment.find(reproducer_nvcc_command(scenario)) != std::string::npos);
      CHECK(first_comment.find("--fix on") != std::string::npos);
      CHECK(cu.find("#define FIX 0") != std::string::npos);
      CHECK(cu.find("TIMEOUT: hung in") != std::string::npos);
      CHECK(cu.find("void check_cuda(cudaError_t status, const char* call") != std::string::npos);
      CHECK(cu.find("//@") == std::string::npos);  // every directive expanded (an @NAME@ left is one of the generator's errors)  // every placeholder filled in
      CHECK(cu.find("//@") == std::string::npos);
      remove_tree(dir);
    }
  }

  TEST_CASE("repro report --no-run --backward: every scenario's reproducer runs the backward call under the scenario's "
            "conditions, and REPORT.md no longer says anything is left out") {
    const std::string dir = temp_dir("report_backward");
    for (int scenario = 1; scenario <= 5; ++scenario) {
      CAPTURE(scenario);
      const std::string out = dir + "/s" + std::to_string(scenario);
      const Ran r = run_repro({"report", "--scenario", std::to_string(scenario), "--backward", "--no-run", "--out", out});
      INFO(r.out, r.err);
      REQUIRE(r.exit_code == 0);
      const std::string cu = file_text(out + "/repro_scenario" + std::to_string(scenario) + ".cu");
      // The backward's steps in the harness's order, each named for the watchdog.
      size_t last = cu.find("static void backward_gpu_off(Path& p) {");
      REQUIRE(last != std::string::npos);
      for (const char* step : {"grad_upcast", "dp_gemm", "dv_gemm", "softmax_backward", "dq_gemm", "dk_gemm", "grad_inputs"}) {
        const size_t at = cu.find(std::string("p.stage(\"") + step + "\"", last);
        CHECK_MESSAGE(at != std::string::npos, step);
        CHECK_MESSAGE(at > last, step);
        last = at;
      }
      // Eager, each layer's backward call ends in its synchronisation; a graph (scenario 5) holds it.
      CHECK((cu.find("p.stage(\"backward_sync\"") != std::string::npos) == (scenario != 5));
      CHECK(cu.find("upload(make_grad_output(p, l), TensorId::grad_output, p.dtype)") != std::string::npos);  // dO, the harness's
      CHECK(cu.find("print_stats(\"grad_query\", grad_query, cfg.name);") != std::string::npos);
      CHECK(cu.find("//@") == std::string::npos);  // every directive expanded (an @NAME@ left is one of the generator's errors)
      CHECK(cu.find("//@") == std::string::npos);
      // Each scenario's condition in the backward, as the harness sets it.
      const std::string backward = cu.substr(cu.find("static void backward_gpu_off(Path& p) {"));
      if (scenario == 1) CHECK(backward.find("p.bind(p.s(PathStream::gemm));") != std::string::npos);  // the GEMM's stream
      if (scenario == 2) {
        CHECK(cu.find("p.stage(\"grads_to_host\"") != std::string::npos);
        CHECK(cu.find("// [FIX_2] prefetch: cudaMemPrefetchAsync(grad_probs") != std::string::npos);  // fix 2 on softmax's backward too
      } else {
        CHECK(cu.find("p.stage(\"grads_to_host\"") == std::string::npos);
      }
      if (scenario == 3) {  // dQ reads K as the GEMM did: the view one batch entry a call, or fix 3's copy
        const std::string on = cu.substr(cu.find("static void backward_gpu_on(Path& p) {"));
        CHECK(backward.substr(0, backward.find("backward_gpu_on")).find("for (int64_t i = 0; i < 2LL; ++i) {") != std::string::npos);
        CHECK(on.substr(0, on.find("static void backward_sync_on")).find("for (int64_t i = 0;") == std::string::npos);
      }
      if (scenario == 4) CHECK(cu.find("p.entry_sync(true);") != std::string::npos);  // the storm
      // The harness runs with --backward; the reproducer carries it, and leaves nothing out.
      const std::string md = file_text(out + "/REPORT.md");
      CHECK(md.find("--backward --log stages --iters 25 --check") != std::string::npos);
      CHECK(md.find("leaves out") == std::string::npos);
      const nlohmann::json j = nlohmann::json::parse(file_text(out + "/result.json"));
      CHECK_FALSE(j.contains("reproducer_leaves_out"));
    }
    // The per-call allocation and the layers are in the program: every tensor allocated where the
    // harness allocates it, three layers.
    const Ran layered = run_repro({"report", "--scenario", "2", "--backward", "--layers", "3", "--alloc-timing", "per-call",
                                   "--no-run", "--out", dir + "/layers"});
    REQUIRE(layered.exit_code == 0);
    const std::string layers = file_text(dir + "/layers/repro_scenario2.cu");
    CHECK(layers.find("p.allocate(0, {TensorId::query_acc, TensorId::key_acc, TensorId::value_acc});") != std::string::npos);
    CHECK(layers.find("/*layers*/ 3,") != std::string::npos);
    CHECK(layers.find("p.release(Stage::free_backward, {") != std::string::npos);
    CHECK(file_text(dir + "/layers/REPORT.md").find("leaves out") == std::string::npos);
    CHECK_FALSE(nlohmann::json::parse(file_text(dir + "/layers/result.json")).contains("reproducer_leaves_out"));
    // Without --backward nothing of it is in the program.
    REQUIRE(run_repro({"report", "--scenario", "2", "--no-run", "--out", dir + "/forward"}).exit_code == 0);
    const std::string forward = file_text(dir + "/forward/repro_scenario2.cu");
    for (const char* name : {"p.stage(\"dp_gemm\"", "launch_softmax_backward(p.t"}) {
      CHECK_MESSAGE(forward.find(name) == std::string::npos, name);
    }
    remove_tree(dir);
  }

  TEST_CASE("--fix-form lean: the preconditions name the lean form and its parts, the design form none") {
    const std::string dir = temp_dir("report_lean");
    for (const char* form : {"design", "lean"}) {
      CAPTURE(form);
      const std::string out = dir + "/" + form;
      REQUIRE(run_repro({"report", "--scenario", "1", "--no-run", "--fix-form", form, "--out", out}).exit_code == 0);
      const std::string md = file_text(out + "/REPORT.md");
      const bool lean = std::string(form) == "lean";
      CHECK((md.find("- **Fix 1** (`gemm_stream_sync`, `--fix on`)") != std::string::npos) == !lean);
      CHECK((md.find("- **Fix 1** (`gemm_stream_sync`, `--fix lean`)") != std::string::npos) == lean);
      CHECK((md.find("the fix-on runs use its lean form, only `set-stream`") != std::string::npos) == lean);
      CHECK(md.find("`host-sync` (") == std::string::npos);  // fix 1's lean form drops the host round trips
    }
    remove_tree(dir);
  }

  TEST_CASE("repro report without a GPU runs every child, collects what they say, and writes the folder (exit 7)") {
    if (run_repro({"info", "--json"}).exit_code != 7) {
      MESSAGE("a GPU is present: the no-GPU report is checked only without one (gpu.report runs real reports)");
      return;
    }
    const std::string dir = temp_dir("report_nogpu"), out = dir + "/report";
    const Ran r = run_repro({"report", "--scenario", "3", "--dtype", "fp16", "--repeat", "2", "--out", out});
    CHECK(r.exit_code == 7);
    CHECK(r.out.find("run 4 of 4: fix off (2 of 2) ... no_gpu (exit 7") != std::string::npos);
    const std::string md = file_text(out + "/REPORT.md");
    CHECK(md.rfind("# Scenario 3: not run on this machine (no usable CUDA GPU)\n", 0) == 0);
    for (const auto& section : kSections) CHECK_MESSAGE(md.find("\n" + section + "\n") != std::string::npos, section);
    CHECK(md.find("| 1 | on | no_gpu | 7 |") != std::string::npos);
    CHECK(md.find("First error**: run 1 (fix on): `no_gpu`") != std::string::npos);
    const nlohmann::json j = nlohmann::json::parse(file_text(out + "/result.json"));
    REQUIRE(j["runs"].size() == 4);
    CHECK(j["runs"][0]["fix"] == "on");
    CHECK(j["runs"][0]["command"] == "./repro --dtype fp16 --scenario 3 --fix on --log stages --iters 25 --check");
    CHECK(j["runs"][3]["result"]["outcome"] == "no_gpu");
    CHECK(j["runs"][3]["result"]["config"]["problem"]["dtype"] == "fp16");  // the child parsed the same options
    CHECK(j["report"]["finding"] == "no_gpu");
    const std::string log = file_text(out + "/stage.log");
    CHECK(log.find("=== run 4 of 4: fix off, repeat 2 of 2: ./repro --dtype fp16 --scenario 3 --fix off") != std::string::npos);
    CHECK(log.find("no usable CUDA GPU") != std::string::npos);
    CHECK(exists(out + "/repro_scenario3.cu"));
    remove_tree(dir);
  }

  TEST_CASE("each scenario's reproducer contains its own condition and fix, and nothing of the others") {
    auto generate = [](int n) {
      return generate_reproducer(options_for(n, false), options_for(n, true), "off", "on");
    };
    const std::string s1 = generate(1), s2 = generate(2), s3 = generate(3), s4 = generate(4);
    // The part of each configuration and its calls: fix off, then fix on.
    auto off = [](const std::string& s) { return s.substr(s.find("// ---- fix off"), s.find("// ---- fix on") - s.find("// ---- fix off")); };
    auto on = [](const std::string& s) { return s.substr(s.find("// ---- fix on")); };
    // Scenario 1: the GEMM on a blocking stream of its own, ordered after the path's (legacy) stream by nothing explicit.
    CHECK(off(s1).find("StreamMode::legacy, GemmStream::blocking, GemmOrder::none") != std::string::npos);
    CHECK(on(s1).find("GemmStream::same") != std::string::npos);  // fix 1: set-stream...
    CHECK(on(s1).find("CUDA_CHECK(cudaStreamSynchronize(p.s(PathStream::path)));") != std::string::npos);  // ...and host-sync
    CHECK(off(s1).find("cudaStreamSynchronize(p.s(") == std::string::npos);
    CHECK(s1.find("p.host_access(") == std::string::npos);
    CHECK(s2.find("p.stage(\"scores_to_host\"") != std::string::npos);  // scenario 2: host read before softmax
    CHECK(s2.find("p.host_access({{\"scores\", TensorId::scores") != std::string::npos);
    CHECK(on(s2).find("p.prefetch({TensorId::scores") != std::string::npos);  // fix 2
    CHECK(off(s2).find("p.prefetch(") == std::string::npos);
    CHECK(s3.find("\"cublasGemmBatchedEx\"") != std::string::npos);  // scenario 3: [B,S,H,E] K, pointer arrays
    const SdpaProblem& p3 = options_for(3, false).problem;  // K uploaded as a [B, S, Hkv, E] buffer
    CHECK(s3.find("/*key_strides*/ HeadStrides{" + std::to_string(p3.kv_len * p3.kv_heads * p3.head_dim) + "LL, " +
                  std::to_string(p3.head_dim) + "LL, " + std::to_string(p3.kv_heads * p3.head_dim) + "LL}") != std::string::npos);
    CHECK(on(s3).find("launch_transpose_heads(p.t(") != std::string::npos);  // fix 3
    CHECK(off(s3).find("launch_transpose_heads(p.t(") == std::string::npos);
    CHECK(s4.find("p.entry_sync(true);") != std::string::npos);  // scenario 4: touch streams, host touch
    CHECK(off(s4).find("AllocKind::managed") != std::string::npos);
    CHECK(on(s4).find("AllocKind::async") != std::string::npos);  // fix 4: the stream-ordered pool
    CHECK(s4.find("launch_safe_softmax(p.t(") != std::string::npos);  // the whole path
    CHECK(s1.find("launch_safe_softmax(p.t(") == std::string::npos);  // stops after the GEMM
    for (const auto* s : {&s1, &s2, &s3, &s4}) {
      CHECK(s->find("//@") == std::string::npos);
      CHECK(s->find("#pragma once") == std::string::npos);
      // The harness's own code, inlined: its kernels, its cuBLAS call, its allocators, its inputs.
      for (const char* own : {"// kernels.cu: ", "// cublas_gemm.cpp: ", "// allocator.cpp: ", "// layer_inputs.cpp: "}) {
        CHECK_MESSAGE(s->find(own) != std::string::npos, own);
      }
      // The fix is a run-time switch between two configurations, defaulted by FIX.
      CHECK(s->find("static const Config kFixOff = ") != std::string::npos);
      CHECK(s->find("fix ? kFixOn : kFixOff") != std::string::npos);
    }
  }

  TEST_CASE("a reproducer of runs with an injected fault injects it first in each step of its stage, in the runs it was armed in") {
    const std::string dir = temp_dir("report_inject");
    auto generate = [&](std::vector<std::string> more) {
      std::vector<std::string> args = {"report", "--no-run", "--force", "--out", dir, "--scenario", "2", "-L", "64", "-S", "256",
                                       "--layers", "2", "--allow-inject"};
      args.insert(args.end(), more.begin(), more.end());
      const Ran r = run_repro(args);
      REQUIRE_MESSAGE(r.exit_code == 0, r.err);
      return file_text(dir + "/repro_scenario2.cu");
    };
    auto unwrapped = [](std::string text) {  // the first comment's notes, each on one line
      for (size_t at; (at = text.find("\n//   ")) != std::string::npos;) text.replace(at, 6, " ");
      return text;
    };
    auto count = [](const std::string& text, const std::string& what) {
      size_t n = 0;
      for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
      return n;
    };
    // @no-fix: armed in the fix-off run only; @layer=2: the reproducer checks the call's layer as the harness does.
    std::string cu = generate({"--inject", "hang:softmax@layer=2@no-fix"});
    std::string off = cu.substr(cu.find("// ---- fix off"), cu.find("// ---- fix on") - cu.find("// ---- fix off"));
    CHECK(off.find("f.kind = FaultSpec::hang, f.stage = Stage::softmax, f.slow_ms = 0, f.only_layer = 2, f.only_step = 0;") !=
          std::string::npos);
    CHECK(count(off, "p.inject(") == 1);
    CHECK(off.find("p.stage(\"softmax\", true, PathStream::path, [&] {\n    p.inject(kFaultOff, false, PathStream::path);\n"
                   "    launch_safe_softmax(") != std::string::npos);
    CHECK(count(cu.substr(cu.find("// ---- fix on")), "p.inject(") == 0);
    CHECK(cu.find("FaultFlag fault_flag;") != std::string::npos);  // the frame's part, with the harness's kernel
    CHECK(cu.find("// fault_kernel.cuh: ") != std::string::npos);
    CHECK(unwrapped(cu).find("and so does this program, with the harness's own code, in the same stage") != std::string::npos);
    // A stage that allocates (per-call allocation): the host waits there, in both runs.
    cu = generate({"--inject", "slow:alloc_probs:500", "--alloc-timing", "per-call"});
    CHECK(count(cu, "p.inject(kFaultOff, true, PathStream::path);") == 1);
    CHECK(count(cu, "p.inject(kFaultOn, true, PathStream::path);") == 1);
    CHECK(cu.find("f.kind = FaultSpec::slow, f.stage = Stage::alloc_probs, f.slow_ms = 500,") != std::string::npos);
    // Conditions that do not hold in these runs: no injection, no fault code, and the note says so.
    cu = generate({"--inject", "hang:softmax@S>=100000"});
    CHECK(cu.find("p.inject(") == std::string::npos);
    CHECK(cu.find("FaultFlag") == std::string::npos);
    CHECK(unwrapped(cu).find("this program none (its conditions do not hold in these runs") != std::string::npos);
    remove_tree(dir);
  }

  TEST_CASE("the reproducer refuses what it cannot express, with one line; dropout it expresses") {
    RunOptions o = options_for(4, false), on = options_for(4, true);
    o.problem.dropout_p = on.problem.dropout_p = 0.1;
    CHECK_NOTHROW(check_reproducible(o));
    const std::string cu = generate_reproducer(o, on, "off", "on");
    CHECK(cu.find("q.dropout_p = 0x1.999999999999ap-4") != std::string::npos);
    CHECK(cu.find("p.stage(\"dropout\", true, PathStream::path, [&] {") != std::string::npos);  // a hang there is named
    CHECK(cu.find("layer_problem(p.cfg.problem, p.layer).dropout_offset") != std::string::npos);  // the layer's Philox offset
    CHECK(cu.find("// philox.h: ") != std::string::npos);  // the harness's Philox, inlined
    o = options_for(2, false);
    o.inputs_dir = "captured";
    CHECK_THROWS_WITH_AS(check_reproducible(o), doctest::Contains("--inputs"), InputError);
    // Scenario 0 has no fix of its own: its two configurations are the same run.
    CHECK_NOTHROW(check_reproducible(options_for(0, false)));
  }

  TEST_CASE("repro info --json: every field of the environment block, with or without a GPU") {
    Ran r;
    {
      test_util::ScopedEnv env;
      env.set("CUDA_CACHE_DISABLE", "1");
      r = run_repro({"info", "--json"});
    }
    REQUIRE((r.exit_code == 0 || r.exit_code == 7));
    const nlohmann::json j = nlohmann::json::parse(r.out);
    for (const char* key : {"os", "kernel", "cpu_arch", "nvidia_driver_version"}) {
      CHECK_MESSAGE(j["host"][key].is_string(), key);
      CHECK_FALSE(j["host"][key].get<std::string>().empty());
    }
    for (const char* key : {"driver_version", "runtime_version", "cublas_loaded_version", "cublas_built_version"}) {
      CHECK_MESSAGE(j["cuda"][key].is_number_integer(), key);
    }
    CHECK(j["cuda"]["runtime_version"].get<int>() >= 13000);
    CHECK(j["cuda"]["cublas_built_version"].get<int>() >= 130000);
    CHECK(j["cuda"]["cublas_loaded_version"].get<int>() >= 130000);  // loading cuBLAS needs no GPU
    CHECK(j["cuda"]["cublas_static"].is_boolean());
    CHECK(j["host"]["cuda_variables"]["CUDA_CACHE_DISABLE"] == "1");
    CHECK(j["meta"]["harness_version"].is_string());
    CHECK(j["affected_platform"]["checks"].size() == 4);
    CHECK(j["affected_platform"]["matches"].is_boolean());
    if (r.exit_code == 7) {  // CI: the host part, and why there is no device
      CHECK(j["device"].is_null());
      CHECK(j["gpu_error"].get<std::string>().rfind("no usable CUDA GPU: ", 0) == 0);
      CHECK(j["affected_platform"]["matches"] == false);
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.find("no usable CUDA GPU: ") != std::string::npos);
    } else {
      for (const char* key : {"name", "compute_capability", "sm_count", "total_memory_bytes", "integrated",
                              "concurrent_managed_access", "pageable_memory_access",
                              "pageable_memory_access_uses_host_page_tables", "direct_managed_mem_access_from_host",
                              "host_native_atomic_supported"}) {
        CHECK_MESSAGE(j["device"].contains(key), key);
      }
      CHECK(j["gpu_error"].is_null());
    }
    const Environment e = environment_from_json(j);  // the report reads it back this way
    CHECK(e.host.cpu_arch == j["host"]["cpu_arch"].get<std::string>());
    CHECK(environment_to_json(e)["cuda"] == j["cuda"]);

    const Ran text = run_repro({"info"});
    CHECK(text.exit_code == r.exit_code);
    for (const char* label : {"GPU:", "NVIDIA driver:", "CUDA driver:", "CUDA runtime:", "cuBLAS:", "OS:", "kernel:",
                              "CPU architecture:", "unified memory:", "affected platform:"}) {
      CHECK_MESSAGE(text.out.find(label) != std::string::npos, label);
    }
    const Ran bad = run_repro({"info", "--bogus"});
    CHECK(bad.exit_code == 2);
    CHECK(count_lines(bad.err) == 1);
  }

  TEST_CASE("repro --version: version, commit, compiler and flags, CUDA, architectures, cuBLAS built and loaded") {
    const Ran r = run_repro({"--version"});
    CHECK(r.exit_code == 0);
    CHECK(r.out.rfind("repro (sdpa-repro) ", 0) == 0);
    CHECK(r.out.find(" commit ") != std::string::npos);
    for (const char* label : {"compiler:", "C++ flags:", "CUDA compiler:", "CUDA flags:", "CUDA toolkit:",
                              "GPU architectures:", "cuBLAS:", "cuBLAS linkage:"}) {
      CHECK_MESSAGE(r.out.find(label) != std::string::npos, label);
    }
    CHECK(r.out.find("machine code sm_") != std::string::npos);
    CHECK(r.out.find("built against 13.") != std::string::npos);
    CHECK(r.out.find(", loaded 13.") != std::string::npos);
    const Ran bad = run_repro({"--version", "now"});
    CHECK(bad.exit_code == 2);
    CHECK(count_lines(bad.err) == 1);
  }

  TEST_CASE("cuBLAS is loaded at its first call: help and a refused command line load no CUDA library, --version does") {
    // The dynamic loader's own account of the files it opens (glibc), on stderr.
    Ran help, refused, version;
    {
      test_util::ScopedEnv env;
      env.set("LD_DEBUG", "files");
      help = run_repro({"--help"}), refused = run_repro({"--heads", "0"}), version = run_repro({"--version"});
    }
    CHECK(help.exit_code == 0);
    CHECK(refused.exit_code == 2);
    CHECK(version.exit_code == 0);
    // Linked statically (SDPA_STATIC_CUBLAS), cuBLASLt's own static initializer opens the driver's
    // libcuda.so.1 before main (a breakpoint on dlopen in cuda-gdb: called from cuBLASLt's code
    // under __libc_start_main, on an H200); nothing else is opened.
    const bool static_cublas = version.out.find("cuBLAS linkage:     static") != std::string::npos;
    for (const Ran* r : {&help, &refused}) {
      CHECK(r->err.find("file=libc.so.6") != std::string::npos);  // LD_DEBUG took effect
      CHECK(r->err.find("libcublas") == std::string::npos);
      CHECK(r->err.find("libcudart") == std::string::npos);
      if (!static_cublas) CHECK(r->err.find("libcuda.so") == std::string::npos);
    }
    if (!static_cublas) {
      CHECK(version.err.find("file=libcublas.so.") != std::string::npos);
      CHECK(version.err.find("file=libcublasLt.so.") != std::string::npos);
    }
  }

  TEST_CASE("repro --version opens the cuBLAS that LD_LIBRARY_PATH finds first, and says why when it cannot") {
    const Ran plain = run_repro({"--version"});
    if (plain.out.find("cuBLAS linkage:     static") != std::string::npos) return;  // nothing to open
    const size_t at = plain.out.find("libcublas.so.");
    REQUIRE(at != std::string::npos);
    const std::string soname = plain.out.substr(at, plain.out.find_first_of(",) \n", at) - at);  // libcublas.so.13
    const test_util::TempDir fake("fake_cublas"), broken("broken_cublas");
    REQUIRE(symlink(FAKE_CUBLAS_LIBRARY, (fake / soname).c_str()) == 0);
    std::ofstream(broken / soname) << "not a shared library\n";
    const char* outer = std::getenv("LD_LIBRARY_PATH");
    const std::string kept = outer ? outer : "";
    setenv("LD_LIBRARY_PATH", fake.path.c_str(), 1);
    const Ran with_fake = run_repro({"--version"});
    setenv("LD_LIBRARY_PATH", broken.path.c_str(), 1);
    const Ran with_broken = run_repro({"--version"}), info_broken = run_repro({"info", "--json"});
    outer ? setenv("LD_LIBRARY_PATH", kept.c_str(), 1) : unsetenv("LD_LIBRARY_PATH");
    INFO(with_fake.out, with_broken.out);
    CHECK(with_fake.exit_code == 0);
    CHECK(with_fake.out.find("loaded 99.1.2 (from " + fake / soname + ")") != std::string::npos);
    CHECK(with_broken.exit_code == 0);
    CHECK(with_broken.out.find("loaded unknown (not loaded: " + broken / soname) != std::string::npos);
    const nlohmann::json j = nlohmann::json::parse(info_broken.out, nullptr, false);
    REQUIRE(j.is_object());
    CHECK(j["cuda"]["cublas_loaded_version"] == 0);
    CHECK(j["cuda"]["cublas_path"].get<std::string>().rfind("not loaded: " + broken / soname, 0) == 0);
  }

  TEST_CASE("an existing --out folder is left alone without --force and its report replaced with it") {
    const std::string dir = temp_dir("report_force");
    std::ofstream(dir + "/mine.txt") << "keep me\n";
    const Ran refused = run_repro({"report", "--scenario", "1", "--no-run", "--out", dir});
    CHECK(refused.exit_code == 2);
    CHECK(count_lines(refused.err) == 1);
    CHECK(refused.err.find("exists; use --force") != std::string::npos);
    CHECK_FALSE(exists(dir + "/REPORT.md"));
    const Ran forced = run_repro({"report", "--scenario", "1", "--no-run", "--out", dir, "--force"});
    CHECK(forced.exit_code == 0);
    CHECK(exists(dir + "/REPORT.md"));
    CHECK(exists(dir + "/repro_scenario1.cu"));
    CHECK(file_text(dir + "/mine.txt") == "keep me\n");  // only the report's own files are replaced
    const Ran again = run_repro({"report", "--scenario", "1", "--no-run", "--out", dir, "--force"});
    CHECK(again.exit_code == 0);
    const Ran file = run_repro({"report", "--scenario", "1", "--no-run", "--out", dir + "/mine.txt", "--force"});
    CHECK(file.exit_code == 2);
    CHECK(file.err.find("not a directory") != std::string::npos);
    // A report that runs replaces the runs' logs and hang snapshots of the one before, and only those.
    std::ofstream(dir + "/run-7.log") << "an earlier report's run\n";
    std::ofstream(dir + "/run-notes.txt") << "mine\n";
    std::filesystem::create_directories(dir + "/hang-snapshot-run-2");
    std::ofstream(dir + "/hang-snapshot-run-2/threads.txt") << "an earlier hang\n";
    const Ran ran = run_repro({"report", "--scenario", "1", "--out", dir, "--force", "--repro-binary", SWEEP_TEST_FAKE_CHILD});
    CHECK(ran.exit_code == 0);
    CHECK_FALSE(exists(dir + "/run-7.log"));
    CHECK_FALSE(exists(dir + "/hang-snapshot-run-2"));
    CHECK(file_text(dir + "/run-notes.txt") == "mine\n");
    CHECK(file_text(dir + "/mine.txt") == "keep me\n");
    remove_tree(dir);
  }

  TEST_CASE("bad command lines of repro report exit 2 with one line and write nothing") {
    check_usage_error({"--scenario", "2"}, "--out");
    check_usage_error({"--out", "DIR"}, "--scenario is required");
    check_usage_error({"--scenario", "0", "--out", "DIR"}, "scenario 0");
    check_usage_error({"--scenario", std::to_string(scenario_count()), "--out", "DIR"}, "--scenario");
    check_usage_error({"--scenario", "2", "--fix", "on", "--out", "DIR"}, "--fix");
    check_usage_error({"--scenario", "2", "--fixes", "1", "--out", "DIR"}, "--fixes");
    check_usage_error({"--scenario", "2", "--json", "x.json", "--out", "DIR"}, "--json");
    check_usage_error({"--scenario", "2", "--no-fork", "--out", "DIR"}, "--no-fork");
    check_usage_error({"--scenario", "2", "--inputs", "captured", "--out", "DIR"}, "--inputs");
    check_usage_error({"--scenario", "2", "--save-output", "o.npy", "--out", "DIR"}, "--save-output");
    check_usage_error({"--scenario", "2", "--repeat", "0", "--out", "DIR"}, "--repeat");
    check_usage_error({"--scenario", "2", "--repeat", "many", "--out", "DIR"}, "--repeat");
    check_usage_error({"--scenario", "2", "--dtype", "fp64", "--out", "DIR"}, "--dtype");
    check_usage_error({"--scenario", "2", "--heads", "8", "--kv-heads", "3", "--out", "DIR"}, "kv-heads");
    check_usage_error({"--scenario", "2", "--inject", "hang:pv_gemm", "--out", "DIR"}, "--inject");
    check_usage_error({"--scenario", "2", "--bogus", "--out", "DIR"}, "--bogus");
    check_usage_error({"--scenario", "2", "--out", "DIR", "stray"}, "stray");
  }

  TEST_CASE("the title states the finding: a hang that the fix clears") {
    const ReportInput in = made_up_report(2, {"hang", "pass", "hang"}, {"pass", "pass", "pass"});
    CHECK(report_finding(in) == "hang");
    CHECK(report_title(in) == "Scenario 2 hangs in softmax on managed memory; fix 2 clears it");
    const std::string md = report_markdown(in);
    for (const auto& section : kSections) CHECK_MESSAGE(md.find("\n" + section + "\n") != std::string::npos, section);
    CHECK(md.find("Fix off: hung 2 of 3 runs") != std::string::npos);
    CHECK(md.find("Fix on: hung 0 of 3 runs") != std::string::npos);
    CHECK(md.find("- **Classification**: scenario 2 (softmax reduction on unified memory") != std::string::npos);
    CHECK(md.find("| softmax | ") != std::string::npos);  // the flight recorder row of the hung stage
    CHECK(md.find("RUNNING") != std::string::npos);
    CHECK(md.find("[MATH_SOFTMAX_START] Input shape=[2, 8, 128, 128]") != std::string::npos);  // stage log tail
    CHECK(md.find("| 4 | off | hang | 3 | softmax |") != std::string::npos);  // fix on ran first
    const nlohmann::json j = report_json(in);
    CHECK(j["runs"].size() == 6);
    CHECK(j["runs"][3]["fix"] == "off");
    CHECK(j["runs"][3]["result"]["watchdog"]["stage"] == "softmax");
    const std::string log = report_stage_log(in);
    CHECK(log.find("=== run 6 of 6: fix off, repeat 3 of 3") != std::string::npos);
  }

  TEST_CASE("a hung run's hang snapshot: the section 'At the moment of the hang', written from its summary") {
    ReportInput in = made_up_report(2, {"hang"}, {"pass"});
    const std::string without = report_markdown(in);
    CHECK(without.find("\n## At the moment of the hang\n") != std::string::npos);
    CHECK(without.find("no hang snapshot was taken") != std::string::npos);
    // The hung run (run 2, fix off) with a snapshot of a capture from a live hang on an H100.
    RunResult hung;
    hung.options = in.fix_off;
    hung.settings = in.fix_off.settings;
    hung.fail(Outcome::hang, "stage softmax did not finish within the deadline");
    SupervisedOutcome w;
    w.kind = SupervisedOutcome::hang;
    w.stage = "softmax";
    w.on_hang = OnHang::snapshot;
    HangSnapshot snap;
    snap.dir = "/tmp/r/hang-snapshot-run-2";
    snap.seconds = 3.5;
    snap.budget_s = 60;
    snap.summary = summarize_snapshot((std::string(SDPA_SOURCE_DIR) + "/tests/fixtures/snapshot") + "/softmax_nofork", 1148, {});
    CollectorRun smi;
    smi.name = "nvidia_smi";
    smi.state = CollectorState::timed_out;
    smi.reason = "did not answer within 8.0 s";
    snap.collectors = {smi};
    w.snapshot = snap;
    hung.watchdog = w;
    in.runs[1].result = result_to_json(hung);
    in.runs[1].snapshot_dir = "hang-snapshot-run-2";
    const std::string md = report_markdown(in);
    const size_t at = md.find("\n## At the moment of the hang\n");
    REQUIRE(at != std::string::npos);
    CHECK(at > md.find("\n## Hang\n"));
    CHECK(at < md.find("\n## Stage times\n"));
    const std::string section = md.substr(at, md.find("\n## Stage times\n") - at);
    INFO(section);
    CHECK(section.find("Run 2 (fix off) was still hung when its watchdog took a hang snapshot, in 3.5 s") != std::string::npos);
    CHECK(section.find("[`hang-snapshot-run-2/snapshot.json`](hang-snapshot-run-2/snapshot.json)") != std::string::npos);
    CHECK(section.find("- kernel spin_kernel resident on SM 124") != std::string::npos);
    CHECK(section.find("- main thread (tid 1148) in cuStreamSynchronize (called as cudaStreamSynchronize") != std::string::npos);
    CHECK(section.find("| `sdpa::(anonymous namespace)::spin_kernel(int const volatile*, unsigned long long)` | 124 | "
                       "(1,1,1) | (1,1,1) | 0x00007f11037b87f0 | active |") != std::string::npos);
    CHECK(section.find("- **Host threads**: waiting_in_cuda_call") != std::string::npos);
    CHECK(section.find("Out of memory [NV_ERR_NO_MEMORY]") != std::string::npos);
    CHECK(section.find("| nvidia_smi | timed_out | did not answer within 8.0 s |") != std::string::npos);
    const nlohmann::json j = report_json(in);
    CHECK(j["runs"][1]["result"]["watchdog"]["snapshot"]["path"] == "/tmp/r/hang-snapshot-run-2");
    CHECK(j["runs"][1]["result"]["watchdog"]["evidence"][0].get<std::string>().find("kernel spin_kernel") == 0);
    // A report in which nothing hung has no such section.
    CHECK(report_markdown(made_up_report(2, {"pass"}, {"pass"})).find("At the moment of the hang") == std::string::npos);
  }

  TEST_CASE("the title states the finding: not reproduced, a failing fix, no GPU") {
    const ReportInput quiet = made_up_report(2, {"pass", "pass"}, {"pass", "pass"});
    CHECK(report_title(quiet) == "Scenario 2: not reproduced on this machine (fix off: pass 2 of 2; fix on: pass 2 of 2)");
    const std::string md = report_markdown(quiet);
    CHECK(md.find("No run hung or crashed.") != std::string::npos);
    // Stage times: the first call apart from the steady state, fix off and on.
    CHECK(md.find("| softmax | 80.5000 | 0.2500 | 80.5000 | 0.2500 |") != std::string::npos);
    CHECK(md.find("| call (GPU stages) | 81.0000 | 0.5000 | 81.0000 | 0.5000 |") != std::string::npos);
    const ReportInput stuck = made_up_report(2, {"hang"}, {"hang"});
    CHECK(report_title(stuck) == "Scenario 2 hangs in softmax on managed memory; fix 2 does not clear it (fix on: "
                                 "hung 1 of 1)");
    const ReportInput worse = made_up_report(2, {"pass"}, {"hang"});
    CHECK(report_finding(worse) == "fix_fails");
    CHECK(report_title(worse).find("not reproduced with fix 2 off") != std::string::npos);
    // Every run passed, but under a condition that cannot show the hypothesis: not exercised.
    ReportInput warp_rows = quiet;
    warp_rows.fix_off.caveats = {"rows of S = 512 <= 1024 keys take the warp path"};
    CHECK(report_finding(warp_rows) == "not_exercised");
    CHECK(report_title(warp_rows) == "Scenario 2: not exercised (fix off: pass 2 of 2; fix on: pass 2 of 2): rows of S = "
                                     "512 <= 1024 keys take the warp path");
    ReportInput warp_rows_hang = made_up_report(2, {"hang"}, {"pass"});
    warp_rows_hang.fix_off.caveats = warp_rows.fix_off.caveats;
    CHECK(report_finding(warp_rows_hang) == "hang");  // a hang is a finding whatever the caveat
    ReportInput warp_rows_fix_hangs = made_up_report(2, {"pass", "pass"}, {"pass", "hang"});
    warp_rows_fix_hangs.fix_off.caveats = warp_rows.fix_off.caveats;
    CHECK(report_finding(warp_rows_fix_hangs) == "fix_fails");  // the fix broke a passing call: that is said
    // Among the fix-off runs the hang leads, wherever it stands: a stall before it does not hide it.
    const ReportInput stall_then_hang = made_up_report(2, {"stalled", "hang"}, {"pass", "pass"});
    CHECK(report_finding(stall_then_hang) == "hang");
    CHECK(report_title(stall_then_hang).rfind("Scenario 2 hangs in softmax on managed memory; fix 2 clears it", 0) == 0);
    // The context ladder stops at a rung that stalled, as at one that hung, and the title says where.
    ReportInput laddered = made_up_report(2, {"stalled"}, {"pass"});
    RunSpec four_layers;
    four_layers.layers = "4";
    laddered.ladder = {LadderRung{"call", RunSpec{}, "not_reproduced", "pass 1 of 1", "1"},
                       LadderRung{"layers", four_layers, "stalled", "stalled 1 of 1", "4"}};
    CHECK(report_title(laddered) == report_title(made_up_report(2, {"stalled"}, {"pass"})) +
                                        ", at rung layers of the context ladder (rungs below it pass: call)");
    for (const char* finding : {"hang", "stalled", "failure", "refused"}) CHECK(finding_ends_climb(finding));
    for (const char* finding : {"not_reproduced", "not_exercised", "fix_fails", "waived"}) CHECK_FALSE(finding_ends_climb(finding));
    // A run whose every call stalled is a finding; a pass with a stalled call is listed, not a finding.
    const ReportInput stalled = made_up_report(2, {"stalled", "pass"}, {"pass", "pass"});
    CHECK(report_finding(stalled) == "stalled");
    CHECK(report_title(stalled) == "Scenario 2 stalls in softmax in every call (under the deadline) on managed memory; fix 2 "
                                   "clears it");
    const std::string stalled_md = report_markdown(stalled);
    CHECK(stalled_md.find("## Stalls") != std::string::npos);
    CHECK(stalled_md.find("| 3 | off | stalled | `softmax` | 3012.5 | 3 of 3 |") != std::string::npos);
    CHECK(report_json(stalled)["report"]["finding"] == "stalled");
    // Runs that disagree: a machine that lost its GPU for some runs while others hung is a hang,
    // not "no GPU"; only a GPU missing in every run is the machine's finding.
    const ReportInput mixed = made_up_report(2, {"no_gpu", "hang"}, {"no_gpu", "pass"});
    CHECK(report_finding(mixed) == "hang");
    CHECK(report_title(mixed).rfind("Scenario 2 hangs in softmax", 0) == 0);
    CHECK(report_finding(made_up_report(2, {"no_gpu", "no_gpu"}, {"no_gpu", "no_gpu"})) == "no_gpu");
    CHECK(report_finding(made_up_report(2, {"no_gpu", "pass"}, {"no_gpu", "pass"})) == "not_reproduced");
    const ReportInput some = made_up_report(2, {"stall_pass"}, {"pass"});
    CHECK(report_finding(some) == "not_reproduced");
    const std::string some_md = report_markdown(some);
    CHECK(some_md.find("| 2 | off | pass | `softmax` | 3012.5 | 1 of 3 |") != std::string::npos);
    CHECK(report_markdown(quiet).find("## Stalls") == std::string::npos);
    const ReportInput nogpu = made_up_report(3, {"no_gpu"}, {"no_gpu"});
    CHECK(report_finding(nogpu) == "no_gpu");
    CHECK(report_title(nogpu) == "Scenario 3: not run on this machine (no usable CUDA GPU)");
  }

  TEST_CASE("environment: the driver version, the OS name, the architectures, the affected platform") {
    CHECK(parse_nvidia_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release "
                                      "Build  (dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\nGCC version:  "
                                      "gcc version 13.3.0\n") == "580.95.05");
    CHECK(parse_nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 "
                                      "18:56:32 UTC 2023\n") == "535.129.03");
    CHECK(parse_nvidia_driver_version("") == "unknown");
    CHECK(parse_os_release("NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 24.04.3 LTS\"\nID=ubuntu\n") == "Ubuntu 24.04.3 LTS");
    CHECK(parse_os_release("ID=alpine\n") == "unknown");
    CHECK(describe_cuda_architectures("90-real;121-real;121-virtual") == "machine code sm_90 sm_121, PTX compute_121");
    CHECK(describe_cuda_architectures("90") == "machine code sm_90, PTX compute_90");
    CHECK(cublas_version_string(130100) == "13.1.0");
    CHECK(cuda_version_string(13000) == "13.0");

    Environment spark;
    spark.host.cpu_arch = "aarch64";
    DeviceInfo gb10;
    gb10.name = "NVIDIA GB10";
    gb10.cc_major = 12;
    gb10.cc_minor = 1;
    gb10.integrated = gb10.pageable_memory_access = gb10.pageable_memory_access_uses_host_page_tables = true;
    spark.device = gb10;
    CHECK(affected_platform_summary(spark).rfind("matches the affected platform", 0) == 0);
    Environment h100 = spark;
    h100.host.cpu_arch = "x86_64";
    h100.device->cc_major = 9;
    h100.device->cc_minor = 0;
    h100.device->integrated = h100.device->pageable_memory_access = false;
    const std::string summary = affected_platform_summary(h100);
    CHECK(summary.find("does not match") == 0);
    CHECK(summary.find("compute capability 9.0 (affected: 12.1)") != std::string::npos);
    // The device's unified-memory attributes survive the JSON round trip (the child reports them).
    const DeviceInfo back = device_from_json(device_to_json(gb10));
    CHECK(back.pageable_memory_access_uses_host_page_tables);
    CHECK_FALSE(back.direct_managed_mem_access_from_host);
    const Environment again = environment_from_json(environment_to_json(spark));
    CHECK(again.device->name == "NVIDIA GB10");
    CHECK(environment_to_json(again)["affected_platform"]["matches"] == true);
    // The environment block's lines, as REPORT.md and `repro info` print them: with a GPU and without.
    spark.device->sm_count = 48;
    spark.device->total_memory = 128ull << 30;
    spark.cuda.driver = 13000;
    spark.cuda.runtime = 13000;
    spark.cuda.cublas_loaded = spark.cuda.cublas_built = 130100;
    spark.cuda.cublas_path = "/usr/local/cuda/lib64/libcublas.so.13";
    std::map<std::string, std::string> lines;
    for (const auto& [what, value] : environment_lines(spark)) lines[what] = value;
    CHECK(lines["GPU"] == "NVIDIA GB10");
    CHECK(lines["compute capability"] == "12.1 (sm_121)");
    CHECK(lines["SMs"] == "48");
    CHECK(lines["CUDA driver"] == "13.0 (cudaDriverGetVersion 13000)");
    CHECK(lines["cuBLAS"] == "13.1.0 loaded (/usr/local/cuda/lib64/libcublas.so.13), built against 13.1.0");
    CHECK(lines["unified memory"] == "integrated=1 concurrentManagedAccess=0 pageableMemoryAccess=1 "
                                     "pageableMemoryAccessUsesHostPageTables=1 directManagedMemAccessFromHost=0 "
                                     "hostNativeAtomicSupported=0");
    CHECK(lines["affected platform"].rfind("matches the affected platform", 0) == 0);
    CHECK(lines["CUDA variables"] == "none set (the driver's and cuBLAS's defaults)");
    // The CUDA variables of an environment: by name, whatever their order; no other variable.
    spark.host.cuda_variables = cuda_variables({"PATH=/usr/bin", "CUDA_LAUNCH_BLOCKING=1", "MY_CUDA_X=1", "CUDA_EMPTY=",
                                                "CUBLAS_WORKSPACE_CONFIG=:4096:8", "no_equals", "CUDA_DEVICE_MAX_CONNECTIONS=1"});
    CHECK(spark.host.cuda_variables == std::map<std::string, std::string>{{"CUBLAS_WORKSPACE_CONFIG", ":4096:8"},
                                                                          {"CUDA_DEVICE_MAX_CONNECTIONS", "1"},
                                                                          {"CUDA_EMPTY", ""},
                                                                          {"CUDA_LAUNCH_BLOCKING", "1"}});
    lines.clear();
    for (const auto& [what, value] : environment_lines(spark)) lines[what] = value;
    CHECK(lines["CUDA variables"] == "CUBLAS_WORKSPACE_CONFIG=:4096:8 CUDA_DEVICE_MAX_CONNECTIONS=1 CUDA_EMPTY= CUDA_LAUNCH_BLOCKING=1");
    CHECK(environment_from_json(environment_to_json(spark)).host.cuda_variables == spark.host.cuda_variables);
    nlohmann::json older = environment_to_json(spark);  // a report's JSON from before they were recorded
    older["host"].erase("cuda_variables");
    CHECK(environment_from_json(older).host.cuda_variables.empty());
    Environment none;
    none.gpu_error = "no usable CUDA GPU: no CUDA-capable device is detected";
    none.cuda.cublas_static = true;
    lines.clear();
    for (const auto& [what, value] : environment_lines(none)) lines[what] = value;
    CHECK(lines["GPU"] == none.gpu_error);
    CHECK(lines["CUDA driver"] == "none (no CUDA driver loaded)");
    CHECK(lines["cuBLAS"].find("(linked statically)") != std::string::npos);
    CHECK(lines["unified memory"] == "unknown (no usable GPU)");
    CHECK(lines.count("SMs") == 0);
  }

  TEST_CASE("the template language: sections, alternatives, negation, nesting, values; mistakes throw") {
    const std::map<std::string, bool> flags{{"a", true}, {"b", false}};
    const std::map<std::string, std::string> values{{"X", "1"}, {"Y_2", "@Y_2@"}};
    CHECK(expand_template("x=@X@\n//@if a\nA\n//@else\nnot A\n//@endif\n", flags, values) == "x=1\nA\n");
    CHECK(expand_template("//@if b || !a\nno\n//@else\nyes\n//@endif\n", flags, values) == "yes\n");
    CHECK(expand_template("//@if b\n//@if a\nno\n//@endif\n//@else\nout\n//@endif\n", flags, values) == "out\n");
    CHECK(expand_template("mail@host and @Y_2@\n", flags, values) == "mail@host and @Y_2@\n");  // never rescanned
    CHECK_THROWS_AS(expand_template("//@if c\n//@endif\n", flags, values), std::logic_error);
    CHECK_THROWS_AS(expand_template("@Z@\n", flags, values), std::logic_error);
    CHECK_THROWS_AS(expand_template("//@if a\n", flags, values), std::logic_error);
    CHECK_THROWS_AS(expand_template("//@endif\n", flags, values), std::logic_error);
    // A harness file inlined without its #pragma and its #include "..."; its system headers kept
    // where no line before included them; template comments dropped.
    const std::map<std::string, std::string> headers{
        {"h.h", "// h.h: shared.\n#pragma once\n\n#include <cstdint>\n#include \"g.h\"\n\nnamespace sdpa {\n\n"
                "inline int f() { return 1; }\n\n}  // namespace sdpa\n"}};
    CHECK(expand_template("//@// a note\n//@inline h.h\nx\n", flags, values, headers) ==
          "// h.h: shared.\n\n#include <cstdint>\n\nnamespace sdpa {\n\ninline int f() { return 1; }\n\n}  // namespace sdpa\nx\n");
    CHECK(expand_template("#include <cstdint>\n//@inline h.h\n#include <cstdint>\n", flags, values, headers) ==
          "#include <cstdint>\n// h.h: shared.\n\nnamespace sdpa {\n\ninline int f() { return 1; }\n\n}  // namespace sdpa\n");
    CHECK(expand_template("//@if b\n//@inline h.h\n//@endif\nx\n", flags, values, headers) == "x\n");
    CHECK_THROWS_AS(expand_template("//@inline other.h\n", flags, values, headers), std::logic_error);
    CHECK(expand_template("a\n\n//@if b\nno\n//@endif\n\nc\n", flags, values) == "a\n\nc\n");  // one blank line
  }
}

// Compiling takes a few seconds per program; the suite runs as its own CTest entry.
TEST_SUITE("report_nvcc") {
  TEST_CASE("every reproducer compiles with nvcc and links with cuBLAS, without a warning") {
    const std::string nvcc = find_nvcc();
    if (nvcc.empty()) {
      std::printf("SKIPPED: nvcc not found (neither %s nor on PATH); the generated reproducers were not compiled\n",
                  SDPA_NVCC);
      std::fflush(stdout);
      std::exit(77);
    }
    // The program is the harness's code with the plan's steps printed in between: what varies from
    // one configuration to the next is which steps, which operations and which of the frame's
    // conditions it has. So: every scenario as the report writes it, then configurations that
    // between them print every operation of the plan (each PlanOp kind) and switch in the frame's
    // context section, each built alone as its first comment says (with -arch=sm_90 for speed).
    // (Scenario 0 has no report; gpu.report builds its reproducer from the generator directly.)
    const std::vector<std::vector<std::string>> configs = {
        {"--scenario", "1"},
        {"--scenario", "2"},
        {"--scenario", "3"},
        {"--scenario", "4"},
        {"--scenario", "5"},
        {"--scenario", "6", "-L", "64", "-S", "64", "--layers", "2"},
        {"--scenario", "7", "-L", "64", "-S", "64", "--layers", "2", "--mapped-weights", "64M"},
        // masks (build_mask, add_mask), GQA (repeat_heads), dropout, fp16 native, the backward with
        // dropout's, per-call allocation and layers, a ballast and a host load, steps.
        {"--scenario", "4", "--backward", "--dropout", "0.1", "--kv-heads", "2", "--mask", "bool", "--dtype", "fp16",
         "--precision", "native", "--alloc-timing", "per-call", "--layers", "2", "--ballast", "64M", "--host-load", "1",
         "--steps", "2"},
        // scenario 2 during softmax, fix 2 on both softmaxes (prefetch, fix_sync), the host's access
        // to the backward's operands, a float mask, the advice.
        {"--scenario", "2", "--backward", "--scores-host-phase", "during", "--scores-to-host", "both", "--mask", "float",
         "--mask-dims", "1xH", "--advise", "preferred:gpu,read-mostly", "-L", "64", "-S", "1536"},
        // scenario 3 with the backward: dQ per batch entry (gemm calls > 1), fix 3's transpose, pointer arrays per call.
        {"--scenario", "3", "--backward", "--layers", "2"},
        // scenario 1 with events (order_gemm), fix 1's syncs, a causal mask, the whole path; an
        // injected fault (fix off only: the frame's fault section, the harness's fault kernel).
        {"--scenario", "1", "--full", "--gemm-stream", "aux", "--gemm-order", "event", "--mask", "causal", "--dtype", "fp32",
         "--inject", "error:pv_gemm@no-fix", "--allow-inject"},
        // fix 5's chunks (scenario 6's fix on, at its workload's 4608 keys: 8 chunks of 576 rows), per call.
        {"--scenario", "6", "--layers", "2"},
    };
    const std::string dir = temp_dir("report_nvcc");
    // Under ASan only the harness's side runs (the asan test preset sets this): each reproducer
    // generated by the instrumented `repro report --no-run`; nvcc's builds, which no sanitizer
    // sees, are the other presets' run of this test.
    const bool generate_only = std::getenv("SDPA_REPORT_NVCC_GENERATE_ONLY") != nullptr;
    auto config_dir = [&](size_t i) { return dir + "/c" + std::to_string(i); };
    auto config_cu = [&](size_t i) { return config_dir(i) + "/repro_scenario" + configs[i][1] + ".cu"; };
    const auto pool_start = std::chrono::steady_clock::now();
    struct Built {
      Ran generated, built;
    };
    // nvcc at the lowest CPU priority: the pool keeps every core busy where CTest reserves one for
    // this test, so the builds take what the tests beside them leave idle and cannot make a test
    // that holds a process to a deadline late.
    const std::vector<Built> builds = test_util::in_parallel(configs.size(), builds_at_once(configs.size()), [&](size_t i) {
      Built b;
      std::vector<std::string> args = {"report", "--no-run", "--out", config_dir(i)};
      args.insert(args.end(), configs[i].begin(), configs[i].end());
      b.generated = run_repro(args);
      if (b.generated.exit_code != 0 || generate_only) return b;
      b.built = run({"nice", "-n", "19", nvcc, "-O2", "-std=c++17", "-arch=sm_90", "-Xcompiler", "-Wall,-Wextra", config_cu(i),
                     "-lcublas", "-o", config_cu(i) + ".bin"});
      return b;
    });
    double busy_s = 0;
    for (const Built& b : builds) busy_s += b.built.wall_s;
    std::printf("%zu reproducers %s: %.1f s with their generation (%.1f s of nvcc one after another)\n", configs.size(),
                generate_only ? "generated, none built (SDPA_REPORT_NVCC_GENERATE_ONLY)" : "built",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - pool_start).count(), busy_s);
    std::set<std::string> ops;
    for (size_t i = 0; i < configs.size(); ++i) {
      std::string line;
      for (const auto& a : configs[i]) line += a + " ";
      CAPTURE(line);
      REQUIRE_MESSAGE(builds[i].generated.exit_code == 0, builds[i].generated.err);
      const std::string cu = file_text(config_cu(i));
      CHECK(cu.find("//@") == std::string::npos);  // every directive expanded (an @NAME@ left is one of the generator's errors)
      for (const char* call : {"p.allocate(", "p.release(", "p.entry_sync(", "p.sync_streams()", "cudaStreamSynchronize(p.s(",
                                      "cudaDeviceSynchronize()", "p.prefetch(", "p.order_gemm()", "p.order_path()",
                                      "launch_build_additive_mask(", "launch_convert_scale(", "launch_convert_scale_batch(",
                                      "launch_repeat_heads(", "launch_transpose_heads(p", "p.pointer_arrays(p", "run_gemm(p.cublas",
                                      "launch_add_mask(p", "launch_safe_softmax(p", "launch_dropout(p", "launch_dropout_backward(p",
                                      "launch_softmax_backward(p", "launch_sum_head_groups(p", "p.host_access(",
                                      "p.softmax_launched()", "p.finish_host_access()", "p.release_advice(", "// [FIX_",
                                      "p.inject(kFaultOff"}) {
        const size_t plan = cu.find("// ---- fix off");
        if (cu.find(call, plan) != std::string::npos) ops.insert(call);
      }
      if (generate_only) continue;
      CHECK_MESSAGE(builds[i].built.exit_code == 0, builds[i].built.err);
      CHECK_MESSAGE(warnings_about(builds[i].built.err, config_cu(i), {config_cu(i)}).empty(), builds[i].built.err);
      std::printf("compiled repro_scenario%s.cu in %5.1f s: %s\n", configs[i][1].c_str(), builds[i].built.wall_s, line.c_str());
    }
    // Between them the configurations print every operation a plan has: a printer none of them
    // reaches would be compiled by no test.
    CHECK(ops.size() == 28);
    remove_tree(dir);
  }
}
