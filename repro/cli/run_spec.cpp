// run_spec.cpp: the run options, one table, and the RunSpec value they fill.
#include "repro/cli/run_spec.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <variant>

#include "math_sdpa/context.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/path_settings.h"
#include "math_sdpa/problem.h"
#include "math_sdpa/stage.h"
#include "repro/cli/hang_options.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

namespace sdpa {

namespace {

using Text = std::optional<std::string> RunSpec::*;
using Integer = std::optional<int64_t> RunSpec::*;
using Real = std::optional<double> RunSpec::*;
using Flag = bool RunSpec::*;
using Field = std::variant<Text, Integer, Real, Flag>;

enum : unsigned { kRun = 1, kReport = 2, kBench = 4, kAll = kRun | kReport | kBench };

unsigned command_bit(RunCommand c) { return c == RunCommand::run ? kRun : c == RunCommand::report ? kReport : kBench; }

struct OptionDef {
  const char* name;   // "--kv-len"
  const char* alias;  // "-S", or ""
  Field field;
  const char* group;
  std::string label;    // FILE, INT, or the accepted words
  std::string help;
  std::string shown_default{};  // what --help says the default is ("" none)
  unsigned commands = kAll;
  // The setting a scenario's precondition gives it (settings_fields' name): --help adds
  // "; scenario N: VALUE" to the default for each scenario that sets it.
  const char* setting = nullptr;
  std::vector<std::string> choices{};  // the words it accepts (checked by CLI11)
  double min = std::nan(""), max = std::nan("");
};

// "a|b|c" as "a, b, c" in a description, where the help may wrap between the words.
std::string listed(std::string choices) {
  for (size_t at; (at = choices.find('|')) != std::string::npos;) choices.replace(at, 1, ", ");
  return choices;
}

std::string number_text(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
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
    const std::string on_off = "on|off";
    std::vector<OptionDef> t = {
        {"--workload", "", &RunSpec::workload, P, "NAME",
         "a failing workload's layer (shape options override it): " + listed(workload_names())},
        {"--workload-file", "", &RunSpec::workload_file, P, "FILE",
         "replay a call scripts/sdpa_capture.py captured (docs/CAPTURE.md)"},
        {"--call", "", &RunSpec::call, P, "N", "the workload file's call N, and its process's context", "0"},
        {"--call-only", "", &RunSpec::call_only, P, "", "the call without its process's context"},
        {"--dtype", "", &RunSpec::dtype, P, "bf16|fp16|fp32", "element type", "bf16", kAll, nullptr, {"bf16", "fp16", "fp32"}},
        {"--precision", "", &RunSpec::precision, P, "upcast|native", "compute fp16/bf16 in fp32 (PyTorch) or in the dtype",
         "upcast", kAll, nullptr, {"upcast", "native"}},
        {"--batch", "-b", &RunSpec::batch, P, "INT", "batch size B", std::to_string(p.batch)},
        {"--heads", "", &RunSpec::heads, P, "INT", "query heads Hq", std::to_string(p.q_heads)},
        {"--kv-heads", "", &RunSpec::kv_heads, P, "INT", "key/value heads Hkv; < Hq: grouped-query attention", "Hq"},
        {"--q-len", "-L", &RunSpec::q_len, P, "INT", "query length L", std::to_string(p.q_len)},
        {"--kv-len", "-S", &RunSpec::kv_len, P, "INT", "key/value length S", "L"},
        {"--head-dim", "-E", &RunSpec::head_dim, P, "INT", "head dimension E", std::to_string(p.head_dim)},
        {"--mask", "", &RunSpec::mask, P, "KIND", "attention mask: none, bool, float (additive), causal", "none", kAll, nullptr,
         {"none", "bool", "float", "causal"}},
        {"--mask-dims", "", &RunSpec::mask_dims, P, "1x1|Bx1|1xH|BxH", "a bool or float mask's broadcast over batch x heads",
         "1x1", kAll, nullptr, {"1x1", "Bx1", "1xH", "BxH"}},
        {"--text-padding", "", &RunSpec::text_padding, P, "TOKENS:VALID",
         "bool mask: batch entries after the first see VALID of TOKENS text keys"},
        {"--dropout", "", &RunSpec::dropout, P, "P", "dropout probability in [0, 1)", "0"},
        {"--scale", "", &RunSpec::scale, P, "X", "softmax scale, not 0", "1/sqrt(E)"},
        // A string, parsed strictly by the run: CLI11 would accept 2^64 and wrap or saturate it.
        {"--seed", "", &RunSpec::seed, P, "SEED", "seed of the random inputs and the dropout stream", std::to_string(p.seed)},
        // The reproducer regenerates its inputs from --seed: a report takes no files.
        {"--inputs", "", &RunSpec::inputs, P, "DIR", "tensors from np.save: q.npy, k.npy, v.npy, mask.npy if masked", "",
         kRun | kBench},

        {"--alloc", "", &RunSpec::alloc, M, "KIND", "allocation: " + listed(path_setting_choices("--alloc")), "managed", kAll,
         "alloc"},
        {"--allow-oversubscription", "", &RunSpec::allow_oversubscription, M, "",
         "allocate beyond 90% of the memory available (can hang the GPU, or a DGX Spark until a power cycle)"},
        {"--advise", "", &RunSpec::advise, M, "LIST",
         "cudaMemAdvise on each managed tensor, a list of " + listed(path_setting_choices("--advise")), "none"},
        {"--touch-streams", "", &RunSpec::touch_streams, M, "INT", "streams touching every page at entry, 0-64", "0", kAll,
         "entry_touch_streams", {}, 0, 64},
        {"--host-touch", "", &RunSpec::host_touch, M, on_off, "a host thread touches them too", "off", kAll, "entry_host_touch"},

        {"--scenario", "", &RunSpec::scenario, S, scenario_range(),
         "0: the whole path; 1-" + std::to_string(scenario_count() - 1) + ": the hang scenarios (repro help scenarios)", "0",
         kAll, nullptr, {}, 0, static_cast<double>(scenario_count() - 1)},
        // A report runs the scenario's own fix off and on.
        {"--fix", "", &RunSpec::fix, S, "on|off|lean", "the scenario's own fix: on (as designed), lean (its lean form), off",
         "off", kRun | kBench, nullptr, {"on", "off", "lean"}},
        {"--fixes", "", &RunSpec::fixes, S, "LIST",
         "fixes in any scenario, joined by commas: N (as designed), N:lean, N:part/part (docs/FIXES.md), all, all:lean, none",
         "none", kRun | kBench},
        {"--full", "", &RunSpec::full, S, "", "the whole path under the scenario's conditions, not only its part"},
        {"--graph", "", &RunSpec::graph, S, "",
         "capture the call's GPU stages into a CUDA graph once and replay it every call (scenario 5)"},
        {"--stream", "", &RunSpec::stream, S, "MODE", "stream: " + listed(path_setting_choices("--stream")), "legacy", kAll,
         "stream"},
        {"--gemm-stream", "", &RunSpec::gemm_stream, S, "MODE", "Q.K^T stream: " + listed(path_setting_choices("--gemm-stream")),
         "same", kAll, "qk_gemm_stream"},
        {"--gemm-order", "", &RunSpec::gemm_order, S, path_setting_choices("--gemm-order"),
         "that GEMM after Q and K: an event or nothing explicit", "event", kAll, "qk_gemm_order"},
        {"--k-layout", "", &RunSpec::k_layout, S, path_setting_choices("--k-layout"),
         "K^T viewed from a contiguous or a [B, S, H, E] buffer (the workloads': bshe)", "bhse", kAll, "k_layout"},
        {"--gemm-api", "", &RunSpec::gemm_api, S, path_setting_choices("--gemm-api"), "Q.K^T as at::bmm or cublasGemmBatchedEx",
         "strided", kAll, "qk_gemm_api"},
        {"--scores-to-host", "", &RunSpec::scores_to_host, S, "MODE",
         "host access to the scores: " + listed(path_setting_choices("--scores-to-host")), "none", kAll, "scores_to_host"},
        {"--scores-host-phase", "", &RunSpec::scores_host_phase, S, "WHEN",
         "that access relative to softmax: " + listed(path_setting_choices("--scores-host-phase")), "before", kAll,
         "scores_host_phase"},

        {"--alloc-timing", "", &RunSpec::alloc_timing, C, "WHEN",
         "intermediates allocated " + listed(path_setting_choices("--alloc-timing")) +
             ": before the first call, or inside each call as PyTorch does",
         "upfront", kAll, "alloc_timing"},
        {"--layers", "", &RunSpec::layers, C, "N|model",
         "attention layers a step runs in sequence, each with its own Q, K, V, output; model: the workload's block count",
         "1", kAll, "layers"},
        {"--layers-fit", "", &RunSpec::layers_fit, C, "",
         "as many of --layers' layers as the memory plan allows beside the rest (at least 1), where all of them "
         "would be refused; the run says how many and why"},
        {"--retain", "", &RunSpec::retain, C, "WHAT",
         "what each layer keeps until the step ends: " + listed(path_setting_choices("--retain")), "none", kAll, "retain"},
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
         kAll, nullptr, {"off", "stages", "sync", "values"}},
        {"--log-format", "", &RunSpec::log_format, L, "harness|sdpa-debug",
         "sdpa-debug: the debug instrumentation's lines, exactly (and --log values unless --log)", "harness", kAll, nullptr,
         {"harness", "sdpa-debug"}},
        {"--log-extras", "", &RunSpec::log_extras, L, "", "sdpa-debug: also the harness's own lines (extra stages, notes)"},
        {"--stage-timeout", "", &RunSpec::stage_timeout, L, "S", "the watchdog's deadline for any one stage, seconds",
         number_text(kDefaultStageTimeoutS), kAll, nullptr, {}, 0.01, 86400},
        {"--stall-threshold", "", &RunSpec::stall_threshold, L, "S",
         "a finished stage longer than this is a stall, seconds; 0: off", number_text(kDefaultStallThresholdS), kAll, nullptr,
         {}, 0, 86400},
        {"--timeout", "", &RunSpec::timeout, L, "S", "its deadline for the whole run, seconds; 0: none", "0", kAll, nullptr, {},
         0, 604800},
        // A report supervises every run itself; a benchmark under CUDA_LAUNCH_BLOCKING would time the waits.
        {"--no-fork", "", &RunSpec::no_fork, L, "", "one process, a watchdog thread (for cuda-gdb, compute-sanitizer)", "",
         kRun | kBench},
        {"--launch-blocking", "", &RunSpec::launch_blocking, L, "", "CUDA_LAUNCH_BLOCKING=1: each launch waits for its kernel",
         "", kRun | kReport},
        {"--on-hang", "", &RunSpec::on_hang, L, "WHAT",
         "at a hang: snapshot (evidence from the live process, then kill), kill, or keep it for a person",
         on_hang_name(OnHang::snapshot), kAll, nullptr, {"snapshot", "kill", "keep"}},
        {"--snapshot-timeout", "", &RunSpec::snapshot_timeout, L, "S", "the whole snapshot's budget, seconds",
         number_text(HangOptions{}.snapshot_timeout_s), kAll, nullptr, {}, 0.5, 3600},
        {"--keep-timeout", "", &RunSpec::keep_timeout, L, "S", "--on-hang keep: kill it after this long, seconds",
         number_text(HangOptions{}.keep_timeout_s), kAll, nullptr, {}, 0.1, 604800},
        // A report puts each run's log and snapshot into its folder.
        {"--snapshot-dir", "", &RunSpec::snapshot_dir, L, "DIR", "the hang snapshot's folder",
         "FILE.snapshot beside --json FILE, else ./repro-hang-TIME-PID", kRun | kBench},
        {"--log-file", "", &RunSpec::log_file, L, "FILE",
         "append the stage log and records, fsync'ed: survives a frozen machine", "", kRun | kBench},
        {"--nvidia-bug-report", "", &RunSpec::nvidia_bug_report, L, "",
         "also nvidia-bug-report.sh (root; a minute: raise --snapshot-timeout)"},
        {"--inject", "", &RunSpec::inject, L, "FAULT",
         "a fault, to test the watchdog: hang:STAGE, error:STAGE or slow:STAGE:MS; STAGE: " + stage_names()},

        // A bench counts its calls with -w and -n; a report checks every call and writes its own files.
        {"--iters", "", &RunSpec::iters, O, "INT", "calls of the path (passes over its layers)", "1", kRun | kReport, nullptr,
         {}, 1, 1e8},
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
    };
    return t;
  }();
  return table;
}

