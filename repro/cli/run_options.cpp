// run_options.cpp: a run's options (run_spec.h) turned into RunOptions, every check made.
#include "repro/cli/run_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "fixes/fix.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"
#include "math_sdpa/weights_file.h"
#include "repro/cli/help_format.h"
#include "repro/cli/inputs.h"
#include "repro/cli/workload_file.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

namespace sdpa {

namespace {

// The words of the problem's options (the mask's differ from mask_kind_name: PyTorch's names).
const NameTable<DType> kDTypes{"--dtype", {{DType::bf16, "bf16"}, {DType::fp16, "fp16"}, {DType::fp32, "fp32"}}};
const NameTable<Precision> kPrecisions{"--precision", {{Precision::upcast, "upcast"}, {Precision::native, "native"}}};
const NameTable<MaskKind> kMasks{"--mask",
                                 {{MaskKind::none, "none"},
                                  {MaskKind::boolean, "bool"},
                                  {MaskKind::additive, "float"},
                                  {MaskKind::causal, "causal"}}};

const char* kRunDescription =
    "repro: the PyTorch Math SDPA path (bmm Q.K^T, mask, softmax, dropout, bmm V) rebuilt on cuBLAS and unified "
    "memory, to reproduce the DGX Spark hang in isolation.";

// The subcommands as main.cpp dispatches them.
const char* kRunUsage =
    "repro [OPTIONS]                     run one configuration\n"
    "repro report|sweep|bench|info ...   a bug report, a matrix of runs, timings, the environment\n"
    "repro triage|minimize ...           all a bug needs, in one command; a failing run made small\n"
    "repro help options|scenarios|stages every option; the scenarios, the stages in full\n"
    "repro -V, --version                 the version and how this binary was built";

// What `repro --help` shows, so that it fits a screen: the options a first run needs. The rest
// are one command away (`repro help options`, which is `repro --help-all`).
const char* const kFirstRunOptions[] = {"--workload", "--dtype",    "--batch", "--q-len", "--mask",  "--scenario", "--fix",
                                        "--fixes",    "--backward", "--plan",  "--iters", "--check", "--json"};

bool asks_for_brief_help(int argc, const char* const* argv) {
  bool help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--help-all") return false;
    if (w == "-h" || w == "--help") help = true;
  }
  return help;
}

// Every option but those of a first run goes into no group, which CLI11 does not print.
void keep_first_run_options(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const auto& names = opt->get_lnames();
    const bool first_run = std::any_of(std::begin(kFirstRunOptions), std::end(kFirstRunOptions), [&](const char* n) {
      return std::find(names.begin(), names.end(), std::string(n).substr(2)) != names.end();
    });
    if (!first_run && opt->get_name() != "--help" && opt->get_name() != "-h,--help") opt->group("");
  }
}

// The end of --help: one line a scenario and a fix; `repro help scenarios` has them in full.
std::string run_footer(bool brief) {
  std::string s = "Scenarios (--scenario N; each in full: repro help scenarios, docs/SCENARIOS.md):\n";
  for (const ScenarioInfo& sc : scenario_table()) {
    s += "  " + std::to_string(sc.number) + "  " + sc.title;
    if (sc.fix_number) s += " (its fix: " + std::to_string(sc.fix_number) + ")";
    s += "\n";
  }
  if (!brief) s += "Fixes (--fix on: the scenario's own; --fixes LIST: any, in any scenario):\n";
  for (int n = 1; n <= fix_count() && !brief; ++n) {
    s += "  " + std::to_string(n) + "  " + fix_info(n).name + ": " + fix_info(n).hook_point + "\n";
  }
  s += std::string("Exit codes: ") + kExitCodeSummary + ".\n";
  s += "Every option: repro help options; in full: docs/CLI.md.";
  return s;
}

// Decimal digits only, within 64 bits.
uint64_t parse_seed(const std::string& text) {
  uint64_t value = 0;
  if (text.empty() || text.size() > 20) throw InputError("--seed: '" + text.substr(0, 40) + "' is not an integer in [0, 2^64)");
  for (char c : text) {
    const unsigned digit = static_cast<unsigned>(c - '0');
    if (digit > 9 || value > (UINT64_MAX - digit) / 10) {
      throw InputError("--seed: '" + text.substr(0, 40) + "' is not an integer in [0, 2^64)");
    }
    value = value * 10 + digit;
  }
  return value;
}

// "TOKENS:VALID", two positive integers.
void parse_text_padding(const std::string& text, int64_t& tokens, int64_t& valid) {
  const size_t colon = text.find(':');
  auto number = [&](const std::string& part) {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos) {
      throw InputError("--text-padding: '" + text.substr(0, 40) + "' is not TOKENS:VALID (two positive integers)");
    }
    return static_cast<int64_t>(std::stoll(part));
  };
  if (colon == std::string::npos) number("");
  tokens = number(text.substr(0, colon));
  valid = number(text.substr(colon + 1));
}

