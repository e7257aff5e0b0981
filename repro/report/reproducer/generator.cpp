// generator.cpp: expands the reproducer template (template.cu.in) for one configuration.
//
// Everything the program does is decided here from the same values the harness runs with: the
// problem, the settings of the fix-off and fix-on runs (RunOptions::settings(), so scenario
// preconditions, explicit options and fixes are applied exactly as for a run), the stages that
// run (stage_runs), the GEMMs as the pipeline builds them (k_gemm_strides, kt_operand,
// qk_gemm_call, pv_gemm_call, backward_gemm_calls) and the softmax split as the kernel chooses it
// (plan_safe_softmax). A setting the two runs share becomes code for that setting alone; only what
// the fix switches is decided when the program runs.
#include "repro/report/reproducer/generator.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "fixes/fix_list.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/gemm.h"
#include "math_sdpa/reference.h"
#include "math_sdpa/softmax_plan.h"
#include "repro/common/text.h"
#include "repro/report/reproducer/embedded_sources.h"
#include "scenarios/hang_classification.h"
#include "scenarios/scenario.h"
#include "version.h"

namespace sdpa {

namespace {

constexpr size_t kCommentWidth = 100;
constexpr const char* kTemplatePath = "repro/report/reproducer/template.cu.in";
// dO's stream: make_grad_output (math_sdpa/problem.cpp) seeds it with the run's seed (layer 1's)
// mixed with this constant; the CPU test (report_nvcc) checks the two programs' dO bit for bit.
constexpr const char* kGradOutputSeed = "SEED ^ 0x6A09E667F3BCC909ull";

const char* yes(bool b) { return b ? "true" : "false"; }

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

std::string strides_literal(const HeadStrides& s) {
  return "{" + std::to_string(s.batch) + ", " + std::to_string(s.head) + ", " + std::to_string(s.row) + "}";
}

// The Q.K^T GEMM exactly as MathSdpa's constructor builds it.
GemmCall qk_gemm_for(const SdpaProblem& p, const PathSettings& s) {
  const KtOperand kt = kt_operand(p, k_gemm_strides(p, s.k_layout), stage_runs(Stage::kt_contiguous, p, s));
  return qk_gemm_call(p.batch * p.q_heads, p.q_len, p.kv_len, p.head_dim, p.compute_dtype(), kt, s.qk_gemm_api);
}

// dQ's GEMM exactly as the harness's backward issues it (issue_backward_stages): it reads K as
// the Q.K^T GEMM does, the contiguous K^T copy or the view of K; a view whose batch and head
// strides do not fold into one batch (scenario 3's [B, S, H, E] K through the pointer-array GEMM)
// is read one batch entry a call, H heads each.
struct DqGemm {
  GemmCall call;
  bool per_batch = false;
};
DqGemm dq_gemm_for(const SdpaProblem& p, const PathSettings& s) {
  const bool kt_copy = stage_runs(Stage::kt_contiguous, p, s);
  const HeadStrides ks = k_gemm_strides(p, s.k_layout);
  DqGemm d;
  d.call = backward_gemm_calls(p.batch * p.q_heads, p.q_len, p.kv_len, p.head_dim, p.compute_dtype(),
                               kt_operand(p, ks, kt_copy))
               .dq;
  d.per_batch = !kt_copy && p.batch > 1 && ks.batch != p.q_heads * ks.head;
  if (d.per_batch) d.call.batch = static_cast<int>(p.q_heads);
  return d;
}

std::string gemm_literal(const GemmCall& g, const std::string& indent) {
  auto op = [](char t) { return t == 'T' ? "CUBLAS_OP_T" : "CUBLAS_OP_N"; };
  std::ostringstream s;
  s << "{" << op(g.transa) << ", " << op(g.transb) << ", /*m, n, k=*/" << g.m << ", " << g.n << ", " << g.k
    << ", /*lda, ldb, ldc=*/" << g.lda << ", " << g.ldb << ", " << g.ldc << ",\n"
    << indent << "/*stride_a, b, c=*/" << g.stride_a << ", " << g.stride_b << ", " << g.stride_c
    << ", /*batch=*/" << g.batch << "}";
  return s.str();
}

// The initialiser of the template's Config: the fields `flags` keeps, in their order there.
std::string config_literal(const SdpaProblem& p, const PathSettings& s, const FixSet& fixes,
                           const std::map<std::string, bool>& flags) {
  std::vector<std::string> fields;
  if (flags.at("qk_stream_varies")) fields.push_back(std::string("/*gemm_set_stream=*/") + yes(fixes.has(fix_part(1, "set-stream"))));
  if (flags.at("fix1_host_sync")) fields.push_back(std::string("/*gemm_host_sync=*/") + yes(fixes.has(fix_part(1, "host-sync"))));
  if (flags.at("fix2_prefetch")) fields.push_back(std::string("/*prefetch_scores=*/") + yes(fixes.has(fix_part(2, "prefetch"))));
  if (flags.at("fix2_host_sync")) {
    fields.push_back(std::string("/*softmax_host_sync=*/") + yes(fixes.has(fix_part(2, "host-sync"))));
  }
  if (flags.at("fix2_device_sync")) {
    fields.push_back(std::string("/*softmax_device_sync=*/") + yes(fixes.has(fix_part(2, "device-sync"))));
  }
  if (flags.at("fix2_device_scores")) {
    fields.push_back(std::string("/*device_scores=*/") + yes(fixes.has(fix_part(2, "device-scores"))));
  }
  if (flags.at("kt_copy_varies")) {
    fields.push_back(std::string("/*kt_copy=*/") + yes(stage_runs(Stage::kt_contiguous, p, s)));
    fields.push_back("\n    /*qk=*/" + gemm_literal(qk_gemm_for(p, s), "            "));
    if (flags.at("backward")) {
      const DqGemm dq = dq_gemm_for(p, s);
      fields.push_back("\n    /*dq=*/" + gemm_literal(dq.call, "            "));
      fields.push_back(std::string("/*dq_per_batch=*/") + yes(dq.per_batch));
    }
  }
  if (flags.at("pool_varies")) fields.push_back(std::string("/*stream_ordered_pool=*/") + yes(s.alloc == AllocKind::async));
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i) out += (i == 0 ? "" : fields[i][0] == '\n' ? "," : ", ") + fields[i];
  return out + "}";
}

const char* alloc_note(AllocKind k) {
  switch (k) {
    case AllocKind::managed: return "managed memory (cudaMallocManaged)";
    case AllocKind::device: return "device memory (cudaMalloc)";
    case AllocKind::async: return "a stream-ordered pool of our own (cudaMallocFromPoolAsync)";
    case AllocKind::host: return "mapped pinned host memory (cudaHostAlloc)";
    case AllocKind::system: return "plain host memory (aligned_alloc) that the GPU reads directly";
    // The report writes a vmm run's call with cudaMalloc (cmd_report.cpp's one_call): never here.
    case AllocKind::vmm: return "one growing virtual range (cuMemCreate, cuMemMap)";
  }
  return "?";
}

const char* cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return "CUDA_R_16BF";
    case DType::fp16: return "CUDA_R_16F";
    case DType::fp32: return "CUDA_R_32F";
  }
  return "?";
}

