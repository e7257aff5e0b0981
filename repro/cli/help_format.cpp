// help_format.cpp: the help formatter (help_format.h).
#include "repro/cli/help_format.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <memory>
#include <sstream>

#include "repro/cli/run_spec.h"

namespace sdpa {

namespace {

// Where descriptions start: "  --kv-heads INT" and most labels fit before it; a longer name and
// label gets its own line, its description the lines below.
constexpr size_t kDescriptionColumn = 30;

class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::string usage) : usage_(std::move(usage)) {}

  std::string make_description(const CLI::App* app) const override {
    const std::string& text = app->get_description();
    return text.empty() ? "" : wrap_text(text) + "\n\n";
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    if (usage_.empty()) return wrap_text(CLI::Formatter::make_usage(app, name));
    std::string out;
    std::istringstream lines(usage_);
    for (std::string line; std::getline(lines, line);) out += (out.empty() ? "Usage: " : "       ") + line + "\n";
    return wrap_text(out);
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode) const override {
    return make_description(app) + make_usage(app, name) + make_positionals(app) + option_groups(app) + "\n" +
           make_footer(app);
  }

  // Every group in the order it was first used; -h,--help after the last of them.
  std::string option_groups(const CLI::App* app) const {
    const CLI::Option* help = app->get_help_ptr();
    std::string out;
    for (const std::string& group : app->get_groups()) {
      if (group.empty()) continue;  // hidden options
      const auto options = app->get_options([&](const CLI::Option* o) {
        return o->get_group() == group && o->nonpositional() && o != help;
      });
      if (options.empty()) continue;
      out += "\n" + group + ":\n";
      for (const CLI::Option* o : options) out += make_option(o, false);
    }
    if (help) out += make_option(help, false);
    return out;
  }

  std::string make_option(const CLI::Option* o, bool is_positional) const override {
    const std::string left = "  " + make_option_name(o, is_positional) + make_option_opts(o);
    std::string description = o->get_description();
    if (o->get_required()) description += " (required)";
    std::string excluded;
    for (const CLI::Option* other : o->get_excludes()) excluded += (excluded.empty() ? "" : ", ") + other->get_name();
    if (!excluded.empty()) description += " (not with " + excluded + ")";
    if (o->get_type_size() != 0 && !o->get_required() && !o->get_default_str().empty()) {
      description += " (default " + o->get_default_str() + ")";
    }
    const std::vector<std::string> lines = wrap_words(description, kHelpWidth - kDescriptionColumn);
    std::string out = left;
    const std::string indent(kDescriptionColumn, ' ');
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i == 0 && left.size() < kDescriptionColumn) {
        out += std::string(kDescriptionColumn - left.size(), ' ') + lines[0];
      } else {
        out += "\n" + indent + lines[i];
      }
    }
    return out + "\n";
  }

  // The option's label (its option text) or, without one, its type without the validators'
  // descriptions that CLI11 appends after a colon.
  std::string make_option_opts(const CLI::Option* o) const override {
    if (!o->get_option_text().empty()) return " " + o->get_option_text();
    if (o->get_type_size() == 0) return "";
    const std::string type = o->get_type_name();
    return " " + type.substr(0, type.find(':'));
  }

  std::string make_footer(const CLI::App* app) const override {
    const std::string& text = app->get_footer();
    return text.empty() ? "" : wrap_text(text) + "\n";
  }

 private:
  std::string usage_;
};

}  // namespace

std::vector<std::string> wrap_words(const std::string& paragraph, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream words(paragraph);
  for (std::string word; words >> word;) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string wrap_text(const std::string& text, size_t width) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() <= width) {  // kept as written, its alignment included
      out += line + "\n";
      continue;
    }
    const size_t indent = std::min(line.find_first_not_of(' '), line.size());
    const std::vector<std::string> wrapped = wrap_words(line, width > indent ? width - indent : 1);
    for (const std::string& part : wrapped) out += std::string(indent, ' ') + part + "\n";
  }
  if (!text.empty() && text.back() != '\n' && !out.empty()) out.pop_back();
  return out;
}

