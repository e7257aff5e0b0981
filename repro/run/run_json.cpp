// run_json.cpp
#include "repro/run/run_json.h"

#include <cmath>

#include "fixes/fix_list.h"
#include "math_sdpa/stats.h"
#include "scenarios/hang_classification.h"
#include "scenarios/scenario.h"
#include "version.h"

namespace sdpa {

namespace {
// JSON has no NaN or inf; a non-finite error is written as null.
nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

const nlohmann::json& key_or_null(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null;
  return j.is_object() && j.contains(key) ? j.at(key) : null;
}

template <typename T> std::optional<T> optional_of(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = key_or_null(j, key);
  return v.is_null() ? std::nullopt : std::optional<T>(v.get<T>());
}

WatchdogFindings watchdog_from_json(const nlohmann::json& w) {
  WatchdogFindings f;
  f.kind = optional_of<std::string>(w, "kind").value_or("");
  f.stage = optional_of<std::string>(w, "stage");
  f.classification = optional_of<std::string>(w, "classification");
  for (const auto& c : key_or_null(w, "candidates")) {
    std::string line = "scenario " + std::to_string(c.at("scenario").get<int>()) + " (" + c.at("title").get<std::string>() + ")";
    std::string evidence, against;
    for (const auto& e : c.at("evidence")) evidence += (evidence.empty() ? "" : "; ") + e.get<std::string>();
    for (const auto& e : c.at("against")) against += (against.empty() ? "" : "; ") + e.get<std::string>();
    if (!evidence.empty()) line += ": " + evidence;
    if (!against.empty()) line += "; against: " + against;
    f.candidates.push_back(line);
  }
  f.running_seconds = optional_of<double>(w, "running_seconds").value_or(0.0);
  for (const auto& r : key_or_null(w, "flight_recorder")) {
    WatchdogFindings::FlightRecord record;
    record.stage = optional_of<std::string>(r, "stage").value_or("");
    record.start_s = optional_of<double>(r, "start_s").value_or(0.0);
    record.duration_ms = optional_of<double>(r, "duration_ms");
    record.detail = optional_of<std::string>(r, "detail").value_or("");
    f.flight_recorder.push_back(record);
  }
  for (const auto& line : key_or_null(w, "stage_log_tail")) f.stage_log_tail.push_back(line.get<std::string>());
  const nlohmann::json& snapshot = key_or_null(w, "snapshot");
  if (snapshot.is_object()) {
    f.snapshot_path = optional_of<std::string>(snapshot, "path");
    f.snapshot = snapshot;
  }
  for (const auto& line : key_or_null(w, "evidence")) f.evidence.push_back(line.get<std::string>());
  f.survived_kill = optional_of<bool>(w, "survived_kill").value_or(false);
  for (const auto& line : key_or_null(w, "kernel_stacks")) f.kernel_stacks.push_back(line.get<std::string>());
  return f;
}

}  // namespace

nlohmann::json problem_to_json(const SdpaProblem& p) {
  return {{"batch", p.batch},
          {"q_heads", p.q_heads},
          {"kv_heads", p.kv_heads},
          {"q_len", p.q_len},
          {"kv_len", p.kv_len},
          {"head_dim", p.head_dim},
          {"dtype", dtype_name(p.dtype)},
          {"precision", precision_name(p.precision)},
          {"mask", mask_kind_name(p.mask)},
          {"mask_dims", std::string(p.mask_per_batch ? "B" : "1") + "x" + (p.mask_per_head ? "H" : "1")},
          {"mask_pattern", p.has_mask_input() ? nlohmann::json(mask_pattern_name(p.mask_pattern)) : nlohmann::json(nullptr)},
          {"text_padding", p.mask_pattern == MaskPattern::text_padding
                               ? nlohmann::json{{"tokens", p.text_tokens}, {"valid", p.text_valid}}
                               : nlohmann::json(nullptr)},
          {"dropout", p.dropout_p},
          {"scale", p.softmax_scale()},
          {"seed", p.seed},
          {"gqa", p.gqa()}};
}

nlohmann::json device_to_json(const DeviceInfo& d) {
  return {{"index", d.index},
          {"name", d.name},
          {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
          {"sm_count", d.sm_count},
          {"total_memory_bytes", d.total_memory},
          {"driver_version", d.driver_version},
          {"runtime_version", d.runtime_version},
          {"cublas_version", d.cublas_version},
          {"integrated", d.integrated},
          {"concurrent_managed_access", d.concurrent_managed_access},
          {"pageable_memory_access", d.pageable_memory_access},
          {"pageable_memory_access_uses_host_page_tables", d.pageable_memory_access_uses_host_page_tables},
          {"direct_managed_mem_access_from_host", d.direct_managed_mem_access_from_host},
          {"host_native_atomic_supported", d.host_native_atomic_supported}};
}

DeviceInfo device_from_json(const nlohmann::json& j) {
  DeviceInfo d;
  d.index = j.at("index").get<int>();
  d.name = j.at("name").get<std::string>();
  const std::string cc = j.at("compute_capability").get<std::string>();
  d.cc_major = std::stoi(cc.substr(0, cc.find('.')));
  d.cc_minor = std::stoi(cc.substr(cc.find('.') + 1));
  d.sm_count = j.at("sm_count").get<int>();
  d.total_memory = j.at("total_memory_bytes").get<uint64_t>();
  d.driver_version = j.at("driver_version").get<int>();
  d.runtime_version = j.at("runtime_version").get<int>();
  d.cublas_version = j.at("cublas_version").get<int>();
  d.integrated = j.at("integrated").get<bool>();
  d.concurrent_managed_access = j.at("concurrent_managed_access").get<bool>();
  d.pageable_memory_access = j.at("pageable_memory_access").get<bool>();
  // Absent from results written before these attributes were recorded.
  d.pageable_memory_access_uses_host_page_tables = j.value("pageable_memory_access_uses_host_page_tables", false);
  d.direct_managed_mem_access_from_host = j.value("direct_managed_mem_access_from_host", false);
  d.host_native_atomic_supported = j.value("host_native_atomic_supported", false);
  return d;
}

nlohmann::json context_to_json(const ContextSettings& c) {
  using nlohmann::json;
  const BallastSpec& b = c.ballast;
  return {{"ballast", !b.given() ? json(nullptr)
                                 : json{{"bytes", b.bytes == 0 ? json(nullptr) : json(b.bytes)},
                                        {"fraction", b.fraction == 0 ? json(nullptr) : json(b.fraction)},
                                        {"kind", alloc_kind_name(b.kind)},
                                        {"touch", ballast_touch_name(b.touch)}}},
          {"host_load_threads", c.host_load_threads}};
}

nlohmann::json plan_to_json(const MemoryPlan& plan, const std::vector<PoolUse>& pools, const std::optional<MemoryFacts>& facts) {
  using nlohmann::json;
  json tensors = json::array();
  for (const TensorSpec& t : plan.tensors) {
    tensors.push_back({{"tensor", t.name},
                       {"bytes", t.bytes},
                       {"chunks", t.chunks},
                       {"lifetime", lifetime_name(t.lifetime)},
                       {"per_layer", t.per_layer},
                       {"allocated_in", t.lifetime == Lifetime::run ? json(nullptr) : json(stage_name(t.alloc_stage))}});
  }
  json pool_list = json::array();
  for (const PoolUse& u : pools) {
    pool_list.push_back({{"name", u.name},
                         {"measured", u.measured},
                         {"need_bytes", u.need},
                         {"available_bytes", u.available < 0 ? json(nullptr) : json(u.available)},
                         {"guard_bytes", u.budget < 0 ? json(nullptr) : json(u.budget)},
                         {"page_cache_bytes", u.page_cache < 0 ? json(nullptr) : json(u.page_cache)},
                         {"without_reclaim_bytes", u.without_reclaim < 0 ? json(nullptr) : json(u.without_reclaim)},
                         {"fits_only_by_reclaim", u.fits_only_by_reclaim()},
                         {"fits", u.fits()}});
  }
  return {{"layers", plan.layers},
          {"layers_asked", plan.layers_asked ? json(plan.layers_asked) : json(nullptr)},
          {"layers_fitted_because", plan.layers_asked ? json(plan.fitted_because) : json(nullptr)},
          {"alloc", alloc_kind_name(plan.kind)},
          {"alloc_timing", alloc_timing_name(plan.timing)},
          {"tensors", tensors},
          {"shared_bytes", plan.shared_bytes},
          {"layer_inputs_bytes", plan.layer_run_bytes},
          {"layer_kept_bytes", plan.layer_kept_bytes},
          {"call_peak_bytes", plan.call_peak_bytes},
          {"call_peak_after", stage_name(plan.call_peak_stage)},
          {"path_peak_bytes", plan.path_bytes},
          {"ballast_bytes", plan.context.ballast_bytes},
          {"host_load_host_bytes", plan.context.host_load_host_bytes},
          {"host_load_gpu_bytes", plan.context.host_load_gpu_bytes},
          {"weights_bytes", plan.weights_bytes},
          {"weights_page_cache_bytes", plan.weights_cache_bytes},
          {"total_bytes", plan.total_bytes()},
          {"integrated", facts ? json(facts->integrated) : json(nullptr)},
          {"pools", pool_list}};
}

namespace {

nlohmann::json host_memory_json(const HostMemory& m) {
  const auto bytes = [](int64_t x) { return x < 0 ? nlohmann::json(nullptr) : nlohmann::json(x); };
  return {{"mem_free", bytes(m.free)}, {"mem_available", bytes(m.available)}, {"cached", bytes(m.cached)}, {"rss_file", bytes(m.rss_file)}};
}

}  // namespace

nlohmann::json weights_load_to_json(const WeightsLoad& w) {
  return {{"file", w.file},         {"created", w.created},         {"bytes", w.bytes},
          {"tensors", w.tensors},   {"seconds", w.seconds},         {"gb_per_s", w.gb_per_s()},
          {"io", w.io},             {"pages", w.pages},             {"mapping", w.mapping},
          {"before", host_memory_json(w.before)}, {"after", host_memory_json(w.after)}};
}

nlohmann::json measured_to_json(const MemoryMeasured& m) {
  using nlohmann::json;
  json trace = json::array();
  for (const MemoryTraceSample& t : m.trace) {
    trace.push_back({{"step", t.step},
                     {"layer", t.layer},
                     {"stage", t.stage},
                     {"mem_available", t.mem_available},
                     {"mem_free", t.mem_free},
                     {"cached", t.cached},
                     {"rss_file", t.rss_file},
                     {"gpu_free", t.gpu_free},
                     {"live_bytes", t.live_bytes},
                     {"reserved_bytes", t.reserved_bytes}});
  }
  return {{"peak_live_bytes", m.peak_live_bytes},
          {"peak_reserved_bytes", m.peak_reserved_bytes},
          {"allocations", m.allocations},
          {"gpu_free_at_start", m.gpu_free_at_start},
          {"min_gpu_free", m.min_gpu_free},
          {"gpu_used_peak_bytes", m.gpu_used_peak()},
          {"mem_available_at_start", m.mem_available_at_start},
          {"min_mem_available", m.min_mem_available},
          {"trace_samples", m.trace_samples},
          {"trace", trace}};
}

nlohmann::json uvm_to_json(const UvmCounts& u) {
  using nlohmann::json;
  json ranges = json::array();
  for (const UvmRangeCounts& c : u.ranges) {
    // "other" is every address but the named ones: the path's tensors.
    ranges.push_back({{"range", c.name == "other" ? "path" : c.name},
                      {"bytes_htod", c.bytes_htod},
                      {"bytes_dtoh", c.bytes_dtoh},
                      {"cpu_page_faults", c.cpu_page_faults},
                      {"gpu_page_faults", c.gpu_page_faults}});
  }
  return {{"available", u.available},
          {"unavailable", u.unavailable.empty() ? json(nullptr) : json(u.unavailable)},
          {"not_counted", u.not_counted.empty() ? json(nullptr) : json(u.not_counted)},
          {"bytes_htod", u.bytes_htod},
          {"bytes_dtoh", u.bytes_dtoh},
          {"cpu_page_faults", u.cpu_page_faults},
          {"gpu_page_faults", u.gpu_page_faults},
          {"thrashing", u.thrashing},
          {"throttling", u.throttling},
          {"remote_map", u.remote_map},
          {"records", u.records},
          {"dropped_records", u.dropped_records},
          {"ranges", ranges}};
}

nlohmann::json settings_to_json(const PathSettings& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, value] : settings_fields(s)) j[name] = value;
  return j;
}

