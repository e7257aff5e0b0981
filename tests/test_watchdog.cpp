// test_watchdog.cpp: the supervisor against small test children that complete, hang in a named
// stage, ignore SIGTERM, crash, exit with an error, write garbage, or run long; the flight
// recorder, the classification, the hang report, and the stage log's format.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "math_sdpa/errors.h"
#include "math_sdpa/fault_spec.h"
#include "math_sdpa/stage_log.h"
#include "repro/run/outcome.h"
#include "repro/common/text.h"
#include "repro/run/stalls.h"
#include "repro/supervise/durable_log.h"
#include "repro/supervise/supervisor.h"
#include "repro/supervise/watchdog.h"
#include "scenarios/hang_classification.h"

using namespace sdpa;

namespace {

void send(int fd, char type, Stage s, const std::string& text = "") {
  const std::string r = progress_record(type, stage_name(s), monotonic_us(), text);
  (void)!write(fd, r.data(), r.size());
}

void sleep_forever() {
  while (true) pause();
}

SupervisorOptions deadline(double stage_s, double run_s = 0) {
  SupervisorOptions o;
  o.stage_timeout_s = stage_s;
  o.run_timeout_s = run_s;
  return o;
}

// Runs `child` under the supervisor and checks it returned within `limit_s`.
SupervisedOutcome supervise_within(const std::function<int(int)>& child, const SupervisorOptions& o, double limit_s) {
  const int64_t start = monotonic_us();
  // The children are forks of the test runner, which handles fatal signals itself; a real
  // repro child has the default dispositions, so the test children get them back.
  SupervisedOutcome out = supervise(
      [&child](int fd) {
        for (int sig : {SIGTERM, SIGSEGV, SIGABRT}) signal(sig, SIG_DFL);
        return child(fd);
      },
      o);
  const double took = (monotonic_us() - start) / 1e6;
  INFO("supervisor returned after ", took, " s");
  CHECK(took <= limit_s);
  return out;
}

}  // namespace

