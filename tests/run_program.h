// run_program.h: runs a program the way a user does (the repro binary, nvcc, a generated
// reproducer) and captures what it printed. Shared by the CPU and GPU tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "repro/common/text.h"

namespace test_util {

struct ProgramRun {
  int exit_code = -1;  // 128 + the signal when one ended it
  bool timed_out = false;
  double wall_s = 0;
  std::string out, err;
};

struct ProgramOptions {
  double timeout_s = 0;  // > 0: killed (SIGKILL) after this long, and timed_out set
  std::string cwd;       // non-empty: runs there, so relative output paths land there
};

// The lines of `text`, without their newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Environment variables set for as long as it lives (programs run meanwhile inherit them), then unset.
struct ScopedEnv {
  std::vector<std::string> names;
  void set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    names.push_back(name);
  }
  ~ScopedEnv() {
    for (const auto& n : names) unsetenv(n.c_str());
  }
};

// The file's bytes, or "" when it cannot be read.
inline std::string file_text(const std::string& path) { return sdpa::read_file(path).value_or(""); }

// A fresh empty folder under /tmp; the caller removes it (remove_tree).
inline std::string temp_dir(const char* what) {
  std::string pattern = std::string("/tmp/sdpa_") + what + "_XXXXXX";
  return mkdtemp(pattern.data());
}

inline void remove_tree(const std::string& dir) { std::system(("rm -rf '" + dir + "'").c_str()); }

// A fresh empty folder under /tmp (temp_dir), removed with what it holds when this goes.
struct TempDir {
  std::string path;
  explicit TempDir(const char* what = "test") : path(temp_dir(what)) {}
  ~TempDir() { remove_tree(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// Seconds on CLOCK_MONOTONIC, the clock of the harness's log stamps (t_us=).
inline double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Runs args[0] with `args` (no shell; a name without a slash is looked up in PATH), stdin from
// /dev/null, and returns its exit code (127: it could not be run, 126: its output files or folder
// could not be opened), stdout and stderr. Started with posix_spawnp, not fork(): nothing of this
// process runs in the child before the exec, so threads may run programs at once, and the aarch64
// tests' emulator (qemu-user 7.2, whose forked children never end) runs it too.
inline ProgramRun run_program(const std::vector<std::string>& args, const ProgramOptions& options = {}) {
  const std::string dir = temp_dir("run");
  const std::string out = dir + "/out", err = dir + "/err";
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawn_error = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ProgramRun r;
  if (spawn_error != 0) {
    // As a shell says it: 127 for a program not found, 126 for one found and not run.
    r.exit_code = spawn_error == ENOENT ? 127 : 126;
    r.err = args[0] + ": " + std::strerror(spawn_error);
    remove_tree(dir);
    return r;
  }
  int status = 0;
  if (options.timeout_s > 0) {
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (elapsed() > options.timeout_s) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        r.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  } else {
    waitpid(pid, &status, 0);
  }
  r.wall_s = elapsed();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = file_text(out);
  r.err = file_text(err);
  remove_tree(dir);
  return r;
}

// run(i) for every i in [0, n), `at_once` at a time on threads of their own; the results in the
// order of i. For runs that each are their own process and check values, not times: their GPU
// work shares the device. `run` must not use doctest's assertions (they are not thread-safe):
// check the results after.
template <typename Run>
auto in_parallel(size_t n, int at_once, Run run) -> std::vector<decltype(run(size_t{}))> {
  std::vector<decltype(run(size_t{}))> results(n);
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < at_once; ++w) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < n;) results[i] = run(i);
    });
  }
  for (std::thread& t : workers) t.join();
  return results;
}

// A run of the repro binary `binary args... --json <file>`, with that file parsed (a discarded
// value when it was not written or is not JSON).
struct JsonRun : ProgramRun {
  nlohmann::json result;
};

inline JsonRun run_with_json(const std::string& binary, std::vector<std::string> args, const ProgramOptions& options = {}) {
  const std::string dir = temp_dir("json");
  const std::string json = dir + "/result.json";
  args.insert(args.begin(), binary);
  args.push_back("--json");
  args.push_back(json);
  JsonRun r;
  static_cast<ProgramRun&>(r) = run_program(args, options);
  r.result = nlohmann::json::parse(file_text(json), nullptr, false);
  remove_tree(dir);
  return r;
}

#ifdef SDPA_REPRO_BINARY
// The repro binary under test, run as run_with_json runs it.
inline JsonRun run_repro_json(std::vector<std::string> args, const ProgramOptions& options = {}) {
  return run_with_json(SDPA_REPRO_BINARY, std::move(args), options);
}
#endif

}  // namespace test_util