nlohmann::json scenario_to_json(int number) {
  const ScenarioInfo& s = scenario_info(number);
  nlohmann::json pre = nlohmann::json::object();
  for (const auto& [name, value] : s.preconditions) pre[name] = value;
  return {{"number", s.number},
          {"title", s.title},
          {"hypothesis", s.hypothesis},
          {"setup", s.setup},
          {"runs", s.runs},
          {"fix", s.fix_number},
          {"hang_signature", s.hang_signature},
          {"preconditions", pre}};
}

nlohmann::json check_cost_to_json(const CheckCost& c) {
  return {{"wall_seconds", c.wall_seconds},
          {"overlapped_seconds", c.overlapped_seconds},
          {"cpu_seconds", c.cpu_seconds},
          {"threads", c.threads},
          {"layers_ahead", c.layers_ahead},
          {"after_run_because", c.after_run_because.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.after_run_because)},
          {"products", reference_products_name(c.products)},
          {"blas", c.blas.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.blas)}};
}

nlohmann::json result_to_json(const RunResult& r) {
  using nlohmann::json;
  const RunOptions& o = r.options;
  json j;
  j["meta"] = {{"format_version", kResultFormatVersion},
               {"harness", "sdpa-repro"},
               {"harness_version", kHarnessVersion},
               {"git_commit", kGitCommit},
               {"command_line", o.argv}};
  j["device"] = r.device ? device_to_json(*r.device) : nlohmann::json(nullptr);
  nlohmann::json fixes = nlohmann::json::array();
  for (int n : o.fixes.numbers()) {
    json parts = json::array();
    for (FixPart p : o.fixes.parts(n)) parts.push_back(fix_part_info(p).name);
    fixes.push_back({{"number", n}, {"name", fix_info(n).name}, {"what", fix_info(n).what}, {"form", o.fixes.form(n)},
                     {"parts", parts}});
  }
  j["scenario"] = scenario_to_json(o.scenario);
  j["config"] = {{"scenario", o.scenario},
                 {"workload", o.workload.empty() ? json(nullptr) : json(o.workload)},
                 {"problem", problem_to_json(o.problem)},
                 {"fix", !o.own_fix ? "off" : std::string(o.fixes.form(scenario_info(o.scenario).fix_number)) == "lean" ? "lean" : "on"},
                 {"fixes", fixes},
                 {"fix_list", o.fixes.str()},
                 {"conditions", settings_to_json(o.conditions)},
                 {"settings", settings_to_json(r.settings)},
                 {"alloc", alloc_kind_name(r.settings.alloc)},
                 {"allow_oversubscription", o.allow_oversubscription},
                 {"iters", o.iters},
                 {"check", o.check},
                 {"log", log_level_name(o.log)},
                 {"log_format", log_format_name(o.log_format)},
                 {"log_extras", o.log_extras},
                 {"stage_timeout_s", o.stage_timeout_s},
                 {"run_timeout_s", o.run_timeout_s},
                 {"no_fork", o.no_fork},
                 {"launch_blocking", o.launch_blocking},
                 {"inject", fault_spec_string(o.inject)},
                 {"inject_armed", o.inject_armed},
                 {"inputs", o.inputs_dir.empty() ? json(nullptr) : json(o.inputs_dir)},
                 {"loop", o.steps ? "steps" : "iters"},
                 {"memory_trace", o.memory_trace},
                 {"uvm_counters", o.uvm_counters},
                 {"context", context_to_json(o.context)}};
  j["caveats"] = o.caveats;
  j["launch_blocking_probe_ms"] = r.launch_blocking_probe_ms ? json(*r.launch_blocking_probe_ms) : json(nullptr);
  j["outcome"] = outcome_name(r.outcome);
  j["exit_code"] = r.exit_code;
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  j["error_stage"] = r.error_stage.empty() ? json(nullptr) : json(r.error_stage);
  j["check"] = r.checked ? json{{"rel_error", finite_or_null(r.comparison.rel_error)},
                                {"max_abs_error", finite_or_null(r.comparison.max_abs_error)},
                                {"tolerance", r.tolerance},
                                {"passed", r.comparison.passed(r.tolerance)},
                                {"calls_compared", r.calls_compared},
                                {"layers_checked", r.layers_checked},
                                {"worst_layer", r.worst_layer == 0 ? json(nullptr) : json(r.worst_layer)},
                                {"first_differing_call", r.first_differing_call == 0 ? json(nullptr) : json(r.first_differing_call)},
                                {"cost", check_cost_to_json(r.check_cost)}}
                         : json(nullptr);
  if (r.checked && !r.gradient_checks.empty()) {
    json gradients = json::array();
    for (const RunResult::GradientCheck& c : r.gradient_checks) {
      gradients.push_back({{"tensor", c.name},
                           {"rel_error", finite_or_null(c.comparison.rel_error)},
                           {"max_abs_error", finite_or_null(c.comparison.max_abs_error)},
                           {"tolerance", r.gradient_tolerance},
                           {"passed", c.comparison.passed(r.gradient_tolerance)},
                           {"worst_layer", c.worst_layer}});
    }
    j["check"]["gradients"] = gradients;
  }
  j["nonfinite_gradients"] = r.nonfinite_gradients;
  j["result_tensor"] = r.result_tensor ? result_tensor_name(*r.result_tensor) : "";
  j["result_stats"] = {{"elements", r.result_elements}, {"l2", r.result_l2}, {"sum", r.result_sum}};
  j["nonfinite_outputs"] = r.nonfinite_outputs;
  j["iterations_done"] = r.iterations_done;
  j["timing"] = {{"call_median_ms", r.call_median_ms},
                 {"call_p10_ms", r.call_p10_ms},
                 {"call_p90_ms", r.call_p90_ms},
                 {"first_call_ms", r.first_call_ms},
                 {"steady_call_median_ms", r.steady_stages.empty() ? json(nullptr) : json(r.steady_call_median_ms)}};
  auto stage_array = [](const std::vector<StageTiming>& timings) {
    json stages = json::array();
    for (const auto& s : timings) {
      stages.push_back({{"stage", s.stage},
                        {"calls", s.calls},
                        {"median_ms", s.median_ms},
                        {"p10_ms", s.p10_ms},
                        {"p90_ms", s.p90_ms},
                        {"clock", s.host_clock ? "host" : "cuda_event"}});
    }
    return stages;
  };
  j["stages"] = stage_array(r.stages);                        // every call
  j["stages_first_call"] = stage_array(r.first_call_stages);  // the first (cold) call
  j["stages_steady"] = stage_array(r.steady_stages);          // calls 2..N
  json gemms = json::array();
  for (const auto& g : r.gemms) {
    gemms.push_back({{"name", g.name},     {"function", g.function}, {"transa", std::string(1, g.transa)},
                     {"transb", std::string(1, g.transb)}, {"m", g.m}, {"n", g.n}, {"k", g.k},
                     {"lda", g.lda},       {"ldb", g.ldb},           {"ldc", g.ldc},
                     {"stride_a", g.stride_a}, {"stride_b", g.stride_b}, {"stride_c", g.stride_c},
                     {"batch", g.batch},   {"type", dtype_name(g.ab_type)}, {"compute", "fp32"}});
  }
  j["gemms"] = gemms;
  json allocs = json::array();
  for (const auto& a : r.allocations) {
    allocs.push_back({{"tensor", a.what}, {"bytes", a.bytes}, {"kind", alloc_kind_name(a.kind)}});
  }
  j["allocations"] = allocs;
  json memory = json::array();
  for (const auto& m : r.memory) {
    memory.push_back({{"calls", m.calls},
                      {"gpu_free_mib", m.gpu_free_mib},
                      {"rss_mib", m.rss_mib},
                      {"live_allocations", m.live_allocations},
                      {"live_mib", m.live_mib}});
  }
  j["memory"] = {{"samples", memory},
                 {"flat", r.soak.flat},
                 {"gpu_free_drift_mib", r.soak.gpu_free_drift_mib},
                 {"rss_drift_mib", r.soak.rss_drift_mib},
                 {"allocation_drift", r.soak.allocation_drift},
                 {"summary", r.soak.summary}};
  json stall_records = json::array();
  for (const StallRecord& s : r.stalls.records) stall_records.push_back({{"call", s.call}, {"stage", s.stage}, {"ms", s.ms}});
  j["stalls"] = {{"threshold_s", r.stalls.threshold_s},
                 {"calls", r.stalls.calls},
                 {"calls_stalled", r.stalls.calls_stalled},
                 {"longest", r.stalls.any() ? json{{"call", r.stalls.longest.call},
                                                   {"stage", r.stalls.longest.stage},
                                                   {"ms", r.stalls.longest.ms}}
                                            : json(nullptr)},
                 {"records", stall_records},
                 {"summary", r.stalls.any() ? json(r.stalls.summary()) : json(nullptr)}};
  j["memory_plan"] = r.plan ? plan_to_json(*r.plan, r.pools, r.memory_facts) : json(nullptr);
  j["memory_measured"] = r.measured ? measured_to_json(*r.measured) : json(nullptr);
  j["steps"] = r.step_ms.empty() ? json(nullptr)
                                 : json{{"count", r.iterations_done},
                                        {"first_ms", r.step_ms.front()},
                                        {"median_ms", median(r.step_ms)},
                                        {"p10_ms", percentile(r.step_ms, 10)},
                                        {"p90_ms", percentile(r.step_ms, 90)},
                                        {"last_ms", r.step_ms.back()},
                                        {"clock", "host"}};
  j["uvm"] = r.uvm ? uvm_to_json(*r.uvm) : json(nullptr);
  j["context_load"] = {{"ballast_bytes", r.context_load.ballast_bytes},
                       {"ballast_host_passes", r.context_load.ballast_host_passes},
                       {"ballast_gpu_passes", r.context_load.ballast_gpu_passes},
                       {"host_load_iterations", r.context_load.host_load_iterations}};
  j["weights_load"] = r.weights_load ? weights_load_to_json(*r.weights_load) : json(nullptr);
  j["wall_seconds"] = r.wall_seconds;
  j["cpu_seconds"] = r.cpu_seconds ? json(*r.cpu_seconds) : json(nullptr);
  j["watchdog"] = nullptr;
  if (r.watchdog) {
    const SupervisedOutcome& w = *r.watchdog;
    Stage stage;
    const bool known = parse_stage(w.stage, stage);
    const HangClassification classification =
        known ? classify_hang(stage, o.problem, r.settings, w.snapshot ? hang_evidence(w.snapshot->summary) : HangEvidence{})
              : HangClassification{};
    json candidates = json::array();
    for (const HangCandidate& c : classification.candidates) {
      candidates.push_back({{"scenario", c.scenario}, {"title", c.title}, {"evidence", c.evidence}, {"against", c.against}});
    }
    json records = json::array();
    for (const auto& f : w.records) {
      records.push_back({{"stage", f.stage},
                         {"step", f.step == 0 ? json(nullptr) : json(f.step)},
                         {"layer", f.layer == 0 ? json(nullptr) : json(f.layer)},
                         {"start_s", (f.start_us - w.start_us) / 1e6},
                         {"duration_ms", f.end_us < 0 ? json(nullptr) : json((f.end_us - f.start_us) / 1e3)},
                         {"running", f.end_us < 0},
                         {"detail", f.detail},
                         {"summary", f.summary}});
    }
    j["watchdog"] = {{"kind", w.kind == SupervisedOutcome::hang ? "hang" : w.kind == SupervisedOutcome::crashed ? "crash" : "bad_output"},
                     {"stage", w.stage.empty() ? json(nullptr) : json(w.stage)},
                     {"position", w.position.layers == 0 ? json(nullptr)
                                                         : json{{"step", w.position.step},
                                                                {"layer", w.position.layer},
                                                                {"layers", w.position.layers}}},
                     {"classification", known ? json(classification.summary()) : json("unclassified")},
                     {"scenario", known ? classification.scenario() : 0},
                     {"candidates", candidates},
                     {"evidence_used", classification.evidence_used},
                     {"whole_run_timeout", w.expiry.whole_run},
                     {"running_seconds", w.expiry.running_s},
                     {"signal", w.signal},
                     {"message", w.message},
                     {"flight_recorder", records},
                     {"stage_log_tail", w.log_tail}};
    j["watchdog"].update(hang_actions_json(w));
  }
  return j;
}

