// hang_snapshot.cpp: the order and budget of the collectors, snapshot.json, and the
// `repro hang-snapshot` helper.
#include "repro/supervise/hang_snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "repro/cli/run_options.h"
#include "repro/common/text.h"
#include "repro/supervise/durable_log.h"
#include "repro/supervise/snapshot_collectors.h"

namespace sdpa {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kSnapshotFormatVersion = 1;

// Each collector's own bound, seconds. cuda-gdb attached and printed everything within a few
// seconds on an H100; nvidia-smi answers within one unless the driver is wedged. The sum stays
// under the default budget of 60 s, so by default every collector gets its full bound.
constexpr double kKernelLogS = 3, kThreadsS = 4, kDebuggerS = 30, kSmiS = 8, kSmiAppsS = 4, kDriverFilesS = 2;
constexpr double kMinimumBoundS = 0.2;  // less left than this: the collector is skipped
constexpr double kWriteReserveS = 0.5;  // kept back from the budget for the summary and snapshot.json
constexpr double kLastLogReserveS = 0.5;  // kept back for the kernel log's second reading, which takes milliseconds
constexpr size_t kBacktraceFramesKept = 32, kKernelFramesKept = 16;

const DriverFiles kGpuInformation{"gpu_information", "/proc/driver/nvidia/gpus", "/information", "gpu-information.txt",
                                  "the NVIDIA driver is not loaded", false};
const DriverFiles kUvmParameters{"uvm_parameters", "/sys/module/nvidia_uvm/parameters", "", "uvm-parameters.txt",
                                 "nvidia_uvm is not loaded", true};

std::string utc_time() {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return stamp;
}

// The collector's files, and the folder's entry for each, on disk.
void sync_files(const std::string& dir, const std::vector<std::string>& files) {
  for (const auto& f : files) {
    const int fd = ::open((dir + "/" + f).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) ::fsync(fd), ::close(fd);
  }
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) ::fsync(d), ::close(d);
}

template <typename T> std::vector<T> first(const std::vector<T>& v, size_t n) {
  return std::vector<T>(v.begin(), v.begin() + static_cast<long>(std::min(v.size(), n)));
}

json thread_to_json(const HostThread& t) {
  return {{"tid", t.tid},
          {"comm", t.comm},
          {"state", std::string(1, t.state)},
          {"wchan", t.wchan},
          {"kernel_stack", first(t.kernel_stack, kKernelFramesKept)},
          {"backtrace", first(t.backtrace, kBacktraceFramesKept)},
          {"cuda_call", t.cuda_call},
          {"called_as", t.called_as},
          {"caller", t.caller}};
}

HostThread thread_from_json(const json& j) {
  HostThread t;
  t.tid = j.value("tid", 0);
  t.comm = j.value("comm", "");
  const std::string state = j.value("state", "?");
  t.state = state.empty() ? '?' : state[0];
  t.wchan = j.value("wchan", "");
  t.kernel_stack = j.value("kernel_stack", std::vector<std::string>{});
  t.backtrace = j.value("backtrace", std::vector<std::string>{});
  t.cuda_call = j.value("cuda_call", "");
  t.called_as = j.value("called_as", "");
  t.caller = j.value("caller", "");
  return t;
}

}  // namespace

std::string fresh_snapshot_dir(const std::string& dir) {
  std::error_code ec;
  auto taken = [&](const std::string& d) { return fs::exists(d, ec) && !fs::is_empty(d, ec); };
  if (!taken(dir)) return dir;
  for (int n = 2;; ++n) {
    const std::string next = dir + "-" + std::to_string(n);
    if (!taken(next)) return next;
  }
}

std::string collector_line(const CollectorRun& run) {
  return run.name + " " + collector_state_name(run.state) + " (" + format_number("%.2f", run.seconds) + " s)" +
         (run.reason.empty() ? "" : ": " + run.reason);
}

