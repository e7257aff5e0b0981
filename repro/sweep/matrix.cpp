// matrix.cpp
#include "repro/sweep/matrix.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include "fixes/fix_list.h"
#include "repro/cli/context_ladder.h"
#include "math_sdpa/errors.h"
#include "repro/cli/run_options.h"
#include "repro/common/text.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

namespace sdpa {

namespace {

// A RunSpec validated the way a plain run would; the run's options, or InputError with repro's
// own message after `context`.
RunOptions validated(const std::string& context, const RunSpec& spec) {
  try {
    return validate_run_spec(spec);
  } catch (const InputError& e) {
    throw InputError(context + ": " + e.what());
  }
}

// One run option's value, checked by the run's own parser.
void check_run_option(const std::string& context, const std::string& option, const std::string& value) {
  RunSpec spec;
  try {
    spec.set(option, value);
  } catch (const InputError& e) {
    throw InputError(context + ": " + e.what());
  }
  validated(context, spec);
}

std::array<int64_t, 5> parse_shape(const std::string& text) {
  std::array<int64_t, 5> dims{};
  size_t part = 0, start = 0;
  while (true) {
    const size_t x = text.find('x', start);
    const std::string item = text.substr(start, x == std::string::npos ? std::string::npos : x - start);
    const bool digits = !item.empty() && item.size() <= 12 && std::all_of(item.begin(), item.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (part == dims.size() || !digits || std::stoll(item) == 0) {
      throw InputError("--shapes: '" + text + "' is not a shape BxHxLxSxE of five positive integers (e.g. 2x8x128x128x64) "
                       "or a workload (" + workload_names() + ")");
    }
    dims[part++] = std::stoll(item);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  if (part != dims.size()) {
    throw InputError("--shapes: '" + text + "' is not a shape BxHxLxSxE of five positive integers (e.g. 2x8x128x128x64) "
                     "or a workload (" + workload_names() + ")");
  }
  return dims;
}

bool is_workload(const std::string& text) {
  for (const Workload& w : workload_table()) {
    if (text == w.name) return true;
  }
  return false;
}

std::string canonical_shape(const std::string& text) {
  if (text == kGivenAxisValue) return text;
  if (is_workload(text)) {  // a layer of the failing workload, by name
    check_run_option("--shapes: " + text, "--workload", text);
    return text;
  }
  const auto d = parse_shape(text);
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  RunSpec spec;
  spec.batch = d[0], spec.heads = d[1], spec.q_len = d[2], spec.kv_len = d[3], spec.head_dim = d[4];
  validated("--shapes: " + s, spec);
  return s;
}

std::string canonical_fix(const std::string& value) {
  if (value == "off" || value == "none") return "off";
  if (value == "on" || value == "all") return value;
  std::string list = value;
  std::replace(list.begin(), list.end(), '+', ',');
  FixSet set;
  try {
    set = parse_fix_list(list);
  } catch (const InputError&) {
    set = FixSet();
  }
  if (set.empty()) throw InputError("--fix: '" + value + "' is not off, on, all or fix numbers joined by '+' (e.g. 1+3)");
  std::string canonical = set.str();
  std::replace(canonical.begin(), canonical.end(), ',', '+');
  return canonical;
}

// Canonicalises each value of one axis and rejects empty axes and repeats.
template <typename T, typename F> void canonicalise(std::vector<T>& values, const std::string& option, F&& canonical) {
  if (values.empty()) throw InputError(option + ": the list is empty");
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = canonical(values[i]);
    if (std::find(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(i), values[i]) != values.begin() + static_cast<std::ptrdiff_t>(i)) {
      std::ostringstream v;
      v << values[i];
      throw InputError(option + ": '" + v.str() + "' is listed twice");
    }
  }
}

// A string axis whose values are those of one run option (--dtypes -> --dtype).
void canonicalise_run_option(std::vector<std::string>& values, const std::string& option, const std::string& run_option) {
  canonicalise(values, option, [&](const std::string& v) {
    check_run_option(option, run_option, v);
    return v;
  });
}

void check_count(int n, const std::string& option) {
  if (n < 1) throw InputError(option + ": must be at least 1 (got " + std::to_string(n) + ")");
}

}  // namespace

std::vector<std::string> split_axis_list(const std::string& text, const std::string& option) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (items.back().empty()) throw InputError(option + ": empty item in '" + text + "'");
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::string SweepCell::key() const {
  return "scenario=" + std::to_string(scenario) + " fix=" + fix + " dtype=" + dtype + " precision=" + precision +
         " shape=" + shape + " alloc=" + alloc + " stream=" + stream +
         // A rung of the context ladder is part of the key where there is one: a sweep of the isolated
         // call keeps the keys it always had, so --resume and --merge read older sweeps.
         (context == "isolated" ? std::string() : " context=" + context) + " iters=" + std::to_string(iters) +
         " repeat=" + std::to_string(repeat);
}

RunSpec SweepCell::run_spec() const {
  RunSpec axes;
  axes.scenario = scenario;
  if (fix == "on") {
    // Scenario 0 has no fix of its own; its "fixed" row applies all of them.
    (scenario == 0 ? axes.fixes : axes.fix) = scenario == 0 ? "all" : "on";
  } else if (fix != "off") {
    std::string list = fix;
    std::replace(list.begin(), list.end(), '+', ',');
    axes.fixes = list;
  }
  if (dtype != kGivenAxisValue) axes.dtype = dtype;
  axes.precision = precision;
  if (shape == kGivenAxisValue) {
    // the cell options' shape
  } else if (is_workload(shape)) {
    axes.workload = shape;
  } else {
    const auto d = parse_shape(shape);
    axes.batch = d[0], axes.heads = d[1], axes.q_len = d[2], axes.kv_len = d[3], axes.head_dim = d[4];
  }
  axes.alloc = alloc;
  if (stream != "default") axes.stream = stream;
  ContextLadderValues values;
  values.scenario = scenario;
  if (is_workload(shape)) values.layers = "model";
  values.steps = iters;
  for (const ContextRung& rung : context_ladder(values)) {
    if (rung.name == context) axes.overlay(rung.adds);
  }
  // The steps rung and those above it count steps, not --iters.
  if (!axes.steps) axes.iters = iters;
  axes.check = true;
  for (const std::string& option : run_option_names()) {
    if (axes.given(option) && options.given(option)) {
      throw InputError("the cell option " + option + " is set by the sweep's axes (a captured call's shape and dtype are "
                       "the axes' value \"given\")");
    }
  }
  axes.overlay(options);
  return axes;
}

std::vector<std::string> SweepCell::run_args() const { return run_spec().to_argv(); }

void canonicalise_axes(SweepAxes& a) {
  canonicalise(a.scenarios, "--scenarios", [](int s) { return scenario_info(s).number; });
  canonicalise(a.fixes, "--fix", canonical_fix);
  canonicalise(a.dtypes, "--dtypes", [](const std::string& v) {
    if (v != kGivenAxisValue) check_run_option("--dtypes", "--dtype", v);
    return v;
  });
  canonicalise_run_option(a.precisions, "--precisions", "--precision");
  canonicalise(a.shapes, "--shapes", canonical_shape);
  canonicalise_run_option(a.allocs, "--allocs", "--alloc");
  canonicalise(a.streams, "--streams", [](const std::string& v) {
    if (v != "default") check_run_option("--streams", "--stream", v);
    return v;
  });
  canonicalise(a.contexts, "--contexts", [](const std::string& c) {
    const auto names = context_rung_names();
    if (std::find(names.begin(), names.end(), c) == names.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw InputError("--contexts: '" + c + "' is not a rung of the context ladder (" + list + ")");
    }
    return c;
  });
  check_count(a.iters, "--iters");
  check_count(a.repeats, "--repeats");
}

std::vector<SweepCell> expand_matrix(SweepAxes a, int* left_out, std::string* left_out_why) {
  canonicalise_axes(a);
  // Counted before anything is built: --repeats 100000000 must be an error, not an exhausted host.
  double planned = static_cast<double>(a.repeats);
  for (size_t n : {a.scenarios.size(), a.fixes.size(), a.dtypes.size(), a.precisions.size(), a.shapes.size(),
                   a.allocs.size(), a.streams.size(), a.contexts.size()}) {
    planned *= static_cast<double>(n);
  }
  if (planned > kMaxSweepCells) {
    throw InputError("the matrix has " + std::to_string(static_cast<long long>(planned)) + " cells, more than " +
                     std::to_string(kMaxSweepCells) + " (fewer repeats, or split it into several sweeps)");
  }
  RunSpec options;
  try {
    options = parse_run_spec(a.cell_options, RunCommand::run, false);  // each cell's run replays the call
  } catch (const InputError& e) {
    throw InputError(std::string("cell options: ") + e.what());
  }
  std::vector<SweepCell> cells;
  int skipped = 0;
  std::string why;
  for (int scenario : a.scenarios)
    for (const auto& fix : a.fixes)
      for (const auto& dtype : a.dtypes)
        for (const auto& precision : a.precisions)
          for (const auto& shape : a.shapes)
            for (const auto& alloc : a.allocs)
              for (const auto& stream : a.streams)
                for (const auto& context : a.contexts)
                for (int repeat = 0; repeat < a.repeats; ++repeat) {
                  SweepCell c;
                  c.index = static_cast<int>(cells.size());
                  c.scenario = scenario;
                  c.fix = fix;
                  c.dtype = dtype;
                  c.precision = precision;
                  c.shape = shape;
                  c.alloc = alloc;
                  c.stream = stream;
                  c.context = context;
                  c.iters = a.iters;
                  c.repeat = repeat;
                  c.options = options;
                  const RunOptions run = validated("cell " + c.key(), c.run_spec());
                  const std::string not_a_cell = !run.caveats.empty() ? run.caveats.front()
                                                 : !a.keep_waived         ? run.waiver
                                                                          : "";
                  if (!not_a_cell.empty()) {
                    if (why.empty()) why = c.key() + ": " + not_a_cell;
                    ++skipped;
                    continue;
                  }
                  c.fix_list = run.fixes.str();
                  cells.push_back(c);
                }
  if (cells.empty() && skipped) {
    throw InputError("no cell of the matrix can show its scenario's hypothesis (--keep-waived keeps the waived ones): " + why);
  }
  if (left_out) *left_out = skipped;
  if (left_out_why) *left_out_why = why;
  return cells;
}

SweepAxes read_matrix_file(const std::string& path) {
  const auto text = read_file(path);
  if (!text) throw InputError("--matrix: cannot read " + path);
  return parse_matrix(*text, path);
}

SweepAxes parse_matrix(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("--matrix " + path + ": not JSON: " + one_line(e.what()));
  }
  if (!j.is_object()) throw InputError("--matrix " + path + ": expected a JSON object of axes");
  SweepAxes a;
  const std::string where = "--matrix " + path + ": ";
  auto strings = [&](const std::string& key, std::vector<std::string>& out) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    const bool ok = v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_string(); });
    if (!ok) throw InputError(where + "\"" + key + "\" must be a non-empty list of strings");
    out = v.template get<std::vector<std::string>>();
  };
  auto count = [&](const std::string& key, int& out) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 100000000) {
      throw InputError(where + "\"" + key + "\" must be an integer >= 1");
    }
    out = v.get<int>();
  };
  const std::vector<std::string> keys{"scenarios", "fix",      "dtypes",      "precisions", "shapes",      "allocs",
                                      "streams",   "contexts", "keep_waived", "iters",      "repeats",     "cell_options"};
  for (const auto& item : j.items()) {
    if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) {
      throw InputError(where + "unknown key \"" + item.key() +
                       "\" (expected scenarios, fix, dtypes, precisions, shapes, allocs, streams, contexts, keep_waived, iters, "
                       "repeats, cell_options)");
    }
  }
  if (j.contains("scenarios")) {
    const auto& v = j.at("scenarios");
    const bool ok = v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_number_integer(); });
    if (!ok) throw InputError(where + "\"scenarios\" must be a non-empty list of integers");
    a.scenarios.clear();
    for (const auto& x : v) {
      // Compared as JSON numbers, so 2^64 - 1 is not read as -1 first.
      if (x < 0 || x >= scenario_count()) {
        throw InputError(where + "\"scenarios\": " + x.dump() + " is not a scenario (expected " + scenario_range() + ")");
      }
      a.scenarios.push_back(x.get<int>());
    }
  }
  strings("fix", a.fixes);
  strings("dtypes", a.dtypes);
  strings("precisions", a.precisions);
  strings("shapes", a.shapes);
  strings("allocs", a.allocs);
  strings("streams", a.streams);
  strings("contexts", a.contexts);
  count("iters", a.iters);
  count("repeats", a.repeats);
  if (j.contains("cell_options")) {
    const auto& v = j.at("cell_options");
    const bool ok = v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_string(); });
    if (!ok) throw InputError(where + "\"cell_options\" must be a list of strings");
    a.cell_options = v.get<std::vector<std::string>>();
  }
  if (j.contains("keep_waived")) {
    if (!j.at("keep_waived").is_boolean()) throw InputError(where + "\"keep_waived\" must be true or false");
    a.keep_waived = j.at("keep_waived").get<bool>();
  }
  try {
    canonicalise_axes(a);
  } catch (const InputError& e) {
    throw InputError(where + e.what());
  }
  return a;
}

