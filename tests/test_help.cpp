// test_help.cpp: the help of the real `repro` binary, as a user reads it: every command's help
// within 100 columns, `repro help` and `repro help COMMAND`, -V, unknown commands, the options
// report and bench list being the ones they accept, and the docs' option tables being what the
// binary has (`repro help COMMAND --markdown`, written in by tools/cli_docs.py). Needs no GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
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
  // The scripts get the stage table from the binary (`repro help stages --json`) or from a plan it
  // wrote, never from a copy kept in the tree that a stage added or renamed would leave behind.
  TEST_CASE("the stage table comes from the binary and with every plan, never from a copy; help stages and scenarios as JSON") {
    const test_util::ProgramRun stages = repro({"help", "stages", "--json"});
    REQUIRE(stages.exit_code == 0);
    const nlohmann::json table = nlohmann::json::parse(stages.out);
    REQUIRE(table.at("stages").size() == static_cast<size_t>(kStageCount));
    for (int i = 0; i < kStageCount; ++i) CHECK(table["stages"][i]["name"] == stage_name(static_cast<Stage>(i)));
    CHECK_FALSE(std::filesystem::exists(std::string(SDPA_SOURCE_DIR) + "/scripts/stages.json"));
    const test_util::TempDir dir("stage_table");
    const std::string plan_file = dir / "plan.json";
    REQUIRE(repro({"--scenario", "2", "--plan", "--json", plan_file}).exit_code == 0);
    CHECK(nlohmann::json::parse(read_file(plan_file).value_or("null")).at("stage_table") == table);
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

namespace {

// A generated block of a page: the `repro help ...` words of its first line and what lies between
// its two lines (tools/cli_docs.py's format).
struct GeneratedBlock {
  std::string page, words, text;
};

std::vector<GeneratedBlock> generated_blocks(const std::string& docs_dir) {
  std::vector<GeneratedBlock> blocks;
  const std::string head = "<!-- generated: repro ", head_end = " -->\n", tail = "<!-- end generated -->";
  for (const auto& entry : std::filesystem::directory_iterator(docs_dir)) {
    if (entry.path().extension() != ".md") continue;
    const std::string text = read_file(entry.path().string()).value_or("");
    for (size_t at = text.find(head); at != std::string::npos; at = text.find(head, at + 1)) {
      const size_t words_end = text.find(head_end, at), end = text.find(tail, at);
      REQUIRE_MESSAGE((words_end != std::string::npos && end != std::string::npos && words_end < end), entry.path().string(),
                      ": a generated block without its end");
      const size_t content = words_end + head_end.size();
      blocks.push_back({entry.path().filename().string(), text.substr(at + head.size(), words_end - at - head.size()),
                        text.substr(content, end - content)});
    }
  }
  return blocks;
}

// `repro help options --markdown Scenario and fixes` as argv: the group is one word.
std::vector<std::string> help_words(const std::string& words) {
  const size_t markdown = words.find("--markdown");
  std::vector<std::string> args;
  std::istringstream head(words.substr(0, markdown));
  for (std::string w; head >> w;) args.push_back(w);
  args.push_back("--markdown");
  const std::string group = markdown + 11 <= words.size() ? words.substr(markdown + 11) : "";
  if (!group.empty()) args.push_back(group);
  return args;
}

// Each block of `docs_dir` not as the binary prints it, "PAGE: repro help ...".
std::vector<std::string> stale_blocks(const std::string& docs_dir) {
  std::vector<std::string> stale;
  for (const GeneratedBlock& b : generated_blocks(docs_dir)) {
    const test_util::ProgramRun r = repro(help_words(b.words));
    if (r.exit_code != 0 || r.out != b.text) stale.push_back(b.page + ": repro " + b.words);
  }
  return stale;
}

const std::string kDocsAdvice = "write them again: python3 tools/cli_docs.py --repro build/repro";

}  // namespace

// docs/CLI.md and docs/SWEEPS.md list what the binary has: their option tables are generated from
// the option table (repro/cli/run_spec.cpp) by tools/cli_docs.py, and a table edited by hand, an
// option added, renamed or given another range or default without the docs written again fail here.
TEST_SUITE("help") {
  TEST_CASE("the docs' option tables are what the binary prints; every command's options are in them") {
    const std::string docs = std::string(SDPA_SOURCE_DIR) + "/docs";
    const std::vector<GeneratedBlock> blocks = generated_blocks(docs);
    for (const std::string& stale : stale_blocks(docs)) CHECK_MESSAGE(false, stale, " differs from the binary's: ", kDocsAdvice);
    // Every command with options has its whole table somewhere (a run's under `options`).
    for (const char* topic : {"options", "report", "bench", "sweep", "minimize", "triage", "info"}) {
      const bool whole = std::any_of(blocks.begin(), blocks.end(), [&](const GeneratedBlock& b) {
        return b.words == std::string("help ") + topic + " --markdown";
      });
      CHECK_MESSAGE(whole, "no docs page has `<!-- generated: repro help ", topic, " --markdown -->`");
    }
    // What the issue found missing is there now, from the binary: scenario 7, the weights'
    // options, the mapped-weights rung, triage's exit 9.
    const std::string cli = read_file(docs + "/CLI.md").value_or("");
    for (const std::string& shown : {"`--scenario " + scenario_range() + "`", std::string("`--mapped-weights SIZE[:FILE]`"),
                                     std::string("`--weights-mapping unmap\\|keep`"), std::string("`--check-layers all\\|last`"),
                                     std::string("`mapped-weights`"), std::string("9 a run stalled")}) {
      CHECK_MESSAGE(cli.find(shown) != std::string::npos, shown);
    }
  }

  TEST_CASE("repro help TOPIC --markdown: a table a group, the command's own, its exit codes; a bad group is exit 2") {
    const test_util::ProgramRun run = repro({"help", "options", "--markdown"});
    REQUIRE(run.exit_code == 0);
    CHECK(run.out.find("### Problem\n\n| option | default | meaning |\n|---|---|---|\n") != std::string::npos);
    CHECK(run.out.find("| `-b,--batch INT` | 2 | batch size B |") != std::string::npos);
    // Where a scenario's record sets an option, its default says so.
    CHECK(run.out.find("| `--graph` | off; scenario 5: on |") != std::string::npos);
    const test_util::ProgramRun report = repro({"help", "report", "--markdown"});
    REQUIRE(report.exit_code == 0);
    CHECK(report.out.find("| `--out DIR` | (required) |") != std::string::npos);
    CHECK(report.out.find("### Problem") == std::string::npos);  // the run's options are the run's table
    CHECK(report.out.find("It takes every run option but `--inputs`, `--fix`, `--fixes`") != std::string::npos);
    CHECK(report.out.find("Exit codes: 0 the folder was written") != std::string::npos);
    const test_util::ProgramRun axes = repro({"help", "sweep", "--markdown", "Axes"});
    REQUIRE(axes.exit_code == 0);
    CHECK(axes.out.rfind("| option | default | meaning |", 0) == 0);  // no heading: one group
    CHECK(axes.out.find("--cell-timeout") == std::string::npos);
    const test_util::ProgramRun bad = repro({"help", "sweep", "--markdown", "Axis"});
    CHECK(bad.exit_code == kExitUsage);
    CHECK(bad.err == "repro sweep: error: unknown group 'Axis' (did you mean Axes? expected Axes|Where the results go|Cells)\n");
    CHECK(repro({"help", "scenarios", "--markdown"}).exit_code == kExitUsage);
  }

  // The generator: a block edited by hand (or the binary's table changed) is written again from the
  // binary and nothing else on the page moves; a second run changes nothing; --check says which.
  TEST_CASE("tools/cli_docs.py writes each block from the binary, only the blocks, and --check names a stale one") {
    if (std::system("python3 --version >/dev/null 2>&1") != 0) {
      MESSAGE("skipped: no python3");
      return;
    }
    test_util::TempDir dir("cli_docs");
    const std::string page = dir.path + "/PAGE.md";
    const std::string before = "# A page\n\ntext before\n\n", after = "\ntext after\n";
    { std::ofstream(page) << before << "<!-- generated: repro help sweep --markdown Axes -->\n| stale |\n<!-- end generated -->" << after; }
    const std::string script = std::string(SDPA_SOURCE_DIR) + "/tools/cli_docs.py";
    const auto cli_docs = [&](std::vector<std::string> extra) {
      std::vector<std::string> args = {"python3", script, "--repro", SDPA_REPRO_BINARY, "--docs", dir.path};
      args.insert(args.end(), extra.begin(), extra.end());
      return test_util::run_program(args);
    };
    const test_util::ProgramRun check = cli_docs({"--check"});
    CHECK(check.exit_code == 1);
    CHECK(check.out == "stale: PAGE.md: repro help sweep --markdown Axes\n");
    CHECK(read_file(page).value_or("").find("| stale |") != std::string::npos);  // --check writes nothing
    CHECK(stale_blocks(dir.path).size() == 1);
    const test_util::ProgramRun write = cli_docs({});
    CHECK(write.exit_code == 0);
    const std::string written = read_file(page).value_or("");
    CHECK(written.rfind(before, 0) == 0);
    CHECK(written.substr(written.size() - after.size()) == after);
    CHECK(written.find("| `--scenarios LIST` |") != std::string::npos);
    CHECK(stale_blocks(dir.path).empty());  // the test's own reading agrees
    CHECK(cli_docs({"--check"}).exit_code == 0);
    CHECK(cli_docs({}).out.empty());  // nothing left to write
    CHECK(read_file(page).value_or("") == written);
  }
}
