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
#include "repro/common/text.h"
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

// The fixture's call 0 with `loaded_files` as a newer capture records them.
json with_loaded_files(const json& files) {
  json doc = with_mapped_files(json::array());
  doc["calls"][0]["context"]["loaded_files"] = files;
  return doc;
}

json loaded_file(const std::string& path, int64_t bytes, const std::string& how, bool mapped, const json& cached) {
  return {{"path", path}, {"bytes", bytes}, {"how", how}, {"mapped", mapped}, {"cached_bytes", cached},
          {"cached_by", cached.is_null() ? json(nullptr) : json("cachestat")}};
}

const std::string kTwinFixtures = std::string(WORKLOAD_FIXTURE_DIR) + "/trainer_twin";

// The variants of tests/trainer_twin.py that tests/run_trainer_twin.py captures, each a folder of
// kTwinFixtures: whether its blocks are checkpointed, and whether its weights were still mapped.
struct TwinVariant {
  const char* name;
  bool checkpointed, mapped;
};
const TwinVariant kTwinVariants[] = {
    {"checkpointing", true, false}, {"reentrant", true, false}, {"no-checkpointing", false, false}, {"mapped", true, true}};

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
  // A call's phase and retention, the recomputations of a step, the files loads read: optional, typed.
  json newer = with_loaded_files(json::array({loaded_file("/m/a.safetensors", 5, "safetensors", false, 8192),
                                  loaded_file("/m/b.bin", 5, "open", true, nullptr)}));
  newer["recomputed_per_step"] = 2;
  newer["calls"][0]["phase"] = "recompute";
  newer["calls"][0]["retention"] = "checkpoint";
  CHECK(sdpa_test::schema_errors(schemas, "workload.schema.json", newer).empty());
  for (const auto& change : std::vector<std::function<void(json&)>>{
           [](json& d) { d["recomputed_per_step"] = -1; },
           [](json& d) { d["calls"][0]["phase"] = "backward"; },
           [](json& d) { d["calls"][0]["retention"] = "checkpointing"; },
           [](json& d) { d["calls"][0]["context"]["loaded_files"][0]["how"] = "mmap"; },
           [](json& d) { d["calls"][0]["context"]["loaded_files"][0]["cached_by"] = "fincore"; },
           [](json& d) { d["calls"][0]["context"]["loaded_files"][0].erase("mapped"); },
           [](json& d) { d["calls"][0]["context"]["loaded_files"][0]["cached_bytes"] = -4096; }}) {
    json broken = newer;
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
  CHECK(captured_weights(c).bytes == a + b + g);
  CHECK(captured_weights(c).mapped);
  CHECK_FALSE(captured_weights(c).cached_bytes);  // mappings give resident pages, not the page cache
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
  for (const std::string& x : r.approximations) warned = warned || x.find("the model's weight files") == 0;
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
      CHECK(captured_weights(w.calls[0]).bytes == 0);
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
                       doctest::Contains("w.json: call 0: the model's weight files add up to more than 2^50 bytes"), InputError);
}

