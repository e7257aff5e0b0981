// test_sweep.cpp: `repro sweep`. Matrix expansion from the defaults, the command line
// and matrix files; bad axes and files (exit 2, one line); --dry-run against the committed
// schema (results/sweep.schema.json); the outcome of every way a cell's process can end, with a
// fake child (sweep_fake_child.cpp) run by the real repro binary; the per-cell deadline; resume
// after SIGINT, after SIGKILL and over a truncated JSON-lines file, and refused under another
// matrix; one worker per GPU; the stop at the first cell without a GPU (and the ladder's);
// shards and their merge; the SVG; and the schema validator and the XML checker the tests rely on.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "json_schema_check.h"
#include "run_program.h"
#include "parse_words.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/softmax_plan.h"
#include "repro/common/text.h"
#include "repro/run/run_json.h"
#include "repro/run/outcome.h"
#include "repro/sweep/cell_runner.h"
#include "repro/sweep/matrix.h"
#include "repro/sweep/sweep_options.h"
#include "repro/sweep/sweep_output.h"
#include "scenarios/scenario.h"
#include "scenarios/workload.h"
#include "fixes/fix_list.h"

using namespace sdpa;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using test_util::lines_of;
using test_util::now_s;
using test_util::TempDir;

std::string read_text(const std::string& path) { return sdpa::read_file(path).value_or(""); }

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::vector<json> read_jsonl_lines(const std::string& path) {
  std::vector<json> records;
  for (const auto& line : lines_of(read_text(path))) records.push_back(json::parse(line));
  return records;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

using Env = std::vector<std::pair<std::string, std::string>>;

struct Started {
  pid_t pid = -1;
  double start_s = 0;
  std::string out_path, err_path;
};

struct Ran {
  int exit_code = -1;  // -1: died from a signal
  std::string out, err;
  double seconds = 0;
};

// Starts `program` in `dir` with `env` added to a clean environment for the sweep (no
// CUDA_VISIBLE_DEVICES unless given); stdout and stderr go to files.
Started start_program(const std::string& program, const std::vector<std::string>& args, const Env& env, const std::string& dir) {
  static int runs = 0;
  Started s;
  s.out_path = "/tmp/sdpa_sweep_test_" + std::to_string(getpid()) + "_" + std::to_string(++runs) + ".out";
  s.err_path = s.out_path + ".err";
  std::vector<std::string> argv{program};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (auto& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  std::fflush(nullptr);  // or the child would write the test runner's buffered output again
  s.start_s = now_s();
  s.pid = fork();
  REQUIRE(s.pid >= 0);
  if (s.pid == 0) {
    for (int sig : {SIGTERM, SIGINT, SIGSEGV, SIGABRT}) signal(sig, SIG_DFL);
    if (chdir(dir.c_str()) != 0) _exit(126);
    for (const char* name : {"CUDA_VISIBLE_DEVICES", "SWEEP_FAKE", "SWEEP_FAKE_LOG"}) unsetenv(name);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    const int out = open(s.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(s.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) _exit(126);
    execv(c_argv[0], c_argv.data());
    _exit(127);
  }
  return s;
}

// The real repro binary.
Started start_repro(const std::vector<std::string>& args, const Env& env, const std::string& dir) {
  return start_program(SDPA_REPRO_BINARY, args, env, dir);
}

Ran finish(const Started& s, double limit_s = 60) {
  Ran r;
  int status = 0;
  while (waitpid(s.pid, &status, WNOHANG) != s.pid) {
    if (now_s() - s.start_s > limit_s) {
      kill(s.pid, SIGKILL);
      waitpid(s.pid, &status, 0);
      FAIL("repro did not return within ", limit_s, " s");
    }
    usleep(2000);
  }
  r.seconds = now_s() - s.start_s;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(s.out_path);
  r.err = read_text(s.err_path);
  std::remove(s.out_path.c_str());
  std::remove(s.err_path.c_str());
  return r;
}

Ran run_repro(const std::vector<std::string>& args, const Env& env, const std::string& dir) {
  return finish(start_repro(args, env, dir));
}

// The axes of a small matrix: the given scenarios and allocations, one value of every other axis.
std::vector<std::string> small_matrix(const std::string& scenarios, const std::string& allocs) {
  return {"--scenarios", scenarios, "--fix", "off", "--dtypes", "bf16", "--shapes", "2x8x128x1152x64", "--allocs", allocs};
}

std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The SVG without its tooltips: what the picture shows.
std::string visible_text(std::string svg) {
  for (size_t at; (at = svg.find("<title>")) != std::string::npos;) svg.erase(at, svg.find("</title>", at) + 8 - at);
  return svg;
}

// `repro sweep` with the fake child and the given options; one worker and a 5 s deadline unless
// they say otherwise.
// The fake child's behaviours include "waived", planned per scenario and memory: the sweep keeps the
// combinations a waiver rules out as cells (--keep-waived) unless a matrix file decides.
std::vector<std::string> sweep_args(const std::string& json_path, std::vector<std::string> options) {
  std::vector<std::string> a{"sweep", "--repro-binary", SWEEP_TEST_FAKE_CHILD, "--stage-timeout", "0.2", "--iters", "1",
                             "--json", json_path};
  a.insert(a.end(), options.begin(), options.end());
  if (std::find(options.begin(), options.end(), "--matrix") == options.end()) a.push_back("--keep-waived");
  for (const auto& [option, value] : {std::pair<const char*, const char*>{"--gpus", "1"}, {"--cell-timeout", "5"}}) {
    if (std::find(options.begin(), options.end(), option) == options.end()) a.insert(a.end(), {option, value});
  }
  return a;
}

const json& schema() {
  static const json s = json::parse(read_text(SWEEP_TEST_SCHEMA));
  return s;
}

void check_valid(const json& doc, const std::string& pointer = "") {
  const auto errors = sdpa_test::schema_errors(schema(), doc, pointer);
  for (const auto& e : errors) MESSAGE("schema: ", e);
  CHECK(errors.empty());
}

// One run of the fake child, from its log.
struct FakeRun {
  std::string options, gpu;
  long long start_us = 0, end_us = -1;
};

std::vector<FakeRun> read_fake_log(const std::string& path, std::vector<int>* grandchildren = nullptr) {
  std::vector<FakeRun> runs;
  std::map<std::string, size_t> by_pid;
  for (const auto& line : lines_of(read_text(path))) {
    std::stringstream s(line);
    std::string kind, t, pid;
    s >> kind >> t;
    if (kind == "grandchild" && grandchildren) grandchildren->push_back(std::stoi(t));
    if (kind == "start") {
      FakeRun r;
      r.start_us = std::stoll(t);
      std::string bar;
      s >> pid >> r.gpu >> bar;
      std::getline(s, r.options);
      r.options.erase(0, r.options.find_first_not_of(' '));
      by_pid[pid] = runs.size();
      runs.push_back(r);
    }
    if (kind == "end") {
      s >> pid;
      runs[by_pid.at(pid)].end_us = std::stoll(t);
    }
  }
  return runs;
}

// The options string the fake child logs for a cell: its command line without "repro".
std::string logged_options(const json& cell) {
  std::string s;
  const auto& cl = cell.at("command_line");
  for (size_t i = 1; i < cl.size(); ++i) s += (i > 1 ? " " : "") + cl[i].get<std::string>();
  return s;
}

size_t runs_of(const std::vector<FakeRun>& runs, const std::string& options) {
  return static_cast<size_t>(std::count_if(runs.begin(), runs.end(), [&](const FakeRun& r) { return r.options == options; }));
}

// The canary's options as the fake child logs them (without --on-hang, like every run's).
std::string canary_options() {
  std::string s;
  const auto args = canary_spec().to_argv();
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--on-hang") {
      ++i;
      continue;
    }
    s += (s.empty() ? "" : " ") + args[i];
  }
  return s;
}

bool process_alive(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z' && text[paren + 2] != 'X';
}

// "" if `xml` is well formed (for what our SVG uses: a declaration, elements, attributes in
// double quotes, character data, entities), else what is wrong.
std::string xml_problem(const std::string& xml) {
  auto bad_text = [](const std::string& t) -> std::string {
    for (size_t i = 0; i < t.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(t[i]);
      if (c == '<') return "a raw '<' in text";
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return "a control character in text";
      if (c == '&') {
        const size_t semi = t.find(';', i);
        if (semi == std::string::npos) return "an '&' without ';'";
        const std::string entity = t.substr(i + 1, semi - i - 1);
        const bool named = entity == "amp" || entity == "lt" || entity == "gt" || entity == "quot" || entity == "apos";
        const bool numeric = entity.size() > 1 && entity[0] == '#' &&
                             std::all_of(entity.begin() + 1, entity.end(), [](char d) { return d >= '0' && d <= '9'; });
        if (!named && !numeric) return "an unknown entity &" + entity + ";";
      }
    }
    return "";
  };
  auto name_ok = [](const std::string& n) {
    return !n.empty() && std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == '_'; });
  };
  std::vector<std::string> open;
  bool root_seen = false;
  size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      const size_t next = xml.find('<', i);
      const std::string text = xml.substr(i, next == std::string::npos ? std::string::npos : next - i);
      if (open.empty() && text.find_first_not_of(" \t\r\n") != std::string::npos) return "text outside the root element";
      const std::string problem = bad_text(text);
      if (!problem.empty()) return problem;
      i = next == std::string::npos ? xml.size() : next;
      continue;
    }
    if (xml.compare(i, 2, "<?") == 0) {
      if (root_seen) return "a declaration after the root";
      const size_t end = xml.find("?>", i);
      if (end == std::string::npos) return "an unterminated declaration";
      i = end + 2;
      continue;
    }
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return "an unterminated tag";
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (!tag.empty() && tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "</" + tag.substr(1) + "> closes nothing open";
      open.pop_back();
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    if (self_closing) tag.pop_back();
    size_t p = tag.find_first_of(" \t\n");
    const std::string name = tag.substr(0, p);
    if (!name_ok(name)) return "a bad element name '" + name + "'";
    std::set<std::string> attributes;
    while (p != std::string::npos && (p = tag.find_first_not_of(" \t\n", p)) != std::string::npos) {
      const size_t eq = tag.find('=', p);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"') return "an attribute without =\"...\" in <" + name + ">";
      const std::string attribute = tag.substr(p, eq - p);
      if (!name_ok(attribute) || !attributes.insert(attribute).second) return "a bad or repeated attribute in <" + name + ">";
      const size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) return "an unterminated attribute in <" + name + ">";
      const std::string problem = bad_text(tag.substr(eq + 2, close - eq - 2));
      if (!problem.empty()) return problem + " (an attribute of <" + name + ">)";
      p = close + 1;
    }
    if (open.empty() && root_seen) return "a second root element";
    root_seen = true;
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> is not closed";
  return root_seen ? "" : "no root element";
}

SweepParseResult parse_sweep(std::vector<std::string> args) {
  args.insert(args.begin(), "sweep");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_sweep_command_line(static_cast<int>(argv.size()), argv.data());
}

std::set<std::string> keys_of(const std::vector<SweepCell>& cells) {
  std::set<std::string> keys;
  for (const auto& c : cells) keys.insert(c.key());
  return keys;
}

bool has_args(const std::vector<std::string>& args, const std::vector<std::string>& sequence) {
  return std::search(args.begin(), args.end(), sequence.begin(), sequence.end()) != args.end();
}

}  // namespace