HangSnapshot take_hang_snapshot(const SnapshotRequest& request) {
  const int64_t start = monotonic_us();
  const int64_t deadline = start + static_cast<int64_t>((request.budget_s - kWriteReserveS) * 1e6);
  HangSnapshot s;
  s.dir = fresh_snapshot_dir(request.dir);
  s.pid = request.pid;
  s.hang = request.hang_line;
  s.budget_s = request.budget_s;
  s.started_utc = utc_time();
  std::error_code ec;
  fs::create_directories(s.dir, ec);
  const std::string no_folder = ec ? "cannot create the snapshot folder " + s.dir + ": " + ec.message() : "";

  CollectorContext c;
  c.pid = request.pid;
  c.dir = s.dir;
  c.tool_dirs = request.tool_dirs.empty() ? default_tool_dirs() : request.tool_dirs;
  c.run_start_us = request.run_start_us;
  c.run_start_kernel_log_seq = request.run_start_kernel_log_seq;
  // Each collector gets its own bound or what is left of the budget, whichever is less.
  auto run = [&](const std::string& name, double bound_s, const std::function<CollectorRun(double)>& collect,
                 const std::string& skip_because = "") {
    const bool last_log = name == "kernel_log_after";
    const double left = (deadline - monotonic_us()) / 1e6 - (last_log || name == "nvidia_bug_report" ? 0 : kLastLogReserveS);
    CollectorRun r;
    r.name = name;
    if (!no_folder.empty() || !skip_because.empty()) {
      r.reason = no_folder.empty() ? skip_because : no_folder;
    } else if (std::min(bound_s, left) < kMinimumBoundS) {
      r.reason = "no time left in the snapshot's budget of " + format_number("%g", request.budget_s) + " s";
    } else {
      r = collect(std::min(bound_s, left));
      sync_files(s.dir, r.files);
    }
    s.collectors.push_back(r);
    if (request.on_collector) request.on_collector(r);
    return r.state;
  };
  // Cheap and harmless first; the threads' states before a debugger stops the threads; the
  // kernel log once more at the end, for what the collectors themselves made the driver log.
  run("kernel_log", kKernelLogS, [&](double b) { return collect_kernel_log(c, "kernel_log", "kernel-log.txt", b); });
  run("threads", kThreadsS, [&](double b) { return collect_threads(c, b); });
  run("debugger", kDebuggerS, [&](double b) { return collect_debugger(c, b); });
  const CollectorState smi = run("nvidia_smi", kSmiS, [&](double b) {
    return collect_tool(c, "nvidia_smi", "nvidia-smi", {"-q"}, "nvidia-smi.txt", b);
  });
  run("nvidia_smi_apps", kSmiAppsS,
      [&](double b) {
        return collect_tool(c, "nvidia_smi_apps", "nvidia-smi",
                            {"--query-compute-apps=pid,process_name,used_gpu_memory", "--format=csv"},
                            "nvidia-smi-apps.txt", b);
      },
      smi == CollectorState::timed_out ? "nvidia-smi -q did not answer" : "");
  run(kGpuInformation.name, kDriverFilesS, [&](double b) { return collect_driver_files(c, kGpuInformation, b); });
  run(kUvmParameters.name, kDriverFilesS, [&](double b) { return collect_driver_files(c, kUvmParameters, b); });
  run("kernel_log_after", kKernelLogS,
      [&](double b) { return collect_kernel_log(c, "kernel_log_after", "kernel-log-after.txt", b); });
  if (request.nvidia_bug_report) {
    run("nvidia_bug_report", request.budget_s, [&](double b) { return collect_nvidia_bug_report(c, b); });
  }
  s.summary = summarize_snapshot(s.dir, request.pid, s.collectors);
  s.seconds = (monotonic_us() - start) / 1e6;
  if (no_folder.empty()) {
    try {
      write_file_atomic(s.dir + "/snapshot.json", snapshot_to_json(s).dump(2) + "\n");
      sync_files(s.dir, {});
    } catch (const InputError&) {
      // The summary still goes into the run's result and the hang report.
    }
  }
  return s;
}

json summary_to_json(const SnapshotSummary& s) {
  json kernels = json::array();
  for (const auto& k : s.kernels) {
    json warp = nullptr;
    if (k.warp) {
      warp = {{"sm", k.warp->sm},       {"warp", k.warp->warp},           {"pc", k.warp->pc},
              {"block", k.warp->block}, {"lane_state", k.warp->lane_state}, {"exception", k.warp->exception}};
    }
    kernels.push_back({{"name", k.name},   {"function", k.function}, {"status", k.status}, {"grid", k.grid},
                       {"block", k.block}, {"sms", k.sms},           {"warp", warp}});
  }
  json blocked = json::array();
  for (const auto& t : s.blocked_threads) blocked.push_back(thread_to_json(t));
  return {{"host_verdict", host_verdict_name(s.verdict)},
          {"verdict_detail", s.verdict_detail},
          {"thread_count", s.thread_count},
          {"main_thread", s.main_thread ? thread_to_json(*s.main_thread) : json(nullptr)},
          {"blocked_threads", blocked},
          {"kernels", kernels},
          {"no_resident_kernel", s.debugger_saw_no_kernel},
          {"driver_lines", s.driver_lines},
          {"driver_lines_during_snapshot", s.driver_lines_during},
          {"nvidia_smi", s.nvidia_smi.empty() ? json(nullptr) : json(s.nvidia_smi)}};
}

