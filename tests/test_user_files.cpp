// test_user_files.cpp: a user's files stay as they were. The harness writes only the weights files
// it made (math_sdpa/weights_file.h): a file of the user's named by any route (--mapped-weights
// SIZE:FILE, $SDPA_WEIGHTS_FILE, either with scenario 7) by any command is read as it is or refused,
// never extended or rewritten; the files a run reads (--inputs, --workload-file) and the outputs a
// refused run would have written are left byte for byte. Needs no GPU: without one a run that passed
// its checks ends with exit 7 before any load; with one it loads the file, which must stay the same.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "math_sdpa/weights_file.h"
#include "run_program.h"

using namespace sdpa;

namespace {

// A file of the user's: bytes that are not the mark, `size` of them, and its mode.
struct UserFile {
  std::string path, bytes;
  UserFile(const std::string& path_, int64_t size, mode_t mode) : path(path_) {
    bytes.resize(static_cast<size_t>(size));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + (i * 7 + i / 4096) % 26);
    std::ofstream(path, std::ios::binary) << bytes;
    chmod(path.c_str(), mode);
  }
  bool unchanged() const { return test_util::file_text(path) == bytes; }
};

std::string describe(int64_t size, mode_t mode, int64_t asked) {
  return std::to_string(size) + "-byte file, mode " + (mode == 0444 ? "0444" : "0644") + ", " + std::to_string(asked) +
         " bytes asked for";
}

test_util::ProgramRun run_repro(std::vector<std::string> args, const std::string& cwd) {
  args.insert(args.begin(), SDPA_REPRO_BINARY);
  test_util::ProgramOptions options;
  options.timeout_s = 120;
  options.cwd = cwd;
  return test_util::run_program(args, options);
}

const std::vector<int64_t> kSizes = {0, 100, 8193, 10000, 65536};
const std::vector<mode_t> kModes = {0644, 0444};

}  // namespace

