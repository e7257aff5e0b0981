// sweep_options.cpp: CLI11 definition of `repro sweep`.
#include "repro/sweep/sweep_options.h"

#include <CLI/CLI.hpp>

#include <sstream>

#include "math_sdpa/errors.h"
#include "repro/common/text.h"
#include "repro/cli/context_ladder.h"
#include "repro/cli/run_options.h"
#include "repro/common/output_paths.h"
#include "scenarios/scenario.h"

namespace sdpa {

namespace {

std::string joined(const std::vector<std::string>& values) {
  std::string s;
  for (const auto& v : values) s += (s.empty() ? "" : ",") + v;
  return s;
}

const char* kDescription =
    "repro sweep: runs a matrix of configurations, each in its own supervised repro process with its own deadline, "
    "one worker per visible GPU, and writes the results as JSON (plus a JSON-lines file of finished cells, a table "
    "on stdout and an SVG heatmap). Axes take comma-separated lists.";

const char* kFooter =
    "Outcomes: pass, mismatch, hang (with the stage), timeout (the sweep's deadline), crash, cuda_error, waived (with "
    "the reason), usage, no_gpu, refused.\n"
    "After a hang: each cell writes FILE.cells/cell-N.log as it runs (kept unless it passed) and a hung cell its "
    "snapshot; the next cell on that GPU waits for a canary (a small checked run on device memory), and a GPU whose "
    "canary fails, or whose hung process did not die, is retired (its remaining cells run elsewhere or not at all).\n"
    "Without a GPU: the first cell that finds no usable GPU stops the sweep; the cells after it are not run.\n"
    "Several machines: --shard K/N on each, then `repro sweep merge --out DIR SHARD_DIR...` "
    "(repro sweep merge --help).\n"
    "Exit codes: 0 every cell passed or was waived; 1 any other outcome; 2 usage error; 7 a cell found no usable "
    "GPU (the sweep stopped there); 130/143 interrupted by SIGINT/SIGTERM (the cells that finished are kept; "
    "--resume runs the rest).";

// FILE.json from --json, else DIR/sweep.json from --out (default sweep-results); FILE.jsonl and
// FILE.svg beside it.
void name_outputs(const std::string& out_dir, std::string& json_path, std::string& jsonl_path, std::string& svg_path) {
  if (json_path.empty()) json_path = (out_dir.empty() ? std::string("sweep-results") : out_dir) + "/sweep.json";
  const std::string suffix = ".json";
  const bool has_suffix = json_path.size() > suffix.size() &&
                          json_path.compare(json_path.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string stem = has_suffix ? json_path.substr(0, json_path.size() - suffix.size()) : json_path;
  jsonl_path = stem + ".jsonl";
  svg_path = stem + ".svg";
}

// "a,b,c" of any axis's values.
template <typename T> std::string axis_text(const std::vector<T>& values) {
  std::string s;
  for (const T& v : values) {
    if constexpr (std::is_same_v<T, int>) {
      s += (s.empty() ? "" : ",") + std::to_string(v);
    } else {
      s += (s.empty() ? "" : ",") + v;
    }
  }
  return s;
}

}  // namespace

std::vector<std::string> SweepOptions::to_argv() const {
  std::vector<std::string> args{"sweep", "--json", json_path,
                                "--scenarios", axis_text(axes.scenarios), "--fix", axis_text(axes.fixes),
                                "--dtypes", axis_text(axes.dtypes), "--precisions", axis_text(axes.precisions),
                                "--shapes", axis_text(axes.shapes), "--allocs", axis_text(axes.allocs),
                                "--streams", axis_text(axes.streams), "--contexts", axis_text(axes.contexts),
                                "--iters", std::to_string(axes.iters), "--repeats", std::to_string(axes.repeats),
                                "--cell-timeout", format_number("%g", cell_timeout_s),
                                "--stage-timeout", format_number("%g", stage_timeout_s),
                                "--cells-per-gpu", std::to_string(cells_per_gpu), "--on-hang", on_hang_name(on_hang),
                                "--snapshot-timeout", format_number("%g", snapshot_timeout_s)};
  if (axes.keep_waived) args.push_back("--keep-waived");
  if (!shard.whole()) args.insert(args.end(), {"--shard", shard.str()});
  if (force) args.push_back("--force");
  if (resume) args.push_back("--resume");
  if (dry_run) args.push_back("--dry-run");
  if (gpus > 0) args.insert(args.end(), {"--gpus", std::to_string(gpus)});
  if (!repro_binary.empty()) args.insert(args.end(), {"--repro-binary", repro_binary});
  if (!axes.cell_options.empty()) {
    args.push_back("--");
    args.insert(args.end(), axes.cell_options.begin(), axes.cell_options.end());
  }
  return args;
}

void validate_sweep(const SweepOptions& options) {
  const std::vector<std::string> words = options.to_argv();
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  const SweepParseResult parsed = parse_sweep_command_line(static_cast<int>(argv.size()), argv.data());
  const std::string prefix = "repro sweep: error: ";
  if (!parsed.run) {
    throw InputError(parsed.message.rfind(prefix, 0) == 0 ? parsed.message.substr(prefix.size()) : parsed.message);
  }
  expand_matrix(parsed.options.axes);
}

namespace {

// The axis options as typed, until apply_axis_options reads them.
struct AxisText {
  std::string scenarios, fixes, dtypes, precisions, shapes, allocs, streams, contexts;
};

// The axes the options give: an axis option given, even as "", replaces the default (or the
// --matrix file's; "" is then an empty item); cell options naming a captured call make the shapes
// and dtypes the call's own unless given.
void apply_axis_options(const CLI::App& app, const AxisText& text, const std::vector<std::string>& cell_options,
                        bool matrix_given, SweepAxes& axes) {
  auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };
  auto list = [&](const std::string& value, const char* option, std::vector<std::string>& out) {
    if (given(option)) out = split_axis_list(value, option);
  };
  if (given("--scenarios")) axes.scenarios = parse_scenario_list(text.scenarios, "--scenarios");
  list(text.fixes, "--fix", axes.fixes);
  list(text.dtypes, "--dtypes", axes.dtypes);
  list(text.precisions, "--precisions", axes.precisions);
  list(text.shapes, "--shapes", axes.shapes);
  list(text.allocs, "--allocs", axes.allocs);
  list(text.streams, "--streams", axes.streams);
  list(text.contexts, "--contexts", axes.contexts);
  if (cell_options.empty()) return;
  axes.cell_options = cell_options;
  if (std::find(cell_options.begin(), cell_options.end(), "--workload-file") != cell_options.end()) {
    if (!given("--shapes") && !matrix_given) axes.shapes = {kGivenAxisValue};
    if (!given("--dtypes") && !matrix_given) axes.dtypes = {kGivenAxisValue};
  }
}

}  // namespace

SweepParseResult parse_sweep_command_line(int argc, const char* const* argv) {
  SweepParseResult result;
  SweepOptions& o = result.options;
  const SweepAxes defaults;
  AxisText axis;
  std::string matrix, out_dir, shard, on_hang;
  CLI::App app{kDescription, "repro sweep"};
  app.footer(kFooter);
  // The options are the table's (repro/cli/run_spec.h); their defaults the sweep's own.
  CommandOptions options(app, RunCommand::sweep);
  std::vector<CLI::Option*> axis_options{
      options.add("--scenarios", axis.scenarios)->default_str(scenario_list_text(defaults.scenarios)),
      options.add("--fix", axis.fixes)->default_str(joined(defaults.fixes)),
      options.add("--dtypes", axis.dtypes)->default_str(joined(defaults.dtypes)),
      options.add("--precisions", axis.precisions)->default_str(joined(defaults.precisions)),
      options.add("--shapes", axis.shapes)->default_str(joined(defaults.shapes)),
      options.add("--allocs", axis.allocs)->default_str(joined(defaults.allocs)),
      options.add("--streams", axis.streams)->default_str(joined(defaults.streams)),
      options.add("--contexts", axis.contexts)->default_str(joined(defaults.contexts)),
      options.add("--iters", o.axes.iters)->group("Axes"),
      options.add("--repeats", o.axes.repeats),
      options.add("--keep-waived", o.axes.keep_waived),
  };
  auto* matrix_opt = options.add("--matrix", matrix);
  for (auto* axis : axis_options) matrix_opt->excludes(axis);
  auto* out_opt = options.add("--out", out_dir);
  options.add("--json", o.json_path)->excludes(out_opt);
  options.add("--force", o.force);
  options.add("--resume", o.resume);
  options.add("--shard", shard);
  options.add("--dry-run", o.dry_run);
  options.add("--cell-timeout", o.cell_timeout_s);
  options.add("--stage-timeout", o.stage_timeout_s)->group("Cells");
  options.add("--gpus", o.gpus);
  options.add("--cells-per-gpu", o.cells_per_gpu);
  options.add("--on-hang", on_hang)->group("Cells")->default_str(on_hang_name(o.on_hang));
  options.add("--snapshot-timeout", o.snapshot_timeout_s)->group("Cells");
  options.add("--repro-binary", o.repro_binary);
  std::vector<std::string> cell_options;
  app.add_option("cell-options", cell_options,
                 "run options every cell gets (after --): a captured call (--workload-file F --call N --call-only; "
                 "the shapes and dtypes axes then default to \"given\", the call's own), or --inject to test the sweep")
      ->option_text("OPTIONS");
  ParseResult parsed;
  if (!parse_app(app, argc, argv, "repro sweep", parsed, &options)) {
    result.exit_code = parsed.exit_code;
    result.message = parsed.message;
    return result;
  }
  for (int i = 0; i < argc; ++i) o.argv.emplace_back(argv[i]);
  try {
    if (!on_hang.empty()) o.on_hang = parse_on_hang(on_hang);
    // A sweep runs unattended: nobody is there to look at a hung cell kept for a person.
    if (o.on_hang == OnHang::keep) throw InputError("--on-hang keep: a sweep's hung cell is not kept for a person (snapshot or kill)");
    if (!o.json_path.empty()) o.out_option = "--json";
    name_outputs(out_dir, o.json_path, o.jsonl_path, o.svg_path);
    // A name no file can have, refused before anything runs (its folder is made later, by the run).
    check_written_file_name(o.out_option, o.json_path);
    if (matrix_opt->count()) o.axes = read_matrix_file(matrix);
    apply_axis_options(app, axis, cell_options, matrix_opt->count() > 0, o.axes);
    canonicalise_axes(o.axes);
    for (const CLI::Option* axis_option : axis_options) o.axes_given = o.axes_given || axis_option->count() > 0;
    const bool shard_given = app.get_option("--shard")->count() > 0;
    o.axes_given = o.axes_given || matrix_opt->count() > 0 || !cell_options.empty() || shard_given;
    if (shard_given) o.shard = parse_shard(shard);
    if (o.stage_timeout_s >= o.cell_timeout_s) {
      std::ostringstream why;
      why << "--stage-timeout (" << o.stage_timeout_s << " s) must be below --cell-timeout (" << o.cell_timeout_s
          << " s), or a hang is reported as a timeout without its stage";
      throw InputError(why.str());
    }
  } catch (const InputError& e) {
    result.exit_code = kExitUsage;
    result.message = std::string("repro sweep: error: ") + one_line(e.what());
    return result;
  }
  result.run = true;
  return result;
}

MergeParseResult parse_merge_command_line(int argc, const char* const* argv) {
  MergeParseResult result;
  MergeOptions& o = result.options;
  std::string out_dir;
  CLI::App app{"repro sweep merge: merges the outputs of the shards of one matrix (repro sweep --shard K/N, run on "
               "several machines) into one sweep.json, sweep.jsonl and sweep.svg, with the table on stdout. Shards "
               "that overlap, or come from different matrices or harness versions, are refused; a shard left out "
               "leaves its cells not run (repro sweep --resume on the merged output runs them).",
               "repro sweep merge"};
  app.footer("Exit codes: 0 merged, every cell passed or was waived (or a merge of dry runs); 1 merged, with another "
             "outcome or cells not run; 2 usage error or shards refused (one line, nothing written).");
  app.add_option("shards", o.sources, "each shard's output folder (holding sweep.json) or its sweep document")
      ->required()
      ->type_name("DIR|FILE");
  auto* out_opt = app.add_option("--out", out_dir, "directory for the merged sweep.json, sweep.jsonl and sweep.svg")
                      ->type_name("DIR");
  auto* json_opt = app.add_option("--json", o.json_path, "the merged sweep document; FILE.jsonl and FILE.svg go beside it")
                       ->excludes(out_opt)
                       ->type_name("FILE");
  app.add_flag("--force", o.force, "replace a merged sweep already there");
  ParseResult parsed;
  if (!parse_app(app, argc, argv, "repro sweep merge", parsed)) {
    result.exit_code = parsed.exit_code;
    result.message = parsed.message;
    return result;
  }
  if ((out_opt->count() && out_dir.empty()) || (json_opt->count() && o.json_path.empty())) {
    result.exit_code = kExitUsage;
    result.message = std::string("repro sweep merge: error: ") + (out_opt->count() ? "--out" : "--json") +
                     ": an empty name names no file or folder";
    return result;
  }
  if (out_dir.empty() && o.json_path.empty()) {
    result.exit_code = kExitUsage;
    result.message = "repro sweep merge: error: --out DIR or --json FILE is required (where the merged sweep goes)";
    return result;
  }
  for (int i = 0; i < argc; ++i) o.argv.emplace_back(argv[i]);
  if (!o.json_path.empty()) o.out_option = "--json";
  name_outputs(out_dir, o.json_path, o.jsonl_path, o.svg_path);
  result.run = true;
  return result;
}

}  // namespace sdpa
