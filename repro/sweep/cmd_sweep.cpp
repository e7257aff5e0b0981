// cmd_sweep.cpp: `repro sweep`, a matrix of runs in isolated processes, as JSON.
//
// Expands the axes into cells (matrix.h), keeps its shard's (--shard K/N), runs each as its own
// `repro` process with its own deadline, one worker per GPU (cell_runner.h), and writes
// (sweep_output.h): the sweep document FILE.json as it starts, each finished cell as one line of
// FILE.jsonl at once, then FILE.json again and the heatmap FILE.svg atomically, and the table on
// stdout; each cell's --log-file and a hung cell's snapshot go to FILE.cells/
// (docs/HANG_SNAPSHOT.md). Progress goes to stderr. --resume continues an interrupted sweep of the
// same matrix from its JSON-lines file; --dry-run prints the cells and runs nothing. `repro sweep
// merge` joins the outputs of shards (sweep_merge.h). docs/SWEEPS.md is the reference.
//
//   repro sweep --out results/h100-sweep
//   repro sweep --scenarios 1,2 --fix off,on --dtypes bf16 --allocs managed --repeats 3 --json s.json
//   repro sweep --shard 2/4 --out shard-2 && repro sweep merge --out all shard-1 shard-2 shard-3 shard-4
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "repro/supervise/child_process.h"
#include "repro/commands.h"
#include "repro/info/environment.h"
#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "repro/cli/run_options.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "repro/sweep/sweep_options.h"
#include "repro/sweep/sweep_output.h"
#include "repro/sweep/cell_runner.h"
#include "repro/sweep/sweep_merge.h"

