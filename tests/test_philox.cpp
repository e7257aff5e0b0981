// test_philox.cpp: Philox4x32-10 against Random123's known-answer vectors (tests/kat_vectors
// of the Random123 distribution, as also quoted by TensorFlow's stateful_random_ops_test.py),
// and the dropout decision built on it.
#include <doctest/doctest.h>

#include <initializer_list>

#include "math_sdpa/philox.h"

using sdpa::Philox4x32;

TEST_SUITE("philox") {
  TEST_CASE("philox4x32_10 matches Random123 known-answer vectors") {
    struct Kat {
      Philox4x32 counter;
      uint32_t key0, key1;
      Philox4x32 expected;
    };
    const Kat kats[] = {
        {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
        {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
         {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
        {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
         {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
    };
    for (const auto& kat : kats) {
      const Philox4x32 got = sdpa::philox4x32_10(kat.counter, kat.key0, kat.key1);
      for (int i = 0; i < 4; ++i) CHECK(got.v[i] == kat.expected.v[i]);
    }
  }

  TEST_CASE("dropout uniforms lie in [0, 1) and keep about 1-p of the elements") {
    const uint64_t n = 1 << 20;
    for (float keep : {0.9f, 0.5f}) {
      uint64_t kept = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const float u = sdpa::dropout_uniform(1234, 7, i);
        REQUIRE(u >= 0.0f);
        REQUIRE(u < 1.0f);
        kept += sdpa::dropout_keep(1234, 7, i, keep);
      }
      // Binomial standard deviation at n = 2^20 is below 0.05%; 0.5% cannot fail by chance.
      CHECK(static_cast<double>(kept) / n == doctest::Approx(keep).epsilon(0.005));
    }
  }

  TEST_CASE("the dropout stream depends on seed, offset and index") {
    CHECK(sdpa::dropout_uniform(1, 0, 5) != sdpa::dropout_uniform(2, 0, 5));
    CHECK(sdpa::dropout_uniform(1, 0, 5) != sdpa::dropout_uniform(1, 1, 5));
    CHECK(sdpa::dropout_uniform(1, 0, 5) != sdpa::dropout_uniform(1, 0, 6));
    CHECK(sdpa::dropout_uniform(1, 0, 5) == sdpa::dropout_uniform(1, 0, 5));
    // Elements 4 apart use different Philox blocks, the high counter word included.
    CHECK(sdpa::dropout_uniform(1, 0, 3) != sdpa::dropout_uniform(1, 0, 3 + (uint64_t{1} << 34)));
  }
}
