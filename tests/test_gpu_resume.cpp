// test_gpu_resume.cpp: `repro triage --resume` on the GPU, no fake child: what a resume makes of a
// triage that stopped without a word, told apart by the processes its steps left (process_mark.h).
//
//   killed    a triage of scenarios 1 and 2 (--budget 5m) killed with SIGKILL after 40 s on a
//             healthy GPU: the machine kept running and its step's processes died with it, so
//             `--resume` goes on (the step in flight was interrupted) and ends exit 0, with no word
//             of a hang, a freeze or a stopped machine, on stdout or in SUMMARY.md
//   stuck     a triage whose every run hangs (--inject hang:softmax) killed while its sweep's cell
//             hangs, with a hung GPU process of that step left alive (a `repro` run of the same
//             injected hang, kept by --on-hang keep, carrying the step's tag as every process the
//             step starts does): `--resume` finds it still there and says the step is stuck, a
//             hang (exit 3)
//
// Every child of the harness dies with its parent (PR_SET_PDEATHSIG), so a SIGKILL of the triage
// alone cannot leave its own hung child alive on a healthy GPU, where a hung process dies when
// killed: only a process stuck in the driver survives it. The stand-in is a process of the step
// (by its tag) that outlives the kill the way such a process does, and it is a real hung GPU run.
//
// About 8 minutes on an H200 (killed: 40 s and up to 5 min resumed; stuck: about 3 min), so ctest's
// gpu.resume runs it only with SDPA_LONG_TESTS=1. SDPA_RESUME_KEEP=DIR keeps the triages' folders.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "math_sdpa/errors.h"
#include "repro/supervise/process_mark.h"
#include "run_program.h"

namespace {

using nlohmann::json;

// Starts `args` (no shell) with stdout and stderr into `output`, and `environment` added; returns its pid.
pid_t start(const std::vector<std::string>& args, const std::string& output,
            const std::vector<std::pair<std::string, std::string>>& environment = {}) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0) _exit(126);
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

template <typename Ready>
bool wait_until(Ready ready, double limit_s) {
  const double until = test_util::now_s() + limit_s;
  while (!ready()) {
    if (test_util::now_s() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return true;
}

void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

json triage_state(const std::string& out) {
  try {
    return json::parse(test_util::file_text(out + "/triage.json"));
  } catch (const json::exception&) {
    return nullptr;
  }
}

// The step triage.json says is running, or "".
std::string step_running(const json& state) {
  if (!state.is_object() || !state.contains("steps")) return "";
  for (const auto& [name, step] : state["steps"].items()) {
    if (step.value("state", "") == "running") return name;
  }
  return "";
}

std::string folder(const char* name) {
  const char* keep = std::getenv("SDPA_RESUME_KEEP");
  if (!keep || !*keep) return test_util::temp_dir(name);
  const std::string dir = std::string(keep) + "/" + name;
  test_util::remove_tree(dir);
  std::system(("mkdir -p '" + dir + "'").c_str());
  return dir;
}

void done_with(const std::string& dir) {
  const char* keep = std::getenv("SDPA_RESUME_KEEP");
  if (!keep || !*keep) test_util::remove_tree(dir);
}

}  // namespace

TEST_SUITE("gpu_resume") {

TEST_CASE("repro triage killed with SIGKILL after 40 s on a healthy GPU, resumed: exit 0, no word of a hang or a freeze") {
  const std::string dir = folder("resume_killed"), out = dir + "/t";
  const pid_t triage = start({SDPA_REPRO_BINARY, "triage", "--out", out, "--budget", "5m", "--scenarios", "1,2",
                              "--no-bug-report"},
                             dir + "/first.log");
  std::this_thread::sleep_for(std::chrono::seconds(40));
  const std::string in_flight = step_running(triage_state(out));
  kill_and_reap(triage);
  REQUIRE_FALSE(in_flight.empty());  // a step was in flight at the kill (40 s into a 5 min budget)
  const auto r = test_util::run_program({SDPA_REPRO_BINARY, "triage", "--out", out, "--resume"}, {5 * 60 + 120, ""});
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(r.out << r.err << summary);
  MESSAGE("killed: step in flight at the kill: " << in_flight << "; resumed: exit " << r.exit_code << " after " << r.wall_s
                                                 << " s");
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find(in_flight + ": was interrupted (its processes ended without a result on this boot") != std::string::npos);
  for (const char* words : {"hung", "froze", "stopped the machine", "stuck", "machine stopped"}) {
    CHECK_MESSAGE(r.out.find(words) == std::string::npos, words);
  }
  for (const char* words : {"A run hung", "froze", "stopped the machine", "Where the machine stopped", "Still stuck",
                            "counted as a hang"}) {
    CHECK_MESSAGE(summary.find(words) == std::string::npos, words);
  }
  done_with(dir);
}

TEST_CASE("repro triage whose step's hung process is left alive, resumed: the step is stuck, a hang (exit 3)") {
  const std::string dir = folder("resume_stuck"), out = dir + "/t";
  const pid_t triage = start({SDPA_REPRO_BINARY, "triage", "--out", out, "--budget", "2m", "--scenarios", "2",
                              "--stage-timeout", "5", "--runs", "1", "--no-bug-report", "--inject", "hang:softmax"},
                             dir + "/first.log");
  // The sweep's process recorded (its tag is what every process the step starts carries).
  json step;
  REQUIRE(wait_until([&] {
    const json state = triage_state(out);
    if (step_running(state) != "sweep") return false;
    step = state["steps"]["sweep"];
    return step.contains("process") && step["process"].value("pid", 0) > 0;
  }, 120));
  const std::string tag = step["process"].value("tag", "");
  REQUIRE_FALSE(tag.empty());
  // A hung GPU process of that step, kept alive: the injected hang, --on-hang keep.
  const std::string kept_log = dir + "/kept.log";
  const pid_t kept = start({SDPA_REPRO_BINARY, "--scenario", "2", "--inject", "hang:softmax", "--stage-timeout", "5",
                            "--on-hang", "keep", "--keep-timeout", "600"},
                           kept_log, {{sdpa::kProcessTagsVariable, tag}});
  REQUIRE(wait_until([&] { return test_util::file_text(kept_log).find("keeping the hung process") != std::string::npos; }, 60));
  kill_and_reap(triage);
  const auto r = test_util::run_program({SDPA_REPRO_BINARY, "triage", "--out", out, "--resume"}, {2 * 60 + 180, ""});
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(r.out << r.err << summary);
  MESSAGE("stuck: resumed: exit " << r.exit_code << " after " << r.wall_s << " s");
  kill_and_reap(kept);  // its GPU child dies with it
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == sdpa::kExitHang);
  const size_t said = r.out.find("sweep: its processes are still there after the triage that started them stopped (");
  REQUIRE(said != std::string::npos);
  const std::string line = r.out.substr(said, r.out.find('\n', said) - said);
  CHECK(line.find("pid " + std::to_string(kept) + " (repro, state ") != std::string::npos);
  CHECK(line.find("stuck, a hang; not run again, and left as they are") != std::string::npos);
  CHECK(summary.find("**A run hung** (exit 3)") != std::string::npos);
  CHECK(summary.find("## Still stuck") != std::string::npos);
  CHECK(summary.find("pid " + std::to_string(kept) + " (repro, state ") != std::string::npos);
  done_with(dir);
}

}  // TEST_SUITE
