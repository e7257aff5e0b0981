// main.cpp: the `repro` executable.
//
//   repro [--scenario 0] [--dtype bf16] [--check] [--json out.json] ...   (repro --help)
//
// Parses the command line, runs the path, prints the summary table on stdout and any error as
// one line on stderr, writes --json atomically, and exits with the documented code
// (math_sdpa/errors.h, README "Exit codes").
#include <cstdio>
#include <iostream>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "options.h"
#include "report_text.h"
#include "result_json.h"
#include "run_result.h"

int main(int argc, char** argv) {
  using namespace sdpa;
  const ParseResult parsed = parse_command_line(argc, argv);
  if (!parsed.run) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  const RunResult result = run_repro(parsed.options);
  std::cout << result_to_text(result) << std::flush;
  if (!result.error.empty()) std::cerr << "repro: " << result.outcome << ": " << result.error << "\n";
  if (!parsed.options.json_path.empty()) {
    try {
      write_file_atomic(parsed.options.json_path, result_to_json(result).dump(2) + "\n");
    } catch (const InputError& e) {
      std::cerr << "repro: error: " << e.what() << "\n";
      return result.exit_code ? result.exit_code : kExitUsage;
    }
  }
  return result.exit_code;
}
