// test_gpu_decisions.cpp: two decisions of the real binary that only a GPU run shows.
//
// - Fix 6's drop part: each tensor's own pages are unmapped and dropped from the page cache after
//   its copy, so the weights file's resident pages (mincore on a mapping of the same file, from
//   this process) stay about one tensor during the load and after it; a load that keeps its pages
//   leaves the whole file resident, which shows the measure sees a load's pages.
// - The harness's own stages are never a stall: scenario 2's host access to the scores
//   (scores_to_host) and the weights' load (load_weights), each made 1.5 s long by an injected
//   slow fault, under a 1 s stall threshold: the run passes with no stall, and the stage's time is
//   over the threshold.
//
// Small on purpose: a 512 MiB weights file and the smallest shapes, about 15 s on an H200.
// On tmpfs (whose pages are never dropped) the first case says so and checks nothing.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "math_sdpa/errors.h"
#include "run_program.h"

using namespace sdpa;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kFileBytes = 512 * kMiB;
constexpr int64_t kLargestTensor = 72 * kMiB;  // the load's largest tensor (weights_load.cpp)
// Read-ahead beyond the tensor being copied: the kernel reads around a faulting page of a
// mapping, a few MiB at most on an NVMe disk.
constexpr int64_t kReadAhead = 64 * kMiB;
constexpr long kTmpfsMagic = 0x01021994;

// The smallest problem: the runs are about their weights and stages, not the path's arithmetic.
const std::vector<std::string> kSmall = {"-b", "1", "--heads", "1", "-L", "64", "-E", "64"};

// The bytes of `path` in the page cache now: mincore over a mapping of it, which faults nothing in
// (and, holding no page, keeps none from being dropped). -1 where it cannot be read.
int64_t resident_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  struct stat st {};
  int64_t resident = -1;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const int64_t page = ::sysconf(_SC_PAGESIZE);
      std::vector<unsigned char> in_core(static_cast<size_t>((st.st_size + page - 1) / page));
      if (::mincore(map, static_cast<size_t>(st.st_size), in_core.data()) == 0) {
        resident = page * std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return (c & 1) != 0; });
      }
      ::munmap(map, static_cast<size_t>(st.st_size));
    }
  }
  ::close(fd);
  return resident;
}

// The file's pages dropped from the page cache, as a fresh boot has them.
void drop_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// A run of repro with the file's resident bytes sampled every millisecond meanwhile: the most seen.
struct SampledRun {
  test_util::JsonRun run;
  int64_t most_resident = -1;
};

