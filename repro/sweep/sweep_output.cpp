// sweep_output.cpp
#include "repro/sweep/sweep_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "math_sdpa/errors.h"
#include "repro/common/text.h"
#include "repro/info/environment.h"
#include "version.h"

namespace sdpa {

namespace {

using nlohmann::json;

std::string str_or(const json& j, const char* key, const std::string& otherwise) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : otherwise;
}

// The sweep's outcomes in the order its footer and progress line list them, with the footer's
// words. A leak needs a soak (--sample-every), which no cell's command line asks for, so it is
// counted, listed and shown only when some cell reports one, and every other sweep's outputs
// read as they always have.
struct SweepOutcome {
  Outcome outcome;
  const char* footer_words;
  bool in_footer_when_none;  // the outcomes of a run on a GPU
  bool counted_when_none;    // in the summary's counts and the heatmap's legend
};
const std::vector<SweepOutcome> kSweepOutcomes{
    {Outcome::pass, "passed", true, true},
    {Outcome::waived, "waived", true, true},
    {Outcome::mismatch, "mismatched", true, true},
    {Outcome::leak, "leaked", false, false},
    {Outcome::stalled, "stalled", false, false},
    {Outcome::hang, "hung", true, true},
    {Outcome::timeout, "timed out", true, true},
    {Outcome::crash, "crashed", true, true},
    {Outcome::cuda_error, "CUDA errors", true, true},
    {Outcome::usage, "usage errors", false, true},
    {Outcome::no_gpu, "without a GPU", false, true},
    {Outcome::refused, "refused", false, true},
    {Outcome::planned, "not run (dry run)", false, true},
};

bool counted_when_none(Outcome o) {
  for (const auto& entry : kSweepOutcomes) {
    if (entry.outcome == o) return entry.counted_when_none;
  }
  return false;
}

std::map<Outcome, int> count_outcomes(const std::vector<json>& cells) {
  std::map<Outcome, int> counts;
  for (const auto& entry : kSweepOutcomes) {
    if (entry.counted_when_none) counts[entry.outcome] = 0;
  }
  for (const auto& c : cells) ++counts[cell_outcome(c)];
  return counts;
}

json counts_json(const std::map<Outcome, int>& counts) {
  json j = json::object();
  for (const auto& [outcome, n] : counts) j[outcome_name(outcome)] = n;
  return j;
}

// OK: every cell ran and passed or was waived; FAILED: any other outcome; INCOMPLETE: only
// good outcomes, but not every cell ran; PLANNED: a dry run.
std::string verdict(const std::vector<json>& cells, size_t planned, bool interrupted) {
  const auto counts = count_outcomes(cells);
  size_t done = 0;
  bool failed = false;
  for (const auto& [outcome, n] : counts) {
    if (outcome == Outcome::planned) continue;
    done += static_cast<size_t>(n);
    failed |= n > 0 && !outcome_is_success(outcome);
  }
  if (!cells.empty() && counts.at(Outcome::planned) == static_cast<int>(cells.size())) return "PLANNED";
  if (failed) return "FAILED";
  if (interrupted || done < planned) return "INCOMPLETE";
  return "OK";
}

// --- the heatmap ---

struct OutcomeStyle {
  const char* fill;
  const char* ink;
  const char* label;
};

// Worst last: a square holding several repeats shows the worst of them.
const std::vector<std::pair<Outcome, OutcomeStyle>> kOutcomeStyles{
    {Outcome::pass, {"#2e7d32", "#ffffff", "pass"}},
    {Outcome::waived, {"#bdbdbd", "#212121", "waived"}},
    {Outcome::planned, {"#ffffff", "#757575", "not run"}},
    {Outcome::refused, {"#8d6e63", "#ffffff", "refused"}},
    {Outcome::no_gpu, {"#546e7a", "#ffffff", "no GPU"}},
    {Outcome::usage, {"#1565c0", "#ffffff", "usage"}},
    {Outcome::mismatch, {"#f9a825", "#212121", "MISMATCH"}},
    {Outcome::leak, {"#ef6c00", "#212121", "LEAK"}},
    {Outcome::stalled, {"#ad1457", "#ffffff", "STALLED"}},
    {Outcome::cuda_error, {"#d84315", "#ffffff", "CUDA ERROR"}},
    {Outcome::crash, {"#212121", "#ffffff", "CRASH"}},
    {Outcome::timeout, {"#6a1b9a", "#ffffff", "TIMEOUT"}},
    {Outcome::hang, {"#c62828", "#ffffff", "HANG"}},
};

size_t severity(Outcome outcome) {
  for (size_t i = 0; i < kOutcomeStyles.size(); ++i) {
    if (kOutcomeStyles[i].first == outcome) return i;
  }
  return kOutcomeStyles.size() - 1;
}

// Values in order of first appearance.
template <typename T> size_t index_of(std::vector<T>& values, const T& v) {
  const auto it = std::find(values.begin(), values.end(), v);
  if (it != values.end()) return static_cast<size_t>(it - values.begin());
  values.push_back(v);
  return values.size() - 1;
}

std::string text_element(double x, double y, const std::string& text, const std::string& attributes) {
  return "<text x=\"" + format_number("%.1f", x) + "\" y=\"" + format_number("%.1f", y) + "\" " + attributes + ">" + xml_escape(text) +
         "</text>\n";
}

// Why a square is what it is, in words for the reasons under the legend; "" when its own figure
// says it all (a pass's time, a mismatch's error) or nobody said why (a dry run's planned cell).
std::string square_reason(const json& cell) {
  const std::string error = str_or(cell, "error", "");
  const json* stall = cell.contains("stall") && cell.at("stall").is_object() ? &cell.at("stall") : nullptr;
  switch (cell_outcome(cell)) {
    case Outcome::pass: return stall ? "stalled: " + stall->at("summary").get<std::string>() : "";
    case Outcome::mismatch: return "";
    case Outcome::waived:
    case Outcome::planned: return str_or(cell, "skip_reason", error);
    case Outcome::hang: return str_or(cell, "classification", error);  // its stage is in the square
    default: return error;
  }
}

// More reasons than this are left to the tooltips: a picture of 40 different errors is a list.
constexpr size_t kMaxSvgNotes = 40;

// `text` in lines of at most `columns` characters, broken at spaces (a longer word stands alone);
// lines after the first start with `indent`.
std::vector<std::string> wrap_words(const std::string& text, size_t columns, const std::string& indent) {
  std::vector<std::string> lines{""};
  std::stringstream words(text);
  std::string word;
  while (words >> word) {
    std::string& line = lines.back();
    const bool fresh = line.empty() || line == indent;
    if (!fresh && line.size() + 1 + word.size() > columns) {
      lines.push_back(indent + word);
    } else {
      line += (fresh ? "" : " ") + word;
    }
  }
  return lines;
}

std::string rect_element(double x, double y, double w, double h, const std::string& attributes) {
  return "<rect x=\"" + format_number("%.1f", x) + "\" y=\"" + format_number("%.1f", y) + "\" width=\"" + format_number("%.1f", w) +
         "\" height=\"" + format_number("%.1f", h) + "\" " + attributes + "/>\n";
}

}  // namespace