// What a CUDA graph cannot hold (--graph): host work between the GPU stages.
void check_graph_capturable(const RunOptions& o) {
  const std::string conflict = graph_conflict(o.settings);
  if (!conflict.empty()) throw InputError("--graph: " + conflict);
  if (o.log >= LogLevel::sync) throw InputError("--graph: --log sync and values synchronise after every stage inside the graph");
  if (o.launch_blocking) throw InputError("--graph: --launch-blocking waits for each kernel as it is launched, which a capture cannot");
}

}  // namespace

void RunOptions::set_fixes(const FixSet& set) {
  fixes = set;
  settings = conditions;
  problem = problem_given;
  for (const auto& fix : make_fixes(fixes)) {
    fix->configure(settings);
    fix->configure(problem);
  }
  if (chunk_size > 0 && settings.chunk_bytes > 0) settings.chunk_bytes = chunk_size;  // fix 5's chunk part is on
}

namespace {

// --layers: a positive count, or the workload's block count.
int parse_layers(const std::string& text, const Workload* workload) {
  if (text == "model") {
    if (!workload) throw InputError("--layers model: the model's block count comes from a workload (--workload NAME)");
    return workload->blocks;
  }
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos || std::stoi(text) < 1 ||
      std::stoi(text) > 10000) {
    throw InputError("--layers: '" + text.substr(0, 40) + "' is not a layer count in 1-10000 or model");
  }
  return std::stoi(text);
}

// The training context's options, over the scenario's preconditions (docs/CONTEXT.md).
void apply_context_options(const RunSpec& g, const Workload* workload, RunOptions& o) {
  PathSettings& c = o.conditions;
  if (g.alloc_timing) c.alloc_timing = parse_alloc_timing(*g.alloc_timing);
  if (g.retain) c.retain = parse_retain(*g.retain);
  if (g.layers) c.layers = parse_layers(*g.layers, workload);
  if (g.steps) {
    if (g.iters) {
      throw InputError("--steps and --iters count the same passes over the layers: give one (--steps also samples "
                       "memory after every step)");
    }
    o.iters = static_cast<int>(*g.steps);
    o.steps = true;
    // About a hundred samples, however many steps: each step's time is kept anyway.
    if (o.sample_every == 0 && o.iters > 1) o.sample_every = std::max(1, o.iters / 100);
  }
  BallastSpec& b = o.context.ballast;
  if (g.ballast) b = parse_ballast(*g.ballast);
  if (g.ballast_alloc) {
    try {
      b.kind = parse_alloc_kind(*g.ballast_alloc);
    } catch (const InputError&) {  // the parser names --alloc
      throw InputError("--ballast-alloc: unknown value '" + g.ballast_alloc->substr(0, 40) +
                       "' (expected managed|device|host|system)");
    }
    if (b.kind == AllocKind::async || b.kind == AllocKind::vmm) {
      throw InputError(std::string("--ballast-alloc: ") + alloc_kind_name(b.kind) +
                       " is an allocator of the path's; the ballast is managed, device, host or system memory");
    }
  }
  if (g.ballast_touch) b.touch = parse_ballast_touch(*g.ballast_touch);
  if ((g.ballast_alloc || g.ballast_touch) && !b.given()) {
    throw InputError("--ballast-alloc and --ballast-touch describe a ballast: give its size with --ballast");
  }
  if ((b.touch == BallastTouch::host || b.touch == BallastTouch::both) && !host_accessible(b.kind)) {
    throw InputError(std::string("--ballast-touch ") + ballast_touch_name(b.touch) + ": the host cannot touch " +
                     alloc_kind_name(b.kind) + " memory (--ballast-alloc managed, host or system)");
  }
  o.context.host_load_threads = static_cast<int>(g.host_load.value_or(0));
  if (g.mapped_weights) {
    c.weights = parse_mapped_weights(*g.mapped_weights);
  }
  if (g.weights_mapping) {
    if (c.weights.bytes == 0) throw InputError("--weights-mapping describes a load of weights: give its size with --mapped-weights");
    c.weights.mapping = parse_weights_mapping(*g.weights_mapping);
  }
  if (g.chunk_size) o.chunk_size = parse_size(*g.chunk_size, "--chunk-size");
  o.memory_trace = g.memory_trace || scenario_info(o.scenario).memory_trace;
  if (g.backward) {
    // The backward reads what autograd saved, from the output the whole forward path made.
    if (c.retain == Retain::none && g.retain) {
      throw InputError("--retain none: --backward reads what autograd keeps for it (--retain autograd, or checkpoint: "
                       "the backward call recomputes it)");
    }
    c.backward = true;
    if (c.retain != Retain::checkpoint) c.retain = Retain::autograd;
    c.last_stage = Stage::stream_sync;
  }
}

