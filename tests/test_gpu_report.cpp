// test_gpu_report.cpp: `repro report` and the generated reproducers on a real GPU.
//
// The reproducer is the run's call plan printed as CUDA on the harness's own kernels, cuBLAS calls
// and allocators (repro/report/reproducer), so on the same GPU it must compute what the harness
// computed, bit for bit. For each scenario 0-7 at a size that fits, with and without the backward
// pass, and for a finding of the context ladder (per-call allocation, three layers with autograd's
// retention, a ballast, a host load, two steps), the harness runs the configuration with --fix off
// and --fix on (--json, and --save-output for the gradients), the reproducer generated from the same
// options is built with one nvcc line and run with --fix off and on, and its result line (l2, sum,
// elements of the last layer's result tensor; with --backward dQ, dK and dV too) must equal the
// harness's result_stats exactly. Where the harness run hung (the bug itself, on an affected
// machine), the reproducer must time out in the same stage instead. Prints the comparison table.
// The cases' runs, builds and reproducer runs go six at a time (none is timed), their checks one
// case at a time after.
//
// Then a report folder (scenario 2, --repeat 2) is complete, and an injected hang fills its Hang section
// and hangs its reproducer in the same stage.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include "math_sdpa/npy.h"
#include "math_sdpa/reference.h"
#include "parse_words.h"
#include "repro/report/reproducer/generator.h"
#include "report_test_util.h"
#include "scenarios/scenario.h"

using namespace report_test;

namespace {

// Reports and nvcc builds at once (the suite reserves eight CPUs; nvcc is most of each case's time).
constexpr int kBuildsAtOnce = 6;

const char* const kSections[] = {"## Environment",   "## Exact commands", "## Preconditions",
                                 "## Expected and actual", "## How often", "## Hang", "## Stage times",
                                 "## Fix off / fix on", "## nvidia-bug-report.sh", "## Files"};

// The values of the reproducer's line for `name` ("result: finite l2=... sum=... elements=...").
struct LineStats {
  std::string l2, sum, elements;
  bool found = false;
};
LineStats line_stats(const std::string& output, const std::string& name) {
  LineStats s;
  const std::string text = "\n" + output;
  const size_t line = text.find("\n" + name + ": ");
  if (line == std::string::npos) return s;
  const std::string one = text.substr(line + 1, text.find('\n', line + 1) - line - 1);
  auto field = [&](const std::string& key) {
    const size_t at = one.find(" " + key + "=");
    if (at == std::string::npos) return std::string();
    const size_t start = at + key.size() + 2;
    return one.substr(start, one.find_first_of(" \n", start) - start);
  };
  s.l2 = field("l2"), s.sum = field("sum"), s.elements = field("elements");
  s.found = !s.l2.empty() && !s.sum.empty() && !s.elements.empty();
  return s;
}

// l2 and sum of the finite values of a float32 .npy, in the order the harness's result_stats and
// the reproducer's lines add them; elements, all of them.
struct Stats {
  double l2 = 0, sum = 0;
  long long elements = 0;
};
Stats npy_stats(const std::string& path) {
  const sdpa::NpyArray a = sdpa::read_npy(path);
  REQUIRE(a.type == sdpa::NpyType::float32);
  Stats s;
  s.elements = a.element_count();
  for (long long i = 0; i < s.elements; ++i) {
    float x;
    std::memcpy(&x, a.data.data() + 4 * i, 4);
    if (!std::isfinite(x)) continue;
    s.l2 += static_cast<double>(x) * x;
    s.sum += x;
  }
  s.l2 = std::sqrt(s.l2);
  return s;
}

}  // namespace