const std::vector<Outcome>& sweep_outcomes() {
  static const std::vector<Outcome> outcomes = [] {
    std::vector<Outcome> list;
    for (const auto& entry : kSweepOutcomes) list.push_back(entry.outcome);
    return list;
  }();
  return outcomes;
}

bool outcome_is_success(Outcome outcome) { return outcome == Outcome::pass || outcome == Outcome::waived; }

Outcome cell_outcome(const json& record) { return parse_outcome(record.at("outcome").get<std::string>()); }

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab and newlines.
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') ? '?' : c;
    }
  }
  return out;
}

json sweep_document(const SweepMeta& meta, const std::vector<json>& cells, const SweepEnd& end) {
  json devices = json::array();
  json out_cells = json::array();
  for (json c : cells) {
    if (c.at("device").is_object()) {
      json device = c.at("device");
      device["gpu"] = c.at("gpu");
      const auto it = std::find(devices.begin(), devices.end(), device);
      c["device"] = it - devices.begin();
      if (it == devices.end()) devices.push_back(device);
    }
    out_cells.push_back(c);
  }
  json workers = json::array();
  for (const auto& w : meta.workers) workers.push_back(w.empty() ? json(nullptr) : json(w));
  json matrix = axes_to_json(meta.axes);
  matrix["cells"] = meta.matrix_cells ? meta.matrix_cells : end.cells_planned;
  matrix["shard"] = shard_to_json(meta.shard);
  if (meta.left_out) matrix["left_out"] = {{"count", meta.left_out}, {"example", meta.left_out_why}};
  matrix["cell_timeout_s"] = meta.cell_timeout_s;
  matrix["stage_timeout_s"] = meta.stage_timeout_s;
  matrix["workers"] = workers;
  size_t done = 0;
  for (const auto& c : cells) done += cell_outcome(c) != Outcome::planned;
  json info = {{"format_version", kSweepFormatVersion},
               {"harness", "sdpa-repro"},
               {"harness_version", kHarnessVersion},
               {"git_commit", kGitCommit},
               {"command_line", meta.command_line},
               {"started_utc", meta.started_utc},
               {"dry_run", meta.dry_run}};
  if (!meta.host.is_null()) info["host"] = meta.host;
  if (!meta.shards.is_null()) info["shards"] = meta.shards;
  return {{"meta", info},
          {"matrix", matrix},
          {"devices", devices},
          {"summary",
           {{"cells_planned", end.cells_planned},
            {"cells_done", done},
            {"outcomes", counts_json(count_outcomes(cells))},
            {"interrupted", end.interrupted},
            {"result", verdict(cells, end.cells_planned, end.interrupted)},
            {"wall_seconds", end.wall_seconds},
            {"gpu_checks", end.gpu_checks},
            {"no_gpu", end.no_gpu}}},
          {"cells", out_cells}};
}