const char* device_type(DType t) {
  switch (t) {
    case DType::bf16: return "__nv_bfloat16";
    case DType::fp16: return "__half";
    case DType::fp32: return "float";
  }
  return "?";
}

// Whether the program runs stage `s` of a configuration (stage_runs), where a graph's call has no
// backward_sync: the graph holds the backward call, and the call's stream_sync waits for it.
bool program_runs(Stage s, const SdpaProblem& p, const PathSettings& ps) {
  return stage_runs(s, p, ps) && !(s == Stage::backward_sync && ps.graph);
}

// The steps where the scenario's hang shows, by the signatures in docs/SCENARIOS.md.
std::string hang_steps(int scenario, const SdpaProblem& p, const PathSettings& off) {
  std::string steps;
  for (int i = 0; i < kStageCount; ++i) {
    const Stage s = static_cast<Stage>(i);
    const std::vector<int> fits = scenarios_for_hung_stage(s);
    if (std::find(fits.begin(), fits.end(), scenario) != fits.end() && program_runs(s, p, off)) {
      steps += (steps.empty() ? "" : " or ") + std::string(stage_name(s));
    }
  }
  return steps;
}

// The backward call's steps, in their order ("" without --backward).
std::string backward_steps(const SdpaProblem& p, const PathSettings& ps) {
  std::string steps;
  for (int i = 0; i < kStageCount; ++i) {
    const Stage s = static_cast<Stage>(i);
    if (is_backward_stage(s) && !is_memory_stage(s) && program_runs(s, p, ps)) {
      steps += (steps.empty() ? "" : ", ") + std::string(stage_name(s));
    }
  }
  return steps;
}

