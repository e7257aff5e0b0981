// test_workload_file.cpp: a captured workload (scripts/sdpa_capture.py's workload.json) read,
// checked and turned into run options, and the conditional faults a minimizer's known answer
// needs (@S>=N, @alloc=KIND). Bad files are usage errors: exit 2, one line naming the key.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_schema_check.h"
#include "math_sdpa/errors.h"
#include "math_sdpa/fault_spec.h"
#include "math_sdpa/path_settings.h"
#include "repro/cli/run_options.h"
#include "repro/cli/workload_file.h"
#include "run_program.h"

using namespace sdpa;
using nlohmann::json;

namespace {

const std::string kFixture = std::string(WORKLOAD_FIXTURE_DIR) + "/workload.json";

json fixture() { return json::parse(test_util::file_text(kFixture)); }

std::string option_value(const std::vector<DerivedOption>& options, const std::string& name) {
  for (const auto& o : options) {
    if (o.name == name) return o.value.empty() ? "(flag)" : o.value;
  }
  return "";
}

RunOptions parsed(std::vector<std::string> args) {
  std::vector<const char*> argv{"repro"};
  for (const auto& a : args) argv.push_back(a.c_str());
  const ParseResult r = parse_command_line(static_cast<int>(argv.size()), argv.data());
  if (!r.run) throw InputError(r.message);
  return r.options;
}

std::string error_of(const json& doc) {
  try {
    parse_workload_file(doc.dump(), "w.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The fixture's call 0 with the host's memory and the files the process had mapped, as newer captures record them.
json with_mapped_files(const json& files) {
  json doc = fixture();
  json& context = doc["calls"][0]["context"];
  context["mem_free"] = 1200000000;
  context["cached"] = 60000000000;
  context["rss_file"] = 30000000000;
  context["mapped_files"] = files;
  return doc;
}

}  // namespace

TEST_SUITE("workload_file") {

TEST_CASE("the committed capture is valid against results/workload.schema.json, and the schema refuses a broken one") {
  const sdpa_test::SchemaFiles schemas = sdpa_test::load_schema_files(SDPA_RESULTS_DIR);
  const json doc = fixture();
  CHECK(sdpa_test::schema_errors(schemas, "workload.schema.json", doc).empty());
  // The host's memory and the mapped files: optional (older captures have none), typed where given.
  const json mapped = with_mapped_files(json::array({{{"path", "/m/a.safetensors"}, {"bytes", 5}, {"resident_bytes", nullptr}}}));
  CHECK(sdpa_test::schema_errors(schemas, "workload.schema.json", mapped).empty());
  CHECK(sdpa_test::schema_errors(schemas, "workload.schema.json", with_mapped_files(nullptr)).empty());
  for (const auto& change : std::vector<std::function<void(json&)>>{
           [](json& d) { d["calls"][0]["context"]["cached"] = "60G"; },
           [](json& d) { d["calls"][0]["context"]["mapped_files"][0].erase("resident_bytes"); },
           [](json& d) { d["calls"][0]["context"]["mapped_files"][0]["mtime"] = 1; },
           [](json& d) { d["calls"][0]["context"]["mapped_files"][0]["bytes"] = -1; }}) {
    json broken = mapped;
    change(broken);
    CHECK_FALSE(sdpa_test::schema_errors(schemas, "workload.schema.json", broken).empty());
  }
  json broken = doc;
  broken["calls"][0]["query"].erase("layout");
  CHECK_FALSE(sdpa_test::schema_errors(schemas, "workload.schema.json", broken).empty());
  broken = doc;
  broken["allocator"]["kind"] = "malloc";
  CHECK_FALSE(sdpa_test::schema_errors(schemas, "workload.schema.json", broken).empty());
}

TEST_CASE("a captured call becomes the run options that replay it") {
  const WorkloadFile w = load_workload_file(kFixture);
  REQUIRE(w.calls.size() >= 1);
  const CapturedCall& c = w.calls[0];
  const CallReplay r = replay_call(w, 0);
  CHECK(option_value(r.problem, "--batch") == std::to_string(c.query.shape[0]));
  CHECK(option_value(r.problem, "--heads") == std::to_string(c.query.shape[1]));
  CHECK(option_value(r.problem, "--kv-heads") == std::to_string(c.key.shape[1]));
  CHECK(option_value(r.problem, "--q-len") == std::to_string(c.query.shape[2]));
  CHECK(option_value(r.problem, "--kv-len") == std::to_string(c.key.shape[2]));
  CHECK(option_value(r.problem, "--head-dim") == std::to_string(c.query.shape[3]));
  CHECK(option_value(r.problem, "--dtype") == "bf16");
  CHECK(option_value(r.problem, "--k-layout") == (c.key.layout == "bshe" ? "bshe" : "bhse"));
  REQUIRE(c.mask);
  CHECK(c.mask->pattern == "text_padding");
  CHECK(option_value(r.problem, "--text-padding") ==
        std::to_string(c.mask->text_tokens) + ":" + std::to_string(c.mask->text_valid.back()));
  // The harness pads entries after the first alike: the capture's [32, 20] is that exactly; [32, 20, 10] is not,
  // and is replayed at its shortest with a warning.
  for (const std::string& a : r.approximations) CHECK(a.find("text padding differs") == std::string::npos);
  json uneven = fixture();
  uneven["calls"][0]["mask"]["text_valid"] = {32, 20, 10};
  for (const char* t : {"query", "key", "value"}) uneven["calls"][0][t]["shape"][0] = 3;
  const CallReplay approx = replay_call(parse_workload_file(uneven.dump(), "w.json"), 0);
  CHECK(option_value(approx.problem, "--text-padding") == "32:10");
  bool warned = false;
  for (const std::string& a : approx.approximations) warned = warned || a.find("the text padding differs between batch entries") == 0;
  CHECK(warned);
  // The process: two attention calls a step, autograd keeping them, PyTorch's caching allocator.
  REQUIRE(w.calls_per_step);
  CHECK(option_value(r.context, "--layers") == std::to_string(*w.calls_per_step));
  CHECK(option_value(r.context, "--retain") == "autograd");
  CHECK(option_value(r.context, "--alloc") == "device");
  CHECK(option_value(r.context, "--alloc-timing") == "per-call");
  const int64_t held = c.memory_allocated - c.query.bytes() - c.key.bytes() - c.value.bytes();
  CHECK(option_value(r.context, "--ballast") == (held >= (1 << 20) ? std::to_string(held) + "B" : ""));
}

TEST_CASE("the model files a call had mapped become --mapped-weights, never their path") {
  const int64_t kMiB = 1 << 20;
  // Two shards of a Hugging Face model (one by its hub cache's snapshot link) and a .gguf: their
  // sizes summed, rounded up to whole MiB; a file that is not a weights file by its name is not counted.
  const int64_t a = 9988000000, b = 5300000001, g = 3 * kMiB;
  const json doc = with_mapped_files(json::array(
      {{{"path", "/home/u/.cache/huggingface/hub/models--Qwen--Qwen-Image/snapshots/75e0b4/transformer/"
                 "diffusion_pytorch_model-00001-of-00002.safetensors"},
        {"bytes", a},
        {"resident_bytes", 9000000000}},
       {{"path", "/data/model-00002-of-00002.SAFETENSORS"}, {"bytes", b}, {"resident_bytes", nullptr}},
       {{"path", "/data/dataset.arrow"}, {"bytes", 50000000000}, {"resident_bytes", 4096}},
       {{"path", "/data/small.gguf"}, {"bytes", g}, {"resident_bytes", 0}}}));
  const WorkloadFile w = parse_workload_file(doc.dump(), "w.json");
  const CapturedCall& c = w.calls[0];
  CHECK(c.mem_free == 1200000000);
  CHECK(c.cached == 60000000000);
  CHECK(c.rss_file == 30000000000);
  REQUIRE(c.mapped_files);
  REQUIRE(c.mapped_files->size() == 4);
  CHECK((*c.mapped_files)[0].resident_bytes == 9000000000);
  CHECK_FALSE((*c.mapped_files)[1].resident_bytes);
  CHECK(mapped_weights_bytes(c) == a + b + g);
  const CallReplay r = replay_call(w, 0);
  const int64_t mib = (a + b + g + kMiB - 1) / kMiB;
  CHECK(option_value(r.context, "--mapped-weights") == std::to_string(mib) + "M");
  CHECK(option_value(r.context, "--weights-mapping") == "keep");
  CHECK(option_value(r.problem, "--mapped-weights").empty());
  for (const DerivedOption& d : r.context) {
    CHECK(d.value.find('/') == std::string::npos);  // never the user's file
    CHECK_FALSE(d.why.empty());
  }
  // repro's own parser takes the value (a unit is required), and the replay's run has it.
  CHECK(parse_mapped_weights(std::to_string(mib) + "M").bytes == mib * kMiB);
  CHECK(parse_mapped_weights(std::to_string(mib) + "M").file.empty());
  const std::string dir = test_util::temp_dir("workload_weights");
  const std::string path = dir + "/workload.json";
  std::ofstream(path) << doc.dump();
  const RunOptions o = parsed({"--workload-file", path});
  CHECK(o.settings.weights.bytes == mib * kMiB);
  CHECK(o.settings.weights.file.empty());
  CHECK(o.settings.weights.mapping == WeightsMapping::keep);
  CHECK(std::find(o.argv.begin(), o.argv.end(), "--mapped-weights") != o.argv.end());
  // The command line's own size wins; --call-only leaves the process's context out, the weights with it.
  CHECK(parsed({"--workload-file", path, "--mapped-weights", "1G"}).settings.weights.bytes == (int64_t{1} << 30));
  CHECK(parsed({"--workload-file", path, "--call-only"}).settings.weights.bytes == 0);
  test_util::remove_tree(dir);
  // The weights' GPU copies come out of the ballast: the replay's GPU holds what the process held.
  json held = doc;
  held["calls"][0]["context"]["memory_allocated"] = a + b + g + 40 * kMiB;
  const WorkloadFile wh = parse_workload_file(held.dump(), "w.json");
  const int64_t rest = wh.calls[0].memory_allocated - wh.calls[0].query.bytes() - wh.calls[0].key.bytes() -
                       wh.calls[0].value.bytes() - (a + b + g);
  CHECK(option_value(replay_call(wh, 0).context, "--ballast") == std::to_string(rest) + "B");
  // Weights larger than what PyTorch held on the GPU: no ballast, and a warning that the replay copies them all.
  bool warned = false;
  for (const std::string& x : r.approximations) warned = warned || x.find("the mapped weight files") == 0;
  CHECK(warned);
  CHECK(option_value(r.context, "--ballast").empty());
}

TEST_CASE("a capture without mapped model files derives no --mapped-weights") {
  // An older capture (no host keys), files mapped but none a model's, none at all, and /proc unread.
  const WorkloadFile older = load_workload_file(kFixture);
  CHECK_FALSE(older.calls[0].mapped_files);
  CHECK_FALSE(older.calls[0].mem_free);
  for (const json& files : {json(nullptr), json::array(),
                            json::array({{{"path", "/data/train-00000.arrow"}, {"bytes", 80000000000}, {"resident_bytes", 1}},
                                         {{"path", "/data/safetensors"}, {"bytes", 5000000000}, {"resident_bytes", 1}},
                                         {{"path", "/data/weights.bin.lock"}, {"bytes", 5000000000}, {"resident_bytes", 1}}})}) {
    INFO(files.dump());
    for (const WorkloadFile& w : {older, parse_workload_file(with_mapped_files(files).dump(), "w.json")}) {
      const CallReplay r = replay_call(w, 0);
      CHECK(option_value(r.context, "--mapped-weights").empty());
      CHECK(option_value(r.context, "--weights-mapping").empty());
      CHECK(mapped_weights_bytes(w.calls[0]) == 0);
    }
  }
  json nulls = with_mapped_files(nullptr);
  for (const char* key : {"mem_free", "cached", "rss_file"}) nulls["calls"][0]["context"][key] = nullptr;
  const WorkloadFile w = parse_workload_file(nulls.dump(), "w.json");
  CHECK_FALSE(w.calls[0].mem_free);
  CHECK_FALSE(w.calls[0].mapped_files);
  CHECK(is_weights_file("/m/a.safetensors"));
  CHECK(is_weights_file("/m/pytorch_model.bin"));
  CHECK(is_weights_file("/m/x.PT"));
  CHECK(is_weights_file("/m/x.pth"));
  CHECK(is_weights_file("/m/x.ckpt"));
  CHECK(is_weights_file("/m/x.gguf"));
  CHECK_FALSE(is_weights_file("/m/.bin"));
  CHECK_FALSE(is_weights_file("/m.bin/x"));
  CHECK_FALSE(is_weights_file("/m/x.pt.tmp"));
}

TEST_CASE("derived options: the command line's win, --inputs decides the shapes, a scenario its memory") {
  const RunOptions plain = parsed({"--workload-file", kFixture});
  const CapturedCall c = load_workload_file(kFixture).calls[0];
  CHECK(plain.problem.q_len == c.query.shape[2]);
  CHECK(plain.problem.mask_pattern == MaskPattern::text_padding);
  CHECK(plain.settings.alloc == AllocKind::device);
  CHECK(plain.workload_file == kFixture);
  // The run's command line names every derived option, for its JSON and for children.
  CHECK(std::find(plain.argv.begin(), plain.argv.end(), "--text-padding") != plain.argv.end());
  const RunOptions shorter = parsed({"--workload-file", kFixture, "-L", "16"});
  CHECK(shorter.problem.q_len == 16);
  CHECK(shorter.problem.kv_len == c.key.shape[2]);
  const RunOptions masked = parsed({"--workload-file", kFixture, "--mask", "float"});
  CHECK(masked.problem.mask == MaskKind::additive);  // the whole mask group is the command line's
  const RunOptions scenario = parsed({"--workload-file", kFixture, "--scenario", "2", "--full"});
  CHECK(scenario.settings.alloc == AllocKind::managed);  // scenario 2 sets up migrating memory
  const RunOptions call_only = parsed({"--workload-file", kFixture, "--call-only"});
  CHECK(call_only.settings.layers == 1);
  CHECK(call_only.settings.alloc_timing == AllocTiming::upfront);
}

// Masks that are not text padding, a causal call, a scale, dropout and another backend: each
// replayed as an option, or said to be approximated.
TEST_CASE("a captured call's mask, causality, scale, dropout and backend become options or approximations") {
  json doc = fixture();
  json& call = doc["calls"][0];
  call["mask"] = {{"kind", "float"}, {"shape", {2, 4, 128, 128}}, {"dtype", "float32"}, {"masked_fraction", 0.25},
                  {"pattern", "other"}, {"text_tokens", nullptr}, {"text_valid", nullptr}};
  call["scale"] = 0.5;
  call["dropout_p"] = 0.1;
  call["backend"] = "flash";
  const CallReplay r = replay_call(parse_workload_file(doc.dump(), "w.json"), 0);
  CHECK(option_value(r.problem, "--mask") == "float");
  CHECK(option_value(r.problem, "--mask-dims") == "BxH");
  CHECK(option_value(r.problem, "--scale") == "0.5");
  CHECK(option_value(r.problem, "--dropout") == "0.10000000000000001");
  std::string approximations;
  for (const std::string& a : r.approximations) approximations += a + "\n";
  CHECK(approximations.find("the mask is replayed as random float values (0.250 of it masked") != std::string::npos);
  CHECK(approximations.find("PyTorch would run this call on its flash backend") != std::string::npos);
  // One mask per batch entry, shared by the heads: Bx1. A causal call without a mask tensor.
  call["mask"]["shape"] = {2, 1, 128, 128};
  CHECK(option_value(replay_call(parse_workload_file(doc.dump(), "w.json"), 0).problem, "--mask-dims") == "Bx1");
  call["mask"] = nullptr;
  call["is_causal"] = true;
  CHECK(option_value(replay_call(parse_workload_file(doc.dump(), "w.json"), 0).problem, "--mask") == "causal");
}

TEST_CASE("bad workload files: one line naming the file and the key") {
  const json good = fixture();
  CHECK(error_of(good).empty());
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& d) { d.erase("calls"); }, "w.json: calls: missing"},
      {[](json& d) { d["format"] = "other"; }, "w.json: format: not sdpa-repro-workload"},
      {[](json& d) { d["format_version"] = 2; }, "format_version: this harness reads version 1"},
      {[](json& d) { d["calls"] = json::array(); }, "calls: no call was captured"},
      {[](json& d) { d["calls"][0]["id"] = 3; }, "calls[0].id: is 3, but it is call 0 of the list"},
      {[](json& d) { d["calls"][0]["query"]["shape"] = {1, 2, 3}; }, "calls[0].query.shape: expected 4 integers, not 3"},
      {[](json& d) { d["calls"][0]["key"]["dtype"] = "int8"; }, "calls[0].key.dtype: 'int8' is not one of"},
      {[](json& d) { d["calls"][0]["dropout_p"] = "0.1"; }, "calls[0].dropout_p: expected a number"},
      {[](json& d) { d["calls"][0]["mask"]["text_valid"] = {99, 1}; }, "calls[0].mask.text_valid[0]: more valid text keys"},
      {[](json& d) { d["calls"][0]["context"].erase("memory_allocated"); }, "calls[0].context.memory_allocated: missing"},
      {[](json& d) { d["allocator"]["kind"] = 7; }, "allocator.kind: expected a string"},
      {[](json& d) { d["calls"][0]["context"]["mem_free"] = "1G"; }, "calls[0].context.mem_free: expected an integer"},
      {[](json& d) { d["calls"][0]["context"]["cached"] = -1; }, "calls[0].context.cached: -1 is below 0"},
      {[](json& d) { d["calls"][0]["context"]["rss_file"] = 1.5; }, "calls[0].context.rss_file: expected an integer"},
      {[](json& d) { d["calls"][0]["context"]["mapped_files"] = "/m/a.safetensors"; },
       "calls[0].context.mapped_files: expected a list"},
      {[](json& d) { d["calls"][0]["context"]["mapped_files"] = {7}; }, "calls[0].context.mapped_files[0]: expected an object"},
      {[](json& d) { d["calls"][0]["context"]["mapped_files"] = {{{"bytes", 1}, {"resident_bytes", 1}}}; },
       "calls[0].context.mapped_files[0].path: missing"},
      {[](json& d) { d["calls"][0]["context"]["mapped_files"] = {{{"path", ""}, {"bytes", 1}, {"resident_bytes", 1}}}; },
       "calls[0].context.mapped_files[0].path: expected a file's path"},
      {[](json& d) {
         d["calls"][0]["context"]["mapped_files"] = {{{"path", "/m/a.safetensors"}, {"bytes", "9G"}, {"resident_bytes", 1}}};
       },
       "calls[0].context.mapped_files[0].bytes: expected an integer"},
      {[](json& d) {
         d["calls"][0]["context"]["mapped_files"] = {{{"path", "/m/a.safetensors"}, {"bytes", 1}, {"resident_bytes", false}}};
       },
       "calls[0].context.mapped_files[0].resident_bytes: expected an integer"},
      {[](json& d) {
         d["calls"][0]["context"]["mapped_files"] = {{{"path", "/m/a.safetensors"}, {"bytes", -5}, {"resident_bytes", 1}}};
       },
       "calls[0].context.mapped_files[0].bytes: -5 is below 0"},
  };
  for (const auto& [change, expected] : cases) {
    json doc = good;
    change(doc);
    const std::string error = error_of(doc);
    INFO(error);
    CHECK(error.find(expected) != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
  }
  // Not JSON: a syntax error, and a number past a double's range (found by fuzz_workload_file: it
  // escaped as a JSON library exception, and repro died of it).
  for (const char* text : {"{not json", "{\"total_calls\": 13336310E792}"}) {
    CHECK_THROWS_WITH_AS(parse_workload_file(text, "w.json"), doctest::Contains("--workload-file w.json: not JSON"), InputError);
  }
  // A call the harness does not compute is refused when it is replayed.
  json f64 = good;
  for (const char* t : {"query", "key", "value"}) f64["calls"][0][t]["dtype"] = "float64";
  CHECK_THROWS_WITH_AS(replay_call(parse_workload_file(f64.dump(), "w.json"), 0),
                       doctest::Contains("float64: the harness computes bf16, fp16 and fp32"), InputError);
  CHECK_THROWS_WITH_AS(replay_call(parse_workload_file(good.dump(), "w.json"), 5),
                       doctest::Contains("--call 5: w.json has calls 0 to 1"), InputError);
  // Weight files whose sizes add up past what any capture holds are refused, not summed past int64.
  json huge = with_mapped_files(json::array());
  for (int i = 0; i < 3; ++i) {
    huge["calls"][0]["context"]["mapped_files"].push_back(
        {{"path", "/m/" + std::to_string(i) + ".safetensors"}, {"bytes", INT64_MAX - 10}, {"resident_bytes", nullptr}});
  }
  CHECK_THROWS_WITH_AS(replay_call(parse_workload_file(huge.dump(), "w.json"), 0),
                       doctest::Contains("w.json: call 0: the mapped weight files add up to more than 2^50 bytes"), InputError);
}

TEST_CASE("the real binary replays a captured call, and refuses bad files with exit 2 and one line") {
  const auto plan = test_util::run_program({SDPA_REPRO_BINARY, "--workload-file", kFixture, "--plan"});
  CHECK(plan.exit_code == 0);
  CHECK(plan.out.find("mask=bool(text padding)") != std::string::npos);
  CHECK(plan.out.find("layers=2 retain=autograd") != std::string::npos);
  CHECK(plan.err.find("repro: warning: replay: Q is laid out") != std::string::npos);
  const std::string dir = test_util::temp_dir("workload");
  std::ofstream(dir + "/bad.json") << "{\"format\": \"sdpa-repro-workload\"}";
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--workload-file", dir + "/bad.json"}, "repro: error: --workload-file " + dir + "/bad.json: format_version: missing"},
           {{"--workload-file", dir + "/none.json"}, "cannot be read"},
           {{"--workload-file", kFixture, "--call", "7"}, "--call 7: "},
           {{"--call", "1"}, "--call: it selects from a --workload-file"},
           {{"--workload-file", kFixture, "--workload", "qwen-image-512"}, "one workload at a time"}}) {
    const auto r = test_util::run_program([&] {
      std::vector<std::string> a{SDPA_REPRO_BINARY};
      a.insert(a.end(), args.begin(), args.end());
      return a;
    }());
    INFO(r.err);
    CHECK(r.exit_code == kExitUsage);
    CHECK(r.err.find(expected) != std::string::npos);
    CHECK(test_util::lines_of(r.err).size() == 1);
  }
  // A report takes the file too: its commands name the derived options.
  const auto report = test_util::run_program(
      {SDPA_REPRO_BINARY, "report", "--scenario", "2", "--workload-file", kFixture, "--out", dir + "/report", "--no-run"});
  INFO(report.err);
  CHECK(report.exit_code == 0);
  CHECK(test_util::file_text(dir + "/report/REPORT.md").find("--text-padding") != std::string::npos);
  test_util::remove_tree(dir);
}

