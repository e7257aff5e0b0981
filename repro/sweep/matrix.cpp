// matrix.cpp
#include "repro/sweep/matrix.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include "fixes/fix_list.h"
#include "math_sdpa/errors.h"
#include "repro/cli/run_options.h"
#include "repro/common/text.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"

namespace sdpa {

namespace {

// Parses `repro <args>` the way a plain run would; returns the options, or throws InputError
// with repro's own message after `context`.
RunOptions parse_as_repro(const std::string& context, std::vector<std::string> args) {
  args.insert(args.begin(), "repro");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  const ParseResult r = parse_command_line(static_cast<int>(argv.size()), argv.data());
  if (!r.run) {
    const std::string prefix = "repro: error: ";
    const std::string message = r.message.rfind(prefix, 0) == 0 ? r.message.substr(prefix.size()) : r.message;
    throw InputError(context + ": " + message);
  }
  return r.options;
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
  if (is_workload(text)) {  // a layer of the failing workload, by name
    parse_as_repro("--shapes: " + text, {"--workload", text});
    return text;
  }
  const auto d = parse_shape(text);
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  parse_as_repro("--shapes: " + s, {"-b", std::to_string(d[0]), "--heads", std::to_string(d[1]), "-L",
                                     std::to_string(d[2]), "-S", std::to_string(d[3]), "-E", std::to_string(d[4])});
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
    parse_as_repro(option, {run_option, v});
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
         " shape=" + shape + " alloc=" + alloc + " stream=" + stream + " iters=" + std::to_string(iters) +
         " repeat=" + std::to_string(repeat);
}

std::vector<std::string> SweepCell::run_args() const {
  std::vector<std::string> args{"--scenario", std::to_string(scenario)};
  if (fix == "on") {
    // Scenario 0 has no fix of its own; its "fixed" row applies all four.
    args.insert(args.end(), {scenario == 0 ? "--fixes" : "--fix", scenario == 0 ? "all" : "on"});
  } else if (fix != "off") {
    std::string list = fix;
    std::replace(list.begin(), list.end(), '+', ',');
    args.insert(args.end(), {"--fixes", list});
  }
  args.insert(args.end(), {"--dtype", dtype, "--precision", precision});
  if (is_workload(shape)) {
    args.insert(args.end(), {"--workload", shape});
  } else {
    const auto d = parse_shape(shape);
    args.insert(args.end(), {"-b", std::to_string(d[0]), "--heads", std::to_string(d[1]), "-L", std::to_string(d[2]), "-S",
                             std::to_string(d[3]), "-E", std::to_string(d[4])});
  }
  args.insert(args.end(), {"--alloc", alloc, "--stream", stream, "--iters", std::to_string(iters), "--check"});
  return args;
}

void canonicalise_axes(SweepAxes& a) {
  canonicalise(a.scenarios, "--scenarios", [](int s) {
    if (s < 0 || s >= kScenarioCount) {
      throw InputError("--scenarios: " + std::to_string(s) + " is not a scenario (expected 0-" + std::to_string(kScenarioCount - 1) + ")");
    }
    return s;
  });
  canonicalise(a.fixes, "--fix", canonical_fix);
  canonicalise_run_option(a.dtypes, "--dtypes", "--dtype");
  canonicalise_run_option(a.precisions, "--precisions", "--precision");
  canonicalise(a.shapes, "--shapes", canonical_shape);
  canonicalise_run_option(a.allocs, "--allocs", "--alloc");
  canonicalise_run_option(a.streams, "--streams", "--stream");
  check_count(a.iters, "--iters");
  check_count(a.repeats, "--repeats");
}

std::vector<SweepCell> expand_matrix(SweepAxes a) {
  canonicalise_axes(a);
  // Counted before anything is built: --repeats 100000000 must be an error, not an exhausted host.
  double planned = static_cast<double>(a.repeats);
  for (size_t n : {a.scenarios.size(), a.fixes.size(), a.dtypes.size(), a.precisions.size(), a.shapes.size(),
                   a.allocs.size(), a.streams.size()}) {
    planned *= static_cast<double>(n);
  }
  if (planned > kMaxSweepCells) {
    throw InputError("the matrix has " + std::to_string(static_cast<long long>(planned)) + " cells, more than " +
                     std::to_string(kMaxSweepCells) + " (fewer repeats, or split it into several sweeps)");
  }
  std::vector<SweepCell> cells;
  for (int scenario : a.scenarios)
    for (const auto& fix : a.fixes)
      for (const auto& dtype : a.dtypes)
        for (const auto& precision : a.precisions)
          for (const auto& shape : a.shapes)
            for (const auto& alloc : a.allocs)
              for (const auto& stream : a.streams)
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
                  c.iters = a.iters;
                  c.repeat = repeat;
                  c.fix_list = parse_as_repro("cell " + c.key(), c.run_args()).fixes.str();
                  cells.push_back(c);
                }
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
  const std::vector<std::string> keys{"scenarios", "fix", "dtypes", "precisions", "shapes", "allocs", "streams", "iters", "repeats"};
  for (const auto& item : j.items()) {
    if (std::find(keys.begin(), keys.end(), item.key()) == keys.end()) {
      throw InputError(where + "unknown key \"" + item.key() +
                       "\" (expected scenarios, fix, dtypes, precisions, shapes, allocs, streams, iters, repeats)");
    }
  }
  if (j.contains("scenarios")) {
    const auto& v = j.at("scenarios");
    const bool ok = v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_number_integer(); });
    if (!ok) throw InputError(where + "\"scenarios\" must be a non-empty list of integers");
    a.scenarios.clear();
    for (const auto& x : v) {
      // Compared as JSON numbers, so 2^64 - 1 is not read as -1 first.
      if (x < 0 || x >= kScenarioCount) {
        throw InputError(where + "\"scenarios\": " + x.dump() + " is not a scenario (expected 0-" + std::to_string(kScenarioCount - 1) + ")");
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
  count("iters", a.iters);
  count("repeats", a.repeats);
  try {
    canonicalise_axes(a);
  } catch (const InputError& e) {
    throw InputError(where + e.what());
  }
  return a;
}

nlohmann::json axes_to_json(const SweepAxes& a) {
  return {{"scenarios", a.scenarios}, {"fix", a.fixes},   {"dtypes", a.dtypes}, {"precisions", a.precisions},
          {"shapes", a.shapes},       {"allocs", a.allocs}, {"streams", a.streams}, {"iters", a.iters},
          {"repeats", a.repeats}};
}

nlohmann::json cell_axes_to_json(const SweepCell& c) {
  return {{"scenario", c.scenario}, {"fix", c.fix},       {"fix_list", c.fix_list}, {"dtype", c.dtype},
          {"precision", c.precision}, {"shape", c.shape}, {"alloc", c.alloc},       {"stream", c.stream},
          {"iters", c.iters},       {"repeat", c.repeat}};
}

}  // namespace sdpa
