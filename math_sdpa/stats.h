// stats.h: statistics for timing samples: order statistics, mean and SD, a bootstrap confidence
// interval of the median, the ratio of two medians with its interval, and Hedges' g.
//
// The benchmark (repro bench) reports medians because call times are skewed (a late launch, a
// clock change, a page fault make the tail long), and compares "fix off" with "fix on" the way
// the original fix benchmark did: a 95% bootstrap confidence interval and Hedges' g as the effect
// size. Host-only; tests/test_stats.cpp checks it against hand-computed values and against
// known answers computed independently with NumPy/SciPy (tools/make_stats_fixture.py ->
// tests/fixtures/stats_known_answers.json).
//
// Conventions, for every function here:
//   - percentile/median of no samples is 0 (the run's table prints 0 for a stage that never ran);
//     everything else of no samples is NaN (JSON writes it as null);
//   - the bootstrap is the percentile bootstrap with kBootstrapResamples resamples drawn by a
//     seeded SplitMix64 generator, so the same samples always give the same interval (on every
//     platform: no std:: distributions, whose output is implementation-defined);
//   - one sample, or identical samples, give an interval of zero width at that value.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sdpa {

// Percentile q (0..100), linear interpolation between closest ranks, as numpy.percentile's
// default. No samples: 0.
inline double percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  const double pos = q / 100.0 * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
}

inline double median(const std::vector<double>& samples) { return percentile(samples, 50.0); }

double mean(const std::vector<double>& samples);    // NaN when empty
double std_dev(const std::vector<double>& samples);  // sample SD (n - 1); 0 for one sample, NaN when empty

// 2000 resamples put the 2.5% and 97.5% points of a 95% interval on the 50th and 1950th of the
// sorted resampled medians: enough that rerunning with another seed moves the ends by well under
// the interval's own width (the original fix benchmark used the same percentile bootstrap).
constexpr int kBootstrapResamples = 2000;
constexpr uint64_t kBootstrapSeed = 0x5d9a2026ull;

struct Interval {
  double low = 0, high = 0;
  bool contains(double x) const { return low <= x && x <= high; }
};

struct BootstrapOptions {
  double confidence = 0.95;
  int resamples = kBootstrapResamples;
  uint64_t seed = kBootstrapSeed;
};

// Percentile-bootstrap interval of the median: the median of `resamples` resamples (n draws with
// replacement) each, and the (1 - confidence)/2 and (1 + confidence)/2 percentiles of those.
Interval bootstrap_median_ci(const std::vector<double>& samples, const BootstrapOptions& options = {});

// median(b) / median(a), and its percentile-bootstrap interval: each resample draws a and b
// independently (they are independent runs), and takes the ratio of their medians. A zero
// median of a gives +inf (or NaN for 0/0); either group empty gives NaN.
struct RatioEstimate {
  double ratio = 0;
  Interval ci;
};
RatioEstimate median_ratio(const std::vector<double>& b, const std::vector<double>& a, const BootstrapOptions& options = {});

// Hedges' g of b against a: (mean(b) - mean(a)) / s_pooled, times the small-sample correction
// J = 1 - 3 / (4 (n_a + n_b) - 9) (Hedges and Olkin's approximation, as the original fix benchmark used), where
// s_pooled^2 = ((n_a - 1) s_a^2 + (n_b - 1) s_b^2) / (n_a + n_b - 2). Positive: b is larger
// (slower, for times). Undefined (NaN) with fewer than 3 samples in all or either group empty;
// with no spread at all it is 0 for equal means and +-inf otherwise.
double hedges_g(const std::vector<double>& a, const std::vector<double>& b);

// What the benchmark reports for one set of samples.
struct SampleSummary {
  int n = 0;
  double median = 0, p10 = 0, p90 = 0, mean = 0, std_dev = 0, min = 0, max = 0;
  Interval median_ci;  // 95% bootstrap interval of the median
};
SampleSummary summarize(const std::vector<double>& samples, const BootstrapOptions& options = {});

}  // namespace sdpa