json host_json() {
  const HostInfo host = query_host_info();
  char name[256] = {};
  const std::string host_name = gethostname(name, sizeof name - 1) == 0 ? name : "unknown";
  return {{"name", host_name},
          {"os", host.os},
          {"kernel", host.kernel},
          {"cpu_arch", host.cpu_arch},
          {"nvidia_driver", host.nvidia_driver}};
}

std::string machine_description(const json& host, const std::vector<json>& cells) {
  std::vector<std::string> gpus;
  for (const auto& c : cells) {
    if (!c.contains("device") || !c.at("device").is_object()) continue;
    const json& d = c.at("device");
    std::string cc = str_or(d, "compute_capability", "?");
    cc.erase(std::remove(cc.begin(), cc.end(), '.'), cc.end());
    std::string gpu = str_or(d, "name", "unknown GPU") + " (sm_" + cc;
    if (d.contains("driver_version") && d.at("driver_version").is_number_integer()) {
      gpu += ", CUDA " + cuda_version_string(d.at("driver_version").get<int>());
    }
    gpu += ")";
    if (std::find(gpus.begin(), gpus.end(), gpu) == gpus.end()) gpus.push_back(gpu);
  }
  std::string s;
  for (const auto& g : gpus) s += (s.empty() ? "" : ", ") + g;
  if (s.empty()) s = "no GPU reported";
  if (!host.is_object()) return s;  // a document from before sweeps recorded their host
  const std::string driver = str_or(host, "nvidia_driver", "unknown");
  s += driver == "unknown" ? ", no NVIDIA driver loaded" : ", NVIDIA driver " + driver;
  const std::string name = str_or(host, "name", "");
  return name.empty() ? s : s + " on " + name;
}

json no_gpu_json(const json& record, size_t cells_not_run) {
  return {{"after_cell", record.at("index")}, {"error", record.at("error")}, {"cells_not_run", cells_not_run}};
}

