// run_options.cpp: CLI11 definition of a run's options.
#include "repro/cli/run_options.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <map>

#include "fixes/fix.h"
#include "math_sdpa/errors.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

namespace sdpa {

namespace {

const std::map<std::string, DType> kDTypes{{"bf16", DType::bf16}, {"fp16", DType::fp16}, {"fp32", DType::fp32}};
const std::map<std::string, Precision> kPrecisions{{"upcast", Precision::upcast}, {"native", Precision::native}};
const std::map<std::string, MaskKind> kMasks{
    {"none", MaskKind::none}, {"bool", MaskKind::boolean}, {"float", MaskKind::additive}, {"causal", MaskKind::causal}};

// The scenarios and fixes, for the end of --help.
std::string scenario_help() {
  std::string s = "Scenarios (--scenario N; README.md has a section on each):\n";
  for (const ScenarioInfo& sc : scenario_table()) {
    s += "  " + std::to_string(sc.number) + "  " + sc.title + "\n";
    if (sc.number == 0) continue;
    s += "     sets up: " + std::string(sc.setup) + "\n";
    s += "     runs: " + std::string(sc.runs) + "\n";
    s += "     a hang looks like: " + std::string(sc.hang_signature) + "\n";
    s += "     its fix (--fix on): fix " + std::to_string(sc.fix_number) + ", " + fix_info(sc.fix_number).what + "\n";
  }
  s += "Fixes (--fixes 1,2,3,4|all|none, any combination, any scenario):\n";
  for (int n = 1; n <= kFixCount; ++n) {
    s += "  " + std::to_string(n) + "  " + fix_info(n).name + " (" + fix_info(n).hook_point + ")\n";
  }
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
  for (FixPart part : {FixPart::gemm_host_sync, FixPart::softmax_host_sync, FixPart::device_sync}) {
    if (!o.fixes.has(part)) continue;
    const FixPartInfo& info = fix_part_info(part);
    throw InputError("--graph: fix " + std::to_string(info.fix) + "'s " + info.name + " part synchronises the host inside "
                     "the call, which a graph cannot hold (--fixes " + std::to_string(info.fix) + ":lean keeps its "
                     "stream-ordered part)");
  }
  if (o.log >= LogLevel::sync) throw InputError("--graph: --log sync and values synchronise after every stage inside the graph");
}

}  // namespace

void RunOptions::set_fixes(const FixSet& set) {
  fixes = set;
  settings = conditions;
  for (const auto& fix : make_fixes(fixes)) fix->configure(settings);
}

struct RunOptionParser::Fields {
  RunOptions o;
  // The problem as the command line gives it; finish() lays it over the workload's problem, if any.
  SdpaProblem given;
  std::string dtype = "bf16", precision = "upcast", mask = "none", mask_dims = "1x1", text_padding, workload;
  int64_t kv_heads = 0, kv_len = 0;
  double scale = std::nan("");
  std::string log = "off", log_format = "harness", inject;
  std::string fix = "off", fixes, alloc, stream, gemm_stream, gemm_order, k_layout, gemm_api, scores_to_host,
              scores_host_phase, host_touch, advise;
  int touch_streams = 0;
  bool full = false, graph = false;
  std::string seed;
  CLI::Option *dtype_opt, *batch_opt, *heads_opt, *kv_heads_opt, *q_len_opt, *kv_len_opt, *head_dim_opt, *mask_opt,
      *mask_dims_opt, *touch_streams_opt, *seed_opt;
};

RunOptionParser::RunOptionParser(CLI::App& app) : f_(std::make_unique<Fields>()) {
  Fields& f = *f_;
  RunOptions& o = f.o;
  SdpaProblem& p = f.given;
  app.option_defaults()->always_capture_default();
  app.add_option("--scenario", o.scenario, "0 = the full path; 1-5 the deadlock scenarios (below)")
      ->check(CLI::Range(0, 5));
  app.add_option("--fix", f.fix, "on: apply the scenario's own fix as designed; lean: in its lean form (docs/FIXES.md)")
      ->check(CLI::IsMember({"on", "off", "lean"}));
  app.add_option("--fixes", f.fixes,
                 "fixes to apply, any scenario: a list of N (as designed), N:lean or N:part/part (parts: 1 set-stream, "
                 "host-sync; 2 prefetch, host-sync, device-sync; 3 contiguous-kt; 4 stream-pool, private-pool), or all, "
                 "all:lean, none")
      ->default_str("none");
  app.add_flag("--full", f.full, "run the whole path under the scenario's conditions, not just the part it exercises");
  app.add_flag("--graph", f.graph,
               "capture the call's GPU stages into a CUDA graph on the first call and replay it on every call "
               "(scenario 5's condition; the fast path for small shapes)");

  app.add_option("--workload", f.workload,
                 "a layer of the failing workload as the problem (" + workload_names() +
                     "); the shape options below override its fields (scenario 2 runs qwen-image-1024 when no "
                     "shape is given)");
  f.dtype_opt = app.add_option("--dtype", f.dtype, "element type")->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--precision", f.precision,
                 "upcast: fp16/bf16 computed in fp32 (PyTorch default); native: stay in the dtype "
                 "(allow_fp16_bf16_reduction_math_sdp)")
      ->check(CLI::IsMember({"upcast", "native"}));
  f.batch_opt = app.add_option("-b,--batch", p.batch, "batch size B");
  f.heads_opt = app.add_option("--heads", p.q_heads, "query heads Hq");
  f.kv_heads_opt = app.add_option("--kv-heads", f.kv_heads, "key/value heads Hkv (default: Hq; fewer = grouped-query attention)")
                       ->default_str("Hq");
  f.q_len_opt = app.add_option("-L,--q-len", p.q_len, "query length L");
  f.kv_len_opt = app.add_option("-S,--kv-len", f.kv_len, "key/value length S (default: L)")->default_str("L");
  f.head_dim_opt = app.add_option("-E,--head-dim", p.head_dim, "head dimension E");
  f.mask_opt = app.add_option("--mask", f.mask, "attention mask: none, bool, float (additive), causal (is_causal)")
                   ->check(CLI::IsMember({"none", "bool", "float", "causal"}));
  f.mask_dims_opt = app.add_option("--mask-dims", f.mask_dims, "mask broadcast over batch x heads: 1x1, Bx1, 1xH or BxH")
                        ->check(CLI::IsMember({"1x1", "Bx1", "1xH", "BxH"}));
  app.add_option("--text-padding", f.text_padding,
                 "a boolean key-padding mask (implies --mask bool --mask-dims Bx1): the first TOKENS keys are text; "
                 "batch entries after the first attend only to the first VALID of them");
  app.add_option("--dropout", p.dropout_p, "dropout probability in [0, 1)");
  app.add_option("--scale", f.scale, "softmax scale")->default_str("1/sqrt(E)");
  // A string, parsed strictly below: CLI11 would accept 2^64 and wrap or saturate it.
  f.seed_opt = app.add_option("--seed", f.seed, "seed of the random inputs and of the dropout stream (0 to 2^64-1)")
      ->default_str(std::to_string(p.seed));

