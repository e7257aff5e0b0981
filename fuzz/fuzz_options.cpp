// fuzz_options.cpp: repro's command line. The input is split at NUL and newline bytes into
// arguments; whatever they are, parsing must return (never crash or throw), and a rejected
// command line must be exit 2 with exactly one line naming the problem (or exit 0 for --help).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "repro/cli/run_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"repro"};
  std::string current;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      args.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) args.push_back(current);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  const sdpa::ParseResult r = sdpa::parse_command_line(static_cast<int>(argv.size()), argv.data());
  if (!r.run) {
    const bool help = r.exit_code == 0;
    const bool usage = r.exit_code == sdpa::kExitUsage && r.message.find('\n') == std::string::npos &&
                       r.message.rfind("repro: error: ", 0) == 0;
    if (!help && !usage) std::abort();  // a rejection that is not one clear line
  }
  return 0;
}
