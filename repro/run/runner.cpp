// runner.cpp: one run of the harness on the GPU: set up, call the path --iters times, check.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "fixes/fix.h"
#include "math_sdpa/context_load.h"
#include "math_sdpa/host_memory.h"
#include "math_sdpa/cuda_check.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/fault_injector.h"
#include "math_sdpa/nvtx_observer.h"
#include "math_sdpa/stage_log.h"
#include "math_sdpa/npy.h"
#include "math_sdpa/host_values.h"
#include "math_sdpa/pipeline.h"
#include "math_sdpa/reference.h"
#include "math_sdpa/stage_timer.h"
#include "math_sdpa/uvm_counters.h"
#include "math_sdpa/stats.h"
#include "repro/run/memory_trace.h"
#include "repro/run/outcome.h"
#include "repro/run/path_observers.h"
#include "repro/run/progress_reporter.h"
#include "repro/run/reference_ahead.h"
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
  m.reserved_mib = static_cast<double>(allocator.reserved_bytes()) / (1 << 20);
  return m;
}

// Each layer's inputs, made (or given by --inputs, the same for every layer) and uploaded a few
// layers at a time, in threads: a large layer's random inputs take a second or more to make. With
// --backward its gradient of the output too (dout.npy of --inputs, else made). A layer whose check
// is computed ahead has its inputs made there already: those are uploaded.
void upload_layer_inputs(MathSdpa& path, const SdpaProblem& p, const HostInputs* given, ReferenceAhead& ahead) {
  const int layers = path.layers();
  const bool backward = path.settings().backward;
  const int batch = given ? 1 : std::max(1, std::min(4, static_cast<int>(std::thread::hardware_concurrency())));
  for (int first = 1; first <= layers; first += batch) {
    const int last = std::min(layers, first + batch - 1);
    std::vector<const HostInputs*> lent;
    std::vector<std::future<HostInputs>> made;
    for (int l = first; l <= last; ++l) {
      lent.push_back(ahead.inputs(l));
      if (!lent.back()) {
        made.push_back(std::async(std::launch::async, [&p, l, given, backward] { return layer_inputs(p, l, given, backward); }));
      }
    }
    size_t next_made = 0;
    for (int l = first; l <= last; ++l) {
      if (const HostInputs* in = lent[static_cast<size_t>(l - first)]) {
        path.upload(*in, l);
      } else {
        path.upload(made[next_made++].get(), l);
      }
    }
  }
}

// Whether --check compares layer `layer` with its reference: every layer, or with --check-layers
// last the last one only.
bool checks_layer(const RunResult& r, int layer) {
  return r.options.check && (!r.options.check_last_layer_only || layer == r.settings.layers);
}

// Layer `layer`'s result after the last call, for a layer that is checked or the last (the others'
// non-finite values are counted on the GPU): its non-finite values counted, compared with its own
// float64 reference where checks_layer (the worst layer's comparison is the run's), saved with
// --save-output (the last layer's). Only the last layer's is kept (`last`, for the result's
// summary): a pass of 60 image layers has gigabytes of results. `inputs` are the layer's (where
// it is checked; empty otherwise); `reference` its float64 reference where it was computed already
// (by reference_gradients, on the way), else null.
void judge_layer(RunResult& r, int layer, std::vector<float> result, const HostInputs& inputs, std::vector<float>& last,
                 const std::vector<double>* reference) {
  const RunOptions& o = r.options;
  const int layers = r.settings.layers;
  for (float x : result) r.nonfinite_outputs += !std::isfinite(x);
  RunOptions layer_options = o;
  layer_options.problem = layer_problem(o.problem, layer);
  layer_options.check = checks_layer(r, layer);
  if (layer < layers) layer_options.save_output_path.clear();
  Verdict v;
  save_and_check_result(v, layer_options, *r.result_tensor, inputs, result, reference);
  r.check_cost.wall_seconds += v.check_cost.wall_seconds;
  r.check_cost.cpu_seconds += v.check_cost.cpu_seconds;
  if (v.checked) {
    ++r.layers_checked;
    const bool fails = !v.comparison.passed(v.tolerance), worst_fails = r.checked && !r.comparison.passed(r.tolerance);
    if (!r.checked || (fails && !worst_fails) || (fails == worst_fails && v.comparison.rel_error > r.comparison.rel_error)) {
      r.checked = true;
      r.tolerance = v.tolerance;
      r.comparison = v.comparison;
      r.worst_layer = layer;
    }
  }
  if (layer == layers) last = std::move(result);
}