  app.add_option("--alloc", f.alloc, "where tensors live: managed, device, async (stream-ordered pool), host (pinned), system")
      ->default_str("managed");
  app.add_flag("--allow-oversubscription", o.allow_oversubscription,
               "allow managed/host/system allocations beyond 90% of free memory (can hang the GPU)");
  app.add_option("--advise", f.advise,
                 "cudaMemAdvise on every managed tensor: a list of preferred:gpu, preferred:cpu, accessed-by:gpu, "
                 "accessed-by:cpu, read-mostly")
      ->default_str("none");
  app.add_option("--stream", f.stream, "the path's stream: non-blocking, legacy (default stream), per-thread")
      ->default_str("non-blocking");
  app.add_option("--gemm-stream", f.gemm_stream, "stream of the Q.K^T GEMM's cuBLAS handle: same, legacy, aux")
      ->default_str("same (scenario 1: legacy)");
  app.add_option("--gemm-order", f.gemm_order, "ordering of that GEMM after Q and K: event, or none (a deliberate race)")
      ->default_str("event");
  app.add_option("--k-layout", f.k_layout, "layout K^T is viewed from: bhse (contiguous) or bshe ([B, S, H, E] buffer)")
      ->default_str("bhse (scenario 3 and the workloads: bshe)");
  app.add_option("--gemm-api", f.gemm_api, "Q.K^T entry point: strided (at::bmm) or batched (cublasGemmBatchedEx)")
      ->default_str("strided (scenario 3: batched)");
  app.add_option("--scores-to-host", f.scores_to_host, "host access to the scores: none, read, advise (prefer CPU), both")
      ->default_str("none (scenario 2: read)");
  app.add_option("--scores-host-phase", f.scores_host_phase,
                 "when: before (all of it before softmax starts) or during (a host thread while softmax runs)")
      ->default_str("before (scenario 2: during)");
  f.touch_streams_opt = app.add_option("--touch-streams", f.touch_streams, "streams touching every page at entry")
                            ->check(CLI::Range(0, 64))
                            ->default_str("0 (scenario 4: 4)");
  app.add_option("--host-touch", f.host_touch, "a host thread touches the pages at entry too: on or off")
      ->default_str("off (scenario 4: on)");