// Whether each @condition of an injected fault holds in this run (fault_spec.h).
bool fault_context_holds(const RunOptions& o) {
  for (const std::string& c : o.inject.only_with) {
    const bool holds = c == "per-call"    ? o.settings.alloc_timing == AllocTiming::per_call
                       : c == "layers"    ? o.settings.layers > 1
                       : c == "ballast"   ? o.context.ballast.given()
                       : c == "host-load" ? o.context.host_load_threads > 0
                       : c == "steps"     ? o.steps && o.iters > 1
                       : c == "retain"    ? o.settings.retain == Retain::autograd
                       : c == "backward"  ? o.settings.backward
                       : c == "no-fix"    ? o.fixes.empty()
                                          : false;
    if (!holds) return false;
  }
  // @layer=K and @step=K are conditions too: a run with fewer layers or steps never reaches the
  // fault (a sweep's one-layer cells pass it to their runs, and a ladder's rung with layers meets it).
  if (o.inject.only_layer > o.settings.layers || o.inject.only_step > o.iters) return false;
  const SdpaProblem& p = o.problem;
  for (const FaultSpec::AtLeast& a : o.inject.only_sizes) {
    const int64_t size = a.size == 'B' ? p.batch : a.size == 'H' ? p.q_heads : a.size == 'L' ? p.q_len : a.size == 'S' ? p.kv_len : p.head_dim;
    if (size < a.min) return false;
  }
  return o.inject.only_alloc.empty() || o.inject.only_alloc == alloc_kind_name(o.settings.alloc);
}

// Context options that cannot act together.
void refuse_context_conflicts(const RunSpec& g, const RunOptions& o) {
  const PathSettings& ps = o.settings;
  if (g.chunk_size && ps.chunk_bytes == 0) {
    throw InputError("--chunk-size: fix 5's chunk part is not on (--fixes 5 or 5:chunk)");
  }
  if (ps.graph && (ps.layers > 1 || ps.alloc_timing == AllocTiming::per_call)) {
    throw InputError("--graph replays one layer's tensors at fixed addresses: it takes --layers 1 and --alloc-timing upfront");
  }
  const std::string refused = fixes_refuse(o.fixes, o.problem, ps);
  if (!refused.empty()) throw InputError(refused);
  if (o.plan_only && (!o.save_output_path.empty() || o.check)) {
    throw InputError("--plan prints the plan and runs nothing: --save-output and --check have nothing to do (--json FILE "
                     "writes the call plan)");
  }
}

// What the configuration would silently ignore: refused, so a run never seems to have tested
// what it did not.
void refuse_ignored_options(const RunSpec& g, const RunOptions& o) {
  const SdpaProblem& p = o.problem;
  if (p.dropout_p > 0 && !stage_runs(Stage::dropout, p, o.settings)) {
    throw InputError("--dropout: scenario " + std::to_string(o.scenario) + "'s call stops after " +
                     stage_name(o.settings.last_stage) + ", before dropout (add --full to run the whole path)");
  }
  if (g.mask_dims) {
    if (!o.inputs_dir.empty()) throw InputError("--mask-dims: with --inputs the broadcast is mask.npy's shape");
    if (g.text_padding) throw InputError("--mask-dims: --text-padding is a Bx1 mask; it excludes --mask-dims");
    if (!p.has_mask_input()) {
      throw InputError("--mask-dims: there is no mask tensor to broadcast (--mask bool or float has one; causal is "
                       "computed)");
    }
  }
  if (o.sample_every > 0 && o.sample_every >= o.iters) {
    throw InputError("--sample-every " + std::to_string(o.sample_every) + " needs --iters above it (--iters is " +
                     std::to_string(o.iters) + "): the first sample is the baseline, growth shows only in later ones");
  }
  if (p.scale && *p.scale == 0) throw InputError("--scale: 0 would make every score 0 (give a nonzero scale)");
  if (g.check_layers && !o.check) throw InputError("--check-layers says which layers --check compares: add --check");
}

// --workload-file: the captured call's derived options the command line does not decide itself:
// not an option it gives (with the others of its group: the mask's, the ballast's), nor the shapes,
// dtype and mask when --inputs files give them, nor the memory when the scenario sets up its own
// (managed: its hypothesis is about migration), nor the whole context with --call-only, nor the
// allocation timing and retention when a report's ladder climbs them, nor what `command` does
// not take (a bench has no ballast).
std::vector<std::string> derived_options(const RunSpec& g, RunCommand command, bool ladder) {
  const CallReplay replay = replay_call(load_workload_file(*g.workload_file), static_cast<int>(g.call.value_or(0)));
  const int scenario = static_cast<int>(g.scenario.value_or(0));
  const std::vector<std::vector<std::string>> groups = {
      {"--mask", "--mask-dims", "--text-padding"},
      {"--ballast", "--ballast-alloc", "--ballast-touch"},
  };
  const auto decided_here = [&](const std::string& name) {
    if (g.given(name)) return true;
    for (const auto& group : groups) {
      if (std::find(group.begin(), group.end(), name) == group.end()) continue;
      for (const std::string& other : group) {
        if (g.given(other)) return true;
      }
    }
    return false;
  };
  std::vector<std::string> derived;
  const auto take = [&](const DerivedOption& d) {
    derived.push_back(d.name);
    if (!d.value.empty()) derived.push_back(d.value);
  };
  for (const DerivedOption& d : replay.problem) {
    const bool from_files = d.name != "--k-layout" && d.name != "--scale" && d.name != "--dropout";
    if (!decided_here(d.name) && !(g.inputs && from_files)) take(d);
  }
  if (!g.call_only) {
    for (const DerivedOption& d : replay.context) {
      if (decided_here(d.name)) continue;
      if ((d.name == "--alloc" || d.name == "--alloc-timing") && scenario_info(scenario).needs_migrating_memory) continue;
      if ((d.name == "--alloc-timing" || d.name == "--retain") && ladder) continue;
      if (!takes_run_option(command, d.name)) continue;
      take(d);
    }
  }
  return derived;
}

