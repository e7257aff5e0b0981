// options.h: the command line of `repro`, parsed into a RunOptions value.
//
// Parsing is host-only and separate from running, so every option and every bad-input case is
// tested in CI without a GPU (tests/test_options.cpp).
#pragma once

#include <string>
#include <vector>

#include "math_sdpa/allocator.h"
#include "math_sdpa/fault_spec.h"
#include "math_sdpa/stage_log.h"
#include "math_sdpa/problem.h"

namespace sdpa {

struct RunOptions {
  int scenario = 0;
  SdpaProblem problem;
  bool dtype_given = false;  // --dtype on the command line (else --inputs files decide)
  AllocKind alloc = AllocKind::managed;
  bool allow_oversubscription = false;
  int iters = 1;
  bool check = false;
  std::string json_path;
  std::string inputs_dir;
  std::string save_output_path;
  LogLevel log = LogLevel::off;
  double stage_timeout_s = 20;  // per-stage deadline of the watchdog
  double run_timeout_s = 0;     // whole-run deadline; 0 = none
  bool no_fork = false;         // watchdog thread in this process instead of a supervising parent
  FaultSpec inject;
  std::vector<std::string> argv;  // the command line as given, for results and reports
};

// What parsing decided: run with `options`, or exit now with `exit_code` after printing
// `message` (help text on stdout for --help, one error line on stderr otherwise).
struct ParseResult {
  bool run = false;
  int exit_code = 0;
  std::string message;
  RunOptions options;
};

ParseResult parse_command_line(int argc, const char* const* argv);

}  // namespace sdpa