  app.add_option("--iters", o.iters, "calls of the path")->check(CLI::Range(1, 100000000));
  app.add_option("--sample-every", o.sample_every,
                 "soak: sample GPU free memory, RSS and live allocations every N calls; growth after the first "
                 "sample beyond 1 MiB fails the run (exit 1)")
      ->check(CLI::Range(0, 100000000));
  app.add_flag("--check", o.check, "compare with the float64 CPU reference and print the relative error");
  app.add_option("--json", o.json_path, "write the result as JSON to this file");
  app.add_option("--inputs", o.inputs_dir, "load q.npy, k.npy, v.npy and optional mask.npy from this directory");
  app.add_option("--save-output", o.save_output_path, "write the result tensor to this .npy file (float32)");
  app.add_option("--log", f.log,
                 "stage log on stderr: off; stages (lines only); sync (device sync after every stage); values "
                 "(also min/max/isnan/isinf/sums)")
      ->check(CLI::IsMember({"off", "stages", "sync", "values"}));
  app.add_option("--log-format", f.log_format,
                 "harness (every parameter, t_us= on each line) or seed (the original instrumentation's lines to the "
                 "character: [SDPA_DEBUG] ... [file:line], [CUDA_EVENT] name @ epoch us, with its device syncs)")
      ->check(CLI::IsMember({"harness", "seed"}));
  app.add_option("--stage-timeout", o.stage_timeout_s, "watchdog deadline per stage, seconds")->check(CLI::Range(0.01, 86400.0));
  app.add_option("--timeout", o.run_timeout_s, "watchdog deadline for the whole run, seconds (0 = none)")
      ->check(CLI::Range(0.0, 604800.0));
  app.add_flag("--no-fork", o.no_fork, "run in one process with a watchdog thread (for cuda-gdb and compute-sanitizer)");
  add_hang_options(app, o.hang);
  app.add_option("--inject", f.inject,
                 "fault injection: hang:STAGE, error:STAGE or slow:STAGE:MS; stages: entry_sync mask_prepare upcast "
                 "scale_q gqa_expand scale_k kt_contiguous qk_gemm mask_add scores_to_host softmax dropout pv_gemm "
                 "cast_output stream_sync");
  app.footer(scenario_help());
}

RunOptionParser::~RunOptionParser() = default;

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
  if (o.dtype_given || !workload) p.dtype = kDTypes.at(f.dtype);
  p.precision = kPrecisions.at(f.precision);
  if (f.mask_opt->count() || !workload) {
    p.mask = kMasks.at(f.mask);
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
  if (f.graph) c.graph = true;
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
  o.set_fixes(fixes);
  o.waiver = scenario_waiver(o.scenario, o.conditions).value_or("");

  parse_log_level(f.log, o.log);
  o.log_format = parse_log_format(f.log_format);
  if (o.settings.graph) check_graph_capturable(o);
  if (!f.inject.empty()) o.inject = parse_fault_spec(f.inject);
  if (o.inputs_dir.empty()) {  // with --inputs, shapes come from the files
    p.validate();
    if (o.inject.kind != FaultSpec::none && !stage_runs(o.inject.stage, p, o.settings)) {
      throw InputError(std::string("--inject: stage ") + stage_name(o.inject.stage) +
                       " does not run in this configuration (mask_prepare needs --mask bool|causal, upcast and "
                       "cast_output fp16/bf16 with --precision upcast, gqa_expand --kv-heads < --heads, kt_contiguous "
                       "a K^T copy (fix 3), mask_add a mask, scores_to_host scenario 2, dropout --dropout > 0, and "
                       "scenarios 1-3 stop early unless --full)");
    }
  }
  return o;
}

bool parse_app(CLI::App& app, int argc, const char* const* argv, const std::string& program, ParseResult& result) {
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

ParseResult parse_command_line(int argc, const char* const* argv) {
  ParseResult result;
  CLI::App app{
      "repro: the PyTorch Math SDPA path (bmm Q.K^T, mask, softmax, dropout, bmm V) rebuilt on cuBLAS and "
      "unified memory, to reproduce the DGX Spark hang in isolation. Subcommands: repro report|sweep|bench|info "
      "--help; repro --version.",
      "repro"};
  RunOptionParser parser(app);
  if (!parse_app(app, argc, argv, "repro", result)) return result;
  try {
    result.options = parser.finish(argc, argv);
  } catch (const InputError& e) {
    result.exit_code = kExitUsage;
    result.message = std::string("repro: error: ") + e.what();
    return result;
  }
  result.run = true;
  return result;
}

}  // namespace sdpa