const OptionDef& option_def(const std::string& name) {
  for (const OptionDef& d : option_table()) {
    if (name == d.name) return d;
  }
  throw std::logic_error("no run option " + name);
}

const OptionDef* find_def(const std::string& name) {
  for (const OptionDef& d : option_table()) {
    if (name == d.name) return &d;
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

// Strict conversions of an option's text, for set() and from_json().
int64_t integer_of(const std::string& option, const std::string& text) {
  int64_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size()) {
    throw InputError(option + ": '" + text.substr(0, 40) + "' is not an integer");
  }
  return v;
}

double real_of(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) {
    throw InputError(option + ": '" + text.substr(0, 40) + "' is not a number");
  }
  return v;
}

}  // namespace

std::vector<std::string> RunSpec::to_argv() const {
  std::vector<std::string> out;
  for (const OptionDef& d : option_table()) {
    if (!given(d.name)) continue;
    out.push_back(d.name);
    if (!std::holds_alternative<Flag>(d.field)) out.push_back(value(d.name));
  }
  return out;
}

nlohmann::json RunSpec::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const OptionDef& d : option_table()) {
    if (!given(d.name)) continue;
    std::visit(
        [&](auto member) {
          using T = decltype(member);
          if constexpr (std::is_same_v<T, Flag>) {
            j[key_of(d)] = true;
          } else {
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
            if (!v.is_number_integer()) throw InputError(where + "must be an integer");
            spec.*member = v.get<int64_t>();
          } else {
            if (!v.is_number()) throw InputError(where + "must be a number");
            spec.*member = v.get<double>();
          }
        },
        d->field);
  }
  return spec;
}

