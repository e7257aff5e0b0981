// full_run_result.h: a RunResult with every measurement a GPU run can record filled in, with
// values a reader can recognise, for the tests of its table on stdout (test_result_json.cpp) and
// of its JSON against results/run.schema.json (test_schemas.cpp): the CPU tests never get one
// from a real run.
#pragma once

#include "repro/run/run_result.h"
#include "scenarios/scenario.h"

namespace test_util {

inline sdpa::RunResult full_run_result() {
  using namespace sdpa;
  RunResult r;
  r.options.argv = {"repro", "--scenario", "2", "--check", "--steps", "20"};
  r.options.scenario = 2;
  r.options.check = true;
  r.options.iters = 20;
  apply_scenario(2, r.options.conditions);
  r.options.settings = r.options.conditions;
  r.settings = r.options.settings;
  r.settings.layers = 3;
  DeviceInfo d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.driver_version = 13000;
  d.cublas_version = 130100;
  r.device = d;
  r.launch_blocking_probe_ms = 12.5;  // shorter than half the probe: not in force
  r.iterations_done = 20;
  r.stages = {{"softmax", 20, 0.5, 0.4, 0.6, false}, {"stream_sync", 20, 0.05, 0.04, 0.06, true}};
  r.steady_stages = r.stages;
  r.first_call_ms = 3.25;
  r.steady_call_median_ms = 0.55;
  r.call_median_ms = 0.6;
  MemoryPlan plan;
  plan.layers = 3;
  plan.path_bytes = 3'000'000'000;
  plan.layer_kept_bytes = 500'000'000;
  plan.context.ballast_bytes = 2'000'000'000;
  plan.weights_bytes = 1'500'000'000;
  plan.layers_asked = 60;
  plan.fitted_because = "the memory plan needs 141.96 GB of GPU memory";
  plan.tensors.push_back({TensorId::scores, "scores", 400'000'000, 1, Lifetime::call, false, Stage::alloc_scores});
  r.plan = plan;
  r.memory_facts = MemoryFacts{true, 80'000'000'000, 100'000'000'000, 90'000'000'000, 10'000'000'000};
  PoolUse pool;
  pool.name = "unified memory (CPU and GPU)";
  pool.measured = "MemAvailable";
  pool.need = 6'500'000'000;
  pool.available = 8'000'000'000;
  pool.budget = 7'200'000'000;
  pool.page_cache = 3'000'000'000;
  pool.without_reclaim = 5'000'000'000;
  pool.budget_without_reclaim = 4'500'000'000;
  r.pools = {pool};
  WeightsLoad w;
  w.file = "/tmp/sdpa-weights-1.5G.bin";
  w.created = true;
  w.bytes = 1'500'000'000;
  w.tensors = 12;
  w.seconds = 0.75;
  w.io = "mapped";
  w.pages = "keep";
  w.mapping = "keep";
  w.before = {128'000'000'000, 90'000'000'000, 100'000'000'000, 10'000'000'000, 0};
  w.after = {128'000'000'000, 88'500'000'000, 100'000'000'000, 11'500'000'000, 1'500'000'000};
  r.weights_load = w;
  MemoryMeasured m;
  m.gpu_free_at_start = 80'000'000'000;
  m.min_gpu_free = 73'000'000'000;
  m.mem_available_at_start = 100'000'000'000;
  m.min_mem_available = 95'000'000'000;
  m.peak_live_bytes = 2'900'000'000;
  m.peak_reserved_bytes = 3'100'000'000;
  m.allocations = 42;
  m.trace.push_back({1, 2, "softmax", 95'000'000'000, 88'000'000'000, 11'000'000'000, 1'500'000'000, 73'000'000'000,
                     2'900'000'000, 3'100'000'000});
  m.trace_samples = 1;
  r.measured = m;
  for (int i = 0; i < 20; ++i) r.step_ms.push_back(i == 0 ? 150.0 : 1.0 + 0.01 * i);
  for (int i = 1; i <= 20; ++i) r.memory.push_back({i, 70000.0 - i, 500.0 + i, 9, 2800.0, 3000.0});
  r.soak.summary = "flat after warm-up over calls 2-20";
  r.stalls.threshold_s = 1;
  r.stalls.calls = 20;
  r.stalls.calls_stalled = 10;
  for (int i = 1; i <= 10; ++i) r.stalls.records.push_back({i, "softmax", 1000.0 + i});
  r.stalls.longest = r.stalls.records.back();
  UvmCounts uvm;
  uvm.available = true;
  uvm.not_counted = "THROTTLING (CUPTI_ERROR_NOT_SUPPORTED)";
  uvm.bytes_htod = 614'465'536;
  uvm.cpu_page_faults = 1758;
  uvm.ranges = {{"ballast", 614'465'536, 0, 1758, 0}, {"other", 0, 4096, 0, 3}};
  uvm.records = 2000;
  r.uvm = uvm;
  r.checked = true;
  r.result_tensor = ResultTensor::probs;
  r.tolerance = 4e-3;
  r.comparison.rel_error = 1e-3;
  r.comparison.max_abs_error = 2e-3;
  r.layers_checked = 3;
  r.worst_layer = 2;
  r.check_cost = {0.75, 1.25, 9.5, 16, 1, "", ReferenceProducts::blas,
                  "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64 (pthreads, libopenblas.so.0)"};
  r.gradient_tolerance = 1e-2;
  r.gradient_checks = {{"grad_query", {2e-3, 1e-3, 0}, 1}, {"grad_key", {5e-2, 3e-2, 0}, 3}, {"grad_value", {1e-3, 1e-3, 0}, 2}};
  r.calls_compared = 20;
  r.first_differing_call = 7;
  r.fail(Outcome::mismatch, "call 7 differs from call 1");
  r.wall_seconds = 21.5;
  r.cpu_seconds = 30.25;
  return r;
}

}  // namespace test_util
