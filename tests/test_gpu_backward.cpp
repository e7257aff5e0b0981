// test_gpu_backward.cpp: the backward pass (--backward) on the GPU, through the real repro binary:
// dQ, dK, dV against the float64 reference for every dtype and precision, mask kind, GQA,
// dropout, scale and allocation timing; every scenario with its fix off and on; a hang injected
// in each backward stage is named; a gradient poisoned with NaN never passes.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "run_program.h"

using namespace sdpa;
using nlohmann::json;

namespace {

using test_util::run_repro_json;

std::vector<std::string> backward_args(std::vector<std::string> args) {
  args.insert(args.begin(), {"--backward", "--check"});
  return args;
}

// A --backward --check run (of backward_args) that must pass with every gradient checked.
json passing_backward(const test_util::JsonRun& run, const std::vector<std::string>& args) {
  std::string shown;
  for (const std::string& a : args) shown += a + " ";
  INFO("repro ", shown, ": exit ", run.exit_code, "\n", run.out.substr(0, 3000), run.err.substr(0, 3000));
  REQUIRE(run.exit_code == kExitPass);
  REQUIRE(run.result.is_object());
  const json& g = run.result["check"]["gradients"];
  REQUIRE(g.is_array());
  REQUIRE(g.size() == 3);
  for (const json& c : g) {
    INFO(c.dump());
    CHECK(c["passed"] == true);
    CHECK(c["rel_error"].is_number());
  }
  CHECK(run.result["nonfinite_gradients"] == 0);
  return run.result;
}
json passing_backward(const std::vector<std::string>& args) {
  const std::vector<std::string> full = backward_args(args);
  return passing_backward(run_repro_json(full), full);
}

}  // namespace

TEST_SUITE("gpu_backward") {
  TEST_CASE("dQ, dK and dV match the float64 reference: dtypes, precisions, masks, GQA, dropout, scale") {
    const std::vector<std::vector<std::string>> cases = {
        {},
        {"--dtype", "fp16"},
        {"--dtype", "fp32"},
        {"--precision", "native"},
        {"--dtype", "fp16", "--precision", "native", "--mask", "causal"},
        {"--mask", "bool", "--mask-dims", "BxH"},
        {"--mask", "float"},
        {"--mask", "causal", "-L", "96", "-S", "160"},
        {"--kv-heads", "2", "--dropout", "0.2"},
        {"--scale", "-0.3", "--dtype", "fp32", "--kv-heads", "4"},
        {"-S", "1536", "-L", "64"},  // softmax's backward takes the block path
        {"--alloc", "device", "--alloc-timing", "per-call", "--layers", "3", "--mask", "bool", "--dropout", "0.1"},
        {"--k-layout", "bshe"},
        {"--fixes", "5:native"},
        {"--graph", "--iters", "3", "--mask", "causal", "--kv-heads", "4"},  // replayed: forward and backward in one graph
    };
    for (const auto& c : cases) {
      std::string shown;
      for (const std::string& a : c) shown += a + " ";
      CAPTURE(shown);
      const json r = passing_backward(c);
      CHECK(r["config"]["settings"]["backward"] == "true");
      CHECK(r["config"]["settings"]["retain"] == "autograd");
    }
  }

  // Its own case: a run of several steps judges the GPU's free memory between them (the soak), so
  // CTest runs it with the GPU to itself (gpu.backward_steps, tests/CMakeLists.txt).
  TEST_CASE("over steps: three training steps, vmm memory allocated per call, checked, and the memory flat") {
    const std::vector<std::string> args = {"--alloc", "vmm", "--alloc-timing", "per-call", "--layers", "2", "--steps", "3"};
    const json r = passing_backward(args);
    CHECK(r["config"]["settings"]["backward"] == "true");
    CHECK(r["steps"]["count"] == 3);
    CHECK(r["memory"]["flat"] == true);
  }

  TEST_CASE("every scenario passes with its fix off and on through the backward pass") {
    // Scenarios 1-5 (5: one graph holds the forward and backward calls), fix off and on, three
    // runs at a time: each checks values, none a time (sharing the GPU, a run may be slow without
    // being stuck: no stall is judged).
    std::vector<std::vector<std::string>> args_of;
    for (int scenario = 1; scenario <= 5; ++scenario) {
      for (const char* fix : {"off", "on"}) {
        args_of.push_back(backward_args({"--scenario", std::to_string(scenario), "--fix", fix, "-L", "256", "-S", "256",
                                         "--stall-threshold", "0"}));
      }
    }
    const auto runs = test_util::in_parallel(args_of.size(), 3, [&](size_t i) { return run_repro_json(args_of[i]); });
    for (size_t i = 0; i < runs.size(); ++i) {
      const int scenario = static_cast<int>(i / 2) + 1;
      {
        CAPTURE(scenario);
        CAPTURE(args_of[i][5]);
        const json r = passing_backward(runs[i], args_of[i]);
        if (scenario == 2) {  // its host access carried into the backward pass, and fix 2 with it
          bool touched = false, timed = false;
          for (const json& st : r["stages"]) {
            touched = touched || st["stage"] == "grads_to_host";
            timed = timed || st["stage"] == "softmax_backward";
          }
          CHECK(touched);
          CHECK(timed);
        }
      }
    }
  }

  TEST_CASE("repro bench --backward times the training step: every backward stage timed, results finite") {
    const test_util::JsonRun run = run_repro_json({"bench", "--backward", "-n", "5", "-w", "1"});
    INFO(run.out.substr(0, 2000), run.err.substr(0, 2000));
    REQUIRE(run.exit_code == kExitPass);
    REQUIRE(run.result.is_object());
    const json& b = run.result["benchmarks"][0];
    CHECK(b["settings"]["backward"] == "true");
    std::vector<std::string> timed;
    for (const json& st : b["stages"]) timed.push_back(st["stage"]);
    for (const char* stage : {"dp_gemm", "dv_gemm", "softmax_backward", "dq_gemm", "dk_gemm", "grad_inputs"}) {
      CAPTURE(stage);
      CHECK(std::find(timed.begin(), timed.end(), stage) != timed.end());
    }
  }

  TEST_CASE("a hang injected in each backward stage is named, with the layer") {
    const std::vector<std::string> stages = {"grad_upcast", "dp_gemm", "dv_gemm", "dropout_backward", "softmax_backward",
                                             "dq_gemm", "dk_gemm", "grad_inputs", "alloc_grad_qk"};
    // Four at a time, as gpu_watchdog's hang in every stage: the deadline is the host's clock, and
    // a run whose stage spins shares the GPU with the others' short stages.
    const auto runs = test_util::in_parallel(stages.size(), 4, [&](size_t i) {
      return run_repro_json({"--backward", "--layers", "2", "--dropout", "0.1", "--alloc-timing", "per-call", "--inject",
                         "hang:" + stages[i] + "@layer=1", "--stage-timeout", "1.5", "--on-hang", "kill"});
    });
    for (size_t i = 0; i < stages.size(); ++i) {
      const std::string& stage = stages[i];
      const test_util::JsonRun& run = runs[i];
      CAPTURE(stage);
      INFO(run.out.substr(0, 2000), run.err.substr(0, 2000));
      CHECK(run.exit_code == kExitHang);
      REQUIRE(run.result.is_object());
      CHECK(run.result["watchdog"]["stage"] == stage);
      CHECK((run.out + run.err).find("stage " + stage + " (layer 1 of 2") != std::string::npos);
    }
  }
}
