// runner.cpp: one run of the harness on the GPU: set up, call the path --iters times, check.
#include <chrono>
#include <memory>
#include <cmath>
#include <cstring>

#include "fixes/fix.h"
#include "math_sdpa/cuda_check.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/fault_injector.h"
#include "math_sdpa/nvtx_observer.h"
#include "math_sdpa/stage_log.h"
#include "math_sdpa/npy.h"
#include "math_sdpa/pipeline.h"
#include "math_sdpa/reference.h"
#include "math_sdpa/stage_timer.h"
#include "math_sdpa/stats.h"
#include "repro/run/outcome.h"
#include "repro/run/path_observers.h"
#include "repro/run/progress_reporter.h"
#include "repro/run/run_json.h"
#include "repro/run/run_result.h"

namespace sdpa {

namespace {

StageTiming timing_of(Stage stage, const std::vector<double>& ms) {
  return {stage_name(stage), static_cast<int>(ms.size()), median(ms), percentile(ms, 10), percentile(ms, 90), !is_gpu_stage(stage)};
}

void fill_timings(const StageTimer& timer, RunResult& r) {
  for (int i = 0; i < kStageCount; ++i) {
    const auto& s = timer.samples()[i];
    if (s.empty()) continue;
    const Stage stage = static_cast<Stage>(i);
    r.stages.push_back(timing_of(stage, s));
    r.first_call_stages.push_back(timing_of(stage, {s.front()}));
    if (s.size() > 1) r.steady_stages.push_back(timing_of(stage, std::vector<double>(s.begin() + 1, s.end())));
  }
  const std::vector<double>& calls = timer.call_ms();
  r.call_median_ms = median(calls);
  r.call_p10_ms = percentile(calls, 10);
  r.call_p90_ms = percentile(calls, 90);
  if (!calls.empty()) r.first_call_ms = calls.front();
  if (calls.size() > 1) r.steady_call_median_ms = median(std::vector<double>(calls.begin() + 1, calls.end()));
}

MemorySample sample_memory(int64_t calls, const Allocator& allocator) {
  MemorySample m;
  m.calls = calls;
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  m.gpu_free_mib = static_cast<double>(free_bytes) / (1 << 20);
  m.rss_mib = resident_set_mib();
  m.live_allocations = static_cast<int64_t>(allocator.live_allocations());
  m.live_mib = static_cast<double>(allocator.live_bytes()) / (1 << 20);
  return m;
}

void run_on_gpu(RunResult& r, int progress_fd) {
  RunOptions& o = r.options;
  SdpaProblem& p = o.problem;
  r.settings = o.settings;
  r.result_tensor = result_tensor_of(r.settings);
  r.device = query_device_info(0);
  CUDA_CHECK(cudaSetDevice(0));
  // Captured inputs were read when the command line was parsed (they set the shapes); random
  // ones are made only after the workspace was allocated, so an oversized request is refused
  // before any host memory is used.
  HostInputs random_inputs;
  const HostInputs* inputs = o.inputs.get();

  auto allocator = make_allocator(r.settings.alloc, allocator_options(r.settings, o.allow_oversubscription));
  const auto fixes = make_fixes(o.fixes);

  std::vector<float> result;
  {
    std::unique_ptr<ProgressReporter> reporter;
    if (progress_fd >= 0) {
      reporter = std::make_unique<ProgressReporter>(progress_fd);
      reporter->report_device(device_to_json(*r.device).dump());
    }
    MathSdpa path(p, r.settings, *allocator);
    r.gemms = path.gemm_calls();
    StageLogger logger(p, r.settings, o.log_format);
    NvtxObserver nvtx;
    StageTimer timer;
    std::unique_ptr<FaultInjector> injector;
    if (o.inject.kind != FaultSpec::none) injector = std::make_unique<FaultInjector>(o.inject);
    PathObservers observers;
    observers.reporter = reporter.get();
    observers.logger = o.log != LogLevel::off ? &logger : nullptr;
    observers.nvtx = &nvtx;
    observers.timer = &timer;
    observers.injector = injector.get();
    observers.mark_gpu_stages = true;
    attach_observers(path, observers, fixes, *allocator, 0, o.log, o.log_format);
    if (!inputs) {
      random_inputs = make_random_inputs(p, p.seed);
      inputs = &random_inputs;
    }
    path.upload(*inputs);
    const bool compare_calls = o.check && o.iters > 1;
    uint64_t first_digest = 0;
    for (int it = 0; it < o.iters; ++it) {
      path.poison_result();
      path.run();
      timer.collect_call();
      if (compare_calls) {
        const uint64_t digest = path.result_digest();
        if (it == 0) first_digest = digest;
        if (digest != first_digest && r.first_differing_call == 0) r.first_differing_call = it + 1;
        r.calls_compared = it + 1;
      }
      r.iterations_done = it + 1;
      if (reporter) reporter->report_calls(it + 1);
      if (o.sample_every > 0 && ((it + 1) % o.sample_every == 0 || it + 1 == o.iters)) {
        r.memory.push_back(sample_memory(it + 1, *allocator));
      }
    }
    fill_timings(timer, r);
    result = path.download_result();
    if (reporter) reporter->mark_gpu_stages(nullptr);  // the log goes before the reporter
  }
  r.allocations = allocator->records();

  r.result_elements = static_cast<int64_t>(result.size());
  for (float x : result) {
    if (!std::isfinite(x)) {
      ++r.nonfinite_outputs;
      continue;
    }
    r.result_l2 += static_cast<double>(x) * x;
    r.result_sum += x;
  }
  r.result_l2 = std::sqrt(r.result_l2);
  save_and_check_result(r, o, *r.result_tensor, *inputs, result);
  if (o.sample_every > 0) r.soak = judge_soak(r.memory);
  if (!r.soak.flat) r.fail(Outcome::leak, "memory grew during the soak: " + r.soak.summary);
  if (r.first_differing_call != 0) {
    r.fail(Outcome::mismatch, "call " + std::to_string(r.first_differing_call) + " of " + std::to_string(o.iters) +
                                  " gave a " + result_tensor_name(*r.result_tensor) +
                                  " tensor whose bits differ from call 1's (the same inputs)");
  }
  // NaN never passes, with or without --check; a wrong result outranks a leak.
  judge_outputs(r, result_tensor_name(*r.result_tensor));
}

}  // namespace

RunResult run_repro(const RunOptions& options, int progress_fd) {
  RunResult r;
  r.options = options;
  run_recording_outcome(r, [&] { run_on_gpu(r, progress_fd); });
  return r;
}

}  // namespace sdpa
