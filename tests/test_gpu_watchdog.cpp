// test_gpu_watchdog.cpp: the real repro binary on the GPU under fault injection. For every
// stage: an injected hang is named with exit code 3 within the stage deadline plus 1 s; an
// injected CUDA error is reported with its stage (exit 4). A clean run at --log values writes
// the expected stage-log pattern (docs/SCENARIOS.md). Prints a table of the hangs. At a hang in
// qk_gemm, softmax and stream_sync, fork and --no-fork: the hang snapshot names the spinning
// kernel as resident and the main thread inside a CUDA call, within its budget; --on-hang keep
// leaves the hung process alive for its keep time, then ends it.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage.h"
#include "math_sdpa/stage_log.h"
#include "run_program.h"
#include "scenarios/hang_classification.h"

using namespace sdpa;

namespace {

// Every stage runs in this configuration: causal mask (mask_prepare, mask_add), bf16 upcast
// (upcast, cast_output), GQA (gqa_expand), fix 3 (kt_contiguous), scenario 2's condition on the
// full path (scores_to_host), dropout; the weights' load with --mapped-weights (args_running).
const std::vector<std::string> kAllStagesArgs = {"--mask",  "causal", "--heads", "8",     "--kv-heads",       "4",
                                                 "--dropout", "0.1",  "--fixes", "3",     "--scores-to-host", "read"};

// The weights' load (load_weights) runs with --mapped-weights: a small file of the suite's own,
// made by the first run that loads it, removed when the suite's process ends.
struct SuiteWeightsFile {
  std::string dir = test_util::temp_dir("gpu_watchdog_weights");
  std::string arg() const { return "256M:" + dir + "/weights.bin"; }
  ~SuiteWeightsFile() { test_util::remove_tree(dir); }
};
const SuiteWeightsFile& suite_weights_file() {
  static const SuiteWeightsFile file;
  return file;
}

using test_util::run_repro_json;

// The arguments under which `stage` runs: kAllStagesArgs, with per-call allocation for the
// alloc_* and free_* stages, or for the graph stages --graph (a graph cannot hold the host's read
// of the scores, so that option is left out).
std::vector<std::string> args_running(const std::string& stage) {
  Stage s{};
  REQUIRE(parse_stage(stage, s));
  std::vector<std::string> args = kAllStagesArgs;
  if (is_backward_stage(s)) args.push_back("--backward");
  if (is_memory_stage(s)) {
    args.insert(args.end(), {"--alloc-timing", "per-call"});
    return args;
  }
  if (is_backward_stage(s)) return args;
  if (stage_when(s) == StageWhen::load) {
    args.insert(args.end(), {"--mapped-weights", suite_weights_file().arg()});
    return args;
  }
  if (stage.rfind("graph_", 0) != 0) return kAllStagesArgs;
  return {"--mask", "causal", "--heads", "8", "--kv-heads", "4", "--dropout", "0.1", "--fixes", "3", "--graph"};
}

// The runs of `args_of`, eight at a time (the suite reserves eight CPUs): each is its own process
// on the GPU, which time-slices one run's stuck or failing stage with the others' short ones; the
// deadlines are the host's clock, so what these runs test (a hang or an error detected, named and
// timed) does not depend on having the GPU alone. Results in the order of `args_of`.
std::vector<test_util::JsonRun> run_eight_at_a_time(const std::vector<std::vector<std::string>>& args_of) {
  return test_util::in_parallel(args_of.size(), 8, [&](size_t i) { return run_repro_json(args_of[i]); });
}

// Every stage's name, in the stages' order.
std::vector<std::string> all_stage_names() {
  std::vector<std::string> stages;
  for (int i = 0; i < kStageCount; ++i) stages.push_back(stage_name(static_cast<Stage>(i)));
  return stages;
}

bool host_graph_stage(const std::string& stage) { return stage == "graph_capture" || stage == "graph_instantiate"; }

using test_util::now_s;

// The pid in a --log-file's records: "(pid N)" of its start (the supervisor, or the --no-fork
// run) or "the GPU child is pid N".
int pid_in_log(const std::string& log, const std::string& after) {
  const size_t at = log.find(after);
  return at == std::string::npos ? -1 : std::atoi(log.c_str() + at + after.size());
}

bool alive(int pid) {
  const std::string stat = test_util::file_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
}

// `repro --inject hang:softmax --stage-timeout 1 --on-hang keep --keep-timeout 5`, watched from
// outside: the process its keep message names, alive when named and two seconds later, the run's
// exit and time, and whether that process is gone after. No assertions here (it runs on a thread
// of its own); the test checks what it saw.
struct KeptRun {
  bool no_fork = false;
  pid_t repro = -1;
  int kept = -1, status = 0;
  bool alive_when_named = false, alive_two_seconds_in = false, alive_after_end = true;
  double took = 0;
  std::string err, result_json;
};

KeptRun keep_hung_process(bool no_fork) {
  KeptRun r;
  r.no_fork = no_fork;
  const std::string dir = test_util::temp_dir("gpu_keep"), err = dir + "/err";
  std::vector<std::string> args{SDPA_REPRO_BINARY, "--inject", "hang:softmax", "--stage-timeout", "1",
                                "--on-hang", "keep", "--keep-timeout", "5", "--json", dir + "/r.json"};
  if (no_fork) args.push_back("--no-fork");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const double start = now_s();
  r.repro = fork();
  if (r.repro == 0) {
    const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // The keep message names the hung process; while kept, it is there to inspect.
  while (r.kept < 0 && now_s() - start < 30) {
    r.kept = pid_in_log(test_util::file_text(err), "keeping the hung process (pid ");
    if (r.kept < 0) usleep(20000);
  }
  if (r.kept > 0) {
    r.alive_when_named = alive(r.kept);
    usleep(2000000);
    r.alive_two_seconds_in = alive(r.kept);
  }
  while (waitpid(r.repro, &r.status, WNOHANG) != r.repro && now_s() - start < 30) usleep(20000);
  r.took = now_s() - start;
  // Gone once the run has ended (allowing the kernel half a second to reap it).
  for (int i = 0; i < 25 && r.kept > 0 && alive(r.kept); ++i) usleep(20000);
  r.alive_after_end = r.kept > 0 && alive(r.kept);
  r.err = test_util::file_text(err);
  r.result_json = test_util::file_text(dir + "/r.json");
  test_util::remove_tree(dir);
  return r;
}

}  // namespace

TEST_SUITE("gpu_watchdog") {
  TEST_CASE("an injected hang in every stage is detected, named and classified within the deadline + 1 s") {
    const double deadline = 1.5;
    const std::vector<std::string> stages = all_stage_names();
    std::vector<std::vector<std::string>> args_of(stages.size());
    for (size_t i = 0; i < stages.size(); ++i) {
      args_of[i] = args_running(stages[i]);
      // --on-hang kill: this is the deadline's test; the snapshot has its own below.
      args_of[i].insert(args_of[i].end(),
                        {"--inject", "hang:" + stages[i], "--stage-timeout", "1.5", "--log", "stages", "--on-hang", "kill"});
    }
    const std::vector<test_util::JsonRun> runs = run_eight_at_a_time(args_of);
    std::printf("%-13s %4s  %-13s %-14s %9s %7s\n", "injected", "exit", "reported", "classification", "running_s",
                "wall_s");
    for (int i = 0; i < kStageCount; ++i) {
      const std::string& stage = stages[static_cast<size_t>(i)];
      const test_util::JsonRun& run = runs[static_cast<size_t>(i)];
      INFO("stage ", stage, " stderr: ", run.err.substr(0, 2000));
      if (host_graph_stage(stage)) {  // refused: no GPU work in it to stall
        CHECK(run.exit_code == kExitUsage);
        CHECK(run.err.find("waits for nothing on the GPU") != std::string::npos);
        continue;
      }
      CHECK(run.exit_code == kExitHang);
      REQUIRE(run.result.is_object());
      const auto& w = run.result["watchdog"];
      REQUIRE(w.is_object());
      CHECK(w["stage"] == stage);
      CHECK(run.result["outcome"] == "hang");
      const double running = w["running_seconds"].get<double>();
      CHECK(running >= deadline);
      CHECK(running <= deadline + 1.0);
      CHECK(run.err.find("HANG: stage " + stage) != std::string::npos);
      const int scenario = w["scenario"].get<int>();
      std::vector<int> fits = scenarios_for_hung_stage(static_cast<Stage>(i));
      // --backward keeps what autograd keeps: the training context makes scenario 6 a candidate too.
      if (is_backward_stage(static_cast<Stage>(i)) && std::find(fits.begin(), fits.end(), 6) == fits.end()) fits.push_back(6);
      // Candidates none of which has more for it than against it: "none fits", scenario 0.
      const bool none_fits = w["classification"].get<std::string>().rfind("none fits", 0) == 0;
      CHECK(scenario == (fits.empty() || none_fits ? 0 : w["candidates"][0]["scenario"].get<int>()));
      const bool fits_signature =
          std::find(fits.begin(), fits.end(), scenario) != fits.end() || ((fits.empty() || none_fits) && scenario == 0);
      CHECK(fits_signature);
      std::printf("%-13s %4d  %-13s %-14s %9.3f %7.2f\n", stage.c_str(), run.exit_code,
                  w["stage"].get<std::string>().c_str(),
                  scenario ? ("scenario " + std::to_string(scenario)).c_str() : "unclassified", running, run.wall_s);
    }
  }

  TEST_CASE("an injected CUDA error in every stage is reported with its stage, exit 4") {
    const std::vector<std::string> stages = all_stage_names();
    std::vector<std::vector<std::string>> args_of(stages.size());
    for (size_t i = 0; i < stages.size(); ++i) {
      args_of[i] = args_running(stages[i]);
      args_of[i].insert(args_of[i].end(), {"--inject", "error:" + stages[i]});
    }
    const std::vector<test_util::JsonRun> runs = run_eight_at_a_time(args_of);
    for (size_t i = 0; i < stages.size(); ++i) {
      const std::string& stage = stages[i];
      const test_util::JsonRun& run = runs[i];
      INFO("stage ", stage, " stderr: ", run.err.substr(0, 2000));
      CHECK(run.exit_code == kExitCudaError);
      REQUIRE(run.result.is_object());
      CHECK(run.result["outcome"] == "cuda_error");
      CHECK(run.result["error_stage"] == stage);
      CHECK(run.err.find("in stage " + stage + ": code=") != std::string::npos);
      CHECK(run.err.find("\"kernel launch\"") != std::string::npos);
    }
  }

  TEST_CASE("slow:STAGE:MS below the deadline is not a hang, and shows in the stage's time") {
    std::vector<std::string> args = kAllStagesArgs;
    args.insert(args.end(), {"--inject", "slow:softmax:300", "--stage-timeout", "5", "--check", "--stall-threshold", "0"});
    const test_util::JsonRun run = run_repro_json(args);
    INFO(run.err.substr(0, 2000));
    CHECK(run.exit_code == kExitPass);
    REQUIRE(run.result.is_object());
    for (const auto& s : run.result["stages"]) {
      if (s["stage"] == "softmax") CHECK(s["median_ms"].get<double>() >= 300.0);
    }
  }

  TEST_CASE("a stage over the stall threshold under the deadline is a stall: every call stalled is exit 9, some is a pass") {
    struct Case {
      const char* inject;
      int iters, exit_code, calls_stalled;
      const char* stage;
    };
    // 1.2 s over a 1 s threshold in the one call; in call 2 of 3 only; 0.6 s, under it.
    for (const Case& c : {Case{"slow:softmax:1200", 1, kExitStalled, 1, "softmax"},
                          Case{"slow:pv_gemm:1200@step=2", 3, kExitPass, 1, "pv_gemm"},
                          Case{"slow:softmax:600", 1, kExitPass, 0, nullptr}}) {
      CAPTURE(c.inject);
      std::vector<std::string> args = kAllStagesArgs;
      args.insert(args.end(), {"--inject", c.inject, "--iters", std::to_string(c.iters), "--stage-timeout", "5", "--check"});
      const test_util::JsonRun run = run_repro_json(args);
      INFO(run.err.substr(0, 2000));
      CHECK(run.exit_code == c.exit_code);
      REQUIRE(run.result.is_object());
      const auto& stalls = run.result["stalls"];
      CHECK(stalls["threshold_s"] == 1.0);
      CHECK(stalls["calls"] == c.iters);
      CHECK(stalls["calls_stalled"] == c.calls_stalled);
      if (c.stage) {
        CHECK(stalls["longest"]["stage"] == c.stage);
        CHECK(stalls["longest"]["ms"].get<double>() >= 1200.0);
        CHECK(stalls["longest"]["ms"].get<double>() < 5000.0);
        CHECK(run.out.find("# STALLED: " + std::string(c.stage)) != std::string::npos);
      } else {
        CHECK(stalls["longest"].is_null());
      }
      CHECK(run.result["outcome"] == (c.exit_code == kExitStalled ? "stalled" : "pass"));
    }
  }

  TEST_CASE("--launch-blocking: CUDA_LAUNCH_BLOCKING=1 is in force in the GPU process, and the run still passes") {
    for (bool blocking : {true, false}) {
      CAPTURE(blocking);
      std::vector<std::string> args = kAllStagesArgs;
      args.insert(args.end(), {"--check", "--iters", "2"});
      if (blocking) args.push_back("--launch-blocking");
      const test_util::JsonRun run = run_repro_json(args);
      INFO(run.err.substr(0, 2000));
      CHECK(run.exit_code == kExitPass);
      REQUIRE(run.result.is_object());
      CHECK(run.result["config"]["launch_blocking"] == blocking);
      if (blocking) {
        // A 50 ms kernel's launch returned only once it had run: the driver honoured the variable.
        CHECK(run.result["launch_blocking_probe_ms"].get<double>() >= 45.0);
        CHECK(run.out.find("CUDA_LAUNCH_BLOCKING=1 in force") != std::string::npos);
      } else {
        CHECK(run.result["launch_blocking_probe_ms"].is_null());
      }
    }
  }

  TEST_CASE("--no-fork: the in-process watchdog names the hung stage too") {
    std::vector<std::string> args = kAllStagesArgs;
    args.insert(args.end(), {"--inject", "hang:qk_gemm", "--stage-timeout", "1.5", "--no-fork"});
    const test_util::JsonRun run = run_repro_json(args);
    INFO(run.err.substr(0, 2000));
    CHECK(run.exit_code == kExitHang);
    REQUIRE(run.result.is_object());
    CHECK(run.result["watchdog"]["stage"] == "qk_gemm");
    CHECK(run.result["watchdog"]["scenario"] == 1);
  }

  TEST_CASE("the hang snapshot names the spinning kernel as resident and the main thread inside a CUDA call") {
    const double deadline = 1.5, budget = 60;
    std::printf("%-12s %-8s %-10s %-12s %-6s %-24s %-24s %10s %7s\n", "injected", "mode", "debugger", "kernel", "SMs",
                "main thread in", "called as", "snapshot_s", "wall_s");
    struct Hang {
      const char* stage;
      bool no_fork;
      std::string dir, snap, log;
    };
    std::vector<Hang> hangs;
    for (const char* stage : {"qk_gemm", "softmax", "stream_sync"}) {
      for (const bool no_fork : {false, true}) {
        const std::string dir = test_util::temp_dir("gpu_snapshot");
        hangs.push_back({stage, no_fork, dir, dir + "/snap", dir + "/run.log"});
      }
    }
    // Three hung processes at a time (the test reserves three CPUs), each with its own debugger:
    // waiting out a deadline and a debugger's attach is most of each run, and none is timed
    // against another.
    const std::vector<test_util::JsonRun> runs = test_util::in_parallel(hangs.size(), 3, [&](size_t i) {
      const Hang& h = hangs[i];
      std::vector<std::string> args{"--inject", std::string("hang:") + h.stage, "--stage-timeout", "1.5",
                                    "--snapshot-timeout", "60", "--snapshot-dir", h.snap, "--log-file", h.log};
      if (h.no_fork) args.push_back("--no-fork");
      return run_repro_json(args);
    });
    for (size_t i = 0; i < hangs.size(); ++i) {
      const Hang& h = hangs[i];
      const char* stage = h.stage;
      const bool no_fork = h.no_fork;
      const std::string& snap = h.snap;
      const test_util::JsonRun& run = runs[i];
      CAPTURE(stage);
      CAPTURE(no_fork);
      INFO("stderr: ", run.err.substr(0, 6000));
      CHECK(run.exit_code == kExitHang);
      REQUIRE(run.result.is_object());
      const auto& w = run.result["watchdog"];
      CHECK(w["stage"] == stage);
      CHECK(w["on_hang"] == "snapshot");
      REQUIRE(w["snapshot"].is_object());
      CHECK(w["snapshot"]["path"] == snap);
      CHECK(run.err.find("; snapshot in " + snap + "\n") != std::string::npos);  // the hang line names the folder
      const double snapshot_s = w["snapshot"]["seconds"];
      CHECK(snapshot_s <= budget);
      CHECK(run.wall_s <= deadline + budget + 5);
      const nlohmann::json j = nlohmann::json::parse(test_util::file_text(snap + "/snapshot.json"));
      // The process snapshotted: the GPU child (fork), or the run itself (--no-fork).
      const std::string logged = test_util::file_text(h.log);
      CHECK(j["pid"] == (no_fork ? pid_in_log(logged, "(pid ") : pid_in_log(logged, "the GPU child is pid ")));
      std::string debugger_state, kernel = "-", sms = "-", call = "-", called_as = "-";
      for (const auto& c : j["collectors"]) {
        if (c["name"] == "debugger") debugger_state = c["state"];
        if (c["name"] == "threads") CHECK(c["state"] == "ok");
      }
      const auto& summary = j["summary"];
      if (debugger_state == "skipped") {
        MESSAGE("no cuda-gdb here (or not permitted): the kernel and the CUDA call are not checked");
      } else {
        CHECK(debugger_state == "ok");
        REQUIRE(summary["kernels"].size() >= 1);
        const auto& k = summary["kernels"][0];
        kernel = k["name"];
        sms = k["sms"].dump();
        CHECK(k["name"] == "spin_kernel");
        CHECK_FALSE(k["sms"].empty());
        CHECK(k["warp"].is_object());
        REQUIRE(summary["main_thread"].is_object());
        call = summary["main_thread"]["cuda_call"];
        called_as = summary["main_thread"]["called_as"];
        CHECK_FALSE(call.empty());  // inside a CUDA call
        // A thread caught inside a driver call in D state at that moment would make it blocked_in_kernel.
        CHECK((summary["host_verdict"] == "waiting_in_cuda_call" || summary["host_verdict"] == "blocked_in_kernel"));
        CHECK(w["evidence"][0].get<std::string>().find("kernel spin_kernel resident on SM ") == 0);
      }
      // The log's last stage record names the hung stage, as a frozen machine would keep it.
      CHECK(logged.find("\thang\tstage " + std::string(stage) + " did not finish within 1.5 s") != std::string::npos);
      std::printf("%-12s %-8s %-10s %-12s %-6s %-24s %-24s %10.2f %7.2f\n", stage, no_fork ? "no-fork" : "fork",
                  debugger_state.c_str(), kernel.c_str(), sms.c_str(), call.c_str(), called_as.c_str(), snapshot_s,
                  run.wall_s);
      test_util::remove_tree(h.dir);
    }
  }

  TEST_CASE("--on-hang keep: the hung process stays alive and inspectable for the keep time, then ends") {
    // Fork and --no-fork at once: each waits out its own keep time, which is most of the test.
    const std::vector<KeptRun> runs = test_util::in_parallel(2, 2, [](size_t i) { return keep_hung_process(i == 1); });
    for (const KeptRun& r : runs) {
      CAPTURE(r.no_fork);
      INFO(r.err);
      REQUIRE(r.kept > 0);
      CHECK(r.alive_when_named);
      if (r.no_fork) CHECK(r.kept == r.repro);
      CHECK(r.alive_two_seconds_in);  // still there two seconds into the keep time
      CHECK(WIFEXITED(r.status));
      CHECK(WEXITSTATUS(r.status) == kExitHang);
      CHECK(r.took >= 1 + 5);
      CHECK(r.took < 1 + 5 + 10);
      CHECK_FALSE(r.alive_after_end);  // ended after the keep time
      const auto result = nlohmann::json::parse(r.result_json);
      CHECK(result["watchdog"]["on_hang"] == "keep");
      CHECK(result["watchdog"]["kept_seconds"].get<double>() >= 5);
      CHECK(r.err.find("cuda-gdb -p " + std::to_string(r.kept)) != std::string::npos);
    }
  }

  TEST_CASE("a clean run at --log values writes the expected pattern with values, in order") {
    const test_util::JsonRun run = run_repro_json({"--log", "values", "--check"});
    INFO(run.err.substr(0, 4000));
    CHECK(run.exit_code == kExitPass);
    const char* pattern[] = {"[ALLOC_DEBUG] tensor=query", "[SDPA_ENTRY] Q shape=[2, 8, 128, 64]",
                             "[CUDA_EVENT] sdpa_entry @", "[SDPA_ENTRY] Post-sync complete", "[BACKEND_SELECT]",
                             "[MATH_SDPA_START]", "[CUDA_EVENT] math_qk_start @", "[MATH_QK] Q strides=",
                             "[CUBLAS_GEMM_START] M=128 N=128 K=64", "[CUBLAS_GEMM_DONE]",
                             "[MATH_QK_DONE] scores shape=[2, 8, 128, 128] min=", "[MATH_SOFTMAX_START]",
                             "[MATH_SOFTMAX_DONE] Output shape=[2, 8, 128, 128] min=", "[MATH_FINAL_BMM_START]",
                             "[CUBLAS_GEMM_START] M=128 N=64 K=128", "[CUBLAS_GEMM_DONE]", "[MATH_FINAL_BMM_DONE]",
                             "[STREAM_SYNC] stream=", "[STREAM_SYNC_DONE] result=success", "[CUDA_EVENT] math_sdpa_complete @"};
    size_t at = 0;
    for (const char* tag : pattern) {
      CAPTURE(tag);
      const size_t found = run.err.find(tag, at);
      REQUIRE(found != std::string::npos);
      at = found + 1;
    }
    // Softmax rows sum to one: the original log's "sum=1024.0" for 2 x 8 x 128 rows is 2048 here.
    const size_t softmax_done = run.err.find("[MATH_SOFTMAX_DONE]");
    const std::string line = run.err.substr(softmax_done, run.err.find('\n', softmax_done) - softmax_done);
    CHECK(line.find("isnan=false isinf=false sum=2048") != std::string::npos);
  }
}