std::string SweepShard::str() const { return std::to_string(index) + "/" + std::to_string(count); }

SweepShard parse_shard(const std::string& text) {
  const std::string why = "--shard: '" + text + "' is not K/N with 1 <= K <= N <= " + std::to_string(kMaxSweepShards) +
                          " (e.g. 2/4: the second of four slices)";
  const size_t slash = text.find('/');
  if (slash == std::string::npos) throw InputError(why);
  auto number = [&](const std::string& item) {
    const bool digits = !item.empty() && item.size() <= 5 &&
                        std::all_of(item.begin(), item.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!digits) throw InputError(why);
    return std::stoi(item);
  };
  SweepShard shard;
  shard.index = number(text.substr(0, slash));
  shard.count = number(text.substr(slash + 1));
  if (shard.index < 1 || shard.index > shard.count || shard.count > kMaxSweepShards) throw InputError(why);
  return shard;
}

constexpr int64_t kProcessStartCost = 5000000000;

int64_t expected_run_cost(const SdpaProblem& p) { return kProcessStartCost + 4 * p.score_elems() * p.head_dim; }

int64_t expected_cell_cost(const SweepCell& cell) {
  if (cell.shape == kGivenAxisValue) return expected_run_cost(validated("cell " + cell.key(), cell.run_spec()).problem);
  if (is_workload(cell.shape)) return expected_run_cost(find_workload(cell.shape).problem);
  const auto d = parse_shape(cell.shape);
  return kProcessStartCost + 4 * d[0] * d[1] * d[2] * d[3] * d[4];
}

