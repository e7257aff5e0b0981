// test_gpu_watchdog.cpp: the real repro binary on the GPU under fault injection. For every
// stage: an injected hang is named with exit code 3 within the stage deadline plus 1 s; an
// injected CUDA error is reported with its stage (exit 4). A clean run at --log values writes
// the expected stage-log pattern (docs/SCENARIOS.md). Prints a table of the hangs.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

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
// full path (scores_to_host), dropout.
const std::vector<std::string> kAllStagesArgs = {"--mask",  "causal", "--heads", "8",     "--kv-heads",       "4",
                                                 "--dropout", "0.1",  "--fixes", "3",     "--scores-to-host", "read"};

test_util::JsonRun run_binary(const std::vector<std::string>& args) {
  return test_util::run_with_json(SDPA_REPRO_BINARY, args);
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
      const test_util::JsonRun run = run_binary(args);
      INFO("stage ", stage, " stderr: ", run.err.substr(0, 2000));
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
      const std::vector<int> fits = scenarios_for_hung_stage(static_cast<Stage>(i));
      CHECK(scenario == (fits.empty() ? 0 : w["candidates"][0]["scenario"].get<int>()));
      const bool fits_signature = std::find(fits.begin(), fits.end(), scenario) != fits.end() || (fits.empty() && scenario == 0);
      CHECK(fits_signature);
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
      const test_util::JsonRun run = run_binary(args);
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
    args.insert(args.end(), {"--inject", "slow:softmax:300", "--stage-timeout", "5", "--check"});
    const test_util::JsonRun run = run_binary(args);
    INFO(run.err.substr(0, 2000));
    CHECK(run.exit_code == kExitPass);
    REQUIRE(run.result.is_object());
    for (const auto& s : run.result["stages"]) {
      if (s["stage"] == "softmax") CHECK(s["median_ms"].get<double>() >= 300.0);
    }
  }

  TEST_CASE("--no-fork: the in-process watchdog names the hung stage too") {
    std::vector<std::string> args = kAllStagesArgs;
    args.insert(args.end(), {"--inject", "hang:qk_gemm", "--stage-timeout", "1.5", "--no-fork"});
    const test_util::JsonRun run = run_binary(args);
    INFO(run.err.substr(0, 2000));
    CHECK(run.exit_code == kExitHang);
    REQUIRE(run.result.is_object());
    CHECK(run.result["watchdog"]["stage"] == "qk_gemm");
    CHECK(run.result["watchdog"]["scenario"] == 1);
  }

  TEST_CASE("a clean run at --log values writes the expected pattern with values, in order") {
    const test_util::JsonRun run = run_binary({"--log", "values", "--check"});
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
