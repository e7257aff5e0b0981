// run_text.cpp: a short table in the nccl-tests manner, the verdict on the last line.
#include "repro/run/run_text.h"

#include <cstdio>
#include <sstream>

#include "math_sdpa/stats.h"
#include "scenarios/scenario.h"

namespace sdpa {

namespace {
std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}
}  // namespace

std::string configuration_line(const RunOptions& o) {
  const SdpaProblem& p = o.problem;
  std::ostringstream s;
  s << "scenario " << o.scenario << " ";
  if (!o.workload.empty()) s << "workload=" << o.workload << " ";
  s << p.shape_string() << " dtype=" << dtype_name(p.dtype)
    << " precision=" << precision_name(p.precision) << " mask=" << mask_kind_name(p.mask)
    << (p.mask_pattern == MaskPattern::text_padding ? "(text padding)" : "") << " dropout=" << p.dropout_p
    << " alloc=" << alloc_kind_name(o.settings.alloc) << " fixes=" << o.fixes.str() << (o.steps ? " steps=" : " iters=")
    << o.iters;
  // The training context, where it is not the isolated call's.
  const PathSettings& ps = o.settings;
  if (ps.alloc_timing != AllocTiming::upfront) s << " alloc_timing=" << alloc_timing_name(ps.alloc_timing);
  if (ps.layers != 1) s << " layers=" << ps.layers;
  if (ps.retain != Retain::none) s << " retain=" << retain_name(ps.retain);
  if (o.context.ballast.given()) {
    s << " ballast=" << ballast_string(o.context.ballast) << "(" << alloc_kind_name(o.context.ballast.kind)
      << ",touch=" << ballast_touch_name(o.context.ballast.touch) << ")";
  }
  if (o.context.host_load_threads) s << " host_load=" << o.context.host_load_threads;
  if (!o.inputs_dir.empty()) s << " inputs=" << o.inputs_dir;
  if (o.inject.kind != FaultSpec::none) {
    s << " inject=" << fault_spec_string(o.inject) << (o.inject_armed ? "" : "(its conditions do not hold here: not armed)");
  }
  return s.str();
}

namespace {

// The stage table: each stage's calls and times, the call's, and the first call against the rest.
void write_stage_table(std::ostringstream& s, const RunResult& r) {
  if (!r.stages.empty()) {
    s << "#  stage          calls   median_ms      p10_ms      p90_ms  clock\n";
    for (const auto& st : r.stages) {
      char line[160];
      std::snprintf(line, sizeof line, "   %-13s %6d %11.4f %11.4f %11.4f  %s\n", st.stage.c_str(), st.calls, st.median_ms,
                    st.p10_ms, st.p90_ms, st.host_clock ? "host" : "event");
      s << line;
    }
    s << format("#  call (GPU stages)     %11.4f %11.4f %11.4f  event\n", r.call_median_ms, r.call_p10_ms, r.call_p90_ms);
    if (!r.steady_stages.empty()) {
      s << format("#  first call %.4f ms; calls 2..%.0f median %.4f ms (GPU stages)\n", r.first_call_ms,
                  static_cast<double>(r.iterations_done), r.steady_call_median_ms);
    }
  }
}

// What the run's memory was planned to be and measured to be, the weights' load, the steps, the
// soak's samples.
void write_memory_lines(std::ostringstream& s, const RunResult& r) {
  if (r.plan) {
    const MemoryPlan& plan = *r.plan;
    s << "# memory plan: " << gigabytes(plan.path_bytes) << " predicted peak of the path (" << plan.layers << " layer"
      << (plan.layers == 1 ? "" : "s") << ", " << gigabytes(plan.layer_kept_bytes) << " kept per layer)";
    if (plan.context.ballast_bytes) s << " + ballast " << gigabytes(plan.context.ballast_bytes);
    if (plan.weights_bytes) s << " + mapped weights " << gigabytes(plan.weights_bytes);
    for (const PoolUse& u : r.pools) {
      if (u.available >= 0) s << "; " << u.name << " " << gigabytes(u.need) << " of " << gigabytes(u.available) << " available";
      if (u.available >= 0 && u.fits_only_by_reclaim()) s << " (only if the page cache is reclaimed)";
    }
    s << "\n";
    if (plan.layers_asked) s << "# " << layers_fit_text(plan) << "\n";
  }
  if (r.weights_load) {
    const WeightsLoad& w = *r.weights_load;
    s << "# weights loaded: " << gigabytes(w.bytes) << " in " << w.tensors << " tensors from " << w.file
      << (w.created ? " (written first)" : "") << ", io " << w.io << ", pages " << w.pages << ", mapping " << w.mapping << ": "
      << format("%.2f s, %.2f GB/s", w.seconds, w.gb_per_s()) << "\n"
      << "#   before: " << host_memory_text(w.before) << "\n"
      << "#   after:  " << host_memory_text(w.after) << "\n"
      << "#   change: Cached " << format("%+.2f GB", static_cast<double>(w.after.cached - w.before.cached) / 1e9)
      << format(", MemFree %+.2f GB", static_cast<double>(w.after.free - w.before.free) / 1e9)
      << format(", MemAvailable %+.2f GB", static_cast<double>(w.after.available - w.before.available) / 1e9)
      << format(", RssFile %+.2f GB", static_cast<double>(w.after.rss_file - w.before.rss_file) / 1e9) << "\n";
  }
  if (r.measured) {
    const MemoryMeasured& m = *r.measured;
    s << "# memory measured: peak " << gigabytes(m.peak_live_bytes) << " in the path's tensors, "
      << gigabytes(m.peak_reserved_bytes) << " held from the driver; GPU memory in use at most "
      << gigabytes(m.gpu_used_peak()) << " (cudaMemGetInfo), MemAvailable at least " << gigabytes(m.min_mem_available) << "\n";
  }
  if (r.step_ms.size() > 1) {
    s << "# steps: " << r.iterations_done << format(", first %.3f ms, median %.3f ms (p10 %.3f)", r.step_ms.front(),
                                                   median(r.step_ms), percentile(r.step_ms, 10))
      << format(", last %.3f ms\n", r.step_ms.back());
  }
  if (!r.memory.empty()) {
    s << "#  calls  gpu_free_mib    rss_mib  live_allocs   live_mib\n";
    // At most about a dozen rows: the first, evenly spaced ones, the last.
    const size_t every = r.memory.size() > 12 ? (r.memory.size() + 10) / 11 : 1;
    for (size_t i = 0; i < r.memory.size(); ++i) {
      if (i % every != 0 && i + 1 != r.memory.size()) continue;
      const MemorySample& m = r.memory[i];
      char line[128];
      std::snprintf(line, sizeof line, "  %6lld  %12.1f %10.1f  %11lld %10.1f\n", static_cast<long long>(m.calls),
                    m.gpu_free_mib, m.rss_mib, static_cast<long long>(m.live_allocations), m.live_mib);
      s << line;
    }
    s << "# memory: " << r.soak.summary << "\n";
  }
}

// The check: the result's comparison (the worst layer's), the gradients', every call against the
// first, the check's cost.
void write_check_lines(std::ostringstream& s, const RunResult& r) {
  s << "# check (" << (r.result_tensor ? result_tensor_name(*r.result_tensor) : "");
  if (r.layers_checked > 1) s << ", " << r.layers_checked << " layers, the worst: layer " << r.worst_layer;
  // --check-layers last: the other layers' values were counted for NaN only.
  if (r.layers_checked == 1 && r.settings.layers > 1) s << ", layer " << r.worst_layer << " of " << r.settings.layers << " only";
  s << ")";
  s << format(": rel_error %.3e  max_abs_error %.3e  tolerance %.1e", r.comparison.rel_error,
              r.comparison.max_abs_error, r.tolerance)
    << (r.comparison.passed(r.tolerance) ? "  OK\n" : "  FAILED\n");
  for (const RunResult::GradientCheck& g : r.gradient_checks) {
    s << "# check (" << g.name << (r.layers_checked > 1 ? ", the worst: layer " + std::to_string(g.worst_layer) : std::string())
      << ")" << format(": rel_error %.3e  max_abs_error %.3e  tolerance %.1e", g.comparison.rel_error,
                       g.comparison.max_abs_error, r.gradient_tolerance)
      << (g.comparison.passed(r.gradient_tolerance) ? "  OK\n" : "  FAILED\n");
  }
  if (r.calls_compared > 1) {
    s << "# every call: " << r.calls_compared << " calls compared with call 1 bit for bit: "
      << (r.first_differing_call ? "call " + std::to_string(r.first_differing_call) + " differs  FAILED\n"
                                 : std::string("identical  OK\n"));
  }
  s << check_cost_line(r);
}

}  // namespace