bool RunSpec::given(const std::string& option) const {
  return std::visit(
      [&](auto member) {
        using T = decltype(member);
        if constexpr (std::is_same_v<T, Flag>) {
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
        if constexpr (std::is_same_v<T, Flag>) {
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
  std::visit(
      [&](auto member) {
        using T = decltype(member);
        if constexpr (std::is_same_v<T, Flag>) {
          this->*member = true;
        } else if constexpr (std::is_same_v<T, Text>) {
          this->*member = text;
        } else if constexpr (std::is_same_v<T, Integer>) {
          this->*member = integer_of(option, text);
        } else {
          this->*member = real_of(option, text);
        }
      },
      option_def(option).field);
}

void RunSpec::unset(const std::string& option) {
  std::visit(
      [&](auto member) {
        using T = decltype(member);
        if constexpr (std::is_same_v<T, Flag>) {
          this->*member = false;
        } else {
          (this->*member).reset();
        }
      },
      option_def(option).field);
}

void RunSpec::overlay(const RunSpec& adds) {
  for (const OptionDef& d : option_table()) {
    if (adds.given(d.name)) set(d.name, adds.value(d.name));
  }
}

bool takes_run_option(RunCommand command, const std::string& option) {
  const OptionDef* d = find_def(option);
  return d && (d->commands & command_bit(command));
}

std::vector<std::string> run_option_names() {
  std::vector<std::string> out;
  for (const OptionDef& d : option_table()) out.emplace_back(d.name);
  return out;
}

void add_run_options(CLI::App& app, RunSpec& spec, RunCommand command) {
  for (const OptionDef& d : option_table()) {
    if (!(d.commands & command_bit(command))) continue;
    const std::string names = d.alias[0] ? std::string(d.alias) + "," + d.name : std::string(d.name);
    CLI::Option* opt = std::visit(
        [&](auto member) -> CLI::Option* {
          using T = decltype(member);
          if constexpr (std::is_same_v<T, Flag>) {
            return app.add_flag_function(names, [&spec, member](int64_t n) { spec.*member = n > 0; }, d.help);
          } else if constexpr (std::is_same_v<T, Text>) {
            return app.add_option_function<std::string>(names, [&spec, member](const std::string& v) { spec.*member = v; }, d.help);
          } else if constexpr (std::is_same_v<T, Integer>) {
            return app.add_option_function<int64_t>(names, [&spec, member](const int64_t& v) { spec.*member = v; }, d.help);
          } else {
            return app.add_option_function<double>(names, [&spec, member](const double& v) { spec.*member = v; }, d.help);
          }
        },
        d.field);
    opt->group(d.group);
    if (!d.label.empty()) opt->option_text(d.label);
    // A report's runs make kReportIters calls unless told otherwise.
    const bool report_iters = command == RunCommand::report && std::string(d.name) == "--iters";
    const std::string shown = report_iters ? std::to_string(kReportIters) : default_text(d);
    if (!shown.empty()) opt->default_str(shown);
    if (!d.choices.empty()) opt->check(CLI::IsMember(d.choices));
    if (!std::isnan(d.min)) opt->check(CLI::Range(d.min, d.max));
    // A report is about one scenario's hang.
    if (command == RunCommand::report && std::string(d.name) == "--scenario") opt->required();
  }
}

}  // namespace sdpa
