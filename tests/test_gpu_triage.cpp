// test_gpu_triage.cpp: `repro triage` end to end on the GPU, no fake child: the four faults of
// triage_known_answers.h, each given to every run of a real triage (sweep, ladder, minimization,
// report), each triage within its --budget, every step it started ending with a result.
//
// Minutes on an H100, so ctest's gpu.triage runs it only with SDPA_LONG_TESTS=1 (it says it
// skipped otherwise). SDPA_TRIAGE_KEEP=DIR keeps each triage's folder there; SDPA_TRIAGE_ONLY=a,b
// runs only those (tools/device_triage.sh splits the four over its calls).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "run_program.h"
#include "triage_known_answers.h"

namespace {

double seconds_of(const std::string& budget) { return std::stod(budget) * (budget.back() == 'm' ? 60 : 1); }

}  // namespace

TEST_SUITE("gpu_triage") {

TEST_CASE("repro triage on the GPU: each known fault found where it is, called what it is, within its budget") {
  const char* keep = std::getenv("SDPA_TRIAGE_KEEP");
  const std::string dir = keep && *keep ? std::string(keep) : test_util::temp_dir("gpu_triage");
  const char* only = std::getenv("SDPA_TRIAGE_ONLY");
  for (const test_util::KnownTriage& k : test_util::known_triages()) {
    if (only && *only && ("," + std::string(only) + ",").find("," + k.name + ",") == std::string::npos) continue;
    CAPTURE(k.name);
    const std::string out = dir + "/" + k.name;
    test_util::remove_tree(out);
    std::vector<std::string> args = {SDPA_REPRO_BINARY, "triage", "--out", out};
    for (const std::string& a : test_util::known_triage_args(k, k.budget)) args.push_back(a);
    // Past its budget by more than the last step's grace and the archive, the triage itself is wrong.
    const double budget_s = seconds_of(k.budget);
    const auto r = test_util::run_program(args, {budget_s + 90, ""});
    const std::string summary = test_util::file_text(out + "/SUMMARY.md"), log = test_util::file_text(out + "/triage.log");
    INFO(r.out << r.err << summary);
    MESSAGE(k.name << ": repro triage --inject " << k.inject << ": exit " << r.exit_code << " after " << r.wall_s
                   << " s of a " << budget_s << " s budget");
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == k.exit_code);
    CHECK(r.wall_s <= budget_s + 30);
    for (const std::string& line : k.said) CHECK_MESSAGE(summary.find(line) != std::string::npos, line);
    for (const std::string& line : k.not_said) CHECK_MESSAGE(summary.find(line) == std::string::npos, line);
    // Every step that started ended with its result: none stopped at its share, none refused.
    CHECK(log.find("stopped at its deadline") == std::string::npos);
    CHECK(summary.find("## Steps that could not run") == std::string::npos);
    CHECK(summary.find("is shorter than its first result needs") == std::string::npos);
  }
  if (!keep || !*keep) test_util::remove_tree(dir);
}

}  // TEST_SUITE
