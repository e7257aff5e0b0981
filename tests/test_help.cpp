// test_help.cpp: the help of the real `repro` binary, as a user reads it: every command's help
// within 100 columns, `repro help` and `repro help COMMAND`, -V, unknown commands, and the
// options report and bench list being the ones they accept. Needs no GPU.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage.h"
#include "repro/common/text.h"
#include "run_program.h"
#include "scenarios/scenario.h"

using namespace sdpa;
using test_util::lines_of;

namespace {

test_util::ProgramRun repro(std::vector<std::string> args) {
  args.insert(args.begin(), SDPA_REPRO_BINARY);
  test_util::ProgramOptions options;
  options.timeout_s = 60;
  return test_util::run_program(args, options);
}

bool lists(const std::string& help, const std::string& option) { return help.find("  " + option + " ") != std::string::npos; }

}  // namespace

TEST_SUITE("help") {
  TEST_CASE("every command's help: exit 0, on stdout, every line within 100 columns") {
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"help"}, {"help", "scenarios"}, {"help", "options"}, {"report", "--help"},
                                               {"sweep", "--help"}, {"bench", "--help"}, {"info", "--help"},
                                               {"help", "report"}, {"help", "sweep"}, {"help", "bench"}, {"help", "info"}}) {
      const test_util::ProgramRun r = repro(args);
      INFO("repro ", args.front(), " ", args.size() > 1 ? args[1] : "", " -> exit ", r.exit_code, ", stderr: ", r.err);
      CHECK(r.exit_code == 0);
      CHECK(r.err.empty());
      CHECK(r.out.size() > 200);
      for (const std::string& line : lines_of(r.out)) CHECK_MESSAGE(line.size() <= 100, line);
    }
  }

  TEST_CASE("repro help is repro --help; repro help COMMAND is repro COMMAND --help; -V is --version") {
    CHECK(repro({"help"}).out == repro({"--help"}).out);
    CHECK(repro({"help", "options"}).out == repro({"--help-all"}).out);
    for (const char* command : {"report", "sweep", "bench", "info"}) {
      CAPTURE(command);
      CHECK(repro({"help", command}).out == repro({command, "--help"}).out);
    }
    const test_util::ProgramRun v = repro({"-V"});
    CHECK(v.exit_code == 0);
    CHECK(v.out.rfind("repro (sdpa-repro) ", 0) == 0);
    CHECK(v.out == repro({"--version"}).out);
  }

  TEST_CASE("the usage line names each command, and each has a help") {
    const std::string help = repro({"--help"}).out;
    const size_t at = help.find("repro report|sweep|bench|info");
    REQUIRE(at != std::string::npos);
    std::string names = help.substr(at + 6, help.find(' ', at + 6) - at - 6);
    names += "|";
    for (size_t start = 0, bar; (bar = names.find('|', start)) != std::string::npos; start = bar + 1) {
      const std::string command = names.substr(start, bar - start);
      CAPTURE(command);
      const test_util::ProgramRun r = repro({"help", command});
      CHECK(r.exit_code == 0);
      CHECK(r.out.find("repro " + command) != std::string::npos);
    }
  }

  TEST_CASE("an unknown command or help topic: exit 2, one line naming it") {
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{"frobnicate"}, {"frobnicate", "--scenario", "1"}, {"help", "frobnicate"},
                                               {"help", "report", "sweep"}}) {
      const test_util::ProgramRun r = repro(args);
      INFO(args.front(), " ", args.back(), " -> exit ", r.exit_code, ", stderr: ", r.err);
      CHECK(r.exit_code == kExitUsage);
      CHECK(r.out.empty());
      CHECK(lines_of(r.err).size() == 1);
      CHECK(r.err.find(args.back() == "sweep" ? "one topic" : "frobnicate") != std::string::npos);
    }
  }

  TEST_CASE("report --help and bench --help list only what they accept; report's --out comes first") {
    const std::string report = repro({"report", "--help"}).out;
    CHECK(report.find("Usage: repro report --out DIR") != std::string::npos);
    CHECK(report.find("--out DIR") < report.find("--scenario"));
    CHECK(report.find("--out DIR") < report.find("--dtype"));
    CHECK(report.find("(default 25)") != std::string::npos);  // its calls per run
    for (const char* own : {"--fix", "--fixes", "--check", "--json", "--save-output", "--log-file", "--snapshot-dir",
                            "--no-fork", "--inputs"}) {
      CAPTURE(own);
      CHECK_FALSE(lists(report, own));
      // Refused while parsing, before anything runs.
      const test_util::ProgramRun r = repro({"report", "--scenario", "2", "--no-run", "--out", "/nonexistent/r", own, "x"});
      CHECK(r.exit_code == kExitUsage);
      CHECK(r.err.find(own) != std::string::npos);
    }
    for (const char* taken : {"--scenario", "--dtype", "--iters", "--alloc", "--inject", "--on-hang"}) {
      CHECK_MESSAGE(lists(report, taken), taken);
    }
    const std::string bench = repro({"bench", "--help"}).out;
    for (const char* own : {"--iters", "--sample-every"}) CHECK_MESSAGE(!lists(bench, own), own);
    for (const char* taken : {"-w,--warmup", "--fix-overhead", "--json", "--check", "--inputs", "--fixes"}) {
      CHECK_MESSAGE(lists(bench, taken), taken);
    }
  }
}

TEST_SUITE("help") {
  // The scripts read the stage table from scripts/stages.json, the JSON `repro help stages --json`
  // writes (and the build writes beside the binary): a stage added, renamed or given other lines
  // without the file written again fails here, not in a user's comparison with PyTorch.
  TEST_CASE("scripts/stages.json is the stage table as the binary writes it; help stages and scenarios as JSON") {
    const test_util::ProgramRun stages = repro({"help", "stages", "--json"});
    REQUIRE(stages.exit_code == 0);
    const nlohmann::json table = nlohmann::json::parse(stages.out);
    REQUIRE(table.at("stages").size() == static_cast<size_t>(kStageCount));
    for (int i = 0; i < kStageCount; ++i) CHECK(table["stages"][i]["name"] == stage_name(static_cast<Stage>(i)));
    const std::string committed = read_file(std::string(SDPA_SOURCE_DIR) + "/scripts/stages.json").value_or("null");
    CHECK_MESSAGE(nlohmann::json::parse(committed) == table,
                  "scripts/stages.json is stale: build/repro help stages --json > scripts/stages.json");
    const test_util::ProgramRun scenarios = repro({"help", "scenarios", "--json"});
    REQUIRE(scenarios.exit_code == 0);
    const nlohmann::json records = nlohmann::json::parse(scenarios.out);
    REQUIRE(records.size() == static_cast<size_t>(scenario_count()));
    for (const nlohmann::json& r : records) CHECK(r["title"] == scenario_info(r["number"].get<int>()).title);
    CHECK(repro({"help", "stages"}).out.find("qk_gemm (gpu, call)") != std::string::npos);
    CHECK(repro({"help", "stages", "--yaml"}).exit_code == kExitUsage);
    CHECK(repro({"help", "report", "--json"}).exit_code == kExitUsage);
  }
}