// Every file the run will write, checked before the GPU is touched.
// The files a run reads, on its final settings (scenario 7 loads weights without the option): one
// check whichever route names the weights file (SIZE:FILE, $SDPA_WEIGHTS_FILE, the default). A file
// the harness did not make is read, never written (weights_file.h); one not there yet is made.
void check_input_paths(const RunOptions& o) {
  const MappedWeights& w = o.settings.weights;
  if (w.bytes == 0) return;
  const std::string route = weights_file_route(w.file);
  const std::string file = w.file.empty() ? default_weights_file() : w.file;
  if (weights_file_use(route, file, w.bytes) == WeightsFileUse::make) {
    const std::string dir = std::filesystem::path(file).parent_path().string();
    check_dir_creatable(route + " (" + file + ")", dir.empty() ? "." : dir);
  }
}

void check_output_paths(const RunOptions& o) {
  if (!o.json_path.empty()) check_file_writable("--json", o.json_path);
  if (!o.save_output_path.empty()) check_file_writable("--save-output", o.save_output_path);
  if (!o.save_inputs_dir.empty()) check_dir_creatable("--save-inputs", o.save_inputs_dir);
  if (!o.hang.log_file.empty()) check_file_appendable("--log-file", o.hang.log_file);
  if (!o.hang.snapshot_dir.empty()) check_dir_creatable("--snapshot-dir", o.hang.snapshot_dir);
}