SnapshotSummary summary_from_json(const json& j) {
  SnapshotSummary s;
  s.verdict = parse_host_verdict(j.value("host_verdict", "unknown"));
  s.verdict_detail = j.value("verdict_detail", "");
  s.thread_count = j.value("thread_count", 0);
  if (j.contains("main_thread") && j.at("main_thread").is_object()) s.main_thread = thread_from_json(j.at("main_thread"));
  for (const auto& t : j.value("blocked_threads", json::array())) s.blocked_threads.push_back(thread_from_json(t));
  for (const auto& k : j.value("kernels", json::array())) {
    ResidentKernel kernel;
    kernel.name = k.value("name", "");
    kernel.function = k.value("function", "");
    kernel.status = k.value("status", "");
    kernel.grid = k.value("grid", "");
    kernel.block = k.value("block", "");
    kernel.sms = k.value("sms", std::vector<int>{});
    if (k.contains("warp") && k.at("warp").is_object()) {
      const json& w = k.at("warp");
      kernel.warp = ResidentKernel::Warp{w.value("sm", -1),          w.value("warp", -1),         w.value("pc", ""),
                                         w.value("block", ""),       w.value("lane_state", ""), w.value("exception", "")};
    }
    s.kernels.push_back(kernel);
  }
  s.debugger_saw_no_kernel = j.value("no_resident_kernel", false);
  s.driver_lines = j.value("driver_lines", std::vector<std::string>{});
  s.driver_lines_during = j.value("driver_lines_during_snapshot", std::vector<std::string>{});
  if (j.contains("nvidia_smi") && j.at("nvidia_smi").is_string()) s.nvidia_smi = j.at("nvidia_smi").get<std::string>();
  return s;
}

json snapshot_to_json(const HangSnapshot& s) {
  json collectors = json::array();
  for (const auto& c : s.collectors) {
    collectors.push_back({{"name", c.name},
                          {"state", collector_state_name(c.state)},
                          {"reason", c.reason.empty() ? json(nullptr) : json(c.reason)},
                          {"seconds", c.seconds},
                          {"command", c.command},
                          {"files", c.files}});
  }
  return {{"format_version", kSnapshotFormatVersion},
          {"dir", s.dir},
          {"pid", s.pid},
          {"hang", s.hang},
          {"started_utc", s.started_utc},
          {"seconds", s.seconds},
          {"budget_seconds", s.budget_s},
          {"collectors", collectors},
          {"summary", summary_to_json(s.summary)},
          {"evidence", snapshot_evidence(s.summary)}};
}

HangSnapshot snapshot_from_json(const json& j) {
  HangSnapshot s;
  s.dir = j.at("dir").get<std::string>();
  s.pid = j.value("pid", 0);
  s.hang = j.value("hang", "");
  s.started_utc = j.value("started_utc", "");
  s.seconds = j.value("seconds", 0.0);
  s.budget_s = j.value("budget_seconds", 0.0);
  for (const auto& c : j.value("collectors", json::array())) {
    CollectorRun run;
    run.name = c.at("name").get<std::string>();
    run.state = parse_collector_state(c.at("state").get<std::string>());
    run.reason = c.contains("reason") && c.at("reason").is_string() ? c.at("reason").get<std::string>() : "";
    run.seconds = c.value("seconds", 0.0);
    run.command = c.value("command", std::vector<std::string>{});
    run.files = c.value("files", std::vector<std::string>{});
    s.collectors.push_back(run);
  }
  s.summary = summary_from_json(j.value("summary", json::object()));
  return s;
}

int hang_snapshot_main(int argc, char** argv) {
  CLI::App app{"repro hang-snapshot: takes a hang snapshot of process --pid into --dir (used by the in-process "
               "watchdog of --no-fork; docs/HANG_SNAPSHOT.md)",
               "repro hang-snapshot"};
  SnapshotRequest request;
  std::string log_file;
  int pid = 0;
  long long since_us = 0;
  app.add_option("--pid", pid, "the hung process")->required()->check(CLI::Range(1, 1 << 30));
  app.add_option("--dir", request.dir, "the snapshot folder")->required();
  app.add_option("--budget", request.budget_s, "seconds")->check(CLI::Range(0.5, 3600.0));
  app.add_option("--since-us", since_us, "the run's start, CLOCK_MONOTONIC microseconds");
  app.add_option("--since-kernel-log-seq", request.run_start_kernel_log_seq,
                 "the kernel log's newest record at the run's start (-1: unknown)");
  app.add_option("--hang", request.hang_line, "the watchdog's finding");
  app.add_flag("--nvidia-bug-report", request.nvidia_bug_report, "also run nvidia-bug-report.sh");
  app.add_option("--log-file", log_file, "the run's --log-file");
  app.add_option("--tool-dir", request.tool_dirs, "where tools are looked for (default: PATH, the CUDA folders)");
  ParseResult parsed;
  if (!parse_app(app, argc, argv, "repro hang-snapshot", parsed)) {
    (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.message << "\n";
    return parsed.exit_code;
  }
  request.pid = pid;
  request.run_start_us = since_us;
  try {
    const auto log = log_file.empty() ? std::make_unique<DurableLog>() : std::make_unique<DurableLog>(log_file, since_us);
    request.on_collector = [&](const CollectorRun& r) {
      log->record("snapshot", collector_line(r));
      std::cerr << "repro: snapshot: " << collector_line(r) << std::endl;
    };
    take_hang_snapshot(request);
  } catch (const InputError& e) {
    std::cerr << "repro hang-snapshot: error: " << one_line(e.what()) << "\n";
    return kExitUsage;
  }
  return 0;
}

}  // namespace sdpa
