// run_spec.cpp: every command's options, one table; the RunSpec value the run options fill; the
// one place a value typed or set is converted and checked.
#include "repro/cli/run_spec.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <variant>

#include "math_sdpa/context.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/stage.h"
#include "repro/cli/context_ladder.h"
#include "repro/cli/hang_options.h"
#include "repro/common/output_paths.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

namespace sdpa {

namespace {

using Text = std::optional<std::string> RunSpec::*;
using Integer = std::optional<int64_t> RunSpec::*;
using Real = std::optional<double> RunSpec::*;
using Flag = bool RunSpec::*;
// An option a RunSpec does not hold: the command that takes it keeps its value (CommandOptions::add).
struct Own {
  OptionKind kind;
};
using Field = std::variant<Text, Integer, Real, Flag, Own>;

enum : unsigned {
  kRun = 1,
  kReport = 2,
  kBench = 4,
  kSweep = 8,
  kTriage = 16,
  kRuns = kRun | kReport | kBench,  // the commands that take the run options
};

unsigned command_bit(RunCommand c) {
  switch (c) {
    case RunCommand::run: return kRun;
    case RunCommand::report: return kReport;
    case RunCommand::bench: return kBench;
    case RunCommand::sweep: return kSweep;
    case RunCommand::triage: return kTriage;
  }
  return 0;
}

OptionKind kind_of(const Field& field) {
  return std::visit(
      [](auto member) {
        using T = decltype(member);
        if constexpr (std::is_same_v<T, Own>) {
          return member.kind;
        } else if constexpr (std::is_same_v<T, Flag>) {
          return OptionKind::flag;
        } else if constexpr (std::is_same_v<T, Text>) {
          return OptionKind::text;
        } else if constexpr (std::is_same_v<T, Integer>) {
          return OptionKind::integer;
        } else {
          return OptionKind::real;
        }
      },
      field);
}

struct OptionDef {
  const char* name;   // "--kv-len"
  const char* alias;  // "-S", or ""
  Field field;
  const char* group;
  std::string label;    // FILE, INT, or the accepted words
  std::string help;
  std::string shown_default{};  // what --help says the default is ("" none)
  unsigned commands = kRuns;
  // The setting a scenario's precondition gives it (settings_fields' name): --help adds
  // "; scenario N: VALUE" to the default for each scenario that sets it.
  const char* setting = nullptr;
  std::vector<std::string> choices{};  // the words it accepts
  double min = std::nan(""), max = std::nan("");  // the numbers it accepts, both ends included
  std::string docs{};  // what the docs say where it is more than `help` (markdown; add_docs)

