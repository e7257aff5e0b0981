// bench_runner.cpp: the GPU side of `repro bench` (bench.h).
//
// Builds the input sets (K copies of the path, each with its own workspace, streams and cuBLAS
// handle) before anything is timed, so nothing is allocated inside the timed loop; runs every
// set once, then the warm-up calls, then the timed calls in rotation; with --fix-overhead builds
// a second group of sets with the fix for each comparison and calls the two groups interleaved.
// After timing, every set's last output is checked for non-finite values (each was poisoned
// with NaN when built), and --check compares the first set's with the float64 reference.
#include <chrono>
#include <cmath>
#include <memory>

#include "repro/bench/bench.h"
#include "fixes/fix.h"
#include "math_sdpa/context_load.h"
#include "math_sdpa/cuda_check.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/fault_injector.h"
#include "math_sdpa/npy.h"
#include "math_sdpa/nvtx_observer.h"
#include "math_sdpa/pipeline.h"
#include "math_sdpa/stage_log.h"
#include "math_sdpa/stage_timer.h"
#include "repro/run/outcome.h"
#include "repro/run/path_observers.h"
#include "repro/run/progress_reporter.h"
#include "repro/run/run_json.h"
#include "repro/run/run_result.h"

namespace sdpa {

namespace {

// The paths are built once and observed by a different timer in each phase (warm-up calls go
// to one that is thrown away; each series gets its own), so each set forwards its stage
// boundaries to the timer of the moment.
class TimerSlot : public StageObserver {
 public:
  void point_to(StageTimer* timer) { timer_ = timer; }  // null: nothing timed
  void stage_begin(Stage s, const std::string& detail, void* stream) override {
    if (timer_) timer_->stage_begin(s, detail, stream);
  }
  void stage_end(Stage s, const std::string& summary, void* stream) override {
    if (timer_) timer_->stage_end(s, summary, stream);
  }

 private:
  StageTimer* timer_ = nullptr;
};

// One configuration's input sets. Members are destroyed in reverse order: the paths first, then
// what they point to (observers, fixes, the allocator).
struct PathSet {
  FixSet fix_set;
  PathSettings settings;
  Stage first_gpu_stage = Stage::entry_sync, last_gpu_stage = Stage::stream_sync;  // of the stages it runs
  std::unique_ptr<Allocator> allocator;
  std::vector<std::unique_ptr<Fix>> fixes;
  TimerSlot slot;
  std::unique_ptr<StageLogger> logger;
  std::vector<std::unique_ptr<MathSdpa>> paths;
};

// Tensors a call touches: the workspace without cuBLAS's workspace (barely touched by these
// GEMMs) and the small bookkeeping buffers.
int64_t bytes_touched_per_call(const Allocator& allocator) {
  int64_t bytes = 0;
  for (const auto& a : allocator.records()) {
    if (a.what == "cublas_workspace" || a.what == "value_stats" || a.what == "touch_sink" || a.what == "qk_pointer_arrays") {
      continue;
    }
    bytes += static_cast<int64_t>(a.bytes);
  }
  return bytes;
}

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

class BenchRunner {
 public:
  BenchRunner(BenchResult& r, int progress_fd) : r_(r), progress_fd_(progress_fd) {}
  ~BenchRunner() {
    if (call_begin_) cudaEventDestroy(call_begin_);
    if (call_end_) cudaEventDestroy(call_end_);
  }
  void run();

 private:
  std::unique_ptr<PathSet> make_set(const FixSet& fixes);
  void add_path(PathSet& set);
  void call(PathSet& set, int index, StageTimer* timer, CallSamples* into);
  void first_calls(PathSet& set);
  static void harvest_stages(const StageTimer& timer, CallSamples& into);
  void check_outputs(PathSet& set);
  void measure_overhead(PathSet& base, size_t which);

