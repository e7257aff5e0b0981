// sweep_merge.cpp
#include "repro/sweep/sweep_merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "math_sdpa/errors.h"
#include "repro/common/text.h"
#include "repro/sweep/cell_runner.h"
#include "repro/sweep/matrix.h"
#include "repro/sweep/sweep_output.h"

namespace sdpa {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One shard's output as read back.
struct ShardOutput {
  std::string doc_path;       // its sweep document
  fs::path folder;            // the document's folder: its links are relative to it
  json doc;
  SweepAxes axes;
  SweepShard shard;
  bool dry_run = false;
  std::vector<json> records;  // its cells: finished (from FILE.jsonl), or planned for a dry run
};

// The document's `key` as the type given, or InputError naming the file.
template <typename Check> const json& member(const json& parent, const char* key, Check is_type, const std::string& where) {
  if (!parent.is_object() || !parent.contains(key) || !is_type(parent.at(key))) {
    throw InputError(where + ": not a sweep document (no valid \"" + key + "\")");
  }
  return parent.at(key);
}

ShardOutput read_shard(const std::string& source, std::vector<std::string>& warnings) {
  ShardOutput s;
  std::error_code ec;
  s.doc_path = fs::is_directory(source, ec) ? (fs::path(source) / "sweep.json").string() : source;
  s.folder = fs::path(s.doc_path).parent_path();
  const auto text = read_file(s.doc_path);
  if (!text) throw InputError(source + ": no sweep document (cannot read " + s.doc_path + ")");
  try {
    s.doc = json::parse(*text);
  } catch (const json::exception&) {
    throw InputError(s.doc_path + ": not a sweep document (not JSON)");
  }
  auto is_object = [](const json& j) { return j.is_object(); };
  const json& meta = member(s.doc, "meta", is_object, s.doc_path);
  if (member(meta, "harness", [](const json& j) { return j.is_string(); }, s.doc_path) != "sdpa-repro") {
    throw InputError(s.doc_path + ": not a sweep document of sdpa-repro");
  }
  member(meta, "format_version", [](const json& j) { return j.is_number_integer(); }, s.doc_path);
  member(meta, "harness_version", [](const json& j) { return j.is_string(); }, s.doc_path);
  member(meta, "started_utc", [](const json& j) { return j.is_string(); }, s.doc_path);
  s.dry_run = member(meta, "dry_run", [](const json& j) { return j.is_boolean(); }, s.doc_path).get<bool>();
  const json& matrix = member(s.doc, "matrix", is_object, s.doc_path);
  member(s.doc, "summary", is_object, s.doc_path);
  s.axes = axes_from_document_matrix(matrix, s.doc_path);
  try {
    s.shard = shard_from_json(matrix);
  } catch (const InputError& e) {
    throw InputError(s.doc_path + ": " + e.what());
  }
  if (s.dry_run) {
    // A dry run's cells are in its document (printed to stdout, saved by the caller).
    for (const auto& c : member(s.doc, "cells", [](const json& j) { return j.is_array(); }, s.doc_path)) {
      const bool planned = c.is_object() && c.contains("key") && c.at("key").is_string() && c.contains("outcome") &&
                           c.at("outcome") == outcome_name(Outcome::planned);
      if (!planned) throw InputError(s.doc_path + ": a dry run's cell is not a planned cell with a key");
      s.records.push_back(c);
    }
    return s;
  }
  const std::string stem = s.doc_path.size() > 5 && s.doc_path.compare(s.doc_path.size() - 5, 5, ".json") == 0
                               ? s.doc_path.substr(0, s.doc_path.size() - 5) : s.doc_path;
  if (!read_file(stem + ".jsonl")) {
    throw InputError(s.doc_path + ": its cells are in " + stem + ".jsonl, which cannot be read (copy it with the document)");
  }
  const JsonlContents lines = read_jsonl(stem + ".jsonl");
  for (const auto& w : lines.warnings) warnings.push_back(w);
  size_t repeated = 0;
  s.records = latest_records(lines.records, &repeated);
  if (repeated) warnings.push_back(stem + ".jsonl: " + std::to_string(repeated) + " cell(s) appear twice; the first is kept");
  return s;
}

// A link of a shard's record (relative to its document's folder), relative to the merged one's.
std::string rebase_link(const std::string& link, const fs::path& from_folder, const fs::path& to_folder) {
  std::error_code ec;
  const fs::path target = fs::absolute(from_folder / link, ec);
  const fs::path base = fs::absolute(to_folder.empty() ? fs::path(".") : to_folder, ec);
  const fs::path relative = target.lexically_normal().lexically_relative(base.lexically_normal());
  return relative.empty() ? target.string() : relative.string();
}

std::string shards_word(size_t n) { return std::to_string(n) + (n == 1 ? " shard" : " shards"); }

}  // namespace

