// test_bad_input.cpp: the table of bad input. Each row runs the real `repro` binary,
// as a user would, and must end with exit code 2, exactly one line on stderr, nothing written
// (no --json file, no report folder, no partial file), and no hang (a row that takes more than
// 20 s fails). Needs no GPU: bad input is rejected before the GPU is touched.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "math_sdpa/stage_log.h"
#include "run_program.h"
#include "scenarios/scenario.h"

using namespace sdpa;

namespace {

struct Scratch {
  std::string dir;
  Scratch() {
    char name[] = "/tmp/sdpa_bad_input_XXXXXX";
    dir = mkdtemp(name);
  }
  ~Scratch() { std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string path(const std::string& name) const { return dir + "/" + name; }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  // Every entry in the folder (to prove nothing was written).
  std::string listing() const {
    std::string out;
    FILE* p = popen(("ls -A '" + dir + "'").c_str(), "r");
    char buf[256];
    while (p && std::fgets(buf, sizeof buf, p)) out += buf;
    if (p) pclose(p);
    return out;
  }
};

// The real binary, in the scratch folder (relative output paths land there), killed after 20 s:
// a bad command line must never hang.
test_util::ProgramRun run_repro(std::vector<std::string> args, const Scratch& scratch) {
  args.insert(args.begin(), SDPA_REPRO_BINARY);
  test_util::ProgramOptions options;
  options.timeout_s = 20;
  options.cwd = scratch.dir;
  return test_util::run_program(args, options);
}

struct Row {
  std::vector<std::string> args;
  std::string needle;  // a word the one line must contain
};

}  // namespace

TEST_SUITE("bad_input") {
  TEST_CASE("bad command lines: exit 2, one line, nothing written, no hang") {
    const std::string huge(100000, '9');  // under the kernel's 128 KiB limit for one argument
    // --inputs with files that are not .npy arrays, in a folder of their own (the scratch folder
    // must stay empty).
    Scratch junk;
    for (const char* name : {"q.npy", "k.npy", "v.npy"}) junk.write(name, "not an array");
    junk.write("not_json.json", "nope");
    junk.write("no_options.json", "{\"cells\": [{\"index\": 0}]}");
    const std::string capture = std::string(SDPA_SOURCE_DIR) + "/tests/fixtures/capture/workload.json";
    const std::string too_long(300, 'a');  // a name longer than NAME_MAX (255)
    const std::string nearly(240, 'a');    // within it, but not with what the harness adds to a file's name
    const std::vector<Row> rows = {
        // sizes
        {{"--batch", "0"}, "batch"},
        {{"--batch", "-1"}, "batch"},
        {{"--heads", "0"}, "heads"},
        {{"--kv-heads", "-4"}, "kv-heads"},
        {{"-L", "0"}, "q-len"},
        {{"-S", "-9"}, "kv-len"},
        {{"-E", "0"}, "head-dim"},
        {{"--heads", "6", "--kv-heads", "4"}, "multiple"},
        {{"-L", "2147483648"}, "q-len"},
        {{"--batch", "99999999999999999999999999"}, "batch"},
        {{"--batch", huge}, "batch"},
        {{"--batch", "1e400"}, "batch"},
        {{"--batch", "3.5"}, "batch"},
        {{"--batch", "16abc"}, "batch"},
        {{"--heads", "1", "-L", "2147483647", "-S", "2147483647", "-E", "1"}, "overflow"},
        {{"--heads", "65536", "--batch", "65536"}, "cuBLAS batch"},
        // types and modes
        {{"--dtype", "fp64"}, "dtype"},
        {{"--dtype", ""}, "dtype"},
        {{"--dtype", "bf16\nfp16"}, "dtype"},
        {{"--precision", "double"}, "precision"},
        {{"--mask", "upper"}, "mask"},
        {{"--mask-dims", "HxB"}, "mask-dims"},
        {{"--dropout", "1"}, "dropout"},
        {{"--dropout", "-0"}, ""},  // -0 is a valid 0: excluded below
        {{"--dropout", "nan"}, "dropout"},
        {{"--dropout", "inf"}, "dropout"},
        {{"--dropout", "0.5.5"}, "dropout"},
        {{"--scale", "inf"}, "scale"},
        {{"--scale", "abc"}, "scale"},
        {{"--seed", "-1"}, "seed"},
        {{"--seed", "18446744073709551616"}, "seed"},
        // scenarios, fixes, conditions
        {{"--scenario", std::to_string(scenario_count())}, "scenario"},
        {{"--scenario", "one"}, "scenario"},
        {{"--scenario", "1", "--scenario", "2"}, "scenario"},
        {{"--fix", "on"}, "scenario 0"},
        {{"--fix", "1"}, "fix"},
        {{"--fixes", "0"}, "fixes"},
        {{"--fixes", "1,,3"}, "fixes"},
        {{"--fixes", "all,none"}, "fixes"},
        {{"--fixes", "\xff\xfe"}, "fixes"},
        {{"--alloc", "unified"}, "alloc"},
        {{"--stream", "0"}, "stream"},
        {{"--gemm-stream", "main"}, "gemm-stream"},
        {{"--gemm-order", "fence"}, "gemm-order"},
        {{"--k-layout", "sbhe"}, "k-layout"},
        {{"--gemm-api", "gemm"}, "gemm-api"},
        {{"--scores-to-host", "yes"}, "scores-to-host"},
        {{"--touch-streams", "1000"}, "touch-streams"},
        {{"--host-touch", "1"}, "host-touch"},
        {{"--advise", "preferred"}, "advise"},
        {{"--advise", "read-mostly,"}, "advise"},
        // run control
        {{"--iters", "0"}, "iters"},
        {{"--iters", "-5"}, "iters"},
        {{"--sample-every", "-1"}, "sample-every"},
        {{"--stage-timeout", "0"}, "stage-timeout"},
        {{"--stall-threshold", "-1"}, "stall-threshold"},
        {{"--graph", "--launch-blocking"}, "--launch-blocking waits for each kernel as it is launched"},
        {{"--scenario", "5", "--launch-blocking"}, "--launch-blocking waits for each kernel as it is launched"},
        {{"--stall-threshold", "20"}, "is not below the stage deadline"},
        {{"--stage-timeout", "2", "--stall-threshold", "3"}, "is not below the stage deadline (--stage-timeout 2 s)"},
        {{"--timeout", "-1"}, "timeout"},
        {{"--log", "debug"}, "log"},
        {{"--inject", "hang"}, "inject"},
        // sizes: a unit, or for --ballast a fraction below 1; both forms named
        {{"--ballast", "1.5"}, "is neither a fraction below 1 of the memory available (e.g. 0.5) nor a size with a unit"},
        {{"--ballast", "1"}, "is neither a fraction below 1"},
        {{"--chunk-size", "4096", "--fixes", "5:chunk"}, "'4096' has no unit"},
        // too large: the bound named, the number as typed
        {{"--ballast", "99999999999999999999999G"}, "--ballast: '99999999999999999999999G' is more than 9e18 bytes (8 EiB)"},
        {{"--scenario", "7", "--mapped-weights", "10000000000G"}, "'10000000000G' is more than 9e18 bytes"},
        {{"--chunk-size", "0.1B", "--fixes", "5:chunk"}, "'0.1B' is not a size of at least one byte"},
        {{"--mapped-weights", "30"}, "SIZE[:FILE] with a unit"},
        {{"--inject", "hang:nowhere"}, "inject"},
        {{"--inject", "slow:softmax:-1"}, "inject"},
        // The refusal names what the stage needs (the stage table's condition, or the kind's).
        {{"--inject", "hang:dropout"}, "does not run in this configuration: it needs --dropout > 0"},
        {{"--scenario", "3", "--inject", "hang:pv_gemm"}, "it needs --full (the scenario stops after qk_gemm)"},
        {{"--inject", "hang:load_weights"}, "it needs --mapped-weights SIZE"},
        {{"--inject", "hang:graph_launch"}, "it needs --graph"},
        {{"--inject", "hang:alloc_scores"}, "it needs --alloc-timing per-call"},
        {{"--inject", "hang:alloc_dropout", "--alloc-timing", "per-call"}, "it needs --dropout > 0"},
        {{"--inject", "hang:dv_gemm"}, "it needs --backward"},
        {{"--inject", "hang:gqa_expand"}, "it needs --kv-heads < --heads"},
        // options the configuration would ignore
        {{"--scenario", "1", "--dropout", "0.1"}, "before dropout"},
        {{"--mask-dims", "Bx1"}, "no mask tensor"},
        {{"--sample-every", "10", "--iters", "5"}, "--iters above"},
        {{"--scale", "0"}, "scale"},
        // output paths, found before the run (the GPU work would come first otherwise)
        {{"--json", "/etc/hostname/x.json"}, "/etc/hostname is not a directory"},
        {{"--json", "missing/x.json"}, "directory missing does not exist"},
        {{"--save-output", "/etc/hostname/o.npy"}, "--save-output"},
        {{"--log-file", "/etc/hostname/run.log"}, "--log-file"},
        {{"--snapshot-dir", "/etc/hostname/snapshot"}, "--snapshot-dir"},
        {{"report", "--scenario", "2", "--out", "/etc/hostname/report", "--no-run"}, "/etc/hostname is not a directory"},
        {{"bench", "--json", "/etc/hostname/b.json"}, "/etc/hostname"},
        // input files, read before the GPU is touched (exit 2 on a machine without one, not 7)
        {{"--inputs", "absent"}, "does not exist"},
        {{"--inputs", "."}, "has no q.npy"},
        {{"--inputs", junk.dir}, "not a .npy file"},
        {{"bench", "--inputs", junk.dir}, "not a .npy file"},
        // the command line itself
        {{"frobnicate"}, "unknown command 'frobnicate'"},
        {{"help", "frobnicate"}, "unknown topic 'frobnicate'"},
        {{"report", "--scenario", "2", "--check", "--out", "r"}, "--check"},
        {{"bench", "--iters", "3"}, "--iters is not an option of repro bench (repro bench --help lists its own)"},
        {{"minimize", "--out", "m", "--scenario", "2"}, "--scenario is not an option of repro minimize (repro minimize --help lists its own; the run's own options come after --)"},
        {{"--no-such-option"}, "unknown option --no-such-option (repro --help lists the options)"},
        // a mistyped option or command: the one it most likely meant, before any other complaint
        {{"--batchh", "2"}, "unknown option --batchh (did you mean --batch?)"},
        {{"--itres", "3"}, "unknown option --itres (did you mean --iters?)"},
        {{"sweep", "--scenarioz", "1"}, "unknown option --scenarioz (did you mean --scenarios?)"},
        {{"triage", "--budgte", "4m"}, "unknown option --budgte (did you mean --budget?)"},
        {{"trige"}, "unknown command 'trige' (did you mean triage?"},
        {{"report", "--ladder", "--scenario", "0", "--out", "r"}, "scenario 0 has no fix of its own"},
        {{"positional"}, "positional"},
        {{"--batch"}, "--batch needs a value before --json (--batch INT)"},
        {{"--batch", "x"}, "--batch: 'x' is not an integer (--batch INT)"},
        {{"--batch", "--check"}, "--batch needs a value before --check"},
        {{"--scenario", "8"}, "--scenario: '8' is not in 0-7"},
        {{"--stage-timeout", "0"}, "--stage-timeout: '0' is not in [0.01, 86400]"},
        {{"--ballast-alloc", "pinned", "--ballast", "1G"}, "--ballast-alloc: unknown value 'pinned' (expected managed|device|host|system)"},
        {{"minimize", "--out", "m", "--", "--iters", "1.5"}, "repro minimize: error: --iters: '1.5' is not an integer (--iters INT)"},
        {{"--json"}, "json"},
        {{"--iters", "2", "--", "extra"}, "extra"},
        {{"report"}, "report"},
        {{"sweep", "--repeats", "100000000"}, "repro sweep: error: --repeats: '100000000' is not in 1-100000"},
        {{"sweep", "--dtypes", "bf16,,fp16"}, "dtypes"},
        {{"sweep", "--scenarios", "9"}, "scenario"},  // a subcommand that is not implemented yet, or needs --out
        // Our words only: no parser's or library's wording; a value as typed; did you mean for values.
        {{"--scenario", "1", "--scenario", "2"}, "repro: error: --scenario is given 2 times; it takes one value"},
        {{"sweep", "--out", "a", "--out", "b"}, "repro sweep: error: --out is given 2 times; it takes one value"},
        {{"sweep", "merge", "--out", "m"}, "repro sweep merge: error: no shards given (DIR|FILE: each shard's output folder"},
        {{"sweep", "--out", "o", "--json", "s.json"}, "--out and --json exclude each other: give one"},
        {{"--workload-file", capture, "--call", "99999999999999999999"}, "--call: '99999999999999999999' is not in 0-2147483647"},
        {{"--workload-file", capture, "--call", "4294967296"}, "--call: '4294967296' is not in 0-2147483647"},
        {{"triage", "--out", "t", "--call", "-1", "--dry-run"}, "repro triage: error: --call: '-1' is not in 0-2147483647"},
        {{"triage", "--out", "t", "--budget", std::string(400, '9'), "--dry-run"}, "repro triage: error: --budget: '9999"},
        {{"--mapped-weights", "1G", "--weights-mapping", "kep"}, "--weights-mapping: unknown value 'kep' (did you mean keep? expected unmap|keep)"},
        {{"--scenario", "1", "--fix", "leen"}, "--fix: unknown value 'leen' (did you mean lean? expected on|off|lean)"},
        {{"--mask", "casual"}, "--mask: unknown value 'casual' (did you mean causal?"},
        {{"--alloc", "managd"}, "--alloc: unknown value 'managd' (did you mean managed?"},
        {{"help", "scenario"}, "repro help: error: unknown topic 'scenario' (did you mean scenarios?"},
        {{"report", "--scenario", "2", "--out", "r", "--fix-form", "leen", "--no-run"}, "--fix-form: unknown value 'leen' (did you mean lean? expected design|lean)"},
        {{"minimize", "--out", "m", "--in-flight", "hnag", "--", "--scenario", "1"}, "--in-flight: unknown value 'hnag' (did you mean hang?"},
        {{"--dtype", "fp61"}, "--dtype: unknown value 'fp61' (did you mean fp16?"},
        {{"sweep", "--on-hang", "kil"}, "--on-hang: unknown value 'kil' (did you mean kill?"},
        {{"sweep", "--on-hang", "keep"}, "--on-hang keep: a sweep's hung cell is not kept for a person"},
        {{"--workload-file", junk.path("not_json.json")}, "not JSON (line 1, column 2: invalid literal; last read: 'no')"},
        {{"minimize", "--out", "m", "--from-sweep", junk.path("no_options.json"), "--cell", "0"}, "has no run_options (no key 'run_options')"},
        {{"minimize", "--out", "m", "--from-sweep", junk.path("no_options.json"), "--cell", "-1"}, "--cell: '-1' is not in 0-100000"},
        {{"minimize", "--out", "m", "--from-sweep", junk.dir, "--cell", "0"}, "is a folder without a sweep.json"},
        // One range per option: a triage's --stage-timeout is a run's.
        {{"triage", "--out", "t", "--stage-timeout", "100000", "--dry-run"}, "--stage-timeout: '100000' is not in [0.01, 86400]"},
        // One check of a path's name on every route, before any GPU work.
        {{"--json", too_long + ".json"}, "repro: error: --json: the name 'aaaa"},
        {{"--json", nearly + ".json"}, "less the 24 the harness adds to it"},
        {{"--save-output", too_long + ".npy"}, "repro: error: --save-output: the name 'aaaa"},
        {{"--log-file", too_long}, "repro: error: --log-file: the name 'aaaa"},
        {{"--snapshot-dir", too_long}, "repro: error: --snapshot-dir: the name 'aaaa"},
        {{"bench", "--json", nearly + ".json"}, "repro bench: error: --json: the name 'aaaa"},
        {{"report", "--scenario", "2", "--out", too_long, "--no-run"}, "repro report: error: --out: the name 'aaaa"},
        {{"sweep", "--json", too_long + ".json"}, "repro sweep: error: --json: the name 'aaaa"},
        {{"sweep", "--out", too_long, "--dry-run"}, "repro sweep: error: --out: the name 'aaaa"},
        {{"triage", "--out", too_long}, "repro triage: error: --out: the name 'aaaa"},
        {{"triage", "--out", "d/" + too_long, "--dry-run"}, "repro triage: error: --out: the name 'aaaa"},
        {{"minimize", "--out", too_long, "--", "--scenario", "1"}, "repro minimize: error: --out: the name 'aaaa"},
        {{"--inputs", too_long}, "repro: error: --inputs: the name 'aaaa"},
        // Fix parts that cannot act in the configuration, in the fix's own record.
        {{"--mapped-weights", "1G", "--fixes", "6:direct/drop"}, "--fixes: fix 6's drop and direct exclude each other"},
        {{"--fixes", "6:direct"}, "fix 6's direct part acts on the model's weights' load, and this run loads none"},
        {{"--fixes", "6:drop"}, "fix 6's drop part acts on the model's weights' load, and this run loads none"},
        {{"--mapped-weights", "1G", "--fixes", "6:direct", "--weights-mapping", "keep"}, "--weights-mapping keep: fix 6's direct part"},
        {{"bench", "--fix-overhead", "6"}, "repro bench: error: --fix-overhead: '6': fix 6 acts before the first call, on the weights' load"},
        {{"bench", "--fix-overhead", "1,6:drop"}, "repro bench: error: --fix-overhead: '6:drop': fix 6 acts before the first call, on the weights' load"},
    };
    Scratch scratch;
    int checked = 0;
    for (const Row& row : rows) {
      if (row.needle.empty()) continue;
      std::vector<std::string> args = row.args;
      // Where the results would go: --json, or a folder (--out), which excludes --json or has it inside.
      const bool names_json = std::find(args.begin(), args.end(), "--json") != args.end() ||
                              std::find(args.begin(), args.end(), "--out") != args.end();
      if (args.front() != "report" && args.front() != "help" && !names_json) {
        args.push_back("--json");
        args.push_back("result.json");
      }
      const test_util::ProgramRun o = run_repro(args, scratch);
      std::string shown;
      for (const auto& a : row.args) shown += (a.size() > 40 ? a.substr(0, 40) + "..." : a) + " ";
      INFO("args: ", shown, "-> exit ", o.exit_code, " in ", o.wall_s, " s, stderr: ", o.err.substr(0, 300));
      CHECK_FALSE(o.timed_out);
      CHECK(o.exit_code == kExitUsage);
      CHECK(o.err.size() > 0);
      CHECK(o.err.find('\n') == o.err.size() - 1);  // exactly one line
      CHECK(o.err.find(row.needle) != std::string::npos);
      CHECK(o.err.find("json.exception") == std::string::npos);  // our words, not a library's
      CHECK(o.err.find("required but received") == std::string::npos);
      CHECK(scratch.listing().empty());  // nothing written
      std::system(("rm -rf '" + scratch.dir + "'/* '" + scratch.dir + "'/.[!.]*").c_str());
      ++checked;
    }
    CHECK(checked >= 50);
  }

  TEST_CASE("every path option of every command, given a file, a read-only folder, an empty name, /proc: exit 2, one line") {
    // Each row's "@" is replaced by each bad path of its kind. An output folder gets a file, a
    // folder under a file, a read-only folder (root writes anywhere but /proc: there, a folder under
    // /proc/self), an empty name and a folder under /proc; an output file the same, and a folder in
    // its place; an input gets an empty name, a folder or file of the wrong kind and a missing path
    // under /proc. Nothing may escape as an exception (exit 134) or run: every one is exit 2.
    enum Kind { out_dir, out_file, in_dir, in_file };
    struct PathRow {
      std::vector<std::string> args;
      Kind kind;
    };
    const std::vector<PathRow> rows = {
        {{"--json", "@"}, out_file},
        {{"--save-output", "@"}, out_file},
        {{"--log-file", "@"}, out_file},
        {{"--snapshot-dir", "@"}, out_dir},
        {{"--inputs", "@"}, in_dir},
        {{"--workload-file", "@", "--call", "0"}, in_file},
        {{"--mapped-weights", "1G:@"}, out_file},
        {{"bench", "--json", "@"}, out_file},
        {{"bench", "--log-file", "@"}, out_file},
        {{"bench", "--inputs", "@"}, in_dir},
        {{"report", "--scenario", "1", "--no-run", "--out", "@"}, out_dir},
        {{"report", "--scenario", "1", "--no-run", "--out", "r", "--workload-file", "@", "--call", "0"}, in_file},
        {{"sweep", "--scenarios", "1", "--out", "@"}, out_dir},
        {{"sweep", "--scenarios", "1", "--json", "@"}, out_file},
        {{"sweep", "--matrix", "@", "--out", "s"}, in_file},
        {{"sweep", "merge", "shard", "--out", "@"}, out_dir},
        {{"sweep", "merge", "shard", "--json", "@"}, out_file},
        {{"minimize", "--out", "@", "--", "--scenario", "1"}, out_dir},
        {{"minimize", "--out", "m", "--from-sweep", "@", "--cell", "0"}, in_file},
        {{"minimize", "--out", "m", "--from-report", "@"}, in_dir},
        {{"minimize", "--resume", "--out", "@"}, in_dir},
        {{"triage", "--out", "@"}, out_dir},
        {{"triage", "--dry-run", "--out", "@"}, out_dir},
        {{"triage", "--resume", "--out", "@"}, in_dir},
        {{"triage", "--out", "t", "--workload-file", "@"}, in_file},
    };
    Scratch scratch, fixtures;
    fixtures.write("a_file", "not a folder\n");
    const std::string file = fixtures.path("a_file");
    std::string read_only = fixtures.path("read_only");
    REQUIRE(mkdir(read_only.c_str(), 0555) == 0);
    if (geteuid() == 0) read_only = "/proc/self";  // root may write in any folder but under /proc
    std::map<Kind, std::vector<std::string>> bad = {
        {out_dir, {file, file + "/sub", read_only, read_only + "/sub", "", "/proc/sdpa-bad-input"}},
        {out_file, {file + "/x.json", read_only + "/x.json", "", "/proc/sdpa-bad-input/x.json", fixtures.dir}},
        {in_dir, {"", file, "/proc/sdpa-bad-input"}},
        {in_file, {"", fixtures.dir, "/proc/sdpa-bad-input.json"}},
    };
    int invocations = 0;
    for (const PathRow& row : rows) {
      for (const std::string& path : bad.at(row.kind)) {
        std::vector<std::string> args = row.args;
        for (std::string& a : args) {
          if (const size_t at = a.find('@'); at != std::string::npos) a.replace(at, 1, path);
        }
        const test_util::ProgramRun o = run_repro(args, scratch);
        std::string shown;
        for (const auto& a : args) shown += "'" + a + "' ";
        INFO("args: ", shown, "-> exit ", o.exit_code, ", stderr: ", o.err.substr(0, 400));
        CHECK_FALSE(o.timed_out);
        CHECK(o.exit_code == kExitUsage);
        CHECK(o.err.rfind("repro", 0) == 0);
        CHECK(o.err.find("error: ") != std::string::npos);
        CHECK(o.err.find('\n') == o.err.size() - 1);  // exactly one line
        CHECK(scratch.listing().empty());                // nothing written where it runs
        std::system(("rm -rf '" + scratch.dir + "'/* '" + scratch.dir + "'/.[!.]*").c_str());
        ++invocations;
      }
    }
    CHECK(invocations >= 100);
    chmod(fixtures.path("read_only").c_str(), 0755);  // for the scratch folder's removal
  }

  TEST_CASE("bad sweep matrix files: exit 2, one line, nothing written, no hang") {
    const std::string deep(100000, '[');  // nesting deep enough to break a recursive parser
    const std::vector<std::pair<std::string, std::string>> files = {
        {"", "not JSON"},
        {"{", "not JSON"},
        {"{\"scenarios\": [0, 1]", "not JSON"},  // truncated
        {std::string("\x00\xff\xfe\x7f garbage", 13), "not JSON"},
        {deep, "not JSON"},
        {deep + std::string(100000, ']'), "object"},
        {"[1, 2]", "object"},
        {"{\"scenarios\": [" + std::to_string(scenario_count()) + "]}", "scenario"},
        {"{\"scenarios\": [18446744073709551615]}", "18446744073709551615"},
        {"{\"scenarios\": [-1]}", "scenario"},
        {"{\"scenarios\": \"0\"}", "scenarios"},
        {"{\"scenarios\": [1.5]}", "scenarios"},
        {"{\"scenarios\": []}", "scenarios"},
        {"{\"dtypes\": [\"fp64\"]}", "dtype"},
        {"{\"dtypes\": [16]}", "dtypes"},
        {"{\"fix\": [\"maybe\"]}", "fix"},
        {"{\"shapes\": [\"2x8x128\"]}", "shape"},
        {"{\"shapes\": [\"2x8x128x128x99999999999999999999\"]}", "shape"},
        {"{\"allocs\": [\"unified\"]}", "alloc"},
        {"{\"iters\": 0}", "iters"},
        {"{\"iters\": 1e12}", "iters"},
        {"{\"iters\": 99999999999}", "iters"},
        {"{\"repeats\": \"2\"}", "repeats"},
        {"{\"colour\": [\"red\"]}", "unknown key"},
        {"null", "object"},
        {"{\"repeats\": 100000000}", "more than 100000"},
    };
    Scratch scratch;
    for (const auto& [content, needle] : files) {
      scratch.write("m.json", content);
      const test_util::ProgramRun o = run_repro({"sweep", "--matrix", "m.json", "--json", "s.json"}, scratch);
      INFO("matrix file: ", content.substr(0, 60), " -> exit ", o.exit_code, ", stderr: ", o.err.substr(0, 300));
      CHECK_FALSE(o.timed_out);
      CHECK(o.exit_code == kExitUsage);
      CHECK(o.err.find('\n') == o.err.size() - 1);  // exactly one line
      CHECK(o.err.find(needle) != std::string::npos);
      CHECK(o.err.find("json.exception") == std::string::npos);  // the position in our words, not the library's
      CHECK(scratch.listing() == "m.json\n");  // nothing written
    }
    const test_util::ProgramRun missing = run_repro({"sweep", "--matrix", "absent.json", "--json", "s.json"}, scratch);
    CHECK(missing.exit_code == kExitUsage);
    CHECK(missing.err.find("cannot read") != std::string::npos);
  }

  TEST_CASE("bad sweep resume files: exit 2, one line, the file untouched, nothing else written, no hang") {
    // A finished cell's record in the form the sweep writes it (its key is not in the matrix
    // below: a foreign cell, which --resume keeps), to follow each bad line: only a damaged last
    // line is forgiven (a killed sweep leaves one), a damaged line before it is an error.
    const std::string good =
        "{\"key\":\"elsewhere\",\"index\":0,\"outcome\":\"pass\",\"axes\":{\"scenario\":0,\"fix\":\"off\","
        "\"fix_list\":\"none\",\"dtype\":\"bf16\",\"precision\":\"upcast\",\"shape\":\"2x8x128x128x64\","
        "\"alloc\":\"managed\",\"stream\":\"non-blocking\",\"iters\":1,\"repeat\":0},\"device\":null,"
        "\"gpu\":null,\"stage\":null,\"error\":null,\"exit_code\":0,\"signal\":null,\"rel_error\":0.001,"
        "\"call_median_ms\":0.5,\"wall_seconds\":1.5}\n";
    auto with = [&](std::string field, const std::string& value) {  // `good` with one field replaced
      std::string r = good;
      const size_t at = r.find("\"" + field + "\":");
      const size_t start = at + field.size() + 3;
      const size_t end = r.find_first_of(",}", r[start] == '{' ? r.find('}', start) + 1 : start);
      return r.replace(start, end - start, value);
    };
    const std::vector<std::pair<std::string, std::string>> files = {
        {"not json\n" + good, "line 1 is not JSON"},
        {"\n" + good, "line 1 is not JSON"},
        {std::string("\x00\xff\xfe\n", 4) + good, "line 1 is not JSON"},
        {"{\"key\": \"elsewhere\", \"outco\n" + good, "line 1 is not JSON"},  // a truncated line, not the last
        {"[]\n" + good, "not an object"},
        {"{}\n" + good, "key"},
        {with("key", "7") + good, "key"},
        {with("index", "\"0\"") + good, "index"},
        {with("outcome", "\"planned\"") + good, "outcome"},
        {with("outcome", "\"banana\"") + good, "outcome"},
        {with("outcome", "null") + good, "outcome"},
        {with("axes", "\"all\"") + good, "axes"},
        {with("device", "3") + good, "device"},
        {with("gpu", "0") + good, "gpu"},
        {with("stage", "[]") + good, "stage"},
        {with("error", "{}") + good, "error"},
        {with("signal", "\"9\"") + good, "signal"},
        {with("rel_error", "true") + good, "rel_error"},
        {good + with("axes", "{\"scenario\":\"0\"}"), ""},  // a damaged last line is forgiven: excluded below
        {with("axes", "{\"scenario\":\"0\"}") + good, "axes.scenario"},
    };
    Scratch scratch;
    const std::vector<std::string> args = {"sweep", "--scenarios", "0", "--fix", "off", "--dtypes", "bf16", "--shapes",
                                           "2x8x128x128x64", "--allocs", "managed", "--iters", "1", "--json", "s.json",
                                           "--resume"};
    int checked = 0;
    for (const auto& [content, needle] : files) {
      if (needle.empty()) continue;
      std::system(("rm -rf '" + scratch.dir + "'/*").c_str());
      scratch.write("s.jsonl", content);
      const test_util::ProgramRun o = run_repro(args, scratch);
      INFO("resume file: ", content.substr(0, 120), " -> exit ", o.exit_code, ", stderr: ", o.err.substr(0, 300));
      CHECK_FALSE(o.timed_out);
      CHECK(o.exit_code == kExitUsage);
      CHECK(o.err.find('\n') == o.err.size() - 1);  // exactly one line
      CHECK(o.err.find(needle) != std::string::npos);
      CHECK(scratch.listing() == "s.jsonl\n");                       // nothing else written
      CHECK(test_util::file_text(scratch.path("s.jsonl")) == content);  // and the finished cells kept
      ++checked;
    }
    CHECK(checked >= 15);
    // A planned cell's record whose axes disagree with its key was edited: refused too.
    std::string edited = good;
    const std::string key =
        "scenario=0 fix=off dtype=bf16 precision=upcast shape=2x8x128x128x64 alloc=managed stream=default iters=1 repeat=0";
    edited.replace(edited.find("elsewhere"), 9, key);
    edited.replace(edited.find("\"bf16\""), 6, "\"fp16\"");
    std::system(("rm -rf '" + scratch.dir + "'/*").c_str());
    scratch.write("s.jsonl", edited);
    const test_util::ProgramRun o = run_repro(args, scratch);
    INFO(o.err);
    CHECK(o.exit_code == kExitUsage);
    CHECK(o.err.find("do not match") != std::string::npos);
    CHECK(scratch.listing() == "s.jsonl\n");
  }

  // --check needs a reference to compare with: the run refuses before the GPU is touched when
  // there is none (so these rows need no GPU); a program that checks nothing never opens OpenBLAS.
  TEST_CASE("--check without its reference: a wrong SDPA_REFERENCE_PRODUCTS or SDPA_HOST_CPUS, an OpenBLAS that cannot be opened") {
    Scratch scratch;
    auto refused_naming = [](const test_util::ProgramRun& o, const std::string& needle) {
      INFO("exit ", o.exit_code, ", stderr: ", o.err.substr(0, 400));
      CHECK_FALSE(o.timed_out);
      CHECK(o.exit_code == kExitUsage);
      CHECK(o.err.find('\n') == o.err.size() - 1);  // exactly one line
      CHECK(o.err.find(needle) != std::string::npos);
    };
    {
      test_util::ScopedEnv env;
      env.set("SDPA_REFERENCE_PRODUCTS", "lapack");
      refused_naming(run_repro({"--check"}, scratch), "SDPA_REFERENCE_PRODUCTS: unknown value 'lapack' (expected blas|loops)");
    }
    {
      test_util::ScopedEnv env;
      env.set("SDPA_HOST_CPUS", "two");
      refused_naming(run_repro({"--check"}, scratch), "SDPA_HOST_CPUS=two: expected a whole number of CPUs, 1 or more");
    }
    // The file the reference opens, by the dynamic loader's account (glibc's LD_DEBUG, on stderr).
    test_util::ProgramRun help, checked;
    {
      test_util::ScopedEnv env;
      env.set("LD_DEBUG", "files");
      help = run_repro({"--help"}, scratch);
      checked = run_repro({"--check", "--iters", "1"}, scratch);
    }
    CHECK(help.err.find("file=libc.so.6") != std::string::npos);  // LD_DEBUG took effect
    CHECK(help.err.find("openblas") == std::string::npos);
    const size_t at = checked.err.find("file=libopenblas");
    REQUIRE(at != std::string::npos);
    const std::string soname = checked.err.substr(at + 5, checked.err.find_first_of(" \n", at) - at - 5);  // libopenblas.so.0
    // A file of that name that is no library, found first.
    const test_util::TempDir broken("broken_openblas");
    std::ofstream(broken / soname) << "not a shared library\n";
    const char* outer = std::getenv("LD_LIBRARY_PATH");
    const std::string kept = outer ? outer : "";
    setenv("LD_LIBRARY_PATH", (broken.path + (kept.empty() ? "" : ":" + kept)).c_str(), 1);
    const test_util::ProgramRun refused = run_repro({"--check", "--iters", "1"}, scratch);
    const test_util::ProgramRun unchecked = run_repro({"--iters", "1"}, scratch);
    if (outer) setenv("LD_LIBRARY_PATH", kept.c_str(), 1);
    else unsetenv("LD_LIBRARY_PATH");
    refused_naming(refused, "the float64 reference's OpenBLAS could not be opened (");
    CHECK(refused.err.find("install the package libopenblas0") != std::string::npos);
    CHECK(unchecked.exit_code != kExitUsage);  // 0 on a GPU, 7 without one
  }
}