  BenchResult& r_;
  int progress_fd_;
  std::shared_ptr<const HostInputs> inputs_;  // --inputs (read while parsing), else random
  std::unique_ptr<ProgressReporter> reporter_;
  NvtxObserver nvtx_;
  std::unique_ptr<FaultInjector> injector_;
  cudaEvent_t call_begin_ = nullptr, call_end_ = nullptr;
  int64_t calls_done_ = 0;
};

std::unique_ptr<PathSet> BenchRunner::make_set(const FixSet& fixes) {
  auto set = std::make_unique<PathSet>();
  RunOptions o = r_.options.run;
  o.set_fixes(fixes);
  set->fix_set = fixes;
  set->settings = o.settings;
  bool any = false;
  for (int i = 0; i < kStageCount; ++i) {
    const Stage st = static_cast<Stage>(i);
    if (!is_gpu_stage(st) || !stage_observed(st, o.problem, set->settings)) continue;
    if (!any) set->first_gpu_stage = st;
    set->last_gpu_stage = st;
    any = true;
  }
  set->allocator = make_allocator(set->settings.alloc, allocator_options(set->settings, o.allow_oversubscription));
  set->fixes = make_fixes(fixes);
  if (o.log != LogLevel::off) set->logger = std::make_unique<StageLogger>(o.problem, set->settings, o.log_format, stderr, o.log_extras);
  return set;
}

void BenchRunner::add_path(PathSet& set) {
  const RunOptions& o = r_.options.run;
  const size_t records_before = set.allocator->records().size();
  auto path = std::make_unique<MathSdpa>(o.problem, set.settings, *set.allocator);
  PathObservers observers;
  observers.reporter = reporter_.get();
  observers.logger = set.logger.get();
  observers.nvtx = &nvtx_;
  observers.timer = &set.slot;
  observers.injector = injector_.get();
  attach_observers(*path, observers, set.fixes, *set.allocator, records_before, o.log, o.log_format);
  // Random inputs are made only once the first workspace exists, so an oversized request is
  // refused before any host memory is used (as in a run).
  if (!inputs_) inputs_ = std::make_shared<const HostInputs>(make_random_inputs(o.problem, o.problem.seed));
  if (set.settings.backward && inputs_->grad_out.empty()) {  // --backward: dO too (dout.npy, else seeded)
    HostInputs with_grad = *inputs_;
    with_grad.grad_out = make_grad_output(o.problem, 1);
    inputs_ = std::make_shared<const HostInputs>(std::move(with_grad));
  }
  // Every layer computes on the same inputs: a benchmark times the pass, the run checks each layer.
  for (int l = 1; l <= path->layers(); ++l) path->upload(*inputs_, l);
  path->poison_result();  // a stage that silently does nothing leaves NaN, found after timing
  set.paths.push_back(std::move(path));
}

// One call of set `index`, its stages observed by `timer` (none: null); its whole-call times
// added to `into` unless that is null.
void BenchRunner::call(PathSet& set, int index, StageTimer* timer, CallSamples* into) {
  MathSdpa& path = *set.paths[static_cast<size_t>(index)];
  set.slot.point_to(timer);
  CUDA_CHECK(cudaEventRecord(call_begin_, path.stream()));
  const auto t0 = std::chrono::steady_clock::now();
  path.run();
  const auto t1 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaEventRecord(call_end_, path.stream()));
  CUDA_CHECK(cudaEventSynchronize(call_end_));
  if (timer) timer->collect_call();
  set.slot.point_to(nullptr);
  if (into) {
    float event_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&event_ms, call_begin_, call_end_));
    into->event_ms.push_back(event_ms);
    into->wall_ms.push_back(ms_between(t0, t1));
    into->total_seconds += ms_between(t0, t1) / 1e3;
  }
  ++calls_done_;
  if (reporter_) reporter_->report_calls(calls_done_);
}

// Every set once (managed pages placed, cuBLAS's first-call set-up), untimed.
void BenchRunner::first_calls(PathSet& set) {
  for (size_t i = 0; i < set.paths.size(); ++i) call(set, static_cast<int>(i), nullptr, nullptr);
}