std::vector<SweepCell> shard_cells(const std::vector<SweepCell>& cells, SweepShard shard) {
  if (shard.whole()) return cells;
  auto fnv1a = [](const std::string& text) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
    return h;
  };
  struct Deal {
    int64_t cost;
    uint64_t hash;
    size_t position;
  };
  std::vector<Deal> order;
  for (size_t i = 0; i < cells.size(); ++i) order.push_back({expected_cell_cost(cells[i]), fnv1a(cells[i].key()), i});
  std::sort(order.begin(), order.end(), [](const Deal& a, const Deal& b) {
    if (a.cost != b.cost) return a.cost > b.cost;
    if (a.hash != b.hash) return a.hash < b.hash;
    return a.position < b.position;
  });
  std::vector<int64_t> load(static_cast<size_t>(shard.count), 0);
  std::vector<bool> mine(cells.size(), false);
  for (const Deal& d : order) {
    const size_t least = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[least] += d.cost;
    mine[d.position] = least + 1 == static_cast<size_t>(shard.index);
  }
  std::vector<SweepCell> out;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (mine[i]) out.push_back(cells[i]);
  }
  return out;
}

nlohmann::json axes_to_json(const SweepAxes& a) {
  nlohmann::json j = {{"scenarios", a.scenarios}, {"fix", a.fixes},     {"dtypes", a.dtypes},   {"precisions", a.precisions},
                      {"shapes", a.shapes},       {"allocs", a.allocs}, {"streams", a.streams}, {"contexts", a.contexts},
                      {"keep_waived", a.keep_waived}, {"iters", a.iters}, {"repeats", a.repeats}};
  if (!a.cell_options.empty()) j["cell_options"] = a.cell_options;  // only where given: older documents have none
  return j;
}