// The run's options from what was given (`g`): defaults, then the workload's problem and the
// scenario's preconditions, then what the command line says explicitly, then the fixes.
RunOptions finish_options(const RunSpec& g, RunCommand command, const std::vector<std::string>& words) {
  RunOptions o;
  o.spec = g;
  o.argv = words;
  SdpaProblem& p = o.problem;
  o.scenario = static_cast<int>(g.scenario.value_or(0));
  scenario_info(o.scenario);  // a scenario the registry has (CLI11 checked the range)
  o.inputs_dir = g.inputs.value_or("");
  o.dtype_given = g.dtype.has_value();
  // The problem: the defaults, or a workload's (named, or the scenario's own when the command
  // line gives no shape), then each option the command line gives.
  const bool shape_given = g.batch || g.heads || g.kv_heads || g.q_len || g.kv_len || g.head_dim || g.inputs;
  o.workload = g.workload.value_or("");
  o.workload_file = g.workload_file.value_or("");
  o.call = static_cast<int>(g.call.value_or(0));
  if (!o.workload_file.empty()) {
    if (!o.workload.empty()) throw InputError("--workload and --workload-file: one workload at a time");
    o.replay_approximations = replay_call(load_workload_file(o.workload_file), o.call).approximations;
  } else if (o.call != 0 || g.call_only) {
    throw InputError(std::string(g.call_only ? "--call-only" : "--call") + ": it selects from a --workload-file");
  }
  if (o.workload.empty() && !shape_given) o.workload = scenario_info(o.scenario).default_workload;
  const Workload* workload = o.workload.empty() ? nullptr : &find_workload(o.workload);
  p = workload ? workload->problem : SdpaProblem{};
  if (g.batch) p.batch = *g.batch;
  if (g.heads) p.q_heads = *g.heads;
  if (g.q_len) p.q_len = *g.q_len;
  if (g.head_dim) p.head_dim = *g.head_dim;
  // --kv-heads and -S follow --heads and -L unless given themselves.
  if (g.kv_heads) p.kv_heads = *g.kv_heads;
  else if (g.heads || !workload) p.kv_heads = p.q_heads;
  if (g.kv_len) p.kv_len = *g.kv_len;
  else if (g.q_len || !workload) p.kv_len = p.q_len;
  if (g.dtype || !workload) p.dtype = kDTypes.parse(g.dtype.value_or("bf16"));
  p.precision = kPrecisions.parse(g.precision.value_or("upcast"));
  if (g.mask || !workload) {
    p.mask = kMasks.parse(g.mask.value_or("none"));
    p.mask_pattern = MaskPattern::random;
  }
  if (g.mask_dims || !workload) {
    const std::string dims = g.mask_dims.value_or("1x1");
    p.mask_per_batch = dims[0] == 'B';
    p.mask_per_head = dims[2] == 'H';
  }
  if (g.text_padding) {
    if (g.mask && *g.mask != "bool") throw InputError("--text-padding is a boolean mask: it excludes --mask " + *g.mask);
    p.mask = MaskKind::boolean;
    p.mask_per_batch = true;
    p.mask_per_head = false;
    p.mask_pattern = MaskPattern::text_padding;
    parse_text_padding(*g.text_padding, p.text_tokens, p.text_valid);
  }
  p.dropout_p = g.dropout.value_or(0);
  if (g.scale) p.scale = *g.scale;
  if (g.seed) p.seed = parse_seed(*g.seed);

  // Defaults, then the scenario's preconditions, then what the command line says explicitly.
  PathSettings& c = o.conditions;
  if (workload) c.k_layout = workload->k_layout;  // what the model hands SDPA; the scenario may change it
  apply_scenario(o.scenario, c);
  if (g.full) c.last_stage = Stage::stream_sync;
  // A graph is captured on a side stream, as torch.cuda.graph does: the legacy default stream,
  // the default otherwise, cannot be captured.
  if (g.graph) c.graph = true, c.stream = StreamMode::non_blocking;
  if (g.alloc) c.alloc = parse_alloc_kind(*g.alloc);
  if (g.stream) c.stream = parse_stream_mode(*g.stream);
  if (g.gemm_stream) c.qk_gemm_stream = parse_gemm_stream(*g.gemm_stream);
  if (g.gemm_order) c.qk_gemm_order = parse_gemm_order(*g.gemm_order);
  if (g.k_layout) c.k_layout = parse_k_layout(*g.k_layout);
  if (g.gemm_api) c.qk_gemm_api = parse_gemm_api(*g.gemm_api);
  if (g.scores_to_host) c.scores_to_host = parse_scores_to_host(*g.scores_to_host);
  if (g.scores_host_phase) c.scores_host_phase = parse_scores_host_phase(*g.scores_host_phase);
  if (g.touch_streams) c.entry_touch_streams = static_cast<int>(*g.touch_streams);
  if (g.host_touch) {
    if (*g.host_touch != "on" && *g.host_touch != "off") {
      throw InputError("--host-touch: unknown value '" + *g.host_touch + "' (expected on|off)");
    }
    c.entry_host_touch = *g.host_touch == "on";
  }
  if (g.advise) c.advice = parse_advice_list(*g.advise);
  o.allow_oversubscription = g.allow_oversubscription;
  o.layers_fit = g.layers_fit;
  o.uvm_counters = g.uvm_counters;
  o.plan_only = g.plan;
  o.iters = static_cast<int>(g.iters.value_or(command == RunCommand::report ? kReportIters : 1));
  o.sample_every = static_cast<int>(g.sample_every.value_or(0));
  apply_context_options(g, workload, o);

  FixSet fixes = parse_fix_list(g.fixes.value_or(""));
  const std::string own_fix = g.fix.value_or("off");
  o.own_fix = own_fix != "off";
  if (o.own_fix) {
    const int own = scenario_info(o.scenario).fix_number;
    if (own == 0) {
      throw InputError("--fix " + own_fix + ": scenario " + std::to_string(o.scenario) +
                       " has no fix of its own (use --fixes LIST, of fixes 1-" + std::to_string(fix_count()) + ", or all)");
    }
    if (own_fix == "lean") {
      fixes.add_lean(own);
    } else {
      fixes.add(own);
    }
  }
  // Captured inputs set the shapes: read and checked here, so a bad file is a usage error on any
  // machine, and the run's first line shows the shape that was loaded.
  if (!o.inputs_dir.empty()) o.inputs = std::make_shared<const HostInputs>(load_npy_inputs(o.inputs_dir, p, o.dtype_given));
  p.validate();
  o.problem_given = p;
  o.set_fixes(fixes);
  o.waiver = scenario_waiver(o.scenario, o.conditions).value_or("");
  o.caveats = scenario_caveats(o.scenario, o.problem, o.conditions);

  parse_log_level(g.log.value_or("off"), o.log);
  o.log_format = parse_log_format(g.log_format.value_or("harness"));
  o.log_extras = g.log_extras;
  // The instrumentation synchronised the device after every step and printed values: so does its
  // format, unless --log says otherwise.
  if (o.log_format == LogFormat::sdpa_debug && !g.log) o.log = LogLevel::values;
  if (o.log_extras && o.log_format != LogFormat::sdpa_debug) {
    throw InputError("--log-extras: the harness format has every line already; it adds to --log-format sdpa-debug");
  }
  o.stage_timeout_s = g.stage_timeout.value_or(kDefaultStageTimeoutS);
  o.stall_threshold_s = g.stall_threshold.value_or(kDefaultStallThresholdS);
  o.run_timeout_s = g.timeout.value_or(0);
  o.no_fork = g.no_fork;
  o.launch_blocking = g.launch_blocking;
  if (g.on_hang) o.hang.on_hang = parse_on_hang(*g.on_hang);
  if (g.snapshot_timeout) o.hang.snapshot_timeout_s = *g.snapshot_timeout;
  if (g.keep_timeout) o.hang.keep_timeout_s = *g.keep_timeout;
  o.hang.snapshot_dir = g.snapshot_dir.value_or("");
  o.hang.log_file = g.log_file.value_or("");
  o.hang.nvidia_bug_report = g.nvidia_bug_report;
  o.check = g.check;
  o.check_last_layer_only = g.check_layers == std::string("last");
  o.json_path = g.json.value_or("");
  o.save_output_path = g.save_output.value_or("");
  o.save_inputs_dir = g.save_inputs.value_or("");
  if (o.settings.graph) check_graph_capturable(o);
  if (g.inject) o.inject = parse_fault_spec(*g.inject);
  o.inject_armed = fault_context_holds(o);
  refuse_ignored_options(g, o);
  refuse_context_conflicts(g, o);
  if (o.inject.kind != FaultSpec::none && o.inject_armed && !stage_runs(o.inject.stage, o.problem, o.settings)) {
    throw InputError(std::string("--inject: stage ") + stage_name(o.inject.stage) + " does not run in this configuration: it needs " +
                     stage_needs(o.inject.stage, o.problem, o.settings) + " (repro help stages lists each stage's condition)");
  }
  // Capturing and instantiating a graph is host work that waits for nothing on the GPU: a
  // spinning kernel put in front of it would stall the replay (graph_launch), not these stages.
  if ((o.inject.kind == FaultSpec::hang || o.inject.kind == FaultSpec::slow) &&
      (o.inject.stage == Stage::graph_capture || o.inject.stage == Stage::graph_instantiate)) {
    throw InputError(std::string("--inject: ") + stage_name(o.inject.stage) +
                     " is host work that waits for nothing on the GPU, so a GPU-side stall cannot be put in it "
                     "(hang:graph_launch stalls the replay; error:" + stage_name(o.inject.stage) + " works)");
  }
  // A deadline at or below the default threshold leaves no room for a stall: unless a threshold
  // is given, none is judged (a test's short deadline is not a stall detector).
  if (!g.stall_threshold && o.stall_threshold_s >= o.stage_timeout_s) o.stall_threshold_s = 0;
  if (o.stall_threshold_s >= o.stage_timeout_s) {
    throw InputError("--stall-threshold " + format_number("%g", o.stall_threshold_s) +
                     " s is not below the stage deadline (--stage-timeout " + format_number("%g", o.stage_timeout_s) +
                     " s): a stall is a stage that finishes under the deadline");
  }
  check_input_paths(o);
  check_output_paths(o);
  return o;
}

}  // namespace