std::string no_gpu_footer(const json& no_gpu) {
  if (!no_gpu.is_object()) return "";
  const size_t not_run = no_gpu.at("cells_not_run").get<size_t>();
  std::string s = "# " + (not_run ? std::to_string(not_run) + " cells not run: cell " : std::string("cell ")) +
                  std::to_string(no_gpu.at("after_cell").get<int>()) + " found no usable GPU";
  if (no_gpu.at("error").is_string()) s += " (" + no_gpu.at("error").get<std::string>() + ")";
  return s + "; --resume runs " + (not_run ? "them (and that cell again)" : "it again") + " where there is one\n";
}

std::vector<json> latest_records(const std::vector<json>& records, size_t* repeated) {
  std::vector<json> kept;
  std::map<std::string, size_t> position;
  size_t left_out = 0;
  for (const auto& r : records) {
    const std::string key = r.at("key");
    const auto it = position.find(key);
    if (it == position.end()) {
      position.emplace(key, kept.size());
      kept.push_back(r);
    } else if (cell_outcome(kept[it->second]) == Outcome::no_gpu && cell_outcome(r) != Outcome::no_gpu) {
      kept[it->second] = r;
    } else if (cell_outcome(r) != Outcome::no_gpu) {
      ++left_out;
    }
  }
  if (repeated) *repeated = left_out;
  return kept;
}

void append_jsonl_line(const std::string& path, const json& record) {
  const std::string line = record.dump() + "\n";
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError("cannot append to " + path + ": " + std::strerror(errno));
  // One write per line, so a line is either whole or a truncated last line that --resume skips.
  const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const bool synced = fsync(fd) == 0;
  const std::string reason = std::strerror(errno);
  close(fd);
  if (!written || !synced) throw InputError("cannot append to " + path + ": " + reason);
}

std::string cell_record_problem(const json& r) {
  if (!r.is_object()) return "not an object";
  auto has = [&](const json& j, const char* key, bool (json::*type)() const noexcept, bool null_ok) {
    return j.contains(key) && ((j.at(key).*type)() || (null_ok && j.at(key).is_null()));
  };
  if (!has(r, "key", &json::is_string, false)) return "no \"key\" string";
  if (!has(r, "index", &json::is_number_integer, false)) return "no \"index\" integer";
  if (!has(r, "outcome", &json::is_string, false)) return "no \"outcome\" string";
  const auto outcome = find_outcome(r.at("outcome").get<std::string>());
  const auto& outcomes = sweep_outcomes();
  if (!outcome || *outcome == Outcome::planned || std::find(outcomes.begin(), outcomes.end(), *outcome) == outcomes.end()) {
    return "\"outcome\" is not the outcome of a finished cell";
  }
  if (!has(r, "axes", &json::is_object, false)) return "no \"axes\" object";
  const json& a = r.at("axes");
  for (const char* key : {"scenario", "iters", "repeat"}) {
    if (!has(a, key, &json::is_number_integer, false)) return std::string("no \"axes.") + key + "\" integer";
  }
  for (const char* key : {"fix", "fix_list", "dtype", "precision", "shape", "alloc", "stream"}) {
    if (!has(a, key, &json::is_string, false)) return std::string("no \"axes.") + key + "\" string";
  }
  if (!has(r, "device", &json::is_object, true)) return "no \"device\" object or null";
  if (!has(r, "gpu", &json::is_string, true)) return "no \"gpu\" string or null";
  for (const char* key : {"stage", "error"}) {
    if (!has(r, key, &json::is_string, true)) return std::string("no \"") + key + "\" string or null";
  }
  for (const char* key : {"exit_code", "signal", "rel_error", "call_median_ms", "wall_seconds"}) {
    if (!has(r, key, &json::is_number, true)) return std::string("no \"") + key + "\" number or null";
  }
  return "";
}

JsonlContents read_jsonl(const std::string& path) {
  const auto text = read_file(path);
  if (!text) return {};
  return parse_jsonl(*text, path);
}