nlohmann::json cell_axes_to_json(const SweepCell& c) {
  return {{"scenario", c.scenario}, {"fix", c.fix},       {"fix_list", c.fix_list}, {"dtype", c.dtype},
          {"precision", c.precision}, {"shape", c.shape}, {"alloc", c.alloc},       {"stream", c.stream},
          {"context", c.context},   {"iters", c.iters},   {"repeat", c.repeat}};
}

nlohmann::json shard_to_json(SweepShard shard) { return {{"index", shard.index}, {"count", shard.count}}; }

SweepShard shard_from_json(const nlohmann::json& matrix) {
  if (!matrix.is_object() || !matrix.contains("shard")) return SweepShard{};
  const auto& j = matrix.at("shard");
  const bool ok = j.is_object() && j.contains("index") && j.contains("count") && j.at("index").is_number_integer() &&
                  j.at("count").is_number_integer();
  // Through parse_shard, so a document's shard meets the command line's bounds.
  if (!ok) throw InputError("\"shard\" is not {\"index\": K, \"count\": N}");
  return parse_shard(j.at("index").dump() + "/" + j.at("count").dump());
}

SweepAxes axes_from_document_matrix(const nlohmann::json& matrix, const std::string& path) {
  if (!matrix.is_object()) throw InputError(path + ": no \"matrix\" object");
  nlohmann::json axes = nlohmann::json::object();
  const nlohmann::json names = axes_to_json(SweepAxes{});  // named, so it outlives the loop
  for (const auto& [key, value] : names.items()) {
    if (!matrix.contains(key) && key == "contexts") continue;  // a sweep from before the axis: the isolated call
    if (!matrix.contains(key) && key == "keep_waived") {       // from before: its waived cells were cells
      axes[key] = true;
      continue;
    }
    if (!matrix.contains(key)) throw InputError(path + ": its matrix has no \"" + key + "\"");
    axes[key] = matrix.at(key);
  }
  if (matrix.contains("cell_options")) axes["cell_options"] = matrix.at("cell_options");
  try {
    return parse_matrix(axes.dump(), path);
  } catch (const InputError& e) {  // its words name --matrix: say it is the document's matrix
    const std::string prefix = "--matrix " + path + ": ";
    const std::string message = e.what();
    throw InputError(path + ": its matrix: " + (message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message));
  }
}