  bool in_run_spec() const { return !std::holds_alternative<Own>(field); }
};

// "a|b|c" as "a, b, c" in a description, where the help may wrap between the words.
std::string listed(std::string choices) {
  for (size_t at; (at = choices.find('|')) != std::string::npos;) choices.replace(at, 1, ", ");
  return choices;
}

std::string listed(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : ", ") + w;
  return s;
}

const std::vector<std::string> kDTypeWords = {"bf16", "fp16", "fp32"};
const std::vector<std::string> kPrecisionWords = {"upcast", "native"};
// A workload file's calls are numbered by an int.
constexpr double kMaxCall = 2147483647;

std::vector<std::string> rung_list() { return context_rung_names(); }

// "1,2,3,4,5": the scenarios whose hypothesis is about pages that migrate (their records).
std::string migrating_scenarios() {
  std::vector<int> numbers;
  for (const ScenarioInfo& sc : scenario_table()) {
    if (sc.needs_migrating_memory) numbers.push_back(sc.number);
  }
  return scenario_list_text(numbers);
}

struct OptionDef;
void check_table(const std::vector<OptionDef>& table);
void add_docs(std::vector<OptionDef>& table);

std::string number_text(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

// "none; scenarios 2,6,7: qwen-image-1024 (unless a shape is given)": the workloads the records run.
std::string workload_defaults() {
  std::vector<std::pair<std::string, std::vector<int>>> workloads;  // in the order the records name them
  for (const ScenarioInfo& sc : scenario_table()) {
    if (!sc.default_workload[0]) continue;
    auto w = std::find_if(workloads.begin(), workloads.end(), [&](const auto& x) { return x.first == sc.default_workload; });
    if (w == workloads.end()) w = workloads.insert(workloads.end(), {sc.default_workload, {}});
    w->second.push_back(sc.number);
  }
  std::string s;
  for (const auto& [workload, numbers] : workloads) {
    s += (numbers.size() > 1 ? "; scenarios " : "; scenario ") + scenario_list_text(numbers) + ": " + workload;
  }
  return s.empty() ? "" : "none" + s + " (unless a shape is given)";
}

// "scenario 6": the scenarios whose records trace memory at every stage by default.
std::string traced_scenarios() {
  std::string s;
  for (const ScenarioInfo& sc : scenario_table()) {
    if (sc.memory_trace) s += (s.empty() ? "scenario " : ", ") + std::to_string(sc.number);
  }
  return s.empty() ? "no scenario" : s;
}

const std::vector<OptionDef>& option_table() {
  static const std::vector<OptionDef> table = [] {
    const SdpaProblem p;
    const char* P = "Problem";
    const char* M = "Memory";
    const char* S = "Scenario and fixes";
    const char* C = "Training context";
    const char* L = "Logging and watchdog";
    const char* O = "Run and output";
    const char* A = "Axes";
    const char* W = "Where the results go";
    const char* R = "Cells";
    const char* T = "Triage";
    const std::string on_off = "on|off";
    std::vector<OptionDef> t = {
        {"--workload", "", &RunSpec::workload, P, "NAME",
         "a failing workload's layer (shape options override it): " + listed(workload_names()), workload_defaults()},
        {"--workload-file", "", &RunSpec::workload_file, P, "FILE",
         "replay a call scripts/sdpa_capture.py captured (docs/CAPTURE.md)", "", kRuns | kTriage},
        {"--call", "", &RunSpec::call, P, "N", "the workload file's call N, and its process's context", "0", kRuns | kTriage,
         nullptr, {}, 0, kMaxCall},
        {"--call-only", "", &RunSpec::call_only, P, "", "the call without its process's context"},
        {"--dtype", "", &RunSpec::dtype, P, "bf16|fp16|fp32", "element type", "bf16", kRuns, nullptr, kDTypeWords},
        {"--precision", "", &RunSpec::precision, P, "upcast|native", "compute fp16/bf16 in fp32 (PyTorch) or in the dtype",
         "upcast", kRuns, nullptr, kPrecisionWords},
        {"--batch", "-b", &RunSpec::batch, P, "INT", "batch size B", std::to_string(p.batch)},
        {"--heads", "", &RunSpec::heads, P, "INT", "query heads Hq", std::to_string(p.q_heads)},
        {"--kv-heads", "", &RunSpec::kv_heads, P, "INT", "key/value heads Hkv; < Hq: grouped-query attention", "Hq"},
        {"--q-len", "-L", &RunSpec::q_len, P, "INT", "query length L", std::to_string(p.q_len)},
        {"--kv-len", "-S", &RunSpec::kv_len, P, "INT", "key/value length S", "L"},
        {"--head-dim", "-E", &RunSpec::head_dim, P, "INT", "head dimension E", std::to_string(p.head_dim)},
        {"--mask", "", &RunSpec::mask, P, "KIND", "attention mask: none, bool, float (additive), causal", "none", kRuns, nullptr,
         {"none", "bool", "float", "causal"}},
        {"--mask-dims", "", &RunSpec::mask_dims, P, "1x1|Bx1|1xH|BxH", "a bool or float mask's broadcast over batch x heads",
         "1x1", kRuns, nullptr, {"1x1", "Bx1", "1xH", "BxH"}},
        {"--text-padding", "", &RunSpec::text_padding, P, "TOKENS:VALID",
         "bool mask: batch entries after the first see VALID of TOKENS text keys"},
        {"--dropout", "", &RunSpec::dropout, P, "P", "dropout probability in [0, 1)", "0"},
        {"--scale", "", &RunSpec::scale, P, "X", "softmax scale, not 0", "1/sqrt(E)"},
        // A string, parsed strictly by the run: CLI11 would accept 2^64 and wrap or saturate it.
        {"--seed", "", &RunSpec::seed, P, "SEED", "seed of the random inputs and the dropout stream", std::to_string(p.seed)},
        // The reproducer regenerates its inputs from --seed: a report takes no files.
        {"--inputs", "", &RunSpec::inputs, P, "DIR", "tensors from np.save: q.npy, k.npy, v.npy, mask.npy if masked", "",
         kRun | kBench},

        {"--alloc", "", &RunSpec::alloc, M, "KIND", "allocation: " + listed(path_setting_choices("--alloc")), "managed", kRuns,
         "alloc"},
        {"--allow-oversubscription", "", &RunSpec::allow_oversubscription, M, "",
         "allocate beyond 90% of the memory available (can hang the GPU, or a DGX Spark until a power cycle)"},
        {"--advise", "", &RunSpec::advise, M, "LIST",
         "cudaMemAdvise on each managed tensor, a list of " + listed(path_setting_choices("--advise")), "none"},
        {"--touch-streams", "", &RunSpec::touch_streams, M, "INT", "streams touching every page at entry, 0-64", "0", kRuns,
         "entry_touch_streams", {}, 0, 64},
        {"--host-touch", "", &RunSpec::host_touch, M, on_off, "a host thread touches them too", "off", kRuns, "entry_host_touch"},

        {"--scenario", "", &RunSpec::scenario, S, scenario_range(),
         "0: the whole path; 1-" + std::to_string(scenario_count() - 1) + ": the hang scenarios (repro help scenarios)", "0",
         kRuns, nullptr, {}, 0, static_cast<double>(scenario_count() - 1)},
        // A report runs the scenario's own fix off and on.
        {"--fix", "", &RunSpec::fix, S, "on|off|lean", "the scenario's own fix: on (as designed), lean (its lean form), off",
         "off", kRun | kBench, nullptr, {"on", "off", "lean"}},
        {"--fixes", "", &RunSpec::fixes, S, "LIST",
         "fixes in any scenario, joined by commas: N (as designed), N:lean, N:part/part (docs/FIXES.md), all, all:lean, none",
         "none", kRun | kBench},
        {"--full", "", &RunSpec::full, S, "", "the whole path under the scenario's conditions, not only its part"},
        {"--graph", "", &RunSpec::graph, S, "", "capture the call's GPU stages into a CUDA graph once and replay it every call",
         "off", kRuns, "graph"},
        {"--stream", "", &RunSpec::stream, S, "MODE", "stream: " + listed(path_setting_choices("--stream")), "legacy", kRuns,
         "stream"},
        {"--gemm-stream", "", &RunSpec::gemm_stream, S, "MODE", "Q.K^T stream: " + listed(path_setting_choices("--gemm-stream")),
         "same", kRuns, "qk_gemm_stream"},
        {"--gemm-order", "", &RunSpec::gemm_order, S, path_setting_choices("--gemm-order"),
         "that GEMM after Q and K: an event or nothing explicit", "event", kRuns, "qk_gemm_order"},
        {"--k-layout", "", &RunSpec::k_layout, S, path_setting_choices("--k-layout"),
         "K^T viewed from a contiguous or a [B, S, H, E] buffer (the workloads': bshe)", "bhse", kRuns, "k_layout"},
        {"--gemm-api", "", &RunSpec::gemm_api, S, path_setting_choices("--gemm-api"), "Q.K^T as at::bmm or cublasGemmBatchedEx",
         "strided", kRuns, "qk_gemm_api"},
        {"--scores-to-host", "", &RunSpec::scores_to_host, S, "MODE",
         "host access to the scores: " + listed(path_setting_choices("--scores-to-host")), "none", kRuns, "scores_to_host"},
        {"--scores-host-phase", "", &RunSpec::scores_host_phase, S, "WHEN",
         "that access relative to softmax: " + listed(path_setting_choices("--scores-host-phase")), "before", kRuns,
         "scores_host_phase"},

        {"--alloc-timing", "", &RunSpec::alloc_timing, C, "WHEN",
         "intermediates allocated " + listed(path_setting_choices("--alloc-timing")) +
             ": before the first call, or inside each call as PyTorch does",
         "upfront", kRuns, "alloc_timing"},
        {"--layers", "", &RunSpec::layers, C, "N|model",
         "attention layers a step runs in sequence, each with its own Q, K, V, output; model: the workload's block count",
         "1", kRuns, "layers"},
        {"--layers-fit", "", &RunSpec::layers_fit, C, "",
         "as many of --layers' layers as the memory plan allows beside the rest (at least 1), where all of them "
         "would be refused; the run says how many and why"},
        {"--retain", "", &RunSpec::retain, C, "WHAT",
         "what each layer keeps until the step ends: " + listed(path_setting_choices("--retain")), "none", kRuns, "retain"},
        // A bench counts its passes itself (-n).
        {"--steps", "", &RunSpec::steps, C, "N", "training steps: passes over the layers, memory sampled after each", "",
         kRun | kReport, nullptr, {}, 1, 1e8},
        {"--chunk-size", "", &RunSpec::chunk_size, C, "SIZE", "fix 5's chunk part: each chunk's scores at most this many bytes",
         "256M"},
        {"--backward", "", &RunSpec::backward, C, "",
         "the training step: each layer's backward call after the forward calls (dO seeded, or --inputs' dout.npy); --check "
         "checks dQ, dK, dV"},
        // A benchmark times the path's passes; the context around it is a run's, a report's or a sweep's.
        {"--ballast", "", &RunSpec::ballast, C, "SIZE|FRACTION",
         "memory held by the rest of the model: a size (40G) or a fraction (0.8) of the memory available", "",
         kRun | kReport},
        {"--ballast-alloc", "", &RunSpec::ballast_alloc, C, "KIND", "the ballast's memory: managed, device, host, system",
         "device", kRun | kReport},
        {"--ballast-touch", "", &RunSpec::ballast_touch, C, "WHO",
         "who touches it while the path runs: " + listed(ballast_touch_choices()), "none", kRun | kReport},
        {"--host-load", "", &RunSpec::host_load, C, "THREADS",
         "data-loader-like host threads (pageable reads and writes, pinned copies)", "0", kRun | kReport, nullptr, {}, 0, 256},
        {"--mapped-weights", "", &RunSpec::mapped_weights, C, "SIZE[:FILE]",
         "the model's weights, SIZE of them (a unit: 30G), loaded before the first call from a memory-mapped file "
         "(made once, then reused; default ~/.cache/sdpa-repro/weights.bin) into GPU memory tensor by tensor",
         "", kRun | kReport, "mapped_weights"},
        {"--weights-mapping", "", &RunSpec::weights_mapping, C, "unmap|keep",
         "after the load: the mapping dropped, as PyTorch frees the CPU state dict, or kept by the process", "unmap",
         kRun | kReport, nullptr, {"unmap", "keep"}},
        {"--memory-trace", "", &RunSpec::memory_trace, C, "",
         "memory (MemAvailable, cudaMemGetInfo) at every stage, in the log and the JSON (" + traced_scenarios() + ": on)", "",
         kRun | kReport},
        {"--uvm-counters", "", &RunSpec::uvm_counters, C, "",
         "count managed memory's migrations and page faults (CUPTI), the path's and the ballast's apart", "",
         kRun | kReport},
        {"--plan", "", &RunSpec::plan, C, "",
         "print the memory plan (what each layer allocates and keeps, the peak, the memory available) and exit; allocates "
         "nothing",
         "", kRun},

        {"--log", "", &RunSpec::log, L, "LEVEL",
         "stage log on stderr: off, stages, sync, values; sync adds a device sync per stage, values min/max/nan/sums", "off",
         kRuns, nullptr, {"off", "stages", "sync", "values"}},
        {"--log-format", "", &RunSpec::log_format, L, "harness|sdpa-debug",
         "sdpa-debug: the debug instrumentation's lines, exactly (and --log values unless --log)", "harness", kRuns, nullptr,
         {"harness", "sdpa-debug"}},
        {"--log-extras", "", &RunSpec::log_extras, L, "", "sdpa-debug: also the harness's own lines (extra stages, notes)"},
        {"--stage-timeout", "", &RunSpec::stage_timeout, L, "S", "the watchdog's deadline for any one stage, seconds",
         number_text(kDefaultStageTimeoutS), kRuns | kSweep | kTriage, nullptr, {}, 0.01, 86400},
        {"--stall-threshold", "", &RunSpec::stall_threshold, L, "S",
         "a finished stage longer than this is a stall, seconds; 0: off", number_text(kDefaultStallThresholdS), kRuns, nullptr,
         {}, 0, 86400},
        {"--timeout", "", &RunSpec::timeout, L, "S", "its deadline for the whole run, seconds; 0: none", "0", kRuns, nullptr, {},
         0, 604800},
        // A report supervises every run itself; a benchmark under CUDA_LAUNCH_BLOCKING would time the waits.
        {"--no-fork", "", &RunSpec::no_fork, L, "", "one process, a watchdog thread (for cuda-gdb, compute-sanitizer)", "",
         kRun | kBench},
        {"--launch-blocking", "", &RunSpec::launch_blocking, L, "", "CUDA_LAUNCH_BLOCKING=1: each launch waits for its kernel",
         "", kRun | kReport},
        {"--on-hang", "", &RunSpec::on_hang, L, "WHAT",
         "at a hang: snapshot (evidence from the live process, then kill), kill, or keep it for a person",
         on_hang_name(OnHang::snapshot), kRuns | kSweep, nullptr, {"snapshot", "kill", "keep"}},
        {"--snapshot-timeout", "", &RunSpec::snapshot_timeout, L, "S", "the whole snapshot's budget, seconds",
         number_text(HangOptions{}.snapshot_timeout_s), kRuns | kSweep, nullptr, {}, 0.5, 3600},
        {"--keep-timeout", "", &RunSpec::keep_timeout, L, "S", "--on-hang keep: kill it after this long, seconds",
         number_text(HangOptions{}.keep_timeout_s), kRuns, nullptr, {}, 0.1, 604800},
        // A report puts each run's log and snapshot into its folder.
        {"--snapshot-dir", "", &RunSpec::snapshot_dir, L, "DIR", "the hang snapshot's folder",
         "FILE.snapshot beside --json FILE, else ./repro-hang-TIME-PID", kRun | kBench},
        {"--log-file", "", &RunSpec::log_file, L, "FILE",
         "append the stage log and records, fsync'ed: survives a frozen machine", "", kRun | kBench},
        {"--nvidia-bug-report", "", &RunSpec::nvidia_bug_report, L, "",
         "also nvidia-bug-report.sh (root; a minute: raise --snapshot-timeout)"},
        {"--inject", "", &RunSpec::inject, L, "FAULT",
         "a fault, to test the watchdog: hang:STAGE, error:STAGE or slow:STAGE:MS; STAGE: " + stage_names(), "",
         kRuns | kTriage},

        // A bench counts its calls with -w and -n; a report checks every call and writes its own files.
        {"--iters", "", &RunSpec::iters, O, "INT", "calls of the path (passes over its layers)", "1", kRun | kReport | kSweep,
         nullptr, {}, 1, 1e8},
        {"--sample-every", "", &RunSpec::sample_every, O, "N", "soak: sample memory every N (< --iters) calls; exit 1 if it grows",
         "", kRun | kReport, nullptr, {}, 0, 1e8},
        {"--check", "", &RunSpec::check, O, "", "compare with the float64 CPU reference", "", kRun | kBench},
        // A report's runs check the last layer only (every layer's values are still counted for
        // NaN): 56 image layers' references would take the best part of an hour.
        {"--check-layers", "", &RunSpec::check_layers, O, "all|last",
         "with --layers: --check compares every layer with its reference, or the last one only (all layers' "
         "non-finite values are counted either way)",
         "all", kRun, nullptr, {"all", "last"}},
        {"--json", "", &RunSpec::json, O, "FILE", "write the result as JSON", "", kRun | kBench},
        {"--save-output", "", &RunSpec::save_output, O, "FILE", "write the result tensor as float32 .npy", "", kRun | kBench},
        {"--save-inputs", "", &RunSpec::save_inputs, O, "DIR",
         "write each layer's inputs as .npy files (scripts/torch_stages.py)", "", kRun},

        // A sweep's own options; --iters, --stage-timeout, --on-hang and --snapshot-timeout are its
        // cells' run options, above. Their defaults are the sweep's (repro/sweep/matrix.h).
        {"--scenarios", "", Own{OptionKind::text}, A, "LIST", "scenarios, " + scenario_range() + ": N,N,.. or N-M", "",
         kSweep},
        {"--fix", "", Own{OptionKind::text}, A, "LIST",
         "fix modes: off, on (the scenario's own fix; every fix for scenario 0), all, or fix numbers joined by '+' (1+3)", "",
         kSweep},
        {"--dtypes", "", Own{OptionKind::text}, A, "LIST", "element types: " + listed(kDTypeWords), "", kSweep},
        {"--precisions", "", Own{OptionKind::text}, A, "LIST", listed(kPrecisionWords), "", kSweep},
        {"--shapes", "", Own{OptionKind::text}, A, "LIST",
         "shapes BxHxLxSxE (-b, --heads, -L, -S, -E), or a workload's layer by name: " + listed(workload_names()), "",
         kSweep},
        {"--allocs", "", Own{OptionKind::text}, A, "LIST", "memory kinds (--alloc): " + listed(path_setting_choices("--alloc")),
         "", kSweep},
        {"--streams", "", Own{OptionKind::text}, A, "LIST",
         "default (each scenario's own, PyTorch's) or a --stream: " + listed(path_setting_choices("--stream")), "", kSweep},
        {"--contexts", "", Own{OptionKind::text}, A, "LIST",
         "rungs of the context ladder: " + listed(rung_list()) + " (docs/CONTEXT.md)", "", kSweep},
        // A sweep of more cells than repro/sweep/matrix.h's kMaxSweepCells is refused whatever its axes.
        {"--repeats", "", Own{OptionKind::integer}, A, "N", "runs of each configuration", "", kSweep, nullptr, {}, 1, 100000},
        {"--keep-waived", "", Own{OptionKind::flag}, A, "",
         "also the combinations a waiver rules out (scenarios " + migrating_scenarios() +
             " on memory that cannot migrate): cells that end waived",
         "", kSweep},
        {"--matrix", "", Own{OptionKind::text}, A, "FILE",
         "the axes from a JSON file: {\"scenarios\": [0, 1], \"fix\": [\"off\", \"on\"], \"dtypes\": [...], "
         "\"precisions\", \"shapes\", \"allocs\", \"streams\", \"contexts\", \"iters\": N, \"repeats\": N}",
         "", kSweep},
        {"--out", "", Own{OptionKind::text}, W, "DIR", "directory for sweep.json, sweep.jsonl and sweep.svg", "sweep-results",
         kSweep},
        {"--json", "", Own{OptionKind::text}, W, "FILE", "the sweep document; FILE.jsonl and FILE.svg go beside it", "",
         kSweep},
        {"--force", "", Own{OptionKind::flag}, W, "",
         "start again where a sweep's results already are; with --resume: continue under another matrix (the cells "
         "both have are kept)",
         "", kSweep},
        {"--resume", "", Own{OptionKind::flag}, W, "",
         "continue an interrupted sweep: skip the cells its JSON-lines file holds (the same matrix only, unless --force)",
         "", kSweep},
        {"--shard", "", Own{OptionKind::text}, W, "K/N",
         "run the K-th of N disjoint slices of the matrix (balanced by expected cost; `repro sweep merge` joins them; "
         "docs/SWEEPS.md)",
         "", kSweep},
        {"--dry-run", "", Own{OptionKind::flag}, W, "", "print the cells as JSON and run nothing", "", kSweep},
        {"--cell-timeout", "", Own{OptionKind::real}, R, "S", "the sweep's deadline for each cell, seconds", "", kSweep,
         nullptr, {}, 0.1, 86400},
        {"--gpus", "", Own{OptionKind::integer}, R, "N", "workers, one per GPU",
         "CUDA_VISIBLE_DEVICES, or the GPUs the driver lists", kSweep, nullptr, {}, 1, 1024},
        {"--cells-per-gpu", "", Own{OptionKind::integer}, R, "N",
         "cells run at once on each GPU (more is faster, but the cells then share the GPU: its memory, its fault "
         "handling; keep 1 to reproduce a hang in isolation)",
         "", kSweep, nullptr, {}, 1, 8},
        {"--repro-binary", "", Own{OptionKind::text}, "", "FILE", "the program each cell or step runs (tests)", "",
         kSweep | kTriage},

        // A triage's own options; --workload-file, --call, --stage-timeout and --inject are its runs'.
        {"--out", "", Own{OptionKind::text}, T, "DIR", "the triage's folder (OUT.tar.gz is written beside it)", "", kTriage},
        {"--budget", "", Own{OptionKind::text}, T, "TIME",
         "the whole triage's time; each step gets a share of what is left (with --resume: the time the continuation may "
         "take, beyond what was spent)",
         "", kTriage},
        {"--scenarios", "", Own{OptionKind::text}, T, "LIST",
         "the scenarios to sweep and climb: N,N,.. or N-M (repro help scenarios)", "", kTriage},
        {"--runs", "", Own{OptionKind::integer}, T, "N", "minimize's runs per configuration", "", kTriage, nullptr, {}, 1, 100},
        {"--no-bug-report", "", Own{OptionKind::flag}, T, "",
         "do not run nvidia-bug-report.sh (it takes a minute or more, as root)", "", kTriage},
        {"--dry-run", "", Own{OptionKind::flag}, T, "",
         "print every step's command, each checked as its child would check it, and run nothing (no GPU needed)", "",
         kTriage},
        {"--resume", "", Own{OptionKind::flag}, T, "",
         "continue the triage in --out DIR with its own options (and --budget, if given, for this continuation): steps "
         "that ended are kept; one cut at its share of the budget, interrupted, or killed goes on where it stopped; one "
         "that was running when the machine stopped (it booted since) is not run again and is named as where it "
         "stopped; one whose processes are still there is stuck: a hang",
         "", kTriage},
    };
    check_table(t);
    add_docs(t);
    return t;
  }();
  return table;
}

// Each name has one row per command, and a run option (a RunSpec field) one row whichever commands
// take it, so that its range is the same for all of them. (A sweep's --fix and --json are other
// options of the same names: rows of their own.)
void check_table(const std::vector<OptionDef>& table) {
  for (size_t i = 0; i < table.size(); ++i) {
    for (size_t j = i + 1; j < table.size(); ++j) {
      const OptionDef& a = table[i];
      const OptionDef& b = table[j];
      if (std::string(a.name) != b.name) continue;
      if ((a.commands & b.commands) != 0 || (a.in_run_spec() && b.in_run_spec())) {
        throw std::logic_error(std::string("option table: ") + a.name + " has two rows for one command, or two run options");
      }
    }
  }
}

// What docs/CLI.md and docs/SWEEPS.md say of an option where it says more than its --help:
// markdown, read by `repro help COMMAND --markdown` (help_format.h), never by --help.
void add_docs(std::vector<OptionDef>& table) {
  const std::string rungs = "`" + [] {
    std::string s;
    for (const std::string& r : rung_list()) s += (s.empty() ? "" : "`, `") + r;
    return s;
  }() + "`";
  struct Docs {
    const char* name;
    unsigned commands;  // the row's, where a name has several
    std::string text;
  };
  const std::vector<Docs> docs = {
      {"--workload", kRuns, R"(a layer of the failing workload as the problem: `qwen-image-1024`, `qwen-image-1024-textpad`, `qwen-image-512`; the shape options override its fields)"},
      {"--workload-file", kRuns, R"(replay a call `scripts/sdpa_capture.py` captured: its shape, K's layout, mask, dtype, scale, dropout, and its process's context (layers, retention, ballast, allocator, launch blocking) as run options in front of the command line's, which win ([CAPTURE.md](CAPTURE.md#replaying-a-call)); not with `--workload`)"},
      {"--call", kRuns, R"(which of the file's calls (its `id`))"},
      {"--call-only", kRuns, R"(the call without its process's context)"},
      {"--dtype", kRuns, R"(element type of Q, K, V, the mask and the output)"},
      {"--precision", kRuns, R"(`upcast`: fp16/bf16 computed in fp32 (PyTorch's default); `native`: stays in the dtype, GEMMs accumulate in fp32 (`allow_fp16_bf16_reduction_math_sdp(True)`))"},
      {"--batch", kRuns, R"(batch size B)"},
      {"--heads", kRuns, R"(query heads Hq)"},
      {"--kv-heads", kRuns, R"(key/value heads Hkv; fewer than Hq is grouped-query attention)"},
      {"--q-len", kRuns, R"(query length L)"},
      {"--kv-len", kRuns, R"(key/value length S)"},
      {"--head-dim", kRuns, R"(head dimension E)"},
      {"--mask", kRuns, R"(`none`, `bool` (random, a quarter of keys dropped, one fully masked row per slice), `float` (additive, values in [-2, 2], about 10% -inf), `causal` (`is_causal`))"},
      {"--mask-dims", kRuns, R"(the broadcast of a bool or float mask: [B|1, H|1, L, S])"},
      {"--text-padding", kRuns, R"(a bool key-padding mask (Bx1): the first TOKENS keys are text; batch entries after the first attend only to the first VALID of them)"},
      {"--dropout", kRuns, R"(dropout probability in [0, 1))"},
      {"--scale", kRuns, R"(softmax scale; 0 is refused)"},
      {"--seed", kRuns, R"(seed of the random inputs and of the dropout stream, 0 to 2^64-1)"},
      {"--inputs", kRuns, R"(tensors captured from PyTorch with `np.save`: `q.npy`, `k.npy`, `v.npy`, and `mask.npy` if masked (float32, float16, or bfloat16 stored as uint16; the mask bool or the same float type, [L, S] or [B|1, H|1, L, S]); they set the shapes, the dtype (unless `--dtype`: values are then rounded to it) and the mask)"},
      {"--alloc", kRuns, R"(where tensors live: `managed`, `device`, `async` (the stream-ordered pool), `host` (pinned), `system` (plain host memory used by the GPU directly; needs `pageableMemoryAccess`, else the run is waived), `vmm` (one reserved virtual range that grows by mapping device memory at its end, as PyTorch's `expandable_segments:True`))"},
      {"--allow-oversubscription", kRuns, R"(allow a memory plan, or managed/host/system allocations, beyond 90% of the memory available (can hang the GPU, or a DGX Spark until a power cycle))"},
      {"--advise", kRuns, R"(`cudaMemAdvise` on every managed tensor: a list of `preferred:gpu`, `preferred:cpu`, `accessed-by:gpu`, `accessed-by:cpu`, `read-mostly`)"},
      {"--touch-streams", kRuns, R"(streams touching every page at entry, 0-64)"},
      {"--host-touch", kRuns, R"(a host thread touches the pages at entry too)"},
      {"--fix", kRuns, R"(the scenario's own fix (the scenarios that have one: `repro help scenarios`): on as designed, lean in its lean form ([FIXES.md](FIXES.md)))"},
      {"--fixes", kRuns, R"(fixes in any scenario, joined by commas: `N` (as designed), `N:lean`, `N:part/part`, `all`, `all:lean`, `none`)"},
      {"--full", kRuns, R"(run the whole path under the scenario's conditions, not only the part it exercises)"},
      {"--graph", kRuns, R"(capture the call's GPU stages into a CUDA graph once and replay it every call; host work inside the call is refused with it ([PATH.md](PATH.md#scenarios-on-the-path)))"},
      {"--stream", kRuns, R"(the path's stream: `legacy` (the legacy default stream, PyTorch's), `non-blocking` (a created side stream, as `torch.cuda.Stream()` and `torch.cuda.graph`'s capture), `per-thread`)"},
      {"--gemm-stream", kRuns, R"(the stream of the Q·Kᵀ GEMM's cuBLAS handle: `same`, `legacy`, `aux` (a created non-blocking stream), `blocking` (a created stream without `cudaStreamNonBlocking`, which the legacy default stream synchronises with by itself))"},
      {"--gemm-order", kRuns, R"(that GEMM ordered after Q and K by an event, or by nothing explicit: only the legacy default stream's implicit synchronisation orders it where one of the two streams is the legacy stream and the other a blocking one; otherwise a deliberate race)"},
      {"--k-layout", kRuns, R"(the buffer Kᵀ is viewed from: contiguous, or [B, S, H, E])"},
      {"--gemm-api", kRuns, R"(Q·Kᵀ through at::bmm's strided call or the pointer-array `cublasGemmBatchedEx`)"},
      {"--scores-to-host", kRuns, R"(host access to the scores: `none`, `read`, `advise` (prefer the CPU), `both`)"},
      {"--scores-host-phase", kRuns, R"(that access before softmax starts, or from a host thread while it runs: `before`, `during`)"},
      {"--alloc-timing", kRuns, R"(intermediates allocated before the first call, or inside each call in PyTorch's order and freed where PyTorch frees them (the `alloc_*` and `free_*` stages; `device` memory then goes through a model of PyTorch's caching allocator))"},
      {"--layers", kRuns, R"(attention layers a step runs in sequence, 1-10000, each with its own Q, K, V and output; `model`: the workload's block count)"},
      {"--layers-fit", kRuns, R"(where the plan of all of `--layers`' layers would be refused, run as many as fit beside the rest (ballast, host load, weights; at least 1): the plan's first lines and the JSON's `memory_plan.layers_asked` say how many were asked for and why; the context ladder's rungs from `layers` on use it)"},
      {"--retain", kRuns, R"(what each layer keeps until the step ends: its output, or what autograd saves for the backward pass)"},
      {"--backward", kRuns, R"(the training step: after the forward calls, each layer's backward call (last layer first) for a seeded dO or `--inputs`' `dout.npy`; implies `--retain autograd` and `--full`; `--check` also checks dQ, dK, dV; `--save-output F.npy` also writes `F.grad_query.npy`, `F.grad_key.npy`, `F.grad_value.npy`; refused with fix 5's recompute and chunk parts; with `--graph` one graph holds the forward and backward calls ([BACKWARD.md](BACKWARD.md)))"},
      {"--steps", kRuns, R"(training steps: passes over the layers, after each of which what they kept is freed; memory is sampled every max(1, N/100) steps and must stay flat; excludes `--iters`)"},
      {"--ballast", kRuns, R"(memory held by the rest of the model, allocated before the path: a size (`40G`, `41GB`, `512M`; K, M, G, T are powers of 1024, KB..TB of 1000) or a fraction below 1 of the memory available to its kind)"},
      {"--ballast-alloc", kRuns, R"(the ballast's memory: `managed`, `device`, `host`, `system`)"},
      {"--ballast-touch", kRuns, R"(who touches every page of it while the path runs, pass after pass: `none`, `host` (a thread), `gpu` (a stream, in 256 MiB slices), `both`)"},
      {"--host-load", kRuns, R"(data-loader-like host threads, 0-256: each writes and reads a 64 MiB pageable buffer and copies it through pinned memory to the GPU)"},
      {"--chunk-size", kRuns, R"(fix 5's chunk part: each chunk's scores at most this many bytes (needs the part on))"},
      {"--memory-trace", kRuns, R"(MemAvailable, the GPU's free memory and the path's memory at every stage: `[MEMORY]` lines on stderr (even with `--log off`) and in `--log-file`, `memory_measured.trace` in the JSON)"},
      {"--uvm-counters", kRuns, R"(count managed memory's migrations and page faults through CUPTI, the ballast's and the path's apart (`uvm` in the JSON; unavailable, with the reason, where CUPTI is missing or refuses))"},
      {"--plan", kRuns, R"(print the memory plan (each tensor, what each layer keeps, the predicted peak, the memory available and the guard) and exit 0, allocating nothing; without a GPU the availability is unknown)"},
      {"--log", kRuns, R"(the stage log on stderr: `off`, `stages` (a line per stage boundary), `sync` (also a device sync after every stage), `values` (also min, max, isnan, isinf and sums))"},
      {"--log-format", kRuns, R"(`harness`: every parameter, `t_us=` on each line; `sdpa-debug`: the debug instrumentation's lines, value for value and only its tags, with its device synchronisation after every stage and its values (it implies `--log values` unless `--log` is given) ([LOG_FORMAT.md](LOG_FORMAT.md)))"},
      {"--log-extras", kRuns, R"(with `--log-format sdpa-debug`: also the harness's own lines (its extra stages, the closing stream synchronisation, allocations before the call, scenario and fix notes, layer and GPU marks), on the instrumentation's channels)"},
      {"--stage-timeout", kRuns, R"(the watchdog's deadline for any one stage, seconds (the same default for a run, a bench and each sweep cell))"},
      {"--stall-threshold", kRuns, R"(a stage that takes longer than this and still finishes under the deadline is a stall ([WATCHDOG.md](WATCHDOG.md#stalls)); 0 turns it off; must be below `--stage-timeout` (with a deadline of 1 s or less and no `--stall-threshold`, no stall is judged))"},
      {"--timeout", kRuns, R"(the watchdog's deadline for the whole run, seconds)"},
      {"--no-fork", kRuns, R"(one process with a watchdog thread instead of a supervised child (for cuda-gdb and compute-sanitizer))"},
      {"--launch-blocking", kRuns, R"(the debug mode the original investigation ran in: `CUDA_LAUNCH_BLOCKING=1` is set for the GPU process before CUDA starts, so every kernel launch (ours and cuBLAS's) returns only once its kernel has finished and a stage's `_DONE` line means done. The run shows it took effect: the host's wait in launching a 50 ms kernel, in the table (`# launch blocking: ... (CUDA_LAUNCH_BLOCKING=1 in force)`) and as `launch_blocking_probe_ms` in the JSON. Not with `--graph` (a capture cannot wait for its kernels) and not in `repro bench` (it would time the waits). `TORCH_USE_CUDA_DSA=1`, the investigation's other variable, has no counterpart: it turns on PyTorch's device-side assertions, and the harness's kernels have none; `compute-sanitizer` with `--no-fork` checks them instead)"},
      {"--on-hang", kRuns, R"(at a missed deadline: `snapshot` (collect evidence from the live hung process, then kill it), `kill` (at once), `keep` (leave it for a person; killed on Ctrl-C or after `--keep-timeout`) ([HANG_SNAPSHOT.md](HANG_SNAPSHOT.md)))"},
      {"--snapshot-timeout", kRuns, R"(the whole snapshot's budget, seconds)"},
      {"--keep-timeout", kRuns, R"(`--on-hang keep`: how long the hung process is kept, seconds)"},
      {"--snapshot-dir", kRuns, R"(the hang snapshot's folder)"},
      {"--log-file", kRuns, R"(append the stage log, the stage records and the snapshot's progress, each line fsync'ed: the last line names the running stage even if the machine freezes)"},
      {"--nvidia-bug-report", kRuns, R"(also run `nvidia-bug-report.sh` (as root) during the snapshot; it takes about a minute, so raise `--snapshot-timeout`)"},
      {"--inject", kRuns, R"(fault injection: `hang:STAGE`, `error:STAGE` or `slow:STAGE:MS`, each with any of `@layer=K`, `@step=K`, `@per-call`, `@layers`, `@ballast`, `@host-load`, `@steps`, `@retain`, `@backward`, `@no-fix` (only in that layer or step, or only where the run has that condition, or no fix), `@B>=N`, `@H>=N`, `@L>=N`, `@S>=N`, `@E>=N` (only where that size is at least N) and `@alloc=KIND` (only on that memory); STAGE is any stage ([WATCHDOG.md](WATCHDOG.md#fault-injection)))"},
      {"--iters", kRuns, R"(calls of the path, or passes over its layers (each on NaN-poisoned output buffers); timings are medians over passes, a stage's time in a pass the sum over its layers)"},
      {"--sample-every", kRuns, R"(soak: sample GPU free memory, RSS and live allocations every N calls; growth beyond 1 MiB after the first sample fails the run (exit 1); needs `--iters` above N)"},
      {"--check", kRuns, R"(compare the result with the float64 CPU reference (its products through OpenBLAS, loaded then: refused with exit 2 before the GPU is touched where it cannot be opened); the table's `# check cost:` line and the JSON's `check.cost` say what it added to the run ([PATH.md](PATH.md#how-the-reference-computes-and-what-a-check-costs)))"},
      {"--json", kRuns, R"(write the result as JSON, atomically)"},
      {"--save-output", kRuns, R"(write the result tensor (the output, or the scores or probabilities a scenario ends with) as a float32 `.npy`, atomically)"},
      {"--save-inputs", kRuns, R"(write each layer's inputs as the run makes them, as `.npy` files in DIR (made if needed): `layerN.q.npy` [B, Hq, L, E], `layerN.k.npy` and `layerN.v.npy` [B, Hkv, S, E] (float32, the values rounded to the dtype), `layerN.grad_out.npy` with `--backward`, and `mask.npy` ([B\|1, H\|1, L, S]: bool for a boolean mask, float32 for an additive one); with `--plan` too, so that `scripts/torch_stages.py` runs the plan on them without a GPU run)"},
      {"--scenarios", kSweep,
       "scenarios, " + scenario_range() + ": N,N,.. or N-M; the default leaves out the scenarios whose record says not "
       "to sweep them by default (`repro help scenarios` says why)"},
      {"--fix", kSweep,
       "`off`; `on` (the scenario's own fix, `--fix on`; scenario 0 has none, so its `on` is `--fixes all`); `all`; fix "
       "numbers joined by `+` (`1+3` runs `--fixes 1,3`)"},
      {"--dtypes", kSweep, "as `--dtype`: " + listed(kDTypeWords)},
      {"--precisions", kSweep, "as `--precision`: " + listed(kPrecisionWords)},
      {"--shapes", kSweep,
       "B x H x L x S x E (`-b --heads -L -S -E`), or a layer of the failing workload by name (`--workload`: " +
           listed(workload_names()) + ")"},
      {"--allocs", kSweep, "as `--alloc`: " + listed(path_setting_choices("--alloc"))},
      {"--streams", kSweep,
       "`default` (no `--stream`: each scenario's own default, PyTorch's: the legacy default stream, and a side stream "
       "for a graph's capture), or `--stream` values: " + listed(path_setting_choices("--stream"))},
      {"--contexts", kSweep,
       "rungs of the context ladder ([CONTEXT.md](CONTEXT.md)): " + rungs +
           "; each cell runs with its rung's options and those of the rungs below it (`layers` is the workload's block "
           "count for a workload shape, else 60; the `steps` and `backward` rungs run `--iters` as `--steps`); a rung "
           "never takes away what the scenario's record sets itself (a scenario that loads its own weights keeps them "
           "at `mapped-weights`). A cell of `isolated` keeps the key it always had, so sweeps from before the axis "
           "resume and merge"},
      {"--repeats", kSweep, "runs of each configuration (a hang may not come every time), at most 100000"},
  };
  for (const Docs& doc : docs) {
    const auto row = std::find_if(table.begin(), table.end(), [&](const OptionDef& d) {
      return doc.name == std::string(d.name) && (d.commands & doc.commands) != 0;
    });
    if (row == table.end()) throw std::logic_error(std::string("option docs: no option ") + doc.name);
    if (doc.text != row->help) row->docs = doc.text;
  }
}

// The row of run option `name` (a RunSpec field), or nullptr.
const OptionDef* find_def(const std::string& name) {
  for (const OptionDef& d : option_table()) {
    if (name == d.name && d.in_run_spec()) return &d;
  }
  return nullptr;
}

const OptionDef& option_def(const std::string& name) {
  if (const OptionDef* d = find_def(name)) return *d;
  throw std::logic_error("no run option " + name);
}

// The row of `name` as `command` takes it, or nullptr.
const OptionDef* command_def(const std::string& name, RunCommand command) {
  for (const OptionDef& d : option_table()) {
    if (name == d.name && (d.commands & command_bit(command))) return &d;
  }
  return nullptr;
}

std::string key_of(const OptionDef& d) { return std::string(d.name).substr(2); }

// "... (default none; scenario 2: read)": the plain default and each scenario's own.
std::string default_text(const OptionDef& d) {
  std::string scenarios;
  if (d.setting) {
    for (const ScenarioInfo& sc : scenario_table()) {
      for (const auto& [field, value] : sc.preconditions) {
        if (field == d.setting) scenarios += "; scenario " + std::to_string(sc.number) + ": " + value;
      }
    }
  }
  if (scenarios.empty()) return d.shown_default;
  return (d.shown_default.empty() ? "none" : d.shown_default) + scenarios;
}

bool has_range(const OptionDef& d) { return !std::isnan(d.min); }

// "0-7" (bounds that are integers) or "[0.01, 86400]".
std::string range_text(double low, double high) {
  const bool integers = low == std::floor(low) && high == std::floor(high);
  if (!integers) return "[" + number_text(low) + ", " + number_text(high) + "]";
  return std::to_string(static_cast<long long>(low)) + "-" + std::to_string(static_cast<long long>(high));
}

// " (--batch INT)": how the option is written, for a value that is not of its kind.
std::string form_of(const OptionDef& d) { return d.label.empty() ? "" : std::string(" (") + d.name + " " + d.label + ")"; }

InputError out_of_range(const OptionDef& d, const std::string& text) {
  return InputError(std::string(d.name) + ": " + quoted_word(text) + " is not in " + range_text(d.min, d.max));
}

// The value of a row's option as typed, converted strictly and checked against the row: an
// integer (a 64-bit one) or a finite number within its range, a word among its choices, a file's
// name not empty. InputError names the option and quotes the value as typed.
int64_t integer_value(const OptionDef& d, const std::string& text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ptr != end || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range)) {
    throw InputError(std::string(d.name) + ": " + quoted_word(text) + " is not an integer" + form_of(d));
  }
  if (r.ec == std::errc::result_out_of_range) {
    if (has_range(d)) throw out_of_range(d, text);
    throw InputError(std::string(d.name) + ": " + quoted_word(text) + " is beyond a 64-bit integer" + form_of(d));
  }
  if (has_range(d) && (static_cast<double>(v) < d.min || static_cast<double>(v) > d.max)) throw out_of_range(d, text);
  return v;
}