void BenchRunner::harvest_stages(const StageTimer& timer, CallSamples& into) {
  for (int i = 0; i < kStageCount; ++i) into.stage_ms[static_cast<size_t>(i)] = timer.samples()[static_cast<size_t>(i)];
}

void BenchRunner::check_outputs(PathSet& set) {
  for (auto& path : set.paths) {
    for (float x : path->download_result()) r_.nonfinite_outputs += !std::isfinite(x);
  }
}

void BenchRunner::measure_overhead(PathSet& base, size_t which) {
  const BenchOptions& o = r_.options;
  OverheadComparison c;
  c.label = o.overhead_labels[which];
  c.fixes_b = base.fix_set;
  c.fixes_b.add(o.overhead_fixes[which]);
  if (c.fixes_b == base.fix_set) {
    c.skipped = true;
    c.skip_reason = "already applied in A (--fixes " + base.fix_set.str() + ")";
    r_.overhead.push_back(c);
    return;
  }
  std::unique_ptr<PathSet> fixed;
  try {
    fixed = make_set(c.fixes_b);
    for (int i = 0; i < r_.input_sets; ++i) add_path(*fixed);
  } catch (const WaivedError& e) {  // e.g. fix 4's pool memory for scenario 2, which needs migration
    c.skipped = true;
    c.skip_reason = e.what();
  } catch (const RefusedError& e) {
    c.skipped = true;
    c.skip_reason = e.what();
  }
  if (c.skipped) {
    r_.overhead.push_back(c);
    return;
  }
  c.a.label = "A";
  c.a.fixes = base.fix_set;
  c.a.settings = settings_fields(base.settings);
  c.b.label = "B";
  c.b.fixes = c.fixes_b;
  c.b.settings = settings_fields(fixed->settings);
  first_calls(*fixed);
  const int sets = r_.input_sets;
  for (int w = 0; w < o.warmup; ++w) {
    call(base, w % sets, nullptr, nullptr);
    call(*fixed, w % sets, nullptr, nullptr);
  }
  for (CallSamples* samples : {&c.a.samples, &c.b.samples}) {
    samples->event_ms.reserve(static_cast<size_t>(o.iterations));
    samples->wall_ms.reserve(static_cast<size_t>(o.iterations));
  }
  // The timed pass (only the GPU span inside a call), then the stage pass, both interleaved.
  StageTimer span_a(base.first_gpu_stage, base.last_gpu_stage), span_b(fixed->first_gpu_stage, fixed->last_gpu_stage);
  for (int it = 0; it < o.iterations; ++it) {
    call(base, it % sets, &span_a, &c.a.samples);
    call(*fixed, it % sets, &span_b, &c.b.samples);
  }
  c.a.samples.gpu_ms = span_a.call_ms();
  c.b.samples.gpu_ms = span_b.call_ms();
  StageTimer stages_a, stages_b;
  for (int it = 0; it < o.iterations; ++it) {
    call(base, it % sets, &stages_a, nullptr);
    call(*fixed, it % sets, &stages_b, nullptr);
  }
  harvest_stages(stages_a, c.a.samples);
  harvest_stages(stages_b, c.b.samples);
  check_outputs(*fixed);
  summarize_comparison(c);
  r_.overhead.push_back(std::move(c));
}

