// test_hang_snapshot.cpp: the hang snapshot without a GPU.
//
// The parsers against raw outputs captured on an H100 during live injected hangs
// (tests/fixtures/snapshot/); each collector against stand-ins for its tool (a cuda-gdb that
// never answers, an nvidia-smi that fails, a tool that is missing): it ends within its bound
// and says so, the snapshot stays within its budget and writes nothing outside its folder; the
// supervisor with --on-hang snapshot and keep, its hang verdict and exit code unchanged; the
// --log-file records on disk when the supervisor is killed; the --no-fork watchdog's snapshot by
// `repro hang-snapshot`; the options. Where gdb is installed, a real debugger attaches too.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "repro/cli/run_options.h"
#include "repro/supervise/child_process.h"
#include "repro/supervise/hang_snapshot.h"
#include "repro/supervise/snapshot_collectors.h"
#include "repro/supervise/supervised_command.h"
#include "repro/supervise/supervisor.h"
#include "run_program.h"

using namespace sdpa;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(SDPA_SOURCE_DIR) + "/tests/fixtures/snapshot";

std::string fixture(const std::string& capture, const std::string& file) {
  return test_util::file_text(kFixtures + "/" + capture + "/" + file);
}

using test_util::now_s;

bool contains(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

const CollectorRun& collector(const HangSnapshot& s, const std::string& name) {
  for (const auto& c : s.collectors) {
    if (c.name == name) return c;
  }
  FAIL("no collector " << name);
  static CollectorRun none;
  return none;
}

// A debugger that stops the process it was given (-p PID) as an attach does, and never answers.
const char* const kStoppingDebugger = "kill -STOP \"$2\"\nexec /bin/sleep 100000";

// A folder of stand-in tools, removed at the end.
struct Scratch {
  std::string dir = test_util::temp_dir("snapshot");
  ~Scratch() { test_util::remove_tree(dir); }
  std::string path(const std::string& name) const { return dir + "/" + name; }
  void tool(const std::string& name, const std::string& script) const {
    fs::create_directories(path("tools"));
    const std::string file = path("tools/" + name);
    std::ofstream(file) << "#!/bin/sh\n" << script << "\n";
    chmod(file.c_str(), 0755);
  }
  std::set<std::string> entries(const std::string& sub = "") const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(sub.empty() ? dir : path(sub))) names.insert(e.path().filename().string());
    return names;
  }
};

// A process that sleeps until killed, as a hung one does; killed and reaped at the end.
struct Sleeper {
  pid_t pid = -1;
  Sleeper() {
    std::fflush(nullptr);
    pid = fork();
    if (pid == 0) {
      signal(SIGTERM, SIG_DFL);
      while (true) pause();
    }
    wait_asleep();  // every test reads a sleeping process: the state it needs, waited for
  }
  ~Sleeper() {
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
  }
  char state() const {
    const std::string stat = test_util::file_text("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
  }
  // Waits, up to `bound_s`, until the child sleeps in pause(): right after fork() it may still be
  // running (R), on a loaded machine for a while. True when it sleeps.
  bool wait_asleep(double bound_s = 5) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(bound_s);
    while (state() != 'S' && std::chrono::steady_clock::now() < until) usleep(1000);
    return state() == 'S';
  }
};

// Sets PATH for the life of the value (the supervisor's collectors search it).
struct PathOverride {
  std::string saved = std::getenv("PATH") ? std::getenv("PATH") : "";
  explicit PathOverride(const std::string& path) { setenv("PATH", path.c_str(), 1); }
  ~PathOverride() { setenv("PATH", saved.c_str(), 1); }
};

void send_record(int fd, char type, Stage s) {
  const std::string r = progress_record(type, stage_name(s), monotonic_us(), "detail");
  (void)!write(fd, r.data(), r.size());
}

// A GPU child that begins softmax and never ends it.
int hang_in_softmax(int fd) {
  for (int sig : {SIGTERM, SIGSEGV, SIGABRT}) signal(sig, SIG_DFL);
  send_record(fd, 'B', Stage::qk_gemm);
  send_record(fd, 'E', Stage::qk_gemm);
  send_record(fd, 'B', Stage::softmax);
  while (true) pause();
}

// The run result the supervised command of these tests publishes.
struct TestResult {
  std::string outcome = "pass", error;
  int exit_code = 0;
};

}  // namespace