double real_value(const OptionDef& d, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const bool whole = !text.empty() && end == text.c_str() + text.size() && !std::isspace(static_cast<unsigned char>(text[0]));
  if (!whole || std::isnan(v)) throw InputError(std::string(d.name) + ": " + quoted_word(text) + " is not a number" + form_of(d));
  if (has_range(d) && !(v >= d.min && v <= d.max)) throw out_of_range(d, text);
  if (!std::isfinite(v)) throw InputError(std::string(d.name) + ": " + quoted_word(text) + " is not a finite number" + form_of(d));
  return v;
}

void check_text(const OptionDef& d, const std::string& text) {
  if (!d.choices.empty() && std::find(d.choices.begin(), d.choices.end(), text) == d.choices.end()) {
    throw InputError(unknown_value(d.name, text, d.choices));
  }
  if (d.label == "FILE" || d.label == "DIR") check_not_empty(d.name, text);
}

// CLI11 hands an option that needs a value the next word, whatever it is: "--batch --check" is
// --batch without its value, not a batch named "--check".
void refuse_option_as_value(const OptionDef& d, const std::string& text) {
  if (text.rfind("-", 0) != 0) return;
  for (const OptionDef& other : option_table()) {
    if (text == other.name || (other.alias[0] && text == other.alias)) {
      throw InputError(std::string(d.name) + " needs a value before " + text + form_of(d));
    }
  }
}

