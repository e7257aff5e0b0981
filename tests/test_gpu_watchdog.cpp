// test_gpu_watchdog.cpp: the real repro binary on the GPU under fault injection. For every
// stage: an injected hang is named with exit code 3 within the stage deadline plus 1 s; an
// injected CUDA error is reported with its stage (exit 4). A clean run at --log values writes
// the design document's expected stage-log pattern. Prints the table the issue asks for.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage.h"
#include "math_sdpa/stage_log.h"

using namespace sdpa;

namespace {

struct BinaryRun {
  int exit_code = -1;
  double wall_s = 0;
  std::string stderr_text;
  nlohmann::json result;
};

// Every stage runs in this configuration: causal mask (mask_prepare, mask_add), bf16 upcast
// (upcast, cast_output), GQA (gqa_expand), fix 3 (kt_contiguous), scenario 2's condition on the
// full path (scores_to_host), dropout.
const std::vector<std::string> kAllStagesArgs = {"--mask",  "causal", "--heads", "8",     "--kv-heads",       "4",
                                                 "--dropout", "0.1",  "--fixes", "3",     "--scores-to-host", "read"};

BinaryRun run_binary(std::vector<std::string> args) {
  char dir_template[] = "/tmp/sdpa_gpu_watchdog_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string json = dir + "/result.json", err = dir + "/stderr.txt";
  args.insert(args.begin(), SDPA_REPRO_BINARY);
  args.push_back("--json");
  args.push_back(json);
  BinaryRun run;
  const int64_t start = monotonic_us();
  std::fflush(nullptr);  // or the child would write this process's buffered output again
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen(err.c_str(), "w", stderr);
    std::freopen("/dev/null", "w", stdout);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  run.wall_s = (monotonic_us() - start) / 1e6;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err);
  run.stderr_text.assign(std::istreambuf_iterator<char>(e), {});
  std::ifstream j(json);
  if (j) run.result = nlohmann::json::parse(j, nullptr, false);
  std::system(("rm -rf '" + dir + "'").c_str());
  return run;
}

}  // namespace

TEST_SUITE("gpu_watchdog") {
  TEST_CASE("an injected hang in every stage is detected, named and classified within the deadline + 1 s") {
    const double deadline = 1.5;
    std::printf("%-13s %4s  %-13s %-14s %9s %7s\n", "injected", "exit", "reported", "classification", "running_s",
                "wall_s");
    for (int i = 0; i < kStageCount; ++i) {
      const std::string stage = stage_name(static_cast<Stage>(i));
      std::vector<std::string> args = kAllStagesArgs;
      args.insert(args.end(), {"--inject", "hang:" + stage, "--stage-timeout", "1.5", "--log", "stages"});
      const BinaryRun run = run_binary(args);
      INFO("stage ", stage, " stderr: ", run.stderr_text.substr(0, 2000));
      CHECK(run.exit_code == kExitHang);
      REQUIRE(run.result.is_object());
      const auto& w = run.result["watchdog"];
      REQUIRE(w.is_object());
      CHECK(w["stage"] == stage);
      CHECK(run.result["outcome"] == "hang");
      const double running = w["running_seconds"].get<double>();
      CHECK(running >= deadline);
      CHECK(running <= deadline + 1.0);
      CHECK(run.stderr_text.find("HANG: stage " + stage) != std::string::npos);
      const int scenario = w["scenario"].get<int>();
      CHECK(scenario == scenario_for_hung_stage(static_cast<Stage>(i)));
      std::printf("%-13s %4d  %-13s %-14s %9.3f %7.2f\n", stage.c_str(), run.exit_code,
                  w["stage"].get<std::string>().c_str(),
                  scenario ? ("scenario " + std::to_string(scenario)).c_str() : "unclassified", running, run.wall_s);
    }
  }

  TEST_CASE("an injected CUDA error in every stage is reported with its stage, exit 4") {
    for (int i = 0; i < kStageCount; ++i) {
      const std::string stage = stage_name(static_cast<Stage>(i));
      std::vector<std::string> args = kAllStagesArgs;
      args.insert(args.end(), {"--inject", "error:" + stage});
      const BinaryRun run = run_binary(args);
      INFO("stage ", stage, " stderr: ", run.stderr_text.substr(0, 2000));
      CHECK(run.exit_code == kExitCudaError);
      REQUIRE(run.result.is_object());
      CHECK(run.result["outcome"] == "cuda_error");
      CHECK(run.result["error_stage"] == stage);
      CHECK(run.stderr_text.find("in stage " + stage + ": code=") != std::string::npos);
      CHECK(run.stderr_text.find("\"kernel launch\"") != std::string::npos);
    }
  }

  TEST_CASE("slow:STAGE:MS below the deadline is not a hang, and shows in the stage's time") {
    std::vector<std::string> args = kAllStagesArgs;
    args.insert(args.end(), {"--inject", "slow:softmax:300", "--stage-timeout", "5", "--check"});
    const BinaryRun run = run_binary(args);
    INFO(run.stderr_text.substr(0, 2000));
    CHECK(run.exit_code == kExitPass);
    REQUIRE(run.result.is_object());
    for (const auto& s : run.result["stages"]) {
      if (s["stage"] == "softmax") CHECK(s["median_ms"].get<double>() >= 300.0);
    }
  }

  TEST_CASE("--no-fork: the in-process watchdog names the hung stage too") {
    std::vector<std::string> args = kAllStagesArgs;
    args.insert(args.end(), {"--inject", "hang:qk_gemm", "--stage-timeout", "1.5", "--no-fork"});
    const BinaryRun run = run_binary(args);
    INFO(run.stderr_text.substr(0, 2000));
    CHECK(run.exit_code == kExitHang);
    REQUIRE(run.result.is_object());
    CHECK(run.result["watchdog"]["stage"] == "qk_gemm");
    CHECK(run.result["watchdog"]["scenario"] == 1);
  }

  TEST_CASE("a clean run at --log values writes the expected pattern with values, in order") {
    const BinaryRun run = run_binary({"--log", "values", "--check"});
    INFO(run.stderr_text.substr(0, 4000));
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
      const size_t found = run.stderr_text.find(tag, at);
      REQUIRE(found != std::string::npos);
      at = found + 1;
    }
    // Softmax rows sum to one: the seed's "sum=1024.0" for 2 x 8 x 128 rows is 2048 here.
    const size_t softmax_done = run.stderr_text.find("[MATH_SOFTMAX_DONE]");
    const std::string line = run.stderr_text.substr(softmax_done, run.stderr_text.find('\n', softmax_done) - softmax_done);
    CHECK(line.find("isnan=false isinf=false sum=2048") != std::string::npos);
  }
}
