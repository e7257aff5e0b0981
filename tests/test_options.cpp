// test_options.cpp: repro's command line: defaults, every option, and every bad input (exit 2
// with one line).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "repro/cli/run_options.h"

using namespace sdpa;

namespace {
ParseResult parse(std::vector<std::string> args) {
  args.insert(args.begin(), "repro");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}
}  // namespace

TEST_SUITE("options") {
  TEST_CASE("defaults: scenario 0 at the original standalone test's shape, bf16, managed memory") {
    const ParseResult r = parse({});
    REQUIRE(r.run);
    const RunOptions& o = r.options;
    CHECK(o.scenario == 0);
    CHECK(o.problem.shape_string() == "B=2 Hq=8 Hkv=8 L=128 S=128 E=64");
    CHECK(o.problem.dtype == DType::bf16);
    CHECK(o.problem.precision == Precision::upcast);
    CHECK(o.problem.mask == MaskKind::none);
    CHECK(o.settings.alloc == AllocKind::managed);
    CHECK(o.fixes.empty());
    CHECK(o.iters == 1);
    CHECK_FALSE(o.check);
    CHECK_FALSE(o.dtype_given);
  }

  TEST_CASE("every option reaches the configuration") {
    const ParseResult r =
        parse({"--scenario", "0", "--dtype", "fp16", "--precision", "native", "-b", "3", "--heads", "12", "--kv-heads",
               "4", "-L", "100", "-S", "77", "-E", "80", "--mask", "bool", "--mask-dims", "BxH", "--dropout", "0.25",
               "--scale", "0.5", "--seed", "99", "--alloc", "device", "--allow-oversubscription", "--iters", "7",
               "--check", "--json", "out.json", "--save-output", "o.npy"});
    REQUIRE(r.run);
    const SdpaProblem& p = r.options.problem;
    CHECK(p.dtype == DType::fp16);
    CHECK(r.options.dtype_given);
    CHECK(p.precision == Precision::native);
    CHECK(p.shape_string() == "B=3 Hq=12 Hkv=4 L=100 S=77 E=80");
    CHECK(p.mask == MaskKind::boolean);
    CHECK(p.mask_per_batch);
    CHECK(p.mask_per_head);
    CHECK(p.dropout_p == 0.25);
    CHECK(p.softmax_scale() == 0.5);
    CHECK(p.seed == 99);
    CHECK(r.options.settings.alloc == AllocKind::device);
    CHECK(r.options.allow_oversubscription);
    CHECK(r.options.iters == 7);
    CHECK(r.options.check);
    CHECK(r.options.json_path == "out.json");
    CHECK(r.options.save_output_path == "o.npy");
    CHECK(r.options.argv.size() == 39);
  }

  TEST_CASE("S and Hkv default to L and Hq; --mask-dims picks the broadcast") {
    const ParseResult r = parse({"-L", "64", "--heads", "4", "--mask", "float", "--mask-dims", "Bx1"});
    REQUIRE(r.run);
    CHECK(r.options.problem.kv_len == 64);
    CHECK(r.options.problem.kv_heads == 4);
    CHECK(r.options.problem.mask == MaskKind::additive);
    CHECK(r.options.problem.mask_per_batch);
    CHECK_FALSE(r.options.problem.mask_per_head);
  }

  TEST_CASE("--seed takes any 64-bit unsigned integer and nothing else") {
    CHECK(parse({"--seed", "0"}).options.problem.seed == 0);
    CHECK(parse({"--seed", "18446744073709551615"}).options.problem.seed == UINT64_MAX);
    for (const char* bad : {"18446744073709551616", "99999999999999999999", "-1", "1e3", "0x10", "12a", "", " 7"}) {
      CAPTURE(bad);
      const ParseResult r = parse({"--seed", bad});
      CHECK_FALSE(r.run);
      CHECK(r.exit_code == kExitUsage);
    }
  }

  TEST_CASE("--help prints the options and exits 0") {
    const ParseResult r = parse({"--help"});
    CHECK_FALSE(r.run);
    CHECK(r.exit_code == 0);
    CHECK(r.message.find("--scenario") != std::string::npos);
    CHECK(r.message.find("--allow-oversubscription") != std::string::npos);
  }

  TEST_CASE("bad command lines exit 2 with one line naming the problem") {
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--batch", "0"}, "batch"},
        {{"--batch", "-3"}, "batch"},
        {{"--heads", "0"}, "heads"},
        {{"--kv-heads", "0"}, "kv-heads"},
        {{"--kv-heads", "-1"}, "kv-heads"},
        {{"-L", "0"}, "q-len"},
        {{"-S", "-1"}, "kv-len"},
        {{"-E", "0"}, "head-dim"},
        {{"--heads", "8", "--kv-heads", "3"}, "multiple"},
        {{"--dropout", "1"}, "dropout"},
        {{"--dropout", "1.5"}, "dropout"},
        {{"--dropout", "-0.1"}, "dropout"},
        {{"--dropout", "nan"}, "dropout"},
        {{"--scale", "inf"}, "scale"},
        {{"--dtype", "fp64"}, "dtype"},
        {{"--dtype", "BF16"}, "dtype"},
        {{"--precision", "half"}, "precision"},
        {{"--mask", "triangle"}, "mask"},
        {{"--mask-dims", "2x2"}, "mask-dims"},
        {{"--alloc", "pinned"}, "alloc"},
        {{"--scenario", "6"}, "scenario"},
        {{"--scenario", "-1"}, "scenario"},
        {{"--iters", "0"}, "iters"},
        {{"--iters", "ten"}, "iters"},
        {{"--batch", "two"}, "batch"},
        {{"--batch", "99999999999999999999999"}, "batch"},
        {{"-L", "4294967296"}, "q-len"},
        {{"--heads", "4", "-L", "2147483647", "-S", "2147483647", "-E", "1"}, "overflow"},
        {{"--seed", "-5"}, "seed"},
        {{"--no-such-option"}, "no-such-option"},
        {{"stray"}, "stray"},
        {{"--batch"}, "batch"},
        {{"--json"}, "json"},
    };
    for (const auto& [args, needle] : cases) {
      std::string joined;
      for (const auto& a : args) joined += a + " ";
      const ParseResult r = parse(args);
      INFO("args: ", joined, "-> ", r.message);
      CHECK_FALSE(r.run);
      CHECK(r.exit_code == kExitUsage);
      CHECK(r.message.find('\n') == std::string::npos);
      CHECK(r.message.rfind("repro: error: ", 0) == 0);
      CHECK(r.message.find(needle) != std::string::npos);
    }
  }
}