void check_value(const OptionDef& d, const std::string& text) {
  refuse_option_as_value(d, text);
  switch (kind_of(d.field)) {
    case OptionKind::integer: integer_value(d, text); return;
    case OptionKind::real: real_value(d, text); return;
    case OptionKind::text: check_text(d, text); return;
    case OptionKind::flag: return;
  }
}

}  // namespace

const char* command_name(RunCommand command) {
  switch (command) {
    case RunCommand::run: return "repro";
    case RunCommand::report: return "repro report";
    case RunCommand::bench: return "repro bench";
    case RunCommand::sweep: return "repro sweep";
    case RunCommand::triage: return "repro triage";
  }
  return "repro";
}

std::vector<std::string> RunSpec::to_argv() const {
  std::vector<std::string> out;
  for (const OptionDef& d : option_table()) {
    if (!d.in_run_spec() || !given(d.name)) continue;
    out.push_back(d.name);
    if (!std::holds_alternative<Flag>(d.field)) out.push_back(value(d.name));
  }
  return out;
}

nlohmann::json RunSpec::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const OptionDef& d : option_table()) {
    if (!d.in_run_spec() || !given(d.name)) continue;
    std::visit(
        [&](auto member) {
          using T = decltype(member);
          if constexpr (std::is_same_v<T, Flag>) {
            j[key_of(d)] = true;
          } else if constexpr (!std::is_same_v<T, Own>) {
            j[key_of(d)] = *(this->*member);
          }
        },
        d.field);
  }
  return j;
}

