// parse_words.h: a repro command line given as words, parsed as main() parses argv ("repro"
// first). Shared by the tests of the options, the scenarios and their hypotheses.
#pragma once

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "repro/cli/run_options.h"

namespace test_util {

inline sdpa::ParseResult parse(std::vector<std::string> args) {
  args.insert(args.begin(), "repro");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return sdpa::parse_command_line(static_cast<int>(argv.size()), argv.data());
}

// The options of a command line that must parse as a run (the parser's message otherwise).
inline sdpa::RunOptions run_options(const std::vector<std::string>& args) {
  const sdpa::ParseResult r = parse(args);
  INFO(r.message);
  REQUIRE(r.run);
  return r.options;
}

}  // namespace test_util
