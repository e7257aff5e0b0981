// test_stats.cpp: the benchmark's statistics (math_sdpa/stats.h) against hand-computed values:
// order statistics, mean and SD, Hedges' g, the bootstrap interval of the median and of a ratio
// of medians, and their edge cases (no samples, one sample, identical samples).
#include <doctest/doctest.h>

#include <cmath>

#include "math_sdpa/stats.h"

using sdpa::BootstrapOptions;
using sdpa::Interval;

namespace {

// Deterministic uniform numbers in [0, 1) for the distribution tests (a 64-bit LCG, top bits).
struct Lcg {
  uint64_t state;
  double next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0);
  }
};

std::vector<double> uniform_samples(int n, uint64_t seed) {
  Lcg rng{seed};
  std::vector<double> x(static_cast<size_t>(n));
  for (double& v : x) v = rng.next();
  return x;
}

}  // namespace

TEST_SUITE("stats") {
  TEST_CASE("median and percentiles") {
    CHECK(sdpa::median({3, 1, 2}) == 2);
    CHECK(sdpa::median({4, 1, 3, 2}) == 2.5);
    CHECK(sdpa::percentile({10, 20, 30, 40, 50}, 10) == doctest::Approx(14));
    CHECK(sdpa::percentile({10, 20, 30, 40, 50}, 90) == doctest::Approx(46));
    CHECK(sdpa::percentile({7}, 90) == 7);
    CHECK(sdpa::median({}) == 0);
  }

  TEST_CASE("mean and sample standard deviation") {
    // {2,4,4,4,5,5,7,9}: mean 5, squared deviations 9+1+1+1+0+0+4+16 = 32, s^2 = 32/7.
    CHECK(sdpa::mean({2, 4, 4, 4, 5, 5, 7, 9}) == 5);
    CHECK(sdpa::std_dev({2, 4, 4, 4, 5, 5, 7, 9}) == doctest::Approx(std::sqrt(32.0 / 7.0)));
    CHECK(sdpa::std_dev({3.5}) == 0);
    CHECK(std::isnan(sdpa::mean({})));
    CHECK(std::isnan(sdpa::std_dev({})));
  }

  TEST_CASE("Hedges' g against hand-computed values") {
    // a = {1..5}, b = {3..7}: means 3 and 5, both s^2 = 10/4 = 2.5, so s_pooled = sqrt(2.5)
    // = 1.5811388; d = 2 / 1.5811388 = 1.2649111; J = 1 - 3/(4*10 - 9) = 28/31 = 0.9032258;
    // g = 1.1425003.
    CHECK(sdpa::hedges_g({1, 2, 3, 4, 5}, {3, 4, 5, 6, 7}) == doctest::Approx(1.1425003).epsilon(1e-7));
    // Unequal sizes and variances: a = {2,4,4,4,5,5,7,9} (mean 5, s^2 = 32/7), b = {10,12,14}
    // (mean 12, s^2 = 4): s_pooled^2 = (32 + 8) / 9 = 4.4444, s_pooled = 2.1081851;
    // d = 7 / 2.1081851 = 3.3203915; J = 1 - 3/(4*11 - 9) = 32/35; g = 3.0357866.
    CHECK(sdpa::hedges_g({2, 4, 4, 4, 5, 5, 7, 9}, {10, 12, 14}) == doctest::Approx(3.0357866).epsilon(1e-7));
    // The sign says which is larger: b smaller than a gives the same size, negative.
    CHECK(sdpa::hedges_g({10, 12, 14}, {2, 4, 4, 4, 5, 5, 7, 9}) == doctest::Approx(-3.0357866).epsilon(1e-7));
  }

  TEST_CASE("Hedges' g edge cases") {
    CHECK(std::isnan(sdpa::hedges_g({}, {1, 2, 3})));
    CHECK(std::isnan(sdpa::hedges_g({1, 2}, {})));
    CHECK(std::isnan(sdpa::hedges_g({1}, {2})));                  // no degrees of freedom
    CHECK(sdpa::hedges_g({4, 4, 4}, {4, 4}) == 0);                 // no spread, same mean
    CHECK(sdpa::hedges_g({4, 4, 4}, {5, 5}) == INFINITY);          // no spread, b larger
    CHECK(sdpa::hedges_g({5, 5}, {4, 4, 4}) == -INFINITY);
  }

  TEST_CASE("bootstrap interval of the median: edge cases") {
    const Interval empty = sdpa::bootstrap_median_ci({});
    CHECK(std::isnan(empty.low));
    CHECK(std::isnan(empty.high));
    const Interval one = sdpa::bootstrap_median_ci({0.25});
    CHECK(one.low == 0.25);
    CHECK(one.high == 0.25);
    const Interval same = sdpa::bootstrap_median_ci(std::vector<double>(50, 1.5));
    CHECK(same.low == 1.5);
    CHECK(same.high == 1.5);
  }

  TEST_CASE("bootstrap interval of the median: a small sample by hand") {
    // {1, 2, 3}: a resample's median is 1 when at least two of its three draws are 1: 7 of the
    // 27 equally likely draws (exactly two 1s: 3 places for the other draw x 2 values = 6; three
    // 1s: 1); likewise 3; the other 13 give 2. P(median = 1) = 7/27 = 26% is far above 2.5%, so
    // the 95% interval is [1, 3].
    const Interval ci = sdpa::bootstrap_median_ci({1, 2, 3});
    CHECK(ci.low == 1);
    CHECK(ci.high == 3);
  }

  TEST_CASE("bootstrap interval of the median contains the true median of a known distribution") {
    // 1001 draws from U(0, 1), true median 0.5. The interval's half-width should be near
    // 1.96 * sqrt(0.25 / n) / f(0.5) = 1.96 * 0.0158 = 0.031.
    const auto x = uniform_samples(1001, 42);
    const Interval ci = sdpa::bootstrap_median_ci(x);
    INFO("ci = [", ci.low, ", ", ci.high, "]");
    CHECK(ci.contains(0.5));
    CHECK(ci.contains(sdpa::median(x)));
    CHECK(ci.high - ci.low > 0.02);
    CHECK(ci.high - ci.low < 0.10);
  }

  TEST_CASE("bootstrap intervals cover the true median about 95% of the time") {
    // 200 independent samples of 101 draws from U(0, 1): a 95% interval should miss 0.5 in about
    // 10 of them (binomial SD 3); more than 25 misses means the interval is too narrow.
    int covered = 0;
    for (int trial = 0; trial < 200; ++trial) {
      covered += sdpa::bootstrap_median_ci(uniform_samples(101, 1000 + trial)).contains(0.5);
    }
    INFO("covered ", covered, " of 200");
    CHECK(covered >= 175);
    CHECK(covered <= 200);
  }

  TEST_CASE("the bootstrap is deterministic for a given seed") {
    const auto x = uniform_samples(99, 7);
    const Interval a = sdpa::bootstrap_median_ci(x), b = sdpa::bootstrap_median_ci(x);
    CHECK(a.low == b.low);
    CHECK(a.high == b.high);
    BootstrapOptions other;
    other.seed = 12345;
    const Interval c = sdpa::bootstrap_median_ci(x, other);
    // Another seed moves the ends by far less than the interval's width.
    CHECK(std::fabs(c.low - a.low) < 0.5 * (a.high - a.low));
    CHECK(std::fabs(c.high - a.high) < 0.5 * (a.high - a.low));
  }

  TEST_CASE("ratio of medians with its bootstrap interval") {
    // a ~ U(1, 2) and b ~ 1.2 * U(1, 2), independent, 301 each: the true ratio of medians is
    // 1.2; the interval must contain it and the sample ratio, and exclude 1.
    std::vector<double> a = uniform_samples(301, 3), b = uniform_samples(301, 4);
    for (double& x : a) x = 1.0 + x;
    for (double& x : b) x = 1.2 * (1.0 + x);
    const sdpa::RatioEstimate r = sdpa::median_ratio(b, a);
    INFO("ratio ", r.ratio, " ci [", r.ci.low, ", ", r.ci.high, "]");
    CHECK(r.ratio == doctest::Approx(sdpa::median(b) / sdpa::median(a)));
    CHECK(r.ci.contains(r.ratio));
    CHECK(r.ci.contains(1.2));
    CHECK(r.ci.low > 1.0);  // a 20% difference is resolved at n = 301
    // Identical constant groups: exactly 1 with a point interval.
    const sdpa::RatioEstimate same = sdpa::median_ratio({2, 2, 2}, {2, 2});
    CHECK(same.ratio == 1);
    CHECK(same.ci.low == 1);
    CHECK(same.ci.high == 1);
    const sdpa::RatioEstimate none = sdpa::median_ratio({}, {1.0});
    CHECK(std::isnan(none.ratio));
    CHECK(std::isnan(none.ci.low));
  }

  TEST_CASE("summary of a sample") {
    const sdpa::SampleSummary s = sdpa::summarize({5, 1, 4, 2, 3});
    CHECK(s.n == 5);
    CHECK(s.median == 3);
    CHECK(s.p10 == doctest::Approx(1.4));
    CHECK(s.p90 == doctest::Approx(4.6));
    CHECK(s.mean == 3);
    CHECK(s.std_dev == doctest::Approx(std::sqrt(2.5)));
    CHECK(s.min == 1);
    CHECK(s.max == 5);
    CHECK(s.median_ci.contains(3));
    const sdpa::SampleSummary e = sdpa::summarize({});
    CHECK(e.n == 0);
    CHECK(std::isnan(e.mean));
    CHECK(std::isnan(e.median_ci.low));
  }
}