RunSpec RunSpec::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw InputError("run options: not a JSON object");
  RunSpec spec;
  for (const auto& item : j.items()) {
    const OptionDef* d = find_def("--" + item.key());
    if (!d) throw InputError("run options: \"" + item.key() + "\" is not a run option");
    const nlohmann::json& v = item.value();
    const std::string where = "run options: \"" + item.key() + "\" ";
    std::visit(
        [&](auto member) {
          using T = decltype(member);
          if constexpr (std::is_same_v<T, Flag>) {
            if (!v.is_boolean()) throw InputError(where + "must be true or false");
            spec.*member = v.get<bool>();
          } else if constexpr (std::is_same_v<T, Text>) {
            if (!v.is_string()) throw InputError(where + "must be a string");
            spec.*member = v.get<std::string>();
          } else if constexpr (std::is_same_v<T, Integer>) {
            if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) {
              throw InputError(where + "must be an integer" + (v.is_number_integer() ? " of 64 bits" : ""));
            }
            spec.*member = v.get<int64_t>();
          } else if constexpr (std::is_same_v<T, Real>) {
            if (!v.is_number()) throw InputError(where + "must be a number");
            spec.*member = v.get<double>();
          }
        },
        d->field);
  }
  return spec;
}

RunSpec RunSpec::from_argv(const std::vector<std::string>& words) {
  RunSpec spec;
  for (size_t i = 0; i < words.size(); ++i) {
    const OptionDef* d = find_def(words[i]);
    if (!d) throw InputError(quoted_word(words[i]) + " is not a run option");
    const bool flag = std::holds_alternative<Flag>(d->field);
    if (!flag && i + 1 == words.size()) throw InputError(words[i] + " needs a value" + form_of(*d));
    const std::string& name = words[i];
    spec.set(name, flag ? std::string() : words[++i]);
  }
  return spec;
}

