// test_dtype.cpp: host-side bf16/fp16 rounding (must match the device's round-to-nearest-even).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "math_sdpa/dtype.h"

using namespace sdpa;

TEST_SUITE("dtype") {
  TEST_CASE("fp16 known values, rounding, subnormals and overflow") {
    CHECK(float_to_fp16_bits(1.0f) == 0x3C00);
    CHECK(float_to_fp16_bits(-2.0f) == 0xC000);
    CHECK(float_to_fp16_bits(65504.0f) == 0x7BFF);
    CHECK(float_to_fp16_bits(65519.0f) == 0x7BFF);
    CHECK(float_to_fp16_bits(65520.0f) == 0x7C00);  // halfway to 65536 rounds to even: inf
    CHECK(float_to_fp16_bits(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(float_to_fp16_bits(std::ldexp(1.0f, -25)) == 0x0000);  // halfway to the first subnormal: even
    CHECK(float_to_fp16_bits(std::ldexp(1.5f, -25)) == 0x0001);
    CHECK(float_to_fp16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // halfway, even stays
    CHECK(float_to_fp16_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // halfway, odd rounds up
    CHECK(float_to_fp16_bits(-std::numeric_limits<float>::infinity()) == 0xFC00);
    CHECK(std::isnan(fp16_bits_to_float(float_to_fp16_bits(std::nanf("")))));
    CHECK(fp16_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
  }

  TEST_CASE("bf16 known values and rounding") {
    CHECK(float_to_bf16_bits(1.0f) == 0x3F80);
    CHECK(float_to_bf16_bits(-1.0f) == 0xBF80);
    CHECK(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);      // halfway, even stays
    CHECK(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // halfway, odd rounds up
    CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
    CHECK(bf16_bits_to_float(float_to_bf16_bits(-std::numeric_limits<float>::infinity())) ==
          -std::numeric_limits<float>::infinity());
  }

  TEST_CASE("every non-NaN fp16 and bf16 value survives a round trip through float") {
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
      const uint16_t h = static_cast<uint16_t>(bits);
      const float f16 = fp16_bits_to_float(h);
      if (!std::isnan(f16)) REQUIRE(float_to_fp16_bits(f16) == h);
      const float b16 = bf16_bits_to_float(h);
      if (!std::isnan(b16)) REQUIRE(float_to_bf16_bits(b16) == h);
    }
  }

  TEST_CASE("round_to_dtype is idempotent and exact for fp32") {
    for (float x : {0.1f, -3.14159f, 1e-6f, 12345.678f}) {
      CHECK(round_to_dtype(x, DType::fp32) == x);
      for (DType t : {DType::bf16, DType::fp16}) {
        const float r = round_to_dtype(x, t);
        CHECK(round_to_dtype(r, t) == r);
        CHECK(std::fabs(r - x) <= std::fabs(x) * (t == DType::bf16 ? 1.0f / 256 : 1.0f / 2048) + 6e-8f);
      }
    }
  }
}