MergedSweep merge_shards(const std::vector<std::string>& sources, const std::string& out_folder,
                         const std::vector<std::string>& command_line) {
  MergedSweep merged;
  std::vector<ShardOutput> shards;
  for (const auto& source : sources) shards.push_back(read_shard(source, merged.warnings));

  // One matrix, one harness, one way of running: the checks an unsharded sweep never needs.
  const ShardOutput& first = shards.front();
  const json& first_meta = first.doc.at("meta");
  for (const auto& s : shards) {
    const json& meta = s.doc.at("meta");
    const std::string pair = first.doc_path + " and " + s.doc_path;
    for (const char* key : {"format_version", "harness_version"}) {
      if (meta.at(key) != first_meta.at(key)) {
        // The cells a shard holds depend on the harness (its cost model deals them).
        throw InputError(pair + " come from different harness versions (" + key + " " + first_meta.at(key).dump() + " and " +
                         meta.at(key).dump() + "); run every shard with one build");
      }
    }
    if (s.dry_run != first.dry_run) throw InputError(pair + ": one is a dry run and the other is not");
    const std::string difference = matrix_difference(first.axes, SweepShard{1, first.shard.count}, s.axes,
                                                     SweepShard{1, s.shard.count}, "in " + first.doc_path, "in " + s.doc_path);
    if (!difference.empty()) throw InputError(pair + " are not shards of one matrix: " + difference);
    if (meta.value("git_commit", json()) != first_meta.value("git_commit", json())) {
      merged.warnings.push_back(pair + " were built from different commits (" + first_meta.value("git_commit", json()).dump() +
                                " and " + meta.value("git_commit", json()).dump() + ")");
    }
    for (const char* key : {"cell_timeout_s", "stage_timeout_s"}) {
      if (s.doc.at("matrix").value(key, json()) != first.doc.at("matrix").value(key, json())) {
        merged.warnings.push_back(pair + " ran with different " + key + " (each cell's command line says which)");
      }
    }
  }
  std::sort(shards.begin(), shards.end(), [](const ShardOutput& a, const ShardOutput& b) { return a.shard.index < b.shard.index; });
  for (size_t i = 1; i < shards.size(); ++i) {
    if (shards[i].shard.index == shards[i - 1].shard.index) {
      throw InputError(shards[i - 1].doc_path + " and " + shards[i].doc_path + " are both shard " + shards[i].shard.str() +
                       " (they overlap)");
    }
  }

  // Every cell where its shard was dealt it, each once.
  int left_out = 0;
  std::string left_out_why;
  const std::vector<SweepCell> cells = expand_matrix(first.axes, &left_out, &left_out_why);
  const int count = first.shard.count;
  std::map<std::string, const SweepCell*> by_key;
  for (const auto& c : cells) by_key.emplace(c.key(), &c);
  std::map<std::string, int> shard_of;  // key -> shard index
  for (int k = 1; k <= count; ++k) {
    for (const auto& c : shard_cells(cells, SweepShard{k, count})) shard_of[c.key()] = k;
  }
  std::map<std::string, std::pair<json, const ShardOutput*>> records;
  for (const auto& s : shards) {
    for (const auto& r : s.records) {
      const std::string key = r.at("key");
      const auto cell = by_key.find(key);
      if (cell == by_key.end() || shard_of.at(key) != s.shard.index) {
        throw InputError(s.doc_path + ": the cell " + key + " is not in shard " + s.shard.str() + " of this matrix");
      }
      if (!r.contains("axes") || r.at("axes") != cell_axes_to_json(*cell->second)) {
        throw InputError(s.doc_path + ": the cell " + key + " has axes that do not match its key");
      }
      json record = r;
      record["index"] = cell->second->index;
      if (!s.dry_run) {
        if (record.at("device").is_object() && s.doc.at("meta").contains("host")) {
          // Two machines of one kind are still two machines.
          record["device"]["host"] = s.doc.at("meta").at("host").value("name", json());
        }
        if (record.contains("log_file") && record.at("log_file").is_string()) {
          record["log_file"] = rebase_link(record.at("log_file"), s.folder, out_folder);
        }
        if (record.contains("snapshot") && record.at("snapshot").is_object() && record.at("snapshot").contains("path") &&
            record.at("snapshot").at("path").is_string()) {
          record["snapshot"]["path"] = rebase_link(record.at("snapshot").at("path"), s.folder, out_folder);
        }
      }
      if (!records.emplace(key, std::make_pair(record, &s)).second) {
        throw InputError(records.at(key).second->doc_path + " and " + s.doc_path + " both hold the cell " + key);
      }
    }
  }

  // Why a cell of the matrix has no record.
  std::map<int, std::string> not_run_reason;
  std::set<int> present;
  for (const auto& s : shards) present.insert(s.shard.index);
  for (int k = 1; k <= count; ++k) {
    if (!present.count(k)) not_run_reason[k] = "shard " + SweepShard{k, count}.str() + " was not merged";
  }
  SweepMeta meta;
  SweepEnd end;
  meta.command_line = {"repro", "sweep"};
  meta.command_line.insert(meta.command_line.end(), command_line.begin(), command_line.end());
  meta.dry_run = first.dry_run;
  meta.axes = first.axes;
  meta.matrix_cells = cells.size();
  meta.left_out = left_out;
  meta.left_out_why = left_out_why;
  meta.cell_timeout_s = first.doc.at("matrix").value("cell_timeout_s", 0.0);
  meta.stage_timeout_s = first.doc.at("matrix").value("stage_timeout_s", 0.0);
  meta.shards = json::array();
  meta.started_utc = first_meta.at("started_utc");
  end.cells_planned = cells.size();
  std::vector<std::string> machines;
  for (const auto& s : shards) {
    const json& meta_s = s.doc.at("meta");
    const json& summary = s.doc.at("summary");
    meta.started_utc = std::min(meta.started_utc, meta_s.at("started_utc").get<std::string>());
    for (const auto& w : s.doc.at("matrix").value("workers", json::array())) {
      meta.workers.push_back(w.is_string() ? w.get<std::string>() : "");
    }
    const json no_gpu = summary.value("no_gpu", json());
    const bool interrupted = summary.value("interrupted", false);
    meta.shards.push_back({{"shard", s.shard.str()},
                           {"source", s.doc_path},
                           {"host", meta_s.value("host", json())},
                           {"git_commit", meta_s.value("git_commit", json())},
                           {"command_line", meta_s.value("command_line", json::array())},
                           {"started_utc", meta_s.at("started_utc")},
                           {"cells_done", s.dry_run ? 0 : s.records.size()},
                           {"result", summary.value("result", json())},
                           {"interrupted", interrupted},
                           {"wall_seconds", summary.value("wall_seconds", 0.0)},
                           {"no_gpu", no_gpu}});
    end.interrupted |= interrupted;
    end.wall_seconds = std::max(end.wall_seconds, summary.value("wall_seconds", 0.0));
    for (auto check : summary.value("gpu_checks", json::array())) {
      check["shard"] = s.shard.str();
      end.gpu_checks.push_back(check);
    }
    if (no_gpu.is_object() && end.no_gpu.is_null()) end.no_gpu = no_gpu;
    if (no_gpu.is_object()) {
      not_run_reason[s.shard.index] = "shard " + s.shard.str() + " stopped when cell " +
                                      no_gpu.value("after_cell", json()).dump() + " found no usable GPU";
      merged.footer += "# shard " + s.shard.str() + ": " + no_gpu_footer(no_gpu).substr(2);
    } else if (interrupted) {
      not_run_reason[s.shard.index] = "shard " + s.shard.str() + " was interrupted";
    } else {
      not_run_reason[s.shard.index] = "shard " + s.shard.str() + " did not run it";
    }
    std::vector<json> shard_records;
    for (const auto& r : s.records) shard_records.push_back(records.at(r.at("key")).first);
    const std::string machine = machine_description(meta_s.value("host", json()), shard_records);
    if (!s.dry_run && std::find(machines.begin(), machines.end(), machine) == machines.end()) machines.push_back(machine);
  }
  merged.footer += gpu_checks_footer(end.gpu_checks, 0);
  size_t missing_cells = 0;
  for (int k = 1; k <= count; ++k) {
    if (present.count(k)) continue;
    const size_t n = shard_cells(cells, SweepShard{k, count}).size();
    missing_cells += n;
    merged.footer += "# shard " + SweepShard{k, count}.str() + " not merged: its " + std::to_string(n) + " cells are not run\n";
  }
  if (missing_cells) merged.warnings.push_back(std::to_string(count - static_cast<int>(present.size())) + " of " +
                                               shards_word(static_cast<size_t>(count)) + " not merged");

  std::vector<json> done;
  for (const auto& c : cells) {
    const auto found = records.find(c.key());
    if (found != records.end()) {
      done.push_back(found->second.first);
      merged.squares.push_back(found->second.first);
      continue;
    }
    json square = planned_cell_json(c, meta.stage_timeout_s);
    square["is_skipped"] = true;
    square["skip_reason"] = not_run_reason.at(shard_of.at(c.key()));
    merged.squares.push_back(square);
  }
  if (!first.dry_run) merged.records = done;
  merged.document = sweep_document(meta, done, end);
  std::string machine_list;
  for (const auto& m : machines) machine_list += (machine_list.empty() ? "" : "; ") + m;
  merged.title = first.dry_run ? "repro sweep (dry run)" : "repro sweep on " + machine_list;
  size_t finished = 0;
  for (const auto& r : done) finished += cell_outcome(r) != Outcome::planned;
  merged.caption = (first.dry_run ? std::to_string(done.size()) + " of " + std::to_string(cells.size()) + " cells planned"
                                  : std::to_string(finished) + " of " + std::to_string(cells.size()) + " cells") +
                   ", merged from " + std::to_string(shards.size()) + " of " + shards_word(static_cast<size_t>(count)) +
                   ", the first started " + meta.started_utc;
  return merged;
}

}  // namespace sdpa