JsonlContents parse_jsonl(const std::string& all, const std::string& path) {
  JsonlContents out;
  size_t start = 0, number = 0;
  while (start < all.size()) {
    ++number;
    const size_t nl = all.find('\n', start);
    const bool last = nl == std::string::npos || nl + 1 == all.size();
    const std::string line = all.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    start = nl == std::string::npos ? all.size() : nl + 1;
    json record;
    std::string problem;
    if (nl == std::string::npos) {
      problem = "has no end of line (the sweep was stopped while writing it)";
    } else {
      try {
        record = json::parse(line);
        const std::string why = cell_record_problem(record);
        if (!why.empty()) problem = "is not a finished cell's record (" + why + ")";
      } catch (const json::exception&) {
        problem = "is not JSON";
      }
    }
    if (problem.empty()) {
      out.records.push_back(record);
    } else if (last) {
      out.warnings.push_back(path + ": line " + std::to_string(number) + " " + problem + "; left out, its cell runs again");
      out.dropped_last_line = true;
    } else {
      throw InputError(path + ": line " + std::to_string(number) + " " + problem +
                       " (only the last line may be damaged; use --force to start again)");
    }
  }
  return out;
}

std::string sweep_footer(const std::vector<json>& cells, size_t planned, bool interrupted) {
  const auto counts = count_outcomes(cells);
  size_t done = 0;
  for (const auto& [outcome, n] : counts) done += outcome == Outcome::planned ? 0 : static_cast<size_t>(n);
  std::string line = "# " + std::to_string(done) + " of " + std::to_string(planned) + " cells:";
  const char* separator = " ";
  for (const auto& entry : kSweepOutcomes) {
    const auto counted = counts.find(entry.outcome);
    const int n = counted == counts.end() ? 0 : counted->second;
    if (!entry.in_footer_when_none && n == 0) continue;
    line += separator + std::to_string(n) + " " + entry.footer_words;
    separator = ", ";
  }
  const std::string result = verdict(cells, planned, interrupted);
  std::string last = "# Sweep: " + result;
  if (interrupted) last += " (interrupted; --resume runs the cells that are left)";
  return line + "\n" + last + "\n";
}

std::string gpu_checks_footer(const json& gpu_checks, size_t cells_not_run) {
  std::string s;
  size_t retired = 0;
  for (const auto& c : gpu_checks) {
    if (!c.at("retired").get<bool>()) continue;
    ++retired;
    s += "# GPU " + (c.at("gpu").is_string() ? c.at("gpu").get<std::string>() : std::string("(inherited)")) +
         " retired after cell " + std::to_string(c.at("after_cell").get<int>()) + ": " + c.at("reason").get<std::string>() + "\n";
  }
  if (retired && cells_not_run) {
    s += "# " + std::to_string(cells_not_run) + " cells not run: no GPU left (after a power cycle or a driver reload, "
         "--resume runs them)\n";
  }
  return s;
}

std::string sweep_table(const std::vector<json>& cells, size_t planned, bool interrupted) {
  struct Column {
    const char* title;
    int width;
  };
  const std::vector<Column> columns{{"cell", 5},    {"scen", 4},     {"fix", 5},       {"dtype", 5},  {"precision", 9},
                                    {"shape", 18},  {"alloc", 7},    {"stream", 12},   {"rep", 3},    {"outcome", 10},
                                    {"stage", 14},  {"rel_error", 9}, {"call_ms", 9},  {"wall_s", 7}};
  auto row = [&](const std::vector<std::string>& values) {
    std::string s;
    for (size_t i = 0; i < columns.size(); ++i) {
      char buf[128];
      std::snprintf(buf, sizeof buf, " %*s", columns[i].width, values[i].c_str());
      s += buf;
    }
    return s + "\n";
  };
  std::vector<std::string> titles;
  for (const auto& c : columns) titles.push_back(c.title);
  std::string out = "#" + row(titles).substr(1);
  auto number = [](const json& j, const char* key, const char* fmt) {
    return j.contains(key) && j.at(key).is_number() ? format_number(fmt, j.at(key).get<double>()) : std::string("-");
  };
  for (const auto& c : cells) {
    const json& a = c.at("axes");
    out += row({std::to_string(c.at("index").get<int>()), std::to_string(a.at("scenario").get<int>()),
                a.at("fix").get<std::string>(), a.at("dtype").get<std::string>(), a.at("precision").get<std::string>(),
                a.at("shape").get<std::string>(), a.at("alloc").get<std::string>(), a.at("stream").get<std::string>(),
                std::to_string(a.at("repeat").get<int>()), c.at("outcome").get<std::string>(), str_or(c, "stage", "-"),
                number(c, "rel_error", "%.2e"), number(c, "call_median_ms", "%.3f"), number(c, "wall_seconds", "%.2f")});
  }
  return out + sweep_footer(cells, planned, interrupted);
}