bool RunSpec::given(const std::string& option) const {
  return std::visit(
      [&](auto member) {
        using T = decltype(member);
        if constexpr (std::is_same_v<T, Own>) {
          return false;
        } else if constexpr (std::is_same_v<T, Flag>) {
          return this->*member;
        } else {
          return (this->*member).has_value();
        }
      },
      option_def(option).field);
}

std::string RunSpec::value(const std::string& option) const {
  return std::visit(
      [&](auto member) -> std::string {
        using T = decltype(member);
        if constexpr (std::is_same_v<T, Flag> || std::is_same_v<T, Own>) {
          return "";
        } else if constexpr (std::is_same_v<T, Text>) {
          return (this->*member).value_or("");
        } else if constexpr (std::is_same_v<T, Integer>) {
          return (this->*member) ? std::to_string(*(this->*member)) : "";
        } else {
          return (this->*member) ? number_text(*(this->*member)) : "";
        }
      },
      option_def(option).field);
}

void RunSpec::set(const std::string& option, const std::string& text) {
  const OptionDef& d = option_def(option);
  if (!std::holds_alternative<Flag>(d.field)) refuse_option_as_value(d, text);
  std::visit(
      [&](auto member) {
        using T = decltype(member);
        if constexpr (std::is_same_v<T, Flag>) {
          this->*member = true;
        } else if constexpr (std::is_same_v<T, Text>) {
          check_text(d, text);
          this->*member = text;
        } else if constexpr (std::is_same_v<T, Integer>) {
          this->*member = integer_value(d, text);
        } else if constexpr (std::is_same_v<T, Real>) {
          this->*member = real_value(d, text);
        }
      },
      d.field);
}

