// help_format.h: how every repro command prints --help.
//
// CLI11 2.1 (Debian's) neither wraps nor orders help text: a long description runs off a
// terminal and validators append their own descriptions to the type ("INT:INT in [0 - 4]"). So
// every command's help goes through one formatter: options listed under their groups in the
// order the groups were first used, each with its label (the option text: FILE, DIR, INT, or the
// accepted words bf16|fp16|fp32) and its default at the end of its description, every line at
// most kHelpWidth columns, -h,--help last.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace sdpa {

constexpr size_t kHelpWidth = 100;

// Greedy word wrap of one paragraph (no newlines) into lines of at most `width` characters; a
// word longer than `width` gets a line of its own.
std::vector<std::string> wrap_words(const std::string& paragraph, size_t width);

// Each line of `text` longer than `width` wrapped, its continuation lines indented like the line
// itself; shorter lines are kept as they are.
std::string wrap_text(const std::string& text, size_t width = kHelpWidth);

// Installs the formatter on `app`. `usage`, when not empty, replaces CLI11's "Usage:" line: its
// lines follow "Usage: ", each further line aligned under the first.
void use_help_format(CLI::App& app, const std::string& usage = "");
bool has_help_format(const CLI::App& app);

// `repro COMMAND --help-markdown` (what `repro help COMMAND --markdown` runs; parse_app answers it):
// the options of `app` as the docs' tables, from the same app --help prints, so that docs/CLI.md
// and docs/SWEEPS.md cannot fall behind the binary (tools/cli_docs.py writes them in, and
// cpu.help fails while they differ). One table a group ("### Group" above each where there are
// several; only `group`'s, without its heading, where one is named): `| option | default | meaning |`,
// the meaning the table's docs where they say more than --help (run_spec.h's option_docs). A
// command other than the plain run lists its own groups, then the run options it leaves out; then
// its exit codes, the footer's line.
constexpr const char* kHelpMarkdownFlag = "--help-markdown";
// The groups of `app` that hold an option to document (not -h or --help-all alone), in order.
std::vector<std::string> documented_groups(const CLI::App& app);
std::string options_markdown(const CLI::App& app, const std::string& program, const std::string& group = "");

}  // namespace sdpa