std::string problem_line(int scenario, const SdpaProblem& p, int iters, bool backward) {
  std::ostringstream s;
  s << "scenario " << scenario << ", " << p.shape_string() << ", " << dtype_name(p.dtype) << ", precision "
    << precision_name(p.precision) << ", mask " << mask_kind_name(p.mask);
  if (p.has_mask_input()) s << " " << (p.mask_per_batch ? "B" : "1") << "x" << (p.mask_per_head ? "H" : "1");
  s << ", scale " << format_number("%.6g", p.softmax_scale()) << ", seed " << p.seed << ", " << iters << " call(s)";
  if (backward) s << " each with its backward call";
  return s.str();
}

// `backward`: the backward call's steps ("" without one).
std::string header_comment(const RunOptions& off, const std::string& command_off, const std::string& command_on,
                           const std::string& hang, const std::string& backward) {
  const int n = off.scenario;
  const ScenarioInfo& sc = scenario_info(n);
  const FixInfo& fix = fix_info(sc.fix_number);
  const std::string file = reproducer_file_name(n), program = "./repro_scenario" + std::to_string(n);
  const std::string fix_n = "fix " + std::to_string(sc.fix_number);
  std::string h;
  h += comment(file + ":", std::string("a standalone reproducer of scenario ") + std::to_string(n) +
                               " of sdpa-repro (" + sc.title +
                               "): PyTorch's Math scaled-dot-product attention, rebuilt on cuBLAS and our own "
                               "kernels, run under the scenario's conditions with " + fix_n + " off or on.");
  h += "//\n";
  h += "// Build (CUDA 13 toolkit; the program needs only the CUDA runtime and cuBLAS):\n";
  h += "//   " + reproducer_nvcc_command(n) + "\n";
  h += comment("", "-arch=native builds for the GPU of the machine that compiles it. To build for another, name it: "
                   "-arch=sm_121 (DGX Spark, GB10), -arch=sm_90 (H100), -arch=sm_100 (B200); for several, one "
                   "-gencode arch=compute_XY,code=sm_XY each. -DFIX=1 makes the fix the default.");
  h += "//\n// Run:\n";
  h += "//   " + program + "                 # " + fix_n + " off: the scenario's conditions\n";
  h += "//   " + program + " --fix on        # with " + fix_n + "\n";
  h += "//   " + program + " --timeout 120   # give up on a hung step after 120 s (default 60)\n";
  h += "//   " + program + " --no-check      # skip the float64 CPU reference (large shapes)\n";
  h += comment("", "It prints the device, the configuration, and a line to compare with the harness run's "
                   "result.json (result_stats.l2, .sum, .elements; check.rel_error):");
  h += "//   result: pass rel_error=1.234e-03 l2=... sum=... elements=... nonfinite=0 (fix off)\n";
  if (!backward.empty()) {
    h += comment("", "then a line for each input gradient, to compare with check.gradients and the gradients "
                     "--save-output writes (FILE.grad_query.npy, ...):");
    h += "//   grad_query: pass rel_error=1.234e-03 l2=... sum=... elements=... nonfinite=0\n";
    h += "//   grad_key: ...\n//   grad_value: ...\n";
  }
  h += comment("", "Exit codes: 0 pass, 1 mismatch, 2 usage, 3 hung (\"TIMEOUT: hung in <step>\" on stderr), 4 "
                   "CUDA or cuBLAS error (file, line and step on stderr), 6 waived (this GPU cannot express the "
                   "scenario), 7 no GPU.");
  h += "//\n";
  h += comment("Hypothesis:", std::string(sc.hypothesis) + ".", "  ");
  h += comment("Set up:", std::string(sc.setup) + ".", "  ");
  h += comment("Runs:", std::string(sc.runs) + ".", "  ");
  if (!backward.empty()) {
    h += comment("Backward:", "each call is the whole path (--backward implies --full) followed by its backward call "
                              "for a seeded gradient of the output dO, as autograd runs it (docs/BACKWARD.md): " +
                                  backward + "; dQ, dK and dV are checked too.",
                 "  ");
  }
  h += comment("Fix " + std::to_string(sc.fix_number) + " (--fix on):", std::string(fix.what) + ".", "  ");
  h += comment("A hang prints:", "TIMEOUT: hung in " + hang + " (the harness's stage log: " + sc.hang_signature + ").",
               "  ");
  h += "//\n";
  h += comment("", std::string("Generated by sdpa-repro ") + kHarnessVersion + " (commit " + kGitCommit +
                       ") for exactly " + problem_line(n, off.problem, off.iters, !backward.empty()) +
                       ", from the harness runs:");
  h += "//   " + command_off + "\n";
  h += "//   " + command_on + "\n";
  if (off.inject.kind != FaultSpec::none) {
    h += comment("Note:", "those runs inject a fault (--inject " + fault_spec_string(off.inject) +
                              ") to test the harness; this program injects none.",
                 "  ");
  }
  if (off.log == LogLevel::values) {
    h += comment("Note:", "those runs use --log values (statistics kernels after some stages); this program "
                          "synchronises after every step as they do, without the statistics.",
                 "  ");
  }
  if (off.allow_oversubscription) {
    h += comment("Note:", "those runs lift the harness's guard against oversubscribing memory "
                          "(--allow-oversubscription); this program has no such guard.",
                 "  ");
  }
  return h;
}