TEST_SUITE("watchdog") {
  TEST_CASE("a run's --log-file read back: the stage it was in when it stopped, its call, the calls done") {
    // As the supervisor writes it: its own lines, and the child's records as they came.
    const std::string stopped =
        "0.000100\tstart\trepro --scenario 2 (pid 10)\n"
        "0.005000\tstart\tthe GPU child is pid 11\n"
        "0.200000\trecord\tD\t{\"name\":\"GPU\"}\n"
        "0.300000\trecord\tL\t1,1,2\t300000\n"
        "0.300100\trecord\tB\tqk_gemm\t300100\tM=512 N=1536\n"
        "0.400000\trecord\tE\tqk_gemm\t400000\t\n"
        "0.400100\trecord\tI\t1\t400100\n"
        "0.500000\trecord\tL\t1,2,2\t500000\n"
        "0.500100\trecord\tB\tqk_gemm\t500100\tM=512 N=1536\n"
        "0.500200\trecord\tB\tsoftmax\t500200\trows=8192\n"
        "0.600000\trecord\tE\tqk_gemm\t600000\t\n"
        "0.600100\tnote\tnot a record: ignored\n"
        "0.6001";  // the machine stopped in the middle of a line
    const sdpa::LoggedProgress p = sdpa::progress_in_log(stopped);
    CHECK(p.open_stage == "softmax");  // qk_gemm of that call ended; softmax had not
    CHECK(p.position.layer == 2);
    CHECK(p.position.layers == 2);
    CHECK(p.calls_done == 1);
    CHECK(sdpa::progress_text(p) == "in layer 2 of 2, step 1, in stage softmax");
    // One layer: the L records number the calls. Between two stages; before any record.
    const std::string between = "0.1\trecord\tL\t4,1,1\t100\n0.2\trecord\tB\tsoftmax\t200\t\n"
                                "0.3\trecord\tE\tsoftmax\t300\t\n0.4\trecord\tI\t3\t400\n";
    CHECK(sdpa::progress_in_log(between).calls_done == 3);
    CHECK(sdpa::progress_text(sdpa::progress_in_log(between)) == "in call 4, between stages");
    CHECK(sdpa::progress_text(sdpa::progress_in_log("0.0\tstart\trepro\n")) == "before its first call");
    CHECK(sdpa::progress_text(sdpa::progress_in_log("0.1\trecord\tB\tupcast\t100\t\n")) == "in stage upcast");
  }

  TEST_CASE("a child that completes: its exit code, every stage closed") {
    const auto out = supervise_within(
        [](int fd) {
          for (Stage s : {Stage::entry_sync, Stage::qk_gemm, Stage::softmax, Stage::pv_gemm, Stage::stream_sync}) {
            send(fd, 'B', s, "detail");
            send(fd, 'E', s);
          }
          return 0;
        },
        deadline(1), 2);
    CHECK(out.kind == SupervisedOutcome::exited);
    CHECK(out.child_exit_code == 0);
    CHECK(out.stage.empty());
    REQUIRE(out.records.size() == 5);
    CHECK(out.records[1].stage == "qk_gemm");
    CHECK(out.records[1].end_us >= out.records[1].start_us);
  }

  TEST_CASE("a child that hangs in softmax: hang named, classified scenario 2, within deadline + 1 s") {
    const auto out = supervise_within(
        [](int fd) {
          send(fd, 'B', Stage::qk_gemm);
          send(fd, 'E', Stage::qk_gemm);
          send(fd, 'B', Stage::softmax, "rows=2048 cols=128");
          send(fd, 'B', Stage::pv_gemm);  // the host ran ahead; the GPU is stuck in softmax
          sleep_forever();
          return 0;  // not reached
        },
        deadline(0.5), 1.5);
    CHECK(out.kind == SupervisedOutcome::hang);
    CHECK(out.stage == "softmax");
    CHECK_FALSE(out.expiry.whole_run);
    CHECK(out.expiry.running_s >= 0.5);
    const std::string report = hang_report_text(out, "config", 0.5, "scenario 2 (the line the caller classified)");
    CHECK(report.find("HANG: stage softmax") != std::string::npos);
    CHECK(report.find("scenario 2") != std::string::npos);
    CHECK(report.find("RUNNING") != std::string::npos);
    CHECK(report.find("rows=2048 cols=128") != std::string::npos);
  }

  TEST_CASE("a child that ignores SIGTERM is killed, still within deadline + 1 s") {
    const auto out = supervise_within(
        [](int fd) {
          signal(SIGTERM, SIG_IGN);
          send(fd, 'B', Stage::entry_sync);
          sleep_forever();
          return 0;  // not reached
        },
        deadline(0.5), 1.5);
    CHECK(out.kind == SupervisedOutcome::hang);
    CHECK(out.stage == "entry_sync");
    CHECK(classify_hang(Stage::entry_sync, SdpaProblem{}, PathSettings{}).scenario() == 4);
  }

  TEST_CASE("a child that crashes: the signal and the stage it was in") {
    const auto out = supervise_within(
        [](int fd) {
          send(fd, 'B', Stage::pv_gemm);
          raise(SIGSEGV);
          return 0;
        },
        deadline(5), 2);
    CHECK(out.kind == SupervisedOutcome::crashed);
    CHECK(out.signal == SIGSEGV);
    CHECK(out.stage == "pv_gemm");
    CHECK(out.message.find("signal 11") != std::string::npos);
  }

  TEST_CASE("a child that fails with a CUDA error: its exit code passes through, stage still open") {
    const auto out = supervise_within(
        [](int fd) {
          send(fd, 'B', Stage::scale_k);
          std::fprintf(stderr, "CUDA error at x.cu:1 in stage scale_k: code=9(cudaErrorInvalidConfiguration)\n");
          return static_cast<int>(kExitCudaError);
        },
        deadline(5), 2);
    CHECK(out.kind == SupervisedOutcome::exited);
    CHECK(out.child_exit_code == kExitCudaError);
    CHECK(out.stage == "scale_k");
    REQUIRE_FALSE(out.log_tail.empty());
    CHECK(out.log_tail.back().find("cudaErrorInvalidConfiguration") != std::string::npos);
  }

  TEST_CASE("a child that writes garbage to the pipe is stopped and reported") {
    const auto out = supervise_within(
        [](int fd) {
          const char garbage[] = "\x01\xff\x7fnot a record\tat all\n";
          (void)!write(fd, garbage, sizeof garbage - 1);
          sleep_forever();
          return 0;  // not reached
        },
        deadline(5), 2);
    CHECK(out.kind == SupervisedOutcome::bad_output);
    CHECK(out.message.find("malformed progress record") != std::string::npos);
    CHECK(out.message.find('\n') == std::string::npos);
  }

  TEST_CASE("a long run of short stages is not a hang; the whole-run --timeout still applies") {
    auto busy = [](double seconds) {
      return [seconds](int fd) {
        const int64_t until = monotonic_us() + static_cast<int64_t>(seconds * 1e6);
        while (monotonic_us() < until) {
          send(fd, 'B', Stage::softmax);
          usleep(20000);
          send(fd, 'E', Stage::softmax);
        }
        return 0;
      };
    };
    const auto done = supervise_within(busy(1.5), deadline(0.3), 3);
    CHECK(done.kind == SupervisedOutcome::exited);
    CHECK(done.child_exit_code == 0);
    const auto timed_out = supervise_within(busy(60), deadline(0.3, 0.8), 2);
    CHECK(timed_out.kind == SupervisedOutcome::hang);
    CHECK(timed_out.expiry.whole_run);
  }

  TEST_CASE("the GPU child never outlives its supervisor: if the supervisor dies, the child is killed") {
    // This test process becomes the subreaper, so the orphaned child is reparented to it and
    // its end can be observed with waitpid.
    REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    int pid_pipe[2];
    REQUIRE(pipe(pid_pipe) == 0);
    std::fflush(nullptr);
    const pid_t supervisor = fork();
    if (supervisor == 0) {
      supervise(
          [&](int) {
            const pid_t self = getpid();
            (void)!write(pid_pipe[1], &self, sizeof self);
            sleep_forever();
            return 0;
          },
          deadline(3600));
      _exit(0);
    }
    pid_t child = 0;
    REQUIRE(read(pid_pipe[0], &child, sizeof child) == sizeof child);
    kill(supervisor, SIGKILL);  // the supervisor dies without a chance to clean up
    int status = 0;
    REQUIRE(waitpid(supervisor, &status, 0) == supervisor);
    const int64_t start = monotonic_us();
    pid_t reaped = 0;
    while ((reaped = waitpid(child, &status, WNOHANG)) == 0 && monotonic_us() - start < 2'000'000) usleep(2000);
    const bool died = reaped == child;
    if (!died) {  // a regression: clean up, so the survivor cannot hold the test run open
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
    }
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    close(pid_pipe[0]);
    close(pid_pipe[1]);
    REQUIRE(died);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    CHECK(monotonic_us() - start < 1'000'000);
  }

  TEST_CASE("HangMonitor: flight recorder keeps the last 64, the open stage is the earliest, bad records fail") {
    HangMonitor m(10, 0, 0);
    for (int i = 0; i < 100; ++i) {
      REQUIRE(m.consume("B\tsoftmax\t" + std::to_string(i) + "\tcall " + std::to_string(i), i));
      REQUIRE(m.consume("E\tsoftmax\t" + std::to_string(i) + "\t", i));
    }
    CHECK(m.flight_recorder().size() == kFlightRecorderSize);
    CHECK(m.flight_recorder().front().detail == "call 36");
    CHECK(m.consume("B\tqk_gemm\t1\t", 200));
    CHECK(m.consume("B\tstream_sync\t1\t", 300));
    CHECK(m.open_stage() == "qk_gemm");
    CHECK(m.check(200 + 9000000).expired == false);
    const Expiry e = m.check(200 + 10500000);
    CHECK(e.expired);
    CHECK(e.stage == "qk_gemm");
    CHECK(m.consume("I\t42\t5", 400));
    CHECK(m.calls_done() == 42);
    for (const char* bad : {"", "B", "B\tsoftmax", "B\tno_such_stage\t1\tx", "X\tsoftmax\t1\tx", "B\tsoftmax\t-1\tx",
                            "B\tsoftmax\t12a\tx", "I\tmany\t1", "B\tsoftmax\t1\tx\ty"}) {
      CAPTURE(bad);
      CHECK_FALSE(m.consume(bad, 500));
    }
  }

  TEST_CASE("HangMonitor: a deadline of N s allows exactly N s; one microsecond more is a hang (fake clock)") {
    // check() takes the time, so the boundary is tested exactly, for deadlines whose decimal
    // value is not a binary fraction too.
    for (const double stage_s : {0.3, 0.5, 10.0, 20.0}) {
      CAPTURE(stage_s);
      const int64_t start = 1'000'000, begin = start + 123'456, deadline_us = std::llround(stage_s * 1e6);
      HangMonitor m(stage_s, 0, start);
      REQUIRE(m.consume("B\tsoftmax\t1\trows=4", begin));
      CHECK_FALSE(m.check(begin + deadline_us - 1).expired);
      CHECK_FALSE(m.check(begin + deadline_us).expired);
      const Expiry late = m.check(begin + deadline_us + 1);
      CHECK(late.expired);
      CHECK_FALSE(late.whole_run);
      CHECK(late.stage == "softmax");
      CHECK(late.running_s == doctest::Approx(stage_s + 1e-6));
      REQUIRE(m.consume("E\tsoftmax\t2\t", begin + deadline_us));  // it ended: nothing to time out
      CHECK_FALSE(m.check(begin + 10 * deadline_us).expired);
    }
    for (const double run_s : {0.3, 2.0}) {
      CAPTURE(run_s);
      const int64_t start = 5'000'000, deadline_us = std::llround(run_s * 1e6);
      HangMonitor m(100, run_s, start);
      CHECK_FALSE(m.check(start + deadline_us).expired);
      const Expiry late = m.check(start + deadline_us + 1);
      CHECK(late.expired);
      CHECK(late.whole_run);
      CHECK(late.stage.empty());
      REQUIRE(m.consume("B\tqk_gemm\t1\t", start + 1000));
      CHECK_FALSE(m.check(start + deadline_us).expired);
      CHECK(m.check(start + deadline_us + 1).stage == "qk_gemm");
    }
  }

  TEST_CASE("stalls: a stage over the threshold that finished, judged per call; at the threshold it is none") {
    auto pass = [](Stage gpu, double gpu_ms, Stage host, double host_ms) {
      StageLongest p;
      p.gpu_stage = gpu, p.gpu_ms = gpu_ms, p.host_stage = host, p.host_ms = host_ms;
      return p;
    };
    // Exactly at the threshold is no stall; a microsecond over is one.
    const Stalls at = judge_stalls({pass(Stage::softmax, 1000.0, Stage::stream_sync, 1000.0)}, 1.0);
    CHECK_FALSE(at.any());
    CHECK(at.calls == 1);
    CHECK(at.summary().empty());
    const Stalls over = judge_stalls({pass(Stage::softmax, 1000.001, Stage::stream_sync, 1000.5)}, 1.0);
    REQUIRE(over.any());
    // The GPU stage is the stall, not the synchronisation that waited for it.
    CHECK(over.longest.stage == "softmax");
    CHECK(over.every_call());
    // A host stage over the threshold where no GPU stage is: an allocation, a synchronisation.
    const Stalls host = judge_stalls({pass(Stage::qk_gemm, 0.5, Stage::alloc_probs, 2500.0),
                                      pass(Stage::qk_gemm, 0.5, Stage::stream_sync, 0.7),
                                      pass(Stage::qk_gemm, 0.5, Stage::stream_sync, 0.7)},
                                     1.0);
    REQUIRE(host.records.size() == 1);
    CHECK(host.records[0].call == 1);
    CHECK(host.records[0].stage == "alloc_probs");
    CHECK(host.calls_stalled == 1);
    CHECK_FALSE(host.every_call());
    CHECK(host.summary() == "alloc_probs 2500.0 ms in call 1 (1 of 3 calls over 1.0 s, below the deadline)");
    // The longest of several, and the threshold as given.
    const Stalls two = judge_stalls({pass(Stage::softmax, 3000, Stage::stream_sync, 3001),
                                     pass(Stage::pv_gemm, 4500, Stage::stream_sync, 4501)},
                                    2.5);
    CHECK(two.every_call());
    CHECK(two.longest.call == 2);
    CHECK(two.longest.stage == "pv_gemm");
    CHECK(judge_stalls({pass(Stage::softmax, 3000, Stage::stream_sync, 3001)}, 3.5).calls_stalled == 0);
    // 0 turns the judgement off; no call is no stall either.
    CHECK_FALSE(judge_stalls({pass(Stage::softmax, 9e6, Stage::stream_sync, 9e6)}, 0).any());
    CHECK_FALSE(judge_stalls({}, 1.0).every_call());
    // Exit 9 is the stalled outcome's, both ways.
    CHECK(outcome_exit_code(Outcome::stalled) == kExitStalled);
    CHECK(outcome_of_exit_code(kExitStalled) == Outcome::stalled);
  }

  TEST_CASE("stalls: the harness's own stages are never judged, however long; every stage of the path is") {
    // A pass as the stage timer folds it: each run of a stage in turn (layers and chunks run one
    // several times).
    auto pass_of = [](const std::vector<std::pair<Stage, double>>& runs) {
      StageLongest p;
      for (const auto& [stage, ms] : runs) p.add(stage, ms);
      return p;
    };
    // Scenario 2's host access to the scores took 5 s, every stage of the path less than the 1 s
    // threshold: nothing stalled.
    CHECK_FALSE(judge_stalls({pass_of({{Stage::qk_gemm, 2.0},
                                       {Stage::scores_to_host, 5000.0},
                                       {Stage::softmax, 900.0},
                                       {Stage::stream_sync, 950.0}})},
                             1.0)
                    .any());
    // An allocation of the path over it beside it is the stall, not the harness's longer work.
    const Stalls alloc = judge_stalls({pass_of({{Stage::scores_to_host, 5000.0}, {Stage::alloc_probs, 1500.0}})}, 1.0);
    REQUIRE(alloc.any());
    CHECK(alloc.longest.stage == "alloc_probs");
    CHECK(alloc.longest.ms == 1500.0);
    // The stages the harness adds for its own conditions, by name (the host's access to the
    // scenario's pages, the weights' load before the first call), and only those: a run of 5 s
    // alone is a stall of any other stage.
    std::vector<std::string> own;
    for (int i = 0; i < kStageCount; ++i) {
      const Stage s = static_cast<Stage>(i);
      CAPTURE(stage_name(s));
      const Stalls alone = judge_stalls({pass_of({{s, 5000.0}})}, 1.0);
      if (!alone.any()) {
        own.push_back(stage_name(s));
        continue;
      }
      CHECK(alone.longest.stage == stage_name(s));
    }
    CHECK(own == std::vector<std::string>{"load_weights", "scores_to_host", "grads_to_host"});
    // The longest of a stage's several runs; a GPU stage apart from the host's.
    const StageLongest p = pass_of({{Stage::softmax, 1200.0}, {Stage::softmax, 1800.0}, {Stage::stream_sync, 1900.0},
                                    {Stage::softmax, 300.0}});
    CHECK(p.gpu_stage == Stage::softmax);
    CHECK(p.gpu_ms == 1800.0);
    CHECK(p.host_stage == Stage::stream_sync);
    CHECK(p.host_ms == 1900.0);
  }

  TEST_CASE("every stage has a classification: candidate scenarios, or none with the reason") {
    std::vector<std::string> without;
    for (int i = 0; i < kStageCount; ++i) {
      const Stage s = static_cast<Stage>(i);
      const HangClassification h = classify_hang(s, SdpaProblem{}, PathSettings{});
      CAPTURE(stage_name(s));
      const std::string first = h.candidates.empty() ? "unclassified" : h.none_fits() ? "none fits" : "scenario " + std::to_string(h.scenario());
      CHECK(h.summary().find(first) == 0);
      CHECK((h.scenario() == 0) == (h.candidates.empty() || h.none_fits()));
      if (h.candidates.empty()) {
        without.push_back(stage_name(s));
        CHECK(h.no_scenario_reason.find("none, because ") == 0);
        CHECK(h.summary().find(h.no_scenario_reason) != std::string::npos);
      } else {
        CHECK(h.no_scenario_reason.empty());
      }
    }
    // Only the elementwise kernels that read what the GPU itself wrote in the call fit no hypothesis,
    // and the weights' load where no scenario of the registry takes it.
    std::vector<std::string> elementwise = {"dropout", "cast_output", "dropout_backward", "grad_inputs"};
    if (scenarios_for_hung_stage(Stage::load_weights).empty()) elementwise.insert(elementwise.begin(), "load_weights");
    CHECK(without == elementwise);
    // The batched GEMMs all fit scenario 1 (fix 1 brackets each); the first kernels to touch the
    // host's pages and the final synchronisations fit scenario 4.
    for (Stage s : {Stage::pv_gemm, Stage::mask_add, Stage::dp_gemm, Stage::dv_gemm}) {
      CHECK(scenarios_for_hung_stage(s) == std::vector<int>{1});
    }
    for (Stage s : {Stage::upcast, Stage::scale_q, Stage::mask_prepare, Stage::grad_upcast, Stage::stream_sync,
                    Stage::backward_sync, Stage::entry_sync}) {
      CHECK(scenarios_for_hung_stage(s) == std::vector<int>{4});
    }
  }

  TEST_CASE("fault specs parse, and bad ones are one-line errors") {
    const FaultSpec hang = parse_fault_spec("hang:softmax");
    CHECK(hang.kind == FaultSpec::hang);
    CHECK(hang.stage == Stage::softmax);
    const FaultSpec slow = parse_fault_spec("slow:qk_gemm:250");
    CHECK(slow.kind == FaultSpec::slow);
    CHECK(slow.slow_ms == 250);
    CHECK(fault_spec_string(slow) == "slow:qk_gemm:250");
    for (const char* bad : {"", "hang", "hang:", "hang:nowhere", "boom:softmax", "slow:softmax", "slow:softmax:0",
                            "slow:softmax:-5", "slow:softmax:1e3", "slow:softmax:999999", "error:softmax:1"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(parse_fault_spec(bad), InputError);
    }
  }

  TEST_CASE("the stage log of a full call contains the expected pattern (docs/SCENARIOS.md), in order") {
    SdpaProblem p;
    p.mask = MaskKind::causal;
    char* buffer = nullptr;
    size_t size = 0;
    std::FILE* mem = open_memstream(&buffer, &size);
    {
      const PathSettings settings;
      StageLogger logger(p, settings, LogFormat::harness, mem);
      void* const stream = reinterpret_cast<void*>(uintptr_t{0x1234});
      for (int i = 0; i < kStageCount; ++i) {
        const Stage s = static_cast<Stage>(i);
        if (!stage_runs(s, p, settings)) continue;
        logger.stage_begin(s, s == Stage::qk_gemm ? "M=128 N=128 K=64" : s == Stage::pv_gemm ? "M=128 N=64 K=128" : "",
                           stream);
        logger.stage_end(s, "", stream);
      }
    }
    std::fclose(mem);
    const std::string log(buffer, size);
    std::free(buffer);
    // Section 3, "Expected Log Pattern (Normal Operation)", tag by tag.
    const char* pattern[] = {"[SDPA_ENTRY] Q shape=[2, 8, 128, 64] K=[2, 8, 128, 64] V=[2, 8, 128, 64] device=cuda:0 "
                             "dtype=bfloat16 is_causal=true",
                             "[CUDA_EVENT] sdpa_entry @ ",
                             "[SDPA_ENTRY] Post-sync complete",
                             "[BACKEND_SELECT] Chosen backend: MATH",
                             "[MATH_SDPA_START] About to compute QK^T",
                             "[CUDA_EVENT] math_qk_start @ ",
                             "[MATH_QK] Q strides=[65536, 8192, 64, 1] K strides=[65536, 8192, 64, 1] Q contiguous=true "
                             "K contiguous=true",
                             "[CUBLAS_GEMM_START] M=128 N=128 K=64",
                             "[CUBLAS_GEMM_DONE]",
                             "[MATH_QK_DONE] scores shape=[2, 8, 128, 128]",
                             "[MATH_MASK]",
                             "[MATH_MASK_DONE]",
                             "[MATH_SOFTMAX_START] Input shape=[2, 8, 128, 128]",
                             "[MATH_SOFTMAX_DONE] Output shape=[2, 8, 128, 128]",
                             "[MATH_FINAL_BMM_START]",
                             "[CUBLAS_GEMM_START] M=128 N=64 K=128",
                             "[CUBLAS_GEMM_DONE]",
                             "[MATH_FINAL_BMM_DONE] output shape=[2, 8, 128, 64]",
                             "[STREAM_SYNC] stream=0x1234 device=0",
                             "[STREAM_SYNC_DONE] result=success duration_ms=",
                             "[CUDA_EVENT] math_sdpa_complete @ "};
    size_t at = 0;
    for (const char* tag : pattern) {
      CAPTURE(tag);
      const size_t found = log.find(std::string("\n") + tag, at == 0 ? 0 : at - 1);
      const bool first_line = at == 0 && log.rfind(tag, 0) == 0;
      REQUIRE((first_line || found != std::string::npos));
      at = (first_line ? 0 : found + 1) + std::strlen(tag);
    }
    // Every line carries a monotonic timestamp.
    size_t lines = 0, stamped = 0;
    for (size_t pos = 0, nl; (nl = log.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      ++lines;
      stamped += log.substr(pos, nl - pos).find(" t_us=") != std::string::npos;
    }
    CHECK(lines > 20);
    CHECK(stamped == lines);
  }

  TEST_CASE("the durable log: one line per record, whatever the text holds; never past its limit") {
    char pattern[] = "/tmp/sdpa_durable_XXXXXX";
    const std::string dir = mkdtemp(pattern), path = dir + "/run.log";
    {
      DurableLog log(path, monotonic_us());
      log.record("log", "first\rsecond\nthird");  // a terminal would show "first" overwritten
    }
    const std::string text = read_file(path).value_or("");
    CHECK(text.find('\r') == std::string::npos);
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
    CHECK(text.find("\tlog\tfirst second third\n") != std::string::npos);
    // At the limit the file starts again rather than grow: no record takes it past.
    {
      DurableLog log(path, monotonic_us());
      const std::string chunk(3u << 20, 'x');
      bool restarted = false;
      size_t previous = 0;
      for (int i = 0; i < 30; ++i) {
        log.write("log", chunk);
        struct stat st {};
        REQUIRE(::stat(path.c_str(), &st) == 0);
        CHECK(static_cast<size_t>(st.st_size) <= kDurableLogLimit);
        restarted = restarted || static_cast<size_t>(st.st_size) < previous;
        previous = static_cast<size_t>(st.st_size);
      }
      CHECK(restarted);
    }
    CHECK(read_file(path).value_or("").find("\trestart\tthe log reached its limit") != std::string::npos);
    std::remove(path.c_str());
    ::rmdir(dir.c_str());
  }
}