TEST_SUITE("user_files") {
  TEST_CASE("a weights file the harness did not make is read as it is or refused, never written") {
    test_util::TempDir dir("user_files");
    for (const int64_t size : kSizes) {
      for (const mode_t mode : kModes) {
        for (const int64_t asked : {int64_t{1}, size, size + 1, int64_t{64} << 20}) {
          if (asked < 1) continue;
          CAPTURE(describe(size, mode, asked));
          const UserFile file(dir / "model.safetensors", size, mode);
          if (asked <= size) {
            CHECK(weights_file_use("--mapped-weights", file.path, asked) == WeightsFileUse::read);
            CHECK_FALSE(ensure_weights_file("--mapped-weights", file.path, asked));
          } else {
            const std::string expected = "$SDPA_WEIGHTS_FILE: " + file.path + " holds " + std::to_string(size) + " bytes, fewer than";
            CHECK_THROWS_WITH_AS(weights_file_use("$SDPA_WEIGHTS_FILE", file.path, asked), doctest::Contains(expected.c_str()),
                                 InputError);
            CHECK_THROWS_AS(ensure_weights_file("$SDPA_WEIGHTS_FILE", file.path, asked), InputError);
          }
          CHECK(file.unchanged());
          unlink(file.path.c_str());
        }
      }
    }
  }

  TEST_CASE("a weights file the harness made carries the mark, and only it is extended") {
    test_util::TempDir dir("user_files");
    const std::string made = dir / "cache/sdpa-repro/weights.bin";
    CHECK(weights_file_use("--mapped-weights", made, 10000) == WeightsFileUse::make);
    CHECK(ensure_weights_file("--mapped-weights", made, 10000));
    const std::string first = test_util::file_text(made);
    REQUIRE(first.size() == 10000);
    CHECK(first.compare(0, 64, kWeightsFileMark) == 0);
    CHECK(first.find(std::string(64, '\0'), 64) == std::string::npos);  // data, not zeros: never a sparse file
    CHECK(weights_file_use("--mapped-weights", made, 10000) == WeightsFileUse::reuse);
    CHECK_FALSE(ensure_weights_file("--mapped-weights", made, 5000));
    CHECK(weights_file_use("--mapped-weights", made, 20000) == WeightsFileUse::extend);
    CHECK(ensure_weights_file("--mapped-weights", made, 20000));
    const std::string longer = test_util::file_text(made);
    CHECK(longer.size() == 20000);
    CHECK(longer.compare(0, 8192, first, 0, 8192) == 0);  // extended from its last whole page
    // Its own, but not writable: refused before the run, not half-written.
    chmod(made.c_str(), 0444);
    if (access(made.c_str(), W_OK) != 0) {  // root may write anyway
      CHECK_THROWS_WITH_AS(weights_file_use("--mapped-weights", made, 40000), doctest::Contains("cannot extend"), InputError);
    }
  }

  TEST_CASE("what is not a regular file is refused by name, whichever route") {
    test_util::TempDir dir("user_files");
    const std::string fifo = dir / "fifo";
    REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
    for (const std::string& path : {dir.path, fifo, std::string("/proc/self/status")}) {
      CAPTURE(path);
      CHECK_THROWS_AS(weights_file_use("$SDPA_WEIGHTS_FILE", path, 1 << 20), InputError);
      CHECK_THROWS_AS(ensure_weights_file("$SDPA_WEIGHTS_FILE", path, 1 << 20), InputError);
    }
  }

  TEST_CASE("every command and route that names a weights file leaves a user's file byte for byte") {
    test_util::TempDir dir("user_files");
    struct Route {
      std::string name;
      bool by_variable;              // $SDPA_WEIGHTS_FILE, else SIZE:FILE
      std::vector<std::string> run;  // the command and its options, before --mapped-weights
    };
    const std::vector<Route> routes = {
        {"run, SIZE:FILE", false, {"-L", "64", "-S", "64"}},
        {"run, $SDPA_WEIGHTS_FILE", true, {"-L", "64", "-S", "64"}},
        {"scenario 7, $SDPA_WEIGHTS_FILE", true, {"--scenario", "7", "--layers", "1", "-L", "64", "-S", "64"}},
        {"--plan, SIZE:FILE", false, {"--plan", "-L", "64", "-S", "64"}},
        {"report --no-run, $SDPA_WEIGHTS_FILE", true, {"report", "--no-run", "--out", "rep", "--scenario", "7", "--layers", "1"}},
    };
    for (const Route& route : routes) {
      for (const int64_t size : {int64_t{10000}, int64_t{1} << 20}) {
        for (const mode_t mode : kModes) {
          const int64_t asked = int64_t{64} << 10;  // 64K: a smaller file is refused, a larger one read
          CAPTURE(route.name);
          CAPTURE(describe(size, mode, asked));
          const UserFile file(dir / "model.safetensors", size, mode);
          test_util::ScopedEnv env;
          std::vector<std::string> args = route.run;
          if (route.by_variable) {
            env.set("SDPA_WEIGHTS_FILE", file.path);
            args.insert(args.end(), {"--mapped-weights", "64K"});
          } else {
            args.insert(args.end(), {"--mapped-weights", "64K:" + file.path});
          }
          const auto r = run_repro(args, dir.path);
          if (size < asked) {
            CHECK(r.exit_code == kExitUsage);
            CHECK(r.err.find(route.by_variable ? "$SDPA_WEIGHTS_FILE: " : "--mapped-weights: ") != std::string::npos);
            CHECK(r.err.find("the harness did not make it") != std::string::npos);
          } else {
            // Passed its checks: a plan or a report without runs ends 0; a run 7 without a GPU, 0 with one.
            CHECK((r.exit_code == kExitPass || r.exit_code == kExitNoGpu));
          }
          CHECK(file.unchanged());
          test_util::remove_tree(dir / "rep");
          unlink(file.path.c_str());
        }
      }
    }
  }

  TEST_CASE("a refused run leaves the files it would read and write as they were") {
    test_util::TempDir dir("user_files");
    const UserFile json(dir / "result.json", 300, 0644), npy(dir / "out.npy", 300, 0644), log(dir / "stage.log", 300, 0644);
    const UserFile workload(dir / "workload.json", 100, 0644);
    // A bad size elsewhere on the line: nothing is run and nothing written, the files named included.
    const auto r = run_repro({"--batch", "0", "--json", json.path, "--save-output", npy.path, "--log-file", log.path}, dir.path);
    CHECK(r.exit_code == kExitUsage);
    const auto w = run_repro({"--workload-file", workload.path, "--plan"}, dir.path);
    CHECK(w.exit_code == kExitUsage);  // not a capture: refused, and read only
    for (const UserFile* f : {&json, &npy, &log, &workload}) {
      CAPTURE(f->path);
      CHECK(f->unchanged());
    }
  }
}
