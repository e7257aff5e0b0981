// minimize_fake_child.cpp: a stand-in for `repro` in the minimizer's and triage's tests, passed as
// --repro-binary. Only the GPU is faked: the run options are parsed by the real parser, an
// injected fault is "hit" exactly when the real parser arms it (its @conditions hold in this
// run), so `--inject hang:softmax@S>=2048@alloc=managed` gives the minimizer a known answer, and
// --json gets the real writer's result (a sweep's cells read it).
//
//   a run                     a hang (exit 3, in the fault's stage) when its --inject hang is
//                             armed, a stall (9) for slow, a CUDA error (4) for error, else a
//                             pass; a waiver (6) as the real parser decides it; exit 2 on options
//                             the parser refuses
//   MINIMIZE_FAKE_EVERY=K     a fault is hit only on every K-th armed run (a hang that comes and goes)
//   MINIMIZE_FAKE_COUNTER=F   the run count, kept in F (needed by the two below and EVERY)
//   MINIMIZE_FAKE_KILL_AT=N   run N sends SIGKILL to its parent (a frozen machine, as minimize sees
//                             it), then waits to die with it
//   MINIMIZE_FAKE_INT_AT=N    run N sends SIGINT to its parent, then sleeps until it is killed
//   MINIMIZE_FAKE_LOG=F       each run appends its command line to F
//   MINIMIZE_FAKE_SLEEP_S=S   each run takes S seconds first (a step long enough to interrupt)
//   MINIMIZE_FAKE_STRAY=F     each run first forks a process that sleeps 10 minutes and does not die
//                             with its parent, as a GPU process stuck in the driver does not, and
//                             appends its pid to F (the test kills it)
//   `info --json`             a device block that names a fake GPU, exit 0 (exit 7, no GPU, when
//                             MINIMIZE_FAKE_NO_GPU is set)
//   --log-file F              a start line and a begun qk_gemm record appended to F as the run
//                             starts, as repro's stage log has them (a sweep's cell in flight leaves its log)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "math_sdpa/atomic_file.h"
#include "repro/cli/run_options.h"
#include "repro/run/run_json.h"
#include "repro/run/run_result.h"
#include "repro/run/stalls.h"

namespace {

int bump_counter() {
  const char* path = std::getenv("MINIMIZE_FAKE_COUNTER");
  if (!path) return 0;
  int n = 0;
  std::ifstream(path) >> n;
  std::ofstream(path) << ++n;
  return n;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "info") {
    if (std::getenv("MINIMIZE_FAKE_NO_GPU")) return 7;
    std::printf("{\"device\": {\"name\": \"Fake GPU\"}}\n");
    return 0;
  }
  if (const char* log = std::getenv("MINIMIZE_FAKE_LOG")) {
    std::ofstream out(log, std::ios::app);
    for (int i = 1; i < argc; ++i) out << (i > 1 ? " " : "") << argv[i];
    out << "\n";
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--log-file") {
      std::ofstream(argv[i + 1], std::ios::app) << "0.000\tstart\tminimize_fake_child\n0.001\trecord\tB\tqk_gemm\t1000\t\n";
    }
  }
  if (const char* strays = std::getenv("MINIMIZE_FAKE_STRAY")) {
    std::fflush(nullptr);
    const pid_t stray = fork();
    if (stray == 0) {
      // A fork has no parent-death signal: it outlives this run. Its streams let go of the parent's pipes.
      for (FILE* f : {stdout, stderr}) {
        if (!std::freopen("/dev/null", "w", f)) _exit(1);
      }
      sleep(600);
      _exit(0);
    }
    std::ofstream(strays, std::ios::app) << stray << "\n";
  }
  if (const int seconds = env_int("MINIMIZE_FAKE_SLEEP_S")) sleep(static_cast<unsigned>(seconds));
  const int run = bump_counter();
  if (run && run == env_int("MINIMIZE_FAKE_KILL_AT")) {
    kill(getppid(), SIGKILL);
    for (;;) pause();  // PR_SET_PDEATHSIG ends it with its parent
  }
  if (run && run == env_int("MINIMIZE_FAKE_INT_AT")) {
    kill(getppid(), SIGINT);
    for (;;) pause();  // until the parent kills the run it was waiting for
  }
  const sdpa::ParseResult parsed = sdpa::parse_command_line(argc, argv);
  if (!parsed.run) {
    std::fprintf(stderr, "%s\n", parsed.message.c_str());
    return parsed.exit_code;
  }
  const sdpa::RunOptions& o = parsed.options;
  sdpa::RunResult r;
  if (!o.waiver.empty()) {
    r = sdpa::waived_result(o, o.waiver);
  } else {
    r.options = o;
    r.settings = o.settings;
    const int every = env_int("MINIMIZE_FAKE_EVERY");
    const bool hit = o.inject.kind != sdpa::FaultSpec::none && o.inject_armed && (every <= 1 || run % every == 0);
    const std::string stage = sdpa::stage_name(o.inject.stage);
    if (hit && o.inject.kind == sdpa::FaultSpec::hang) {
      sdpa::SupervisedOutcome hang;
      hang.kind = sdpa::SupervisedOutcome::hang;
      hang.stage = stage;
      hang.expiry = {true, false, stage, o.stage_timeout_s};
      r = sdpa::watchdog_result(o, hang);
    } else if (hit && o.inject.kind == sdpa::FaultSpec::error) {
      r.fail(sdpa::Outcome::cuda_error, "CUDA error in stage " + stage + " (injected)");
      r.error_stage = stage;
    } else if (hit) {
      r.fail(sdpa::Outcome::stalled, "every call stalled: " + stage + " (injected)");
      sdpa::Stalls stalls;  // every call's longest stage the slowed one, as the real judge finds it
      stalls.threshold_s = 1;
      stalls.calls = stalls.calls_stalled = o.iters;
      stalls.longest = {1, stage, static_cast<double>(o.inject.slow_ms)};
      stalls.records.assign(static_cast<size_t>(o.iters), stalls.longest);
      r.stalls = stalls;
    } else {
      r.iterations_done = o.iters;
    }
  }
  if (!o.json_path.empty()) sdpa::write_file_atomic(o.json_path, sdpa::result_to_json(r).dump(1) + "\n");
  return r.exit_code;
}
