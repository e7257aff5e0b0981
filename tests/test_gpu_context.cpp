// test_gpu_context.cpp: the training process around the call, on the GPU, through the real repro
// binary: every rung of the context ladder passes --check at the default shape; per-call
// allocation holds exactly what the memory plan predicts; each layer is checked; fix 5's chunks
// give the unchunked result; a hang in one layer is named with its layer; memory stays flat over
// steps; scenario 6's plan is refused before anything is allocated; vmm memory; the ballast's
// pages move (CUPTI's counters).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "run_program.h"

using namespace sdpa;
using nlohmann::json;

namespace {

using test_util::run_repro_json;

// A run that must pass, with its output shown when it does not.
json passing(const test_util::JsonRun& run, const std::vector<std::string>& args) {
  INFO("repro ", args.size() ? args[0] : "", " ...: exit ", run.exit_code, "\n", run.out.substr(0, 3000), run.err.substr(0, 3000));
  REQUIRE(run.exit_code == kExitPass);
  REQUIRE(run.result.is_object());
  return run.result;
}
json passing(const std::vector<std::string>& args) { return passing(run_repro_json(args), args); }

int64_t gpu_free_now() {
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  return static_cast<int64_t>(free_bytes);
}

}  // namespace

TEST_SUITE("gpu_context") {
  TEST_CASE("every rung of the context ladder passes --check at the default shape, each layer checked") {
    const std::vector<std::vector<std::string>> rungs = {
        {},
        {"--alloc-timing", "per-call"},
        {"--alloc-timing", "per-call", "--layers", "4", "--retain", "autograd"},
        {"--alloc-timing", "per-call", "--layers", "4", "--retain", "autograd", "--ballast", "256M", "--ballast-alloc",
         "managed", "--ballast-touch", "both"},
        {"--alloc-timing", "per-call", "--layers", "4", "--retain", "autograd", "--ballast", "256M", "--ballast-alloc",
         "managed", "--ballast-touch", "both", "--host-load", "2"},
        {"--alloc-timing", "per-call", "--layers", "4", "--retain", "autograd", "--ballast", "256M", "--ballast-alloc",
         "managed", "--ballast-touch", "both", "--host-load", "2", "--steps", "3"},
    };
    // The rungs without a ballast four runs at a time (the suite reserves four CPUs): each checks
    // values, none a time. The ballast's rungs one at a time: several processes touching managed
    // ballasts from the host and the GPU at once slow each other's frees past the stall threshold
    // (on the H100, free_call 2.0 s: exit 9), and take longer together than one after another.
    // The test shares the GPU with others (a run may be slow without being stuck): no run judges
    // a stall.
    const std::vector<const char*> allocs = {"managed", "device", "vmm", "async"};
    std::vector<std::vector<std::string>> args_of;
    for (const auto& rung : rungs) {
      for (const char* alloc : allocs) {
        args_of.push_back({"--check", "--mask", "bool", "--dropout", "0.1", "--kv-heads", "4", "--alloc", alloc});
        args_of.back().insert(args_of.back().end(), rung.begin(), rung.end());
      }
    }
    const size_t unballasted = 3 * allocs.size();  // the first three rungs
    for (auto& args : args_of) args.insert(args.end(), {"--stall-threshold", "0"});
    auto runs = test_util::in_parallel(unballasted, 4, [&](size_t i) { return run_repro_json(args_of[i]); });
    for (size_t i = unballasted; i < args_of.size(); ++i) runs.push_back(run_repro_json(args_of[i]));
    for (size_t i = 0; i < runs.size(); ++i) {
      const auto& rung = rungs[i / allocs.size()];
      {
        CAPTURE(allocs[i % allocs.size()]);
        CAPTURE(rung.size());
        const json r = passing(runs[i], args_of[i]);
        CHECK(r["check"]["passed"] == true);
        const int layers = r["config"]["settings"]["layers"] == "4" ? 4 : 1;
        CHECK(r["check"]["layers_checked"] == layers);
        if (rung.size() > 8) {
          CHECK(r["context_load"]["ballast_host_passes"].get<int64_t>() > 0);
          CHECK(r["context_load"]["ballast_gpu_passes"].get<int64_t>() > 0);
        }
      }
    }
  }

  TEST_CASE("per call, the path holds exactly the memory plan's predicted peak; the GPU within 5%") {
    // No --check: the float64 reference of six such layers takes seconds of CPU time per run, and
    // the ladder's test above checks the values of every layer.
    for (const char* alloc : {"device", "managed", "vmm"}) {
      CAPTURE(alloc);
      const json r = passing({"--alloc", alloc, "--alloc-timing", "per-call", "--layers", "6", "--retain", "autograd", "-b", "1",
                              "--heads", "8", "-L", "2048", "-E", "64", "--memory-trace"});
      const int64_t predicted = r["memory_plan"]["path_peak_bytes"].get<int64_t>();
      CHECK(r["memory_measured"]["peak_live_bytes"].get<int64_t>() == predicted);
      CHECK(r["memory_measured"]["trace_samples"].get<int64_t>() > 6 * 12);  // a sample at every stage of every call
      if (std::string(alloc) != "managed") {  // managed memory the GPU has not touched takes none
        const double used = r["memory_measured"]["gpu_used_peak_bytes"].get<double>();
        CHECK(used >= 0.95 * static_cast<double>(predicted));
        CHECK(used <= 1.25 * static_cast<double>(predicted) + 64e6);  // the cache's blocks, the CUDA context
      }
    }
  }

  TEST_CASE("fix 5's chunks of query rows give the result of the whole, dropout and masks included") {
    const std::vector<std::string> base = {"--mask", "bool", "--mask-dims", "BxH", "--dropout", "0.2", "-L", "300", "-S", "260",
                                           "--check", "--alloc-timing", "per-call", "--retain", "autograd"};
    std::vector<std::string> chunked = base;
    chunked.insert(chunked.end(), {"--fixes", "5:chunk", "--chunk-size", "200K"});
    const json whole = passing(base), parts = passing(chunked);
    CHECK(parts["config"]["settings"]["chunk_bytes"] == "204800");
    bool several = false;
    for (const auto& t : parts["memory_plan"]["tensors"]) several = several || (t["tensor"] == "attn" && t["chunks"].get<int>() > 1);
    CHECK(several);
    // The same dropout decisions and masks: only the GEMMs' rounding can differ (other shapes).
    CHECK(parts["check"]["rel_error"].get<double>() < 2 * whole["check"]["rel_error"].get<double>() + 1e-6);
    CHECK(std::fabs(parts["result_stats"]["sum"].get<double>() - whole["result_stats"]["sum"].get<double>()) <
          1e-3 * std::fabs(whole["result_stats"]["sum"].get<double>()) + 1e-3);
  }

  TEST_CASE("a hang injected in one layer is named with its layer, in the JSON, the report and the log") {
    const test_util::JsonRun run = run_repro_json({"--layers", "4", "--alloc-timing", "per-call", "--inject", "hang:softmax@layer=3",
                                               "--stage-timeout", "1.5", "--log", "stages", "--on-hang", "kill"});
    INFO(run.err.substr(0, 3000));
    CHECK(run.exit_code == kExitHang);
    REQUIRE(run.result.is_object());
    const json& w = run.result["watchdog"];
    CHECK(w["stage"] == "softmax");
    CHECK(w["position"]["layer"] == 3);
    CHECK(w["position"]["layers"] == 4);
    CHECK(run.err.find("stage softmax (layer 3 of 4, step 1) did not finish") != std::string::npos);
    CHECK(run.err.find("[LAYER] step=1 layer=3/4") != std::string::npos);
    bool layer_three = false;
    for (const auto& f : w["flight_recorder"]) layer_three = layer_three || (f["layer"] == 3 && f["stage"] == "softmax");
    CHECK(layer_three);
    // In an allocation: the host waits in the allocator; the stage is named, scenario 6 first.
    const test_util::JsonRun alloc = run_repro_json({"--layers", "2", "--alloc-timing", "per-call", "--retain", "autograd",
                                                 "--inject", "hang:alloc_probs@layer=2", "--stage-timeout", "1.5", "--on-hang",
                                                 "kill"});
    CHECK(alloc.exit_code == kExitHang);
    REQUIRE(alloc.result.is_object());
    CHECK(alloc.result["watchdog"]["stage"] == "alloc_probs");
    CHECK(alloc.result["watchdog"]["scenario"] == 6);
    CHECK(alloc.result["watchdog"]["position"]["layer"] == 2);
  }

  TEST_CASE("memory stays flat over steps: what the layers keep is freed at every step's end") {
    const json r = passing({"--alloc-timing", "per-call", "--layers", "3", "--retain", "autograd", "--steps", "40",
                            "--alloc", "device"});
    CHECK(r["memory"]["flat"] == true);
    CHECK(r["steps"]["count"] == 40);
    CHECK(r["memory"]["samples"].size() == 40);  // every step, below a hundred
  }

  TEST_CASE("scenario 6 at the workload's 60 layers is refused before anything is allocated") {
    const int64_t before = gpu_free_now();
    const test_util::JsonRun run = run_repro_json({"--scenario", "6"});
    INFO(run.err.substr(0, 2000));
    CHECK(run.exit_code == kExitRefused);
    CHECK(run.err.find("the memory plan needs") != std::string::npos);
    REQUIRE(run.result.is_object());
    CHECK(run.result["memory_measured"].is_null());  // nothing measured: nothing was allocated
    CHECK(run.result["allocations"].empty());
    CHECK(run.result["memory_plan"]["path_peak_bytes"].get<int64_t>() > 141'000'000'000LL);
    CHECK(std::llabs(gpu_free_now() - before) < (int64_t{256} << 20));
    // recompute makes it fit, at a shape of the same layer count that is quick to check
    const json fits = passing({"--scenario", "6", "--fixes", "5:recompute", "-b", "1", "--heads", "4", "-L", "512", "-E", "64",
                               "--check"});
    CHECK(fits["config"]["settings"]["retain"] == "checkpoint");  // without --backward it keeps nothing
    CHECK(fits["check"]["layers_checked"] == 60);
  }

  TEST_CASE("--uvm-counters: a managed ballast touched by the host and the GPU moves, and is counted apart") {
    const json r = passing({"--ballast", "512M", "--ballast-alloc", "managed", "--ballast-touch", "both", "--uvm-counters",
                            "--alloc-timing", "per-call", "--layers", "2", "--iters", "20", "--check"});
    const json& u = r["uvm"];
    REQUIRE(u.is_object());
    INFO(u.dump());
    if (!u["available"].get<bool>()) {
      MESSAGE("CUPTI's unified-memory counters are unavailable here: " << u["unavailable"]);
      return;
    }
    int64_t ballast_moved = 0;
    for (const auto& range : u["ranges"]) {
      if (range["range"] == "ballast") ballast_moved = range["bytes_htod"].get<int64_t>() + range["bytes_dtoh"].get<int64_t>();
    }
    CHECK(ballast_moved > (int64_t{64} << 20));
  }
}
