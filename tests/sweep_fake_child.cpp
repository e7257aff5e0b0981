// sweep_fake_child.cpp: a stand-in for `repro` in the sweep's tests (test_sweep.cpp), passed to
// `repro sweep --repro-binary`. It takes the options a sweep gives a cell, needs no GPU, and
// ends the way the environment says, so every outcome can be produced on demand:
//
//   SWEEP_FAKE="1=hang,2/device=segv"   behaviour per scenario, or per scenario/alloc (which
//                                       wins); a cell not named passes
//   SWEEP_FAKE_WHEN="--ballast=hang"    a run given that option behaves so, whatever SWEEP_FAKE says
//                                       (the context ladder's rungs, repro report --ladder)
//   --layers N|model [--layers-fit]     its JSON's memory plan has N layers (model: 60; 1 without
//                                       --layers), or with --layers-fit 7 where more were asked
//   SWEEP_FAKE_LOG=FILE                 each run appends "start <t_us> <pid> <CUDA_VISIBLE_DEVICES>
//                                       | <its options but the output and hang ones>" and "end <t_us> <pid>"
//   the sweep's canary (SDPA_SWEEP_CANARY set) behaves as SWEEP_FAKE's "canary" entry (default pass)
//
// Like repro it appends a line to --log-file when given.
// Behaviours, each writing what real repro writes for it (run_json.cpp):
//   pass, slow (pass after 300 ms), mismatch (1), hang (3, watchdog stage softmax),
//   cuda_error (4, stage qk_gemm), crash_reported (5, stage pv_gemm), waived (6), no_gpu (7),
//   refused (8), usage (2, one line on stderr, no JSON), exit42 (an exit code repro never uses),
//   wrong_exit (a pass JSON, exit 1), segv (dies from SIGSEGV), garbage (a JSON file that is
//   not JSON), no_json (exit 0, no file), sleep (forever, ignoring SIGTERM, with a forked
//   grandchild that sleeps too, as repro's GPU child would; its pid is logged as "grandchild"),
//   hang_snapshot (a hang with a snapshot in --snapshot-dir, linked from its JSON), hang_stuck (a
//   hang whose process survived SIGKILL), snapshot_sleep (creates --snapshot-dir, as a snapshot
//   in progress does, then sleeps like sleep).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "math_sdpa/atomic_file.h"

