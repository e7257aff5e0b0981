// stats.h: order statistics for timing samples (median and percentiles, nearest-rank with
// linear interpolation, as numpy.percentile's default).
#pragma once

#include <algorithm>
#include <vector>

namespace sdpa {

inline double percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  const double pos = q / 100.0 * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
}

inline double median(const std::vector<double>& samples) { return percentile(samples, 50.0); }

}  // namespace sdpa
