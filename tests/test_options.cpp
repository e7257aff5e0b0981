// test_options.cpp: repro's command line: defaults, every option, and every bad input (exit 2
// with one line).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"
#include "math_sdpa/npy.h"
#include "repro/bench/bench.h"
#include "repro/cli/context_ladder.h"
#include "repro/cli/help_format.h"
#include "repro/cli/run_options.h"
#include "repro/cli/tables.h"
#include "repro/commands.h"
#include "repro/common/output_paths.h"
#include "repro/common/text.h"
#include "repro/sweep/matrix.h"
#include "repro/sweep/sweep_options.h"
#include "parse_words.h"
#include "run_program.h"

using namespace sdpa;
using test_util::lines_of;
using test_util::parse;

namespace {

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += a + " ";
  return s;
}

// A refused command line: exit 2, one line "repro: error: ..." naming the problem.
void check_refused(const std::vector<std::string>& args, const std::string& needle) {
  const ParseResult r = parse(args);
  INFO("args: ", joined(args), "-> ", r.message);
  CHECK_FALSE(r.run);
  CHECK(r.exit_code == kExitUsage);
  CHECK(r.message.find('\n') == std::string::npos);
  CHECK(r.message.rfind("repro: error: ", 0) == 0);
  CHECK(r.message.find(needle) != std::string::npos);
}

void check_accepted(const std::vector<std::string>& args) {
  const ParseResult r = parse(args);
  INFO("args: ", joined(args), "-> ", r.message);
  CHECK(r.run);
}

// q.npy, k.npy and v.npy of [B, H, L, E] float32 in `dir`.
void write_inputs(const std::string& dir, int64_t B, int64_t H, int64_t L, int64_t E) {
  const std::vector<float> zeros(static_cast<size_t>(B * H * L * E), 0.25f);
  for (const char* name : {"/q.npy", "/k.npy", "/v.npy"}) write_npy_float32(dir + name, {B, H, L, E}, zeros.data());
}
}  // namespace

