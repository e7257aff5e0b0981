// test_minimize.cpp: `repro minimize` without a GPU: its steps over run options, and the real
// binary minimizing against a fake child (minimize_fake_child.cpp) whose only fault is an
// injected hang armed by the real parser (@S>=2048@alloc=managed: the known answer), including a
// minimization killed mid-run (a frozen machine) or interrupted, then resumed.
#include <doctest/doctest.h>

#include <signal.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "math_sdpa/errors.h"
#include "math_sdpa/npy.h"
#include "repro/cli/run_options.h"
#include "repro/minimize/minimize_steps.h"
#include "repro/minimize/minimizer.h"
#include "repro/supervise/child_process.h"
#include "repro/supervise/process_mark.h"
#include "run_program.h"

using namespace sdpa;
using nlohmann::json;

namespace {

using Options = std::vector<std::string>;

bool contains(const Options& o, const std::vector<std::string>& seq) {
  for (size_t i = 0; i + seq.size() <= o.size(); ++i) {
    if (std::equal(seq.begin(), seq.end(), o.begin() + static_cast<long>(i))) return true;
  }
  return false;
}

bool contains(const RunSpec& o, const std::vector<std::string>& seq) { return contains(o.to_argv(), seq); }

bool has_option(const RunSpec& o, const std::string& name) { return o.given(name); }

// A configuration given as a command line, as minimize carries it.
RunSpec canonical_options(const Options& args) { return carried_options(parse_run_spec(args)); }

// A configuration of the state file.
Options options_of(const json& spec) { return RunSpec::from_json(spec).to_argv(); }

// The run options given to minimize in the end-to-end tests: every condition and feature a step
// can drop, and the fault that hangs only from S = 2048 on managed memory.
const Options kGiven = {"--scenario", "2", "--full", "-b",       "2",       "--heads",  "8",        "--kv-heads", "4",          "-L",
                        "256",      "-S",      "4096",     "-E",       "64",         "--mask",     "bool",
                        "--dropout", "0.1",    "--layers", "3",        "--retain",   "autograd",   "--ballast",
                        "1G",       "--host-load", "2",    "--iters",  "4",          "--alloc-timing", "per-call",
                        "--alloc",  "managed", "--fixes",  "1",        "--inject",   "hang:softmax@S>=2048@alloc=managed"};

// The smallest configuration the known answer allows.
const Options kSmallest = {"--batch", "1", "--heads", "1", "--q-len", "1", "--kv-len", "2048", "--head-dim", "1"};


test_util::ProgramRun minimize(const std::string& out, const Options& extra, const Options& run_options = {}) {
  std::vector<std::string> args{SDPA_REPRO_BINARY, "minimize", "--out", out, "--repro-binary", MINIMIZE_FAKE_CHILD};
  args.insert(args.end(), extra.begin(), extra.end());
  if (!run_options.empty()) {
    args.push_back("--");
    args.insert(args.end(), run_options.begin(), run_options.end());
  }
  return test_util::run_program(args, {120, ""});
}

json state_of(const std::string& out) { return json::parse(test_util::file_text(out + "/state.json")); }

// The smallest configuration must be kSmallest with the fault and managed memory, nothing else.
void check_known_answer(const Options& smallest) {
  INFO("smallest: " << shell_command(smallest));
  for (size_t i = 0; i < kSmallest.size(); i += 2) CHECK(contains(smallest, {kSmallest[i], kSmallest[i + 1]}));
  CHECK(contains(smallest, {"--alloc", "managed"}));
  CHECK(contains(smallest, {"--inject", "hang:softmax@S>=2048@alloc=managed"}));
  CHECK(contains(smallest, {"--scenario", "2"}));
  // Nothing else: every other option is gone, those written at their plain values too.
  CHECK(smallest.size() == kSmallest.size() + 6);
}

}  // namespace