namespace {

using nlohmann::json;

long long now_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

void log_line(const std::string& line) {
  const char* path = std::getenv("SWEEP_FAKE_LOG");
  if (!path) return;
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  const std::string text = line + "\n";
  (void)!write(fd, text.data(), text.size());
  close(fd);
}

std::string behaviour_for(const std::string& scenario, const std::string& alloc) {
  std::map<std::string, std::string> table;
  std::stringstream plan(std::getenv("SWEEP_FAKE") ? std::getenv("SWEEP_FAKE") : "");
  std::string entry;
  while (std::getline(plan, entry, ',')) {
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) table[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  if (table.count(scenario + "/" + alloc)) return table[scenario + "/" + alloc];
  if (table.count(scenario)) return table[scenario];
  return "pass";
}

json result(const std::string& outcome, int exit_code, const char* error) {
  return {{"outcome", outcome},
          {"exit_code", exit_code},
          {"error", error ? json(error) : json(nullptr)},
          {"error_stage", nullptr},
          {"check", {{"rel_error", 1.5e-3}, {"max_abs_error", 2e-3}, {"tolerance", 4e-3}, {"passed", true}}},
          {"iterations_done", 1},
          {"timing", {{"call_median_ms", 0.25}, {"call_p10_ms", 0.2}, {"call_p90_ms", 0.3}}},
          {"stages",
           {{{"stage", "qk_gemm"}, {"calls", 1}, {"median_ms", 0.05}, {"p10_ms", 0.05}, {"p90_ms", 0.05}, {"clock", "cuda_event"}},
            {{"stage", "softmax"}, {"calls", 1}, {"median_ms", 0.02}, {"p10_ms", 0.02}, {"p90_ms", 0.02}, {"clock", "cuda_event"}}}},
          {"device",
           {{"index", 0}, {"name", "Fake GPU <&>"}, {"compute_capability", "9.0"}, {"sm_count", 132},
            {"total_memory_bytes", 85017493504LL}, {"driver_version", 13000}, {"runtime_version", 13000},
            {"cublas_version", 130100}, {"integrated", false}, {"concurrent_managed_access", true},
            {"pageable_memory_access", false}}},
          {"watchdog", nullptr},
          {"wall_seconds", 0.01}};
}

json stopped(const std::string& outcome, int exit_code, const char* stage, const char* error) {
  json r = result(outcome, exit_code, error);
  r["check"] = nullptr;
  r["iterations_done"] = 0;
  r["stages"] = json::array();
  r["error_stage"] = stage ? json(stage) : json(nullptr);
  if (outcome == "hang" || outcome == "crash") {
    r["watchdog"] = {{"kind", outcome}, {"stage", stage ? json(stage) : json(nullptr)}, {"classification", "scenario 2 (softmax reduction on unified memory: hung inside softmax)"}};
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = "0", alloc = "managed", json_path, options, log_file, snapshot_dir;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--scenario") scenario = value;
    if (a == "--alloc") alloc = value;
    if (a == "--check") check = true;
    if (a == "--json") json_path = value;
    if (a == "--log-file") log_file = value;
    if (a == "--snapshot-dir") snapshot_dir = value;
    if (a == "--json" || a == "--log-file" || a == "--snapshot-dir" || a == "--on-hang" || a == "--snapshot-timeout") {
      ++i;
      continue;
    }
    options += (options.empty() ? "" : " ") + a;
  }
  if (!log_file.empty()) {
    const int fd = open(log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    (void)!write(fd, "0.0\tstart\tsweep_fake_child\n", 27);
    close(fd);
  }
  const char* gpu = std::getenv("CUDA_VISIBLE_DEVICES");
  log_line("start " + std::to_string(now_us()) + " " + std::to_string(getpid()) + " " + (gpu ? gpu : "-") + " | " + options);
  if (json_path.empty() || !check) {
    std::fprintf(stderr, "sweep_fake_child: the sweep must pass --json and --check\n");
    return 99;
  }
  std::string behaviour = std::getenv("SDPA_SWEEP_CANARY") ? behaviour_for("canary", "") : behaviour_for(scenario, alloc);
  if (const char* when = std::getenv("SWEEP_FAKE_WHEN")) {
    const std::string w = when;
    const size_t eq = w.find('=');
    if (eq != std::string::npos && (" " + options + " ").find(" " + w.substr(0, eq) + " ") != std::string::npos) {
      behaviour = w.substr(eq + 1);
    }
  }
  auto finish = [&](json r, int code) {
    // The memory plan's layer count as real repro writes it: --layers' (1 without), and with
    // --layers-fit a machine where 7 fit (what a ladder's rungs report).
    const size_t at = (" " + options + " ").find(" --layers ");
    int asked = 1;
    if (at != std::string::npos) {
      const std::string value = options.substr(at + 9, options.find(' ', at + 9) - (at + 9));
      asked = value == "model" ? 60 : std::atoi(value.c_str());
    }
    const bool fit = (" " + options + " ").find(" --layers-fit ") != std::string::npos && asked > 7;
    r["memory_plan"] = {{"layers", fit ? 7 : asked}, {"layers_asked", fit ? json(asked) : json(nullptr)}};
    sdpa::write_file_atomic(json_path, r.dump(2) + "\n");
    log_line("end " + std::to_string(now_us()) + " " + std::to_string(getpid()));
    return code;
  };
  if (behaviour == "pass") return finish(result("pass", 0, nullptr), 0);
  if (behaviour == "slow") {
    usleep(300000);
    return finish(result("pass", 0, nullptr), 0);
  }
  // A pass with one stalled call of two, and a run whose every call stalled (exit 9).
  if (behaviour == "stall_pass" || behaviour == "stalled") {
    const bool every = behaviour == "stalled";
    json r = every ? result("stalled", 9, "every call stalled: softmax 3012.5 ms in call 1 (2 of 2 calls over 1.0 s, below the deadline)")
                   : result("pass", 0, nullptr);
    if (every) r["error_stage"] = "softmax";
    r["stalls"] = {{"threshold_s", 1.0},
                   {"calls", 2},
                   {"calls_stalled", every ? 2 : 1},
                   {"longest", {{"call", 1}, {"stage", "softmax"}, {"ms", 3012.5}}},
                   {"records", json::array({{{"call", 1}, {"stage", "softmax"}, {"ms", 3012.5}}})},
                   {"summary", std::string("softmax 3012.5 ms in call 1 (") + (every ? "2" : "1") +
                                   " of 2 calls over 1.0 s, below the deadline)"}};
    return finish(r, every ? 9 : 0);
  }
  if (behaviour == "mismatch") {
    json r = result("mismatch", 1, "relative error 5.0e-01 above the bound 4.0e-03");
    r["check"]["rel_error"] = 0.5;
    r["check"]["passed"] = false;
    return finish(r, 1);
  }
  if (behaviour == "hang") return finish(stopped("hang", 3, "softmax", "stage softmax did not finish within 0.2 s"), 3);
  if (behaviour == "hang_snapshot" || behaviour == "hang_stuck") {
    json r = stopped("hang", 3, "softmax", "stage softmax did not finish within 0.2 s");
    r["watchdog"]["survived_kill"] = behaviour == "hang_stuck";
    if (behaviour == "hang_snapshot") {
      mkdir(snapshot_dir.c_str(), 0755);
      sdpa::write_file_atomic(snapshot_dir + "/snapshot.json", "{\"format_version\": 1}\n");
      r["watchdog"]["snapshot"] = {{"path", snapshot_dir}, {"seconds", 0.5}, {"collectors", json::array()}, {"summary", nullptr}};
      r["watchdog"]["evidence"] = {"kernel spin_kernel resident on SM 124 (grid (1,1,1), block (1,1,1), Active)"};
    }
    return finish(r, 3);
  }
  if (behaviour == "cuda_error") {
    return finish(stopped("cuda_error", 4, "qk_gemm", "CUDA error at gemm.cpp:1 in stage qk_gemm: code=700"), 4);
  }
  if (behaviour == "crash_reported") {
    return finish(stopped("crash", 5, "pv_gemm", "the GPU child died from signal 11 (Segmentation fault)"), 5);
  }
  if (behaviour == "waived") {
    return finish(stopped("waived", 6, nullptr, "scenario 2 needs memory that migrates (<managed> & \"system\")"), 6);
  }
  if (behaviour == "no_gpu") return finish(stopped("no_gpu", 7, nullptr, "no usable CUDA GPU: fake"), 7);
  if (behaviour == "refused") return finish(stopped("refused", 8, nullptr, "managed allocation beyond the guard"), 8);
  if (behaviour == "usage") {
    std::fprintf(stderr, "repro: error: --fake: a usage error\n");
    return 2;
  }
  if (behaviour == "exit42") return finish(result("pass", 0, nullptr), 42);
  if (behaviour == "wrong_exit") return finish(result("pass", 0, nullptr), 1);
  if (behaviour == "segv") {
    std::fprintf(stderr, "about to crash\n");
    std::fflush(stderr);
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
  }
  if (behaviour == "garbage") {
    sdpa::write_file_atomic(json_path, "{\"outcome\": \"pass\", \x01 not json");
    return 0;
  }
  if (behaviour == "no_json") return 0;
  if (behaviour == "snapshot_sleep") mkdir(snapshot_dir.c_str(), 0755);
  if (behaviour == "sleep" || behaviour == "snapshot_sleep") {
    signal(SIGTERM, SIG_IGN);
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      while (true) pause();
    }
    log_line("grandchild " + std::to_string(grandchild));
    while (true) pause();
  }
  std::fprintf(stderr, "sweep_fake_child: unknown behaviour '%s'\n", behaviour.c_str());
  return 98;
}
