// test_result_json.cpp: the fields of repro's JSON result.
#include <doctest/doctest.h>

#include <cmath>

#include "repro/run/run_json.h"
#include "scenarios/scenario.h"

using namespace sdpa;

TEST_SUITE("result_json") {
  TEST_CASE("a checked pass on a device carries config, device, check, timings, GEMMs and allocations") {
    RunResult r;
    r.options.argv = {"repro", "--check"};
    r.options.check = true;
    r.options.iters = 3;
    DeviceInfo d;
    d.name = "NVIDIA H100 80GB HBM3";
    d.cc_major = 9;
    d.sm_count = 132;
    d.driver_version = 13000;
    r.device = d;
    r.checked = true;
    r.comparison.rel_error = 1.5e-3;
    r.tolerance = 4e-3;
    r.iterations_done = 3;
    r.call_median_ms = 0.25;
    r.stages.push_back({"softmax", 3, 0.1, 0.09, 0.12, false});
    r.gemms.push_back(qk_gemm_call(16, 128, 128, 64, DType::fp32, KtOperand{false, 64, 128 * 64}, GemmApi::strided));
    r.options.scenario = 2;
    r.options.own_fix = true;
    apply_scenario(2, r.options.conditions);
    FixSet fix2;
    fix2.add(2);
    r.options.set_fixes(fix2);
    r.settings = r.options.settings;
    r.result_tensor = ResultTensor::probs;
    r.allocations.push_back({"scores", 1024, 0x1000, AllocKind::managed});
    const nlohmann::json j = result_to_json(r);
    CHECK(j["meta"]["format_version"] == kResultFormatVersion);
    CHECK(j["meta"]["command_line"][1] == "--check");
    CHECK(j["device"]["name"] == "NVIDIA H100 80GB HBM3");
    CHECK(j["device"]["compute_capability"] == "9.0");
    CHECK(j["config"]["scenario"] == 2);
    CHECK(j["scenario"]["number"] == 2);
    CHECK(j["scenario"]["fix"] == 2);
    CHECK(j["scenario"]["preconditions"]["scores_to_host"] == "read");
    CHECK(std::string(j["scenario"]["hang_signature"]).find("MATH_SOFTMAX_START") != std::string::npos);
    CHECK(j["config"]["fix"] == "on");
    CHECK(j["config"]["fix_list"] == "2");
    CHECK(j["config"]["fixes"][0]["name"] == "prefetch_scores");
    CHECK(j["config"]["settings"]["last_stage"] == "softmax");
    CHECK(j["config"]["settings"]["scores_to_host"] == "read");
    CHECK(j["result_tensor"] == "probs");
    CHECK(j["config"]["problem"]["batch"] == 2);
    CHECK(j["config"]["problem"]["dtype"] == "bf16");
    CHECK(j["config"]["problem"]["mask"] == "none");
    CHECK(j["config"]["alloc"] == "managed");
    CHECK(j["outcome"] == "pass");
    CHECK(j["exit_code"] == 0);
    CHECK(j["error"].is_null());
    CHECK(j["check"]["rel_error"] == 1.5e-3);
    CHECK(j["check"]["passed"] == true);
    CHECK(j["timing"]["call_median_ms"] == 0.25);
    CHECK(j["stages"][0]["stage"] == "softmax");
    CHECK(j["stages"][0]["clock"] == "cuda_event");
    CHECK(j["gemms"][0]["function"] == "cublasSgemmStridedBatched");
    CHECK(j["gemms"][0]["transa"] == "T");
    CHECK(j["gemms"][0]["lda"] == 64);
    CHECK(j["gemms"][0]["ldc"] == 128);
    CHECK(j["allocations"][0]["tensor"] == "scores");
    CHECK(j["allocations"][0]["kind"] == "managed");
  }

  TEST_CASE("a failure without a device: null device, the error, NaN written as null") {
    RunResult r;
    r.outcome = Outcome::no_gpu;
    r.exit_code = 7;
    r.error = "no usable CUDA GPU";
    r.checked = true;
    r.comparison.rel_error = INFINITY;
    const nlohmann::json j = result_to_json(r);
    CHECK(j["device"].is_null());
    CHECK(j["outcome"] == "no_gpu");
    CHECK(j["exit_code"] == 7);
    CHECK(j["error"] == "no usable CUDA GPU");
    CHECK(j["check"]["rel_error"].is_null());
    CHECK(j["check"]["passed"] == false);
    CHECK_NOTHROW(nlohmann::json::parse(j.dump()));
  }
}
