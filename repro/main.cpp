// main.cpp: the `repro` executable: dispatches to a subcommand (commands.h), or runs one
// configuration when the first argument is an option (or there is none).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"
#include "repro/cli/help_format.h"
#include "repro/cli/run_options.h"
#include "repro/cli/tables.h"
#include "repro/common/text.h"
#include "repro/commands.h"
#include "repro/supervise/hang_snapshot.h"
#include "scenarios/scenario.h"

namespace {

using namespace sdpa;

struct Subcommand {
  const char* name;
  int (*main)(int argc, char** argv);
  bool has_help;  // `repro help NAME` shows its --help
};

int help_main(int argc, char** argv);

// Every word `repro WORD ...` accepts; the usage line of --help (run_options.cpp) names those
// with a help.
const Subcommand kSubcommands[] = {
    {"report", report_main, true},   {"sweep", sweep_main, true},     {"bench", bench_main, true},
    {"minimize", minimize_main, true}, {"triage", triage_main, true},    {"info", info_main, true},    {"help", help_main, false},
    {"version", version_main, false},
    {"hang-snapshot", hang_snapshot_main, false},  // hidden: the --no-fork watchdog's snapshot taker
};

// "a, b, c".
std::string one_line_list(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : ", ") + w;
  return s;
}

// "report, sweep, bench, minimize, triage, info": the commands with a help.
std::string commands_with_help() {
  std::string names;
  for (const Subcommand& c : kSubcommands) {
    if (c.has_help) names += (names.empty() ? "" : ", ") + std::string(c.name);
  }
  return names;
}

std::vector<std::string> help_topics() {
  std::vector<std::string> topics = {"options", "scenarios", "stages"};
  for (const Subcommand& c : kSubcommands) {
    if (c.has_help) topics.emplace_back(c.name);
  }
  return topics;
}

// `repro help`: the run's --help; `repro help scenarios|stages [--json]`: each scenario or stage
// in full, or as the JSON the scripts read; `repro help COMMAND`: `repro COMMAND --help`;
// `repro help options|COMMAND --markdown [GROUP]`: its options as the docs' tables (help_format.h).
int help_main(int argc, char** argv) {
  const std::string topic = argc >= 2 ? argv[1] : "";
  const std::string form = argc >= 3 ? argv[2] : "";
  const bool json = argc == 3 && form == "--json" && (topic == "scenarios" || topic == "stages");
  const bool markdown = (argc == 3 || argc == 4) && form == "--markdown" && topic != "scenarios" && topic != "stages";
  if (argc > 4 || (argc >= 3 && !json && !markdown)) {
    std::cerr << "repro help: error: one topic at most, then --json after scenarios or stages, or --markdown [GROUP] after "
                 "options or a command (topics: "
              << one_line_list(help_topics()) << ")\n";
    return kExitUsage;
  }
  char help_flag[] = "--help";
  char markdown_flag[] = "--help-markdown";
  std::vector<char*> words;
  if (topic.empty() || topic == "options") {
    char help_all_flag[] = "--help-all";
    words = {argv[0], topic.empty() ? help_flag : markdown ? markdown_flag : help_all_flag};
    if (markdown && argc == 4) words.push_back(argv[3]);
    return run_main(static_cast<int>(words.size()), words.data());
  }
  if (topic == "scenarios" || topic == "stages") {
    if (json) {
      std::cout << (topic == "stages" ? stages_json() : scenarios_json()).dump(2) << "\n";
    } else {
      std::cout << (topic == "stages" ? stages_help() : scenarios_help());
    }
    return kExitPass;
  }
  for (const Subcommand& c : kSubcommands) {
    if (c.has_help && topic == c.name) {
      words = {argv[1], markdown ? markdown_flag : help_flag};
      if (markdown && argc == 4) words.push_back(argv[3]);
      return c.main(static_cast<int>(words.size()), words.data());
    }
  }
  std::cerr << "repro help: error: " << unknown_word("topic", topic, help_topics()) << "\n";
  return kExitUsage;
}

}  // namespace

// The command itself. Every command turns bad input into one line and exit 2 itself; an exception
// that reaches main is a path the command did not check (a filesystem error, most likely): still
// one line and exit 2, never an abort.
static int dispatch(int argc, char** argv) {
  if (argc > 1) {
    const std::string word = argv[1];
    if (word == "-V" || word == "--version") return version_main(argc - 1, argv + 1);
    if (word.empty() || word[0] != '-') {  // a command word, not an option of a run
      for (const Subcommand& c : kSubcommands) {
        if (word == c.name) return c.main(argc - 1, argv + 1);
      }
      std::vector<std::string> words;
      for (const Subcommand& c : kSubcommands) {
        if (c.has_help || std::string(c.name) == "help") words.emplace_back(c.name);
      }
      const std::string meant = nearest_word(word, words);
      std::cerr << "repro: error: unknown command '" << one_line(word.substr(0, 60)) << "' ("
                << (meant.empty() ? "" : "did you mean " + meant + "? ") << "commands: " << commands_with_help()
                << ", help; a run takes options only: repro --help)\n";
      return kExitUsage;
    }
  }
  return run_main(argc, argv);
}

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const std::filesystem::filesystem_error& e) {
    // The path and the system's reason, without the library's "filesystem error: status: ".
    std::cerr << "repro: error: " << one_line(e.path1().string().substr(0, 200)) << ": " << e.code().message() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "repro: error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
}
