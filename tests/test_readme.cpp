// test_readme.cpp: every command README.md and docs/BY_HAND.md (the README's triage by hand) show
// works as written, the README's exit-code table is the one `repro --help` ends with, and it links
// every page under docs/.
//
// Which lines are commands: the README shows commands only in fenced blocks tagged `sh`
// (```sh ... ```). Each line of such a block is one command; a `#` after a space starts a
// comment; a line ending in `\` goes on in the next. A fence tagged `text` holds output or a
// sketch, never a command; any other fence, an untagged one, or an indented code block (a line
// of 4+ leading spaces after a blank line, outside a fence) fails the test, so no command can
// hide from it.
//
// How a command runs: as written, from the repository root, with two substitutions.
// - `./build/repro` (what preset dev builds) is the binary under test, SDPA_REPRO_BINARY, so the
//   test checks the README in build-ci/ and build-asan/ as well as in build/.
// - The "repository root" is a fresh folder whose entries are symlinks to the real root's
//   (without the build folders): a command reads the repository as a user's would, and what it
//   writes (sweep-spark/, report-s2/) lands in the fresh folder, not in the working tree. The
//   commands run in README order in the same folder, as a user runs them in turn.
// Every command runs with CUDA_VISIBLE_DEVICES empty, so on a machine with a GPU it behaves as on
// one without: the test never starts GPU work and takes a few seconds anywhere.
//
// Every `./build/repro` command must be in kReproCommands, which says whether it needs a GPU: one
// that does not must exit 0; one that does must exit 7 (no usable GPU) here, never 2, which would
// mean the README shows a bad command line (a misspelled option, a bad value). Every other
// program must be in kNotRun, with why it is not run here. An entry the README no longer shows
// fails too, so the lists stay the README's.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "run_program.h"

using namespace sdpa;
using test_util::lines_of;