void use_help_format(CLI::App& app, const std::string& usage) {
  app.formatter(std::make_shared<HelpFormatter>(usage));
  if (CLI::Option* help = app.get_help_ptr()) help->description("this help");
}

bool has_help_format(const CLI::App& app) {
  return std::dynamic_pointer_cast<HelpFormatter>(app.get_formatter()) != nullptr;
}

namespace {

// A table cell: a '|' would end it.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string markdown_row(const CLI::Option* o) {
  const std::string label = o->get_option_text().empty() ? "" : " " + o->get_option_text();
  std::string names;
  for (const std::string& n : o->get_snames()) names += (names.empty() ? "-" : ",-") + n;
  for (const std::string& n : o->get_lnames()) names += (names.empty() ? "--" : ",--") + n;
  if (names.empty()) names = o->get_name();
  const bool flag = o->get_expected_max() == 0;
  std::string shown = o->get_required() ? "(required)" : flag && o->get_default_str().empty() ? "off" : o->get_default_str();
  return "| `" + cell(names + label) + "` | " + cell(shown) + " | " + cell(option_docs(names.substr(names.rfind(',') + 1), o->get_description())) +
         " |\n";
}

const char* const kTableHead = "| option | default | meaning |\n|---|---|---|\n";

}  // namespace

namespace {

bool documented(const CLI::App& app, const CLI::Option* o) {
  return o->nonpositional() && o != app.get_help_ptr() && o != app.get_help_all_ptr();
}

}  // namespace

std::vector<std::string> documented_groups(const CLI::App& app) {
  std::vector<std::string> groups;
  for (const std::string& g : app.get_groups()) {
    if (g.empty()) continue;
    const auto options = app.get_options([&](const CLI::Option* o) { return o->get_group() == g && documented(app, o); });
    if (!options.empty()) groups.push_back(g);
  }
  return groups;
}

std::string options_markdown(const CLI::App& app, const std::string& program, const std::string& group) {
  // Another command's copy of the run options is the plain run's, documented once.
  const std::vector<std::string> run_groups = run_option_groups();
  const auto in_run_group = [&](const CLI::Option* o) {
    return program != "repro" && std::find(run_groups.begin(), run_groups.end(), o->get_group()) != run_groups.end();
  };
  std::vector<std::pair<std::string, std::string>> tables;  // group, rows
  bool takes_run_options = false;
  for (const std::string& g : documented_groups(app)) {
    if (!group.empty() && g != group) continue;
    std::string rows;
    const auto in_group = [&](const CLI::Option* o) { return o->get_group() == g && documented(app, o); };
    for (const CLI::Option* o : app.get_options(in_group)) {
      if (in_run_group(o)) {
        takes_run_options = true;
        continue;
      }
      rows += markdown_row(o);
    }
    if (!rows.empty()) tables.emplace_back(g, rows);
  }
  std::string out;
  for (const auto& [g, rows] : tables) {
    if (tables.size() > 1) out += "### " + g + "\n\n";
    out += kTableHead + rows + "\n";
  }
  if (!group.empty()) return out.substr(0, out.size() - 1);  // the table, ending in one newline
  if (takes_run_options) {
    std::string left_out;
    for (const std::string& name : run_option_names()) {
      if (!app.get_option_no_throw(name)) left_out += (left_out.empty() ? "`" : ", `") + name + "`";
    }
    out += "It takes every run option" + (left_out.empty() ? std::string(".") : " but " + left_out + ".") + "\n\n";
  }
  for (const CLI::Option* o : app.get_options([](const CLI::Option* o) { return !o->nonpositional(); })) {
    out += "After the options: `" + o->get_option_text() + (o->get_expected_max() > 1 ? "..." : "") + "`, " +
           o->get_description() + ".\n\n";
  }
  std::istringstream footer(app.get_footer());
  for (std::string line; std::getline(footer, line);) {
    if (line.rfind("Exit codes:", 0) == 0) out += line + "\n";
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out + "\n";
}

}  // namespace sdpa
