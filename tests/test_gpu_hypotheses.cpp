// test_gpu_hypotheses.cpp: on a real GPU, that the scenarios exercise what they claim: scenario 2
// at rows longer than 1024 runs the block softmax while a host thread touches the scores, and
// stays exact; the real binary's sdpa-debug-format log has the documented tag sequence; at --log
// stages a hung GPU stage is the last one the log marks as started on the GPU; --check over
// several calls compares every call.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fixes/fix.h"
#include "fixes/fix_list.h"
#include "log_tags.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/pipeline.h"
#include "math_sdpa/reference.h"
#include "run_program.h"
#include "scenarios/scenario.h"

using namespace sdpa;

namespace {

// Collects the notes the path's conditions write (what the stage log would print).
struct NoteCollector : StageObserver {
  std::vector<std::string> notes;
  std::vector<std::string> softmax_details;
  void stage_begin(Stage s, const std::string& detail, void*) override {
    if (s == Stage::softmax) softmax_details.push_back(detail);
  }
  void stage_end(Stage, const std::string&, void*) override {}
  void stage_note(Stage, const std::string& note) override { notes.push_back(note); }
  bool noted(const std::string& word) const {
    for (const auto& n : notes) {
      if (n.find(word) != std::string::npos) return true;
    }
    return false;
  }
};

test_util::ProgramRun repro(std::vector<std::string> args, double timeout_s = 120) {
  args.insert(args.begin(), SDPA_REPRO_BINARY);
  test_util::ProgramOptions po;
  po.timeout_s = timeout_s;
  return test_util::run_program(args, po);
}

}  // namespace