void BenchRunner::run() {
  const BenchOptions& o = r_.options;
  const RunOptions& ro = o.run;
  // What computes the check's reference, refused (exit 2) before the GPU is touched.
  if (ro.check) prepare_check(r_);
  r_.device = query_device_info(0);
  CUDA_CHECK(cudaSetDevice(0));
  // One input set's memory plan, against the memory there is, before anything is allocated (a
  // run's guard: more sets are chosen to fit what is left).
  if (!ro.allow_oversubscription) {
    const MemoryFacts facts = query_memory_facts();
    const MemoryPlan plan = plan_memory(ro.problem, ro.settings, context_memory(ro.context, facts));
    const std::string refusal = plan_refusal(plan, plan_pools(plan, facts));
    if (!refusal.empty()) throw RefusedError(refusal);
  }
  int l2 = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  r_.l2_bytes = l2;
  r_.result_tensor = result_tensor_of(ro.settings);
  inputs_ = ro.inputs;
  if (progress_fd_ >= 0) {
    reporter_ = std::make_unique<ProgressReporter>(progress_fd_);
    reporter_->report_device(device_to_json(*r_.device).dump());
  }
  if (ro.inject.kind != FaultSpec::none) injector_ = std::make_unique<FaultInjector>(ro.inject);
  CUDA_CHECK(cudaEventCreate(&call_begin_));
  CUDA_CHECK(cudaEventCreate(&call_end_));

  // The first set decides how many fit and are needed; the rest are built before any timing.
  std::unique_ptr<PathSet> base = make_set(ro.fixes);
  add_path(*base);
  r_.bytes_per_call = bytes_touched_per_call(*base->allocator);
  r_.bytes_per_set = static_cast<int64_t>(base->allocator->live_bytes());
  if (o.input_sets > 0) {
    r_.input_sets = o.input_sets;
  } else {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    // Half the free memory for the sets, a quarter when a second group (B) is built beside them.
    const int64_t budget = static_cast<int64_t>(free_bytes) / (o.overhead_labels.empty() ? 2 : 4);
    r_.input_sets = choose_input_sets(r_.bytes_per_call, r_.l2_bytes, r_.bytes_per_set, budget);
    r_.input_sets_chosen = true;
  }
  while (static_cast<int>(base->paths.size()) < r_.input_sets) add_path(*base);

  first_calls(*base);
  for (int w = 0; w < o.warmup; ++w) call(*base, w % r_.input_sets, nullptr, nullptr);
  r_.path.label = "path";
  r_.path.fixes = base->fix_set;
  r_.path.settings = settings_fields(base->settings);
  r_.path.samples.event_ms.reserve(static_cast<size_t>(o.iterations));
  r_.path.samples.wall_ms.reserve(static_cast<size_t>(o.iterations));
  // The timed pass: the whole call and its GPU span, nothing timed inside it (an event pair per
  // stage adds host work between the launches, which a launch-bound shape would show as GPU
  // time). Then the stage pass, as many calls again, with events around every stage.
  StageTimer span(base->first_gpu_stage, base->last_gpu_stage);
  for (int it = 0; it < o.iterations; ++it) call(*base, it % r_.input_sets, &span, &r_.path.samples);
  r_.path.samples.gpu_ms = span.call_ms();
  StageTimer stages;
  for (int it = 0; it < o.iterations; ++it) call(*base, it % r_.input_sets, &stages, nullptr);
  harvest_stages(stages, r_.path.samples);
  summarize_series(r_.path);

  for (size_t i = 0; i < o.overhead_labels.size(); ++i) measure_overhead(*base, i);

  check_outputs(*base);
  if (ro.check || !ro.save_output_path.empty()) {
    save_and_check_result(r_, r_.options.run, *r_.result_tensor, *inputs_, base->paths.front()->download_result());
  }
  // NaN never passes, with or without --check.
  judge_outputs(r_, std::string(result_tensor_name(*r_.result_tensor)) + "s of the input sets");
}

}  // namespace

BenchResult run_bench(const BenchOptions& options, int progress_fd) {
  BenchResult r;
  r.options = options;
  run_recording_outcome(r, [&] { BenchRunner(r, progress_fd).run(); });
  return r;
}

BenchResult bench_watchdog_result(const BenchOptions& options, const SupervisedOutcome& outcome) {
  const RunResult run = watchdog_result(options.run, outcome);
  BenchResult r;
  static_cast<Verdict&>(r) = run;  // a hung or crashed benchmark ends as a run does
  r.options = options;
  r.device = run.device;
  r.result_tensor = run.result_tensor;
  r.watchdog = outcome;
  return r;
}

}  // namespace sdpa