RunOptionParser::RunOptionParser(CLI::App& app, RunCommand command) : app_(app), command_(command), options_(app, command) {
  options_.add_run_options(spec_);
}

RunOptionParser::~RunOptionParser() = default;

bool RunOptionParser::parse(int argc, const char* const* argv, const std::string& program, ParseResult& result) {
  spec_ = RunSpec{};
  if (!parse_app(app_, argc, argv, program, result, &options_)) return false;
  if (!spec_.workload_file || !expand_replay_) return true;
  try {
    const CLI::Option* ladder = app_.get_option_no_throw("--ladder");
    const std::vector<std::string> derived = derived_options(spec_, command_, ladder && ladder->count() > 0);
    spec_.overlay(RunSpec::from_argv(derived));
    result.words.insert(result.words.begin() + 1, derived.begin(), derived.end());
  } catch (const InputError& e) {
    result.exit_code = kExitUsage;
    result.message = program + ": error: " + one_line(e.what());
    return false;
  }
  return true;
}

RunOptions RunOptionParser::finish(const std::vector<std::string>& words) const { return finish_options(spec_, command_, words); }

// An option outside the table that names a file or a folder (its help says FILE or DIR) given a
// name no file can have (output_paths.h's check_not_empty): "", which the command would take as
// the option not given (its default), or a name too long. The table's own are checked as they
// are read.
void refuse_impossible_paths(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    const std::string label = opt->get_option_text().empty() ? opt->get_type_name() : opt->get_option_text();
    if (label != "FILE" && label != "DIR" && label != "DIR|FILE") continue;
    for (const std::string& value : opt->results()) check_not_empty(opt->get_name(), value);
  }
}

// The first word CLI11 could not place that looks like an option, said as an option of another
// command or with the option of this one it most likely meant; else, when `or_other_word`, the
// first word it could not place; empty when there is none. It comes
// before any other parse error: "--out is required" is no help to one who typed --otu.
std::string unexpected_option(const CLI::App& app, const std::string& program, bool or_other_word) {
  // Words after "--" are no options, whatever they look like.
  std::vector<std::string> extras = app.remaining();
  extras.erase(std::find(extras.begin(), extras.end(), "--"), extras.end());
  const auto option = std::find_if(extras.begin(), extras.end(), [](const std::string& w) { return w.size() > 1 && w[0] == '-'; });
  if (option == extras.end()) {
    if (!or_other_word) return "";
    const std::vector<std::string> all = app.remaining();
    const auto word = std::find_if(all.begin(), all.end(), [](const std::string& w) { return w != "--"; });
    if (word == all.end()) return "";
    return "unexpected argument '" + one_line(word->substr(0, 60)) + "' (" + program + " takes options; " + program +
           " --help lists them)";
  }
  const std::string word = option->substr(0, option->find('='));
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
  }
  const std::vector<std::string> run_names = run_option_names();
  if (program != "repro" && std::find(run_names.begin(), run_names.end(), word) != run_names.end()) {
    const bool takes_a_run = app.get_option_no_throw("run-options") != nullptr;
    return word + " is not an option of " + program + " (" + program + " --help lists its own" +
           (takes_a_run ? "; the run's own options come after --)" : ")");
  }
  const std::string meant = nearest_word(word, names);
  return "unknown option " + word + (meant.empty() ? " (" + program + " --help lists the options)" : " (did you mean " + meant + "?)");
}

