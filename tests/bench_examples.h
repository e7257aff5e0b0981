// bench_examples.h: made-up benchmark results for the bench and schema tests (test_bench.cpp,
// test_schemas.cpp). The numbers are invented: no benchmark figure belongs in a unit test.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "math_sdpa/path_settings.h"
#include "parse_words.h"
#include "repro/bench/bench.h"

namespace bench_examples {

inline sdpa::BenchParse parse_bench(std::vector<std::string> args) {
  return test_util::parse_as("bench", std::move(args), sdpa::parse_bench_command_line);
}

// Samples 1.00, 1.01, ... as a stand-in for call times.
inline std::vector<double> ramp(int n, double first, double step) {
  std::vector<double> x;
  for (int i = 0; i < n; ++i) x.push_back(first + step * i);
  return x;
}

// 20 calls from `first` ms up, with softmax and entry_sync times, the settings of a plain run.
inline sdpa::BenchSeries series(const char* label, double first) {
  using sdpa::Stage;
  sdpa::BenchSeries s;
  s.label = label;
  s.settings = sdpa::settings_fields(sdpa::PathSettings{});
  s.samples.wall_ms = ramp(20, first, 0.01);
  s.samples.gpu_ms = ramp(20, first * 0.5, 0.005);
  s.samples.event_ms = ramp(20, first * 0.9, 0.01);
  s.samples.stage_ms[static_cast<size_t>(Stage::softmax)] = ramp(20, 0.1, 0.001);
  s.samples.stage_ms[static_cast<size_t>(Stage::entry_sync)] = ramp(20, 0.01, 0.0);
  for (double w : s.samples.wall_ms) s.samples.total_seconds += w / 1e3;
  return s;
}

// `repro bench -n 20 --fix-overhead 1,4 -L 512` on an H200: the path, fix 1 measured (5% slower),
// fix 4 skipped.
inline sdpa::BenchResult overhead_result() {
  sdpa::BenchResult r;
  r.options = parse_bench({"-n", "20", "--fix-overhead", "1,4", "-L", "512"}).options;
  sdpa::DeviceInfo d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.sm_count = 132;
  r.device = d;
  r.l2_bytes = 50 << 20;
  r.input_sets = 8;
  r.input_sets_chosen = true;
  r.bytes_per_call = 23 << 20;
  r.result_tensor = sdpa::ResultTensor::output;
  r.path = series("path", 1.0);
  summarize_series(r.path);
  sdpa::OverheadComparison one;
  one.label = "1";
  one.fixes_b.add(1);
  one.a = series("A", 1.0);
  one.b = series("B", 1.05);
  one.b.fixes = one.fixes_b;
  summarize_comparison(one);
  r.overhead.push_back(one);
  sdpa::OverheadComparison four;
  four.label = "4";
  four.fixes_b.add(4);
  four.skipped = true;
  four.skip_reason = "this GPU does not support stream-ordered memory pools";
  summarize_comparison(four);
  r.overhead.push_back(four);
  return r;
}

}  // namespace bench_examples