TEST_SUITE("options") {
  TEST_CASE("a value out of range reads the same whichever CLI11 wrote the message") {
    // Debian 12's CLI11 2.3 and Ubuntu 24.04's 2.4 (the GPU machines') word it differently.
    CHECK(range_error("--scenario: Value 9 not in range 0.000000 to 7.000000") == "--scenario: '9' is not in 0-7");
    CHECK(range_error("--scenario: Value 8 not in range [0 - 7]") == "--scenario: '8' is not in 0-7");
    CHECK(range_error("--stage-timeout: Value 0 not in range [0.01 - 86400]") ==
          "--stage-timeout: '0' is not in [0.01, 86400]");
    CHECK(range_error("--stage-timeout: Value 0 not in range 0.010000 to 86400.000000") ==
          "--stage-timeout: '0' is not in [0.01, 86400]");
    CHECK(range_error("--scale: Value -9 not in range [-5 - 5]") == "--scale: '-9' is not in -5-5");
    CHECK(range_error("--scenario: Value 9 not in range somewhere").empty());
    CHECK(range_error("--scenario: Value 9 not in range [0 7]").empty());
    CHECK(range_error("Could not convert: --batch = x").empty());
  }

  TEST_CASE("defaults: scenario 0 at the original standalone test's shape, bf16, managed memory") {
    const ParseResult r = parse({});
    REQUIRE(r.run);
    const RunOptions& o = r.options;
    CHECK(o.scenario == 0);
    CHECK(o.problem.shape_string() == "B=2 Hq=8 Hkv=8 L=128 S=128 E=64");
    CHECK(o.problem.dtype == DType::bf16);
    CHECK(o.problem.precision == Precision::upcast);
    CHECK(o.problem.mask == MaskKind::none);
    CHECK(o.settings.alloc == AllocKind::managed);
    CHECK(o.fixes.empty());
    CHECK(o.iters == 1);
    CHECK_FALSE(o.check);
    CHECK_FALSE(o.dtype_given);
  }

  TEST_CASE("every option reaches the configuration") {
    const ParseResult r =
        parse({"--scenario", "0", "--dtype", "fp16", "--precision", "native", "-b", "3", "--heads", "12", "--kv-heads",
               "4", "-L", "100", "-S", "77", "-E", "80", "--mask", "bool", "--mask-dims", "BxH", "--dropout", "0.25",
               "--scale", "0.5", "--seed", "99", "--alloc", "device", "--allow-oversubscription", "--iters", "7",
               "--check", "--json", "out.json", "--save-output", "o.npy"});
    REQUIRE(r.run);
    const SdpaProblem& p = r.options.problem;
    CHECK(p.dtype == DType::fp16);
    CHECK(r.options.dtype_given);
    CHECK(p.precision == Precision::native);
    CHECK(p.shape_string() == "B=3 Hq=12 Hkv=4 L=100 S=77 E=80");
    CHECK(p.mask == MaskKind::boolean);
    CHECK(p.mask_per_batch);
    CHECK(p.mask_per_head);
    CHECK(p.dropout_p == 0.25);
    CHECK(p.softmax_scale() == 0.5);
    CHECK(p.seed == 99);
    CHECK(r.options.settings.alloc == AllocKind::device);
    CHECK(r.options.allow_oversubscription);
    CHECK(r.options.iters == 7);
    CHECK(r.options.check);
    CHECK(r.options.json_path == "out.json");
    CHECK(r.options.save_output_path == "o.npy");
    CHECK(r.options.argv.size() == 39);
  }

  TEST_CASE("S and Hkv default to L and Hq; --mask-dims picks the broadcast") {
    const ParseResult r = parse({"-L", "64", "--heads", "4", "--mask", "float", "--mask-dims", "Bx1"});
    REQUIRE(r.run);
    CHECK(r.options.problem.kv_len == 64);
    CHECK(r.options.problem.kv_heads == 4);
    CHECK(r.options.problem.mask == MaskKind::additive);
    CHECK(r.options.problem.mask_per_batch);
    CHECK_FALSE(r.options.problem.mask_per_head);
  }

  TEST_CASE("--seed takes any 64-bit unsigned integer and nothing else") {
    CHECK(parse({"--seed", "0"}).options.problem.seed == 0);
    CHECK(parse({"--seed", "18446744073709551615"}).options.problem.seed == UINT64_MAX);
    for (const char* bad : {"18446744073709551616", "99999999999999999999", "-1", "1e3", "0x10", "12a", "", " 7"}) {
      CAPTURE(bad);
      const ParseResult r = parse({"--seed", bad});
      CHECK_FALSE(r.run);
      CHECK(r.exit_code == kExitUsage);
    }
  }

  TEST_CASE("--help fits a screen: a first run's options, the rest one command away (--help-all)") {
    const ParseResult r = parse({"--help"});
    CHECK_FALSE(r.run);
    CHECK(r.exit_code == 0);
    CHECK(lines_of(r.message).size() <= 50);
    for (const char* shown : {"--scenario", "--fix on|off|lean", "--workload", "--check", "--plan", "--backward",
                              "\n  7  the model's mapped weights", "Exit codes:", "repro help options"}) {
      CHECK_MESSAGE(r.message.find(shown) != std::string::npos, shown);
    }
    CHECK(r.message.find("--allow-oversubscription") == std::string::npos);
    CHECK(parse({"-h"}).message == r.message);
    const ParseResult all = parse({"--help-all"});
    CHECK(all.exit_code == 0);
    CHECK(all.message.find("--allow-oversubscription") != std::string::npos);
    CHECK(lines_of(all.message).size() > lines_of(r.message).size() + 60);
  }

  TEST_CASE("--help-all: the groups in order, every line within 100 columns, a label or the choices of each option") {
    const std::string help = parse({"--help-all"}).message;
    for (const std::string& line : lines_of(help)) CHECK_MESSAGE(line.size() <= kHelpWidth, line);
    size_t at = 0;
    for (const char* group : {"\nProblem:\n", "\nMemory:\n", "\nScenario and fixes:\n", "\nTraining context:\n",
                              "\nLogging and watchdog:\n", "\nRun and output:\n"}) {
      const size_t found = help.find(group, at);
      CHECK_MESSAGE(found != std::string::npos, group);
      at = found == std::string::npos ? at : found;
    }
    // Labels, and the accepted words of the enumerated options, from the tables that parse them.
    for (const std::string& shown : std::vector<std::string>{"--json FILE", "--save-output FILE", "--log-file FILE", "--inputs DIR", "--snapshot-dir DIR",
                              "--seed SEED", "--stage-timeout S", "-b,--batch INT", "--dtype bf16|fp16|fp32",
                              "--precision upcast|native", "--mask-dims 1x1|Bx1|1xH|BxH", "--scenario " + scenario_range(), "--fix on|off|lean",
                              "none, bool, float", "managed, device, async, host, system, vmm", "legacy, non-blocking, per-thread",
                              "off, stages, sync, values", "snapshot (", "qwen-image-1024", "entry_sync"}) {
      CHECK_MESSAGE(help.find(shown) != std::string::npos, shown);
    }
    // Neither CLI11's generic types nor its validator texts ("INT:INT in [0 - 4]").
    CHECK(help.find(" TEXT") == std::string::npos);
    CHECK(help.find(":INT") == std::string::npos);
    CHECK(help.find("Print this help") == std::string::npos);
    // The subcommands in the usage, the exit codes and the scenarios in the footer.
    CHECK(help.find("Usage: repro [OPTIONS]") != std::string::npos);
    CHECK(help.find("repro report|sweep|bench|info") != std::string::npos);
    CHECK(help.find("repro -V") != std::string::npos);
    CHECK(help.find("Exit codes: 0 pass, 1 mismatch") != std::string::npos);
    CHECK(help.find("7 no usable GPU or driver, 8 refused") != std::string::npos);
    CHECK(help.find("\n  2  softmax reduction on unified memory under migration (its fix: 2)\n") != std::string::npos);
    CHECK(help.find("-h,--help") > help.find("--save-output"));  // last
    // The scenarios in full are `repro help scenarios`.
    CHECK(lines_of(help).size() < 175);
    const std::string scenarios = scenarios_help();
    CHECK(scenarios.find("a hang looks like:") != std::string::npos);
    for (const std::string& line : lines_of(scenarios)) CHECK_MESSAGE(line.size() <= kHelpWidth, line);
  }

  TEST_CASE("wrap_text: long lines wrapped at the width under their own indent; short lines kept as written") {
    CHECK(wrap_text("a  b", 10) == "a  b");
    CHECK(wrap_text("  one two three four", 10) == "  one two\n  three\n  four");
    CHECK(wrap_text("first line\nsecond", 6) == "first\nline\nsecond");
    CHECK(wrap_words("a-word-longer-than-the-width x", 8) == std::vector<std::string>{"a-word-longer-than-the-width", "x"});
  }

  TEST_CASE("one --stage-timeout default, for a run, a bench and a sweep's cells") {
    CHECK(parse({}).options.stage_timeout_s == kDefaultStageTimeoutS);
    const char* bench[] = {"bench"};
    CHECK(parse_bench_command_line(1, bench).options.run.stage_timeout_s == kDefaultStageTimeoutS);
    const char* sweep[] = {"sweep"};
    CHECK(parse_sweep_command_line(1, sweep).options.stage_timeout_s == kDefaultStageTimeoutS);
    CHECK(parse({"--help-all"}).message.find("--stage-timeout S           the watchdog's deadline for any one stage, seconds "
                                         "(default 20)") != std::string::npos);
  }

  TEST_CASE("options the configuration would ignore are refused, with one line") {
    check_refused({"--scenario", "1", "--dropout", "0.1"}, "before dropout");
    check_refused({"--scenario", "2", "--dropout", "0.1"}, "before dropout");
    check_refused({"--scenario", "3", "--dropout", "0.1"}, "before dropout");
    check_accepted({"--scenario", "1", "--dropout", "0.1", "--full"});
    check_accepted({"--scenario", "0", "--dropout", "0.1"});
    check_accepted({"--scenario", "4", "--dropout", "0.1"});
    check_refused({"--mask-dims", "Bx1"}, "no mask tensor");
    check_refused({"--mask", "causal", "--mask-dims", "1xH"}, "no mask tensor");
    check_refused({"--text-padding", "4:2", "--mask-dims", "1xH"}, "--text-padding");
    check_accepted({"--mask", "bool", "--mask-dims", "Bx1"});
    check_accepted({"--mask", "float", "--mask-dims", "BxH"});
    check_refused({"--sample-every", "10"}, "--iters above");
    check_refused({"--sample-every", "5", "--iters", "5"}, "--iters above");
    check_accepted({"--sample-every", "5", "--iters", "6"});
    check_refused({"--scale", "0"}, "--scale");
    check_refused({"--scale", "-0"}, "--scale");
    check_accepted({"--scale", "-0.5"});
    // A fault goes only where its stage runs, and a stall only where the stage waits for the GPU.
    check_refused({"--inject", "error:graph_launch"}, "--graph");
    check_accepted({"--graph", "--inject", "error:graph_capture"});
    check_accepted({"--graph", "--inject", "hang:graph_launch"});
    check_refused({"--graph", "--inject", "hang:graph_capture"}, "waits for nothing on the GPU");
    check_refused({"--graph", "--inject", "slow:graph_instantiate:50"}, "waits for nothing on the GPU");
    // A graph holds the stream-ordered parts of the fixes and where tensors are allocated, not the
    // host's synchronisations nor a prefetch.
    check_accepted({"--graph", "--fixes", "1:lean,3,4"});
    check_accepted({"--graph", "--fixes", "2:lean"});
    check_accepted({"--graph", "--fixes", "all:lean"});
    check_accepted({"--scenario", "5", "--fix", "on"});
    check_refused({"--graph", "--fixes", "1"}, "--fixes 1:lean keeps its stream-ordered part");
    check_refused({"--graph", "--fixes", "2"}, "--fixes 2:lean, the scores in device memory, needs no capture");
    check_refused({"--graph", "--fixes", "2:prefetch"}, "cudaErrorStreamCaptureUnsupported");
    check_refused({"--scenario", "5", "--fixes", "2:prefetch"}, "cudaErrorStreamCaptureUnsupported");
  }

  TEST_CASE("output paths that cannot be written are refused while parsing, and nothing is created") {
    const std::string dir = test_util::temp_dir("options_paths");
    { std::ofstream(dir + "/file") << "x"; }
    const std::string file = dir + "/file", missing = dir + "/missing";
    check_refused({"--json", file + "/r.json"}, "--json: cannot write " + file + "/r.json: " + file + " is not a directory");
    check_refused({"--json", missing + "/r.json"}, "directory " + missing + " does not exist");
    check_refused({"--json", dir}, "it is a directory");
    check_refused({"--save-output", missing + "/o.npy"}, "--save-output: cannot write " + missing + "/o.npy");
    // Each option's own path is checked, whatever the other's is.
    check_refused({"--json", dir + "/r.json", "--save-output", missing + "/o.npy"}, "--save-output: cannot write " + missing);
    check_refused({"--save-output", dir + "/o.npy", "--json", missing + "/r.json"}, "--json: cannot write " + missing);
    check_refused({"--log-file", file + "/run.log"}, "--log-file");
    check_refused({"--snapshot-dir", file + "/snap"}, "--snapshot-dir: cannot create");
    check_refused({"--snapshot-dir", file}, "is not a directory");
    // Writable: a new file in an existing directory, a snapshot folder under folders still to be made.
    check_accepted({"--json", dir + "/r.json", "--save-output", dir + "/o.npy", "--log-file", dir + "/run.log",
                    "--snapshot-dir", missing + "/deeper/snap"});
    CHECK(test_util::file_text(dir + "/file") == "x");
    CHECK_FALSE(std::filesystem::exists(missing));
    CHECK_FALSE(std::filesystem::exists(dir + "/r.json"));
    CHECK_FALSE(std::filesystem::exists(dir + "/run.log"));
    test_util::remove_tree(dir);
  }

  TEST_CASE("--inputs are read while parsing: the files set the problem; a missing, empty or junk folder is refused") {
    const std::string dir = test_util::temp_dir("options_inputs");
    write_inputs(dir, 1, 2, 16, 8);
    const ParseResult r = parse({"--inputs", dir, "--scenario", "1"});
    REQUIRE(r.run);
    CHECK(r.options.problem.shape_string() == "B=1 Hq=2 Hkv=2 L=16 S=16 E=8");
    CHECK(r.options.problem.dtype == DType::fp32);
    REQUIRE(r.options.inputs);
    CHECK(r.options.inputs->q.size() == 1 * 2 * 16 * 8);
    CHECK(r.options.inputs->q[5] == 0.25f);
    // The rest of the checks see the loaded problem: no mask.npy, so no mask_add stage to hang in.
    check_refused({"--inputs", dir, "--inject", "hang:mask_add"}, "does not run");
    check_refused({"--inputs", dir + "/absent"}, "--inputs: " + dir + "/absent does not exist");
    check_refused({"--inputs", dir + "/q.npy"}, "is not a directory");
    const std::string empty = dir + "/empty";
    std::filesystem::create_directory(empty);
    check_refused({"--inputs", empty}, "has no q.npy");
    { std::ofstream(dir + "/q.npy", std::ios::trunc) << "not numpy"; }
    check_refused({"--inputs", dir}, "q.npy: not a .npy file");
    test_util::remove_tree(dir);
  }

  TEST_CASE("bad command lines exit 2 with one line naming the problem") {
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--batch", "0"}, "batch"},
        {{"--batch", "-3"}, "batch"},
        {{"--heads", "0"}, "heads"},
        {{"--kv-heads", "0"}, "kv-heads"},
        {{"--kv-heads", "-1"}, "kv-heads"},
        {{"-L", "0"}, "q-len"},
        {{"-S", "-1"}, "kv-len"},
        {{"-E", "0"}, "head-dim"},
        {{"--heads", "8", "--kv-heads", "3"}, "multiple"},
        {{"--dropout", "1"}, "dropout"},
        {{"--dropout", "1.5"}, "dropout"},
        {{"--dropout", "-0.1"}, "dropout"},
        {{"--dropout", "nan"}, "dropout"},
        {{"--scale", "inf"}, "scale"},
        {{"--dtype", "fp64"}, "dtype"},
        {{"--dtype", "BF16"}, "dtype"},
        {{"--precision", "half"}, "precision"},
        {{"--mask", "triangle"}, "mask"},
        {{"--mask-dims", "2x2"}, "mask-dims"},
        {{"--alloc", "pinned"}, "alloc"},
        {{"--scenario", std::to_string(scenario_count())}, "scenario"},
        {{"--scenario", "-1"}, "scenario"},
        {{"--iters", "0"}, "iters"},
        {{"--iters", "ten"}, "iters"},
        {{"--batch", "two"}, "batch"},
        {{"--batch", "99999999999999999999999"}, "batch"},
        {{"-L", "4294967296"}, "q-len"},
        {{"--heads", "4", "-L", "2147483647", "-S", "2147483647", "-E", "1"}, "overflow"},
        {{"--seed", "-5"}, "seed"},
        {{"--no-such-option"}, "no-such-option"},
        {{"stray"}, "stray"},
        {{"--batch"}, "batch"},
        {{"--json"}, "json"},
    };
    for (const auto& [args, needle] : cases) check_refused(args, needle);
  }
}