std::string range_error(const std::string& what) {
  const size_t value_at = what.find(": Value "), range_at = what.find(" not in range ");
  if (value_at == std::string::npos || range_at == std::string::npos || value_at > range_at) return "";
  const std::string name = what.substr(0, value_at), value = what.substr(value_at + 8, range_at - value_at - 8);
  // "0.000000 to 7.000000" (CLI11 2.3) or "[0 - 7]" (CLI11 2.4).
  const char* at = what.c_str() + range_at + 14;
  if (*at == '[') ++at;
  char* end = nullptr;
  const double low = std::strtod(at, &end);
  if (end == at) return "";
  at = end;
  while (*at == ' ') ++at;
  if (std::strncmp(at, "to", 2) == 0) at += 2;
  else if (*at == '-') ++at;
  else return "";
  const double high = std::strtod(at, &end);
  if (end == at) return "";
  const bool integers = low == std::floor(low) && high == std::floor(high);
  const std::string range = integers ? format_number("%.0f", low) + "-" + format_number("%.0f", high)
                                     : "[" + format_number("%g", low) + ", " + format_number("%g", high) + "]";
  return name + ": " + quoted_word(value) + " is not in " + range;
}

std::string label_of(const CLI::Option& opt) { return opt.get_option_text().empty() ? opt.get_type_name() : opt.get_option_text(); }

// CLI11's "Could not convert: --repeat = x" (an option outside the table) as "--repeat: 'x' is not
// a valid value (--repeat K)"; "" for any other message.
std::string conversion_error(const CLI::App& app, const std::string& what) {
  const std::string head = "Could not convert: ";
  const size_t equals = what.find(" = ");
  if (what.rfind(head, 0) != 0 || equals == std::string::npos) return "";
  const std::string name = what.substr(head.size(), equals - head.size()), value = what.substr(equals + 3);
  const CLI::Option* opt = app.get_option_no_throw(name);
  const std::string label = opt ? label_of(*opt) : "";
  const std::string form = label.empty() ? "" : " (" + name + " " + label + ")";
  if (value.rfind("--", 0) == 0) return name + " needs a value before " + one_line(value.substr(0, 40)) + form;
  return name + ": " + quoted_word(value) + " is not a valid value" + form;
}

std::string choice_error(const std::string& what) {
  const size_t colon = what.find(": "), not_in = what.find(" not in {");
  if (colon == std::string::npos || not_in == std::string::npos || colon > not_in || what.back() != '}') return "";
  std::vector<std::string> accepted;
  const std::string list = what.substr(not_in + 9, what.size() - not_in - 10);
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    accepted.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return unknown_value(what.substr(0, colon), what.substr(colon + 2, not_in - colon - 2), accepted);
}

// CLI11's other messages in the harness's words, the option at fault named from `app`: an option
// given twice ("--out: At Most 1 required but received 2"), an option without its value ("--batch:
// 1 required INT missing"), a required one missing ("--out is required", "shards is required"),
// two that exclude each other ("--scenarios excludes --matrix"); "" for any other message.
std::string cli11_error(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  const auto option = [&](const std::string& name) -> const CLI::Option* {
    for (const CLI::Option* opt : app.get_options()) {
      if (opt->get_name() == name || opt->check_name(name)) return opt;
    }
    return nullptr;
  };
  const auto form = [&](const CLI::Option* opt, const std::string& name) {
    const std::string label = opt ? label_of(*opt) : "";
    return label.empty() ? "" : " (" + name + " " + label + ")";
  };
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    const std::string name = what.substr(0, what.find(':'));
    const CLI::Option* opt = option(name);
    if (opt && opt->results().size() > 1) {
      return name + " is given " + std::to_string(opt->results().size()) + " times; it takes one value";
    }
    return name + " needs a value" + form(opt, name);
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    const std::string suffix = " is required";
    if (what.size() <= suffix.size() || what.compare(what.size() - suffix.size(), suffix.size(), suffix) != 0) return "";
    const std::string name = what.substr(0, what.size() - suffix.size());
    const CLI::Option* opt = option(name);
    if (!opt) return "";
    const std::string help = opt->get_description().empty() ? "" : ": " + opt->get_description();
    if (opt->get_lnames().empty() && opt->get_snames().empty()) {  // a positional argument
      return "no " + name + " given (" + label_of(*opt) + help + ")";
    }
    return name + " is required (" + name + (label_of(*opt).empty() ? "" : " " + label_of(*opt)) + help + ")";
  }
  if (dynamic_cast<const CLI::ExcludesError*>(&e)) {
    const size_t at = what.find(" excludes ");
    if (at == std::string::npos) return "";
    return what.substr(0, at) + " and " + what.substr(at + 10) + " exclude each other: give one";
  }
  return "";
}

