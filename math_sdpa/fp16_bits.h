// fp16_bits.h: float <-> fp16 bits with round-to-nearest-even, as the device's __float2half_rn.
// Inlined verbatim into every generated fp16 reproducer (repro/report/reproducer), so it includes
// nothing from the harness: both programs then start from bit-identical inputs.
//
// Written out by hand (no F16C or other x86 intrinsics) so that the inputs are the same on the
// users' aarch64 DGX Spark and on x86_64 machines.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sdpa {

inline uint16_t float_to_fp16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7FFFFFFF;
  if (abs >= 0x7F800000) return sign | (abs > 0x7F800000 ? 0x7E00 : 0x7C00);  // NaN / inf
  if (abs >= 0x477FF000) return sign | 0x7C00;  // rounds past 65504: overflow to inf
  if (abs < 0x33000001) return sign;            // below half the smallest subnormal: zero
  const int exp = static_cast<int>(abs >> 23);
  uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
  int shift;
  uint32_t base;
  if (exp < 113) {  // result is subnormal in fp16
    shift = 126 - exp;  // 13 + (113 - exp)
    base = 0;
  } else {
    shift = 13;
    base = static_cast<uint32_t>(exp - 112) << 10;
    mant &= 0x7FFFFF;
  }
  const uint32_t half_mant = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  uint32_t result = base + half_mant;
  if (rest > halfway || (rest == halfway && (half_mant & 1))) ++result;  // carries into exp are right
  return static_cast<uint16_t>(sign | result);
}

inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  const uint32_t u = exp == 0x1F ? sign | 0x7F800000 | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace sdpa
