// test_result_json.cpp: the fields of repro's JSON result.
#include <doctest/doctest.h>

#include <cmath>

#include "full_run_result.h"
#include "math_sdpa/errors.h"
#include "repro/run/outcome.h"
#include "repro/run/run_json.h"
#include "repro/run/run_text.h"
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

// The table a user reads on stdout, from a result with every measurement (full_run_result.h):
// each block where it belongs, the values as they were given.
TEST_SUITE("result_json") {
  TEST_CASE("the text of a run: device, stages, plan, weights, memory, steps, stalls, checks, result") {
    const RunResult r = test_util::full_run_result();
    const std::string text = result_to_text(r);
    INFO(text);
    const auto has = [&](const std::string& s) { CHECK_MESSAGE(text.find(s) != std::string::npos, s); };
    has("# repro scenario 2 (");
    has(" on NVIDIA H100 80GB HBM3 (sm_90, 132 SMs), driver 13.0, cuBLAS 13.1.0\n");
    has("# launch blocking: a 50 ms kernel's launch returned after 12.5 ms (NOT in force");
    has("   softmax           20      0.5000      0.4000      0.6000  event\n");
    has("   stream_sync       20      0.0500      0.0400      0.0600  host\n");
    has("#  first call 3.2500 ms; calls 2..20 median 0.5500 ms (GPU stages)\n");
    has("(3 layers, 0.50 GB kept per layer) + ballast 2.00 GB + mapped weights 1.50 GB");
    has("; unified memory (CPU and GPU) 6.50 GB of 8.00 GB available (only if the page cache is reclaimed)\n");
    has("# --layers-fit: 3 of the 60 layers asked for");
    has("# weights loaded: 1.50 GB in 12 tensors from /tmp/sdpa-weights-1.5G.bin (written first), io mapped, pages keep, "
        "mapping keep: 0.75 s, 2.00 GB/s\n");
    has("#   change: Cached +1.50 GB, MemFree -1.50 GB, MemAvailable +0.00 GB, RssFile +1.50 GB\n");
    has("GPU memory in use at most 7.00 GB (cudaMemGetInfo), MemAvailable at least 95.00 GB\n");
    has("# steps: 20, first 150.000 ms, median 1.105 ms");
    has(", last 1.190 ms\n");
    // Twenty samples print as every second one and the last: about a dozen rows.
    has("\n       1       69999.0      501.0            9     2800.0\n");
    has("\n      20       69980.0      520.0            9     2800.0\n");
    CHECK(text.find("\n       2       69998.0") == std::string::npos);
    has("# memory: flat after warm-up over calls 2-20\n");
    has("# STALLED: ");
    has("#   call 8: softmax 1008.0 ms\n");
    CHECK(text.find("#   call 9:") == std::string::npos);  // at most 8 stall rows
    has("# check (probs, 3 layers, the worst: layer 2): rel_error 1.000e-03  max_abs_error 2.000e-03  tolerance 4.0e-03  OK\n");
    has("# check (grad_key, the worst: layer 3): rel_error 5.000e-02  max_abs_error 3.000e-02  tolerance 1.0e-02  FAILED\n");
    has("# every call: 20 calls compared with call 1 bit for bit: call 7 differs  FAILED\n");
    has("# check cost: 0.75 s, CPU 9.5 s, 16 threads, OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Cooperlake "
        "MAX_THREADS=64 (pthreads, libopenblas.so.0); 1.25 s more during the run (1 layer, computed beside it); the whole run "
        "21.50 s, CPU 30.2 s\n");
    has("# result: mismatch (exit 1): call 7 differs from call 1\n");
  }

  // What a check costs is beside what the run cost, in the JSON and the table, so that a user
  // sees what --check adds; a run the supervisor ended (a hang) knows no CPU time.
  TEST_CASE("a checked run says what its check cost, next to the run's own time") {
    const RunResult r = test_util::full_run_result();
    const nlohmann::json j = result_to_json(r);
    CHECK(j["wall_seconds"] == 21.5);
    CHECK(j["cpu_seconds"] == 30.25);
    const nlohmann::json& cost = j["check"]["cost"];
    CHECK(cost["wall_seconds"] == 0.75);
    CHECK(cost["overlapped_seconds"] == 1.25);
    CHECK(cost["layers_ahead"] == 1);
    CHECK(cost["after_run_because"].is_null());
    CHECK(cost["cpu_seconds"] == 9.5);
    CHECK(result_to_text(r).find("; 1.25 s more during the run (1 layer, computed beside it); the whole run 21.50 s") !=
          std::string::npos);
    CHECK(cost["threads"] == 16);
    CHECK(cost["products"] == "blas");
    CHECK(cost["blas"].get<std::string>().rfind("OpenBLAS 0.3.21 ", 0) == 0);
    RunResult loops = r;
    loops.check_cost = {12.0, 0, 150.0, 2, 0, "the run has a ballast", ReferenceProducts::loops, ""};
    CHECK(result_to_json(loops)["check"]["cost"]["products"] == "loops");
    CHECK(result_to_json(loops)["check"]["cost"]["after_run_because"] == "the run has a ballast");
    CHECK(result_to_text(loops).find("; all after the last call: the run has a ballast; the whole run") != std::string::npos);
    CHECK(result_to_json(loops)["check"]["cost"]["blas"].is_null());
    CHECK(result_to_text(loops).find("# check cost: 12.00 s, CPU 150.0 s, 2 threads, the loops, SDPA_REFERENCE_PRODUCTS=loops;") !=
          std::string::npos);
    RunResult unchecked = r;
    unchecked.checked = false;
    CHECK(result_to_json(unchecked)["check"].is_null());
    CHECK(result_to_text(unchecked).find("# check cost") == std::string::npos);
    RunResult hung = r;
    hung.cpu_seconds.reset();
    CHECK(result_to_json(hung)["cpu_seconds"].is_null());
    CHECK(result_to_text(hung).find("; the whole run 21.50 s\n") != std::string::npos);
  }

  TEST_CASE("the text of a run: launch blocking in force, identical calls, no device") {
    RunResult r = test_util::full_run_result();
    r.launch_blocking_probe_ms = 49.0;
    r.first_differing_call = 0;
    r.device.reset();
    r.outcome = Outcome::pass;
    r.exit_code = 0;
    r.error.clear();
    const std::string text = result_to_text(r);
    CHECK(text.find("returned after 49.0 ms (CUDA_LAUNCH_BLOCKING=1 in force)\n") != std::string::npos);
    CHECK(text.find("call 1 bit for bit: identical  OK\n") != std::string::npos);
    CHECK(text.find(" on NVIDIA") == std::string::npos);
    CHECK(text.find("# result: pass (exit 0)\n") != std::string::npos);
  }
}

