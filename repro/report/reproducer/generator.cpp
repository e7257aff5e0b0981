// reproducer_cu.cpp: expands the reproducer template for one configuration.
//
// Everything the program does is decided here from the same values the harness runs with: the
// problem, the settings of the fix-off and fix-on runs (RunOptions::settings(), so scenario
// preconditions, explicit options and fixes are applied exactly as for a run), the stages that
// run (stage_runs), and the GEMMs as the pipeline builds them (qk_gemm_call, pv_gemm_call).
#include "repro/report/reproducer/generator.h"
#include "repro/common/text.h"

#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "fixes/fix_list.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/gemm.h"
#include "math_sdpa/reference.h"
#include "scenarios/scenario.h"
#include "version.h"

namespace sdpa {

namespace {

constexpr size_t kCommentWidth = 100;

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

struct Strides {
  int64_t batch, head, row;
  std::string literal() const {
    return "{" + std::to_string(batch) + ", " + std::to_string(head) + ", " + std::to_string(row) + "}";
  }
};

// K's layout as uploaded (scenario 3's [B, S, H, E] buffer or contiguous), and the K whose
// transpose the GEMM reads: after gqa_expand always a fresh contiguous [B, H, S, E] (pipeline.cpp).
Strides k_input_strides(const SdpaProblem& p, const PathSettings& s) {
  if (s.k_layout == KLayout::bshe) return {p.kv_len * p.kv_heads * p.head_dim, p.head_dim, p.kv_heads * p.head_dim};
  return {p.kv_heads * p.kv_len * p.head_dim, p.kv_len * p.head_dim, p.head_dim};
}
Strides k_gemm_strides(const SdpaProblem& p, const PathSettings& s) {
  if (p.gqa()) return {p.q_heads * p.kv_len * p.head_dim, p.kv_len * p.head_dim, p.head_dim};
  return k_input_strides(p, s);
}

// The Q.K^T GEMM exactly as MathSdpa's constructor builds it.
GemmCall qk_gemm_for(const SdpaProblem& p, const PathSettings& s) {
  KtOperand kt;
  if (stage_runs(Stage::kt_contiguous, p, s)) {
    kt = {true, p.kv_len, p.kv_len * p.head_dim};
  } else {
    const Strides k = k_gemm_strides(p, s);
    kt = {false, k.row, k.head};
  }
  return qk_gemm_call(p.batch * p.q_heads, p.q_len, p.kv_len, p.head_dim, p.compute_dtype(), kt, s.qk_gemm_api);
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

const char* alloc_enum(AllocKind k) {
  switch (k) {
    case AllocKind::managed: return "Alloc::managed";
    case AllocKind::device: return "Alloc::device";
    case AllocKind::async: return "Alloc::async";
    case AllocKind::host: return "Alloc::host";
    case AllocKind::system: return "Alloc::system";
  }
  return "?";
}

std::string config_literal(const SdpaProblem& p, const PathSettings& s, const FixSet& fixes) {
  std::ostringstream out;
  out << "{\n    " << alloc_enum(s.alloc) << ", GemmStream::" << gemm_stream_name(s.qk_gemm_stream)
      << ", /*kt_copy=*/" << yes(stage_runs(Stage::kt_contiguous, p, s)) << ", /*sync_around_gemms=*/"
      << yes(fixes.has(1)) << ", /*prefetch_scores=*/" << yes(fixes.has(2)) << ",\n    /*qk=*/"
      << gemm_literal(qk_gemm_for(p, s), "            ") << "}";
  return out.str();
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

// The steps where the scenario's hang shows, by the design document's signatures (stage.h).
std::string hang_steps(int scenario, const SdpaProblem& p, const PathSettings& off) {
  std::string steps;
  for (int i = 0; i < kStageCount; ++i) {
    const Stage s = static_cast<Stage>(i);
    if (scenario_for_hung_stage(s) == scenario && stage_runs(s, p, off)) {
      steps += (steps.empty() ? "" : " or ") + std::string(stage_name(s));
    }
  }
  return steps;
}

std::string problem_line(int scenario, const SdpaProblem& p, int iters) {
  std::ostringstream s;
  s << "scenario " << scenario << ", " << p.shape_string() << ", " << dtype_name(p.dtype) << ", precision "
    << precision_name(p.precision) << ", mask " << mask_kind_name(p.mask);
  if (p.has_mask_input()) s << " " << (p.mask_per_batch ? "B" : "1") << "x" << (p.mask_per_head ? "H" : "1");
  s << ", scale " << format_number("%.6g", p.softmax_scale()) << ", seed " << p.seed << ", " << iters << " call(s)";
  return s.str();
}

std::string header_comment(const RunOptions& off, const std::string& command_off, const std::string& command_on,
                           const std::string& hang) {
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
  h += comment("", "Exit codes: 0 pass, 1 mismatch, 2 usage, 3 hung (\"TIMEOUT: hung in <step>\" on stderr), 4 "
                   "CUDA or cuBLAS error (file, line and step on stderr), 6 waived (this GPU cannot express the "
                   "scenario), 7 no GPU.");
  h += "//\n";
  h += comment("Hypothesis:", std::string(sc.hypothesis) + ".", "  ");
  h += comment("Set up:", std::string(sc.setup) + ".", "  ");
  h += comment("Runs:", std::string(sc.runs) + ".", "  ");
  h += comment("Fix " + std::to_string(sc.fix_number) + " (--fix on):", std::string(fix.what) + ".", "  ");
  h += comment("A hang prints:", "TIMEOUT: hung in " + hang + " (the harness's stage log: " + sc.hang_signature + ").",
               "  ");
  h += "//\n";
  h += comment("", std::string("Generated by sdpa-repro ") + kHarnessVersion + " (commit " + kGitCommit +
                       ") for exactly " + problem_line(n, off.problem, off.iters) +
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
  const auto a = settings_fields(off), b = settings_fields(on);
  for (const auto& [name, value] : a) {
    if (name != "alloc" && name != "qk_gemm_stream" && name != "kt_contiguous" && b.at(name) != value) {
      throw std::logic_error("reproducer: setting " + name + " differs between the fix off and on");
    }
  }
}

}  // namespace

void check_reproducible(const RunOptions& o) {
  if (o.scenario == 0) {
    throw InputError("--scenario 0 has no fix of its own to switch off and on; choose a scenario 1-4");
  }
  if (!o.inputs_dir.empty()) {
    throw InputError("--inputs: the reproducer regenerates the harness's random inputs and cannot carry captured "
                     "tensors; leave --inputs out");
  }
  if (stage_runs(Stage::dropout, o.problem, o.settings)) {
    throw InputError("--dropout: the reproducer does not implement dropout (the harness's Philox stream); use "
                     "--dropout 0, or leave out --full");
  }
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
  const SdpaProblem& p = off.problem;
  const PathSettings so = off.settings, sn = on.settings;
  require_same_plan(p, so, sn);
  auto runs = [&](Stage s) { return stage_runs(s, p, so) || stage_runs(s, p, sn); };
  const DType ct = p.compute_dtype();
  const std::string result = result_tensor_name(so);
  const bool gqa = p.gqa();
  const bool cross_stream = so.qk_gemm_stream != GemmStream::same || sn.qk_gemm_stream != GemmStream::same;
  const bool scores_advise = so.scores_to_host == ScoresToHost::advise || so.scores_to_host == ScoresToHost::both;
  const bool scores_read = so.scores_to_host == ScoresToHost::read || so.scores_to_host == ScoresToHost::both;
  const bool fix1 = off.fixes.has(1) || on.fixes.has(1), fix2 = off.fixes.has(2) || on.fixes.has(2);
  auto uses_alloc = [&](AllocKind k) { return so.alloc == k || sn.alloc == k; };

  std::map<std::string, bool> flags = {
      {"bf16", p.dtype == DType::bf16},
      {"fp16", p.dtype == DType::fp16},
      {"narrow", p.dtype != DType::fp32},
      {"acc_fp32", ct == DType::fp32},
      {"upcast", runs(Stage::upcast)},
      {"gqa", gqa},
      {"mask_none", p.mask == MaskKind::none},
      {"mask_causal", p.mask == MaskKind::causal},
      {"mask_bool", p.mask == MaskKind::boolean},
      {"mask_float", p.mask == MaskKind::additive},
      {"mask_input", p.has_mask_input()},
      {"mask_prepare", runs(Stage::mask_prepare)},
      {"mask_add", runs(Stage::mask_add)},
      {"softmax", runs(Stage::softmax)},
      {"pv_gemm", runs(Stage::pv_gemm)},
      {"cast_output", runs(Stage::cast_output)},
      {"kt_copy", runs(Stage::kt_contiguous)},
      {"qk_batched", so.qk_gemm_api == GemmApi::batched},
      {"k_bshe", so.k_layout == KLayout::bshe},
      {"cross_stream", cross_stream},
      {"scores_to_host", runs(Stage::scores_to_host)},
      {"scores_advise", runs(Stage::scores_to_host) && scores_advise},
      {"scores_read", runs(Stage::scores_to_host) && scores_read},
      {"storm", so.entry_touch_streams > 0},
      {"advice", !so.advice.empty()},
      {"fix1", fix1},
      {"fix2", fix2},
      {"hooks", fix1 || fix2},
      {"host_location", !so.advice.empty() || (runs(Stage::scores_to_host) && scores_advise)},
      {"device_location", !so.advice.empty() || fix2},
      {"alloc_managed", uses_alloc(AllocKind::managed)},
      {"alloc_device", uses_alloc(AllocKind::device)},
      {"alloc_async", uses_alloc(AllocKind::async)},
      {"alloc_host", uses_alloc(AllocKind::host)},
      {"alloc_system", uses_alloc(AllocKind::system)},
      {"stream_non_blocking", so.stream == StreamMode::non_blocking},
      {"stream_legacy", so.stream == StreamMode::legacy},
      {"stream_per_thread", so.stream == StreamMode::per_thread},
      {"sync_each_step", off.log >= LogLevel::sync},
      {"result_scores", result == "scores"},
      {"result_probs", result == "probs"},
      // The result's element type: float (Acc in fp32), or the 16-bit Elem (the cast output, or
      // native precision).
      {"result_float", ct == DType::fp32 && !runs(Stage::cast_output)},
  };

  const ScenarioInfo& sc = scenario_info(off.scenario);
  const Strides k_input = k_input_strides(p, so), k_gemm = k_gemm_strides(p, so);
  std::string advice, advice_list;
  for (Advice a : so.advice) {
    const bool host = a == Advice::preferred_cpu || a == Advice::accessed_by_cpu;
    const char* name = a == Advice::read_mostly             ? "cudaMemAdviseSetReadMostly"
                       : a == Advice::preferred_gpu || a == Advice::preferred_cpu ? "cudaMemAdviseSetPreferredLocation"
                                                                                   : "cudaMemAdviseSetAccessedBy";
    advice += (advice.empty() ? "" : ", ") + std::string("{") + name + ", " + yes(host) + "}";
  }
  std::string result_buffer = result == "scores" ? "scores" : result == "probs" ? "probs" : "out_acc";
  if (runs(Stage::cast_output)) result_buffer = "output";
  std::string config_line = problem_line(off.scenario, p, off.iters);
  for (size_t at = config_line.find('%'); at != std::string::npos; at = config_line.find('%', at + 2)) {
    config_line.insert(at, "%");  // it goes into a printf format
  }
  const bool causal = p.mask == MaskKind::causal;

  std::map<std::string, std::string> values = {
      {"HEADER", header_comment(off, command_off, command_on, hang_steps(off.scenario, p, so))},
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
      {"ITERS", std::to_string(off.iters)},
      {"TOLERANCE", format_number("%g", tolerance_for(p.dtype, p.precision))},
      {"DTYPE", dtype_name(p.dtype)},
      {"PRECISION", precision_name(p.precision)},
      {"ELEM_TYPE", device_type(p.dtype)},
      {"ACC_TYPE", device_type(ct)},
      {"ACC_CUDA_TYPE", cuda_type(ct)},
      {"MASK_B", std::to_string(p.mask_batch())},
      {"MASK_H", std::to_string(p.mask_heads())},
      {"CALL_EXTENT", so.last_stage == Stage::stream_sync ? std::string("runs the whole path")
                                                           : std::string("stops after ") + stage_name(so.last_stage)},
      {"RESULT_NAME", result},
      {"RESULT_ELEMS", result == "output" ? "B * H * L * E" : "B * H * L * S"},
      {"RESULT_BUFFER", result_buffer},
      {"REFERENCE_ROW", result == "output" ? "E" : "S"},
      {"CONFIG_OFF", config_literal(p, so, off.fixes)},
      {"CONFIG_ON", config_literal(p, sn, on.fixes)},
      {"PV_GEMM", gemm_literal(pv_gemm_call(p.batch * p.q_heads, p.q_len, p.kv_len, p.head_dim, ct), "    ")},
      {"K_LAYOUT", k_input.literal()},
      {"K_LAYOUT_NOTE", so.k_layout == KLayout::bshe ? "K uploaded as a [B, S, HKV, E] buffer viewed as [B, HKV, S, E]"
                                                     : "K uploaded contiguous [B, HKV, S, E]"},
      {"K_GEMM", k_gemm.literal()},
      {"GEMM_ORDERED", yes(so.qk_gemm_order == GemmOrder::event)},
      {"SCORES_TO_HOST", scores_to_host_name(so.scores_to_host)},
      {"TOUCH_STREAMS", std::to_string(so.entry_touch_streams)},
      {"HOST_TOUCH", yes(so.entry_host_touch)},
      {"ADVICE", advice},
      {"ADVICE_LIST", advice_list_string(so.advice)},
      {"LOG", log_level_name(off.log)},
      {"ADDITIVE_MASK_ELEMS", causal ? "L * S" : "MASK_B * MASK_H * L * S"},
      {"KEY_SCALED_ELEMS", gqa ? "B * H * S * E" : "B * HKV * S * E"},
      {"MASK_POINTER", p.mask == MaskKind::additive ? "mask_input" : "additive_mask"},
      {"MASK_PER_BATCH", yes(!causal && p.mask_per_batch)},
      {"MASK_PER_HEAD", yes(!causal && p.mask_per_head)},
      {"CONFIG_LINE", config_line},
  };
  return expand_template(reproducer_template(), flags, values);
}

std::string expand_template(const std::string& text, const std::map<std::string, bool>& flags,
                            const std::map<std::string, std::string>& values) {
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
    if (line.rfind("//@", 0) == 0) throw std::logic_error("reproducer template: unknown directive" + where);
    if (!keeping()) continue;
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