std::string sweep_svg(const std::vector<json>& cells, const std::string& title, const std::string& caption) {
  // Panels: shape x precision x stream x iters x context; rows: scenario x fix; columns: dtype x
  // alloc, each in the order the matrix lists them.
  using Key = std::vector<std::string>;
  std::vector<Key> panels, rows;
  std::vector<std::string> dtypes, allocs;
  int repeats = 1;
  auto panel_of = [](const json& a) {
    return Key{a.at("shape").get<std::string>(), a.at("precision").get<std::string>(),
               a.at("stream").get<std::string>(), std::to_string(a.at("iters").get<int>()),
               a.value("context", std::string("isolated"))};
  };
  auto row_of = [](const json& a) { return Key{std::to_string(a.at("scenario").get<int>()), a.at("fix").get<std::string>()}; };
  for (const auto& c : cells) {
    const json& a = c.at("axes");
    index_of(panels, panel_of(a));
    index_of(rows, row_of(a));
    index_of(dtypes, a.at("dtype").get<std::string>());
    index_of(allocs, a.at("alloc").get<std::string>());
    repeats = std::max(repeats, a.at("repeat").get<int>() + 1);
  }
  std::vector<Key> columns;
  for (const auto& d : dtypes)
    for (const auto& al : allocs) columns.push_back({d, al});
  std::map<std::vector<size_t>, std::vector<const json*>> squares;  // {panel, row, column} -> its cells
  for (const auto& c : cells) {
    const json& a = c.at("axes");
    const size_t column = index_of(dtypes, a.at("dtype").get<std::string>()) * allocs.size() +
                          index_of(allocs, a.at("alloc").get<std::string>());
    squares[{index_of(panels, panel_of(a)), index_of(rows, row_of(a)), column}].push_back(&c);
  }

  const double margin = 20, label_w = 150, cell_w = 96, cell_h = 40, gap = 2, title_line_h = 18, panel_title_h = 22,
               header_h = 36, panel_gap = 24, char_w = 6.7, line_h = 15;
  const double grid_w = static_cast<double>(columns.size()) * (cell_w + gap);
  const double panel_h = panel_title_h + header_h + static_cast<double>(rows.size()) * (cell_h + gap);
  const double width = std::max(margin * 2 + label_w + grid_w, 760.0);
  const size_t text_columns = static_cast<size_t>((width - 2 * margin) / char_w);

  // The reasons under the legend, numbered in the order the squares show them.
  std::vector<std::string> notes;
  auto note_number = [&](const std::string& text) {
    const auto it = std::find(notes.begin(), notes.end(), text);
    if (it != notes.end()) return static_cast<size_t>(it - notes.begin()) + 1;
    notes.push_back(text);
    return notes.size();
  };

  std::string body;
  double y = margin + 12;
  // A merged sweep's title names several machines: it wraps rather than widening the picture.
  for (const auto& line : wrap_words(title, static_cast<size_t>((width - 2 * margin) / 8.5), "  ")) {
    body += text_element(margin, y, line, "font-size=\"14\" font-weight=\"bold\"");
    y += title_line_h;
  }
  body += text_element(margin, y - 3, caption, "fill=\"#212121\"");
  std::string layout = "rows: scenario x fix; columns: dtype x allocation; colour: outcome";
  if (repeats > 1) layout += "; each square is the worst of " + std::to_string(repeats) + " repeats";
  body += text_element(margin, y + 11, layout, "fill=\"#424242\"");
  y += 14;
  for (size_t p = 0; p < panels.size(); ++p) {
    const Key& panel = panels[p];
    body += text_element(margin, y + 15,
                         "shape " + panel[0] + " (BxHxLxSxE), precision " + panel[1] + ", stream " + panel[2] + ", " +
                             panel[3] + " iters" + (panel[4] == "isolated" ? "" : ", context rung " + panel[4]),
                         "font-size=\"12\" font-weight=\"bold\"");
    const double grid_y = y + panel_title_h;
    for (size_t col = 0; col < columns.size(); ++col) {
      const double x = margin + label_w + static_cast<double>(col) * (cell_w + gap);
      if (col == 0 || columns[col][0] != columns[col - 1][0]) {
        body += text_element(x + 2, grid_y + 14, columns[col][0], "font-weight=\"bold\"");
      }
      body += text_element(x + 2, grid_y + 30, columns[col][1], "fill=\"#424242\"");
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      const double row_y = grid_y + header_h + static_cast<double>(r) * (cell_h + gap);
      body += text_element(margin, row_y + cell_h / 2 + 4, "scenario " + rows[r][0] + ", fix " + rows[r][1], "");
      for (size_t col = 0; col < columns.size(); ++col) {
        const auto found = squares.find({p, r, col});
        if (found == squares.end()) continue;
        const auto& members = found->second;
        const json* worst = members.front();
        size_t worst_count = 0;
        for (const json* m : members) {
          if (severity(cell_outcome(*m)) > severity(cell_outcome(*worst))) worst = m;
        }
        std::string tooltip;
        for (const json* m : members) {
          worst_count += m->at("outcome") == worst->at("outcome");
          tooltip += (tooltip.empty() ? "" : "\n") + m->at("key").get<std::string>() + ": " +
                     m->at("outcome").get<std::string>();
          const std::string why = str_or(*m, "error", str_or(*m, "skip_reason", ""));
          if (!why.empty()) tooltip += " (" + why + ")";
        }
        const Outcome outcome = cell_outcome(*worst);
        // A pass with stalled calls is shown as a stall: the symptom, even where the run passed.
        const bool stalled_pass = outcome == Outcome::pass && worst->contains("stall") && worst->at("stall").is_object();
        const OutcomeStyle& style = kOutcomeStyles[severity(stalled_pass ? Outcome::stalled : outcome)].second;
        std::string label = stalled_pass ? std::string("pass, stalled") : std::string(style.label);
        if (members.size() > 1) label += " " + std::to_string(worst_count) + "/" + std::to_string(members.size());
        std::string detail = str_or(*worst, "stage", "");
        if (detail.empty() && worst->at("signal").is_number()) detail = "signal " + worst->at("signal").dump();
        if (outcome == Outcome::mismatch && worst->at("rel_error").is_number()) {
          detail = "err " + format_number("%.1e", worst->at("rel_error").get<double>());
        } else if (stalled_pass) {
          detail = format_number("%.1f s", worst->at("stall").at("ms").get<double>() / 1e3);
        } else if (outcome == Outcome::pass && worst->at("call_median_ms").is_number()) {
          detail = format_number("%.3f ms", worst->at("call_median_ms").get<double>());
        }
        const std::string reason = square_reason(*worst);
        if (!reason.empty()) {
          const std::string where = (outcome == Outcome::hang || outcome == Outcome::stalled) && worst->at("stage").is_string()
                                        ? " in " + worst->at("stage").get<std::string>() : "";
          const std::string number = "[" + std::to_string(note_number(style.label + where + ": " + reason)) + "]";
          detail += (detail.empty() ? "" : " ") + number;
        }
        const double x = margin + label_w + static_cast<double>(col) * (cell_w + gap);
        // A hung cell's square links its hang snapshot (the path is relative to the document's folder).
        std::string snapshot;
        if (worst->contains("snapshot") && worst->at("snapshot").is_object()) {
          snapshot = worst->at("snapshot").value("path", "");
          tooltip += "\nhang snapshot: " + snapshot;
        }
        if (!snapshot.empty()) body += "<a href=\"" + xml_escape(snapshot + "/snapshot.json") + "\">\n";
        body += "<g class=\"cell\">\n<title>" + xml_escape(tooltip) + "</title>\n";
        body += rect_element(x, row_y, cell_w, cell_h,
                             std::string("fill=\"") + style.fill + "\" stroke=\"#9e9e9e\"" +
                                 (outcome == Outcome::planned ? " stroke-dasharray=\"3,2\"" : ""));
        body += text_element(x + cell_w / 2, row_y + (detail.empty() ? cell_h / 2 + 4 : 16), label,
                             std::string("text-anchor=\"middle\" font-weight=\"bold\" fill=\"") + style.ink + "\"");
        if (!detail.empty()) {
          body += text_element(x + cell_w / 2, row_y + 31, detail,
                               std::string("text-anchor=\"middle\" font-size=\"10\" fill=\"") + style.ink + "\"");
        }
        body += "</g>\n";
        if (!snapshot.empty()) body += "</a>\n";
      }
    }
    y += panel_h + panel_gap;
  }
  // Legend: every outcome, best first, then what the figures in a square mean.
  std::set<Outcome> present;
  for (const auto& c : cells) {
    present.insert(cell_outcome(c));
    if (c.contains("stall") && c.at("stall").is_object()) present.insert(Outcome::stalled);
  }
  double x = margin;
  body += text_element(margin, y + 4, "outcomes:", "font-weight=\"bold\"");
  for (const auto& [outcome, style] : kOutcomeStyles) {
    if (!counted_when_none(outcome) && !present.count(outcome)) continue;
    const double w = 18 + 7.0 * static_cast<double>(std::strlen(style.label)) + 14;
    if (x + w > width - margin) x = margin, y += 20;
    body += "<g class=\"legend\">" + rect_element(x, y + 12, 14, 14, std::string("fill=\"") + style.fill + "\" stroke=\"#9e9e9e\"");
    body += text_element(x + 18, y + 23, style.label, "") + "</g>\n";
    x += w;
  }
  y += 44;
  auto paragraph = [&](const std::string& text, const std::string& attributes) {
    for (const auto& line : wrap_words(text, text_columns, "    ")) {
      body += text_element(margin, y, line, attributes);
      y += line_h;
    }
  };
  paragraph("in a square: \"0.250 ms\" (a pass) is the median GPU time of one call of the path (CUDA events from "
            "its first GPU stage's start to its last one's end) over the run's --iters calls; \"err 5.0e-01\" (a "
            "mismatch) is the relative L2 error against the float64 reference; a stage name is where the run hung, "
            "crashed or failed; \"k/n\": k of the n repeats had the outcome shown; [n]: the reason, below",
            "fill=\"#424242\"");
  if (!notes.empty()) {
    y += 6;
    body += text_element(margin, y, "reasons:", "font-weight=\"bold\"");
    y += line_h;
    for (size_t i = 0; i < notes.size() && i < kMaxSvgNotes; ++i) {
      paragraph("[" + std::to_string(i + 1) + "] " + notes[i], "class=\"note\"");
    }
    if (notes.size() > kMaxSvgNotes) {
      paragraph("[" + std::to_string(kMaxSvgNotes + 1) + "] to [" + std::to_string(notes.size()) +
                    "]: in each square's tooltip and in the sweep's JSON",
                "");
    }
  }
  const double height = y + margin;
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + format_number("%.0f", width) + "\" height=\"" +
         format_number("%.0f", height) + "\" viewBox=\"0 0 " + format_number("%.0f", width) + " " + format_number("%.0f", height) +
         "\" font-family=\"DejaVu Sans Mono, monospace\" font-size=\"11\">\n";
  svg += rect_element(0, 0, width, height, "fill=\"#ffffff\"");
  return svg + body + "</svg>\n";
}

}  // namespace sdpa
