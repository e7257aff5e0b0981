// random_inputs.h: the generator of the random Q, K and V. Inlined verbatim into every generated
// reproducer (repro/report/reproducer), so it includes nothing from the harness: the same seed
// gives both programs the same inputs, bit for bit.
//
// splitmix64 and Box-Muller are written out because std::normal_distribution is
// implementation-defined: the same seed must give the same inputs with any compiler and
// standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace sdpa {

struct InputRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0,1)
  double normal() {
    double u1 = 1.0 - uniform();  // (0, 1]
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// Mixed so that nearby seeds (0, 1, 2, ...) start far apart in splitmix64's sequence.
inline InputRng input_rng_for_seed(uint64_t seed) { return InputRng{seed * 0x2545F4914F6CDD1Dull + 1}; }

// n values ~ N(0, 1), each rounded to the run's dtype by round(float) -> float.
template <typename Round> std::vector<float> random_normal(int64_t n, InputRng& rng, Round round) {
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& x : out) x = round(static_cast<float>(rng.normal()));
  return out;
}

}  // namespace sdpa