void RunSpec::unset(const std::string& option) {
  std::visit(
      [&](auto member) {
        using T = decltype(member);
        if constexpr (std::is_same_v<T, Flag>) {
          this->*member = false;
        } else if constexpr (!std::is_same_v<T, Own>) {
          (this->*member).reset();
        }
      },
      option_def(option).field);
}

void RunSpec::overlay(const RunSpec& adds) {
  for (const OptionDef& d : option_table()) {
    if (d.in_run_spec() && adds.given(d.name)) set(d.name, adds.value(d.name));
  }
}

bool takes_run_option(RunCommand command, const std::string& option) {
  const OptionDef* d = find_def(option);
  return d && (d->commands & command_bit(command) & kRuns);
}

const char* run_option_setting(const std::string& option) {
  const OptionDef* d = find_def(option);
  return d ? d->setting : nullptr;
}

std::vector<std::string> run_option_names() {
  std::vector<std::string> out;
  for (const OptionDef& d : option_table()) {
    if (d.in_run_spec()) out.emplace_back(d.name);
  }
  return out;
}

void check_run_spec(const RunSpec& spec, RunCommand command) {
  const std::string program = command_name(command);
  for (const OptionDef& d : option_table()) {
    if (!d.in_run_spec() || !spec.given(d.name)) continue;
    if (!(d.commands & command_bit(command))) {
      throw InputError(std::string(d.name) + " is not an option of " + program + " (" + program + " --help lists its own)");
    }
    check_value(d, spec.value(d.name));
  }
  if (command == RunCommand::report && !spec.scenario) {
    throw InputError("--scenario is required: a report is about one scenario's hang (--scenario N)");
  }
}