TEST_CASE("conditional faults: @S>=N and @alloc=KIND arm a fault only where they hold") {
  const FaultSpec f = parse_fault_spec("hang:softmax@S>=2048@alloc=managed");
  REQUIRE(f.only_sizes.size() == 1);
  CHECK(f.only_sizes[0].size == 'S');
  CHECK(f.only_sizes[0].min == 2048);
  CHECK(f.only_alloc == "managed");
  CHECK(fault_spec_string(f) == "hang:softmax@S>=2048@alloc=managed");
  const std::string fault = "hang:softmax@S>=2048@alloc=managed";
  CHECK(parsed({"-S", "2048", "--inject", fault}).inject_armed);
  CHECK(parsed({"-S", "4096", "--inject", fault}).inject_armed);
  CHECK_FALSE(parsed({"-S", "2047", "--inject", fault}).inject_armed);
  CHECK_FALSE(parsed({"-S", "4096", "--alloc", "device", "--inject", fault}).inject_armed);
  for (const char* size : {"B", "H", "L", "E"}) {
    const std::string spec = std::string("hang:softmax@") + size + ">=3";
    CHECK_FALSE(parsed({"-b", "2", "--heads", "2", "-L", "2", "-E", "2", "--inject", spec}).inject_armed);
    CHECK(parsed({"-b", "4", "--heads", "4", "-L", "4", "-E", "4", "--inject", spec}).inject_armed);
  }
  for (const auto& [spec, why] : std::vector<std::pair<std::string, std::string>>{
           {"hang:softmax@S>=0", "@S>= needs a positive number"},
           {"hang:softmax@S>=1@S>=2", "@S>= given twice"},
           {"hang:softmax@alloc=gpu", "@alloc=gpu is not an --alloc kind"},
           {"hang:softmax@alloc=device@alloc=managed", "@alloc given twice"},
           {"hang:softmax@Q>=4", "unknown condition '@Q>=4'"}}) {
    CHECK_THROWS_WITH_AS(parse_fault_spec(spec), doctest::Contains(why.c_str()), InputError);
  }
}

}  // TEST_SUITE