std::string matrix_difference(const SweepAxes& a_axes, SweepShard a_shard, const SweepAxes& b_axes, SweepShard b_shard,
                              const std::string& a_name, const std::string& b_name) {
  auto shown = [](const nlohmann::json& value) {
    if (value.is_string()) return value.get<std::string>();
    if (!value.is_array()) return value.dump();
    std::string s;
    for (const auto& v : value) s += (s.empty() ? "" : ",") + (v.is_string() ? v.get<std::string>() : v.dump());
    return s;
  };
  const nlohmann::json a = axes_to_json(a_axes), b = axes_to_json(b_axes);
  // Over the keys of both: one that only one has (cell_options) is given as "none" in the other.
  nlohmann::json keys = a;
  keys.update(b);
  for (const auto& item : keys.items()) {
    const std::string& key = item.key();
    const nlohmann::json none = "none";
    const nlohmann::json& in_a = a.contains(key) ? a.at(key) : none;
    const nlohmann::json& in_b = b.contains(key) ? b.at(key) : none;
    if (in_a != in_b) return key + " " + shown(in_a) + " " + a_name + ", " + shown(in_b) + " " + b_name;
  }
  if (!(a_shard == b_shard)) return "shard " + a_shard.str() + " " + a_name + ", " + b_shard.str() + " " + b_name;
  return "";
}

}  // namespace sdpa