// --backward: layer `layer`'s input gradients, as judge_layer judges its result: non-finite values
// counted, each compared with the float64 reference's `ref` (where checks_layer; the worst layer's is kept),
// the last layer's saved beside the result (--save-output FILE.npy: FILE.grad_query.npy, ...).
void judge_layer_gradients(RunResult& r, int layer, const MathSdpa::Gradients& g, const ReferenceGradients* ref) {
  const RunOptions& o = r.options;
  const SdpaProblem p = layer_problem(o.problem, layer);
  const std::vector<float>* got[] = {&g.query, &g.key, &g.value};
  const char* names[] = {"grad_query", "grad_key", "grad_value"};
  for (const std::vector<float>* x : got) {
    for (float v : *x) r.nonfinite_gradients += !std::isfinite(v);
  }
  if (layer == r.settings.layers && !o.save_output_path.empty()) {
    std::string stem = o.save_output_path;
    if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".npy") == 0) stem.resize(stem.size() - 4);
    for (int i = 0; i < 3; ++i) {
      const int64_t heads = i == 0 ? p.q_heads : p.kv_heads, rows = i == 0 ? p.q_len : p.kv_len;
      write_npy_float32(stem + "." + names[i] + ".npy", {p.batch, heads, rows, p.head_dim}, got[i]->data());
    }
  }
  if (!ref) return;
  const CheckCostMeter meter(r.check_cost);
  const std::vector<double>* want[] = {&ref->query, &ref->key, &ref->value};
  r.gradient_tolerance = gradient_tolerance_for(p.dtype, p.precision);
  r.gradient_checks.resize(3);
  for (int i = 0; i < 3; ++i) {
    RunResult::GradientCheck& c = r.gradient_checks[static_cast<size_t>(i)];
    const Comparison now = compare_to_reference(*got[i], *want[i]);
    c.name = names[i];
    if (c.worst_layer == 0 || now.nonfinite > c.comparison.nonfinite || now.rel_error > c.comparison.rel_error) {
      c.comparison = now;
      c.worst_layer = layer;
    }
  }
}