// A configuration read back (a sweep's cell, a report's runs, a minimization's state) or set by
// name: each value must be what the option takes, or one line naming the option.
TEST_SUITE("options") {
  TEST_CASE("a RunSpec set by name or read from JSON refuses values of the wrong kind, naming the option") {
    RunSpec spec;
    spec.set("--batch", "4");
    spec.set("--scale", "0.125");
    spec.set("--check", "");
    CHECK(spec.batch == 4);
    CHECK(spec.scale == 0.125);
    CHECK(spec.check);
    const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> bad_text = {
        {{"--batch", "4x"}, "--batch: '4x' is not an integer"},
        {{"--batch", ""}, "--batch: '' is not an integer"},
        {{"--batch", "99999999999999999999"}, "--batch: '99999999999999999999' is beyond a 64-bit integer"},
        {{"--scale", "0.1.2"}, "--scale: '0.1.2' is not a number"},
        {{"--scale", "inf"}, "--scale: 'inf' is not a finite number"},
        {{"--scale", ""}, "is not a number"},
    };
    for (const auto& [option_text, message] : bad_text) {
      CAPTURE(message);
      RunSpec s;
      try {
        s.set(option_text.first, option_text.second);
        FAIL("no error");
      } catch (const InputError& e) {
        CHECK(std::string(e.what()).find(message) != std::string::npos);
      }
    }
    const std::vector<std::pair<nlohmann::json, std::string>> bad_json = {
        {nlohmann::json::array(), "run options: not a JSON object"},
        {{{"bogus", 1}}, "\"bogus\" is not a run option"},
        {{{"check", 1}}, "\"check\" must be true or false"},
        {{{"alloc", 3}}, "\"alloc\" must be a string"},
        {{{"batch", 2.5}}, "\"batch\" must be an integer"},
        {{{"scale", "x"}}, "\"scale\" must be a number"},
    };
    for (const auto& [doc, message] : bad_json) {
      CAPTURE(message);
      try {
        RunSpec::from_json(doc);
        FAIL("no error");
      } catch (const InputError& e) {
        CHECK(std::string(e.what()).find(message) != std::string::npos);
      }
    }
  }
}