SampledRun run_sampled(const std::vector<std::string>& args, const std::string& file) {
  std::atomic<bool> running{true};
  std::atomic<int64_t> most{-1};
  std::thread sampler([&] {
    while (running) {
      const int64_t now = resident_bytes(file);
      if (now > most) most = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  SampledRun r;
  test_util::ProgramOptions po;
  po.timeout_s = 300;
  r.run = test_util::run_repro_json(args, po);
  running = false;
  sampler.join();
  r.most_resident = most;
  return r;
}

// A folder for the weights file on a disk the page cache serves: the build folder this test runs
// in (a folder under /tmp may be tmpfs, whose pages are never dropped and where O_DIRECT fails).
struct DiskDir {
  std::string path;
  DiskDir() {
    std::string pattern = std::filesystem::current_path().string() + "/gpu_decisions_XXXXXX";
    path = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~DiskDir() {
    if (!path.empty()) test_util::remove_tree(path);
  }
  bool page_cached() const {
    struct statfs fs {};
    return !path.empty() && ::statfs(path.c_str(), &fs) == 0 && static_cast<long>(fs.f_type) != kTmpfsMagic;
  }
};

double mib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kMiB); }

}  // namespace

TEST_SUITE("gpu_decisions") {
  TEST_CASE("fix 6's drop part: the weights file's resident pages stay about one tensor during and after the load") {
    const DiskDir dir;
    REQUIRE_MESSAGE(!dir.path.empty(), "cannot make a folder in " << std::filesystem::current_path());
    if (!dir.page_cached()) {
      MESSAGE("SKIPPED: " << dir.path << " is on tmpfs, whose pages are never dropped: run from a build folder on disk");
      return;
    }
    const std::string file = dir.path + "/weights.bin";
    const std::string weights = std::to_string(kFileBytes / kMiB) + "M:" + file;
    auto args = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = kSmall;
      a.insert(a.end(), {"--mapped-weights", weights, "--stall-threshold", "0"});
      a.insert(a.end(), extra.begin(), extra.end());
      return a;
    };
    std::printf("gpu_decisions: the weights file's resident pages (mincore), MiB, of %.0f; largest tensor %.0f\n",
                mib(kFileBytes), mib(kLargestTensor));
    std::printf("  %-34s %5s %12s %12s %8s\n", "load", "exit", "most during", "after", "bound");
    auto row = [](const char* load, const SampledRun& r, int64_t after, const char* bound) {
      std::printf("  %-34s %5d %12.1f %12.1f %8s\n", load, r.run.exit_code, mib(r.most_resident), mib(after), bound);
    };

    // The file made by a first load (the harness's own file, with its mark), its pages then dropped.
    const SampledRun made = run_sampled(args({}), file);
    INFO(made.run.err.substr(0, 2000));
    REQUIRE(made.run.exit_code == kExitPass);
    REQUIRE(made.run.result.is_object());
    CHECK(made.run.result["weights_load"]["created"] == true);
    row("keep (the file made first)", made, resident_bytes(file), "");

    // The control: a load that keeps its pages leaves (nearly) the whole file resident, during and
    // after. The measure sees a load's pages.
    drop_pages(file);
    REQUIRE(resident_bytes(file) <= kMiB);
    const SampledRun keep = run_sampled(args({}), file);
    INFO(keep.run.err.substr(0, 2000));
    REQUIRE(keep.run.exit_code == kExitPass);
    CHECK(keep.run.result["weights_load"]["created"] == false);
    CHECK(keep.run.result["weights_load"]["pages"] == "keep");
    const int64_t after_keep = resident_bytes(file);
    row("keep (no fix)", keep, after_keep, ">= 460");
    CHECK(keep.most_resident >= kFileBytes * 9 / 10);
    CHECK(after_keep >= kFileBytes * 9 / 10);

    // Fix 6's drop part: at most the tensor being copied (and what the kernel read ahead of it) at
    // any time, and about one tensor once the load is done.
    drop_pages(file);
    REQUIRE(resident_bytes(file) <= kMiB);
    const SampledRun drop = run_sampled(args({"--fixes", "6:drop"}), file);
    INFO(drop.run.err.substr(0, 2000));
    REQUIRE(drop.run.exit_code == kExitPass);
    CHECK(drop.run.result["weights_load"]["pages"] == "drop");
    CHECK(drop.run.result["weights_load"]["tensors"] == 17);
    const int64_t after_drop = resident_bytes(file);
    row("6:drop", drop, after_drop, "<= 136, 72");
    CHECK(drop.most_resident >= 0);
    CHECK(drop.most_resident <= kLargestTensor + kReadAhead);
    CHECK(after_drop <= kLargestTensor);
    std::fflush(stdout);
  }

  TEST_CASE("the harness's own stages are never a stall: scores_to_host (scenario 2) and load_weights over the threshold") {
    struct Case {
      const char* stage;
      std::vector<std::string> args;
    };
    const test_util::TempDir dir("gpu_decisions_stall");
    // Scenario 2 at S = 2048 (the block softmax its hypothesis is about), and a load of one 16 MiB
    // tensor; each stage made 1.5 s long, over a 1 s threshold, every other stage far under it.
    const std::vector<Case> cases = {
        {"scores_to_host", {"--scenario", "2", "-b", "1", "--heads", "8", "-L", "128", "-S", "2048", "-E", "64", "--check"}},
        {"load_weights", {"-b", "1", "--heads", "1", "-L", "64", "-E", "64", "--mapped-weights", "16M:" + dir / "weights.bin"}}};
    std::printf("gpu_decisions: a harness stage of 1.5 s under --stall-threshold 1\n  %-16s %5s %10s %14s %s\n", "stage", "exit",
                "stage ms", "calls stalled", "outcome");
    for (const Case& c : cases) {
      CAPTURE(c.stage);
      std::vector<std::string> args = c.args;
      args.insert(args.end(), {"--inject", std::string("slow:") + c.stage + ":1500", "--stall-threshold", "1"});
      const test_util::JsonRun run = test_util::run_repro_json(args);
      INFO(run.err.substr(0, 2000));
      REQUIRE(run.result.is_object());
      // The stage's own time: over the threshold (the load's is the load's, not a call's stage).
      double ms = -1;
      if (std::string(c.stage) == "load_weights") {
        ms = run.result["weights_load"]["seconds"].get<double>() * 1e3;
      } else {
        for (const auto& s : run.result["stages"]) {
          if (s["stage"] == c.stage) ms = s["median_ms"].get<double>();
        }
      }
      const auto& stalls = run.result["stalls"];
      std::printf("  %-16s %5d %10.1f %14s %s\n", c.stage, run.exit_code, ms, stalls["calls_stalled"].dump().c_str(),
                  run.result["outcome"].dump().c_str());
      CHECK(ms >= 1500.0);
      CHECK(run.exit_code == kExitPass);
      CHECK(run.result["outcome"] == "pass");
      CHECK(stalls["threshold_s"] == 1.0);
      CHECK(stalls["calls"] == 1);
      CHECK(stalls["calls_stalled"] == 0);
      CHECK(stalls["longest"].is_null());
      CHECK(run.out.find("STALLED") == std::string::npos);
    }
    std::fflush(stdout);
  }
}