// A run's verdict from what it saw: non-finite values never pass, nor an error above the tolerance;
// and each outcome's exit code read back.
TEST_SUITE("result_json") {
  TEST_CASE("judge_outputs: non-finite values and an error past the tolerance are mismatches, saying which") {
    Verdict nan;
    nan.nonfinite_outputs = 3;
    nan.checked = true;  // a check that passed does not clear a NaN
    nan.tolerance = 1e-2;
    judge_outputs(nan, "output");
    CHECK(nan.outcome == Outcome::mismatch);
    CHECK(nan.exit_code == kExitMismatch);
    CHECK(nan.error == "3 non-finite values in the output");
    Verdict far;
    far.checked = true;
    far.tolerance = 1e-2;
    far.comparison.rel_error = 0.5;
    judge_outputs(far, "output");
    CHECK(far.outcome == Outcome::mismatch);
    CHECK(far.error == "relative error 0.500000 exceeds 0.010000");
    Verdict close = far;
    close.outcome = Outcome::pass;
    close.exit_code = 0;
    close.error.clear();
    close.comparison.rel_error = 1e-3;
    judge_outputs(close, "output");
    CHECK(close.outcome == Outcome::pass);
    CHECK(close.error.empty());
    Verdict unchecked;  // no check, no NaN: nothing to judge
    judge_outputs(unchecked, "output");
    CHECK(unchecked.outcome == Outcome::pass);
  }

  TEST_CASE("every outcome with an exit code reads back from it; code 1 is a mismatch") {
    for (Outcome o : {Outcome::pass, Outcome::mismatch, Outcome::usage, Outcome::hang, Outcome::cuda_error, Outcome::crash,
                      Outcome::waived, Outcome::no_gpu, Outcome::refused, Outcome::stalled}) {
      CAPTURE(outcome_name(o));
      REQUIRE(outcome_exit_code(o).has_value());
      CHECK(outcome_of_exit_code(*outcome_exit_code(o)) == o);
    }
    for (Outcome o : {Outcome::timeout, Outcome::planned, Outcome::no_result}) CHECK_FALSE(outcome_exit_code(o).has_value());
    CHECK_FALSE(outcome_of_exit_code(42).has_value());
    Verdict v;
    v.fail(Outcome::timeout, "ran past --run-timeout");
    CHECK(v.exit_code == kExitCrash);  // no code of its own
  }
}

// A GEMM's one line, as a CUDA error in it names it: the shape, the operands' layout, its stream.
TEST_SUITE("result_json") {
  TEST_CASE("a GEMM described: strides or pointer arrays, the type, the stream") {
    GemmCall strided = qk_gemm_call(16, 128, 256, 64, DType::fp32, KtOperand{false, 64, 256 * 64}, GemmApi::strided);
    strided.stream = 0xabc;
    const std::string s = strided.describe();
    CHECK(s.rfind("M=128 N=256 K=64 batch=16 fn=cublasSgemmStridedBatched transa=T transb=N m=256 n=128 k=64 lda=64", 0) == 0);
    CHECK(s.find(" strideA=16384 ") != std::string::npos);
    CHECK(s.find(" type=fp32 compute=fp32 stream=0xabc") != std::string::npos);
    CHECK(s.find("pointer_arrays") == std::string::npos);
    const GemmCall batched = qk_gemm_call(16, 128, 256, 64, DType::bf16, KtOperand{false, 64, 256 * 64}, GemmApi::batched);
    CHECK(batched.describe().find(" pointer_arrays=true headA=") != std::string::npos);
    CHECK(batched.describe().find(" type=bf16 ") != std::string::npos);
  }
}
