// options.cpp: CLI11 definition of repro's options.
#include "options.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <map>

#include "math_sdpa/errors.h"

namespace sdpa {

namespace {

const std::map<std::string, DType> kDTypes{{"bf16", DType::bf16}, {"fp16", DType::fp16}, {"fp32", DType::fp32}};
const std::map<std::string, Precision> kPrecisions{{"upcast", Precision::upcast}, {"native", Precision::native}};
const std::map<std::string, MaskKind> kMasks{
    {"none", MaskKind::none}, {"bool", MaskKind::boolean}, {"float", MaskKind::additive}, {"causal", MaskKind::causal}};
const std::map<std::string, AllocKind> kAllocs{{"managed", AllocKind::managed}, {"device", AllocKind::device}};

// CLI11's own messages can span lines; the harness promises one.
std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

ParseResult parse_command_line(int argc, const char* const* argv) {
  ParseResult result;
  RunOptions& o = result.options;
  SdpaProblem& p = o.problem;
  for (int i = 0; i < argc; ++i) o.argv.emplace_back(argv[i]);

  CLI::App app{
      "repro: the PyTorch Math SDPA path (bmm Q.K^T, mask, softmax, dropout, bmm V) rebuilt on cuBLAS and "
      "unified memory, to reproduce the DGX Spark hang in isolation.",
      "repro"};
  app.option_defaults()->always_capture_default();
  app.add_option("--scenario", o.scenario, "0 = the full path (scenarios 1-4 are not implemented yet)")
      ->check(CLI::Range(0, 4));
  std::string dtype = "bf16", precision = "upcast", mask = "none", mask_dims = "1x1", alloc = "managed";
  auto* dtype_opt = app.add_option("--dtype", dtype, "element type")->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_option("--precision", precision,
                 "upcast: fp16/bf16 computed in fp32 (PyTorch default); native: stay in the dtype "
                 "(allow_fp16_bf16_reduction_math_sdp)")
      ->check(CLI::IsMember({"upcast", "native"}));
  app.add_option("-b,--batch", p.batch, "batch size B");
  app.add_option("--heads", p.q_heads, "query heads Hq");
  int64_t kv_heads = 0, kv_len = 0;
  auto* kv_heads_opt = app.add_option("--kv-heads", kv_heads, "key/value heads Hkv (default: Hq; fewer = grouped-query attention)")
      ->default_str("Hq");
  app.add_option("-L,--q-len", p.q_len, "query length L");
  auto* kv_len_opt = app.add_option("-S,--kv-len", kv_len, "key/value length S (default: L)")->default_str("L");
  app.add_option("-E,--head-dim", p.head_dim, "head dimension E");
  app.add_option("--mask", mask, "attention mask: none, bool, float (additive), causal (is_causal)")
      ->check(CLI::IsMember({"none", "bool", "float", "causal"}));
  app.add_option("--mask-dims", mask_dims, "mask broadcast over batch x heads: 1x1, Bx1, 1xH or BxH")
      ->check(CLI::IsMember({"1x1", "Bx1", "1xH", "BxH"}));
  app.add_option("--dropout", p.dropout_p, "dropout probability in [0, 1)");
  double scale = std::nan("");
  app.add_option("--scale", scale, "softmax scale")->default_str("1/sqrt(E)");
  app.add_option("--seed", p.seed, "seed of the random inputs and of the dropout stream")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--alloc", alloc, "where tensors live: managed (cudaMallocManaged) or device (cudaMalloc)")
      ->check(CLI::IsMember({"managed", "device"}));
  app.add_flag("--allow-oversubscription", o.allow_oversubscription,
               "allow managed allocations beyond 90% of free memory (can hang the GPU)");
  app.add_option("--iters", o.iters, "calls of the path")->check(CLI::Range(1, 100000000));
  app.add_flag("--check", o.check, "compare with the float64 CPU reference and print the relative error");
  app.add_option("--json", o.json_path, "write the result as JSON to this file");
  app.add_option("--inputs", o.inputs_dir, "load q.npy, k.npy, v.npy and optional mask.npy from this directory");
  app.add_option("--save-output", o.save_output_path, "write the output to this .npy file (float32)");

  std::string log = "off", inject;
  app.add_option("--log", log,
                 "stage log on stderr: off; stages (lines only); sync (device sync after every stage); values "
                 "(also min/max/isnan/isinf/sums)")
      ->check(CLI::IsMember({"off", "stages", "sync", "values"}));
  app.add_option("--stage-timeout", o.stage_timeout_s, "watchdog deadline per stage, seconds")
      ->check(CLI::Range(0.01, 86400.0));
  app.add_option("--timeout", o.run_timeout_s, "watchdog deadline for the whole run, seconds (0 = none)")
      ->check(CLI::Range(0.0, 604800.0));
  app.add_flag("--no-fork", o.no_fork,
               "run in one process with a watchdog thread (for cuda-gdb and compute-sanitizer)");
  app.add_option("--inject", inject,
                 "fault injection: hang:STAGE, error:STAGE or slow:STAGE:MS; stages: entry_sync mask_prepare upcast "
                 "scale_q gqa_expand scale_k qk_gemm mask_add softmax dropout pv_gemm cast_output stream_sync");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.message = app.help();
    return result;
  } catch (const CLI::ParseError& e) {
    result.exit_code = kExitUsage;
    result.message = "repro: error: " + one_line(e.what());
    return result;
  }

  try {
    o.dtype_given = dtype_opt->count() > 0;
    p.dtype = kDTypes.at(dtype);
    p.precision = kPrecisions.at(precision);
    p.mask = kMasks.at(mask);
    p.mask_per_batch = mask_dims[0] == 'B';
    p.mask_per_head = mask_dims[2] == 'H';
    o.alloc = kAllocs.at(alloc);
    p.kv_heads = kv_heads_opt->count() ? kv_heads : p.q_heads;
    p.kv_len = kv_len_opt->count() ? kv_len : p.q_len;
    if (!std::isnan(scale)) p.scale = scale;
    if (o.scenario != 0) {
      throw InputError("scenario " + std::to_string(o.scenario) +
                       " is not implemented yet (only --scenario 0, the full path, runs in this version)");
    }
    parse_log_level(log, o.log);
    if (!inject.empty()) o.inject = parse_fault_spec(inject);
    if (o.inputs_dir.empty()) {  // with --inputs, shapes come from the files
      p.validate();
      if (o.inject.kind != FaultSpec::none && !stage_runs(static_cast<int>(o.inject.stage), p)) {
        throw InputError(std::string("--inject: stage ") + stage_name(o.inject.stage) +
                         " does not run in this configuration (mask_prepare needs --mask bool|causal, upcast and "
                         "cast_output fp16/bf16 with --precision upcast, gqa_expand --kv-heads < --heads, mask_add "
                         "a mask, dropout --dropout > 0)");
      }
    }
  } catch (const InputError& e) {
    result.exit_code = kExitUsage;
    result.message = std::string("repro: error: ") + e.what();
    return result;
  }
  result.run = true;
  return result;
}

}  // namespace sdpa
