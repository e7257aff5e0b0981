// run_text.cpp: a short table in the nccl-tests manner, the verdict on the last line.
#include "repro/run/run_text.h"

#include <cstdio>
#include <sstream>

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
    << " alloc=" << alloc_kind_name(o.settings.alloc) << " fixes=" << o.fixes.str() << " iters=" << o.iters;
  if (!o.inputs_dir.empty()) s << " inputs=" << o.inputs_dir;
  if (o.inject.kind != FaultSpec::none) s << " inject=" << fault_spec_string(o.inject);
  return s.str();
}

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
  if (!r.memory.empty()) {
    s << "#  calls  gpu_free_mib    rss_mib  live_allocs   live_mib\n";
    for (const auto& m : r.memory) {
      char line[128];
      std::snprintf(line, sizeof line, "  %6lld  %12.1f %10.1f  %11lld %10.1f\n", static_cast<long long>(m.calls),
                    m.gpu_free_mib, m.rss_mib, static_cast<long long>(m.live_allocations), m.live_mib);
      s << line;
    }
    s << "# memory: " << r.soak.summary << "\n";
  }
  if (r.checked) {
    s << "# check (" << (r.result_tensor ? result_tensor_name(*r.result_tensor) : "") << ")";
    s << format(": rel_error %.3e  max_abs_error %.3e  tolerance %.1e", r.comparison.rel_error,
                r.comparison.max_abs_error, r.tolerance)
      << (r.comparison.passed(r.tolerance) ? "  OK\n" : "  FAILED\n");
    if (r.calls_compared > 1) {
      s << "# every call: " << r.calls_compared << " calls compared with call 1 bit for bit: "
        << (r.first_differing_call ? "call " + std::to_string(r.first_differing_call) + " differs  FAILED\n"
                                   : std::string("identical  OK\n"));
    }
  }
  s << "# result: " << outcome_name(r.outcome) << " (exit " << r.exit_code << ")";
  if (!r.error.empty()) s << ": " << r.error;
  s << "\n";
  return s.str();
}

}  // namespace sdpa
