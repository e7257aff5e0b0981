// report_test_util.h: running programs from the report tests (the repro binary, nvcc, a generated
// reproducer; run_program.h) and reading what they wrote. Shared by test_report.cpp (CPU) and
// test_gpu_report.cpp (GPU).
#pragma once

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "run_program.h"

namespace report_test {

using Ran = test_util::ProgramRun;
using test_util::file_text;
using test_util::lines_of;
using test_util::remove_tree;
using test_util::temp_dir;

inline bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Runs `args` (args[0] the program, no shell) and returns its exit code, stdout and stderr.
inline Ran run(const std::vector<std::string>& args) { return test_util::run_program(args); }

inline Ran run_repro(std::vector<std::string> args) {
  args.insert(args.begin(), SDPA_REPRO_BINARY);
  return run(args);
}

// nvcc from the build (CMAKE_CUDA_COMPILER), else from PATH; "" when there is none.
inline std::string find_nvcc() {
  const std::string built = SDPA_NVCC;
  if (!built.empty() && ::access(built.c_str(), X_OK) == 0) return built;
  if (std::system("command -v nvcc > /dev/null 2>&1") == 0) return "nvcc";
  return "";
}

// How many of `builds` independent nvcc builds to run at once: one per core this process may run
// on (as nproc counts them; nvcc's processes run one after another, each on one core),
// SDPA_NVCC_JOBS when set, never more than there are builds.
inline int builds_at_once(size_t builds) {
  const char* jobs = std::getenv("SDPA_NVCC_JOBS");
  long n = jobs ? std::atol(jobs) : 0;
  cpu_set_t cores;
  if (n <= 0 && ::sched_getaffinity(0, sizeof cores, &cores) == 0) n = CPU_COUNT(&cores);
  if (n <= 0) n = ::sysconf(_SC_NPROCESSORS_ONLN);
  n = std::min<long>(std::max(1L, n), static_cast<long>(std::max<size_t>(1, builds)));
  return static_cast<int>(n);
}

// The warnings in nvcc's messages that concern one file (at `path`) of those it compiled
// (`member_paths`): the lines with "warning" that name its file or none of theirs (the linker's).
// nvcc's closing remark on how to suppress warnings names none and is no warning of its own.
inline std::string warnings_about(const std::string& messages, const std::string& path,
                                  const std::vector<std::string>& member_paths) {
  std::string warnings;
  for (const std::string& line : lines_of(messages)) {
    if (line.find("warning") == std::string::npos || line.rfind("Remark: The warnings can be suppressed", 0) == 0) {
      continue;
    }
    const bool names_a_member = std::any_of(member_paths.begin(), member_paths.end(),
                                            [&](const std::string& p) { return line.find(p) != std::string::npos; });
    if (line.find(path) != std::string::npos || !names_a_member) warnings += line + "\n";
  }
  return warnings;
}

// The value of `key=` in a reproducer's result line ("result: pass rel_error=... l2=... ...").
inline std::string result_field(const std::string& output, const std::string& key) {
  const size_t line = output.find("result: ");
  if (line == std::string::npos) return "";
  const size_t at = output.find(" " + key + "=", line);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size() + 2;
  return output.substr(start, output.find_first_of(" \n", start) - start);
}

inline size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace report_test