TEST_SUITE("hang_snapshot") {
  TEST_CASE("cuda-gdb's tables: the resident kernel, its SMs and grid, one warp's PC and lane (live hangs on an H100)") {
    struct Capture {
      const char* folder;
      int warp;
      const char* pc;
    };
    for (const Capture& c : {Capture{"softmax_nofork", 1, "0x00007f11037b87f0"}, Capture{"qk_gemm_fork", 0, "0x00007fd5537b0ef0"},
                             Capture{"stream_sync_nofork", 2, "0x00007fcdff7c49f0"}}) {
      CAPTURE(c.folder);
      const auto kernels = parse_debugger_kernels(fixture(c.folder, "debugger.txt"));
      REQUIRE(kernels.size() == 1);
      const ResidentKernel& k = kernels[0];
      CHECK(k.name == "spin_kernel");
      CHECK(k.function == "sdpa::(anonymous namespace)::spin_kernel(int const volatile*, unsigned long long)");
      CHECK(k.status == "Active");
      CHECK(k.grid == "(1,1,1)");
      CHECK(k.block == "(1,1,1)");
      CHECK(k.sms == std::vector<int>{124});
      REQUIRE(k.warp);
      CHECK(k.warp->sm == 124);
      CHECK(k.warp->warp == c.warp);
      CHECK(k.warp->pc == c.pc);
      CHECK(k.warp->block == "(0,0,0)");
      CHECK(k.warp->lane_state == "active");
      CHECK(k.warp->exception == "None");
    }
    CHECK(sms_of_mask("0x0010000000000000000000000000000000") == std::vector<int>{124});
    CHECK(sms_of_mask("0x3") == std::vector<int>{0, 1});
    CHECK(sms_of_mask("0xF0") == std::vector<int>{4, 5, 6, 7});
    CHECK(sms_of_mask("0x100000001") == std::vector<int>{0, 32});
    CHECK(sms_of_mask("12").empty());
    CHECK(sms_of_mask("0xzz").empty());
  }

  TEST_CASE("a kernel with several warp rows keeps its first: its SM, warp, PC and block, and that warp's first lane (made-up case)") {
    // cuda-gdb 13's tables as on the H100, for a softmax of two blocks on SMs 0 and 1, two warps
    // each, and a second kernel with a warp on SM 1 between them; `info cuda lanes` lists the
    // focus warp's lanes.
    const std::string debugger =
        "  Kernel Parent Dev Grid Status                             SMs Mask GridDim BlockDim Invocation\n"
        "*      0      -   0   41 Active 0x3 (2,1,1)  (64,1,1) sdpa::(anonymous namespace)::softmax_block_kernel()\n"
        "       1      -   0   42 Active 0x2 (1,1,1)  (32,1,1) sdpa::(anonymous namespace)::spin_kernel()\n"
        "  BlockIdx To BlockIdx Count   State\n"
        "Kernel 0\n"
        "*  (0,0,0)     (1,0,0)     2 running\n"
        "  Wp Active Lanes Mask Divergent Lanes Mask          Active PC Kernel BlockIdx First Active ThreadIdx\n"
        "Device 0 SM 0\n"
        "*  0        0xffffffff           0x00000000 0x00007f0000001000      0  (0,0,0)                (0,0,0)\n"
        "   1        0xffffffff           0x00000000 0x00007f0000001100      0  (0,0,0)               (32,0,0)\n"
        "Device 0 SM 1\n"
        "   0        0x00000001           0x00000000 0x00007f0000002000      1  (0,0,0)                (0,0,0)\n"
        "   1        0xffffffff           0x00000000 0x00007f0000001200      0  (1,0,0)                (0,0,0)\n"
        "   2        0x0000ffff           0xffff0000 0x00007f0000001300      0  (1,0,0)               (32,0,0)\n"
        "   3        0x00000001           0x00000000 0x00007f0000002100      1  (0,0,0)               (32,0,0)\n"
        "  Ln  State         PC         ThreadIdx Exception\n"
        "Device 0 SM 0 Warp 0\n"
        "*  0 active 0x00007f0000001000   (0,0,0)    None\n"
        "   1 divergent 0x00007f0000001010   (1,0,0)    None\n";
    const auto kernels = parse_debugger_kernels(debugger);
    REQUIRE(kernels.size() == 2);
    const ResidentKernel& softmax = kernels[0];
    CHECK(softmax.name == "softmax_block_kernel");
    CHECK(softmax.sms == std::vector<int>{0, 1});
    REQUIRE(softmax.warp);
    CHECK(softmax.warp->sm == 0);
    CHECK(softmax.warp->warp == 0);
    CHECK(softmax.warp->pc == "0x00007f0000001000");
    CHECK(softmax.warp->block == "(0,0,0)");
    CHECK(softmax.warp->lane_state == "active");
    CHECK(softmax.warp->exception == "None");
    // The second kernel's own first row, though the first kernel's rows come before and after it;
    // no lane of its warp was listed.
    const ResidentKernel& spin = kernels[1];
    CHECK(spin.name == "spin_kernel");
    REQUIRE(spin.warp);
    CHECK(spin.warp->sm == 1);
    CHECK(spin.warp->warp == 0);
    CHECK(spin.warp->pc == "0x00007f0000002000");
    CHECK(spin.warp->lane_state.empty());
    // The summary of a snapshot folder holding that output, and its evidence line.
    Scratch scratch;
    std::ofstream(scratch.path("debugger.txt")) << debugger;
    const SnapshotSummary s = summarize_snapshot(scratch.dir, 1234, {});
    REQUIRE(s.kernels.size() == 2);
    REQUIRE(s.kernels[0].warp);
    CHECK(s.kernels[0].warp->pc == "0x00007f0000001000");
    CHECK(contains(snapshot_evidence(s), "kernel softmax_block_kernel resident on SM 0-1 (grid (2,1,1), block (64,1,1), "
                                         "Active); warp 0 on SM 0 at PC 0x00007f0000001000, lane active"));
  }

  TEST_CASE("backtraces: each thread, and the main thread's innermost CUDA call, the call made and its caller") {
    struct Capture {
      const char* folder;
      int main_tid;
      const char* cuda_call;
      const char* called_as;
      const char* caller;
      size_t threads;
    };
    for (const Capture& c :
         {Capture{"softmax_nofork", 1148, "cuStreamSynchronize", "cudaStreamSynchronize",
                  "sdpa::MathSdpa::synchronize_all_streams()", 6},
          Capture{"qk_gemm_fork", 1423, "cuKernelGetFunction", "cublasSgemmStridedBatched",
                  "sdpa::run_gemm(cublasContext*, sdpa::GemmCall const&, void const*, void const*, void*)", 5},
          Capture{"stream_sync_nofork", 1689, "cuStreamSynchronize", "cudaStreamSynchronize",
                  "sdpa::MathSdpa::synchronize_all_streams()", 6}}) {
      CAPTURE(c.folder);
      const auto threads = parse_debugger_threads(fixture(c.folder, "debugger.txt"));
      CHECK(threads.size() == c.threads);
      const auto main = std::find_if(threads.begin(), threads.end(), [&](const HostThread& t) { return t.tid == c.main_tid; });
      REQUIRE(main != threads.end());
      CHECK(main->comm == "repro");
      CHECK(main->cuda_call == c.cuda_call);
      CHECK(main->called_as == c.called_as);
      CHECK(main->caller == c.caller);
      CHECK(main->backtrace.back() == "_start");
      // The other threads are in no CUDA call of the harness (libcuda's own threads poll).
      for (const auto& t : threads) {
        if (t.tid != c.main_tid) CHECK_MESSAGE(t.cuda_call.empty(), t.tid);
      }
    }
    const auto softmax = parse_debugger_threads(fixture("softmax_nofork", "debugger.txt"));
    CHECK(softmax[1].tid == 1156);  // gdb lists the newest thread first
    CHECK(softmax[1].backtrace[0] == "clock_nanosleep");
    CHECK(softmax[1].backtrace[3] ==
          "std::thread::_State_impl<std::thread::_Invoker<std::tuple<sdpa::ProgressReporter::ProgressReporter(int)::{lambda()#1}> > >::_M_run()");
    // gdb without threads names the process; a frame with a source position loses it.
    const auto plain = parse_debugger_threads(
        "Thread 1 (process 4321 \"sleep\"):\n#0  0x00007f in __GI___clock_nanosleep (clockid=0) at nanosleep.c:78\n"
        "#1  main () at sleep.c:12\n");
    REQUIRE(plain.size() == 1);
    CHECK(plain[0].tid == 4321);
    CHECK(plain[0].comm == "sleep");
    CHECK(plain[0].backtrace == std::vector<std::string>{"__GI___clock_nanosleep", "main"});
  }

  TEST_CASE("threads.txt: states, wchans and kernel stacks; the summary and its evidence from a capture") {
    const auto states = parse_thread_states(fixture("softmax_nofork", "threads.txt"));
    REQUIRE(states.size() == 5);
    CHECK(states[0].tid == 1148);
    CHECK(states[0].state == 'R');
    CHECK(states[0].wchan == "0");
    CHECK(states[0].kernel_stack.empty());
    CHECK(states[1].tid == 1150);
    CHECK(states[1].state == 'S');
    CHECK(states[1].wchan == "poll_schedule_timeout.constprop.0");
    CHECK(states[1].kernel_stack.front() == "poll_schedule_timeout.constprop.0");
    CHECK(states[1].kernel_stack.back() == "entry_SYSCALL_64_after_hwframe");
    CHECK(states[2].comm == "cuda00001c00008");

    CollectorRun smi;
    smi.name = "nvidia_smi";
    smi.state = CollectorState::ok;
    const SnapshotSummary s = summarize_snapshot(kFixtures + "/softmax_nofork", 1148, {smi});
    CHECK(s.verdict == HostVerdict::waiting_in_cuda_call);
    CHECK(s.thread_count == 6);  // five in /proc, and the debugger's own helper thread it injected
    CHECK(s.blocked_threads.empty());
    REQUIRE(s.main_thread);
    CHECK(s.main_thread->state == 'R');
    CHECK(s.nvidia_smi == "answered");
    CHECK(s.driver_lines.size() == 7);
    const auto evidence = snapshot_evidence(s);
    INFO([&] { std::string all; for (const auto& e : evidence) all += e + "\n"; return all; }());
    CHECK(evidence.at(0) == "kernel spin_kernel resident on SM 124 (grid (1,1,1), block (1,1,1), Active); warp 1 on SM 124 "
                            "at PC 0x00007f11037b87f0, lane active");
    CHECK(evidence.at(1) == "main thread (tid 1148) in cuStreamSynchronize (called as cudaStreamSynchronize from "
                            "sdpa::MathSdpa::synchronize_all_streams), state R");
    // The driver's out-of-memory line outranks its start-up lines.
    CHECK(evidence.at(2).find("kernel log: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]") == 0);
    CHECK(evidence.back() == "kernel log: 7 driver lines in all since the run started");

    const SnapshotSummary qk = summarize_snapshot(kFixtures + "/qk_gemm_fork", 1423, {});
    CHECK(contains(snapshot_evidence(qk),
                   "main thread (tid 1423) in cuKernelGetFunction (called as cublasSgemmStridedBatched from sdpa::run_gemm), state R"));
    CHECK(qk.nvidia_smi.empty());
  }

  TEST_CASE("a thread in D state: the verdict is blocked in the kernel, where, with its kernel stack (made-up UVM case)") {
    Scratch scratch;
    std::ofstream(scratch.path("threads.txt")) << "== tid 500 comm=repro wchan=poll_schedule_timeout\nState:\tS (sleeping)\n"
                                                  "[<0>] poll_schedule_timeout+0x3e/0xa0\n"
                                                  "== tid 501 comm=cuda-EvtHandlr wchan=uvm_spin_wait\nState:\tD (disk sleep)\n"
                                                  "[<0>] uvm_spin_wait+0x10/0x40\n[<0>] uvm_va_block_make_resident+0x1c/0x300\n"
                                                  "[<0>] uvm_ats_service_faults+0x99/0x200\n[<0>] do_syscall_64+0x71/0x280\n"
                                                  "== tid 499 comm=repro wchan=uvm_va_space_down_read\nState:\tD (disk sleep)\n"
                                                  "[<0>] uvm_va_space_down_read+0x22/0x80\n[<0>] uvm_api_migrate+0x1/0x2\n";
    std::ofstream(scratch.path("debugger.txt")) << "No CUDA kernels.\n";
    const SnapshotSummary s = summarize_snapshot(scratch.dir, 499, {});
    CHECK(s.verdict == HostVerdict::blocked_in_kernel);
    REQUIRE(s.blocked_threads.size() == 2);
    CHECK(s.blocked_threads[0].tid == 499);  // the main thread first
    CHECK(s.verdict_detail == "thread 499 (repro) in D state in uvm_va_space_down_read");
    CHECK(s.debugger_saw_no_kernel);
    const auto evidence = snapshot_evidence(s);
    CHECK(contains(evidence, "no kernel resident on the GPU (cuda-gdb listed none)"));
    CHECK(contains(evidence, "thread 501 (cuda-EvtHandlr) in D state in uvm_spin_wait (kernel stack: uvm_spin_wait < "
                             "uvm_va_block_make_resident < uvm_ats_service_faults)"));
    // Without a backtrace a running main thread may be inside a CUDA call or not: it says so.
    SnapshotSummary running;
    HostThread main;
    main.tid = 7;
    main.state = 'R';
    judge_host_threads(7, {main}, {}, running);
    CHECK(running.verdict == HostVerdict::spinning_in_user_space);
    CHECK(running.verdict_detail.find("no backtrace") != std::string::npos);
  }

  TEST_CASE("a driver line logged before the snapshot and again while it ran says both") {
    // As on the H100: the same NVRM line logged once before the snapshot and again while the
    // debugger attached; the evidence keeps the message once and must not hide the second time.
    Scratch scratch;
    const std::string oom = "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)";
    std::ofstream(scratch.path("kernel-log.txt")) << "[  125.109202] " << oom << "\n";
    std::ofstream(scratch.path("kernel-log-after.txt")) << "[  125.109202] " << oom << "\n[  129.536312] " << oom << "\n";
    const SnapshotSummary s = summarize_snapshot(scratch.dir, 1, {});
    CHECK(s.driver_lines.size() == 2);
    CHECK(s.driver_lines_during == std::vector<std::string>{"[  129.536312] " + oom});
    const auto evidence = snapshot_evidence(s);
    REQUIRE(evidence.size() == 1);
    CHECK(evidence[0] == "kernel log: " + oom + " (logged before the snapshot and again while it ran)");
  }

  TEST_CASE("the kernel log's records: parsed; the run's found by sequence number, else by time") {
    const auto r = parse_kernel_log_record("3,1234,125109202,-;NVRM: Xid 31\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:06.0\n");
    REQUIRE(r);
    CHECK(r->sequence == 1234);
    CHECK(r->microseconds == 125109202);
    CHECK(r->message == "NVRM: Xid 31");
    CHECK_FALSE(parse_kernel_log_record("no header here"));
    CHECK_FALSE(parse_kernel_log_record("3,1234;too few fields"));
    // A record of an earlier process, 0.85 s before this run started: inside the clocks' slack,
    // so only the sequence number keeps it out.
    CollectorContext c;
    c.run_start_us = 125962000;
    const KernelLogRecord earlier{1234, 125109202, "NVRM: earlier"}, later{1240, 129536312, "NVRM: later"};
    CHECK(kernel_log_record_in_run(earlier, c));  // by time: unknown sequence
    CHECK(kernel_log_record_in_run(later, c));
    CHECK_FALSE(kernel_log_record_in_run(KernelLogRecord{1, 100000000, "long before"}, c));
    c.run_start_kernel_log_seq = 1234;
    CHECK_FALSE(kernel_log_record_in_run(earlier, c));
    CHECK(kernel_log_record_in_run(later, c));
    CHECK(kernel_log_record_in_run(KernelLogRecord{1235, 1, "clock far behind"}, c));
  }

  TEST_CASE("the real kernel log: the collector reads from the run's first record on") {
    const int64_t last = kernel_log_last_sequence();
    if (last < 5) {
      MESSAGE("/dev/kmsg cannot be read here (or has under 6 records): the real kernel log was not read");
      return;
    }
    Scratch scratch;
    CollectorContext c;
    c.dir = scratch.dir;
    auto lines_since = [&](int64_t mark) {
      c.run_start_kernel_log_seq = mark;
      REQUIRE(collect_kernel_log(c, "kernel_log", "kernel-log.txt", 10).state == CollectorState::ok);
      const std::string text = test_util::file_text(scratch.path("kernel-log.txt"));
      return static_cast<int64_t>(std::count(text.begin(), text.end(), '\n'));
    };
    const int64_t last_five = lines_since(last - 5);
    const int64_t after_last = lines_since(last);
    CHECK(last_five >= 5);                    // the five newest records at least, and what came since
    CHECK(after_last <= last_five - 5);       // none of those five
    CHECK(lines_since(0) > last_five);        // the whole ring: older records too
  }

  TEST_CASE("the driver's log lines; those logged while the snapshot ran are told apart") {
    Scratch scratch;
    const std::string before = fixture("softmax_nofork", "kernel-log.txt");
    const std::string xid = "[Tue Nov 24 08:51:10 2026] NVRM: Xid (PCI:0000:00:06): 31, pid=1148, name=repro, Ch 00000008";
    std::ofstream(scratch.path("kernel-log.txt")) << before;
    std::ofstream(scratch.path("kernel-log-after.txt")) << before << xid << "\n"
                                                         << "[Tue Nov 24 08:51:11 2026] EXT4-fs: unrelated\n";
    const SnapshotSummary s = summarize_snapshot(scratch.dir, 1, {});
    CHECK(s.driver_lines.size() == 8);
    CHECK(s.driver_lines_during == std::vector<std::string>{xid});
    const auto evidence = snapshot_evidence(s);
    CHECK(evidence.at(0) == "kernel log: NVRM: Xid (PCI:0000:00:06): 31, pid=1148, name=repro, Ch 00000008 (logged while "
                            "the snapshot ran)");
    CHECK(parse_driver_lines("hung_task: INFO: task repro:77 blocked for more than 120 seconds.\nplain line\n").size() == 1);
  }

  TEST_CASE("the parsers skip what they do not recognise") {
    for (const std::string& garbage : std::vector<std::string>{"", "\n\n", "Thread\n#\n#0\n", "Kernel Parent Dev Grid Status\n* x y\n",
                                      "Wp Active Lanes Mask\nDevice 0 SM\n* 1 2\n", "[Switching focus to CUDA kernel x\n",
                                      "== tid \nState:\n[<0>]\n", std::string(1, '\0') + "\xff\xfe"}) {
      CHECK(parse_debugger_kernels(garbage).empty());
      CHECK_NOTHROW(parse_debugger_threads(garbage));
      CHECK_NOTHROW(parse_thread_states(garbage));
      CHECK(parse_driver_lines(garbage).empty());
    }
  }

  TEST_CASE("snapshot.json reads back as it was written") {
    HangSnapshot s;
    s.dir = "out/run.snapshot";
    s.pid = 1148;
    s.hang = "stage softmax did not finish within 1.5 s";
    s.seconds = 4.25;
    s.budget_s = 60;
    CollectorRun c;
    c.name = "debugger";
    c.state = CollectorState::timed_out;
    c.reason = "did not answer within 30.0 s";
    c.seconds = 30.01;
    c.command = {"/usr/local/cuda/bin/cuda-gdb", "-p", "1148"};
    c.files = {"debugger.txt"};
    s.collectors = {c};
    s.summary = summarize_snapshot(kFixtures + "/softmax_nofork", 1148, {});
    const HangSnapshot back = snapshot_from_json(snapshot_to_json(s));
    CHECK(back.dir == s.dir);
    CHECK(back.pid == s.pid);
    CHECK(back.hang == s.hang);
    CHECK(back.seconds == s.seconds);
    REQUIRE(back.collectors.size() == 1);
    CHECK(back.collectors[0].state == CollectorState::timed_out);
    CHECK(back.collectors[0].reason == c.reason);
    CHECK(back.collectors[0].command == c.command);
    CHECK(snapshot_evidence(back.summary) == snapshot_evidence(s.summary));
    CHECK(summary_to_json(back.summary) == summary_to_json(s.summary));
    CHECK(parse_collector_state("skipped") == CollectorState::skipped);
    CHECK_THROWS_AS(parse_collector_state("fine"), InputError);
  }

  TEST_CASE("a cuda-gdb that never answers is stopped at the budget; the snapshot stays within it") {
    Scratch scratch;
    scratch.tool("cuda-gdb", kStoppingDebugger);
    Sleeper target;
    SnapshotRequest r;
    r.pid = target.pid;
    r.dir = scratch.path("snap");
    r.budget_s = 3;
    r.tool_dirs = {scratch.path("tools")};
    const double start = now_s();
    const HangSnapshot s = take_hang_snapshot(r);
    const double took = now_s() - start;
    CHECK(took <= r.budget_s + 0.5);
    CHECK(s.seconds <= r.budget_s + 0.5);
    const CollectorRun& debugger = collector(s, "debugger");
    CHECK(debugger.state == CollectorState::timed_out);
    CHECK(debugger.reason.find("did not answer within") == 0);
    CHECK(debugger.command.at(0) == scratch.path("tools/cuda-gdb"));
    CHECK(debugger.seconds <= r.budget_s);
    // What comes after it had no time left, and says so.
    CHECK(collector(s, "nvidia_smi").state == CollectorState::skipped);
    CHECK(collector(s, "nvidia_smi").reason.find("no time left in the snapshot's budget of 3 s") == 0);
    CHECK(collector(s, "threads").state == CollectorState::ok);
    CHECK(target.state() == 'S');  // still there, and not left stopped by the killed debugger
    const auto j = nlohmann::json::parse(test_util::file_text(r.dir + "/snapshot.json"));
    CHECK(j["collectors"].size() == s.collectors.size());
    CHECK(j["pid"] == target.pid);
  }

  TEST_CASE("a failing nvidia-smi, a missing tool, missing driver files: each recorded with why; nothing written elsewhere") {
    Scratch scratch;
    // It also tries to leave a file in its working folder: that must be the snapshot folder.
    scratch.tool("nvidia-smi", "echo left > stray.txt\necho \"NVIDIA-SMI has failed because it couldn't communicate with "
                               "the NVIDIA driver.\"\nexit 9");
    fs::create_directories(scratch.path("cwd"));
    const fs::path cwd = fs::current_path();
    fs::current_path(scratch.path("cwd"));
    Sleeper target;
    SnapshotRequest r;
    r.pid = target.pid;
    r.dir = scratch.path("snap");
    r.budget_s = 20;
    r.nvidia_bug_report = true;
    r.tool_dirs = {scratch.path("tools")};
    r.run_start_us = monotonic_us();
    std::vector<std::string> reported;
    r.on_collector = [&](const CollectorRun& c) { reported.push_back(c.name); };
    const HangSnapshot s = take_hang_snapshot(r);
    fs::current_path(cwd);
    CHECK(s.seconds < 5);
    const CollectorRun& smi = collector(s, "nvidia_smi");
    CHECK(smi.state == CollectorState::failed);
    CHECK(smi.reason == "exit 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.");
    CHECK(collector(s, "nvidia_smi_apps").state == CollectorState::failed);
    CHECK(s.summary.nvidia_smi.find("failed: exit 9") == 0);
    CHECK(collector(s, "debugger").state == CollectorState::skipped);
    CHECK(collector(s, "debugger").reason == "neither cuda-gdb nor gdb found in " + scratch.path("tools"));
    CHECK(collector(s, "nvidia_bug_report").state == CollectorState::skipped);
    CHECK(collector(s, "nvidia_bug_report").reason.find("nvidia-bug-report.sh not found") == 0);
    for (const char* name : {"gpu_information", "uvm_parameters"}) {
      const CollectorRun& c = collector(s, name);
      if (c.state != CollectorState::ok) CHECK(c.state == CollectorState::skipped);  // a machine with the driver reads them
    }
    const CollectorRun& threads = collector(s, "threads");
    CHECK(threads.state == CollectorState::ok);
    CHECK(threads.files == std::vector<std::string>{"threads.txt", "status.txt", "environment.txt"});
    REQUIRE(s.summary.main_thread);
    CHECK(s.summary.main_thread->tid == target.pid);
    CHECK(s.summary.main_thread->state == 'S');
    CHECK(s.summary.verdict == HostVerdict::sleeping);
    std::vector<std::string> names;
    for (const auto& c : s.collectors) names.push_back(c.name);
    CHECK(reported == names);
    CHECK(names == std::vector<std::string>{"kernel_log", "threads", "debugger", "nvidia_smi", "nvidia_smi_apps",
                                            "gpu_information", "uvm_parameters", "kernel_log_after", "nvidia_bug_report"});
    // Every file in the snapshot folder; nothing in the working folder or beside the snapshot.
    CHECK(scratch.entries("cwd").empty());
    CHECK(scratch.entries() == std::set<std::string>{"tools", "cwd", "snap"});
    const auto files = scratch.entries("snap");
    CHECK(files.count("stray.txt") == 1);
    CHECK(files.count("snapshot.json") == 1);
    CHECK(files.count("nvidia-smi.txt") == 1);
    // A second snapshot into the same folder goes beside the first.
    const HangSnapshot again = take_hang_snapshot(r);
    CHECK(again.dir == r.dir + "-2");
  }

  TEST_CASE("a snapshot folder that cannot be made: every collector says why, nothing runs, nothing is written") {
    Scratch scratch;
    std::ofstream(scratch.path("a_file")) << "not a folder\n";
    Sleeper target;
    SnapshotRequest r;
    r.pid = target.pid;
    r.dir = scratch.path("a_file") + "/snap";
    r.budget_s = 20;
    r.tool_dirs = {scratch.path("tools")};
    const HangSnapshot s = take_hang_snapshot(r);
    CHECK(s.seconds < 2);
    REQUIRE(s.collectors.size() == 8);  // no nvidia_bug_report without the request
    for (const CollectorRun& c : s.collectors) {
      CAPTURE(c.name);
      CHECK(c.state == CollectorState::skipped);
      CHECK(c.reason.rfind("cannot create the snapshot folder " + r.dir + ": ", 0) == 0);
      CHECK(c.files.empty());
    }
    CHECK(scratch.entries() == std::set<std::string>{"a_file"});
  }

  TEST_CASE("a real debugger (gdb, where installed) attaches, reads every thread and detaches; the process runs on") {
    if (access("/usr/bin/gdb", X_OK) != 0) {
      MESSAGE("no /usr/bin/gdb here: the attach is checked on the GPU machine with cuda-gdb");
      return;
    }
    Scratch scratch;
    Sleeper target;
    SnapshotRequest r;
    r.pid = target.pid;
    r.dir = scratch.path("snap");
    r.budget_s = 40;
    r.tool_dirs = {"/usr/bin"};
    const HangSnapshot s = take_hang_snapshot(r);
    const CollectorRun& debugger = collector(s, "debugger");
    INFO(test_util::file_text(r.dir + "/debugger.txt"));
    CHECK(debugger.state == CollectorState::ok);
    CHECK(debugger.command.at(0) == "/usr/bin/gdb");
    REQUIRE(s.summary.main_thread);
    CHECK(s.summary.main_thread->tid == target.pid);
    CHECK_FALSE(s.summary.main_thread->backtrace.empty());
    CHECK(test_util::file_text(r.dir + "/debugger.txt").find("detached") != std::string::npos);
    CHECK(target.state() == 'S');
  }

  TEST_CASE("the supervisor takes the snapshot before the kill; the hang verdict and the exit code are those of a kill") {
    Scratch scratch;
    scratch.tool("cuda-gdb", "exec /bin/sleep 100000");
    const PathOverride path(scratch.path("tools"));
    for (const OnHang mode : {OnHang::snapshot, OnHang::kill}) {
      CAPTURE(on_hang_name(mode));
      RunOptions run;
      run.stage_timeout_s = 0.3;
      run.hang.on_hang = mode;
      run.hang.snapshot_timeout_s = 2;
      run.hang.snapshot_dir = scratch.path(std::string("snap-") + on_hang_name(mode));
      SupervisedCommand<TestResult> command;
      command.name = "test";
      command.run = &run;
      command.configuration = "a child that hangs in softmax";
      command.work = [](int fd) {
        hang_in_softmax(fd);
        return TestResult{};
      };
      SupervisedOutcome seen;
      command.hang_result = [&](const SupervisedOutcome& o) {
        seen = o;
        return TestResult{"hang", "stage " + o.stage + " did not finish", kExitHang};
      };
      command.to_text = [](const TestResult&) { return std::string(); };
      command.to_json = [](const TestResult&) { return nlohmann::json::object(); };
      const double start = now_s();
      const int code = run_supervised_command(command);
      const double took = now_s() - start;
      CHECK(code == kExitHang);
      CHECK(seen.kind == SupervisedOutcome::hang);
      CHECK(seen.stage == "softmax");
      CHECK_FALSE(seen.survived_kill);
      CHECK(seen.on_hang == mode);
      const std::string report = hang_report_text(seen, "x", run.stage_timeout_s, "");
      if (mode == OnHang::snapshot) {
        REQUIRE(seen.snapshot);
        CHECK(seen.snapshot->dir == run.hang.snapshot_dir);
        CHECK(took <= 0.3 + 2 + 1);
        CHECK(report.find("repro: HANG: stage softmax did not finish within 0.3 s") == 0);
        CHECK(report.find("; snapshot in " + run.hang.snapshot_dir + "\n") != std::string::npos);
        CHECK(report.find("  hang snapshot: " + run.hang.snapshot_dir + "/snapshot.json") != std::string::npos);
        CHECK(report.find("debugger timed_out") != std::string::npos);
        const auto j = hang_actions_json(seen);
        CHECK(j["snapshot"]["path"] == run.hang.snapshot_dir);
        CHECK(j["on_hang"] == "snapshot");
        CHECK(j["snapshot"]["summary"]["main_thread"]["state"] == "S");
        CHECK(fs::exists(run.hang.snapshot_dir + "/snapshot.json"));
      } else {
        CHECK_FALSE(seen.snapshot);
        CHECK(took <= 0.3 + 1);
        CHECK(report.find("snapshot") == std::string::npos);
        CHECK_FALSE(fs::exists(run.hang.snapshot_dir));
        CHECK(hang_actions_json(seen)["snapshot"].is_null());
      }
    }
  }

  TEST_CASE("a process that did not die after SIGKILL: its kernel stacks are read within a bound and reported") {
    Sleeper target;
    REQUIRE(target.wait_asleep());  // its state is read below: a condition, not a sleep
    const double start = now_s();
    const auto stacks = kernel_stacks_of(target.pid, 2);
    CHECK(now_s() - start < 2.5);
    // One line per thread, the process's own first (under qemu-user the sleeper has the
    // emulator's thread too).
    const auto tasks = std::distance(fs::directory_iterator("/proc/" + std::to_string(target.pid) + "/task"),
                                     fs::directory_iterator());
    REQUIRE(stacks.size() == static_cast<size_t>(tasks));
    std::string comm = test_util::file_text("/proc/" + std::to_string(target.pid) + "/comm");
    comm = comm.substr(0, comm.find('\n'));
    const std::string prefix = "tid " + std::to_string(target.pid) + " (" + comm + ") ";
    CHECK(stacks[0].rfind(prefix, 0) == 0);
    CHECK(stacks[0].find(prefix + "S:") == 0);
    for (const std::string& line : stacks) CHECK(line.rfind("tid ", 0) == 0);
    if (geteuid() == 0) CHECK(stacks[0].find("(no kernel stack") == std::string::npos);  // root reads them
    CHECK(kernel_stacks_of(999999999, 2).empty());
    SupervisedOutcome o;
    o.kind = SupervisedOutcome::hang;
    o.stage = "softmax";
    o.survived_kill = true;
    o.kernel_stacks = stacks;
    const std::string report = hang_report_text(o, "x", 1, "");
    CHECK(report.find("the hung process did not die after SIGKILL: it is stuck in the kernel; the supervisor exits "
                      "without waiting for it") != std::string::npos);
    CHECK(report.find("    " + stacks[0] + "\n") != std::string::npos);
    const auto j = hang_actions_json(o);
    CHECK(j["survived_kill"] == true);
    CHECK(j["kernel_stacks"] == nlohmann::json(stacks));
  }

  TEST_CASE("--on-hang keep: the hung child stays alive and inspectable for the keep time, then is killed") {
    Scratch scratch;
    SupervisorOptions o;
    o.stage_timeout_s = 0.3;
    o.hang.on_hang = OnHang::keep;
    o.hang.keep_timeout_s = 1.0;
    const std::string pid_file = scratch.path("pid");
    bool alive_while_kept = false;
    std::thread watcher([&] {
      // Halfway through the keep time: the child must still be there, and not a zombie.
      const double until = now_s() + 5;
      while (test_util::file_text(pid_file).empty() && now_s() < until) usleep(10000);
      if (test_util::file_text(pid_file).empty()) return;
      usleep(800000);
      const pid_t pid = std::stoi(test_util::file_text(pid_file));
      const std::string stat = test_util::file_text("/proc/" + std::to_string(pid) + "/stat");
      alive_while_kept = !stat.empty() && stat[stat.rfind(')') + 2] == 'S';
    });
    const double start = now_s();
    const SupervisedOutcome out = supervise(
        [&](int fd) {
          std::ofstream(pid_file) << getpid();
          return hang_in_softmax(fd);
        },
        o);
    const double took = now_s() - start;
    watcher.join();
    CHECK(alive_while_kept);
    CHECK(out.kind == SupervisedOutcome::hang);
    CHECK(out.on_hang == OnHang::keep);
    CHECK(out.kept_s >= 1.0);
    CHECK(out.kept_s < 1.5);
    CHECK(took < 0.3 + 1.0 + 1.0);
    const pid_t pid = std::stoi(test_util::file_text(pid_file));
    CHECK(kill(pid, 0) != 0);  // gone after the keep time
    CHECK(hang_report_text(out, "x", 0.3, "").find("kept for inspection (--on-hang keep) for 1.") != std::string::npos);
  }

  TEST_CASE("--log-file: each record is on disk as it arrives; after the supervisor is killed the last names the stage") {
    Scratch scratch;
    const std::string log = scratch.path("run.log");
    std::fflush(nullptr);
    const pid_t supervisor = fork();
    if (supervisor == 0) {
      SupervisorOptions o;
      o.stage_timeout_s = 60;
      o.hang.log_file = log;
      o.log_header = "repro --inject hang:softmax";
      supervise(
          [](int fd) {
            std::fprintf(stderr, "[MATH_SOFTMAX_START] Input shape=[2, 8, 128, 128]\n");
            return hang_in_softmax(fd);
          },
          o);
      _exit(0);
    }
    // Wait for the softmax record and the child's line before it (two pipes: either may come
    // first), then kill the supervisor as a frozen machine would stop it. Not "softmax" alone: the
    // header's `hang:softmax` holds it from the first record on.
    const double until = now_s() + 30;
    auto both_on_disk = [&] {
      const std::string text = test_util::file_text(log);
      return text.find("\trecord\tB\tsoftmax") != std::string::npos &&
             text.find("\tlog\t[MATH_SOFTMAX_START]") != std::string::npos;
    };
    while (!both_on_disk() && now_s() < until) usleep(10000);
    kill(supervisor, SIGKILL);
    int status;
    waitpid(supervisor, &status, 0);
    std::vector<std::vector<std::string>> records;
    std::stringstream lines(test_util::file_text(log));
    for (std::string line; std::getline(lines, line);) {
      std::vector<std::string> fields;
      std::stringstream f(line);
      for (std::string field; std::getline(f, field, '\t');) fields.push_back(field);
      REQUIRE(fields.size() >= 3);
      CHECK(std::stod(fields[0]) >= 0);
      records.push_back(fields);
    }
    REQUIRE(records.size() >= 5);
    CHECK(records[0][1] == "start");
    CHECK(records[0][2].find("repro --inject hang:softmax") == 0);
    CHECK(records[1][1] == "start");
    CHECK(records[1][2].find("the GPU child is pid") == 0);
    const auto last_record = std::find_if(records.rbegin(), records.rend(), [](const auto& r) { return r[1] == "record"; });
    REQUIRE(last_record != records.rend());
    CHECK((*last_record)[2] == "B");
    CHECK((*last_record)[3] == "softmax");
    CHECK(std::any_of(records.begin(), records.end(), [](const auto& r) {
      return r[1] == "log" && r[2] == "[MATH_SOFTMAX_START] Input shape=[2, 8, 128, 128]";
    }));
    CHECK(std::none_of(records.begin(), records.end(), [](const auto& r) { return r[1] == "end"; }));
  }

  TEST_CASE("--no-fork: the watchdog thread's snapshot is taken by `repro hang-snapshot`, then the process exits 3") {
    Scratch scratch;
    // It stops the whole process, the watchdog thread too: only a snapshot process of its own
    // can end it and let the process go on.
    scratch.tool("cuda-gdb", kStoppingDebugger);
    const bool real_gdb = access("/usr/bin/gdb", X_OK) == 0;
    // With gdb: a debugger really attaches to the process whose watchdog thread waits for it.
    for (const std::string& tools : std::vector<std::string>{scratch.path("tools"), real_gdb ? "/usr/bin" : ""}) {
      if (tools.empty()) continue;
      CAPTURE(tools);
      const std::string snap = scratch.path("snap-" + std::to_string(tools.size())), marker = scratch.path("marker");
      const double budget = tools == "/usr/bin" ? 20 : 3;  // gdb reads the test binary's symbols
      std::fflush(nullptr);
      const pid_t run = fork();
      if (run == 0) {
        SupervisorOptions o;
        o.stage_timeout_s = 0.3;
        o.hang.on_hang = OnHang::snapshot;
        o.hang.snapshot_timeout_s = budget;
        o.hang.log_file = scratch.path("no-fork.log");
        o.snapshot_dir = snap;
        o.snapshot_program = SDPA_REPRO_BINARY;
        o.tool_dirs = {tools};
        const int fd = start_in_process_watchdog(o, [&](const SupervisedOutcome& out) {
          std::ofstream(marker) << out.stage << " " << (out.snapshot ? out.snapshot->dir : "none") << " "
                                << (out.snapshot ? out.snapshot->collectors.size() : 0);
        });
        hang_in_softmax(fd);
      }
      const double start = now_s();
      int status = 0;
      while (waitpid(run, &status, WNOHANG) != run && now_s() - start < budget + 10) usleep(10000);
      const double took = now_s() - start;
      if (took >= budget + 10) kill(run, SIGKILL), waitpid(run, &status, 0);
      CHECK(took < 0.3 + budget + 2);
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == kExitHang);
      CHECK(test_util::file_text(marker) == "softmax " + snap + " 8");
      const HangSnapshot s = snapshot_from_json(nlohmann::json::parse(test_util::file_text(snap + "/snapshot.json")));
      CHECK(s.pid == run);
      CHECK(collector(s, "threads").state == CollectorState::ok);
      CHECK(s.summary.thread_count >= 2);  // the run's thread and its watchdog thread
      if (tools == "/usr/bin") {
        CHECK(collector(s, "debugger").state == CollectorState::ok);
        REQUIRE(s.summary.main_thread);
        CHECK_FALSE(s.summary.main_thread->backtrace.empty());
      } else {
        CHECK(collector(s, "debugger").state == CollectorState::timed_out);
      }
      const std::string log = test_util::file_text(scratch.path("no-fork.log"));
      CHECK(log.find("\tsnapshot\tdebugger ") != std::string::npos);  // written by the snapshot process
      CHECK(log.find("\thang\tstage softmax did not finish within 0.3 s") != std::string::npos);
      test_util::remove_tree(scratch.path("no-fork.log"));
    }
  }

  TEST_CASE("repro hang-snapshot: bad options exit 2; a process that is gone leaves its collectors failed, not hung") {
    const auto bad = test_util::run_program({SDPA_REPRO_BINARY, "hang-snapshot", "--dir", "/tmp/x"});
    CHECK(bad.exit_code == 2);
    Scratch scratch;
    const auto gone = test_util::run_program({SDPA_REPRO_BINARY, "hang-snapshot", "--pid", "999999999", "--dir",
                                              scratch.path("snap"), "--budget", "5", "--tool-dir", scratch.path("tools")},
                                             {20, ""});
    CHECK(gone.exit_code == 0);
    CHECK(gone.wall_s < 5.5);
    const HangSnapshot s = snapshot_from_json(nlohmann::json::parse(test_util::file_text(scratch.path("snap/snapshot.json"))));
    CHECK(collector(s, "threads").state == CollectorState::failed);
    CHECK(collector(s, "threads").reason.find("cannot list /proc/999999999/task") == 0);
    CHECK(s.summary.verdict == HostVerdict::unknown);
    CHECK(gone.err.find("repro: snapshot: threads failed") != std::string::npos);
  }

  TEST_CASE("the options: --on-hang, --snapshot-timeout, --keep-timeout, --snapshot-dir, --log-file; help; bad values") {
    auto parse = [](std::vector<const char*> args) {
      args.insert(args.begin(), "repro");
      return parse_command_line(static_cast<int>(args.size()), args.data());
    };
    const ParseResult defaults = parse({});
    REQUIRE(defaults.run);
    CHECK(defaults.options.hang.on_hang == OnHang::snapshot);
    CHECK(defaults.options.hang.snapshot_timeout_s == 60);
    CHECK(defaults.options.hang.log_file.empty());
    const ParseResult keep = parse({"--on-hang", "keep", "--keep-timeout", "2.5", "--snapshot-timeout", "9", "--snapshot-dir",
                                    "s", "--log-file", "l.log", "--nvidia-bug-report"});
    REQUIRE(keep.run);
    CHECK(keep.options.hang.on_hang == OnHang::keep);
    CHECK(keep.options.hang.keep_timeout_s == 2.5);
    CHECK(keep.options.hang.snapshot_timeout_s == 9);
    CHECK(keep.options.hang.snapshot_dir == "s");
    CHECK(keep.options.hang.log_file == "l.log");
    CHECK(keep.options.hang.nvidia_bug_report);
    for (const auto& args : {std::vector<const char*>{"--on-hang", "maybe"}, {"--snapshot-timeout", "0"},
                             {"--keep-timeout", "-1"}, {"--on-hang"}}) {
      const ParseResult bad = parse(args);
      CHECK_FALSE(bad.run);
      CHECK(bad.exit_code == kExitUsage);
      CHECK(bad.message.find('\n') == std::string::npos);
      CHECK(bad.message.find(args[0]) != std::string::npos);
    }
    const ParseResult help = parse({"--help-all"});
    for (const char* option : {"--on-hang", "--snapshot-timeout", "--keep-timeout", "--snapshot-dir", "--log-file",
                               "--nvidia-bug-report"}) {
      CHECK_MESSAGE(help.message.find(option) != std::string::npos, option);
    }
    CHECK(default_snapshot_dir("out/run.json") == "out/run.snapshot");
    CHECK(default_snapshot_dir("run") == "run.snapshot");
    CHECK(default_snapshot_dir("a.b/run") == "a.b/run.snapshot");
    CHECK(default_snapshot_dir("").rfind("repro-hang-", 0) == 0);
    CHECK(default_snapshot_dir("").find("-" + std::to_string(getpid())) != std::string::npos);
  }
}