namespace {

const std::string kRoot = SDPA_SOURCE_DIR;
const std::string kReproAsWritten = "./build/repro";

enum class Needs { nothing, gpu };

// The README's repro commands, as written (comment removed, spaces collapsed).
const std::map<std::string, Needs> kReproCommands = {
    {"./build/repro info", Needs::gpu},
    {"./build/repro triage --out triage-spark", Needs::gpu},
    {"./build/repro sweep --dry-run", Needs::nothing},
    {"./build/repro sweep --out sweep-spark", Needs::gpu},
    {"./build/repro report --scenario 2 --out report-s2-plan --no-run", Needs::nothing},
    {"./build/repro report --scenario 2 --out report-s2 --repeat 5", Needs::gpu},
    {"./build/repro report --ladder --scenario 2 --out report-ladder --repeat 2", Needs::gpu},
    {"./build/repro --scenario 6 --plan", Needs::nothing},
    {"./build/repro --scenario 7 --plan", Needs::nothing},
    {"./build/repro triage --dry-run --out triage-plan", Needs::nothing},
    {"./build/repro --scenario 6 --fixes 5:native --plan", Needs::nothing},
    {"./build/repro --version", Needs::nothing},
    {"./build/repro --help", Needs::nothing},
    {"./build/repro help scenarios", Needs::nothing},
    {"./build/repro --scenario 1 --fix on", Needs::gpu},
    {"./build/repro --scenario 2 --fix off --check", Needs::gpu},
    {"./build/repro --scenario 0 --fixes 1,3", Needs::gpu},
    {"./build/repro --scenario 1 --fix lean", Needs::gpu},
    {"./build/repro --inject hang:softmax --stage-timeout 2", Needs::gpu},
};

// Programs the README shows that this test does not run, by their first word.
const std::map<std::string, std::string> kNotRun = {
    {"scripts/run_default.sh", "installs packages and builds the harness (minutes); CI builds it"},
    {"scripts/test.sh", "builds and runs every test, this one included"},
    {"tar", "packs the files of a report: no repro in it"},
    {"python3", "runs the user's training program under the capture (PyTorch; tests/test_sdpa_capture.py tests it)"},
};

struct Command {
  std::string text;  // as written, comment removed, spaces collapsed
  std::string where;  // "README.md:12"
};

// The pages whose commands are run, in the order a user reads them, relative to the root.
const char* const kPagesWithCommands[] = {"README.md", "docs/BY_HAND.md"};

// The words of a command line, split at spaces.
std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text + " ") {
    if (c != ' ' && c != '\t') {
      word += c;
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  return words;
}

std::string join(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

// The commands of a page by the rule above; a broken rule is a failed CHECK naming the line.
std::vector<Command> page_commands(const std::string& page, const std::vector<std::string>& lines) {
  std::vector<Command> commands;
  std::optional<std::string> fence;  // the open fence's tag
  std::string pending;               // a command continued with `\`
  int pending_line = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const int number = static_cast<int>(i) + 1;
    const size_t first = line.find_first_not_of(' ');
    const bool is_fence = first != std::string::npos && line.compare(first, 3, "```") == 0;
    if (is_fence) {
      if (fence) {
        CHECK_MESSAGE(pending.empty(), page, ":", pending_line, ": a command ends in `\\` at the end of its block");
        fence.reset();
      } else {
        fence = line.substr(first + 3);
        CHECK_MESSAGE((*fence == "sh" || *fence == "text"), page, ":", number,
                      ": a fence must be tagged sh (commands) or text (anything else), not '", *fence, "'");
      }
      continue;
    }
    if (!fence) {
      const bool indented_block = line.rfind("    ", 0) == 0 && i > 0 && lines[i - 1].find_first_not_of(' ') == std::string::npos;
      CHECK_MESSAGE(!indented_block, page, ":", number, ": an indented code block; show commands in a ```sh block");
      continue;
    }
    if (*fence != "sh") continue;
    std::string text = line;
    const size_t comment = text.find(" #");
    if (comment != std::string::npos) text.erase(comment);
    if (text.rfind("#", 0) == 0) text.clear();
    const bool continues = !text.empty() && text.back() == '\\';
    if (continues) text.pop_back();
    if (pending.empty()) pending_line = number;
    pending += " " + text;
    if (continues) continue;
    const std::vector<std::string> words = words_of(pending);
    if (!words.empty()) commands.push_back({join(words), page + ":" + std::to_string(pending_line)});
    pending.clear();
  }
  CHECK_MESSAGE(!fence, page, ": a fence is not closed");
  return commands;
}

std::vector<Command> documented_commands() {
  std::vector<Command> all;
  for (const char* page : kPagesWithCommands) {
    for (Command& c : page_commands(page, lines_of(test_util::file_text(kRoot + "/" + page)))) all.push_back(std::move(c));
  }
  return all;
}

// CUDA_VISIBLE_DEVICES set empty for as long as it lives (the commands inherit it), then put back.
struct NoVisibleGpu {
  std::optional<std::string> saved;
  NoVisibleGpu() {
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) saved = v;
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
  }
  ~NoVisibleGpu() {
    if (saved) {
      setenv("CUDA_VISIBLE_DEVICES", saved->c_str(), 1);
    } else {
      unsetenv("CUDA_VISIBLE_DEVICES");
    }
  }
};

// A fresh folder standing in for the repository root: a symlink to each top-level entry but the
// build folders. The caller removes it.
std::string root_stand_in() {
  const std::string dir = test_util::temp_dir("readme");
  for (const auto& entry : std::filesystem::directory_iterator(kRoot)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("build", 0) == 0) continue;
    std::filesystem::create_symlink(entry.path(), dir + "/" + name);
  }
  return dir;
}

// The words of a command that the shell would treat specially; repro commands must have none,
// since the test runs them without a shell.
bool uses_the_shell(const std::string& text) { return text.find_first_of("$`|&;<>*?\"'(){}~") != std::string::npos; }

}  // namespace