TEST_SUITE("gpu_hypotheses") {
  TEST_CASE("scenario 2 at S > 1024: the block softmax runs while a host thread touches the scores, and stays exact") {
    for (ScoresToHost mode : {ScoresToHost::read, ScoresToHost::advise, ScoresToHost::both}) {
      SdpaProblem p;
      p.batch = 1;
      p.q_heads = p.kv_heads = 4;
      p.q_len = 96;
      p.kv_len = 2048;
      p.head_dim = 64;
      p.seed = 1234 + static_cast<int>(mode);
      PathSettings settings;
      apply_scenario(2, settings);
      settings.scores_to_host = mode;
      REQUIRE(settings.scores_host_phase == ScoresHostPhase::during);
      CAPTURE(scores_to_host_name(mode));
      const HostInputs in = make_random_inputs(p, p.seed);
      auto allocator = make_allocator(settings.alloc, allocator_options(settings, false));
      MathSdpa path(p, settings, *allocator);
      NoteCollector notes;
      path.add_observer(&notes);
      path.upload(in);
      for (int call = 0; call < 3; ++call) {
        path.poison_result();
        path.run();
      }
      const std::vector<float> probs = path.download_result();
      REQUIRE(notes.softmax_details.size() == 3);
      CHECK(notes.softmax_details[0].find("variant=block_per_row") != std::string::npos);
      CHECK(notes.noted("while softmax runs"));
      CHECK(notes.noted("touched the scores"));
      const Comparison c = compare_to_reference(probs, reference_tensor(p, in, "probs"));
      INFO("rel_error ", c.rel_error);
      CHECK(c.passed(tolerance_for(p.dtype, p.precision)));
    }
  }

  TEST_CASE("the real binary: scenario 2's default run at --log values, every call checked") {
    // The default of scenario 2 is the workload's 4608-token layer; a narrower one with rows as
    // long keeps this test short while running the same code.
    const auto run = repro({"--scenario", "2", "-b", "1", "--heads", "4", "-L", "128", "-S", "4608", "-E", "128",
                            "--check", "--log", "values", "--iters", "4"});
    INFO(run.err.substr(0, 3000));
    CHECK(run.exit_code == 0);
    CHECK(run.err.find("variant=block_per_row") != std::string::npos);
    CHECK(run.err.find("[SCENARIO_2] a host thread reads the scores'") != std::string::npos);
    CHECK(run.err.find("[SCENARIO_2] the host thread touched the scores") != std::string::npos);
    CHECK(run.out.find("# every call: 4 calls compared with call 1 bit for bit: identical  OK") != std::string::npos);
    CHECK(run.out.find("first call ") != std::string::npos);
  }

  TEST_CASE("fix 2's lean form (device-scores) keeps the scores on the GPU under scenario 2, and its result") {
    // What fix 2 is for, as the driver counts it: without it the host's reads move the scores'
    // pages to the host and softmax faults them back (host-to-device migration of the path's
    // memory, every call); with the scores in device memory no page of them can move.
    const std::string dir = test_util::temp_dir("fix2_device_scores");
    int64_t htod[2] = {0, 0}, gpu_faults[2] = {0, 0};
    const char* fixes[2] = {"none", "2:lean"};
    for (int i = 0; i < 2; ++i) {
      CAPTURE(fixes[i]);
      const std::string json_path = dir + "/" + std::to_string(i) + ".json";
      const auto run = repro({"--scenario", "2", "-b", "1", "--heads", "4", "-L", "128", "-S", "4608", "-E", "128", "--check",
                              "--iters", "4", "--uvm-counters", "--log", "stages", "--fixes", fixes[i], "--json", json_path});
      INFO(run.err.substr(0, 3000));
      REQUIRE(run.exit_code == 0);
      CHECK((run.err.find("[FIX_2] device-scores: scores (") != std::string::npos) == (i == 1));
      CHECK((run.err.find("[SCENARIO_2] host access skipped") != std::string::npos) == (i == 1));
      const auto j = nlohmann::json::parse(test_util::file_text(json_path));
      const auto& uvm = j["uvm"];
      if (!uvm["available"].get<bool>()) {
        MESSAGE("UVM counters unavailable here (", uvm["unavailable"].dump(), "): the migrations are not compared");
        return;
      }
      for (const auto& range : uvm["ranges"]) {
        if (range["range"] != "path") continue;
        htod[i] = range["bytes_htod"].get<int64_t>();
        gpu_faults[i] = range["gpu_page_faults"].get<int64_t>();
      }
    }
    MESSAGE("path's host-to-device migration over 4 calls: ", htod[0], " bytes without fix 2, ", htod[1],
            " with its device-scores form; GPU page faults ", gpu_faults[0], " and ", gpu_faults[1]);
    const int64_t scores_bytes = int64_t{1} * 4 * 128 * 4608 * 4;
    CHECK(htod[0] >= scores_bytes);  // the hypothesis's condition happened: the scores came back from the host
    CHECK(htod[1] * 4 <= htod[0]);   // and with the fix they (mostly) never left
  }

  TEST_CASE("the real binary's sdpa-debug-format log has the documented tag sequence") {
    const auto run = repro({"--log", "sync", "--log-format", "sdpa-debug", "--check"});
    INFO(run.err.substr(0, 3000));
    CHECK(run.exit_code == 0);
    const auto documented = test_util::documented_call_tags("default");
    REQUIRE_FALSE(documented.empty());
    CHECK(test_util::call_tags(test_util::debug_tags(run.err)) == documented);
  }

  TEST_CASE("--log stages: a hung GPU stage is the last one the log marks as started on the GPU") {
    for (const char* format : {"harness", "sdpa-debug"}) {
      CAPTURE(format);
      std::vector<std::string> args{"--inject", "hang:softmax", "--stage-timeout", "2", "--log", "stages", "--log-format", format,
                                    "--full", "--on-hang", "kill"};
      if (std::string(format) == "sdpa-debug") args.push_back("--log-extras");  // the GPU marks are the harness's own
      const auto run = repro(args, 60);
      CHECK(run.exit_code == kExitHang);
      const std::string started = std::string(format) == "sdpa-debug" ? "_gpu_start @" : "[GPU_STAGE_START] ";
      const std::string done = std::string(format) == "sdpa-debug" ? "softmax_gpu_done" : "[GPU_STAGE_DONE] softmax";
      std::string last_started;
      for (size_t at = run.err.find(started); at != std::string::npos; at = run.err.find(started, at + 1)) {
        const size_t line_start = run.err.rfind('\n', at) + 1;  // npos + 1 == 0 on the first line
        last_started = run.err.substr(line_start, run.err.find('\n', at) - line_start);
      }
      INFO(run.err.substr(0, 4000));
      CHECK(last_started.find("softmax") != std::string::npos);
      CHECK(run.err.find(done) == std::string::npos);
      // The host logged past the hung stage (it does not wait at this level); the marks say where the GPU is.
      CHECK(run.err.find("FINAL_BMM_START") != std::string::npos);
    }
  }

  TEST_CASE("--graph: the replayed graph gives the eager path's bits, with the fixes a graph can hold and a cross-stream GEMM") {
    struct Case {
      const char* name;
      DType dtype;
      void (*edit)(PathSettings&);
      const char* fixes;
    };
    const Case cases[] = {
        {"bf16 upcast", DType::bf16, [](PathSettings&) {}, "none"},
        {"fp32, GEMM on an aux stream", DType::fp32, [](PathSettings& s) { s.qk_gemm_stream = GemmStream::aux; }, "none"},
        {"fp16, every fix a graph can hold", DType::fp16, [](PathSettings&) {}, "1:lean,3,4"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      SdpaProblem p;
      p.batch = 2;
      p.q_heads = p.kv_heads = 4;
      p.q_len = 64;
      p.kv_len = 1100;  // the block softmax inside the graph
      p.dtype = c.dtype;
      p.mask = MaskKind::causal;
      p.dropout_p = 0.1;
      const HostInputs in = make_random_inputs(p, 77);
      std::vector<float> results[2];
      for (int graph = 0; graph < 2; ++graph) {
        PathSettings settings;
        settings.stream = StreamMode::non_blocking;  // a graph is captured on a side stream
        c.edit(settings);
        settings.graph = graph == 1;
        const FixSet fixes = parse_fix_list(c.fixes);
        const auto hooks = make_fixes(fixes);
        for (const auto& f : hooks) f->configure(settings);
        auto allocator = make_allocator(settings.alloc, allocator_options(settings, false));
        MathSdpa path(p, settings, *allocator);
        for (const auto& f : hooks) path.add_hook(f.get());
        path.upload(in);
        for (int call = 0; call < 3; ++call) {  // the first captures, every call replays
          path.poison_result();
          path.run();
        }
        results[graph] = path.download_result();
      }
      REQUIRE(results[0].size() == results[1].size());
      CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
      const Comparison cmp = compare_to_reference(results[1], reference_tensor(p, in, "output"));
      CHECK(cmp.passed(tolerance_for(p.dtype, p.precision)));
    }
  }

  TEST_CASE("scenario 5 through the real binary: replays pass; a hang inside the graph is graph_launch, scenario 5") {
    const auto run = repro({"--scenario", "5", "--check", "--iters", "5", "--log", "stages"});
    INFO(run.err.substr(0, 3000));
    CHECK(run.exit_code == 0);
    CHECK(run.err.find("[MATH_GRAPH_CAPTURE]") != std::string::npos);
    CHECK(run.err.find("[MATH_GRAPH_INSTANTIATE_DONE]") != std::string::npos);
    CHECK(run.err.find("[MATH_GRAPH_LAUNCH] nodes=") != std::string::npos);
    CHECK(run.err.find("[MATH_SOFTMAX_START]") == std::string::npos);  // captured, not run, stages are not logged
    CHECK(run.out.find("every call: 5 calls compared with call 1 bit for bit: identical") != std::string::npos);
    const auto fixed = repro({"--scenario", "5", "--fix", "on", "--check", "--iters", "3"});
    CHECK(fixed.exit_code == 0);
    const std::string dir = test_util::temp_dir("graph_hang");
    const auto hung = repro({"--scenario", "5", "--inject", "hang:softmax", "--stage-timeout", "2", "--on-hang", "kill",
                             "--json", dir + "/h.json"},
                            60);
    CHECK(hung.exit_code == kExitHang);
    const auto j = nlohmann::json::parse(test_util::file_text(dir + "/h.json"));
    CHECK(j["watchdog"]["stage"] == "graph_launch");
    CHECK(j["watchdog"]["scenario"] == 5);
    test_util::remove_tree(dir);
  }
}