// CLI11 hands an option that needs a value the next word, an option's name too: "--batch --json
// r.json" leaves r.json unplaced, and the first thing wrong is --batch without its value.
std::string option_taken_as_value(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& value : opt->results()) {
      if (opt->get_expected_max() == 0 || value.size() < 2 || value[0] != '-' || !app.get_option_no_throw(value)) continue;
      const std::string label = label_of(*opt);
      return opt->get_name() + " needs a value before " + value + (label.empty() ? "" : " (" + opt->get_name() + " " + label + ")");
    }
  }
  return "";
}

bool parse_app(CLI::App& app, int argc, const char* const* argv, const std::string& program, ParseResult& result,
               const CommandOptions* options) {
  if (!has_help_format(app)) use_help_format(app);
  result.words.assign(argv, argv + argc);
  if ((argc == 2 || argc == 3) && std::string(argv[1]) == kHelpMarkdownFlag) {
    const std::string group = argc == 3 ? argv[2] : "";
    const std::vector<std::string> groups = documented_groups(app);
    if (!group.empty() && std::find(groups.begin(), groups.end(), group) == groups.end()) {
      result.exit_code = kExitUsage;
      result.message = program + ": error: " + unknown_word("group", group, groups);
    } else {
      result.message = options_markdown(app, program, group);
    }
    return false;
  }
  try {
    app.parse(argc, argv);
    refuse_impossible_paths(app);
    if (options) options->read();
    return true;
  } catch (const CLI::CallForHelp&) {
    result.message = app.help();
  } catch (const CLI::CallForAllHelp&) {
    result.message = app.help("", CLI::AppFormatMode::All);
  } catch (const CLI::ParseError& e) {
    const bool extras = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    std::string message = option_taken_as_value(app);
    if (message.empty()) message = unexpected_option(app, program, extras);
    if (message.empty()) message = conversion_error(app, e.what());
    if (message.empty()) message = range_error(e.what());
    if (message.empty()) message = choice_error(e.what());
    if (message.empty()) message = cli11_error(app, e);
    result.exit_code = kExitUsage;
    result.message = program + ": error: " + one_line(message.empty() ? e.what() : message);
  } catch (const InputError& e) {
    result.exit_code = kExitUsage;
    result.message = program + ": error: " + one_line(e.what());
  }
  return false;
}

ParseResult parse_command_line(int argc, const char* const* argv) {
  ParseResult result;
  CLI::App app{kRunDescription, "repro"};
  use_help_format(app, kRunUsage);
  const bool brief_help = asks_for_brief_help(argc, argv);
  app.footer(run_footer(brief_help));
  app.set_help_all_flag("--help-all", "every option (repro help options)");
  RunOptionParser parser(app);
  if (brief_help) keep_first_run_options(app);
  if (!parser.parse(argc, argv, "repro", result)) return result;
  try {
    result.options = parser.finish(result.words);
  } catch (const InputError& e) {
    result.exit_code = kExitUsage;
    result.message = std::string("repro: error: ") + one_line(e.what());
    return result;
  }
  result.run = true;
  return result;
}

RunSpec parse_run_spec(const std::vector<std::string>& args, RunCommand command, bool expand_replay) {
  CLI::App app{"", "repro"};
  RunOptionParser parser(app, command);
  parser.expand_replay(expand_replay);
  std::vector<const char*> argv{"repro"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  ParseResult result;
  if (!parser.parse(static_cast<int>(argv.size()), argv.data(), "repro", result)) {
    // The caller names itself ("repro sweep: error: ..."): the message without this parser's prefix.
    const std::string prefix = "repro: error: ";
    throw InputError(result.message.rfind(prefix, 0) == 0 ? result.message.substr(prefix.size()) : result.message);
  }
  return parser.spec();
}

RunOptions validate_run_spec(const RunSpec& spec, RunCommand command) {
  check_run_spec(spec, command);
  // As the child's parser takes a workload file's call: its derived options the spec does not
  // give, in front of the spec's on its command line.
  std::vector<std::string> words{"repro"};
  RunSpec full = spec;
  if (spec.workload_file) {
    const std::vector<std::string> derived = derived_options(spec, command, false);
    full.overlay(RunSpec::from_argv(derived));
    words.insert(words.end(), derived.begin(), derived.end());
  }
  const std::vector<std::string> given = spec.to_argv();
  words.insert(words.end(), given.begin(), given.end());
  return finish_options(full, command, words);
}

}  // namespace sdpa
