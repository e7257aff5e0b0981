// stats.cpp: bootstrap intervals and effect sizes for timing samples (stats.h).
#include "stats.h"

#include <cmath>
#include <limits>

namespace sdpa {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// SplitMix64: tiny, fast, and its output is fixed by its definition, so a given seed draws the
// same resamples on every compiler and platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // An index in [0, n). The modulo bias is below n / 2^64: nothing for sample counts.
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  uint64_t state_;
};

// Median of `scratch` (reordered): the mean of the two middle values for an even count, as
// percentile(…, 50) gives, in linear time.
double median_in_place(std::vector<double>& scratch) {
  const size_t n = scratch.size();
  const size_t mid = n / 2;
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(mid), scratch.end());
  const double upper = scratch[mid];
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(mid));
  return lower + 0.5 * (upper - lower);
}

void resample(const std::vector<double>& from, std::vector<double>& into, SplitMix64& rng) {
  into.resize(from.size());
  for (double& x : into) x = from[rng.below(from.size())];
}

Interval percentile_interval(const std::vector<double>& statistics, double confidence) {
  const double tail = (1.0 - confidence) / 2.0 * 100.0;
  return {percentile(statistics, tail), percentile(statistics, 100.0 - tail)};
}

}  // namespace

double mean(const std::vector<double>& samples) {
  if (samples.empty()) return kNaN;
  double sum = 0;
  for (double x : samples) sum += x;
  return sum / static_cast<double>(samples.size());
}

double std_dev(const std::vector<double>& samples) {
  if (samples.empty()) return kNaN;
  if (samples.size() == 1) return 0.0;
  const double m = mean(samples);
  double ss = 0;
  for (double x : samples) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(samples.size() - 1));
}

Interval bootstrap_median_ci(const std::vector<double>& samples, const BootstrapOptions& options) {
  if (samples.empty()) return {kNaN, kNaN};
  SplitMix64 rng(options.seed);
  std::vector<double> draw, medians(static_cast<size_t>(options.resamples));
  for (double& m : medians) {
    resample(samples, draw, rng);
    m = median_in_place(draw);
  }
  return percentile_interval(medians, options.confidence);
}

RatioEstimate median_ratio(const std::vector<double>& b, const std::vector<double>& a, const BootstrapOptions& options) {
  if (a.empty() || b.empty()) return {kNaN, {kNaN, kNaN}};
  RatioEstimate r;
  r.ratio = median(b) / median(a);
  SplitMix64 rng(options.seed);
  std::vector<double> draw_a, draw_b, ratios(static_cast<size_t>(options.resamples));
  for (double& x : ratios) {
    resample(a, draw_a, rng);
    resample(b, draw_b, rng);
    x = median_in_place(draw_b) / median_in_place(draw_a);
  }
  r.ci = percentile_interval(ratios, options.confidence);
  return r;
}

double hedges_g(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t na = a.size(), nb = b.size();
  if (na == 0 || nb == 0 || na + nb < 3) return kNaN;
  const double sa = std_dev(a), sb = std_dev(b);
  const double df = static_cast<double>(na + nb - 2);
  const double pooled = std::sqrt((static_cast<double>(na - 1) * sa * sa + static_cast<double>(nb - 1) * sb * sb) / df);
  const double diff = mean(b) - mean(a);
  if (pooled == 0) return diff == 0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), diff);
  const double correction = 1.0 - 3.0 / (4.0 * static_cast<double>(na + nb) - 9.0);
  return diff / pooled * correction;
}

SampleSummary summarize(const std::vector<double>& samples, const BootstrapOptions& options) {
  SampleSummary s;
  s.n = static_cast<int>(samples.size());
  if (samples.empty()) {
    s.mean = s.std_dev = s.min = s.max = kNaN;
    s.median_ci = {kNaN, kNaN};
    return s;
  }
  s.median = median(samples);
  s.p10 = percentile(samples, 10);
  s.p90 = percentile(samples, 90);
  s.mean = mean(samples);
  s.std_dev = std_dev(samples);
  s.min = *std::min_element(samples.begin(), samples.end());
  s.max = *std::max_element(samples.begin(), samples.end());
  s.median_ci = bootstrap_median_ci(samples, options);
  return s;
}

}  // namespace sdpa