namespace sdpa {

namespace {

using nlohmann::json;

// The sweep's own exit codes (docs/SWEEPS.md): 0 every cell passed or was waived, 1 a cell
// failed, 2 usage (kExitUsage), 7 a cell found no usable GPU and the sweep stopped there
// (kExitNoGpu, as a run without one), 128 + the signal when interrupted.
constexpr int kSweepOk = 0;
constexpr int kSweepFailed = 1;

std::string duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  return s >= 60 ? std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s" : std::to_string(s) + "s";
}

void warn(const std::string& line) { std::cerr << "repro sweep: warning: " << line << "\n"; }

// --resume continues the sweep that wrote FILE.jsonl. Under another matrix it would rewrite
// FILE.json and the heatmap for a sweep that never ran, so that takes --force. The matrix that
// wrote it is in FILE.json (written when that sweep started); without one, the keys of
// FILE.jsonl tell at least whether it holds cells that are not in this matrix.
void check_resumed_matrix(const SweepOptions& o, const std::vector<SweepCell>& cells) {
  const std::string advice = " (--resume --force continues with this matrix, keeping the cells both have; --force "
                             "alone starts again)";
  if (std::filesystem::exists(o.json_path)) {
    SweepAxes axes;
    SweepShard shard;
    try {
      const json doc = json::parse(read_file(o.json_path).value_or(""));
      axes = axes_from_document_matrix(doc.at("matrix"), o.json_path);
      shard = shard_from_json(doc.at("matrix"));
    } catch (const std::exception& e) {
      throw InputError("--resume: cannot tell which matrix wrote " + o.jsonl_path + ": " + o.json_path +
                       " is not a sweep document (" + one_line(e.what()) + ")" + advice);
    }
    const std::string difference = matrix_difference(o.axes, o.shard, axes, shard, "here", "in " + o.json_path);
    if (!difference.empty()) {
      throw InputError("--resume: " + o.jsonl_path + " was written by another matrix (" + difference + ")" + advice);
    }
    return;
  }
  std::set<std::string> keys;
  for (const auto& c : cells) keys.insert(c.key());
  for (const auto& r : read_jsonl(o.jsonl_path).records) {
    if (!keys.count(r.at("key").get<std::string>())) {
      throw InputError("--resume: " + o.jsonl_path + " holds cells that are not in this matrix (" +
                       r.at("key").get<std::string>() + ")" + advice);
    }
  }
}

// The cells a previous run of this sweep finished, by key, each once; repairs a JSON-lines
// file whose last line a killed sweep left half-written, so new lines start on a line of their own.
// A cell that found no GPU did not run: it runs again.
std::map<std::string, json> resume_from(const std::string& jsonl_path, const std::vector<SweepCell>& cells) {
  const JsonlContents prior = read_jsonl(jsonl_path);
  for (const auto& w : prior.warnings) warn(w);
  if (prior.dropped_last_line) {
    std::string kept;
    for (const auto& r : prior.records) kept += r.dump() + "\n";
    write_file_atomic(jsonl_path, kept);
  }
  std::map<std::string, const SweepCell*> planned;
  for (const auto& c : cells) planned.emplace(c.key(), &c);
  std::map<std::string, json> finished;
  size_t foreign = 0, repeated = 0, without_gpu = 0;
  for (const auto& r : latest_records(prior.records, &repeated)) {
    const std::string key = r.at("key");
    const auto cell = planned.find(key);
    if (cell == planned.end()) {
      ++foreign;
      continue;
    }
    // The key is made from the axes: a record whose axes say otherwise was edited by hand.
    if (r.at("axes") != cell_axes_to_json(*cell->second)) {
      throw InputError(jsonl_path + ": the cell " + key + " has axes that do not match its key (use --force to start again)");
    }
    if (cell_outcome(r) == Outcome::no_gpu) {
      ++without_gpu;
      continue;
    }
    finished.emplace(key, r);
  }
  if (foreign) warn(std::to_string(foreign) + " cell(s) in " + jsonl_path + " are not in this matrix; they stay there");
  if (repeated) warn(std::to_string(repeated) + " cell(s) in " + jsonl_path + " appear twice; the first is kept");
  if (without_gpu) std::cerr << "repro sweep: " << without_gpu << " cell(s) that found no usable GPU run again\n";
  return finished;
}

// --resume: the cells the stopped sweep left running (cell_in_flight), each said as what it was.
// One interrupted (its process gone on this boot) or in flight when the machine stopped runs again;
// one whose process is still there is stuck: recorded as a hang, and its GPU is not used again. A
// cell that has a record already (written just before the sweep stopped) only loses its file.
void settle_cells_in_flight(const SweepOptions& o, const std::vector<SweepCell>& cells, SweepRunSettings& settings,
                            std::map<std::string, json>& finished) {
  for (const auto& c : cells) {
    if (finished.count(c.key())) {
      std::error_code absent;
      std::filesystem::remove(settings.cells_dir + "/" + cell_process_name(c.index), absent);
      continue;
    }
    const std::optional<CellInFlight> left = cell_in_flight(c, settings.cells_dir);
    if (!left) continue;
    const std::string cell = "repro sweep: cell " + std::to_string(c.index);
    const std::string log = settings.cells_dir + "/" + cell_log_name(c.index);
    std::error_code absent;
    const std::string kept = std::filesystem::exists(log, absent) ? ", and " + log + " keeps that run's stage records" : "";
    switch (left->found.fate) {
      case ProcessFate::machine_stopped:
        std::cerr << cell << " was running when the machine stopped (it has booted again since): it runs again" << kept << "\n";
        break;
      case ProcessFate::gone:
        std::cerr << cell << " was interrupted (its process ended without a record on this boot: the sweep was stopped): "
                  << "it runs again" << kept << "\n";
        break;
      case ProcessFate::still_there: {
        const json record = stuck_cell_json(c, o.stage_timeout_s, *left, settings.cells_dir, settings.cells_link);
        append_jsonl_line(o.jsonl_path, record);
        finished[c.key()] = record;
        settings.gpu_checks.push_back({left->gpu, c.index, "", true,
                                       "cell " + std::to_string(c.index) + "'s process was still there when the sweep "
                                       "was resumed (stuck in the driver)"});
        std::cerr << cell << "'s process is still there after the sweep that ran it stopped (" << left->found.processes_text()
                  << "): stuck, recorded as a hang, and left as it is; no cell runs on "
                  << (left->gpu.empty() ? std::string("its GPU") : "GPU " + left->gpu) << "\n";
        break;
      }
    }
  }
}

// One line on stderr per finished cell: done/total, outcomes so far, time left. On a terminal
// the line is rewritten in place.
class Progress {
 public:
  Progress(size_t total, size_t already_done) : total_(total), done_(already_done), start_us_(monotonic_us()) {}

