// generator.cpp: the reproducer printed from the call plan (generator.h).
//
// The fix-off and fix-on runs' options are planned exactly as the harness plans them
// (plan_calls with the runs' own fixes as hooks, path_tensors, the settings after the scenario's
// preconditions and the fixes), and each step of each call becomes a line of CUDA that calls the
// harness's own launcher, cuBLAS call or allocator with the step's operands. The template
// (template.cu.in) holds the frame those lines run in.
#include "repro/report/reproducer/generator.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "fixes/fix.h"
#include "fixes/fix_list.h"
#include "math_sdpa/call_plan.h"
#include "math_sdpa/errors.h"
#include "repro/common/text.h"
#include "repro/report/reproducer/embedded_sources.h"
#include "scenarios/hang_classification.h"
#include "scenarios/scenario.h"
#include "version.h"

namespace sdpa {

namespace {

constexpr size_t kCommentWidth = 100;
constexpr const char* kTemplatePath = "repro/report/reproducer/template.cu.in";

// `text` as // comment lines of at most kCommentWidth columns, the first starting with `lead`,
// the others indented by `indent`.
std::string comment(const std::string& lead, const std::string& text, const std::string& indent = "") {
  std::istringstream words(text);
  std::string word, out, line = "// " + lead;
  bool line_has_word = false;
  while (words >> word) {
    if (line_has_word && line.size() + 1 + word.size() > kCommentWidth) {
      out += line + "\n";
      line = "// " + indent;
      line_has_word = false;
    }
    if (line_has_word || (!line.empty() && line.back() != ' ')) line += " ";
    line += word;
    line_has_word = true;
  }
  return out + line + "\n";
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// ---------------------------------------------------------------- values as C++ literals
std::string lit(bool b) { return b ? "true" : "false"; }
std::string lit(int64_t v) { return std::to_string(v) + "LL"; }
std::string lit(int v) { return std::to_string(v); }
std::string lit(uint64_t v) { return std::to_string(v) + "ULL"; }
std::string lit(double v) { return format_number("%a", v); }  // exact: hexadecimal floating point
std::string lit(float v) { return format_number("%a", static_cast<double>(v)) + "f"; }
std::string lit(DType t) { return std::string("DType::") + dtype_name(t); }
std::string lit(Stage s) { return std::string("Stage::") + stage_name(s); }
std::string lit(PathStream s) { return std::string("PathStream::") + path_stream_name(s); }
std::string lit(TensorId id) {
  for (int i = 0; i < kTensorCount; ++i) {
    // The enumerator's own name: the table's (tensor_name) differs for two ("attn", "qk_pointer_arrays").
    static const char* const kEnumerators[] = {
        "query",          "key",           "value",          "mask_input",       "additive_mask",     "query_acc",
        "key_acc",        "value_acc",     "query_scaled",   "key_expanded",     "value_expanded",    "key_scaled",
        "key_transposed", "qk_pointers",   "scores",         "probs",            "softmax_neginf",    "dropout_mask",
        "attn_dropped",   "out_acc",       "output",         "grad_output",      "grad_output_acc",   "grad_attn_dropped",
        "grad_value_expanded", "grad_probs", "grad_scores",  "grad_query_scaled", "grad_key_scaled",  "grad_query",
        "grad_key",       "grad_value",    "cublas_workspace", "value_stats",    "touch_sink"};
    static_assert(sizeof(kEnumerators) / sizeof(kEnumerators[0]) == kTensorCount, "one enumerator name each");
    if (i == static_cast<int>(id)) return std::string("TensorId::") + kEnumerators[i];
  }
  throw std::logic_error("reproducer: a tensor id out of range");
}
std::string lit(const TensorRef& t) { return "{" + lit(t.id) + ", " + lit(t.chunk) + ", " + lit(t.byte) + "}"; }
std::string tensor(const TensorRef& t) { return "p.t(" + lit(t) + ")"; }
std::string lit(const HeadStrides& s) { return "HeadStrides{" + lit(s.batch) + ", " + lit(s.head) + ", " + lit(s.row) + "}"; }
std::string lit(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) out += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
  return out + "\"";
}
std::string lit(const std::vector<ReducedOperand>& operands) {
  std::string out = "{";
  for (const ReducedOperand& o : operands) {
    out += std::string(out.size() > 1 ? ", " : "") + "{" + lit(std::string(o.name)) + ", " + lit(o.id) + ", " + lit(o.chunk) +
           ", " + lit(o.bytes) + "}";
  }
  return out + "}";
}
std::string lit(const std::vector<TensorId>& ids) {
  std::string out = "{";
  for (TensorId id : ids) out += std::string(out.size() > 1 ? ", " : "") + lit(id);
  return out + "}";
}
std::string lit(const GemmCall& g) {
  return "GemmCall{" + lit(g.name) + ", " + lit(g.function) + ", " + lit(g.pointer_array) + ", '" + g.transa + "', '" + g.transb +
         "', " + lit(g.m) + ", " + lit(g.n) + ", " + lit(g.k) + ", " + lit(g.lda) + ", " + lit(g.ldb) + ", " + lit(g.ldc) + ", " +
         std::to_string(g.stride_a) + "LL, " + std::to_string(g.stride_b) + "LL, " + std::to_string(g.stride_c) + "LL, " +
         lit(g.batch) + ", " + lit(g.ab_type) + ", " + lit(g.c_type) + ", " + lit(g.alpha) + ", " + lit(g.beta) + ", 0, \"\"}";
}

// ---------------------------------------------------------------- the plan as CUDA
// One operation as the statement(s) that carry it out: the launcher MathSdpa::run_op calls (and
// with the same arguments), or the frame's Path for the memory and the conditions.
struct OpPrinter {
  std::string& out;
  const std::string indent;
  const std::string stream;  // the step's: "p.s(PathStream::path)"
  void line(const std::string& s) const { out += indent + s + "\n"; }
  void operator()(const AllocateOp& o) const {
    std::string ids = lit(o.tensors);
    line("p.allocate(" + lit(o.chunk) + ", " + ids + ");");
  }
  void operator()(const FreeOp& o) const { line("p.release(" + lit(o.stage) + ", " + lit(o.tensors) + ");"); }
  void operator()(const EntrySyncOp& o) const { line(std::string("p.entry_sync(") + lit(o.storm) + ");"); }
  void operator()(const SyncAllStreamsOp&) const { line("p.sync_streams();"); }
  void operator()(const HookSyncOp& o) const {
    line(o.stream == PathStream::none ? "CUDA_CHECK(cudaDeviceSynchronize());"
                                      : "CUDA_CHECK(cudaStreamSynchronize(p.s(" + lit(o.stream) + ")));");
  }
  void operator()(const PrefetchOp& o) const { line("p.prefetch(" + lit(o.tensor) + ", " + lit(o.bytes) + ", " + lit(o.stream) + ");"); }
  void operator()(const NoteOp& o) const { line("// " + o.text); }
  void operator()(const OrderGemmOp&) const { line("p.order_gemm();"); }
  void operator()(const OrderPathOp&) const { line("p.order_path();"); }
  void operator()(const BuildMaskOp& o) const {
    line("launch_build_additive_mask(" + (o.causal ? std::string("nullptr") : "static_cast<const uint8_t*>(" + tensor(o.bool_mask) + ")") +
         ", " + tensor(o.dst) + ", " + lit(o.type) + ", " + lit(o.slices) + ", " + lit(o.L) + ", " + lit(o.S) + ", " + stream + ");");
  }
  void operator()(const ConvertOp& o) const {
    line("launch_convert_scale(" + tensor(o.src) + ", " + lit(o.src_type) + ", " + tensor(o.dst) + ", " + lit(o.dst_type) + ", " +
         lit(o.n) + ", " + lit(o.factor) + ", " + stream + ");");
  }
  void operator()(const UpcastOp& o) const {
    line("const ConvertJob jobs[] = {{" + tensor(o.src[0]) + ", " + tensor(o.dst[0]) + ", " + lit(o.n[0]) + "},");
    line("                           {" + tensor(o.src[1]) + ", " + tensor(o.dst[1]) + ", " + lit(o.n[1]) + "},");
    line("                           {" + tensor(o.src[2]) + ", " + tensor(o.dst[2]) + ", " + lit(o.n[2]) + "}};");
    line("launch_convert_scale_batch(jobs, 3, " + lit(o.src_type) + ", " + lit(o.dst_type) + ", 1.0f, " + stream + ");");
  }
  void operator()(const RepeatHeadsOp& o) const {
    line("launch_repeat_heads(" + tensor(o.src) + ", " + lit(o.strides) + ", " + tensor(o.dst) + ", " + lit(o.type) + ", " +
         lit(o.batch) + ", " + lit(o.kv_heads) + ", " + lit(o.group) + ", " + lit(o.len) + ", " + lit(o.dim) + ", " + stream + ");");
  }
  void operator()(const TransposeHeadsOp& o) const {
    line("launch_transpose_heads(" + tensor(o.src) + ", " + lit(o.strides) + ", " + tensor(o.dst) + ", " + lit(o.type) + ", " +
         lit(o.batch) + ", " + lit(o.heads) + ", " + lit(o.len) + ", " + lit(o.dim) + ", " + stream + ");");
  }
  void operator()(const PointerArraysOp& o) const { line("p.pointer_arrays(" + tensor(o.kt) + ", " + lit(o.kt_strides) + ");"); }
  void operator()(const GemmOp& o) const {
    line("p.bind(p.s(" + lit(o.stream) + "));");
    line("static const GemmCall call = " + lit(o.call) + ";");
    const std::string a = "static_cast<const char*>(" + tensor(o.a) + ")", b = "static_cast<const char*>(" + tensor(o.b) + ")",
                      c = "static_cast<char*>(" + tensor(o.c) + ")";
    if (o.calls == 1) {
      line("run_gemm(p.cublas, call, " + a + ", " + b + ", " + c + ");");
    } else {
      line("for (int64_t i = 0; i < " + lit(o.calls) + "; ++i) {");
      line("  run_gemm(p.cublas, call, " + a + " + i * " + lit(o.step_a) + ", " + b + " + i * " + lit(o.step_b) + ", " + c +
           " + i * " + lit(o.step_c) + ");");
      line("}");
    }
  }
  void operator()(const AddMaskOp& o) const {
    line("launch_add_mask(" + tensor(o.scores) + ", " + lit(o.scores_type) + ", " + tensor(o.mask) + ", " + lit(o.mask_type) + ", " +
         lit(o.B) + ", " + lit(o.H) + ", " + lit(o.L) + ", " + lit(o.S) + ", " + lit(o.per_batch) + ", " + lit(o.per_head) +
         ", " + stream + ", " + lit(o.row0) + ", " + lit(o.rows) + ");");
  }
  void operator()(const SoftmaxOp& o) const {
    line("launch_safe_softmax(" + tensor(o.in) + ", " + tensor(o.out) + ", " + lit(o.type) + ", " + lit(o.rows) + ", " +
         lit(o.cols) + ", " + stream + ");");
  }
  void operator()(const DropoutOp& o) const {
    line("launch_dropout(" + tensor(o.in) + ", " + tensor(o.out) + ", static_cast<uint8_t*>(" + tensor(o.mask) + "), " +
         lit(o.type) + ", " + lit(o.n) + ", " + lit(o.seed) + ", layer_problem(p.cfg.problem, p.layer).dropout_offset, " +
         lit(o.keep) + ", " + stream + ", RowChunk{" + lit(o.rows.rows) + ", " + lit(o.rows.row0) + ", " + lit(o.rows.L) + ", " +
         lit(o.rows.S) + "});");
  }
  void operator()(const DropoutBackwardOp& o) const {
    line("launch_dropout_backward(" + tensor(o.grad) + ", static_cast<const uint8_t*>(" + tensor(o.mask) + "), " + tensor(o.out) +
         ", " + lit(o.type) + ", " + lit(o.n) + ", " + lit(o.keep) + ", " + stream + ");");
  }
  void operator()(const SoftmaxBackwardOp& o) const {
    line("launch_softmax_backward(" + tensor(o.grad) + ", " + tensor(o.probs) + ", " + tensor(o.out) + ", " + lit(o.type) + ", " +
         lit(o.rows) + ", " + lit(o.cols) + ", " + stream + ");");
  }
  void operator()(const SumHeadGroupsOp& o) const {
    line("launch_sum_head_groups(" + tensor(o.src) + ", " + lit(o.src_type) + ", " + tensor(o.dst) + ", " + lit(o.dst_type) + ", " +
         lit(o.heads) + ", " + lit(o.group) + ", " + lit(o.elems) + ", " + lit(o.factor) + ", " + stream + ");");
  }
  void operator()(const HostAccessOp& o) const { line("p.host_access(" + lit(o.operands) + ");"); }
  void operator()(const SoftmaxLaunchedOp&) const { line("p.softmax_launched();"); }
  void operator()(const FinishHostAccessOp&) const { line("p.finish_host_access();"); }
  void operator()(const ReleaseHostAdviceOp& o) const {
    line("p.release_advice(" + lit(o.operands) + ", " + lit(o.unless_touching) + ");");
  }
};

// A run's injected fault where its conditions hold (fault_spec.h): the name of its FaultSpec in
// the program and its stage, whose every step injects it first, as the harness's FaultInjector does.
struct FaultAt {
  std::string name;
  Stage stage;
};

// A step: a stage's operations inside p.stage (named for the watchdog, its detail as a comment),
// or the operations between stages as they are.
void print_step(std::string& out, const PlanStep& step, const std::optional<FaultAt>& fault) {
  const std::string stream = "p.s(" + lit(step.stream) + ")";
  if (!step.staged) {
    for (const PlanOp& op : step.ops) std::visit(OpPrinter{out, "  ", stream}, op);
    return;
  }
  if (step.ops.empty()) return;
  // The detail as the stage log shows it, the streams by their role (the log has their handles).
  std::string detail = step.detail;
  for (PathStream s : {PathStream::path, PathStream::gemm}) {
    const std::string placeholder = stream_placeholder(s);
    for (size_t at; (at = detail.find(placeholder)) != std::string::npos;) {
      detail.replace(at, placeholder.size(), std::string("the ") + path_stream_name(s) + " stream");
    }
  }
  for (const std::string& line : split_lines(comment(std::string(stage_name(step.stage)) + (detail.empty() ? "" : ":"), detail, "    "))) {
    out += "  " + line + "\n";
  }
  out += "  p.stage(" + lit(std::string(stage_name(step.stage))) + ", " + lit(is_gpu_stage(step.stage)) + ", " + lit(step.stream) +
         ", [&] {\n";
  if (fault && fault->stage == step.stage) {
    out += "    p.inject(" + fault->name + ", " + lit(is_memory_stage(step.stage)) + ", " + lit(step.stream) + ");\n";
  }
  for (const PlanOp& op : step.ops) std::visit(OpPrinter{out, "    ", stream}, op);
  out += "  });\n";
}

std::string function(const std::string& name, const std::vector<PlanStep>& steps, const std::optional<FaultAt>& fault) {
  std::string out = "static void " + name + "(Path& p) {\n";
  for (const PlanStep& s : steps) print_step(out, s, fault);
  if (steps.empty() || out.back() == '{' || out.find('\n') == out.size() - 1) out += "  (void)p;\n";
  return out + "}\n";
}

const char* advice_literal(Advice a) {
  switch (a) {
    case Advice::preferred_gpu: return "{cudaMemAdviseSetPreferredLocation, false}";
    case Advice::preferred_cpu: return "{cudaMemAdviseSetPreferredLocation, true}";
    case Advice::accessed_by_gpu: return "{cudaMemAdviseSetAccessedBy, false}";
    case Advice::accessed_by_cpu: return "{cudaMemAdviseSetAccessedBy, true}";
    case Advice::read_mostly: return "{cudaMemAdviseSetReadMostly, false}";
  }
  return "{}";
}

// The calls and the configuration of one of the two runs, `tag` "off" or "on".
std::string print_run(const RunOptions& o, const std::string& tag) {
  const SdpaProblem& p = o.problem;
  const PathSettings& s = o.settings;
  const std::vector<TensorSpec> tensors = path_tensors(p, s);
  const auto fixes = make_fixes(o.fixes);
  std::vector<PathHook*> hooks;
  for (const auto& f : fixes) hooks.push_back(f.get());
  const CallPlan plan = plan_calls(p, s, tensors, hooks);
  std::string out = "// ---- fix " + tag + ": " + (o.fixes.empty() ? std::string("no fix") : "--fixes " + o.fixes.str()) + "\n";
  std::optional<FaultAt> fault;
  if (o.inject.kind != FaultSpec::none && o.inject_armed) {
    const FaultSpec& f = o.inject;
    fault = FaultAt{"kFault" + std::string(tag == "on" ? "On" : "Off"), f.stage};
    out += "// --inject " + fault_spec_string(f) + "\nstatic const FaultSpec " + fault->name + " = [] {\n  FaultSpec f;\n";
    out += std::string("  f.kind = FaultSpec::") + (f.kind == FaultSpec::hang ? "hang" : f.kind == FaultSpec::slow ? "slow" : "error") +
           ", f.stage = " + lit(f.stage) + ", f.slow_ms = " + lit(f.slow_ms) + ", f.only_layer = " + lit(f.only_layer) +
           ", f.only_step = " + lit(f.only_step) + ";\n  return f;\n}();\n";
  }
  out += function("entry_" + tag, {plan.entry}, fault);
  out += function("forward_gpu_" + tag, plan.forward_gpu, fault);
  out += function("free_call_" + tag, {plan.free_call}, fault);
  out += function("stream_sync_" + tag, {plan.stream_sync}, fault);
  out += function("backward_gpu_" + tag, plan.backward_gpu, fault);
  out += function("backward_sync_" + tag, s.graph ? std::vector<PlanStep>{} : std::vector<PlanStep>{plan.backward_sync}, fault);
  out += function("free_step_" + tag, {plan.free_step}, fault);
  const AllocatorOptions a = allocator_options(s, o.allow_oversubscription);
  const bool upfront_arrays = s.qk_gemm_api == GemmApi::batched && s.layers == 1 && s.alloc_timing == AllocTiming::upfront;
  const bool kt_copy = stage_runs(Stage::kt_contiguous, p, s);
  std::string advice;
  for (Advice x : s.advice) advice += std::string(advice.empty() ? "" : ", ") + advice_literal(x);
  std::string rows;
  for (const TensorSpec& t : tensors) {
    rows += "       {" + lit(t.id) + ", " + lit(std::string(t.name)) + ", " + lit(t.bytes) + ", " + lit(t.chunks) + ", Lifetime::" +
            lifetime_name(t.lifetime) + ", " + lit(t.per_layer) + ", " + lit(in_device_scores_memory(t.id, p, s)) + "},\n";
  }
  const auto e = [](const char* type, const char* name) { return std::string(type) + "::" + name; };
  out += "static const Config kFix" + std::string(tag == "on" ? "On" : "Off") + " = {\n";
  out += "    " + lit(std::string("fix ") + tag) + ",\n";
  out += "    /*problem*/ [] {\n      SdpaProblem q;\n";
  out += "      q.batch = " + lit(p.batch) + ", q.q_heads = " + lit(p.q_heads) + ", q.kv_heads = " + lit(p.kv_heads) +
         ", q.q_len = " + lit(p.q_len) + ", q.kv_len = " + lit(p.kv_len) + ", q.head_dim = " + lit(p.head_dim) + ";\n";
  out += "      q.dtype = " + lit(p.dtype) + ", q.precision = Precision::" + precision_name(p.precision) +
         ", q.mask = MaskKind::" + std::string(p.mask == MaskKind::boolean ? "boolean" : p.mask == MaskKind::additive ? "additive"
                                                                                  : p.mask == MaskKind::causal   ? "causal"
                                                                                                                 : "none") +
         ";\n";
  out += "      q.mask_per_batch = " + lit(p.mask_per_batch) + ", q.mask_per_head = " + lit(p.mask_per_head) +
         ", q.mask_pattern = MaskPattern::" + mask_pattern_name(p.mask_pattern) + ", q.text_tokens = " + lit(p.text_tokens) +
         ", q.text_valid = " + lit(p.text_valid) + ";\n";
  out += "      q.dropout_p = " + lit(p.dropout_p) + ", q.seed = " + lit(p.seed) + ", q.dropout_offset = " + lit(p.dropout_offset) +
         ";\n";
  if (p.scale) out += "      q.scale = " + lit(*p.scale) + ";\n";
  out += "      return q;\n    }(),\n";
  out += "    " + e("AllocKind", alloc_kind_name(s.alloc)) + ", AllocatorOptions{" + lit(a.allow_oversubscription) + ", " +
         (a.async_pool == AsyncPool::stream ? "AsyncPool::stream" : "AsyncPool::private_pool") + ", " + lit(a.guard_fraction) + ", " +
         lit(a.caching) + "},\n";
  out += "    " + e("StreamMode", s.stream == StreamMode::legacy ? "legacy" : s.stream == StreamMode::non_blocking ? "non_blocking" : "per_thread") +
         ", " + e("GemmStream", gemm_stream_name(s.qk_gemm_stream)) + ", " +
         e("GemmOrder", s.qk_gemm_order == GemmOrder::event ? "event" : "none") + ",\n";
  out += "    /*touch_streams*/ " + lit(s.entry_touch_streams) + ", /*host_touch*/ " + lit(s.entry_host_touch) + ", " +
         e("ScoresToHost", scores_to_host_name(s.scores_to_host)) + ", /*scores_during*/ " +
         lit(s.scores_host_phase == ScoresHostPhase::during && s.scores_to_host != ScoresToHost::none) + ",\n";
  out += "    /*advice*/ {" + advice + "},\n";
  out += "    /*graph*/ " + lit(s.graph) + ", /*backward*/ " + lit(s.backward) + ", /*per_call*/ " +
         lit(s.alloc_timing == AllocTiming::per_call) + ",\n    /*key_strides*/ " + lit(k_input_strides(p, s.k_layout)) + ",\n";
  out += "    /*layers*/ " + lit(s.layers) + ", /*iters*/ " + lit(o.iters) + ",\n";
  out += "    /*result*/ " + lit(result_tensor_id(p, s)) + ", " + lit(result_tensor_dtype(p, s)) + ", " + lit(result_tensor_elems(p, s)) +
         ",\n";
  out += "    /*tensors*/ {\n" + rows + "    },\n";
  out += "    Calls{entry_" + tag + ", forward_gpu_" + tag + ", free_call_" + tag + ", stream_sync_" + tag + ", backward_gpu_" + tag +
         ", backward_sync_" + tag + ", free_step_" + tag + "},\n";
  out += "    /*upfront_pointer_arrays*/ " + lit(upfront_arrays) + ", " + lit(kt_copy ? TensorId::key_transposed : TensorId::key_scaled) +
         ", " + lit(kt_copy ? contiguous_bhse(p.q_heads, p.head_dim, p.kv_len) : k_gemm_strides(p, s.k_layout)) + ",\n";
  const BallastSpec& b = o.context.ballast;
  out += "    /*ballast*/ " + lit(b.bytes) + ", BallastSpec{" + lit(b.bytes) + ", " + lit(b.fraction) + ", " +
         e("AllocKind", alloc_kind_name(b.kind)) + ", " + e("BallastTouch", ballast_touch_name(b.touch)) + "},\n";
  out += "    /*host_load_threads*/ " + lit(o.context.host_load_threads) + ",\n";
  // The load reads the program's own weights file (the harness's cache file, made with its mark if
  // it is not there), never a file of the user's that the harness run may have named.
  const MappedWeights& w = s.weights;
  out += "    /*weights*/ MappedWeights{" + lit(w.bytes) + ", \"\", " + e("WeightsIo", weights_io_name(w.io)) + ", " + lit(w.drop_pages) +
         ", " + e("WeightsMapping", weights_mapping_name(w.mapping)) + "}, /*weights_guard*/ " + lit(s.plan_against_free) + "};\n";
  return out;
}

// What the program carries, in a user's words, for its first comment.
std::string conditions_line(const RunOptions& o) {
  const PathSettings& s = o.settings;
  std::vector<std::string> parts;
  parts.push_back(std::string(alloc_kind_name(s.alloc)) + " memory, allocated " +
                  (s.alloc_timing == AllocTiming::per_call ? "inside each call, where PyTorch's operators allocate" : "up front"));
  if (s.layers > 1) parts.push_back(std::to_string(s.layers) + " layers in sequence, each keeping what " + retain_name(s.retain) + " keeps");
  if (s.backward) parts.push_back("each layer's backward call, last layer first");
  if (o.iters > 1) parts.push_back(std::to_string(o.iters) + (o.steps ? " training steps" : " passes"));
  if (s.chunk_bytes > 0) parts.push_back("fix 5's chunks of query rows");
  if (o.context.ballast.given()) parts.push_back("a ballast of " + ballast_string(o.context.ballast));
  if (o.context.host_load_threads > 0) parts.push_back(std::to_string(o.context.host_load_threads) + " host-load threads");
  if (s.graph) parts.push_back("the call captured into a CUDA graph and replayed");
  if (s.weights.bytes > 0) {
    parts.push_back("the model's weights (" + std::to_string(s.weights.bytes) + " bytes) loaded before the first call from " +
                    (s.weights.io == WeightsIo::direct ? "a file read with O_DIRECT" : "a memory-mapped file") + ", the mapping " +
                    (s.weights.mapping == WeightsMapping::keep ? "kept" : "dropped after") + " (the harness's own weights file, "
                    "~/.cache/sdpa-repro/weights.bin or $SDPA_WEIGHTS_FILE, made if it is not there)");
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

// `injects`: whether the plan printed injects the runs' fault (--inject) in some step.
std::string header_comment(const RunOptions& off, const std::string& command_off, const std::string& command_on, bool injects) {
  const int n = off.scenario;
  const ScenarioInfo& sc = scenario_info(n);
  const std::string file = reproducer_file_name(n), program = "./repro_scenario" + std::to_string(n);
  std::string h = comment(file + ":", std::string("a standalone reproducer of scenario ") + std::to_string(n) + " of sdpa-repro (" +
                                          sc.title + "): PyTorch's Math scaled-dot-product attention as the harness ran it, "
                                          "every step of its call plan on the harness's own kernels, cuBLAS calls and allocators, "
                                          "so that it computes what the harness computed, bit for bit.");
  h += "//\n// Build (CUDA 13 toolkit; the program needs only the CUDA runtime and cuBLAS):\n";
  h += "//   " + reproducer_nvcc_command(n) + "\n";
  h += comment("", "-arch=native builds for the GPU of the machine that compiles it; -arch=sm_121 for a DGX Spark (GB10), "
                   "-arch=sm_90 for an H100. -DFIX=1 makes the fix the default.");
  h += "//\n// Run:\n";
  h += "//   " + program + "                 # the harness run without the fix\n";
  h += "//   " + program + " --fix on        # ...with it\n";
  h += "//   " + program + " --timeout 120   # give up on a hung step after 120 s (default 60)\n";
  h += comment("", "It prints the device, the configuration, and the result's l2 norm, sum and element count, to compare "
                   "with the harness run's result.json (result_stats): the same numbers, bit for bit, on the same GPU; with "
                   "--backward a line for each of dQ, dK and dV of the last layer too. Exit codes: 0 finite, 1 non-finite "
                   "values, 2 usage, 3 hung (\"TIMEOUT: hung in <step>\" on stderr), 4 CUDA or cuBLAS error, 6 waived, 7 no "
                   "GPU, 8 refused (managed memory past the harness's guard).");
  h += "//\n";
  h += comment("Hypothesis:", std::string(sc.hypothesis) + ".", "  ");
  h += comment("Conditions:", conditions_line(off) + ".", "  ");
  if (sc.fix_number) h += comment("Fix " + std::to_string(sc.fix_number) + " (--fix on):", std::string(fix_info(sc.fix_number).what) + ".", "  ");
  h += comment("A hang prints:", "TIMEOUT: hung in <step> (the harness's stage log: " + std::string(sc.hang_signature) + ").", "  ");
  h += "//\n";
  h += comment("", std::string("Generated by sdpa-repro ") + kHarnessVersion + " (commit " + kGitCommit + ") from the harness runs:");
  h += "//   " + command_off + "\n//   " + command_on + "\n";
  if (off.inject.kind != FaultSpec::none) {
    h += comment("Note:", "those runs inject a fault (--inject " + fault_spec_string(off.inject) + ") to test the harness, " +
                              (injects ? "and so does this program, with the harness's own code, in the same stage: it "
                                         "says nothing about the GPU."
                                       : "this program none (its conditions do not hold in these runs, or its stage is not "
                                         "one of the plan's steps)."),
                 "  ");
  }
  return h;
}

// Whether `line` includes a system header already included (`included` holds those so far, and
// takes this one): the second #include <...> of a header is left out.
bool repeated_system_include(const std::string& line, std::set<std::string>& included) {
  return line.rfind("#include <", 0) == 0 && !included.insert(line).second;
}

// A harness file as the reproducer inlines it: without #pragma once and its #include "..." (the
// template pastes the harness files it depends on before it), with the system headers it includes
// that no line before it did.
std::string inline_header(const std::string& path, const std::string& text, std::set<std::string>& included) {
  std::istringstream in(text);
  std::string line, out;
  bool blank = false;
  while (std::getline(in, line)) {
    if (line == "#pragma once" || line.rfind("#include \"", 0) == 0 || repeated_system_include(line, included)) continue;
    if (line.empty()) {
      blank = true;  // written before the next line that is not blank, one at most
      continue;
    }
    if (blank && !out.empty()) out += "\n";
    blank = false;
    out += line + "\n";
  }
  if (out.empty()) throw std::logic_error("reproducer template: " + path + " has nothing to inline");
  return out;
}


}  // namespace

void check_reproducible(const RunOptions& o) {
  if (!o.inputs_dir.empty()) {
    throw InputError("--inputs: the reproducer regenerates the harness's random inputs and cannot carry captured "
                     "tensors; leave --inputs out");
  }
  // A scenario on memory that cannot migrate is waived before anything runs; there is nothing to reproduce.
  if (const auto waiver = scenario_waiver(o.scenario, o.conditions)) throw InputError("this configuration is waived: " + *waiver);
}

std::string reproducer_file_name(int scenario) { return "repro_scenario" + std::to_string(scenario) + ".cu"; }

std::string reproducer_nvcc_command(int scenario, const std::string& arch) {
  const std::string name = "repro_scenario" + std::to_string(scenario);
  return "nvcc -O2 -std=c++17 -arch=" + arch + " " + name + ".cu -lcublas -o " + name;
}

std::string reproducer_run_command(int scenario, bool fix_on) {
  return "./repro_scenario" + std::to_string(scenario) + " --fix " + (fix_on ? "on" : "off");
}

std::string generate_reproducer(const RunOptions& off, const RunOptions& on, const std::string& command_off,
                                const std::string& command_on) {
  check_reproducible(off);
  check_reproducible(on);
  if (off.problem.shape_string() != on.problem.shape_string() || off.iters != on.iters) {
    throw std::logic_error("reproducer: the fix-off and fix-on runs differ in more than their fixes");
  }
  const ScenarioInfo& sc = scenario_info(off.scenario);
  const bool context = off.context.ballast.given() || off.context.host_load_threads > 0 || on.context.ballast.given() ||
                       on.context.host_load_threads > 0;
  std::string plan = print_run(off, "off") + "\n" + print_run(on, "on");
  plan.insert(0, "#ifndef FIX\n#define FIX " + std::string(off.own_fix ? "1" : "0") + "\n#endif\n\n");
  const bool weights = off.settings.weights.bytes > 0 || on.settings.weights.bytes > 0;
  const bool injects = plan.find("p.inject(") != std::string::npos;
  const std::map<std::string, bool> flags = {{"context", context}, {"weights", weights}, {"inject", injects}};
  const std::map<std::string, std::string> values = {
      {"HEADER", header_comment(off, command_off, command_on, injects)},
      {"PLAN", plan},
      {"CONFIG_LINE", off.problem.shape_string() + " " + dtype_name(off.problem.dtype) + ", scenario " + std::to_string(off.scenario)},
      {"FIX_NAME", sc.fix_number ? "fix " + std::to_string(sc.fix_number) + " (" + fix_info(sc.fix_number).name + ")"
                                 : std::string("the fixes of the fix-on run")},
  };
  std::map<std::string, std::string> headers;
  for (const EmbeddedSource& file : embedded_sources()) headers[file.path] = file.text;
  return expand_template(reproducer_template(), flags, values, headers);
}

const char* reproducer_template() {
  for (const EmbeddedSource& file : embedded_sources()) {
    if (std::string(file.path) == kTemplatePath) return file.text;
  }
  throw std::logic_error(std::string("reproducer: ") + kTemplatePath + " was not embedded at build time");
}

std::string expand_template(const std::string& text, const std::map<std::string, bool>& flags,
                            const std::map<std::string, std::string>& values,
                            const std::map<std::string, std::string>& headers) {
  auto flag = [&](std::string name) {
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    const bool negate = !name.empty() && name[0] == '!';
    if (negate) name.erase(0, 1);
    const auto it = flags.find(name);
    if (it == flags.end()) throw std::logic_error("reproducer template: unknown flag '" + name + "'");
    return it->second != negate;
  };
  // Per open section: whether its lines are kept, and whether the enclosing ones were.
  std::vector<std::pair<bool, bool>> open;
  auto keeping = [&] { return open.empty() || open.back().first; };
  std::istringstream in(text);
  std::string line, out;
  std::set<std::string> included;  // the system headers' #include lines so far
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const std::string where = " at template line " + std::to_string(line_number);
    if (line.rfind("//@if ", 0) == 0) {
      bool any = false;
      std::string rest = line.substr(6);
      for (size_t bar; (bar = rest.find("||")) != std::string::npos; rest.erase(0, bar + 2)) {
        any = flag(rest.substr(0, bar)) || any;
      }
      any = flag(rest) || any;
      const bool outer = keeping();
      open.emplace_back(outer && any, outer);
      continue;
    }
    if (line == "//@else") {
      if (open.empty()) throw std::logic_error("reproducer template: //@else outside a section" + where);
      open.back().first = open.back().second && !open.back().first;
      continue;
    }
    if (line == "//@endif") {
      if (open.empty()) throw std::logic_error("reproducer template: //@endif outside a section" + where);
      open.pop_back();
      continue;
    }
    if (line.rfind("//@//", 0) == 0) continue;
    if (line.rfind("//@inline ", 0) == 0) {
      const std::string path = line.substr(10);
      const auto it = headers.find(path);
      if (it == headers.end()) throw std::logic_error("reproducer template: no header " + path + " to inline" + where);
      if (keeping()) out += inline_header(path, it->second, included);
      continue;
    }
    if (line.rfind("//@", 0) == 0) throw std::logic_error("reproducer template: unknown directive" + where);
    if (!keeping() || repeated_system_include(line, included)) continue;
    // A section left out leaves its neighbours' blank lines together: one is enough.
    if (line.empty() && (out.empty() || out.compare(out.size() - std::min<size_t>(out.size(), 2), 2, "\n\n") == 0)) {
      continue;
    }
    // @NAME@ -> value; any other '@' is text. Values are inserted as they are, never rescanned.
    for (size_t at = 0; (at = line.find('@', at)) != std::string::npos;) {
      const size_t end = line.find('@', at + 1);
      const std::string name = end == std::string::npos ? "" : line.substr(at + 1, end - at - 1);
      const bool is_name = !name.empty() && name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == std::string::npos;
      if (!is_name) {
        ++at;
        continue;
      }
      const auto it = values.find(name);
      if (it == values.end()) throw std::logic_error("reproducer template: no value for @" + name + "@" + where);
      line.replace(at, end - at + 1, it->second);
      at += it->second.size();
    }
    out += line + "\n";
  }
  if (!open.empty()) throw std::logic_error("reproducer template: a section is not closed");
  return out;
}

}  // namespace sdpa
