// run_options.cpp: CLI11 definition of a run's options.
#include "repro/cli/run_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>

#include "fixes/fix.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"
#include "repro/cli/help_format.h"
#include "repro/cli/inputs.h"
#include "repro/cli/workload_file.h"
#include "repro/common/output_paths.h"
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
const std::vector<std::string> kMaskDims{"1x1", "Bx1", "1xH", "BxH"};
const std::vector<std::string> kOnOff{"on", "off"};

// "a|b|c".
std::string joined(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : "|") + w;
  return s;
}

// "a|b|c" as "a, b, c" in a description, where the help may wrap between the words.
std::string listed(std::string choices) {
  for (size_t at; (at = choices.find('|')) != std::string::npos;) choices.replace(at, 1, ", ");
  return choices;
}

std::vector<std::string> log_level_words() {
  std::vector<std::string> words;
  for (LogLevel l : {LogLevel::off, LogLevel::stages, LogLevel::sync, LogLevel::values}) words.push_back(log_level_name(l));
  return words;
}

const char* kRunDescription =
    "repro: the PyTorch Math SDPA path (bmm Q.K^T, mask, softmax, dropout, bmm V) rebuilt on cuBLAS and unified "
    "memory, to reproduce the DGX Spark hang in isolation.";

// The subcommands as main.cpp dispatches them.
const char* kRunUsage =
    "repro [OPTIONS]                     run one configuration\n"
    "repro report|sweep|bench|info ...   a bug report, a matrix of runs, timings, the environment\n"
    "repro triage|minimize ...           everything a bug needs in one command; a failing run made small\n"
    "repro help [scenarios|COMMAND]      this help, the scenarios in full, a command's help\n"
    "repro -V, --version                 the version and how this binary was built";

