// minimize_steps.cpp: the steps of `repro minimize` over a configuration (minimize_steps.h).
#include "repro/minimize/minimize_steps.h"

#include <algorithm>
#include <functional>

#include "math_sdpa/allocator.h"
#include "math_sdpa/errors.h"
#include "repro/cli/run_options.h"

namespace sdpa {

namespace {

// Options a configuration does not carry: the output files, the replay's source (its derived
// options are given instead), and what a hang does (each minimize run names it and is killed).
const std::vector<std::string> kNotCarried = {"--json",         "--save-output",      "--workload-file", "--call",
                                              "--call-only",    "--on-hang",          "--log-file",      "--snapshot-dir",
                                              "--snapshot-timeout", "--keep-timeout", "--nvidia-bug-report"};

std::string n(int64_t x) { return std::to_string(x); }

// A step's proposal from the configuration and what it runs as; nullopt: not applicable.
using Propose = std::function<std::optional<Proposal>(const RunSpec&, const RunOptions&)>;

// The configuration without `names`, when it gives any of them.
std::optional<Proposal> dropping(const RunSpec& spec, const std::vector<std::string>& names, const std::string& change) {
  if (std::none_of(names.begin(), names.end(), [&](const std::string& name) { return spec.given(name); })) return std::nullopt;
  RunSpec next = spec;
  for (const std::string& name : names) next.unset(name);
  return Proposal{next, change};
}

// The configuration with `layers` attention layers a step (what they retain kept).
Proposal with_layers(const RunSpec& spec, const RunOptions& o, int layers) {
  RunSpec next = spec;
  next.layers = n(layers);
  return Proposal{next, "layers " + n(o.settings.layers) + " -> " + n(layers)};
}

// Halves one size (never below 1), setting it explicitly.
Propose halving(std::optional<int64_t> RunSpec::*option, const char* letter, int64_t SdpaProblem::*size) {
  return [=](const RunSpec& spec, const RunOptions& o) -> std::optional<Proposal> {
    const int64_t value = o.problem_given.*size;
    if (value <= 1) return std::nullopt;
    RunSpec next = spec;
    next.*option = value / 2;
    // Grouped-query attention's K/V heads divide the query heads: halve them along, at most as many.
    if (option == &RunSpec::heads) next.kv_heads = std::min(o.problem_given.kv_heads, value / 2);
    return Proposal{next, std::string(letter) + " " + n(value) + " -> " + n(value / 2)};
  };
}

struct StepDef {
  MinimizeStep step;
  Propose propose;
};

const std::vector<StepDef>& step_defs() {
  static const std::vector<StepDef> defs = {
      {{"no steps", "one training step (--steps dropped)"},
       [](const RunSpec& s, const RunOptions&) { return dropping(s, {"--steps"}, "--steps dropped"); }},
      {{"no backward", "the forward pass only (--backward dropped)"},
       [](const RunSpec& s, const RunOptions&) { return dropping(s, {"--backward"}, "--backward dropped"); }},
      {{"no host load", "no data-loader threads (--host-load dropped)"},
       [](const RunSpec& s, const RunOptions&) { return dropping(s, {"--host-load"}, "--host-load dropped"); }},
      {{"no ballast", "no memory held by the rest of the model (--ballast dropped)"},
       [](const RunSpec& s, const RunOptions&) {
         return dropping(s, {"--ballast", "--ballast-alloc", "--ballast-touch"}, "--ballast dropped");
       }},
      {{"no mapped weights", "no weights loaded from a mapped file (--mapped-weights dropped)"},
       [](const RunSpec& s, const RunOptions&) {
         return dropping(s, {"--mapped-weights", "--weights-mapping"}, "--mapped-weights dropped");
       }},
      {{"one layer", "one attention layer a step, nothing retained"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (o.settings.layers <= 1 && !s.retain) return std::nullopt;
         RunSpec next = s;
         next.retain.reset();
         next.layers = "1";
         next.layers_fit = false;
         return Proposal{next, "layers " + n(o.settings.layers) + " -> 1"};
       }},
      // A fault from layer K on: one layer passes; half as many, then one fewer, still fail, down to K.
      {{"halve layers", "half the attention layers a step, with what they retain"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (o.settings.layers <= 2) return std::nullopt;
         return with_layers(s, o, o.settings.layers / 2);
       }},
      {{"one layer fewer", "one attention layer fewer a step"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (o.settings.layers <= 2) return std::nullopt;
         return with_layers(s, o, o.settings.layers - 1);
       }},
      {{"one call", "one call of the path (--iters 1)"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (o.iters <= 1) return std::nullopt;
         RunSpec next = s;
         next.sample_every.reset();
         next.iters = 1;
         return Proposal{next, "calls " + n(o.iters) + " -> 1"};
       }},
      {{"no graph", "the call launched directly, not from a CUDA graph"},
       [](const RunSpec& s, const RunOptions&) { return dropping(s, {"--graph"}, "--graph dropped"); }},
      {{"no fixes", "no fix applied"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (o.fixes.empty()) return std::nullopt;
         return dropping(s, {"--fix", "--fixes"}, "fixes dropped");
       }},
      {{"the scenario's part", "the scenario's own part of the path instead of --full"},
       [](const RunSpec& s, const RunOptions&) { return dropping(s, {"--full"}, "--full dropped"); }},
      {{"random inputs", "random inputs of the same shape instead of the --inputs files"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (!s.inputs) return std::nullopt;
         const SdpaProblem& p = o.problem_given;
         RunSpec next = s;
         for (const char* name : {"--inputs", "--mask", "--mask-dims", "--text-padding"}) next.unset(name);
         next.batch = p.batch, next.heads = p.q_heads, next.kv_heads = p.kv_heads;
         next.q_len = p.q_len, next.kv_len = p.kv_len, next.head_dim = p.head_dim;
         next.dtype = dtype_name(p.dtype);
         if (p.has_mask_input()) {
           next.mask = p.mask == MaskKind::boolean ? "bool" : "float";
           next.mask_dims = std::string(p.mask_per_batch ? "B" : "1") + "x" + (p.mask_per_head ? "H" : "1");
         }
         return Proposal{next, "--inputs dropped (random inputs, same shape)"};
       }},
      {{"no dropout", "no dropout"},
       [](const RunSpec& s, const RunOptions&) { return dropping(s, {"--dropout"}, "--dropout dropped"); }},
      {{"no mask", "no attention mask"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (o.problem_given.mask == MaskKind::none) return std::nullopt;
         RunSpec next = s;
         for (const char* name : {"--mask-dims", "--text-padding"}) next.unset(name);
         next.mask = "none";
         return Proposal{next, std::string("mask ") + mask_kind_name(o.problem_given.mask) + " -> none"};
       }},
      {{"default scale", "the default softmax scale"},
       [](const RunSpec& s, const RunOptions&) { return dropping(s, {"--scale"}, "--scale dropped"); }},
      {{"upfront allocation", "the path's memory allocated before the calls"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (o.settings.alloc_timing != AllocTiming::per_call) return std::nullopt;
         RunSpec next = s;
         next.alloc_timing = "upfront";
         return Proposal{next, "allocation per-call -> upfront"};
       }},
      {{"no launch blocking", "launches not blocking"},
       [](const RunSpec& s, const RunOptions&) { return dropping(s, {"--launch-blocking"}, "--launch-blocking dropped"); }},
      {{"device memory", "the path's tensors in device memory (cudaMalloc), not memory that migrates"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (o.settings.alloc == AllocKind::device) return std::nullopt;
         RunSpec next = s;
         next.alloc = "device";
         return Proposal{next, std::string("memory ") + alloc_kind_name(o.settings.alloc) + " -> device"};
       }},
      {{"no GQA", "as many K/V heads as query heads"},
       [](const RunSpec& s, const RunOptions& o) -> std::optional<Proposal> {
         if (!o.problem_given.gqa()) return std::nullopt;
         RunSpec next = s;
         next.kv_heads = o.problem_given.q_heads;
         return Proposal{next, "K/V heads " + n(o.problem_given.kv_heads) + " -> " + n(o.problem_given.q_heads)};
       }},
      {{"halve S", "half the keys"}, halving(&RunSpec::kv_len, "S", &SdpaProblem::kv_len)},
      {{"halve L", "half the queries"}, halving(&RunSpec::q_len, "L", &SdpaProblem::q_len)},
      {{"halve B", "half the batch"}, halving(&RunSpec::batch, "B", &SdpaProblem::batch)},
      {{"halve H", "half the heads"}, halving(&RunSpec::heads, "H", &SdpaProblem::q_heads)},
      {{"halve E", "half the head dimension"}, halving(&RunSpec::head_dim, "E", &SdpaProblem::head_dim)},
  };
  return defs;
}

}  // namespace

const std::vector<MinimizeStep>& minimize_steps() {
  static const std::vector<MinimizeStep> steps = [] {
    std::vector<MinimizeStep> out;
    for (const StepDef& d : step_defs()) out.push_back(d.step);
    return out;
  }();
  return steps;
}

RunSpec carried_options(const RunSpec& options) {
  validate_run_spec(options);
  RunSpec carried = options;
  for (const std::string& name : kNotCarried) carried.unset(name);
  return carried;
}

std::optional<Proposal> propose(const std::string& step, const RunSpec& options) {
  const RunOptions run = validate_run_spec(options);
  for (const StepDef& d : step_defs()) {
    if (step != d.step.name) continue;
    std::optional<Proposal> p = d.propose(options, run);
    if (!p) return std::nullopt;
    try {
      validate_run_spec(p->options);
    } catch (const InputError&) {
      return std::nullopt;  // not a run `repro` would make
    }
    if (p->options == options) return std::nullopt;  // it changed nothing
    return p;
  }
  throw InputError("minimize: no step '" + step + "'");
}

RunSpec without_defaults(const RunSpec& options) {
  const RunOptions given = validate_run_spec(options);
  RunSpec out = options;
  // Each option a step may have written at its plain value, and what of the run it decides.
  const std::vector<std::pair<std::string, std::function<bool(const RunOptions&, const RunOptions&)>>> plain = {
      {"--mask", [](const RunOptions& a, const RunOptions& b) { return a.problem_given.mask == b.problem_given.mask; }},
      {"--layers", [](const RunOptions& a, const RunOptions& b) { return a.settings.layers == b.settings.layers; }},
      // One layer always fits; more may not on the machine (it is decided there, not here).
      {"--layers-fit", [](const RunOptions& a, const RunOptions&) { return a.settings.layers == 1; }},
      {"--iters", [](const RunOptions& a, const RunOptions& b) { return a.iters == b.iters; }},
      {"--alloc-timing", [](const RunOptions& a, const RunOptions& b) { return a.settings.alloc_timing == b.settings.alloc_timing; }},
      {"--kv-heads", [](const RunOptions& a, const RunOptions& b) { return a.problem_given.kv_heads == b.problem_given.kv_heads; }},
      {"--dtype", [](const RunOptions& a, const RunOptions& b) { return a.problem_given.dtype == b.problem_given.dtype; }},
      {"--precision", [](const RunOptions& a, const RunOptions& b) { return a.problem_given.precision == b.problem_given.precision; }},
      {"--scenario", [](const RunOptions& a, const RunOptions& b) { return a.scenario == b.scenario; }},
      {"--stage-timeout", [](const RunOptions& a, const RunOptions& b) { return a.stage_timeout_s == b.stage_timeout_s; }},
  };
  for (const auto& [name, same] : plain) {
    if (!out.given(name)) continue;
    RunSpec fewer = out;
    fewer.unset(name);
    try {
      if (same(given, validate_run_spec(fewer))) out = fewer;
    } catch (const InputError&) {
    }
  }
  return out;
}

RunSpec report_options(const RunSpec& options) {
  RunSpec out = carried_options(options);
  for (const std::string& name : run_option_names()) {
    if (!takes_run_option(RunCommand::report, name)) out.unset(name);
  }
  return out;
}

}  // namespace sdpa