void run_on_gpu(RunResult& r, int progress_fd) {
  RunOptions& o = r.options;
  SdpaProblem& p = o.problem;
  r.settings = o.settings;
  r.result_tensor = result_tensor_of(r.settings);
  // What computes the check's reference, refused (exit 2) before the GPU is touched; then the
  // references the run's memory allows, computed on idle CPUs while it runs (reference_ahead.h).
  if (o.check) prepare_check(r);
  std::vector<int> checked;
  for (int l = 1; l <= r.settings.layers; ++l) {
    if (checks_layer(r, l)) checked.push_back(l);
  }
  const std::vector<int> ahead_layers = reference_ahead_layers(
      o, r.settings, checked, reference_ahead_budget(o.check ? read_host_memory().available : -1), &r.check_cost.after_run_because);
  ReferenceAhead ahead(p, ahead_layers, o.inputs.get(), r.settings.backward, *r.result_tensor);
  r.check_cost.layers_ahead = static_cast<int>(ahead_layers.size());
  r.device = query_device_info(0);
  CUDA_CHECK(cudaSetDevice(0));

  // The memory plan, against the memory there is, before anything is allocated: a plan past the
  // guard is refused here (exit 8) unless --allow-oversubscription.
  // Before anything is touched: the counters count what migrates from now on.
  std::unique_ptr<UvmCounters> uvm = o.uvm_counters ? UvmCounters::start() : nullptr;
  const MemoryFacts facts = query_memory_facts();
  r.memory_facts = facts;
  const ContextMemory context = context_memory(o.context, facts);
  r.plan = plan_memory(p, r.settings, context);
  if (o.layers_fit) {
    fit_layers(*r.plan, r.settings, p, context, facts);
    o.settings.layers = r.settings.layers;
  }
  r.pools = plan_pools(*r.plan, facts);
  if (!o.allow_oversubscription) {
    const std::string refusal = plan_refusal(*r.plan, r.pools);
    if (!refusal.empty()) throw RefusedError(refusal);
  }
  // --launch-blocking: shown to be in force (CUDA read the variable when it started), not assumed.
  if (o.launch_blocking) r.launch_blocking_probe_ms = host_wait_for_launch_ms(kLaunchBlockingProbeMs);
  MemoryMeasured& measured = r.measured.emplace();
  measured.gpu_free_at_start = measured.min_gpu_free = facts.gpu_free;
  measured.mem_available_at_start = measured.min_mem_available = facts.host_available;

  // The rest of the model and the data loader, before the path: their memory is taken first.
  const AllocatorOptions alloc_options = allocator_options(r.settings, o.allow_oversubscription);
  std::unique_ptr<Ballast> ballast;
  if (r.plan->context.ballast_bytes > 0) ballast = std::make_unique<Ballast>(o.context.ballast, r.plan->context.ballast_bytes, alloc_options);
  std::unique_ptr<HostLoad> host_load;
  if (o.context.host_load_threads > 0) host_load = std::make_unique<HostLoad>(o.context.host_load_threads);

  auto allocator = make_allocator(r.settings.alloc, alloc_options);
  const auto fixes = make_fixes(o.fixes);
  const HostInputs* given = o.inputs.get();
  const int layers = r.settings.layers;
  std::vector<float> last_result;
  {
    std::unique_ptr<ProgressReporter> reporter;
    if (progress_fd >= 0) {
      reporter = std::make_unique<ProgressReporter>(progress_fd);
      reporter->report_device(device_to_json(*r.device).dump());
    }
    MathSdpa path(p, r.settings, *allocator);
    r.gemms = path.gemm_calls();
    StageLogger logger(p, r.settings, o.log_format, stderr, o.log_extras);
    NvtxObserver nvtx;
    StageTimer timer;
    std::unique_ptr<FaultInjector> injector;
    if (o.inject.kind != FaultSpec::none && o.inject_armed) injector = std::make_unique<FaultInjector>(o.inject);
    MemoryTracer tracer(*allocator, logger, measured, o.memory_trace);
    PathObservers observers;
    observers.reporter = reporter.get();
    observers.logger = o.log != LogLevel::off ? &logger : nullptr;
    observers.nvtx = &nvtx;
    observers.timer = &timer;
    observers.injector = injector.get();
    observers.memory = o.memory_trace ? &tracer : nullptr;
    observers.mark_gpu_stages = true;
    attach_observers(path, observers, fixes, *allocator, 0, o.log, o.log_format);
    // The model's weights before its first forward call, as a training script loads them.
    if (r.settings.weights.bytes > 0) r.weights_load = path.load_weights();
    // Random inputs are made only once the workspace exists, so an oversized request is refused
    // before any host memory is used (but for the layers checked ahead, within that budget).
    upload_layer_inputs(path, p, given, ahead);
    // The run's own per-call records are made room for now, so the soak sees the path's memory.
    timer.reserve(static_cast<size_t>(o.iters));
    r.step_ms.reserve(std::min<size_t>(static_cast<size_t>(o.iters), StageTimer::kMaxPasses));
    const bool compare_calls = o.check && o.iters > 1;
    std::vector<uint64_t> first_digests(static_cast<size_t>(layers));
    for (int it = 0; it < o.iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      path.poison_result();
      path.run(it + 1);
      timer.collect_call();
      tracer.sample("call_end");
      if (compare_calls) {
        for (int l = 1; l <= layers; ++l) {
          const uint64_t digest = path.result_digest(l);
          if (it == 0) first_digests[static_cast<size_t>(l - 1)] = digest;
          if (digest != first_digests[static_cast<size_t>(l - 1)] && r.first_differing_call == 0) r.first_differing_call = it + 1;
        }
        r.calls_compared = it + 1;
      }
      r.iterations_done = it + 1;
      // The check's own host memory (the float64 reference's threads and buffers) is not the
      // path's: the soak's last sample leaves out what the resident set grew by during it.
      double check_rss_mib = 0;
      if (it + 1 == o.iters) {
        const double rss_before_check = resident_set_mib();
        // What the run left of the references computed during it, before anything is compared: the
        // comparisons' CPU time is then the process's alone.
        ahead.wait();
        r.check_cost.add_ahead(ahead.compute_seconds(), ahead.waited_seconds(), ahead.cpu_seconds());
        for (int l = 1; l <= layers; ++l) {
          if (!checks_layer(r, l) && l < layers) {
            // Neither checked nor saved: its non-finite values counted where it is.
            r.nonfinite_outputs += path.result_nonfinite(l);
            if (r.settings.backward) r.nonfinite_gradients += path.gradients_nonfinite(l);
            continue;
          }
          // Made again for the check (only the GPU kept them), once for the result and the gradients.
          std::optional<LayerReference> ref;
          if (checks_layer(r, l)) {
            ref = ahead.take(l);
            const CheckCostMeter meter(r.check_cost);
            if (!ref) ref = compute_layer_reference(p, l, given, r.settings.backward, *r.result_tensor);
          }
          judge_layer(r, l, path.download_result(l), ref ? ref->inputs : HostInputs(), last_result,
                      ref ? &ref->result_reference() : nullptr);
          if (r.settings.backward) judge_layer_gradients(r, l, path.download_gradients(l), ref ? &*ref->gradients : nullptr);
        }
        if (o.check) check_rss_mib = resident_set_mib() - rss_before_check;
      }
      path.end_step();  // what the layers kept goes, as the backward pass would free it
      const double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r.step_ms.size() < StageTimer::kMaxPasses) r.step_ms.push_back(step_ms);
      else r.step_ms.back() = step_ms;  // bounded: the first passes, and always the last
      if (reporter) reporter->report_calls(it + 1);
      if (o.sample_every > 0 && ((it + 1) % o.sample_every == 0 || it + 1 == o.iters)) {
        r.memory.push_back(sample_memory(it + 1, *allocator));
        r.memory.back().rss_mib -= check_rss_mib;
      }
    }
    fill_timings(timer, r);
    r.stalls = judge_stalls(timer.longest(), o.stall_threshold_s);
    if (reporter) reporter->mark_gpu_stages(nullptr);  // the log goes before the reporter
  }
  measured.peak_live_bytes = static_cast<int64_t>(allocator->peak_live_bytes());
  measured.peak_reserved_bytes = static_cast<int64_t>(allocator->peak_reserved_bytes());
  measured.allocations = static_cast<int64_t>(allocator->allocations_made());
  r.allocations = allocator->records();
  if (uvm) {
    if (ballast) uvm->name_range("ballast", ballast->data(), static_cast<size_t>(ballast->bytes()));
    if (ballast) ballast->stop();
    CUDA_CHECK(cudaDeviceSynchronize());
    r.uvm = uvm->stop();
  }
  if (ballast) {
    ballast->stop();
    r.context_load.ballast_bytes = ballast->bytes();
    r.context_load.ballast_host_passes = ballast->host_passes();
    r.context_load.ballast_gpu_passes = ballast->gpu_passes();
    if (!ballast->error().empty()) throw CudaError("the ballast's toucher: " + ballast->error(), "ballast", "");
  }
  if (host_load) {
    host_load->stop();
    r.context_load.host_load_iterations = host_load->iterations();
    if (!host_load->error().empty()) throw CudaError("the host load: " + host_load->error(), "host_load", "");
  }

  const FiniteStats stats = finite_stats(last_result);
  r.result_elements = static_cast<int64_t>(last_result.size());
  r.result_l2 = stats.l2, r.result_sum = stats.sum;
  if (o.sample_every > 0) {
    r.soak = judge_soak(r.memory, kSoakToleranceMib, o.context.ballast.given() || o.context.host_load_threads > 0);
  }
  if (!r.soak.flat) r.fail(Outcome::leak, "memory grew during the soak: " + r.soak.summary);
  if (r.first_differing_call != 0) {
    r.fail(Outcome::mismatch, "call " + std::to_string(r.first_differing_call) + " of " + std::to_string(o.iters) +
                                  " gave a " + result_tensor_name(*r.result_tensor) +
                                  " tensor whose bits differ from call 1's (the same inputs)");
  }
  // NaN never passes, with or without --check; a wrong result outranks a leak.
  judge_outputs(r, result_tensor_name(*r.result_tensor));
  if (r.outcome == Outcome::pass || r.outcome == Outcome::leak) {
    if (r.nonfinite_gradients > 0) {
      r.fail(Outcome::mismatch, std::to_string(r.nonfinite_gradients) + " non-finite values in the input gradients");
    }
    for (const RunResult::GradientCheck& c : r.gradient_checks) {
      if (c.comparison.passed(r.gradient_tolerance)) continue;
      r.fail(Outcome::mismatch, c.name + " of layer " + std::to_string(c.worst_layer) + ": relative error " +
                                    std::to_string(c.comparison.rel_error) + " exceeds " + std::to_string(r.gradient_tolerance));
      break;
    }
  }
  // Calls that all took seconds in one stage are the symptom, even where every result was right.
  if (r.outcome == Outcome::pass && r.stalls.every_call()) {
    r.fail(Outcome::stalled, "every call stalled: " + r.stalls.summary());
    r.error_stage = r.stalls.longest.stage;
  }
}

}  // namespace

RunResult run_repro(const RunOptions& options, int progress_fd) {
  RunResult r;
  r.options = options;
  run_recording_outcome(r, [&] { run_on_gpu(r, progress_fd); });
  return r;
}

}  // namespace sdpa
