// cmd_sweep.cpp: `repro sweep`, a matrix of runs in isolated processes, as JSON.
//
// Expands the axes into cells (matrix.h), runs each as its own `repro` process with its
// own deadline, one worker per GPU (cell_runner.h), and writes (sweep_output.h): each finished
// cell as one line of FILE.jsonl at once, then the sweep document FILE.json and the heatmap
// FILE.svg atomically, and the table on stdout; each cell's --log-file and a hung cell's snapshot
// go to FILE.cells/ (docs/HANG_SNAPSHOT.md). Progress goes to stderr. --resume continues an
// interrupted sweep from its JSON-lines file; --dry-run prints the cells and runs nothing.
//
//   repro sweep --out results/h100-sweep
//   repro sweep --scenarios 1,2 --fix off,on --dtypes bf16 --allocs managed --repeats 3 --json s.json
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
#include "repro/sweep/sweep_options.h"
#include "repro/sweep/sweep_output.h"
#include "repro/sweep/cell_runner.h"

namespace sdpa {

namespace {

using nlohmann::json;

// The sweep's own exit codes (README "Sweep"): 0 every cell passed or was waived, 1 a cell
// failed, 2 usage (kExitUsage), 128 + the signal when interrupted.
constexpr int kSweepOk = 0;
constexpr int kSweepFailed = 1;

std::string duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  return s >= 60 ? std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s" : std::to_string(s) + "s";
}

void warn(const std::string& line) { std::cerr << "repro sweep: warning: " << line << "\n"; }

// The cells a previous run of this sweep finished, by key, each once; repairs a JSON-lines
// file whose last line a killed sweep left half-written, so new lines start on a line of their own.
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
  size_t foreign = 0, repeated = 0;
  for (const auto& r : prior.records) {
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
    if (!finished.emplace(key, r).second) ++repeated;
  }
  if (foreign) warn(std::to_string(foreign) + " cell(s) in " + jsonl_path + " are not in this matrix; they stay there");
  if (repeated) warn(std::to_string(repeated) + " cell(s) in " + jsonl_path + " appear twice; the first is kept");
  return finished;
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

int run_sweep(const SweepOptions& o) {
  const std::vector<SweepCell> cells = expand_matrix(o.axes);
  SweepMeta meta;
  meta.command_line = {"repro"};
  meta.command_line.insert(meta.command_line.end(), o.argv.begin(), o.argv.end());
  meta.started_utc = utc_now();
  meta.dry_run = o.dry_run;
  meta.axes = o.axes;
  meta.cell_timeout_s = o.cell_timeout_s;
  meta.stage_timeout_s = o.stage_timeout_s;
  meta.workers = sweep_workers(o.gpus, o.cells_per_gpu);
  if (o.dry_run) {
    std::vector<json> planned;
    for (const auto& c : cells) planned.push_back(planned_cell_json(c, o.stage_timeout_s));
    std::cout << sweep_document(meta, planned, cells.size(), false, 0).dump(2) << "\n";
    return kSweepOk;
  }

  const std::filesystem::path dir = std::filesystem::path(o.json_path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError("cannot create " + dir.string() + ": " + ec.message());
  if (!o.force && !o.resume) {
    for (const auto& path : {o.json_path, o.jsonl_path}) {
      if (std::filesystem::exists(path)) {
        throw InputError(path + " exists (--resume continues that sweep, --force starts again)");
      }
    }
  }
  SweepRunSettings settings;
  settings.repro_binary = o.repro_binary.empty() ? self_executable() : o.repro_binary;
  if (access(settings.repro_binary.c_str(), X_OK) != 0) {
    throw InputError("--repro-binary: " + settings.repro_binary + " is not an executable file");
  }
  settings.workers = meta.workers;
  settings.cell_timeout_s = o.cell_timeout_s;
  settings.stage_timeout_s = o.stage_timeout_s;
  const std::string stem = o.jsonl_path.substr(0, o.jsonl_path.size() - std::string(".jsonl").size());
  settings.scratch_prefix = stem + ".cell-";
  settings.on_hang = o.on_hang;
  settings.snapshot_timeout_s = o.snapshot_timeout_s;
  settings.cells_dir = stem + ".cells";
  settings.cells_link = std::filesystem::path(settings.cells_dir).filename().string();

  std::map<std::string, json> finished;
  if (o.resume) {
    finished = resume_from(o.jsonl_path, cells);
  } else {
    write_file_atomic(o.jsonl_path, "");  // a fresh sweep, or --force over an old one
    std::remove(o.json_path.c_str());
    std::remove(o.svg_path.c_str());
  }
  std::vector<SweepCell> pending;
  for (const auto& c : cells) {
    if (!finished.count(c.key())) pending.push_back(c);
  }
  if (o.resume) {
    std::cerr << "repro sweep: resuming: " << finished.size() << " of " << cells.size() << " cells already done\n";
  }
  std::cerr << "repro sweep: " << pending.size() << " cells to run on " << settings.workers.size() << " worker(s)"
            << (settings.workers.size() > 1 ? " (" + std::to_string(o.cells_per_gpu) + " per GPU)" : std::string()) << "; writing " << o.jsonl_path << "\n";

  const int64_t start_us = monotonic_us();
  Progress progress(cells.size(), finished.size());
  std::vector<GpuCheck> gpu_checks;
  const int stop_signal = run_cells(
      pending, settings,
      [&](const json& record) {
        append_jsonl_line(o.jsonl_path, record);
        finished[record.at("key").get<std::string>()] = record;
        progress.cell_done(record);
      },
      &gpu_checks);
  progress.finish();
  const bool interrupted = stop_signal != 0;
  if (interrupted) {
    std::cerr << "repro sweep: stopped by signal " << stop_signal << " (" << strsignal(stop_signal)
              << "): no new cells started, the running ones were killed\n";
  }

  // Matrix order; a resumed record takes its index in this matrix.
  std::vector<json> done, squares;
  for (const auto& c : cells) {
    const auto it = finished.find(c.key());
    if (it == finished.end()) {
      squares.push_back(planned_cell_json(c, o.stage_timeout_s));
      continue;
    }
    json record = it->second;
    record["index"] = c.index;
    done.push_back(record);
    squares.push_back(record);
  }
  const double wall = (monotonic_us() - start_us) / 1e6;
  const json checks = gpu_checks_json(gpu_checks);
  write_file_atomic(o.json_path, sweep_document(meta, done, cells.size(), interrupted, wall, checks).dump(2) + "\n");
  write_file_atomic(o.svg_path, sweep_svg(squares, "repro sweep: " + std::to_string(done.size()) + " of " +
                                                       std::to_string(cells.size()) + " cells, started " +
                                                       meta.started_utc));
  std::cout << sweep_table(done, cells.size(), interrupted) << gpu_checks_footer(checks, cells.size() - done.size())
            << std::flush;
  std::cerr << "repro sweep: wrote " << o.json_path << ", " << o.jsonl_path << ", " << o.svg_path << " ("
            << duration(wall) << ")\n";
  if (interrupted) return 128 + stop_signal;
  for (const auto& record : done) {
    if (!outcome_is_success(cell_outcome(record))) return kSweepFailed;
  }
  return kSweepOk;
}

}  // namespace

int sweep_main(int argc, char** argv) {
  const SweepParseResult parsed = parse_sweep_command_line(argc, argv);
  if (!parsed.run) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  try {
    return run_sweep(parsed.options);
  } catch (const InputError& e) {
    std::cerr << "repro sweep: error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
}

}  // namespace sdpa
