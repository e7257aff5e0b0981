// minimize_steps.cpp: the steps of `repro minimize` over run options (minimize_steps.h).
#include "repro/minimize/minimize_steps.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <functional>
#include <set>

#include "math_sdpa/allocator.h"
#include "math_sdpa/errors.h"
#include "repro/cli/run_options.h"
#include "repro/common/text.h"

namespace sdpa {

namespace {

// One option as the parser saw it: its long name, and its value unless it is a flag.
struct Item {
  std::string name, value;
  bool flag = false;
};
using Items = std::vector<Item>;

// Options a configuration does not carry: the output files, the replay's source (its derived
// options are written out instead), and what a hang does (each minimize run names it and is killed).
const std::set<std::string> kNotCarried = {"--help",     "--json",         "--save-output",  "--workload-file",
                                           "--call",     "--call-only",    "--on-hang",      "--log-file",
                                           "--snapshot-dir", "--snapshot-timeout", "--keep-timeout", "--nvidia-bug-report"};

// Parses `options` as `command` would (a workload file's call expanded) and lists what was given,
// in the parser's order. Throws InputError with the parser's line when they are not a valid run.
Items parsed_items(const Options& options, RunCommand command, RunOptions* run = nullptr) {
  CLI::App app{"", "repro"};
  RunOptionParser parser(app, command);
  std::vector<const char*> argv{"repro"};
  for (const std::string& o : options) argv.push_back(o.c_str());
  ParseResult result;
  if (!parse_run_app(app, static_cast<int>(argv.size()), argv.data(), "repro", result)) throw InputError(result.message);
  if (run) *run = parser.finish(result.words);
  Items items;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    const std::string name = "--" + opt->get_lnames().front();
    if (kNotCarried.count(name)) continue;
    const bool flag = opt->get_expected_min() == 0;
    items.push_back({name, flag ? "" : opt->results().back(), flag});
  }
  return items;
}

Options options_of(const Items& items) {
  Options out;
  for (const Item& i : items) {
    out.push_back(i.name);
    if (!i.flag) out.push_back(i.value);
  }
  return out;
}

bool has(const Items& items, const std::string& name) {
  return std::any_of(items.begin(), items.end(), [&](const Item& i) { return i.name == name; });
}

Items without(Items items, const std::vector<std::string>& names) {
  items.erase(std::remove_if(items.begin(), items.end(),
                             [&](const Item& i) { return std::find(names.begin(), names.end(), i.name) != names.end(); }),
              items.end());
  return items;
}

Items with_value(Items items, const std::string& name, const std::string& value) {
  for (Item& i : items) {
    if (i.name == name) {
      i.value = value;
      return items;
    }
  }
  items.push_back({name, value, false});
  return items;
}

std::string n(int64_t x) { return std::to_string(x); }

// A step's proposal from the configuration's items and what they parse to; nullopt: not applicable.
using Propose = std::function<std::optional<Proposal>(const Items&, const RunOptions&)>;

std::optional<Proposal> dropping(const Items& items, const std::vector<std::string>& names, const std::string& change) {
  for (const std::string& name : names) {
    if (has(items, name)) return Proposal{options_of(without(items, names)), change};
  }
  return std::nullopt;
}

// Halves one size (never below 1), setting it explicitly.
Propose halving(const std::string& option, const char* letter, int64_t SdpaProblem::*size) {
  return [=](const Items& items, const RunOptions& o) -> std::optional<Proposal> {
    const int64_t value = o.problem_given.*size;
    if (value <= 1) return std::nullopt;
    Items next = with_value(items, option, n(value / 2));
    // Grouped-query attention's K/V heads divide the query heads: halve them along, at most as many.
    if (option == "--heads") next = with_value(next, "--kv-heads", n(std::min(o.problem_given.kv_heads, value / 2)));
    return Proposal{options_of(next), std::string(letter) + " " + n(value) + " -> " + n(value / 2)};
  };
}

struct StepDef {
  MinimizeStep step;
  Propose propose;
};

const std::vector<StepDef>& step_defs() {
  static const std::vector<StepDef> defs = {
      {{"no steps", "one training step (--steps dropped)"},
       [](const Items& i, const RunOptions&) { return dropping(i, {"--steps"}, "--steps dropped"); }},
      {{"no backward", "the forward pass only (--backward dropped)"},
       [](const Items& i, const RunOptions&) { return dropping(i, {"--backward"}, "--backward dropped"); }},
      {{"no host load", "no data-loader threads (--host-load dropped)"},
       [](const Items& i, const RunOptions&) { return dropping(i, {"--host-load"}, "--host-load dropped"); }},
      {{"no ballast", "no memory held by the rest of the model (--ballast dropped)"},
       [](const Items& i, const RunOptions&) {
         return dropping(i, {"--ballast", "--ballast-alloc", "--ballast-touch"}, "--ballast dropped");
       }},
      {{"one layer", "one attention layer a step, nothing retained"},
       [](const Items& i, const RunOptions& o) -> std::optional<Proposal> {
         if (o.settings.layers <= 1 && !has(i, "--retain")) return std::nullopt;
         return Proposal{options_of(with_value(without(i, {"--retain"}), "--layers", "1")),
                         "layers " + n(o.settings.layers) + " -> 1"};
       }},
      {{"one call", "one call of the path (--iters 1)"},
       [](const Items& i, const RunOptions& o) -> std::optional<Proposal> {
         if (o.iters <= 1) return std::nullopt;
         return Proposal{options_of(with_value(without(i, {"--sample-every"}), "--iters", "1")),
                         "calls " + n(o.iters) + " -> 1"};
       }},
      {{"no graph", "the call launched directly, not from a CUDA graph"},
       [](const Items& i, const RunOptions&) { return dropping(i, {"--graph"}, "--graph dropped"); }},
      {{"no fixes", "no fix applied"},
       [](const Items& i, const RunOptions& o) -> std::optional<Proposal> {
         if (o.fixes.empty()) return std::nullopt;
         return dropping(i, {"--fix", "--fixes"}, "fixes dropped");
       }},
      {{"the scenario's part", "the scenario's own part of the path instead of --full"},
       [](const Items& i, const RunOptions&) { return dropping(i, {"--full"}, "--full dropped"); }},
      {{"random inputs", "random inputs of the same shape instead of the --inputs files"},
       [](const Items& i, const RunOptions& o) -> std::optional<Proposal> {
         if (!has(i, "--inputs")) return std::nullopt;
         const SdpaProblem& p = o.problem_given;
         Items next = without(i, {"--inputs", "--mask", "--mask-dims", "--text-padding"});
         next = with_value(next, "--batch", n(p.batch));
         next = with_value(next, "--heads", n(p.q_heads));
         next = with_value(next, "--kv-heads", n(p.kv_heads));
         next = with_value(next, "--q-len", n(p.q_len));
         next = with_value(next, "--kv-len", n(p.kv_len));
         next = with_value(next, "--head-dim", n(p.head_dim));
         next = with_value(next, "--dtype", dtype_name(p.dtype));
         if (p.has_mask_input()) {
           next = with_value(next, "--mask", p.mask == MaskKind::boolean ? "bool" : "float");
           next = with_value(next, "--mask-dims", std::string(p.mask_per_batch ? "B" : "1") + "x" + (p.mask_per_head ? "H" : "1"));
         }
         return Proposal{options_of(next), "--inputs dropped (random inputs, same shape)"};
       }},
      {{"no dropout", "no dropout"},
       [](const Items& i, const RunOptions&) { return dropping(i, {"--dropout"}, "--dropout dropped"); }},
      {{"no mask", "no attention mask"},
       [](const Items& i, const RunOptions& o) -> std::optional<Proposal> {
         if (o.problem_given.mask == MaskKind::none) return std::nullopt;
         Items next = without(i, {"--mask", "--mask-dims", "--text-padding"});
         next = with_value(next, "--mask", "none");
         return Proposal{options_of(next), std::string("mask ") + mask_kind_name(o.problem_given.mask) + " -> none"};
       }},
      {{"default scale", "the default softmax scale"},
       [](const Items& i, const RunOptions&) { return dropping(i, {"--scale"}, "--scale dropped"); }},
      {{"upfront allocation", "the path's memory allocated before the calls"},
       [](const Items& i, const RunOptions& o) -> std::optional<Proposal> {
         if (o.settings.alloc_timing != AllocTiming::per_call) return std::nullopt;
         return Proposal{options_of(with_value(i, "--alloc-timing", "upfront")), "allocation per-call -> upfront"};
       }},
      {{"no launch blocking", "launches not blocking"},
       [](const Items& i, const RunOptions&) { return dropping(i, {"--launch-blocking"}, "--launch-blocking dropped"); }},
      {{"device memory", "the path's tensors in device memory (cudaMalloc), not memory that migrates"},
       [](const Items& i, const RunOptions& o) -> std::optional<Proposal> {
         if (o.settings.alloc == AllocKind::device) return std::nullopt;
         return Proposal{options_of(with_value(i, "--alloc", "device")),
                         std::string("memory ") + alloc_kind_name(o.settings.alloc) + " -> device"};
       }},
      {{"no GQA", "as many K/V heads as query heads"},
       [](const Items& i, const RunOptions& o) -> std::optional<Proposal> {
         if (!o.problem_given.gqa()) return std::nullopt;
         return Proposal{options_of(with_value(i, "--kv-heads", n(o.problem_given.q_heads))),
                         "K/V heads " + n(o.problem_given.kv_heads) + " -> " + n(o.problem_given.q_heads)};
       }},
      {{"halve S", "half the keys"}, halving("--kv-len", "S", &SdpaProblem::kv_len)},
      {{"halve L", "half the queries"}, halving("--q-len", "L", &SdpaProblem::q_len)},
      {{"halve B", "half the batch"}, halving("--batch", "B", &SdpaProblem::batch)},
      {{"halve H", "half the heads"}, halving("--heads", "H", &SdpaProblem::q_heads)},
      {{"halve E", "half the head dimension"}, halving("--head-dim", "E", &SdpaProblem::head_dim)},
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

Options canonical_options(const Options& options) { return options_of(parsed_items(options, RunCommand::run)); }

std::optional<Proposal> propose(const std::string& step, const Options& options) {
  RunOptions run;
  const Items items = parsed_items(options, RunCommand::run, &run);
  for (const StepDef& d : step_defs()) {
    if (step != d.step.name) continue;
    std::optional<Proposal> p = d.propose(items, run);
    if (!p) return std::nullopt;
    try {
      p->options = canonical_options(p->options);
      RunOptions check;
      parsed_items(p->options, RunCommand::run, &check);
    } catch (const InputError&) {
      return std::nullopt;  // not a run `repro` would make
    }
    if (p->options == canonical_options(options)) return std::nullopt;  // it changed nothing
    return p;
  }
  throw InputError("minimize: no step '" + step + "'");
}

Options without_defaults(const Options& options) {
  RunOptions given;
  Items items = parsed_items(options, RunCommand::run, &given);
  // Each option a step may have written at its plain value, and what of the run it decides.
  const std::vector<std::pair<std::string, std::function<bool(const RunOptions&, const RunOptions&)>>> plain = {
      {"--mask", [](const RunOptions& a, const RunOptions& b) { return a.problem_given.mask == b.problem_given.mask; }},
      {"--layers", [](const RunOptions& a, const RunOptions& b) { return a.settings.layers == b.settings.layers; }},
      {"--iters", [](const RunOptions& a, const RunOptions& b) { return a.iters == b.iters; }},
      {"--alloc-timing", [](const RunOptions& a, const RunOptions& b) { return a.settings.alloc_timing == b.settings.alloc_timing; }},
      {"--kv-heads", [](const RunOptions& a, const RunOptions& b) { return a.problem_given.kv_heads == b.problem_given.kv_heads; }},
      {"--dtype", [](const RunOptions& a, const RunOptions& b) { return a.problem_given.dtype == b.problem_given.dtype; }},
      {"--precision", [](const RunOptions& a, const RunOptions& b) { return a.problem_given.precision == b.problem_given.precision; }},
      {"--scenario", [](const RunOptions& a, const RunOptions& b) { return a.scenario == b.scenario; }},
      {"--stage-timeout", [](const RunOptions& a, const RunOptions& b) { return a.stage_timeout_s == b.stage_timeout_s; }},
  };
  for (const auto& [name, same] : plain) {
    if (!has(items, name)) continue;
    const Items fewer = without(items, {name});
    try {
      RunOptions without_it;
      parsed_items(options_of(fewer), RunCommand::run, &without_it);
      if (same(given, without_it)) items = fewer;
    } catch (const InputError&) {
    }
  }
  return options_of(items);
}

Options report_options(const Options& options) {
  CLI::App app{"", "repro report"};
  RunOptionParser parser(app, RunCommand::report);
  Options out;
  for (const Item& i : parsed_items(options, RunCommand::run)) {
    if (!app.get_option_no_throw(i.name)) continue;
    out.push_back(i.name);
    if (!i.flag) out.push_back(i.value);
  }
  return out;
}

}  // namespace sdpa