// The end of --help: one line a scenario and a fix; scenarios_help() has them in full.
std::string run_footer() {
  std::string s = "Scenarios (--scenario N; each in full: repro help scenarios, docs/SCENARIOS.md):\n";
  for (const ScenarioInfo& sc : scenario_table()) {
    s += "  " + std::to_string(sc.number) + "  " + sc.title;
    if (sc.fix_number) s += " (its fix: " + std::to_string(sc.fix_number) + ")";
    s += "\n";
  }
  s += "Fixes (--fix on: the scenario's own; --fixes LIST: any, in any scenario):\n";
  for (int n = 1; n <= fix_count(); ++n) {
    s += "  " + std::to_string(n) + "  " + fix_info(n).name + ": " + fix_info(n).hook_point + "\n";
  }
  s += std::string("Exit codes: ") + kExitCodeSummary + ".\n";
  s += "Every option in full: docs/CLI.md.";
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

struct RunOptionParser::Fields {
  RunOptions o;
  // The problem as the command line gives it; finish() lays it over the workload's problem, if any.
  SdpaProblem given;
  std::string dtype = "bf16", precision = "upcast", mask = "none", mask_dims = "1x1", text_padding, workload, workload_file;
  int call = 0;
  bool call_only = false;
  int64_t kv_heads = 0, kv_len = 0;
  double scale = std::nan("");
  std::string log = "off", log_format = "harness", inject;
  std::string fix = "off", fixes, alloc, stream, gemm_stream, gemm_order, k_layout, gemm_api, scores_to_host,
              scores_host_phase, host_touch, advise;
  int touch_streams = 0;
  bool full = false, graph = false, backward = false;
  std::string seed;
  // The training context.
  std::string alloc_timing, layers, retain, ballast, ballast_alloc, ballast_touch, chunk_size;
  int steps = 0;
  CLI::Option *dtype_opt, *batch_opt, *heads_opt, *kv_heads_opt, *q_len_opt, *kv_len_opt, *head_dim_opt, *mask_opt,
      *mask_dims_opt, *touch_streams_opt, *seed_opt, *iters_opt = nullptr, *log_opt = nullptr, *stall_threshold_opt = nullptr, *steps_opt = nullptr,
      *memory_trace_opt = nullptr, *host_load_opt = nullptr;
};

namespace {

using Fields = RunOptionParser::Fields;

// What SDPA is called with.
void add_problem_options(CLI::App& app, Fields& f, RunCommand command) {
  SdpaProblem& p = f.given;
  app.add_option("--workload", f.workload,
                 "a failing workload's layer (shape options override it): " + listed(workload_names()))
      ->option_text("NAME");
  app.add_option("--workload-file", f.workload_file, "replay a call scripts/sdpa_capture.py captured (docs/CAPTURE.md)")
      ->option_text("FILE");
  app.add_option("--call", f.call, "the workload file's call N, and its process's context")->option_text("N")->default_str("0");
  app.add_flag("--call-only", f.call_only, "the call without its process's context");
  f.dtype_opt = app.add_option("--dtype", f.dtype, "element type")
                    ->check(CLI::IsMember(kDTypes.names()))
                    ->option_text(kDTypes.accepted());
  app.add_option("--precision", f.precision, "compute fp16/bf16 in fp32 (PyTorch) or in the dtype")
      ->check(CLI::IsMember(kPrecisions.names()))
      ->option_text(kPrecisions.accepted());
  f.batch_opt = app.add_option("-b,--batch", p.batch, "batch size B")->option_text("INT");
  f.heads_opt = app.add_option("--heads", p.q_heads, "query heads Hq")->option_text("INT");
  f.kv_heads_opt = app.add_option("--kv-heads", f.kv_heads, "key/value heads Hkv; < Hq: grouped-query attention")
                       ->option_text("INT")
                       ->default_str("Hq");
  f.q_len_opt = app.add_option("-L,--q-len", p.q_len, "query length L")->option_text("INT");
  f.kv_len_opt = app.add_option("-S,--kv-len", f.kv_len, "key/value length S")->option_text("INT")->default_str("L");
  f.head_dim_opt = app.add_option("-E,--head-dim", p.head_dim, "head dimension E")->option_text("INT");
  f.mask_opt = app.add_option("--mask", f.mask, "attention mask: none, bool, float (additive), causal")
                   ->check(CLI::IsMember(kMasks.names()))
                   ->option_text("KIND");
  f.mask_dims_opt = app.add_option("--mask-dims", f.mask_dims, "a bool or float mask's broadcast over batch x heads")
                        ->check(CLI::IsMember(kMaskDims))
                        ->option_text(joined(kMaskDims));
  app.add_option("--text-padding", f.text_padding,
                 "bool mask: batch entries after the first see VALID of TOKENS text keys")
      ->option_text("TOKENS:VALID");
  app.add_option("--dropout", p.dropout_p, "dropout probability in [0, 1)")->option_text("P");
  app.add_option("--scale", f.scale, "softmax scale, not 0")->option_text("X")->default_str("1/sqrt(E)");
  // A string, parsed strictly in finish(): CLI11 would accept 2^64 and wrap or saturate it.
  f.seed_opt = app.add_option("--seed", f.seed, "seed of the random inputs and the dropout stream")
                   ->option_text("SEED")
                   ->default_str(std::to_string(p.seed));
  if (command == RunCommand::report) return;  // the reproducer regenerates its inputs from --seed
  app.add_option("--inputs", f.o.inputs_dir, "tensors from np.save: q.npy, k.npy, v.npy, mask.npy if masked")
      ->option_text("DIR");
}

// Where the tensors live and who touches them.
void add_memory_options(CLI::App& app, Fields& f) {
  app.add_option("--alloc", f.alloc, "allocation: " + listed(path_setting_choices("--alloc")))
      ->option_text("KIND")
      ->default_str("managed; scenario 6: device");
  app.add_flag("--allow-oversubscription", f.o.allow_oversubscription,
               "allocate beyond 90% of the memory available (can hang the GPU, or a DGX Spark until a power cycle)");
  app.add_option("--advise", f.advise, "cudaMemAdvise on each managed tensor, a list of " + listed(path_setting_choices("--advise")))
      ->option_text("LIST")
      ->default_str("none");
  f.touch_streams_opt = app.add_option("--touch-streams", f.touch_streams, "streams touching every page at entry, 0-64")
                            ->check(CLI::Range(0, 64))
                            ->option_text("INT")
                            ->default_str("0; scenario 4: 4");
  app.add_option("--host-touch", f.host_touch, "a host thread touches them too")
      ->option_text(joined(kOnOff))
      ->default_str("off; scenario 4: on");
}

void add_scenario_options(CLI::App& app, Fields& f, RunCommand command) {
  app.add_option("--scenario", f.o.scenario, "0: the whole path; 1-6: the hang scenarios (repro help scenarios)")
      ->check(CLI::Range(0, scenario_count() - 1))
      ->option_text(scenario_range())
      ->required(command == RunCommand::report);  // a report is about one scenario's hang
  if (command != RunCommand::report) {  // a report runs the scenario's own fix off and on
    app.add_option("--fix", f.fix, "the scenario's own fix: on (as designed), lean (its lean form), off")
        ->check(CLI::IsMember({"on", "off", "lean"}))
        ->option_text("on|off|lean");
    app.add_option("--fixes", f.fixes,
                   "fixes in any scenario, joined by commas: N (as designed), N:lean, N:part/part "
                   "(docs/FIXES.md), all, all:lean, none")
        ->option_text("LIST")
        ->default_str("none");
  }
  app.add_flag("--full", f.full, "the whole path under the scenario's conditions, not only its part");
  app.add_flag("--graph", f.graph,
               "capture the call's GPU stages into a CUDA graph once and replay it every call (scenario 5)");
}

// The conditions a scenario sets up, each also settable alone.
void add_condition_options(CLI::App& app, Fields& f) {
  app.add_option("--stream", f.stream, "stream: " + listed(path_setting_choices("--stream")))
      ->option_text("MODE")
      ->default_str("legacy");
  app.add_option("--gemm-stream", f.gemm_stream, "Q.K^T stream: " + listed(path_setting_choices("--gemm-stream")))
      ->option_text("MODE")
      ->default_str("same; scenario 1: blocking");
  app.add_option("--gemm-order", f.gemm_order, "that GEMM after Q and K: an event or nothing explicit")
      ->option_text(path_setting_choices("--gemm-order"))
      ->default_str("event; scenario 1: none");
  app.add_option("--k-layout", f.k_layout, "K^T viewed from a contiguous or a [B, S, H, E] buffer")
      ->option_text(path_setting_choices("--k-layout"))
      ->default_str("bhse; scenario 3 and the workloads: bshe");
  app.add_option("--gemm-api", f.gemm_api, "Q.K^T as at::bmm or cublasGemmBatchedEx")
      ->option_text(path_setting_choices("--gemm-api"))
      ->default_str("strided; scenario 3: batched");
  app.add_option("--scores-to-host", f.scores_to_host, "host access to the scores: " + listed(path_setting_choices("--scores-to-host")))
      ->option_text("MODE")
      ->default_str("none; scenario 2: read");
  app.add_option("--scores-host-phase", f.scores_host_phase,
                 "that access relative to softmax: " + listed(path_setting_choices("--scores-host-phase")))
      ->option_text("WHEN")
      ->default_str("before; scenario 2: during");
}

// The training process around the call (docs/CONTEXT.md): the context ladder's conditions.
void add_context_options(CLI::App& app, Fields& f, RunCommand command) {
  RunOptions& o = f.o;
  app.add_option("--alloc-timing", f.alloc_timing,
                 "intermediates allocated " + listed(path_setting_choices("--alloc-timing")) +
                     ": before the first call, or inside each call as PyTorch does")
      ->option_text("WHEN")
      ->default_str("upfront; scenario 6: per-call");
  app.add_option("--layers", f.layers, "attention layers a step runs in sequence, each with its own Q, K, V, output; "
                                       "model: the workload's block count")
      ->option_text("N|model")
      ->default_str("1; scenario 6: 60");
  app.add_option("--retain", f.retain, "what each layer keeps until the step ends: " + listed(path_setting_choices("--retain")))
      ->option_text("WHAT")
      ->default_str("none; scenario 6: autograd");
  if (command != RunCommand::bench) {
    f.steps_opt = app.add_option("--steps", f.steps, "training steps: passes over the layers, memory sampled after each")
                      ->check(CLI::Range(1, 100000000))
                      ->option_text("N");
  }
  app.add_option("--chunk-size", f.chunk_size, "fix 5's chunk part: each chunk's scores at most this many bytes")
      ->option_text("SIZE")
      ->default_str("256M");
  app.add_flag("--backward", f.backward,
               "the training step: each layer's backward call after the forward calls (dO seeded, or --inputs' "
               "dout.npy); --check checks dQ, dK, dV");
  // A benchmark times the path's passes; the context around it is a run's, a report's or a sweep's.
  if (command == RunCommand::bench) return;
  app.add_option("--ballast", f.ballast, "memory held by the rest of the model: a size (40G) or a fraction (0.8) of "
                                         "the memory available")
      ->option_text("SIZE|FRACTION");
  app.add_option("--ballast-alloc", f.ballast_alloc, "the ballast's memory: managed, device, host, system")
      ->option_text("KIND")
      ->default_str("device");
  app.add_option("--ballast-touch", f.ballast_touch, "who touches it while the path runs: " + listed(ballast_touch_choices()))
      ->option_text("WHO")
      ->default_str("none");
  f.host_load_opt = app.add_option("--host-load", o.context.host_load_threads,
                                   "data-loader-like host threads (pageable reads and writes, pinned copies)")
                        ->check(CLI::Range(0, 256))
                        ->option_text("THREADS");
  f.memory_trace_opt = app.add_flag("--memory-trace", o.memory_trace,
                                    "memory (MemAvailable, cudaMemGetInfo) at every stage, in the log and the JSON "
                                    "(scenario 6: on)");
  app.add_flag("--uvm-counters", o.uvm_counters,
               "count managed memory's migrations and page faults (CUPTI), the path's and the ballast's apart");
  if (command == RunCommand::run) {
    app.add_flag("--plan", o.plan_only, "print the memory plan (what each layer allocates and keeps, the peak, the "
                                        "memory available) and exit; allocates nothing");
  }
}

void add_logging_options(CLI::App& app, Fields& f, RunCommand command) {
  RunOptions& o = f.o;
  f.log_opt = app.add_option("--log", f.log,
                 "stage log on stderr: " + listed(joined(log_level_words())) +
                     "; sync adds a device sync per stage, values min/max/nan/sums")
      ->check(CLI::IsMember(log_level_words()))
      ->option_text("LEVEL");
  const std::vector<std::string> formats{log_format_name(LogFormat::harness), log_format_name(LogFormat::sdpa_debug)};
  app.add_option("--log-format", f.log_format,
                 "sdpa-debug: the debug instrumentation's lines, exactly (and --log values unless --log)")
      ->check(CLI::IsMember(formats))
      ->option_text(joined(formats));
  app.add_flag("--log-extras", o.log_extras, "sdpa-debug: also the harness's own lines (extra stages, notes)");
  app.add_option("--stage-timeout", o.stage_timeout_s, "the watchdog's deadline for any one stage, seconds")
      ->check(CLI::Range(0.01, 86400.0))
      ->option_text("S");
  f.stall_threshold_opt = app.add_option("--stall-threshold", o.stall_threshold_s,
                 "a finished stage longer than this is a stall, seconds; 0: off")
      ->check(CLI::Range(0.0, 86400.0))
      ->option_text("S");
  app.add_option("--timeout", o.run_timeout_s, "its deadline for the whole run, seconds; 0: none")
      ->check(CLI::Range(0.0, 604800.0))
      ->option_text("S");
  if (command != RunCommand::report) {  // a report supervises every run itself
    app.add_flag("--no-fork", o.no_fork, "one process, a watchdog thread (for cuda-gdb, compute-sanitizer)");
  }
  if (command != RunCommand::bench) {  // a benchmark under it would time the waits
    app.add_flag("--launch-blocking", o.launch_blocking, "CUDA_LAUNCH_BLOCKING=1: each launch waits for its kernel");
  }
  // A report puts each run's log and snapshot into its folder.
  add_hang_options(app, o.hang, command != RunCommand::report);
  app.add_option("--inject", f.inject,
                 "a fault, to test the watchdog: hang:STAGE, error:STAGE or slow:STAGE:MS; STAGE: " + stage_names())
      ->option_text("FAULT");
}

void add_output_options(CLI::App& app, Fields& f, RunCommand command) {
  RunOptions& o = f.o;
  if (command == RunCommand::report) o.iters = kReportIters;
  if (command != RunCommand::bench) {  // a bench counts its calls with -w and -n
    f.iters_opt = app.add_option("--iters", o.iters, "calls of the path (passes over its layers)")
                      ->check(CLI::Range(1, 100000000))
                      ->option_text("INT");
    app.add_option("--sample-every", o.sample_every,
                   "soak: sample memory every N (< --iters) calls; exit 1 if it grows")
        ->check(CLI::Range(0, 100000000))
        ->option_text("N")
        ->default_str("");  // 0: no soak
  }
  if (command == RunCommand::report) return;  // a report checks every call and writes its own files
  app.add_flag("--check", o.check, "compare with the float64 CPU reference");
  app.add_option("--json", o.json_path, "write the result as JSON")->option_text("FILE");
  app.add_option("--save-output", o.save_output_path, "write the result tensor as float32 .npy")->option_text("FILE");
}

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
void apply_context_options(const Fields& f, const Workload* workload, RunOptions& o) {
  PathSettings& c = o.conditions;
  if (!f.alloc_timing.empty()) c.alloc_timing = parse_alloc_timing(f.alloc_timing);
  if (!f.retain.empty()) c.retain = parse_retain(f.retain);
  if (!f.layers.empty()) c.layers = parse_layers(f.layers, workload);
  if (f.steps_opt && f.steps_opt->count()) {
    if (f.iters_opt && f.iters_opt->count()) {
      throw InputError("--steps and --iters count the same passes over the layers: give one (--steps also samples "
                       "memory after every step)");
    }
    o.iters = f.steps;
    o.steps = true;
    // About a hundred samples, however many steps: each step's time is kept anyway.
    if (o.sample_every == 0 && o.iters > 1) o.sample_every = std::max(1, o.iters / 100);
  }
  BallastSpec& b = o.context.ballast;
  if (!f.ballast.empty()) b = parse_ballast(f.ballast);
  if (!f.ballast_alloc.empty()) {
    b.kind = parse_alloc_kind(f.ballast_alloc);
    if (b.kind == AllocKind::async || b.kind == AllocKind::vmm) {
      throw InputError(std::string("--ballast-alloc: ") + alloc_kind_name(b.kind) +
                       " is an allocator of the path's; the ballast is managed, device, host or system memory");
    }
  }
  if (!f.ballast_touch.empty()) b.touch = parse_ballast_touch(f.ballast_touch);
  if ((!f.ballast_alloc.empty() || !f.ballast_touch.empty()) && !b.given()) {
    throw InputError("--ballast-alloc and --ballast-touch describe a ballast: give its size with --ballast");
  }
  if ((b.touch == BallastTouch::host || b.touch == BallastTouch::both) && !host_accessible(b.kind)) {
    throw InputError(std::string("--ballast-touch ") + ballast_touch_name(b.touch) + ": the host cannot touch " +
                     alloc_kind_name(b.kind) + " memory (--ballast-alloc managed, host or system)");
  }
  if (!f.chunk_size.empty()) o.chunk_size = parse_size(f.chunk_size, "--chunk-size");
  if (scenario_info(o.scenario).memory_trace) o.memory_trace = true;
  if (f.backward) {
    // The backward reads what autograd saved, from the output the whole forward path made.
    if (c.retain == Retain::none && !f.retain.empty()) {
      throw InputError("--retain none: --backward reads what autograd keeps for it (--retain autograd)");
    }
    c.backward = true;
    c.retain = Retain::autograd;
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
                                          : false;
    if (!holds) return false;
  }
  const SdpaProblem& p = o.problem;
  for (const FaultSpec::AtLeast& a : o.inject.only_sizes) {
    const int64_t size = a.size == 'B' ? p.batch : a.size == 'H' ? p.q_heads : a.size == 'L' ? p.q_len : a.size == 'S' ? p.kv_len : p.head_dim;
    if (size < a.min) return false;
  }
  return o.inject.only_alloc.empty() || o.inject.only_alloc == alloc_kind_name(o.settings.alloc);
}

// Context options that cannot act together.
void refuse_context_conflicts(const Fields& f, const RunOptions& o) {
  const PathSettings& ps = o.settings;
  if (!f.chunk_size.empty() && ps.chunk_bytes == 0) {
    throw InputError("--chunk-size: fix 5's chunk part is not on (--fixes 5 or 5:chunk)");
  }
  if (ps.graph && (ps.layers > 1 || ps.alloc_timing == AllocTiming::per_call)) {
    throw InputError("--graph replays one layer's tensors at fixed addresses: it takes --layers 1 and --alloc-timing upfront");
  }
  const std::string refused = fixes_refuse(o.fixes, o.problem, ps);
  if (!refused.empty()) throw InputError(refused);
  if (o.plan_only && (!o.json_path.empty() || !o.save_output_path.empty() || o.check)) {
    throw InputError("--plan prints the memory plan and runs nothing: --json, --save-output and --check have nothing to do");
  }
}

// What the configuration would silently ignore: refused, so a run never seems to have tested
// what it did not.
void refuse_ignored_options(const Fields& f, const RunOptions& o) {
  const SdpaProblem& p = o.problem;
  if (p.dropout_p > 0 && !stage_runs(Stage::dropout, p, o.settings)) {
    throw InputError("--dropout: scenario " + std::to_string(o.scenario) + "'s call stops after " +
                     stage_name(o.settings.last_stage) + ", before dropout (add --full to run the whole path)");
  }
  if (f.mask_dims_opt->count()) {
    if (!o.inputs_dir.empty()) throw InputError("--mask-dims: with --inputs the broadcast is mask.npy's shape");
    if (!f.text_padding.empty()) throw InputError("--mask-dims: --text-padding is a Bx1 mask; it excludes --mask-dims");
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
}

// --workload-file: the command line with the captured call's derived options in front of it,
// leaving out those the command line decides itself: an option it gives (with the others of its
// group: the mask's, the ballast's), the shapes, dtype and mask when --inputs files give them, the
// memory when a scenario of 1 to 5 sets up its own (managed: its hypothesis is about migration),
// the whole context with --call-only, and the allocation timing and retention when a report's
// ladder climbs them.
std::vector<std::string> with_replayed_call(const CLI::App& app, const std::vector<std::string>& words) {
  const auto given = [&](const std::string& name) {
    const CLI::Option* opt = app.get_option_no_throw(name);
    return opt && opt->count() > 0;
  };
  const auto value = [&](const std::string& name) { return app.get_option(name)->as<std::string>(); };
  const int call = given("--call") ? app.get_option("--call")->as<int>() : 0;
  const CallReplay replay = replay_call(load_workload_file(value("--workload-file")), call);
  const int scenario = given("--scenario") ? app.get_option("--scenario")->as<int>() : 0;
  const std::vector<std::vector<std::string>> groups = {
      {"--mask", "--mask-dims", "--text-padding"},
      {"--ballast", "--ballast-alloc", "--ballast-touch"},
  };
  const auto decided_here = [&](const std::string& name) {
    if (given(name)) return true;
    for (const auto& group : groups) {
      if (std::find(group.begin(), group.end(), name) == group.end()) continue;
      for (const std::string& other : group) {
        if (given(other)) return true;
      }
    }
    return false;
  };
  std::vector<std::string> derived;
  const auto take = [&](const DerivedOption& d) {
    derived.push_back(d.name);
    if (!d.value.empty()) derived.push_back(d.value);
  };
  const bool inputs = given("--inputs");
  for (const DerivedOption& d : replay.problem) {
    const bool from_files = d.name != "--k-layout" && d.name != "--scale" && d.name != "--dropout";
    if (!decided_here(d.name) && !(inputs && from_files)) take(d);
  }
  if (!given("--call-only")) {
    const bool ladder = given("--ladder");
    for (const DerivedOption& d : replay.context) {
      if (decided_here(d.name)) continue;
      if ((d.name == "--alloc" || d.name == "--alloc-timing") && scenario_info(scenario).needs_migrating_memory) continue;
      if ((d.name == "--alloc-timing" || d.name == "--retain") && ladder) continue;
      // Options a command does not take (a bench has no ballast) are the command's to leave out.
      if (!app.get_option_no_throw(d.name)) continue;
      take(d);
    }
  }
  std::vector<std::string> out{words.front()};
  out.insert(out.end(), derived.begin(), derived.end());
  out.insert(out.end(), words.begin() + 1, words.end());
  return out;
}

// Every file the run will write, checked before the GPU is touched.
void check_output_paths(const RunOptions& o) {
  if (!o.json_path.empty()) check_file_writable("--json", o.json_path);
  if (!o.save_output_path.empty()) check_file_writable("--save-output", o.save_output_path);
  if (!o.hang.log_file.empty()) check_file_appendable("--log-file", o.hang.log_file);
  if (!o.hang.snapshot_dir.empty()) check_dir_creatable("--snapshot-dir", o.hang.snapshot_dir);
}

}  // namespace

RunOptionParser::RunOptionParser(CLI::App& app, RunCommand command) : f_(std::make_unique<Fields>()) {
  Fields& f = *f_;
  app.option_defaults()->always_capture_default();
  // Each group in the order --help lists them.
  app.option_defaults()->group("Problem");
  add_problem_options(app, f, command);
  app.option_defaults()->group("Memory");
  add_memory_options(app, f);
  app.option_defaults()->group("Scenario and fixes");
  add_scenario_options(app, f, command);
  add_condition_options(app, f);
  app.option_defaults()->group("Training context");
  add_context_options(app, f, command);
  app.option_defaults()->group("Logging and watchdog");
  add_logging_options(app, f, command);
  app.option_defaults()->group("Run and output");
  add_output_options(app, f, command);
}

RunOptionParser::~RunOptionParser() = default;

RunOptions RunOptionParser::finish(const std::vector<std::string>& words) const {
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  return finish(static_cast<int>(argv.size()), argv.data());
}

RunOptions RunOptionParser::finish(int argc, const char* const* argv) const {
  const Fields& f = *f_;
  RunOptions o = f.o;
  SdpaProblem& p = o.problem;
  for (int i = 0; i < argc; ++i) o.argv.emplace_back(argv[i]);
  o.dtype_given = f.dtype_opt->count() > 0;
  // The problem: the defaults, or a workload's (named, or the scenario's own when the command
  // line gives no shape), then each option the command line gives.
  const bool shape_given = f.batch_opt->count() || f.heads_opt->count() || f.kv_heads_opt->count() || f.q_len_opt->count() ||
                           f.kv_len_opt->count() || f.head_dim_opt->count() || !o.inputs_dir.empty();
  o.workload = f.workload;
  o.workload_file = f.workload_file;
  o.call = f.call;
  if (!o.workload_file.empty()) {
    if (!o.workload.empty()) throw InputError("--workload and --workload-file: one workload at a time");
    o.replay_approximations = replay_call(load_workload_file(o.workload_file), o.call).approximations;
  } else if (f.call != 0 || f.call_only) {
    throw InputError(std::string(f.call_only ? "--call-only" : "--call") + ": it selects from a --workload-file");
  }
  if (o.workload.empty() && !shape_given) o.workload = scenario_info(o.scenario).default_workload;
  const Workload* workload = o.workload.empty() ? nullptr : &find_workload(o.workload);
  p = workload ? workload->problem : SdpaProblem{};
  const SdpaProblem& g = f.given;
  if (f.batch_opt->count()) p.batch = g.batch;
  if (f.heads_opt->count()) p.q_heads = g.q_heads;
  if (f.q_len_opt->count()) p.q_len = g.q_len;
  if (f.head_dim_opt->count()) p.head_dim = g.head_dim;
  // --kv-heads and -S follow --heads and -L unless given themselves.
  if (f.kv_heads_opt->count()) p.kv_heads = f.kv_heads;
  else if (f.heads_opt->count() || !workload) p.kv_heads = p.q_heads;
  if (f.kv_len_opt->count()) p.kv_len = f.kv_len;
  else if (f.q_len_opt->count() || !workload) p.kv_len = p.q_len;
  if (o.dtype_given || !workload) p.dtype = kDTypes.parse(f.dtype);
  p.precision = kPrecisions.parse(f.precision);
  if (f.mask_opt->count() || !workload) {
    p.mask = kMasks.parse(f.mask);
    p.mask_pattern = MaskPattern::random;
  }
  if (f.mask_dims_opt->count() || !workload) {
    p.mask_per_batch = f.mask_dims[0] == 'B';
    p.mask_per_head = f.mask_dims[2] == 'H';
  }
  if (!f.text_padding.empty()) {
    if (f.mask_opt->count() && f.mask != "bool") throw InputError("--text-padding is a boolean mask: it excludes --mask " + f.mask);
    p.mask = MaskKind::boolean;
    p.mask_per_batch = true;
    p.mask_per_head = false;
    p.mask_pattern = MaskPattern::text_padding;
    parse_text_padding(f.text_padding, p.text_tokens, p.text_valid);
  }
  p.dropout_p = g.dropout_p;
  if (!std::isnan(f.scale)) p.scale = f.scale;
  if (f.seed_opt->count()) p.seed = parse_seed(f.seed);

  // Defaults, then the scenario's preconditions, then what the command line says explicitly.
  PathSettings& c = o.conditions;
  if (workload) c.k_layout = workload->k_layout;  // what the model hands SDPA; the scenario may change it
  apply_scenario(o.scenario, c);
  if (f.full) c.last_stage = Stage::stream_sync;
  // A graph is captured on a side stream, as torch.cuda.graph does: the legacy default stream,
  // the default otherwise, cannot be captured.
  if (f.graph) c.graph = true, c.stream = StreamMode::non_blocking;
  if (!f.alloc.empty()) c.alloc = parse_alloc_kind(f.alloc);
  if (!f.stream.empty()) c.stream = parse_stream_mode(f.stream);
  if (!f.gemm_stream.empty()) c.qk_gemm_stream = parse_gemm_stream(f.gemm_stream);
  if (!f.gemm_order.empty()) c.qk_gemm_order = parse_gemm_order(f.gemm_order);
  if (!f.k_layout.empty()) c.k_layout = parse_k_layout(f.k_layout);
  if (!f.gemm_api.empty()) c.qk_gemm_api = parse_gemm_api(f.gemm_api);
  if (!f.scores_to_host.empty()) c.scores_to_host = parse_scores_to_host(f.scores_to_host);
  if (!f.scores_host_phase.empty()) c.scores_host_phase = parse_scores_host_phase(f.scores_host_phase);
  if (f.touch_streams_opt->count()) c.entry_touch_streams = f.touch_streams;
  if (!f.host_touch.empty()) {
    if (f.host_touch != "on" && f.host_touch != "off") {
      throw InputError("--host-touch: unknown value '" + f.host_touch + "' (expected on|off)");
    }
    c.entry_host_touch = f.host_touch == "on";
  }
  if (!f.advise.empty()) c.advice = parse_advice_list(f.advise);
  apply_context_options(f, workload, o);

  FixSet fixes = parse_fix_list(f.fixes);
  o.own_fix = f.fix != "off";
  if (o.own_fix) {
    if (o.scenario == 0) throw InputError("--fix " + f.fix + ": scenario 0 has no fix of its own (use --fixes 1,2,3,4 or all)");
    const int own = scenario_info(o.scenario).fix_number;
    if (f.fix == "lean") {
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

  parse_log_level(f.log, o.log);
  o.log_format = parse_log_format(f.log_format);
  // The instrumentation synchronised the device after every step and printed values: so does its
  // format, unless --log says otherwise.
  if (o.log_format == LogFormat::sdpa_debug && f.log_opt->count() == 0) o.log = LogLevel::values;
  if (o.log_extras && o.log_format != LogFormat::sdpa_debug) {
    throw InputError("--log-extras: the harness format has every line already; it adds to --log-format sdpa-debug");
  }
  if (o.settings.graph) check_graph_capturable(o);
  if (!f.inject.empty()) o.inject = parse_fault_spec(f.inject);
  o.inject_armed = fault_context_holds(o);
  refuse_ignored_options(f, o);
  refuse_context_conflicts(f, o);
  if (o.inject.kind != FaultSpec::none && o.inject_armed && !stage_runs(o.inject.stage, o.problem, o.settings)) {
    throw InputError(std::string("--inject: stage ") + stage_name(o.inject.stage) +
                     " does not run in this configuration (mask_prepare needs --mask bool|causal, upcast and "
                     "cast_output fp16/bf16 with --precision upcast, gqa_expand --kv-heads < --heads, kt_contiguous "
                     "a K^T copy (fix 3), mask_add a mask, scores_to_host scenario 2, dropout --dropout > 0, the "
                     "graph_* stages --graph, alloc_* and free_* --alloc-timing per-call, and scenarios 1-3 stop "
                     "early unless --full)");
  }
  if (o.inject.only_layer > o.settings.layers) {
    throw InputError("--inject: @layer=" + std::to_string(o.inject.only_layer) + " but the run has " +
                     std::to_string(o.settings.layers) + " layer(s)");
  }
  if (o.inject.only_step > o.iters) {
    throw InputError("--inject: @step=" + std::to_string(o.inject.only_step) + " but the run makes " + std::to_string(o.iters) +
                     " step(s)");
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
  if (f.stall_threshold_opt->count() == 0 && o.stall_threshold_s >= o.stage_timeout_s) o.stall_threshold_s = 0;
  if (o.stall_threshold_s >= o.stage_timeout_s) {
    throw InputError("--stall-threshold " + format_number("%g", o.stall_threshold_s) +
                     " s is not below the stage deadline (--stage-timeout " + format_number("%g", o.stage_timeout_s) +
                     " s): a stall is a stage that finishes under the deadline");
  }
  check_output_paths(o);
  return o;
}

bool parse_app(CLI::App& app, int argc, const char* const* argv, const std::string& program, ParseResult& result) {
  if (!has_help_format(app)) use_help_format(app);
  result.words.assign(argv, argv + argc);
  try {
    app.parse(argc, argv);
    return true;
  } catch (const CLI::CallForHelp&) {
    result.message = app.help();
  } catch (const CLI::ParseError& e) {
    result.exit_code = kExitUsage;
    result.message = program + ": error: " + one_line(e.what());
  }
  return false;
}

bool parse_run_app(CLI::App& app, int argc, const char* const* argv, const std::string& program, ParseResult& result) {
  if (!parse_app(app, argc, argv, program, result)) return false;
  const CLI::Option* workload_file = app.get_option_no_throw("--workload-file");
  if (!workload_file || !workload_file->count()) return true;
  try {
    result.words = with_replayed_call(app, result.words);
  } catch (const InputError& e) {
    result.exit_code = kExitUsage;
    result.message = program + ": error: " + one_line(e.what());
    return false;
  }
  std::vector<const char*> words;
  for (const std::string& w : result.words) words.push_back(w.c_str());
  app.clear();
  return parse_app(app, static_cast<int>(words.size()), words.data(), program, result);
}

ParseResult parse_command_line(int argc, const char* const* argv) {
  ParseResult result;
  CLI::App app{kRunDescription, "repro"};
  use_help_format(app, kRunUsage);
  app.footer(run_footer());
  RunOptionParser parser(app);
  if (!parse_run_app(app, argc, argv, "repro", result)) return result;
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

}  // namespace sdpa
