// test_stats.cpp: median and percentiles against hand-computed values.
#include <doctest/doctest.h>

#include "math_sdpa/stats.h"

TEST_SUITE("stats") {
  TEST_CASE("median and percentiles") {
    CHECK(sdpa::median({3, 1, 2}) == 2);
    CHECK(sdpa::median({4, 1, 3, 2}) == 2.5);
    CHECK(sdpa::percentile({10, 20, 30, 40, 50}, 10) == doctest::Approx(14));
    CHECK(sdpa::percentile({10, 20, 30, 40, 50}, 90) == doctest::Approx(46));
    CHECK(sdpa::percentile({7}, 90) == 7);
    CHECK(sdpa::median({}) == 0);
  }
}
