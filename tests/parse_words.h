// parse_words.h: a command line given as words, parsed as main() parses argv (the program's
// name first). Shared by the tests of the options, the scenarios, their hypotheses and the bench.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "repro/cli/run_options.h"

namespace test_util {

// Calls parser(argc, argv) with `program` as argv[0] and the words after it.
template <typename Parser>
auto parse_as(const char* program, std::vector<std::string> words, Parser parser) {
  words.insert(words.begin(), program);
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  return parser(static_cast<int>(argv.size()), argv.data());
}

inline sdpa::ParseResult parse(std::vector<std::string> args) {
  return parse_as("repro", std::move(args), sdpa::parse_command_line);
}

// The options of a command line that must parse as a run (the parser's message otherwise).
inline sdpa::RunOptions run_options(const std::vector<std::string>& args) {
  const sdpa::ParseResult r = parse(args);
  INFO(r.message);
  REQUIRE(r.run);
  return r.options;
}

}  // namespace test_util