TEST_CASE("a key the format does not have is refused with the key it most likely meant") {
  // A misspelt key would otherwise be read as absent: a capture's mapped files, its retention or its
  // steps left out of the replay without a word.
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& d) { d["calls"][0]["context"]["mapped_file"] = json::array(); },
       "w.json: calls[0].context.mapped_file: not a key of this format (did you mean mapped_files?)"},
      {[](json& d) { d["calls_per_stepp"] = 2; }, "w.json: calls_per_stepp: not a key of this format (did you mean calls_per_step?)"},
      {[](json& d) { d["calls"][0]["retension"] = "checkpoint"; }, "calls[0].retension: not a key of this format (did you mean retention?)"},
      {[](json& d) { d["calls"][0]["query"]["strides"] = {1, 2, 3, 4}; }, "calls[0].query.strides: not a key of this format (did you mean stride?)"},
      {[](json& d) { d["calls"][0]["mask"]["text_valids"] = {1}; }, "calls[0].mask.text_valids: not a key of this format (did you mean text_valid?)"},
      {[](json& d) { d["allocator"]["details"] = ""; }, "allocator.details: not a key of this format (did you mean detail?)"},
      {[](json& d) { d["environment"]["PYTORCH_ALLOC_CONF"] = nullptr; }, "environment.PYTORCH_ALLOC_CONF: not a key of this format (did you mean PYTORCH_CUDA_ALLOC_CONF?)"},
      {[](json& d) { d["captured"]["device"]["uuid"] = "GPU-1"; },
       "captured.device.uuid: not a key of this format (its keys here: name, capability, total_memory)"},
      {[](json& d) { d["captured"]["host"] = "x"; }, "captured.host: not a key of this format (its keys here: by, utc, command, torch, cuda, device)"},
      {[](json& d) {
         d["calls"][0]["context"]["loaded_files"] = {{{"path", "/m/a.safetensors"}, {"bytes", 1}, {"how", "safetensors"},
                                                      {"mapped", false}, {"cached_bytes", nullptr}, {"cached_by", nullptr},
                                                      {"cache_bytes", 1}}};
       },
       "calls[0].context.loaded_files[0].cache_bytes: not a key of this format (did you mean cached_bytes?)"},
  };
  for (const auto& [change, expected] : cases) {
    json doc = fixture();
    change(doc);
    const std::string error = error_of(doc);
    INFO(error);
    CHECK(error.find(expected) != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
  }
}