TEST_SUITE("readme") {
  TEST_CASE("every command the README and BY_HAND.md show works as written: exit 0, or 7 where it needs a GPU, never 2") {
    const std::vector<Command> commands = documented_commands();
    REQUIRE(commands.size() >= kReproCommands.size());
    const NoVisibleGpu no_gpu;
    const std::string root = root_stand_in();
    std::set<std::string> seen_repro, seen_not_run;
    for (const Command& c : commands) {
      INFO(c.where, ": ", c.text);
      std::vector<std::string> args = words_of(c.text);
      if (args.front() != kReproAsWritten) {
        const auto skip = kNotRun.find(args.front());
        CHECK_MESSAGE(skip != kNotRun.end(), "a command the test neither runs nor lists in kNotRun");
        if (skip != kNotRun.end()) seen_not_run.insert(skip->first);
        continue;
      }
      const auto listed = kReproCommands.find(c.text);
      CHECK_MESSAGE(listed != kReproCommands.end(), "a repro command not in kReproCommands (does it need a GPU?)");
      CHECK_MESSAGE(!uses_the_shell(c.text), "a repro command must be plain words (the test runs it without a shell)");
      if (listed == kReproCommands.end() || uses_the_shell(c.text)) continue;
      seen_repro.insert(c.text);
      args.front() = SDPA_REPRO_BINARY;
      test_util::ProgramOptions options;
      options.cwd = root;
      options.timeout_s = 60;
      const test_util::ProgramRun r = test_util::run_program(args, options);
      INFO("exit ", r.exit_code, ", stderr: ", r.err);
      CHECK_FALSE(r.timed_out);
      CHECK(r.exit_code != kExitUsage);
      CHECK(r.exit_code == (listed->second == Needs::gpu ? kExitNoGpu : kExitPass));
    }
    test_util::remove_tree(root);
    for (const auto& [text, needs] : kReproCommands) CHECK_MESSAGE(seen_repro.count(text), "no longer in the README: ", text);
    for (const auto& [program, why] : kNotRun) CHECK_MESSAGE(seen_not_run.count(program), "no longer in the README: ", program);
  }

  TEST_CASE("the README's exit codes are the ones repro --help ends with") {
    test_util::ProgramOptions options;
    options.timeout_s = 60;
    const test_util::ProgramRun help = test_util::run_program({SDPA_REPRO_BINARY, "--help"}, options);
    REQUIRE(help.exit_code == 0);
    // "Exit codes: 0 pass, 1 mismatch or memory growth, ..., 9 every call stalled." wrapped at 100 columns.
    const size_t start = help.out.find("Exit codes: ");
    REQUIRE(start != std::string::npos);
    std::string footer = help.out.substr(start + 12, help.out.find('.', start) - start - 12);
    for (char& c : footer) c = c == '\n' ? ' ' : c;
    const std::string readme = test_util::file_text(kRoot + "/README.md");
    int codes = 0;
    for (size_t at = 0, comma; at < footer.size(); at = comma + 2, ++codes) {
      comma = std::min(footer.find(", ", at), footer.size());
      const std::string entry = footer.substr(at, comma - at);  // "1 mismatch or memory growth"
      const size_t space = entry.find(' ');
      REQUIRE(space != std::string::npos);
      const std::string row = "| " + entry.substr(0, space) + " | " + entry.substr(space + 1);  // then ':' or ' |'
      CAPTURE(row);
      const size_t found = readme.find("\n" + row);
      CHECK(found != std::string::npos);
      if (found == std::string::npos) continue;
      const std::string after = readme.substr(found + 1 + row.size(), 2);  // the phrase ends there
      CHECK((after[0] == ':' || after == " |"));
    }
    CHECK(codes == kExitStalled + 1);
    CHECK(readme.find("\n| " + std::to_string(kExitStalled + 1) + " |") == std::string::npos);
  }

  TEST_CASE("the README links every page under docs/") {
    const std::string readme = test_util::file_text(kRoot + "/README.md");
    for (const auto& entry : std::filesystem::directory_iterator(kRoot + "/docs")) {
      const std::string link = "(docs/" + entry.path().filename().string() + ")";
      CHECK_MESSAGE(readme.find(link) != std::string::npos, "README.md does not link ", link);
    }
  }
}
