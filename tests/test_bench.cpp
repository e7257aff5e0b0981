// test_bench.cpp: `repro bench` without a GPU: its options (defaults, values, run options passed
// through, bad input), the choice of input sets, the overhead verdict, the summaries computed
// from samples, and the fields of its JSON result and text. Numbers here are made up: no
// benchmark figure belongs in a unit test.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "bench_examples.h"
#include "repro/bench/bench.h"
#include "fixes/fix_list.h"

using namespace sdpa;

using namespace bench_examples;

TEST_SUITE("bench") {
  TEST_CASE("defaults: the original benchmark's warm-up and iteration counts, input sets from the L2, no fix overhead") {
    const BenchParse r = parse_bench({});
    REQUIRE(r.run);
    CHECK(r.options.warmup == 10);
    CHECK(r.options.iterations == 100);
    CHECK(r.options.input_sets == 0);
    CHECK(r.options.overhead_labels.empty());
    CHECK(r.options.run.scenario == 0);
    CHECK(r.options.run.problem.shape_string() == "B=2 Hq=8 Hkv=8 L=128 S=128 E=64");
  }

  TEST_CASE("bench options and every run option reach the configuration") {
    const BenchParse r = parse_bench({"-w", "3", "-n", "50", "--input-sets", "5", "--fix-overhead", "2,all", "--json", "b.json",
                                "--dtype", "fp16", "--precision", "native", "-b", "4", "--heads", "16", "-L", "2048",
                                "-E", "64", "--alloc", "device", "--fixes", "3", "--check", "--stage-timeout", "5"});
    REQUIRE(r.run);
    const BenchOptions& o = r.options;
    CHECK(o.warmup == 3);
    CHECK(o.iterations == 50);
    CHECK(o.input_sets == 5);
    CHECK(o.overhead_labels == std::vector<std::string>{"2", "all"});
    REQUIRE(o.overhead_fixes.size() == 2);
    CHECK(o.overhead_fixes[0].str() == "2");
    CHECK(o.overhead_fixes[1].str() == "all");
    CHECK(o.run.json_path == "b.json");
    CHECK(o.run.problem.dtype == DType::fp16);
    CHECK(o.run.problem.precision == Precision::native);
    CHECK(o.run.problem.shape_string() == "B=4 Hq=16 Hkv=16 L=2048 S=2048 E=64");
    CHECK(o.run.settings.alloc == AllocKind::device);
    CHECK(o.run.fixes.str() == "3");
    CHECK(o.run.check);
    CHECK(o.run.stage_timeout_s == 5);
    CHECK(o.run.argv.front() == "bench");
  }

  TEST_CASE("--fix-overhead lists") {
    std::vector<std::string> labels;
    std::vector<FixSet> fixes;
    parse_fix_overhead_list("each", labels, fixes);
    // Every fix a bench can time (its record's outside_the_calls unset) as designed and, for those
    // whose lean form differs, lean; then all of them both ways. From the records.
    std::vector<std::string> expected;
    for (int n = 1; n <= fix_count(); ++n) {
      if (fix_info(n).outside_the_calls) continue;
      FixSet design, lean;
      design.add(n);
      lean.add_lean(n);
      expected.push_back(std::to_string(n));
      if (!(lean == design)) expected.push_back(std::to_string(n) + ":lean");
    }
    expected.insert(expected.end(), {"all", "all:lean"});
    CHECK(labels == expected);
    CHECK(std::find(labels.begin(), labels.end(), "1:lean") != labels.end());
    for (size_t i = 0; i + 2 < labels.size(); ++i) CHECK(fixes[i].str() == labels[i]);
    CHECK(fixes[labels.size() - 2] == FixSet::all());
    CHECK(fixes[labels.size() - 1] == FixSet::lean());
    parse_fix_overhead_list("2:prefetch/device-sync", labels, fixes);
    CHECK(fixes[0].str() == "2:prefetch/device-sync");
    parse_fix_overhead_list("none", labels, fixes);
    CHECK(labels.empty());
    parse_fix_overhead_list("4,1", labels, fixes);
    CHECK(labels == std::vector<std::string>{"4", "1"});
    for (const std::string& bad : {std::to_string(fix_count() + 1), std::string("0"), std::string("1,1"), std::string("1,,2"),
                                    std::string("all,all"), std::string("x"), std::string("1 2"), std::string("each,1"),
                                    std::string("12")}) {
      INFO(bad);
      CHECK_THROWS_AS(parse_fix_overhead_list(bad, labels, fixes), InputError);
    }
  }

  TEST_CASE("bad bench command lines: exit 2 with one line") {
    const std::vector<std::vector<std::string>> bad = {
        {"-n", "0"},          {"-n", "x"},         {"-w", "-1"},          {"--input-sets", "-1"},
        {"--input-sets", "65"}, {"--fix-overhead", std::to_string(fix_count() + 2)}, {"--fix-overhead", "1,1"}, {"--iters", "5"},
        {"--sample-every", "2"}, {"--dtype", "fp8"}, {"--no-such-option"}, {"-L", "0"}};
    for (const auto& args : bad) {
      const BenchParse r = parse_bench(args);
      INFO(args.front(), " -> ", r.message);
      CHECK_FALSE(r.run);
      CHECK(r.exit_code == kExitUsage);
      CHECK(r.message.find('\n') == std::string::npos);
      CHECK(r.message.rfind("repro bench: error: ", 0) == 0);
    }
  }

  TEST_CASE("--help prints the bench and the run options, exit 0") {
    const BenchParse r = parse_bench({"--help"});
    CHECK_FALSE(r.run);
    CHECK(r.exit_code == 0);
    CHECK(r.message.find("--fix-overhead") != std::string::npos);
    CHECK(r.message.find("--input-sets") != std::string::npos);
    CHECK(r.message.find("--precision") != std::string::npos);
    // Only what a bench accepts: it counts its calls with -w and -n.
    CHECK(r.message.find("--iters") == std::string::npos);
    CHECK(r.message.find("--sample-every") == std::string::npos);
    CHECK(r.message.find("Benchmark:\n  -w,--warmup N") < r.message.find("Problem:"));
    std::istringstream lines(r.message);
    for (std::string line; std::getline(lines, line);) CHECK_MESSAGE(line.size() <= 100, line);
  }

  TEST_CASE("input sets: enough that 3x the L2 is touched between two uses of a set") {
    const int64_t MiB = 1 << 20, L2 = 50 * MiB, plenty = int64_t{1} << 40;
    // The original standalone shape, native bf16: about 23 MiB a call -> 1 + ceil(150 / 23) = 8 sets.
    CHECK(choose_input_sets(23 * MiB, L2, 55 * MiB, plenty) == 8);
    // One call moving 3x the L2 or more needs no rotation.
    CHECK(choose_input_sets(150 * MiB, L2, 200 * MiB, plenty) == 1);
    CHECK(choose_input_sets(4096 * MiB, L2, 4200 * MiB, plenty) == 1);
    // Tiny calls: capped.
    CHECK(choose_input_sets(1024, L2, 40 * MiB, plenty) == kMaxInputSets);
    // Memory caps it, never below one.
    CHECK(choose_input_sets(23 * MiB, L2, 55 * MiB, 200 * MiB) == 3);
    CHECK(choose_input_sets(23 * MiB, L2, 55 * MiB, 10 * MiB) == 1);
    // Unknown sizes: one.
    CHECK(choose_input_sets(0, L2, 0, plenty) == 1);
    CHECK(choose_input_sets(23 * MiB, 0, 55 * MiB, plenty) == 1);
  }

  TEST_CASE("overhead verdict against the budget (docs/SCENARIOS.md)") {
    CHECK(overhead_verdict(0.95) == "ideal (< 10%)");
    CHECK(overhead_verdict(1.099) == "ideal (< 10%)");
    CHECK(overhead_verdict(1.10) == "acceptable (< 20%)");
    CHECK(overhead_verdict(1.199) == "acceptable (< 20%)");
    CHECK(overhead_verdict(1.20) == "worst case (< 30%)");
    CHECK(overhead_verdict(1.299) == "worst case (< 30%)");
    CHECK(overhead_verdict(1.30) == "over budget (>= 30%)");
    CHECK(overhead_verdict(std::nan("")) == "n/a");
    // Each fix's own budget, as designed and lean alike; none for a combination.
    CHECK(overhead_budget("1") == "5-10%");
    CHECK(overhead_budget("1:lean") == "5-10%");
    CHECK(overhead_budget("2") == "10-15%");
    CHECK(overhead_budget("3") == "2-5%");
    CHECK(overhead_budget("4:private-pool") == "<= 0%");
    CHECK(overhead_budget("all").empty());
    CHECK(overhead_budget("all:lean").empty());
    CHECK(overhead_budget("12").empty());
    CHECK(overhead_budget("5").empty());  // fix 5's price is paid in the backward pass
    CHECK(overhead_budget("5:recompute").empty());
  }

  TEST_CASE("summaries come from the samples: medians, the original benchmark's iter/s and ms, per stage") {
    BenchSeries s = series("path", 1.0);
    summarize_series(s);
    CHECK(s.wall.n == 20);
    CHECK(s.wall.median == doctest::Approx(1.095));
    CHECK(s.wall.median_ci.contains(s.wall.median));
    CHECK(s.gpu.median == doctest::Approx(0.5475));
    // 20 calls in sum(1.00 .. 1.19) ms = 21.9 ms: 913.24 iter/s, 1.095 ms average.
    CHECK(s.iter_per_s == doctest::Approx(20 / 0.0219));
    CHECK(s.avg_latency_ms == doctest::Approx(1.095));
    REQUIRE(s.stages.size() == 2);
    CHECK(s.stages[0].stage == "entry_sync");
    CHECK(s.stages[0].host_clock);
    CHECK(s.stages[1].stage == "softmax");
    CHECK_FALSE(s.stages[1].host_clock);
  }

  TEST_CASE("a fix comparison: ratio of medians, its interval, Hedges' g, the verdict from the host clock") {
    OverheadComparison c;
    c.label = "1";
    c.fixes_b.add(1);
    c.a = series("A", 1.0);
    c.b = series("B", 1.5);  // every call 0.5 ms slower: 1.595 / 1.095
    summarize_comparison(c);
    CHECK(c.wall_ratio.ratio == doctest::Approx(1.595 / 1.095));
    CHECK(c.wall_ratio.ci.contains(c.wall_ratio.ratio));
    CHECK(c.wall_ratio.ci.low > 1.3);
    CHECK(c.wall_g > 5);  // 0.5 ms apart with an SD of 0.059 ms
    CHECK(c.verdict == "over budget (>= 30%)");
    CHECK(c.budget == "5-10%");
    OverheadComparison skipped;
    skipped.label = "4";
    skipped.skipped = true;
    skipped.skip_reason = "why";
    summarize_comparison(skipped);
    CHECK(skipped.verdict == "skipped");
    // The host clock decides: a fix whose host round trips cost 15% while the GPU's time is the
    // same is "acceptable", not "ideal" (its GPU ratio is 1).
    OverheadComparison host_only;
    host_only.label = "1";
    host_only.a = series("A", 1.0);
    host_only.b = series("B", 1.0);
    for (double& w : host_only.b.samples.wall_ms) w *= 1.15;
    summarize_comparison(host_only);
    CHECK(host_only.gpu_ratio.ratio == doctest::Approx(1.0));
    CHECK(host_only.wall_ratio.ratio == doctest::Approx(1.15));
    CHECK(host_only.verdict == "acceptable (< 20%)");
    // Hedges' g of B against A: positive when B is slower, on each clock.
    CHECK(host_only.wall_g > 0);
    OverheadComparison faster = host_only;
    for (double& w : faster.b.samples.wall_ms) w /= 1.3225;  // 1.15 / 1.3225 = 0.87 of A
    summarize_comparison(faster);
    CHECK(faster.wall_g < 0);
    CHECK(faster.wall_ratio.ratio == doctest::Approx(1.15 / 1.3225));
  }

  TEST_CASE("JSON result: meta, devices, config, benchmarks, fix_overhead") {
    const BenchResult r = overhead_result();

    const nlohmann::json j = bench_to_json(r);
    CHECK(j["meta"]["format_version"] == kBenchFormatVersion);
    CHECK(j["meta"]["command"] == "bench");
    CHECK(j["meta"]["command_line"][0] == "bench");
    CHECK(j["meta"].contains("harness_version"));
    CHECK(j["meta"].contains("git_commit"));
    REQUIRE(j["devices"].size() == 1);
    CHECK(j["devices"][0]["name"] == "NVIDIA H200");
    CHECK(j["devices"][0]["l2_cache_bytes"] == 50 << 20);
    CHECK(j["config"]["problem"]["q_len"] == 512);
    CHECK(j["config"]["warmup"] == 10);
    CHECK(j["config"]["iterations"] == 20);
    CHECK(j["config"]["input_sets"] == 8);
    CHECK(j["config"]["input_sets_chosen_from_l2"] == true);
    CHECK(j["config"]["bootstrap"]["resamples"] == kBootstrapResamples);
    CHECK(j["config"]["fix_overhead"] == nlohmann::json{"1", "4"});
    CHECK(j["outcome"] == "pass");
    REQUIRE(j["benchmarks"].size() == 1);
    const auto& b = j["benchmarks"][0];
    CHECK(b["label"] == "path");
    CHECK(b["summaries"]["wall"]["median_ms"] == doctest::Approx(1.095));
    CHECK(b["summaries"]["wall"]["median_ci95_ms"].size() == 2);
    CHECK(b["summaries"]["gpu"]["n"] == 20);
    CHECK(b["samples"]["wall_ms"].size() == 20);
    CHECK(b["stages"][1]["stage"] == "softmax");
    CHECK(b["stages"][1]["clock"] == "cuda_event");
    CHECK(b["iter_per_s"].get<double>() > 0);
    REQUIRE(j["fix_overhead"].size() == 2);
    const auto& f1 = j["fix_overhead"][0];
    CHECK(f1["fix"] == "1");
    CHECK(f1["name"] == "gemm_stream_sync");
    CHECK(f1["is_skipped"] == false);
    CHECK(f1["ratio_wall"]["ratio"] == doctest::Approx(1.145 / 1.095));
    CHECK(f1["ratio_wall"]["ci95"].size() == 2);
    CHECK(f1["ratio_gpu"]["ratio"].is_number());
    CHECK(f1["hedges_g_wall"].is_number());
    CHECK(f1["verdict"] == "ideal (< 10%)");
    CHECK(f1["verdict_uses"] == "wall");
    CHECK(f1["a"]["label"] == "A");
    CHECK(f1["b"]["fixes"] == "1");
    const auto& f4 = j["fix_overhead"][1];
    CHECK(f4["is_skipped"] == true);
    CHECK(f4["skip_reason"] == "this GPU does not support stream-ordered memory pools");
    CHECK(j["watchdog"].is_null());
  }

  TEST_CASE("text: the original benchmark's block, the per-call and per-stage tables, the fix table, the verdict last") {
    BenchResult r;
    r.options = parse_bench({"--fix-overhead", "1"}).options;
    r.input_sets = 3;
    r.bytes_per_call = 8 << 20;
    r.path = series("path", 1.0);
    summarize_series(r.path);
    OverheadComparison one;
    one.label = "1";
    one.fixes_b.add(1);
    one.a = series("A", 1.0);
    one.b = series("B", 1.15);
    summarize_comparison(one);
    r.overhead.push_back(one);
    const std::string text = bench_to_text(r);
    CHECK(text.find("Throughput:   913.24 iter/s") != std::string::npos);
    CHECK(text.find("Avg latency:  1.0950 ms") != std::string::npos);
    CHECK(text.find("whole call (host clock)") != std::string::npos);
    CHECK(text.find("softmax") != std::string::npos);
    CHECK(text.find("gemm_stream_sync") != std::string::npos);
    CHECK(text.find("acceptable (< 20%)") != std::string::npos);
    CHECK(text.rfind("# result: pass (exit 0)\n") == text.size() - std::string("# result: pass (exit 0)\n").size());
  }

  // The header names the GPU as a driver engineer reads it (the driver's CUDA version from
  // cudaDriverGetVersion's 13000 form), and the check line says OK or FAILED against the tolerance.
  TEST_CASE("text: the GPU and driver in the header, the check's line OK or FAILED") {
    BenchResult r;
    r.options = parse_bench({}).options;
    DeviceInfo d;
    d.name = "NVIDIA GB10";
    d.cc_major = 12, d.cc_minor = 1, d.sm_count = 48;
    d.driver_version = 13020;
    r.device = d;
    r.l2_bytes = 24 << 20;
    r.checked = true;
    r.result_tensor = ResultTensor::output;
    r.tolerance = 1e-2;
    r.comparison.rel_error = 2e-3;
    r.comparison.max_abs_error = 5e-3;
    const std::string passed = bench_to_text(r);
    CHECK(passed.find(" on NVIDIA GB10 (sm_121, 48 SMs, L2 24.0 MiB), driver 13.2\n") != std::string::npos);
    CHECK(passed.find("# check (output, first input set): rel_error 2.000e-03  max_abs_error 5.000e-03  tolerance "
                      "1.0e-02  OK\n") != std::string::npos);
    r.comparison.rel_error = 3e-2;
    CHECK(bench_to_text(r).find("tolerance 1.0e-02  FAILED\n") != std::string::npos);
    r.device.reset();
    CHECK(bench_to_text(r).find(" on ") == std::string::npos);
  }

  TEST_CASE("a hung bench keeps the watchdog's report in its JSON") {
    BenchResult r;
    r.options = parse_bench({"--scenario", "2"}).options;  // its conditions: a softmax hang is its own
    r.outcome = Outcome::hang;
    r.exit_code = kExitHang;
    SupervisedOutcome w;
    w.kind = SupervisedOutcome::hang;
    w.stage = "softmax";
    r.watchdog = w;
    const nlohmann::json j = bench_to_json(r);
    CHECK(j["outcome"] == "hang");
    CHECK(j["exit_code"] == kExitHang);
    CHECK(j["watchdog"]["stage"] == "softmax");
    CHECK(j["watchdog"]["scenario"] == 2);
    CHECK(j["benchmarks"].empty());
  }
}