  void cell_done(const json& record) {
    ++done_;
    ++this_run_;
    ++counts_[record.at("outcome").get<std::string>()];
    const double elapsed = (monotonic_us() - start_us_) / 1e6;
    const double left = elapsed / static_cast<double>(this_run_) * static_cast<double>(total_ - done_);
    std::string line = "[" + std::to_string(done_) + "/" + std::to_string(total_) + "]";
    for (const Outcome outcome : sweep_outcomes()) {
      const std::string name = outcome_name(outcome);
      if (counts_[name]) line += " " + name + " " + std::to_string(counts_[name]);
    }
    line += " | " + duration(elapsed) + " elapsed, about " + duration(left) + " left | cell " +
            std::to_string(record.at("index").get<int>()) + " " + record.at("outcome").get<std::string>();
    if (record.at("stage").is_string()) line += " in " + record.at("stage").get<std::string>();
    if (tty_) {
      std::cerr << "\r\033[K" << line << std::flush;
    } else {
      std::cerr << "repro sweep: " << line << "\n";
    }
  }
  void finish() {
    if (tty_ && this_run_) std::cerr << "\n";
  }

 private:
  size_t total_, done_, this_run_ = 0;
  int64_t start_us_;
  std::map<std::string, size_t> counts_;
  bool tty_ = isatty(STDERR_FILENO);
};

// What `repro sweep` and `repro sweep merge` print and write at the end: the document and the
// heatmap (atomically), the table with its footer on stdout.
void write_sweep_outputs(const std::string& json_path, const std::string& svg_path, const json& document,
                         const std::vector<json>& done, const std::vector<json>& squares, const std::string& title,
                         const std::string& caption, const std::string& footer) {
  const json& summary = document.at("summary");
  write_file_atomic(json_path, document.dump(2) + "\n");
  write_file_atomic(svg_path, sweep_svg(squares, title, caption));
  std::cout << sweep_table(done, summary.at("cells_planned"), summary.at("interrupted")) << footer << std::flush;
}

// --resume: the sweep in the outputs' folder must be there; without an axis given, it keeps the
// matrix (and shard) its sweep.json names, as `triage --resume` keeps the triage's own settings.
void adopt_resumed_matrix(SweepOptions& o) {
  std::error_code ec;
  if (!std::filesystem::exists(o.json_path, ec) && !std::filesystem::exists(o.jsonl_path, ec)) {
    throw InputError("--resume: there is no sweep to continue: neither " + o.json_path + " nor " + o.jsonl_path +
                     " exists (run without --resume to start one)");
  }
  if (o.axes_given || !std::filesystem::exists(o.json_path, ec)) return;
  try {
    const json doc = json::parse(read_file(o.json_path).value_or(""));
    o.axes = axes_from_document_matrix(doc.at("matrix"), o.json_path);
    o.shard = shard_from_json(doc.at("matrix"));
  } catch (const std::exception& e) {
    throw InputError("--resume: " + o.json_path + " is not a sweep document (" + one_line(e.what()) +
                     "): give the matrix's axes again, or --force to start again");
  }
}

int run_sweep(const SweepOptions& given) {
  SweepOptions o = given;
  if (o.resume) adopt_resumed_matrix(o);
  int left_out = 0;
  std::string left_out_why;
  const std::vector<SweepCell> matrix = expand_matrix(o.axes, &left_out, &left_out_why);
  // Said once the command line has passed every check: an error comes first, alone.
  const std::string left_out_warning =
      left_out ? std::to_string(left_out) + " combination(s) of the axes left out: they cannot show their scenario's "
                 "hypothesis (" + left_out_why + ")"
               : "";
  if (static_cast<size_t>(o.shard.count) > matrix.size()) {
    throw InputError("--shard " + o.shard.str() + ": the matrix has only " + std::to_string(matrix.size()) +
                     " cells, fewer than the shards");
  }
  const std::vector<SweepCell> cells = shard_cells(matrix, o.shard);
  SweepMeta meta;
  meta.command_line = {"repro"};
  meta.command_line.insert(meta.command_line.end(), o.argv.begin(), o.argv.end());
  meta.started_utc = utc_now();
  meta.dry_run = o.dry_run;
  meta.axes = o.axes;
  meta.shard = o.shard;
  meta.matrix_cells = matrix.size();
  meta.left_out = left_out;
  meta.left_out_why = left_out_why;
  meta.cell_timeout_s = o.cell_timeout_s;
  meta.stage_timeout_s = o.stage_timeout_s;
  meta.workers = sweep_workers(o.gpus, o.cells_per_gpu);
  meta.host = host_json();
  SweepEnd end;
  end.cells_planned = cells.size();
  if (o.dry_run) {
    std::vector<json> planned;
    for (const auto& c : cells) planned.push_back(planned_cell_json(c, o.stage_timeout_s));
    std::cout << sweep_document(meta, planned, end).dump(2) << "\n";
    if (!left_out_warning.empty()) warn(left_out_warning);
    return kSweepOk;
  }

  const std::filesystem::path dir = std::filesystem::path(o.json_path).parent_path();
  std::error_code ec;
  if (!o.force && !o.resume) {
    for (const auto& path : {o.json_path, o.jsonl_path}) {
      if (std::filesystem::exists(path)) {
        throw InputError(path + " exists (--resume continues that sweep, --force starts again)");
      }
    }
  }
  if (o.resume && !o.force) check_resumed_matrix(o, cells);
  if (!dir.empty()) make_output_dir(o.out_option, dir.string());
  SweepRunSettings settings;
  settings.repro_binary = o.repro_binary.empty() ? self_executable() : o.repro_binary;
  if (access(settings.repro_binary.c_str(), X_OK) != 0) {
    throw InputError("--repro-binary: " + settings.repro_binary + " is not an executable file");
  }
  if (!left_out_warning.empty()) warn(left_out_warning);
  settings.workers = meta.workers;
  settings.cell_timeout_s = o.cell_timeout_s;
  settings.stage_timeout_s = o.stage_timeout_s;
  const std::string stem = o.jsonl_path.substr(0, o.jsonl_path.size() - std::string(".jsonl").size());
  settings.scratch_prefix = stem + ".cell-";
  settings.on_hang = o.on_hang;
  settings.snapshot_timeout_s = o.snapshot_timeout_s;
  settings.cells_dir = sweep_cells_dir(o.jsonl_path);
  settings.cells_link = std::filesystem::path(settings.cells_dir).filename().string();

  std::map<std::string, json> finished;
  if (o.resume) {
    finished = resume_from(o.jsonl_path, cells);
  } else {
    write_file_atomic(o.jsonl_path, "");  // a fresh sweep, or --force over an old one
    std::remove(o.svg_path.c_str());
  }
  // Matrix order; a resumed record takes its index in this matrix.
  auto in_matrix_order = [&]() {
    std::vector<json> done;
    for (const auto& c : cells) {
      const auto it = finished.find(c.key());
      if (it == finished.end()) continue;
      done.push_back(it->second);
      done.back()["index"] = c.index;
    }
    return done;
  };
  // The document as the sweep starts: the matrix that writes FILE.jsonl (what --resume and a
  // merge check) and the cells already done, there even if this sweep is killed.
  write_file_atomic(o.json_path, sweep_document(meta, in_matrix_order(), end).dump(2) + "\n");
  if (o.resume) {
    std::cerr << "repro sweep: resuming: " << finished.size() << " of " << cells.size() << " cells already done\n";
    settle_cells_in_flight(o, cells, settings, finished);
  }
  std::vector<SweepCell> pending;
  for (const auto& c : cells) {
    if (!finished.count(c.key())) pending.push_back(c);
  }
  const std::string shard_words = o.shard.whole() ? "" : " (shard " + o.shard.str() + " of " + std::to_string(matrix.size()) + ")";
  std::cerr << "repro sweep: " << pending.size() << " cells" << shard_words << " to run on " << settings.workers.size()
            << " worker(s)"
            << (settings.workers.size() > 1 ? " (" + std::to_string(o.cells_per_gpu) + " per GPU)" : std::string())
            << "; writing " << o.jsonl_path << "\n";

  const int64_t start_us = monotonic_us();
  Progress progress(cells.size(), finished.size());
  const CellsRun run = run_cells(pending, settings, [&](const json& record) {
    append_jsonl_line(o.jsonl_path, record);
    finished[record.at("key").get<std::string>()] = record;
    progress.cell_done(record);
  });
  progress.finish();
  end.interrupted = run.stop_signal != 0;
  if (end.interrupted) {
    std::cerr << "repro sweep: stopped by signal " << run.stop_signal << " (" << strsignal(run.stop_signal)
              << "): no new cells started, the running ones were killed\n";
  }

  const std::vector<json> done = in_matrix_order();
  const size_t not_run = cells.size() - done.size();
  std::string not_run_reason = "the sweep was interrupted";
  if (run.no_gpu_cell) {
    const SweepCell& cell = matrix.at(static_cast<size_t>(*run.no_gpu_cell));
    end.no_gpu = no_gpu_json(finished.at(cell.key()), not_run);
    not_run_reason = "cell " + std::to_string(cell.index) + " found no usable GPU";
    const bool no_driver = meta.host.value("nvidia_driver", "unknown") == "unknown";
    std::cerr << "repro sweep: no GPU: cell " << cell.index << " found none ("
              << end.no_gpu.at("error").get<std::string>() << (no_driver ? "; no NVIDIA kernel driver is loaded here" : "")
              << ")" << (not_run ? "; stopped, " + std::to_string(not_run) + " cells not run" : std::string()) << "\n";
  } else if (!end.interrupted) {
    not_run_reason = "no GPU left (every GPU was retired after a hang)";
  }
  std::vector<json> squares;
  for (const auto& c : cells) {
    const auto it = finished.find(c.key());
    if (it != finished.end()) {
      squares.push_back(it->second);
      continue;
    }
    squares.push_back(planned_cell_json(c, o.stage_timeout_s));
    squares.back()["is_skipped"] = true;
    squares.back()["skip_reason"] = not_run_reason;
  }
  end.wall_seconds = (monotonic_us() - start_us) / 1e6;
  end.gpu_checks = gpu_checks_json(run.gpu_checks);
  const std::string title = "repro sweep on " + machine_description(meta.host, done) + shard_words;
  const std::string caption = std::to_string(done.size()) + " of " + std::to_string(cells.size()) + " cells, started " +
                              meta.started_utc;
  write_sweep_outputs(o.json_path, o.svg_path, sweep_document(meta, done, end), done, squares, title, caption,
                      gpu_checks_footer(end.gpu_checks, end.no_gpu.is_null() ? not_run : 0) +
                          no_gpu_footer(end.no_gpu));
  std::cerr << "repro sweep: wrote " << o.json_path << ", " << o.jsonl_path << ", " << o.svg_path << " ("
            << duration(end.wall_seconds) << ")\n";
  if (end.interrupted) return 128 + run.stop_signal;
  if (run.no_gpu_cell) return kExitNoGpu;
  for (const auto& record : done) {
    if (!outcome_is_success(cell_outcome(record))) return kSweepFailed;
  }
  return kSweepOk;
}

int merge_sweeps(const MergeOptions& o) {
  const std::filesystem::path dir = std::filesystem::path(o.json_path).parent_path();
  if (!dir.empty()) check_dir_creatable(o.out_option, dir.string());
  if (!o.force) {
    for (const auto& path : {o.json_path, o.jsonl_path}) {
      if (std::filesystem::exists(path)) throw InputError(path + " exists (--force replaces it)");
    }
  }
  MergedSweep merged;
  try {
    merged = merge_shards(o.sources, dir.string(), o.argv);
  } catch (const json::exception& e) {  // a value of the wrong type in a shard's document
    throw InputError("a shard's document is malformed: " + one_line(e.what()));
  }
  for (const auto& shard : merged.document.at("meta").at("shards")) {
    std::error_code same_ec;
    if (std::filesystem::equivalent(shard.at("source").get<std::string>(), o.json_path, same_ec)) {
      throw InputError(o.json_path + " is one of the shards being merged; merge into another folder");
    }
  }
  for (const auto& w : merged.warnings) warn(w);
  std::error_code ec;
  if (!dir.empty()) make_output_dir(o.out_option, dir.string());
  std::string lines;
  for (const auto& r : merged.records) lines += r.dump() + "\n";
  write_file_atomic(o.jsonl_path, lines);
  std::vector<json> done = merged.records;
  if (merged.document.at("meta").at("dry_run").get<bool>()) done = merged.squares;
  write_sweep_outputs(o.json_path, o.svg_path, merged.document, done, merged.squares, merged.title, merged.caption,
                      merged.footer);
  std::cerr << "repro sweep merge: wrote " << o.json_path << ", " << o.jsonl_path << ", " << o.svg_path << "\n";
  const std::string result = merged.document.at("summary").at("result");
  return result == "OK" || result == "PLANNED" ? kSweepOk : kSweepFailed;
}

// Prints a command line's help or its one error line, or runs `body` with its options; an
// InputError from the run is one line and exit 2, as a bad option is.
template <typename Parsed, typename Body> int run_parsed(const Parsed& parsed, const char* program, Body body) {
  if (!parsed.run) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  try {
    return body(parsed.options);
  } catch (const InputError& e) {
    std::cerr << program << ": error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
}

}  // namespace

int sweep_main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "merge") {
    return run_parsed(parse_merge_command_line(argc - 1, argv + 1), "repro sweep merge", merge_sweeps);
  }
  return run_parsed(parse_sweep_command_line(argc, argv), "repro sweep", run_sweep);
}

}  // namespace sdpa