std::optional<std::string> RunRecord::failing_stage() const { return watchdog ? watchdog->stage : error_stage; }

RunRecord read_run_record(const nlohmann::json& j) {
  using nlohmann::json;
  RunRecord r;
  r.outcome = parse_outcome(j.at("outcome").get<std::string>());
  r.exit_code = optional_of<int>(j, "exit_code");
  r.error = optional_of<std::string>(j, "error");
  r.error_stage = optional_of<std::string>(j, "error_stage");
  r.alloc = optional_of<std::string>(key_or_null(j, "config"), "alloc").value_or("");
  const json& check = key_or_null(j, "check");
  r.rel_error = optional_of<double>(check, "rel_error");
  r.tolerance = optional_of<double>(check, "tolerance");
  const json& done = key_or_null(j, "iterations_done");
  r.iterations_done = done.is_number() ? done.get<int64_t>() : 0;
  const json& timing = key_or_null(j, "timing");
  if (timing.is_object()) r.call_median_ms = timing.at("call_median_ms").get<double>();
  auto medians = [&](const char* key, std::vector<StageMedian>& into) {
    const json& stages = key_or_null(j, key);
    if (!stages.is_array()) return;
    for (const auto& s : stages) into.push_back({s.at("stage").get<std::string>(), s.at("median_ms").get<double>()});
  };
  medians("stages", r.stages);
  medians("stages_first_call", r.first_call_stages);
  medians("stages_steady", r.steady_stages);
  if (timing.is_object()) {
    r.first_call_ms = optional_of<double>(timing, "first_call_ms");
    r.steady_call_median_ms = optional_of<double>(timing, "steady_call_median_ms");
  }
  const json& device = key_or_null(j, "device");
  r.device = device.is_object() ? device : json(nullptr);
  const json& watchdog = key_or_null(j, "watchdog");
  if (watchdog.is_object()) r.watchdog = watchdog_from_json(watchdog);
  const json& stalls = key_or_null(j, "stalls");
  if (stalls.is_object() && stalls.at("longest").is_object()) {
    auto record = [](const json& s) {
      return StallRecord{s.at("call").get<int>(), s.at("stage").get<std::string>(), s.at("ms").get<double>()};
    };
    Stalls& s = r.stalls.emplace();
    s.threshold_s = stalls.at("threshold_s").get<double>();
    s.calls = stalls.at("calls").get<int>();
    s.calls_stalled = stalls.at("calls_stalled").get<int>();
    s.longest = record(stalls.at("longest"));
    for (const json& one : stalls.at("records")) s.records.push_back(record(one));
  }
  return r;
}

}  // namespace sdpa