TEST_SUITE("minimize") {

TEST_CASE("minimize's steps: each proposes the smaller run it names, checked by the run's parser") {
  const RunSpec base = canonical_options({"-L", "512", "-S", "4096", "--ballast", "1G", "--ballast-touch", "gpu", "--mask", "bool"});
  SUBCASE("a size is halved and set explicitly, in long form") {
    const auto p = propose("halve S", base);
    REQUIRE(p);
    CHECK(p->change == "S 4096 -> 2048");
    CHECK(contains(p->options, {"--kv-len", "2048"}));
    CHECK(contains(p->options, {"--q-len", "512"}));
  }
  SUBCASE("a condition is dropped with its companions") {
    const auto p = propose("no ballast", base);
    REQUIRE(p);
    CHECK_FALSE(has_option(p->options, "--ballast"));
    CHECK_FALSE(has_option(p->options, "--ballast-touch"));
  }
  SUBCASE("a step whose condition is absent proposes nothing") {
    CHECK_FALSE(propose("no host load", base));
    CHECK_FALSE(propose("no dropout", base));
    CHECK_FALSE(propose("halve B", canonical_options({"-b", "1"})));
  }
  SUBCASE("a proposal the parser refuses is not made: text padding longer than the halved S") {
    const RunSpec padded = canonical_options({"-L", "64", "-S", "64", "--text-padding", "48:16"});
    CHECK_FALSE(propose("halve S", padded));
    REQUIRE(propose("no mask", padded));
    CHECK(contains(propose("no mask", padded)->options, {"--mask", "none"}));
  }
  SUBCASE("the heads halve with their K/V heads, which must divide them") {
    const auto p = propose("halve H", canonical_options({"--heads", "8", "--kv-heads", "8"}));
    REQUIRE(p);
    CHECK(contains(p->options, {"--heads", "4"}));
    CHECK(contains(p->options, {"--kv-heads", "4"}));
  }
  SUBCASE("memory that migrates becomes device memory; device memory proposes nothing") {
    CHECK(contains(propose("device memory", base)->options, {"--alloc", "device"}));
    CHECK_FALSE(propose("device memory", canonical_options({"--alloc", "device"})));
  }
  SUBCASE("--inputs files become random inputs of their shape, dtype and mask layout") {
    const test_util::TempDir dir("minimize_inputs");
    const std::vector<float> values(2 * 4 * 5 * 8, 0.5f), mask(2 * 5 * 7, 0.0f);
    write_npy_float32(dir / "q.npy", {2, 4, 5, 8}, values.data());
    write_npy_float32(dir / "k.npy", {2, 2, 7, 8}, values.data());
    write_npy_float32(dir / "v.npy", {2, 2, 7, 8}, values.data());
    write_npy_float32(dir / "mask.npy", {2, 1, 5, 7}, mask.data());  // one mask per batch, shared by the heads
    const auto p = propose("random inputs", canonical_options({"--inputs", dir.path}));
    REQUIRE(p);
    CHECK(p->change == "--inputs dropped (random inputs, same shape)");
    CHECK_FALSE(has_option(p->options, "--inputs"));
    for (const Options& pair : std::vector<Options>{{"--batch", "2"}, {"--heads", "4"}, {"--kv-heads", "2"}, {"--q-len", "5"},
                                                    {"--kv-len", "7"}, {"--head-dim", "8"}, {"--dtype", "fp32"},
                                                    {"--mask", "float"}, {"--mask-dims", "Bx1"}}) {
      CAPTURE(pair[0]);
      CHECK(contains(p->options, pair));
    }
    CHECK_FALSE(propose("random inputs", base));  // random inputs already
  }
  SUBCASE("the same run written two ways is one canonical list; output and hang options are not carried") {
    CHECK(canonical_options({"-L", "64", "--json", "/tmp/x.json", "--on-hang", "kill"}) == canonical_options({"--q-len=64"}));
  }
  SUBCASE("a report gets the options it takes: not --fixes, --check or --inputs") {
    const RunSpec r = report_options(parse_run_spec({"--scenario", "2", "--fixes", "1", "--check", "-L", "2048"}));
    CHECK(contains(r, {"--scenario", "2"}));
    CHECK(contains(r, {"--q-len", "2048"}));
    CHECK_FALSE(has_option(r, "--fixes"));
    CHECK_FALSE(has_option(r, "--check"));
  }
}

TEST_CASE("repro minimize ends at the conditional fault's known answer: S = 2048 on managed memory, nothing else") {
  const std::string dir = test_util::temp_dir("minimize"), out = dir + "/m";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const auto r = minimize(out, {"--runs", "2"}, kGiven);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const json state = state_of(out);
  CHECK(state.at("phase") == "done");
  CHECK(state.at("fails_with") == json::array({"hang"}));
  check_known_answer(options_of(state.at("smallest")));
  // Progress on every step, fsync'd to the log; the summary and the report of the smallest case.
  CHECK(r.out.find("kept: halve S (S 4096 -> 2048)") != std::string::npos);
  CHECK(r.out.find("rejected: halve S (S 2048 -> 1024)") != std::string::npos);
  CHECK(r.out.find("rejected: device memory (memory managed -> device)") != std::string::npos);
  CHECK(test_util::file_text(out + "/progress.log").find("smallest failing configuration") != std::string::npos);
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  CHECK(summary.find("--kv-len 2048") != std::string::npos);
  CHECK(summary.find("- no ballast: --ballast dropped") != std::string::npos);
  // The real report, its runs the fake's: the smallest configuration, hung, the fault named as injected.
  const std::string report = test_util::file_text(out + "/report/REPORT.md");
  CHECK(report.find("[injected hang:softmax@S>=2048@alloc=managed: a test of the report] Scenario 2 hangs in softmax") !=
        std::string::npos);
  CHECK(json::parse(test_util::file_text(out + "/report/result.json")).at("report").at("finding") == "hang");
  CHECK(test_util::file_text(dir + "/fake.log").find("--kv-len 2048") != std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("repro minimize keeps a fault that comes only once in a while, as long as one run in N shows it") {
  const std::string dir = test_util::temp_dir("minimize_flaky"), out = dir + "/m";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_COUNTER", dir + "/count");
  env.set("MINIMIZE_FAKE_EVERY", "3");  // every third armed run hangs
  const auto r = minimize(out, {"--runs", "3", "--no-report"}, {"-L", "64", "-S", "4096", "--alloc", "managed", "--inject",
                                                                 "hang:softmax@S>=2048@alloc=managed"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const Options smallest = options_of(state_of(out).at("smallest"));
  CHECK(contains(smallest, {"--kv-len", "2048"}));
  CHECK(contains(smallest, {"--q-len", "1"}));
  test_util::remove_tree(dir);
}

TEST_CASE("repro minimize resumes after the machine froze mid-run and after an interrupt, to the same answer") {
  const std::string dir = test_util::temp_dir("minimize_resume"), out = dir + "/m";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_COUNTER", dir + "/count");
  SUBCASE("killed during a run with the machine (SIGKILL, then another boot): the run in flight counts as a hang") {
    env.set("MINIMIZE_FAKE_KILL_AT", "2");  // a run of the given configuration, which hangs anyway
    env.set(kTestBootIdVariable, "the-boot-that-froze");
    const auto killed = minimize(out, {"--runs", "2", "--no-report"}, kGiven);
    CHECK(killed.exit_code == 128 + SIGKILL);
    json state = state_of(out);
    REQUIRE(state.at("in_flight").is_object());
    CHECK(state.at("in_flight").at("run") == 2);
    // The boot and the tag are written before the run starts (its pid once it runs, which this run,
    // killing minimize at once, may not leave time for).
    CHECK(state.at("in_flight").at("process").at("boot_id") == "the-boot-that-froze");
    CHECK(state.at("in_flight").at("process").at("tag").get<std::string>().size() == 32);
    unsetenv("MINIMIZE_FAKE_KILL_AT");
    env.set(kTestBootIdVariable, "the-boot-after-it");
    const auto resumed = minimize(out, {"--resume", "--no-report"});
    INFO(resumed.out << resumed.err);
    REQUIRE(resumed.exit_code == 0);
    CHECK(resumed.out.find("run 2 was in flight when the machine stopped (it has booted again since): counted as a hang") !=
          std::string::npos);
    state = state_of(out);
    // The given configuration's two runs: the first hung, the second froze the machine (counted, not run again).
    REQUIRE(state.at("given_runs").size() == 2);
    CHECK(state.at("given_runs")[1].value("machine_stopped", false));
    CHECK(state.at("given_runs")[1].at("class") == "hang");
    CHECK(state.at("original") == canonical_options(kGiven).to_json());
    check_known_answer(options_of(state.at("smallest")));
  }
  SUBCASE("killed during a run on a machine that kept running: the run was interrupted, runs again, is not a hang") {
    // The second run of a configuration that does not fail: counted as a hang, it would make it "fail".
    env.set("MINIMIZE_FAKE_KILL_AT", "2");
    const Options passing = {"--scenario", "2", "-S", "1024"};
    const auto killed = minimize(out, {"--runs", "2", "--no-report"}, passing);
    CHECK(killed.exit_code == 128 + SIGKILL);
    unsetenv("MINIMIZE_FAKE_KILL_AT");
    const auto resumed = minimize(out, {"--resume", "--no-report"});
    INFO(resumed.out << resumed.err);
    CHECK(resumed.exit_code == 1);  // it did not fail: nothing to minimize
    CHECK(resumed.out.find("run 2 was interrupted (its process ended without a result on this boot: minimize was "
                           "stopped): it runs again") != std::string::npos);
    for (const char* word : {"hang", "froze", "machine stopped", "stuck"}) {
      CHECK_MESSAGE(resumed.out.find(word) == std::string::npos, word);
    }
    const json state = state_of(out);
    CHECK(state.at("phase") == "not_failing");
    REQUIRE(state.at("trial").at("runs").size() == 2);
    for (const json& run : state.at("trial").at("runs")) CHECK(run.at("class") == "pass");
    CHECK(state.at("trial").at("runs")[1].at("run") == 3);  // run 2 ran again, as run 3
  }
  SUBCASE("killed during a run whose process is still there: stuck, counted as a hang, left as it is") {
    env.set("MINIMIZE_FAKE_KILL_AT", "2");
    env.set("MINIMIZE_FAKE_STRAY", dir + "/strays");  // each run leaves a process that outlives it
    const Options passing = {"--scenario", "2", "-S", "1024"};
    const auto killed = minimize(out, {"--runs", "2", "--no-report"}, passing);
    CHECK(killed.exit_code == 128 + SIGKILL);
    unsetenv("MINIMIZE_FAKE_KILL_AT");
    unsetenv("MINIMIZE_FAKE_STRAY");
    const std::vector<std::string> strays = test_util::lines_of(test_util::file_text(dir + "/strays"));
    REQUIRE(strays.size() == 2);  // run 1's, run 2's
    const auto resumed = minimize(out, {"--resume", "--no-report"});
    INFO(resumed.out << resumed.err);
    CHECK(resumed.out.find("run 2's process is still there after minimize stopped (pid " + strays[1] +
                           " (minimize_fake_c") != std::string::npos);
    CHECK(resumed.out.find("stuck, counted as a hang, and left as it is") != std::string::npos);
    const json state = state_of(out);
    REQUIRE(state.at("given_runs").size() == 2);
    CHECK(state.at("given_runs")[1].at("class") == "hang");
    CHECK(state.at("given_runs")[1].at("stuck").get<std::string>().find("pid " + strays[1]) != std::string::npos);
    CHECK(kill(std::stoi(strays[1]), 0) == 0);
    for (const std::string& pid : strays) kill(std::stoi(pid), SIGKILL);
  }
  SUBCASE("interrupted (SIGINT): the run is not counted and is run again on --resume") {
    env.set("MINIMIZE_FAKE_INT_AT", "7");
    const auto interrupted = minimize(out, {"--runs", "2", "--no-report"}, kGiven);
    CHECK(interrupted.exit_code == 128 + SIGINT);
    CHECK(interrupted.out.find("interrupted by signal 2 during run 7 (not counted)") != std::string::npos);
    json state = state_of(out);
    CHECK(state.at("in_flight").is_null());
    CHECK(state.at("runs_started") == 7);
    unsetenv("MINIMIZE_FAKE_INT_AT");
    const auto resumed = minimize(out, {"--resume", "--no-report"});
    INFO(resumed.out << resumed.err);
    REQUIRE(resumed.exit_code == 0);
    check_known_answer(options_of(state_of(out).at("smallest")));
  }
  test_util::remove_tree(dir);
}

TEST_CASE("repro minimize: a configuration that does not fail, and bad command lines") {
  const std::string dir = test_util::temp_dir("minimize_bad"), out = dir + "/m";
  const auto passing = minimize(out, {"--runs", "2", "--no-report"}, {"-L", "64"});
  CHECK(passing.exit_code == 1);
  CHECK(passing.out.find("did not fail in 2 runs: nothing to minimize") != std::string::npos);
  // A hang is not the failure asked for: the configuration does not fail as --fails-with says.
  const auto other = minimize(dir + "/other", {"--runs", "1", "--no-report", "--fails-with", "stall,mismatch"},
                              {"-S", "4096", "--inject", "hang:softmax@S>=2048"});
  CHECK(other.exit_code == 1);
  CHECK(other.out.find("did not fail (mismatch, stall) in 1 runs") != std::string::npos);
  const auto again = minimize(out, {"--no-report"}, {"-L", "64"});
  CHECK(again.exit_code == kExitUsage);
  CHECK(again.err.find("holds a minimization: --resume to go on, --force to start again") != std::string::npos);
  for (const auto& bad : std::vector<std::pair<Options, std::string>>{
           {{"--", "-L", "zero"}, "repro minimize: error: "},
           {{"--budget", "soon", "--", "-L", "64"}, "--budget: 'soon' is not a duration"},
           {{"--fails-with", "slow", "--", "-L", "64"}, "--fails-with: 'slow' is not one of"},
           {{"--from-sweep", "/nonexistent.json"}, "--from-sweep needs --cell K"},
           {{}, "give one configuration"},
           {{"--resume", "--", "-L", "64"}, "--resume goes on with the configuration in --out"}}) {
    const auto r = minimize(dir + "/bad", bad.first);
    INFO(shell_command(bad.first) << ": " << r.err);
    CHECK(r.exit_code == kExitUsage);
    CHECK(r.err.find(bad.second) != std::string::npos);
    CHECK(test_util::lines_of(r.err).size() == 1);
  }
  test_util::remove_tree(dir);
}

TEST_CASE("repro minimize takes a sweep's cell by its index") {
  const std::string dir = test_util::temp_dir("minimize_sweep");
  const RunSpec run = parse_run_spec({"--scenario", "0", "-L", "64", "-S", "4096", "--alloc", "managed", "--inject",
                                      "hang:softmax@S>=2048", "--stage-timeout", "20"});
  json cell = {{"index", 4}, {"run_options", run.to_json()}};
  std::ofstream(dir + "/sweep.jsonl") << json{{"index", 3}, {"run_options", json::object()}}.dump() << "\n" << cell.dump() << "\n";
  const auto r = minimize(dir + "/m", {"--runs", "1", "--no-report", "--from-sweep", dir + "/sweep.jsonl", "--cell", "4"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(options_of(state_of(dir + "/m").at("smallest")), {"--kv-len", "2048"}));
  const auto missing = minimize(dir + "/m2", {"--from-sweep", dir + "/sweep.jsonl", "--cell", "9"});
  CHECK(missing.exit_code == kExitUsage);
  CHECK(missing.err.find("--cell 9: " + dir + "/sweep.jsonl has no such cell") != std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("repro minimize takes a report's failing configuration (its fix-off command in result.json)") {
  const std::string dir = test_util::temp_dir("minimize_report");
  const auto report = test_util::run_program({SDPA_REPRO_BINARY, "report", "--no-run", "--out", dir + "/r", "--scenario", "2",
                                              "-L", "32", "-S", "4096", "--allow-inject", "--inject",
                                              "hang:softmax@S>=2048@alloc=managed"});
  REQUIRE(report.exit_code == 0);
  const auto r = minimize(dir + "/m", {"--runs", "1", "--no-report", "--from-report", dir + "/r"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const Options smallest = options_of(state_of(dir + "/m").at("smallest"));
  CHECK(contains(smallest, {"--kv-len", "2048"}));
  CHECK(contains(smallest, {"--scenario", "2"}));
  const auto missing = minimize(dir + "/m2", {"--from-report", dir + "/nowhere"});
  CHECK(missing.exit_code == kExitUsage);
  CHECK(missing.err.find("--from-report: " + dir + "/nowhere/result.json cannot be read") != std::string::npos);
  test_util::remove_tree(dir);
}

// Damaged sources: each refused with one line that names the file and what is wrong, nothing run.
TEST_CASE("repro minimize: a sweep or a report that does not read is refused, saying which file and why") {
  const std::string dir = test_util::temp_dir("minimize_damaged");
  std::ofstream(dir + "/garbage.jsonl") << "{\"index\": 0, \"run_options\"\n";
  std::ofstream(dir + "/bare.jsonl") << json{{"index", 0}}.dump() << "\n";
  std::ofstream(dir + "/doc.json") << json{{"cells", json::array({json{{"index", 2}, {"run_options", parse_run_spec(
                                                                        {"--scenario", "1"}).to_json()}}})}}.dump();
  std::filesystem::create_directories(dir + "/report");
  std::ofstream(dir + "/report/result.json") << json{{"report", json::object()}}.dump();
  const std::vector<std::pair<Options, std::string>> refused = {
      {{"--from-sweep", dir + "/garbage.jsonl", "--cell", "0"}, "--from-sweep: " + dir + "/garbage.jsonl is not a sweep document or JSON-lines file ("},
      {{"--from-sweep", dir + "/bare.jsonl", "--cell", "0"}, "--from-sweep: cell 0 of " + dir + "/bare.jsonl has no run_options ("},
      {{"--from-sweep", dir + "/doc.json", "--cell", "3"}, "--cell 3: " + dir + "/doc.json has no such cell"},
      {{"--from-report", dir + "/report"}, "--from-report: " + dir + "/report/result.json has no run_options.fix_off ("},
  };
  for (const auto& [options, message] : refused) {
    CAPTURE(message);
    const auto r = minimize(dir + "/m", options);
    CHECK(r.exit_code == kExitUsage);
    CHECK(r.err.find(message) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_FALSE(std::filesystem::exists(dir + "/m"));
  }
  // A sweep document (sweep.json) is read as well as its JSON lines.
  const auto doc = minimize(dir + "/d", {"--runs", "1", "--no-report", "--from-sweep", dir + "/doc.json", "--cell", "2"});
  CHECK(doc.exit_code == 1);  // scenario 1, no fault: nothing fails, nothing to minimize
  CHECK(doc.err.find("no such cell") == std::string::npos);
  test_util::remove_tree(dir);
}

}  // TEST_SUITE