TEST_SUITE("sweep") {
  TEST_CASE("a JSON-lines file: only its last line may be damaged, and then it is left out with a warning") {
    json record = {{"key", "scenario=0 fix=off"}, {"index", 0}, {"outcome", "pass"}, {"device", nullptr}, {"gpu", nullptr},
                   {"stage", nullptr}, {"error", nullptr}, {"exit_code", 0}, {"signal", nullptr}, {"rel_error", 1e-3},
                   {"call_median_ms", 0.5}, {"wall_seconds", 1.0}};
    record["axes"] = {{"scenario", 0}, {"iters", 5}, {"repeat", 1}, {"fix", "off"}, {"fix_list", "none"}, {"dtype", "bf16"},
                      {"precision", "upcast"}, {"shape", "2x8x128x128x64"}, {"alloc", "managed"}, {"stream", "default"}};
    REQUIRE(cell_record_problem(record).empty());
    json second = record;
    second["index"] = 1;
    second["key"] = "scenario=0 fix=on";
    const std::string good = record.dump() + "\n" + second.dump() + "\n";
    // Whole lines: every record, no warning.
    const JsonlContents whole = parse_jsonl(good, "s.jsonl");
    CHECK(whole.records.size() == 2);
    CHECK_FALSE(whole.dropped_last_line);
    CHECK(whole.warnings.empty());
    // A last line cut short (no end of line), or ended but not JSON, or JSON but no finished cell:
    // left out, said, the lines before it kept.
    for (const std::string& last : {second.dump().substr(0, 40), std::string("{not json}\n"), std::string("{\"key\": 1}\n")}) {
      CAPTURE(last);
      const JsonlContents cut = parse_jsonl(record.dump() + "\n" + last, "s.jsonl");
      CHECK(cut.records.size() == 1);
      CHECK(cut.dropped_last_line);
      REQUIRE(cut.warnings.size() == 1);
      CHECK(cut.warnings[0].find("s.jsonl: line 2 ") == 0);
    }
    // A damaged line before the last is an error naming it: what the sweep found is unknown.
    CHECK_THROWS_WITH_AS(parse_jsonl(record.dump() + "\n{not json}\n" + second.dump() + "\n", "s.jsonl"),
                         doctest::Contains("s.jsonl: line 2 is not JSON (only the last line may be damaged"), InputError);
    // An empty file is no records.
    CHECK(parse_jsonl("", "s.jsonl").records.empty());
  }


  TEST_CASE("the contexts axis: each rung of the context ladder as a cell's options") {
    SweepAxes axes;
    axes.scenarios = {0};
    axes.fixes = {"off"};
    axes.dtypes = {"bf16"};
    axes.shapes = {"2x8x128x1152x64", "qwen-image-512"};
    axes.allocs = {"device"};
    axes.contexts = {"isolated", "layers", "steps"};
    const std::vector<SweepCell> cells = expand_matrix(axes);
    REQUIRE(cells.size() == 6);
    auto args_of = [](const SweepCell& c) {
      std::string s;
      for (const auto& a : c.run_args()) s += " " + a;
      return s;
    };
    CHECK(cells[0].key().find("context") == std::string::npos);  // the isolated call keeps its old key
    CHECK(cells[1].key().find(" context=layers ") != std::string::npos);
    CHECK(args_of(cells[0]).find("--alloc-timing") == std::string::npos);
    CHECK(args_of(cells[1]).find(" --alloc-timing per-call --layers 60 --layers-fit --retain autograd --iters 5") != std::string::npos);
    // The steps rung counts the cell's --iters as steps; every rung below it comes with it.
    CHECK(args_of(cells[2]).find(" --host-load 4 --iters") == std::string::npos);
    CHECK(args_of(cells[2]).find(" --steps 5 --backward") == std::string::npos);
    CHECK(args_of(cells[2]).find(" --steps 5 ") != std::string::npos);
    CHECK(args_of(cells[2]).find(" --host-load 4 ") != std::string::npos);
    CHECK(args_of(cells[2]).find("--iters") == std::string::npos);
    // A workload's layers are its blocks.
    CHECK(args_of(cells[4]).find(" --layers model ") != std::string::npos);
    // The backward rung: the steps, each a training step; still steps, not --iters.
    axes.contexts = {"backward"};
    const std::vector<SweepCell> training = expand_matrix(axes);
    REQUIRE(training.size() == 2);
    CHECK(args_of(training[0]).find(" --steps 5 ") != std::string::npos);
    CHECK(args_of(training[0]).find(" --backward ") != std::string::npos);
    CHECK(args_of(training[0]).find("--iters") == std::string::npos);
    axes.contexts = {"ladder"};
    CHECK_THROWS_WITH_AS(expand_matrix(axes), doctest::Contains("not a rung of the context ladder"), InputError);
    axes.contexts = {"layers", "layers"};
    CHECK_THROWS_AS(expand_matrix(axes), InputError);
    const SweepAxes from_file = parse_matrix(R"({"contexts": ["per-call", "ballast"]})", "m.json");
    CHECK(from_file.contexts == std::vector<std::string>{"per-call", "ballast"});
    CHECK(parse_sweep({"--contexts", "isolated,host-load", "--dry-run"}).options.axes.contexts ==
          std::vector<std::string>{"isolated", "host-load"});
    // A sweep document from before the axis reads as the isolated call.
    nlohmann::json matrix = axes_to_json(SweepAxes{});
    matrix.erase("contexts");
    CHECK(axes_from_document_matrix(matrix, "old.json").contexts == std::vector<std::string>{"isolated"});
    // One from before waived combinations were left out held them as cells: it reads as keeping them,
    // so that --resume and --merge see the matrix that wrote it.
    nlohmann::json before_waivers = axes_to_json(SweepAxes{});
    before_waivers.erase("keep_waived");
    CHECK(axes_from_document_matrix(before_waivers, "old.json").keep_waived);
    before_waivers["keep_waived"] = false;
    CHECK_FALSE(axes_from_document_matrix(before_waivers, "new.json").keep_waived);
  }
  TEST_CASE("cell options: from a matrix file, in every cell's run options, in the document's matrix only when given") {
    auto args_of = [](const SweepCell& c) {
      std::string s;
      for (const auto& a : c.run_args()) s += " " + a;
      return s;
    };
    const SweepAxes axes = parse_matrix(R"({"scenarios": [0], "fix": ["off"], "dtypes": ["bf16"], "shapes": ["2x8x128x128x64"],
                                           "allocs": ["managed"], "cell_options": ["--seed", "7"]})",
                                        "m.json");
    CHECK(axes.cell_options == std::vector<std::string>{"--seed", "7"});
    const auto cells = expand_matrix(axes);
    REQUIRE(cells.size() == 1);
    CHECK(args_of(cells[0]).find(" --seed 7 ") != std::string::npos);
    CHECK(args_of(cells[0]).find(" --check") != std::string::npos);
    CHECK(axes_to_json(axes)["cell_options"] == nlohmann::json({"--seed", "7"}));
    CHECK_FALSE(axes_to_json(SweepAxes{}).contains("cell_options"));  // older documents stay as they were
    CHECK(axes_from_document_matrix(axes_to_json(axes), "s.json").cell_options == axes.cell_options);
    CHECK_THROWS_WITH_AS(parse_matrix(R"({"cell_options": "--seed 7"})", "m.json"),
                         doctest::Contains("\"cell_options\" must be a list of strings"), InputError);
    SweepAxes bad = axes;
    bad.cell_options = {"--seed", "x"};  // checked with each cell, by repro's own parser
    CHECK_THROWS_AS(expand_matrix(bad), InputError);
    // "given": no shape or dtype option of the cell's own.
    SweepAxes given = axes;
    given.shapes = {"given"};
    given.dtypes = {"given"};
    const std::string args = args_of(expand_matrix(given)[0]);
    CHECK(args.find("--dtype") == std::string::npos);
    CHECK(args.find(" -L ") == std::string::npos);
  }
  TEST_CASE("the default matrix: scenarios 0-5 x fix off/on x bf16/fp16/fp32 x managed/device/async x three shapes") {
    // 324 combinations: scenario 2's 18 on rows of 128 keys (the warp softmax) are left out, and
    // without --keep-waived the 168 of scenarios 1-5 on device and async memory, which a waiver
    // rules out: every cell of the default matrix runs.
    int left_out = 0;
    std::string why;
    const std::vector<SweepCell> runnable = expand_matrix(SweepAxes{}, &left_out, &why);
    CHECK(left_out == 18 + 168);
    CHECK(runnable.size() == 138);
    for (const auto& c : runnable) CHECK((c.scenario == 0 || c.alloc == "managed"));
    SweepAxes keep;
    keep.keep_waived = true;
    const std::vector<SweepCell> cells = expand_matrix(keep, &left_out, &why);
    CHECK(left_out == 18);
    CHECK(why.find("scenario=2 ") == 0);
    CHECK(why.find("warp path") != std::string::npos);
    REQUIRE(cells.size() == 306);
    CHECK(keys_of(cells).size() == 306);
    const SweepCell& first = cells.front();
    CHECK(first.key() ==
          "scenario=0 fix=off dtype=bf16 precision=upcast shape=2x8x128x128x64 alloc=managed stream=default iters=5 "
          "repeat=0");
    CHECK(first.fix_list == "none");
    CHECK(cells[1].alloc == "device");  // the last axes vary fastest
    CHECK(cells[3].shape == "2x8x512x1536x64");
    std::map<int, int> per_scenario;
    std::map<std::string, int> per_shape, per_dtype, per_alloc;
    for (const auto& c : cells) {
      CHECK(c.index == &c - cells.data());
      ++per_scenario[c.scenario], ++per_shape[c.shape], ++per_dtype[c.dtype], ++per_alloc[c.alloc];
      const auto args = c.run_args();
      CHECK(has_args(args, {"--check"}));
      CHECK(has_args(args, {"--scenario", std::to_string(c.scenario)}));
      CHECK(has_args(args, {"--alloc", c.alloc}));
      // The default stream axis passes no --stream: each scenario runs on its own (PyTorch's) default.
      CHECK(std::find(args.begin(), args.end(), "--stream") == args.end());
      CHECK(test_util::run_options(args).settings.stream ==
            (c.scenario == 5 ? StreamMode::non_blocking : StreamMode::legacy));
      if (c.fix == "on" && c.scenario == 0) {
        CHECK(has_args(args, {"--fixes", "all"}));  // scenario 0 has no fix of its own
        CHECK(c.fix_list == "all");
      } else if (c.fix == "on") {
        CHECK(has_args(args, {"--fix", "on"}));
        CHECK(c.fix_list == std::to_string(scenario_info(c.scenario).fix_number));
      } else {
        CHECK(c.fix_list == "none");
      }
    }
    CHECK(per_scenario == std::map<int, int>{{0, 54}, {1, 54}, {2, 36}, {3, 54}, {4, 54}, {5, 54}});
    CHECK(per_shape ==
          std::map<std::string, int>{{"2x8x128x128x64", 90}, {"2x8x512x1536x64", 108}, {"1x8x256x2048x64", 108}});
    for (const auto& c : cells) {
      if (c.scenario == 2) CHECK(c.shape != "2x8x128x128x64");
    }
    CHECK(per_dtype.size() == 3);
    CHECK(per_alloc == std::map<std::string, int>{{"managed", 102}, {"device", 102}, {"async", 102}});
    // Every scenario has cells whose rows are longer than the warp softmax's 1024 (the block
    // reduction scenario 2 is about).
    std::set<int> long_rows;
    for (const auto& c : cells) {
      if (c.shape == "1x8x256x2048x64") {
        CHECK(has_args(c.run_args(), {"--kv-len", "2048"}));
        long_rows.insert(c.scenario);
      }
    }
    CHECK(2048 > kSoftmaxWarpRowMaxCols);
    CHECK(long_rows == std::set<int>{0, 1, 2, 3, 4, 5});
  }

  TEST_CASE("a workload layer is a value of the shapes axis, passed to each cell by name") {
    SweepAxes axes;
    axes.scenarios = {2};
    axes.fixes = {"off"};
    axes.dtypes = {"bf16"};
    axes.allocs = {"managed"};
    axes.shapes = {"qwen-image-512", "2x8x128x1152x64"};
    const std::vector<SweepCell> cells = expand_matrix(axes);
    REQUIRE(cells.size() == 2);
    const std::vector<std::string> args = cells[0].run_args();
    CHECK(has_args(args, {"--workload", "qwen-image-512"}));
    CHECK(std::find(args.begin(), args.end(), "-L") == args.end());
    CHECK(find_workload(cells[0].shape).problem.kv_len > kSoftmaxWarpRowMaxCols);
    axes.shapes = {"qwen-image"};
    CHECK_THROWS_WITH_AS(expand_matrix(axes), doctest::Contains("qwen-image-1024|qwen-image-1024-textpad|qwen-image-512"),
                         InputError);
  }

  TEST_CASE("axes on the command line, canonical values, and where the files go") {
    const SweepParseResult r =
        parse_sweep({"--scenarios", "0,2", "--fix", "off,on,all,3+1", "--dtypes", "bf16,fp32", "--precisions",
                     "upcast,native", "--shapes", "2x8x128x1152x64,1x24x4608x4608x128", "--allocs", "managed,device",
                     "--streams", "non-blocking,legacy", "--iters", "3", "--repeats", "2", "--json", "out/s.json",
                     "--keep-waived"});
    REQUIRE_MESSAGE(r.run, r.message);
    const SweepOptions& o = r.options;
    CHECK(o.axes.fixes == std::vector<std::string>{"off", "on", "all", "1+3"});
    CHECK(o.json_path == "out/s.json");
    CHECK(o.jsonl_path == "out/s.jsonl");
    CHECK(o.svg_path == "out/s.svg");
    CHECK(o.axes.keep_waived);
    CHECK_FALSE(parse_sweep({}).options.axes.keep_waived);
    const auto cells = expand_matrix(o.axes);
    CHECK(cells.size() == 2 * 4 * 2 * 2 * 2 * 2 * 2 * 2);
    CHECK(keys_of(cells).size() == cells.size());
    const auto fix13 = std::find_if(cells.begin(), cells.end(), [](const SweepCell& c) { return c.fix == "1+3"; });
    REQUIRE(fix13 != cells.end());
    CHECK(has_args(fix13->run_args(), {"--fixes", "1,3"}));
    CHECK(fix13->fix_list == "1,3");
    const SweepCell& last = cells.back();
    CHECK(last.key() ==
          "scenario=2 fix=1+3 dtype=fp32 precision=native shape=1x24x4608x4608x128 alloc=device stream=legacy iters=3 "
          "repeat=1");
    CHECK(has_args(last.run_args(), {"--batch", "1", "--heads", "24", "--q-len", "4608", "--kv-len", "4608", "--head-dim", "128"}));
    CHECK(has_args(last.run_args(), {"--stream", "legacy", "--iters", "3"}));

    const SweepParseResult defaults = parse_sweep({});
    REQUIRE(defaults.run);
    CHECK(defaults.options.json_path == "sweep-results/sweep.json");
    CHECK(defaults.options.jsonl_path == "sweep-results/sweep.jsonl");
    CHECK(parse_sweep({"--out", "d"}).options.svg_path == "d/sweep.svg");
    CHECK(defaults.options.cell_timeout_s > defaults.options.stage_timeout_s);
  }

  TEST_CASE("a matrix file: the same cells as the same axes on the command line; left-out keys keep their defaults") {
    TempDir dir;
    write_text(dir / "m.json",
               R"({"scenarios": [1, 2], "fix": ["off", "1,3"], "dtypes": ["fp16"], "shapes": ["2x8x128x1152x64"],
                   "allocs": ["managed", "async"], "keep_waived": true, "iters": 2, "repeats": 3})");
    const SweepParseResult file = parse_sweep({"--matrix", dir / "m.json"});
    REQUIRE_MESSAGE(file.run, file.message);
    const SweepParseResult cli = parse_sweep({"--scenarios", "1,2", "--fix", "off,1+3", "--dtypes", "fp16", "--shapes",
                                              "2x8x128x1152x64", "--allocs", "managed,async", "--iters", "2", "--repeats", "3",
                                              "--keep-waived"});
    REQUIRE(cli.run);
    const auto from_file = expand_matrix(file.options.axes);
    CHECK(from_file.size() == 2 * 2 * 1 * 1 * 1 * 2 * 1 * 3);
    CHECK(keys_of(from_file) == keys_of(expand_matrix(cli.options.axes)));
    CHECK(file.options.axes.precisions == std::vector<std::string>{"upcast"});
    CHECK(file.options.axes.streams == std::vector<std::string>{"default"});
  }

  TEST_CASE("bad axis values and bad matrix files: exit 2 with one line") {
    TempDir dir;
    const std::vector<std::vector<std::string>> bad_lines{
        {"--scenarios", std::to_string(scenario_count())}, {"--scenarios", "0,,1"}, {"--scenarios", ""}, {"--scenarios", "1,1"}, {"--scenarios", "x"},
        {"--fix", "maybe"}, {"--fix", std::to_string(fix_count() + 1)}, {"--fix", "1+1"}, {"--fix", "off,none"}, {"--dtypes", "fp8"},
        {"--precisions", "double"}, {"--shapes", "2x8x128x128"}, {"--shapes", "2x8x0x128x64"},
        {"--shapes", "2x8x128x1152x64x1"}, {"--shapes", "axbxcxdxe"}, {"--shapes", "2x8x-1x128x64"},
        {"--shapes", "99999999x99999999x99999999x99999999x64"}, {"--allocs", "gpu"}, {"--allocs", "managed,"},
        {"--streams", "fast"}, {"--iters", "0"}, {"--repeats", "0"}, {"--repeats", "two"}, {"--shard", "0/2"},
        {"--shard", "3/2"}, {"--shard", "1"}, {"--shard", "a/b"}, {"--shard", "1/0"}, {"--shard", "1/2/3"},
        {"--shard", "1/100000"}, {"--shard", "-1/2"}, {"--shard", "/2"}, {"--shard", ""},
        {"--cell-timeout", "1", "--stage-timeout", "5"}, {"--cell-timeout", "0"}, {"--gpus", "0"}, {"--bogus"},
        {"--out", "a", "--json", "b.json"}, {"--matrix", dir / "missing.json"}, {"--matrix", dir / "m.json", "--dtypes", "bf16"}};
    write_text(dir / "m.json", R"({"dtypes": ["bf16"]})");
    const std::vector<std::string> bad_files{
        "not json", "[1, 2]", R"({"dtype": ["bf16"]})", R"({"dtypes": "bf16"})", R"({"dtypes": []})",
        R"({"dtypes": [1]})", R"({"scenarios": ["0"]})", "{\"scenarios\": [" + std::to_string(scenario_count()) + "]}", R"({"scenarios": [0.5]})",
        R"({"iters": 0})", R"({"iters": "3"})", R"({"repeats": 1.5})", R"({"shapes": ["2x8"]})",
        R"({"fix": ["on", "on"]})", R"({"allocs": ["managed", null]})", R"({"streams": [["legacy"]]})"};
    std::vector<std::vector<std::string>> cases = bad_lines;
    for (size_t i = 0; i < bad_files.size(); ++i) {
      const std::string path = dir / ("bad" + std::to_string(i) + ".json");
      write_text(path, bad_files[i]);
      cases.push_back({"--matrix", path});
    }
    for (const auto& args : cases) {
      std::string shown;
      for (const auto& a : args) shown += a + " ";
      CAPTURE(shown);
      const SweepParseResult r = parse_sweep(args);
      CHECK_FALSE(r.run);
      CHECK(r.exit_code == kExitUsage);
      CHECK(r.message.rfind("repro sweep: error: ", 0) == 0);
      CHECK(r.message.find('\n') == std::string::npos);
    }
    // Through the real binary: exit 2, one line on stderr, nothing on stdout, nothing written.
    for (const auto& args : {std::vector<std::string>{"sweep", "--dtypes", "fp8"},
                             std::vector<std::string>{"sweep", "--matrix", dir / "bad2.json"}}) {
      const Ran r = run_repro(args, {}, dir.path);
      CHECK(r.exit_code == 2);
      CHECK(r.out.empty());
      CHECK(lines_of(r.err).size() == 1);
      CHECK(r.err.rfind("repro sweep: error: ", 0) == 0);
    }
    CHECK_FALSE(fs::exists(dir / "sweep-results"));
  }

  TEST_CASE("the committed default sweep in results/ is valid against the schema and consistent with its JSONL") {
    // The recorded GPU sweep (results/h200-2026-11-23/sweep/): the schema must keep
    // accepting it, and the final JSON and the JSON lines must hold the same 180 cells.
    const fs::path folder = fs::path(SWEEP_TEST_SCHEMA).parent_path() / "h200-2026-11-23" / "sweep";
    const json doc = json::parse(read_text((folder / "sweep.json").string()));
    check_valid(doc);
    REQUIRE(doc["cells"].size() == 180);
    std::set<std::string> keys;
    int passed = 0, waived = 0;
    for (const auto& c : doc["cells"]) {
      keys.insert(c["key"].get<std::string>());
      const std::string outcome = c["outcome"];
      passed += outcome == "pass";
      waived += outcome == "waived";
      CHECK_MESSAGE((outcome == "pass" || outcome == "waived"), c["key"]);
    }
    CHECK(keys.size() == 180);
    CHECK(doc["summary"]["outcomes"]["pass"] == passed);
    CHECK(doc["summary"]["outcomes"]["waived"] == waived);
    CHECK(passed + waived == 180);
    const auto lines = read_jsonl_lines((folder / "sweep.jsonl").string());
    std::set<std::string> line_keys;
    for (const auto& line : lines) {
      if (line.contains("key")) line_keys.insert(line["key"].get<std::string>());
    }
    CHECK(line_keys == keys);
  }

  TEST_CASE("--dry-run prints every cell as JSON valid against the schema, and runs nothing") {
    TempDir dir;
    const Ran r = run_repro({"sweep", "--dry-run", "--repro-binary", SWEEP_TEST_FAKE_CHILD, "--gpus", "1"},
                            {{"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path);
    REQUIRE(r.exit_code == 0);
    const json doc = json::parse(r.out);
    check_valid(doc);
    CHECK(doc["meta"]["dry_run"] == true);
    CHECK(doc["meta"]["command_line"] == json({"repro", "sweep", "--dry-run", "--repro-binary", SWEEP_TEST_FAKE_CHILD, "--gpus", "1"}));
    CHECK(doc["matrix"]["cells"] == 138);
    CHECK(doc["matrix"]["left_out"]["count"] == 18 + 168);
    CHECK(doc["matrix"]["keep_waived"] == false);
    CHECK(doc["summary"]["result"] == "PLANNED");
    REQUIRE(doc["cells"].size() == 138);
    for (const auto& c : doc["cells"]) {
      CHECK(c["outcome"] == "planned");
      CHECK(c["command_line"][0] == "repro");
      check_valid(c, "#/$defs/cell");
    }
    CHECK(doc["cells"][137]["key"] ==
          "scenario=5 fix=on dtype=fp32 precision=upcast shape=1x8x256x2048x64 alloc=managed stream=default iters=5 repeat=0");
    CHECK_FALSE(fs::exists(dir / "fake.log"));
    CHECK_FALSE(fs::exists(dir / "sweep-results"));
  }

  TEST_CASE("every way a cell's process can end gets its outcome; the outputs are valid and the SVG well formed") {
    struct Case {
      int scenario;
      const char* alloc;
      const char* behaviour;
      const char* outcome;
      int exit_code;  // -1: null
      const char* stage;  // nullptr: null
      const char* error_part;
    };
    const std::vector<Case> cases{
        {0, "managed", "pass", "pass", 0, nullptr, ""},
        {0, "device", "mismatch", "mismatch", 1, nullptr, "above the bound"},
        {0, "async", "waived", "waived", 6, nullptr, "needs memory that migrates"},
        {0, "host", "cuda_error", "cuda_error", 4, "qk_gemm", "code=700"},
        {0, "system", "refused", "refused", 8, nullptr, "beyond the guard"},
        {1, "managed", "hang", "hang", 3, "softmax", "did not finish"},
        {1, "device", "crash_reported", "crash", 5, "pv_gemm", "signal 11"},
        {1, "async", "wrong_exit", "crash", 1, nullptr, "says exit_code 0"},
        {1, "host", "usage", "usage", 2, nullptr, "a usage error"},
        {1, "system", "exit42", "crash", 42, nullptr, "not one of its exit codes"},
        {2, "managed", "segv", "crash", -1, nullptr, "signal 11"},
        {2, "device", "garbage", "crash", 0, nullptr, "malformed"},
        {2, "async", "no_json", "crash", 0, nullptr, "wrote no JSON"},
        {2, "host", "sleep", "timeout", -1, nullptr, "deadline of 1 s"},
        // Last: a cell that finds no GPU stops the sweep, and here nothing is left to stop.
        {2, "system", "no_gpu", "no_gpu", 7, nullptr, "no usable CUDA GPU"},
    };
    std::string plan;
    for (const auto& c : cases) plan += std::to_string(c.scenario) + "/" + c.alloc + "=" + c.behaviour + ",";
    TempDir dir;
    const auto args = sweep_args(dir / "out/s.json", {"--scenarios", "0,1,2", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                      "2x8x128x1152x64", "--allocs", "managed,device,async,host,system",
                                                      "--cell-timeout", "1"});
    const Ran r = run_repro(args, {{"SWEEP_FAKE", plan}}, dir.path);
    INFO(r.err);
    CHECK(r.exit_code == kExitNoGpu);  // a cell found no GPU: that decides the exit code
    CHECK(r.seconds < 8);

    const json doc = json::parse(read_text(dir / "out/s.json"));
    check_valid(doc);
    const auto lines = read_jsonl_lines(dir / "out/s.jsonl");
    CHECK(lines.size() == cases.size());
    for (const auto& line : lines) check_valid(line, "#/$defs/cell");
    REQUIRE(doc["cells"].size() == cases.size());
    CHECK(doc["summary"]["result"] == "FAILED");
    CHECK(doc["summary"]["cells_done"] == cases.size());
    REQUIRE(doc["devices"].size() == 1);
    CHECK(doc["devices"][0]["name"] == "Fake GPU <&>");
    CHECK(doc["devices"][0]["gpu"].is_null());
    for (const auto& c : cases) {
      CAPTURE(c.behaviour);
      const auto found = std::find_if(doc["cells"].begin(), doc["cells"].end(), [&](const json& cell) {
        return cell["axes"]["scenario"] == c.scenario && cell["axes"]["alloc"] == c.alloc;
      });
      REQUIRE(found != doc["cells"].end());
      const json& cell = *found;
      CHECK(cell["outcome"] == c.outcome);
      CHECK(cell["exit_code"] == (c.exit_code < 0 ? json(nullptr) : json(c.exit_code)));
      CHECK(cell["stage"] == (c.stage ? json(c.stage) : json(nullptr)));
      if (cell["outcome"] != "pass") {
        REQUIRE(cell["error"].is_string());
        CHECK(cell["error"].get<std::string>().find(c.error_part) != std::string::npos);
        CHECK(cell["error"].get<std::string>().find('\n') == std::string::npos);
      }
      CHECK(cell["is_skipped"] == (c.outcome == std::string("waived")));
      CHECK(cell["wall_seconds"].get<double>() >= 0);
    }
    auto cell_of = [&](int scenario, const char* alloc) {
      return *std::find_if(doc["cells"].begin(), doc["cells"].end(), [&](const json& cell) {
        return cell["axes"]["scenario"] == scenario && cell["axes"]["alloc"] == alloc;
      });
    };
    const json pass = cell_of(0, "managed");
    CHECK(pass["error"].is_null());
    CHECK(pass["rel_error"] == 1.5e-3);
    CHECK(pass["tolerance"] == 4e-3);
    CHECK(pass["call_median_ms"] == 0.25);
    CHECK(pass["stage_median_ms"] == json({{"qk_gemm", 0.05}, {"softmax", 0.02}}));
    CHECK(pass["device"] == 0);
    CHECK(cell_of(0, "async")["skip_reason"].get<std::string>().find("needs memory that migrates") != std::string::npos);
    CHECK(cell_of(0, "device")["rel_error"] == 0.5);
    CHECK(cell_of(1, "managed")["classification"].get<std::string>().find("scenario 2") == 0);
    CHECK(cell_of(1, "managed")["call_median_ms"].is_null());  // no call completed
    const json segv = cell_of(2, "managed");
    CHECK(segv["signal"] == SIGSEGV);
    CHECK(std::find(segv["stderr_tail"].begin(), segv["stderr_tail"].end(), "about to crash") != segv["stderr_tail"].end());
    const double slept = cell_of(2, "host")["wall_seconds"];
    CHECK(slept >= 1.0);
    CHECK(slept < 2.0);

    // The table: a row per cell, the footer, the verdict.
    size_t rows = 0;
    for (const auto& line : lines_of(r.out)) rows += !line.empty() && line[0] != '#';
    CHECK(rows == cases.size());
    CHECK(r.out.find("# 15 of 15 cells: 1 passed, 1 waived, 1 mismatched, 1 hung, 1 timed out, 6 crashed, 1 CUDA errors, "
                     "1 usage errors, 1 without a GPU, 1 refused") != std::string::npos);
    CHECK(r.out.find("# Sweep: FAILED") != std::string::npos);
    CHECK(r.err.find("[15/15]") != std::string::npos);  // the progress line

    const std::string svg = read_text(dir / "out/s.svg");
    CHECK(xml_problem(svg) == "");
    CHECK(count_of(svg, "class=\"cell\"") == cases.size());
    CHECK(svg.find(">HANG</text>") != std::string::npos);
    CHECK(svg.find(">softmax [") != std::string::npos);  // the stage, and the number of its reason
    // Nothing but the three outputs and the kept cell logs is left behind (the cells' scratch JSON
    // files are gone); a cell's --log-file is kept unless it passed or was waived.
    std::set<std::string> files, logs, kept;
    for (const auto& entry : fs::directory_iterator(dir / "out")) files.insert(entry.path().filename());
    CHECK(files == std::set<std::string>{"s.json", "s.jsonl", "s.svg", "s.cells"});
    for (const auto& entry : fs::directory_iterator(dir / "out/s.cells")) logs.insert("s.cells/" + entry.path().filename().string());
    for (const auto& cell : doc["cells"]) {
      const bool good = cell["outcome"] == "pass" || cell["outcome"] == "waived";
      CHECK(cell["log_file"].is_null() == good);
      if (!good) kept.insert(cell["log_file"].get<std::string>());
    }
    CHECK(logs == kept);
    CHECK(kept.size() == cases.size() - 2);
  }

  TEST_CASE("stalls: a pass with a stalled call is shown as one, a run whose every call stalled is its own outcome") {
    TempDir dir;
    const auto args = sweep_args(dir / "out/s.json", {"--scenarios", "0", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                      "2x8x128x1152x64", "--allocs", "managed,device,async"});
    const Ran r = run_repro(args, {{"SWEEP_FAKE", "0/managed=stall_pass,0/device=stalled,0/async=pass"}}, dir.path);
    INFO(r.err);
    CHECK(r.exit_code == 1);  // a stalled cell fails the sweep
    const json doc = json::parse(read_text(dir / "out/s.json"));
    check_valid(doc);
    REQUIRE(doc["cells"].size() == 3);
    const json& some = doc["cells"][0];
    CHECK(some["outcome"] == "pass");
    CHECK(some["stall"]["stage"] == "softmax");
    CHECK(some["stall"]["ms"] == 3012.5);
    CHECK(some["stall"]["calls_stalled"] == 1);
    const json& every = doc["cells"][1];
    CHECK(every["outcome"] == "stalled");
    CHECK(every["exit_code"] == 9);
    CHECK(every["stage"] == "softmax");
    CHECK(doc["cells"][2]["stall"].is_null());
    CHECK(r.out.find("1 stalled") != std::string::npos);
    const std::string svg = read_text(dir / "out/s.svg");
    CHECK(xml_problem(svg) == "");
    CHECK(svg.find(">pass, stalled</text>") != std::string::npos);
    CHECK(svg.find(">3.0 s [") != std::string::npos);  // the longest stall, and the number of its reason
    CHECK(svg.find(">STALLED</text>") != std::string::npos);
    CHECK(svg.find("stalled: softmax 3012.5 ms in call 1") != std::string::npos);
  }

  TEST_CASE("a hanging child costs its deadline: the sweep is back within the deadline + 1 s, the group killed") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "2", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "host", "--cell-timeout", "0.5"});
    const Ran r = run_repro(args, {{"SWEEP_FAKE", "2=sleep"}, {"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path);
    CHECK(r.exit_code == 1);
    CHECK(r.seconds <= 1.5);
    const json doc = json::parse(read_text(dir / "s.json"));
    REQUIRE(doc["cells"].size() == 1);
    CHECK(doc["cells"][0]["outcome"] == "timeout");
    std::vector<int> grandchildren;
    read_fake_log(dir / "fake.log", &grandchildren);
    REQUIRE(grandchildren.size() == 1);
    const double until = now_s() + 1;
    while (process_alive(grandchildren[0]) && now_s() < until) usleep(10000);
    CHECK_FALSE(process_alive(grandchildren[0]));  // the whole process group went
  }

  TEST_CASE("after a hang the next cell on that GPU waits for a canary, and says it ran after a hang") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "1,2", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "managed"});
    const Ran r = run_repro(args, {{"SWEEP_FAKE", "1=hang"}, {"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    const auto runs = read_fake_log(dir / "fake.log");
    REQUIRE(runs.size() == 3);
    CHECK(runs[1].options == canary_options());
    CHECK(runs[0].end_us <= runs[1].start_us);  // after the hung cell, before the next one
    CHECK(runs[1].end_us <= runs[2].start_us);
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    REQUIRE(doc["cells"].size() == 2);
    CHECK(doc["cells"][0]["after_hang"].is_null());
    CHECK(doc["cells"][1]["after_hang"] == 0);
    CHECK(doc["cells"][1]["outcome"] == "pass");
    CHECK(doc["summary"]["gpu_checks"] ==
          json::parse(R"([{"gpu": null, "after_cell": 0, "canary": "pass", "retired": false, "reason": null}])"));
    CHECK(r.out.find("retired") == std::string::npos);
    // No canary when no cell is left to run after the hang.
    TempDir last;
    const auto only = sweep_args(last / "s.json", {"--scenarios", "1", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                   "2x8x128x1152x64", "--allocs", "managed"});
    CHECK(run_repro(only, {{"SWEEP_FAKE", "1=hang"}, {"SWEEP_FAKE_LOG", last / "fake.log"}}, last.path).exit_code == 1);
    CHECK(read_fake_log(last / "fake.log").size() == 1);
  }

  TEST_CASE("a failing canary retires the GPU: the cells left are not run, the footer says so, --resume runs them") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "1,2,3", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "managed"});
    const Ran r = run_repro(args, {{"SWEEP_FAKE", "1=hang,canary=cuda_error"}, {"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK(read_fake_log(dir / "fake.log").size() == 2);  // the hung cell and the canary
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    CHECK(doc["cells"].size() == 1);
    CHECK(doc["summary"]["cells_done"] == 1);
    CHECK(doc["summary"]["result"] == "FAILED");
    const json& check = doc["summary"]["gpu_checks"].at(0);
    CHECK(check["retired"] == true);
    CHECK(check["canary"].get<std::string>().find("failed: exit 4 (cuda_error: CUDA error at gemm.cpp:1") == 0);
    CHECK(check["reason"].get<std::string>().find("the canary after cell 0 failed: exit 4") == 0);
    CHECK(r.out.find("# GPU (inherited) retired after cell 0: the canary after cell 0 failed: exit 4") != std::string::npos);
    CHECK(r.out.find("# 2 cells not run: no GPU left") != std::string::npos);
    CHECK(read_jsonl_lines(dir / "s.jsonl").size() == 1);
    // After the GPU is back, --resume runs what was left.
    auto resume = args;
    resume.push_back("--resume");
    const Ran again = run_repro(resume, {{"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path);
    CHECK(again.exit_code == 1);  // the hang stays in the results
    CHECK(json::parse(read_text(dir / "s.json"))["cells"].size() == 3);
    CHECK(read_fake_log(dir / "fake.log").size() == 4);
  }

  TEST_CASE("a hung process that did not die retires its GPU at once, without a canary; the other GPU runs the rest") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "1,2", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "managed,device", "--gpus", "2"});
    const Ran r = run_repro(args, {{"CUDA_VISIBLE_DEVICES", "0,1"}, {"SWEEP_FAKE", "1/managed=hang_stuck,1/device=slow"},
                                   {"SWEEP_FAKE_LOG", dir / "fake.log"}},
                            dir.path);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    CHECK(doc["cells"].size() == 4);
    CHECK(doc["cells"][0]["axes"]["alloc"] == "managed");
    for (const auto& run : read_fake_log(dir / "fake.log")) CHECK(run.options != canary_options());
    int on_retired_gpu = 0;
    for (const auto& cell : doc["cells"]) {
      if (cell["gpu"] != "0") continue;
      ++on_retired_gpu;
      CHECK(cell["stuck_after_kill"] == true);  // only the stuck one ran there
    }
    CHECK(on_retired_gpu == 1);
    const json expected = {{{"gpu", "0"}, {"after_cell", 0}, {"canary", nullptr}, {"retired", true},
                             {"reason", "cell 0's hung process did not die after SIGKILL (stuck in the driver)"}}};
    CHECK(doc["summary"]["gpu_checks"] == expected);
    CHECK(r.out.find("# GPU 0 retired after cell 0: cell 0's hung process did not die after SIGKILL") != std::string::npos);
    CHECK(r.out.find("cells not run") == std::string::npos);
  }

  TEST_CASE("a hung cell's snapshot is linked from its record, the document and the heatmap; its log is kept") {
    TempDir dir;
    const auto args = sweep_args(dir / "out/s.json", {"--scenarios", "1", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                      "2x8x128x1152x64", "--allocs", "managed"});
    const Ran r = run_repro(args, {{"SWEEP_FAKE", "1=hang_snapshot"}}, dir.path);
    CHECK(r.exit_code == 1);
    const json doc = json::parse(read_text(dir / "out/s.json"));
    check_valid(doc);
    const json& cell = doc["cells"].at(0);
    CHECK(cell["snapshot"]["path"] == "s.cells/cell-0.snapshot");
    CHECK(cell["snapshot"]["evidence"].at(0).get<std::string>().find("kernel spin_kernel resident on SM 124") == 0);
    CHECK(fs::exists(dir / "out/s.cells/cell-0.snapshot/snapshot.json"));
    CHECK(cell["log_file"] == "s.cells/cell-0.log");
    CHECK(fs::exists(dir / "out/s.cells/cell-0.log"));
    check_valid(read_jsonl_lines(dir / "out/s.jsonl").at(0), "#/$defs/cell");
    const std::string svg = read_text(dir / "out/s.svg");
    CHECK(xml_problem(svg) == "");
    CHECK(svg.find("<a href=\"s.cells/cell-0.snapshot/snapshot.json\">") != std::string::npos);
    // A second attempt at the cell keeps the first snapshot and takes its own beside it.
    auto forced = args;
    forced.push_back("--force");
    CHECK(run_repro(forced, {{"SWEEP_FAKE", "1=hang_snapshot"}}, dir.path).exit_code == 1);
    CHECK(json::parse(read_text(dir / "out/s.json"))["cells"][0]["snapshot"]["path"] == "s.cells/cell-0.snapshot-2");
  }

  TEST_CASE("a cell whose hang snapshot has begun gets the snapshot's budget on top of its deadline") {
    for (const char* mode : {"snapshot", "kill"}) {
      CAPTURE(mode);
      TempDir dir;
      const auto args = sweep_args(dir / "s.json", {"--scenarios", "1", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                    "2x8x128x1152x64", "--allocs", "managed", "--cell-timeout", "0.5",
                                                    "--snapshot-timeout", "1", "--on-hang", mode});
      const Ran r = run_repro(args, {{"SWEEP_FAKE", "1=snapshot_sleep"}}, dir.path);
      CHECK(r.exit_code == 1);
      const json cell = json::parse(read_text(dir / "s.json"))["cells"].at(0);
      CHECK(cell["outcome"] == "timeout");
      const double wall = cell["wall_seconds"];
      if (std::string(mode) == "snapshot") {
        CHECK(wall >= 0.5 + 1 + 5);  // the budget and the grace for the report
        CHECK(wall < 0.5 + 1 + 5 + 1);
        CHECK(cell["error"].get<std::string>().find("deadline of 0.5 s (and 6 s for its hang snapshot)") != std::string::npos);
        CHECK(cell["snapshot"]["path"] == "s.cells/cell-0.snapshot");
      } else {
        CHECK(wall < 1.5);  // --on-hang kill: no snapshot, no extra time
        CHECK(cell["snapshot"].is_null());
      }
    }
    const SweepParseResult bad = parse_sweep({"--on-hang", "keep"});
    CHECK(bad.exit_code == 2);
    CHECK(bad.message.find("--on-hang") != std::string::npos);
  }

  TEST_CASE("pass and waived only: exit 0 and OK; an existing sweep is kept unless --force or --resume") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "0,2", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "managed"});
    const Env env{{"SWEEP_FAKE", "2=waived"}, {"SWEEP_FAKE_LOG", dir / "fake.log"}};
    const Ran r = run_repro(args, env, dir.path);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("# 2 of 2 cells: 1 passed, 1 waived, 0 mismatched, 0 hung") != std::string::npos);
    CHECK(r.out.find("# Sweep: OK") != std::string::npos);
    const std::string before = read_text(dir / "s.json");

    const Ran again = run_repro(args, env, dir.path);
    CHECK(again.exit_code == 2);
    CHECK(lines_of(again.err).size() == 1);
    CHECK(again.err.find("exists") != std::string::npos);
    CHECK(read_text(dir / "s.json") == before);

    auto forced = args;
    forced.push_back("--force");
    CHECK(run_repro(forced, env, dir.path).exit_code == 0);
    CHECK(read_fake_log(dir / "fake.log").size() == 4);  // both cells ran again
    CHECK(read_jsonl_lines(dir / "s.jsonl").size() == 2);
  }

  TEST_CASE("SIGINT: no new cell starts, the final JSON holds what finished; --resume runs each remaining cell once") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "0,1", "--fix", "off", "--dtypes", "bf16,fp16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "managed,device"});
    const Env env{{"SWEEP_FAKE", "0=slow,1=slow"}, {"SWEEP_FAKE_LOG", dir / "fake.log"}};
    const Started s = start_repro(args, env, dir.path);
    const double until = now_s() + 20;
    while (lines_of(read_text(dir / "s.jsonl")).size() < 2 && now_s() < until) usleep(20000);
    kill(s.pid, SIGINT);
    const Ran r = finish(s);
    CHECK(r.exit_code == 128 + SIGINT);
    CHECK(r.out.find("# Sweep: INCOMPLETE (interrupted") != std::string::npos);
    const auto first = read_jsonl_lines(dir / "s.jsonl");
    CHECK(first.size() >= 2);
    CHECK(first.size() < 8);
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    CHECK(doc["summary"]["interrupted"] == true);
    CHECK(doc["summary"]["result"] == "INCOMPLETE");
    CHECK(doc["cells"].size() == first.size());
    const std::string svg = read_text(dir / "s.svg");
    CHECK(xml_problem(svg) == "");
    CHECK(count_of(svg, "class=\"cell\"") == 8);
    CHECK(svg.find(">not run</text>") != std::string::npos);

    auto resume = args;
    resume.push_back("--resume");
    const Ran resumed = run_repro(resume, env, dir.path);
    CHECK(resumed.exit_code == 0);
    const json done = json::parse(read_text(dir / "s.json"));
    check_valid(done);
    CHECK(done["summary"]["result"] == "OK");
    std::set<std::string> keys;
    for (const auto& c : done["cells"]) keys.insert(c["key"].get<std::string>());
    CHECK(keys.size() == 8);
    CHECK(done["cells"].size() == 8);
    const auto all = read_jsonl_lines(dir / "s.jsonl");
    CHECK(all.size() == 8);
    const auto runs = read_fake_log(dir / "fake.log");
    for (const auto& c : first) CHECK(runs_of(runs, logged_options(c)) == 1);  // finished cells never ran again
    for (const auto& c : all) CHECK(runs_of(runs, logged_options(c)) >= 1);
  }

  // A sweep killed (SIGKILL) while its cell 0 runs, with a process of that cell that outlives it (the
  // fake's "sleep" leaves a grandchild, as repro leaves its GPU child); then resumed as `boot` says.
  // The three ways it can end: the machine stopped (another boot id; the grandchild gone with it),
  // interrupted (same boot, the grandchild gone), stuck (same boot, the grandchild still there).
  TEST_CASE("--resume after SIGKILL: a cell the machine stopped in or only interrupted runs again; a stuck one is a hang") {
    for (const std::string way : {"machine stopped", "interrupted", "stuck"}) {
      CAPTURE(way);
      TempDir dir;
      const auto args = sweep_args(dir / "s.json", small_matrix("0,1", "managed"));
      const Env started{{"SWEEP_FAKE", "0=sleep"}, {"SWEEP_FAKE_LOG", dir / "fake.log"}, {kTestBootIdVariable, "boot-1"}};
      const Started s = start_repro(args, started, dir.path);
      std::vector<int> grandchildren;
      const double until = now_s() + 20;
      while (grandchildren.empty() && now_s() < until) {
        usleep(20000);
        read_fake_log(dir / "fake.log", &grandchildren);
      }
      REQUIRE(grandchildren.size() == 1);
      REQUIRE(fs::exists(dir / ("s.cells/" + cell_process_name(0))));
      kill(s.pid, SIGKILL);
      finish(s);
      if (way != "stuck") {
        kill(grandchildren[0], SIGKILL);  // a reboot, or the cell's processes all gone with the sweep
        const double gone_by = now_s() + 10;
        while (process_alive(grandchildren[0]) && now_s() < gone_by) usleep(10000);
      }
      auto resume = args;
      resume.push_back("--resume");
      const Ran r = run_repro(resume, {{"SWEEP_FAKE_LOG", dir / "fake.log"}, {kTestBootIdVariable, way == "machine stopped" ? "boot-2" : "boot-1"}},
                              dir.path);
      INFO(r.err);
      const json doc = json::parse(read_text(dir / "s.json"));
      check_valid(doc);
      const std::vector<FakeRun> runs = read_fake_log(dir / "fake.log");
      if (way == "machine stopped") {
        CHECK(r.exit_code == 0);
        CHECK(r.err.find("cell 0 was running when the machine stopped (it has booted again since): it runs again, and ") !=
              std::string::npos);
        CHECK(runs.size() == 3);  // cell 0 twice, cell 1
      } else if (way == "interrupted") {
        CHECK(r.exit_code == 0);
        CHECK(r.err.find("cell 0 was interrupted (its process ended without a record on this boot") != std::string::npos);
        CHECK(r.err.find("machine stopped") == std::string::npos);
        CHECK(r.err.find("still there") == std::string::npos);
        CHECK(runs.size() == 3);
      } else {
        // Recorded as a hang, its GPU retired (the only one): cell 1 is not run; the process left as it is.
        CHECK(r.exit_code == 1);
        CHECK(r.err.find("cell 0's process is still there after the sweep that ran it stopped (pid " +
                         std::to_string(grandchildren[0]) + " (sweep_fake_chil") != std::string::npos);
        CHECK(r.err.find("stuck, recorded as a hang, and left as it is; no cell runs on its GPU") != std::string::npos);
        CHECK(runs.size() == 1);
        REQUIRE(doc["cells"].size() == 1);
        const json& cell = doc["cells"][0];
        CHECK(cell["outcome"] == "hang");
        CHECK(cell["stuck_after_kill"] == true);
        CHECK(cell["error"].get<std::string>().find("still there when the sweep was resumed") != std::string::npos);
        CHECK(cell["log_file"] == "s.cells/cell-0.log");
        REQUIRE(doc["summary"]["gpu_checks"].size() == 1);
        CHECK(doc["summary"]["gpu_checks"][0]["retired"] == true);
        CHECK(process_alive(grandchildren[0]));
        // Resumed again: the cell has its record; nothing is asked of its process any more.
        const Ran again = run_repro(resume, {{"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path);
        CHECK(again.err.find("still there") == std::string::npos);
        kill(grandchildren[0], SIGKILL);
      }
      CHECK_FALSE(fs::exists(dir / ("s.cells/" + cell_process_name(0))));
    }
  }

  TEST_CASE("SIGKILL of the sweep and a truncated last line: --resume keeps every finished cell exactly once") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "0,1", "--fix", "off", "--dtypes", "bf16,fp16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "managed,device"});
    const Env env{{"SWEEP_FAKE", "0=slow,1=slow"}, {"SWEEP_FAKE_LOG", dir / "fake.log"}};
    const Started s = start_repro(args, env, dir.path);
    const double until = now_s() + 20;
    // Three cells done and the next one started (its log is there), so that one is in flight.
    auto cell_logs = [&] {
      std::set<int> logs;
      std::error_code absent;
      for (const auto& f : fs::directory_iterator(dir / "s.cells", absent)) {
        const std::string name = f.path().filename().string();
        if (name.rfind("cell-", 0) == 0 && f.path().extension() == ".log") logs.insert(std::stoi(name.substr(5)));
      }
      return logs;
    };
    while ((lines_of(read_text(dir / "s.jsonl")).size() < 3 || cell_logs().empty()) && now_s() < until) usleep(20000);
    kill(s.pid, SIGKILL);
    finish(s);
    // The cells in flight when it died: their logs are there, and no record.
    const std::set<int> in_flight = cell_logs();
    REQUIRE_FALSE(in_flight.empty());
    // The document as the sweep started: its matrix (what --resume checks), no cell yet.
    const json started = json::parse(read_text(dir / "s.json"));
    check_valid(started);
    CHECK(started["cells"].empty());
    CHECK(started["summary"]["result"] == "INCOMPLETE");
    CHECK(started["matrix"]["dtypes"] == json({"bf16", "fp16"}));
    // The machine went down in the middle of a line: the last line loses its end.
    const std::string text = read_text(dir / "s.jsonl");
    const auto finished = lines_of(text);
    REQUIRE(finished.size() >= 3);
    write_text(dir / "s.jsonl", text.substr(0, text.size() - finished.back().size() / 2 - 1));
    const json cut = json::parse(finished.back());

    auto resume = args;
    resume.push_back("--resume");
    const Ran r = run_repro(resume, env, dir.path);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("warning: " + (dir / "s.jsonl") + ": line " + std::to_string(finished.size())) != std::string::npos);
    const auto all = read_jsonl_lines(dir / "s.jsonl");  // every line whole again
    CHECK(all.size() == 8);
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    std::set<std::string> keys;
    for (const auto& c : doc["cells"]) keys.insert(c["key"].get<std::string>());
    CHECK(keys.size() == 8);
    const auto runs = read_fake_log(dir / "fake.log");
    for (size_t i = 0; i + 1 < finished.size(); ++i) CHECK(runs_of(runs, logged_options(json::parse(finished[i]))) == 1);
    CHECK(runs_of(runs, logged_options(cut)) == 2);  // its line was lost, so it ran again
    // A cell in flight ran again, and passed; its log is kept with both runs' records, named by its
    // record and by a line on stderr that says what it was: interrupted (the machine kept running).
    CHECK(r.err.find("froze") == std::string::npos);
    CHECK(r.err.find("machine stopped") == std::string::npos);
    for (const int index : in_flight) {
      CAPTURE(index);
      const std::string log = dir / ("s.cells/cell-" + std::to_string(index) + ".log");
      CHECK(lines_of(read_text(log)).size() == 2);
      CHECK(r.err.find("cell " + std::to_string(index) + " was interrupted (its process ended without a record on this "
                       "boot: the sweep was stopped): it runs again, and ") != std::string::npos);
      for (const auto& c : doc["cells"]) {
        if (c["index"] == index) {
          CHECK(c["outcome"] == "pass");
          CHECK(c["log_file"] == "s.cells/cell-" + std::to_string(index) + ".log");
        }
      }
    }

    // A damaged line before the last is not a truncation: refuse, one line.
    auto lines = lines_of(read_text(dir / "s.jsonl"));
    lines[1] = "{\"key\": ";
    std::string damaged;
    for (const auto& l : lines) damaged += l + "\n";
    write_text(dir / "s.jsonl", damaged);
    const Ran refused = run_repro(resume, env, dir.path);
    CHECK(refused.exit_code == 2);
    CHECK(lines_of(refused.err).size() == 1);
    CHECK(refused.err.find("line 2 is not JSON") != std::string::npos);
  }

  TEST_CASE("several GPUs: one worker per GPU, each child sees its own CUDA_VISIBLE_DEVICES, cells overlap") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "0,1", "--fix", "off", "--dtypes", "bf16,fp16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "managed", "--gpus", "2"});
    const Ran r = run_repro(args, {{"CUDA_VISIBLE_DEVICES", "0,1"}, {"SWEEP_FAKE", "0=slow,1=slow"},
                                   {"SWEEP_FAKE_LOG", dir / "fake.log"}},
                            dir.path);
    CHECK(r.exit_code == 0);
    const auto runs = read_fake_log(dir / "fake.log");
    REQUIRE(runs.size() == 4);
    std::set<std::string> gpus;
    bool overlap = false;
    for (const auto& a : runs) {
      gpus.insert(a.gpu);
      for (const auto& b : runs) overlap |= &a != &b && a.start_us < b.end_us && b.start_us < a.end_us;
    }
    CHECK(gpus == std::set<std::string>{"0", "1"});
    CHECK(overlap);
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    CHECK(doc["matrix"]["workers"] == json({"0", "1"}));
    REQUIRE(doc["devices"].size() == 2);
    std::set<std::string> device_gpus{doc["devices"][0]["gpu"], doc["devices"][1]["gpu"]};
    CHECK(device_gpus == std::set<std::string>{"0", "1"});
  }

  TEST_CASE("--cells-per-gpu 2: two cells at once on one GPU, never more") {
    TempDir dir;
    const auto args = sweep_args(dir / "s.json", {"--scenarios", "0,1,2", "--fix", "off", "--dtypes", "bf16,fp16", "--shapes",
                                                  "2x8x128x1152x64", "--allocs", "managed", "--cells-per-gpu", "2"});
    const Ran r = run_repro(args, {{"CUDA_VISIBLE_DEVICES", "0"}, {"SWEEP_FAKE", "0=slow,1=slow,2=slow"},
                                   {"SWEEP_FAKE_LOG", dir / "fake.log"}},
                            dir.path);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    const auto runs = read_fake_log(dir / "fake.log");
    REQUIRE(runs.size() == 6);
    int most_at_once = 0;
    for (const auto& a : runs) {
      CHECK(a.gpu == "0");
      int at_once = 0;  // the runs going on when `a` started, itself included
      for (const auto& b : runs) at_once += b.start_us <= a.start_us && a.start_us < b.end_us;
      most_at_once = std::max(most_at_once, at_once);
    }
    CHECK(most_at_once == 2);
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    CHECK(doc["matrix"]["workers"] == json({"0", "0"}));
  }

  TEST_CASE("workers come from --gpus and CUDA_VISIBLE_DEVICES without touching CUDA") {
    const char* saved = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string saved_value = saved ? saved : "";
    setenv("CUDA_VISIBLE_DEVICES", "2,3", 1);
    CHECK(sweep_workers(0) == std::vector<std::string>{"2", "3"});
    CHECK(sweep_workers(1) == std::vector<std::string>{"2"});
    CHECK(sweep_workers(0, 2) == std::vector<std::string>{"2", "2", "3", "3"});
    CHECK_THROWS_AS(sweep_workers(3), InputError);
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    CHECK(sweep_workers(0) == std::vector<std::string>{""});
    unsetenv("CUDA_VISIBLE_DEVICES");
    CHECK(sweep_workers(4) == std::vector<std::string>{"0", "1", "2", "3"});
    CHECK(sweep_workers(1) == std::vector<std::string>{""});
    if (saved) setenv("CUDA_VISIBLE_DEVICES", saved_value.c_str(), 1);
  }

  TEST_CASE("a cell's records, once each: a run replaces one that found no GPU; a second real one is a repeat") {
    using nlohmann::json;
    const json no_gpu_a = {{"key", "a"}, {"outcome", "no_gpu"}}, pass_a = {{"key", "a"}, {"outcome", "pass"}},
               hang_a = {{"key", "a"}, {"outcome", "hang"}}, pass_b = {{"key", "b"}, {"outcome", "pass"}};
    size_t repeated = 99;
    const std::vector<json> kept = latest_records({no_gpu_a, pass_b, pass_a, hang_a}, &repeated);
    REQUIRE(kept.size() == 2);
    CHECK(kept[0] == pass_a);  // in the place of the record it replaced
    CHECK(kept[1] == pass_b);
    CHECK(repeated == 1);  // the hang after the pass: the first real record is kept
    CHECK(latest_records({pass_a, no_gpu_a}, &repeated) == std::vector<json>{pass_a});
    CHECK(repeated == 0);  // a later no-GPU record is no repeat: it did not run
  }

  TEST_CASE("a cell's record from how its process ended and what it wrote") {
    SweepAxes axes;
    axes.keep_waived = true;
    axes.scenarios = {2};
    axes.fixes = {"on"};
    axes.dtypes = {"bf16"};
    axes.shapes = {"2x8x128x1152x64"};
    axes.allocs = {"device"};
    const SweepCell cell = expand_matrix(axes).front();
    auto ended = [](ChildEnd::Kind kind, int status) {
      ChildEnd e;
      e.kind = kind;
      e.status = status;
      e.wall_s = 0.5;
      e.deadline_s = 60;
      e.stderr_tail = {"repro: waived: scenario 2 needs memory that migrates"};
      return e;
    };
    const json waived_result = {{"outcome", "waived"}, {"exit_code", 6}, {"error", "needs memory that migrates"},
                                {"error_stage", nullptr}, {"check", nullptr}, {"iterations_done", 0},
                                {"timing", {{"call_median_ms", 0.0}}}, {"stages", json::array()}, {"device", nullptr},
                                {"watchdog", nullptr}};
    const json waived = finished_cell_json(cell, 10, "1", ended(ChildEnd::exited, 6), waived_result.dump());
    check_valid(waived, "#/$defs/cell");
    CHECK(waived["outcome"] == "waived");
    CHECK(waived["is_skipped"] == true);
    CHECK(waived["skip_reason"] == "needs memory that migrates");
    CHECK(waived["gpu"] == "1");
    CHECK(waived["call_median_ms"].is_null());
    CHECK(waived["axes"]["fix_list"] == "2");
    CHECK(waived["command_line"] == json({"repro", "--dtype", "bf16", "--precision", "upcast", "--batch", "2", "--heads", "8",
                                          "--q-len", "128", "--kv-len", "1152", "--head-dim", "64", "--alloc", "device",
                                          "--scenario", "2", "--fix", "on", "--stage-timeout", "10", "--iters", "5",
                                          "--check"}));
    CHECK(RunSpec::from_json(waived["run_options"]).to_argv() ==
          std::vector<std::string>(waived["command_line"].begin() + 1, waived["command_line"].end()));
    json typed_wrong = waived_result;
    typed_wrong["error"] = 42;
    CHECK(finished_cell_json(cell, 10, "", ended(ChildEnd::exited, 6), typed_wrong.dump())["outcome"] == "crash");
    const json killed = finished_cell_json(cell, 10, "", ended(ChildEnd::signalled, SIGKILL), std::nullopt);
    CHECK(killed["outcome"] == "crash");
    CHECK(killed["signal"] == SIGKILL);
    CHECK(killed["exit_code"].is_null());
    const json usage = finished_cell_json(cell, 10, "", ended(ChildEnd::exited, 2), std::nullopt);
    CHECK(usage["outcome"] == "usage");
    CHECK(usage["error"] == "repro: waived: scenario 2 needs memory that migrates");
    CHECK(finished_cell_json(cell, 10, "", ended(ChildEnd::timed_out, 0), std::nullopt)["outcome"] == "timeout");
  }

  TEST_CASE("a soak's leak is a leak in the sweep, as the run itself says, not the mismatch its exit code shares") {
    RunResult run;
    run.soak = judge_soak({MemorySample{100, 80000, 500, 15, 10}, MemorySample{200, 79990, 500, 16, 11}});
    REQUIRE_FALSE(run.soak.flat);
    run.fail(Outcome::leak, "memory grew during the soak: " + run.soak.summary);
    const json result = result_to_json(run);
    REQUIRE(result["outcome"] == "leak");
    REQUIRE(result["exit_code"] == kExitMismatch);
    CHECK(read_run_record(result).outcome == Outcome::leak);

    SweepAxes axes;
    axes.scenarios = {2};
    axes.fixes = {"off"};
    axes.dtypes = {"bf16"};
    axes.shapes = {"2x8x128x1152x64"};
    axes.allocs = {"managed"};
    const SweepCell cell = expand_matrix(axes).front();
    ChildEnd end;
    end.kind = ChildEnd::exited;
    end.status = kExitMismatch;
    const json record = finished_cell_json(cell, 10, "", end, result.dump());
    CHECK(record["outcome"] == result["outcome"]);
    CHECK(record["exit_code"] == kExitMismatch);
    CHECK(record["error"] == result["error"]);
    CHECK(cell_record_problem(record) == "");  // --resume takes it back
    const std::string footer = sweep_footer({record}, 1, false);
    CHECK(footer.find("1 leaked") != std::string::npos);
    CHECK(footer.find("# Sweep: FAILED") != std::string::npos);
    CHECK(sweep_svg({record}, "leak", "").find(">LEAK</text>") != std::string::npos);

    // A mismatch keeps its word: the run's outcome decides, not the exit code they share.
    RunResult wrong;
    wrong.fail(Outcome::mismatch, "relative error 0.5 exceeds 0.004");
    CHECK(finished_cell_json(cell, 10, "", end, result_to_json(wrong).dump())["outcome"] == "mismatch");
    // A result whose outcome its exit code cannot have is not believed.
    json passed = result_to_json(RunResult{});
    passed["exit_code"] = kExitMismatch;
    const json unbelieved = finished_cell_json(cell, 10, "", end, passed.dump());
    CHECK(unbelieved["outcome"] == "crash");
    CHECK(unbelieved["error"].get<std::string>().find("says outcome pass") != std::string::npos);
  }

  TEST_CASE("the SVG: a square per configuration, worst repeat shown, text escaped, well formed") {
    SweepAxes axes;
    axes.scenarios = {0, 1};
    axes.fixes = {"off"};
    axes.dtypes = {"bf16", "fp32"};
    axes.shapes = {"2x8x128x1152x64"};
    axes.allocs = {"managed"};
    axes.repeats = 2;
    std::vector<json> records;
    for (const auto& c : expand_matrix(axes)) records.push_back(planned_cell_json(c, 10));
    REQUIRE(records.size() == 8);
    records[0]["outcome"] = "pass";
    records[0]["call_median_ms"] = 0.125;
    records[1]["outcome"] = "pass";
    records[2]["outcome"] = "hang";  // fp32, repeat 0
    records[2]["stage"] = "softmax";
    records[3]["outcome"] = "pass";
    records[4]["outcome"] = "crash";
    records[4]["error"] = "a <script> & \"quotes\" 'too'\x01 here";
    const std::string svg = sweep_svg(records, "title with <&>", "caption");
    CHECK(xml_problem(svg) == "");
    CHECK(count_of(svg, "class=\"cell\"") == 4);
    CHECK(svg.find(">HANG 1/2</text>") != std::string::npos);
    CHECK(svg.find(">softmax</text>") != std::string::npos);
    CHECK(svg.find(">0.125 ms</text>") != std::string::npos);
    CHECK(svg.find("a &lt;script&gt; &amp; &quot;quotes&quot; &apos;too&apos;? here") != std::string::npos);
    CHECK(svg.find("title with &lt;&amp;&gt;") != std::string::npos);
    CHECK(svg.find("worst of 2 repeats") != std::string::npos);

    // The default matrix: one square per cell, three panels (one per shape).
    std::vector<json> planned;
    for (const auto& c : expand_matrix(SweepAxes{})) planned.push_back(planned_cell_json(c, 10));
    const std::string full = sweep_svg(planned, "default", "");
    CHECK(xml_problem(full) == "");
    CHECK(count_of(full, "class=\"cell\"") == 138);
    CHECK(count_of(full, ">shape 2x8x") == 2);
    CHECK(count_of(full, ">shape 1x8x256x2048x64") == 1);
  }

  TEST_CASE("the XML checker finds what is wrong") {
    CHECK(xml_problem("<?xml version=\"1.0\"?>\n<a x=\"1\"><b/>text &amp; &#65;</a>\n") == "");
    for (const char* bad : {"<a><b></a></b>", "<a>x & y</a>", "<a>1 < 2</a>", "<a x=1/>", "<a></a><b/>", "<a>",
                            "<a x=\"<\"/>", "<a>&nbsp;</a>", "text<a/>", "<a x=\"1\" x=\"2\"/>", "<a>\x01</a>", ""}) {
      CAPTURE(bad);
      CHECK(xml_problem(bad) != "");
    }
  }

  TEST_CASE("the schema's outcomes are exactly the outcomes a cell can have") {
    // A cell always ends with a result of some kind, so every outcome but no_result can appear
    // in a sweep document; an outcome added to the enum and not to the schema makes every
    // sweep that meets it invalid.
    std::set<std::string> from_enum;
    for (int o = 0; o <= static_cast<int>(sdpa::Outcome::no_result); ++o) {
      if (static_cast<sdpa::Outcome>(o) != sdpa::Outcome::no_result) from_enum.insert(sdpa::outcome_name(static_cast<sdpa::Outcome>(o)));
    }
    std::set<std::string> from_schema;
    for (const auto& name : schema()["$defs"]["outcome"]["enum"]) from_schema.insert(name.get<std::string>());
    CHECK(from_schema == from_enum);
  }

  TEST_CASE("the schema validator accepts good documents and names what is wrong in bad ones") {
    const json schema = json::parse(R"({
      "$schema": "https://json-schema.org/draft/2020-12/schema",
      "type": "object", "required": ["a"], "additionalProperties": false,
      "properties": {
        "a": {"type": "integer", "minimum": 1},
        "b": {"enum": ["x", "y"]},
        "c": {"type": "array", "items": {"$ref": "#/$defs/s"}},
        "d": {"type": ["string", "null"]},
        "e": {"type": "object", "additionalProperties": {"type": "number"}}
      },
      "$defs": {"s": {"type": "string"}}
    })");
    using sdpa_test::schema_errors;
    CHECK(schema_errors(schema, json::parse(R"({"a": 1, "b": "x", "c": ["p"], "d": null, "e": {"k": 1.5}})")).empty());
    CHECK(schema_errors(schema, json::parse(R"({"a": 2.0})")).empty());
    const std::vector<std::pair<const char*, const char*>> bad{
        {R"({})", "required property \"a\""},
        {R"({"a": 0})", "/a: 0 is below the minimum 1"},
        {R"({"a": "1"})", "/a: \"1\" is not of type \"integer\""},
        {R"({"a": 1.5})", "/a"},
        {R"({"a": 1, "b": "z"})", "/b: \"z\" is not one of"},
        {R"({"a": 1, "c": ["p", 1]})", "/c/1"},
        {R"({"a": 1, "f": 1})", "property \"f\" is not allowed"},
        {R"({"a": 1, "d": 3})", "/d"},
        {R"({"a": 1, "e": {"k": "v"}})", "/e/k"},
        {R"([1])", "is not of type \"object\""},
    };
    for (const auto& [doc, expected] : bad) {
      CAPTURE(doc);
      const auto errors = schema_errors(schema, json::parse(doc));
      REQUIRE(errors.size() == 1);
      CHECK(errors[0].find(expected) != std::string::npos);
    }
    CHECK(schema_errors(schema, json("x"), "#/$defs/s").empty());
    CHECK(schema_errors(schema, json(1), "#/$defs/s").size() == 1);
    CHECK_THROWS_AS(schema_errors(json::parse(R"({"pattern": "^a"})"), json("a")), std::invalid_argument);
    CHECK_THROWS_AS(schema_errors(schema, json(1), "#/$defs/missing"), std::invalid_argument);
    CHECK_THROWS_AS(schema_errors(json::parse(R"({"$ref": "other.json"})"), json(1)), std::invalid_argument);
  }

  TEST_CASE("a cell that finds no GPU stops the sweep: one line, exit 7, the rest marked not run; --resume runs them") {
    TempDir dir;
    const auto args = sweep_args(dir / "out/s.json", small_matrix("0,1,2", "managed,device"));
    const Ran r = run_repro(args, {{"SWEEP_FAKE", "1/managed=no_gpu"}, {"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path);
    INFO(r.err);
    CHECK(r.exit_code == kExitNoGpu);
    CHECK(read_fake_log(dir / "fake.log").size() == 3);  // cells 0 and 1, and cell 2, which found no GPU
    CHECK(count_of(r.err, "no GPU:") == 1);
    CHECK(r.err.find("repro sweep: no GPU: cell 2 found none (no usable CUDA GPU: fake") != std::string::npos);
    const json doc = json::parse(read_text(dir / "out/s.json"));
    check_valid(doc);
    CHECK(doc["cells"].size() == 3);
    CHECK(doc["summary"]["result"] == "FAILED");
    CHECK(doc["summary"]["no_gpu"] ==
          json({{"after_cell", 2}, {"error", "no usable CUDA GPU: fake"}, {"cells_not_run", 3}}));
    CHECK(r.out.find("# 3 cells not run: cell 2 found no usable GPU (no usable CUDA GPU: fake)") != std::string::npos);
    const std::string svg = read_text(dir / "out/s.svg");
    CHECK(xml_problem(svg) == "");
    CHECK(count_of(svg, "class=\"cell\"") == 6);
    CHECK(count_of(svg, "stroke-dasharray") == 3);  // the squares of cells not run
    const std::string shown = visible_text(svg);
    CHECK(shown.find(">[1] no GPU: no usable CUDA GPU: fake</text>") != std::string::npos);
    CHECK(shown.find(">[2] not run: cell 2 found no usable GPU</text>") != std::string::npos);

    // The GPU is back: --resume runs the cell that found none again, and the rest; a second one, nothing.
    auto resume = args;
    resume.push_back("--resume");
    const Ran again = run_repro(resume, {{"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path);
    CHECK(again.exit_code == 0);
    CHECK(read_fake_log(dir / "fake.log").size() == 3 + 4);
    // The cell that found no GPU ended with a record: nothing says it was cut short.
    INFO(again.err);
    for (const char* words : {"never finished", "interrupted", "machine stopped", "froze", "still there"}) {
      CHECK_MESSAGE(again.err.find(words) == std::string::npos, words);
    }
    const json done = json::parse(read_text(dir / "out/s.json"));
    check_valid(done);
    CHECK(done["summary"]["result"] == "OK");
    CHECK(done["summary"]["no_gpu"].is_null());
    CHECK(run_repro(resume, {{"SWEEP_FAKE_LOG", dir / "fake.log"}}, dir.path).exit_code == 0);
    CHECK(read_fake_log(dir / "fake.log").size() == 3 + 4);
  }

  TEST_CASE("the real repro without a GPU: the sweep stops at its first cell") {
    TempDir dir;
    const Ran r = run_repro({"sweep", "--json", dir / "s.json", "--scenarios", "0", "--fix", "off", "--dtypes", "bf16",
                             "--shapes", "1x1x16x16x16", "--allocs", "managed,device", "--iters", "1", "--gpus", "1"},
                            {}, dir.path);
    INFO(r.err);
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    REQUIRE_FALSE(doc["cells"].empty());
    if (doc["cells"][0]["outcome"] == "no_gpu") {
      CHECK(r.exit_code == kExitNoGpu);
      CHECK(doc["cells"].size() == 1);
      CHECK(doc["summary"]["no_gpu"]["cells_not_run"] == 1);
      CHECK(count_of(r.err, "no GPU:") == 1);
    } else {
      MESSAGE("this machine has a GPU: the sweep runs both cells");
      CHECK(r.exit_code == 0);
      CHECK(doc["cells"].size() == 2);
    }
  }

  TEST_CASE("the ladder stops at the first rung that finds no GPU: one line, exit 7") {
    TempDir dir;
    // A stand-in repro: every run passes but those of the scenario NO_GPU_SCENARIO names.
    write_text(dir / "fake-repro",
               "#!/bin/sh\n"
               "echo \"$*\" >> \"$FAKE_LOG\"\n"
               "case \" $* \" in *\" --scenario $NO_GPU_SCENARIO \"*)\n"
               "  echo '# result: no_gpu (exit 7): no usable CUDA GPU: fake'; exit 7;;\n"
               "esac\n"
               "echo '# result: pass (exit 0)'\n");
    fs::permissions(dir / "fake-repro", fs::perms::owner_all);
    const std::string ladder = std::string(SDPA_SOURCE_DIR) + "/scripts/ladder.sh";
    const Ran stopped = finish(start_program("/bin/bash", {ladder, dir / "fake-repro"},
                                             {{"FAKE_LOG", dir / "stopped.log"}, {"NO_GPU_SCENARIO", "2"}}, dir.path));
    CHECK(stopped.exit_code == kExitNoGpu);
    CHECK(lines_of(read_text(dir / "stopped.log")).size() == 13);  // scenarios 0 and 1 (six rungs each), then one
    const auto lines = lines_of(stopped.out);
    REQUIRE(lines.size() == 1 + 13 + 1);
    CHECK(lines.back() == "ladder: NO GPU: no usable CUDA GPU: fake; stopped, 17 rungs not run");
    const Ran all = finish(start_program("/bin/bash", {ladder, dir / "fake-repro"},
                                         {{"FAKE_LOG", dir / "all.log"}, {"NO_GPU_SCENARIO", "none"}}, dir.path));
    CHECK(all.exit_code == 0);
    CHECK(lines_of(read_text(dir / "all.log")).size() == 30);
    CHECK(lines_of(all.out).back() == "ladder: OK");
  }

  TEST_CASE("the ladder with the real repro on a machine without a GPU stops after one rung") {
    TempDir dir;
    const Ran probe = run_repro({"--scenario", "0", "--check", "--iters", "1", "-b", "1", "--heads", "1", "-L", "16", "-E", "16"},
                                {}, dir.path);
    if (probe.exit_code != kExitNoGpu) {
      MESSAGE("this machine has a GPU: the ladder would run every rung (minutes); not run here");
      return;
    }
    const Ran r = finish(start_program("/bin/bash", {std::string(SDPA_SOURCE_DIR) + "/scripts/ladder.sh", SDPA_REPRO_BINARY},
                                       {}, dir.path));
    CHECK(r.exit_code == kExitNoGpu);
    CHECK(lines_of(r.out).size() == 3);  // the header, the rung, the line that says why it stopped
    CHECK(lines_of(r.out).back().find("ladder: NO GPU: no usable CUDA GPU") == 0);
  }

  TEST_CASE("--resume under another matrix is refused (exit 2, one line, nothing written) unless --force") {
    TempDir dir;
    const Env env{{"SWEEP_FAKE_LOG", dir / "fake.log"}};
    const auto first = small_matrix("0,1", "managed");
    REQUIRE(run_repro(sweep_args(dir / "s.json", first), env, dir.path).exit_code == 0);
    const std::string json_before = read_text(dir / "s.json"), jsonl_before = read_text(dir / "s.jsonl"),
                      svg_before = read_text(dir / "s.svg");
    const std::vector<std::pair<std::vector<std::string>, std::string>> others{
        {small_matrix("0,1,2", "managed"), "(scenarios 0,1,2 here, 0,1 in " + (dir / "s.json") + ")"},
        {{"--scenarios", "0,1", "--fix", "off", "--dtypes", "bf16,fp16", "--shapes", "2x8x128x1152x64", "--allocs", "managed"},
         "(dtypes bf16,fp16 here, bf16 in "},
        {joined(first, {"--repeats", "2"}), "(repeats 2 here, 1 in "},
        {joined(first, {"--shard", "1/2"}), "(shard 1/2 here, 1/1 in "},
    };
    for (const auto& [options, difference] : others) {
      CAPTURE(difference);
      const Ran r = run_repro(joined(sweep_args(dir / "s.json", options), {"--resume"}), env, dir.path);
      CHECK(r.exit_code == kExitUsage);
      CHECK(lines_of(r.err).size() == 1);
      CHECK(r.err.find("--resume: " + (dir / "s.jsonl") + " was written by another matrix " + difference) != std::string::npos);
      CHECK(r.err.find("--resume --force continues with this matrix") != std::string::npos);
      CHECK(read_text(dir / "s.json") == json_before);
      CHECK(read_text(dir / "s.jsonl") == jsonl_before);
      CHECK(read_text(dir / "s.svg") == svg_before);
    }
    CHECK(read_fake_log(dir / "fake.log").size() == 2);  // nothing ran
    // The same matrix resumes: nothing is left to run.
    CHECK(run_repro(joined(sweep_args(dir / "s.json", first), {"--resume"}), env, dir.path).exit_code == 0);
    CHECK(read_fake_log(dir / "fake.log").size() == 2);

    // Without an axis the resumed sweep keeps its own matrix (as a triage's --resume keeps its settings).
    const std::vector<std::string> plain{"sweep", "--repro-binary", SWEEP_TEST_FAKE_CHILD, "--json", dir / "s.json", "--resume"};
    const Ran own = run_repro(plain, env, dir.path);
    CHECK(own.exit_code == 0);
    CHECK(read_fake_log(dir / "fake.log").size() == 2);  // its two cells are done: nothing ran
    CHECK(json::parse(read_text(dir / "s.json"))["matrix"]["scenarios"] == json({0, 1}));
    // Where there is no sweep, --resume refuses (exit 2, one line) and writes nothing.
    const Ran none = run_repro({"sweep", "--repro-binary", SWEEP_TEST_FAKE_CHILD, "--out", dir / "none", "--resume"}, env, dir.path);
    CHECK(none.exit_code == kExitUsage);
    CHECK(lines_of(none.err).size() == 1);
    CHECK(none.err.find("--resume: there is no sweep to continue") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "none"));
    // A damaged document: its matrix cannot be known, with the axes given or without; nothing written.
    fs::create_directories(dir / "damaged");
    write_text(dir / "damaged/s.json", "{\"matrix\": ");
    write_text(dir / "damaged/s.jsonl", "");
    const Ran adopted = run_repro({"sweep", "--repro-binary", SWEEP_TEST_FAKE_CHILD, "--json", dir / "damaged/s.json", "--resume"},
                                  env, dir.path);
    CHECK(adopted.exit_code == kExitUsage);
    CHECK(lines_of(adopted.err).size() == 1);
    CHECK(adopted.err.find("--resume: " + (dir / "damaged/s.json") + " is not a sweep document (") != std::string::npos);
    const Ran checked = run_repro(joined(sweep_args(dir / "damaged/s.json", first), {"--resume"}), env, dir.path);
    CHECK(checked.exit_code == kExitUsage);
    CHECK(lines_of(checked.err).size() == 1);
    CHECK(checked.err.find("--resume: cannot tell which matrix wrote " + (dir / "damaged/s.jsonl")) != std::string::npos);
    CHECK(read_text(dir / "damaged/s.json") == "{\"matrix\": ");

    // Without its document (a sweep killed before it wrote one) the keys of FILE.jsonl still tell.
    fs::remove(dir / "s.json");
    const Ran keys = run_repro(joined(sweep_args(dir / "s.json", small_matrix("0,2", "managed")), {"--resume"}), env, dir.path);
    CHECK(keys.exit_code == kExitUsage);
    CHECK(lines_of(keys.err).size() == 1);
    CHECK(keys.err.find("holds cells that are not in this matrix (scenario=1 ") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "s.json"));

    // --resume --force: this matrix, keeping the cells both have.
    write_text(dir / "s.json", json_before);
    const Ran forced = run_repro(joined(sweep_args(dir / "s.json", small_matrix("0,1,2", "managed")), {"--resume", "--force"}),
                                 env, dir.path);
    CHECK(forced.exit_code == 0);
    CHECK(read_fake_log(dir / "fake.log").size() == 3);  // only scenario 2's cell ran
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    CHECK(doc["cells"].size() == 3);
    CHECK(doc["matrix"]["scenarios"] == json({0, 1, 2}));
  }

  TEST_CASE("run options after --: every cell gets them, the document keeps them, a resume needs the same") {
    TempDir dir;
    const Env env{{"SWEEP_FAKE_LOG", dir / "fake.log"}};
    const std::vector<std::string> cell_options{"--", "--seed", "7"};
    const auto args = joined(sweep_args(dir / "s.json", small_matrix("0,1", "managed")), cell_options);
    REQUIRE(run_repro(args, env, dir.path).exit_code == 0);
    const json doc = json::parse(read_text(dir / "s.json"));
    check_valid(doc);
    CHECK(doc["matrix"]["cell_options"] == json({"--seed", "7"}));
    const std::vector<std::string> seed{"--seed", "7"};
    for (const json& cell : doc["cells"]) {
      const auto line = cell["command_line"].get<std::vector<std::string>>();
      CHECK(std::search(line.begin(), line.end(), seed.begin(), seed.end()) != line.end());
    }
    CHECK(read_fake_log(dir / "fake.log").size() == 2);
    // The same options resume with nothing left to run; without them the matrix is another.
    const auto resume = joined(sweep_args(dir / "s.json", small_matrix("0,1", "managed")), {"--resume"});
    CHECK(run_repro(joined(resume, cell_options), env, dir.path).exit_code == 0);
    CHECK(read_fake_log(dir / "fake.log").size() == 2);
    const Ran other = run_repro(resume, env, dir.path);
    CHECK(other.exit_code == kExitUsage);
    CHECK(other.err.find("was written by another matrix (cell_options none here, --seed,7 in ") != std::string::npos);
    // A bad run option is a usage error of the sweep, before any cell runs.
    const Ran bad = run_repro(joined(sweep_args(dir / "t.json", small_matrix("0", "managed")), {"--", "--seed", "x"}), env, dir.path);
    CHECK(bad.exit_code == kExitUsage);
    CHECK(lines_of(bad.err).size() == 1);
  }

  TEST_CASE("shards: disjoint, together the whole matrix, balanced by expected cost, the same every time") {
    const std::vector<SweepCell> cells = expand_matrix(SweepAxes{});
    int64_t most = 0;
    for (const auto& c : cells) most = std::max(most, expected_cell_cost(c));
    for (int count : {1, 2, 3, 4, 7, 270}) {
      CAPTURE(count);
      std::map<std::string, int> owner;
      std::vector<int64_t> load;
      for (int k = 1; k <= count; ++k) {
        const auto part = shard_cells(cells, SweepShard{k, count});
        CHECK(keys_of(part) == keys_of(shard_cells(cells, SweepShard{k, count})));
        int64_t cost = 0;
        for (size_t i = 0; i < part.size(); ++i) {
          CHECK(owner.emplace(part[i].key(), k).second);
          CHECK(cells.at(static_cast<size_t>(part[i].index)).key() == part[i].key());  // its index in the matrix
          if (i > 0) CHECK(part[i - 1].index < part[i].index);                         // in matrix order
          cost += expected_cell_cost(part[i]);
        }
        load.push_back(cost);
      }
      CHECK(owner.size() == cells.size());
      // Longest first, each to the least loaded shard: no shard is more than one cell ahead of another.
      CHECK(*std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()) <= most);
      if (count == 3) {
        // Three allocations, three shards: dealing in matrix order would give each shard one allocation.
        std::set<int> all_scenarios;
        for (const auto& c : cells) all_scenarios.insert(c.scenario);
        for (int k = 1; k <= 3; ++k) {
          std::set<std::string> allocs;
          std::set<int> scenarios;
          for (const auto& c : shard_cells(cells, SweepShard{k, 3})) allocs.insert(c.alloc), scenarios.insert(c.scenario);
          CHECK(allocs.size() == 3);
          CHECK(scenarios == all_scenarios);
        }
      }
    }
    // Longest first: a cell longer than two short ones together gets a shard to itself; dealt
    // shortest first, it would land on top of one of them.
    SweepCell short_a = cells.front(), short_b = cells.front(), longest = cells.front();
    short_b.repeat = 1;
    longest.shape = "qwen-image-512";
    short_a.index = 0, short_b.index = 1, longest.index = 2;
    REQUIRE(expected_cell_cost(longest) > 2 * expected_cell_cost(short_a));
    for (int k = 1; k <= 2; ++k) {
      CAPTURE(k);
      const auto part = shard_cells({short_a, short_b, longest}, SweepShard{k, 2});
      const bool has_longest = std::any_of(part.begin(), part.end(), [](const SweepCell& c) { return c.shape == "qwen-image-512"; });
      CHECK(part.size() == (has_longest ? 1u : 2u));
    }
    SweepCell small = cells.front(), long_rows = cells.front(), layer = cells.front();
    long_rows.shape = "1x8x256x2048x64";
    layer.shape = "qwen-image-512";
    CHECK(expected_cell_cost(small) < expected_cell_cost(long_rows));
    CHECK(expected_cell_cost(long_rows) < expected_cell_cost(layer));
    CHECK(parse_shard("2/4") == SweepShard{2, 4});
    CHECK(parse_shard("2/4").str() == "2/4");
    CHECK(parse_sweep({"--shard", "3/3"}).options.shard == SweepShard{3, 3});
    CHECK(parse_sweep({}).options.shard.whole());
  }

  TEST_CASE("sharded dry runs, each its own process, merge into exactly the unsharded plan") {
    TempDir dir;
    const std::vector<std::string> matrix{"--scenarios", "0,1,2", "--fix", "off,on", "--dtypes", "bf16,fp32", "--shapes",
                                          "2x8x128x1152x64,1x8x256x2048x64", "--allocs", "managed,device,async", "--repeats", "2",
                                          "--keep-waived"};
    const Ran whole = run_repro(joined({"sweep", "--dry-run", "--gpus", "1"}, matrix), {}, dir.path);
    REQUIRE(whole.exit_code == 0);
    const json plan = json::parse(whole.out);
    REQUIRE(plan["cells"].size() == 144);
    std::vector<Started> started;
    for (int k = 1; k <= 3; ++k) {
      started.push_back(start_repro(joined({"sweep", "--dry-run", "--gpus", "1", "--shard", std::to_string(k) + "/3"}, matrix),
                                    {}, dir.path));
    }
    std::set<std::string> keys;
    size_t total = 0;
    std::vector<std::string> folders;
    for (int k = 1; k <= 3; ++k) {
      const Ran r = finish(started[static_cast<size_t>(k - 1)]);
      REQUIRE(r.exit_code == 0);
      const json doc = json::parse(r.out);
      check_valid(doc);
      CHECK(doc["matrix"]["shard"] == json({{"index", k}, {"count", 3}}));
      CHECK(doc["matrix"]["cells"] == 144);
      CHECK(doc["summary"]["cells_planned"] == doc["cells"].size());
      for (const auto& c : doc["cells"]) keys.insert(c["key"].get<std::string>());
      total += doc["cells"].size();
      folders.push_back(dir / ("shard-" + std::to_string(k)));
      fs::create_directories(folders.back());
      write_text(folders.back() + "/sweep.json", r.out);
    }
    CHECK(total == 144);        // disjoint
    CHECK(keys.size() == 144);  // and together the whole plan

    for (const auto& order : {std::vector<size_t>{0, 1, 2}, std::vector<size_t>{2, 0, 1}}) {
      TempDir out;
      std::vector<std::string> args{"sweep", "merge", "--out", out / "merged"};
      for (size_t i : order) args.push_back(folders[i]);
      const Ran merge = run_repro(args, {}, dir.path);
      INFO(merge.err);
      CHECK(merge.exit_code == 0);
      const json merged = json::parse(read_text(out / "merged/sweep.json"));
      check_valid(merged);
      CHECK(merged["cells"] == plan["cells"]);
      const json axis_names = axes_to_json(SweepAxes{});
      for (const auto& [key, value] : axis_names.items()) CHECK(merged["matrix"][key] == plan["matrix"][key]);
      CHECK(merged["matrix"]["shard"] == json({{"index", 1}, {"count", 1}}));
      CHECK(merged["summary"]["cells_planned"] == 144);
      CHECK(merged["summary"]["result"] == "PLANNED");
      CHECK(merged["meta"]["dry_run"] == true);
      CHECK(merged["meta"]["shards"].size() == 3);
      CHECK(read_text(out / "merged/sweep.jsonl").empty());
      const std::string svg = read_text(out / "merged/sweep.svg");
      CHECK(xml_problem(svg) == "");
      CHECK(count_of(svg, "class=\"cell\"") == 72);  // repeats share a square
    }
  }

  TEST_CASE("sharded runs merge into the unsharded sweep; bad merges are refused; --resume on a merge runs a missing shard") {
    TempDir dir;
    const auto matrix = small_matrix("0,1,2", "managed,device,async");
    const Env env{{"SWEEP_FAKE", "1/device=hang_snapshot,2/async=waived,0/async=mismatch"},
                  {"SWEEP_FAKE_LOG", dir / "fake.log"}};
    const Ran whole = run_repro(sweep_args(dir / "whole/sweep.json", matrix), env, dir.path);
    REQUIRE(whole.exit_code == 1);
    const json expected = json::parse(read_text(dir / "whole/sweep.json"));
    std::vector<std::string> folders;
    for (int k = 1; k <= 3; ++k) {
      folders.push_back(dir / ("shard-" + std::to_string(k)));
      const Ran r = run_repro(sweep_args(folders.back() + "/sweep.json", joined(matrix, {"--shard", std::to_string(k) + "/3"})),
                              env, dir.path);
      CHECK(r.exit_code <= 1);
    }
    const Ran merge = run_repro({"sweep", "merge", "--out", dir / "merged", folders[0], folders[1], folders[2]}, {}, dir.path);
    INFO(merge.err);
    CHECK(merge.exit_code == 1);  // a mismatch and a hang
    const json merged = json::parse(read_text(dir / "merged/sweep.json"));
    check_valid(merged);
    std::map<std::string, std::pair<int, std::string>> got, want;
    for (const auto& c : merged["cells"]) got[c["key"]] = {c["index"], c["outcome"]};
    for (const auto& c : expected["cells"]) want[c["key"]] = {c["index"], c["outcome"]};
    CHECK(got == want);
    CHECK(merged["summary"]["outcomes"] == expected["summary"]["outcomes"]);
    CHECK(merged["summary"]["result"] == "FAILED");
    CHECK(merged["matrix"]["scenarios"] == expected["matrix"]["scenarios"]);
    CHECK(merged["meta"]["shards"].size() == 3);
    // The shards ran side by side: the merged sweep's wall time is its longest shard's, each
    // shard's kept with it.
    double longest = 0, summed = 0;
    for (size_t k = 0; k < folders.size(); ++k) {
      const double wall = json::parse(read_text(folders[k] + "/sweep.json"))["summary"]["wall_seconds"].get<double>();
      longest = std::max(longest, wall);
      summed += wall;
      CHECK(merged["meta"]["shards"][k]["wall_seconds"].get<double>() == wall);
    }
    CHECK(merged["summary"]["wall_seconds"].get<double>() == longest);
    CHECK(longest < summed);  // three shards that each took some time: max and sum differ
    CHECK(merge.out.find("# 9 of 9 cells: 6 passed, 1 waived, 1 mismatched, 1 hung") != std::string::npos);
    const auto lines = read_jsonl_lines(dir / "merged/sweep.jsonl");
    CHECK(lines.size() == 9);
    for (const auto& line : lines) check_valid(line, "#/$defs/cell");
    // The shards' cell logs and hang snapshot, linked from the merged folder.
    size_t links = 0;
    for (const auto& c : merged["cells"]) {
      if (c["log_file"].is_string()) {
        CHECK(fs::exists(dir / ("merged/" + c["log_file"].get<std::string>())));
        ++links;
      }
      if (c["snapshot"].is_object()) {
        CHECK(fs::exists(dir / ("merged/" + c["snapshot"]["path"].get<std::string>() + "/snapshot.json")));
        ++links;
      }
    }
    CHECK(links == 3);  // the mismatch's log, the hang's log and its snapshot
    const std::string svg = read_text(dir / "merged/sweep.svg");
    CHECK(xml_problem(svg) == "");
    CHECK(count_of(svg, "class=\"cell\"") == 9);
    CHECK(svg.find("repro sweep on Fake GPU &lt;&amp;&gt; (sm_90, CUDA 13.0)") != std::string::npos);

    // Refused: exit 2, one line, nothing written.
    fs::create_directories(dir / "other");
    REQUIRE(run_repro(sweep_args(dir / "other/sweep.json",
                                 {"--scenarios", "0,1,2", "--fix", "off", "--dtypes", "fp16", "--shapes", "2x8x128x1152x64",
                                  "--allocs", "managed,device,async", "--shard", "2/3"}),
                      env, dir.path)
                .exit_code <= 1);
    fs::copy(folders[1], dir / "old", fs::copy_options::recursive);
    json old = json::parse(read_text(dir / "old/sweep.json"));
    old["meta"]["harness_version"] = "0.0.1";
    write_text(dir / "old/sweep.json", old.dump());
    fs::copy(folders[1], dir / "moved", fs::copy_options::recursive);
    json moved = json::parse(read_text(dir / "moved/sweep.json"));
    moved["matrix"]["shard"]["index"] = 3;
    write_text(dir / "moved/sweep.json", moved.dump());
    fs::create_directories(dir / "dry");
    write_text(dir / "dry/sweep.json",
               run_repro(joined(joined({"sweep", "--dry-run"}, matrix), {"--shard", "2/3"}), {}, dir.path).out);
    fs::create_directories(dir / "empty");
    fs::create_directories(dir / "lonely");
    fs::copy(folders[1] + "/sweep.json", dir / "lonely/sweep.json");  // its JSON lines left behind
    const std::vector<std::pair<std::vector<std::string>, std::string>> refused{
        {{folders[0], folders[0]}, "are both shard 1/3 (they overlap)"},
        {{dir / "whole", folders[0]}, "are not shards of one matrix: shard 1/1 in "},
        {{folders[0], dir / "other"}, "are not shards of one matrix: dtypes bf16 in "},
        {{folders[0], dir / "old"}, "come from different harness versions (harness_version"},
        {{folders[0], dir / "moved"}, "is not in shard 3/3 of this matrix"},
        {{folders[0], dir / "dry"}, "one is a dry run and the other is not"},
        {{folders[0], dir / "empty"}, "no sweep document"},
        {{folders[0], dir / "whole/sweep.jsonl"}, "not a sweep document (not JSON)"},
        {{folders[0], dir / "lonely/sweep.json"}, "lonely/sweep.jsonl, which cannot be read"},
    };
    for (const auto& [sources, message] : refused) {
      CAPTURE(message);
      const Ran r = run_repro(joined({"sweep", "merge", "--out", dir / "refused"}, sources), {}, dir.path);
      CHECK(r.exit_code == kExitUsage);
      CHECK(lines_of(r.err).size() == 1);
      CHECK(r.err.rfind("repro sweep merge: error: ", 0) == 0);
      CHECK(r.err.find(message) != std::string::npos);
      CHECK_FALSE(fs::exists(dir / "refused"));
    }
    const Ran exists = run_repro({"sweep", "merge", "--out", dir / "merged", folders[0], folders[1], folders[2]}, {}, dir.path);
    CHECK(exists.exit_code == kExitUsage);
    CHECK(exists.err.find("exists (--force replaces it)") != std::string::npos);
    const Ran into_shard = run_repro({"sweep", "merge", "--force", "--out", folders[0], folders[0], folders[1]}, {}, dir.path);
    CHECK(into_shard.exit_code == kExitUsage);
    CHECK(into_shard.err.find("is one of the shards being merged") != std::string::npos);
    CHECK(run_repro({"sweep", "merge", folders[0]}, {}, dir.path).exit_code == kExitUsage);  // no --out

    // Merged with a warning: a shard built from another commit and run with another stage deadline;
    // one interrupted before its last cell, whose square says so.
    fs::copy(folders[1], dir / "recommitted", fs::copy_options::recursive);
    json recommitted = json::parse(read_text(dir / "recommitted/sweep.json"));
    recommitted["meta"]["git_commit"] = "0123abc";
    recommitted["matrix"]["stage_timeout_s"] = 99.0;
    write_text(dir / "recommitted/sweep.json", recommitted.dump());
    fs::copy(folders[2], dir / "cut", fs::copy_options::recursive);
    json cut = json::parse(read_text(dir / "cut/sweep.json"));
    cut["summary"]["interrupted"] = true;
    write_text(dir / "cut/sweep.json", cut.dump());
    const std::vector<std::string> cut_lines = lines_of(read_text(dir / "cut/sweep.jsonl"));
    REQUIRE(cut_lines.size() >= 2);
    std::string kept;
    for (size_t i = 0; i + 1 < cut_lines.size(); ++i) kept += cut_lines[i] + "\n";
    write_text(dir / "cut/sweep.jsonl", kept);
    const Ran warned = run_repro({"sweep", "merge", "--out", dir / "warned", folders[0], dir / "recommitted", dir / "cut"}, {},
                                 dir.path);
    INFO(warned.out << warned.err);
    CHECK(warned.exit_code == 1);
    CHECK((warned.out + warned.err).find("were built from different commits (") != std::string::npos);
    CHECK((warned.out + warned.err).find("ran with different stage_timeout_s") != std::string::npos);
    CHECK(visible_text(read_text(dir / "warned/sweep.svg")).find("not run: shard 3/3 was interrupted") != std::string::npos);

    // A shard that stopped because a cell found no GPU: the merge keeps its no_gpu record, says
    // so under the table, and its cells not run say why (not "interrupted", not "did not run it").
    fs::copy(folders[2], dir / "gpuless", fs::copy_options::recursive);
    json gpuless = json::parse(read_text(dir / "gpuless/sweep.json"));
    const json no_gpu = {{"after_cell", 7}, {"error", "no usable CUDA GPU: fake"}, {"cells_not_run", 1}};
    gpuless["summary"]["no_gpu"] = no_gpu;
    write_text(dir / "gpuless/sweep.json", gpuless.dump());
    write_text(dir / "gpuless/sweep.jsonl", kept);  // its last cell not run
    const Ran stopped = run_repro({"sweep", "merge", "--out", dir / "stopped", folders[0], folders[1], dir / "gpuless"}, {},
                                  dir.path);
    INFO(stopped.out << stopped.err);
    CHECK(stopped.exit_code == 1);
    const json stopped_doc = json::parse(read_text(dir / "stopped/sweep.json"));
    check_valid(stopped_doc);
    CHECK(stopped_doc["summary"]["no_gpu"] == no_gpu);
    CHECK(stopped_doc["meta"]["shards"][2]["no_gpu"] == no_gpu);
    CHECK(stopped_doc["meta"]["shards"][0]["no_gpu"].is_null());
    CHECK(stopped.out.find("# shard 3/3: 1 cells not run: cell 7 found no usable GPU (no usable CUDA GPU: fake)") !=
          std::string::npos);
    CHECK(visible_text(read_text(dir / "stopped/sweep.svg")).find("not run: shard 3/3 stopped when cell 7 found no usable GPU") !=
          std::string::npos);

    // A shard left out: its cells are not run, and say why; --resume of the merged output with the
    // whole matrix runs exactly them.
    const Ran partial = run_repro({"sweep", "merge", "--out", dir / "partial", folders[0], folders[1]}, {}, dir.path);
    CHECK(partial.exit_code == 1);
    const auto resume = joined(sweep_args(dir / "partial/sweep.json", matrix), {"--resume"});
    const auto third = shard_cells(expand_matrix(parse_sweep({resume.begin() + 1, resume.end()}).options.axes), SweepShard{3, 3});
    CHECK(partial.out.find("# shard 3/3 not merged: its " + std::to_string(third.size()) + " cells are not run") !=
          std::string::npos);
    CHECK(partial.err.find("1 of 3 shards not merged") != std::string::npos);
    const json part = json::parse(read_text(dir / "partial/sweep.json"));
    check_valid(part);
    CHECK(part["summary"]["cells_done"] == 9 - third.size());
    CHECK(visible_text(read_text(dir / "partial/sweep.svg")).find("not run: shard 3/3 was not merged") != std::string::npos);
    const size_t runs_before = read_fake_log(dir / "fake.log").size();
    const Ran resumed = run_repro(resume, env, dir.path);
    CHECK(resumed.exit_code == 1);
    const auto runs = read_fake_log(dir / "fake.log");
    REQUIRE(runs.size() >= runs_before);
    std::set<std::string> ran_again;
    for (size_t i = runs_before; i < runs.size(); ++i) {
      if (runs[i].options != canary_options()) ran_again.insert(runs[i].options);
    }
    std::set<std::string> expected_runs;
    for (const auto& c : third) expected_runs.insert(logged_options(planned_cell_json(c, 0.2)));
    CHECK(ran_again == expected_runs);
    CHECK(json::parse(read_text(dir / "partial/sweep.json"))["summary"]["cells_done"] == 9);
  }

  TEST_CASE("the heatmap names the GPU and the driver, explains its figures, and shows reasons in the picture") {
    const json host = {{"name", "spark-1"}, {"os", "Ubuntu 24.04"}, {"kernel", "6.11"}, {"cpu_arch", "aarch64"},
                       {"nvidia_driver", "580.95.05"}};
    SweepAxes axes;
    axes.scenarios = {0, 1, 2};
    axes.fixes = {"off"};
    axes.dtypes = {"bf16", "fp16", "fp32"};
    axes.shapes = {"2x8x128x1152x64"};
    axes.allocs = {"managed"};
    std::vector<json> records;
    for (const auto& c : expand_matrix(axes)) records.push_back(planned_cell_json(c, 10));
    REQUIRE(records.size() == 9);
    auto set = [&](size_t i, const char* outcome, const json& error) {
      records[i]["outcome"] = outcome;
      records[i]["error"] = error;
    };
    set(0, "pass", nullptr);
    records[0]["call_median_ms"] = 0.125;
    records[0]["device"] = {{"name", "NVIDIA GB10"}, {"compute_capability", "12.1"}, {"driver_version", 13000}};
    set(1, "waived", "scenario 2 needs memory that migrates");
    records[1]["skip_reason"] = records[1]["error"];
    set(2, "waived", "scenario 2 needs memory that migrates");
    records[2]["skip_reason"] = records[2]["error"];
    set(3, "hang", "stage softmax did not finish within 10.0 s (running for 10.01 s)");
    records[3]["stage"] = "softmax";
    records[3]["classification"] = "scenario 2 (softmax reduction on unified memory: hung inside softmax)";
    set(4, "refused", "managed allocation beyond the guard");
    set(5, "no_gpu", "no usable CUDA GPU: fake");
    set(6, "usage", "repro: error: --fake");
    const std::string title = "repro sweep on " + machine_description(host, records);
    CHECK(title == "repro sweep on NVIDIA GB10 (sm_121, CUDA 13.0), NVIDIA driver 580.95.05 on spark-1");
    json no_driver = host;
    no_driver["nvidia_driver"] = "unknown";
    CHECK(machine_description(no_driver, {records[5]}) == "no GPU reported, no NVIDIA driver loaded on spark-1");
    CHECK(machine_description(nullptr, {records[0]}) == "NVIDIA GB10 (sm_121, CUDA 13.0)");

    const std::string svg = sweep_svg(records, title, "7 of 9 cells");
    CHECK(xml_problem(svg) == "");
    const std::string shown = visible_text(svg);
    CHECK(shown.find(">" + title + "</text>") != std::string::npos);
    CHECK(shown.find("median GPU time of one call of the path") != std::string::npos);
    CHECK(shown.find(">0.125 ms</text>") != std::string::npos);
    // The reasons are text of the picture, each once, numbered in the squares.
    CHECK(count_of(shown, "scenario 2 needs memory that migrates") == 1);
    CHECK(shown.find(">[1] waived: scenario 2 needs memory that migrates</text>") != std::string::npos);
    CHECK(count_of(shown, ">[1]</text>") == 2);
    CHECK(shown.find(">softmax [2]</text>") != std::string::npos);
    CHECK(shown.find(">[2] HANG in softmax: scenario 2 (softmax reduction on unified memory: hung inside softmax)</text>") !=
          std::string::npos);
    CHECK(shown.find("] refused: managed allocation beyond the guard</text>") != std::string::npos);
    // Refused, no GPU and usage, like every outcome, in a colour of their own.
    std::map<std::string, std::string> legend;  // label -> fill
    for (size_t at = svg.find("<g class=\"legend\">"); at != std::string::npos; at = svg.find("<g class=\"legend\">", at + 1)) {
      const size_t fill = svg.find("fill=\"", at) + 6;
      const size_t label = svg.find("<text", at);
      const size_t text = svg.find('>', label) + 1;
      legend[svg.substr(text, svg.find('<', text) - text)] = svg.substr(fill, svg.find('"', fill) - fill);
    }
    for (const char* label : {"refused", "no GPU", "usage", "pass", "waived", "HANG"}) CHECK(legend.count(label) == 1);
    std::set<std::string> fills;
    for (const auto& [label, fill] : legend) fills.insert(fill);
    CHECK(fills.size() == legend.size());

    // Past 40 reasons the rest are left to the tooltips, and the picture says so.
    std::vector<json> many;
    for (int i = 0; i < 45; ++i) {
      json r = records[4];
      r["axes"]["alloc"] = "alloc-" + std::to_string(i);  // a square each
      r["key"] = "cell " + std::to_string(i);
      r["outcome"] = "crash";
      r["error"] = "crash number " + std::to_string(i);
      many.push_back(r);
    }
    const std::string crowded = visible_text(sweep_svg(many, "t", ""));
    CHECK(xml_problem(crowded) == "");
    CHECK(count_of(crowded, "class=\"note\"") == 40);
    CHECK(crowded.find(">[40] CRASH: crash number 39</text>") != std::string::npos);
    CHECK(crowded.find(">[41] to [45]: in each square&apos;s tooltip and in the sweep&apos;s JSON</text>") != std::string::npos);
  }
}
