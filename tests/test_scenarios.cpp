// test_scenarios.cpp: the scenario registry, the fix list, and how scenarios, options and fixes
// combine into the settings a run uses (CPU only).
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "fixes/fix.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/memory_plan.h"
#include "parse_words.h"
#include "repro/cli/run_options.h"
#include "scenarios/hang_classification.h"
#include "scenarios/scenario.h"

using namespace sdpa;
using test_util::parse;

namespace {

PathSettings run_settings(const std::vector<std::string>& args) {
  return test_util::run_options(args).settings;
}

// The settings whose value differs between a and b, as name -> value in b.
std::map<std::string, std::string> changed(const PathSettings& a, const PathSettings& b) {
  const auto fa = settings_fields(a), fb = settings_fields(b);
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : fb) {
    if (fa.at(name) != value) out[name] = value;
  }
  return out;
}

}  // namespace

TEST_SUITE("scenarios") {
  TEST_CASE("scenario 2 on rows the warp softmax reduces runs with a caveat; at 1025 keys and above it has none") {
    using test_util::run_options;
    const auto caveats = [](std::vector<std::string> args) { return run_options(args).caveats; };
    CHECK(caveats({"--scenario", "2"}).empty());  // the failing workload's layer: 4608 keys
    CHECK(caveats({"--scenario", "2", "-L", "128", "-S", "1025"}).empty());
    const std::vector<std::string> at_limit = caveats({"--scenario", "2", "-L", "128", "-S", "1024"});
    REQUIRE(at_limit.size() == 1);
    CHECK(at_limit[0].find("rows of S = 1024 <= 1024 keys take the warp path") != std::string::npos);
    CHECK(caveats({"--scenario", "2", "-L", "512", "-S", "512", "--dtype", "fp32"}).size() == 1);
    // Only scenario 2's hypothesis is about the block reduction; its condition switched off is no caveat either.
    for (const char* n : {"0", "1", "3", "4", "5", "6"}) CHECK(caveats({"--scenario", n, "-L", "128", "-S", "128"}).empty());
    CHECK(caveats({"--scenario", "2", "-S", "512", "--scores-to-host", "none"}).empty());
  }

  TEST_CASE("the registry holds scenarios 0-5, each documented, 1-5 each with its own fix") {
    REQUIRE(scenario_table().size() == static_cast<size_t>(scenario_count()));
    for (int n = 0; n < scenario_count(); ++n) {
      const ScenarioInfo& s = scenario_info(n);
      CAPTURE(n);
      CHECK(s.number == n);
      for (const char* text : {s.title, s.hypothesis, s.setup, s.runs, s.hang_signature, s.options}) {
        CHECK(std::string(text).size() > 3);
      }
      // Its own fix is a fix the registry has, and that fix's record names this scenario among those it
      // answers, or (a fix shared with another scenario: scenario 5's graph takes fix 4) the scenario
      // whose own fix it is first.
      if (s.fix_number != 0) {
        const std::string answers = fix_info(s.fix_number).scenario;
        bool named = answers == "scenario " + std::to_string(n);
        for (int m = 0; m < n && !named; ++m) named = scenario_info(m).fix_number == s.fix_number && answers == "scenario " + std::to_string(m);
        CHECK_MESSAGE(named, "fix ", s.fix_number, " answers ", answers);
      }
    }
    // Every fix is some scenario's own.
    for (int f = 1; f <= fix_count(); ++f) {
      CAPTURE(f);
      CHECK(std::any_of(scenario_table().begin(), scenario_table().end(), [f](const ScenarioInfo& s) { return s.fix_number == f; }));
    }
    CHECK_THROWS_AS(scenario_info(scenario_count()), InputError);
    CHECK_THROWS_AS(scenario_info(-1), InputError);
  }

  TEST_CASE("each scenario's setup applies exactly the preconditions it documents") {
    for (const ScenarioInfo& s : scenario_table()) {
      CAPTURE(s.number);
      PathSettings settings;
      apply_scenario(s.number, settings);
      const auto fields = settings_fields(settings);
      const std::map<std::string, std::string> documented(s.preconditions.begin(), s.preconditions.end());
      // Every documented precondition names a real setting and holds after the setup ...
      for (const auto& [name, value] : documented) {
        CAPTURE(name);
        REQUIRE(fields.count(name) == 1);
        CHECK(fields.at(name) == value);
      }
      // ... and the setup changes nothing it does not document.
      for (const auto& [name, value] : changed(PathSettings{}, settings)) {
        CAPTURE(name);
        CHECK(documented.count(name) == 1);
      }
    }
  }

  TEST_CASE("each scenario's documented hang signature matches the stage the watchdog classifies to it") {
    for (int n = 1; n < scenario_count(); ++n) {
      bool some_stage_classifies_here = false;
      for (int i = 0; i < kStageCount; ++i) {
        for (int fit : scenarios_for_hung_stage(static_cast<Stage>(i))) some_stage_classifies_here |= fit == n;
      }
      CAPTURE(n);
      CHECK(some_stage_classifies_here);
    }
    CHECK(std::string(scenario_info(1).hang_signature).find("qk_gemm") != std::string::npos);
    CHECK(std::string(scenario_info(2).hang_signature).find("softmax") != std::string::npos);
    CHECK(std::string(scenario_info(3).hang_signature).find("kt_contiguous") != std::string::npos);
    CHECK(std::string(scenario_info(4).hang_signature).find("entry_sync") != std::string::npos);
  }

  TEST_CASE("the part of the path each scenario runs") {
    SdpaProblem p;  // B=2 H=8 bf16 upcast, no mask
    p.mask = MaskKind::causal;
    p.dropout_p = 0.1;
    auto stages_of = [&](int scenario) {
      PathSettings s;
      apply_scenario(scenario, s);
      std::vector<std::string> out;
      for (int i = 0; i < kStageCount; ++i) {
        if (stage_runs(static_cast<Stage>(i), p, s)) out.push_back(stage_name(static_cast<Stage>(i)));
      }
      return out;
    };
    using V = std::vector<std::string>;
    CHECK(stages_of(0) == V{"entry_sync", "mask_prepare", "upcast", "scale_q", "scale_k", "qk_gemm", "mask_add", "softmax",
                            "dropout", "pv_gemm", "cast_output", "stream_sync"});
    CHECK(stages_of(1) == V{"entry_sync", "upcast", "scale_q", "scale_k", "qk_gemm", "stream_sync"});
    CHECK(stages_of(2) == V{"entry_sync", "mask_prepare", "upcast", "scale_q", "scale_k", "qk_gemm", "mask_add",
                            "scores_to_host", "softmax", "stream_sync"});
    CHECK(stages_of(3) == V{"entry_sync", "upcast", "scale_q", "scale_k", "qk_gemm", "stream_sync"});
    CHECK(stages_of(4) == stages_of(0));
    PathSettings s;
    apply_scenario(1, s);
    CHECK(std::string(result_tensor_name(s)) == "scores");
    apply_scenario(2, s = PathSettings{});
    CHECK(std::string(result_tensor_name(s)) == "probs");
    apply_scenario(4, s = PathSettings{});
    CHECK(std::string(result_tensor_name(s)) == "output");
  }

  TEST_CASE("K^T is copied exactly where at::matmul copies it, and always with fix 3") {
    SdpaProblem p;
    PathSettings s;
    CHECK_FALSE(kt_copy_needed(p, s));  // contiguous K: a transposed view folds into B*H batches
    s.k_layout = KLayout::bshe;
    CHECK(kt_copy_needed(p, s));  // [B, S, H, E] with B = 2: batch and head strides do not fold
    p.batch = 1;
    CHECK_FALSE(kt_copy_needed(p, s));  // B = 1 folds
    p.batch = 2;
    s.qk_gemm_api = GemmApi::batched;
    CHECK_FALSE(kt_copy_needed(p, s));  // pointer arrays take any head offsets
    p.kv_heads = 2;
    s.qk_gemm_api = GemmApi::strided;
    CHECK_FALSE(kt_copy_needed(p, s));  // GQA expands K into a fresh contiguous tensor first
    s.kt_contiguous = true;
    CHECK(kt_copy_needed(p, s));  // fix 3
  }

  TEST_CASE("fix lists: numbers, all, none; anything else is one clear error") {
    CHECK(parse_fix_list("").empty());
    CHECK(parse_fix_list("none").empty());
    CHECK(parse_fix_list("all") == FixSet::all());
    CHECK(parse_fix_list("1,3").numbers() == std::vector<int>{1, 3});
    CHECK(parse_fix_list("4,2").str() == "2,4");
    std::string every;
    for (int n = 1; n <= fix_count(); ++n) every += (n > 1 ? "," : "") + std::to_string(n);
    CHECK(parse_fix_list(every).str() == "all");
    CHECK(parse_fix_list("1,2,3,4").str() == "1,2,3,4");
    const std::string beyond = std::to_string(fix_count() + 1);
    for (const std::string& bad : std::vector<std::string>{"0", beyond, "1,", ",1", "1,,2", "1;2", "one", "1 2", "12", "1,1", "all,1",
                                                           "-1", " 1", "ALL"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(parse_fix_list(bad), InputError);
    }
    for (int n = 1; n <= fix_count(); ++n) CHECK(fix_info(n).number == n);
    CHECK_THROWS_AS(fix_info(0), InputError);
  }

  TEST_CASE("each fix changes the settings at its own point, and fix 2 only acts as a hook") {
    for (int n = 1; n <= fix_count(); ++n) {
      FixSet one;
      one.add(n);
      PathSettings scenario;
      apply_scenario(n, scenario);
      PathSettings fixed = scenario;
      for (const auto& f : make_fixes(one)) {
        CHECK(f->number() == n);
        f->configure(fixed);
      }
      const auto diff = changed(scenario, fixed);
      CAPTURE(n);
      if (n == 1) CHECK(diff == std::map<std::string, std::string>{{"qk_gemm_stream", "same"}});
      if (n == 2) CHECK(diff.empty());
      if (n == 3) CHECK(diff == std::map<std::string, std::string>{{"kt_contiguous", "on"}});
      if (n == 4) CHECK(diff == std::map<std::string, std::string>{{"alloc", "async"}, {"async_pool", "stream"}});
      // Fix 5's design form chunks the scores (256 MiB) and checkpoints the layers (keeps nothing for the backward).
      if (n == 5) CHECK(diff == std::map<std::string, std::string>{{"chunk_bytes", "268435456"}, {"retain", "checkpoint"}});
    }
    PathSettings memory;  // scenario 6, whose layers keep what autograd saves
    apply_scenario(6, memory);
    PathSettings bounded = memory;
    for (const auto& f : make_fixes(parse_fix_list("5"))) f->configure(bounded);
    CHECK(changed(memory, bounded) == std::map<std::string, std::string>{{"retain", "checkpoint"}, {"chunk_bytes", "268435456"}});
    CHECK(make_fixes(FixSet::all()).size() == static_cast<size_t>(fix_count()));
    // Its native part computes in the input dtype: the problem changes, not the settings.
    const ParseResult native = parse({"--scenario", "6", "--fixes", "5:native", "--layers", "2"});
    REQUIRE(native.run);
    CHECK(native.options.problem.precision == Precision::native);
    CHECK(native.options.problem_given.precision == Precision::upcast);
    CHECK(native.options.settings.retain == Retain::autograd);
    const ParseResult chunk = parse({"--scenario", "6", "--fixes", "5:chunk", "--chunk-size", "64M"});
    REQUIRE(chunk.run);
    CHECK(chunk.options.settings.chunk_bytes == (int64_t{64} << 20));
    CHECK(make_fixes(FixSet{}).empty());
  }

  TEST_CASE("settings: defaults, then the scenario, then explicit options, then fixes") {
    // PyTorch's stream by default; scenario 1's GEMM on a blocking stream ordered by nothing explicit.
    CHECK(run_settings({}).stream == StreamMode::legacy);
    CHECK(run_settings({}).qk_gemm_order == GemmOrder::event);
    CHECK(run_settings({"--scenario", "1"}).stream == StreamMode::legacy);
    CHECK(run_settings({"--scenario", "1"}).qk_gemm_stream == GemmStream::blocking);
    CHECK(run_settings({"--scenario", "1"}).qk_gemm_order == GemmOrder::none);
    CHECK(run_settings({"--scenario", "1", "--gemm-order", "event"}).qk_gemm_order == GemmOrder::event);
    CHECK(implicitly_ordered_by_legacy_stream(StreamMode::legacy, GemmStream::blocking));
    CHECK(implicitly_ordered_by_legacy_stream(StreamMode::per_thread, GemmStream::legacy));
    CHECK_FALSE(implicitly_ordered_by_legacy_stream(StreamMode::legacy, GemmStream::aux));
    CHECK_FALSE(implicitly_ordered_by_legacy_stream(StreamMode::non_blocking, GemmStream::legacy));
    CHECK_FALSE(implicitly_ordered_by_legacy_stream(StreamMode::non_blocking, GemmStream::blocking));
    CHECK_FALSE(implicitly_ordered_by_legacy_stream(StreamMode::per_thread, GemmStream::blocking));
    // A graph is captured on a side stream (scenario 5, and --graph for any scenario).
    CHECK(run_settings({"--scenario", "5"}).stream == StreamMode::non_blocking);
    CHECK(run_settings({"--scenario", "0", "--graph"}).stream == StreamMode::non_blocking);
    CHECK(run_settings({"--scenario", "4"}).stream == StreamMode::legacy);
    CHECK(test_util::run_options({"--launch-blocking"}).launch_blocking);
    // Stalls: 1 s under the 20 s deadline; none judged where the deadline leaves no room, unless asked.
    CHECK(test_util::run_options({}).stall_threshold_s == 1.0);
    CHECK(test_util::run_options({"--stage-timeout", "1"}).stall_threshold_s == 0);
    CHECK(test_util::run_options({"--stage-timeout", "1", "--stall-threshold", "0.5"}).stall_threshold_s == 0.5);
    CHECK_FALSE(test_util::run_options({}).launch_blocking);
    CHECK(run_settings({"--scenario", "1", "--gemm-stream", "aux"}).qk_gemm_stream == GemmStream::aux);
    CHECK(run_settings({"--scenario", "1", "--gemm-stream", "aux", "--fix", "on"}).qk_gemm_stream == GemmStream::same);
    CHECK(run_settings({"--scenario", "1", "--gemm-order", "none"}).qk_gemm_order == GemmOrder::none);
    CHECK(run_settings({"--scenario", "1", "--full"}).last_stage == Stage::stream_sync);
    CHECK(run_settings({"--scenario", "2", "--scores-to-host", "both"}).scores_to_host == ScoresToHost::both);
    CHECK(run_settings({"--scenario", "3", "--k-layout", "bhse", "--gemm-api", "strided"}).k_layout == KLayout::bhse);
    CHECK(run_settings({"--scenario", "3", "--fix", "on"}).kt_contiguous);
    CHECK(run_settings({"--scenario", "4"}).entry_touch_streams == 4);
    CHECK(run_settings({"--scenario", "4", "--touch-streams", "8", "--host-touch", "off"}).entry_touch_streams == 8);
    CHECK_FALSE(run_settings({"--scenario", "4", "--host-touch", "off"}).entry_host_touch);
    CHECK(run_settings({"--scenario", "4", "--fix", "on"}).alloc == AllocKind::async);
    CHECK(run_settings({"--scenario", "0", "--fixes", "all"}).alloc == AllocKind::async);
    CHECK(run_settings({"--alloc", "host"}).alloc == AllocKind::host);
    CHECK(run_settings({"--stream", "per-thread"}).stream == StreamMode::per_thread);
    CHECK(run_settings({"--advise", "preferred:cpu,read-mostly"}).advice.size() == 2);
    const ParseResult both = parse({"--scenario", "2", "--fix", "on", "--fixes", "1"});
    REQUIRE(both.run);
    CHECK(both.options.fixes.str() == "1,2");
    CHECK(both.options.own_fix);
  }

  TEST_CASE("bad scenario, fix and condition options exit 2 with one line") {
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--fix", "on"}, "scenario 0 has no fix"},
        {{"--fix", "yes"}, "fix"},
        {{"--fixes", std::to_string(fix_count() + 1)}, "fixes"},
        {{"--fixes", "1,1"}, "twice"},
        {{"--alloc", "pinned"}, "alloc"},
        {{"--stream", "default"}, "stream"},
        {{"--gemm-stream", "other"}, "gemm-stream"},
        {{"--gemm-order", "maybe"}, "gemm-order"},
        {{"--k-layout", "bsh"}, "k-layout"},
        {{"--gemm-api", "gemv"}, "gemm-api"},
        {{"--scores-to-host", "write"}, "scores-to-host"},
        {{"--touch-streams", "65"}, "touch-streams"},
        {{"--touch-streams", "-1"}, "touch-streams"},
        {{"--host-touch", "maybe"}, "host-touch"},
        {{"--advise", "preferred:tpu"}, "advise"},
        {{"--advise", "read-mostly,read-mostly"}, "twice"},
        {{"--scenario", "1", "--inject", "hang:softmax"}, "does not run"},
        {{"--inject", "hang:kt_contiguous"}, "does not run"},
        {{"--inject", "hang:scores_to_host"}, "does not run"},
    };
    for (const auto& [args, needle] : cases) {
      const ParseResult r = parse(args);
      INFO(args.front(), " -> ", r.message);
      CHECK_FALSE(r.run);
      CHECK(r.exit_code == kExitUsage);
      CHECK(r.message.find('\n') == std::string::npos);
      CHECK(r.message.find(needle) != std::string::npos);
    }
  }

  TEST_CASE("--help documents every scenario and fix") {
    const ParseResult r = parse({"--help-all"});
    for (const ScenarioInfo& s : scenario_table()) CHECK(r.message.find(s.title) != std::string::npos);
    for (int n = 1; n <= fix_count(); ++n) CHECK(r.message.find(fix_info(n).name) != std::string::npos);
  }

  TEST_CASE("fix parts: the design form, the lean form, any selection, each named in the list") {
    const FixSet one = parse_fix_list("1");
    CHECK(one.has(fix_part(1, "set-stream")));
    CHECK(one.has(fix_part(1, "host-sync")));
    CHECK(std::string(one.form(1)) == "design");
    const FixSet lean = parse_fix_list("1:lean,2:lean");
    CHECK(lean.has(fix_part(1, "set-stream")));
    CHECK_FALSE(lean.has(fix_part(1, "host-sync")));
    CHECK(lean.has(fix_part(2, "device-scores")));  // where the scores live, not a prefetch every call
    CHECK_FALSE(lean.has(fix_part(2, "prefetch")));
    CHECK_FALSE(lean.has(fix_part(2, "host-sync")));
    CHECK_FALSE(lean.has(fix_part(2, "device-sync")));
    CHECK(lean.str() == "1:lean,2:lean");
    const FixSet parts = parse_fix_list("2:prefetch/device-sync,4:private-pool");
    CHECK(std::string(parts.form(2)) == "parts");
    CHECK(parts.str() == "2:prefetch/device-sync,4:private-pool");
    CHECK(parse_fix_list(parts.str()) == parts);  // printed as it is parsed
    CHECK(parse_fix_list("2:prefetch/host-sync/device-sync").str() == "2");  // every design part: the fix
    CHECK(parse_fix_list("2:device-scores").str() == "2:lean");
    CHECK(parse_fix_list("2:lean").parts(2) == std::vector<FixPart>{fix_part(2, "device-scores")});
    CHECK(parse_fix_list("all:lean") == FixSet::lean());
    CHECK(FixSet::lean().str() == "all:lean");
    CHECK(parse_fix_list("3:lean").str() == "3");  // fix 3's lean form is its design form
    for (const std::string& bad : std::vector<std::string>{"1:", "1:fast", "2:set-stream", "1:set-stream/set-stream",
                                                           std::to_string(fix_count() + 1) + ":lean", "1:lean,1",
                                                           "4:stream-pool/private-pool", "12", "1;2", ":lean"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(parse_fix_list(bad), InputError);
    }
  }

  TEST_CASE("each part configures or hooks only its own mechanism") {
    PathSettings s1;
    apply_scenario(1, s1);
    for (const auto& f : make_fixes(parse_fix_list("1:host-sync"))) f->configure(s1);
    CHECK(s1.qk_gemm_stream == GemmStream::blocking);  // host-sync alone leaves the GEMM's stream
    for (const auto& f : make_fixes(parse_fix_list("1:set-stream"))) f->configure(s1);
    CHECK(s1.qk_gemm_stream == GemmStream::same);
    PathSettings s4;
    for (const auto& f : make_fixes(parse_fix_list("4:private-pool"))) f->configure(s4);
    CHECK(s4.alloc == AllocKind::async);
    CHECK(s4.async_pool == AsyncPool::private_pool);
    PathSettings s2;
    for (const auto& f : make_fixes(parse_fix_list("2:prefetch/host-sync/device-sync"))) f->configure(s2);
    CHECK_FALSE(s2.reduced_on_device);  // the patch as proposed leaves the scores where --alloc puts them
    for (const auto& f : make_fixes(parse_fix_list("2:device-scores"))) f->configure(s2);
    CHECK(s2.reduced_on_device);
    // The command line names the parts in the run's settings and fix list.
    const char* argv[] = {"repro", "--scenario", "2", "-L", "64", "--fixes", "2:prefetch"};
    const ParseResult r = parse_command_line(7, argv);
    REQUIRE(r.run);
    CHECK(r.options.fixes.str() == "2:prefetch");
    CHECK_FALSE(r.options.settings.reduced_on_device);
    const char* argv_lean[] = {"repro", "--scenario", "2", "-L", "64", "--fixes", "2:lean"};
    const ParseResult lean_run = parse_command_line(7, argv_lean);
    REQUIRE(lean_run.run);
    CHECK(lean_run.options.settings.reduced_on_device);  // the run's settings show what the fix configures
  }

  // Scenario 7: the model's weights through the page cache, then the first forward pass; fix 6's
  // parts keep the load from depending on the page cache being reclaimed.
  TEST_CASE("scenario 7: its conditions, its classification, fix 6's parts and its plan's refusals") {
    using test_util::run_options;
    const RunOptions s7 = run_options({"--scenario", "7"});
    CHECK(s7.settings.weights.bytes == 57'000'000'000LL);
    CHECK(s7.settings.weights.io == WeightsIo::mapped);
    CHECK(s7.settings.layers == 60);
    CHECK(s7.settings.alloc == AllocKind::device);
    CHECK(s7.workload == "qwen-image-1024");
    CHECK(s7.memory_trace);
    CHECK(stage_runs(Stage::load_weights, s7.problem, s7.settings));
    // A hang in the load is scenario 7's first, with the page cache as evidence; scenario 6's
    // conditions had not acted yet.
    const HangClassification load = classify_hang(Stage::load_weights, s7.problem, s7.settings);
    REQUIRE_FALSE(load.candidates.empty());
    CHECK(load.scenario() == 7);
    bool cache_said = false;
    for (const std::string& e : load.candidates.front().evidence) cache_said |= e.find("the page cache held ") == 0;
    CHECK(cache_said);
    CHECK(load.summary().find("read through the page cache (mapped)") != std::string::npos);
    // A later allocation: scenario 7 is a candidate beside scenario 6.
    const HangClassification alloc = classify_hang(Stage::alloc_scores, s7.problem, s7.settings);
    std::set<int> candidates;
    for (const HangCandidate& c : alloc.candidates) candidates.insert(c.scenario);
    CHECK(candidates.count(6));
    CHECK(candidates.count(7));
    // Fix 6: its design form reads with O_DIRECT and plans against MemFree; its lean form drops each
    // tensor's pages; either way the weights leave no page cache the plan counts.
    const RunOptions on = run_options({"--scenario", "7", "--fix", "on"});
    CHECK(on.settings.weights.io == WeightsIo::direct);
    CHECK(on.settings.plan_against_free);
    CHECK_FALSE(on.settings.weights.drop_pages);
    const RunOptions lean = run_options({"--scenario", "7", "--fix", "lean"});
    CHECK(lean.settings.weights.io == WeightsIo::mapped);
    CHECK(lean.settings.weights.drop_pages);
    CHECK(lean.settings.plan_against_free);
    CHECK(run_options({"--scenario", "7", "--fixes", "6:drop"}).settings.weights.drop_pages);
    CHECK(plan_memory(on.problem, on.settings, {}).weights_cache_bytes == 0);
    CHECK(plan_memory(lean.problem, lean.settings, {}).weights_cache_bytes == 0);
    CHECK(plan_memory(s7.problem, s7.settings, {}).weights_cache_bytes == 57'000'000'000LL);
    CHECK(fix_info(6).budget == std::string("<= 0%"));
    // Its plan at the workload's size is refused on an H100 and a GB10 alike (the guard's exit 8,
    // before anything is allocated); on a GB10 whose MemAvailable is mostly page cache, a plan that
    // would fit MemAvailable is refused too, and fix 6's guard refuses it on a discrete GPU.
    MemoryFacts h100;
    h100.gpu_free = 84'470'000'000LL;
    h100.host_available = 120'000'000'000LL;
    h100.host_free = 110'000'000'000LL;
    h100.page_cache = 10'000'000'000LL;
    CHECK_FALSE(plan_refusal(plan_memory(s7.problem, s7.settings, {}), plan_pools(plan_memory(s7.problem, s7.settings, {}), h100))
                    .empty());
    const RunOptions small = run_options({"--scenario", "7", "--mapped-weights", "20G", "--layers", "2"});
    const MemoryPlan small_plan = plan_memory(small.problem, small.settings, {});
    CHECK(plan_refusal(small_plan, plan_pools(small_plan, h100)).empty());
    MemoryFacts spark;  // 100 GB available, 60 GB of it page cache
    spark.integrated = true;
    spark.host_available = 100'000'000'000LL;
    spark.page_cache = 60'000'000'000LL;
    spark.host_free = 40'000'000'000LL;
    CHECK(plan_refusal(small_plan, plan_pools(small_plan, spark)).find("only if the page cache") != std::string::npos);
    // Not in the default sweep or triage: it loads 57 GB on purpose.
    const auto sweep = default_sweep_scenarios();
    CHECK(std::find(sweep.begin(), sweep.end(), 7) == sweep.end());
  }
}