TEST_CASE("numbers in a workload file are quoted as they were typed") {
  // The value as the parser holds it prints otherwise (1e19 as 1e+19, 2.50 as 2.5), and a number
  // past int64 wrapped to a negative one that was then "below 0".
  const auto typed = [](const std::function<void(json&)>& place, const std::string& text) {
    json doc = fixture();
    place(doc);  // puts the string "@N@" where the number goes
    std::string file = doc.dump();
    file.replace(file.find("\"@N@\""), 5, text);
    try {
      parse_workload_file(file, "w.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto mapped_bytes = [](json& d) {
    d["calls"][0]["context"]["mapped_files"] = {{{"path", "/m/a.safetensors"}, {"bytes", "@N@"}, {"resident_bytes", 1}}};
  };
  CHECK(typed(mapped_bytes, "1e19").find("calls[0].context.mapped_files[0].bytes: expected an integer, not 1e19") != std::string::npos);
  CHECK(typed(mapped_bytes, "10000000000000000000")
            .find("calls[0].context.mapped_files[0].bytes: 10000000000000000000 is past the largest integer the format holds") !=
        std::string::npos);
  CHECK(typed(mapped_bytes, "-5").find("mapped_files[0].bytes: -5 is below 0") != std::string::npos);
  CHECK(typed([](json& d) { d["calls"][0]["count"] = "@N@"; }, "2.50").find("calls[0].count: expected an integer, not 2.50") !=
        std::string::npos);
  CHECK(typed([](json& d) { d["calls"][0]["dropout_p"] = "@N@"; }, "-0.50")
            .find("calls[0].dropout_p: -0.50 is not a finite number of at least 0") != std::string::npos);
  CHECK(typed([](json& d) { d["calls"][0]["is_causal"] = "@N@"; }, "1E0").find("calls[0].is_causal: expected true or false, not 1E0") !=
        std::string::npos);
}

TEST_CASE("the files a process's loaders read become --mapped-weights, mapped or not as at the call") {
  const int64_t kMiB = 1 << 20, a = 9988000000, b = 538970296;
  const auto replay = [](const json& doc) { return replay_call(parse_workload_file(doc.dump(), "w.json"), 0); };
  // Two shards safetensors read, no longer mapped, all their pages cached: unmap, nothing approximated.
  const json unmapped = with_loaded_files(json::array({loaded_file("/m/t/a.safetensors", a, "safetensors", false, a + 3000),
                                           loaded_file("/m/te/model.safetensors", b, "safetensors", false, b)}));
  const CapturedWeights w = captured_weights(parse_workload_file(unmapped.dump(), "w.json").calls[0]);
  CHECK(w.bytes == a + b);
  CHECK(w.files == 2);
  CHECK_FALSE(w.mapped);
  CHECK(w.cached_bytes == a + b);  // whole pages past a file's end are not its bytes
  CHECK(w.names == "a.safetensors, model.safetensors");
  const CallReplay r = replay(unmapped);
  CHECK(option_value(r.context, "--mapped-weights") == std::to_string((a + b + kMiB - 1) / kMiB) + "M");
  CHECK(option_value(r.context, "--weights-mapping") == "unmap");
  for (const std::string& x : r.approximations) CHECK(x.find("in the page cache at the call") == std::string::npos);
  // One of them still mapped, and among mapped_files too: keep, each file counted once.
  json kept = with_loaded_files(json::array({loaded_file("/m/t/a.safetensors", a, "safetensors", true, a),
                                 loaded_file("/m/te/model.safetensors", b, "safetensors", false, b)}));
  kept["calls"][0]["context"]["mapped_files"] = {{{"path", "/m/t/a.safetensors"}, {"bytes", a}, {"resident_bytes", 4096}}};
  CHECK(option_value(replay(kept).context, "--weights-mapping") == "keep");
  CHECK(captured_weights(parse_workload_file(kept.dump(), "w.json").calls[0]).bytes == a + b);
  // A loader's file counts whatever its name; a file only mapped or open, by its name.
  const json named = with_loaded_files(json::array({loaded_file("/m/weights.data", 100 * kMiB, "torch.load", false, nullptr),
                                        loaded_file("/d/train.arrow", 800 * kMiB, "mapping", true, 0),
                                        loaded_file("/m/extra.safetensors", 64 * kMiB, "open", false, 0)}));
  const CapturedWeights n = captured_weights(parse_workload_file(named.dump(), "w.json").calls[0]);
  CHECK(n.bytes == 164 * kMiB);
  CHECK_FALSE(n.mapped);
  CHECK_FALSE(n.cached_bytes);  // one of them unmeasured: the sum is unknown
  // Partly evicted: the replay's load leaves all of it cached, and says so.
  const json evicted = with_loaded_files(json::array({loaded_file("/m/t/a.safetensors", a, "safetensors", false, a / 2)}));
  bool warned = false;
  for (const std::string& x : replay(evicted).approximations) warned = warned || x.find("only 4.99 GB of the model files' 9.99 GB") == 0;
  CHECK(warned);
  // Bad records: one line naming the key.
  for (const auto& [file, expected] : std::vector<std::pair<json, std::string>>{
           {loaded_file("/m/a.safetensors", 1, "mmap", false, nullptr),
            "calls[0].context.loaded_files[0].how: 'mmap' is not one of safetensors, torch.load, mapping, open"},
           {{{"path", "/m/a.safetensors"}, {"bytes", 1}, {"how", "open"}, {"mapped", false}, {"cached_bytes", 5}, {"cached_by", nullptr}},
            "calls[0].context.loaded_files[0].cached_by: given with cached_bytes"},
           {{{"path", "/m/a.safetensors"}, {"bytes", 1}, {"how", "open"}, {"cached_bytes", nullptr}, {"cached_by", nullptr}},
            "calls[0].context.loaded_files[0].mapped: missing"},
           {loaded_file("", 1, "open", false, nullptr), "calls[0].context.loaded_files[0].path: expected a file's path"}}) {
    const std::string error = error_of(with_loaded_files(json::array({file})));
    INFO(error);
    CHECK(error.find(expected) != std::string::npos);
  }
}

TEST_CASE("a call's phase and retention: recomputations are checkpointed layers, older captures keep requires_grad's meaning") {
  const WorkloadFile older = load_workload_file(kFixture);
  CHECK(older.calls[0].phase == CallPhase::forward);
  CHECK(older.calls[0].retention == Retain::autograd);  // requires_grad
  CHECK(older.calls[1].retention == Retain::none);
  CHECK_FALSE(older.recomputed_per_step);
  json doc = fixture();
  doc["recomputed_per_step"] = 2;
  doc["calls"][1]["phase"] = "recompute";
  doc["calls"][1]["retention"] = "checkpoint";
  const WorkloadFile w = parse_workload_file(doc.dump(), "w.json");
  CHECK(w.recomputed_per_step == 2);
  CHECK(w.calls[1].phase == CallPhase::recompute);
  CHECK(w.calls[1].retention == Retain::checkpoint);
  const CallReplay r = replay_call(w, 1);
  CHECK(option_value(r.context, "--layers") == "2");
  CHECK(option_value(r.context, "--retain") == "checkpoint");
  CHECK(option_value(r.context, "--backward") == "(flag)");
  CHECK(option_value(replay_call(w, 0).context, "--backward").empty());
  doc["calls"][1]["retention"] = "autograd";
  CHECK(error_of(doc).find("calls[1].retention: a call recomputed in the backward pass is a checkpointed layer's") != std::string::npos);
  doc["calls"][1].erase("retention");
  CHECK(error_of(doc).find("calls[1].phase: a call recomputed in the backward pass") != std::string::npos);
  doc["calls"][1]["retention"] = "checkpointing";
  CHECK(error_of(doc).find("calls[1].retention: 'checkpointing' is not one of none|autograd|checkpoint") != std::string::npos);
  doc["calls"][1]["retention"] = "checkpoint";
  doc["calls"][1]["phase"] = "backward";
  CHECK(error_of(doc).find("calls[1].phase: 'backward' is not one of forward, recompute") != std::string::npos);
  doc["calls"][1]["phase"] = "recompute";
  doc["recomputed_per_step"] = -1;
  CHECK(error_of(doc).find("recomputed_per_step: -1 is below 0") != std::string::npos);
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

// The captures of tests/trainer_twin.py (tests/run_trainer_twin.py writes them; their folders are
// kTwinFixtures'): held to what the process was, whatever its sizes, so that a capture of another
// run replaces one and the checks still bite: the blocks are the layers (the recomputations not more
// of them), checkpointing is --retain checkpoint with its backward pass, the weights are the files
// the loads read, unmapped or kept as at the call.
TEST_CASE("the real binary replays a trainer's captures: its blocks as layers, checkpointing, the weights as loaded") {
  const sdpa_test::SchemaFiles schemas = sdpa_test::load_schema_files(SDPA_RESULTS_DIR);
  const int64_t kMiB = 1 << 20;
  for (const TwinVariant& variant : kTwinVariants) {
    const std::string path = kTwinFixtures + "/" + variant.name + "/workload.json";
    INFO(path);
    const json doc = json::parse(test_util::file_text(path));
    CHECK(sdpa_test::schema_errors(schemas, "workload.schema.json", doc).empty());
    const WorkloadFile w = load_workload_file(path);
    REQUIRE(w.calls_per_step);
    const int64_t blocks = *w.calls_per_step;
    CHECK(blocks > 1);
    // Each block's call once in the forward pass, and once again in the backward pass when checkpointed.
    REQUIRE(w.recomputed_per_step);
    CHECK(*w.recomputed_per_step == (variant.checkpointed ? blocks : 0));
    bool recomputed = false;
    for (const CapturedCall& c : w.calls) {
      recomputed = recomputed || c.phase == CallPhase::recompute;
      CHECK(c.retention == (variant.checkpointed ? Retain::checkpoint : Retain::autograd));
    }
    CHECK(recomputed == variant.checkpointed);
    // The weights: the files safetensors read, as the file says them (the transformer's and the text encoder's).
    int64_t loaded = 0, files = 0;
    for (const json& f : doc["calls"][0]["context"]["loaded_files"]) {
      if (f["how"] == "safetensors") loaded += f["bytes"].get<int64_t>(), ++files;
      CHECK(f["mapped"].get<bool>() == variant.mapped);
    }
    CHECK(files == 2);
    const std::string mib = std::to_string((loaded + kMiB - 1) / kMiB);
    const char* mapping = variant.mapped ? "keep" : "unmap";
    for (size_t call = 0; call < w.calls.size(); ++call) {
      const CallReplay r = replay_call(w, static_cast<int>(call));
      CHECK(option_value(r.context, "--layers") == std::to_string(blocks));
      CHECK(option_value(r.context, "--retain") == (variant.checkpointed ? "checkpoint" : "autograd"));
      CHECK(option_value(r.context, "--backward") == (variant.checkpointed ? "(flag)" : ""));
      CHECK(option_value(r.context, "--mapped-weights") == mib + "M");
      CHECK(option_value(r.context, "--weights-mapping") == mapping);
    }
    // The run those options make.
    const RunOptions o = parsed({"--workload-file", path});
    CHECK(o.settings.layers == blocks);
    CHECK(o.spec.retain.value_or("") == (variant.checkpointed ? "checkpoint" : "autograd"));
    CHECK(o.settings.backward == variant.checkpointed);
    CHECK(o.settings.weights.bytes == std::stoll(mib) * kMiB);
    CHECK(o.settings.weights.mapping == (variant.mapped ? WeightsMapping::keep : WeightsMapping::unmap));
    // What a triage's summary says of it.
    const std::string said = captured_conditions(w, 0);
    CHECK(said.find(variant.checkpointed ? "activation checkpointing (" + std::to_string(blocks) + " layers a step, " +
                                               std::to_string(blocks) + " of them recomputed in its backward pass)"
                                         : "autograd's retention (" + std::to_string(blocks) + " layers a step)") !=
          std::string::npos);
    CHECK(said.find(std::string(" in 2 files loaded through the page cache, ") + (variant.mapped ? "still mapped" : "unmapped") +
                    " at the call") != std::string::npos);
    CHECK(said.find("the page cache at the call: ") != std::string::npos);

    // The binary's plan of the replay.
    const auto plan = test_util::run_program({SDPA_REPRO_BINARY, "--workload-file", path, "--plan"});
    INFO(plan.err);
    CHECK(plan.exit_code == 0);
    CHECK(plan.out.find(" layers=" + std::to_string(blocks) + " ") != std::string::npos);
    CHECK(plan.out.find("# the mapped weights: " + format_number("%.2f", static_cast<double>(std::stoll(mib) * kMiB) / 1e9) +
                        " GB of GPU copies") != std::string::npos);
    // The triage's dry run: every step can run.
    const test_util::TempDir dir("twin_triage");
    const auto triage =
        test_util::run_program({SDPA_REPRO_BINARY, "triage", "--dry-run", "--workload-file", path, "--out", dir.path + "/t"});
    INFO(triage.out);
    CHECK(triage.exit_code == 0);
    CHECK(triage.out.find("CANNOT RUN") == std::string::npos);
    CHECK(triage.out.find("ladder-2: ") != std::string::npos);
    // The ladder's rungs: the layers with the capture's retention, its weights as it had them, the
    // backward pass at the last rung alone.
    const auto ladder = test_util::run_program({SDPA_REPRO_BINARY, "report", "--workload-file", path, "--scenario", "2",
                                                "--ladder", "--no-run", "--out", dir.path + "/r"});
    INFO(ladder.err);
    REQUIRE(ladder.exit_code == 0);
    std::vector<std::string> rows;
    for (const std::string& line : test_util::lines_of(test_util::file_text(dir.path + "/r/REPORT.md"))) {
      if (line.rfind("| layers | ", 0) == 0 || line.rfind("| mapped-weights | ", 0) == 0 || line.rfind("| steps | ", 0) == 0 ||
          line.rfind("| backward | ", 0) == 0) {
        rows.push_back(line);
      }
    }
    REQUIRE(rows.size() == 4);
    const std::string retain = std::string("--retain ") + (variant.checkpointed ? "checkpoint" : "autograd");
    CHECK(rows[0].find("--layers " + std::to_string(blocks) + " --layers-fit " + retain + "`") != std::string::npos);
    CHECK(rows[1].find("--mapped-weights " + mib + "M --weights-mapping " + mapping + "`") != std::string::npos);
    CHECK(rows[2].find("--backward") == std::string::npos);
    CHECK(rows[3].find("--backward") != std::string::npos);
  }
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