std::string option_docs(const std::string& name, const std::string& help) {
  for (const OptionDef& d : option_table()) {
    if (name == d.name && help == d.help && !d.docs.empty()) return d.docs;
  }
  return help;
}

std::vector<std::string> run_option_groups() {
  std::vector<std::string> groups;
  for (const OptionDef& d : option_table()) {
    if (d.in_run_spec() && std::find(groups.begin(), groups.end(), d.group) == groups.end()) groups.emplace_back(d.group);
  }
  return groups;
}

CommandOptions::CommandOptions(CLI::App& app, RunCommand command) : app_(app), command_(command) {}

CLI::Option* CommandOptions::add_row(const std::string& name, OptionKind kind, std::function<void(const std::string&)> take) {
  const OptionDef* d = command_def(name, command_);
  if (!d) throw std::logic_error(std::string(command_name(command_)) + " takes no option " + name);
  if (kind_of(d->field) != kind) throw std::logic_error("option table: " + name + " holds another kind of value");
  const std::string names = d->alias[0] ? std::string(d->alias) + "," + d->name : std::string(d->name);
  // CLI11 collects the text as typed; read() converts and checks it.
  CLI::Option* opt = kind == OptionKind::flag ? app_.add_flag(names, d->help) : app_.add_option(names, d->help);
  opt->group(d->group);
  if (!d->label.empty()) opt->option_text(d->label);
  const std::string shown = default_text(*d);
  if (!shown.empty()) opt->default_str(shown);
  // A report is about one scenario's hang.
  if (command_ == RunCommand::report && name == "--scenario") opt->required();
  bound_.push_back({opt, [d, take = std::move(take)](const std::string& text) {
                      check_value(*d, text);
                      take(text);
                    }});
  return opt;
}

void CommandOptions::add_run_options(RunSpec& spec) {
  for (const OptionDef& d : option_table()) {
    if (!d.in_run_spec() || !(d.commands & command_bit(command_) & kRuns)) continue;
    const std::string name = d.name;
    CLI::Option* opt = add_row(name, kind_of(d.field), [&spec, name](const std::string& text) { spec.set(name, text); });
    // A report's runs make kReportIters calls unless told otherwise.
    if (command_ == RunCommand::report && name == "--iters") opt->default_str(std::to_string(kReportIters));
  }
}

namespace {

// Whether the row of a command's own option shows a default of its own ("CUDA_VISIBLE_DEVICES, or
// ..."); otherwise --help shows the command's: the value its variable holds before the parse.
bool own_default_shown(const std::string& name, RunCommand command) {
  const OptionDef* d = command_def(name, command);
  return !d->in_run_spec() && !d->shown_default.empty();
}

}  // namespace

CLI::Option* CommandOptions::add(const std::string& name, std::string& to) {
  CLI::Option* opt = add_row(name, OptionKind::text, [&to](const std::string& text) { to = text; });
  if (opt->get_default_str().empty() && !to.empty()) opt->default_str(to);
  return opt;
}

// (A number's row is checked before `take`: the conversion here cannot fail.)
CLI::Option* CommandOptions::add(const std::string& name, int& to) {
  const OptionDef* d = command_def(name, command_);
  if (d && !(d->min >= INT32_MIN && d->max <= INT32_MAX)) throw std::logic_error("option table: " + name + " needs a range within an int");
  CLI::Option* opt = add_row(name, OptionKind::integer, [&to](const std::string& text) { to = std::stoi(text); });
  if (!own_default_shown(name, command_)) opt->default_str(std::to_string(to));
  return opt;
}

CLI::Option* CommandOptions::add(const std::string& name, double& to) {
  CLI::Option* opt = add_row(name, OptionKind::real, [&to](const std::string& text) { to = std::strtod(text.c_str(), nullptr); });
  if (!own_default_shown(name, command_)) opt->default_str(number_text(to));
  return opt;
}

CLI::Option* CommandOptions::add(const std::string& name, bool& to) {
  return add_row(name, OptionKind::flag, [&to](const std::string&) { to = true; });
}

void CommandOptions::read() const {
  for (const Bound& b : bound_) {
    if (b.option->count() == 0) continue;
    const std::vector<std::string>& typed = b.option->results();
    b.take(typed.empty() ? std::string() : typed.back());
  }
}

}  // namespace sdpa