// One option table for every command, each value checked against its row in one place, from a
// command line or a RunSpec built in code alike, in the harness's words.
TEST_SUITE("options") {
  // Catches a command that checks a shared option against a range of its own again (triage's
  // --stage-timeout was 0.5-3600 where a run's is 0.01-86400).
  TEST_CASE("one range per option: --stage-timeout means the same to a run, a bench, a sweep and a triage") {
    const auto run_takes = [](const std::string& v) { return parse({"--stage-timeout", v}).run; };
    const auto bench_takes = [](const std::string& v) {
      const char* argv[] = {"bench", "--stage-timeout", v.c_str()};
      return parse_bench_command_line(3, argv).run;
    };
    const auto sweep_takes = [](const std::string& v) {
      const char* argv[] = {"sweep", "--stage-timeout", v.c_str(), "--cell-timeout", "86400"};
      return parse_sweep_command_line(5, argv).run;
    };
    test_util::TempDir dir("stage_timeout");
    // In this process (its plan on stdout, its error on stderr, both kept here): a dry run starts nothing.
    const auto triage_takes = [&](const std::string& v) {
      const std::string out = dir.path + "/t";
      std::vector<std::string> words = {"triage", "--dry-run", "--no-bug-report", "--out", out, "--stage-timeout", v};
      std::vector<char*> argv;
      for (std::string& w : words) argv.push_back(w.data());
      std::ostringstream printed, error;
      std::streambuf* cout = std::cout.rdbuf(printed.rdbuf());
      std::streambuf* cerr = std::cerr.rdbuf(error.rdbuf());
      const int code = triage_main(static_cast<int>(argv.size()), argv.data());
      std::cout.rdbuf(cout);
      std::cerr.rdbuf(cerr);
      INFO(error.str());
      CHECK((code == 0 || code == kExitUsage));
      return error.str().find("--stage-timeout") == std::string::npos;
    };
    for (const auto& [value, taken] : std::vector<std::pair<std::string, bool>>{
             {"0.01", true}, {"0.1", true}, {"3601", true}, {"86399", true}, {"0.005", false}, {"86401", false}, {"x", false}}) {
      CAPTURE(value);
      CHECK(run_takes(value) == taken);
      CHECK(bench_takes(value) == taken);
      CHECK(sweep_takes(value) == taken);
      CHECK(triage_takes(value) == taken);
    }
  }

  // Catches validate_run_spec trusting a RunSpec built in code (a minimize step, a ladder's rung):
  // what a child's parser would refuse must be refused here, on the value, in the same words.
  TEST_CASE("a RunSpec is validated on the value, as the child's parser would take its argv") {
    const auto refused = [](const RunSpec& spec, RunCommand command, const std::string& needle) {
      try {
        validate_run_spec(spec, command);
        FAIL("accepted: ", spec.to_json().dump());
      } catch (const InputError& e) {
        CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
      }
    };
    RunSpec spec;
    spec.iters = 0;
    refused(spec, RunCommand::run, "--iters: '0' is not in 1-100000000");
    spec = RunSpec{};
    spec.touch_streams = 65;
    refused(spec, RunCommand::run, "--touch-streams: '65' is not in 0-64");
    spec = RunSpec{};
    spec.dtype = "fp61";
    refused(spec, RunCommand::run, "--dtype: unknown value 'fp61' (did you mean fp16?");
    spec = RunSpec{};
    spec.json = "";
    refused(spec, RunCommand::run, "--json: an empty name names no file or folder");
    spec = RunSpec{};
    spec.scenario = 2;
    spec.fix = "on";
    refused(spec, RunCommand::report, "--fix is not an option of repro report");
    spec = RunSpec{};
    refused(spec, RunCommand::report, "--scenario is required");
    // The same options as the child parses them from spec.to_argv().
    spec = RunSpec{};
    spec.scenario = 2;
    spec.q_len = 256;
    spec.fixes = "2:lean";
    std::vector<std::string> words = spec.to_argv();
    words.insert(words.begin(), "repro");
    const RunOptions on_value = validate_run_spec(spec);
    const RunOptions parsed = test_util::run_options(std::vector<std::string>(words.begin() + 1, words.end()));
    CHECK(on_value.problem.shape_string() == parsed.problem.shape_string());
    CHECK(on_value.fixes == parsed.fixes);
    CHECK(on_value.argv == words);
    // A captured call: its derived options in front, as the child's parser puts them.
    spec = RunSpec{};
    spec.workload_file = std::string(SDPA_SOURCE_DIR) + "/tests/fixtures/capture/workload.json";
    words = spec.to_argv();
    words.insert(words.begin(), "repro");
    ParseResult child;
    {
      std::vector<const char*> argv;
      for (const std::string& w : words) argv.push_back(w.c_str());
      child = parse_command_line(static_cast<int>(argv.size()), argv.data());
    }
    REQUIRE_MESSAGE(child.run, child.message);
    const RunOptions replayed = validate_run_spec(spec);
    CHECK(replayed.argv == child.options.argv);
    CHECK(replayed.problem.shape_string() == child.options.problem.shape_string());
    CHECK(replayed.spec == child.options.spec);
  }

  // Catches to_argv's words read back in the wrong order (a value taken as the option's name).
  TEST_CASE("RunSpec::from_argv reads to_argv's words back") {
    RunSpec spec;
    spec.scenario = 7;
    spec.check = true;
    spec.mapped_weights = "1G";
    spec.scale = 0.25;
    CHECK(RunSpec::from_argv(spec.to_argv()) == spec);
    for (const auto& [words, needle] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"--batch"}, "--batch needs a value (--batch INT)"},
             {{"--batch", "--check"}, "--batch needs a value before --check"},
             {{"frobnicate"}, "'frobnicate' is not a run option"},
             {{"--iters", "0"}, "--iters: '0' is not in 1-100000000"}}) {
      try {
        RunSpec::from_argv(words);
        FAIL("accepted");
      } catch (const InputError& e) {
        CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
      }
    }
  }

  // Catches a nearest word that misses a swap of neighbours, or offers one too far to be meant.
  TEST_CASE("a word outside a closed set names the one it most likely meant") {
    CHECK(nearest_word("hnag", {"hang", "retry"}) == "hang");    // two neighbours swapped: one edit
    CHECK(nearest_word("fp61", {"bf16", "fp16", "fp32"}) == "fp16");
    CHECK(nearest_word("kep", {"unmap", "keep"}) == "keep");
    CHECK(nearest_word("scenario", {"options", "scenarios", "stages"}) == "scenarios");
    CHECK(nearest_word("xyz", {"hang", "retry"}).empty());
    CHECK(unknown_value("--in-flight", "hnag", {"hang", "retry"}) ==
          "--in-flight: unknown value 'hnag' (did you mean hang? expected hang|retry)");
    CHECK(unknown_value("--mask", std::string("bf16\nfp16") + std::string(60, 'x'), {"none"}).find('\n') == std::string::npos);
    CHECK(choice_error("--fix-form: leen not in {design,lean}") ==
          "--fix-form: unknown value 'leen' (did you mean lean? expected design|lean)");
    CHECK(choice_error("--fix-form is required").empty());
  }

  // Catches a library's wording reaching a user, or the words after its message eaten with it.
  TEST_CASE("one_line: a library's message in the harness's words") {
    CHECK(one_line("--matrix m.json: not JSON: [json.exception.parse_error.101] parse error at line 1, column 2: syntax "
                   "error while parsing value - invalid literal; last read: 'no'") ==
          "--matrix m.json: not JSON: line 1, column 2: invalid literal; last read: 'no'");
    CHECK(one_line("f is not a sweep document ([json.exception.parse_error.101] parse error at line 3, column 1: syntax "
                   "error while parsing object - unexpected end of input; expected '}') (--resume --force continues)") ==
          "f is not a sweep document (line 3, column 1: unexpected end of input; expected '}') (--resume --force continues)");
    CHECK(one_line("cell 0 has no run_options ([json.exception.out_of_range.403] key 'run_options' not found)") ==
          "cell 0 has no run_options (no key 'run_options')");
    CHECK(one_line("\"dtypes\": [json.exception.type_error.302] type must be string, but is number") ==
          "\"dtypes\": a string was expected, not a number");
    CHECK(one_line("filesystem error: status: File name too long [" + std::string(300, 'a') + "]") ==
          "'" + std::string(40, 'a') + "'...: File name too long");
    CHECK(one_line("plain\nwords ") == "plain words");
  }

  // Catches a check of a path's length that is off by one, or that forgets the characters the
  // harness adds to a file it writes (its temporary NAME.tmp.PID).
  TEST_CASE("a path's name: NAME_MAX a part, PATH_MAX the whole, room for the harness's own") {
    const auto refused = [](auto check, const std::string& path) {
      try {
        check("--x", path);
        return false;
      } catch (const InputError&) {
        return true;
      }
    };
    CHECK_FALSE(refused(check_not_empty, std::string(255, 'a')));
    CHECK(refused(check_not_empty, std::string(256, 'a')));
    CHECK(refused(check_not_empty, "d/" + std::string(256, 'a') + "/f"));
    CHECK(refused(check_not_empty, ""));
    CHECK_FALSE(refused(check_written_file_name, std::string(231, 'a')));
    CHECK(refused(check_written_file_name, std::string(232, 'a')));
    std::string deep;
    while (deep.size() < 4200) deep += std::string(200, 'd') + "/";
    CHECK(refused(check_not_empty, deep));
  }

  // Catches a rung that takes away what a scenario's record sets (scenario 7's 57 GB of weights
  // cut to the mapped-weights rung's 16 GB), and a rung that drops what its caller gave.
  TEST_CASE("the context ladder never takes away what the scenario's record sets") {
    const auto rung = [](const ContextLadderValues& v, const std::string& name) {
      for (const ContextRung& r : context_ladder(v)) {
        if (r.name == name) return r.adds;
      }
      FAIL("no rung ", name);
      return RunSpec{};
    };
    int weights_scenario = -1, plain_scenario = -1;
    for (const ScenarioInfo& sc : scenario_table()) {
      bool sets_weights = false;
      for (const auto& [field, value] : sc.preconditions) sets_weights = sets_weights || field == "mapped_weights";
      if (sets_weights && weights_scenario < 0) weights_scenario = sc.number;
      if (!sets_weights && sc.number > 0 && plain_scenario < 0) plain_scenario = sc.number;
    }
    REQUIRE(weights_scenario > 0);
    REQUIRE(plain_scenario > 0);
    ContextLadderValues v;
    v.scenario = weights_scenario;
    CHECK_FALSE(rung(v, "mapped-weights").mapped_weights);
    CHECK_FALSE(rung(v, "backward").mapped_weights);
    v.scenario = plain_scenario;
    CHECK(rung(v, "mapped-weights").mapped_weights == std::string("16G"));
    CHECK_FALSE(rung(v, "ballast").mapped_weights);
    v.scenario = weights_scenario;
    v.mapped_weights = "8G";  // the caller's: a report's --mapped-weights
    CHECK(rung(v, "mapped-weights").mapped_weights == std::string("8G"));
    // The run the rung makes keeps the scenario's own weights; a sweep cell likewise.
    ContextLadderValues own;
    own.scenario = weights_scenario;
    RunSpec spec = rung(own, "host-load");
    spec.scenario = weights_scenario;
    CHECK(validate_run_spec(spec).settings.weights.bytes > int64_t{40} * 1000 * 1000 * 1000);
    SweepAxes axes;
    axes.scenarios = {weights_scenario, plain_scenario};
    axes.fixes = {"off"};
    axes.dtypes = {"bf16"};
    axes.shapes = {"2x8x128x128x64"};
    axes.allocs = {"device"};
    axes.contexts = {"mapped-weights"};
    axes.keep_waived = true;  // every combination a cell, whatever its memory
    int cells = 0;
    for (const SweepCell& c : expand_matrix(axes)) {
      CAPTURE(c.key());
      CHECK(c.run_spec().mapped_weights.has_value() == (c.scenario != weights_scenario));
      ++cells;
    }
    CHECK(cells == 2);
  }

  // Catches fix 6's parts let through where they cannot act, and the refusal reaching forms of the
  // whole fix that still act (its guard judges the memory plan without weights).
  TEST_CASE("fix 6's parts that cannot act are refused, one line each; its forms that can are not") {
    check_refused({"--mapped-weights", "1G", "--fixes", "6:direct/drop"}, "fix 6's drop and direct exclude each other");
    check_refused({"--fixes", "6:direct"}, "fix 6's direct part acts on the model's weights' load, and this run loads none");
    check_refused({"--fixes", "6:drop"}, "fix 6's drop part");
    check_refused({"--mapped-weights", "1G", "--fixes", "6:direct", "--weights-mapping", "keep"},
                  "--weights-mapping keep: fix 6's direct part reads the weights with O_DIRECT and maps nothing");
    check_refused({"--mapped-weights", "1G", "--fixes", "6:drop", "--weights-mapping", "keep"},
                  "--weights-mapping keep: fix 6's drop part unmaps each tensor after its copy");
    check_accepted({"--fixes", "6"});
    check_accepted({"--fixes", "6:guard"});
    check_accepted({"--fixes", "all"});
    check_accepted({"--fixes", "all:lean"});
    check_accepted({"--mapped-weights", "1G", "--fixes", "6:direct"});
    check_accepted({"--mapped-weights", "1G", "--fixes", "6:guard", "--weights-mapping", "keep"});
    // As the whole fix (a captured process that kept its mapping, with the fix on), its reads replace the mapping.
    for (const char* form : {"6", "6:lean"}) {
      CAPTURE(form);
      const RunOptions o = test_util::run_options({"--mapped-weights", "1G", "--fixes", form, "--weights-mapping", "keep"});
      CHECK(o.settings.weights.mapping == WeightsMapping::unmap);
    }
    const char* bench[] = {"bench", "--fix-overhead", "6:guard"};
    const BenchParse b = parse_bench_command_line(3, bench);
    CHECK_FALSE(b.run);
    CHECK(b.message.find("fix 6 acts before the first call, on the weights' load") != std::string::npos);
  }
}