TEST_SUITE("gpu_report") {
  TEST_CASE("every scenario's reproducer computes the harness's result bit for bit, fix off and on, with every "
            "condition of the run") {
    const std::string nvcc = find_nvcc();
    REQUIRE_MESSAGE(!nvcc.empty(), "the reproducers are built with nvcc, which is neither ", SDPA_NVCC, " nor on PATH");
    const std::string dir = temp_dir("gpu_report");
    struct Case {
      std::string label;
      std::vector<std::string> options;
    };
    std::vector<Case> cases;
    for (const sdpa::ScenarioInfo& sc : sdpa::scenario_table()) {
      const std::string n = std::to_string(sc.number);
      std::vector<std::string> small = {"--scenario", n, "-b", "1", "--heads", "4", "-L", "64", "-S", "256", "--iters", "2"};
      // Scenarios 6 and 7 exhaust memory at their defaults: a few layers of a small problem, a small load.
      if (sc.number >= 6) small.insert(small.end(), {"--layers", "3"});
      if (sc.number == 7) small.insert(small.end(), {"--mapped-weights", "256M"});
      cases.push_back({"s" + n, small});
      if (sc.number >= 1 && sc.number <= 5) {
        std::vector<std::string> backward = small;
        backward.push_back("--backward");
        if (sc.number == 4) backward.insert(backward.end(), {"--dropout", "0.1", "--kv-heads", "2"});
        cases.push_back({"s" + n + "+bwd", backward});
      }
    }
    // A finding of the context ladder: the conditions the isolated call lacks.
    cases.push_back({"ladder", {"--scenario", "2", "-b", "1", "--heads", "4", "-L", "64", "-S", "1536", "--alloc-timing",
                                "per-call", "--layers", "3", "--retain", "autograd", "--ballast", "256M", "--host-load", "1",
                                "--steps", "2"}});
    auto out_of = [&](size_t c) { return dir + "/case" + std::to_string(c); };
    auto with_fix = [&](size_t c, const std::string& fix) {
      std::vector<std::string> args = cases[c].options;
      if (sdpa::scenario_info(std::stoi(args[1])).fix_number != 0) args.insert(args.end(), {"--fix", fix});
      return args;
    };
    struct CaseRuns {
      std::string generated;  // the generator's error, if it threw
      Ran build;
      std::map<std::string, Ran> harness, reproducer;  // by fix
    };
    const auto made = test_util::in_parallel(cases.size(), kBuildsAtOnce, [&](size_t c) {
      CaseRuns r;
      const std::string out = out_of(c);
      std::system(("mkdir -p '" + out + "'").c_str());
      try {  // the options exactly as the harness parses them (no doctest assertion on this thread)
        const sdpa::ParseResult off = test_util::parse(with_fix(c, "off")), on = test_util::parse(with_fix(c, "on"));
        if (!off.run || !on.run) throw std::runtime_error(off.message + on.message);
        std::ofstream(out + "/repro.cu") << sdpa::generate_reproducer(off.options, on.options, "off", "on");
      } catch (const std::exception& e) {
        r.generated = e.what();
        return r;
      }
      r.build = run({nvcc, "-O2", "-std=c++17", "-arch=native", out + "/repro.cu", "-lcublas", "-o", out + "/repro"});
      for (const std::string fix : {"off", "on"}) {
        std::vector<std::string> args = with_fix(c, fix);
        // Sharing the GPU, a run may be slow without being stuck: no stall is judged.
        args.insert(args.end(), {"--stall-threshold", "0", "--json", out + "/harness-" + fix + ".json", "--save-output",
                                 out + "/harness-" + fix + ".npy"});
        r.harness[fix] = run_repro(args);
        if (r.build.exit_code == 0) r.reproducer[fix] = run({out + "/repro", "--fix", fix, "--timeout", "120"});
      }
      return r;
    });
    std::printf("%-10s %-4s %-10s %24s %24s %10s %s\n", "case", "fix", "tensor", "l2 (harness)", "l2 (.cu)", "elements", "same");
    for (size_t c = 0; c < cases.size(); ++c) {
      CAPTURE(cases[c].label);
      const std::string out = out_of(c);
      REQUIRE_MESSAGE(made[c].generated.empty(), made[c].generated);
      REQUIRE_MESSAGE(made[c].build.exit_code == 0, made[c].build.err);
      for (const std::string fix : {"off", "on"}) {
        CAPTURE(fix);
        const Ran& harness = made[c].harness.at(fix);
        const Ran& ran = made[c].reproducer.at(fix);
        INFO("harness: ", harness.out.substr(0, 2000), harness.err.substr(0, 2000));
        INFO("reproducer: ", ran.out, ran.err);
        const nlohmann::json result = nlohmann::json::parse(file_text(out + "/harness-" + fix + ".json"), nullptr, false);
        REQUIRE(result.is_object());
        if (result["outcome"] == "hang") {  // the bug itself: the reproducer must hang where the harness did
          const std::string stage = result["watchdog"]["stage"].get<std::string>();
          CHECK(ran.exit_code == 3);
          CHECK(ran.err.find("TIMEOUT: hung in " + stage) != std::string::npos);
          continue;
        }
        REQUIRE(result["outcome"] == "pass");
        CHECK(ran.exit_code == 0);
        std::vector<std::pair<std::string, Stats>> tensors;
        Stats output;
        output.l2 = result["result_stats"]["l2"];
        output.sum = result["result_stats"]["sum"];
        output.elements = result["result_stats"]["elements"];
        tensors.push_back({"result", output});
        if (std::find(cases[c].options.begin(), cases[c].options.end(), "--backward") != cases[c].options.end()) {
          for (const char* g : {"grad_query", "grad_key", "grad_value"}) {
            tensors.push_back({g, npy_stats(out + "/harness-" + fix + "." + g + ".npy")});
          }
        }
        for (const auto& [name, want] : tensors) {
          CAPTURE(name);
          const LineStats got = line_stats(ran.out, name);
          REQUIRE(got.found);
          const bool same =
              std::stod(got.l2) == want.l2 && std::stod(got.sum) == want.sum && std::stoll(got.elements) == want.elements;
          CHECK(same);
          std::printf("%-10s %-4s %-10s %24.17g %24s %10lld %s\n", cases[c].label.c_str(), fix.c_str(), name.c_str(), want.l2,
                      got.l2.c_str(), want.elements, same ? "bit for bit" : "DIFFERENT");
        }
      }
    }
    remove_tree(dir);
  }

  TEST_CASE("a report folder is complete: every section, the runs, the stage log, the reproducer beside them") {
    const std::string dir = temp_dir("gpu_report_folder"), out = dir + "/report";
    const Ran report = run_repro({"report", "--scenario", "2", "--repeat", "2", "-b", "1", "--heads", "4", "-L", "64", "-S",
                                  "2048", "--iters", "5", "--stall-threshold", "0", "--out", out});
    INFO("repro report stderr: ", report.err);
    REQUIRE(report.exit_code == 0);
    const std::string md = file_text(out + "/REPORT.md");
    for (const char* section : kSections) CHECK_MESSAGE(md.find(std::string("\n") + section + "\n") != std::string::npos, section);
    CHECK(md.find("not run") == std::string::npos);
    CHECK(md.find("leaves out") == std::string::npos);
    const nlohmann::json j = nlohmann::json::parse(file_text(out + "/result.json"));
    REQUIRE(j["runs"].size() == 4);
    for (const auto& run : j["runs"]) CHECK(run["result"].is_object());
    CHECK(j["environment"]["device"].is_object());
    CHECK_FALSE(j.contains("reproducer_leaves_out"));
    const std::string log = file_text(out + "/stage.log");
    CHECK(log.find("=== run 4 of 4") != std::string::npos);
    CHECK(log.find("[SDPA_ENTRY]") != std::string::npos);
    CHECK(log.find("[MATH_SOFTMAX_START]") != std::string::npos);
    CHECK(exists(out + "/repro_scenario2.cu"));
    std::printf("--- first 40 lines of %s/REPORT.md ---\n", out.c_str());
    size_t at = 0;
    for (int line = 0; line < 40 && at < md.size(); ++line) {
      const size_t end = md.find('\n', at);
      std::printf("%s\n", md.substr(at, end - at).c_str());
      at = end == std::string::npos ? md.size() : end + 1;
    }
    std::printf("---\n");
    remove_tree(dir);
  }

  TEST_CASE("a hang (injected) fills the Hang section: stage, classification, flight recorder, stage log") {
    const std::string dir = temp_dir("gpu_report_hang"), out = dir + "/report";
    const Ran report = run_repro({"report", "--scenario", "2", "-L", "256", "--inject", "hang:softmax", "--allow-inject",
                                  "--stage-timeout", "2", "--out", out});
    INFO("stdout: ", report.out, " stderr: ", report.err);
    REQUIRE(report.exit_code == 0);
    const std::string md = file_text(out + "/REPORT.md");
    // The injected hang happens with the fix on as well: the fix cannot clear it.
    CHECK(md.rfind("# [injected hang:softmax: a test of the report] Scenario 2 hangs in softmax on managed memory; fix 2 "
                   "does not clear it (fix on: hung 1 of 1)\n",
                   0) == 0);
    CHECK(md.find("Fix off: hung 1 of 1 runs") != std::string::npos);
    CHECK(md.find("- **Classification**: scenario 2 (softmax reduction on unified memory") != std::string::npos);
    CHECK(md.find("| softmax | ") != std::string::npos);
    CHECK(md.find("RUNNING") != std::string::npos);
    CHECK(md.find("[MATH_SOFTMAX_START]") != std::string::npos);  // the stage log's tail
    // The reproducer injects the same hang, with the harness's kernel, and its watchdog names the same stage.
    const std::string cu = out + "/repro_scenario2.cu";
    CHECK(file_text(cu).find("p.inject(kFaultOff, false, PathStream::path);") != std::string::npos);
    const std::string nvcc = find_nvcc();
    REQUIRE_MESSAGE(!nvcc.empty(), "the reproducer is built with nvcc, which is neither ", SDPA_NVCC, " nor on PATH");
    const Ran build = run({nvcc, "-O2", "-std=c++17", "-arch=native", cu, "-lcublas", "-o", out + "/repro"});
    REQUIRE_MESSAGE(build.exit_code == 0, build.err);
    for (const std::string fix : {"off", "on"}) {
      const Ran hung = run({out + "/repro", "--fix", fix, "--timeout", "3"});
      CAPTURE(fix);
      CAPTURE(hung.err);
      CHECK(hung.exit_code == 3);
      CHECK(hung.err.rfind("TIMEOUT: hung in softmax (", 0) == 0);
    }
    remove_tree(dir);
  }
}