void require_same_plan(const SdpaProblem& p, const PathSettings& off, const PathSettings& on) {
  for (int i = 0; i < kStageCount; ++i) {
    const Stage s = static_cast<Stage>(i);
    if (s != Stage::kt_contiguous && stage_runs(s, p, off) != stage_runs(s, p, on)) {
      throw std::logic_error(std::string("reproducer: stage ") + stage_name(s) + " runs with the fix off or on only");
    }
  }
  // What the fixes set, and the template's Config holds: everything else is the same on both sides.
  const std::set<std::string> fix_settings = {"alloc", "async_pool", "qk_gemm_stream", "kt_contiguous", "reduced_on_device"};
  const auto a = settings_fields(off), b = settings_fields(on);
  for (const auto& [name, value] : a) {
    if (!fix_settings.count(name) && b.at(name) != value) {
      throw std::logic_error("reproducer: setting " + name + " differs between the fix off and on");
    }
  }
}

// A harness header as the reproducer inlines it: without #pragma once, its #includes (the template
// includes what it needs, and pastes the harness headers it depends on before it) and its
// namespace lines, so that it reads as part of the program.
std::string inline_header(const std::string& path, const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  bool blank = false;
  while (std::getline(in, line)) {
    if (line == "#pragma once" || line.rfind("#include ", 0) == 0 || line == "namespace sdpa {" ||
        line == "}  // namespace sdpa") {
      continue;
    }
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
  if (o.scenario == 0) {
    std::vector<int> with_fix;
    for (const ScenarioInfo& sc : scenario_table()) {
      if (sc.fix_number) with_fix.push_back(sc.number);
    }
    throw InputError("--scenario 0 has no fix of its own to switch off and on; choose a scenario with one: " +
                     scenario_list_text(with_fix));
  }
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

bool reproducer_runs_backward(const RunOptions& o) { return o.settings.backward; }

std::string reproducer_run_command(int scenario, bool fix_on) {
  return "./repro_scenario" + std::to_string(scenario) + " --fix " + (fix_on ? "on" : "off");
}

std::string generate_reproducer(const RunOptions& off, const RunOptions& on, const std::string& command_off,
                                const std::string& command_on) {
  check_reproducible(off);
  check_reproducible(on);
  const SdpaProblem& p = off.problem;
  const PathSettings so = off.settings, sn = on.settings;
  require_same_plan(p, so, sn);
  auto runs = [&](Stage s) { return stage_runs(s, p, so) || stage_runs(s, p, sn); };
  const DType ct = p.compute_dtype();
  const std::string result = result_tensor_name(so);
  const bool gqa = p.gqa();
  auto either = [&](FixPart part) { return off.fixes.has(part) || on.fixes.has(part); };
  // What the fix switches; the template's Config holds exactly these.
  const bool pool_varies = so.alloc != sn.alloc;
  const bool qk_stream_varies = so.qk_gemm_stream != sn.qk_gemm_stream;
  const bool kt_copy_varies = stage_runs(Stage::kt_contiguous, p, so) != stage_runs(Stage::kt_contiguous, p, sn);
  if ((pool_varies && sn.alloc != AllocKind::async) ||
      (qk_stream_varies && (!on.fixes.has(fix_part(1, "set-stream")) || sn.qk_gemm_stream != GemmStream::same))) {
    throw std::logic_error("reproducer: the fix-on run changes the allocator or the GEMM's stream as no fix does");
  }
  // The fix-off run's allocator is the one the template writes out; fix 4's pool is the other.
  const AllocKind alloc = so.alloc;
  const bool cross_stream = so.qk_gemm_stream != GemmStream::same;
  const bool scores_to_host = runs(Stage::scores_to_host);
  const bool scores_advise = scores_to_host && (so.scores_to_host == ScoresToHost::advise || so.scores_to_host == ScoresToHost::both);
  const bool scores_read = scores_to_host && (so.scores_to_host == ScoresToHost::read || so.scores_to_host == ScoresToHost::both);
  const bool advice = !so.advice.empty() && migratable(alloc);
  const bool storm = so.entry_touch_streams > 0;
  const bool host_touch = storm && so.entry_host_touch;  // managed and system memory: the host may read both
  const bool scores_during = scores_to_host && so.scores_host_phase == ScoresHostPhase::during;
  const bool softmax = runs(Stage::softmax);
  const SoftmaxPlan softmax_plan = plan_safe_softmax(nullptr, nullptr, ct, p.kv_len);
  const bool softmax_warp = softmax_variant(softmax_plan) == SoftmaxVariant::warp_per_row;
  // --backward: each call followed by its backward call.
  const bool backward = reproducer_runs_backward(off);
  auto runs_backward = [&](Stage s) { return stage_runs(s, p, so) || stage_runs(s, p, sn); };
  const DqGemm dq_off = dq_gemm_for(p, so);
  // Softmax's backward splits its rows where the forward's does (kernels.h, kSoftmaxBackwardWarpCols).
  const bool softmax_backward_warp = p.kv_len <= kSoftmaxWarpRowMaxCols;

  // A flag named after a stage says whether that stage runs: its name is the stage table's.
  std::map<std::string, bool> flags = {
      {"bf16", p.dtype == DType::bf16},
      {"fp16", p.dtype == DType::fp16},
      {"narrow", p.dtype != DType::fp32},
      {"acc_fp32", ct == DType::fp32},
      {stage_name(Stage::upcast), runs(Stage::upcast)},
      {"gqa", gqa},
      {"mask_none", p.mask == MaskKind::none},
      {"mask_causal", p.mask == MaskKind::causal},
      {"mask_bool", p.mask == MaskKind::boolean},
      {"mask_float", p.mask == MaskKind::additive},
      {"mask_input", p.has_mask_input()},
      {"mask_per_batch", p.has_mask_input() && p.mask_per_batch},
      {"mask_per_head", p.has_mask_input() && p.mask_per_head},
      {stage_name(Stage::mask_prepare), runs(Stage::mask_prepare)},
      {stage_name(Stage::mask_add), runs(Stage::mask_add)},
      {stage_name(Stage::softmax), softmax},
      {"softmax_warp", softmax && softmax_warp},
      {stage_name(Stage::dropout), runs(Stage::dropout)},
      {stage_name(Stage::pv_gemm), runs(Stage::pv_gemm)},
      {stage_name(Stage::cast_output), runs(Stage::cast_output)},
      {"kt_copy", runs(Stage::kt_contiguous)},
      {"kt_copy_varies", kt_copy_varies},
      {"qk_batched", so.qk_gemm_api == GemmApi::batched},
      {"head_strides", gqa || so.k_layout == KLayout::bshe || runs(Stage::kt_contiguous) ||
                           so.qk_gemm_api == GemmApi::batched},
      {"k_bshe", so.k_layout == KLayout::bshe},
      {"cross_stream", cross_stream},
      {"qk_stream_varies", qk_stream_varies},
      {"gemm_ordered", cross_stream && so.qk_gemm_order == GemmOrder::event},
      {stage_name(Stage::scores_to_host), scores_to_host},
      {"scores_advise", scores_advise},
      {"scores_read", scores_read},
      {"scores_during", scores_during},
      {"scores_during_read", scores_during && scores_read},
      {"scores_during_advise", scores_during && scores_advise},
      {"mask_text_padding", p.mask == MaskKind::boolean && p.mask_pattern == MaskPattern::text_padding},
      {"storm", storm},
      {"host_touch", host_touch},
      {"advice", advice},
      {"fix1_host_sync", either(fix_part(1, "host-sync"))},
      {"fix2_prefetch", either(fix_part(2, "prefetch"))},
      {"fix2_prefetch_migrates", either(fix_part(2, "prefetch")) && migratable(alloc)},
      {"fix2_host_sync", either(fix_part(2, "host-sync"))},
      {"fix2_device_sync", either(fix_part(2, "device-sync"))},
      {"fix2_device_scores", either(fix_part(2, "device-scores")) && migratable(alloc)},
      {"migrates", migratable(alloc)},
      {"host_location", advice || scores_advise},
      {"device_location", advice || (either(fix_part(2, "prefetch")) && migratable(alloc))},
      {"pool_varies", pool_varies},
      {"pool_private", pool_varies && sn.async_pool == AsyncPool::private_pool},
      {"pool_stream", pool_varies && sn.async_pool == AsyncPool::stream},
      {"alloc_managed", alloc == AllocKind::managed},
      {"alloc_system", alloc == AllocKind::system},
      {"stream_non_blocking", so.stream == StreamMode::non_blocking},
      {"stream_legacy", so.stream == StreamMode::legacy},
      {"stream_per_thread", so.stream == StreamMode::per_thread},
      {"sync_each_step", off.log >= LogLevel::sync},
      {"graph", so.graph},
      {"result_scores", result == "scores"},
      {"result_probs", result == "probs"},
      // The result's element type: float (Acc in fp32), or the 16-bit Elem (the cast output, or
      // native precision).
      {"result_float", ct == DType::fp32 && !runs(Stage::cast_output)},
      {"backward", backward},
      {"backward_eager", backward && !so.graph},  // with --graph the graph holds the backward call
      {stage_name(Stage::grad_upcast), runs_backward(Stage::grad_upcast)},
      {stage_name(Stage::dropout_backward), runs_backward(Stage::dropout_backward)},
      {stage_name(Stage::grads_to_host), runs_backward(Stage::grads_to_host)},
      {"grads_advise", runs_backward(Stage::grads_to_host) && scores_advise},
      {"softmax_backward_warp", softmax_backward_warp},
      {"dq_varies", backward && kt_copy_varies},
      {"dq_per_batch", backward && !kt_copy_varies && dq_off.per_batch},
      {"fix2_device_grads", backward && either(fix_part(2, "device-scores")) && migratable(alloc)},
  };

  const ScenarioInfo& sc = scenario_info(off.scenario);
  std::string advice_list;
  for (Advice a : so.advice) {
    const bool host = a == Advice::preferred_cpu || a == Advice::accessed_by_cpu;
    const char* name = a == Advice::read_mostly             ? "cudaMemAdviseSetReadMostly"
                       : a == Advice::preferred_gpu || a == Advice::preferred_cpu ? "cudaMemAdviseSetPreferredLocation"
                                                                                   : "cudaMemAdviseSetAccessedBy";
    advice_list += (advice_list.empty() ? "" : ", ") + std::string("{") + name + ", " + yes(host) + "}";
  }
  std::string result_buffer = result == "scores" ? "scores" : result == "probs" ? "probs" : "out_acc";
  if (runs(Stage::cast_output)) result_buffer = "output";
  std::string config_line = problem_line(off.scenario, p, off.iters, backward);
  for (size_t at = config_line.find('%'); at != std::string::npos; at = config_line.find('%', at + 2)) {
    config_line.insert(at, "%");  // it goes into a printf format
  }
  const bool causal = p.mask == MaskKind::causal;
  std::string mask_slice_offset;
  if (p.mask_per_batch && p.mask_per_head) mask_slice_offset = "(b * MASK_H + h) * L * S + ";
  else if (p.mask_per_batch) mask_slice_offset = "b * L * S + ";
  else if (p.mask_per_head) mask_slice_offset = "h * L * S + ";
  std::string alloc_text = std::string("Every tensor lives in ") + alloc_note(alloc);
  if (pool_varies) {
    alloc_text += std::string(" (fix off) or ") +
                  (sn.async_pool == AsyncPool::stream ? "cudaMallocAsync from the device's pool, ordered on the path's stream"
                                                      : alloc_note(AllocKind::async)) +
                  " (fix on)";
  }
  std::string softmax_split;
  if (softmax_warp) {
    softmax_split = "rows of up to " + std::to_string(kSoftmaxWarpRowMaxCols) +
                    " elements, as these, a warp each, merged by shuffles alone (no shared memory, no barrier, "
                    "as its warp softmax).";
  } else {
    softmax_split = "rows longer than " + std::to_string(kSoftmaxWarpRowMaxCols) +
                    " elements, as these, a block each, merged through shared memory between two __syncthreads "
                    "(as cunn_SoftMaxForward: the block reduction scenario 2's hypothesis is about).";
  }

  const std::string split_cols = std::to_string(kSoftmaxWarpRowMaxCols);
  const std::string softmax_backward_split =
      softmax_backward_warp ? "rows of up to " + split_cols + " elements, as these, a warp each."
                            : "rows longer than " + split_cols + " elements, as these, a block each, the sum merged "
                                                                 "through shared memory.";
  // dPd, dV and dKs do not read K: the fix-off run's K^T operand stands for both runs' (dQ's is dq_gemm_for's).
  const KtOperand kt_off = kt_operand(p, k_gemm_strides(p, so.k_layout), stage_runs(Stage::kt_contiguous, p, so));
  const BackwardGemms bg = backward_gemm_calls(p.batch * p.q_heads, p.q_len, p.kv_len, p.head_dim, ct, kt_off);

  std::map<std::string, std::string> values = {
      {"HEADER", header_comment(off, command_off, command_on, hang_steps(off.scenario, p, so), backward_steps(p, so))},
      {"FIX_NUMBER", std::to_string(sc.fix_number)},
      {"FIX_NAME", fix_info(sc.fix_number).name},
      {"B", std::to_string(p.batch)},
      {"HQ", std::to_string(p.q_heads)},
      {"HKV", std::to_string(p.kv_heads)},
      {"L", std::to_string(p.q_len)},
      {"S", std::to_string(p.kv_len)},
      {"E", std::to_string(p.head_dim)},
      {"SCALE", format_number("%.17g", p.softmax_scale())},
      {"SEED", std::to_string(p.seed) + "ull"},
      {"DROPOUT_P", format_number("%.17g", p.dropout_p)},
      {"DROPOUT_OFFSET", std::to_string(p.dropout_offset) + "ull"},
      {"ITERS", std::to_string(off.iters)},
      {"TOLERANCE", format_number("%g", tolerance_for(p.dtype, p.precision))},
      {"DTYPE", dtype_name(p.dtype)},
      {"PRECISION", precision_name(p.precision)},
      {"ELEM_TYPE", device_type(p.dtype)},
      {"ACC_TYPE", device_type(ct)},
      {"ACC_CUDA_TYPE", cuda_type(ct)},
      {"TO_BITS", p.dtype == DType::bf16 ? "float_to_bf16_bits" : "float_to_fp16_bits"},
      {"FROM_BITS", p.dtype == DType::bf16 ? "bf16_bits_to_float" : "fp16_bits_to_float"},
      {"MASK_B", std::to_string(p.mask_batch())},
      {"MASK_H", std::to_string(p.mask_heads())},
      {"CALL_EXTENT", so.last_stage == Stage::stream_sync ? std::string("runs the whole path")
                                                           : std::string("stops after ") + stage_name(so.last_stage)},
      {"RESULT_NAME", result},
      {"RESULT_ELEMS", result == "output" ? "B * H * L * E" : "B * H * L * S"},
      {"RESULT_BUFFER", result_buffer},
      {"REFERENCE_ROW", result == "output" ? "E" : "S"},
      {"CONFIG_OFF", config_literal(p, so, off.fixes, flags)},
      {"CONFIG_ON", config_literal(p, sn, on.fixes, flags)},
      {"ALLOC_NOTE", alloc_text + "."},
      {"QK_GEMM", gemm_literal(qk_gemm_for(p, so), "                  ")},
      {"QK", kt_copy_varies ? "cfg.qk" : "kQk"},
      {"PV_GEMM", gemm_literal(pv_gemm_call(p.batch * p.q_heads, p.q_len, p.kv_len, p.head_dim, ct), "    ")},
      {"K_LAYOUT", strides_literal(k_input_strides(p, so.k_layout))},
      {"K_LAYOUT_NOTE", so.k_layout == KLayout::bshe ? "K uploaded as a [B, S, HKV, E] buffer viewed as [B, HKV, S, E]"
                                                     : "K uploaded contiguous [B, HKV, S, E]"},
      {"K_GEMM", strides_literal(k_gemm_strides(p, so.k_layout))},
      {"KT_COPY_REASON", so.kt_contiguous ? "fix 3"
                                          : "at::matmul copies a K^T view it cannot fold into a batch"},
      {"QK_STREAM", cross_stream ? "qk_stream" : "stream"},
      {"QK_STREAM_CREATE", so.qk_gemm_stream == GemmStream::legacy
                               ? "qk_stream = cudaStreamLegacy;  // --gemm-stream legacy"
                               : so.qk_gemm_stream == GemmStream::blocking
                                   ? "CHECK(cudaStreamCreateWithFlags(&qk_stream, cudaStreamDefault));  // --gemm-stream blocking"
                                   : "CHECK(cudaStreamCreateWithFlags(&qk_stream, cudaStreamNonBlocking));  // --gemm-stream aux"},
      {"QK_STREAM_NOTE", std::string(so.qk_gemm_stream == GemmStream::legacy     ? "the legacy default stream"
                                     : so.qk_gemm_stream == GemmStream::blocking ? "a blocking stream of its own"
                                                                                 : "a non-blocking stream of its own") +
                             (qk_stream_varies ? " (the path's own with fix 1)" : "") +
                             (so.qk_gemm_order == GemmOrder::event ? ", ordered by events"
                              : implicitly_ordered_by_legacy_stream(so.stream, so.qk_gemm_stream)
                                  ? ", ordered by no event: only the legacy default stream's implicit synchronisation "
                                    "(--gemm-order none)"
                                  : ", unordered: a deliberate race (--gemm-order none)")},
      {"SCORES_TO_HOST", scores_to_host_name(so.scores_to_host)},
      {"SCORES_HOST_PHASE", scores_host_phase_name(so.scores_host_phase)},
      {"ALLOC_IS_SYSTEM", yes(alloc == AllocKind::system)},
      {"TEXT_TOKENS", std::to_string(p.text_tokens)},
      {"TEXT_VALID", std::to_string(p.text_valid)},
      {"SOFTMAX_VARIANT", softmax_variant_name(softmax_variant(softmax_plan))},
      {"POOL_NOTE", sn.async_pool == AsyncPool::stream
                        ? "cudaMallocAsync (the device's pool), ordered on the path's stream"
                        : "a pool of our own (cudaMallocFromPoolAsync), each allocation synchronised"},
      {"TOUCH_STREAMS", std::to_string(so.entry_touch_streams)},
      {"NO_HOST_TOUCH_REASON", "--host-touch off"},
      {"ADVICE", advice_list},
      {"ADVICE_LIST", advice_list_string(so.advice)},
      {"LOG", log_level_name(off.log)},
      {"ADDITIVE_MASK_ELEMS", causal ? "L * S" : "MASK_B * MASK_H * L * S"},
      {"KEY_SCALED_ELEMS", gqa ? "B * H * S * E" : "B * HKV * S * E"},
      {"MASK_POINTER", p.mask == MaskKind::additive ? "mask_input" : "additive_mask"},
      {"MASK_PER_BATCH", yes(!causal && p.mask_per_batch)},
      {"MASK_PER_HEAD", yes(!causal && p.mask_per_head)},
      {"MASK_SLICE_OFFSET", mask_slice_offset},
      {"SOFTMAX_SPLIT", softmax_split},
      {"SOFTMAX_ROWS_PER_BLOCK", std::to_string(softmax_plan.rows_per_block)},
      {"CONFIG_LINE", config_line},
      {"GRAD_TOLERANCE", format_number("%g", gradient_tolerance_for(p.dtype, p.precision))},
      {"GRAD_OUTPUT_SEED", kGradOutputSeed},
      {"DP_GEMM", gemm_literal(bg.dp, "    ")},
      {"DV_GEMM", gemm_literal(bg.dv, "    ")},
      {"DQ_GEMM", gemm_literal(dq_off.call, "    ")},
      {"DK_GEMM", gemm_literal(bg.dk, "    ")},
      {"DQ_K", stage_runs(Stage::kt_contiguous, p, so) ? "key_transposed" : "key_scaled"},
      {"SOFTMAX_BACKWARD_SPLIT", softmax_backward_split},
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
      if (keeping()) out += inline_header(path, it->second);
      continue;
    }
    if (line.rfind("//@", 0) == 0) throw std::logic_error("reproducer template: unknown directive" + where);
    if (!keeping()) continue;
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
