// test_triage.cpp: `repro triage` without a GPU: the real binary runs every step (info, sweep,
// ladder, minimize, report) with a fake in place of each GPU process (minimize_fake_child.cpp),
// whose only fault is an injected hang armed by the real parser, so the triage has a known
// answer: the sweep's cells at S >= 2048 on managed memory hang, the minimization ends at
// S = 2048 on managed memory, and the archive holds every file SUMMARY.md lists.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "math_sdpa/atomic_file.h"
#include "math_sdpa/errors.h"
#include "repro/supervise/child_process.h"
#include "repro/supervise/process_mark.h"
#include "run_program.h"
#include "triage_known_answers.h"

namespace {


test_util::ProgramRun triage(const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> args{SDPA_REPRO_BINARY, "triage", "--out", out, "--repro-binary", MINIMIZE_FAKE_CHILD,
                                "--no-bug-report"};
  args.insert(args.end(), extra.begin(), extra.end());
  return test_util::run_program(args, {300, ""});
}

// The files SUMMARY.md's "Files" section lists ("- `name`: what").
std::vector<std::string> listed_files(const std::string& summary) {
  std::vector<std::string> files;
  const size_t from = summary.find("## Files");
  for (const std::string& line : test_util::lines_of(summary.substr(from == std::string::npos ? summary.size() : from))) {
    if (line.rfind("- `", 0) != 0) continue;
    files.push_back(line.substr(3, line.find('`', 3) - 3));
  }
  return files;
}

// `repro triage --budget 10m --scenarios 2` with the fake, started and left running (stdout
// discarded): for the tests that stop it.
pid_t start_triage(const std::string& out) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    if (!std::freopen("/dev/null", "w", stdout)) _exit(126);
    execl(SDPA_REPRO_BINARY, SDPA_REPRO_BINARY, "triage", "--out", out.c_str(), "--repro-binary", MINIMIZE_FAKE_CHILD,
          "--no-bug-report", "--budget", "10m", "--scenarios", "2", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Polls `ready` every 20 ms for at most `limit_s`; whether it became true.
template <typename Ready>
bool wait_until(Ready ready, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  while (!ready()) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= limit_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// `repro triage` started (start_triage) and killed with SIGKILL once its sweep's first cell runs (its
// log is there; bounded), as a reboot or the OOM killer leaves it: no summary, the step in flight
// marked running. The sweep and its cell die with the triage (each child dies with its parent).
// `also` (a file): until it is not empty either.
void kill_triage_in_its_sweep(const std::string& out, const std::string& also = "") {
  const pid_t pid = start_triage(out);
  const std::string first_log = out + "/sweep/sweep.cells/cell-0.log";
  REQUIRE(wait_until([&] { return !test_util::file_text(first_log).empty(); }, 60));
  if (!also.empty()) REQUIRE(wait_until([&] { return !test_util::file_text(also).empty(); }, 60));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

test_util::ProgramRun resume_triage(const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{SDPA_REPRO_BINARY, "triage", "--out", out, "--resume", "--repro-binary", MINIMIZE_FAKE_CHILD};
  args.insert(args.end(), extra.begin(), extra.end());
  return test_util::run_program(args, {300, ""});
}

// The words that would say a run hung or the machine stopped, where the summary has none to say.
const std::vector<std::string> kHangWords = {"A run hung", "froze", "stopped the machine", "Where the machine stopped",
                                             "stuck", "Still stuck", "counted as a hang"};

}  // namespace

TEST_SUITE("triage") {

// What a resume judges a step by (process_mark.h), on processes of this test: the boot id (the test
// hook stands in for a reboot), the pid and its start time, a zombie, and a process of another pid
// that carries the mark's tag.
TEST_CASE("a process mark: another boot, a pid taken by another process, a zombie, what carries its tag, the grace") {
  using namespace sdpa;
  test_util::ScopedEnv env;
  env.set(kTestBootIdVariable, "boot-1");
  ProcessMark mark = new_process_mark();
  CHECK(mark.boot_id == "boot-1");
  CHECK(mark.tag.size() == 32);
  CHECK(new_process_mark().tag != mark.tag);
  CHECK(ProcessMark::from_json(mark.to_json())->tag == mark.tag);
  CHECK_FALSE(ProcessMark::from_json(nullptr));
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  mark_started(mark, child);
  CHECK(mark.pid == child);
  CHECK(mark.start_ticks > 0);
  CHECK(find_marked_processes(mark, 0).fate == ProcessFate::still_there);
  // Its pid with another start time: a process the kernel gave the pid to since.
  ProcessMark reused = mark;
  reused.start_ticks += 1;
  CHECK(find_marked_processes(reused, 0).fate == ProcessFate::gone);
  // Another boot: the machine stopped, whatever runs now.
  env.set(kTestBootIdVariable, "boot-2");
  CHECK(find_marked_processes(mark, 0).fate == ProcessFate::machine_stopped);
  env.set(kTestBootIdVariable, "boot-1");
  // Dead and not yet reaped (a zombie): not there.
  kill(child, SIGKILL);
  REQUIRE(wait_until([&] {
    const std::string stat = test_util::file_text("/proc/" + std::to_string(child) + "/stat");
    return stat.find(") Z ") != std::string::npos;
  }, 10));
  CHECK(find_marked_processes(mark, 0).fate == ProcessFate::gone);
  int status = 0;
  waitpid(child, &status, 0);
  // A process of another pid started with the mark's tag (as everything the marked one starts is).
  const ProcessMark parent = new_process_mark();
  ChildSpec spec;
  spec.argv = {"/bin/sleep", "30"};
  spec.environment = {process_tag_environment(parent)};
  const pid_t tagged = start_child(spec);
  // start_child returns once the child has exec'd, but the kernel points /proc/PID/environ at the
  // new program's environment a moment later (as it builds the program's stack): until then the
  // tag is not there to find. So the first look may come early; within a bound it must succeed.
  ProcessFinding found;
  CHECK(wait_until([&] { return (found = find_marked_processes(parent, 0)).fate == ProcessFate::still_there; }, 10));
  CHECK(found.processes_text().find("pid " + std::to_string(tagged) + " (sleep, state ") != std::string::npos);
  CHECK(find_marked_processes(new_process_mark(), 0).fate == ProcessFate::gone);  // another tag
  // The grace: one that ends within it (killed a moment after the look began) is gone.
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(tagged, SIGKILL);
    waitpid(tagged, &status, 0);
  });
  CHECK(find_marked_processes(parent, 10).fate == ProcessFate::gone);
  killer.join();
}

TEST_CASE("repro triage runs every step to the known answer and archives what SUMMARY.md lists") {
  const std::string dir = test_util::temp_dir("triage"), out = dir + "/triage";
  const auto r = triage(out, {"--budget", "5m", "--scenarios", "0,2", "--inject", "hang:softmax@S>=2048@alloc=managed"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == sdpa::kExitHang);
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(summary);
  CHECK(summary.find("GPU: Fake GPU.") != std::string::npos);
  CHECK(summary.find("Every run had an injected fault") != std::string::npos);
  CHECK(summary.find("hung") != std::string::npos);
  CHECK(summary.find("fix=off") != std::string::npos);
  // Under which conditions: the minimization's smallest configuration.
  CHECK(summary.find("The smallest configuration that still fails (hang)") != std::string::npos);
  CHECK(summary.find("--kv-len 2048") != std::string::npos);
  CHECK(summary.find("--alloc managed") != std::string::npos);
  CHECK(summary.find("--q-len 1 ") != std::string::npos);
  // What fixes it: the fix-on cells of the hung ones.
  CHECK(summary.find("with its scenario's fix:") != std::string::npos);
  CHECK(summary.find("`minimize/report/REPORT.md`: [injected hang:softmax@S>=2048@alloc=managed: a test of the report]") !=
        std::string::npos);
  CHECK(summary.find("nvidia-bug-report.sh: not taken (--no-bug-report)") != std::string::npos);
  // Something hung: attach it, no "what to try next".
  CHECK(summary.find("Attach `triage.tar.gz` to the NVIDIA bug.") != std::string::npos);
  CHECK(summary.find("Nothing was reproduced") == std::string::npos);
  // The archive holds every file the summary lists.
  const auto files = listed_files(summary);
  CHECK(files.size() >= 5);
  const auto tar = test_util::run_program({"tar", "tzf", out + ".tar.gz"});
  REQUIRE(tar.exit_code == 0);
  std::set<std::string> archived;
  for (const std::string& line : test_util::lines_of(tar.out)) archived.insert(line);
  for (const std::string& f : files) CHECK_MESSAGE(archived.count("triage/" + f), f, " is not in the archive");
  // Progress on every step, in the durable log too.
  CHECK(r.out.find("triage: [") != std::string::npos);
  CHECK(test_util::file_text(out + "/triage.log").find("minimize: exit 0") != std::string::npos);
  // Scenario 2 hung in the sweep: no ladder for it (its budget is the minimization's), and the log says so.
  CHECK(test_util::file_text(out + "/triage.log").find("ladder-2: not run: a sweep cell of scenario 2 hung") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out + "/ladder-2"));
  CHECK(test_util::file_text(out + "/triage.log").find("ladder-2: report") == std::string::npos);
  // A second triage into the same folder is refused, the first left as it was.
  const auto again = triage(out, {"--budget", "5m"});
  CHECK(again.exit_code == sdpa::kExitUsage);
  CHECK(again.err.find("holds a triage already") != std::string::npos);
  test_util::remove_tree(dir);
}

// The four known answers (triage_known_answers.h) with the fake child: each found where it is,
// called what it is, and the exit code saying the same. tests/test_gpu_triage.cpp gives them to the GPU.
TEST_CASE("repro triage: a hang a fix clears, a hang from layer 3, an error in the backward pass, a stall") {
  const std::string dir = test_util::temp_dir("triage_known");
  for (const test_util::KnownTriage& k : test_util::known_triages()) {
    CAPTURE(k.name);
    const std::string out = dir + "/" + k.name;
    const auto r = triage(out, test_util::known_triage_args(k, "5m"));
    const std::string summary = test_util::file_text(out + "/SUMMARY.md");
    INFO(r.out << r.err << summary);
    CHECK(r.exit_code == k.exit_code);
    for (const std::string& line : k.said) CHECK_MESSAGE(summary.find(line) != std::string::npos, line);
    for (const std::string& line : k.not_said) CHECK_MESSAGE(summary.find(line) == std::string::npos, line);
  }
  test_util::remove_tree(dir);
}

// nvidia-bug-report.sh, as root: its log in the archive and named in SUMMARY.md, kept on --resume;
// one that fails is said with its exit code. A stand-in script in PATH takes the real one's place.
TEST_CASE("repro triage: nvidia-bug-report.sh's log, taken as root, kept when resumed; a failing one said") {
  const std::string dir = test_util::temp_dir("triage_bug_report");
  const std::string tools = dir + "/bin", script = tools + "/nvidia-bug-report.sh";
  std::filesystem::create_directories(tools);
  const auto write_tool = [&](const std::string& body) {
    { std::ofstream(script) << "#!/bin/sh\n" << body; }
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  };
  // The real one writes FILE.gz for --output-file FILE.
  write_tool("[ \"$1\" = --output-file ] || exit 2\necho 'a driver log' | gzip > \"$2.gz\"\n");
  const char* old_path = std::getenv("PATH");
  const std::string saved_path = old_path ? old_path : "";
  setenv("PATH", (tools + ":" + saved_path).c_str(), 1);
  const auto run = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> args{SDPA_REPRO_BINARY, "triage", "--out", out, "--repro-binary", MINIMIZE_FAKE_CHILD};
    args.insert(args.end(), extra.begin(), extra.end());
    return test_util::run_program(args, {300, ""});
  };
  const std::string out = dir + "/t", failing = dir + "/f";
  const auto r = run(out, {"--budget", "5m", "--scenarios", "2"});
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(r.out << r.err << summary);
  CHECK(r.exit_code == 0);
  if (geteuid() == 0) {
    CHECK(summary.find("nvidia-bug-report.sh: nvidia-bug-report.log.gz.") != std::string::npos);
    CHECK(summary.find("- `nvidia-bug-report.log.gz`: nvidia-bug-report.sh's output") != std::string::npos);
    // Resumed: every step ended before, the log among them, and is not taken again.
    write_tool("exit 5\n");
    const auto again = run(out, {"--resume"});
    INFO(again.out << again.err);
    CHECK(again.exit_code == 0);
    CHECK(test_util::file_text(out + "/SUMMARY.md").find("nvidia-bug-report.sh: nvidia-bug-report.log.gz.") != std::string::npos);
    // A tool that fails without its file.
    const auto bad = run(failing, {"--budget", "5m", "--scenarios", "2"});
    CHECK(test_util::file_text(failing + "/SUMMARY.md").find("nvidia-bug-report.sh: nvidia-bug-report.sh ended with 5.") !=
          std::string::npos);
  } else {
    CHECK(summary.find("nvidia-bug-report.sh: not taken: it needs root") != std::string::npos);
  }
  setenv("PATH", saved_path.c_str(), 1);
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage: a ladder for each scenario that did not hang, and nothing minimized when nothing hung") {
  const std::string dir = test_util::temp_dir("triage_pass"), out = dir + "/t";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const auto r = triage(out, {"--budget", "5m", "--scenarios", "2"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  CHECK(summary.find("Nothing hung, stalled or failed, so nothing was minimized.") != std::string::npos);
  CHECK(test_util::file_text(out + "/triage.log").find("ladder-2: report --scenario 2 ") != std::string::npos);
  CHECK(test_util::file_text(out + "/triage.log").find(" --ladder ") != std::string::npos);
  // The real report climbed the ladder (its runs the fake's, which all pass): the summary says what it found.
  CHECK(summary.find("scenario 2's context ladder (`ladder-2/REPORT.md`)") != std::string::npos);
  CHECK(summary.find("(finding: not_reproduced)") != std::string::npos);
  CHECK(test_util::file_text(dir + "/fake.log").find("--backward") != std::string::npos);  // up to its last rung
  // Nothing reproduced: said, with what to try next, and nothing to attach.
  CHECK(summary.find("## Nothing was reproduced: what to try next") != std::string::npos);
  CHECK(summary.find("Scenario 2's context ladder climbed every rung without a hang.") != std::string::npos);
  CHECK(summary.find("## What fixes it\n\nNothing hung, stalled or failed, so there is nothing to fix.") != std::string::npos);
  CHECK(summary.find("`repro --scenario 6 --plan`") != std::string::npos);
  CHECK(summary.find("`repro --scenario 7 --plan`") != std::string::npos);
  CHECK(summary.find("scripts/sdpa_capture.py") != std::string::npos);
  CHECK(summary.find("there is nothing to attach to a bug yet") != std::string::npos);
  CHECK(summary.find("Attach ") == std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage with a capture: the sweep runs the captured call in every cell") {
  const std::string dir = test_util::temp_dir("triage_capture"), out = dir + "/t";
  const std::string workload = std::string(WORKLOAD_FIXTURE_DIR) + "/workload.json";
  const auto r = triage(out, {"--budget", "5m", "--scenarios", "0", "--workload-file", workload, "--call", "1"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(test_util::file_text(out + "/SUMMARY.md").find("The call replayed: `--workload-file " + workload + " --call 1`") !=
        std::string::npos);
  const std::string cells = test_util::file_text(out + "/sweep/sweep.jsonl");
  CHECK(cells.find("\"--workload-file\",\"" + workload + "\",\"--call\",\"1\",\"--call-only\"") != std::string::npos);
  CHECK(cells.find("\"shape\":\"given\"") != std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage without a GPU stops after info, exit 7, and still writes its summary and archive") {
  const std::string dir = test_util::temp_dir("triage_nogpu"), out = dir + "/t";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_NO_GPU", "1");
  const auto r = triage(out, {"--budget", "1m"});
  CHECK(r.exit_code == sdpa::kExitNoGpu);
  CHECK(test_util::file_text(out + "/SUMMARY.md").find("Nothing ran: no usable CUDA GPU") != std::string::npos);
  CHECK(test_util::run_program({"tar", "tzf", out + ".tar.gz"}).out.find("t/SUMMARY.md") != std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage interrupted (SIGINT) during its sweep: the sweep stopped, the rest skipped, summary and archive written") {
  const std::string dir = test_util::temp_dir("triage_interrupted"), out = dir + "/t";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_SLEEP_S", "30");  // every run: long enough to be interrupted in
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const pid_t pid = start_triage(out);
  // Until the sweep's first cell runs (bounded): the sweep has its handlers by then, and an
  // interrupt leaves it a sweep to continue. Then the interrupt.
  const auto started = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  REQUIRE(wait_until([&] { return test_util::file_text(out + "/triage.log").find("sweep: sweep") != std::string::npos; }, 60));
  REQUIRE(wait_until([&] { return test_util::file_text(dir + "/fake.log").find("--check") != std::string::npos; }, 60));
  kill(pid, SIGINT);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0 && seconds() < 90) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(seconds() < 90);  // it did not wait for the 30 s runs of every cell
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGINT);
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  CHECK(summary.find("interrupted by signal 2: the steps after it did not run") != std::string::npos);
  CHECK(test_util::file_text(out + "/triage.log").find("ladder-2: report") == std::string::npos);
  // What it did not reach comes first, with the command that continues it (the budget has time left).
  INFO(summary);
  CHECK(summary.find("## Not reached") < summary.find("## What hung"));
  CHECK(summary.find("- sweep: interrupted: 0 of its 4 cells ran") != std::string::npos);
  CHECK(summary.find("- ladder-2: not started (the triage was interrupted before it)") != std::string::npos);
  CHECK(summary.find("\n    repro triage --out " + out + " --resume\n") != std::string::npos);
  CHECK(test_util::run_program({"tar", "tzf", out + ".tar.gz"}).out.find("t/SUMMARY.md") != std::string::npos);

  // --resume: the interrupted sweep continues (repro sweep --resume), then the steps it skipped run.
  env.set("MINIMIZE_FAKE_SLEEP_S", "0");
  const auto r = test_util::run_program({SDPA_REPRO_BINARY, "triage", "--out", out, "--resume", "--repro-binary",
                                         MINIMIZE_FAKE_CHILD}, {300, ""});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  const std::string log = test_util::file_text(out + "/triage.log");
  CHECK(log.find("--allocs managed ") != std::string::npos);
  CHECK(log.find(" --iters 5 ") != std::string::npos);
  CHECK(log.find("--resume (at most") != std::string::npos);  // the sweep's command, continuing
  CHECK(log.find("ladder-2: report --scenario 2 ") != std::string::npos);
  const std::string resumed = test_util::file_text(out + "/SUMMARY.md");
  CHECK(resumed.find("The sweep (`sweep/`): 4 cells, 4 passed or waived") != std::string::npos);
  CHECK(resumed.find("Where the machine stopped") == std::string::npos);  // an interrupt is not a freeze
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage killed with the machine during its sweep: --resume names the cell that was running, runs the rest") {
  const std::string dir = test_util::temp_dir("triage_frozen"), out = dir + "/t";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_SLEEP_S", "60");  // the cell is still running when the machine "stops"
  env.set(sdpa::kTestBootIdVariable, "the-boot-that-froze");
  kill_triage_in_its_sweep(out);
  env.set(sdpa::kTestBootIdVariable, "the-boot-after-it");  // the machine booted again
  CHECK_FALSE(std::filesystem::exists(out + "/SUMMARY.md"));
  const std::string jsonl_before = test_util::file_text(out + "/sweep/sweep.jsonl");
  CHECK(test_util::file_text(out + "/triage.json").find("\"running\"") != std::string::npos);
  // A new triage into that folder is refused: it points at --resume.
  const auto again = triage(out, {"--budget", "5m"});
  CHECK(again.exit_code == sdpa::kExitUsage);
  CHECK(again.err.find("--resume to continue it") != std::string::npos);

  env.set("MINIMIZE_FAKE_SLEEP_S", "0");
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const std::vector<std::string> resume{SDPA_REPRO_BINARY, "triage", "--out", out, "--resume", "--repro-binary",
                                        MINIMIZE_FAKE_CHILD};
  const auto r = test_util::run_program(resume, {300, ""});
  INFO(r.out << r.err);
  CHECK(r.exit_code == sdpa::kExitHang);  // where the machine stopped is a hang
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(summary);
  CHECK(summary.find("## Where the machine stopped") != std::string::npos);
  CHECK(summary.find("- the sweep's cell 0, in stage qk_gemm (its stage log `sweep/sweep.cells/cell-0.log`; its "
                     "last line: `0.001\trecord\tB\tqk_gemm\t1000\t`)") != std::string::npos);
  CHECK(summary.find("is not minimized") != std::string::npos);
  CHECK(summary.find("No run that ended hung or failed; the machine stopped during one (below).") != std::string::npos);
  CHECK(summary.find("Not known: what was running when the machine stopped, or is stuck, was not run again") != std::string::npos);
  // The sweep did not run again (no cell of it in the fake's log, its records as they were); the
  // steps after it ran: the ladder of scenario 2, whose runs all pass.
  CHECK(test_util::file_text(out + "/sweep/sweep.jsonl") == jsonl_before);
  const std::string runs = test_util::file_text(dir + "/fake.log");
  CHECK(runs.find("--scenario 2") != std::string::npos);
  CHECK(runs.find("sweep.cells") == std::string::npos);  // no cell of the sweep ran
  const std::string log = test_util::file_text(out + "/triage.log");
  CHECK(log.find("sweep: was running when the machine stopped (it has booted again since): not run again") != std::string::npos);
  CHECK(log.find("ladder-2: report --scenario 2 ") != std::string::npos);
  CHECK(summary.find("scenario 2's context ladder (`ladder-2/REPORT.md`)") != std::string::npos);
  CHECK(test_util::run_program({"tar", "tzf", out + ".tar.gz"}).out.find("t/triage.json") != std::string::npos);

  // Resumed once more: nothing runs again, and the place the machine stopped is still named.
  const auto twice = test_util::run_program(resume, {300, ""});
  CHECK(twice.exit_code == sdpa::kExitHang);
  CHECK(twice.out.find("ladder-2: ended before this triage was resumed (done): not run again") != std::string::npos);
  CHECK(test_util::file_text(out + "/SUMMARY.md").find("- the sweep's cell 0, in stage qk_gemm") != std::string::npos);
  test_util::remove_tree(dir);
}

// The same kill on a machine that kept running (the boot id unchanged): nothing stopped the machine
// and nothing hung, so the step in flight was only interrupted. It runs again, going on where it
// stopped, and the triage ends as a healthy one does: exit 0, with no word of a hang or a freeze.
TEST_CASE("repro triage killed (SIGKILL) on a machine that kept running: --resume runs the step again, says no hang") {
  const std::string dir = test_util::temp_dir("triage_killed"), out = dir + "/t";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_SLEEP_S", "60");
  kill_triage_in_its_sweep(out);
  env.set("MINIMIZE_FAKE_SLEEP_S", "0");
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const auto r = resume_triage(out);
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(r.out << r.err << summary);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("sweep: was interrupted (its processes ended without a result on this boot: the triage was killed): "
                   "it runs again") != std::string::npos);
  for (const char* word : {"hung", "froze", "stopped the machine", "stuck", "not run again"}) {
    CHECK_MESSAGE(r.out.find(word) == std::string::npos, word);
  }
  for (const std::string& words : kHangWords) CHECK_MESSAGE(summary.find(words) == std::string::npos, words);
  // The sweep went on (sweep --resume), its cell in flight ran again, and every step after it ran.
  CHECK(test_util::file_text(out + "/triage.log").find("--resume (at most") != std::string::npos);
  CHECK(test_util::file_text(dir + "/fake.log").find("sweep.cells/cell-0.log") != std::string::npos);
  CHECK(summary.find("The sweep (`sweep/`): 4 cells, 4 passed or waived, 0 hung") != std::string::npos);
  CHECK(summary.find("scenario 2's context ladder (`ladder-2/REPORT.md`)") != std::string::npos);
  CHECK(summary.find("## Not reached") == std::string::npos);
  test_util::remove_tree(dir);
}

// Killed on the same boot, but a process its sweep's cell started is still there: every process
// of a step dies with the triage, so that one is stuck (as a GPU process stuck in the driver is):
// a hang, the step not run again, the process left as it is.
TEST_CASE("repro triage: a step whose process is still there after the triage was killed is stuck, a hang") {
  const std::string dir = test_util::temp_dir("triage_stuck"), out = dir + "/t", strays = dir + "/strays";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_SLEEP_S", "60");
  env.set("MINIMIZE_FAKE_STRAY", strays);  // each run leaves a process that outlives it
  kill_triage_in_its_sweep(out, strays);
  std::vector<pid_t> stray_pids;
  for (const std::string& line : test_util::lines_of(test_util::file_text(strays))) stray_pids.push_back(std::stoi(line));
  REQUIRE_FALSE(stray_pids.empty());
  unsetenv("MINIMIZE_FAKE_STRAY");
  env.set("MINIMIZE_FAKE_SLEEP_S", "0");
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const std::string jsonl_before = test_util::file_text(out + "/sweep/sweep.jsonl");
  const auto r = resume_triage(out);
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(r.out << r.err << summary);
  CHECK(r.exit_code == sdpa::kExitHang);
  const std::string stray = "pid " + std::to_string(stray_pids.front()) + " (minimize_fake_c";
  CHECK(r.out.find("sweep: its processes are still there after the triage that started them stopped (" + stray) !=
        std::string::npos);
  CHECK(r.out.find("stuck, a hang; not run again, and left as they are") != std::string::npos);
  CHECK(summary.find("**A run hung** (exit 3)") != std::string::npos);
  CHECK(summary.find("## Still stuck") != std::string::npos);
  CHECK(summary.find("- the sweep (`sweep/`): " + stray) != std::string::npos);
  CHECK(summary.find("; the sweep's cell 0, in stage qk_gemm") != std::string::npos);
  CHECK(summary.find("Where the machine stopped") == std::string::npos);
  // Not run again: no cell of the sweep ran, its records as they were; the stuck process left alive.
  CHECK(test_util::file_text(out + "/sweep/sweep.jsonl") == jsonl_before);
  CHECK(test_util::file_text(dir + "/fake.log").find("sweep.cells") == std::string::npos);
  CHECK(kill(stray_pids.front(), 0) == 0);
  // Resumed once more: still named, still a hang, nothing run again.
  const auto twice = resume_triage(out);
  CHECK(twice.exit_code == sdpa::kExitHang);
  CHECK(test_util::file_text(out + "/SUMMARY.md").find("## Still stuck") != std::string::npos);
  for (pid_t p : stray_pids) kill(p, SIGKILL);
  test_util::remove_tree(dir);
}

// A --budget too short for the ladder: it is stopped at its share. SUMMARY.md and the last lines say
// so first, with the rungs it climbed and the command that continues it; a --resume without more
// budget does not continue it (and says so), one with --budget goes on from the rung it reached.
TEST_CASE("repro triage: a ladder cut at its share is said first, and --resume --budget climbs on from its rung") {
  const std::string dir = test_util::temp_dir("triage_cut"), out = dir + "/t";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_SLEEP_S", "4");  // each run: the sweep's 4 cells take 16 s, each rung 8 s of the ladder's 30 s
  const auto r = triage(out, {"--budget", "1m", "--scenarios", "2"});
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(r.out << r.err << summary);
  CHECK(r.exit_code == 0);
  const std::string continuing = "repro triage --out " + out + " --resume --budget 1m";
  // First, before what ran: the ladder stopped at its share, the rungs it climbed, the command.
  const size_t not_reached = summary.find("## Not reached");
  REQUIRE(not_reached != std::string::npos);
  CHECK(not_reached < summary.find("## What hung"));
  const size_t cut = summary.find("- ladder-2: stopped at its share of the budget (30 s): rungs climbed: isolated, per-call");
  REQUIRE(cut != std::string::npos);
  const std::string cut_line = summary.substr(cut, summary.find('\n', cut) - cut);
  CHECK(cut_line.find("; not reached: ") != std::string::npos);
  CHECK(cut_line.find("backward") != std::string::npos);
  CHECK(summary.find("\n    " + continuing + "\n") != std::string::npos);
  CHECK(summary.find("- First, what this triage planned and did not reach (## Not reached, above): `" + continuing) !=
        std::string::npos);
  // The last lines on stdout say the same.
  const std::vector<std::string> lines = test_util::lines_of(r.out);
  REQUIRE(lines.size() > 3);
  CHECK(lines.back().find("to continue it: " + continuing) != std::string::npos);
  CHECK(r.out.find("NOT REACHED (SUMMARY.md says so first):") != std::string::npos);
  CHECK(r.out.find("triage: [") != std::string::npos);
  const std::string climbed = cut_line.substr(cut_line.find("rungs climbed: ") + 15,
                                              cut_line.find("; not reached") - cut_line.find("rungs climbed: ") - 15);
  const size_t climbed_rungs = static_cast<size_t>(std::count(climbed.begin(), climbed.end(), ',')) + 1;

  // --resume alone: the budget has no time left for it, said, not run.
  env.set("MINIMIZE_FAKE_SLEEP_S", "0");
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const auto plain = resume_triage(out);
  INFO(plain.out);
  CHECK(plain.exit_code == 0);
  CHECK(plain.out.find("ladder-2: stopped at its share of the budget before, and not continued: the budget has no time "
                       "left (`" + continuing + "` gives it more)") != std::string::npos);
  CHECK(test_util::file_text(dir + "/fake.log").empty());
  CHECK(test_util::file_text(out + "/SUMMARY.md").find("## Not reached") != std::string::npos);

  // --resume --budget 35s: the ladder goes on for the least a step gets and is cut again; the time
  // it was given is said in all (its 30 s before and these 30 s).
  env.set("MINIMIZE_FAKE_SLEEP_S", "4");
  const auto again = resume_triage(out, {"--budget", "35s"});
  INFO(again.out);
  CHECK(again.exit_code == 0);
  CHECK(test_util::file_text(out + "/SUMMARY.md").find("- ladder-2: stopped at its share of the budget (60 s): rungs climbed: ") !=
        std::string::npos);
  const std::string again_summary = test_util::file_text(out + "/SUMMARY.md");
  const size_t again_cut = again_summary.find("- ladder-2: stopped at its share");
  const std::string again_line = again_summary.substr(again_cut, again_summary.find('\n', again_cut) - again_cut);
  const std::string climbed_again = again_line.substr(again_line.find("rungs climbed: ") + 15,
                                                      again_line.find("; not reached") - again_line.find("rungs climbed: ") - 15);
  const size_t climbed_rungs_again = static_cast<size_t>(std::count(climbed_again.begin(), climbed_again.end(), ',')) + 1;
  CHECK(climbed_rungs_again > climbed_rungs);
  env.set("MINIMIZE_FAKE_SLEEP_S", "0");
  std::ofstream(dir + "/fake.log", std::ios::trunc).flush();

  // --resume --budget: the ladder goes on from the rung it reached; the rungs below are not climbed
  // again. The continuation's minute comes on top of the time spent before.
  const double spent = nlohmann::json::parse(test_util::file_text(out + "/triage.json")).at("spent_s").get<double>();
  const auto more = resume_triage(out, {"--budget", "1m"});
  const std::string resumed = test_util::file_text(out + "/SUMMARY.md");
  INFO(more.out << resumed);
  CHECK(more.exit_code == 0);
  CHECK(test_util::file_text(out + "/triage.log").find(" --ladder --repro-binary " MINIMIZE_FAKE_CHILD " --resume (at most") !=
        std::string::npos);
  const std::string runs = test_util::file_text(dir + "/fake.log");
  CHECK(test_util::lines_of(runs).size() == 2 * (8 - climbed_rungs_again));  // each rung left: fix off and on
  CHECK(runs.find("--backward") != std::string::npos);
  CHECK(resumed.find("## Not reached") == std::string::npos);
  CHECK(resumed.find("at every rung of the context ladder (isolated, per-call, layers, ballast, mapped-weights, host-load, "
                     "steps, backward)") != std::string::npos);
  const double budget = nlohmann::json::parse(test_util::file_text(out + "/triage.json")).at("settings").at("budget_s").get<double>();
  CHECK(budget == doctest::Approx(spent + 60).epsilon(0.001));
  test_util::remove_tree(dir);
}

// Nothing found and time left that no minimization takes: a ladder cut at its share goes on from the
// rung it reached with that time, in the same triage, and climbs every rung.
TEST_CASE("repro triage: a ladder cut at its share goes on with the time left when nothing was found") {
  const std::string dir = test_util::temp_dir("triage_continue"), out = dir + "/t";
  test_util::ScopedEnv env;
  // Each run 3 s: the sweep's 4 cells take 12 s, each rung 6 s, the ladder 48 s; its share is half of
  // the 78 s left, 39 s, and as much is left after it.
  env.set("MINIMIZE_FAKE_SLEEP_S", "3");
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const auto r = triage(out, {"--budget", "90s", "--scenarios", "2"});
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  INFO(r.out << r.err << summary);
  CHECK(r.exit_code == 0);
  const size_t cut = r.out.find("ladder-2: stopped at its deadline");
  const size_t goes_on = r.out.find("ladder-2: stopped at its share with nothing found and time left that no minimization "
                                    "takes: it goes on where it stopped");
  REQUIRE(cut != std::string::npos);
  REQUIRE(goes_on != std::string::npos);
  CHECK(cut < goes_on);
  CHECK(test_util::file_text(out + "/triage.log").find(" --ladder --repro-binary " MINIMIZE_FAKE_CHILD " --resume (at most") !=
        std::string::npos);
  CHECK(summary.find("## Not reached") == std::string::npos);
  CHECK(summary.find("at every rung of the context ladder (isolated, per-call, layers, ballast, mapped-weights, host-load, "
                     "steps, backward)") != std::string::npos);
  // The rungs climbed before the cut are not climbed again: the backward rung's two runs once.
  const std::vector<std::string> runs = test_util::lines_of(test_util::file_text(dir + "/fake.log"));
  CHECK(std::count_if(runs.begin(), runs.end(), [](const std::string& l) { return l.find("--backward") != std::string::npos; }) == 2);
  test_util::remove_tree(dir);
}

// `repro report --ladder --resume`: the rungs its ladder.json records are not climbed again, and its
// report covers them; a ladder.json of another climb is refused (one line, exit 2).
TEST_CASE("repro report --ladder --resume climbs from the rung ladder.json reached; another climb's is refused") {
  const std::string dir = test_util::temp_dir("report_resume"), out = dir + "/r";
  test_util::ScopedEnv env;
  const std::vector<std::string> report{SDPA_REPRO_BINARY, "report", "--scenario", "2", "--iters", "1", "--out", out,
                                        "--ladder", "--repro-binary", MINIMIZE_FAKE_CHILD};
  REQUIRE(test_util::run_program(report, {120, ""}).exit_code == 0);
  nlohmann::json progress = nlohmann::json::parse(test_util::file_text(out + "/ladder.json"));
  REQUIRE(progress.at("rungs").size() == 8);
  // As a climb stopped in its fourth rung leaves it.
  progress["rungs"].erase(progress["rungs"].begin() + 3, progress["rungs"].end());
  sdpa::write_file_atomic(out + "/ladder.json", progress.dump());
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  std::vector<std::string> resume = report;
  resume.push_back("--resume");
  const auto r = test_util::run_program(resume, {120, ""});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("repro report: rung layers: climbed before: not_reproduced") != std::string::npos);
  CHECK(r.out.find("rung ballast: run 1 of 2") != std::string::npos);
  CHECK(r.out.find("rung isolated: run") == std::string::npos);
  CHECK(test_util::lines_of(test_util::file_text(dir + "/fake.log")).size() == 2 * 5);
  CHECK(test_util::file_text(out + "/REPORT.md").find("at every rung of the context ladder (isolated, per-call, layers,") !=
        std::string::npos);
  // Another climb's record: refused, nothing run.
  progress = nlohmann::json::parse(test_util::file_text(out + "/ladder.json"));
  progress["rungs"][1]["command_fix_off"].push_back("--layers");
  sdpa::write_file_atomic(out + "/ladder.json", progress.dump());
  const auto other = test_util::run_program(resume, {120, ""});
  CHECK(other.exit_code == sdpa::kExitUsage);
  CHECK(other.err.find("ladder.json was climbed with other options (its rung 2): --force without --resume") !=
        std::string::npos);
  CHECK(test_util::lines_of(other.err).size() == 1);
  test_util::remove_tree(dir);
}

// A --resume beside the triage it would continue, still running: refused, one line, nothing touched.
TEST_CASE("repro triage --resume while that triage still runs is refused") {
  const std::string dir = test_util::temp_dir("triage_twice"), out = dir + "/t";
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_SLEEP_S", "60");
  const pid_t pid = start_triage(out);
  REQUIRE(wait_until([&] { return !test_util::file_text(out + "/sweep/sweep.cells/cell-0.log").empty(); }, 60));
  const auto r = resume_triage(out);
  CHECK(r.exit_code == sdpa::kExitUsage);
  CHECK(r.err.find("--resume: the triage in " + out + " is still running (pid " + std::to_string(pid)) != std::string::npos);
  CHECK(test_util::lines_of(r.err).size() == 1);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage --resume: only --out, and a folder that holds a triage") {
  const std::string dir = test_util::temp_dir("triage_resume_bad");
  auto resume = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{SDPA_REPRO_BINARY, "triage", "--out", dir + "/t", "--resume", "--repro-binary",
                                  MINIMIZE_FAKE_CHILD};
    args.insert(args.end(), extra.begin(), extra.end());
    return test_util::run_program(args, {60, ""});
  };
  const auto none = resume({});
  CHECK(none.exit_code == sdpa::kExitUsage);
  CHECK(none.err.find("holds no triage to continue") != std::string::npos);
  CHECK(test_util::lines_of(none.err).size() == 1);
  const auto with_option = resume({"--scenarios", "2"});
  CHECK(with_option.exit_code == sdpa::kExitUsage);
  CHECK(with_option.err.find("--scenarios is not one to give again") != std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage: bad command lines exit 2 with one line, before anything runs") {
  const std::string dir = test_util::temp_dir("triage_bad");
  for (const auto& [extra, why] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--budget", "later"}, "--budget: 'later' is not a duration"},
           {{"--workload-file", dir + "/none.json"}, "--workload-file " + dir + "/none.json: cannot be read"},
           {{"--call", "2"}, "--call: it selects from a --workload-file"},
           {{"--scenarios", "2,9"}, "--scenarios: '9' in '2,9' is not a scenario (scenarios are 0-"},
           {{"--scenarios", "2,2"}, "--scenarios: scenario 2 is listed twice"},
           {{"--inject", "hang:nowhere"}, "--inject hang:nowhere: unknown stage"}}) {
    const auto r = triage(dir + "/t", extra);
    INFO(r.err);
    CHECK(r.exit_code == sdpa::kExitUsage);
    CHECK(r.err.find(why) != std::string::npos);
    CHECK(test_util::lines_of(r.err).size() == 1);
  }
  test_util::remove_tree(dir);
}

// The plan, every step's command checked as its child would check it, nothing run: what a user on a
// machine that may freeze sees before the first step starts.
TEST_CASE("repro triage: a share of the budget too short for a step's first result is said before the step starts") {
  // --budget 4m: scenario 2's ladder gets 30 s, its first rung (the workload's call, fix on and
  // off) is predicted at about 53 s; a minimization's first result (3 runs of a hang, each started
  // and then waiting out its 20 s deadline) at 75 s. With 2h every share is long enough.
  const std::string dir = test_util::temp_dir("triage_short"), out = dir + "/t";
  const auto plan = test_util::run_program({SDPA_REPRO_BINARY, "triage", "--dry-run", "--out", out, "--budget", "4m",
                                            "--no-bug-report"},
                                           {120, ""});
  INFO(plan.out << plan.err);
  CHECK(plan.exit_code == 0);
  const size_t ladder2 = plan.out.find("\nladder-2:"), ladder3 = plan.out.find("\nladder-3:");
  REQUIRE(ladder2 != std::string::npos);
  REQUIRE(ladder3 != std::string::npos);
  const std::string ladder2_block = plan.out.substr(ladder2, ladder3 - ladder2);
  CHECK(ladder2_block.find("(30 s if the steps before it use all of theirs)") != std::string::npos);
  CHECK(ladder2_block.find("first result: in about 53 s; TOO SHORT a share") != std::string::npos);
  const std::string minimize_block = plan.out.substr(plan.out.find("\nminimize:"));
  CHECK(minimize_block.find("first result: in about 75 s; TOO SHORT a share") != std::string::npos);
  const auto roomy = test_util::run_program({SDPA_REPRO_BINARY, "triage", "--dry-run", "--out", out, "--no-bug-report"}, {120, ""});
  CHECK(roomy.exit_code == 0);
  CHECK(roomy.out.find("TOO SHORT") == std::string::npos);
  // Run (the fake child's runs take no time): said in triage.log before the step, and in SUMMARY.md's notes.
  const auto r = triage(out, {"--budget", "4m", "--scenarios", "1,2,3,4"});
  CHECK(r.exit_code == 0);
  const std::string log = test_util::file_text(out + "/triage.log");
  INFO(log);
  const size_t warned = log.find("is shorter than its first result needs (about 53 s): it may end with nothing");
  CHECK(log.rfind("ladder-2: its share of the budget, ", warned) != std::string::npos);
  // The shares themselves: the sweep 35% of the 240 s, the first ladder half of what is left over the four.
  CHECK(log.find("--repro-binary " MINIMIZE_FAKE_CHILD " (at most 84 s)") != std::string::npos);
  CHECK(log.find("ladder-1: report --scenario 1 ") != std::string::npos);
  CHECK(log.find(" (at most 30 s)\n") != std::string::npos);
  CHECK(warned != std::string::npos);
  CHECK(warned < log.find("ladder-2: report --scenario 2"));
  CHECK(test_util::file_text(out + "/SUMMARY.md").find("is shorter than its first result needs") != std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage --dry-run lists every step's command, each valid, and runs nothing") {
  const std::string dir = test_util::temp_dir("triage_plan"), out = dir + "/t";
  const auto r = test_util::run_program({SDPA_REPRO_BINARY, "triage", "--dry-run", "--out", out, "--scenarios", "1-7",
                                         "--no-bug-report"},
                                        {120, ""});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(out));  // nothing written
  for (const char* step : {"\ninfo:", "\nsweep:", "\nladder-1:", "\nladder-2:", "\nladder-3:", "\nladder-4:", "\nladder-6:", "\nladder-7:",
                           "\nminimize:", "\nnvidia-bug-report:"}) {
    CHECK_MESSAGE(r.out.find(step) != std::string::npos, step);
  }
  CHECK(r.out.find("--scenarios 1,2,3,4,5,6,7 --fix off,on") != std::string::npos);
  CHECK(r.out.find("repro report --scenario 2 ") != std::string::npos);
  // Scenario 5's graph cannot take the ladder's rungs: its record leaves the ladder out, and says why.
  CHECK(r.out.find("ladder-5: scenario 5's context ladder") != std::string::npos);
  CHECK(r.out.find("left out: scenario 5's record leaves the ladder out: a CUDA graph") != std::string::npos);
  CHECK(r.out.find("CANNOT RUN") == std::string::npos);
  CHECK(r.out.find("# every step can run") != std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("repro triage: a step that cannot run is said before anything runs, in SUMMARY.md and the exit code") {
  const std::string dir = test_util::temp_dir("triage_cannot"), out = dir + "/t";
  // A fault in a stage scenario 2's call never reaches: every run of the sweep and the ladder would
  // be a usage error.
  const std::vector<std::string> incompatible = {"--scenarios", "2", "--inject", "error:graph_launch", "--budget", "2m"};
  std::vector<std::string> plan_args = {SDPA_REPRO_BINARY, "triage", "--dry-run", "--out", out, "--no-bug-report"};
  plan_args.insert(plan_args.end(), incompatible.begin(), incompatible.end());
  const auto plan = test_util::run_program(plan_args, {120, ""});
  INFO(plan.out << plan.err);
  CHECK(plan.exit_code == sdpa::kExitUsage);
  CHECK(plan.out.find("CANNOT RUN: cell ") != std::string::npos);
  CHECK(plan.out.find("stage graph_launch does not run in this configuration") != std::string::npos);
  CHECK(plan.out.find("# a step cannot run (exit 2)") != std::string::npos);
  // Run for real: the plan is said at once, before the environment step, and nothing of those steps runs.
  test_util::ScopedEnv env;
  env.set("MINIMIZE_FAKE_LOG", dir + "/fake.log");
  const auto r = triage(out, incompatible);
  INFO(r.out << r.err);
  CHECK(r.exit_code == sdpa::kExitUsage);
  const size_t said = r.out.find("sweep: cannot run: "), info = r.out.find("info: exit");
  CHECK(said != std::string::npos);
  CHECK(said < info);
  CHECK_FALSE(std::filesystem::exists(out + "/sweep.log"));
  const std::string summary = test_util::file_text(out + "/SUMMARY.md");
  CHECK(summary.find("## Steps that could not run") != std::string::npos);
  CHECK(summary.find("- sweep: cell ") != std::string::npos);
  CHECK(summary.find("- ladder-2: ") != std::string::npos);
  test_util::remove_tree(dir);
}

}  // TEST_SUITE
