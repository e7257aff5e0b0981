// plan_json.cpp: the call plan as JSON (plan_json.h).
#include "repro/run/plan_json.h"

#include <type_traits>

#include "fixes/fix.h"
#include "math_sdpa/memory_plan.h"
#include "math_sdpa/weights_file.h"
#include "repro/cli/tables.h"
#include "repro/run/run_json.h"

namespace sdpa {

namespace {

using nlohmann::json;

json value(const TensorRef& t) { return {{"tensor", tensor_name(t.id)}, {"chunk", t.chunk}, {"byte", t.byte}}; }
json value(DType t) { return dtype_name(t); }
json value(Stage s) { return stage_name(s); }
json value(PathStream s) { return path_stream_name(s); }
json value(const HeadStrides& s) { return {{"batch", s.batch}, {"head", s.head}, {"row", s.row}}; }
json value(const PlannedRows& r) { return {{"rows", r.rows}, {"row0", r.row0}, {"L", r.L}, {"S", r.S}}; }
json value(const std::string& s) { return s; }
json value(const std::vector<TensorId>& ids) {
  json out = json::array();
  for (TensorId id : ids) out.push_back(tensor_name(id));
  return out;
}
json value(const std::vector<ReducedOperand>& operands) {
  json out = json::array();
  for (const ReducedOperand& o : operands) {
    out.push_back({{"name", o.name}, {"tensor", tensor_name(o.id)}, {"chunk", o.chunk}, {"bytes", o.bytes}});
  }
  return out;
}
json value(const GemmCall& g) {
  return {{"name", g.name},       {"function", g.function}, {"pointer_array", g.pointer_array},
          {"transa", std::string(1, g.transa)}, {"transb", std::string(1, g.transb)},
          {"m", g.m},             {"n", g.n},               {"k", g.k},
          {"lda", g.lda},         {"ldb", g.ldb},           {"ldc", g.ldc},
          {"stride_a", g.stride_a}, {"stride_b", g.stride_b}, {"stride_c", g.stride_c},
          {"batch", g.batch},     {"ab_type", dtype_name(g.ab_type)}, {"c_type", dtype_name(g.c_type)},
          {"alpha", g.alpha},     {"beta", g.beta}};
}
template <typename T> std::enable_if_t<std::is_arithmetic_v<T>, json> value(T x) { return x; }
template <typename T, size_t N> json value(const T (&items)[N]) {
  json out = json::array();
  for (const T& x : items) out.push_back(value(x));
  return out;
}

json op_to_json(const PlanOp& op) {
  json j = {{"op", plan_op_name(op)}};
  std::visit([&](const auto& o) { for_each_field(o, [&](const char* name, const auto& v) { j[name] = value(v); }); }, op);
  return j;
}

json step_to_json(const PlanStep& s) {
  json j;
  if (s.staged) {
    j["stage"] = stage_name(s.stage);
    j["detail"] = s.detail;
    j["stream"] = path_stream_name(s.stream);
  }
  j["ops"] = json::array();
  for (const PlanOp& op : s.ops) j["ops"].push_back(op_to_json(op));
  return j;
}

json steps_to_json(const std::vector<PlanStep>& steps) {
  json out = json::array();
  for (const PlanStep& s : steps) {
    if (!s.ops.empty()) out.push_back(step_to_json(s));  // a stage with nothing to do in this configuration is not one
  }
  return out;
}

}  // namespace

json call_plan_to_json(const CallPlan& plan) {
  auto one = [](const PlanStep& s) { return steps_to_json({s}); };
  return {{"chunks", plan.chunks},
          {"chunk_rows", plan.chunk_rows},
          {"entry", one(plan.entry)},
          {"forward_gpu", steps_to_json(plan.forward_gpu)},
          {"free_call", one(plan.free_call)},
          {"stream_sync", one(plan.stream_sync)},
          {"backward_gpu", steps_to_json(plan.backward_gpu)},
          {"backward_sync", one(plan.backward_sync)},
          {"free_step", one(plan.free_step)}};
}

json run_plan_to_json(const RunOptions& o) {
  const PathSettings& s = o.settings;
  const std::vector<TensorSpec> tensors = path_tensors(o.problem, s);
  std::vector<PathHook*> hooks;
  const auto fixes = make_fixes(o.fixes);
  for (const auto& fix : fixes) hooks.push_back(fix.get());
  json table = json::array();
  for (const TensorSpec& t : tensors) {
    table.push_back({{"tensor", t.name},
                     {"bytes", t.bytes},
                     {"chunks", t.chunks},
                     {"lifetime", lifetime_name(t.lifetime)},
                     {"per_layer", t.per_layer},
                     {"alloc_stage", stage_name(t.alloc_stage)},
                     {"free_stage", stage_name(t.free_stage)},
                     {"why", t.why}});
  }
  return {{"meta", {{"format", "sdpa-repro call plan"}, {"version", kPlanFormatVersion}}},
          {"scenario", o.scenario},
          {"fixes", o.fixes.str()},
          {"problem", problem_to_json(o.problem)},
          {"settings", settings_to_json(s)},
          {"context", context_to_json(o.context)},
          {"run", {{"layers", s.layers}, {"iters", o.iters}, {"steps", o.steps}, {"backward", s.backward}, {"graph", s.graph},
                   {"retain", retain_name(s.retain)}, {"alloc_timing", alloc_timing_name(s.alloc_timing)}}},
          // The model's weights the run loads before its first call (bytes 0: none), and from which file.
          {"weights", {{"bytes", s.weights.bytes},
                       {"file", s.weights.bytes > 0 ? (s.weights.file.empty() ? default_weights_file() : s.weights.file) : ""},
                       {"io", weights_io_name(s.weights.io)},
                       {"drop_pages", s.weights.drop_pages},
                       {"mapping", weights_mapping_name(s.weights.mapping)}}},
          {"tensors", table},
          {"calls", call_plan_to_json(plan_calls(o.problem, s, tensors, hooks))},
          // What each stage is and writes (`repro help stages --json`): a plan carries the table its
          // steps name, so that a reader of the plan (scripts/torch_stages.py) needs nothing else.
          {"stage_table", stages_json()}};
}

}  // namespace sdpa
