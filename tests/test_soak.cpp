// test_soak.cpp: the soak verdict (--sample-every): flat within 1 MiB after warm-up, exactly for
// the allocation count.
#include <doctest/doctest.h>

#include "repro/run/soak.h"

using namespace sdpa;

namespace {
MemorySample sample(int64_t calls, double gpu_free, double rss, int64_t allocations) {
  MemorySample m;
  m.calls = calls;
  m.gpu_free_mib = gpu_free;
  m.rss_mib = rss;
  m.live_allocations = allocations;
  return m;
}
}  // namespace

TEST_SUITE("soak") {
  TEST_CASE("flat memory passes; the baseline is the first sample, after warm-up") {
    const SoakVerdict v = judge_soak({sample(100, 80000, 500, 15), sample(200, 80000.2, 500.9, 15), sample(300, 79999.5, 500.3, 15)});
    CHECK(v.flat);
    CHECK(v.gpu_free_drift_mib == doctest::Approx(0.5));
    CHECK(v.rss_drift_mib == doctest::Approx(0.9));
    CHECK(v.summary.rfind("flat after warm-up over calls 100-300", 0) == 0);
  }

  TEST_CASE("growth beyond 1 MiB, or a changed allocation count, is GROWING") {
    CHECK_FALSE(judge_soak({sample(100, 80000, 500, 15), sample(200, 79998.5, 500, 15)}).flat);  // GPU memory taken
    CHECK_FALSE(judge_soak({sample(100, 80000, 500, 15), sample(200, 80000, 501.5, 15)}).flat);  // RSS grew
    const SoakVerdict v = judge_soak({sample(100, 80000, 500, 15), sample(200, 80000, 500, 16)});
    CHECK_FALSE(v.flat);
    CHECK(v.allocation_drift == 1);
    CHECK(v.summary.rfind("GROWING", 0) == 0);
  }

  TEST_CASE("the baseline is the first sample after a tenth of the calls: warm-up growth before it is not judged") {
    // Growth in calls 10-90 (under a tenth of 1000) is warm-up; flat from call 100 on passes.
    std::vector<MemorySample> samples = {sample(10, 80000, 500, 15), sample(90, 79990, 510, 17)};
    for (int64_t c = 100; c <= 1000; c += 100) samples.push_back(sample(c, 79990, 510.2, 17));
    const SoakVerdict v = judge_soak(samples);
    CHECK(v.flat);
    CHECK(v.summary.rfind("flat after warm-up over calls 100-1000", 0) == 0);
    // The same growth after the tenth is judged.
    samples.push_back(sample(1100, 79990, 512, 17));
    CHECK_FALSE(judge_soak(samples).flat);
  }

  TEST_CASE("one sample cannot be judged, and says so") {
    const SoakVerdict v = judge_soak({sample(100, 80000, 500, 15)});
    CHECK(v.flat);
    CHECK(v.summary.find("not judged") == 0);
  }

  TEST_CASE("the resident set of this process is readable and plausible") {
    const double rss = resident_set_mib();
    CHECK(rss > 1.0);
    CHECK(rss < 1e6);
  }
}