std::string result_to_text(const RunResult& r) {
  std::ostringstream s;
  s << "# repro scenario " << r.options.scenario << " (" << scenario_info(r.options.scenario).title << ")";
  if (r.device) {
    const DeviceInfo& d = *r.device;
    s << " on " << d.name << " (sm_" << d.cc_major << d.cc_minor << ", " << d.sm_count << " SMs), driver "
      << d.driver_version / 1000 << "." << (d.driver_version % 1000) / 10 << ", cuBLAS " << d.cublas_version / 10000
      << "." << (d.cublas_version / 100) % 100 << "." << d.cublas_version % 100;
  }
  s << "\n# " << configuration_line(r.options) << "\n";
  // The settings that differ from a plain run: what the scenario set up and the fixes changed.
  const auto plain = settings_fields(PathSettings{});
  std::string changed;
  for (const auto& [name, value] : settings_fields(r.settings)) {
    if (plain.at(name) != value) changed += " " + name + "=" + value;
  }
  if (!changed.empty()) s << "# settings:" << changed << "\n";
  for (const std::string& caveat : r.options.caveats) s << "# caveat: " << caveat << "\n";
  if (r.launch_blocking_probe_ms) {
    const double waited = *r.launch_blocking_probe_ms;
    s << format_number("# launch blocking: a %.0f ms kernel's launch returned after ", kLaunchBlockingProbeMs)
      << format_number("%.1f ms", waited)
      << (waited >= kLaunchBlockingProbeMs / 2 ? " (CUDA_LAUNCH_BLOCKING=1 in force)\n"
                                                : " (NOT in force: CUDA had started before the variable was set)\n");
  }
  write_stage_table(s, r);
  write_memory_lines(s, r);
  if (r.stalls.any()) {
    s << "# STALLED: " << r.stalls.summary() << "\n";
    for (size_t i = 0; i < r.stalls.records.size() && i < 8; ++i) {
      const StallRecord& st = r.stalls.records[i];
      s << "#   call " << st.call << ": " << st.stage << format_number(" %.1f ms\n", st.ms);
    }
  }
  if (r.checked) write_check_lines(s, r);
  s << "# result: " << outcome_name(r.outcome) << " (exit " << r.exit_code << ")";
  if (!r.error.empty()) s << ": " << r.error;
  s << "\n";
  return s.str();
}

}  // namespace sdpa
